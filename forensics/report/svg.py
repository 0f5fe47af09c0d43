"""The wait-for graph view laid out as an SVG, in Python: no JavaScript
layout library, no network, the same picture in a browser, a CI artifact
and on paper.

Layout: the view's strongly connected parts (a cycle, a ring of ranks) are
drawn as ellipses, their nodes in the order of the reported cycle so each
arrow joins neighbours; everything else goes in columns by how deep it
waits: waiters on the left, the ranks they wait for on the right. Nodes of
one column that share a stack class sit together inside a dashed frame.
Every node and edge carries data attributes (ids, ranks, cycle, counts) so a
test or a script can read the drawing without parsing geometry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx

from ..ranges import compact
from ..words import lang_of
from .safe_text import html_escape as escape

NODE_W = 250
NODE_H = 52
ROW_GAP = 22
COLUMN_GAP = 110
MARGIN = 24
CHAR_W = 6.4          # average width of an 11px sans-serif character
MAX_CHARS = int((NODE_W - 16) / CHAR_W)
RING_ASPECT = 0.4     # ring height / width: laptop screens are wide
RING_POWER = 3.0      # superellipse exponent (2: ellipse; larger: closer to a rectangle)
RING_PAD = 72         # room around a ring for self-loops and their counts
MAX_BADGES = 4        # more culprit boxes than this: the red border says it, no badge each

# Fill and border per rank state: blocked in a call (amber), busy elsewhere
# (blue), gone (grey), unknown (white), CUDA stream (violet).
# The words drawn into the graph, by language.
WORDS = {
    "en": {"frame": "stack", "aria": "Wait-for graph: {n} nodes; culprits: {culprits}", "list_sep": ", ",
           "none": "none", "group": "group ", "launch_order": "launch order", "within": "{count} within",
           "stack_class": "stack class ", "stack": "stack ", "culprit": "CULPRIT"},
    "zh": {"frame": "调用栈", "aria": "等待图：{n} 个节点；罪魁：{culprits}", "list_sep": "、",
           "none": "无", "group": "组 ", "launch_order": "启动顺序", "within": "{count} 在组内",
           "stack_class": "调用栈 ", "stack": "调用栈 ", "culprit": "罪魁"},
}
_STATE_STYLE = {
    "blocked": ("#fef3c7", "#b45309"),
    "exited": ("#e5e7eb", "#374151"),
    "unknown": ("#ffffff", "#9ca3af"),
    "stream": ("#ede9fe", "#6d28d9"),
}
_ELSEWHERE = ("#dbeafe", "#1d4ed8")
CULPRIT = "#dc2626"
EDGE = "#6b7280"


@dataclass(slots=True)
class Box:
    node: object           # the ViewNode
    x: float = 0.0         # top-left corner
    y: float = 0.0
    stacks: tuple[str, ...] = ()
    out: tuple[float, float] = (0.0, -1.0)   # direction away from the drawing's crowd, for self-loops

    @property
    def cx(self) -> float:
        return self.x + NODE_W / 2

    @property
    def cy(self) -> float:
        return self.y + NODE_H / 2


@dataclass(slots=True)
class Block:
    """A unit of layout: one node, or a strongly connected set on an ellipse."""

    ids: list[str]
    ring: bool = False
    width: float = NODE_W
    height: float = NODE_H
    boxes: list[Box] = field(default_factory=list)


def render(view, cycles=(), stack_of_rank=None, href_of=None, lang: str = "en") -> str:
    """The SVG document fragment for `view` (graphview.GraphView).

    cycles: the report's cycles (lists of nodes), to order ring nodes.
    stack_of_rank: rank → stack class label ("S2"), to group and badge nodes.
    href_of: ViewNode → fragment ("#rank-3") each node links to, or None.
    """
    if not view.nodes:
        return ""
    stack_of_rank = stack_of_rank or {}
    boxes = {n.id: Box(n, stacks=_stacks(n, stack_of_rank)) for n in view.nodes}
    blocks = _blocks(view, cycles)
    width, height, frames = _place(view, blocks, boxes)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="waitgraph" viewBox="0 0 {width:.0f} {height:.0f}" '
           f'width="{width:.0f}" height="{height:.0f}" role="img" '
           f'aria-label="{escape(_aria(view, lang))}" font-family="system-ui,-apple-system,Segoe UI,sans-serif">',
           _DEFS]
    for label, (x, y, w, h) in frames:
        out.append(f'<g class="stackframe" data-stack="{escape(label)}">'
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="10" fill="none" '
                   f'stroke="#94a3b8" stroke-dasharray="5 4"/>'
                   f'<text x="{x + 8:.1f}" y="{y + 12:.1f}" font-size="10" fill="#64748b">'
                   f'{WORDS[lang_of(lang)]["frame"]} {escape(label)}</text></g>')
    reverse = {(e.dst, e.src) for e in view.edges}
    badges = sum(n.culprit for n in view.nodes) <= MAX_BADGES
    for edge in sorted(view.edges, key=lambda e: e.on_cycle):  # cycle edges drawn last, on top
        out.append(_edge(edge, boxes[edge.src], boxes[edge.dst], (edge.src, edge.dst) in reverse, lang))
    for box in boxes.values():
        out.append(_node(box, href_of(box.node) if href_of else None, lang, badges))
    out.append("</svg>")
    return "\n".join(out)


_DEFS = (f'<defs><marker id="wg-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
         f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{EDGE}"/></marker>'
         f'<marker id="wg-arrow-cycle" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
         f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{CULPRIT}"/></marker></defs>')


def _aria(view, lang) -> str:
    words = WORDS[lang_of(lang)]
    culprits = words["list_sep"].join(n.label for n in view.nodes if n.culprit) or words["none"]
    return words["aria"].format(n=len(view.nodes), culprits=culprits)


def _stacks(node, stack_of_rank) -> tuple[str, ...]:
    labels = {stack_of_rank[r] for r in node.ranks if r in stack_of_rank}
    return tuple(sorted(labels, key=lambda s: (len(s), s)))


def _blocks(view, cycles) -> list[Block]:
    graph = nx.DiGraph()
    graph.add_nodes_from(n.id for n in view.nodes)
    graph.add_edges_from((e.src, e.dst) for e in view.edges if e.src != e.dst)
    order = {n.id: i for i, n in enumerate(view.nodes)}
    node_of_rank = {r: n.id for n in view.nodes for r in n.ranks}
    cycle_order = _cycle_order(cycles, node_of_rank)
    blocks = []
    for component in nx.strongly_connected_components(graph):
        if len(component) == 1:
            blocks.append(Block(ids=list(component)))
            continue
        ids = sorted(component, key=lambda i: (cycle_order.get(i, len(cycle_order)), order[i]))
        blocks.append(Block(ids=_walk(graph, ids), ring=True))
    return blocks


def _cycle_order(cycles, node_of_rank) -> dict[str, int]:
    """View node id → its position along the report's cycles."""
    out: dict[str, int] = {}
    for cycle in cycles:
        for node in cycle:
            view_id = node_of_rank.get(node) if isinstance(node, int) else None
            if view_id is not None and view_id not in out:
                out[view_id] = len(out)
    return out


def _walk(graph, ids: list[str]) -> list[str]:
    """Order a strongly connected set so consecutive nodes are joined by an
    edge where possible: start from the first, follow edges to unvisited
    members (preferring the earliest in `ids`), jump when stuck."""
    members, rank = set(ids), {i: k for k, i in enumerate(ids)}
    seen, out = set(), []
    current = ids[0]
    while len(out) < len(ids):
        out.append(current)
        seen.add(current)
        nexts = sorted((n for n in graph.successors(current) if n in members and n not in seen), key=rank.get)
        if not nexts:
            nexts = [i for i in ids if i not in seen]
        if not nexts:
            break
        current = nexts[0]
    return out


def _place(view, blocks, boxes) -> tuple[float, float, list]:
    """Columns left to right (waiters first), blocks stacked in each."""
    block_of = {i: b_index for b_index, block in enumerate(blocks) for i in block.ids}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(blocks)))
    dag.add_edges_from((block_of[e.src], block_of[e.dst]) for e in view.edges
                       if block_of[e.src] != block_of[e.dst])
    column = {}
    for b_index in nx.topological_sort(dag):
        column[b_index] = max((column[p] + 1 for p in dag.predecessors(b_index)), default=0)
    looped = {e.src for e in view.edges if e.src == e.dst}
    for block in blocks:
        if block.ring:
            _ring(block, boxes, RING_PAD if looped.intersection(block.ids) else 0)
        else:
            block.boxes = [boxes[block.ids[0]]]
    columns: dict[int, list[Block]] = {}
    for b_index, block in enumerate(blocks):
        columns.setdefault(column[b_index], []).append(block)
    frames = []
    x = MARGIN
    heights = {c: sum(b.height for b in bs) + ROW_GAP * (len(bs) - 1) for c, bs in columns.items()}
    total_h = max(heights.values())
    pending = []
    for c in sorted(columns):
        # Rings first, then single nodes grouped by stack class, culprits first.
        col = sorted(columns[c], key=lambda b: (not b.ring, _stack_key(boxes[b.ids[0]]),
                                                not boxes[b.ids[0]].node.culprit,
                                                -len(boxes[b.ids[0]].node.ranks)))
        width = max(b.width for b in col)
        y = MARGIN + 14 + (total_h - heights[c]) / 2
        for block in col:
            dx, dy = x + (width - block.width) / 2, y
            for box in block.boxes:
                box.x += dx
                box.y += dy
            y += block.height + ROW_GAP
        pending.append([b for b in col if not b.ring])
        x += width + COLUMN_GAP
    for col in pending:
        frames += _frames(col, boxes)
    return x - COLUMN_GAP + MARGIN, total_h + 2 * MARGIN + 14, frames


def _stack_key(box: Box) -> tuple:
    return (len(box.stacks) != 1,) + tuple((len(s), s) for s in box.stacks)


def _frames(col: list[Block], boxes) -> list:
    """Dashed frames around runs of two or more nodes with one, same stack class."""
    frames, run = [], []

    def close():
        if len(run) >= 2:
            top, bottom = run[0], run[-1]
            frames.append((top.stacks[0], (top.x - 8, top.y - 16, NODE_W + 16, bottom.y + NODE_H - top.y + 24)))

    for block in col:
        box = boxes[block.ids[0]]
        if run and len(box.stacks) == 1 and box.stacks == run[-1].stacks:
            run.append(box)
            continue
        close()
        run = [box] if len(box.stacks) == 1 else []
    close()
    return frames


def _ring(block: Block, boxes, pad: float) -> None:
    """Boxes around a rounded ring, wider than tall (screens are), spaced so that
    neighbours never overlap: a step counts in box widths horizontally and
    box heights vertically, and the ellipse grows until every step is one."""
    n = len(block.ids)
    if n == 2:
        rx, ry = NODE_W * 0.95, 0.0
        points = [(-rx, 0.0), (rx, 0.0)]
    else:
        rx = NODE_W * 0.6
        while True:
            ry = max(NODE_H * 1.2, rx * RING_ASPECT)
            points, steps = _ellipse_points(rx, ry, n)
            if steps >= 1.0:
                break
            rx *= 1.08
    block.width = 2 * rx + NODE_W + 2 * pad
    block.height = 2 * ry + NODE_H + 2 * pad
    for box_id, (px, py) in zip(block.ids, points):
        box = boxes[box_id]
        box.x = pad + rx + px
        box.y = pad + ry + py
        box.out = (px / rx if rx else 0.0, py / ry if ry else -1.0)
        block.boxes.append(box)


def _ellipse_points(rx: float, ry: float, n: int) -> tuple[list[tuple[float, float]], float]:
    """n points evenly spaced clockwise from the left end, by the box metric;
    and the step between two of them (>= 1: boxes do not overlap)."""
    samples_n = 1440
    def along(k):  # a superellipse: rounder than a rectangle, boxier than an ellipse
        c, s = math.cos(2 * math.pi * k / samples_n), math.sin(2 * math.pi * k / samples_n)
        return (-rx * math.copysign(abs(c) ** (2 / RING_POWER), c), -ry * math.copysign(abs(s) ** (2 / RING_POWER), s))

    samples = [along(k) for k in range(samples_n + 1)]
    unit_x, unit_y = NODE_W + 24, NODE_H + 18
    lengths = [0.0]
    for (x0, y0), (x1, y1) in zip(samples, samples[1:]):
        lengths.append(lengths[-1] + max(abs(x1 - x0) / unit_x, abs(y1 - y0) / unit_y))
    total, out, k = lengths[-1], [], 0
    for i in range(n):
        target = total * i / n
        while k < samples_n and lengths[k + 1] < target:
            k += 1
        out.append(samples[k])
    return out, total / n


def _border_point(box: Box, tx: float, ty: float) -> tuple[float, float]:
    """Where the segment from the box centre towards (tx, ty) leaves the box."""
    dx, dy = tx - box.cx, ty - box.cy
    if dx == 0 and dy == 0:
        return box.cx, box.cy
    scale = min(NODE_W / 2 / abs(dx) if dx else math.inf, NODE_H / 2 / abs(dy) if dy else math.inf)
    return box.cx + dx * scale, box.cy + dy * scale


def _edge(edge, src: Box, dst: Box, has_reverse: bool, lang: str) -> str:
    color, width, marker = (CULPRIT, 2.6, "wg-arrow-cycle") if edge.on_cycle else (EDGE, 1.4, "wg-arrow")
    dash = (' stroke-dasharray="2 3"' if edge.launch_order else
            ' stroke-dasharray="6 4"' if edge.semantics == "OR" else "")
    classes = ("edge cycle" if edge.on_cycle else "edge") + (" launch-order" if edge.launch_order else "")
    words = WORDS[lang_of(lang)]
    count = " ".join(part for part in (
        words["group"] + ", ".join(edge.groups) if edge.groups else "",
        words["launch_order"] if edge.launch_order else "",
        f"×{edge.count:,}" if edge.count > 1 else "") if part)
    if edge.src == edge.dst:
        ox, oy = src.out
        norm = math.hypot(ox, oy) or 1.0
        ox, oy = ox / norm, oy / norm
        ax, ay = _border_point(src, src.cx + ox * 100 - oy * 60, src.cy + oy * 100 + ox * 60)
        bx, by = _border_point(src, src.cx + ox * 100 + oy * 60, src.cy + oy * 100 - ox * 60)
        reach = 58
        path = (f"M{ax:.1f},{ay:.1f} C{ax + ox * reach:.1f},{ay + oy * reach:.1f} "
                f"{bx + ox * reach:.1f},{by + oy * reach:.1f} {bx:.1f},{by:.1f}")
        lx, ly = (ax + bx) / 2 + ox * (reach + 8), (ay + by) / 2 + oy * (reach + 8) + 4
        count = words["within"].format(count=count) if count else ""
    else:
        # Opposite edges bend apart; others are straight.
        bend = 26 if has_reverse else 0
        mx, my = (src.cx + dst.cx) / 2, (src.cy + dst.cy) / 2
        length = math.hypot(dst.cx - src.cx, dst.cy - src.cy) or 1
        nx_, ny_ = -(dst.cy - src.cy) / length, (dst.cx - src.cx) / length
        cx, cy = mx + nx_ * bend * 2, my + ny_ * bend * 2
        x0, y0 = _border_point(src, cx, cy)
        x1, y1 = _border_point(dst, cx, cy)
        path = f"M{x0:.1f},{y0:.1f} Q{cx:.1f},{cy:.1f} {x1:.1f},{y1:.1f}"
        lx, ly = (x0 + 2 * cx + x1) / 4, (y0 + 2 * cy + y1) / 4 - 4
    semantics = f' data-semantics="{edge.semantics}"' + (' data-launch-order="true"' if edge.launch_order else "")
    if edge.groups:
        semantics += f' data-groups="{escape("; ".join(edge.groups))}"'
    label = (f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="11" text-anchor="middle" fill="{color}" '
             f'paint-order="stroke" stroke="#fff" stroke-width="3">{escape(count)}</text>' if count else "")
    return (f'<g class="{classes}" data-src="{edge.src}" data-dst="{edge.dst}" data-count="{edge.count}"'
            f'{semantics}><path d="{path}" fill="none" stroke="{color}" stroke-width="{width}"{dash} '
            f'marker-end="url(#{marker})"/>{label}</g>')


def _fit(text: str, limit: int = MAX_CHARS) -> str:
    """Cut to `limit` characters; a class label keeps its count: `ranks 0-33… (9,999)`."""
    if len(text) <= limit:
        return text
    head, sep, count = text.rpartition(" (")
    if sep and count.endswith(")") and len(count) + 6 < limit:
        return head[:limit - len(count) - 3] + "… (" + count
    return text[:limit - 1] + "…"


def _node(box: Box, href: str | None, lang: str, badge: bool) -> str:
    node = box.node
    fill, stroke = _STATE_STYLE.get(node.state, _ELSEWHERE)
    stroke_w, dash = 1.4, ""
    if node.dead:
        dash = ' stroke-dasharray="4 3"'
    if node.culprit:
        stroke, stroke_w = CULPRIT, 3.2
    classes = " ".join(c for c in ("node", "culprit" if node.culprit else "", "oncycle" if node.on_cycle else "",
                                   "dead" if node.dead else "") if c)
    title = f"{node.label}: {node.detail}" if node.detail else node.label
    if len(node.ranks) > 1:
        title += f"\nranks {compact(node.ranks)}"
    words = WORDS[lang_of(lang)]
    if box.stacks:
        title += "\n" + words["stack_class"] + ", ".join(box.stacks)
    if node.evidence:
        title += f"\n{node.evidence}"
    lines = [f'<text x="{box.x + 8:.1f}" y="{box.y + 17:.1f}" font-size="12.5" font-weight="600" '
             f'fill="#111827">{escape(_fit(node.label, int(MAX_CHARS * 0.86) - (8 if node.culprit and badge else 0)))}</text>',
             f'<text x="{box.x + 8:.1f}" y="{box.y + 32:.1f}" font-size="11" fill="#1f2937">'
             f'{escape(_fit(node.detail or node.state))}</text>']
    if box.stacks:
        stacks = words["stack"] + ", ".join(box.stacks)
        lines.append(f'<text x="{box.x + 8:.1f}" y="{box.y + 46:.1f}" font-size="10" fill="#475569">'
                     f'{escape(_fit(stacks))}</text>')
    if node.culprit and badge:
        tag = words["culprit"]
        lines.append(f'<rect x="{box.x + NODE_W - 58:.1f}" y="{box.y + 5:.1f}" width="52" height="15" rx="3" '
                     f'fill="{CULPRIT}"/><text x="{box.x + NODE_W - 32:.1f}" y="{box.y + 16:.1f}" font-size="9.5" '
                     f'font-weight="700" fill="#fff" text-anchor="middle">{tag}</text>')
    body = (f'<title>{escape(title)}</title><rect x="{box.x:.1f}" y="{box.y:.1f}" width="{NODE_W}" '
            f'height="{NODE_H}" rx="7" fill="{fill}" stroke="{stroke}" stroke-width="{stroke_w}"{dash}/>'
            + "".join(lines))
    if href:
        body = f'<a href="{escape(href)}">{body}</a>'
    return (f'<g class="{classes}" id="wg-{escape(node.id)}" data-ranks="{compact(node.ranks) if node.ranks else ""}" '
            f'data-state="{escape(node.state)}">{body}</g>')
