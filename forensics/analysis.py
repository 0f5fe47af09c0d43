"""Rules → wait-for graph → verdict. A pure function of the Incident."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import explain
from .graph import GraphAnalysis, analyze_graph, build_graph
from .model import Finding, Incident

# Verdicts in the order a first cause outranks a symptom.
VERDICT_OF_KIND = {
    "p2p_circular_wait": "deadlock",
    "cross_stream_cycle": "deadlock",
    "circular_wait": "deadlock",
    "collective_mismatch": "collective_mismatch",
    "dead_rank": "dead_rank",
    "network_fault": "network_fault",
    "missing_rank": "missing_rank",
}
VERDICT_ORDER = ("deadlock", "collective_mismatch", "dead_rank", "network_fault", "missing_rank")
PROBLEM_VERDICTS = frozenset(VERDICT_ORDER)
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


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
    _merge_plugin_diagnostics(report, plugins)
    root.narrative = {lang: explain.narrative(report, lang) for lang in explain.LANGS}
    return report


def _merge_plugin_diagnostics(report: Report, plugins) -> None:
    seen = set(report.diagnostics)
    report.diagnostics.extend(d for d in plugins.diagnostics if d not in seen)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """First cause first: errors before warnings, verdict-bearing kinds in
    verdict order, then by rule id and ranks for a deterministic report."""
    def key(f: Finding):
        verdict = VERDICT_OF_KIND.get(f.kind)
        position = VERDICT_ORDER.index(verdict) if verdict else len(VERDICT_ORDER)
        return (SEVERITY_ORDER.get(f.severity, 3), position, f.rule, f.ranks, f.message)
    return sorted(findings, key=key)


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
