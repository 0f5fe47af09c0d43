"""Verdicts from fragments whose messages state the cause (rules/stated_cause.py),
read through a small catalogue of our own so these tests pin the rule, not the
shipped catalogue's wording (tests/test_messages.py checks that)."""

import json
import os

import pytest

from forensics import messages
from forensics.cli import main
from forensics.model import Culprit
from forensics.replay import _same_process

SAMPLE = os.path.join(os.path.dirname(__file__), "fixtures", "messages", "sample.yaml")
EXAMPLES = {}


@pytest.fixture(autouse=True)
def sample_catalogue(monkeypatch):
    entries, problems = messages.load([SAMPLE])
    assert not problems
    cat = messages.Catalogue(entries)
    EXAMPLES.update({e.id: e.example for e in entries})
    monkeypatch.setattr(messages, "catalogue", lambda: cat)
    yield cat


def analyze(tmp_path, files: dict, *args) -> tuple[int, dict]:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    out = tmp_path / "report.json"
    code = main(["analyze", str(tmp_path), "-f", "json", "-o", str(out), "--no-plugins", "-q", "-j", "1", *args])
    return code, json.loads(out.read_text(encoding="utf-8"))


def test_one_ranks_monitored_barrier_failure_names_the_missing_ranks(tmp_path):
    code, report = analyze(tmp_path, {"stderr.txt": "[rank0]:" + EXAMPLES["sample-monitored-barrier"] + "\n"})
    assert code == 1
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [1, 3]
    assert report["confidence"]["level"] == "high"
    assert [c["rank"] for c in report["culprits"]] == [1, 3]
    assert report["decided_by"][0]["evidence"]["path"] == "stderr.txt"  # the failing barrier is the stuck evidence
    lead = report["findings"][0]
    assert lead["rule"] == "stated-missing-rank" and lead["evidence"][0] == {
        "path": "stderr.txt", "line": 1, "text": "[rank0]:" + EXAMPLES["sample-monitored-barrier"]}


def test_ib_errors_pasted_from_two_hosts_blame_the_peer_both_name(tmp_path):
    line = EXAMPLES["sample-ib-completion"]
    pasted = "\n".join([line, line.replace("node-a:2741:2790 [3]", "node-c:911:930 [0]")
                        .replace("<48212>", "<48999>")]) + "\n"
    code, report = analyze(tmp_path, {"warns.txt": pasted})
    assert code == 1 and report["verdict"] == "network_fault"
    assert report["culprit_ranks"] == [] and report["culprits"] == [{"addr": "10.1.0.12"}]
    assert report["confidence"]["level"] == "high"
    assert "10.1.0.12" in report["root_cause"]["narrative"]


def test_one_host_ib_error_blames_its_peer_with_medium_confidence(tmp_path):
    code, report = analyze(tmp_path, {"warns.txt": EXAMPLES["sample-ib-completion"] + "\n"})
    assert report["verdict"] == "network_fault"
    assert report["culprits"] == [{"addr": "10.1.0.12<48212>"}]
    assert report["confidence"]["level"] == "medium"


def test_a_closed_connection_blames_the_peer_resolved_to_its_rank(tmp_path):
    files = {
        "rank0.log": "[rank0]:" + EXAMPLES["sample-gloo-closed"] + "\n",
        # rank 1's NCCL init says which address it bootstraps on: that ties 10.0.0.2 to rank 1
        "rank1_nccl.log": EXAMPLES["sample-nccl-bootstrap"] + "\n",
        "pid_map.json": json.dumps({"0": {"pid": 900, "host": "gpu-a"}, "1": {"pid": 1741, "host": "gpu-b"}}),
    }
    code, report = analyze(tmp_path, files)
    assert report["verdict"] == "dead_rank", report["root_cause"]["narrative"]
    assert report["culprit_ranks"] == [1]
    assert any(c.get("rank") == 1 and c.get("addr") == "[10.0.0.2]:61201" for c in report["culprits"])
    # the reporter is a victim, never the culprit
    assert 0 not in report["culprit_ranks"]


def test_a_closed_connection_without_anything_tying_the_address_keeps_the_address(tmp_path):
    code, report = analyze(tmp_path, {"rank0.log": "[rank0]:" + EXAMPLES["sample-gloo-closed"] + "\n"})
    assert report["verdict"] == "dead_rank" and report["culprit_ranks"] == []
    assert report["culprits"] == [{"addr": "[10.0.0.2]:61201"}]
    assert report["confidence"]["level"] == "medium"


def test_detail_mismatch_from_one_log_blames_both_sides_with_medium_confidence(tmp_path):
    code, report = analyze(tmp_path, {"rank2.err": "[rank2]:" + EXAMPLES["sample-detail-mismatch"] + "\n"})
    assert report["verdict"] == "collective_mismatch"
    assert report["culprit_ranks"] == [0, 2] and report["confidence"]["level"] == "medium"


def test_detail_mismatch_named_by_two_logs_blames_the_odd_one(tmp_path):
    line = EXAMPLES["sample-detail-mismatch"]
    files = {"rank2.err": "[rank2]:" + line + "\n",
             "rank3.err": "[rank3]:" + line.replace("Rank 2 is running", "Rank 3 is running") + "\n"}
    code, report = analyze(tmp_path, files)
    assert report["verdict"] == "collective_mismatch"
    assert report["culprit_ranks"] == [0] and report["confidence"]["level"] == "high"


def test_an_own_error_outranks_the_knock_on_of_its_peers(tmp_path):
    files = {"rank1.log": "[rank1]:" + EXAMPLES["sample-cuda-error"] + "\n",
             "rank0.log": "[rank0]:" + EXAMPLES["sample-gloo-closed"] + "\n"}
    code, report = analyze(tmp_path, files)
    assert report["verdict"] == "dead_rank"
    assert report["findings"][0]["rule"] == "stated-crash"
    assert 1 in report["culprit_ranks"] and 0 not in report["culprit_ranks"]


def test_a_catalogued_stuck_line_no_structured_reader_knows_is_stuck_evidence(tmp_path):
    """A watchdog line pasted without its c10 prefix, beside a rank state that waits on another."""
    snapshot = {"0": {"current_op": "all_reduce", "waiting_for_ranks": [1], "op_seq": 5},
                "1": {"current_op": "compute", "waiting_for_ranks": [], "alive": True}}
    watchdog = EXAMPLES["sample-watchdog-timeout"].split("] ", 2)[-1]
    code, report = analyze(tmp_path, {"snapshot.json": json.dumps(snapshot), "pasted.txt": watchdog + "\n"})
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [1]
    assert [s["kind"] for s in report["decided_by"]] == ["stated_stuck"]
    assert report["decided_by"][0]["evidence"]["path"] == "pasted.txt"


def test_a_timeout_alone_blames_the_lower_ranks_it_proves_exist_with_low_confidence(tmp_path):
    """Rank 1 timed out waiting in all_reduce #5: rank 0 exists (ranks run
    from 0) and sent nothing. How many more ranks there are, nothing says."""
    code, report = analyze(tmp_path, {"rank1.log": EXAMPLES["sample-watchdog-timeout"] + "\n"})
    assert code == 1 and report["verdict"] == "missing_rank" and report["culprit_ranks"] == [0]
    assert report["confidence"]["level"] == "low" and report["confidence"]["missing"]
    assert "world size is not known" in report["confidence"]["reason"]


def test_a_timeout_of_a_high_rank_alone_is_inconclusive_and_says_what_would_decide(tmp_path):
    line = EXAMPLES["sample-watchdog-timeout"].replace("[rank1]", "[rank37]").replace("[Rank 1]", "[Rank 37]")
    code, report = analyze(tmp_path, {"rank37.log": line + "\n"})
    assert code == 0 and report["verdict"] == "inconclusive"
    assert report["confidence"]["level"] == "low" and report["confidence"]["missing"]
    assert "What would decide it" in report["root_cause"]["narrative"]
    assert any(f["rule"] == "stated-observation" for f in report["findings"])


def test_a_folder_holding_one_fragment_never_exits_2(tmp_path):
    for entry_id, example in EXAMPLES.items():
        folder = tmp_path / entry_id
        folder.mkdir()
        (folder / "fragment.txt").write_text(example + "\n", encoding="utf-8")
        assert main(["analyze", str(folder), "--no-plugins", "-q", "-j", "1", "-o", str(folder / "out")]) in (0, 1)


def test_structural_verdicts_lead_and_stated_ones_corroborate(tmp_path):
    """A rank state showing the same verdict leads; the message's finding stays as a warning."""
    snapshot = {"0": {"current_op": "barrier", "waiting_for_ranks": [1], "op_seq": 3},
                "1": {"current_op": "compute", "waiting_for_ranks": [], "alive": True}}
    files = {"snapshot.json": json.dumps(snapshot),
             "rank0.log": "[rank0]:" + EXAMPLES["sample-monitored-barrier"].replace("Ranks 1, 3", "Rank 1") + "\n"}
    code, report = analyze(tmp_path, files, "--hung")
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [1]
    stated = [f for f in report["findings"] if f["rule"] == "stated-missing-rank"]
    assert report["findings"][0]["rule"] != "stated-missing-rank"
    assert stated and stated[0]["severity"] == "warning"


@pytest.mark.parametrize("culprit, wanted, same", [
    (Culprit(rank=1, host="gpu-b"), {"rank": 1}, True),
    (Culprit(rank=1, host="gpu-b"), {"host": "gpu-b"}, True),
    (Culprit(rank=1, host="gpu-b"), {"host": "gpu-c"}, False),
    (Culprit(addr="10.0.0.7<5432>"), {"addr": "10.0.0.7"}, True),
    (Culprit(addr="[10.0.0.7]:5432"), {"addr": "10.0.0.7:5432"}, True),
    (Culprit(addr="10.0.0.8<5432>"), {"addr": "10.0.0.7"}, False),
    (Culprit(addr="10.0.0.7"), {"rank": 3}, False),
])
def test_expected_culprits_match_by_the_fields_given(culprit, wanted, same):
    assert _same_process(culprit, wanted) is same


@pytest.mark.parametrize("fmt, needles", [
    ("text", ["culprit processes: addr 10.1.0.12<48212>", "confidence: medium"]),
    ("markdown", ["culprit processes: addr 10.1.0.12\\<48212\\>", "*confidence: medium"]),
    ("html", ['<div class="processes">culprit processes: addr 10.1.0.12&lt;48212&gt;</div>',
              '<div class="confidence medium">confidence: <b>medium</b>']),
])
def test_every_report_shows_the_culprit_processes_and_the_confidence(tmp_path, fmt, needles):
    (tmp_path / "warns.txt").write_text(EXAMPLES["sample-ib-completion"] + "\n", encoding="utf-8")
    out = tmp_path / f"report.{fmt}"
    assert main(["analyze", str(tmp_path / "warns.txt"), "-f", fmt, "-o", str(out), "--no-plugins", "-q"]) == 1
    text = out.read_text(encoding="utf-8")
    for needle in needles:
        assert needle in text, (needle, text[:600])
