"""`forensics watch` with the in-job agent (forensics.agent, started as
`torchrun -m forensics.agent train.py`) on real Gloo jobs on 127.0.0.1, for
both coordinators: the job's own TCPStore (torchrun's) and a redis-server
the test starts. A P2P cycle and a cycle across process groups are reported
as soon as the waits are published, a missing rank once nothing changed for
--stuck-after, and a healthy job with a straggler raises no alarm. The agent
records every kind of call it wraps (async work waited on included)
without changing what the calls do. Bad situations: a store that is not up
yet, goes away and comes back, garbage in a rank's key, a second job on the
same Redis: a clear message, no crash, no false alarm."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from test_collect import _port, job_factory  # noqa: F401 - job_factory is a fixture

from forensics.live import watch as live
from forensics.live.stores import BUCKETS, parse_store

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "jobs"
sys.path.insert(0, str(ROOT / "benchmarks"))

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="needs torch (pip install torch==2.13.0): .ci/run installs it")
BACKENDS = ("tcpstore", "redis")


@pytest.fixture
def redis_server(tmp_path):
    """A real redis-server (Debian's package) on a free port, ended by pid;
    `restart()` stops it and starts it again on the same port, empty."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    try:
        import redis
    except ImportError:
        pytest.skip("the redis client is not installed (pip install 'forensics[redis]'; .ci/run does)")
    port = _port()
    folder = tmp_path / "redis"
    folder.mkdir()

    def start():
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(folder)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=port)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                client.ping()
                return proc
            except redis.ConnectionError:
                time.sleep(0.1)
        raise AssertionError("redis-server did not start")

    def stop():
        server["proc"].send_signal(signal.SIGTERM)
        server["proc"].wait(20)

    def restart(down_for=0.0):
        stop()
        time.sleep(down_for)
        server["proc"] = start()

    server = {"port": port, "proc": start(), "restart": restart, "stop": stop, "client": redis.Redis(port=port)}
    yield server
    if server["proc"].poll() is None:
        stop()


class Watcher:
    """`forensics watch` in a subprocess, as a user runs it."""

    def __init__(self, tmp_path, url, world, *extra):
        self.out = tmp_path / "watch"
        self.proc = subprocess.Popen([sys.executable, "-m", "forensics", "watch", "--store", url, "--world-size",
                                      str(world), "--out", str(self.out), "-f", "json", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self, timeout):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"the watcher did not finish in {timeout} s: {err[-3000:]}") from None
        return self.proc.returncode, out, err

    def verdict(self, n=1):
        return json.loads((self.out / f"hang-{n}" / "verdict.json").read_text())


def _start(backend, job_factory, tmp_path, scenario, nproc, *extra, watch_args=(), first=False):
    """The job with the agent and a watcher on `backend`: the job's own
    TCPStore, or Redis under a prefix of this job's. With `first` the
    watcher starts before the job's store exists."""
    kind, redis_server = backend
    if kind == "redis":
        url = f"redis://127.0.0.1:{redis_server['port']}/job-{_port()}"
        watcher = Watcher(tmp_path, url, nproc, *watch_args)
        return job_factory(scenario, nproc, *extra, store=url), watcher
    port = _port()
    if first:
        watcher = Watcher(tmp_path, f"tcpstore://127.0.0.1:{port}", nproc, *watch_args)
        time.sleep(4)  # past its first attempt (2 s)
        return job_factory(scenario, nproc, *extra, agent=[], port=port), watcher
    job = job_factory(scenario, nproc, *extra, agent=[], port=port)
    return job, Watcher(tmp_path, f"tcpstore://127.0.0.1:{port}", nproc, *watch_args)


def _worker_pids(job, nproc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        ranks = job.ranks()
        if len(ranks) == nproc:
            return ranks
        time.sleep(0.5)
    raise AssertionError(f"the job's {nproc} ranks did not show up")


@pytest.fixture(params=BACKENDS)
def backend(request):
    """(kind, the redis_server fixture or None)."""
    return request.param, request.getfixturevalue("redis_server") if request.param == "redis" else None


@needs_torch
def test_a_p2p_cycle_is_reported_at_once_with_its_root_cause_and_the_hook(backend, job_factory, tmp_path):
    hook_env = tmp_path / "hook.env"
    job, watcher = _start(backend, job_factory, tmp_path, "p2p_cycle_2", 2,
                          watch_args=("--on-hang", f"env | grep ^FORENSICS_ | sort > {hook_env}"))
    code, out, err = watcher.finish(150)
    assert code == 1, err
    report = json.loads(out)
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1], report["verdict"]
    verdict = watcher.verdict()
    assert verdict["judged_stuck"] is False  # a cycle needs no waiting for --stuck-after
    assert verdict["root_cause_rank"] in (0, 1) and f"root-cause rank {verdict['root_cause_rank']}" in err
    assert 0 < verdict["latency_ms"] < 30_000, verdict  # long before any timeout (PyTorch's: 600 s here)
    assert {(p["rank"], p["pid"]) for p in verdict["culprit_processes"]} == set(_worker_pids(job, 2).items())
    for name in ("report.json", "report.html", "snapshots/snapshot.json"):
        assert (watcher.out / "hang-1" / name).stat().st_size > 0, name
    env = dict(line.split("=", 1) for line in hook_env.read_text().splitlines())
    assert env["FORENSICS_VERDICT"] == "deadlock" and env["FORENSICS_CULPRITS"] == "0,1"
    assert env["FORENSICS_ROOT_RANK"] == str(verdict["root_cause_rank"])
    assert env["FORENSICS_ROOT_PID"] == str(_worker_pids(job, 2)[verdict["root_cause_rank"]])
    assert json.loads(Path(env["FORENSICS_REPORT_JSON"]).read_text())["verdict"] == "deadlock"


@needs_torch
def test_a_cycle_across_process_groups_is_reported_at_once(backend, job_factory, tmp_path):
    """pp_dp_cross_group: 0 sends to 2 (pp_replica0), 2 all_reduces dp_stage1
    waiting for 3, 3 receives from 1 (pp_replica1), 1 all_reduces dp_stage0
    waiting for 0: no two ranks of the cycle share the group they wait in."""
    job, watcher = _start(backend, job_factory, tmp_path, "pp_dp_cross_group", 4)
    code, out, err = watcher.finish(200)
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "deadlock", (report["verdict"], err[-2000:])
    assert report["culprit_ranks"] == [0, 1, 2, 3] and report["cycles"] == [[0, 2, 3, 1, 0]], report["cycles"]
    assert watcher.verdict()["judged_stuck"] is False
    groups = {g for r in report["ranks"].values() for g in [r["group"]]}
    assert len(groups) == 4, groups  # the four groups the cycle runs through, each named by its own id
    # the verdict's folder analyzed whole, snapshot and stack dumps read together: the same verdict and culprits
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(watcher.out / "hang-1"), "-f", "json"],
                          capture_output=True, text=True, timeout=120)
    again = json.loads(proc.stdout)
    assert proc.returncode == 1 and {r["kind"] for r in again["read"]} >= {"snapshot", "py-spy"}, proc.stderr
    assert (again["verdict"], again["culprit_ranks"]) == ("deadlock", [0, 1, 2, 3]), again["cycles"]
    # a dump of the call a snapshot places keeps the snapshot's group, seq and peers: the same cycle and groups
    assert again["cycles"] == report["cycles"], again["cycles"]
    assert {r: (v["group"], v["seq"]) for r, v in again["ranks"].items()} == \
        {r: (v["group"], v["seq"]) for r, v in report["ranks"].items()}


@needs_torch
def test_a_missing_rank_is_reported_after_stuck_after(backend, job_factory, tmp_path):
    job, watcher = _start(backend, job_factory, tmp_path, "missing_rank_dataloader", 4,
                          watch_args=("--stuck-after", "5s"), first=backend[0] == "tcpstore")
    code, out, err = watcher.finish(200)
    report = json.loads(out)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [2], (report["verdict"], err[-2000:])
    verdict = watcher.verdict()
    assert verdict["judged_stuck"] is True and verdict["root_cause_rank"] == 2
    # decided as forensics collect decides a window: ranks 0, 1, 3 kept their place in all_reduce past 5 s,
    # and rank 2's main thread, dumped halfway and at the end, sat waiting for its loader
    [stuck] = [s for s in report["decided_by"] if s["kind"] == "no_progress"]
    assert re.match(r"rank 2 stayed idle in load_next_batch \(train.py:\d+\) for [\d.]+ s while 0, 1, 3 waited in "
                    r"all_reduce \(", stuck["detail"]), stuck
    assert "stuck after 5 s: --stuck-after" in stuck["detail"]
    if backend[0] == "tcpstore":  # the watcher started before torchrun's store: it said it waits, then found it
        assert "waiting for tcpstore://" in err and "answers" in err, err[-2000:]


@needs_torch
def test_a_healthy_job_with_a_straggler_raises_no_alarm(backend, job_factory, tmp_path):
    """Rank 1 is slower every step, so rank 0 waits in each all_reduce past the
    agent's threshold: states are published and judged all the time, and
    none is a hang."""
    job, watcher = _start(backend, job_factory, tmp_path, "sigkill_one_rank", 2,
                          "--extra-steps", "100000", "--step-time", "0.02", "--stall-rank", "1",
                          "--slow-rank-step-time", "0.3", watch_args=("--stuck-after", "5", "--timeout", "40"))
    code, out, err = watcher.finish(90)
    assert code == 0 and out == "" and not list(watcher.out.glob("hang-*")), (out, err[-2000:])
    judged = json.loads((watcher.out / "current" / "snapshot.json").read_text())
    # the wait for the straggler (its gradient all_reduce, or every 4th step the weights' broadcast) was
    # published and judged healthy
    assert judged["ranks"]["0"]["current_op"] in ("all_reduce", "broadcast"), judged
    assert job.proc.poll() is None


@needs_torch
def test_a_frozen_rank_is_reported_after_stuck_after(backend, job_factory, tmp_path):
    """Rank 1 of a healthy training loop freezes (SIGSTOP, as a host stuck in
    a driver call would: its agent's publisher freezes with it), so rank 0
    waits in the next gradient all_reduce for a rank that says nothing.
    Nothing is a cycle, so the watcher waits --stuck-after and names rank 1,
    the one that made the least progress. The test thaws and ends it."""
    job, watcher = _start(backend, job_factory, tmp_path, "sigkill_one_rank", 2,
                          "--extra-steps", "100000", "--step-time", "0.02", "--stall-rank", "1",
                          watch_args=("--stuck-after", "5s"))
    pids = job.wait_for("step 20:")
    os.kill(pids[1], signal.SIGSTOP)
    frozen_at = time.time()
    try:
        code, out, err = watcher.finish(120)
    finally:
        os.kill(pids[1], signal.SIGCONT)
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "missing_rank", (report["verdict"], err[-2000:])
    assert report["culprit_ranks"] == [1], report["culprit_ranks"]
    verdict = watcher.verdict()
    assert verdict["judged_stuck"] is True and verdict["root_cause_rank"] == 1, verdict
    assert verdict["detected_at"] - frozen_at >= 5, verdict  # not before --stuck-after


@needs_torch
def test_install_watch_runs_the_watcher_in_rank_0_without_disturbing_the_job(job_factory, tmp_path):
    hook_env = tmp_path / "hook.env"
    job = job_factory("p2p_cycle_2", 2, agent=["--watch"],
                      env={"FORENSICS_WATCH_OUT": str(tmp_path / "watch"),
                           "FORENSICS_ON_HANG": f"env | grep ^FORENSICS_ | sort > {hook_env}"})
    verdict_file = tmp_path / "watch" / "hang-1" / "verdict.json"
    deadline = time.time() + 150
    while time.time() < deadline and not hook_env.exists():
        assert job.proc.poll() is None, (job.dir / "console.log").read_text()[-3000:]
        time.sleep(0.5)
    verdict = json.loads(verdict_file.read_text())
    assert verdict["verdict"] == "deadlock" and verdict["culprit_ranks"] == [0, 1]
    assert "FORENSICS_CULPRITS=0,1" in hook_env.read_text()
    console = "".join(p.read_text() for p in (job.dir / "logs").rglob("stderr.log"))
    assert "forensics watch (rank 0): deadlock" in console, console[-3000:]
    time.sleep(2)
    assert job.proc.poll() is None and len(job.ranks()) == 2  # the job goes on (hung, as it would be)
    assert not (tmp_path / "watch" / "hang-2").exists()  # the same verdict is not reported twice


@needs_torch
def test_the_agent_records_every_kind_of_call_and_changes_no_result(job_factory, tmp_path):
    calls = tmp_path / "calls.json"
    job = job_factory("", 2, "--out", str(calls), agent=[], script=str(JOBS / "comm_patterns.py"))
    code = job.proc.wait(150)
    assert code == 0, (job.dir / "console.log").read_text()[-3000:]
    seen = json.loads(calls.read_text())
    got = [(c["current_op"], c["group_desc"], c["op_seq"], c["peers"], c["async"], bool(c["any_source"]),
            c["site"].split(" ")[0]) for c in seen["calls"]]
    world = "default_pg"
    assert got == [
        ("all_reduce", world, 1, None, False, False, "sync_gradients"),
        ("all_reduce", world, 2, None, True, False, "sync_gradients_overlapped"),  # Work.wait on async_op=True
        ("broadcast", world, 3, None, False, False, "broadcast_parameters"),
        ("all_gather_into_tensor", world, 4, None, False, False, "gather_shards"),
        ("all_reduce", world, 5, None, False, False, "reduce_shards"),  # all_reduce_coalesced
        ("all_to_all_single", world, 6, None, False, False, "exchange_experts"),
        ("monitored_barrier", world, 7, None, False, False, "end_of_epoch_sync"),
        ("send", world, 7, [1], False, False, "pipeline_send"),
        ("recv", world, 7, [1], False, False, "pipeline_recv"),
        ("send", world, 7, [1], True, False, "pipeline_isend"),
        ("recv", world, 7, [1], True, False, "pipeline_irecv"),
        ("recv", world, 7, [1], True, False, "pipeline_batch"),  # batch_isend_irecv's works, waited on
        ("recv", world, 7, None, False, True, "receive_from_any"),
        ("all_reduce", "pairs", 1, None, False, False, "sync_pair_group"),
        ("all_reduce", world, 8, None, False, False, "sync_world_explicitly"),  # group=WORLD counts with None
        ("gather", world, 9, None, False, False, "collect_metrics"),
    ], got
    assert seen["results"] == {
        "all_reduce": [3.0] * 8, "broadcast": [1.0] * 4, "all_gather_into_tensor": [0.0, 0.0, 1.0, 1.0],
        "all_reduce_coalesced": [[2.0, 2.0], [2.0, 2.0, 2.0]], "all_to_all_single": [0.0, 10.0],
        "batch_isend_irecv": 1.0, "gather": [[0.0], [1.0]]}


@needs_torch
def test_redis_restarting_mid_watch_is_said_and_a_later_hang_still_found(job_factory, tmp_path, redis_server):
    """Redis goes away during the job's warm-up and comes back empty; the
    agents keep training, republish when their state changes, and the P2P
    cycle that follows is found through the new server. Nothing before it
    is taken for a hang."""
    url = f"redis://127.0.0.1:{redis_server['port']}/job-a"
    watcher = Watcher(tmp_path, url, 2, "--stuck-after", "3")
    job = job_factory("p2p_cycle_2", 2, "--warmup-steps", "40", "--step-time", "0.25", store=url)
    job.wait_for("step 3:", timeout=120)
    redis_server["restart"](down_for=3)
    code, out, err = watcher.finish(200)
    assert code == 1 and json.loads(out)["culprit_ranks"] == [0, 1], err[-3000:]
    assert "does not answer" in err and "answers again" in err, err[-3000:]
    assert "step 10:" in "".join(p.read_text() for p in (job.dir / "logs").rglob("stdout.log"))  # trained on
    assert not (watcher.out / "hang-2").exists()


def _publish(url, rank, value):
    """Publish as an agent would, riding out a Redis that just restarted."""
    from forensics.live.stores import StoreDown, open_store

    for _ in range(20):
        try:
            return open_store(url).publish(rank, value, True)
        except StoreDown:
            time.sleep(0.25)
    raise AssertionError(f"{url} does not answer")


def test_garbage_another_job_and_a_restarted_redis_raise_no_alarm_and_no_crash(tmp_path, redis_server):
    """Rank 1 of job-a publishes garbage; job-b, on the same Redis, is in a
    cycle of its own; Redis restarts in the middle. Watching job-a sees
    neither a crash nor a hang, and says what it ignored; watching job-b
    finds its cycle."""
    a, b = (f"redis://127.0.0.1:{redis_server['port']}/job-{x}" for x in "ab")

    def job_b_in_a_cycle():
        for rank in (0, 1):
            _publish(b, rank, json.dumps({"current_op": "send", "peers": [1 - rank], "group": "0"}))

    _publish(a, 0, json.dumps({"current_op": "all_reduce", "group": "0", "op_seq": 5, "group_ranks": [0, 1]}))
    _publish(a, 1, b"\xff{not json")
    job_b_in_a_cycle()
    said = []
    restarter = threading.Timer(3, redis_server["restart"], kwargs={"down_for": 3})
    restarter.start()
    assert live.watch(live.WatchOptions(a, 2, str(tmp_path / "a"), stuck_after=3600, timeout=12,
                                        echo=said.append)) == []
    restarter.join()
    assert any("rank 1 published something that is not a state (not JSON)" in line for line in said), said
    assert any("does not answer" in line for line in said) and any("answers again" in line for line in said), said
    _publish(a, 0, json.dumps({"current_op": "all_reduce", "group": "0", "op_seq": 5}))
    _publish(a, 1, json.dumps({"current_op": 42}))
    job_b_in_a_cycle()  # the restarted Redis is empty
    assert live.watch(live.WatchOptions(a, 2, str(tmp_path / "c"), stuck_after=3600, timeout=2,
                                        echo=said.append)) == []
    assert any("rank 1 published something that is not a state (no current_op)" in line for line in said), said
    found = live.watch(live.WatchOptions(b, 2, str(tmp_path / "b"), timeout=20))
    assert [v.report.culprit_ranks for v in found] == [[0, 1]]  # job-b's own cycle, under its own prefix


class StoreHost:
    """A TCPStore served by a process of its own (as torchrun's agent serves
    the job's), on a port that survives `restart()`; ended by pid."""

    def __init__(self):
        self.port = _port()
        self.proc = self.start()

    def start(self):
        proc = subprocess.Popen([sys.executable, "-W", "ignore", "-c",
                                 "import time; from torch.distributed import TCPStore; "
                                 f"s = TCPStore('127.0.0.1', {self.port}, is_master=True, wait_for_workers=False); "
                                 "time.sleep(600)"], stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return proc
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the TCPStore host did not start")

    def stop(self):
        self.proc.kill()
        self.proc.wait()

    def restart(self, down_for):
        self.stop()
        time.sleep(down_for)
        self.proc = self.start()


@needs_torch
def test_a_tcpstore_that_goes_away_and_comes_back_is_said_and_raises_no_alarm(tmp_path):
    """The job's store goes away (its launcher restarted) with a rank blocked
    in it, and comes back empty: the watcher says so, keeps what it knew
    while the store was away, judges nothing stale, and finds the cycle
    published after it came back."""
    host = StoreHost()
    url = f"tcpstore://127.0.0.1:{host.port}"
    try:
        _publish(url, 0, json.dumps({"current_op": "all_reduce", "group": "0", "op_seq": 3, "group_ranks": [0, 1]}))
        said = []
        restarter = threading.Timer(4, host.restart, kwargs={"down_for": 3})
        restarter.start()
        assert live.watch(live.WatchOptions(url, 2, str(tmp_path / "a"), stuck_after=3600, timeout=15,
                                            echo=said.append)) == []
        restarter.join()
        assert any("does not answer" in line for line in said) and any("answers again" in line for line in said)
        assert any("came back without the state of rank 0" in line for line in said), said
        for rank in (0, 1):
            _publish(url, rank, json.dumps({"current_op": "send", "peers": [1 - rank], "group": "0"}))
        found = live.watch(live.WatchOptions(url, 2, str(tmp_path / "b"), timeout=30))
        assert [v.report.culprit_ranks for v in found] == [[0, 1]]
    finally:
        host.stop()


def test_a_rank_that_exited_or_called_another_collective_is_reported_at_once(tmp_path, redis_server):
    """What the agent publishes when a rank's script raised (exited, alive:
    false), and a rank in another collective at the same position: both are
    decided from the states alone, with no --stuck-after."""
    url = f"redis://127.0.0.1:{redis_server['port']}/job-c"
    waiting = {"current_op": "all_reduce", "group": "0", "op_seq": 4, "group_ranks": [0, 1, 2], "done": 3}
    for rank, state in ((0, waiting), (2, waiting),
                        (1, {"current_op": "exited", "alive": False, "exit": "ValueError: shape mismatch"})):
        _publish(url, rank, json.dumps(state))
    found = live.watch(live.WatchOptions(url, 3, str(tmp_path / "dead"), stuck_after=3600, timeout=30))
    assert [(v.report.verdict, v.report.culprit_ranks, v.root_rank) for v in found] == [("dead_rank", [1], 1)]
    assert found[0].summary["root_cause_progress"] == "it exited (ValueError: shape mismatch)"
    _publish(url, 1, json.dumps({**waiting, "current_op": "broadcast"}))
    found = live.watch(live.WatchOptions(url, 3, str(tmp_path / "mismatch"), stuck_after=3600, timeout=30))
    assert [(v.report.verdict, v.report.culprit_ranks) for v in found] == [("collective_mismatch", [1])]


@pytest.mark.parametrize("kind", BACKENDS)
def test_simulated_ranks_from_several_processes_cycle_found_no_false_alarm(kind, tmp_path, request):
    """2,000 ranks published from two processes with the agent's store code
    (benchmarks/sim_ranks.py): a straggler churn, then every rank but two in
    the next all_reduce, then the two in a send cycle. The watcher is quiet
    until the cycle and names exactly its two ranks."""
    world, cycle = 2000, [777, 1500]
    if kind == "redis":
        url = f"redis://127.0.0.1:{request.getfixturevalue('redis_server')['port']}/sim"
        host = None
    else:
        if not HAVE_TORCH:
            pytest.skip("the TCPStore comes with torch (pip install torch==2.13.0)")
        host = StoreHost()
        url = f"tcpstore://127.0.0.1:{host.port}"
    try:
        watcher = Watcher(tmp_path, url, world, "--stuck-after", "600")
        sims = [subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "sim_ranks.py"), "--store", url,
                                  "--world", str(world), "--ranks", f"{lo}:{lo + world // 2}", "--plan",
                                  str(tmp_path / "plan.json"), "--out", str(tmp_path / f"sim{lo}.json")])
                for lo in (0, world // 2)]
        deadline = time.time() + 120
        while not all((tmp_path / f"sim{lo}.json.ready").exists() for lo in (0, world // 2)):
            assert time.time() < deadline and all(p.poll() is None for p in sims), "the simulators did not connect"
            time.sleep(0.1)
        now = time.time() + 5  # the watcher has warmed up by then
        plan = {"hello_at": now, "churn_until": now + 6, "churn_rate": 200, "storm_at": now + 8,
                "inject_at": now + 14, "cycle": cycle, "seq": 100}
        (tmp_path / "plan.tmp").write_text(json.dumps(plan))
        (tmp_path / "plan.tmp").rename(tmp_path / "plan.json")
        assert all(p.wait(120) == 0 for p in sims)
        code, out, err = watcher.finish(60)
    finally:
        if host is not None:
            host.stop()
    report = json.loads(out)
    assert code == 1 and report["verdict"] == "deadlock" and report["culprit_ranks"] == cycle, err[-2000:]
    injected = max(t for lo in (0, world // 2)
                   for t in json.loads((tmp_path / f"sim{lo}.json").read_text())["injected"].values())
    verdict = watcher.verdict()
    assert verdict["detected_at"] > injected and verdict["ranks_with_state"] == world  # nothing before the cycle
    churned = sum(json.loads((tmp_path / f"sim{lo}.json").read_text())["churn_publications"] for lo in (0, world // 2))
    assert churned > 500  # the straggler churn did happen (and raised nothing)


# ---------------------------------------------------------------- no processes

def test_a_state_is_read_defensively():
    ok = live.parse_state(json.dumps({"current_op": "send", "peers": [1, "x", -3, True], "op_seq": "7",
                                      "group_span": [0, 8, 2], "pid": 12, "stack": ["f (a.py:1)", 3],
                                      "alive": "yes", "eval": "__import__('os')"}))
    assert ok == {"current_op": "send", "peers": [1], "group_ranks": range(0, 8, 2), "pid": 12,
                  "stack": ["f (a.py:1)"]}
    for raw, why in ((b"\xff\xfe", "not JSON"), ("[1, 2]", "a JSON list"), ('{"op": "send"}', "no current_op"),
                     ("[" * 100_000, "not JSON"), ("x" * (live.MAX_STATE_BYTES + 1), "bytes, over")):
        with pytest.raises(live.NotAState, match=why):
            live.parse_state(raw)
    huge = live.parse_state(json.dumps({"current_op": "all_reduce", "group_span": [0, 10 ** 12, 1]}))
    assert "group_ranks" not in huge  # a span past any real world size is not believed


def test_the_hook_is_told_plain_values_only(tmp_path):
    report = type("R", (), {"verdict": "deadlock", "culprit_ranks": [0, 1]})()
    verdict = live.Verdict(report, str(tmp_path), 1, time.time(), None)
    env = live.hook_environment(verdict, {0: {"host": "node-a", "pid": 41}, 1: {"host": "x;rm -rf ~", "pid": 42}},
                                "redis://r:1/j")
    assert env["FORENSICS_CULPRIT_PROCESSES"] == "0=node-a:41 1=" and env["FORENSICS_ROOT_PID"] == "42"
    assert "FORENSICS_ROOT_HOST" not in env


def test_the_root_cause_is_the_culprit_with_the_least_progress():
    states = {0: {"current_op": "send", "done": 12, "entered_at": 5.0},
              1: {"current_op": "send", "done": 12, "entered_at": 6.0},
              2: {"current_op": "all_reduce", "done": 11, "entered_at": 1.0}}
    assert live.root_cause_rank([0, 1, 2], states) == 2
    assert live.root_cause_rank([0, 1], states) == 1  # a tie: the one that entered its call last
    assert live.root_cause_rank([0, 3], states) == 3  # published nothing: the least known progress
    assert live.root_cause_rank([0, 1], {**states, 0: {"current_op": "exited", "alive": False}}) == 0
    assert live.root_cause_rank([0, 2], {**states, 0: {"current_op": "compute", "done": 0}}) == 0  # elsewhere


def test_store_urls_and_durations_are_checked(run_cli):
    assert parse_store("redis://10.0.0.5:6379/job-7") == ("redis", "10.0.0.5", 6379, "job-7")
    assert parse_store("tcpstore://node1:29500") == ("tcpstore", "node1", 29500, "forensics")
    assert BUCKETS == 1024
    for url in ("http://x:1", "redis://host", "tcpstore://h:99999"):
        with pytest.raises(ValueError):
            parse_store(url)
    proc = run_cli("watch", "--store", "etcd://h:1", "--world-size", "2")
    assert proc.returncode == 2 and "expected tcpstore://HOST:PORT" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("watch", "--store", "tcpstore://127.0.0.1:1", "--world-size", "2", "--stuck-after", "soon")
    assert proc.returncode == 2 and "not a number of seconds" in proc.stderr


def test_the_publisher_wakes_when_a_call_can_reach_the_threshold_and_no_sooner():
    """The publisher's schedule on the agent's real slots, with a store that
    records what it is sent: no call in progress, sleep a whole threshold;
    a call 20 ms in, sleep the 30 ms it still needs; past the threshold,
    publish it and look again every interval until it ends, then say so."""
    from forensics import agent

    class Store:
        ttl = None

        def __init__(self):
            self.sent = []

        def publish(self, rank, payload, changed):
            self.sent.append(json.loads(payload)["current_op"])

    publisher = agent._Publisher("redis://unused:1/x", 0, threshold_ms=50, interval_ms=10)
    publisher.store = Store()
    publisher.published = ("compute", None, None, None, None)
    slot = agent._new_slot()
    group = agent._Group("0", "default_pg", (0, 1))
    try:
        assert publisher.tick() == pytest.approx(0.050) and publisher.store.sent == []
        before = agent._clock()
        slot.call, slot.group, slot.seq, slot.started = ("all_reduce", False, False), group, 3, before - 20_000_000
        wait = publisher.tick()
        took = (agent._clock() - before) / 1e9
        assert 0.030 - took - 1e-4 <= wait <= 0.030 and publisher.store.sent == []
        slot.started = agent._clock() - 60_000_000
        assert publisher.tick() == 0.010 and publisher.store.sent == ["all_reduce"]
        assert publisher.tick() == 0.010 and publisher.store.sent == ["all_reduce"]  # unchanged: not sent again
        slot.started = 0
        assert publisher.tick() == pytest.approx(0.050) and publisher.store.sent == ["all_reduce", "compute"]
    finally:
        slot.started = 0
        del agent._local.slot


@needs_torch
def test_first_contact_with_a_store_that_starts_late_is_not_an_answer_again(tmp_path):
    """Started before the job's store exists, the watcher says it waits, then
    that the store answers, not that it "answers again": it never did before."""
    host = StoreHost.__new__(StoreHost)
    host.port, host.proc = _port(), None
    url = f"tcpstore://127.0.0.1:{host.port}"
    starter = threading.Timer(2, lambda: setattr(host, "proc", host.start()))
    said = []
    starter.start()
    try:
        assert live.watch(live.WatchOptions(url, 2, str(tmp_path / "w"), stuck_after=3600, timeout=12,
                                            echo=said.append)) == []
    finally:
        starter.join()
        if host.proc is not None:
            host.stop()
    assert said[0].startswith(f"waiting for {url} to answer ("), said
    answered = [line for line in said if "answers" in line]
    assert len(answered) == 1 and answered[0].startswith(f"{url} answers, after "), said
    assert answered[0].endswith(" s of waiting: reading every rank")
    assert not any("again" in line or "does not answer" in line for line in said), said


def test_a_tcpstore_without_torch_is_one_line_naming_what_to_install(tmp_path, run_cli):
    """A watcher on a host without PyTorch: torch made unimportable by a
    package of that name that raises, ahead of the real one on the path."""
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    path = os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])
    out = tmp_path / "watch"
    proc = run_cli("watch", "--store", f"tcpstore://127.0.0.1:{_port()}", "--world-size", "2", "--out", out,
                   env={"PYTHONPATH": path})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("forensics watch: tcpstore:// needs PyTorch's TCPStore, and torch is not "
                                  "installed here: pip install torch")
    assert "redis://" in proc.stderr
    assert not out.exists()  # nothing written before the store could be opened
    # a torch that is there but broken is named as such
    (fake / "__init__.py").write_text('raise ImportError("libtorch_cpu.so: cannot open shared object file")\n')
    proc = run_cli("watch", "--store", f"tcpstore://127.0.0.1:{_port()}", "--world-size", "2", "--out", out,
                   env={"PYTHONPATH": path})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "torch cannot be imported here (ImportError: libtorch_cpu.so: cannot open shared object file)" \
        in proc.stderr


# ---------------------------------------------------------------- the stacks a verdict points at

def _pyspy_cannot_attach() -> str:
    """Why py-spy cannot dump another process of this machine here, or ""."""
    if live.find_pyspy() is None:
        return "py-spy is not installed (pip install py-spy; .ci/run installs it)"
    try:
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    except OSError:
        return ""  # no Yama: the usual same-user (or root) rule
    if scope == "3":
        return "kernel.yama.ptrace_scope is 3: no process may attach to another"
    if scope in ("1", "2") and os.geteuid() != 0:
        return f"kernel.yama.ptrace_scope is {scope}: the watcher is not the job's parent nor root"
    return ""


def _process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@needs_torch
def test_a_verdict_carries_the_stacks_of_the_root_cause_and_of_a_rank_that_waits_for_it(job_factory, tmp_path):
    """missing_rank_dataloader: rank 2's loader thread is stuck, so its main
    thread waits for a batch while 0, 1 and 3 wait in all_reduce. Without
    --on-hang, the verdict's folder gets py-spy dumps of rank 2 (the root
    cause) and of rank 0 (it waits for rank 2), and the reports written
    there show every thread of both, citing the files. The dumps are shown
    beside the judged snapshots, not judged with them: the verdict and each
    rank's call (group, seq) stay what the snapshots say. The ranks keep
    running."""
    reason = _pyspy_cannot_attach()
    if reason:
        pytest.skip(reason)
    job, watcher = _start(("tcpstore", None), job_factory, tmp_path, "missing_rank_dataloader", 4,
                          watch_args=("--stuck-after", "5s"))
    code, out, err = watcher.finish(200)
    printed = json.loads(out)
    assert code == 1 and printed["verdict"] == "missing_rank" and printed["culprit_ranks"] == [2], err[-2000:]
    # the report printed on stdout is the one judged, with the stacks captured for it
    assert [s["rank"] for s in printed["captured_stacks"]] == [2, 0], printed.get("captured_stacks")
    pids = _worker_pids(job, 4)
    verdict = watcher.verdict()
    assert verdict["root_cause_rank"] == 2
    assert verdict["stacks"] == [
        {"rank": 2, "role": "root_cause", "pid": pids[2], "file": "stacks/rank2.pyspy.txt"},
        {"rank": 0, "role": "waiting", "pid": pids[0], "file": "stacks/rank0.pyspy.txt"}], verdict["stacks"]
    folder = watcher.out / "hang-1"
    dumps = {rank: (folder / "stacks" / f"rank{rank}.pyspy.txt").read_text() for rank in (0, 2)}
    for rank, text in dumps.items():
        assert text.startswith(f"Process {pids[rank]}:"), text[:200]  # py-spy's own header: a real dump
    assert "read_shard_record" in dumps[2] and "all_reduce" in dumps[0] and "load_next_batch" not in dumps[0]
    assert f"rank 2's stack: {folder / 'stacks' / 'rank2.pyspy.txt'}" in err, err[-2000:]
    assert sorted(p.name for p in (folder / "snapshots").iterdir()) == ["progress.json", "snapshot.json"]
    written = json.loads((folder / "report.json").read_text())
    assert written["verdict"] == "missing_rank" and written["culprit_ranks"] == [2]
    assert (written["ranks"]["0"]["group"], written["ranks"]["0"]["seq"]) == ("0", 4)  # the snapshot's call
    # who stopped where, from the agents' states: rank 2 published no call since it started (none of its calls
    # took long enough to be published), so it has no place in group 0 at #4: none at all when its agent first
    # published before its first collective, else the count of calls its state carried then, with no call named
    [group] = written["group_progress"]
    rows = [(r["seq"], r["op"], r["state"], r["ranks"]) for r in group["rows"]]
    assert group["group"] == "0" and rows[-1] == (4, "all_reduce", "started", [0, 1, 3]), group
    assert (rows[:-1], group.get("no_record")) == ([], [2]) or (
        [(seq < 4, op, ranks) for seq, op, _, ranks in rows[:-1]] == [(True, None, [2])]
        and not group.get("no_record")), group
    root, waiting = written["captured_stacks"]
    assert (root["rank"], root["role"], root["file"], waiting["rank"], waiting["waits_for"]) == (
        2, "root_cause", "stacks/rank2.pyspy.txt", 0, 2)
    main = next(t for t in root["threads"] if t["tid"] == str(pids[2]))  # py-spy: the main thread's id is the pid
    assert main["frames"][0].startswith("Condition.wait (threading.py:"), main
    assert any(f.startswith("load_next_batch (train.py:") for f in main["frames"]), main
    stuck = [t for t in root["threads"] if t["frames"] and t["frames"][0].startswith(
        "ShardedLoader.read_shard_record (train.py:")]  # the loader thread, where the hang starts
    assert len(stuck) == 1 and stuck[0]["evidence"]["path"] == "stacks/rank2.pyspy.txt", root["threads"]
    line = stuck[0]["evidence"]["line"]
    assert dumps[2].splitlines()[line - 1].startswith(f"Thread {stuck[0]['tid']} "), line  # cites its header
    page = (folder / "report.html").read_text()
    assert '<section id="captured">' in page and "stacks/rank2.pyspy.txt" in page and "read_shard_record" in page
    states = {rank: _process_state(pid) for rank, pid in pids.items()}
    assert not set(states.values()) & {"t", "T"}, states  # nothing left stopped
    assert job.proc.poll() is None


@needs_torch
def test_stacks_that_cannot_be_dumped_are_said_in_the_report(tmp_path):
    """Published states of a cycle whose ranks are real processes: one a
    sleeping Python, one not Python at all. Without py-spy both are said
    not dumped, naming py-spy; with it, the Python one is dumped and the
    other's failure is quoted from py-spy, in the text, JSON and HTML
    reports and in Chinese."""
    reason = _pyspy_cannot_attach()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "waits.py"
    script.write_text("import time\n\n\ndef wait_here():\n    time.sleep(600)\n\n\nwait_here()\n")
    python = subprocess.Popen([sys.executable, str(script)])
    other = subprocess.Popen(["sleep", "600"])
    host = StoreHost()
    url = f"tcpstore://127.0.0.1:{host.port}"
    try:
        for rank, proc in ((0, python), (1, other)):
            _publish(url, rank, json.dumps({"current_op": "send", "peers": [1 - rank], "group": "0",
                                            "pid": proc.pid, "host": socket.gethostname(), "done": 3 - rank}))
        said = []
        absent = live.watch(live.WatchOptions(url, 2, str(tmp_path / "absent"), timeout=30, echo=said.append,
                                              pyspy=str(tmp_path / "no-py-spy")))
        present = live.watch(live.WatchOptions(url, 2, str(tmp_path / "present"), timeout=30))
    finally:
        host.stop()
        for proc in (python, other):
            proc.kill()
            proc.wait()
    assert [(v.report.verdict, v.report.culprit_ranks, v.root_rank) for v in absent + present] == [
        ("deadlock", [0, 1], 1), ("deadlock", [0, 1], 1)]  # rank 1: the fewest collectives done
    from forensics.report import text

    lines = text.render(absent[0].report).splitlines()
    at = lines.index("Stacks dumped when the hang was found (py-spy dump):")
    absent_words = "py-spy is not installed here (neither on PATH nor beside this Python; pip install py-spy)"
    assert lines[at + 1:at + 3] == [
        f"  rank 1 (the root-cause rank), pid {other.pid}: not dumped: {absent_words}",
        f"  rank 0 (waits for rank 1), pid {python.pid}: not dumped: {absent_words}"], lines[at:at + 3]
    assert f"rank 1's stack was not dumped: {absent_words}" in said, said
    written = json.loads((tmp_path / "absent" / "hang-1" / "report.json").read_text())
    assert [(c["rank"], c["file"], c["problem"]["kind"], c["threads"]) for c in written["captured_stacks"]] == [
        (1, None, "no_pyspy", []), (0, None, "no_pyspy", [])]
    zh = text.render(absent[0].report, "zh")
    assert f"Rank 1（根因 Rank），pid {other.pid}: 未抓取：本机没有安装 py-spy" in zh

    summary = present[0].summary["stacks"]
    assert summary[1] == {"rank": 0, "role": "waiting", "pid": python.pid, "file": "stacks/rank0.pyspy.txt"}
    assert (summary[0]["file"], summary[0]["problem"]) == (None, "failed")
    assert summary[0]["problem_text"].startswith(f"py-spy dump --pid {other.pid} exited 1; it said: "), summary[0]
    dumped = (tmp_path / "present" / "hang-1" / "stacks" / "rank0.pyspy.txt").read_text()
    assert dumped.startswith(f"Process {python.pid}:") and "wait_here" in dumped
    lines = text.render(present[0].report).splitlines()
    at = lines.index("Stacks dumped when the hang was found (py-spy dump):")
    assert lines[at + 1] == f"  rank 1 (the root-cause rank), pid {other.pid}: not dumped: {summary[0]['problem_text']}"
    assert lines[at + 2] == f"  rank 0 (waits for rank 1), pid {python.pid}: stacks/rank0.pyspy.txt"
    header = dumped.splitlines().index(next(line for line in dumped.splitlines() if line.startswith("Thread ")))
    assert lines[at + 3].startswith(f"    Thread {python.pid} (") and lines[at + 3].endswith(
        f"  [stacks/rank0.pyspy.txt:{header + 1}]"), lines[at + 3]  # cites the thread's line of the file
    assert [line.strip() for line in lines[at + 4:at + 6]] == ["wait_here (waits.py:5)", "<module> (waits.py:8)"]
    page = (tmp_path / "present" / "hang-1" / "report.html").read_text()
    assert "wait_here (waits.py:5)" in page and "exited 1; it said:" in page
    from forensics.report import markdown

    lines = markdown.render(present[0].report).splitlines()
    at = lines.index(f"- rank 0 (waits for rank 1), pid {python.pid}: stacks/rank0.pyspy.txt")
    assert lines[at + 2] == "```" and lines[at + 4:at + 6] == ["    wait_here (waits.py:5)", "    <module> (waits.py:8)"]


def test_a_stuck_window_is_written_for_the_progress_reader(tmp_path):
    """What the watcher writes when no state changed for --stuck-after: the
    ranks in a call placed by their agents' states (with or without a
    published stack), a rank in no call by the rounds sampled from it, read
    by collect's progress reader into collect's words. CPU time moves
    nothing; output of its own does."""
    from forensics.ingest import progress as reader

    watcher = live.Watcher(live.WatchOptions("redis://unused:1/x", 3, str(tmp_path), stuck_after=4))
    wait = {"current_op": "all_reduce", "group": "0", "op_seq": 7, "group_ranks": [0, 1, 2]}
    states = {0: {**wait, "pid": 10, "stack": ["main (train.py:90)", "all_reduce (torch/distributed/c10d.py:2950)"]},
              1: {"current_op": "compute", "pid": 11},
              2: {**wait, "pid": 12}}  # no stack published: the call is its place

    def spinning(line, ticks, output=50):
        return {"stack": f"dump{line}", "threads": {"11": ticks}, "switches": 30, "output": output,
                "position": {"activity": "computing", "op": "", "why": "", "active": True,
                             "frames": [["main", "train.py", 90], ["decode_batch", "train.py", line]]}}

    def judged(*rounds):
        watcher.changed_wall, watcher.window = 1000.0, [{"time": t, "ranks": {1: r}} for t, r in rounds]
        document = watcher.window_document(states)
        path = tmp_path / "progress.json"
        path.write_text(json.dumps(document, indent=1))
        return document, reader.parse(str(path), "progress.json")

    document, facts = judged((1002.0, spinning(62, 100)), (1004.5, spinning(63, 300)))
    assert document["seconds"] == 4.5 and document["stuck_after_s"] == 4 and document["written_by"] == "forensics watch"
    assert document["ranks"]["1"]["moved"] is False and document["ranks"]["1"]["activity"]["cpu_s"] > 0
    assert [document["ranks"][r]["waiting_in"] for r in ("0", "2")] == ["all_reduce", "all_reduce"]
    assert document["ranks"]["0"]["activity"] == {}  # placed by its agent: no CPU figure it never measured
    [signal] = facts.stuck
    assert signal.detail.startswith("rank 1 kept busy in decode_batch (train.py:63) for 4.5 s while 0, 2 waited "
                                    "in all_reduce ("), signal.detail
    document, facts = judged((1002.0, spinning(62, 100)), (1004.5, spinning(63, 300, output=80)))
    assert document["ranks"]["1"]["moved"] is True  # it wrote output: it moved, and is still the one waited for
    assert facts.stuck[0].detail.startswith("rank 1 kept busy in decode_batch")
    document, facts = judged((1001.0, spinning(62, 100)), (1003.0, spinning(63, 300)))  # 3 s: below 4 s
    assert not facts.stuck and any(d.message.startswith("not a hang yet: rank 0, 2 waited in all_reduce for 3 s")
                                   for d in facts.diagnostics)


def test_a_dump_that_leaves_its_rank_stopped_is_said_loudly(tmp_path):
    """A py-spy that stops the rank and then hangs (a stand-in written here:
    it SIGSTOPs the pid it is given, then sleeps) is ended past the timeout;
    the rank, stopped now and not before, is reported as left stopped, not as
    a mere timeout."""
    from forensics.live.collect import state_of
    from forensics.live.watch import pyspy_dumps

    fake = tmp_path / "py-spy"
    fake.write_text("#!" + sys.executable + "\nimport os, signal, sys, time\n"
                    "if '--help' in sys.argv:\n    print('--nonblocking')\n    sys.exit(0)\n"
                    "os.kill(int(sys.argv[sys.argv.index('--pid') + 1]), signal.SIGSTOP)\ntime.sleep(600)\n")
    fake.chmod(0o755)
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        done = pyspy_dumps(str(fake), [rank.pid], timeout=2)
        assert done[rank.pid][0] == "left_stopped" and done[rank.pid][2] == b"T", done
        assert state_of(rank.pid) == "T"
    finally:
        os.kill(rank.pid, signal.SIGCONT)
        rank.kill()
        rank.wait()
