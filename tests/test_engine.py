"""Wait-for semantics: who waits for whom, and what can never progress."""

import networkx as nx

from forensics.graph import analyze_graph, build_graph, reduce_graph
from forensics.model import AND, OR, Incident, RankState, WaitEdge

from helpers import report_of


def test_ranks_inside_the_same_collective_do_not_wait_on_each_other():
    # All four in all_reduce #9 of the world: everyone arrived, nothing waits.
    states = {r: {"current_op": "all_reduce", "op_seq": 9} for r in range(4)}
    report = report_of(states, hung=True)
    assert report.verdict != "missing_rank"
    assert report.analysis.waiting == frozenset()


def test_collective_waits_only_for_members_that_have_not_arrived():
    states = {0: {"current_op": "all_reduce", "op_seq": 9},
              1: {"current_op": "all_reduce", "op_seq": 9},
              2: {"current_op": "compute"},
              3: {"current_op": "all_reduce", "op_seq": 8}}
    report = report_of(states)
    assert report.analysis.waits_of(0) == ([2, 3], 2)
    assert report.analysis.waits_of(1) == ([2, 3], 2)
    # Rank 3 is at #8 (behind): it waits for 0, 1, 2 to join #8? No: 0 and 1
    # are past #8 (seq 9 >= 8), so only rank 2 is missing from #8.
    assert report.analysis.waits_of(3) == ([2], 1)
    assert report.verdict == "healthy"  # one snapshot, rank 2 computing


def test_declared_waits_are_refined_by_arrival():
    # A watchdog that lists every peer as "waited for" still must not make
    # ranks that are in the same collective wait on each other.
    states = {r: {"current_op": "all_reduce", "op_seq": 5, "waiting_for_ranks": [x for x in range(3) if x != r]}
              for r in range(3)}
    report = report_of(states, hung=True)
    assert report.verdict == "inconclusive"
    assert report.cycles == []


def test_send_matched_by_recv_is_not_a_wait():
    states = {0: {"current_op": "send", "peers": [1]},
              1: {"current_op": "recv", "peers": [0]}}
    report = report_of(states, hung=True)
    assert report.analysis.waiting == frozenset()


def test_send_send_is_a_p2p_cycle():
    states = {0: {"current_op": "send", "peers": [1]},
              1: {"current_op": "send", "peers": [0]}}
    report = report_of(states)
    assert report.verdict == "deadlock"
    assert report.cycles == [[0, 1, 0]]
    assert report.findings[0].rule == "p2p-circular-wait"


def test_recv_any_source_is_or_wait():
    # Rank 0 receives from any source; rank 1 waits on 0 (cycle 0<->1), but
    # rank 2 computes and can send to 0, so nothing is deadlocked.
    states = {0: {"current_op": "recv", "wait": "any", "waiting_for_ranks": [1, 2]},
              1: {"current_op": "recv", "peers": [0], "waiting_for_ranks": [0]},
              2: {"current_op": "compute"}}
    report = report_of(states)
    assert report.verdict == "healthy"
    # Now rank 2 is dead: the OR wait can still be released by... nobody.
    states[2] = {"current_op": "exited", "alive": False}
    report = report_of(states)
    assert report.verdict == "deadlock"
    assert report.cycles == [[0, 1, 0]]


def test_and_waiter_on_dead_rank_is_dead_rank():
    states = {0: {"current_op": "all_reduce", "op_seq": 3},
              1: {"current_op": "all_reduce", "op_seq": 3},
              2: {"current_op": "exited", "alive": False}}
    report = report_of(states)
    assert report.verdict == "dead_rank"
    assert report.culprit_ranks == [2]


def test_missing_rank_needs_stuck_evidence():
    states = {0: {"current_op": "all_reduce", "op_seq": 3},
              1: {"current_op": "data_loading"}}
    assert report_of(states).verdict == "healthy"
    hung = report_of(states, hung=True)
    assert hung.verdict == "missing_rank"
    assert hung.culprit_ranks == [1]
    assert [s.kind for s in hung.decided_by] == ["cli_hung"]


def test_op_past_timeout_is_stuck_evidence():
    states = {0: {"current_op": "all_reduce", "op_seq": 3, "elapsed_ms": 700000, "timeout_ms": 600000},
              1: {"current_op": "compute"}}
    report = report_of(states)
    assert report.verdict == "missing_rank"
    assert report.decided_by[0].kind == "op_past_timeout"


def test_missing_member_without_any_artifact():
    # Group of 4, rank 3 never reported: the others wait for it.
    states = {r: {"current_op": "all_reduce", "op_seq": 11, "group": "0"} for r in range(3)}
    report = report_of(states, groups={"0": [0, 1, 2, 3]}, hung=True)
    assert report.verdict == "missing_rank"
    assert report.culprit_ranks == [3]


def test_cross_group_cycle():
    states = {0: {"current_op": "all_reduce", "group": "dp", "op_seq": 4},
              1: {"current_op": "all_gather", "group": "tp", "op_seq": 9}}
    report = report_of(states, groups={"dp": [0, 1], "tp": [0, 1]})
    assert report.verdict == "deadlock"
    assert report.cycles == [[0, 1, 0]]
    assert report.findings[0].kind == "circular_wait"


def test_cross_stream_cycle_within_a_rank():
    states = {0: {"current_op": "all_reduce", "op_seq": 1,
                  "streams": {"compute": {"waits_event": "E2"}, "comm": {"waits_event": "E1", "op": "all_reduce"}},
                  "events": {"E1": {"recorded_on": "compute"}, "E2": {"recorded_on": "comm"}}},
              1: {"current_op": "all_reduce", "op_seq": 1}}
    report = report_of(states)
    assert report.verdict == "deadlock"
    assert report.findings[0].kind == "cross_stream_cycle"
    assert report.cycles == [[("stream", 0, "comm"), ("stream", 0, "compute"), ("stream", 0, "comm")]]
    # The rank whose collective runs on the stuck stream is stuck with it.
    assert 0 in report.analysis.stuck and 1 not in report.analysis.stuck


def test_cross_stream_cycle_across_ranks():
    states = {0: {"current_op": "compute", "streams": {"s": {"waits_event": "B"}},
                  "events": {"A": {"recorded_on": "s"}}},
              1: {"current_op": "compute", "streams": {"s": {"waits_event": "A"}},
                  "events": {"B": {"recorded_on": "s"}}}}
    report = report_of(states)
    assert report.verdict == "deadlock"
    assert report.culprit_ranks == [0, 1]


def test_mismatch_minority_and_tie():
    states = {0: {"current_op": "all_reduce", "op_seq": 3},
              1: {"current_op": "broadcast", "op_seq": 3},
              2: {"current_op": "broadcast", "op_seq": 3}}
    assert report_of(states).culprit_ranks == [0]
    tie = {0: {"current_op": "all_reduce", "op_seq": 3}, 1: {"current_op": "barrier", "op_seq": 3}}
    report = report_of(tie)
    assert report.verdict == "collective_mismatch" and report.culprit_ranks == [0, 1]


def test_dtype_mismatch():
    states = {0: {"current_op": "all_reduce", "op_seq": 3, "dtype": "Float"},
              1: {"current_op": "all_reduce", "op_seq": 3, "dtype": "BFloat16"},
              2: {"current_op": "all_reduce", "op_seq": 3, "dtype": "Float"}}
    report = report_of(states)
    assert report.verdict == "collective_mismatch" and report.culprit_ranks == [1]
    assert "dtype" in report.findings[0].message


def test_reduction_and_or():
    g = nx.DiGraph()
    g.add_node("a", semantics=AND)
    g.add_edge("a", "b")
    g.add_edge("a", "c")
    g.add_node("o", semantics=OR)
    g.add_edge("o", "b")
    g.add_edge("o", "x")
    g.add_edge("x", "o")
    g.nodes["x"]["semantics"] = AND
    progressed = reduce_graph(g, dead={"c"})
    assert "b" in progressed and "o" in progressed and "x" in progressed
    assert "a" not in progressed and "c" not in progressed


def test_large_collective_uses_linear_edges():
    n = 2000
    ranks = {r: RankState(rank=r) for r in range(n)}
    incident = Incident(ranks=ranks, groups={})
    coll = ("coll", "0", 5)
    edges = [WaitEdge(r, coll) for r in range(0, n, 2)] + [WaitEdge(coll, r) for r in range(1, n, 2)]
    graph = build_graph(edges, incident)
    assert graph.number_of_edges() == n
    analysis = analyze_graph(graph, incident)
    assert analysis.stuck == frozenset()
    waits, total = analysis.waits_of(0, 10)
    assert total == n // 2 and waits == list(range(1, 20, 2))
