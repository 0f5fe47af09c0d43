"""Launch order inside a rank (rules/comm_waits.py, LAUNCH_ORDER): a call
Flight Recorder shows `scheduled` behind one the same rank launched earlier
and that `started` is queued behind it, and whoever waits for it waits
through it. The synthetic NCCL dumps in the corpus close cycles that way."""

import json
import pathlib
import shutil

import forensics
from forensics.graph import edges_between
from forensics.rules.comm_waits import LAUNCH_ORDER

CORPUS = pathlib.Path(__file__).parent.parent / "corpus"


def _launch_edges(report):
    graph = report.analysis.graph
    return sorted((str(a), str(b), w.reason) for a, b in graph.edges for w in edges_between(graph, a, b)
                  if w.rule == LAUNCH_ORDER)


def test_world_before_tp_on_one_rank_is_a_deadlock_through_launch_order():
    report = forensics.analyze(CORPUS / "synthetic_fr_launch_order_tp_world", jobs=1)
    assert report.verdict == "deadlock" and report.culprit_ranks == [0, 1]
    edges = _launch_edges(report)
    assert [(a, b) for a, b, _ in edges] == [("('coll', '0', 40)", "1"), ("('coll', '1', 40)", "0")]
    assert ("rank 1's all_reduce group 0 seq 40 (record 79) is queued behind its all_reduce group 1 (tp) "
            "seq 40 (record 78)") in edges[0][2]
    # ranks 2 and 3 wait in the world all_reduce for rank 1 too, but are not on the cycle
    assert report.incident.ranks[2].current_op.seq == 40 and 2 not in report.culprit_ranks


def test_send_against_all_reduce_through_launch_order():
    report = forensics.analyze(CORPUS / "synthetic_fr_launch_order_send_allreduce", jobs=1)
    assert report.verdict == "deadlock" and [list(c) for c in report.cycles] == [[0, 1, 0]]
    (p2p,) = [e for e in _launch_edges(report) if e[:2] == ("0", "1")]
    assert "rank 1's recv from 0 group 1 (pp) seq 30 (record 59) is queued behind its all_reduce" in p2p[2]


def test_two_started_calls_are_not_queued_one_behind_the_other(tmp_path):
    """Both started: the device runs both (two connections); neither waits
    behind the other, so no launch-order edge."""
    folder = tmp_path / "fr"
    shutil.copytree(CORPUS / "synthetic_fr_launch_order_send_allreduce" / "fr", folder)
    for rank in (0, 1):
        path = folder / f"rank{rank}.fr.json"
        dump = json.loads(path.read_text())
        dump["entries"][-1]["state"] = "started"
        path.write_text(json.dumps(dump))
    report = forensics.analyze(tmp_path, jobs=1)
    assert _launch_edges(report) == []


def test_gloo_dumps_have_no_launch_order():
    """Torch's Gloo dumps never mark a call started: no queue can be read."""
    report = forensics.analyze(CORPUS / "real_boundary_exchange_3_group_cycle", jobs=1)
    assert _launch_edges(report) == [] and report.verdict == "deadlock"
