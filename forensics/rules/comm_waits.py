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
from ._semantics import describe_op, has_arrived, rank_evidence

ID = "comm-waits"


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
        if op.is_collective and op.group.startswith(UNIDENTIFIED_GROUP):
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
            for member in incident.members(op.group):
                if member != rank and not has_arrived(incident, state, member):
                    edges.append(WaitEdge(
                        node, member, AND,
                        f"{op.op} in group {op.group or '0'} seq {op.seq} needs rank {member}, "
                        f"which has not joined it", ID, evidence))
        elif op.is_p2p:
            if (op.op == "recv" and op.any_source) or not op.peers:
                # A receive from any source, or a peer the dump does not show
                # (py-spy without --locals): it waits on one of the others, so
                # it is stuck only if every one of them is (an OR wait).
                targets = [m for m in incident.members(op.group) if m != rank]
                semantics = OR
            else:
                targets = list(op.peers)
                semantics = AND
            for peer in targets:
                if peer != rank and not has_arrived(incident, state, peer):
                    edges.append(WaitEdge(rank, peer, semantics,
                                          f"rank {rank} is in {describe_op(op, incident.groups)}; rank {peer} has not "
                                          f"posted the matching {'recv' if op.op == 'send' else 'send'}"
                                          + ("" if semantics == AND else " (peer not in the dump: any of them)"),
                                          ID, evidence))
    return edges

RULES = (RuleDoc(
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
