"""Parsing in forked workers: the same incident as one process, a worker
that dies costs only its file, and start-up imports only what it needs."""

import json
import os
import signal
import subprocess
import sys

import pytest

import forensics
from forensics.hookspecs import hookimpl
from forensics.ingest import _parse_all, discover, load_incident, workers
from forensics.plugins import Plugins
from forensics.report import formats

from conftest import CORPUS, ROOT as REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gen_fr_dumps  # noqa: E402

pytestmark = pytest.mark.skipif(not workers.available(), reason="no fork on this platform")

FR_DUMPS = CORPUS / "real_collective_mismatch" / "fr"


def _json(report) -> dict:
    data = json.loads(formats(Plugins(autoload=False))["json"].render(report, "en"))
    data.pop("tool", None)
    return data


@pytest.mark.parametrize("incident", ["real_p2p_cycle_2", "real_collective_mismatch", "synthetic_network_fault_nccl"])
def test_workers_give_the_report_one_process_gives(incident, monkeypatch):
    serial = forensics.analyze(CORPUS / incident, hung=True, jobs=1, plugins=Plugins(autoload=False))
    monkeypatch.setattr("forensics.ingest.PARALLEL_MIN", 2)  # these folders are small: force the workers
    parallel = forensics.analyze(CORPUS / incident, hung=True, jobs=2, plugins=Plugins(autoload=False))
    assert _json(parallel) == _json(serial)


def test_tasks_go_out_costliest_first():
    assert workers.order([100, 1, 7, 1, 50, 50, 1]) == [0, 4, 5, 2, 1, 3, 6]


def _run(tasks, costs, work, jobs=2):
    results, died = {}, {}

    def on_result(index, result):
        assert index not in results, f"task {index} answered twice"
        results[index] = result

    def on_died(index, how):
        died[index] = how
        return ("died", how)

    workers.run(tasks, costs, work, jobs, on_result, on_died)
    return results, died


def test_a_slow_task_does_not_hold_back_the_others():
    """Workers pull tasks: while one is on a slow file, the other takes all
    the rest (a fixed share by size gave the slow one some of them too)."""
    import time

    def work(task):
        if task == "slow":
            time.sleep(1.0)
        return os.getpid()

    tasks = ["slow"] + ["quick"] * 12
    results, died = _run(tasks, [100] + [10] * 12, work)
    assert died == {} and sorted(results) == list(range(13))
    slow_pid = results[0]
    assert slow_pid != os.getpid()
    assert [i for i, pid in results.items() if pid == slow_pid] == [0]


def test_tasks_no_worker_took_run_in_the_parent():
    """Both workers die on the first task each takes; the two tasks they
    died on are reported, and the tasks still queued run in the parent."""
    parent = os.getpid()

    def work(task):
        if task == "poison" and os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return os.getpid()

    tasks = ["poison", "poison"] + ["quick"] * 5
    results, died = _run(tasks, [9, 9] + [1] * 5, work)
    assert died == {0: "was killed by SIGKILL", 1: "was killed by SIGKILL"}
    assert {i: results[i] for i in range(2, 7)} == dict.fromkeys(range(2, 7), parent)


def test_more_tasks_than_the_pipe_holds(monkeypatch):
    """Past what the task pipe holds, a thread hands out the rest; every task
    is answered once."""
    monkeypatch.setattr(workers, "_fit", lambda fd, size: None)  # keep the 64 KiB default pipe
    n = 20_000  # 80 KB of task records
    results, died = _run(list(range(n)), [1] * n, lambda task: task * 2)
    assert died == {} and results == {i: 2 * i for i in range(n)}


SHARED = workers.SharedTuple(range(1000))  # forked workers inherit this very object
PLAIN = tuple(range(1000))


def test_a_shared_tuple_reaches_the_parent_once_per_worker():
    import time

    def work(task):
        time.sleep(0.005)  # so that both workers take tasks (not required: one copy per worker that did)
        fresh = workers.SharedTuple(range(task, task + 3))  # a new one in every result
        return os.getpid(), task, SHARED, [SHARED, {"again": SHARED}], PLAIN, fresh, (fresh, fresh)

    parent_pid = os.getpid()
    results, died = _run(list(range(40)), [1] * 40, work)
    assert died == {} and sorted(results) == list(range(40))
    by_worker: dict[int, set] = {}
    for index, (pid, task, shared, nested, plain, fresh, pair) in results.items():
        assert task == index and shared == PLAIN and nested == [PLAIN, {"again": PLAIN}] and plain == PLAIN
        assert fresh == (task, task + 1, task + 2) and pair == (fresh, fresh)
        assert nested[0] is shared and nested[1]["again"] is shared and pair[0] is pair[1] is fresh
        assert type(shared) is workers.SharedTuple and type(plain) is tuple
        by_worker.setdefault(pid, set()).add(id(shared))
    assert 1 <= len(by_worker) <= 2 and parent_pid not in by_worker
    assert all(len(ids) == 1 for ids in by_worker.values())  # one copy per worker, whatever it sent
    assert len(set().union(*by_worker.values())) == len(by_worker)  # and each worker's its own
    # A plain tuple is pickled into each result as before.
    assert len({id(plain) for _, _, _, _, plain, _, _ in results.values()}) == 40
    assert workers._SHARED == {}  # the parent's table goes with the run


def test_flight_recorder_group_members_arrive_once_per_worker(tmp_path):
    """Every dump of a 300-rank group names the same members: the parent gets
    one tuple of them per worker, not one per dump."""
    gen_fr_dumps.write(str(tmp_path), "missing", 300, 4, 1)
    plugins = Plugins(autoload=False)
    artifacts, _ = discover([str(tmp_path)], plugins, False, 2)
    facts = [f for f in _parse_all(artifacts, plugins, 2) if not isinstance(f, tuple)]
    members = [group.ranks for f in facts for group in f.groups if len(group.ranks) == 300]
    assert len(members) == len(facts) == 300 and all(m == tuple(range(300)) for m in members)
    assert len({id(m) for m in members}) <= 2


class KillsItsProcess:
    """A parser that takes every file named `*poison*` and kills the process
    reading it, as a segfault in a C extension or the OOM killer would."""

    @hookimpl
    def forensics_sniff(self, path, head):
        return "poison" if "poison" in os.path.basename(path) else None

    @hookimpl
    def forensics_parse(self, artifact):
        if artifact.kind == "poison":
            os.kill(os.getpid(), signal.SIGKILL)
        return None


def test_a_worker_that_dies_costs_only_its_file(tmp_path, monkeypatch):
    dumps = sorted(FR_DUMPS.iterdir())
    for dump in dumps:
        (tmp_path / dump.name).write_bytes(dump.read_bytes())
    (tmp_path / "0_poison").write_text("anything\n")
    monkeypatch.setattr("forensics.ingest.PARALLEL_MIN", 2)
    plugins = Plugins(autoload=False, extra=(KillsItsProcess(),))
    incident = load_incident([str(tmp_path)], plugins, jobs=2)
    errors = [d for d in incident.diagnostics if d.severity == "error"]
    assert [(d.path, d.message) for d in errors] == [
        ("0_poison", "the worker process parsing this file was killed by SIGKILL: file not read")]
    # Every dump was read, whichever worker took it.
    assert sorted(incident.ranks) == sorted(forensics.analyze(FR_DUMPS, jobs=1, plugins=Plugins(autoload=False))
                                            .incident.ranks)
    assert sorted(read.path for read in incident.read) == [dump.name for dump in dumps]


def test_prepare_runs_once_and_while_parsing(monkeypatch):
    calls = []

    class Counts:
        @hookimpl
        def forensics_prepare(self):
            calls.append("prepare")

    plugins = Plugins(autoload=False, extra=(Counts(),))
    monkeypatch.setattr("forensics.ingest.PARALLEL_MIN", 2)
    order = []
    real_run = workers.run

    def watched(*args, **kwargs):
        order.append("workers forked")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(workers, "run", watched)
    forensics.analyze(FR_DUMPS, jobs=2, plugins=plugins)
    assert calls == ["prepare"] and order == ["workers forked"]
    forensics.analyze(FR_DUMPS, jobs=1, plugins=plugins)
    assert calls == ["prepare"]  # prepared already


def test_flight_recorder_run_imports_neither_lark_nor_yaml_parsers():
    """Start-up decides how soon a Flight Recorder run reaches its workers:
    a folder of dumps needs no grammar and no YAML parser (the shipped YAML
    rules load while the workers parse, in the parent)."""
    probe = (
        "import sys, importlib.util\n"
        "from forensics.plugins import Plugins\n"
        "from forensics.ingest import discover\n"
        "plugins = Plugins(autoload=False)\n"
        f"discover([{str(FR_DUMPS)!r}], plugins)\n"
        "loaded = lambda name: name in sys.modules and not isinstance(sys.modules[name], importlib.util._LazyModule)\n"
        "print([name for name in ('lark', 'yaml', 'networkx', 'rich') if loaded(name)])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_forked_sniffing_finds_what_one_process_finds(monkeypatch):
    """Discovery of many files sniffs in forked workers (chunks of paths);
    with the threshold lowered, a real incident folder is found the same."""
    import forensics.ingest as ingest

    incident = str(CORPUS / "real_collective_mismatch")
    plugins = Plugins(autoload=False)
    alone = ingest.discover([incident], plugins, jobs=1)
    monkeypatch.setattr(ingest, "SNIFF_PARALLEL_MIN", 2)
    monkeypatch.setattr(ingest, "CHUNK", 1)  # chunks of 4 paths: several tasks
    handed = []
    run = workers.run
    monkeypatch.setattr(workers, "run", lambda tasks, *rest: handed.append(len(tasks)) or run(tasks, *rest))
    forked = ingest.discover([incident], plugins, jobs=2)
    assert handed and handed[0] > 1
    assert forked == alone
    assert len(alone[0]) > 8
