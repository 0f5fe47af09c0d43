"""Replay a corpus of past incidents and check each diagnosis still holds.

Each incident is a folder holding its artifacts and an `expected.yaml`:

    verdict: deadlock                 # required
    culprit_ranks: [0, 1]             # exact set, when given
    culprits: [{host: node7}]         # each must match one culprit process (the fields given)
    confidence: high                  # the report's confidence level, when given
    cycles: [[0, 1, 0]]               # exact witness cycles, when given
    findings: [p2p-circular-wait]     # rule ids that must be among the findings
    absent_findings: [missing-rank]   # rule ids that must not be
    decided_by: [cli_hung]            # stuck-signal kinds that must be cited
    narrative_contains: ["0 → 1 → 0"] # fragments of the English narrative
    args: {hung: true}                # analysis options
    xfail: "reason"                   # a known miss: reported, not a failure

Incidents that rely on a plugin or option not available here fail loudly
rather than pass silently.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import lazy
from .ingest.textio import InputError
from .model import address_host
from .report.json_report import node_json

EXPECTED = "expected.yaml"
# An incident's own description of itself: never evidence (it quotes the very
# lines the verdict should come from).
METADATA = frozenset({EXPECTED, "SOURCE.md"})
_KNOWN_KEYS = {"description", "verdict", "culprit_ranks", "culprits", "confidence", "cycles", "findings", "absent_findings",
               "decided_by", "narrative_contains", "args", "xfail", "scenario", "how",
               "captured_with", "regenerate", "notes", "compressed", "capture"}


@dataclass
class CaseResult:
    name: str
    path: str
    status: str  # pass | fail | xfail | xpass | error
    expected: str = ""
    got: str = ""
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def find_incidents(root: str) -> list[str]:
    if os.path.isfile(os.path.join(root, EXPECTED)):
        return [root]
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        if EXPECTED in files:
            found.append(folder)
            dirs[:] = []  # an incident's own sub-folders are its artifacts
    return found


def load_expected(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        found = lazy.yaml_anchor(text)
        if found is not None:
            raise InputError(path, f"YAML anchors and aliases are not read ({found[2]})", found[0])
        data = lazy.yaml.load(text, Loader=lazy.yaml_safe_loader())
    except lazy.yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise InputError(path, f"invalid YAML: {exc.problem}", mark.line + 1 if mark else 0) from None
    except (OSError, UnicodeDecodeError, lazy.yaml.YAMLError, RecursionError) as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    if not isinstance(data, dict) or "verdict" not in data:
        raise InputError(path, "expected.yaml must be a mapping with at least 'verdict'", 1)
    unknown = set(data) - _KNOWN_KEYS
    if unknown:
        raise InputError(path, f"unknown key(s): {', '.join(sorted(unknown))}", 1)
    return data


def check(report, expected: dict) -> list[str]:
    problems = []
    if report.verdict != expected["verdict"]:
        problems.append(f"verdict {report.verdict!r}, expected {expected['verdict']!r}")
    if "culprit_ranks" in expected and sorted(report.culprit_ranks) != sorted(expected["culprit_ranks"]):
        problems.append(f"culprit_ranks {report.culprit_ranks}, expected {expected['culprit_ranks']}")
    for wanted in expected.get("culprits") or []:
        if not any(_same_process(got, wanted) for got in report.culprits):
            problems.append(f"no culprit process matches {wanted} (got {[c.to_json() for c in report.culprits]})")
    if "confidence" in expected and (report.confidence is None or report.confidence.level != expected["confidence"]):
        problems.append(f"confidence {report.confidence.level if report.confidence else None!r}, "
                        f"expected {expected['confidence']!r}")
    if "cycles" in expected:
        got = [[node_json(n) for n in c] for c in report.cycles]
        want = [list(c) for c in expected["cycles"]]
        if got != want:
            problems.append(f"cycles {got}, expected {want}")
    rules = {f.rule for f in report.findings}
    for rule in expected.get("findings", []) or []:
        if rule not in rules:
            problems.append(f"finding {rule!r} missing (got {sorted(rules)})")
    for rule in expected.get("absent_findings", []) or []:
        if rule in rules:
            problems.append(f"finding {rule!r} present but must not be")
    kinds = {s.kind for s in report.decided_by}
    for kind in expected.get("decided_by", []) or []:
        if kind not in kinds:
            problems.append(f"not decided by {kind!r} (got {sorted(kinds)})")
    narrative = report.root_cause.narrative.get("en", "")
    for fragment in expected.get("narrative_contains", []) or []:
        if fragment not in narrative:
            problems.append(f"narrative lacks {fragment!r}")
    return problems


def _same_process(culprit, wanted) -> bool:
    """A culprit matches an expected one when every field given agrees; an
    address also matches by its host part (`10.0.0.7` matches `10.0.0.7<5432>`)."""
    if not isinstance(wanted, dict):
        return False
    got = culprit.to_json()
    for name, value in wanted.items():
        if name == "addr":
            have = str(got.get("addr", ""))
            if have != str(value) and address_host(have) != address_host(str(value)):
                return False
        elif got.get(name) != value:
            return False
    return True


def run_case(folder: str, plugins_factory) -> CaseResult:
    import time

    from . import analyze

    name = os.path.basename(os.path.normpath(folder))
    started = time.perf_counter()
    expected: dict = {}
    try:
        expected = load_expected(os.path.join(folder, EXPECTED))
        args = expected.get("args") or {}
        report = analyze(folder, hung=bool(args.get("hung")), plugins=plugins_factory(), exclude=METADATA)
    except InputError as exc:
        # A known miss may be a folder the tool cannot read at all yet.
        status = "xfail" if expected.get("xfail") else "error"
        return CaseResult(name, folder, status, expected.get("verdict", ""), "", problems=[str(exc)],
                          seconds=time.perf_counter() - started)
    problems = check(report, expected)
    xfail = expected.get("xfail")
    if xfail:
        status = "xpass" if not problems else "xfail"
        problems = problems or [f"expected to fail ({xfail}) but passed: remove xfail"]
    else:
        status = "fail" if problems else "pass"
    return CaseResult(name, folder, status, expected["verdict"], report.verdict, problems,
                      time.perf_counter() - started)


def replay(root: str, plugins_factory) -> list[CaseResult]:
    return [run_case(folder, plugins_factory) for folder in find_incidents(root)]


def failed(results: list[CaseResult]) -> bool:
    return any(r.status in ("fail", "error", "xpass") for r in results)


def table(results: list[CaseResult]) -> str:
    width = max([len(r.name) for r in results] + [8])
    lines = [f"{'incident'.ljust(width)}  {'status':6}  {'expected':20}  got"]
    for r in results:
        lines.append(f"{r.name.ljust(width)}  {r.status:6}  {r.expected:20}  {r.got}")
        for problem in r.problems:
            lines.append(f"{'':{width}}    - {problem}")
    counts = {s: sum(1 for r in results if r.status == s) for s in ("pass", "fail", "error", "xfail", "xpass")}
    lines.append(f"{counts['pass']} passed, {counts['fail'] + counts['error'] + counts['xpass']} failed"
                 + (f", {counts['xfail']} xfailed" if counts["xfail"] else ""))
    return "\n".join(lines) + "\n"


_OUTCOME = {"fail": "failure", "xpass": "failure", "error": "error", "xfail": "skipped"}


def junit(results: list[CaseResult]) -> str:
    """The replay as JUnit XML, through the same writer as `--format junit`."""
    from .report.junit import Case, Suite, testsuite

    cases = []
    for r in results:
        outcome = _OUTCOME.get(r.status, "pass")
        message = "known miss" if outcome == "skipped" else (r.problems[0] if r.problems else "")
        cases.append(Case(r.name, "corpus", outcome, message, "\n".join(r.problems), seconds=r.seconds))
    return testsuite(Suite("forensics-replay", cases))
