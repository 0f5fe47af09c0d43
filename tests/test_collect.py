"""`forensics collect` on real hung and healthy Gloo jobs this test starts
(torchrun on 127.0.0.1, the corpus capture's train.py): the capture names
the verdict and culprits the corpus gives for the same bug, within 20 s for
4 ranks, and every rank process is alive and not stopped afterwards. Bad
situations (no ranks, a pid that is not a rank, an unwritable folder, a
rank that exits during the capture, a rank py-spy cannot attach to) end in
a clear message and a partial manifest, never a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from forensics.live import collect as live

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TRAIN = os.path.join(ROOT, "corpus", "capture", "train.py")

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
PYSPY = live._pyspy(live.Options(out=""))
HAVE_PYSPY = shutil.which(PYSPY) is not None or os.path.exists(PYSPY)
needs_job = pytest.mark.skipif(not (HAVE_TORCH and HAVE_PYSPY),
                               reason="needs torch (pip install torch==2.13.0) and py-spy (pip install "
                                      "'.[collect]'): .ci/run installs both")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """A torchrun job of train.py in its own session; ended by pid at the end."""

    def __init__(self, tmp, scenario, nproc, *extra, store=None, agent=(), env=None, script=TRAIN, port=None):
        self.dir = tmp / "job"
        self.dir.mkdir()
        name = os.path.basename(script)
        shutil.copy(script, self.dir / name)
        self.port = port or _port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "RANK", "MASTER", "FORENSICS_"))}
        environ.update(JOB_OUTDIR=str(self.dir / "out"), TORCH_FR_BUFFER_SIZE="2000", FR_IDLE_DUMP_S="3600",
                       OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", **(env or {}))
        if store:  # the in-job agent, with no change to the script: torchrun -m forensics.agent train.py
            environ["FORENSICS_STORE"] = store
        # `agent`: the agent's own arguments ([] for none), when it publishes to the job's own store
        use_agent = bool(store) or agent != ()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(self.port), "--log-dir", str(self.dir / "logs"),
               "--redirects", "3", *(["-m", "forensics.agent", *agent] if use_agent else []), str(self.dir / name),
               *(["--scenario", scenario] if scenario else []), *extra]
        self.console = open(self.dir / "console.log", "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.dir, env=environ, stdout=self.console, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.nproc = nproc

    def ranks(self) -> dict[int, int]:
        jobs = live.find_jobs(live.all_procs())
        mine = [ranks for job, ranks in jobs.items() if f":{self.port}" in job]
        return {r.rank: r.proc.pid for r in mine[0]} if mine else {}

    def wait_for(self, marker: str, timeout: float = 120) -> dict[int, int]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, (self.dir / "console.log").read_text()[-3000:]
            outs = list((self.dir / "logs").rglob("stdout.log"))
            if len(outs) == self.nproc and all(marker in p.read_text(errors="replace") for p in outs):
                return self.ranks()
            time.sleep(0.5)
        raise AssertionError(f"job never reached {marker!r}: " + (self.dir / "console.log").read_text()[-3000:])

    def _descendants(self) -> list[int]:
        procs = live.all_procs()
        found, frontier = [], {self.proc.pid}
        while frontier:
            children = [p.pid for p in procs.values() if p.ppid in frontier and p.pid not in found]
            found += children
            frontier = set(children)
        return [pid for pid in found if str(self.dir) in procs[pid].cmdline]

    def end(self):
        """End the agent and every worker of this job (torchrun starts each
        worker in a session of its own: killing the agent's group is not enough)."""
        workers = self._descendants()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(live.state_of(p) not in (None, "Z") for p in workers):
            time.sleep(0.2)
        for pid in workers:
            if live.state_of(pid) not in (None, "Z"):
                os.kill(pid, signal.SIGKILL)
        self.console.close()


@pytest.fixture
def job_factory(tmp_path):
    jobs = []

    def start(scenario, nproc, *extra, **options):
        job = Job(tmp_path, scenario, nproc, *extra, **options)
        jobs.append(job)
        return job
    yield start
    for job in jobs:
        job.end()


def _collect(out, *args, timeout=120):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "forensics", "collect", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - started


def _alive_and_running(pids):
    for pid in pids:
        state = live.state_of(pid)
        assert state is not None, f"pid {pid} is gone"
        assert state not in ("t", "T"), f"pid {pid} left stopped ({state})"


@needs_job
def test_a_p2p_cycle_is_captured_and_diagnosed(job_factory, tmp_path):
    job = job_factory("p2p_cycle_2", 2)
    ranks = job.wait_for("pipeline_stage_exchange")
    time.sleep(2)
    proc, seconds = _collect(tmp_path / "out", "--job", str(job.port), "--analyze", "-f", "json")
    assert proc.returncode == 1, proc.stderr  # 1: a hang was found
    report = json.loads(proc.stdout)
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]
    _alive_and_running(ranks.values())
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {int(r): v["pid"] for r, v in manifest["ranks"].items()} == ranks
    assert all("rank%s.pyspy.txt" % r in v["files"] and "rank%s.stdout.log" % r in v["files"]
               for r, v in manifest["ranks"].items())


def _fr_pipe_env(tmp_path) -> dict:
    """The job serves a Flight Recorder dump pipe the way ProcessGroupNCCL does (train.py)."""
    return {"TORCH_FR_DEBUG_INFO_PIPE_FILE": str(tmp_path / "fr_pipe_"),
            "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr_dump_")}


@needs_job
def test_a_missing_rank_is_stuck_by_snapshots_without_hung(job_factory, tmp_path):
    job = job_factory("missing_rank_dataloader", 4, env=_fr_pipe_env(tmp_path))
    ranks = job.wait_for("warm-up done")
    time.sleep(3)
    proc, seconds = _collect(tmp_path / "one", "--job", str(job.port), "--analyze", "-f", "json")
    single = json.loads(proc.stdout)
    # one round: not known stuck; rank 2's main thread is idle in its loader's queue, so not seen at work either
    assert single["verdict"] == "inconclusive", single["verdict"]
    # ranks 0, 1, 3 keep their place in all_reduce through the rounds: stuck once the window passes --stuck-after
    proc, _ = _collect(tmp_path / "three", "--job", str(job.port), "--snapshots", "3", "--interval", "2",
                       "--stuck-after", "2", "--analyze", "-f", "json")
    report = json.loads(proc.stdout)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [2], report["verdict"]
    assert any(s["kind"] == "no_progress" for s in report["decided_by"]), report["decided_by"]
    _alive_and_running(ranks.values())
    progress = json.loads((tmp_path / "three" / "progress.json").read_text())
    assert progress["rounds"] == 3 and not any(v["moved"] for v in progress["ranks"].values())
    # each round asked every rank for a Flight Recorder dump: no sequence number moved
    assert all(v["flight_recorder_changed"] is False for v in progress["ranks"].values()), progress
    first, last = progress["ranks"]["0"]["flight_recorder"]
    assert first == last and first["record_id"] > 0 and first["groups"], first


@needs_job
def test_a_progressing_job_is_healthy_by_snapshots(job_factory, tmp_path):
    job = job_factory("sigkill_one_rank", 2, "--extra-steps", "100000", "--step-time", "0.2", "--stall-rank", "9",
                      env=_fr_pipe_env(tmp_path))
    ranks = job.wait_for("warm-up done")
    proc, _ = _collect(tmp_path / "out", "--job", str(job.port), "--snapshots", "3", "--interval", "2",
                       "--analyze", "-f", "json")
    report = json.loads(proc.stdout)
    assert report["verdict"] == "healthy", report
    progress = json.loads((tmp_path / "out" / "progress.json").read_text())
    assert all(v["moved"] for v in progress["ranks"].values()), progress
    assert all(v["flight_recorder_changed"] is True for v in progress["ranks"].values()), progress
    first, last = progress["ranks"]["1"]["flight_recorder"]
    assert last["record_id"] > first["record_id"], (first, last)
    _alive_and_running(ranks.values())


@needs_job
def test_a_rank_that_exits_during_the_capture_leaves_a_partial_manifest(job_factory, tmp_path, monkeypatch):
    job = job_factory("p2p_cycle_2", 2)
    ranks = job.wait_for("pipeline_stage_exchange")
    victim = ranks[1]
    real_tool = live._tool

    def tool(cmd, out_path, pid, timeout):
        if pid == victim and "--native" in cmd:
            os.kill(pid, signal.SIGKILL)  # the rank ends under the capture (a process of our own test job)
            deadline = time.time() + 10
            while live.state_of(pid) not in (None, "Z") and time.time() < deadline:
                time.sleep(0.1)
        return real_tool(cmd, out_path, pid, timeout)

    monkeypatch.setattr(live, "_tool", tool)
    manifest = live.collect(live.Options(out=str(tmp_path / "out"), job=str(job.port)))
    errors = manifest["ranks"]["1"]["errors"]
    assert any("native" in e and ("exited during the capture" in e or "exit" in e) for e in errors), errors
    written = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "rank1.pyspy.txt" in written["ranks"]["1"]["files"]


@needs_job
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="runs py-spy as user nobody, which needs root and setpriv (util-linux)")
def test_a_rank_py_spy_cannot_attach_to_is_named_with_the_reason(job_factory, tmp_path):
    """The real py-spy, run as user nobody, is denied ptrace on the job's
    root-owned ranks: the error says why and how to fix it, the rank runs on,
    and the rest of the capture (proc facts, logs, manifest) is kept."""
    job = job_factory("p2p_cycle_2", 2)
    ranks = job.wait_for("pipeline_stage_exchange")
    tools = tempfile.mkdtemp(prefix="forensics-pyspy-")  # readable by nobody, unlike tmp_path
    try:
        os.chmod(tools, 0o755)
        shutil.copy(PYSPY if os.path.exists(PYSPY) else shutil.which(PYSPY), os.path.join(tools, "py-spy"))
        os.chmod(os.path.join(tools, "py-spy"), 0o755)
        wrapper = os.path.join(tools, "py-spy-as-nobody")
        with open(wrapper, "w") as handle:
            handle.write(f"#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups -- "
                         f"{tools}/py-spy \"$@\"\n")
        os.chmod(wrapper, 0o755)
        options = live.Options(out=str(tmp_path / "out"), job=str(job.port), pyspy=wrapper)
        manifest = live.collect(options)
    finally:
        shutil.rmtree(tools)
    for rank in ("0", "1"):
        errors = manifest["ranks"][rank]["errors"]
        assert any("Permission Denied" in e and "ptrace" in e and "SYS_PTRACE" in e for e in errors), errors
        assert f"rank{rank}.proc.json" in manifest["ranks"][rank]["files"], manifest["ranks"][rank]
        assert f"rank{rank}.stdout.log" in manifest["ranks"][rank]["files"], manifest["ranks"][rank]
    assert not (tmp_path / "out" / "rank0.pyspy.txt").exists()  # an empty dump is not left behind
    _alive_and_running(ranks.values())


def test_a_flight_recorder_that_moved_is_progress_even_when_the_stack_looks_the_same(tmp_path):
    """A rank sampled in the same call each round, silent and asleep between
    calls, still progresses when its Flight Recorder's sequence numbers moved."""
    rank = live.Rank(0, live.Proc(4242, 1, "S", 0, "python train.py", {"RANK": "0"}), 0)
    still = {"threads": {}, "stack": "same", "switches": 10, "output": 100}

    def rounds(*positions):
        return [{"time": float(i), "ranks": {0: {**still, "fr": p}}} for i, p in enumerate(positions)]
    at = {"record_id": 7, "state": "started", "groups": {"0": [3, -1]}}
    on = {"record_id": 9, "state": "started", "groups": {"0": [4, -1]}}
    for positions, moved in (((at, at, at), False), ((at, at, on), True), ((at, None, at), False)):
        live._write_progress(str(tmp_path), [rank], rounds(*positions), 1.0)
        entry = json.loads((tmp_path / "progress.json").read_text())["ranks"]["0"]
        assert entry["moved"] is moved and entry["flight_recorder_changed"] is moved, (positions, entry)
    live._write_progress(str(tmp_path), [rank], rounds(None, None), 1.0)  # no dump: not judged by it
    assert json.loads((tmp_path / "progress.json").read_text())["ranks"]["0"]["flight_recorder_changed"] is None


def test_no_ranks_found_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(live, "all_procs", lambda: {})
    with pytest.raises(live.CollectError, match="no rank processes found on this node"):
        live.collect(live.Options(out=str(tmp_path / "out")))
    proc = subprocess.run([sys.executable, "-m", "forensics", "collect", "--out", str(tmp_path / "x"),
                           "--pid", str(os.getpid())], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a rank of a distributed job" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unwritable_folder_is_a_clear_error(tmp_path):
    target = tmp_path / "file"
    target.write_text("not a folder")
    proc = subprocess.run([sys.executable, "-m", "forensics", "collect", "--out", str(target / "sub")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "cannot write there" in proc.stderr and "Traceback" not in proc.stderr


def test_workers_are_not_ranks_and_several_jobs_must_be_chosen():
    """A DataLoader worker inherits its rank's environment; the rank is the
    process whose parent does not carry it."""
    def proc(pid, ppid, rank, port, start):
        return live.Proc(pid, ppid, "S", start, "python train.py",
                         {"RANK": str(rank), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                          "MASTER_PORT": str(port)})
    procs = {p.pid: p for p in (proc(101, 100, 0, 29500, 5), proc(102, 100, 1, 29500, 5),
                                proc(103, 101, 0, 29500, 9),  # rank 0's DataLoader worker
                                proc(201, 200, 0, 29600, 7))}
    jobs = live.find_jobs(procs)
    assert {job: [(r.rank, r.proc.pid) for r in ranks] for job, ranks in jobs.items()} == {
        "master 127.0.0.1:29500": [(0, 101), (1, 102)], "master 127.0.0.1:29600": [(0, 201)]}
    with pytest.raises(live.CollectError, match="2 jobs run on this node"):
        live.choose(jobs, live.Options(out=""))
    assert live.choose(jobs, live.Options(out="", job="29600"))[0] == "master 127.0.0.1:29600"


def test_slurm_fan_out_runs_collect_once_per_node_into_host_folders(tmp_path, monkeypatch):
    """The srun line and what `analyze OUT/` does with the node folders.
    srun here is a stand-in that runs the command once, as the one node of
    this machine would (a Slurm cluster is not started by this test)."""
    from forensics import cli

    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho \"$@\" > \"$FAKE_SRUN_ARGS\"\nshift 4\nexec \"$@\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SRUN_ARGS", str(tmp_path / "srun.args"))
    args = cli.build_parser().parse_args(["collect", "--slurm", "4242", "--out", str(tmp_path / "out"),
                                          "--snapshots", "2", "--locals"])
    cmd = cli.slurm_command(args, str(tmp_path / "out"))
    assert cmd[:5] == ["srun", "--overlap", "--jobid=4242", "--ntasks-per-node=1", "--kill-on-bad-exit=0"]
    assert cmd[cmd.index("--out") + 1] == str(tmp_path / "out") and "--per-host" in cmd and "--locals" in cmd
    proc = subprocess.run([sys.executable, "-m", "forensics", "collect", "--slurm", "4242", "--out",
                           str(tmp_path / "out"), "--job", "no-such-job"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"})
    assert (tmp_path / "srun.args").read_text().startswith("--overlap --jobid=4242 --ntasks-per-node=1")
    # no such job on this node (whatever else runs here): the node's collect says so, and the
    # fan-out reports what it got
    assert proc.returncode == 2 and "srun exited 2" in proc.stderr, proc.stderr
    assert "no rank processes found" in proc.stderr or "'no-such-job' matches 0 of the jobs" in proc.stderr


def _collect_kernel_log(tmp_path, monkeypatch, dmesg: bytes) -> dict:
    """collect's files for one rank that started 8,990 s after boot, with `dmesg` printing `dmesg`."""
    rank = live.Rank(0, live.Proc(7001, 7000, "S", 8990 * os.sysconf("SC_CLK_TCK"), "python train.py",
                                  {"RANK": "0"}), 0)
    monkeypatch.setattr(live.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, dmesg, b""))
    manifest = {"errors": []}
    live._collect_files([rank], str(tmp_path), "node1", manifest)
    return manifest


def test_the_kernel_log_keeps_only_what_came_after_the_job_started(tmp_path, monkeypatch):
    """An OOM kill from before the job is another process's story; its
    report's continuation lines go with it."""
    dmesg = (b"[  100.000001] Out of memory: Killed process 6056 (python) total-vm:35378592kB\n"
             b"               active_file:53 inactive_file:27 isolated_file:0\n"
             b"[ 9000.500000] python[7001]: segfault at 0 ip 0000 sp 0000 error 4 in libc.so.6\n"
             b"               continuation of the new one\n")
    manifest = _collect_kernel_log(tmp_path, monkeypatch, dmesg)
    assert (tmp_path / "dmesg.txt").read_bytes() == dmesg.split(b"\n", 2)[2]
    assert "2 older line(s) left out" in manifest["notes"][0]


def test_a_kernel_that_logged_nothing_since_the_job_started_leaves_no_empty_file(tmp_path, monkeypatch):
    """An empty dmesg.txt would be listed as not read; the manifest says what there was to say."""
    dmesg = b"[  100.000001] Out of memory: Killed process 6056 (python) total-vm:35378592kB\n"
    manifest = _collect_kernel_log(tmp_path, monkeypatch, dmesg)
    assert not (tmp_path / "dmesg.txt").exists()
    assert "dmesg.txt" not in manifest.get("files", [])
    assert any(note.startswith("dmesg: the kernel logged nothing since") for note in manifest["notes"])


@pytest.fixture
def full_disk(tmp_path):
    """A real file system of 24 KiB (tmpfs), so writes fail with ENOSPC."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill up here ({done.stderr.strip()}): needs root")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@needs_job
def test_a_full_disk_ends_in_a_partial_manifest_and_clear_messages(job_factory, full_disk):
    job = job_factory("p2p_cycle_2", 2)
    ranks = job.wait_for("pipeline_stage_exchange")
    proc, _ = _collect(full_disk / "out", "--job", str(job.port))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "No space left on device" in proc.stderr, proc.stderr
    manifest = json.loads((full_disk / "out" / "manifest.json").read_text())
    assert {int(r): v["pid"] for r, v in manifest["ranks"].items()} == ranks
    _alive_and_running(ranks.values())


def test_a_flight_recorder_dump_is_requested_through_the_ranks_pipe(tmp_path):
    """ProcessGroupNCCL reads `<TORCH_FR_DEBUG_INFO_PIPE_FILE><rank>.pipe`
    (a FIFO it creates) and dumps to `<TORCH_FR_DUMP_TEMP_FILE><rank>`.
    Torch's Gloo backend opens no such pipe, so a real FIFO with a reader
    stands in for the job's side here. A pipe nobody reads is reported,
    never waited on."""
    stem = str(tmp_path / "fr_pipe_")
    me = live.read_proc(os.getpid())
    rank = live.Rank(3, live.Proc(os.getpid(), os.getppid(), "S", me.start, "python train.py",
                                  {"RANK": "3", "TORCH_FR_DEBUG_INFO_PIPE_FILE": stem,
                                   "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "dump_")}), 3)
    os.mkfifo(stem + "3.pipe")
    started = time.monotonic()
    assert "No such device or address" in live._request_fr(rank)  # no reader: ENXIO at once
    assert time.monotonic() - started < 1
    reader = os.open(stem + "3.pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert live._request_fr(rank) == f"requested a Flight Recorder dump through {stem}3.pipe"
        assert os.read(reader, 16) == b"1\n"
    finally:
        os.close(reader)
    (tmp_path / "dump_3").write_bytes(b"\x80\x02}q\x00.")
    assert live._fr_files(rank) == [str(tmp_path / "dump_3")]
    os.utime(tmp_path / "dump_3", (1, 1))  # a file left by a run before this process started
    assert live._fr_files(rank) == []


def test_launchers_that_carry_a_rank_variable_are_not_a_job_of_their_own():
    """Under srun the batch shell and torchrun carry SLURM_PROCID=0 but not
    the MASTER_* torchrun gives its workers."""
    shell = live.Proc(10, 1, "S", 1, "bash job.sh", {"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"})
    agent = live.Proc(11, 10, "S", 2, "torchrun train.py", {"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"})
    workers = [live.Proc(12 + r, 11, "S", 3, "python train.py",
                         {"RANK": str(r), "SLURM_PROCID": "0", "SLURM_JOB_ID": "7", "MASTER_ADDR": "127.0.0.1",
                          "MASTER_PORT": "29500"}) for r in range(2)]
    jobs = live.find_jobs({p.pid: p for p in (shell, agent, *workers)})
    assert {job: [(r.rank, r.proc.pid) for r in ranks] for job, ranks in jobs.items()} == {
        "master 127.0.0.1:29500, slurm job 7": [(0, 12), (1, 13)]}


SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "scancel")


@pytest.fixture
def slurm_cluster(tmp_path):
    """A one-node Slurm cluster started from Debian's slurm-wlm and munge,
    with its own munge socket and key, ports and state under tmp_path;
    stopped (by the pids it started) afterwards."""
    missing = [b for b in SLURM_BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge "
                    f"(.ci/run does)")
    if os.geteuid() != 0:
        pytest.skip("the test cluster runs slurmd as root (it starts job steps as their users)")
    base = tmp_path / "slurm"
    for sub in ("state", "spool", "munge"):
        (base / sub).mkdir(parents=True)
    key = base / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    sock = base / "munge" / "munge.sock"
    host = socket.gethostname()
    ctl, node = _port(), _port()
    conf = base / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=forensics", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
        f"StateSaveLocation={base}/state", f"SlurmdSpoolDir={base}/spool",
        f"SlurmctldPidFile={base}/slurmctld.pid", f"SlurmdPidFile={base}/slurmd.pid",
        f"SlurmctldPort={ctl}", f"SlurmdPort={node}",
        f"SlurmctldLogFile={base}/slurmctld.log", f"SlurmdLogFile={base}/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "ReturnToService=2", "MpiDefault=none",
        f"NodeName={host} CPUs={os.cpu_count() or 1} State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started = []
    munged = subprocess.run(["munged", "--force", f"--socket={sock}", f"--key-file={key}",
                             f"--pid-file={base}/munge/munged.pid", f"--log-file={base}/munge/munged.log",
                             f"--seed-file={base}/munge/munged.seed"], capture_output=True, text=True)
    if munged.returncode != 0:
        pytest.skip(f"munged does not start here: {munged.stderr.strip()[:200]}")
    started.append(base / "munge" / "munged.pid")
    for daemon in ("slurmctld", "slurmd"):
        subprocess.run([daemon], env=env, check=True)
        started.append(base / f"{daemon}.pid")
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout
            if state.strip() in ("idle", "mix", "alloc"):
                break
            time.sleep(1)
        else:
            pytest.skip("the test Slurm cluster did not come up: " + (base / "slurmctld.log").read_text()[-500:])
        yield env
    finally:
        # End every job of this cluster (they are the test's), then the
        # daemons, then anything the job steps left (all started here).
        subprocess.run(["scancel", "--full", "--quiet", "--partition=debug"], env=env)
        deadline = time.time() + 30
        while time.time() < deadline and subprocess.run(["squeue", "-h"], env=env, capture_output=True,
                                                        text=True).stdout.strip():
            time.sleep(0.5)
        daemons = []
        for pid_file in started:
            with contextlib.suppress(OSError, ValueError):
                daemons.append(int(pid_file.read_text().split()[0]))
        procs = live.all_procs()
        ours = daemons + [p.pid for p in procs.values() if p.pid not in daemons and _under(procs, p.pid, daemons)]
        for pid in ours:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 10
        while time.time() < deadline and any(live.state_of(p) not in (None, "Z") for p in ours):
            time.sleep(0.2)
        for pid in ours:  # slurmctld may hang saving its state while its script daemon is gone
            if live.state_of(pid) not in (None, "Z"):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def _under(procs, pid, roots) -> bool:
    while pid in procs and pid > 1:
        pid = procs[pid].ppid
        if pid in roots:
            return True
    return False


@needs_job
def test_slurm_fan_out_on_a_real_one_node_cluster(slurm_cluster, tmp_path):
    """A p2p-cycle job submitted with sbatch (torchrun inside it); `collect
    --slurm JOBID` runs collect on the job's node through srun --overlap and
    analyzes the node folders."""
    work = tmp_path / "job"
    work.mkdir()
    shutil.copy(TRAIN, work / "train.py")
    port = _port()
    script = work / "job.sh"
    script.write_text(f"#!/bin/bash\ncd {work}\nexec {sys.executable} -m torch.distributed.run --nnodes 1 "
                      f"--nproc-per-node 2 --master-addr 127.0.0.1 --master-port {port} --log-dir {work}/logs "
                      f"--redirects 3 train.py --scenario p2p_cycle_2\n")
    script.chmod(0o755)
    env = {**slurm_cluster, "FR_IDLE_DUMP_S": "3600", "JOB_OUTDIR": str(work / "out")}
    job = subprocess.run(["sbatch", "--parsable", "-o", str(work / "slurm.out"), str(script)], env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            outs = list((work / "logs").rglob("stdout.log")) if (work / "logs").exists() else []
            if len(outs) == 2 and all("pipeline_stage_exchange" in p.read_text(errors="replace") for p in outs):
                break
            time.sleep(1)
        else:
            raise AssertionError("the Slurm job never hung: " + (work / "slurm.out").read_text()[-2000:])
        proc = subprocess.run([sys.executable, "-m", "forensics", "collect", "--slurm", job, "--out",
                               str(tmp_path / "out"), "--analyze", "-f", "json"], env=env, capture_output=True,
                              text=True, timeout=300)
        report = json.loads(proc.stdout)
        assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1], proc.stderr
        assert f"srun --overlap --jobid={job}" in proc.stderr
        manifest = json.loads((tmp_path / "out" / socket.gethostname() / "manifest.json").read_text())
        assert f"slurm job {job}" in manifest["job"] and sorted(manifest["ranks"]) == ["0", "1"]
    finally:
        subprocess.run(["scancel", job], env=env)
        deadline = time.time() + 30  # torchrun's workers end with the job step
        while time.time() < deadline and live.find_jobs(live.all_procs()).get(f"master 127.0.0.1:{port}, "
                                                                                   f"slurm job {job}"):
            time.sleep(0.5)


@needs_job
@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt-get install gdb)")
def test_gdb_dumps_on_request_and_leaves_every_rank_running(job_factory, tmp_path):
    job = job_factory("p2p_cycle_2", 2)
    ranks = job.wait_for("pipeline_stage_exchange")
    # gdb reads libtorch's symbols before its first backtrace: on a busy machine that takes longer
    # than the default 20 s (docs/collect.md says to raise --tool-timeout for --gdb)
    proc, seconds = _collect(tmp_path / "out", "--job", str(job.port), "--gdb", "--locals", "--tool-timeout", "180",
                             "--analyze", "-f", "json", timeout=600)
    report = json.loads(proc.stdout)
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1], proc.stderr
    for rank in ranks:
        gdb = (tmp_path / "out" / f"rank{rank}.gdb.txt").read_text()
        assert "Thread 1 " in gdb and "#0 " in gdb, proc.stderr
        assert "send" in (tmp_path / "out" / f"rank{rank}.locals.txt").read_text()
    _alive_and_running(ranks.values())


def test_nccl_debug_files_are_found_with_host_and_pid_expanded(tmp_path):
    log = tmp_path / "nccl.node7.4242.log"
    log.write_text("node7:4242:4242 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n")
    rank = live.Rank(0, live.Proc(4242, 1, "S", 0, "python train.py",
                                  {"RANK": "0", "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log")}), 0)
    assert live._nccl_files(rank, "node7") == [str(log)]
    assert live._nccl_files(rank, "node8") == []
