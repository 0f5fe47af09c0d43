"""Text from artifacts, made inert for whoever reads a report.

Artifacts come from strangers' machines: a frame name, a log line or a
file name can carry ESC sequences (which recolour, retitle or rewrite a
terminal), BEL, other C0 and C1 controls (C1 CSI, U+009B, is an escape
sequence of its own on some terminals) and Unicode bidi controls (which
reorder what a reader sees: "Trojan Source", CVE-2021-42574). Every
report format shows such a character as a visible escape (`\\x1b`,
`\\u202e`) instead of the character, on a terminal or not: a report is
read later with `cat`, in a CI log, in a browser. Each format then
escapes the result for its own syntax as before.

JSON output keeps the values as they are (a program reading the JSON
report gets the artifact's text back exactly) but writes these
characters as `\\uXXXX`, so the file itself is inert too.
"""

from __future__ import annotations

import json
import re

# C0 controls, DEL, C1 controls, the Arabic letter mark, the left-to-right
# and right-to-left marks, embeddings, overrides and isolates, and the
# line and paragraph separators (they break a line where no newline is).
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = "\x00-\x1f\x7f-\x9f" + BIDI + "\u2028\u2029"
_PATTERNS: dict[str, re.Pattern] = {}


def _pattern(keep: str) -> re.Pattern:
    found = _PATTERNS.get(keep)
    if found is None:
        if keep:
            found = re.compile(f"(?![{re.escape(keep)}])[{_UNSAFE}]")
        else:
            found = re.compile(f"[{_UNSAFE}]")
        _PATTERNS[keep] = found
    return found


def _visible(match: re.Match) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def neutralize(text, keep: str = "") -> str:
    """`text` with every control and bidi character written as a visible
    escape; characters in `keep` (say "\\n" where a format breaks lines
    itself) are left alone."""
    text = str(text)
    pattern = _pattern(keep)
    if pattern.search(text) is None:
        return text
    return pattern.sub(_visible, text)


def unsafe(text) -> bool:
    """Whether `text` holds a character `neutralize` would rewrite."""
    return _pattern("").search(str(text)) is not None


_JSON_RAW = re.compile(f"[\x7f-\x9f{BIDI}\u2028\u2029]")


def json_dumps(value, **options) -> str:
    """json.dumps (non-ASCII kept readable) with DEL, C1, bidi and line
    separator characters written as \\uXXXX escapes: the same values for a
    JSON reader, inert bytes for a terminal or an editor. (json itself
    escapes the C0 controls.)"""
    out = json.dumps(value, ensure_ascii=False, **options)
    if _JSON_RAW.search(out) is None:
        return out
    # Only inside strings can such a character stand in JSON, and there
    # \\uXXXX means the same character.
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group(0)):04x}", out)


def html_escape(text, quote: bool = True) -> str:
    """html.escape of the neutralized text (tabs and line breaks stay: the
    page shows narratives and excerpts with white-space:pre-wrap)."""
    import html

    return html.escape(neutralize(text, keep="\t\n"), quote)
