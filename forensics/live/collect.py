"""`forensics collect`: capture the ranks of a live job on this node.

Finds the rank processes from /proc (their environment: RANK, LOCAL_RANK,
WORLD_SIZE from torchrun / torch.distributed.launch / mp.spawn, or
SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK), groups them into jobs, and
for every rank of the chosen job writes, as soon as each is captured:

    rank<R>.pyspy.txt     py-spy dump --pid P
    rank<R>.native.txt    py-spy dump --pid P --native
    rank<R>.locals.txt    py-spy dump --pid P --locals          (--locals)
    rank<R>.gdb.txt       gdb -p P -batch "thread apply all bt"  (--gdb: stops it for seconds)
    rank<R>.proc.json     /proc status, wchan, per-thread state and CPU times
    rank<R>.stdout.log / .stderr.log   the tail of the files behind fds 1 and 2
    fr/…                  Flight Recorder dumps (a dump is requested through the
                          rank's debug-info pipe where the job set one)
    nccl/…                NCCL_DEBUG_FILE files (%h and %p expanded)
    dmesg.txt             the kernel log's tail, where readable
    manifest.json         rank -> pid, host, local rank, files; tool versions;
                          every failure and why; every file or pipe skipped
                          because it is not the rank's own, and why
    progress.json         with --snapshots N: each rank's position in every
                          round (the main thread's frames and the call it is
                          in, the Flight Recorder's sequence numbers where a
                          dump can be requested each round), whether it moved
                          (position or new output), its activity (CPU time,
                          wakeups: shown, never taken for progress), and per
                          round each GPU's utilisation and power where
                          nvidia-smi exists

Nothing is signalled but the tools this command starts. A tool past its
timeout is killed (it is our child); the kernel then detaches it from the
rank, and the rank's state is checked: one left stopped is reported, loudly.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import hashlib
import json
import math
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field

RANK_KEYS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")  # in this order of trust
ENV_KEYS = RANK_KEYS + ("LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "MASTER_ADDR",
                        "MASTER_PORT", "SLURM_JOB_ID", "NCCL_DEBUG_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
                        "TORCH_FR_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                        "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE")
TOOL_TIMEOUT_S = 20.0
LOG_TAIL = 16 << 20       # bytes of a rank's stdout/stderr file copied
FR_WAIT_S = 5.0           # how long a requested Flight Recorder dump is waited for
PTRACE_HELP = ("attaching needs ptrace permission: run as the job's user or root; in a container add "
               "--cap-add SYS_PTRACE; or lower kernel.yama.ptrace_scope (now {scope})")


class CollectError(Exception):
    """A situation the user must resolve (no ranks, several jobs, an unwritable folder)."""


@dataclass
class Proc:
    pid: int
    ppid: int
    state: str
    start: int           # clock ticks after boot
    cmdline: str
    env: dict
    threads: int = 0
    uid: int | None = None   # effective uid: whose files and pipe collect will read and write

    @property
    def rank(self) -> int | None:
        for key in RANK_KEYS:
            value = self.env.get(key, "")
            if value.isdigit():
                return int(value)
        return None

    @property
    def rank_key(self) -> str:
        return next((k for k in RANK_KEYS if self.env.get(k, "").isdigit()), "")

    @property
    def job(self) -> str:
        env = self.env
        parts = []
        if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
            parts.append(f"master {env['MASTER_ADDR']}:{env['MASTER_PORT']}")
        if env.get("TORCHELASTIC_RUN_ID") and env["TORCHELASTIC_RUN_ID"] != "none":
            parts.append(f"torchelastic run {env['TORCHELASTIC_RUN_ID']}")
        if env.get("SLURM_JOB_ID"):
            parts.append(f"slurm job {env['SLURM_JOB_ID']}")
        return ", ".join(parts) or "job without launcher variables"


@dataclass
class Rank:
    rank: int
    proc: Proc
    local_rank: int | None
    files: list = field(default_factory=list)
    errors: list = field(default_factory=list)


# ------------------------------------------------------------------ /proc

def _read(path: str, binary: bool = False, limit: int = 1 << 20):
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit)
    except OSError:
        return None
    return data if binary else data.decode("utf-8", "replace")


def read_proc(pid: int) -> Proc | None:
    stat = _read(f"/proc/{pid}/stat")
    if stat is None or ")" not in stat:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    raw_env = _read(f"/proc/{pid}/environ", binary=True, limit=4 << 20) or b""
    env = {}
    for item in raw_env.split(b"\0"):
        key, sep, value = item.partition(b"=")
        name = key.decode("ascii", "replace")
        if sep and name in ENV_KEYS:
            env[name] = value.decode("utf-8", "replace")
    cmdline = (_read(f"/proc/{pid}/cmdline", binary=True) or b"").replace(b"\0", b" ").decode("utf-8", "replace")
    uid = _uid_of(pid) if any(env.get(key, "").isdigit() for key in RANK_KEYS) else None
    return Proc(pid, int(fields[1]), fields[0], int(fields[19]), cmdline.strip(), env, int(fields[17]), uid)


def _uid_of(pid: int) -> int | None:
    """The effective uid of a process (/proc/PID/status; the owner of
    /proc/PID is root for a process that is not dumpable)."""
    for line in (_read(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else None
    return None


def all_procs() -> dict[int, Proc]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            proc = read_proc(int(name))
            if proc is not None:
                out[proc.pid] = proc
    return out


def state_of(pid: int) -> str | None:
    stat = _read(f"/proc/{pid}/stat")
    return stat[stat.rindex(")") + 2:].split()[0] if stat and ")" in stat else None


def find_jobs(procs: dict[int, Proc]) -> dict[str, list[Rank]]:
    """{job: its ranks}. A DataLoader worker or any child inherits its rank's
    environment: the rank is the process whose parent does not carry the
    same rank of the same job (its launcher), the oldest if several."""
    me = {os.getpid(), os.getppid()}
    candidates = [p for p in procs.values() if p.rank is not None and p.pid not in me]
    by_key: dict[tuple, list[Proc]] = {}
    for proc in candidates:
        by_key.setdefault((proc.job, proc.rank), []).append(proc)
    jobs: dict[str, list[Rank]] = {}
    for (job, rank), members in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        pids = {p.pid for p in members}
        heads = [p for p in members if p.ppid not in pids] or members
        head = min(heads, key=lambda p: (p.start, p.pid))
        local = head.env.get("LOCAL_RANK", "")
        jobs.setdefault(job, []).append(Rank(rank, head, int(local) if local.isdigit() else None))
    # A launcher under srun carries SLURM_PROCID but spawns workers with RANK:
    # where a job's processes carry RANK, only those are ranks.
    for job, ranks in jobs.items():
        if any(r.proc.rank_key == "RANK" for r in ranks):
            jobs[job] = [r for r in ranks if r.proc.rank_key == "RANK"]
    jobs = {job: ranks for job, ranks in jobs.items() if ranks}
    # Under srun, the batch script and torchrun carry SLURM_PROCID but not the
    # MASTER_* torchrun gives its workers: a "job" whose every process is an
    # ancestor of another job's ranks is their launchers, not a job.
    ancestors: dict[str, set[int]] = {}
    for job, ranks in jobs.items():
        seen = ancestors.setdefault(job, set())
        for r in ranks:
            pid = r.proc.ppid
            while pid > 1 and pid in procs and pid not in seen:
                seen.add(pid)
                pid = procs[pid].ppid
    return {job: ranks for job, ranks in jobs.items()
            if not any(other != job and all(r.proc.pid in ancestors[other] for r in ranks) for other in jobs)}


# ------------------------------------------------------------------ capture

def _tool(cmd: list[str], out_path: str, pid: int, timeout: float) -> tuple[bool, str]:
    """Run one capture tool; its stdout goes to out_path as it comes. (ok, why not)."""
    before = state_of(pid)
    try:
        with open(out_path, "wb") as out, open(out_path + ".err", "wb") as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()  # our own child; the kernel detaches it from the rank
                proc.wait()
                rc = None
    except FileNotFoundError:
        return False, f"{cmd[0]} is not installed"
    except OSError as exc:
        return False, f"cannot write {out_path}: {exc.strerror}"
    err_text = _read(out_path + ".err") or ""
    if not err_text.strip():
        os.unlink(out_path + ".err")
    after = state_of(pid)
    if after in ("t", "T") and before not in ("t", "T"):
        return False, (f"pid {pid} is left {'traced' if after == 't' else 'stopped'} ({after}) after {cmd[0]}: "
                       f"it was not before; check it (`cat /proc/{pid}/status`)")
    if rc is None:
        return False, f"{os.path.basename(cmd[0])} did not finish within {timeout:.0f} s (killed; the rank runs on)"
    if rc != 0:
        if after is None:
            return False, f"pid {pid} exited during the capture"
        first = next((line for line in err_text.splitlines() if line.strip()), "")
        if "ermission" in err_text or "ptrace" in err_text.lower():
            scope = (_read("/proc/sys/kernel/yama/ptrace_scope") or "?").strip()
            return False, f"{os.path.basename(cmd[0])}: {first.strip()[:200]} ({PTRACE_HELP.format(scope=scope)})"
        return False, f"{os.path.basename(cmd[0])} exit {rc}: {first.strip()[:200]}"
    return True, ""


def _proc_facts(pid: int) -> dict:
    """/proc status, wchan and each thread's state and CPU ticks."""
    threads = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        stat = _read(f"/proc/{pid}/task/{tid}/stat")
        if not stat or ")" not in stat:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        threads[tid] = {"name": name, "state": fields[0], "utime": int(fields[11]), "stime": int(fields[12]),
                        "wchan": (_read(f"/proc/{pid}/task/{tid}/wchan") or "").strip()}
    status = {}
    for line in (_read(f"/proc/{pid}/status") or "").splitlines():
        key, _, value = line.partition(":")
        if key in ("Name", "State", "PPid", "Threads", "VmRSS", "voluntary_ctxt_switches",
                   "nonvoluntary_ctxt_switches", "SigBlk"):
            status[key] = value.strip()
    return {"pid": pid, "status": status, "wchan": (_read(f"/proc/{pid}/wchan") or "").strip(),
            "threads": threads, "clock_ticks_per_s": os.sysconf("SC_CLK_TCK")}


WRITE_ERRORS: list[str] = []  # files that could not be written (a full disk): reported, never raised


def _write(path: str, data: bytes) -> bool:
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as out:
            out.write(data)
        return True
    except OSError as exc:
        WRITE_ERRORS.append(f"cannot write {path}: {exc.strerror}")
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False


def _write_json(path: str, value) -> bool:
    return _write(path, json.dumps(value, indent=1).encode())


# ------------------------------------------------------------------ files found by name

# Flight Recorder dumps, NCCL debug files and the pipe are found by names
# anyone can guess, often in /tmp, or that the job's owner chose; collect may
# run as root. A file is read only when it is the rank's own, and the pipe
# written only when it is the rank's FIFO. The path is checked without
# following a symbolic link, opened without following one either, and the
# opened file checked again: what is read or written is what was checked.
# A file owned by root is taken only where the rank could have written it:
# the rank runs as root, or it is the rank's own stdout or stderr (a root
# launcher's redirect). A non-root rank cannot write a root-owned file that
# is not group- or world-writable, so such a file found by name is never its
# output, and copying it would hand root's file to the job's owner.

def _rank_uid(rank: Rank) -> int | None:
    return rank.proc.uid if rank.proc.uid is not None else _uid_of(rank.proc.pid)


def _user(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, OverflowError):
        return f"uid {uid}"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "a file of an unknown kind"


def _symlink_refusal(path: str) -> str:
    with contextlib.suppress(OSError):
        return f"a symbolic link to {os.readlink(path)}: not followed"
    return "a symbolic link: not followed"


def _file_refusal(st: os.stat_result, uid: int | None, path: str, root_ok: bool = False) -> str:
    """Why a file is not the rank's own to read ("" when it is). root_ok:
    root's files are the rank's too (its own stdout and stderr)."""
    if stat.S_ISLNK(st.st_mode):
        return _symlink_refusal(path)
    if not stat.S_ISREG(st.st_mode):
        return f"{_kind(st.st_mode)}, not a regular file"
    if st.st_uid != uid and not (root_ok and st.st_uid == 0):
        rank_uid = "the rank's uid is unknown" if uid is None else f"the rank runs as {_user(uid)}"
        return f"owned by {_user(st.st_uid)}, not by the rank ({rank_uid})"
    writable = {stat.S_IWGRP: "group", stat.S_IWOTH: "others", stat.S_IWGRP | stat.S_IWOTH: "group and others"}
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"writable by {writable[st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)]} "
                f"(mode {stat.S_IMODE(st.st_mode):04o}): another user could have written it")
    if st.st_nlink > 1:
        return f"{st.st_nlink} names (hard links): it may be another file linked under this name"
    return ""


def _pipe_refusal(st: os.stat_result, uid: int | None, path: str) -> str:
    """Why a debug-info pipe is not the rank's to write to ("" when it is)."""
    if stat.S_ISLNK(st.st_mode):
        return _symlink_refusal(path)
    if not stat.S_ISFIFO(st.st_mode):
        return f"{_kind(st.st_mode)}, not a FIFO: not written to"
    if uid is None:
        return "the rank's uid is unknown: not written to"
    if st.st_uid != uid:
        return f"a FIFO owned by {_user(st.st_uid)}, not by the rank's {_user(uid)}: not written to"
    return ""


def _open_checked(path: str, uid: int | None, via_proc: bool = False) -> tuple[int | None, str]:
    """(an fd open for reading, "") on the rank's own regular file, else
    (None, why not). `via_proc`: path is /proc/PID/fd/N, which names the
    rank's open file itself (followed on purpose; root's file is taken).
    O_NONBLOCK: a FIFO put in the file's place between the checks does not
    hold the open."""
    try:
        before = os.stat(path) if via_proc else os.lstat(path)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    why = _file_refusal(before, uid, path, root_ok=via_proc)
    if why:
        return None, why  # a FIFO or a device is never opened
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if via_proc else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return None, ("replaced by a symbolic link: not followed" if exc.errno == errno.ELOOP
                      else exc.strerror or str(exc))
    try:
        after = os.fstat(fd)
        why = _file_refusal(after, uid, path, root_ok=via_proc)
        if not why and (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            why = "replaced while it was opened"
    except OSError as exc:
        why = exc.strerror or str(exc)
    if why:
        os.close(fd)
        return None, why
    return fd, ""


def _copy_checked(src: str, dst: str, uid: int | None, limit: int = LOG_TAIL,
                  via_proc: bool = False) -> tuple[bool, str]:
    """Copy the last `limit` bytes of the rank's own file src to dst.
    (copied, why it was skipped): a file that fails the checks is skipped."""
    fd, why = _open_checked(src, uid, via_proc)
    if fd is None:
        return False, why
    try:
        with os.fdopen(fd, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read(limit)
    except OSError as exc:
        return False, exc.strerror or str(exc)
    return _write(dst, data), ""


def _fd_file(pid: int, fd: int) -> str | None:
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None
    return target if target.startswith("/") and os.path.isfile(target) else None


def _request_fr(rank: Rank) -> str:
    """Ask the rank for a Flight Recorder dump through its debug-info pipe,
    if the job set one. Returns what happened, for the manifest."""
    env = rank.proc.env
    stem = env.get("TORCH_FR_DEBUG_INFO_PIPE_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    if not stem:
        return ""
    pipe = f"{stem}{rank.rank}.pipe"
    uid = _rank_uid(rank)
    try:
        why = _pipe_refusal(os.lstat(pipe), uid, pipe)  # a regular file or a device is never opened
    except OSError as exc:
        return f"Flight Recorder pipe {pipe}: {exc.strerror}"
    if why:
        return f"skipped Flight Recorder pipe {pipe}: {why}"
    try:
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"skipped Flight Recorder pipe {pipe}: replaced by a symbolic link: not followed"
        return f"Flight Recorder pipe {pipe}: {exc.strerror}"
    try:
        why = _pipe_refusal(os.fstat(fd), uid, pipe)
        if why:
            return f"skipped Flight Recorder pipe {pipe}: {why}"
        os.write(fd, b"1\n")
    except OSError as exc:
        return f"Flight Recorder pipe {pipe}: {exc.strerror}"
    finally:
        os.close(fd)
    return f"requested a Flight Recorder dump through {pipe}"


def _fr_candidates(rank: Rank) -> list[str]:
    """The names of the rank's Flight Recorder dumps that were written (or
    put there) since it started (an older file of the same name is another
    run's); whatever they are, unchecked."""
    env = rank.proc.env
    since = _boot_time() + rank.proc.start / os.sysconf("SC_CLK_TCK")
    found = []
    for prefix in {env.get("TORCH_FR_DUMP_TEMP_FILE"), env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
                   "/tmp/nccl_trace_rank_"}:
        path = f"{prefix}{rank.rank}" if prefix else ""
        with contextlib.suppress(OSError):
            if path and os.lstat(path).st_mtime >= since - 1:
                found.append(path)
    return sorted(set(found))


def _fr_files(rank: Rank) -> list[str]:
    """The rank's Flight Recorder dumps written since it started that are its own to read."""
    uid = _rank_uid(rank)
    return [p for p in _fr_candidates(rank) if not _lrefusal(p, uid)]


def _lrefusal(path: str, uid: int | None) -> str:
    try:
        return _file_refusal(os.lstat(path), uid, path)
    except OSError as exc:
        return exc.strerror or str(exc)


def _wants_fr(rank: Rank) -> bool:
    env = rank.proc.env
    return bool(env.get("TORCH_FR_DEBUG_INFO_PIPE_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"))


def _fr_round(ranks: list[Rank], round_: dict, asked: float) -> None:
    """After a round's stack dumps: where each rank's Flight Recorder dump,
    requested at `asked`, says its calls stand (waits up to FR_WAIT_S for
    dumps newer than the request)."""
    deadline = time.time() + FR_WAIT_S
    pending = [r for r in ranks if _wants_fr(r)]
    while pending:
        for r in list(pending):
            fresh = [p for p in _fr_files(r) if _mtime(p) >= asked - 0.5]
            if fresh:
                pending.remove(r)
                seen = round_["ranks"].get(r.rank)
                fd, _ = _open_checked(max(fresh, key=_mtime), _rank_uid(r)) if seen is not None else (None, "")
                if fd is not None:
                    try:  # the file checked and opened, whatever its name points to now
                        seen["fr"] = fr_position(f"/proc/self/fd/{fd}")
                    finally:
                        os.close(fd)
        if not pending or time.time() >= deadline:
            break
        time.sleep(0.1)


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def fr_position(path: str) -> dict | None:
    """Where a Flight Recorder dump says the rank's calls stand: the newest
    entry's record id and state, and per process group the highest
    collective and P2P sequence numbers. Two rounds with the same position
    mean no call started or finished between them. None when the file is
    not a dump we can read."""
    from ..ingest import flightrecorder
    from ..ingest.textio import InputError
    try:
        top = flightrecorder.read_dump(path, os.path.basename(path)).top
    except (InputError, OSError):
        return None
    entries = top.get("entries") if isinstance(top, dict) else None
    if not isinstance(entries, list):
        return None
    groups: dict[str, list[int]] = {}
    newest: tuple[int, str] = (-1, "")
    call: dict = {}
    timeouts = []
    for entry in entries[-100_000:]:
        if not isinstance(entry, dict):
            continue
        record = entry.get("record_id")
        if isinstance(record, int) and record > newest[0]:
            newest = (record, str(entry.get("state", ""))[:20])
            seq = entry.get("collective_seq_id") if not entry.get("is_p2p") else entry.get("p2p_seq_id")
            call = {"pg": str(entry.get("pg_id", "?"))[:40], "seq": seq if isinstance(seq, int) else None,
                    "op": str(entry.get("profiling_name", ""))[:80]}
        if isinstance(entry.get("timeout_ms"), (int, float)) and not isinstance(entry.get("timeout_ms"), bool):
            timeouts.append(entry["timeout_ms"])
        seqs = groups.setdefault(str(entry.get("pg_id", "?"))[:40], [-1, -1])
        for i, key in enumerate(("collective_seq_id", "p2p_seq_id")):
            value = entry.get(key)
            if isinstance(value, int) and value > seqs[i]:
                seqs[i] = value
    return {"record_id": newest[0], "state": newest[1], "groups": groups, "newest": call,
            **({"timeout_ms": max(timeouts)} if timeouts else {})}


def _boot_time() -> float:
    for line in (_read("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def _nccl_files(rank: Rank, host: str) -> list[str]:
    """The rank's NCCL_DEBUG_FILE where something is there by that name (unchecked)."""
    pattern = rank.proc.env.get("NCCL_DEBUG_FILE")
    if not pattern:
        return []
    path = pattern.replace("%h", host).replace("%p", str(rank.proc.pid))
    return [path] if os.path.lexists(path) else []


DMESG_MARGIN_S = 60.0
_DMESG_TIME = re.compile(rb"^\[\s*(\d+)\.(\d+)\]")


def _boot_seconds(line: bytes) -> float | None:
    found = _DMESG_TIME.match(line)
    return float(found.group(1) + b"." + found.group(2)) if found else None


def _fingerprint(path: str) -> str:
    """A py-spy dump without what changes while a thread stays put (addresses, the idle/active flag)."""
    text = _read(path) or ""
    text = re.sub(r"0x[0-9a-f]+", "", text)
    text = re.sub(r"\((?:idle|active)[^)]*\)", "", text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Options:
    out: str
    pids: tuple[int, ...] = ()
    job: str = ""
    locals: bool = False
    gdb: bool = False
    snapshots: int = 1
    interval: float = 5.0
    timeout: float = TOOL_TIMEOUT_S
    pyspy: str = ""
    echo: object = None          # a function taking progress lines (stderr), or None
    stuck_after: float | None = None  # --stuck-after; None: half the job's collective timeout, else 60 s


def choose(jobs: dict[str, list[Rank]], options: Options) -> tuple[str, list[Rank]]:
    if options.pids:
        wanted = set(options.pids)
        picked = [(job, [r for r in ranks if r.proc.pid in wanted]) for job, ranks in jobs.items()]
        picked = [(job, ranks) for job, ranks in picked if ranks]
        unknown = wanted - {r.proc.pid for _, ranks in picked for r in ranks}
        if unknown:
            raise CollectError(f"pid {', '.join(map(str, sorted(unknown)))}: not a rank of a distributed job "
                               f"(no RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK in its environment, "
                               f"or its environment is not readable by this user)")
        if len(picked) > 1:
            raise CollectError("the pids given belong to several jobs: " + "; ".join(j for j, _ in picked))
        return picked[0]
    if not jobs:
        raise CollectError("no rank processes found on this node: no process carries RANK, SLURM_PROCID, "
                           "OMPI_COMM_WORLD_RANK or PMI_RANK in an environment this user can read "
                           "(run as the job's user or root, or name the ranks with --pid)")
    if options.job:
        # a whole part of the description first ("slurm job 12" is not "slurm job 123"), else any text in it
        matching = ([job for job in jobs if options.job in job.split(", ")]
                    or [job for job in jobs if options.job in job])
        if len(matching) != 1:
            raise CollectError(f"--job {options.job!r} matches {len(matching)} of the jobs here: "
                               + "; ".join(f"{job} ({len(r)} ranks)" for job, r in jobs.items()))
        return matching[0], jobs[matching[0]]
    if len(jobs) > 1:
        listing = "\n".join(f"  {job}: ranks {', '.join(str(r.rank) for r in ranks)} "
                            f"(pids {', '.join(str(r.proc.pid) for r in ranks)})" for job, ranks in jobs.items())
        raise CollectError(f"{len(jobs)} jobs run on this node; name one with --job TEXT or --pid:\n{listing}")
    job = next(iter(jobs))
    return job, jobs[job]


def _pyspy(options: Options) -> str:
    if options.pyspy:
        return options.pyspy
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.exists(here) else (shutil.which("py-spy") or "py-spy")


def _version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else ""


def collect(options: Options) -> dict:
    """Capture the chosen job's ranks into options.out; returns the manifest."""
    say = options.echo or (lambda line: None)
    started = time.time()
    try:
        os.makedirs(options.out, exist_ok=True)
        probe = os.path.join(options.out, ".forensics-write-test")
        with open(probe, "w") as handle:
            handle.write("ok")
        os.unlink(probe)
    except OSError as exc:
        raise CollectError(f"{options.out}: cannot write there ({exc.strerror})") from None
    job, ranks = choose(find_jobs(all_procs()), options)
    host = socket.gethostname()
    pyspy = _pyspy(options)
    manifest = {
        "schema": "forensics.collect/1", "host": host, "job": job,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "tools": {"py-spy": _version([pyspy, "--version"]),
                  **({"gdb": _version(["gdb", "--version"])} if options.gdb else {})},
        "ranks": {}, "launchers": {}, "errors": [],
    }
    for r in ranks:
        parent = read_proc(r.proc.ppid)
        if parent is not None and parent.rank is None and parent.pid > 1:
            manifest["launchers"][str(parent.pid)] = parent.cmdline[:300]
    WRITE_ERRORS.clear()
    say(f"collect: {job}: {len(ranks)} rank(s) on {host}: "
        + ", ".join(f"{r.rank} (pid {r.proc.pid})" for r in ranks))

    def write_manifest():
        for r in ranks:
            manifest["ranks"][str(r.rank)] = {"pid": r.proc.pid, "host": host, "local_rank": r.local_rank,
                                              "cmdline": r.proc.cmdline[:300], "files": sorted(set(r.files)),
                                              "errors": r.errors}
        manifest["seconds"] = round(time.time() - started, 2)
        for error in WRITE_ERRORS:
            if error not in manifest["errors"]:
                manifest["errors"].append(error)
                say(f"collect: {error}")
        _write_json(os.path.join(options.out, "manifest.json"), manifest)

    write_manifest()  # first: whatever fails later, who was to be captured is on disk
    rounds: list[dict] = []
    for round_no in range(1, max(1, options.snapshots) + 1):
        if round_no > 1:
            time.sleep(options.interval)
        asked = time.time()
        for r in ranks:  # each round: the dump's sequence numbers are what moved, or not
            note = _request_fr(r)
            if note.startswith("requested") and round_no == 1:
                manifest.setdefault("notes", []).append(f"rank {r.rank}: {note}")
            elif note and not note.startswith("requested"):
                r.errors.append(f"round {round_no}: {note}")
        rounds.append(_round(ranks, options, pyspy, round_no, say))
        if options.snapshots > 1:
            _fr_round(ranks, rounds[-1], asked)
            rounds[-1]["gpus"] = gpu_round()
        write_manifest()
    if options.snapshots > 1:
        _write_progress(options.out, ranks, rounds, options.interval, options.stuck_after)
    _collect_files(ranks, options.out, host, manifest)
    write_manifest()
    say(f"collect: done in {time.time() - started:.1f} s -> {options.out}")
    return manifest


def _round(ranks: list[Rank], options: Options, pyspy: str, round_no: int, say) -> dict:
    """One round of dumps of every rank, in parallel; the last round's files stay."""
    def one(r: Rank) -> dict:
        pid, base = r.proc.pid, os.path.join(options.out, f"rank{r.rank}")
        facts = _proc_facts(pid)
        jobs = [("pyspy", [pyspy, "dump", "--pid", str(pid)], base + ".pyspy.txt")]
        if round_no == max(1, options.snapshots):  # the slower dumps once, in the last round
            jobs.append(("native", [pyspy, "dump", "--pid", str(pid), "--native"], base + ".native.txt"))
            if options.locals:
                jobs.append(("locals", [pyspy, "dump", "--pid", str(pid), "--locals"], base + ".locals.txt"))
            if options.gdb:
                jobs.append(("gdb", ["gdb", "-p", str(pid), "-batch", "-ex", "set pagination off",
                                     "-ex", "thread apply all bt"], base + ".gdb.txt"))
        seen = {"threads": {t: v["utime"] + v["stime"] for t, v in facts["threads"].items()}, "stack": "",
                "switches": _main_switches(pid), "output": _output_size(pid)}
        for label, cmd, path in jobs:
            ok, why = _tool(cmd, path, pid, options.timeout)
            if ok:
                r.files.append(os.path.basename(path))
                if label == "pyspy":
                    seen["stack"] = _fingerprint(path)
            else:
                r.errors.append(f"round {round_no}: {label}: {why}")
                if os.path.exists(path) and os.path.getsize(path) == 0:
                    os.unlink(path)
                say(f"collect: rank {r.rank} (pid {pid}): {label}: {why}")
        if state_of(pid) is not None:
            if _write_json(base + ".proc.json", _proc_facts(pid)):
                r.files.append(os.path.basename(base) + ".proc.json")
        return seen

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(ranks) or 1)) as pool:
        results = dict(zip((r.rank for r in ranks), pool.map(one, ranks)))
    for r in ranks:  # here, not in the pool: the readers import their grammar library on first use
        if results[r.rank]["stack"]:
            results[r.rank]["position"] = stack_position(os.path.join(options.out, f"rank{r.rank}.pyspy.txt"))
    say(f"collect: round {round_no}: {len(ranks)} rank(s) dumped")
    return {"time": time.time(), "ranks": results}


DUMP_SWITCHES = 2  # wakeups one py-spy dump causes (measured: a rank blocked in Gloo shows 4 over 2 dumps)


def _main_switches(pid: int) -> int | None:
    for line in (_read(f"/proc/{pid}/task/{pid}/status") or "").splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return None


def _output_size(pid: int) -> int | None:
    sizes = []
    for fd in (1, 2):
        path = _fd_file(pid, fd)
        if path:
            try:
                sizes.append(os.path.getsize(path))
            except OSError:
                pass
    return sum(sizes) if sizes else None


def _delta(a, b) -> int:
    return b - a if isinstance(a, int) and isinstance(b, int) else 0


PROGRESS_SCHEMA = "forensics.progress/2"
DEFAULT_STUCK_AFTER_S = 60.0
TIMEOUT_SHARE = 0.5  # of the job's own collective timeout: the default --stuck-after where a dump states it


def stack_position(path: str) -> dict | None:
    """Where a py-spy dump shows the rank: its main thread's Python frames
    (outermost first, as [function, file, line]), what the thread does
    (activity, the communication call) and why, as the reader judges it.
    None when the dump shows no thread."""
    from ..ingest import pyspy, stacks
    from ..ingest.textio import InputError
    try:
        dumps = [d for d in pyspy.parse(path, os.path.basename(path)).processes if d.threads]
    except (InputError, OSError):
        return None
    thread = stacks.main_thread(dumps[0]) if dumps else None
    if thread is None:
        return None
    judged = stacks.classify(dumps[0])
    frames = [f for f in thread.frames if stacks.is_python(f)] or list(thread.frames)
    return {"activity": judged.activity, "op": judged.op if judged.activity == "blocked" else "",
            "why": judged.why[:300], "active": thread.active,
            "frames": [[f.function[:200], f.file[:300], f.line] for f in reversed(frames)]}


def _shared(a: list, b: list) -> int:
    """How many outermost frames two stacks have in common."""
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    return shared


def same_place(a: list, b: list) -> bool:
    """Whether two stacks (outermost frame first, [function, file, line])
    are one position: identical, or moving among the lines of one function
    whose callers are identical (a loop, whatever it calls from there)."""
    shared = _shared(a, b)
    if shared == len(a) or shared == len(b):  # identical, or one calls on from the other's line
        return bool(a and b)
    return a[shared][:2] == b[shared][:2]  # the same function at another line: inside its loop


def _frame_label(frame) -> str:
    function, file, line = frame
    return f"{function} ({os.path.basename(file)}:{line})" if line else f"{function} ({os.path.basename(file)})"


def _own_frame(frames: list):
    """The innermost frame of the job's own code (not a library's)."""
    from ..ingest import stacks
    for frame in reversed(frames):
        if frame[1].endswith(".py") and not stacks._library_file(frame[1]):
            return frame
    return None


def judge_positions(positions: list) -> dict:
    """One rank's positions over the rounds (None where no dump): whether it
    moved (its stack beyond one loop's lines, or into, out of or between
    communication calls: a call issued or completed); else the loop it moved
    in, whether it waited in the same communication call at the same place
    in every round, or kept busy in one function of its own (no
    communication call) in every round."""
    seen = [p for p in positions if p and p.get("frames")]
    out = {"stack_moved": False, "loop": "", "waiting_in": "", "waiting_at": "", "busy_in": "", "idle": False}
    if len(seen) < 2:
        return out
    first, last = seen[0]["frames"], seen[-1]["frames"]
    calls = {(p["activity"] == "blocked", p["op"]) for p in seen}
    if len(calls) > 1 or not all(same_place(first, p["frames"]) for p in seen[1:]):
        out["stack_moved"] = True
        return out
    parted = [_shared(first, p["frames"]) for p in seen[1:] if p["frames"] != first]
    # where the stack moves: the outermost frame at which a round parts from the first
    place = last[: min(parted) + 1] if parted else last
    if parted:
        out["loop"] = _frame_label(place[-1])
    if not parted and seen[0]["activity"] == "blocked" and seen[0]["op"] not in ("", "store"):
        out["waiting_in"], out["waiting_at"] = seen[0]["op"], seen[0]["why"]
    elif all(p["activity"] != "blocked" for p in seen):
        own = _own_frame(place)
        out["busy_in"] = _frame_label(own) if own else ""
        out["idle"] = all(p.get("active") is False for p in seen)  # py-spy saw it idle (asleep) every time
    return out


NVIDIA_SMI_QUERY = ["--query-gpu=index,utilization.gpu,power.draw,power.limit", "--format=csv,noheader,nounits"]


def gpu_round() -> dict:
    """Each GPU's utilisation and power now, from nvidia-smi where it is on
    PATH: {"gpus": [...]} or {"missing": why}. A GPU at full utilisation
    and idle power is a kernel spinning (an NCCL kernel waiting for a peer),
    not work."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"missing": "nvidia-smi is not on PATH: no GPU utilisation or power recorded"}
    try:
        done = subprocess.run([smi, *NVIDIA_SMI_QUERY], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"missing": f"nvidia-smi did not answer: {exc.__class__.__name__}"}
    if done.returncode != 0:
        first = next((line for line in (done.stderr or done.stdout).splitlines() if line.strip()), "")
        return {"missing": f"nvidia-smi exit {done.returncode}: {first.strip()[:200]}"}
    gpus, bad = [], []
    for line in done.stdout.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        values = [_number(f) for f in fields]
        if len(fields) != 4 or values[0] is None:
            bad.append(line.strip()[:200])
            continue
        gpus.append({"index": int(values[0]), "utilization_pct": values[1], "power_w": values[2],
                     "power_limit_w": values[3]})
    out = {"gpus": gpus}
    if bad:
        out["unread"] = bad[:8]
    return out


def _number(text: str) -> float | None:
    """A value of nvidia-smi's CSV: "[N/A]" or "[Not Supported]" is unknown, not 0."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() else value


def _collective_timeout_s(rounds: list[dict]) -> float | None:
    """The job's own collective timeout, where a Flight Recorder dump states it."""
    found = [p["timeout_ms"] for rd in rounds for p in (v.get("fr") for v in rd["ranks"].values())
             if isinstance(p, dict) and isinstance(p.get("timeout_ms"), (int, float)) and p["timeout_ms"] > 0]
    return max(found) / 1000 if found else None


def _write_progress(out: str, ranks: list[Rank], rounds: list[dict], interval: float,
                    stuck_after: float | None = None) -> None:
    """collect's progress.json: the rounds judged by `progress_document`."""
    data = progress_document([(r.rank, r.proc.pid) for r in ranks], rounds, interval, stuck_after,
                             "forensics collect")
    _write_json(os.path.join(out, "progress.json"), data)


def progress_document(ranks: list[tuple[int, int | None]], rounds: list[dict], interval: float,
                      stuck_after: float | None = None, written_by: str = "forensics collect") -> dict:
    """progress.json (forensics.progress/2) from rounds of what each rank
    showed, as collect and watch both write it, so that one reader
    (forensics/ingest/progress.py) judges "hung or slow" for both: whether
    each rank moved, by its main stack beyond one loop's lines, its Flight
    Recorder's sequence numbers (where dumps were requested), new output of
    its own. CPU time and the main thread's wakeups are kept as its
    activity, never as progress: a polling wait, a spinning NCCL kernel and
    a busy loop all burn CPU. A round's rank carries `stack` (a fingerprint,
    "" when no dump was taken), `position` (stack_position's), and where
    read, `threads` (CPU ticks), `switches`, `output` and `fr`; a rank is
    judged from the first to the last round that has a stack for it."""
    per_rank = {}
    for rank, pid in ranks:
        seen = [rd["ranks"][rank] for rd in rounds if rd["ranks"].get(rank, {}).get("stack")]
        if len(seen) < 2:
            continue
        a, b = seen[0], seen[-1]
        measured = [s for s in seen if "threads" in s]  # watch places a rank in a call by its agent: no CPU
        cpu = sum(measured[-1]["threads"].get(t, 0) - v for t, v in measured[0]["threads"].items()
                  if t in measured[-1]["threads"]) if len(measured) >= 2 else 0
        stacks = [s["stack"] for s in seen]
        # each py-spy dump itself wakes the main thread about twice (ptrace stops)
        switches = max(0, _delta(a.get("switches"), b.get("switches")) - DUMP_SWITCHES * (len(seen) - 1))
        output = _delta(a.get("output"), b.get("output"))
        # The Flight Recorder's position: a call that started or finished
        # between two rounds moves it, whatever the stack sampled.
        positions = [p for p in (rd["ranks"].get(rank, {}).get("fr") for rd in rounds) if p is not None]
        fr_changed = len({json.dumps(_fr_key(p), sort_keys=True) for p in positions}) > 1 \
            if len(positions) >= 2 else None
        places = [rd["ranks"].get(rank, {}).get("position") for rd in rounds]
        judged = judge_positions(places)
        if not any(places):  # no dump could be read: the fingerprints are all there is
            judged["stack_moved"] = len(set(stacks)) > 1
        moved = judged["stack_moved"] or output > 0 or bool(fr_changed)
        ticks = max(1, os.sysconf("SC_CLK_TCK"))
        per_rank[str(rank)] = {"pid": pid, "moved": moved, "stack_changed": len(set(stacks)) > 1,
                               **judged, "flight_recorder_changed": fr_changed,
                               "flight_recorder": positions[:1] + positions[1:][-1:],  # first, last
                               "output_bytes": output,
                               "activity": {"cpu_s": round(cpu / ticks, 2), "main_thread_wakeups": switches}
                               if len(measured) >= 2 else {},
                               "main_thread_wakeups": switches, "cpu_ticks": cpu,
                               "positions": places}
    timeout = _collective_timeout_s(rounds)
    if stuck_after is not None:
        threshold, source = stuck_after, "--stuck-after"
    elif timeout is not None:
        threshold, source = round(timeout * TIMEOUT_SHARE, 1), f"half the collective timeout of {timeout:g} s"
    else:
        threshold, source = DEFAULT_STUCK_AFTER_S, "the default (no collective timeout known)"
    gpus = [rd.get("gpus") for rd in rounds if rd.get("gpus") is not None]
    return {"schema": PROGRESS_SCHEMA, "written_by": written_by, "rounds": len(rounds),
            "seconds": round(rounds[-1]["time"] - rounds[0]["time"], 2), "interval_s": interval,
            "stuck_after_s": threshold, "stuck_after_from": source, "collective_timeout_s": timeout,
            "ranks": per_rank,
            "gpus": _gpu_summary(gpus)}


def _gpu_summary(rounds: list[dict]) -> dict | None:
    """The rounds' GPU readings, or why there are none; lines of nvidia-smi
    not understood are kept, to be shown."""
    if not rounds:
        return None
    if all("missing" in r for r in rounds):
        return {"missing": rounds[0]["missing"]}
    out = {"rounds": [r.get("gpus", []) for r in rounds]}
    unread = [line for r in rounds for line in r.get("unread", [])] + [r["missing"] for r in rounds if "missing" in r]
    if unread:
        out["unread"] = list(dict.fromkeys(unread))[:8]
    return out


def _fr_key(position: dict) -> dict:
    """What moves when a call starts or finishes (not the timeout beside it)."""
    return {k: v for k, v in position.items() if k != "timeout_ms"}


def _collect_files(ranks: list[Rank], out: str, host: str, manifest: dict) -> None:
    deadline = time.time() + FR_WAIT_S
    wants_fr = [r for r in ranks if _wants_fr(r)]
    while wants_fr and time.time() < deadline and not all(_fr_files(r) for r in wants_fr):
        time.sleep(0.2)
    for r in ranks:
        uid = _rank_uid(r)
        found = []  # (what the manifest calls it, the path opened, where it goes, bytes kept, via /proc)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            src = _fd_file(r.proc.pid, fd)
            if src:  # the rank's open file itself, not whatever its name points to now
                found.append((src, f"/proc/{r.proc.pid}/fd/{fd}", f"rank{r.rank}.{name}.log", LOG_TAIL, True))
        found += [(src, src, os.path.join("fr", os.path.basename(src)), 1 << 30, False)
                  for src in _fr_candidates(r)]
        found += [(src, src, os.path.join("nccl", os.path.basename(src)), LOG_TAIL, False)
                  for src in _nccl_files(r, host)]
        for shown, src, dst, limit, via_proc in found:
            copied, why = _copy_checked(src, os.path.join(out, dst), uid, limit, via_proc)
            if copied:
                r.files.append(dst)
            elif why:
                r.errors.append(f"skipped {shown}: {why}")
    try:
        dmesg = subprocess.run(["dmesg"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        dmesg = None
    if dmesg is not None and dmesg.returncode == 0 and dmesg.stdout:
        # Only what the kernel logged since the job started: an older OOM kill
        # or segfault is another process's story, not this job's.
        since = min(r.proc.start for r in ranks) / os.sysconf("SC_CLK_TCK") - DMESG_MARGIN_S
        kept, keep = [], False
        for line in dmesg.stdout.splitlines(keepends=True):
            stamp = _boot_seconds(line)
            if stamp is not None:
                keep = stamp >= since
            if keep:  # a continuation line goes with the stamped line above it
                kept.append(line)
        if not kept:  # no empty file for analyze to list as not read: the manifest says it
            manifest.setdefault("notes", []).append(
                f"dmesg: the kernel logged nothing since {since:.0f} s after boot (a minute before the job's "
                f"first rank started)")
        elif _write(os.path.join(out, "dmesg.txt"), b"".join(kept)[-(4 << 20):]):
            manifest.setdefault("files", []).append("dmesg.txt")
            manifest.setdefault("notes", []).append(
                f"dmesg.txt: the kernel log since {since:.0f} s after boot (a minute before the job's first rank "
                f"started); {len(dmesg.stdout.splitlines()) - len(kept)} older line(s) left out")
    elif dmesg is not None:
        manifest["errors"].append("dmesg: not readable by this user (kernel.dmesg_restrict)")
