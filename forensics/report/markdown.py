"""Markdown for incident tickets and PR comments.

Drawn from the text report's styled lines (`text.blocks`), so it states
the same facts in the same order, plus the wait-for graph as a Mermaid
block (collapsed the same way as every other drawing, by graphview).
Everything taken from artifacts is escaped: a hostile frame name cannot
open a link, a table cell, HTML or a code fence.
"""

from __future__ import annotations

import re

from ..words import lang_of
from . import graphview, mermaid, text
from .safe_text import neutralize

_SPECIAL = re.compile(r"[\\`*\[\]<>|~]|(?<!\w)_|_(?!\w)|^#")


def escape(value: str) -> str:
    """Inline Markdown text shown literally (also inside a table cell).
    Underscores inside words (`send_activations`) need no escape in
    CommonMark, so they are left alone for a readable source."""
    return _SPECIAL.sub(lambda m: "\\" + m.group(0), neutralize(value).replace("&", "&amp;"))


def prose(value: str) -> str:
    """Like escape, but `code` spans written by the narratives stay code."""
    parts = str(value).split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: no code spans at all
        return escape(value)
    return "`".join(neutralize(part) if index % 2 else escape(part) for index, part in enumerate(parts))


def fence(body: str, info: str = "") -> list[str]:
    """A fenced block longer than any backtick run inside, so it cannot be closed early."""
    body = neutralize(body, keep="\n")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [ticks + info, *body.split("\n"), ticks]


# The words this module adds to the text report's, by language.
WORDS = {
    "en": {"graph": "Wait-for graph", "collapsed": " ({n} ranks, collapsed into classes)"},
    "zh": {"graph": "等待图", "collapsed": "（{n} 个 Rank 按状态归类）"},
}


def render(report, lang: str = "en") -> str:
    words = WORDS[lang_of(lang)]
    out: list[str] = []
    items = text.blocks(report, lang)
    stack: list[str] = []
    graph_done = False

    def flush_stack():
        if stack:
            out.extend(fence("\n".join(line[2:] if line.startswith("  ") else line for line in stack)))
            out.append("")
            stack.clear()

    for item in items:
        if isinstance(item, text.Table):
            flush_stack()
            if not graph_done and item.kind == "ranks":
                out.extend(_graph(report, words))
                graph_done = True
            if out and out[-1].strip():  # a table after a list item would continue the item
                out.append("")
            out.extend(_table(item))
            continue
        style = item.style
        if style != "stack":
            flush_stack()
        if not item.strip():
            continue
        if style.startswith("verdict"):
            out += [f"## {escape(item)}", ""]
        elif style == "cycle":
            out += [f"**{escape(item)}**", ""]
        elif style == "headline":
            out += [f"**{prose(item)}**", ""]
        elif style == "heading":
            out += [f"#### {escape(item)}", ""]
        elif style == "stack":
            stack.append(item)
        elif style in ("why", "diagnostic") or style.startswith("finding."):
            out.append(_bullet(item))
        elif item.lstrip().startswith("- "):
            out.append(_bullet(item))
        elif style == "dim":
            out += [f"*{escape(item)}*", ""]
        else:
            out += ["", prose(item), ""] if out and out[-1].startswith("- ") else [prose(item), ""]
    flush_stack()
    if not graph_done:
        out.extend(_graph(report, words))
    markdown = "\n".join(out)
    markdown = re.sub(r"\n{3,}", "\n\n", markdown)
    # A list must end before the next paragraph or heading.
    markdown = re.sub(r"(\n- [^\n]*)\n(?=[^-\n])", r"\1\n\n", markdown)
    return markdown.strip("\n") + "\n"


def _bullet(line: str) -> str:
    body = line.strip()
    nested = line.startswith("    ")
    for prefix in ("- ", "↳ "):
        if body.startswith(prefix):
            body = (body[len(prefix):] if prefix == "- " else body)
    return ("  - " if nested else "- ") + prose(body)


def _table(table: "text.Table") -> list[str]:
    rows = [f"**{escape(table.title)}**", "",
            "| " + " | ".join(escape(h) for h in table.header) + " |",
            "|" + "|".join("---" for _ in table.header) + "|"]
    for row, culprit in zip(table.rows, table.culprit_rows):
        cells = [escape(c) or " " for c in row]
        if culprit:
            cells[0] = f"**{cells[0]}**"
        rows.append("| " + " | ".join(cells) + " |")
    return rows + [""]


def _graph(report, words: dict) -> list[str]:
    view = graphview.build(report)
    if not view.edges and not any(n.culprit for n in view.nodes):
        return []
    title = words["graph"]
    if view.collapsed:
        title += words["collapsed"].format(n=f"{view.total_ranks:,}")
    return [f"#### {title}", "", *fence("\n".join(mermaid.graph_lines(report, view)), "mermaid"), ""]
