"""Log records (NCCL, c10d, launcher) into rank states and process groups.

Logs say which calls a process issued and how far each group got; stack
dumps say where its main thread is now. When both exist the dump decides
where the rank is and the log adds what a dump cannot know: the group and
sequence number of that call, per-group progress, errors, and how the
process ended. A rank known only from logs sits in its last logged call.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from .. import model as m
from ..model import Diagnostic, GroupProgress, ProcessGroup, ProcessRecord
from ..ranges import compact

PEER_CLAIM = "torch-peer-claim"  # what one rank's log says another rank is doing


def groups_from_comms(comm_members, pid_rank) -> tuple[dict[str, ProcessGroup], list[Diagnostic]]:
    """NCCL communicators as process groups of global ranks.

    `comm_members`: (group id, rank in the communicator, size, host, pid,
    evidence) from init lines; `pid_rank(host, pid)` gives the global rank.
    """
    by_group: dict[str, dict[int, int | None]] = defaultdict(dict)
    sizes: dict[str, int] = {}
    cited: dict[str, m.Evidence] = {}
    diagnostics = []
    for group, comm_rank, size, host, pid, evidence in comm_members:
        sizes[group] = size
        cited[group] = evidence
        by_group[group][comm_rank] = pid_rank(host, pid)
    groups = {}
    for group, members in by_group.items():
        size = sizes[group]
        if not m.plausible_rank(size - 1):
            where = cited.get(group)
            diagnostics.append(Diagnostic(where.path if where else "", where.line if where else 0,
                                          f"communicator {group}: a size of {size} ranks is not believed "
                                          f"(at most {m.MAX_RANKS:,}); its members are not listed", "warning"))
            continue
        known = [members.get(i) for i in range(size)]
        if all(r is not None for r in known):
            groups[group] = ProcessGroup(group, "", tuple(known))
        else:
            missing = [i for i, r in enumerate(known) if r is None]
            diagnostics.append(Diagnostic("", 0, f"communicator {group}: {len(missing)} of {size} members "
                                                  f"not seen in any init line or pid map; its members are partly unknown",
                                          "info"))
            if not missing or len(missing) < size:
                groups[group] = ProcessGroup(group, "", tuple(r for r in known if r is not None))
    return groups, diagnostics


def global_peers(op: m.CommOp | None, groups: dict[str, ProcessGroup]) -> m.CommOp | None:
    """NCCL names send/recv peers by their rank in the communicator."""
    if op is None or not op.peers or not op.group.startswith("nccl:"):
        return op
    group = groups.get(op.group)
    if group is None or not group.ranks:
        return op
    mapped = tuple(group.ranks[p] for p in op.peers if 0 <= p < len(group.ranks))
    return replace(op, peers=mapped) if len(mapped) == len(op.peers) else op


def state_from_records(rank: int, records: list[ProcessRecord], existing: m.RankState | None,
                       groups: dict[str, ProcessGroup]) -> m.RankState:
    own = [r for r in records if r.source != PEER_CLAIM]
    claims = own or records  # another rank's word only when this rank's own logs are silent
    # The call a rank is in: the latest one any record shows not completed
    # (Flight Recorder's newest entry may be a finished helper all_gather).
    ops = [r.last_op for r in claims if r.last_op is not None]
    last = next((op for op in reversed(ops) if op.state != "completed"), ops[-1] if ops else None)
    last = global_peers(last, groups)
    progress: dict[str, GroupProgress] = dict(existing.progress) if existing else {}
    for record in records:
        for group, counters in record.progress.items():
            progress[group] = _max_progress(progress.get(group), counters)
    events = tuple(e for r in records for e in r.errors)
    history = _history(claims, groups)
    # The record that says how it ended (a launcher's exit code or signal) over one that only says it did.
    died = next((r for r in records if r.alive is False and (r.exit_code is not None or r.signal)),
                next((r for r in records if r.alive is False), None))
    pid = next((r.pid for r in records if r.pid is not None), None)
    host = next((r.host for r in records if r.host), "")
    identity = next((r.evidence for r in claims if r.evidence is not None), None)

    if existing is None or existing.activity == m.UNKNOWN:
        activity, current = m.UNKNOWN, None
        if last is not None and last.state != "completed":
            activity, current = m.BLOCKED, _unidentified(last)
        alive = ending = None
        # where the records leave it (before any end they state), they never show these calls
        blind = tuple(dict.fromkeys(kind for r in claims for kind in r.unrecorded)) if activity == m.UNKNOWN else ()
        if died is not None:
            ending = _ending(died, activity, current, _why(last, None))
            activity, alive, current = m.EXITED, False, None
        why = _why(last, died)
        if blind:
            why += f" (these records never show a {'/'.join(blind)})"
        return m.RankState(rank=rank, host=host, pid=pid, alive=alive, activity=activity,
                           current_op=current, progress=progress, log_events=events, history=history,
                           evidence=(last.evidence if last is not None and last.evidence else identity),
                           why=why, ending=ending, unrecorded=blind)

    updates = {"progress": progress, "log_events": existing.log_events + events,
               "history": existing.history + history}
    if not existing.pid and pid is not None:
        updates["pid"] = pid
    if not existing.host and host:
        updates["host"] = host
    current = existing.current_op
    if current is not None and last is not None and _same_call(current, last) and (
            last.state != "completed" or current.state == "completed"):
        # The dump says where it is; the log says which group and which seq.
        # (Not from a call the log saw complete: the dump's is a later one.)
        updates["current_op"] = joined = _joined(current, last)
        _name_group(groups, joined.group, current.group)
    elif (current is None and last is not None and last.state != "completed" and existing.activity in _RAN_AHEAD
          and any(r.timed_out for r in own)):
        # The rank's own watchdog says it is stuck in this call while its main
        # thread is elsewhere: NCCL calls return at once, the host runs on
        # (into .item(), the next batch) and the call waits on the GPU.
        updates.update(activity=m.BLOCKED, current_op=last,
                       why=f"{existing.why}; its own watchdog says it is still in {last.op}"
                           + (f" #{last.seq}" if last.seq is not None else "") + " (the host ran ahead of the call)")
    known = existing.ending
    if known is not None and known.position is not None and last is not None and _same_call(known.position, last):
        # a stack at the end says where; the log, which group and which seq
        updates["ending"] = replace(known, position=_joined(known.position, last))
    if died is not None:  # a stack dump taken earlier shows where it was; the launcher, that it ended after
        before = updates.get("current_op", existing.current_op)
        ending = _ending(died, existing.activity, before, existing.why)
        known = updates.get("ending", existing.ending)
        if known is not None:  # a stack dump taken as it ended knows where it was
            ending = replace(ending, signal=ending.signal or known.signal, position=ending.position or known.position,
                             activity=known.activity if ending.activity == m.UNKNOWN else ending.activity,
                             why=known.why or ending.why)
        updates.update(alive=False, activity=m.EXITED, current_op=None, why=_why(last, died), ending=ending)
    return replace(existing, **updates)


def _history(records: list[ProcessRecord], groups) -> tuple[m.CommOp, ...]:
    """Recent calls of all records, one per (group, seq, op), in record order."""
    seen = set()
    out = []
    for record in records:
        for op in record.recent_ops + ((record.last_op,) if record.last_op is not None else ()):
            key = (m.group_id(op.group), op.seq, op.op, op.state)
            if key in seen:
                continue
            seen.add(key)
            out.append(_unidentified(global_peers(op, groups)))
    return tuple(out)


def _unidentified(op: m.CommOp) -> m.CommOp:
    """An NCCL communicator known only by one process's pointer (no init
    line with a commId) has members nobody can name from the log: its calls
    go on an unidentified group (`?nccl-comm:<host>:<pid>:<pointer>`), so
    no rule takes them for calls on the world that nobody else joined.
    ingest/communicators.py (in merge) tells which of them are one communicator."""
    return replace(op, group=m.UNIDENTIFIED_GROUP + op.group) if op.group.startswith("nccl-comm:") else op


def _same_call(a: m.CommOp, b: m.CommOp) -> bool:
    """Whether a dump's call `a` and a log's or Flight Recorder's `b` can be
    one call: the same op, on the same group where both say which (a dump
    that cannot tell, or knows the group only by its address, matches any)."""
    if a.op in ("comm", "") or b.op in ("comm", ""):
        return True
    if a.op != b.op:
        return False
    if not a.group_known or not b.group_known:
        return True
    if (m.group_id(a.group) != m.group_id(b.group) and not a.group.startswith(m.UNIDENTIFIED_GROUP)
            and not b.group.startswith("nccl")):
        return False
    return True


def _name_group(groups: dict[str, ProcessGroup], gid: str, seen_as: str) -> None:
    """A group a stack dump knew by the variable that holds it (`?ckpt`)
    and a log or Flight Recorder by its id: the id keeps the variable's
    name where nothing else names it."""
    label = seen_as[len(m.UNIDENTIFIED_GROUP):] if seen_as.startswith(m.UNIDENTIFIED_GROUP) else ""
    if not label or label.startswith("0x") or gid == seen_as or gid.startswith(m.UNIDENTIFIED_GROUP):
        return
    known = groups.get(gid)
    if known is None:
        groups[gid] = ProcessGroup(gid, label, ())
    elif not known.name or known.name == "undefined":
        groups[gid] = replace(known, name=label)


def _named(op: m.CommOp) -> bool:
    return op.group_known and not op.group.startswith(m.UNIDENTIFIED_GROUP)


def _max_progress(a: GroupProgress | None, b: GroupProgress) -> GroupProgress:
    if a is None:
        return b

    def top(x, y):
        return y if x is None else x if y is None else max(x, y)
    return GroupProgress(top(a.enqueued, b.enqueued), top(a.started, b.started),
                         top(a.completed, b.completed), b.evidence or a.evidence)


# What a stack shows of a rank whose asynchronous call may still be pending on the device.
_RAN_AHEAD = frozenset({m.COMPUTING, m.DEVICE_WAIT, m.DATA_LOADING, m.IDLE, m.UNKNOWN})


def _joined(current: m.CommOp, last: m.CommOp) -> m.CommOp:
    """The call a dump shows, with what the log says of the same call: the
    dump says which op and where in the code, the log or Flight Recorder
    which group, which seq, which state. A group the dump does not show,
    or knows only by an object's address, is the one the log names."""
    if not current.group_known or (current.group.startswith(m.UNIDENTIFIED_GROUP) and _named(last)):
        group, known = _unidentified(last).group, last.group_known
    else:
        group, known = current.group or _unidentified(last).group, True
    return replace(current, group=group, group_known=known,
                   record_id=current.record_id if current.record_id is not None else last.record_id,
                   seq=current.seq if current.seq is not None else last.seq,
                   sizes=current.sizes or last.sizes, dtype=current.dtype or last.dtype,
                   numel_in=current.numel_in if current.numel_in is not None else last.numel_in,
                   numel_out=current.numel_out if current.numel_out is not None else last.numel_out,
                   timeout_ms=current.timeout_ms or last.timeout_ms,
                   elapsed_ms=current.elapsed_ms or last.elapsed_ms)


def _ending(died: ProcessRecord, activity: str, position: m.CommOp | None, why: str = "") -> m.Ending:
    """The end a record states, with where the rank was until then (for
    telling a death that caused the hang from one that followed it)."""
    return m.Ending(died.exit_code, died.signal, died.evidence,
                    activity if activity != m.EXITED else m.UNKNOWN, position, why, inferred=died.inferred)


def _why(last: m.CommOp | None, died: ProcessRecord | None) -> str:
    if died is not None:
        how = f"exit code {died.exit_code}" if died.exit_code is not None else "exited"
        if died.signal:
            how += f" ({died.signal})"
        where = f" [{died.evidence.cite()}]" if died.evidence else ""
        inferred = f" ({died.inferred})" if died.inferred else ""
        return f"process ended: {how}{inferred}{where}"
    if last is None:
        return ""
    seq = f" #{last.seq}" if last.seq is not None else ""
    group = f" on group {last.group}" if last.group else ""
    return f"last logged call: {last.op}{seq}{group}"


FLIGHT_RECORDER = "flight-recorder"


def members_from_numbering(placed: dict[int, list[ProcessRecord]], groups: dict[str, ProcessGroup],
                           world_size: int | None) -> list[Diagnostic]:
    """Members of groups no artifact lists, from the group-local ranks their
    members state (`[rank4]:… [PG … GUID 17(…) Rank 2]`: global 4 is rank 2
    of group 17).

    c10d numbers a group's members in the order of their global ranks, so
    group-local i < j means global g_i < g_j. Each stated pair is a member;
    between two pairs as far apart in both numberings (locals 1 and 4,
    globals 5 and 8) the members in between are the globals in between; below
    the lowest pair, locals 0..i-1 are globals 0..i-1 when that pair is (i, i).
    Above the highest pair nothing is known unless it is the world's last
    rank, so the group is `partial` unless its numbering is pinned from 0 up
    to the world's end. Pairs that contradict each other or that order
    leave the group unknown, with a note."""
    pairs: dict[str, dict[int, set[int]]] = {}
    for rank, records in placed.items():
        for record in records:
            for gid, local in record.group_ranks:
                pairs.setdefault(gid, {}).setdefault(local, set()).add(rank)
    notes = []
    for gid, stated in sorted(pairs.items()):
        known = groups.get(gid)
        if gid == m.DEFAULT_GROUP or (known is not None and known.ranks):
            continue
        if any(len(globals_) > 1 for globals_ in stated.values()):
            notes.append(Diagnostic("", 0, f"group {gid}: one group-local rank is stated by several processes; "
                                           f"its members are not inferred", "warning"))
            continue
        ordered = sorted((local, next(iter(g))) for local, g in stated.items())
        if any(b[1] - a[1] < b[0] - a[0] for a, b in zip(ordered, ordered[1:])):
            notes.append(Diagnostic("", 0, f"group {gid}: the group-local ranks its members state do not follow "
                                           f"their global order; its members are not inferred", "warning"))
            continue
        members = {g for _, g in ordered}
        low_pinned = ordered[0][0] == ordered[0][1]
        if low_pinned:
            members.update(range(ordered[0][0]))
        gaps = True
        for (la, ga), (lb, gb) in zip(ordered, ordered[1:]):
            if gb - ga == lb - la:
                members.update(range(ga + 1, gb))
            else:
                gaps = False
        top = ordered[-1][1]
        complete = low_pinned and gaps and world_size is not None and top == world_size - 1
        name = known.name if known is not None else ""
        groups[gid] = ProcessGroup(gid, name, tuple(sorted(members)), partial=not complete)
        label = f"{gid} ({name})" if name else gid
        notes.append(Diagnostic("", 0, f"group {label}: no artifact lists its members; from the group-local ranks "
                                       f"its members state, rank {compact(sorted(members))} "
                                       f"{'are its members' if complete else 'are members (there may be more)'}",
                                "info"))
    return notes


def infer_members(placed: dict[int, list[ProcessRecord]], groups: dict[str, ProcessGroup], world_size: int | None,
                  known_ranks) -> list[Diagnostic]:
    """Members of the groups no artifact lists, from Flight Recorder dumps.

    Torch with Gloo writes no member lists (its pg_config holds only an
    empty key), and a rank that never called on a group leaves no trace of
    belonging to it. What a dump does prove is who is *not* a member: a
    collective completes only once every member joined it, so a rank whose
    dump holds its whole history (the ring never wrapped: record 0 is still
    there) and no call on a group that completed one is not in that group.
    The members are the job's ranks less those; a rank without such a dump
    stays a possible member. `placed`: the records of each global rank.

    Before that, members from group-local numbers (members_from_numbering)."""
    notes = members_from_numbering(placed, groups, world_size)
    size = world_size if world_size is not None else (max(known_ranks) + 1 if known_ranks else 0)
    if size < 2 or not m.plausible_rank(size - 1):
        return notes
    dumps = {rank: [r for r in records if r.source == FLIGHT_RECORDER] for rank, records in placed.items()}
    dumps = {rank: records for rank, records in dumps.items() if records and 0 <= rank < size}
    completed: dict[str, tuple[int, m.Evidence | None]] = {}  # group → its highest completed collective

    def done(gid: str, seq: int | None, evidence) -> None:
        if seq is not None and seq >= 1 and seq > completed.get(gid, (0, None))[0]:
            completed[gid] = (seq, evidence)

    for records in dumps.values():
        for record in records:
            for gid, counters in record.progress.items():
                done(gid, counters.completed, counters.evidence)
            for op in record.recent_ops:
                if op.state == "completed" and op.is_collective:
                    done(op.group, op.seq, op.evidence)
    for gid in sorted(completed):
        known = groups.get(gid)
        if gid == m.DEFAULT_GROUP or not gid or gid.startswith(m.UNIDENTIFIED_GROUP) or (known and known.ranks):
            continue
        outside = [rank for rank, records in sorted(dumps.items())
                   if any(r.whole_history for r in records) and not any(gid in r.named_groups for r in records)]
        if not outside:
            continue
        members = tuple(r for r in range(size) if r not in outside)
        groups[gid] = ProcessGroup(gid, known.name if known else "", members)
        label = f"{gid} ({groups[gid].name})" if groups[gid].name else gid
        seq, cite = completed[gid]
        notes.append(Diagnostic(cite.path if cite else "", cite.line if cite else 0,
                                f"group {label}: no artifact lists its members; taken as ranks "
                                f"{', '.join(map(str, members))}: the whole Flight Recorder history of rank(s) "
                                f"{', '.join(map(str, outside))} has no call on it, though it completed collective "
                                f"#{seq}, which needs every member", "info"))
    return notes
