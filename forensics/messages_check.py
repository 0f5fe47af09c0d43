"""What a schema cannot say about catalogue entries, checked before they ship.

`rules/messages.schema.json` says what an entry holds; this says whether it
works: every pattern compiles and names only known facts, each example
line (`example`, `examples`) yields exactly its stated facts, every pattern
matches one of them, no `ok` line (a line of the same program
that means something else) is taken for the entry, ids are unique across
all files, and no pattern is slow on hostile lines. The test suite runs it
on the shipped files; `forensics messages check FILE` on a user's.
"""

from __future__ import annotations

import math
import re
import time

from . import messages
from .messages import FIELD_KINDS, Entry

SLOW_MS = 50.0  # a pattern taking longer than this on a hostile 64 KiB line is a defect

Problem = tuple[str, int, str]


def entry_problems(entry: Entry) -> list[Problem]:
    """Everything wrong with one entry that its file's schema let through."""
    problems = _pattern_problems(entry)
    if problems:
        return problems
    return _example_problems(entry) + _ok_problems(entry)


def _pattern_problems(entry: Entry) -> list[Problem]:
    problems = []
    for text in entry.patterns:
        try:
            pattern = re.compile(text)
        except re.error as exc:
            problems.append((entry.path, entry.line, f"{entry.id}: pattern {text!r} does not compile: {exc}"))
            continue
        unknown = set(pattern.groupindex) - set(FIELD_KINDS)
        if unknown:
            problems.append((entry.path, entry.line, f"{entry.id}: unknown named group(s) "
                                                     f"{', '.join(sorted(unknown))} "
                                                     "(see forensics.messages.FIELD_KINDS)"))
    return problems


def _example_problems(entry: Entry) -> list[Problem]:
    """Each example line (`example`, then each of `examples`) yields exactly
    its facts, and every pattern matches at least one of them: a wording no
    example shows is a pattern nothing tests."""
    where = (entry.path, entry.line)
    problems = []
    for number, (line, facts) in enumerate(entry.all_examples):
        label = "the example" if number == 0 else f"examples.{number - 1} {line!r}"
        if not any(literal in line for literal in entry.match):
            problems.append((*where, f"{entry.id}: {label} holds none of the 'match' literals"))
            continue
        got = entry.extract(line)
        if got is None:
            problems.append((*where, f"{entry.id}: no pattern matches {label}"))
        elif got != facts:
            problems.append((*where, f"{entry.id}: {label} yields {messages._jsonable(got)}, "
                                     f"the entry states {messages._jsonable(facts)}"))
    lines = [line for line, _ in entry.all_examples if any(literal in line for literal in entry.match)]
    for index, pattern in enumerate(entry.regexes):
        if not any(pattern.search(line) for line in lines):
            problems.append((*where, f"{entry.id}: pattern {index} {pattern.pattern!r} matches no example line "
                                     "(add one to 'examples', worded as the program prints it)"))
    return problems


def _ok_problems(entry: Entry) -> list[Problem]:
    """An `ok` line must hold a literal (else it never reaches the patterns
    and tests nothing) and must not match."""
    problems = []
    for line in entry.ok:
        if not any(literal in line for literal in entry.match):
            problems.append((entry.path, entry.line, f"{entry.id}: the ok line {line!r} holds none of the "
                                                     "'match' literals, so it tests no pattern"))
            continue
        got = entry.extract(line)
        if got is not None:
            problems.append((entry.path, entry.line, f"{entry.id}: the ok line {line!r} matches the entry "
                                                     f"(yields {messages._jsonable(got)})"))
    return problems


_HOSTILE_SIZES = (8, 12, 16, 20, 24, 32, 64, 256, 1024, 4096, 16384, 65536)


def _hostile_lines(entry: Entry, size: int) -> tuple[str, ...]:
    """Lines of about `size` characters built from the entry's own example
    and literal, each ending where a greedy pattern must backtrack."""
    literal = entry.match[0]
    body = (entry.example * (size // max(len(entry.example), 1) + 1))[:size]
    return (entry.example + " " + "9" * size + "!", literal + " " + "a" * size + "!",
            literal + " " + body + "\x00", literal + " " + "[" * size, literal + " " + ("1, " * size)[:size] + "x")


def _slow_patterns(entry: Entry) -> list[Problem]:
    """Patterns that take more than SLOW_MS on hostile lines. The lines
    grow from 8 characters to 64 KiB and the check stops at the first size
    that is too slow, so an exponential pattern is caught at a size where
    it still ends, instead of hanging the check."""
    problems = []
    for text in entry.patterns:
        try:
            pattern = re.compile(text)
        except re.error:
            continue  # named by _pattern_problems
        for size in _HOSTILE_SIZES:
            lines = _hostile_lines(entry, size)
            spent = math.inf
            for _ in range(3):  # the best of three: a busy machine slows a run, never speeds one up
                started = time.process_time()  # CPU time: other processes on a busy machine do not count
                for line in lines:
                    pattern.search(line)
                spent = min(spent, (time.process_time() - started) * 1000)
                if spent <= SLOW_MS:
                    break
            if spent > SLOW_MS:
                problems.append((entry.path, entry.line, f"{entry.id}: pattern {pattern.pattern!r} took "
                                                         f"{spent:.0f} ms on hostile lines of {size} characters "
                                                         f"(limit {SLOW_MS:.0f} ms up to 64 KiB)"))
                break
    return problems


def check(paths: list[str]) -> list[Problem]:
    """Every problem of the catalogue files `paths`; the other shipped files
    are loaded beside them, so ids must be unique across all."""
    wanted = {messages._display(p) for p in paths}
    others = [p for p in messages.shipped_files() if messages._display(p) not in wanted]
    entries, problems = messages.load(others + list(paths))
    for entry in entries:
        if entry.path in wanted:
            problems.extend(_slow_patterns(entry))
    return [p for p in problems if p[0] in wanted]
