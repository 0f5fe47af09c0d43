"""stream-waits: CUDA streams as nodes `(rank, stream)`.

A stream whose head waits on an event waits on the stream that records it
(on the same rank unless the event names another). A rank blocked in a
collective also waits on the stream that runs that collective: the call
cannot complete while its stream cannot reach it. Cycles through these
nodes are cross-stream deadlocks even when no rank-level cycle exists.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..ruledocs import RuleDoc
from ..model import AND, WaitEdge, stream_node

ID = "stream-waits"


@hookimpl
def forensics_wait_edges(incident):
    recorders = {}
    for rank, state in incident.ranks.items():
        for event in state.events:
            owner = event.rank if event.rank is not None else rank
            recorders.setdefault((rank, event.name), (owner, event))
            recorders.setdefault((None, event.name), (owner, event))
    edges = []
    for rank in sorted(incident.ranks):
        state = incident.ranks[rank]
        if state.is_dead:
            continue
        op = state.current_op
        for stream in state.streams:
            here = stream_node(rank, stream.name)
            evidence = (stream.evidence,) if stream.evidence else ()
            if op is not None and state.is_blocked and stream.op and stream.op == op.op:
                edges.append(WaitEdge(rank, here, AND,
                                      f"rank {rank}'s {op.op} runs on stream {stream.name}", ID, evidence))
            if stream.waits_event is None:
                continue
            found = recorders.get((rank, stream.waits_event)) or recorders.get((None, stream.waits_event))
            if found is None:
                continue
            owner, event = found
            there = stream_node(owner, event.recorded_on)
            if there == here:
                continue
            edges.append(WaitEdge(
                here, there, AND,
                f"stream {rank}:{stream.name} waits for event {event.name}, recorded on stream "
                f"{owner}:{event.recorded_on}", ID,
                evidence + ((event.evidence,) if event.evidence and event.evidence not in evidence else ())))
    return edges

RULES = (RuleDoc(
    ID, "Waits between CUDA streams", "CUDA Stream 之间的等待", "info",
    "CUDA streams are nodes (rank, stream): a stream whose head waits on an event waits on the stream "
    "that records it; a rank blocked in a collective waits on the stream that runs it.",
    "CUDA Stream 作为节点 (rank, stream)：队首在等待某个 Event 的 Stream 等待记录该 Event 的 Stream；"
    "阻塞在集合通信中的 Rank 等待运行该通信的 Stream。",
    kinds=(), emits=("edges",), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
