"""Two threads issuing collectives on one process group: the real Gloo
abort it causes, and the stack dumps that show the hazard while hung."""

import json

from conftest import CORPUS

ABORT = CORPUS / "real_two_threads_one_group_abort"
HANG = CORPUS / "real_two_threads_one_group_hang"


def lines(path):
    return path.read_text(errors="replace").split("\n")


def test_gloo_size_mismatch_abort_is_a_collective_mismatch_of_both_ranks(run_cli):
    report = json.loads(run_cli("analyze", ABORT, "-f", "json").stdout)
    assert report["verdict"] == "collective_mismatch" and report["culprit_ranks"] == [0, 1]
    (finding,) = [f for f in report["findings"] if f["rule"] == "transport-size-mismatch"]
    assert "65,536-byte message where its collective expected 4 bytes" in finding["message"]
    assert "not a network fault" in finding["message"]
    caught, reset = finding["evidence"][:2]
    assert (caught["path"], reset["path"]) == ("rank1.stderr.log", "rank0.stderr.log")
    for cited in (caught, reset):
        assert lines(ABORT / cited["path"])[cited["line"] - 1] == cited["text"]
    assert "Connection reset by peer" in reset["text"]
    assert not any(f["rule"] in ("network-fault", "dead-rank") for f in report["findings"])


def test_the_crash_stderr_files_are_read(run_cli):
    report = json.loads(run_cli("analyze", ABORT, "-f", "json").stdout)
    read = {r["path"]: r["kind"] for r in report["read"]}
    assert read["rank0.stderr.log"] == read["rank1.stderr.log"] == "torch-log"


def test_two_threads_in_collectives_on_one_group_are_reported(run_cli):
    report = json.loads(run_cli("analyze", HANG, "--hung", "-f", "json").stdout)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [1]
    found = [f for f in report["findings"] if f["rule"] == "concurrent-collectives-one-group"]
    assert [f["ranks"] for f in found] == [[0]]
    message = found[0]["message"]
    assert "Rank 0 has 2 threads inside collectives on group 0" in message
    assert "MainThread in all_reduce" in message and "metrics_reporter in all_reduce" in message
    assert "sync_gradients (train_threads.py:19)" in message and "report_metrics (train_threads.py:14)" in message
    for cited in found[0]["evidence"]:
        assert cited["text"] in lines(HANG / cited["path"])[cited["line"] - 1]
    assert "symptom_of" not in found[0]  # a hazard of its own, not an echo of the missing rank


def test_one_thread_in_a_collective_is_not_reported(run_cli, tmp_path):
    folder = tmp_path / "one_thread"
    folder.mkdir()
    text = (HANG / "rank0.pyspy.txt").read_text()
    # Drop the reporter thread's block: only the training loop is in a collective.
    kept = text[:text.index('Thread 18081 (idle): "metrics_reporter"')]
    (folder / "rank0.pyspy.txt").write_text(kept)
    (folder / "rank1.pyspy.txt").write_text((HANG / "rank1.pyspy.txt").read_text())
    report = json.loads(run_cli("analyze", folder, "--hung", "-f", "json").stdout)
    assert report["verdict"] == "missing_rank"
    assert not any(f["rule"] == "concurrent-collectives-one-group" for f in report["findings"])
