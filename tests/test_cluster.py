"""`forensics analyze --scheduler`: parsing on a real Dask cluster
(distributed.LocalCluster: a scheduler and two worker processes over TCP
on 127.0.0.1) gives, for every corpus incident, the JSON report a local
run gives."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from contextlib import redirect_stdout

import pytest

from forensics import cli

distributed = pytest.importorskip("distributed", reason="Dask's distributed is not installed: "
                                  "pip install '.[dask]' (.ci/run installs it)")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CORPUS = os.path.join(ROOT, "corpus")
INCIDENTS = sorted(d for d in os.listdir(CORPUS) if os.path.isfile(os.path.join(CORPUS, d, "expected.yaml")))


@pytest.fixture(scope="module")
def scheduler():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None, silence_logs=40)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def _json(*args) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(["analyze", *args, "-f", "json", "-q", "--jobs", "1"])
    return code, out.getvalue()


def test_every_corpus_incident_gives_the_local_report_on_a_cluster(scheduler):
    differ = []
    for incident in INCIDENTS:
        folder = os.path.join(CORPUS, incident)
        local = _json(folder)
        remote = _json(folder, "--scheduler", scheduler)
        if local != remote:
            differ.append(incident)
    assert not differ, differ
    assert len(INCIDENTS) > 90


def test_the_scheduler_comes_from_the_environment_too(scheduler, tmp_path):
    folder = os.path.join(CORPUS, "real_p2p_cycle_2")
    env = {**os.environ, "DASK_SCHEDULER_ADDRESS": scheduler}
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", folder, "-f", "json"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]
    # the workers did the reading: the scheduler logged tasks of ours
    client = distributed.Client(scheduler, timeout="10s")
    try:
        seen = client.run_on_scheduler(lambda dask_scheduler: [str(k) for k in dask_scheduler.task_prefixes])
    finally:
        client.close()
    assert any("forensics-parse" in name for name in seen), seen


def test_facts_files_on_the_cluster_open_up_as_they_do_locally(scheduler, tmp_path):
    facts = tmp_path / "node.facts"
    assert cli.main(["parse", os.path.join(CORPUS, "real_pp_dp_cross_group_cycle"), "--out", str(facts), "-q",
                     "--prefix", "", "--jobs", "1"]) == 0
    assert _json(str(facts), "--scheduler", scheduler) == _json(os.path.join(CORPUS, "real_pp_dp_cross_group_cycle"))


def test_an_unreachable_scheduler_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", os.path.join(CORPUS, "real_p2p_cycle_2"),
                           "--scheduler", f"tcp://127.0.0.1:{port}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "cannot reach the Dask scheduler" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_batches_hold_a_tenth_of_a_second_of_work_or_more(tmp_path):
    """Many small files travel together; one big file is a task of its own."""
    from forensics.ingest import cluster

    files = []
    for i in range(600):
        path = tmp_path / f"rank{i}.log"
        path.write_bytes(b"x" * 1000)
        files.append((str(path), path.name))
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * (cluster.TASK_BYTES + 1))
    files.insert(10, (str(big), "big.log"))
    batches = cluster._batches(files)
    assert [len(b) for b in batches] == [11, 256, 256, 78]
    assert sorted(i for b in batches for i in b) == list(range(len(files)))


def test_files_whose_task_did_not_finish_by_the_deadline_are_listed_as_not_read(scheduler):
    """The run's --timeout bounds the wait for the workers: what had not come
    back is an error per file naming the limit, never an exception."""
    import time

    from forensics import limits
    from forensics.ingest import read_artifacts
    from forensics.plugins import Plugins

    past = limits.Limits(timeout=0.001, started=time.monotonic() - 10)
    with limits.applied(past):
        artifacts, _, results = read_artifacts([os.path.join(CORPUS, "real_p2p_cycle_2")], Plugins(autoload=False),
                                               scheduler=scheduler)
    assert artifacts and len(results) == len(artifacts)
    assert all(isinstance(r, tuple) and "not read within the --timeout of 0.001 s" in r[2] for r in results), results[:2]
