"""The graph view every drawing starts from: individual ranks when few,
classes when many, the culprits and the cycle always visible."""

import forensics
from forensics.plugins import Plugins
from forensics.report import graphview

from conftest import CORPUS, ROOT

import importlib.util

spec = importlib.util.spec_from_file_location("gen_snapshots", ROOT / "benchmarks" / "gen_snapshots.py")
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)


def analyze(path, **kw):
    return forensics.analyze(path, jobs=1, plugins=Plugins(autoload=False), **kw)


def test_a_real_ring_is_drawn_rank_by_rank_with_its_cycle():
    view = graphview.build(analyze(CORPUS / "real_p2p_ring_4", hung=True))
    assert not view.collapsed and [n.label for n in view.nodes] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert all(n.culprit and n.on_cycle for n in view.nodes)
    assert {(e.src, e.dst) for e in view.edges if e.on_cycle} == {
        ("rank0", "rank3"), ("rank1", "rank0"), ("rank2", "rank1"), ("rank3", "rank2")}
    assert view.node("rank1").detail == "blocked recv from 0" and view.node("rank1").evidence


def test_ten_thousand_ranks_waiting_for_one_are_two_boxes(tmp_path):
    path = tmp_path / "snap.json"
    import json
    path.write_text(json.dumps(gen.snapshot("missing", 10000)))
    report = analyze(path, hung=True)
    view = graphview.build(report)
    (culprit,) = report.culprit_ranks
    assert view.collapsed and len(view.nodes) == 2
    lone, crowd = view.nodes
    assert lone.ranks == (culprit,) and lone.culprit and lone.state == "data_loading"
    assert len(crowd.ranks) == 9999 and crowd.label.endswith("(9,999)") and not crowd.culprit
    (edge,) = view.edges
    assert (edge.src, edge.dst, edge.count) == (crowd.id, lone.id, 9999)


def test_a_ten_thousand_rank_ring_collapses_around_its_pinned_ranks(tmp_path):
    path = tmp_path / "ring.json"
    import json
    path.write_text(json.dumps(gen.snapshot("p2p_cycle", 10000)))
    view = graphview.build(analyze(path, hung=True))
    assert len(view.nodes) <= graphview.MAX_PINNED + 3
    big = max(view.nodes, key=lambda n: len(n.ranks))
    assert len(big.ranks) > 9900 and big.culprit and big.on_cycle and "from r-1" in big.detail
    self_loop = next(e for e in view.edges if e.src == e.dst == big.id)
    assert self_loop.count == len(big.ranks) - 1 and self_loop.on_cycle
    assert sum(len(n.ranks) for n in view.nodes) == 10000


def test_every_edge_names_its_group_and_launch_order_edges_are_marked():
    import pathlib

    from forensics.report import dot, mermaid, svg

    corpus = pathlib.Path(__file__).parent.parent / "corpus"
    report = forensics.analyze(corpus / "real_boundary_exchange_3_group_cycle", jobs=1)
    edges = {(e.src, e.dst): e for e in graphview.build(report).edges}
    assert {k: (e.groups, e.launch_order) for k, e in edges.items()} == {
        ("rank0", "rank1"): (("2 (halo_01)",), False),
        ("rank1", "rank2"): (("3 (halo_12)",), False),
        ("rank2", "rank0"): (("4 (halo_02)",), False)}
    queued = forensics.analyze(corpus / "synthetic_fr_launch_order_tp_world", jobs=1)
    view = graphview.build(queued)
    marked = {(e.src, e.dst): (e.groups, e.launch_order) for e in view.edges}
    assert marked[("rank0", "rank1")] == (("0",), True) and marked[("rank1", "rank0")] == (("1 (tp)",), True)
    text = dot.render(queued)
    assert '"rank1" -> "rank0" [style=dotted, label="group 1 (tp), launch order"' in text
    assert 'n_rank1 ==>|"group 1 #40;tp#41;, launch order"| n_rank0' in "\n".join(mermaid.graph_lines(queued))
    drawn = svg.render(view, queued.cycles)
    assert drawn.count('class="edge cycle launch-order"') == 2 and 'data-groups="1 (tp)"' in drawn
    assert 'class="edge launch-order"' in drawn  # ranks 2 and 3 wait for rank 1 off the cycle
