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
    # Dumps taken seconds apart while the job ran: each rank shows up in
    # different places, which is progress.
    result = run_cli("analyze", SAMPLES / "healthy_then_mismatch_at_exit", "-f", "json")
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["verdict"] == "healthy"
    assert all("moving between dumps" in r["why"] for r in report["ranks"].values())
