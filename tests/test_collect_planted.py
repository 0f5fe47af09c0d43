"""`forensics collect` reads and writes only what is the rank's own.

Flight Recorder dumps, NCCL debug files, the rank's logs and its debug-info
pipe are found by names that anyone on the node can guess or that the job's
owner chose, and collect may run as root. Planted here, as root, beside a
real job of four processes run as another uid: files owned by `nobody`,
files of the rank's uid that others could write, symbolic links to a marker
file, a hard link, a FIFO in a dump's place, and pipes that are a regular
file, a symbolic link or nobody's FIFO. None is copied or written to, each
is named in the manifest and on stderr with its reason, and the rank's own
files and FIFO still work.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import time

import pytest

from forensics.live import collect as live
from test_collect import _collect, _port

RANK_UID = 4321  # the job's user: neither root nor nobody (no passwd entry is needed)
NOBODY = pwd.getpwnam("nobody").pw_uid

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plants files of other users and runs the job as "
                                                           "another uid: needs root (.ci/run runs as root)")


def _plant(path, data: bytes, uid: int, mode: int = 0o644):
    path.write_bytes(data)
    os.chown(path, uid, uid)
    os.chmod(path, mode)
    return path


def _fifo(path, uid: int):
    os.mkfifo(path)
    os.chown(path, uid, uid)
    os.chmod(path, 0o600)
    return path


class SleepJob:
    """Processes that carry a job's environment (RANK, MASTER_*, the Flight
    Recorder and NCCL variables) and sleep, as uid RANK_UID; ended by pid."""

    def __init__(self, folder, nproc, stdout=None, **env):
        self.port = _port()
        self.procs = []
        self.logs = []
        for rank in range(nproc):
            environ = {"PATH": "/usr/bin:/bin", "RANK": str(rank), "WORLD_SIZE": str(nproc),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.port), **env}
            out = open(stdout(rank), "ab") if stdout else subprocess.DEVNULL
            self.logs.append(out)
            self.procs.append(subprocess.Popen(["sleep", "600"], env=environ, cwd="/", user=RANK_UID,
                                               group=RANK_UID, extra_groups=[], stdin=subprocess.DEVNULL,
                                               stdout=out, stderr=subprocess.DEVNULL, start_new_session=True))
        self.started = time.time()
        deadline = time.time() + 10  # until each has exec'd sleep (its environment is the job's)
        while time.time() < deadline and not all(self._ready(p.pid) for p in self.procs):
            time.sleep(0.05)

    @staticmethod
    def _ready(pid: int) -> bool:
        proc = live.read_proc(pid)
        return proc is not None and proc.rank is not None and proc.cmdline.startswith("sleep")

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def rank(self, rank: int) -> live.Rank:
        return live.Rank(rank, live.read_proc(self.procs[rank].pid), rank)

    def end(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # our own child, by its pid
            proc.wait()
        for out in self.logs:
            if out is not subprocess.DEVNULL:
                out.close()


@pytest.fixture
def sleep_jobs():
    jobs = []

    def start(*args, **kwargs):
        job = SleepJob(*args, **kwargs)
        jobs.append(job)
        return job
    yield start
    for job in jobs:
        job.end()


def _read_all(fd: int) -> bytes:
    try:
        return os.read(fd, 64)
    except BlockingIOError:
        return b""


def test_planted_files_and_pipes_are_skipped_with_why_and_the_ranks_own_are_taken(sleep_jobs, tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    marker_bytes = b"marker: must not change\n"
    marker = _plant(d / "marker.txt", marker_bytes, RANK_UID)           # what the symbolic links point at
    root_file = _plant(d / "root-only.txt", b"root's secret\n", 0, 0o600)
    # each rank's stdout: a root launcher's redirect (taken), nobody's file, a file others could write
    stdouts = [_plant(d / "rank0.out", b"rank 0 says hello\n", 0),
               _plant(d / "rank1.out", b"nobody wrote this\n", NOBODY),
               _plant(d / "rank2.out", b"anyone wrote this\n", RANK_UID, 0o666),
               _plant(d / "rank3.out", b"rank 3 says hello\n", RANK_UID)]
    job = sleep_jobs(d, 4, stdout=lambda r: stdouts[r],
                     TORCH_FR_DUMP_TEMP_FILE=str(d / "fr_dump_"), TORCH_NCCL_DEBUG_INFO_TEMP_FILE=str(d / "trace_"),
                     TORCH_FR_DEBUG_INFO_PIPE_FILE=str(d / "fr_pipe_"), NCCL_DEBUG_FILE=str(d / "nccl.%h.%p.log"))
    pids = job.pids()
    host = socket.gethostname()
    nccl = [d / f"nccl.{host}.{pid}.log" for pid in pids]

    # planted after the ranks started: only the checks keep them out, not their age
    dump0 = _plant(d / "fr_dump_0", b'{"entries": []}\n', RANK_UID)                       # the rank's own
    _plant(d / "fr_dump_1", b'{"entries": [{"record_id": 99}]}\n', NOBODY)               # nobody's
    _plant(d / "fr_dump_2", b'{"entries": [{"record_id": 98}]}\n', RANK_UID, 0o666)      # others could write it
    os.symlink(marker, d / "fr_dump_3")                                                   # a link to a file
    os.link(_plant(d / "other-name", b'{"entries": []}\n', RANK_UID), d / "trace_1")      # two names
    _fifo(d / "trace_3", RANK_UID)                                                        # a FIFO as a dump
    nccl0 = _plant(nccl[0], b"node:1:1 [0] NCCL INFO Init COMPLETE\n", RANK_UID)
    _plant(nccl[1], b"node:1:1 [0] NCCL INFO group-writable\n", RANK_UID, 0o620)
    _plant(nccl[2], b"root's secret too\n", 0, 0o600)  # named by the job's NCCL_DEBUG_FILE: not the rank's output
    os.symlink(root_file, nccl[3])
    # the debug-info pipes: the rank's FIFO (with a reader, as ProcessGroupNCCL holds one), a regular
    # file, a symbolic link to the marker, nobody's FIFO (with a reader too)
    _fifo(d / "fr_pipe_0.pipe", RANK_UID)
    pipe1 = _plant(d / "fr_pipe_1.pipe", b"not a pipe\n", RANK_UID)
    os.symlink(marker, d / "fr_pipe_2.pipe")
    _fifo(d / "fr_pipe_3.pipe", NOBODY)
    readers = [os.open(d / f"fr_pipe_{r}.pipe", os.O_RDONLY | os.O_NONBLOCK) for r in (0, 3)]
    try:
        proc, _ = _collect(tmp_path / "out", *[a for pid in pids for a in ("--pid", str(pid))])
        got = [_read_all(fd) for fd in readers]
    finally:
        for fd in readers:
            os.close(fd)

    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    errors = {r: manifest["ranks"][str(r)]["errors"] for r in range(4)}
    files = {r: manifest["ranks"][str(r)]["files"] for r in range(4)}

    # the rank's own: its dump, its NCCL file, its stdout (root's redirect), its FIFO
    assert got == [b"1\n", b""], got
    assert f"rank 0: requested a Flight Recorder dump through {d}/fr_pipe_0.pipe" in manifest["notes"]
    assert {"fr/fr_dump_0", f"nccl/{nccl[0].name}", "rank0.stdout.log"} <= set(files[0]), files[0]
    assert (out / "fr" / "fr_dump_0").read_bytes() == dump0.read_bytes()
    assert (out / "nccl" / nccl[0].name).read_bytes() == nccl0.read_bytes()
    assert (out / "rank0.stdout.log").read_bytes() == b"rank 0 says hello\n"
    assert "rank3.stdout.log" in files[3] and not any("skipped" in e for e in errors[0]), errors[0]

    # nothing else was copied; the marker and the pipe that is a file are as they were
    assert sorted(os.listdir(out / "fr")) == ["fr_dump_0"]
    assert sorted(os.listdir(out / "nccl")) == [nccl[0].name]
    assert not (out / "rank1.stdout.log").exists() and not (out / "rank2.stdout.log").exists()
    assert marker.read_bytes() == marker_bytes and pipe1.read_bytes() == b"not a pipe\n"
    assert root_file.read_bytes() == b"root's secret\n" and nccl[2].read_bytes() == b"root's secret too\n"
    assert b"secret" not in b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())

    rank_user = f"the rank runs as uid {RANK_UID}"
    expected = {
        1: [f"skipped {d}/fr_dump_1: owned by uid {NOBODY} (nobody), not by the rank ({rank_user})",
            f"skipped {d}/trace_1: 2 names (hard links)",
            f"skipped {nccl[1]}: writable by group (mode 0620): another user could have written it",
            f"skipped {stdouts[1]}: owned by uid {NOBODY} (nobody), not by the rank ({rank_user})",
            f"round 1: skipped Flight Recorder pipe {pipe1}: a regular file, not a FIFO: not written to"],
        2: [f"skipped {d}/fr_dump_2: writable by group and others (mode 0666): another user could have written it",
            f"skipped {nccl[2]}: owned by uid 0 (root), not by the rank ({rank_user})",
            f"skipped {stdouts[2]}: writable by group and others (mode 0666)",
            f"round 1: skipped Flight Recorder pipe {d}/fr_pipe_2.pipe: a symbolic link to {marker}: not followed"],
        3: [f"skipped {d}/fr_dump_3: a symbolic link to {marker}: not followed",
            f"skipped {d}/trace_3: a FIFO, not a regular file",
            f"skipped {nccl[3]}: a symbolic link to {root_file}: not followed",
            f"round 1: skipped Flight Recorder pipe {d}/fr_pipe_3.pipe: a FIFO owned by uid {NOBODY} (nobody), "
            f"not by the rank's uid {RANK_UID}: not written to"]}
    for rank, notes in expected.items():
        for note in notes:
            assert any(e.startswith(note) for e in errors[rank]), (note, errors[rank])
            assert f"forensics collect: rank {rank}: {note}" in proc.stderr, (note, proc.stderr)
        assert not any(f.startswith(("fr/", "nccl/")) for f in files[rank]), files[rank]


def test_a_planted_newer_dump_does_not_move_the_ranks_flight_recorder(sleep_jobs, tmp_path):
    """--snapshots compares the rank's newest dump between rounds: nobody's
    file, newer and with a higher record id, is not the one read."""
    d = tmp_path / "job"
    d.mkdir()
    job = sleep_jobs(d, 1, TORCH_FR_DUMP_TEMP_FILE=str(d / "fr_dump_"),
                     TORCH_NCCL_DEBUG_INFO_TEMP_FILE=str(d / "trace_"), TORCH_FR_DEBUG_INFO_PIPE_FILE=str(d / "p_"))
    rank = job.rank(0)
    assert rank.proc.uid == RANK_UID
    asked = time.time()
    entry = {"record_id": 7, "state": "completed", "pg_id": 0, "collective_seq_id": 3, "p2p_seq_id": -1}
    _plant(d / "trace_0", json.dumps({"entries": [entry]}).encode(), RANK_UID)
    planted = _plant(d / "fr_dump_0", json.dumps({"entries": [{**entry, "record_id": 99}]}).encode(), NOBODY)
    os.utime(planted, (asked + 5, asked + 5))
    assert live._fr_files(rank) == [str(d / "trace_0")]
    round_ = {"ranks": {0: {}}}
    live._fr_round([rank], round_, asked)
    fr = round_["ranks"][0]["fr"]
    assert {key: fr[key] for key in ("record_id", "state", "groups")} == {
        "record_id": 7, "state": "completed", "groups": {"0": [3, -1]}}
    assert fr["newest"]["seq"] == 3  # the position kept for progress is the rank's own dump's too
    os.chown(planted, RANK_UID, RANK_UID)  # the same file, the rank's own: now it is the newest dump
    live._fr_round([rank], round_, asked)
    assert round_["ranks"][0]["fr"]["record_id"] == 99


def test_the_pipe_is_written_only_when_it_is_the_ranks_fifo(sleep_jobs, tmp_path):
    """One rank, its pipe swapped between the kinds a planter could leave."""
    d = tmp_path / "job"
    d.mkdir()
    job = sleep_jobs(d, 1, TORCH_NCCL_DEBUG_INFO_PIPE_FILE=str(d / "pipe_"))
    rank = job.rank(0)
    pipe = d / "pipe_0.pipe"
    marker = _plant(d / "marker", b"unchanged\n", RANK_UID)
    assert live._request_fr(rank) == f"Flight Recorder pipe {pipe}: No such file or directory"
    os.symlink(marker, pipe)
    assert live._request_fr(rank) == (f"skipped Flight Recorder pipe {pipe}: a symbolic link to {marker}: "
                                      f"not followed")
    os.unlink(pipe)
    os.link(marker, pipe)
    assert live._request_fr(rank) == f"skipped Flight Recorder pipe {pipe}: a regular file, not a FIFO: not written to"
    assert marker.read_bytes() == b"unchanged\n"
    os.unlink(pipe)
    _fifo(pipe, 0)  # root's FIFO is not the rank's either
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert live._request_fr(rank) == (f"skipped Flight Recorder pipe {pipe}: a FIFO owned by uid 0 (root), "
                                          f"not by the rank's uid {RANK_UID}: not written to")
        assert _read_all(reader) == b""
        os.chown(pipe, RANK_UID, RANK_UID)
        assert live._request_fr(rank) == f"requested a Flight Recorder dump through {pipe}"
        assert _read_all(reader) == b"1\n"
    finally:
        os.close(reader)


def test_a_name_swapped_between_the_check_and_the_open_is_not_followed(sleep_jobs, tmp_path, monkeypatch):
    """The race a planter would run: the name is the rank's own when it is
    checked and a symbolic link (or another file) when it is opened. Here
    the swap is made right after the first check, every time."""
    d = tmp_path / "job"
    d.mkdir()
    job = sleep_jobs(d, 1, TORCH_FR_DUMP_TEMP_FILE=str(d / "dump_"), TORCH_FR_DEBUG_INFO_PIPE_FILE=str(d / "pipe_"))
    rank = job.rank(0)
    marker = _plant(d / "marker", b"unchanged\n", RANK_UID)
    pipe, dump = d / "pipe_0.pipe", d / "dump_0"
    swap_to = {}
    real_pipe, real_file = live._pipe_refusal, live._file_refusal

    def swapping(real):
        def check(st, uid, path, *args, **kwargs):
            why = real(st, uid, path, *args, **kwargs)
            if path in swap_to:  # the checked file moved aside (kept: its inode is not reused)
                os.replace(path, f"{path}.checked")
                swap_to.pop(path)(path)
            return why
        return check
    monkeypatch.setattr(live, "_pipe_refusal", swapping(real_pipe))
    monkeypatch.setattr(live, "_file_refusal", swapping(real_file))

    _fifo(pipe, RANK_UID)
    swap_to[str(pipe)] = lambda path: os.symlink(marker, path)
    assert live._request_fr(rank) == (f"skipped Flight Recorder pipe {pipe}: replaced by a symbolic link: "
                                      f"not followed")
    os.unlink(pipe)
    _fifo(pipe, RANK_UID)
    readers = []

    def nobodys_fifo(path):  # with a reader, so the open succeeds: the check of the opened pipe refuses it
        _fifo(path, NOBODY)
        readers.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    swap_to[str(pipe)] = nobodys_fifo
    try:
        note = live._request_fr(rank)
        assert readers and _read_all(readers[0]) == b""
    finally:
        for fd in readers:
            os.close(fd)
    assert note == (f"skipped Flight Recorder pipe {pipe}: a FIFO owned by uid {NOBODY} (nobody), not by the "
                    f"rank's uid {RANK_UID}: not written to"), note
    assert marker.read_bytes() == b"unchanged\n"

    for swap, why in ((lambda path: os.symlink(marker, path), "replaced by a symbolic link: not followed"),
                      (lambda path: _plant(dump, b"nobody's\n", NOBODY),
                       f"owned by uid {NOBODY} (nobody), not by the rank"),
                      (lambda path: _plant(dump, b"another\n", RANK_UID), "replaced while it was opened")):
        if os.path.lexists(dump):
            os.unlink(dump)
        _plant(dump, b'{"entries": []}\n', RANK_UID)
        swap_to[str(dump)] = swap
        copied, got = live._copy_checked(str(dump), str(tmp_path / "out" / "dump_0"), RANK_UID)
        assert not copied and got.startswith(why), got
        assert not (tmp_path / "out" / "dump_0").exists()
    assert marker.read_bytes() == b"unchanged\n"
