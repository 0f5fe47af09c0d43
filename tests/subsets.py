"""Subset invariance (issue: which group each rank waits in, point 4): an
incident's verdict from each subset of its artifact kinds must be the
verdict from all of them, or `inconclusive` naming what would decide it;
never another cause.

The artifacts of an incident are parsed once; each subset is merged and
analysed from those facts (what `forensics analyze` does with the subset's
files). Families of artifact kinds:

    stacks    py-spy (text and JSON), gdb, pystack, tracebacks, faulthandler
    fr        Flight Recorder dumps, PyTorch's analyzer report
    logs      c10d/launcher logs, NCCL logs, any file of catalogued messages,
              torchelastic error files
    snapshot  watchdog snapshots

Rank maps (pid -> rank) say who is who, not what anyone does, and a
collect's progress.json whether anything moved (what --hung says): they go
with every subset.

A subset is judged as the user who collected it would run it: knowing the
job hung (`--hung`) whenever the whole incident is not healthy. Losing
artifacts loses evidence, not that knowledge.

A subset may name the same culprits less specifically: `missing_rank` where
all artifacts show the missing rank dead (`dead_rank`): the logs of the
survivors see a rank that never joined; only its own end says why."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, replace

from forensics.analysis import analyze_incident
from forensics.ingest import _parse_all, discover, merge
from forensics.model import StuckSignal
from forensics.plugins import Plugins
from forensics.replay import METADATA, find_incidents, load_expected

FAMILIES = {
    "py-spy": "stacks", "py-spy-json": "stacks", "gdb": "stacks", "pystack": "stacks",
    "traceback": "stacks", "faulthandler": "stacks",
    "flight-recorder": "fr", "fr-analyzer-report": "fr",
    "torch-log": "logs", "nccl": "logs", "messages": "logs", "elastic-error": "logs", "nccl-ras-report": "logs",
    "snapshot": "snapshot",
}
ALWAYS = {"rank-map", "collect-progress"}  # who is who; whether anything moved (as --hung says)
LESS_SPECIFIC = {("missing_rank", "dead_rank")}  # (a subset's verdict, the whole's), same culprits


@dataclass
class Outcome:
    families: tuple[str, ...]
    verdict: str
    culprits: list[int]
    would_decide: tuple[str, ...]


def incidents(root: str) -> list[str]:
    return find_incidents(root)


def outcomes(folder: str) -> tuple[Outcome, list[Outcome], dict]:
    """(the whole incident's outcome, each proper subset's, expected.yaml)."""
    expected = load_expected(os.path.join(folder, "expected.yaml"))
    hung = bool((expected.get("args") or {}).get("hung"))
    plugins = Plugins()
    artifacts, diagnostics = discover([folder], plugins, exclude=METADATA)
    parsed = []
    for artifact, facts in zip(artifacts, _parse_all(artifacts, plugins, 1)):
        if not isinstance(facts, tuple):
            parsed.append((artifact, facts))
    present = sorted({FAMILIES[a.kind] for a, _ in parsed if a.kind in FAMILIES})

    def run(families, hung: bool = hung) -> Outcome | None:
        chosen = [(a, f) for a, f in parsed if FAMILIES.get(a.kind) in families or a.kind in ALWAYS]
        if not any(FAMILIES.get(a.kind) in families for a, _ in chosen):
            return None
        incident = merge([f for _, f in chosen], tuple(a for a, _ in chosen), list(diagnostics))
        if hung:
            incident = replace(incident, stuck=incident.stuck + (StuckSignal("cli_hung", "--hung"),))
        report = analyze_incident(incident, Plugins())
        missing = report.confidence.missing if report.confidence is not None else ()
        return Outcome(tuple(families), report.verdict, sorted(report.culprit_ranks), tuple(missing))

    whole = run(present)
    knows_hung = hung or (whole is not None and whole.verdict != "healthy")
    subsets = []
    for size in range(1, len(present)):
        for families in itertools.combinations(present, size):
            found = run(families, knows_hung)
            if found is not None:
                subsets.append(found)
    return whole, subsets, expected


def problems(whole: Outcome, subsets: list[Outcome]) -> list[str]:
    out = []
    for sub in subsets:
        where = "+".join(sub.families)
        if sub.verdict == "inconclusive":
            if whole.verdict != "inconclusive" and not sub.would_decide:
                out.append(f"{where}: inconclusive without naming what would decide it")
            continue
        if (sub.verdict, whole.verdict) in LESS_SPECIFIC and sub.culprits == whole.culprits:
            continue
        if sub.verdict != whole.verdict:
            out.append(f"{where}: {sub.verdict} {sub.culprits}, but all artifacts say {whole.verdict} {whole.culprits}")
        elif sub.culprits != whole.culprits and not set(sub.culprits) <= set(whole.culprits):
            out.append(f"{where}: {sub.verdict} with culprits {sub.culprits}, all artifacts {whole.culprits}")
    return out


if __name__ == "__main__":  # a table of every incident: python tests/subsets.py [corpus]
    import sys

    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "corpus")
    bad = 0
    for folder in incidents(root):
        whole, subsets, _ = outcomes(folder)
        found = problems(whole, subsets) if whole else []
        bad += bool(found)
        name = os.path.basename(folder)
        print(f"{name:60} {whole.verdict if whole else '-':20} {len(subsets):2} subsets  {'; '.join(found)}")
    print(f"{bad} incident(s) with a subset that gives another cause")
