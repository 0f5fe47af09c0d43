"""Every input a fuzzer found crashing a reader, replayed through the same
target function (tests/fuzz/targets.py) on a real file: it must now end in
a parse or an InputError. Runs without atheris.

A crash that is not fixed yet is listed in regressions/XFAIL as
`TARGET/FILE: reason` and expected to fail, strictly: when it is fixed the
test says so, and the line goes.
"""

import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import targets  # noqa: E402  (tests/fuzz/targets.py, shared with the atheris harness)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "regressions")


def _known_failures() -> dict[str, str]:
    path = os.path.join(ROOT, "XFAIL")
    out = {}
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(":")
                out[name.strip()] = reason.strip()
    return out


def _cases():
    known = _known_failures()
    for target in sorted(os.listdir(ROOT)):
        folder = os.path.join(ROOT, target)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            key = f"{target}/{name}"
            marks = [pytest.mark.xfail(reason=known[key], strict=True)] if key in known else []
            yield pytest.param(target, os.path.join(folder, name), id=key, marks=marks)


CASES = list(_cases())


def test_every_target_folder_names_a_target():
    folders = {d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d))}
    assert folders <= set(targets.TARGETS), folders - set(targets.TARGETS)
    assert len(CASES) >= 5  # the crashes found so far are kept


@pytest.mark.parametrize("target,path", CASES)
def test_a_crash_found_by_fuzzing_stays_fixed(target, path):
    with open(path, "rb") as handle:
        data = handle.read()

    def overtime(signum, frame):
        raise AssertionError(f"{path}: still running after 60 s")

    previous = signal.signal(signal.SIGALRM, overtime)
    signal.alarm(60)
    try:
        targets.run_input(target, data)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_every_target_has_seeds_of_its_kind():
    """A harness seeded with nothing would fuzz from empty input: the real
    artifacts of each kind must be found."""
    for name in targets.TARGETS:
        assert targets.seeds(name), name
