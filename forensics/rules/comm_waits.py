"""comm-waits: wait edges implied by the call a rank is blocked in, when no
artifact states them. A collective waits on every member of its group that
has not arrived at the same (group, seq) — through one virtual node per
collective instance, so the graph stays linear in ranks. A send waits on its
destination until it posts the matching recv, and a recv on its source; a
receive from any source waits on any one member (OR)."""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..ruledocs import RuleDoc
from ..model import AND, OR, UNIDENTIFIED_GROUP, WaitEdge, group_id
from ._semantics import describe_op, describe_queue, has_arrived, queued_behind, rank_evidence

ID = "comm-waits"
LAUNCH_ORDER = "launch-order"  # the edges of a call queued behind one its rank launched earlier


@hookimpl
def forensics_wait_edges(incident):
    edges = []
    expanded: dict = {}
    for rank in sorted(incident.ranks):
        state = incident.ranks[rank]
        op = state.current_op
        if state.declared_waits is not None or not state.is_blocked:
            continue
        evidence = rank_evidence(state)
        # A named group's members as the evidence states them (some may be
        # pinned by their group-local numbers); None: not stated, not guessed.
        stated = incident.stated_members(op.group) if op.group_known else incident.members(op.group)
        if op.is_collective and (op.group.startswith(UNIDENTIFIED_GROUP) or stated is None):
            continue  # members unknown: claiming whom it waits for would be a guess
        if op.is_collective:
            node = ("coll", group_id(op.group), op.seq if op.seq is not None else "?")
            reason = expanded.get(node)
            if reason is not None:
                edges.append(WaitEdge(rank, node, AND, reason, ID, evidence))
                continue
            # One reason string per collective instance: shared by all its waiters.
            reason = expanded[node] = f"in {describe_op(op, incident.groups)}"
            edges.append(WaitEdge(rank, node, AND, reason, ID, evidence))
            for member in stated:
                if member != rank and not has_arrived(incident, state, member):
                    other = incident.ranks.get(member)
                    queue = queued_behind(other, op.group, op.seq) if other is not None else None
                    if queue is not None:
                        edges.append(WaitEdge(
                            node, member, AND,
                            f"{op.op} in group {op.group or '0'} seq {op.seq} needs rank {member}: "
                            + describe_queue(member, *queue, incident.groups), LAUNCH_ORDER,
                            evidence + tuple(c.evidence for c in queue if c.evidence is not None)))
                        continue
                    edges.append(WaitEdge(
                        node, member, AND,
                        f"{op.op} in group {op.group or '0'} seq {op.seq} needs rank {member}, "
                        f"which has not joined it", ID, evidence))
        elif op.is_p2p:
            if (op.op == "recv" and op.any_source) or not op.peers:
                # A receive from any source, or a peer the dump does not show
                # (py-spy without --locals): it waits on one of the others, so
                # it is stuck only if every one of them is (an OR wait).
                pg = incident.groups.get(op.group)
                if (stated is None and not op.group.startswith(UNIDENTIFIED_GROUP)) or (pg is not None and pg.partial):
                    continue  # members not stated, or not all: whom it may wait for is not known
                targets = [m for m in (stated or incident.members(op.group)) if m != rank]
                semantics = OR
            else:
                targets = list(op.peers)
                semantics = AND
            for peer in targets:
                if peer != rank and not has_arrived(incident, state, peer):
                    other = incident.ranks.get(peer)
                    wanted = "recv" if op.op == "send" else "send"
                    queue = queued_behind(other, "", None, wanted, rank) if other is not None else None
                    if queue is not None and semantics == AND:
                        edges.append(WaitEdge(
                            rank, peer, AND,
                            f"rank {rank} is in {describe_op(op, incident.groups)}; "
                            + describe_queue(peer, *queue, incident.groups), LAUNCH_ORDER,
                            evidence + tuple(c.evidence for c in queue if c.evidence is not None)))
                        continue
                    edges.append(WaitEdge(rank, peer, semantics,
                                          f"rank {rank} is in {describe_op(op, incident.groups)}; rank {peer} has not "
                                          f"posted the matching {'recv' if op.op == 'send' else 'send'}"
                                          + ("" if semantics == AND else " (peer not in the dump: any of them)"),
                                          ID, evidence))
    return edges

RULES = (RuleDoc(
    LAUNCH_ORDER, "Calls queued behind an earlier launch", "排在先启动调用之后的调用", "info",
    "A call a rank launched after another call that started and is not done, on another group or "
    "communicator, is queued behind it (Flight Recorder: `scheduled`, with a higher record id than the "
    "`started` one): one device runs them in launch order (one connection, CUDA_DEVICE_MAX_CONNECTIONS=1, "
    "or a stream dependency). Whoever waits for the queued call waits, through it, for the earlier one; "
    "with the waits between ranks this closes cycles across communicators.",
    "某 Rank 在另一个已开始且未完成的调用之后启动的调用（属于另一个通信组或通信器）排在它后面"
    "（Flight Recorder 中为 `scheduled`，record id 高于 `started` 的那个）：同一设备按启动顺序执行"
    "（单连接、CUDA_DEVICE_MAX_CONNECTIONS=1 或 Stream 依赖）。等待排队调用的一方，实际上在等待先启动的"
    "那个调用；与 Rank 之间的等待合在一起，会形成跨通信器的环。",
    kinds=(), emits=("edges",), source=__name__), RuleDoc(
    ID, "Waits implied by communication calls", "通信调用隐含的等待", "info",
    "A rank blocked in a collective waits for every member of its group that has not arrived at the "
    "same (group, seq) (AND); a send waits for its destination's matching recv, a recv for its source; "
    "a receive from any source waits for any one member (OR).",
    "阻塞在集合通信中的 Rank 等待组内所有尚未到达相同 (group, seq) 的成员（AND）；send 等待目标 Rank 的"
    "匹配 recv，recv 等待源 Rank；任意源的接收等待任意一个成员（OR）。",
    kinds=(), emits=("edges",), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
