"""Logs as a collector hands them over: every line after the time it was
read (`kubectl logs --timestamps`, `docker logs --timestamps`, GitHub
Actions' raw job logs). The readers see the lines without those stamps,
at the same line numbers; a program's own times (dmesg's) stay.

The corpus test stamps every text artifact of every incident the way
kubectl prints it and checks that the diagnosis, and every line it cites,
is the one of the unstamped files."""

from __future__ import annotations

import gzip
import os
import shutil
import time

import pytest

from forensics import analyze
from forensics.ingest.textio import stamped, unstamp, unstamped_copy
from forensics.replay import METADATA, find_incidents, load_expected

CORPUS = os.path.join(os.path.dirname(__file__), "..", "corpus")
T0 = 1_764_648_000_000_000_000  # 2025-12-02T04:00:00Z, in ns


def rfc3339nano(ns: int) -> str:
    """Go's time.RFC3339Nano for a UTC time, as kubectl and docker print it:
    the fraction without its trailing zeros, none at all on a whole second."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000))
    fraction = f"{ns % 1_000_000_000:09d}".rstrip("0")
    return f"{whole}.{fraction}Z" if fraction else f"{whole}Z"


def github(ns: int) -> str:
    """GitHub Actions' raw log stamp: seven decimals."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000))
    return f"{whole}.{(ns % 1_000_000_000) // 100:07d}Z"


def stamp_lines(data: bytes, form=rfc3339nano, step: int = 1_234_500) -> bytes:
    lines = data.split(b"\n")
    out = [form(T0 + i * step).encode() + b" " + line for i, line in enumerate(lines[:-1])]
    if lines[-1]:
        out.append(form(T0 + len(lines) * step).encode() + b" " + lines[-1])
    else:
        out.append(b"")
    return b"\n".join(out)


# ---------------------------------------------------------------- the stamps

def test_kubectl_docker_and_github_stamps_are_known_and_taken_off():
    text = b"[rank0]:[E1202 03:55:50.685325357 ProcessGroupGloo.cpp:67] [Rank 0]: Rank 1 failed\nsecond line\n\nlast\n"
    for form in (rfc3339nano, github):
        head = stamp_lines(text, form)
        assert stamped(head), head
        assert unstamp(head) == text
    twice = stamp_lines(stamp_lines(text), github)  # a kubectl log printed again by a CI job
    assert stamped(twice) and unstamp(twice) == text
    assert stamped(b"2026-11-12T09:16:24.011Z a fragment of one line")
    whole_second = stamp_lines(text, step=1_000_000_000)
    assert b"2025-12-02T04:00:01Z second line" in whole_second  # RFC3339Nano drops a zero fraction
    assert stamped(whole_second) and unstamp(whole_second) == text


def test_a_programs_own_times_and_plain_logs_are_not_stamps():
    dmesg = (b"2026-11-12T09:16:24,011000+00:00 NVRM: GPU at PCI:0000:9a:00\n"
             b"2026-11-12T10:00:07,200634+00:00 python3 invoked oom-killer\n")
    python_logging = b"2026-11-12 09:16:24,011 INFO starting\n2026-11-12 09:16:25,011 INFO step 1\n"
    assert not stamped(dmesg) and not stamped(python_logging)
    assert not stamped(b"\x80\x04\x95pickle") and not stamped(b"")


def test_a_few_unstamped_lines_among_stamped_ones_still_count_and_stay_as_they_are():
    # a line the program ended with a carriage return only, kept whole by the collector
    lines = [rfc3339nano(T0 + i).encode() + b" line %d" % i for i in range(30)]
    lines.insert(10, b"progress 10%\rprogress 100%")
    head = b"\n".join(lines) + b"\n"
    assert stamped(head)
    assert b"\nprogress 10%\rprogress 100%\nline 10\n" in unstamp(head)
    mostly_plain = b"\n".join([lines[0]] + [b"plain %d" % i for i in range(10)]) + b"\n"
    assert not stamped(mostly_plain)


@pytest.mark.parametrize("compress", ["", "gzip", "zstd"])
def test_the_copy_has_the_same_lines_at_the_same_numbers(tmp_path, compress):
    text = b"".join(b"line %d of the log\n" % i for i in range(200_000)) + b"no newline at the end"
    data = stamp_lines(text)
    path = tmp_path / "pod.log"
    if compress == "gzip":
        data, path = gzip.compress(data), tmp_path / "pod.log.gz"
    elif compress == "zstd":
        zstandard = pytest.importorskip("zstandard")
        data, path = zstandard.ZstdCompressor().compress(data), tmp_path / "pod.log.zst"
    path.write_bytes(data)
    folder = tmp_path / "copy"
    folder.mkdir()
    copy = unstamped_copy(str(path), str(folder))
    assert os.path.basename(copy) == "pod.log"
    assert open(copy, "rb").read() == text


def test_a_line_longer_than_the_copys_steps_keeps_its_middle(tmp_path):
    long_line = b"x" * (9 << 20) + b" 2025-12-02T04:00:00Z not a stamp: mid-line"
    text = b"first\n" + long_line + b"\n2025-12-02T04:00:00Z is a stamp only at a line's start\nlast\n"
    path = tmp_path / "long.log"
    path.write_bytes(stamp_lines(text))
    folder = tmp_path / "copy"
    folder.mkdir()
    copy = unstamped_copy(str(path), str(folder))
    assert open(copy, "rb").read() == unstamp(stamp_lines(text))
    assert open(copy, "rb").read().count(b"\n") == text.count(b"\n")


# ---------------------------------------------------------------- whole incidents

def _printed(name: str, data: bytes) -> bool:
    """What a collector prints line by line: not JSON or YAML documents, pickles or compressed files."""
    return bool(data) and not (b"\0" in data[:8192] or name.endswith((".json", ".yaml", ".yml"))
                               or data[:2] == b"\x1f\x8b" or data[:4] == b"\x28\xb5\x2f\xfd"
                               or data[:1] == b"\x80")


def _files(folder: str):
    """(relative path, bytes) of an incident's artifacts."""
    for root, _, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), folder)
            if rel not in METADATA:
                with open(os.path.join(root, name), "rb") as handle:
                    yield rel, handle.read()


def _stamped_copy(folder: str, to: str) -> set[str]:
    """The incident with each of its printed files stamped as kubectl
    prints them (the others as they are); the names of the files stamped."""
    stamped_names = set()
    for rel, data in _files(folder):
        target = os.path.join(to, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        printed = _printed(os.path.basename(rel), data)
        with open(target, "wb") as handle:
            handle.write(stamp_lines(data) if printed else data)
        if printed:
            stamped_names.add(os.path.basename(rel))
    return stamped_names


# The incidents with a file a collector could have stamped (the others hold
# only dumps and JSON: stamping changes nothing there).
INCIDENTS = [folder for folder in find_incidents(CORPUS)
             if any(_printed(os.path.basename(rel), data) for rel, data in _files(folder))]


def _outcome(report) -> tuple:
    cited = sorted({(os.path.basename(e.path), e.line) for f in report.findings for e in f.evidence})
    return report.verdict, report.culprit_ranks, cited


@pytest.mark.parametrize("folder", INCIDENTS, ids=[os.path.basename(f) for f in INCIDENTS])
def test_an_incident_collected_with_timestamps_gets_the_same_diagnosis(folder, tmp_path):
    stamped_folder = tmp_path / os.path.basename(folder)
    names = _stamped_copy(folder, str(stamped_folder))
    args = load_expected(os.path.join(folder, "expected.yaml")).get("args") or {}
    try:
        plain = analyze(folder, hung=bool(args.get("hung")), jobs=1, exclude=METADATA)
    except Exception as exc:  # noqa: BLE001 - a folder the tool cannot read at all: then neither copy
        with pytest.raises(type(exc)):
            analyze(str(stamped_folder), hung=bool(args.get("hung")), jobs=1)
        return
    with_stamps = analyze(str(stamped_folder), hung=bool(args.get("hung")), jobs=1)
    assert _outcome(with_stamps) == _outcome(plain)
    read = {os.path.basename(r.path) for r in plain.incident.read} & names
    said = {os.path.basename(d.path) for d in with_stamps.diagnostics if "log collector's timestamp" in d.message}
    # files the incident holds stamped already (a kubectl log) are said so in both copies
    already = {os.path.basename(d.path) for d in plain.diagnostics if "log collector's timestamp" in d.message}
    assert said == read | already  # each stamped file a reader took is said to be read without its stamps


def test_no_room_for_the_copy_is_an_error_on_that_file_not_a_crash(tmp_path, monkeypatch):
    import tempfile

    real = os.path.join(CORPUS, "real_monitored_barrier_names_rank")
    with open(os.path.join(real, "rank0.stderr.log"), "rb") as handle:
        (tmp_path / "rank0.stderr.log").write_bytes(stamp_lines(handle.read()))
    shutil.copy(os.path.join(real, "rank2.stderr.log"), tmp_path / "rank2.stderr.log")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    report = analyze(str(tmp_path), jobs=1)
    errors = [d for d in report.diagnostics if d.severity == "error"]
    assert [(d.path, d.message) for d in errors] == [
        ("rank0.stderr.log", "no temporary folder for a copy without its timestamps (No space left on device): "
                             "file not read")]
