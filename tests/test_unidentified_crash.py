"""A lone fragment whose process died of its own error, with nothing in it
that says which rank, host or pid printed it (a pasted traceback): the
crash is the verdict, its process named by the file that holds it. Where
artifacts identify processes, an unidentified crash line blames nobody."""

from conftest import schema_problems
from forensics import analyze
from forensics.report import json_report

WORKER_KILLED = (
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data\n'
    "    data = self._data_queue.get(timeout=timeout)\n"
    "RuntimeError: DataLoader worker (pid 40211) is killed by signal: Bus error. \n"
    "\n"
    "The above exception was the direct cause of the following exception:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/job/train.py", line 88, in <module>\n'
    "    for batch in loader:\n"
    "RuntimeError: DataLoader worker (pid(s) 40211) exited unexpectedly\n")

EXIT_CODE = "RuntimeError: DataLoader worker (pid 5120) exited unexpectedly with exit code 1. Details are lost " \
            "due to multiprocessing. Rerunning with num_workers=0 may give better error trace.\n"


def _run(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return analyze(str(tmp_path), jobs=1)


def _crashes(report):
    return [f for f in report.findings if f.rule == "stated-crash"]


def test_a_pasted_traceback_of_a_dead_worker_is_a_dead_process(tmp_path):
    report = _run(tmp_path, {"paste.txt": WORKER_KILLED})
    assert report.verdict == "dead_rank" and report.culprit_ranks == []
    (crash,) = _crashes(report)
    assert "the process that printed paste.txt died of its own error" in crash.message
    assert [e.line for e in crash.evidence] == [4, 11]
    # Nothing identifies the process: no culprit entry at all, never an empty one.
    assert crash.culprits == () and schema_problems(json_report.to_dict(report, "en")) == []


def test_the_exit_code_form_is_read_too(tmp_path):
    report = _run(tmp_path, {"stderr.log": EXIT_CODE})
    assert report.verdict == "dead_rank" and len(_crashes(report)) == 1


def test_an_unidentified_crash_line_blames_nobody_where_processes_are_known(tmp_path):
    # Rank 1's stderr says it is rank 1; the merged paste beside it identifies nobody.
    rank1 = ("[rank1]:[E1127 03:12:44.318204551 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective "
             "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) "
             "ran for 600040 milliseconds before timing out.\n")
    report = _run(tmp_path, {"rank1.log": rank1, "paste.txt": WORKER_KILLED})
    assert not any("paste.txt" in f.message for f in _crashes(report))
