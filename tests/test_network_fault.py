"""network-fault: who failed first, which link, and when to stay silent."""

import shutil
from dataclasses import replace

from conftest import CORPUS, ROOT
from helpers import incident_of
from forensics import analyze, analyze_incident
from forensics.model import Evidence, StuckSignal
from forensics.plugins import Plugins
from forensics.rules import network_fault as nf

FIXTURES = ROOT / "tests" / "fixtures" / "nccl"
GLOO_LINE = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
             "[127.0.0.1]:8594")


def rule_findings(report):
    return [f for f in report.findings if f.rule == nf.ID]


def test_corpus_nccl_incident_names_first_rank_link_and_knock_on():
    report = analyze(str(CORPUS / "synthetic_network_fault_nccl"))
    assert report.verdict == "network_fault" and report.culprit_ranks == [2]
    (finding,) = rule_findings(report)
    assert finding.severity == "error" and finding.ranks == (2,)
    assert "rank 2's transport error came first (by timestamp)" in finding.message
    assert "10.1.0.1<48133>" in finding.message                       # the peer its WARN names
    assert "receives from 1 and sends to 3" in finding.message        # its ring neighbours
    assert "knock-on" in finding.message and "rank 1:" in finding.message and "rank 3:" in finding.message
    assert [e.path for e in finding.evidence[:3]] == ["rank2.nccl.log", "rank1.nccl.log", "rank3.nccl.log"]
    assert "最先出现" in finding.message_zh and "连锁反应" in finding.message_zh and finding.hint_zh


def test_real_warning_lines_without_timestamps_are_ordered_by_the_shared_log(tmp_path):
    # Real NCCL 2.18 WARN lines of two processes in one console: no timestamps.
    shutil.copy(FIXTURES / "warnings.log", tmp_path / "console.log")
    report = analyze(str(tmp_path), hung=True)
    findings = rule_findings(report)
    if report.incident.ranks and all(not s.is_dead for s in report.incident.ranks.values()):
        (finding,) = findings
        assert "no timestamps: by their order in console.log" in finding.message
        assert "Got completion from peer 192.168.7.2<50312>" in finding.message
    else:  # the log's Abort lines made a rank dead: that is dead-rank's diagnosis, not ours
        assert findings == []


def test_healthy_nccl_log_does_not_trigger(tmp_path):
    lines = [line for line in (CORPUS / "synthetic_network_fault_nccl" / "rank0.nccl.log").read_text().splitlines()]
    for rank in range(4):
        text = (CORPUS / "synthetic_network_fault_nccl" / f"rank{rank}.nccl.log").read_text()
        kept = [line for line in text.splitlines() if "NCCL WARN" not in line and "net.cc:1134" not in line]
        (tmp_path / f"rank{rank}.nccl.log").write_text("\n".join(kept) + "\n")
    assert lines
    report = analyze(str(tmp_path))
    assert rule_findings(report) == [] and report.verdict != "network_fault"


def _with_events(incident, events):
    ranks = dict(incident.ranks)
    for rank, texts in events.items():
        ranks[rank] = replace(ranks[rank], log_events=tuple(
            Evidence(f"rank{rank}.log", i + 1, text) for i, text in enumerate(texts)))
    return replace(incident, ranks=ranks)


def _all_reduce(n, seq=7, **extra):
    return {str(r): {"current_op": "all_reduce", "op_seq": seq, **extra.get(r, {})}
            for r in range(n)}


def test_dead_rank_with_transport_errors_is_dead_ranks_diagnosis():
    states = _all_reduce(3)
    states["2"] = {"current_op": "all_reduce", "op_seq": 6, "alive": False, "exit_code": -9}
    incident = _with_events(incident_of(states), {0: [GLOO_LINE], 1: [GLOO_LINE.replace("8594", "8595")]})
    report = analyze_incident(incident, Plugins(autoload=False))
    assert report.verdict == "dead_rank" and rule_findings(report) == []


def test_missing_rank_with_transport_errors_is_missing_ranks_diagnosis():
    states = _all_reduce(3)
    states["2"] = {"current_op": "compute", "op_seq": 6}
    incident = _with_events(incident_of(states, hung=True), {0: [GLOO_LINE]})
    report = analyze_incident(incident, Plugins(autoload=False))
    assert report.verdict == "missing_rank" and rule_findings(report) == []


def test_all_joined_with_gloo_errors_without_timestamps_puts_cause_before_consequence():
    incident = _with_events(incident_of(_all_reduce(4)), {
        3: [GLOO_LINE],
        1: ["RuntimeError: [gloo/transport/tcp/pair.cc:575] Read error [127.0.0.1]:40111: Connection reset by peer"],
    })
    report = analyze_incident(incident, Plugins(autoload=False))
    assert report.verdict == "network_fault" and report.culprit_ranks == [1]
    (finding,) = rule_findings(report)
    assert "looks like a cause" in finding.message and "[127.0.0.1]:40111" in finding.message
    assert "rank 3:" in finding.message


def test_c10_timestamps_decide_over_kind():
    incident = _with_events(incident_of(_all_reduce(2)), {
        0: ["[rank0]:[E1129 10:11:15.000000001 ProcessGroupGloo.cpp:143] Read error [127.0.0.1]:1: "
            "Connection reset by peer"],
        1: ["[rank1]:[E1129 10:11:12.999999999 ProcessGroupGloo.cpp:143] Connection closed by peer "
            "[127.0.0.1]:2"],
    })
    (finding,) = rule_findings(analyze_incident(incident, Plugins(autoload=False)))
    assert finding.ranks == (1,) and "(by timestamp)" in finding.message


RESET_LINE = "RuntimeError: [gloo/transport/tcp/pair.cc:575] Read error [127.0.0.1]:40111: Connection reset by peer"


def test_only_closed_connections_are_a_peer_gone_not_a_network_fault():
    """Every member joined, and all the logs say is that peers closed their
    connections: the processes on the other side went away (their own logs
    say why). A broken link shows as a reset, a timeout, a completion error."""
    incident = _with_events(incident_of(_all_reduce(3), hung=True),
                            {0: [GLOO_LINE], 1: [GLOO_LINE.replace("8594", "8595")]})
    report = analyze_incident(incident, Plugins(autoload=False))
    assert rule_findings(report) == [] and report.verdict != "network_fault"


def test_not_blocked_and_not_stuck_is_only_a_warning():
    states = {"0": {"current_op": "compute"}, "1": {"current_op": "compute"}}
    incident = _with_events(incident_of(states), {0: [RESET_LINE]})
    report = analyze_incident(incident, Plugins(autoload=False))
    (finding,) = rule_findings(report)
    assert finding.severity == "warning" and report.verdict == "healthy"
    stuck = replace(incident, stuck=(StuckSignal("cli_hung", "the user says so"),))
    (finding,) = rule_findings(analyze_incident(stuck, Plugins(autoload=False)))
    assert finding.severity == "error"


def test_timeouts_and_unrelated_errors_are_not_transport_errors():
    for text in ("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 60000ms for recv operation to complete",
                 "[gloo/transport/tcp/pair.cc:598] Application timeout caused pair closure",
                 "h:1:1 [0] enqueue.cc:1586 NCCL WARN Cuda failure 'an illegal memory access was encountered'",
                 "h:1:1 [0] init.cc:1 NCCL WARN Mismatched NCCL version detected : rank 0 version 1 rank 1 version 2"):
        assert nf.classify(0, Evidence("x", 1, text)) is None, text
    cause = nf.classify(0, Evidence("x", 1, "h:1:2 [0] misc/ibvwrap.cc:212 NCCL WARN Call to ibv_modify_qp "
                                               "failed with 110 Connection timed out"))
    assert cause is not None and cause.cause_like
    closed = nf.classify(0, Evidence("x", 1, "h:1:2 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection "
                                                "closed by remote peer 10.0.0.1<44111>"))
    assert closed is not None and not closed.cause_like and closed.peer == "10.0.0.1<44111>"


def test_timestamp_forms():
    iso = nf.timestamp("[2026-05-13 18:31:07] h:1:1 [0] x.cc:1 NCCL WARN y")
    frac = nf.timestamp("[2026-05-13 18:31:07.250000] h:1:1 [0] x.cc:1 NCCL WARN y")
    c10 = nf.timestamp("[rank0]:[E513 18:31:07.999999999 ProcessGroupNCCL.cpp:1] z")
    assert iso[0] == frac[0] == c10[0] and iso[1] is None and frac[1] == 0.25 and c10[1] is None
    assert nf.timestamp("no time here") is None


def test_rule_describes_itself_in_both_languages():
    (doc,) = nf.RULES
    assert doc.id == "network-fault" and doc.severity == "error" and doc.kinds == ("network_fault",)
    assert doc.title_zh and doc.explanation_zh and doc.hint and doc.hint_zh
