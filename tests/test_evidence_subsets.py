"""Part of a real capture never names another cause, and a stated failure is never `healthy`.

For every real capture of the corpus (`corpus/real_*`: Gloo jobs run on this machine), each subset of its files
that exists (only its stack dumps, only its Flight Recorder dumps, only its logs) is copied to a folder of its
own and analyzed as a user would (`forensics analyze`, the incident's own `args`). The verdict is the expected
one or `inconclusive`; where it is the expected one, the culprits named are among the expected ones. A subset
the tool finds nothing in (exit 2, "nothing here describes a process") concludes nothing, which is allowed.

Which subset a file belongs to is what the tool reads it as: the `read` section of the whole capture's report,
by the families of tests/subsets.py (and a job's console output, a log). Rank maps and a collect's progress rounds go with every subset (who is
who, whether anything moved). A file read as kinds of several families (a launcher log quoting a traceback,
the Flight Recorder analyzer's report with its own failure) belongs to its container, the first of PRECEDENCE
that one of its kinds is in.

No verdict is `healthy` where the artifacts state a timeout, an abort or an error of a collective: the JSON
report's `events` carry each catalogued line with its entry's cause (rules/messages/, `proves.cause`) as
`kind` and the entry's id as `detail`. Checked on every corpus incident whole and on each subset above.

A subset known to give another cause is listed in KNOWN with the reason (a strict xfail: it fails once the
subset stops differing, then remove it)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

import subsets
from conftest import CORPUS, corpus_report

pytestmark = pytest.mark.slow

REAL = sorted(p.name for p in CORPUS.glob("real_*") if (p / "expected.yaml").is_file())
EVERY = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.yaml").is_file())
SUBSETS = ("stacks", "fr", "logs")
PRECEDENCE = ("fr", "logs", "stacks", "snapshot")
# Catalogue causes (rules/messages.schema.json, `proves.cause`) that state a timeout, an abort or an error of a
# collective: a hang or a wait stated as such, a peer gone or a transport fault under a call, calls that disagree.
STATED_FAILURE = frozenset({"timeout", "abort", "hang", "missing_rank", "collective_mismatch", "network_fault",
                            "peer_died"})

KNOWN: dict[tuple[str, str], str] = {}
# What each kind read belongs to: tests/subsets.py's families, and a job's own console output (rank0.stdout.log)
# is a log too.
FAMILIES = {**subsets.FAMILIES, "console": "logs"}


def _expected(incident: str) -> dict:
    return yaml.safe_load((CORPUS / incident / "expected.yaml").read_text(encoding="utf-8"))


def _args(incident: str) -> list[str]:
    return ["--hung"] if (_expected(incident).get("args") or {}).get("hung") else []


def families_of_files(incident: str) -> dict[str, set[str]]:
    """{family: files} of a capture, from what the tool read each file as."""
    report = corpus_report(incident)
    kinds: dict[str, set[str]] = {}
    for read in report.incident.read:
        # A section of a file (`torchrun.log[default0]`: one worker's lines) is read from the file itself.
        path = read.path if (CORPUS / incident / read.path).is_file() else re.sub(r"\[[^\]/]*\]$", "", read.path)
        kinds.setdefault(path, set()).add(read.kind)
    out: dict[str, set[str]] = {}
    for path, found in kinds.items():
        if found & subsets.ALWAYS:
            out.setdefault("always", set()).add(path)
            continue
        families = {FAMILIES[k] for k in found if k in FAMILIES}
        for family in PRECEDENCE:
            if family in families:
                out.setdefault(family, set()).add(path)
                break
    return out


_SUBSET_REPORTS: dict = {}


def subset_report(incident: str, subset: str, root: Path):
    """(the JSON report of the subset, its files), analyzed once per session; the report is None where the tool
    found nothing to read (exit 2); (None, empty) where the capture has no file of the subset."""
    key = (incident, subset)
    if key not in _SUBSET_REPORTS:
        files = families_of_files(incident)
        chosen = files.get(subset, set())
        report = None
        if chosen:
            folder = root / incident / subset
            for path in sorted(chosen | files.get("always", set())):
                (folder / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(CORPUS / incident / path, folder / path)
            report = run(folder, root / incident / f"{subset}.json", *_args(incident))
        _SUBSET_REPORTS[key] = (report, chosen)
    return _SUBSET_REPORTS[key]


def run(folder: Path, out: Path, *args: str) -> dict | None:
    """`forensics analyze FOLDER -f json -o OUT` in this process; the report, or None on exit 2 with none."""
    from forensics.cli import main

    code = main(["analyze", str(folder), "-f", "json", "-o", str(out), "--no-plugins", "-q", "-j", "1", *args])
    if code == 2 and not out.exists():
        return None
    assert code in (0, 1), f"exit {code}"
    return json.loads(out.read_text(encoding="utf-8"))


def stated_failures(events: list[dict]) -> list[str]:
    return [f"{e['evidence']['path']}:{e['evidence']['line']} {e.get('detail', '')} ({e['kind']})"
            for e in events if e["kind"] in STATED_FAILURE]


@pytest.fixture(scope="module")
def subset_root(tmp_path_factory):
    return tmp_path_factory.mktemp("subsets")


def _cases():
    for incident in REAL:
        for subset in SUBSETS:
            reason = KNOWN.get((incident, subset))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(incident, subset, id=f"{incident}-{subset}", marks=marks)


def test_known_contradictions_name_real_subsets():
    assert set(KNOWN) <= {(i, s) for i in REAL for s in SUBSETS}


@pytest.mark.parametrize("incident,subset", list(_cases()))
def test_a_subset_names_the_expected_cause_or_none(incident, subset, subset_root):
    report, files = subset_report(incident, subset, subset_root)
    if not files:
        pytest.skip(f"the capture has no {subset} file")
    if report is None:
        return  # nothing in the subset describes a process: no cause named
    expected = _expected(incident)
    verdict, culprits = report["verdict"], set(report["culprit_ranks"])
    wanted = set(expected.get("culprit_ranks") or culprits)
    problem = None
    if verdict != "inconclusive" and verdict != expected["verdict"]:
        problem = f"{subset} only ({len(files)} files): {verdict} {sorted(culprits)}, expected {expected['verdict']}"
    elif verdict == expected["verdict"] and not culprits <= wanted:
        problem = f"{subset} only: culprits {sorted(culprits)}, not among the expected {sorted(wanted)}"
    whole = files == set().union(*(v for k, v in families_of_files(incident).items() if k != "always"))
    if problem and whole and expected.get("xfail"):
        pytest.xfail(f"the subset is the whole capture, a known miss: {expected['xfail']}")
    assert problem is None, problem


@pytest.mark.parametrize("incident,subset", [(i, s) for i in REAL for s in SUBSETS],
                         ids=[f"{i}-{s}" for i in REAL for s in SUBSETS])
def test_a_subset_stating_a_failure_is_never_healthy(incident, subset, subset_root):
    report, files = subset_report(incident, subset, subset_root)
    if report is None:
        pytest.skip(f"the capture has no {subset} file" if not files else "nothing in the subset is read")
    stated = stated_failures(report["events"])
    if stated:
        assert report["verdict"] != "healthy", f"healthy although {subset} only states: {stated[:3]}"


@pytest.mark.parametrize("incident", EVERY)
def test_an_incident_stating_a_failure_is_never_healthy(incident):
    from forensics.ingest.textio import InputError
    from forensics.report.json_report import to_dict

    report = corpus_report(incident)
    if isinstance(report, InputError):
        pytest.skip(f"nothing read: {report}")
    stated = stated_failures(to_dict(report)["events"])
    if stated:
        assert report.verdict != "healthy", f"healthy although the artifacts state: {stated[:3]}"


def test_the_failure_causes_are_the_catalogue_s_and_real_captures_state_them():
    """The check above is not empty: every cause named is one the catalogue gives, and the real captures whose
    processes failed (a peer closed, a monitored barrier, a size mismatch) are found stating one."""
    from forensics.messages import catalogue

    causes = {entry.cause for entry in catalogue().entries}
    assert STATED_FAILURE <= causes, STATED_FAILURE - causes
    from forensics.report.json_report import to_dict

    for incident in ("real_exception_one_rank_peers_closed", "real_monitored_barrier_names_rank",
                     "real_two_threads_one_group_abort", "real_watchdog_timeout_missing_rank"):
        assert stated_failures(to_dict(corpus_report(incident))["events"]), incident
