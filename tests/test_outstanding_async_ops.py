"""outstanding-async-ops: isend/irecv entries Flight Recorder shows unfinished, piling up."""

from conftest import CORPUS, ROOT
from forensics import analyze
from forensics.rules import outstanding_async_ops

PILE = CORPUS / "synthetic_outstanding_async_ops"
IN_FLIGHT = CORPUS / "synthetic_async_ops_in_flight"


def rule_findings(report):
    return [f for f in report.findings if f.rule == outstanding_async_ops.ID]


def test_pile_up_in_flight_recorder_is_a_warning_naming_rank_count_and_oldest_seq():
    report = analyze(str(PILE))
    (finding,) = rule_findings(report)
    assert finding.severity == "warning" and finding.ranks == (0,)
    assert "isend/irecv entries on rank 0 not completed" in finding.message
    assert "oldest seq 13 on group 0" in finding.message and "p2p seq 13–24" in finding.message
    assert "piling up" in finding.message and "isend to 1" in finding.message
    assert finding.evidence[0].path == "fr_json/rank0.fr.json"
    assert "Rank 0 上有" in finding.message_zh and finding.hint_zh
    assert report.verdict == "healthy"


def test_pile_up_is_an_error_when_the_job_is_stuck_behind_it():
    (finding,) = rule_findings(analyze(str(PILE), hung=True))
    assert finding.severity == "error" and "what blocks" in finding.message


def test_ordinary_transfers_in_flight_do_not_trigger():
    report = analyze(str(IN_FLIGHT))
    assert rule_findings(report) == [] and report.verdict == "healthy"


def test_nccl_send_lines_say_nothing_about_completion():
    # job8.log: a pipeline pair with many Send/Recv COLL lines, all "scheduled"
    # because NCCL never logs completion: not a pile-up.
    report = analyze(str(ROOT / "tests" / "fixtures" / "nccl" / "job8.log"))
    assert rule_findings(report) == []


def test_rule_describes_itself_in_both_languages():
    (doc,) = outstanding_async_ops.RULES
    assert doc.id == "outstanding-async-ops" and doc.severity == "warning"
    assert doc.kinds == ("outstanding_async_ops",) and doc.title_zh and doc.explanation_zh and doc.hint_zh
