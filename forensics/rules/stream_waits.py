"""stream-waits: CUDA streams as nodes `(rank, stream)`.

A stream whose head waits on an event waits on the stream that records it
(on the same rank unless the event names another). A rank blocked in a
collective also waits on the stream that runs that collective: the call
cannot complete while its stream cannot reach it. Cycles through these
nodes are cross-stream deadlocks even when no rank-level cycle exists.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
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
