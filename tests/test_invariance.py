"""Evidence wherever it stands: every corpus incident, laid out as real
consoles lay it out (tests/transforms.py: training output before or after
each text log, one console per rank, two ranks interleaved under `[rankN]:`,
gzip), gives the verdict and culprit ranks the incident itself gives.

The comparison is with the tool's own answer on the original folder, not
with expected.yaml: a known miss stays a miss, but must stay the same one.
Each incident runs with its expected.yaml `args` (`hung: true`), as
`forensics replay` runs it.

Every pair that differs today is listed in KNOWN_DIFFERENCES and runs as a
strict xfail: when a reader learns to find the evidence there, the pair
XPASSes, which fails the run, and its entry must go.

Cost: each transformed copy is written once, analysed once and removed
(the 30 MB ones are hundreds of MB per incident); each original is analysed
once per session.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import tempfile
from typing import NamedTuple

import pytest

import transforms
from forensics import analyze
from forensics.ingest.textio import InputError
from forensics.plugins import Plugins
from forensics.replay import METADATA, find_incidents, load_expected

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")
INCIDENTS = find_incidents(CORPUS)
UNREADABLE = "unreadable"

# (incident, transform): "the incident's verdict [culprits] -> the copy's: what the copy loses" (the
# artifact kinds and files no longer read). `python tests/test_invariance.py` prints today's differences.
# Each entry must still differ, or the run fails (strict xfail): remove it.
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {}


class Outcome(NamedTuple):
    verdict: str  # a verdict, or UNREADABLE (the tool refused the folder: InputError)
    culprits: tuple[int, ...]
    detail: str = ""  # the InputError's message; not compared

    def same(self, other: "Outcome") -> bool:
        return (self.verdict, self.culprits) == (other.verdict, other.culprits)

    def __str__(self) -> str:
        if self.verdict == UNREADABLE:
            return f"{UNREADABLE} ({self.detail})"
        return f"{self.verdict} {list(self.culprits)}"


def outcome(folder: str, hung: bool) -> Outcome:
    try:
        report = analyze(folder, hung=hung, plugins=Plugins(), exclude=METADATA)
    except InputError as exc:
        return Outcome(UNREADABLE, (), str(exc))
    return Outcome(report.verdict, tuple(sorted(report.culprit_ranks)))


def hung_of(folder: str) -> bool:
    return bool((load_expected(os.path.join(folder, "expected.yaml")).get("args") or {}).get("hung"))


class Runs:
    """The originals' outcomes (each computed once) and a scratch folder
    for the transformed copies."""

    def __init__(self, scratch: str):
        self.scratch = scratch
        self._originals: dict[str, Outcome] = {}

    def original(self, folder: str) -> Outcome:
        if folder not in self._originals:
            self._originals[folder] = outcome(folder, hung_of(folder))
        return self._originals[folder]

    def transformed(self, folder: str, transform: str) -> Outcome:
        copy = os.path.join(self.scratch, transform, os.path.basename(folder))
        try:
            transforms.TRANSFORMS[transform](folder, copy)
            return outcome(copy, hung_of(folder))
        finally:
            shutil.rmtree(copy, ignore_errors=True)


@pytest.fixture(scope="session")
def runs():
    scratch = tempfile.mkdtemp(prefix="forensics-invariance-")
    yield Runs(scratch)
    shutil.rmtree(scratch, ignore_errors=True)


def _cases():
    for folder in INCIDENTS:
        name = os.path.basename(folder)
        for transform in transforms.TRANSFORMS:
            if not transforms.applies(transform, folder):
                continue  # nothing to transform: the copy would be the incident itself
            known = KNOWN_DIFFERENCES.get((name, transform))
            marks = [pytest.mark.xfail(strict=True, reason=known)] if known else []
            yield pytest.param(folder, transform, marks=marks, id=f"{name}-{transform}")


@pytest.mark.slow
@pytest.mark.parametrize("folder, transform", list(_cases()))
def test_the_same_diagnosis_however_the_evidence_is_laid_out(runs, folder, transform):
    original = runs.original(folder)
    got = runs.transformed(folder, transform)
    assert got.same(original), (
        f"{transform}: {got}, the incident itself: {original} "
        f"(the copy: python tests/transforms.py {os.path.relpath(folder)} /tmp/copy {transform})")


def test_known_differences_name_real_cases():
    cases = {(os.path.basename(f), t) for f in INCIDENTS for t in transforms.TRANSFORMS if transforms.applies(t, f)}
    assert set(KNOWN_DIFFERENCES) <= cases, sorted(set(KNOWN_DIFFERENCES) - cases)


# -- the transforms themselves ----------------------------------------------------------------------

SAMPLE = os.path.join(CORPUS, "real_exception_one_rank_peers_closed")  # text logs, pickles, JSON, a pid map
_EVIDENCE_WORDS = re.compile(rb"nccl|timeout|timed out|error|exception|traceback|abort|kill|exit|signal|watchdog"
                             rb"|barrier|collective|pid|host|thread|File \"", re.IGNORECASE)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def test_training_output_is_deterministic_bounded_and_says_nothing_of_a_hang():
    out = transforms.training_output(300 * transforms.KB)
    assert out == transforms.training_output(300 * transforms.KB)
    assert 300 * transforms.KB - 2000 < len(out) <= 300 * transforms.KB
    assert out.endswith(b"\n") and b"\r" in out and b"[rank0]:" in out and b"UserWarning" in out
    assert re.search(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - INFO - .* loss=", out, re.MULTILINE)
    assert not _EVIDENCE_WORDS.search(out)
    five = transforms.training_output(300 * transforms.KB, rank=5)
    assert b"[rank0]:" not in five and five.count(b"[rank5]:") == out.count(b"[rank0]:")
    crlf = transforms.training_output(300 * transforms.KB, ascii_only=True, newline=b"\r\n")
    assert crlf.isascii() and crlf.count(b"\n") == crlf.count(b"\r\n")


def test_training_output_alone_is_no_evidence(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.stderr.log").write_bytes(transforms.training_output(300 * transforms.KB, rank=rank))
    got = outcome(str(tmp_path), hung=False)
    assert got.verdict in (UNREADABLE, "healthy") and got.culprits == (), got


def test_text_logs_are_the_unstructured_text_files():
    logs = set(transforms.text_logs(SAMPLE))
    assert "rank0.stderr.log" in logs and "torchrun.log" in logs and "fr_analyzer_after_error.txt" in logs
    assert not logs & {"pid_map.json", "expected.yaml", "fr_after_error/nccl_trace_rank_0",
                       "fr_after_error_json/rank0.fr.json"}
    assert transforms.file_rank("gpu-b12/rank4.stderr.log") == 4
    assert transforms.file_rank("nccl_init_rank3.log") == 3 and transforms.file_rank("logs/rank-2.log") == 2
    assert transforms.file_rank("tp0_nccl.log") is None and transforms.file_rank("local_rank1.log") is None
    assert transforms.file_rank("slurm-34446.out") is None and transforms.file_rank("worker-1.log") is None


@pytest.mark.parametrize("transform", ["prepend-300KB", "append-300KB"])
def test_training_output_goes_around_each_text_log_and_nothing_else(tmp_path, transform):
    transforms.TRANSFORMS[transform](SAMPLE, str(tmp_path / "copy"))
    logs = set(transforms.text_logs(SAMPLE))
    assert transforms.files(str(tmp_path / "copy")) == transforms.files(SAMPLE)
    for rel in transforms.files(SAMPLE):
        before, after = _read(os.path.join(SAMPLE, rel)), _read(str(tmp_path / "copy" / rel))
        if rel not in logs:
            assert after == before, rel
            continue
        added = after[:len(after) - len(before)] if transform.startswith("prepend") else after[len(before):]
        assert (after.endswith(before) if transform.startswith("prepend") else after.startswith(before)), rel
        rank = transforms.file_rank(rel)
        assert added == transforms.training_output(300 * transforms.KB, rank=rank or 0), rel


def test_one_console_per_rank_holds_all_its_files(tmp_path):
    copy = str(tmp_path / "copy")
    transforms.concat_per_rank(SAMPLE, copy)
    consoles = transforms.rank_consoles(SAMPLE)
    assert sorted(consoles) == [("", 0), ("", 1), ("", 2)]
    assert consoles[("", 1)] == ["rank1.stderr.log", "rank1.stdout.log"]
    for (where, rank), rels in consoles.items():
        assert _read(os.path.join(copy, transforms.console_name(where, rank))) == b"".join(
            transforms._ended(_read(os.path.join(SAMPLE, rel))) for rel in rels)
        assert not any(os.path.exists(os.path.join(copy, rel)) for rel in rels)
    assert _read(os.path.join(copy, "torchrun.log")) == _read(os.path.join(SAMPLE, "torchrun.log"))
    assert _read(os.path.join(copy, "expected.yaml")) == _read(os.path.join(SAMPLE, "expected.yaml"))


def test_two_ranks_interleaved_line_by_line_come_apart_by_their_prefixes(tmp_path):
    copy = str(tmp_path / "copy")
    transforms.interleave_two_ranks(SAMPLE, copy)
    assert transforms.rank_pairs(SAMPLE) == [("", 0, 1)]
    merged = _read(os.path.join(copy, transforms.interleave_name("", 0))).split(b"\n")
    consoles = transforms.rank_consoles(SAMPLE)
    for rank in (0, 1):
        console = transforms._console(SAMPLE, consoles[("", rank)])
        prefix = f"[rank{rank}]:".encode()
        mine = [line for line in merged if line.startswith(prefix)]
        # a line that carried its own prefix keeps it; the others gained it
        assert [line if line.startswith(prefix) else prefix + line for line in console.split(b"\n")[:-1]] == mine
    assert merged[0].startswith(b"[rank0]:") and merged[1].startswith(b"[rank1]:")
    assert os.path.exists(os.path.join(copy, "rank2.stderr.log"))  # the third rank has no partner
    assert not os.path.exists(os.path.join(copy, "rank0.stderr.log"))


def test_gzip_keeps_each_text_log_whole(tmp_path):
    copy = str(tmp_path / "copy")
    transforms.gzip_logs(SAMPLE, copy)
    for rel in transforms.text_logs(SAMPLE):
        assert gzip.decompress(_read(os.path.join(copy, rel + ".gz"))) == _read(os.path.join(SAMPLE, rel))
        assert not os.path.exists(os.path.join(copy, rel))
    assert _read(os.path.join(copy, "pid_map.json")) == _read(os.path.join(SAMPLE, "pid_map.json"))


def test_host_folders_of_text_logs_only_are_kept(tmp_path):
    incident = os.path.join(CORPUS, "pm_clock_skew_oom_before_timeout")  # gpu-a07/, gpu-b12/: rank logs
    for transform in ("prepend-300KB", "concat-per-rank", "interleave-two-ranks", "gzip"):
        copy = str(tmp_path / transform)
        transforms.TRANSFORMS[transform](incident, copy)
        assert os.path.exists(os.path.join(copy, "gpu-b12", "torchrun.out" + (".gz" if transform == "gzip" else "")))
    assert os.path.exists(str(tmp_path / "concat-per-rank" / "gpu-b12" / "rank7.console.log"))
    assert os.path.exists(str(tmp_path / "interleave-two-ranks" / "gpu-a07" / "tee_console_b.log"))


def _lost(folder: str, copy: str, transform: str) -> str:
    """Which artifact kinds (and files, when few) the copy no longer yields, or which ranks it no longer places."""
    from collections import Counter

    from forensics.ingest import discover

    def found(where):
        return [(a.display, a.kind, a.rank_hint) for a in discover([where], Plugins(), exclude=METADATA)[0]]

    where = {"prepend": "behind the training output", "append": "before the training output",
             "concat": "inside the rank consoles", "interleave": "under `[rankN]:` prefixes",
             "gzip": "gzip-compressed"}[transform.split("-")[0]]
    before, after = found(folder), found(copy)
    lost = Counter(k for _, k, _ in before) - Counter(k for _, k, _ in after)
    if lost:
        kept = {(d, k) for d, k, _ in after}
        parts = []
        for kind, count in sorted(lost.items()):
            names = [os.path.basename(d) for d, k, _ in before if k == kind and (d, k) not in kept]
            parts.append(f"{kind} ({', '.join(names)})" if 0 < len(names) <= 2 else f"{kind} ×{count}")
        return f"{', '.join(parts)} not read {where}"
    unplaced = sorted({(k, r) for _, k, r in before if r is not None} - {(k, r) for _, k, r in after})
    if unplaced:
        return f"read {where} but no longer placed on a rank: " + ", ".join(f"{k} of rank {r}" for k, r in unplaced)
    said = set(_reader_notes(folder).values())
    new: dict[str, list[str]] = {}
    for display, note in _reader_notes(copy).items():
        if note not in said:
            new.setdefault(note, []).append(os.path.basename(display))
    if new:
        return f"read {where}, the readers say: " + "; ".join(
            f"{', '.join(names[:2])}{f' (+{len(names) - 2})' if len(names) > 2 else ''}: {note}"
            for note, names in sorted(new.items()))
    return f"the same artifacts are read {where}, with nothing more said"


def _reader_notes(folder: str) -> dict[str, str]:
    """{artifact: the error that stopped its reader, or its reader's first diagnostic}."""
    from forensics.ingest import _parse_all, discover

    plugins = Plugins()
    artifacts, _ = discover([folder], plugins, exclude=METADATA)
    notes = {}
    for artifact, facts in zip(artifacts, _parse_all(artifacts, plugins, 1)):
        if isinstance(facts, tuple):
            notes[artifact.display] = facts[2]
        elif facts.diagnostics:
            notes[artifact.display] = facts.diagnostics[0].message
    return notes


# Today's differences as KNOWN_DIFFERENCES entries: python tests/test_invariance.py [TRANSFORM ...]
if __name__ == "__main__":
    import sys
    import textwrap
    import time

    wanted = sys.argv[1:] or list(transforms.TRANSFORMS)
    scratch = tempfile.mkdtemp(prefix="forensics-invariance-")
    runs_ = Runs(scratch)
    seconds: dict[str, float] = {}
    counts: dict[str, list[int]] = {}
    for folder in INCIDENTS:
        name = os.path.basename(folder)
        for transform in wanted:
            if not transforms.applies(transform, folder):
                continue
            started = time.perf_counter()
            original, copy = runs_.original(folder), os.path.join(scratch, transform, name)
            transforms.TRANSFORMS[transform](folder, copy)
            got = outcome(copy, hung_of(folder))
            seconds[transform] = seconds.get(transform, 0.0) + time.perf_counter() - started
            tally = counts.setdefault(transform, [0, 0, 0])
            tally[0] += 1
            if not got.same(original):
                tally[1] += 1
                tally[2] += got.verdict == UNREADABLE
                shown = f"{UNREADABLE} ({got.detail.split(': ', 1)[-1]})" if got.verdict == UNREADABLE else str(got)
                text = f"{original} -> {shown}: {_lost(folder, copy, transform)}"
                lines = textwrap.wrap(text, 108, drop_whitespace=False, break_long_words=False)
                print(f'    ("{name}", "{transform}"):\n' + "\n".join(f'        "{line}"' for line in lines) + ",",
                      flush=True)
            shutil.rmtree(copy)
    shutil.rmtree(scratch, ignore_errors=True)
    for transform, (runs_count, differ, unreadable) in counts.items():
        print(f"{transform}: {differ} of {runs_count} differ ({unreadable} unreadable), {seconds[transform]:.1f} s",
              file=sys.stderr)
