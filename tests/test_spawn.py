"""torch.multiprocessing.spawn's own report of the process that ended first
(`ProcessExitedException: process N terminated with signal S` / `with exit
code C`): the process index is read as the rank; a SIGTERM or SIGABRT end is
a knock-on, not a cause. The real capture is corpus/real_spawn_sigkill_one_process."""

import pytest

from forensics import analyze

from conftest import CORPUS

TRACE = ('Traceback (most recent call last):\n'
         '  File "/srv/job/train.py", line 678, in main\n'
         '    mp.spawn(spawned_worker, args=(args.spawn, sys.argv[1:]), nprocs=args.spawn)\n'
         'torch.multiprocessing.spawn.ProcessExitedException: {}\n')


def _run(tmp_path, line):
    (tmp_path / "console.log").write_text(TRACE.format(line), encoding="utf-8")
    return analyze(str(tmp_path), jobs=1)


@pytest.mark.parametrize("line, rank", [("process 2 terminated with signal SIGKILL", 2),
                                        ("process 0 terminated with exit code 1", 0),
                                        ("process 5 terminated with signal SIGSEGV", 5)])
def test_the_process_spawn_names_is_the_dead_rank(tmp_path, line, rank):
    report = _run(tmp_path, line)
    assert report.verdict == "dead_rank" and report.culprit_ranks == [rank]
    (crash,) = [f for f in report.findings if f.rule == "stated-crash"]
    assert crash.evidence[0].line == 4


@pytest.mark.parametrize("line", ["process 1 terminated with signal SIGTERM",
                                  "process 1 terminated with signal SIGABRT"])
def test_a_process_ended_from_outside_or_aborting_is_no_cause(tmp_path, line):
    report = _run(tmp_path, line)
    assert not [f for f in report.findings if f.rule == "stated-crash"]


def test_the_real_capture_names_the_killed_process():
    report = analyze(str(CORPUS / "real_spawn_sigkill_one_process" / "console.log"), jobs=1)
    assert report.verdict == "dead_rank" and report.culprit_ranks == [2]
