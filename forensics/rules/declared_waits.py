"""declared-waits: the waits an artifact states outright (a watchdog's
`waiting_for_ranks`), minus the ones the other side has already satisfied."""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..ruledocs import RuleDoc
from ..model import AND, OR, WaitEdge
from ._semantics import describe_op, has_arrived, rank_evidence

ID = "declared-waits"


@hookimpl
def forensics_wait_edges(incident):
    edges = []
    for rank, state in incident.ranks.items():
        if state.declared_waits is None or state.is_dead:
            continue
        op = state.current_op
        semantics = OR if op is not None and op.any_source else AND
        for awaited in state.declared_waits:
            if awaited == rank or has_arrived(incident, state, awaited):
                continue
            edges.append(WaitEdge(rank, awaited, semantics,
                                  f"rank {rank} in {describe_op(op, incident.groups)} reports waiting for rank {awaited}",
                                  ID, rank_evidence(state)))
    return edges


class ExactDeclaredWaits:
    """The seed contract: every `waiting_for_ranks` entry is an edge, as stated.

    Used by `forensics.detect_comm_deadlock` instead of the refining rule
    above, so the seed's explicit-edge semantics hold exactly.
    """

    @hookimpl
    def forensics_wait_edges(self, incident):
        return [WaitEdge(rank, awaited, AND, f"rank {rank} reports waiting for rank {awaited}",
                         "declared-waits-exact", rank_evidence(state))
                for rank, state in incident.ranks.items()
                for awaited in state.declared_waits or ()
                if awaited != rank]

RULES = (RuleDoc(
    ID, "Waits an artifact states", "产物声明的等待", "info",
    "Waits stated outright by an artifact (a watchdog snapshot's `waiting_for_ranks`), minus those the "
    "other side has already satisfied.",
    "产物直接声明的等待（watchdog 快照中的 `waiting_for_ranks`），去掉对方已经满足的部分。",
    kinds=(), emits=("edges",), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
