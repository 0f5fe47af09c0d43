"""When has a rank "arrived" where another waits for it? Shared by the rules
that turn rank states into wait-for edges."""

from __future__ import annotations

from ..model import CommOp, Incident, RankState, group_id


def has_arrived(incident: Incident, waiter: RankState, awaited: int) -> bool:
    """True when `awaited` is already where `waiter` needs it, so no wait edge.

    Two ranks inside the same collective (same group, same or later seq) do
    not wait on each other; a send and the matching recv complete together.
    """
    op = waiter.current_op
    other = incident.ranks.get(awaited)
    if op is None or other is None or other.is_dead:
        return False
    if op.is_collective:
        return _in_collective(other, op)
    theirs = other.current_op
    if theirs is None or not theirs.is_p2p or theirs.state == "completed":
        return False
    wanted = "recv" if op.op == "send" else "send"
    if theirs.op != wanted:
        return False
    if wanted == "recv" and theirs.any_source:
        return True
    named = set(theirs.peers) | set(other.declared_waits or ())
    if not named:
        return True  # its peer is unknown: it may well be the match, so claim no wait
    return waiter.rank in named


def _in_collective(other: RankState, op: CommOp) -> bool:
    theirs = other.current_op
    if theirs is not None and theirs.is_collective and group_id(theirs.group) == group_id(op.group):
        if op.seq is None or theirs.seq is None or theirs.seq >= op.seq:
            return True
    progress = other.progress.get(group_id(op.group)) or other.progress.get(op.group)
    if progress is not None and op.seq is not None:
        issued = max(x for x in (progress.enqueued, progress.started, progress.completed, -1)
                     if x is not None)
        return issued >= op.seq
    return False


def rank_evidence(state: RankState) -> tuple:
    found = []
    if state.current_op is not None and state.current_op.evidence is not None:
        found.append(state.current_op.evidence)
    elif state.evidence is not None:
        found.append(state.evidence)
    return tuple(found)


def describe_op(op: CommOp | None, groups=None) -> str:
    """`all_reduce group 2 (halo_01) seq 4`: the group by id, with the name
    `groups` (an incident's) gives it."""
    if op is None:
        return "no communication call"
    parts = [op.op]
    if op.peers:
        parts.append(("to " if op.op == "send" else "from ") + ",".join(map(str, op.peers)))
    if not op.group_known:
        parts.append("(group not shown)")
    elif op.group.startswith("?"):
        parts.append(f"on another process group ({op.group[1:]})")
    elif op.group:
        named = groups.get(op.group) if groups else None
        parts.append(f"group {op.group}" + (f" ({named.name})" if named is not None and named.name
                                              and named.name not in (op.group, "undefined", "default_pg") else ""))
    if op.seq is not None:
        parts.append(f"seq {op.seq}")
    return " ".join(parts)
