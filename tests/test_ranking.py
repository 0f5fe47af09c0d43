"""Several findings: the first cause leads, details and symptoms are linked
to it, an unrelated problem is listed apart (real incident + a team plugin)."""

import json

import forensics
from forensics.hookspecs import hookimpl
from forensics.model import Finding
from forensics.plugins import Plugins
from forensics.report import render

from conftest import CORPUS

INCIDENT = CORPUS / "real_missing_rank_dataloader"  # rank 2 stuck loading data; 0, 1, 3 wait for it


class TeamRules:
    """Findings a team's plugin might add beside the built-in ones."""

    @hookimpl
    def forensics_findings(self, incident):
        loader = incident.ranks[2]
        return [
            # About the culprit itself, bearing no verdict: why it is elsewhere.
            Finding("team-storage-stall", "storage_stall", "warning", (2,),
                    "rank 2's prefetch thread is blocked reading a shard", (loader.evidence,)),
            # About a waiting rank: an echo of rank 2's absence.
            Finding("team-timeout", "collective_timeout", "error", (0,), "rank 0 logged a collective timeout"),
            # About no rank of this hang.
            Finding("team-disk", "disk_full", "warning", (7,), "rank 7's disk is full"),
        ]


def test_first_cause_leads_and_the_rest_is_linked_to_it():
    report = forensics.analyze(INCIDENT, hung=True, jobs=1, plugins=Plugins(autoload=False, extra=(TeamRules(),)))
    assert report.verdict == "missing_rank" and report.culprit_ranks == [2]
    order = [(f.rule, f.detail_of, f.symptom_of) for f in report.findings]
    assert order[0] == ("missing-rank", "", "")
    team = [entry for entry in order if entry[0].startswith("team-")]
    assert team == [("team-storage-stall", "missing-rank", ""),
                    ("team-timeout", "", "missing-rank"),
                    ("team-disk", "", "")]
    # Details, then symptoms, then the unrelated: whatever other rules add.
    kinds = ["detail" if d else "symptom" if s else "lead/rest" for _, d, s in order[1:]]
    assert kinds == sorted(kinds, key=["detail", "symptom", "lead/rest"].index)
    assert ("data-loading-stall-others-wait", "missing-rank", "") in order  # a shipped YAML rule says why
    text = render(report, "text")
    findings = text[text.index("Findings:"):].splitlines()
    assert findings[1].startswith("  [error] missing-rank (Missing rank): ")
    line = next(x for x in findings if "team-storage-stall" in x)
    # the narrative above already tells why rank 2 is there: the finding points to it instead of repeating it
    assert line.startswith("    ↳ [warning] team-storage-stall, why, for missing-rank: see above (rank 2)")
    assert "rank 2's prefetch" in text[:text.index("Findings:")]
    line = next(x for x in findings if "team-timeout" in x)
    assert line.startswith("    ↳ [error] team-timeout, a consequence of missing-rank: see above (rank 0)")
    assert "team-timeout: rank 0 logged" in text[:text.index("Findings:")]
    assert "  [warning] team-disk: rank 7's disk is full" in findings
    data = json.loads(render(report, "json"))
    assert [(f["rule"], f.get("detail_of") or "", f.get("symptom_of") or "") for f in data["findings"]] == order
    assert data["findings"][0]["title"] == "Missing rank"
    zh = json.loads(render(report, "json", "zh"))
    assert zh["findings"][0]["title"] == "成员缺失"


def test_without_a_lead_nothing_is_linked():
    report = forensics.analyze(CORPUS / "seed_healthy_chain", jobs=1, plugins=Plugins(autoload=False))
    assert report.verdict == "healthy"
    assert all(not f.symptom_of and not f.detail_of for f in report.findings)


class DeathOfTheOddRank:
    @hookimpl
    def forensics_findings(self, incident):
        return [Finding("team-crash", "dead_rank", "error", (0,), "rank 0 raised after its mismatched call")]


def test_a_lower_verdict_about_the_culprit_is_a_symptom():
    """The rank a mismatch killed: the mismatch leads, the death follows from it."""
    report = forensics.analyze(CORPUS / "real_collective_mismatch", hung=True, jobs=1,
                               plugins=Plugins(autoload=False, extra=(DeathOfTheOddRank(),)))
    assert report.verdict == "collective_mismatch" and report.culprit_ranks == [0]
    links = [(f.rule, f.symptom_of) for f in report.findings]
    assert links[0] == ("collective-mismatch", "") and ("team-crash", "collective-mismatch") in links
