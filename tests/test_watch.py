"""`forensics watch` with the in-job agent (forensics.agent, started as
`torchrun -m forensics.agent train.py`) on real Gloo jobs on 127.0.0.1,
coordinated through a TCPStore the watcher serves: a P2P cycle is reported
as soon as both ranks' waits are published, a missing rank once nothing
changed for --stuck-after, and a healthy job raises no alarm."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from test_collect import _port, job_factory, needs_job  # noqa: F401 - job_factory is a fixture


def _watch(tmp_path, port, world, *extra):
    return subprocess.Popen([sys.executable, "-m", "forensics", "watch", "--store", f"tcpstore://127.0.0.1:{port}",
                             "--world-size", str(world), "--out", str(tmp_path / "watch"), "-f", "json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@needs_job
def test_a_p2p_cycle_is_reported_as_soon_as_the_waits_are_published(job_factory, tmp_path):
    port = _port()
    watcher = _watch(tmp_path, port, 2, "--timeout", "120")
    time.sleep(2)  # the watcher serves the store before the ranks connect
    job = job_factory("p2p_cycle_2", 2, store=f"tcpstore://127.0.0.1:{port}")
    out, err = watcher.communicate(timeout=150)
    assert watcher.returncode == 1, err
    report = json.loads(out)
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1], report
    entered = max(p.stat().st_mtime for p in (job.dir / "logs").rglob("stdout.log"))
    assert (tmp_path / "watch" / "snapshot.json").stat().st_mtime - entered < 5


@needs_job
def test_a_missing_rank_is_reported_after_stuck_after(job_factory, tmp_path):
    port = _port()
    watcher = _watch(tmp_path, port, 4, "--stuck-after", "5", "--timeout", "150")
    time.sleep(2)
    job_factory("missing_rank_dataloader", 4, store=f"tcpstore://127.0.0.1:{port}")
    out, err = watcher.communicate(timeout=180)
    report = json.loads(out)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [2], (report["verdict"], err)


@needs_job
def test_a_healthy_job_raises_no_alarm(job_factory, tmp_path):
    port = _port()
    watcher = _watch(tmp_path, port, 2, "--stuck-after", "5", "--timeout", "40")
    time.sleep(2)
    job_factory("sigkill_one_rank", 2, "--extra-steps", "100000", "--step-time", "0.05", "--stall-rank", "9",
                store=f"tcpstore://127.0.0.1:{port}")
    out, err = watcher.communicate(timeout=90)
    assert watcher.returncode == 0 and out == "", (out, err)



@pytest.fixture
def redis_server(tmp_path):
    """A real redis-server (Debian's package) on a free port, ended by pid."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run does)")
    try:
        import redis
    except ImportError:
        pytest.skip("the redis client is not installed (pip install 'forensics[redis]'; .ci/run does)")
    port = _port()

    def start():
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(tmp_path)],
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

    server = {"port": port, "proc": start(), "start": start}
    yield server
    server["proc"].send_signal(signal.SIGTERM)
    server["proc"].wait(20)


@needs_job
def test_a_p2p_cycle_through_redis(job_factory, tmp_path, redis_server):
    url = f"redis://127.0.0.1:{redis_server['port']}/job-a"
    watcher = subprocess.Popen([sys.executable, "-m", "forensics", "watch", "--store", url, "--world-size", "2",
                                "--out", str(tmp_path / "watch"), "-f", "json", "--timeout", "120"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_factory("p2p_cycle_2", 2, store=url)
    out, err = watcher.communicate(timeout=150)
    report = json.loads(out)
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1], err


def test_garbage_another_job_and_a_restarted_redis_raise_no_alarm_and_no_crash(tmp_path, redis_server):
    """Rank 1 of job-a publishes garbage; job-b, on the same Redis, is in a
    cycle of its own; Redis restarts in the middle. Watching job-a sees
    neither a crash nor a hang, and says what it ignored."""
    import redis

    from forensics.live.watch import WatchOptions, watch

    client = redis.Redis(port=redis_server["port"])
    client.set("job-a/rank/0", json.dumps({"current_op": "all_reduce", "group": "0", "op_seq": 5,
                                           "group_ranks": [0, 1]}))
    client.set("job-a/rank/1", b"\xff{not json")
    client.incrby("job-a/changes", 2)
    for rank in (0, 1):  # job-b: a send cycle
        client.set(f"job-b/rank/{rank}", json.dumps({"current_op": "send", "peers": [1 - rank], "group": "0"}))
    client.incrby("job-b/changes", 2)
    said = []
    options = WatchOptions(f"redis://127.0.0.1:{redis_server['port']}/job-a", 2, str(tmp_path / "a"),
                           stuck_after=3600, timeout=10, echo=said.append)
    redis_server["proc"].send_signal(signal.SIGTERM)  # the store goes away ...
    redis_server["proc"].wait(20)

    def restart():
        time.sleep(5)
        redis_server["proc"] = redis_server["start"]()  # ... and comes back (empty: no persistence)
    threading.Thread(target=restart).start()
    assert watch(options) is None
    assert any("does not answer" in line for line in said), said
    b = watch(WatchOptions(f"redis://127.0.0.1:{redis_server['port']}/job-a", 2, str(tmp_path / "b"),
                           stuck_after=3600, timeout=1, echo=said.append))
    assert b is None  # the restarted Redis is empty: nothing to judge, no alarm
    client.set("job-a/rank/0", json.dumps({"current_op": "all_reduce", "group": "0", "op_seq": 5}))
    client.set("job-a/rank/1", json.dumps({"current_op": 42}))
    client.incrby("job-a/changes", 2)
    assert watch(WatchOptions(f"redis://127.0.0.1:{redis_server['port']}/job-a", 2, str(tmp_path / "c"),
                              stuck_after=3600, timeout=1, echo=said.append)) is None
    assert any("rank 1 published something that is not a state" in line for line in said), said
