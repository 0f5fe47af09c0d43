"""The wait-for graph in Graphviz DOT, drawn from graphview (no Graphviz needed to write it).

Every id and label is a double-quoted DOT string: backslashes are doubled
(DOT would read `\\n`, `\\N`, `\\G` in a label as escapes), quotes escaped,
line breaks written as `\\n`. `<`, `&` and `-->` need nothing inside a
quoted string: only an HTML label (`<...>`) would read them.
"""

from __future__ import annotations

from . import graphview
from .safe_text import neutralize

CULPRIT = 'color="#c62828", penwidth=3, style="filled", fillcolor="#fde2e1"'
ON_CYCLE = 'color="#c62828", penwidth=2, style="filled", fillcolor="#fff3e0"'
DEAD = 'color="#616161", style="dashed"'
CYCLE_EDGE = 'color="#c62828", penwidth=3'


def quote(text) -> str:
    """A DOT quoted string whose label shows `text` verbatim (on one line)."""
    text = neutralize(text, keep="\r\n").replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n") + '"'


def render(report, lang: str = "en") -> str:
    view = graphview.build(report)
    title = f"forensics wait-for graph: {report.verdict}"
    if view.collapsed:
        title += f" ({view.total_ranks:,} ranks, collapsed into classes)"
    lines = ["digraph waitfor {",
             "  rankdir=LR;",
             f"  label={quote(title)};",
             "  labelloc=t;",
             '  node [shape=box, fontname="Helvetica"];',
             '  edge [fontname="Helvetica"];']
    for node in view.nodes:
        label = node.label + (f"\n{node.detail}" if node.detail else "")
        attrs = [f"label={quote(label)}"]
        if node.stream:
            attrs.append("shape=ellipse")
        if node.culprit:
            attrs.append(CULPRIT)
        elif node.on_cycle:
            attrs.append(ON_CYCLE)
        elif node.dead:
            attrs.append(DEAD)
        if node.evidence:
            attrs.append(f"tooltip={quote(node.evidence)}")
        lines.append(f"  {quote(node.id)} [{', '.join(attrs)}];")
    for edge in view.edges:
        attrs = []
        text = ["group " + ", ".join(edge.groups)] if edge.groups else []
        if edge.launch_order:
            text.append("launch order")
            attrs.append("style=dotted")
        if edge.count > 1:
            text.append(f"{edge.count:,} waits")
        if edge.semantics == "OR":
            text.append("any of")
            if not edge.launch_order:
                attrs.append("style=dashed")
        if text:
            attrs.append(f"label={quote(', '.join(text))}")
        if edge.on_cycle:
            attrs.append(CYCLE_EDGE)
        lines.append(f"  {quote(edge.src)} -> {quote(edge.dst)}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    lines.append("}")
    return "\n".join(lines) + "\n"
