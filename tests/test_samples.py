"""End to end on third-party real captures in ../shared/samples (read-only)."""

import json

import pytest

from conftest import SAMPLES

pytestmark = pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not present")


def test_p2p_cycle_sample_is_a_deadlock(run_cli):
    # Only rank 0 has a --locals dump (dst=1); rank 1's peer is not in its
    # dumps, so it waits on "any other rank", which still closes the cycle.
    result = run_cli("analyze", SAMPLES / "p2p_cycle_2", "-f", "json")
    report = json.loads(result.stdout)
    assert result.returncode == 1
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]
    assert report["cycles"] == [[0, 1, 0]]
    assert report["ranks"]["0"]["op"] == "send" and report["ranks"]["0"]["peers"] == [1]
    assert "send_activations (train.py:277)" in report["ranks"]["0"]["why"]


def test_healthy_snapshots_stay_healthy_even_with_ranks_waiting(run_cli):
    # Stack dumps taken seconds apart while the job ran: each rank shows up
    # in different places, which is progress.
    dumps = sorted(str(p) for p in (SAMPLES / "healthy_then_mismatch_at_exit").glob("rank*")
                   if p.name.endswith((".pyspy.txt", ".pyspy.json", ".native.txt", ".locals.txt",
                                       ".gdb.txt", ".gdb_pybt.txt")))
    result = run_cli("analyze", *dumps, "-f", "json")
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["verdict"] == "healthy"
    assert all("moving between dumps" in r["why"] for r in report["ranks"].values())


def test_the_logs_of_the_same_job_show_its_later_mismatch(run_cli):
    # Its logs go on past the dumps: when time ran out, rank 2 called the
    # end-of-training barrier (#962) while the others called all_reduce #962.
    result = run_cli("analyze", SAMPLES / "healthy_then_mismatch_at_exit", "-f", "json")
    report = json.loads(result.stdout)
    assert report["verdict"] == "collective_mismatch" and report["culprit_ranks"] == [2]


def test_detail_mode_mismatch_from_logs_alone(run_cli):
    result = run_cli("analyze", SAMPLES / "collective_mismatch_detail", "-f", "json")
    report = json.loads(result.stdout)
    assert result.returncode == 1
    assert report["verdict"] == "collective_mismatch" and report["culprit_ranks"] == [0]
    ops = {r: (v["op"], v["seq"]) for r, v in report["ranks"].items()}
    # The fingerprints say SequenceNumber=3, counted from 0: the 4th collective, #4 as c10d and FR count.
    assert ops == {"0": ("all_reduce", 4), "1": ("broadcast", 4), "2": ("broadcast", 4), "3": ("broadcast", 4)}
