"""Rules → wait-for graph → verdict. A pure function of the Incident."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import explain
from .graph import GraphAnalysis, analyze_graph, build_graph
from .model import Finding, Incident
from .ruledocs import catalogue
from .ranking import VERDICT_OF_KIND, VERDICT_ORDER, link_symptoms, rank_findings

PROBLEM_VERDICTS = frozenset(VERDICT_ORDER)


@dataclass(slots=True)
class RootCause:
    kind: str
    ranks: tuple[int, ...]
    narrative: dict[str, str]  # lang → text
    finding: Finding | None = None


@dataclass(slots=True)
class Report:
    verdict: str
    culprit_ranks: list[int]
    cycles: list[list]
    root_cause: RootCause
    findings: list[Finding]
    incident: Incident
    analysis: GraphAnalysis
    decided_by: list = field(default_factory=list)  # StuckSignals that made waiting a hang
    diagnostics: list = field(default_factory=list)
    rules: dict = field(default_factory=dict)  # rule id → RuleDoc, for the findings' titles and docs

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict in PROBLEM_VERDICTS else 0


def analyze_incident(incident: Incident, plugins) -> Report:
    edges = plugins.call("forensics_wait_edges", incident=incident)
    findings = plugins.call("forensics_findings", incident=incident)
    analysis = analyze_graph(build_graph(edges, incident), incident)
    findings += plugins.call("forensics_graph_findings", incident=incident, analysis=analysis)
    findings = rank_findings(findings)
    verdict, lead = decide(findings, incident, analysis)
    findings = link_symptoms(findings, lead, analysis.graph)
    # Every finding that bears the verdict contributes: all knots of a
    # deadlock, the minorities of every mismatched group.
    culprits = sorted({r for f in findings if f.severity == "error"
                       and VERDICT_OF_KIND.get(f.kind) == verdict for r in f.ranks})
    root = RootCause(kind=lead.kind if lead else verdict, ranks=tuple(lead.ranks) if lead else (),
                     narrative={}, finding=lead)
    report = Report(
        verdict=verdict, culprit_ranks=culprits,
        cycles=analysis.cycles if verdict == "deadlock" else [],
        root_cause=root, findings=findings, incident=incident, analysis=analysis,
        decided_by=list(incident.stuck) if verdict == "missing_rank" else [],
        diagnostics=list(incident.diagnostics))
    report.rules = catalogue(plugins)
    _merge_plugin_diagnostics(report, plugins)
    root.narrative = {lang: explain.narrative(report, lang) for lang in explain.LANGS}
    return report


def _merge_plugin_diagnostics(report: Report, plugins) -> None:
    seen = set(report.diagnostics)
    report.diagnostics.extend(d for d in plugins.diagnostics if d not in seen)


def decide(findings: list[Finding], incident: Incident,
           analysis: GraphAnalysis) -> tuple[str, Finding | None]:
    for finding in findings:
        if finding.severity == "error" and finding.kind in VERDICT_OF_KIND:
            return VERDICT_OF_KIND[finding.kind], finding
    if not incident.ranks:
        return "inconclusive", None
    if incident.stuck and not analysis.waiting:
        # Stuck, yet nobody waits on anybody: the artifacts cannot say why
        # (everyone joined and nothing completes points at the transport).
        return "inconclusive", None
    return "healthy", None
