"""Waiting on a rank is progress only while that rank is seen at work.

One snapshot of ranks waiting for a rank that computes is ordinary progress
(`healthy`, at medium confidence). A rank nothing describes, one that only
torch's Gloo Flight Recorder places (its calls all completed, and it records
no send or recv), or one whose stack dump states its main thread idle (not
running), is not seen at work: it may be blocked, or gone. Waits that end
only at such ranks are `inconclusive`, naming what would decide them, never
`healthy`. Real dumps of corpus captures."""

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


def test_a_rank_whose_dump_shows_its_thread_idle_is_not_seen_at_work(tmp_path):
    """Rank 2's own py-spy dump: its main thread in its training step, `(idle)`: not running (it sleeps between
    slow steps until it is killed). Read as computing, yet nothing shows it at work."""
    folder = _copy(tmp_path, SIGKILL, "rank0.pyspy.txt", "rank1.pyspy.txt", "rank2.pyspy.txt", "pid_map.json")
    report = _analyze(folder)
    assert report.incident.ranks[2].activity == "computing" and report.analysis.sinks == [2]
    assert report.verdict == "inconclusive"
    assert report.confidence.missing[0].startswith("a second stack dump of rank 2 a minute later")
    assert "its stack dump shows it idle" in report.root_cause.narrative["en"]
    assert "栈 dump 显示它处于空闲" in report.root_cause.narrative["zh"]
    # Known to be stuck, it is the one the others wait for.
    hung = _analyze(folder, hung=True)
    assert hung.verdict == "missing_rank" and hung.culprit_ranks == [2]


def test_the_same_wait_on_a_rank_whose_thread_runs_is_progress(tmp_path):
    """The boundary: the same dumps, rank 2's thread stated running (`active`): one snapshot of ranks waiting on
    a rank at work is ordinary progress."""
    folder = _copy(tmp_path, SIGKILL, "rank0.pyspy.txt", "rank1.pyspy.txt", "rank2.pyspy.txt", "pid_map.json")
    dump = folder / "rank2.pyspy.txt"
    text = dump.read_text(encoding="utf-8")
    assert text.count('(idle): "MainThread"') == 1
    dump.write_text(text.replace('(idle): "MainThread"', '(active): "MainThread"'), encoding="utf-8")
    report = _analyze(folder)
    assert report.verdict == "healthy" and report.confidence.level == "medium"
    (info,) = [f for f in report.findings if f.rule == "waiting-on-progressing-rank"]
    assert "normal progress" in info.message
    # Flight Recorder dumps of ranks 0 and 1 beside it do not change that.
    shutil.copytree(SIGKILL / "fr_after_error", folder / "fr_after_error")
    assert _analyze(folder).verdict == "healthy"
