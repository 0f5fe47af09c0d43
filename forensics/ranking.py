"""When several findings apply: the first cause leads, symptoms are linked to it.

A hang usually shows one cause and several consequences: a rank dies, and
its peers log socket errors and wait for it; two ranks deadlock, and every
rank of the data-parallel group waits on them. Listing all of them as equals
sends the on-call engineer after the echoes. So findings are ordered:

1. the lead (the first error whose kind bears a verdict, in verdict order:
   a deadlock or a mismatch is never the consequence of a missing rank);
2. its co-causes: findings of the same verdict (every knot of a deadlock,
   every mismatched group), which are culprits too;
3. details: findings that say more about the culprit ranks themselves
   without bearing a verdict (a team rule saying the missing rank is
   writing a checkpoint), or that bear the same verdict read another way
   (the culprit's own error message), marked `detail_of` the lead's rule
   id: they tell why the culprit is where it is;
4. symptoms: verdict-bearing findings of lower precedence about the
   culprits (the rank a mismatch killed), and errors about ranks that
   wait, directly or through others, on the culprits (a peer's socket
   error), marked `symptom_of` the lead's rule id (a warning about a
   waiting rank is a hazard of its own and stays unlinked);
5. unrelated findings (a second, independent problem), then information.
"""

from __future__ import annotations

from dataclasses import replace

from .graph import waiters
from .model import Finding, node_rank

VERDICT_OF_KIND = {
    "p2p_circular_wait": "deadlock",
    "cross_stream_cycle": "deadlock",
    "circular_wait": "deadlock",
    "collective_mismatch": "collective_mismatch",
    "dead_rank": "dead_rank",
    "network_fault": "network_fault",
    "missing_rank": "missing_rank",
}
# Verdicts in the order a first cause outranks a symptom.
VERDICT_ORDER = ("deadlock", "collective_mismatch", "dead_rank", "network_fault", "missing_rank")
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Errors before warnings, verdict-bearing kinds in verdict order, then
    by rule id and ranks, so the report is deterministic."""
    def key(f: Finding):
        verdict = VERDICT_OF_KIND.get(f.kind)
        position = VERDICT_ORDER.index(verdict) if verdict else len(VERDICT_ORDER)
        return (SEVERITY_ORDER.get(f.severity, 3), position, f.rule, f.ranks, f.message)
    return sorted(findings, key=key)


def lead_of(findings: list[Finding]) -> Finding | None:
    """The first cause: the first verdict-bearing error of ranked findings."""
    return next((f for f in findings if f.severity == "error" and f.kind in VERDICT_OF_KIND), None)


def link_symptoms(findings: list[Finding], lead: Finding | None, graph=None) -> list[Finding]:
    """Ranked findings reordered: lead, co-causes, details (marked
    `detail_of`), symptoms (marked `symptom_of`), the rest."""
    if lead is None:
        return findings
    verdict = VERDICT_OF_KIND[lead.kind]
    culprits = {r for f in findings if f.severity == "error" and VERDICT_OF_KIND.get(f.kind) == verdict
                for r in f.ranks}
    affected = culprits | _waiting_on(graph, culprits)
    co_causes, details, symptoms, rest, info = [], [], [], [], []
    for finding in findings:
        if finding is lead:
            continue
        ranks = set(finding.ranks)
        bears = VERDICT_OF_KIND.get(finding.kind)
        if finding.severity == "error" and bears == verdict:
            co_causes.append(finding)
        elif bears == verdict and ranks and ranks <= culprits:
            # the same verdict, read another way (a message stating it): corroboration, not an echo
            details.append(replace(finding, detail_of=lead.rule))
        elif not ranks or not ranks <= affected:
            (info if finding.severity == "info" else rest).append(finding)
        elif bears is None and ranks <= culprits:
            details.append(replace(finding, detail_of=lead.rule))
        elif bears is not None or finding.severity == "error":
            symptoms.append(replace(finding, symptom_of=lead.rule))
        else:  # a warning about a waiting rank is a hazard of its own, not an echo of the lead
            (info if finding.severity == "info" else rest).append(finding)
    return [lead, *co_causes, *details, *symptoms, *rest, *info]


def _waiting_on(graph, ranks: set[int]) -> set[int]:
    """Ranks that wait, directly or through others, on any of `ranks`."""
    if graph is None or not ranks:
        return set()
    return {r for r in map(node_rank, waiters(graph, ranks)) if r is not None} - ranks
