"""`forensics watch`: read what the in-job agents publish (forensics/agent.py)
and judge the latest state of every rank whenever it changes, with the same
engine as `analyze`.

A cycle of waits among blocked ranks (an AND-knot), a mismatched collective
or a rank that exited while others wait for it is a verdict at once. A rank
the others wait for that is elsewhere, or silent, is reported once nothing
changed for `stuck_after`. That judgment is forensics collect's, made by
the same code: the watcher writes the window as a progress.json beside the
snapshot (forensics.progress/2: each rank's position at the last change,
halfway through the window and now) and the progress reader decides. Ranks
in a call are placed by what their agents published; a rank in no call on
this host is placed by a py-spy dump of its main thread halfway and at the
end (its loop, or where it sleeps), with its CPU time and wakeups shown as
activity, never as progress. So `forensics analyze` of a verdict's folder
judges it the same way, and --stuck-after there means what it means for a
collected folder.

On a verdict the watcher writes OUT/hang-N/ (the snapshots it judged,
report.json, report.html, verdict.json with the root-cause rank: the
culprit with the least progress), runs the `on_hang` command with the
culprits in its environment, and stops, or keeps watching.

It also dumps the stacks the verdict points at, the root-cause rank's and
one rank's that waits for it, with `py-spy dump` into OUT/hang-N/stacks/,
and the report shows them (every thread, citing the file) or says what
kept a dump from being taken (no py-spy, no ptrace permission, another
host). The dumps are shown beside the verdict, not judged with it: a dump
shows a call but not its group, sequence number or peer, which the
snapshot states.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ..ranges import compact
from .collect import (_fingerprint, _main_switches, _output_size, _proc_facts, progress_document, stack_position,
                      state_of)
from .stores import BUCKETS, RANK_TTL_S, StoreDown, open_store, parse_store

SNAPSHOT_SCHEMA = "forensics.snapshot/1"
VERDICT_SCHEMA = "forensics.watch-verdict/1"
MAX_STATE_BYTES = 256 * 1024
MAX_LIST = 64
MAX_TEXT = 300
MAX_GROUP = 1 << 20
IDLE_OPS = frozenset({"compute", "idle", "exited"})
P2P_OPS = frozenset({"send", "recv"})
MAX_SAMPLED = 8        # ranks in no call whose stacks place them in a stuck window (py-spy each)
SUBSET_FROM = 512      # with more states than this, a change is first judged on the ranks it can involve
QUIET_S = 0.25         # ... and every state together once no rank moved for this long,
FULL_EVERY_S = 5.0     # or at least this often


@dataclass
class WatchOptions:
    store: str
    world_size: int
    out: str = "forensics-watch"
    stuck_after: float = 60.0
    poll: float = 0.01
    timeout: float = 0.0              # stop watching after this long (0: never)
    echo: Callable | None = None      # one line of news at a time
    serve: bool = False               # host the TCPStore instead of joining the job's
    on_hang: str = ""                 # shell command run on each verdict
    hook_timeout: float = 600.0
    keep_watching: bool = False       # after a verdict: go on (a new verdict is reported once)
    plugins: object = None
    on_verdict: Callable | None = None  # called with each Verdict (the CLI prints the report)
    stop: threading.Event | None = None
    pyspy: str = ""                   # the py-spy to dump stacks with ("": on PATH, else beside this Python)
    stack_timeout: float = 20.0       # a py-spy dump that takes longer is ended (it is ours)


@dataclass
class Verdict:
    report: object
    folder: str
    root_rank: int | None
    detected_at: float
    last_entered_at: float | None
    summary: dict = field(default_factory=dict)

    @property
    def latency_ms(self) -> float | None:
        if self.last_entered_at is None:
            return None
        return round((self.detected_at - self.last_entered_at) * 1000, 1)


class NotAState(ValueError):
    """A published value that is not a rank's state."""


# ---------------------------------------------------------------- reading what agents publish

_TEXT = {"current_op", "group", "group_desc", "state", "host", "exit"}
_INT = {"op_seq", "pid", "elapsed_ms", "done"}
_BOOL = {"async", "any_source", "alive"}
_NUMBER = {"entered_at", "time"}


def parse_state(raw) -> dict:
    """A published value as a state with only fields of the expected types
    and sizes. Nothing in it is trusted: a rank that publishes garbage is
    ignored (NotAState says why), never run."""
    if raw is None:
        raise NotAState("nothing")
    if len(raw) > MAX_STATE_BYTES:
        raise NotAState(f"{len(raw)} bytes, over {MAX_STATE_BYTES}")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise NotAState("not JSON") from None
    if not isinstance(value, dict):
        raise NotAState(f"a JSON {type(value).__name__}, not an object")
    out: dict = {}
    for key, item in value.items():
        if key in _TEXT and isinstance(item, str):
            out[key] = item[:MAX_TEXT]
        elif key in _INT and _is_int(item):
            out[key] = item
        elif key in _BOOL and isinstance(item, bool):
            out[key] = item
        elif key in _NUMBER and isinstance(item, (int, float)) and not isinstance(item, bool) and item == item:
            out[key] = float(item)
    op = out.get("current_op")
    if not op:
        raise NotAState("no current_op")
    peers = value.get("peers")
    if isinstance(peers, list):
        out["peers"] = [p for p in peers[:MAX_LIST] if _is_int(p) and p >= 0]
    members = _members(value)
    if members is not None:
        out["group_ranks"] = members
    stack = value.get("stack")
    if isinstance(stack, list):
        out["stack"] = [str(f)[:MAX_TEXT] for f in stack[:MAX_LIST] if isinstance(f, str)]
    progress = value.get("progress")
    if isinstance(progress, dict):
        out["progress"] = {str(g)[:MAX_TEXT]: {k: v for k, v in spec.items()
                                               if k in ("started", "completed") and _is_int(v)}
                           for g, spec in list(progress.items())[:MAX_LIST] if isinstance(spec, dict)}
    return out


def _members(value: dict):
    """A group's members as a range (the agent's span) or a tuple: compact,
    and equal states share one value."""
    span = value.get("group_span")
    if isinstance(span, list) and len(span) == 3 and all(_is_int(x) for x in span):
        start, stop, step = span
        if step > 0 and 0 <= start < stop and (stop - start) // step <= MAX_GROUP:
            return range(start, stop, step)
    ranks = value.get("group_ranks")
    if isinstance(ranks, list) and len(ranks) <= MAX_GROUP:
        return tuple(r for r in ranks if _is_int(r) and r >= 0)
    return None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_blocked(state: dict) -> bool:
    return state.get("current_op") not in IDLE_OPS and state.get("alive") is not False


def position(state: dict | None):
    """What must change for a rank to have moved."""
    if state is None:
        return None
    return (state.get("current_op"), state.get("group"), state.get("op_seq"), tuple(state.get("peers") or ()),
            state.get("async"), state.get("alive"), state.get("pid"))


def snapshot(states: dict[int, dict], taken_at: float | None = None, collective_groups: bool = False) -> dict:
    """The agents' states as a watchdog snapshot (forensics/ingest/snapshot.py
    reads it). `collective_groups`: list the members only of groups a rank
    is in a collective on (a part of the job judged alone must not make the
    engine count the rest of a P2P call's group as silent ranks)."""
    ranks, groups = {}, {}
    for rank, state in sorted(states.items()):
        entry = {k: state[k] for k in ("current_op", "op_seq", "group", "peers", "state", "pid", "host",
                                       "any_source", "alive", "stack", "progress") if k in state}
        if state.get("current_op") in IDLE_OPS:
            entry.pop("op_seq", None)
        ranks[str(rank)] = entry
        name = state.get("group")
        if collective_groups and (state.get("current_op") in P2P_OPS or not is_blocked(state)):
            continue
        if name and state.get("group_ranks") and str(name) not in groups:
            groups[str(name)] = {"ranks": list(state["group_ranks"]), "name": state.get("group_desc", "")}
    out = {"schema": SNAPSHOT_SCHEMA, "groups": groups, "ranks": ranks}
    if taken_at is not None:
        out["taken_at"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(taken_at)) + f".{int(taken_at % 1 * 1e6):06d}Z"
    return out


# ---------------------------------------------------------------- root cause and the hook

def root_cause_rank(culprits, states: dict[int, dict]) -> int | None:
    """The culprit with the least progress: one that sent nothing, went
    silent or exited; then one that is in no call at all (the others wait
    for it to arrive); then the fewest collectives completed; then the one
    that entered its call last; then the lowest rank."""
    def key(rank):
        state = states.get(rank)
        if state is None or state.get("alive") is False or state.get("current_op") == "exited":
            return (0, 0, 0.0, rank)
        if not is_blocked(state):
            return (1, 0, 0.0, rank)
        done = state.get("done")
        return (2, done if done is not None else -1, -(state.get("entered_at") or 0.0), rank)
    culprits = list(culprits)
    return min(culprits, key=key) if culprits else None


def describe_progress(rank: int, states: dict[int, dict], culprits, window: dict | None = None) -> str:
    state = states.get(rank)
    if state is None:
        return "it published nothing (never, or its state expired)"
    if state.get("alive") is False or state.get("current_op") == "exited":
        return "it exited" + (f" ({state['exit']})" if state.get("exit") else "")
    if not is_blocked(state):
        ago = f", published {time.time() - state['time']:.0f} s ago" if state.get("time") else ""
        text = f"it is in no communication call (its last state: {state.get('current_op')}{ago})"
        place = ((window or {}).get("ranks") or {}).get(str(rank)) or {}
        if place.get("busy_in"):  # where the window's stack dumps placed it
            text += (f"; it {'stayed idle' if place.get('idle') else 'kept busy'} in {place['busy_in']} "
                     f"through the {window['seconds']:g} s window")
        return text
    done = state.get("done")
    if done is None:
        return "its count of completed collectives is unknown"
    others = [states[r].get("done") for r in culprits if r != rank and r in states]
    text = f"{done} collective(s) completed"
    if others and all(o == done for o in others):
        text += ", as many as the other culprits; it entered its call last"
    elif others:
        text += f"; the other culprits {', '.join('?' if o is None else str(o) for o in others)}"
    return text


def _safe_word(value) -> str:
    text = str(value or "")
    return text if text and len(text) <= 253 and all(c.isalnum() or c in "._-" for c in text) else ""


def hook_environment(verdict: Verdict, states: dict[int, dict], url: str) -> dict[str, str]:
    """What --on-hang's command is told: values it can use in a shell
    without quoting (host names and pids that are not plain are left out)."""
    report = verdict.report
    env = {"FORENSICS_VERDICT": report.verdict, "FORENSICS_CULPRITS": ",".join(map(str, report.culprit_ranks)),
           "FORENSICS_HANG_DIR": os.path.abspath(verdict.folder),
           "FORENSICS_REPORT_JSON": os.path.abspath(os.path.join(verdict.folder, "report.json")),
           "FORENSICS_REPORT_HTML": os.path.abspath(os.path.join(verdict.folder, "report.html")),
           "FORENSICS_VERDICT_JSON": os.path.abspath(os.path.join(verdict.folder, "verdict.json")),
           "FORENSICS_STORE": url}
    processes = []
    for rank in report.culprit_ranks:
        state = states.get(rank) or {}
        host, pid = _safe_word(state.get("host")), state.get("pid")
        processes.append(f"{rank}={host}:{pid}" if host and _is_int(pid) else f"{rank}=")
    env["FORENSICS_CULPRIT_PROCESSES"] = " ".join(processes)
    if verdict.root_rank is not None:
        env["FORENSICS_ROOT_RANK"] = str(verdict.root_rank)
        state = states.get(verdict.root_rank) or {}
        if _safe_word(state.get("host")):
            env["FORENSICS_ROOT_HOST"] = _safe_word(state["host"])
        if _is_int(state.get("pid")):
            env["FORENSICS_ROOT_PID"] = str(state["pid"])
    return env


def run_hook(command: str, env: dict[str, str], timeout: float, say) -> dict:
    """Run the user's --on-hang command (its output goes to stderr: stdout is
    the report's). One that outlives `timeout` is ended: it is ours."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], env={**os.environ, **env}, stdout=sys.stderr,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        say(f"--on-hang could not start: {exc.strerror or exc}")
        return {"command": command, "started": False, "error": str(exc)}
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        say(f"--on-hang still runs after {timeout:g} s: ended")
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
    say(f"--on-hang exited {code} after {time.monotonic() - started:.1f} s")
    return {"command": command, "started": True, "exit_code": code,
            "seconds": round(time.monotonic() - started, 3)}


# ---------------------------------------------------------------- the stacks a verdict points at

STACK_FILE = "rank{rank}.pyspy.txt"  # the name `collect` gives a py-spy dump: ingest attributes it by name and pid
_NOT_PERMITTED = ("permission denied", "operation not permitted", "ptrace")


@dataclass
class StackCapture:
    """One stack the watcher tried to dump: the file and its threads as
    read once (the report's renderers only format them), or why there is
    none. Report.captured_stacks holds these."""

    rank: int
    role: str                  # "root_cause" | "waiting"
    pid: int | None
    waits_for: int | None = None  # for "waiting": the root-cause rank
    file: str = ""             # relative to the verdict's folder, when the dump was taken
    threads: tuple = ()        # ThreadStack, as forensics.ingest.pyspy reads the dump
    problem: str = ""          # why it was not taken or read: a key of forensics.report.text.STACK_PROBLEMS
    detail: dict = field(default_factory=dict)  # the values its words name

    def to_json(self) -> dict:
        from ..report.text import stack_problem

        out = {"rank": self.rank, "role": self.role, "pid": self.pid, "file": self.file or None}
        if self.problem:
            out["problem"] = self.problem
            out["problem_text"] = stack_problem(self)
        return out

    def fail(self, problem: str, **detail) -> None:
        self.problem, self.detail = problem, detail


def stack_targets(report, states: dict[int, dict], root: int | None) -> list[tuple[int, str]]:
    """The root-cause rank, and one rank that waits for it: the lowest
    blocked rank whose waits include it, else the lowest other blocked
    culprit, else the lowest other blocked rank."""
    if root is None:
        return []
    blocked = [r for r in sorted(states) if r != root and is_blocked(states[r])]
    waiting = next((r for r in blocked if root in report.analysis.waits_of(r)[0]), None)
    if waiting is None:
        culprits = set(report.culprit_ranks)
        waiting = next((r for r in blocked if r in culprits), blocked[0] if blocked else None)
    return [(root, "root_cause")] + ([(waiting, "waiting")] if waiting is not None else [])


def read_dump(capture: StackCapture, path: str) -> None:
    """The threads of a dump just written, read as `analyze` reads py-spy
    dumps; one it cannot read keeps its file and says why."""
    from ..ingest import pyspy
    from ..ingest.textio import InputError

    try:
        facts = pyspy.parse(path, capture.file)
    except InputError as exc:
        capture.fail("unreadable", said=str(exc))
        return
    capture.threads = tuple(thread for dump in facts.processes for thread in dump.threads)
    if not capture.threads:
        capture.fail("no_thread")


def find_pyspy(explicit: str = "") -> str | None:
    """py-spy on PATH, else beside this Python (a virtualenv not activated); None when absent."""
    def runnable(path):
        return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None

    if explicit:
        return runnable(explicit)
    return runnable(shutil.which("py-spy")) or runnable(os.path.join(os.path.dirname(sys.executable), "py-spy"))


_NONBLOCKING: dict[str, bool] = {}


def pyspy_command(pyspy: str, pid: int) -> list[str]:
    """`py-spy dump --pid PID`, with --nonblocking where this py-spy has it:
    the process is then read, never paused."""
    if pyspy not in _NONBLOCKING:
        try:
            helped = subprocess.run([pyspy, "dump", "--help"], capture_output=True, text=True, timeout=10,
                                    stdin=subprocess.DEVNULL)
            _NONBLOCKING[pyspy] = "--nonblocking" in helped.stdout + helped.stderr
        except (OSError, subprocess.SubprocessError):
            _NONBLOCKING[pyspy] = False
    return [pyspy, "dump", "--pid", str(pid)] + (["--nonblocking"] if _NONBLOCKING[pyspy] else [])


def capture_stacks(targets, states: dict[int, dict], folder: str, pyspy: str | None,
                   timeout: float) -> list[StackCapture]:
    """Dump each target's stack with py-spy into `folder` (both at once);
    nothing else is done to the processes. A dump that outlives `timeout`
    is ended: the py-spy process is ours."""
    here = socket.gethostname()
    captures, running = [], []  # running: the captures py-spy is to dump
    root = next((rank for rank, role in targets if role == "root_cause"), None)
    for rank, role in targets:
        state = states.get(rank)
        pid = state.get("pid") if state else None
        capture = StackCapture(rank, role, pid if _is_int(pid) else None, root if role == "waiting" else None)
        captures.append(capture)
        if state is None:
            capture.fail("no_state")
        elif state.get("alive") is False or state.get("current_op") == "exited":
            capture.fail("exited")
        elif capture.pid is None:
            capture.fail("no_pid")
        elif state.get("host") and state["host"] != here:
            capture.fail("other_host", host=state["host"], here=here)
        elif pyspy is None:
            capture.fail("no_pyspy")
        else:
            running.append(capture)
    dumped = pyspy_dumps(pyspy, [c.pid for c in running], timeout) if running else {}
    for capture in running:
        code, out, err = dumped[capture.pid]
        if code == "cannot_start":
            capture.fail("cannot_start", said=err)
            continue
        if code == "timeout":
            capture.fail("timeout", seconds=f"{timeout:g}")
            continue
        if code == "left_stopped":
            capture.fail("left_stopped", seconds=f"{timeout:g}", state=err.decode())
            continue
        text = out.decode("utf-8", "replace")
        if code == 0 and text.strip():
            os.makedirs(folder, exist_ok=True)
            name = STACK_FILE.format(rank=capture.rank)
            _write_text(os.path.join(folder, name), text)
            capture.file = os.path.join(os.path.basename(folder), name)
            read_dump(capture, os.path.join(folder, name))
            continue
        said = " ".join((err.decode("utf-8", "replace") or text).split())[:300] or "nothing"
        if any(word in said.lower() for word in _NOT_PERMITTED):
            capture.fail("not_permitted", said=said)
        else:
            capture.fail("failed", code=code, said=said)
    return captures


def pyspy_dumps(pyspy: str, pids, timeout: float) -> dict[int, tuple]:
    """`py-spy dump` of every pid at once (pyspy_command: never pausing
    them): {pid: (exit code, stdout, stderr)}, the code "cannot_start"
    (stderr then says why) or "timeout" for a dump that outlived `timeout`
    and was ended (the py-spy process is ours; the kernel detaches it from
    the rank), or "left_stopped" (stderr: the rank's state) when the rank is
    stopped after that and was not before: said, loudly, never hidden."""
    running, done = [], {}
    before = {pid: state_of(pid) for pid in dict.fromkeys(pids)}
    for pid in dict.fromkeys(pids):
        try:
            running.append((pid, subprocess.Popen(pyspy_command(pyspy, pid), stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                                  start_new_session=True)))
        except OSError as exc:
            done[pid] = ("cannot_start", b"", str(exc.strerror or exc))
    deadline = time.monotonic() + timeout
    for pid, proc in running:
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _end(proc)
            after = state_of(pid)
            if after in ("t", "T") and before.get(pid) not in ("t", "T"):
                done[pid] = ("left_stopped", b"", after.encode())
            else:
                done[pid] = ("timeout", b"", b"")
            continue
        done[pid] = (proc.returncode, out, err)
    return done


def _end(proc) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.communicate(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------- the watcher

class Watcher:
    def __init__(self, options: WatchOptions):
        self.o = options
        self.say = options.echo or (lambda line: None)
        self.store = None
        self.states: dict[int, dict] = {}
        self.seen: int | None = None
        self.bucket_seen: list[int] = []
        self.resync = True
        self.changed_at = time.monotonic()
        self.changed_wall = time.time()
        self.judged_stuck_at: float | None = None
        self.last_sweep = time.monotonic()
        self.complaints: dict[int, str] = {}
        self.down_since: float | None = None
        self.answered = False               # the store has answered at least once
        self.reported: set = set()
        self.verdicts: list[Verdict] = []
        self.plugins = options.plugins
        self.current = os.path.join(options.out, "current")
        self.blocked: set[int] = set()      # ranks whose state is a call in progress
        self.moved_ranks: set[int] = set()  # ranks that moved since the last judgement
        self.full_due = False               # a part was judged alone: judge everything once changes pause
        self.last_full = 0.0
        self.window: list[dict] = []        # rounds sampled since the last change (progress_document's)
        self.judged_window: dict | None = None  # progress.json of the last stuck judgment

    # -- the store

    def connect(self) -> bool:
        try:
            self.store = open_store(self.o.store, serve=self.o.serve, timeout=2.0)
        except StoreDown as exc:
            if self.o.serve:
                raise ValueError(f"cannot serve {self.o.store}: {exc}") from None
            self.lost(exc)
            return False
        return True

    def lost(self, exc) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            if not self.answered:
                self.say(f"waiting for {self.o.store} to answer ({exc})")
            else:
                self.say(f"{self.o.store} does not answer ({exc}): retrying; "
                         f"states from before are kept, nothing is judged until it answers")
        self.resync = True
        if self.store is not None and hasattr(self.store, "connect"):
            self.store = None  # a TCPStore client does not reconnect by itself

    def back(self) -> None:
        if self.down_since is not None:
            waited = time.monotonic() - self.down_since
            if self.answered:
                self.say(f"{self.o.store} answers again after {waited:.0f} s: reading every rank again")
            else:
                self.say(f"{self.o.store} answers, after {waited:.0f} s of waiting: reading every rank")
            self.down_since = None
            self.changed_at, self.changed_wall = time.monotonic(), time.time()  # the outage is no progress lost
        self.answered = True

    # -- reading

    def poll(self) -> bool:
        """Read what changed; True when some rank moved."""
        store, world = self.store, self.o.world_size
        count = store.changes()
        nbuckets = min(world, BUCKETS)
        if self.resync or self.seen is None or count < self.seen:
            self.bucket_seen = store.buckets(nbuckets)
            fresh = store.read(range(world))
            again = self.seen is not None
            self.seen, self.resync = count, False
            self.last_sweep = time.monotonic()
            lost = sorted(r for r in self.states if r not in fresh)
            if again and lost:
                self.say(f"the store came back without the state of rank {compact(lost)} (a restarted Redis is "
                         "empty): silent until their agents publish again")
            return self.absorb(fresh, range(world), quiet=again)
        if count != self.seen:
            buckets = store.buckets(nbuckets)
            moved = [b for b, (now, before) in enumerate(zip(buckets, self.bucket_seen)) if now != before]
            self.bucket_seen, self.seen = buckets, count
            ranks = [r for b in moved for r in range(b, world, BUCKETS)]
            return self.absorb(store.read(ranks), ranks) if ranks else False
        if store.ttl and self.states and time.monotonic() - self.last_sweep > store.ttl / 3:
            # Redis: a state that expired (its rank died or froze) changes no counter
            self.last_sweep = time.monotonic()
            ranks = sorted(self.states)
            return self.absorb(store.read(ranks), ranks)
        return False

    def absorb(self, values: dict[int, bytes], ranks, quiet: bool = False) -> bool:
        moved = False
        for rank in ranks:
            raw = values.get(rank)
            before = self.states.get(rank)
            if raw is None:
                if before is not None:
                    del self.states[rank]
                    self.blocked.discard(rank)
                    self.moved_ranks.add(rank)
                    moved = True
                    if self.store.ttl and not quiet:
                        self.say(f"rank {rank}: its state expired ({RANK_TTL_S} s without a word): silent")
                continue
            try:
                state = parse_state(raw)
            except NotAState as exc:
                if self.complaints.get(rank) != str(exc):
                    self.complaints[rank] = str(exc)
                    self.say(f"rank {rank} published something that is not a state ({exc}): ignored")
                if before is not None:
                    del self.states[rank]
                    self.blocked.discard(rank)
                    self.moved_ranks.add(rank)
                    moved = True
                continue
            self.complaints.pop(rank, None)
            self.states[rank] = state
            if position(state) != position(before):
                moved = True
                self.moved_ranks.add(rank)
                if is_blocked(state):
                    self.blocked.add(rank)
                else:
                    self.blocked.discard(rank)
        if moved:
            self.changed_at, self.changed_wall = time.monotonic(), time.time()
            self.judged_stuck_at = None
            self.window = []
        return moved

    # -- judging

    def warm_up(self) -> None:
        """Import the engine and run it once, so the first verdict does not wait for imports."""
        from ..analysis import prepare
        from ..plugins import Plugins

        if self.plugins is None:
            self.plugins = Plugins()
        prepare(self.plugins)
        folder = os.path.join(self.o.out, "warm-up")
        self.write_snapshots(folder, {0: {"current_op": "send", "peers": [1], "group": "0"},
                                      1: {"current_op": "send", "peers": [0], "group": "0"}}, None)
        self.analyze(folder)
        shutil.rmtree(folder, ignore_errors=True)

    def write_snapshots(self, folder: str, states: dict, window: dict | None, part: bool = False) -> None:
        """snapshot.json, and with `window` (judged stuck) progress.json: what
        forensics collect --snapshots writes, read by the same reader."""
        os.makedirs(folder, exist_ok=True)
        now = time.time()
        _write_text(os.path.join(folder, "snapshot.json"), snapshot_text(snapshot(states, now, part)))
        path = os.path.join(folder, PROGRESS_FILE)
        if window is not None:
            _write_json(path, window)
        elif os.path.exists(path):
            os.remove(path)

    # -- the window a stuck judgment covers

    def sample(self) -> dict:
        """One round of the window, as forensics collect takes it, of the
        ranks of this host in no call (the ones the waiting ranks may wait
        for, MAX_SAMPLED at most): a py-spy dump of each (read for its main
        thread's position, then removed), its CPU time, its main thread's
        wakeups and the size of its output. Ranks in a call are placed by
        their agents' states instead (`window_document`)."""
        here = socket.gethostname()
        pyspy = find_pyspy(self.o.pyspy)
        targets = [(rank, state["pid"]) for rank, state in sorted(self.states.items())
                   if not is_blocked(state) and state.get("alive") is not False
                   and state.get("current_op") != "exited" and _is_int(state.get("pid"))
                   and state.get("host", here) == here][:MAX_SAMPLED]
        folder = os.path.join(self.o.out, "window")
        dumps = pyspy_dumps(pyspy, [pid for _, pid in targets], self.o.stack_timeout) \
            if pyspy is not None and targets else {}
        ranks = {}
        for rank, pid in targets:
            facts = _proc_facts(pid)
            seen = {"threads": {t: v["utime"] + v["stime"] for t, v in facts["threads"].items()}, "stack": "",
                    "switches": _main_switches(pid), "output": _output_size(pid)}
            code, out, _ = dumps.get(pid, (None, b"", b""))
            if code == 0 and out.strip():
                os.makedirs(folder, exist_ok=True)
                path = os.path.join(folder, STACK_FILE.format(rank=rank))
                _write_text(path, out.decode("utf-8", "replace"))
                seen["stack"], seen["position"] = _fingerprint(path), stack_position(path)
                os.remove(path)
            ranks[rank] = seen
        with contextlib.suppress(OSError):
            os.rmdir(folder)
        return {"time": time.time(), "ranks": ranks}

    def window_document(self, states: dict[int, dict]) -> dict:
        """progress.json of the window since the last change: its first round
        the states at that change (no rank moved since, so they are today's),
        then the rounds sampled; each rank in a call placed by its agent's
        state in every round."""
        rounds = [{"time": self.changed_wall, "ranks": {}}] + self.window
        for round_ in rounds:
            for rank, state in states.items():
                if is_blocked(state):
                    round_["ranks"][rank] = agent_round(state)
        pids = [(rank, state.get("pid") if _is_int(state.get("pid")) else None)
                for rank, state in sorted(states.items())]
        return progress_document(pids, rounds, self.o.stuck_after / 2, self.o.stuck_after, "forensics watch")

    def analyze(self, folder: str):
        from .. import analyze

        return analyze(folder, plugins=self.plugins, jobs=1)

    def closure(self, start) -> set[int] | None:
        """Every rank the newly blocked ones among `start` can be waiting for,
        directly or through others (a P2P call: its peer; a collective: every
        member of its group), or None when that is not bounded (a group
        whose members are unknown) or is most of the job. A deadlock formed
        by this change lies within it, and only these states decide it."""
        todo = [r for r in start if r in self.blocked]
        seen: set[int] = set()
        groups: set = set()
        limit = len(self.states) // 2
        while todo:
            rank = todo.pop()
            if rank in seen:
                continue
            seen.add(rank)
            if len(seen) > limit:
                return None
            if rank not in self.blocked:
                continue
            state = self.states[rank]
            if state.get("current_op") in P2P_OPS and state.get("peers"):
                todo.extend(p for p in state["peers"] if p not in seen)
                continue
            members, name = state.get("group_ranks"), state.get("group")
            if members is None:
                return None
            if name not in groups:
                groups.add(name)
                todo.extend(p for p in members if p not in seen)
        return seen

    def judge(self, stuck: bool):
        """Judge what changed. On a large job, first the part of it a new
        deadlock would lie in (milliseconds, not a second); the whole job
        once no rank moved for QUIET_S, or every FULL_EVERY_S."""
        changed, self.moved_ranks = self.moved_ranks, set()
        if not stuck and len(self.states) > SUBSET_FROM:
            self.full_due = True
            part = self.closure(changed)
            return self.judge_states(part, False) if part else None
        return self.judge_all(stuck)

    def judge_all(self, stuck: bool = False):
        self.moved_ranks = set()
        self.full_due = False
        self.last_full = time.monotonic()
        return self.judge_states(None, stuck)

    def judge_states(self, part: set[int] | None, stuck: bool):
        from ..analysis import PROBLEM_VERDICTS

        states = dict(self.states) if part is None else {r: self.states[r] for r in part if r in self.states}
        window = None
        if stuck:
            if not self.window:  # nothing sampled halfway (the watcher came late): two rounds now
                self.window.append(self.sample())
            self.window.append(self.sample())
            window = self.window_document(states)
            self.window = []
        self.judged_window = window
        self.write_snapshots(self.current, states, window, part is not None)
        report = self.analyze(self.current)
        if stuck:
            self.judged_stuck_at = time.monotonic()
        if report.verdict not in PROBLEM_VERDICTS:
            return None
        key = (report.verdict, tuple(report.culprit_ranks),
               tuple(position(states.get(r)) for r in report.culprit_ranks))
        if key in self.reported:
            return None
        self.reported.add(key)
        return self.record(report, states, part is not None)

    def record(self, report, states, part: bool = False) -> Verdict:
        from ..report import formats

        detected = time.time()
        folder = self.next_folder()
        shutil.copytree(self.current, os.path.join(folder, "snapshots"))
        if part:  # judged on a part of the job: every rank's state beside it, for the record
            os.makedirs(os.path.join(folder, "all-ranks"))
            _write_text(os.path.join(folder, "all-ranks", "snapshot.json"),
                        snapshot_text(snapshot(self.states, detected)))
        entered = [states[r].get("entered_at") for r in report.culprit_ranks
                   if r in states and is_blocked(states[r])]
        last_entered = max(entered) if entered and len(entered) == len(report.culprit_ranks) \
            and all(e is not None for e in entered) else None
        root = root_cause_rank(report.culprit_ranks, states)
        captures = capture_stacks(stack_targets(report, states, root), states, os.path.join(folder, "stacks"),
                                  find_pyspy(self.o.pyspy), self.o.stack_timeout)
        report.captured_stacks = captures
        verdict = Verdict(report, folder, root, detected, last_entered)
        rendered = formats(self.plugins)
        for name, filename in (("json", "report.json"), ("html", "report.html")):
            try:
                text = rendered[name].render(report, "en")
            except Exception as exc:  # noqa: BLE001 - a report we cannot render is said, the watch goes on
                self.say(f"could not write {filename}: {type(exc).__name__}: {exc}")
                continue
            _write_text(os.path.join(folder, filename), text)
        progress = describe_progress(root, states, report.culprit_ranks, self.judged_window) \
            if root is not None else ""
        verdict.summary = {
            "schema": VERDICT_SCHEMA, "verdict": report.verdict, "culprit_ranks": list(report.culprit_ranks),
            "root_cause_rank": root, "root_cause_progress": progress,
            "culprit_processes": [{"rank": r, "host": (states.get(r) or {}).get("host"),
                                   "pid": (states.get(r) or {}).get("pid")} for r in report.culprit_ranks],
            "done": {str(r): s.get("done") for r, s in sorted(states.items()) if r in report.culprit_ranks},
            "detected_at": detected, "last_culprit_entered_at": last_entered, "latency_ms": verdict.latency_ms,
            "judged_stuck": os.path.exists(os.path.join(folder, "snapshots", PROGRESS_FILE)),
            "stuck_after_s": self.o.stuck_after, "store": self.o.store, "world_size": self.o.world_size,
            "ranks_with_state": len(self.states), "ranks_judged": len(states),
            "stacks": [c.to_json() for c in captures],
        }
        _write_json(os.path.join(folder, "verdict.json"), verdict.summary)
        who = f"rank {compact(report.culprit_ranks)}" if report.culprit_ranks else "no rank named"
        line = f"{report.verdict}: culprit {who}"
        if root is not None:
            line += f"; root-cause rank {root} (least progress: {progress})"
        if verdict.latency_ms is not None:
            line += f"; {verdict.latency_ms:.0f} ms after the last culprit entered its call"
        if part:
            line += f"; judged on the {len(states)} rank(s) the culprits can wait for (every rank: all-ranks/)"
        self.say(f"{line}; reports in {folder}")
        for capture in captures:
            self.say(f"rank {capture.rank}'s stack: {os.path.join(folder, capture.file)}" if not capture.problem else
                     f"rank {capture.rank}'s stack was not dumped: {capture.to_json()['problem_text']}")
        if self.o.on_hang:
            hook = run_hook(self.o.on_hang, hook_environment(verdict, states, self.o.store), self.o.hook_timeout,
                            self.say)
            verdict.summary["on_hang"] = hook
            _write_json(os.path.join(folder, "verdict.json"), verdict.summary)
        self.verdicts.append(verdict)
        if self.o.on_verdict is not None:
            self.o.on_verdict(verdict)
        return verdict

    def next_folder(self) -> str:
        n = len(self.verdicts) + 1
        while os.path.exists(os.path.join(self.o.out, f"hang-{n}")):
            n += 1
        return os.path.join(self.o.out, f"hang-{n}")

    # -- the loop

    def run(self) -> list[Verdict]:
        started = time.monotonic()
        self.connect()  # a missing client library (ValueError) stops here, before anything is written
        os.makedirs(self.o.out, exist_ok=True)
        self.warm_up()
        self.say(f"watching {self.o.store} for {self.o.world_size} rank(s); reports go to {self.o.out}")

        def going():
            if self.o.stop is not None and self.o.stop.is_set():
                return False
            return not self.o.timeout or time.monotonic() - started < self.o.timeout

        while going():
            if self.store is None and not self.connect():
                time.sleep(1)
                continue
            try:
                moved = self.poll()
            except StoreDown as exc:
                self.lost(exc)
                time.sleep(1)
                continue
            self.back()
            blocked = bool(self.blocked)
            now = time.monotonic()
            stuck = blocked and now - self.changed_at >= self.o.stuck_after and self.judged_stuck_at is None
            if blocked and not stuck and not self.window and self.judged_stuck_at is None \
                    and now - self.changed_at >= self.o.stuck_after / 2:
                self.window.append(self.sample())  # halfway: where the ranks in no call are
            due = self.full_due and (now - self.changed_at >= QUIET_S or now - self.last_full >= FULL_EVERY_S)
            if blocked and (moved or stuck or due):
                verdict = self.judge_all() if due and not stuck else self.judge(stuck)
                if verdict is not None and not self.o.keep_watching:
                    return self.verdicts
            elif not moved:
                time.sleep(self.o.poll)
            if self.judged_stuck_at is not None and now - self.judged_stuck_at >= self.o.stuck_after:
                self.judged_stuck_at = None  # still stuck and undecided: look again after another period
        return self.verdicts


def watch(options: WatchOptions) -> list[Verdict]:
    """Watch until a verdict (or, keeping watching, until the timeout or
    `stop`); the verdicts found, in order."""
    if options.world_size < 1:
        raise ValueError(f"--world-size must be at least 1, not {options.world_size}")
    parse_store(options.store)
    return Watcher(options).run()


PROGRESS_FILE = "progress.json"


def agent_round(state: dict) -> dict:
    """A rank in a call, as a round of progress_document: placed by its
    agent's state (the call and the stack it published), which is the same
    in every round of a window in which nothing moved."""
    frames = []
    for label in state.get("stack") or ():
        function, _, where = label.rpartition(" (")
        file, _, line = where.rstrip(")").rpartition(":")
        frames.append([function or label, file, int(line) if line.isdigit() else 0])
    op = state.get("current_op", "")
    if not frames:  # no stack published: the call itself is the place
        frames = [[op, "", 0]]
    place = {"activity": "blocked", "op": op, "why": "", "frames": frames}
    return {"stack": json.dumps([position(state), frames]), "position": place}


def snapshot_text(value: dict) -> str:
    """One rank per line, so the evidence of a report cites the rank's own line."""
    head = {k: v for k, v in value.items() if k != "ranks"}
    lines = [json.dumps(head)[:-1] + ', "ranks": {']
    ranks = list(value["ranks"].items())
    for i, (rank, state) in enumerate(ranks):
        lines.append(f"  {json.dumps(rank)}: {json.dumps(state)}" + ("," if i < len(ranks) - 1 else ""))
    lines.append("}}")
    return "\n".join(lines) + "\n"


def _write_json(path: str, value) -> None:
    _write_text(path, json.dumps(value, indent=1) + "\n")


def _write_text(path: str, text: str) -> None:
    from .. import atomic

    atomic.write(path, text)
