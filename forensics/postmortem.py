"""The job that already crashed: one timeline, first cause versus knock-on.

By the time most incidents reach an engineer every rank has ended: one was
OOM-killed, the others timed out waiting for it and aborted, the launcher
stopped the rest. A death that followed the hang is not why it hung. This
step judges how each rank ended — a cause (killed, crashed, its own error)
or a knock-on (an abort after its own timeout, a peer's closed socket, the
launcher's SIGTERM) — and, for the wait analysis, puts a knock-on rank back
where it was before it ended: a rank that timed out waiting in an
all_reduce still waits there, and one that the launcher stopped while it
loaded data is the missing rank, not a dead one.

It also puts every dated line of every artifact on one clock (`events`):
years filled in from lines that name them, each host's offset estimated from
lines several hosts print at the same moment (an NCCL communicator's init
completing everywhere), and a bound on what is left of the skew, so that
events of two hosts are ordered only where they lie further apart.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import replace

from . import clock
from . import model as m

CAUSE_SIGNALS = frozenset({"SIGKILL", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL"})
KNOCK_ON_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})
_SIGNAL_NUMBERS = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
                   11: "SIGSEGV", 15: "SIGTERM"}
# Causes a line states that are communication failures: what a rank sees
# when another rank is gone or late, never why.
COMM_CAUSES = frozenset({"timeout", "hang", "peer_died", "abort", "missing_rank"})
# What a rank that ended after it ended because of: a communication failure
# (above), or the mismatch or transport fault that made every member fail.
ENDED_BY_COMM = COMM_CAUSES | {"collective_mismatch", "network_fault"}
_EXCEPTION = re.compile(r"(?:^|[\s:\]])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception))(?::|$)")
# Python exceptions c10d raises for communication failures.
COMM_EXCEPTIONS = frozenset({"DistBackendError", "DistError", "DistStoreError", "DistNetworkError",
                             "ChildFailedError"})
DEFAULT_SKEW_S = 5.0   # assumed bound on host clock differences when no line bounds it
MIN_SKEW_S = 0.5       # what an estimate from shared lines is never tighter than
MAX_EVENTS = 2000


def settle(incident: m.Incident) -> m.Incident:
    """The incident with every ending judged, knock-on ranks put back where
    they were, and its events on one clock."""
    from .messages import catalogue

    cat = catalogue()
    hits = [(hit, cat.get(hit.id)) for hit in incident.messages]
    hits = [(h, e) for h, e in hits if e is not None]
    by_rank = _hits_by_rank(incident, hits)
    ranks = dict(incident.ranks)
    for rank, state in incident.ranks.items():
        if state.ending is None or state.ending.role:
            continue
        role, reason = judge(state, by_rank.get(rank, []))
        ending = replace(state.ending, role=role, reason=reason)
        if role == "knock_on":
            position = ending.position
            activity = m.BLOCKED if position is not None and position.state != "completed" else ending.activity
            before = ending.why or (ending.activity if ending.activity != m.UNKNOWN else "where it was is not known")
            ranks[rank] = replace(state, alive=None, activity=activity, current_op=position, ending=ending,
                                  why=f"{before}; ended later ({ending.describe()}), a knock-on")
        else:
            ranks[rank] = replace(state, ending=ending)
    settled = replace(incident, ranks=ranks)
    events, skew = timeline(settled, hits)
    return replace(settled, events=events, skew_s=skew)


def signal_of(ending: m.Ending) -> str:
    if ending.signal:
        return ending.signal
    code = ending.exit_code
    if code is None:
        return ""
    if code < 0:
        return _SIGNAL_NUMBERS.get(-code, "")
    if code > 128:
        return _SIGNAL_NUMBERS.get(code - 128, "")
    return ""


def judge(state: m.RankState, hits) -> tuple[str, str]:
    """("cause" | "knock_on", why) for a rank's ending."""
    ending = state.ending
    signal = signal_of(ending)
    own_error = _own_error(state, hits)
    comm = next(((h, e) for h, e in hits if e.cause in ENDED_BY_COMM or e.knock_on), None)
    if signal in CAUSE_SIGNALS:
        oom = next((e for _, e in hits if e.cause == "oom"), None)
        return "cause", f"killed by {signal}" + (f" ({oom.en})" if oom else "")
    if own_error and not (comm and _before(comm[0].evidence, own_error[1])):
        return "cause", f"its own error: {own_error[0]}"
    if signal in KNOCK_ON_SIGNALS:
        return "knock_on", f"{ending.describe()}: stopped by its launcher or scheduler after another process failed"
    if comm is not None:
        return "knock_on", f"{ending.describe()} after its own communication failure ({comm[1].id}, {comm[0].evidence.cite()})"
    raised = _comm_exception(state)
    if raised is not None:
        return "knock_on", f"{ending.describe()} after a communication error ({raised.cite()})"
    if ending.exit_code == 0 and not signal:
        return "cause", f"{ending.describe()}: it left the job while others still needed it"
    return "cause", f"{ending.describe()}, and nothing it logged before says a peer caused it"


def _own_error(state: m.RankState, hits) -> tuple[str, m.Evidence] | None:
    """The rank's own error, not a communication one: a catalogued crash
    (a CUDA error, an out-of-memory), a failure of its own setup (its store
    server could not listen on the port) or a Python exception the catalogue
    does not know as a communication failure."""
    for hit, entry in hits:
        ends = hit.fact("exit_code") is not None or hit.fact("signal") is not None  # the end itself, not why
        if entry.cause in ("crash", "oom", "config") and entry.blames == "self" and not entry.knock_on and not ends:
            return entry.en, hit.evidence
    known = {(h.evidence.path, h.evidence.line) for h, _ in hits}
    for name, evidence in _exceptions(state):
        if (evidence.path, evidence.line) not in known and name not in COMM_EXCEPTIONS and "Timeout" not in name:
            return evidence.text.strip()[:200], evidence
    return None


def _comm_exception(state: m.RankState) -> m.Evidence | None:
    """An exception c10d raises for a communication failure, in the rank's errors."""
    return next((evidence for name, evidence in _exceptions(state) if name in COMM_EXCEPTIONS), None)


def _exceptions(state: m.RankState):
    """(exception class name, its line) of each exception in the rank's errors."""
    for evidence in state.log_events:
        found = _EXCEPTION.search(evidence.text)
        if found is not None:
            yield found.group(1).rsplit(".", 1)[-1], evidence


def _before(a: m.Evidence, b: m.Evidence) -> bool:
    """Whether line `a` comes before line `b` of the same file."""
    return a.path == b.path and 0 < a.line < b.line


def _hits_by_rank(incident: m.Incident, hits) -> dict[int, list]:
    """Each rank's hits: the ones it printed, and the ones about its pid
    (a kernel's OOM kill names the pid it killed)."""
    pids = defaultdict(list)
    for rank, state in incident.ranks.items():
        if state.pid is not None:
            pids[state.pid].append(rank)
    out: dict[int, list] = defaultdict(list)
    for hit, entry in hits:
        if hit.rank is not None:
            out[hit.rank].append((hit, entry))
            continue
        own = hit.fact("rank") if entry.blames == "peer" and isinstance(hit.fact("peer_rank"), int) else None
        if isinstance(own, int) and own != hit.fact("peer_rank") and own in incident.ranks:
            # an unprefixed line that states its printer's rank and the peer it
            # waited for (`[3] is setting up NCCL communicator and retrieving
            # ncclUniqueId from [0] ...`): the printer's, as stated_cause reads it
            out[own].append((hit, entry))
            continue
        pid = hit.fact("pid") if entry.blames == "self" else None
        owners = pids.get(pid, []) if pid is not None else []
        if len(owners) == 1:
            out[owners[0]].append((hit, entry))
    return out


# ---------------------------------------------------------------- the timeline

def _role(hit, entry) -> str:
    if entry.knock_on or entry.cause in COMM_CAUSES:
        return "knock_on"
    if hit.fact("exit_code") is not None or hit.fact("signal") is not None or entry.blames == "none":
        return "info"  # a launcher's record of an end: the rank's own exit event carries its role
    if entry.cause in ("crash", "oom", "network_fault", "collective_mismatch", "config", "init_failure"):
        return "cause"
    return "info"


def timeline(incident: m.Incident, hits) -> tuple[tuple[m.Event, ...], float | None]:
    """Every dated event, on one clock, and the bound on host skew left."""
    raw: list[tuple[m.Event, str]] = []
    sync: dict[tuple, list] = defaultdict(list)  # a moment several hosts log: (entry, facts) → events
    for hit, entry in hits:
        found = clock.stamp(hit.evidence.text)
        host = hit.host or _host_of(incident, hit.rank)
        pid = hit.pid if hit.pid is not None else (hit.fact("pid") if entry.blames == "self" else None)
        event = m.Event(found[0] if found else None, found[1] if found else "", entry.cause, _role(hit, entry),
                        hit.evidence, host, hit.rank, pid, entry.id)
        if entry.cause == "info" and hit.fact("comm_id") and found:
            sync[(entry.id, hit.fact("comm_id"))].append(event)
        if entry.cause != "info":
            raw.append((event, hit.evidence.path))
    for rank, state in incident.ranks.items():
        ending = state.ending
        if ending is None or ending.evidence is None:
            continue
        found = clock.stamp(ending.evidence.text) or _dated_end(state, hits)
        raw.append((m.Event(found[0] if found else None, found[1] if found else "", "exit", ending.role or "info",
                            ending.evidence, state.host, rank, state.pid, f"{ending.describe()}: {ending.reason}"),
                    ending.evidence.path))
    for signal in incident.stuck:
        if signal.evidence is not None and signal.kind != "cli_hung":
            found = clock.stamp(signal.evidence.text)
            raw.append((m.Event(found[0] if found else None, found[1] if found else "", "stuck", "info",
                                signal.evidence, detail=signal.detail), signal.evidence.path))
    year = _year(e for e, _ in raw)
    offsets, skew = _offsets(sync, year)
    placed = []
    for event, path in raw:
        time, clock_name = event.time, event.clock
        if time is not None and clock_name == "wall-noyear":
            time, clock_name = clock.with_year(time, year), "wall"
        if time is not None and clock_name == "wall":
            time -= offsets.get(event.host, 0.0)
        elif time is not None and clock_name == "boot":
            clock_name = f"boot:{event.host or path}"
        placed.append(replace(event, time=time, clock=clock_name))
    unique = list(dict.fromkeys(_anchored(placed)))
    unique.sort(key=lambda e: (e.time is None, e.clock != "wall", e.time or 0.0, e.evidence.path, e.evidence.line))
    return tuple(unique[:MAX_EVENTS]), skew


def _anchored(events: list[m.Event]) -> list[m.Event]:
    """dmesg counts seconds since its host booted. Where one of its lines
    names a process whose end another artifact dates (the kernel's OOM kill
    of pid N, the launcher's `exitcode: -9 (pid: N)`), the two are one
    moment: that puts every line of that boot clock on the wall clock (the
    launcher notices a death within a second or so: within the skew)."""
    exits = {e.pid: e.time for e in events if e.kind == "exit" and e.clock == "wall" and e.pid is not None
             and e.time is not None}
    offsets: dict[str, float] = {}
    for event in events:
        if event.clock.startswith("boot:") and event.time is not None and event.pid in exits:
            offsets.setdefault(event.clock, exits[event.pid] - event.time)
    if not offsets:
        return events
    return [replace(e, time=e.time + offsets[e.clock], clock="wall") if e.clock in offsets and e.time is not None
            else e for e in events]


def _dated_end(state: m.RankState, hits) -> tuple[float, str] | None:
    """When a rank ended, from a dated line about its pid or by it that
    records an end (the launcher's `failed (exitcode: -9) … (pid: N)`),
    where the line its ending cites carries no time."""
    times = []
    for hit, _ in hits:
        about = (state.pid is not None and hit.fact("pid") == state.pid) or hit.rank == state.rank
        if about and (hit.fact("exit_code") is not None or hit.fact("signal") is not None):
            found = clock.stamp(hit.evidence.text)
            if found is not None:
                times.append(found)
    return min(times) if times else None


def _host_of(incident: m.Incident, rank: int | None) -> str:
    state = incident.ranks.get(rank) if rank is not None else None
    return state.host if state is not None else ""


def _year(events) -> int:
    years = Counter(clock.year_of(e.time) for e in events if e.time is not None and e.clock == "wall")
    return years.most_common(1)[0][0] if years else clock.NOYEAR


def _offsets(sync: dict, year: int) -> tuple[dict[str, float], float]:
    """Each host's clock offset from the first host's, from moments several
    hosts log (median over them), and the skew the estimate leaves (the
    spread of those moments, at least MIN_SKEW_S); DEFAULT_SKEW_S when no
    moment is shared."""
    diffs: dict[str, list[float]] = defaultdict(list)
    reference = None
    for events in sync.values():
        times = {}
        for event in events:
            time = clock.with_year(event.time, year) if event.clock == "wall-noyear" else event.time
            if event.host and event.clock in ("wall", "wall-noyear"):
                times.setdefault(event.host, time)
        if len(times) < 2:
            continue
        reference = reference or min(times)
        if reference not in times:
            continue
        for host, time in times.items():
            diffs[host].append(time - times[reference])
    if not diffs:
        return {}, DEFAULT_SKEW_S
    offsets = {host: statistics.median(values) for host, values in diffs.items()}
    spread = max((max(v) - min(v) for v in diffs.values()), default=0.0)
    return offsets, max(MIN_SKEW_S, spread)


def before(a: m.Event, b: m.Event, skew: float | None) -> bool:
    """Whether `a` surely happened before `b`: on one host (or one boot
    clock) by time, across hosts only by more than the skew bound."""
    if a.time is None or b.time is None or a.clock != b.clock:
        return False
    if a.host == b.host or not a.host or not b.host:
        return a.time < b.time
    return a.time + (skew if skew is not None else DEFAULT_SKEW_S) < b.time


def first_causes(incident: m.Incident) -> list[m.Event]:
    """The cause events nothing else surely precedes: the first failure (or
    several, where clocks cannot tell them apart)."""
    causes = [e for e in incident.events if e.role == "cause" and e.time is not None]
    return [e for e in causes if not any(before(o, e, incident.skew_s) for o in causes if o is not e)]


DECISIVE = 12  # events the text report lists


def decisive(incident: m.Incident, limit: int = DECISIVE) -> list[tuple[m.Event, bool]]:
    """The events worth a line in a report, oldest first, each with whether
    it is (one of) the first failure(s): every cause, every ending, each
    rank's first knock-on and the first stuck signal."""
    first = set(first_causes(incident))
    chosen, seen_ranks, stuck = [], set(), False
    for event in incident.events:
        keep = event.role == "cause" or event.kind == "exit"
        if not keep and event.role == "knock_on" and (event.rank, event.host) not in seen_ranks:
            keep = True
            seen_ranks.add((event.rank, event.host))
        if not keep and event.kind == "stuck" and not stuck:
            keep = stuck = True
        if keep:
            chosen.append((event, event in first))
    if len(chosen) > limit:  # the first failures always stay
        firsts = [c for c in chosen if c[1]]
        chosen = firsts + [c for c in chosen if not c[1]][:max(0, limit - len(firsts))]
        chosen.sort(key=lambda c: incident.events.index(c[0]))
    return chosen


def when(event: m.Event) -> str:
    """`04:13:43.123` (UTC of the corrected wall clock), `+123.457 s since boot`, or `?`."""
    import time

    if event.time is None:
        return "?"
    if event.clock == "wall":
        stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime(event.time))
        return f"{stamp}.{int(round((event.time % 1) * 1000)) % 1000:03d}"
    return f"+{event.time:.3f} s since boot"
