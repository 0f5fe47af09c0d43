"""Merge: per-artifact facts into one Incident, one state per global rank."""

from __future__ import annotations

from dataclasses import replace

from .. import model as m
from ..model import Diagnostic, Evidence, Incident, ProcessGroup, StuckSignal
from ..words import stuck_signal
from . import communicators, stacks
from .attribution import (STRONG, PidMap, World, attribute, job_shape, outside_world, path_rank, rank_claims,
                          stated_worlds)
from .facts import Facts
from .records import _joined, groups_from_comms, infer_members, state_from_records


def merge(facts: list[Facts], artifacts: tuple = (), diagnostics=()) -> Incident:
    """Combine per-artifact facts into one state per rank.

    Observations are ordered by the time the artifact says it was taken (then
    by discovery order); the latest says where a rank is, earlier ones fill
    in what it does not say. Two snapshots in which no rank moved are
    evidence that the job is stuck.
    """
    diagnostics = list(diagnostics)
    stuck: list[StuckSignal] = []
    order = sorted(range(len(facts)),
                   key=lambda i: (facts[i].observed_at is None, facts[i].observed_at or 0.0, i))
    ranks: dict[int, m.RankState] = {}
    groups: dict[str, ProcessGroup] = {}
    snapshots: list[Facts] = []
    dumps: list[m.ProcessDump] = []
    records: list[m.ProcessRecord] = []
    comm_members: list = []
    rings: list = []
    stated = PidMap()
    listed: dict[int, tuple[str, int, Evidence]] = {}  # rank → where an artifact says it exists
    messages: dict[tuple, m.MessageHit] = {}  # one hit per (entry, file, line), whichever reader saw it
    last_words: dict[int, m.RankState] = {}  # rank → its consoles' last lines (forensics.ingest.console)
    world = _world_size(facts, diagnostics)
    for index in order:
        item = facts[index]
        diagnostics.extend(item.diagnostics)
        stuck.extend(item.stuck)
        dumps.extend(item.processes)
        records.extend(item.records)
        comm_members.extend(item.comm_members)
        rings.extend(item.rings)
        for hit in item.messages:
            key = (hit.id, hit.evidence.path, hit.evidence.line)
            known = messages.get(key)
            if known is None or _richer(hit, known):
                messages[key] = hit
        for host, pid, rank, evidence in item.pid_ranks:
            if outside_world(world, rank, evidence.path, evidence.line,
                             f"the entry for {host}:{pid}" if host else f"the entry for pid {pid}", diagnostics):
                continue
            stated.add(host, pid, rank, evidence.cite())
            listed.setdefault(rank, (host, pid, evidence))
        for state in item.ranks:
            where = state.evidence
            if outside_world(world, state.rank, where.path if where else item.path, where.line if where else 0,
                             f"this {item.kind}", diagnostics):
                continue
            if state.last_words or state.last_progress is not None:
                _add_last_words(last_words, state)
                if _only_last_words(state):
                    continue
            ranks[state.rank] = _combine(ranks.get(state.rank), state)
        for group in item.groups:
            known = groups.get(group.id)
            if known is None or not known.ranks:
                groups[group.id] = group
            elif (group.ranks and group.ranks is not known.ranks  # shared by every dump: no walk of 16,384 ranks
                  and group.ranks != known.ranks and set(group.ranks) != set(known.ranks)):
                diagnostics.append(Diagnostic(item.path, 0,
                                              f"group {group.id!r} has ranks {list(group.ranks)} here but "
                                              f"{list(known.ranks)} elsewhere: the first is used"))
        if item.kind == "snapshot":
            snapshots.append(item)
    signal = _snapshot_window(snapshots, diagnostics)
    if signal is not None:
        stuck.append(signal)
    placed, unattributed, learned = attribute(dumps, stated, diagnostics, world=world,
                                              shape=job_shape(messages.values(), dumps))
    for rank, rank_dumps in placed.items():
        ranks[rank] = _combine(ranks.get(rank), _state_from_dumps(rank, rank_dumps))
    if records or comm_members:
        _merge_records(records, comm_members, stated, learned, ranks, groups, diagnostics, world)
    if rings:
        _attach_rings(rings, groups)
    for rank, (why, evidence) in rank_claims(messages.values(), world, ranks, diagnostics).items():
        ranks[rank] = m.RankState(rank=rank, why=why, evidence=evidence)
    _keep_last_words(ranks, last_words, listed)
    _add_silent_ranks(ranks, groups, listed, world)
    if world is not None:
        messages = _messages_inside(messages, world, diagnostics)
    _check_references(ranks, groups, diagnostics)
    read = tuple(m.ReadStats(f.path, f.kind, f.lines_read, f.unrecognized) for f in facts)
    stuck.extend(_stated_stuck(messages.values()))
    comm_views = tuple(view for f in facts for view in f.comm_views)
    incident = Incident(ranks=dict(sorted(ranks.items())), groups=groups, artifacts=tuple(artifacts),
                        diagnostics=tuple(diagnostics), stuck=_distinct_signals(stuck),
                        unattributed=tuple(unattributed), read=read,
                        messages=_attribute_messages(messages.values(), stated, ranks),
                        comm_views=comm_views, communicators=communicators.of_views(comm_views))
    return incident  # how each rank ended is judged by the post-mortem stage (analysis.analyze_incident)


MAX_STATED_STUCK = 200
MAX_IMPLIED = 8  # ranks below the highest known one filled in as silent, at least (else as many as are known)
IMPLIED = "it exists"  # what the `why` of a rank known only from rank numbering says


def _stated_stuck(hits) -> list[StuckSignal]:
    """Catalogued lines that prove their printer was stuck in a
    communication call (a watchdog timeout, a monitored barrier failing):
    evidence that the job hangs, whichever reader found the line."""
    from ..messages import catalogue

    cat = catalogue()
    out = []
    for hit in hits:
        entry = cat.get(hit.id)
        if entry is not None and entry.stuck:
            out.append(StuckSignal("stated_stuck", f"{entry.en} ({entry.id})", hit.evidence,
                                   f"{entry.zh}（{entry.id}）"))
            if len(out) >= MAX_STATED_STUCK:
                break
    return out


def _richer(hit: m.MessageHit, other: m.MessageHit) -> bool:
    """Of two readers' hits on one line, the one that says more: a
    structured reader may add facts from the lines around it (the Flight
    Recorder analyzer's report block) and the process that printed it."""
    return (len(hit.facts), hit.rank is not None, bool(hit.host)) > (len(other.facts), other.rank is not None,
                                                                      bool(other.host))


def _distinct_signals(stuck: list[StuckSignal]) -> tuple[StuckSignal, ...]:
    """One stuck signal per line of evidence: the first reader's (a c10d
    log's watchdog line is read by the torch-log reader and by the
    catalogue's both)."""
    seen: set = set()
    out = []
    for signal in stuck:
        key = (signal.evidence.path, signal.evidence.line) if signal.evidence and signal.evidence.line else id(signal)
        if key not in seen:
            seen.add(key)
            out.append(signal)
    return tuple(out)


def _attribute_messages(hits, stated: PidMap, ranks: dict) -> tuple[m.MessageHit, ...]:
    """Each hit with the global rank of the process that printed it, where
    its host:pid is in a pid map or is a rank's own; the rest keep None."""
    by_process = {(s.host, s.pid): r for r, s in ranks.items() if s.pid is not None}
    by_pid: dict[int, set[int]] = {}
    for r, s in ranks.items():
        if s.pid is not None:
            by_pid.setdefault(s.pid, set()).add(r)
    out = []
    for hit in hits:
        if hit.rank is None and hit.pid is not None:
            found = stated.lookup(hit.host, hit.pid)
            rank = found[0] if found else by_process.get((hit.host, hit.pid))
            if rank is None and len(by_pid.get(hit.pid, ())) == 1:
                rank = next(iter(by_pid[hit.pid]))
            if rank is not None:
                hit = replace(hit, rank=rank)
        if hit.rank is None and hit.pid is None:
            # a line without a prefix in `rank3.err` is rank 3's, as the file's process records are
            named = path_rank(hit.evidence.path)
            if named is not None and named.strength == STRONG and named.rank in ranks:
                hit = replace(hit, rank=named.rank)
        out.append(hit)
    return tuple(sorted(out, key=lambda h: (h.evidence.path, h.evidence.line < 0, h.evidence.line)))


def _merge_records(records, comm_members, stated, learned, ranks, groups, diagnostics, world=None) -> None:
    placed, _, learned = attribute(records, stated, diagnostics, learned, world)

    def pid_rank(host, pid):
        found = stated.lookup(host, pid) or learned.lookup(host, pid)
        return found[0] if found else None

    comm_groups, notes = groups_from_comms(comm_members, pid_rank)
    diagnostics.extend(notes)
    for gid, group in comm_groups.items():
        groups.setdefault(gid, group)
    diagnostics.extend(infer_members(placed, groups, world.size if world is not None else None,
                                     set(ranks) | set(placed)))
    for rank in sorted(placed):
        ranks[rank] = state_from_records(rank, placed[rank], ranks.get(rank), groups)


def _world_size(facts: list[Facts], diagnostics: list) -> World | None:
    """The job's world size where an artifact states it: the members of
    the default group (a Flight Recorder dump's pg_config, a snapshot, the
    launcher's `global_world_sizes` or a `WORLD_SIZE` the c10d log reader
    found), a process's or its launcher's own statement (Lightning's
    `MEMBER: M/W`, DeepSpeed's `dist_world_size`) or the largest NCCL
    communicator (NCCL's world, as the NCCL reader takes it for its pid
    map). Sources that disagree: the largest is used (a smaller one may be
    a subgroup's) and a diagnostic says so."""
    stated: list[tuple[int, str]] = []
    highest: dict[int, int] = {}  # by id: 16,384 dumps share one member tuple of 16,384 ranks
    for item in facts:
        for group in item.groups:
            if group.id == m.DEFAULT_GROUP and group.ranks:
                top = highest.get(id(group.ranks))
                if top is None:
                    top = highest[id(group.ranks)] = max(group.ranks)
                stated.append((top + 1, f"the default group's members in {item.path}"))
        stated.extend(stated_worlds(item.messages))
        sizes = [(size, evidence) for _, _, size, _, _, evidence in item.comm_members]
        if sizes:
            size, evidence = max(sizes, key=lambda pair: pair[0])
            stated.append((size, f"NCCL communicator of {size} ranks, {evidence.cite()}"))
    if not stated:
        return None
    size, source = max(stated, key=lambda pair: pair[0])
    smaller = sorted({s for s, _ in stated if s < size})
    if smaller:
        diagnostics.append(Diagnostic("", 0, f"world size {size} ({source}); smaller sizes stated elsewhere "
                                             f"({', '.join(map(str, smaller))}) are taken to be subgroups'", "info"))
    return World(size, source)


def _messages_inside(messages: dict, world: World, diagnostics: list) -> dict:
    """Catalogued lines whose prefix names a rank beyond the world keep no
    rank (one diagnostic per file)."""
    told: set[str] = set()
    out = {}
    for key, hit in messages.items():
        if hit.rank is not None and world.excludes(hit.rank):
            path = hit.evidence.path
            if path not in told:
                told.add(path)
                outside_world(world, hit.rank, path, hit.evidence.line, "this line's prefix", diagnostics)
            hit = replace(hit, rank=None)
        out[key] = hit
    return out


def _add_silent_ranks(ranks: dict, groups: dict, listed: dict, world: World | None = None) -> None:
    """Ranks an artifact says exist (a pid map, a launcher's summary, NCCL
    init lines, a group's member list) but nothing describes: the rank
    everyone may be waiting for sent nothing at all. Each gets a state with
    no call and no activity, citing what lists it, so the waits of its
    group reach it and the report names it.

    Global ranks run from 0: a rank K that an artifact describes proves
    ranks 0 to K exist, the lower ones too (one rank's timeout pasted from
    a merged log shows it waited for ranks that printed nothing). Only a few
    such gaps are filled: many would mean the numbers are not ranks. No
    rank at or beyond a known world size is added."""
    members = {r for group in groups.values() for r in group.ranks}
    if world is not None:
        members = {r for r in members if not world.excludes(r)}
    known = set(listed) | members | set(ranks)
    top = max(known) if known else -1
    # How many ranks below the highest are missing, counted without listing
    # them: the highest may be a number no job has (a corrupt file).
    gaps = top + 1 - sum(1 for r in known if 0 <= r <= top) if top >= 0 else 0
    implied = (set(range(top + 1)) - known
               if 0 < gaps <= max(MAX_IMPLIED, len(known)) and m.plausible_rank(top) else set())
    for rank in sorted((set(listed) | members | implied) - set(ranks)):
        if not m.plausible_rank(rank):
            continue
        host, pid, evidence = listed.get(rank, ("", None, None))
        if evidence:
            where = f"; {evidence.cite()} lists it"
        elif rank in members:
            where = "; a process group lists it as a member"
        else:
            where = f"; {IMPLIED} because rank {max(known)} does (global ranks run from 0)"
        ranks[rank] = m.RankState(rank=rank, host=host, pid=pid, evidence=evidence,
                                  why="no artifact describes this rank (no stack dump, log or dump of its own)"
                                      + where + (f" as pid {pid}" if pid is not None else ""))


LAST_PRINTED = "last printed"  # the `why` of a rank known only from its console's last lines
MAX_LAST_WORDS = 10  # a rank's last lines kept over all its consoles


def _add_last_words(found: dict, state: m.RankState) -> None:
    """A console's last lines and progress line for its rank, joined with
    those of the rank's other consoles: the lines kept in file order, the
    progress line whose time is latest (else the one read last)."""
    known = found.get(state.rank)
    if known is None:
        found[state.rank] = m.RankState(rank=state.rank, last_words=state.last_words,
                                        last_progress=state.last_progress)
        return
    progress = known.last_progress
    if state.last_progress is not None and (progress is None or _later(state.last_progress, progress)):
        progress = state.last_progress
    found[state.rank] = replace(known, last_words=(known.last_words + state.last_words)[-MAX_LAST_WORDS:],
                                last_progress=progress)


def _later(one: Evidence, other: Evidence) -> bool:
    from ..clock import stamp

    a, b = stamp(one.text), stamp(other.text)
    return a is None or b is None or a[1] != b[1] or a[0] >= b[0]


def _only_last_words(state: m.RankState) -> bool:
    return replace(state, last_words=(), last_progress=None) == m.RankState(rank=state.rank)


def _keep_last_words(ranks: dict, found: dict, listed: dict) -> None:
    """Each rank's consoles' last lines onto its state. A rank nothing else
    describes is known by them: it printed this last, and is no longer a
    rank no artifact describes."""
    for rank, said in found.items():
        state = ranks.get(rank)
        if state is not None:
            ranks[rank] = replace(state, last_words=said.last_words, last_progress=said.last_progress)
            continue
        last = said.last_words[-1] if said.last_words else said.last_progress
        host, pid, _ = listed.get(rank, ("", None, None))
        text = last.text if len(last.text) <= 100 else last.text[:99] + "…"
        ranks[rank] = m.RankState(rank=rank, host=host, pid=pid, evidence=last, why=f"{LAST_PRINTED} {text!r}",
                                  last_words=said.last_words, last_progress=said.last_progress)


def _attach_rings(rings, groups) -> None:
    """NCCL rings (communicator ranks) onto their groups, in global ranks,
    one per channel; only for groups whose every member is known."""
    by_group: dict[str, dict[int, m.Ring]] = {}
    for gid, channel, order, evidence in rings:
        group = groups.get(gid)
        if group is None or sorted(order) != list(range(len(group.ranks))) or len(order) < 2:
            continue
        by_group.setdefault(gid, {}).setdefault(
            channel, m.Ring(channel, tuple(group.ranks[r] for r in order), evidence))
    for gid, channels in by_group.items():
        groups[gid] = replace(groups[gid], rings=tuple(channels[c] for c in sorted(channels)))


def _state_from_dumps(rank: int, dumps: list[m.ProcessDump]) -> m.RankState:
    """One rank's state from all its stack dumps (py-spy, gdb, ...). Dumps
    of a process that ended with them (a traceback, faulthandler on a
    fatal signal, a core) say where it was when it ended: the rank has
    exited, and its ending keeps that position for telling whether its
    death caused the hang or followed it."""
    live = [d for d in dumps if not d.exited] or dumps
    judged = [(stacks.classify(d), d) for d in live]
    best = stacks.moving(judged) or stacks.combine([c for c, _ in judged])
    primary = next(d for c, d in judged if c is best) if any(c is best for c, _ in judged) else live[0]
    python_dump = dumps[0] if len(dumps) == 1 else max(
        dumps, key=lambda d: (d.source.startswith(("py-spy", "pystack")),
                              sum(1 for t in d.threads for f in t.frames if stacks.is_python(f))))
    pid = next((d.pid for d in dumps if d.pid is not None), None)
    host = next((d.host for d in dumps if d.host), "")
    state = m.RankState(
        rank=rank, host=host, pid=pid, alive=True, activity=best.activity,
        current_op=stacks.comm_op(best), threads=primary.threads,
        stack=stacks.python_stack(python_dump), evidence=best.evidence or primary.evidence,
        why=best.why)
    ended = [d for d in dumps if d.exited]
    if not ended:
        return state
    last = ended[-1]
    ending = m.Ending(None, last.signal, last.evidence or state.evidence, state.activity, state.current_op,
                      state.why)
    return replace(state, alive=False, activity=m.EXITED, current_op=None, ending=ending,
                   why=f"ended{' by ' + last.signal if last.signal else ''} in {state.why or state.activity}")


def _combine(old: m.RankState | None, new: m.RankState) -> m.RankState:
    if old is None:
        return new
    updates = {}
    for name in ("host", "pid", "alive", "threads", "stack", "streams", "events", "evidence", "last_words",
                 "last_progress"):
        if not getattr(new, name) and getattr(old, name):
            updates[name] = getattr(old, name)
    if new.activity == m.UNKNOWN:
        updates.update(activity=old.activity, current_op=old.current_op,
                       declared_waits=old.declared_waits)
    else:
        same = _same_call(old.current_op, new.current_op)
        if same is not None:
            updates["current_op"] = same
    if old.progress or new.progress:
        updates["progress"] = {**old.progress, **new.progress}
    updates["log_events"] = old.log_events + new.log_events
    return replace(new, **updates)


def _same_call(a: m.CommOp | None, b: m.CommOp | None) -> m.CommOp | None:
    """Two artifacts' view of the same call (a snapshot or log says its group,
    seq and peers; a stack dump shows the op and the code): one call with
    what each knows, the dump's view first. None when they are not the same
    op or neither knows more."""
    if a is None or b is None or a.op != b.op:
        return None
    if b.group_known and b.seq is not None:
        return None  # the newer view knows the call's place itself: it stands
    dump, told = b, a
    if told.group_known and (dump.group_known and dump.group != told.group):
        return None  # two groups: two calls
    if not told.group_known and told.seq is None:
        return None
    joined = _joined(dump, told)
    return replace(joined, peers=told.peers) if not joined.peers and told.peers else joined


def _position(state: m.RankState):
    op = state.current_op
    return (state.activity, state.alive,
            None if op is None else (op.op, op.group, op.seq, op.state, op.peers))


def _snapshot_window(snapshots: list[Facts], diagnostics: list) -> StuckSignal | None:
    """Several snapshots in time order judged as one window, as a window
    forensics collect or watch wrote is (ingest/progress.py): the ranks
    stuck since the first snapshot of the latest run in which no rank moved,
    when that run spans at least the threshold (analyze --stuck-after, else
    half the collective timeout the calls state, else the default); below
    it, "not a hang yet". Snapshots that say no time are
    judged as before: no rank moved between two of them is stuck."""
    from .progress import NOT_A_HANG_YET, threshold_for_analyze

    start = signal = None
    for before, after in zip(snapshots, snapshots[1:]):
        found = _no_progress(before, after)
        if found is None:
            start = signal = None
            continue
        start = start or before
        signal = found if start is before else _no_progress(start, after)  # the run so far: its first and last
        last = after
    if signal is None:
        return None
    if start.observed_at is None or last.observed_at is None:
        return signal
    window = last.observed_at - start.observed_at
    timeouts = [s.current_op.timeout_ms for s in last.ranks if s.current_op is not None and s.current_op.timeout_ms]
    threshold, source = threshold_for_analyze(min(timeouts) / 1000 if timeouts else None)
    if window >= threshold:
        return signal
    diagnostics.append(Diagnostic(last.path, 0, f"{NOT_A_HANG_YET}: no rank moved between {start.path} and "
                                                f"{last.path}, {window:g} s apart; stuck only past {threshold:g} s "
                                                f"({source}): look again later, or take a snapshot past it", "info"))
    return None


def _no_progress(before: Facts, after: Facts) -> StuckSignal | None:
    old = {s.rank: s for s in before.ranks}
    common = [s for s in after.ranks if s.rank in old]
    if not common or not any(s.is_blocked for s in common):
        return None
    if any(_position(s) != _position(old[s.rank]) for s in common):
        return None
    return stuck_signal("no_progress_between_snapshots", "snap_no_progress", common[0].evidence,
                        before=before.path, after=after.path, n=len(common))


def _check_references(ranks, groups, diagnostics) -> None:
    for rank, state in ranks.items():
        for awaited in state.declared_waits or ():
            if awaited not in ranks:
                where = state.evidence
                diagnostics.append(Diagnostic(
                    where.path if where else "", where.line if where else 0,
                    f"rank {rank} waits for rank {awaited}, which no artifact describes"))
