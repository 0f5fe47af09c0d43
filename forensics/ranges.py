"""Rank sets as people write them: `0-2,4-7`."""

from __future__ import annotations

from typing import Iterable


def compact(ranks: Iterable[int]) -> str:
    values = sorted(set(ranks))
    if not values:
        return "-"
    parts = []
    start = prev = values[0]
    for value in values[1:]:
        if value == prev + 1:
            prev = value
            continue
        parts.append(_run(start, prev))
        start = prev = value
    parts.append(_run(start, prev))
    return ",".join(parts)


def _run(start: int, end: int) -> str:
    if start == end:
        return str(start)
    if end == start + 1:
        return f"{start},{end}"
    return f"{start}-{end}"
