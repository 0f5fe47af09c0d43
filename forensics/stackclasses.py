"""STAT-style stack classes: every rank's main-thread stack merged into one
prefix tree labelled with rank sets. Ten thousand ranks in the same
all_reduce read as one line; the odd ones out stand apart, and that is
where root causes hide."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Iterator

from .ranges import compact

CHAIN_KEEP = 3  # frames kept at each end of a long single-path chain


@dataclass
class StackNode:
    frames: list[str]
    ranks: list[int] = field(default_factory=list)
    children: dict = field(default_factory=dict)


def build(incident) -> StackNode:
    root = StackNode(frames=[])
    for rank, state in incident.ranks.items():
        if not state.stack:
            continue
        node = root
        node.ranks.append(rank)
        for label in state.stack:
            child = node.children.get(label)
            if child is None:
                child = node.children[label] = StackNode(frames=[label])
            child.ranks.append(rank)
            node = child
    return _collapse(root)


def _collapse(node: StackNode) -> StackNode:
    children = [_collapse(c) for c in node.children.values()]
    # Merge a chain of single children that carry the same ranks.
    while len(children) == 1 and len(children[0].ranks) == len(node.ranks) and node.frames:
        only = children[0]
        node.frames.extend(only.frames)
        children = list(only.children.values())
    node.children = {i: c for i, c in enumerate(sorted(children, key=lambda c: (-len(c.ranks), min(c.ranks))))}
    return node


def classes(root: StackNode) -> int:
    """Number of distinct leaf classes."""
    if not root.children:
        return 1 if root.ranks else 0
    return sum(classes(c) for c in root.children.values())


def chain_text(frames: list[str]) -> str:
    if len(frames) <= 2 * CHAIN_KEEP + 1:
        return " → ".join(frames)
    hidden = len(frames) - 2 * CHAIN_KEEP
    return " → ".join(frames[:CHAIN_KEEP] + [f"… {hidden} frames …"] + frames[-CHAIN_KEEP:])


def is_majority(kids: list[StackNode], index: int) -> bool:
    """Whether child `index` (children are largest first) holds a clear majority."""
    return index == 0 and (len(kids) == 1 or len(kids[0].ranks) > len(kids[1].ranks))


def walk(root: StackNode) -> Iterator[tuple[StackNode, int, bool]]:
    """The tree in print order, as (node, depth, odd one out): the largest
    class first at each level; a node is the odd one out when it is not its
    parent's clear majority. Every renderer of the tree draws from this."""
    def visit(node: StackNode, depth: int, majority: bool):
        yield node, depth, not majority and depth > 0
        kids = list(node.children.values())
        for index, child in enumerate(kids):
            yield from visit(child, depth + 1, is_majority(kids, index))

    for index, top in enumerate(root.children.values()):
        yield from visit(top, 0, index == 0)


def render(root: StackNode, max_lines: int = 40) -> list[str]:
    """Indented lines, rank sets first; the largest class first at each level."""
    width = max(8, len(compact(root.ranks)))
    lines = [f"{compact(node.ranks):<{width}}  {'  ' * depth}{chain_text(node.frames)}"
             + ("  ◀ odd one out" if odd else "")
             for node, depth, odd in islice(walk(root), max_lines)]
    if len(lines) >= max_lines:
        lines.append("… (more classes in --format json)")
    return lines


def to_json(node: StackNode) -> list[dict]:
    out = []
    kids = list(node.children.values())
    for index, child in enumerate(kids):
        out.append({"frames": child.frames, "ranks": compact(child.ranks), "count": len(child.ranks),
                    "majority": is_majority(kids, index),
                    "children": to_json(child)})
    return out


def group_dumps(dumps) -> list:
    """Dumps no rank could be attributed to, grouped by where their main
    thread is as the report tells it (what it does, in which call, where):
    [(classification, [dumps])], largest group first."""
    from .ingest.stacks import classify

    groups: dict = {}
    for dump in dumps:
        judged = classify(dump)
        key = (judged.activity, judged.op, judged.why)
        groups.setdefault(key, (judged, []))[1].append(dump)
    return sorted(groups.values(), key=lambda g: -len(g[1]))
