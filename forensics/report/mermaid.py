"""The wait-for graph as a Mermaid flowchart (`graph LR`), drawn from graphview.

Labels are always quoted, and every character Mermaid could read as syntax
inside a quoted label (quotes, angle brackets, ampersands, `#`, backticks,
pipes, brackets and braces) is written as a Mermaid entity code (`#quot;`,
`#60;`...), so a hostile rank label or call name cannot close the label,
start an edge (`-->`) or inject HTML.
"""

from __future__ import annotations

from . import graphview
from .safe_text import neutralize

# Mermaid entity codes are `#NAME;` or `#DECIMAL;`; `#` itself must go first.
_ENTITIES = {"#": "#35;", '"': "#quot;", "<": "#60;", ">": "#62;", "&": "#38;", "`": "#96;",
             "|": "#124;", "[": "#91;", "]": "#93;", "{": "#123;", "}": "#125;", "(": "#40;",
             ")": "#41;", ";": "#59;"}

CULPRIT_STYLE = "fill:#fde2e1,stroke:#c62828,stroke-width:3px,color:#000"
CYCLE_STYLE = "fill:#fff3e0,stroke:#c62828,stroke-width:2px,color:#000"
DEAD_STYLE = "fill:#eeeeee,stroke:#616161,stroke-dasharray:4 3,color:#000"
CYCLE_EDGE_STYLE = "stroke:#c62828,stroke-width:3px"


def escape(text: str) -> str:
    """Text safe inside a quoted Mermaid label."""
    text = neutralize(str(text).replace("\r\n", " ").replace("\r", " ").replace("\n", " "))
    return "".join(_ENTITIES.get(ch, ch) for ch in text)


def node_id(view_id: str) -> str:
    """graphview ids are alphanumeric already; the prefix keeps Mermaid
    keywords (`end`, `graph`, `subgraph`...) from ever being an id."""
    return "n_" + "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in view_id)


def graph_lines(report, view=None) -> list[str]:
    """The flowchart lines, without a Markdown fence."""
    view = view or graphview.build(report)
    lines = ["graph LR"]
    if view.collapsed:
        lines.append(f"  %% {view.total_ranks} ranks collapsed into classes; culprits and cycle members kept apart")
    for node in view.nodes:
        label = escape(node.label) + (f"<br/>{escape(node.detail)}" if node.detail else "")
        shape = ('[("', '")]') if node.stream else ('["', '"]')
        lines.append(f"  {node_id(node.id)}{shape[0]}{label}{shape[1]}")
    for edge in view.edges:
        arrow = "==>" if edge.on_cycle else "-.->" if edge.semantics == "OR" or edge.launch_order else "-->"
        text = []
        if edge.groups:
            text.append("group " + ", ".join(edge.groups))
        if edge.launch_order:
            text.append("launch order")
        if edge.count > 1:
            text.append(f"{edge.count:,} waits")
        if edge.semantics == "OR":
            text.append("any of")
        label = f'|"{escape(", ".join(text))}"|' if text else ""
        lines.append(f"  {node_id(edge.src)} {arrow}{label} {node_id(edge.dst)}")
    lines += ["  classDef culprit " + CULPRIT_STYLE + ";",
              "  classDef cycle " + CYCLE_STYLE + ";",
              "  classDef dead " + DEAD_STYLE + ";"]
    for css, members in (("dead", [n for n in view.nodes if n.dead and not n.culprit]),
                         ("cycle", [n for n in view.nodes if n.on_cycle and not n.culprit]),
                         ("culprit", [n for n in view.nodes if n.culprit])):
        if members:
            lines.append(f"  class {','.join(node_id(n.id) for n in members)} {css};")
    cycle_edges = [str(i) for i, edge in enumerate(view.edges) if edge.on_cycle]
    if cycle_edges:
        lines.append(f"  linkStyle {','.join(cycle_edges)} {CYCLE_EDGE_STYLE};")
    return lines


def render(report, lang: str = "en") -> str:
    return "\n".join(graph_lines(report)) + "\n"
