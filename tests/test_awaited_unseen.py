"""Waiting on a rank is progress only while that rank is seen at work.

One snapshot of ranks waiting for a rank that computes is ordinary progress
(`healthy`, at medium confidence). A rank nothing describes, or one that only
torch's Gloo Flight Recorder places (its calls all completed, and it records
no send or recv), is not seen at work: it may be blocked in an unrecorded
call, or gone. Waits that end only at such ranks are `inconclusive`, naming
what would decide them, never `healthy`. Real dumps of corpus captures."""

import shutil

import forensics
from conftest import CORPUS
from forensics.plugins import Plugins

SIGKILL = CORPUS / "real_sigkill_one_rank_gloo_fast_failure"  # rank 2 killed; ranks 0 and 1 dumped after the error
WATCHDOG = CORPUS / "real_watchdog_timeout_missing_rank"  # rank 1 never reached all_reduce #4


def _analyze(folder, hung=False):
    return forensics.analyze(folder, hung=hung, jobs=1, plugins=Plugins(autoload=False))


def _copy(tmp_path, incident, *names):
    folder = tmp_path / "collected"
    folder.mkdir(exist_ok=True)
    for name in names:
        source = incident / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, folder / name)
    return folder


def test_gloo_flight_recorder_dumps_alone_do_not_show_the_awaited_rank_at_work(tmp_path):
    report = _analyze(_copy(tmp_path, WATCHDOG, "fr", "pid_map.json"))
    assert report.incident.ranks[0].is_blocked and report.analysis.sinks == [1]
    assert report.incident.ranks[1].unrecorded  # Gloo's FR: no send/recv
    assert report.verdict == "inconclusive"
    assert report.confidence.level == "low"
    assert report.confidence.reason == "ranks wait for rank 1, which no artifact shows at work"
    assert any(m.startswith("stack dumps of rank 1 ") for m in report.confidence.missing)
    assert report.root_cause.narrative["en"].startswith(
        "Inconclusive: 1 rank(s) wait for rank 1, which no artifact shows at work")
    assert report.root_cause.narrative["zh"].startswith("无法判定：有 1 个 Rank 在等待 Rank 1，但没有任何产物显示它在工作")
    (info,) = [f for f in report.findings if f.rule == "waiting-on-progressing-rank"]
    assert "no artifact shows it at work" in info.message and "normal progress" not in info.message


def test_a_rank_only_the_pid_map_names_is_not_seen_at_work(tmp_path):
    report = _analyze(_copy(tmp_path, SIGKILL, "fr_after_error", "pid_map.json"))
    assert report.analysis.sinks == [2] and 2 in report.incident.ranks
    assert report.verdict == "inconclusive"
    assert "wait for rank 2, which no artifact shows at work" in report.root_cause.narrative["en"]


def test_the_same_wait_on_a_rank_whose_stack_shows_it_computing_is_progress(tmp_path):
    """The boundary: rank 2's own py-spy dump shows it in its training step."""
    folder = _copy(tmp_path, SIGKILL, "fr_after_error", "pid_map.json", "rank2.pyspy.txt")
    report = _analyze(folder)
    assert report.incident.ranks[2].activity == "computing"
    assert report.verdict == "healthy" and report.confidence.level == "medium"
    (info,) = [f for f in report.findings if f.rule == "waiting-on-progressing-rank"]
    assert "normal progress" in info.message
    # Known to be stuck, the rank at work is the one the others wait for.
    hung = _analyze(folder, hung=True)
    assert hung.verdict == "missing_rank" and hung.culprit_ranks == [2]
