"""`python -m forensics.messages check [FILE ...]` (and `forensics messages check`):
every problem of catalogue files as `file:line: message`, exit 1 if any."""

from __future__ import annotations

import sys

from . import messages
from .messages_check import check


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "check":
        print("usage: python -m forensics.messages check [FILE ...]", file=sys.stderr)
        return 2
    paths = argv[1:] or messages.shipped_files()
    problems = check(paths)
    for path, line, message in problems:
        print(f"{path}:{line}: {message}")
    if not problems:
        entries, _ = messages.load(paths, check_examples=False)
        print(f"{len(entries)} message(s) in {len(paths)} file(s): all examples yield their facts, no ok line matches")
    return 1 if problems else 0
