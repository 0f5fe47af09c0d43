"""Say each fact once: the sentences a report has printed, and a message
with those sentences taken out.

A finding's message often restates what the narrative or the timeline just
said: a catalogue entry's explanation is both the reason a job was judged
stuck and the body of the observation that cites it. A renderer keeps a
`Said` of what it printed and shows a later message with the repeated
sentences left out (or, when nothing new is left, a pointer back).
"""

from __future__ import annotations

import re

# Citations ("[train.log:31]", "[a.log:3, b.log]") do not make a sentence new.
CITATION = re.compile(r" ?\[[^\[\]\s]+(?::-?\d+)?(?:, [^\[\]\s]+(?::-?\d+)?)*\]")
# A unit ends a sentence (". ", "。"), or is a lead-in ("12 line(s) from rank 0: ",
# "rank 1 为何在那里："), which is structure, never a fact said twice.
_UNIT = re.compile(r"(?<=[.!?] )(?=[A-Z\"“(\[])|(?<=[。！？])|(?P<lead>(?<=: )|(?<=：))")
_PARENTHETICAL = re.compile(r"[(（][^()（）]*[)）][.。]?")
SHORTEST = 20  # shorter units ("None of them can proceed.") may recur without repeating a fact


def units(text: str) -> list[str]:
    """The text cut at sentence ends, and at lead-ins outside parentheses (a
    colon inside one, `(status 12 = IBV_WC_RETRY_EXC_ERR: …)`, leads nothing in)."""
    depth, at, cuts = 0, 0, []
    for match in _UNIT.finditer(text):
        boundary = match.start()
        for char in text[at:boundary]:
            depth += (char in "(（") - (char in ")）" and depth > 0)
        at = boundary
        if depth == 0 or match.group("lead") is None:
            cuts.append(boundary)
    edges = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(edges, edges[1:]) if a < b]


def _keys(parts: list[str]) -> list[str]:
    """Each unit's key: its words without citations; a unit after a lead-in
    that only names whom it is about ("rank 2: ", "rank0.log: ") keeps that
    name, so the same words about two ranks are two facts."""
    keys = []
    for index, unit in enumerate(parts):
        before = parts[index - 1] if index else ""
        named = before if _lead_in(before) and len(before.split()) <= 2 else ""
        keys.append(" ".join(CITATION.sub("", named + unit).split()).strip(" -↳"))
    return keys


class Said:
    """The sentences printed so far."""

    def __init__(self):
        self.seen: set[str] = set()

    def add(self, text: str) -> None:
        parts = units(text)
        self.seen.update(key for unit, key in zip(parts, _keys(parts))
                         if len(key) >= SHORTEST and not _lead_in(unit))

    def unsaid(self, message: str, pointer: str) -> str:
        """`message` without the sentences printed already; `pointer` ("see
        above") where they stood when nothing but a lead-in or an id is left."""
        gap = object()
        kept: list = []
        parts = units(message)
        for unit, key in zip(parts, _keys(parts)):
            if key in self.seen and not _lead_in(unit):
                if not kept or kept[-1] is not gap:
                    kept.append(gap)
            else:
                kept.append(unit)
        if gap not in kept:
            return message
        if any(u is not gap and not _lead_in(u) and not _PARENTHETICAL.fullmatch(u.strip()) for u in kept):
            kept = [u for u in kept if u is not gap]  # something new is left: the repeats just go
        return "".join(pointer + " " if u is gap else u for u in kept).strip().replace(" （", "（")


def _lead_in(unit: str) -> bool:
    return unit.rstrip().endswith((":", "："))
