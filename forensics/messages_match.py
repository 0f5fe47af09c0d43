"""Which catalogue entries a line may be: the index of every entry's literal
anchors and the one search for all of them.

Most text holds no catalogued line (every stack dump of a big collection),
so the question asked most is "does this text hold any literal at all", and
it must cost a C-speed search, not a loop over four hundred literals. The
entries themselves say what a line means (`messages.Entry.extract`); this
module only narrows which entries to ask.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .messages import Entry

_MASK_DIGITS = str.maketrans("123456789", "000000000")
_HAS_DIGIT = re.compile(r"\d")
_SHAPES_KEPT = 4096  # line shapes whose candidate entries are kept


class Catalogue:
    """Every entry, and a matcher that tries only entries whose literals a line holds."""

    def __init__(self, entries: list[Entry]):
        self.entries = entries
        self.by_id = {e.id: e for e in entries}
        self._order = {e.id: i for i, e in enumerate(entries)}
        by_literal: dict[str, list[Entry]] = {}
        for entry in entries:
            for literal in entry.match:
                by_literal.setdefault(literal, []).append(entry)
        self._by_literal = by_literal
        self._digit_literals = [(literal, es) for literal, es in by_literal.items() if _HAS_DIGIT.search(literal)]
        self._shapes: dict[str, tuple] = {}
        self._any_pattern = None
        self._anchor_patterns: list[re.Pattern] | None = None

    @property
    def _any(self) -> re.Pattern | None:
        """One search for every entry's literals, compiled on first use.
        It says where a line holds one (the leftmost), not which: the
        literals go into a trie, so at each position the engine follows one
        branch per character instead of trying four hundred alternatives
        in turn (a flat alternation cost 5 ms a 64 KiB stack dump's head)."""
        if self._any_pattern is None and self._by_literal:
            self._any_pattern = re.compile(_trie_pattern(self._by_literal))
        return self._any_pattern

    def get(self, entry_id: str) -> Entry | None:
        return self.by_id.get(entry_id)

    def __len__(self) -> int:
        return len(self.entries)

    def mentions(self, text: str) -> bool:
        """Whether any entry's literal occurs in `text`. Most texts hold
        none (every stack dump of a big collection): the anchors decline
        them at a quarter of the cost of the search for every literal."""
        if self._any is None or not any(p.search(text) for p in self._anchors()):
            return False
        return self._any.search(text) is not None

    def _anchors(self) -> list[re.Pattern]:
        """Searches that every text holding a literal matches: each
        literal's tail from its first uncommon character on (`_anchor`), in
        one trie per first character. A search whose pattern starts with
        one character skips to that character's occurrences at C speed,
        where the trie of all literals stops at every space and letter that
        begins one (0.12 against 0.44 ms for a 10 KB py-spy dump)."""
        if self._anchor_patterns is None:
            tails: dict[str, list[str]] = {}
            for literal in self._by_literal:
                tail = _anchor(literal)
                tails.setdefault(tail[0], []).append(tail)
            self._anchor_patterns = [re.compile(_trie_pattern(group)) for _, group in sorted(tails.items())]
        return self._anchor_patterns

    def candidates(self, line: str) -> list[Entry]:
        """Entries one of whose literals the line holds, in catalogue order.

        A log repeats a few line shapes with other numbers: which digit-free
        literals a line holds depends only on its shape (digits masked), so
        that answer is kept per shape; the few literals with digits are
        looked for in every line."""
        shape = line.translate(_MASK_DIGITS)
        plain = self._shapes.get(shape)
        if plain is None:
            if len(self._shapes) >= _SHAPES_KEPT:
                self._shapes.clear()
            plain = self._shapes[shape] = (
                () if self._any is None or self._any.search(line) is None
                else tuple({id(e): e for literal, es in self._by_literal.items()
                            if literal in line and not _HAS_DIGIT.search(literal) for e in es}.values()))
        found = {id(e): e for e in plain}
        found.update((id(e), e) for literal, es in self._digit_literals if literal in line for e in es)
        return sorted(found.values(), key=lambda e: self._order[e.id])

    def literals_with_digits(self) -> list[tuple[str, list[Entry]]]:
        """The few literals holding a digit (no line shape tells whether a
        line holds them), with their entries."""
        return list(self._digit_literals)

    def match(self, line: str, skip=frozenset()) -> list[tuple[Entry, dict]]:
        """(entry, facts) of every entry whose patterns match the line; the
        ids in `skip` (entries a reader has kept enough of) are not tried."""
        out = []
        for entry in self.candidates(line):
            if entry.id in skip:
                continue
            facts = entry.extract(line)
            if facts is not None:
                out.append((entry, facts))
        return out

    def lines_with_literals(self, text: str, ends: bool = False):
        """(1-based line number, line) of each line of `text` holding any
        entry's literal: one C-speed search over the text, not a loop over lines.
        With `ends`, (number, line, where the line ends in `text`)."""
        if self._any is None:
            return
        number, position, last_start = 1, 0, -1
        for found in self._any.finditer(text):
            start = text.rfind("\n", 0, found.start()) + 1
            if start == last_start:
                continue
            number += text.count("\n", position, start)
            position = start
            end = text.find("\n", found.end())
            last_start = start
            line = text[start:] if end < 0 else text[start:end]
            yield (number, line, len(text) if end < 0 else end) if ends else (number, line)


# Characters that fill log and stack text: a tail starting with one of them
# would stop the search at many places. Of the rest, capitals and most
# punctuation are rarer than lower case. (A frequency table ranking each
# letter did worse: py-spy text is not English.)
_COMMON = frozenset(" etaoinsrhldcumfpgwybvk.,:/_()0123456789\n")
_ANCHOR_MIN = 4  # characters an anchor keeps at least (a shorter literal is its own anchor)


def _anchor(literal: str) -> str:
    """The literal's tail from its first character outside `_COMMON` (else
    its first that is not lower case, else its start), keeping at least
    _ANCHOR_MIN characters."""
    if len(literal) <= _ANCHOR_MIN:
        return literal
    start = min(range(len(literal) - _ANCHOR_MIN + 1),
                key=lambda i: (literal[i] in _COMMON, literal[i].islower(), i))
    return literal[start:]


def _trie_pattern(words) -> str:
    """A regex matching where any of `words` starts. A word that another
    begins with ends the branch: the longer one adds no new place to match."""
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        if "" in node:
            return ""
        branches = [re.escape(ch) + build(node[ch]) for ch in sorted(node)]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return build(trie)
