"""When has a rank "arrived" where another waits for it? Shared by the rules
that turn rank states into wait-for edges."""

from __future__ import annotations

import re

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
    wanted = "recv" if op.op == "send" else "send"
    if queued_behind(other, "", None, wanted, waiter.rank) is not None:
        return False
    if theirs is None or not theirs.is_p2p or theirs.state == "completed":
        return False
    if theirs.op != wanted:
        return False
    if wanted == "recv" and theirs.any_source:
        return True
    named = set(theirs.peers) | set(other.declared_waits or ())
    if not named:
        return True  # its peer is unknown: it may well be the match, so claim no wait
    return waiter.rank in named


def queued_behind(state: RankState, group: str, seq: int | None, op: str = "",
                  peer: int | None = None) -> tuple[CommOp, CommOp] | None:
    """(its call, the call it waits behind) when `state`'s rank launched the
    call (`group`, `seq`), or a send/recv `op` with `peer`, only after
    another call that started and is not done: Flight Recorder shows the
    first `scheduled` (enqueued, not running) and the other `started`, with
    a lower record id. On one device the later call waits behind the
    earlier one (one connection, CUDA_DEVICE_MAX_CONNECTIONS=1, or a stream
    dependency): an edge inside the rank."""
    running = state.current_op
    if running is None or running.state != "started" or running.record_id is None:
        return None
    for call in state.history:
        if call.state != "scheduled" or call.record_id is None or call.record_id <= running.record_id:
            continue
        if op:
            if call.op == op and (peer is None or not call.peers or peer in call.peers):
                return call, running
        elif group_id(call.group) == group_id(group) and (seq is None or call.seq == seq) and call.is_collective:
            return call, running
    return None


def describe_queue(rank: int, queued: CommOp, running: CommOp, groups=None) -> str:
    """`rank 1's all_reduce group 0 seq 5 (record 21) is queued behind its
    all_reduce group 1 (tp) seq 7 (record 20), launched first and not done`."""
    return (f"rank {rank}'s {describe_op(queued, groups)} (record {queued.record_id}) is queued behind its "
            f"{describe_op(running, groups)} (record {running.record_id}), launched first and not done")


def _in_collective(other: RankState, op: CommOp) -> bool:
    if queued_behind(other, op.group, op.seq) is not None:
        return False
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
        parts.append("on an unknown group")
    elif op.group.startswith("?"):
        parts.append(f"on another process group ({op.group[1:]})")
    elif op.group:
        named = groups.get(op.group) if groups else None
        parts.append(f"group {op.group}" + (f" ({named.name})" if named is not None and named.name
                                              and named.name not in (op.group, "undefined", "default_pg") else ""))
    if op.seq is not None:
        parts.append(f"seq {op.seq}")
    return " ".join(parts)


# Functions only rank 0 usually runs: evaluation, saving, logging, reporting.
RANK0_ONLY = re.compile(r"(?:^|_)(?:eval\w*|valid\w*|save\w*|checkpoint\w*|ckpt\w*|log|logging|log_\w+|metrics?"
                        r"|print\w*|report\w*|export\w*|dump\w*|summar\w*)(?:_|$)", re.IGNORECASE)
# A stack label as the model keeps it: `function (file:line)`.
FRAME_LABEL = re.compile(r"^(?P<function>.+?) \((?P<file>[^()]*?)(?::\d+)?\)$")


_COMM_LAYERS = ("torch/", "deepspeed/comm/", "megatron/core/parallel_state", "horovod/torch/mpi_ops")


def on_rank0_only_path(state: RankState | None) -> str | None:
    """The function of `state`'s stack (its own or its frameworks' Python
    frames, not torch's) whose name says only rank 0 usually runs it, or None."""
    if state is None:
        return None
    for label in reversed(state.stack):  # innermost of the outer frames first
        found = FRAME_LABEL.match(label)
        if found is None or found["file"].startswith(_COMM_LAYERS) or ".py" not in found["file"]:
            continue  # torch's frames, and the frameworks' own wrappers of the collectives (their logging)
        if RANK0_ONLY.search(found["function"]):
            return found["function"]
    return None


def odd_side_of_two(incident: Incident, sides: list[int]) -> int | None:
    """Of two ranks that disagree with nothing else to tell them apart, rank 0
    when it alone is on a path only rank 0 usually takes (an evaluation, a
    save, logging in its stack); else None."""
    if len(sides) != 2 or 0 not in sides:
        return None
    other = next(r for r in sides if r != 0)
    if on_rank0_only_path(incident.ranks.get(0)) and not on_rank0_only_path(incident.ranks.get(other)):
        return 0
    return None
