"""Which group a rank waits in (a stack that does not show it leaves it
unknown, and the confidence says the default group is assumed), and launch
order inside a rank (rules/comm_waits.py, LAUNCH_ORDER): a call Flight
Recorder shows `scheduled` behind one the same rank launched earlier and
that `started` is queued behind it, and whoever waits for it waits through
it. The synthetic NCCL dumps in the corpus close cycles that way."""

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


def test_a_group_no_dump_shows_is_assumed_and_the_confidence_says_so():
    """Stacks without --locals: which group ranks 0 and 1 wait in is not
    shown. The waits are drawn on the default group, and the confidence
    owns up to that guess instead of claiming `high`."""
    from dataclasses import replace

    from forensics.analysis import analyze_incident
    from forensics.plugins import Plugins
    from helpers import incident_of

    states = {"0": {"current_op": "all_reduce"}, "1": {"current_op": "all_reduce"},
              "2": {"current_op": "compute", "alive": False, "exit_code": -9}}
    incident = incident_of(states)
    ranks = {r: replace(s, current_op=replace(s.current_op, group_known=False)) if s.current_op else s
             for r, s in incident.ranks.items()}
    known = analyze_incident(incident, Plugins(autoload=False))
    guessed = analyze_incident(replace(incident, ranks=ranks), Plugins(autoload=False))
    assert known.verdict == guessed.verdict == "dead_rank" and known.confidence.level == "high"
    assert guessed.confidence.level == "medium" and "rank 0,1 wait in" in guessed.confidence.reason
    assert guessed.confidence.missing == ("py-spy dump --locals, or Flight Recorder dumps, of rank 0,1",)
