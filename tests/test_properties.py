"""Engine properties over random snapshots (hypothesis)."""

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.graph import _is_virtual

from helpers import report_of

OPS = ["send", "recv", "all_reduce", "broadcast", "compute", "data_loading", "exited"]


@st.composite
def snapshots(draw, max_ranks=7):
    n = draw(st.integers(2, max_ranks))
    states = {}
    for rank in range(n):
        op = draw(st.sampled_from(OPS))
        state = {"current_op": op}
        if op == "exited":
            state["alive"] = False
        if op in ("send", "recv"):
            state["peers"] = [draw(st.integers(0, n - 1).filter(lambda r, me=rank: r != me))]
        if op in ("all_reduce", "broadcast"):
            state["op_seq"] = draw(st.integers(1, 3))
        if draw(st.booleans()):
            state["waiting_for_ranks"] = draw(st.lists(st.integers(0, n - 1), max_size=3, unique=True))
        states[rank] = state
    return states


def _rank_edges(analysis):
    """Rank-level wait relation, collective nodes expanded."""
    g = analysis.graph
    out = nx.DiGraph()
    for node in g.nodes:
        if _is_virtual(node):
            continue
        for succ in g.successors(node):
            for target in (g.successors(succ) if _is_virtual(succ) else [succ]):
                out.add_edge(node, target)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_reported_cycles_are_real_cycles(states):
    report = report_of(states)
    edges = _rank_edges(report.analysis)
    for cycle in report.cycles:
        assert cycle[0] == cycle[-1]
        assert len(cycle) >= 3
        for a, b in zip(cycle, cycle[1:]):
            assert edges.has_edge(a, b), (cycle, a, b)
        assert cycle[0] == min(cycle, key=lambda n: (not isinstance(n, int), str(n) if not isinstance(n, int) else n))


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_no_cycle_and_live_sinks_is_never_deadlock(states):
    report = report_of(states)
    edges = _rank_edges(report.analysis)
    dead = {r for r, s in report.incident.ranks.items() if s.is_dead}
    if nx.is_directed_acyclic_graph(edges) and not (set(edges.nodes) & dead):
        assert report.verdict != "deadlock"
        assert not report.analysis.stuck


@settings(max_examples=200, deadline=None)
@given(snapshots(), st.randoms(use_true_random=False))
def test_verdict_stable_under_relabeling(states, rnd):
    ranks = sorted(states)
    shuffled = ranks[:]
    rnd.shuffle(shuffled)
    mapping = dict(zip(ranks, shuffled))

    def relabel(state):
        state = dict(state)
        if "peers" in state:
            state["peers"] = [mapping[p] for p in state["peers"]]
        if "waiting_for_ranks" in state:
            state["waiting_for_ranks"] = [mapping[p] for p in state["waiting_for_ranks"]]
        return state

    moved = {mapping[r]: relabel(s) for r, s in states.items()}
    a, b = report_of(states), report_of(moved)
    assert a.verdict == b.verdict
    assert sorted(mapping[r] for r in a.culprit_ranks) == sorted(b.culprit_ranks)
    # The same knots (the witness path inside a knot may start elsewhere).
    assert len(a.cycles) == len(b.cycles)
    assert {frozenset(mapping[n] for n in k) for k in a.analysis.knots} == set(b.analysis.knots)
    assert {mapping[n] for n in a.analysis.stuck if isinstance(n, int)} == \
        {n for n in b.analysis.stuck if isinstance(n, int)}
