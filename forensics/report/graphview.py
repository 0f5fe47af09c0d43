"""The wait-for graph as people look at it: a few dozen boxes, not 10,000.

Every renderer that draws the graph (HTML's SVG, Mermaid, DOT) starts from
this one view, so they agree on what is shown. Ranks that matter are their
own nodes: the culprits, the members of a reported cycle, dead ranks, CUDA
streams, and the ranks most others wait for. Every other rank joins a class
of ranks in the same place (state, call, group, sequence) waiting on the
same things; an edge between two view nodes stands for every wait between
their ranks, with its count. Collective instances (the engine's virtual
nodes) are drawn as the waits they stand for: each waiting rank → each
member that has not arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..graph import edges_between
from ..model import node_label, node_rank
from ..ranges import compact
from ..rules.comm_waits import LAUNCH_ORDER

MAX_NODES = 40           # at most this many individual ranks before classes are formed
MAX_PINNED = 16          # individual nodes kept for culprits/cycle/dead/sinks when collapsing
MAX_TARGETS_IN_KEY = 8   # a class key lists at most this many awaited nodes, else their count


@dataclass(slots=True)
class ViewNode:
    id: str
    ranks: tuple[int, ...]           # global ranks it stands for (empty for a stream)
    label: str                       # first line: who ("rank 5", "ranks 0-4,6-9 (9)", "stream 0:comm")
    detail: str                      # second line: where ("blocked all_reduce group 0 seq 4")
    state: str                       # the rank state (blocked, data_loading, exited, ...), "stream"
    culprit: bool = False
    on_cycle: bool = False
    dead: bool = False
    stream: bool = False
    evidence: str = ""               # a citation "file:line" for the node's first rank


@dataclass(slots=True)
class ViewEdge:
    src: str
    dst: str
    count: int                       # waits (waiter rank → awaited rank) it stands for
    on_cycle: bool = False
    semantics: str = "AND"
    # The process groups the waits are in ("2 (halo_01)", "0"); "p2p" marks
    # a send/recv on a group no artifact names.
    groups: tuple[str, ...] = ()
    # Every wait it stands for is a call queued behind an earlier launch on
    # the awaited rank's own device (rules/comm_waits.py: launch-order).
    launch_order: bool = False


@dataclass(slots=True)
class GraphView:
    nodes: list[ViewNode] = field(default_factory=list)
    edges: list[ViewEdge] = field(default_factory=list)
    total_ranks: int = 0
    collapsed: bool = False          # True when some nodes are classes of ranks

    def node(self, node_id: str) -> ViewNode:
        return next(n for n in self.nodes if n.id == node_id)


def build(report, max_nodes: int = MAX_NODES) -> GraphView:
    incident, analysis = report.incident, report.analysis
    graph = analysis.graph
    culprits = set(report.culprit_ranks)
    cycle_nodes = {n for cycle in report.cycles for n in cycle}
    cycle_pairs = {(a, b) for cycle in report.cycles for a, b in zip(cycle, cycle[1:])}
    real = [n for n in graph.nodes if not _virtual(n)]
    ranks = sorted(n for n in real if isinstance(n, int))
    streams = sorted((n for n in real if not isinstance(n, int)), key=str)
    collapse = len(ranks) > max_nodes
    pinned = set(ranks) if not collapse else _pinned(ranks, culprits, cycle_nodes, incident, analysis)

    def launch(a, b) -> bool:
        return any(w.rule == LAUNCH_ORDER for w in edges_between(graph, a, b))

    def targets(node):  # {awaited real node: {(group, launch order)}}, collective nodes expanded
        out: dict = {}
        for succ in graph.successors(node):
            if _virtual(succ):
                for awaited in analysis._expansion(succ):
                    if awaited != node:
                        out.setdefault(awaited, set()).add((_group_label(incident, succ[1]), launch(succ, awaited)))
            elif succ != node:
                out.setdefault(succ, set()).add((_direct_group(incident, node), launch(node, succ)))
        return out

    waits = {n: targets(n) for n in real}
    view_of: dict = {}
    view = GraphView(total_ranks=len(ranks), collapsed=False)
    for rank in ranks:
        if rank in pinned:
            view_of[rank] = _rank_id(rank)
    classes: dict[tuple, list[int]] = {}
    for rank in ranks:
        if rank in pinned:
            continue
        classes.setdefault(_class_key(incident, rank, waits[rank], view_of), []).append(rank)
    for rank in ranks:
        if rank in pinned:
            view.nodes.append(_rank_node(incident, rank, culprits, cycle_nodes))
    for index, (key, members) in enumerate(sorted(classes.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))):
        node_id = f"class{index}"
        for rank in members:
            view_of[rank] = node_id
        node = _class_node(incident, node_id, members)
        node.culprit = any(r in culprits for r in members)
        node.on_cycle = any(r in cycle_nodes for r in members)
        view.nodes.append(node)
        view.collapsed = True
    for stream in streams:
        view_of[stream] = f"stream_{stream[1]}_{_safe(stream[2])}"
        view.nodes.append(ViewNode(view_of[stream], (), f"stream {node_label(stream)}", "", "stream",
                                   on_cycle=stream in cycle_nodes, stream=True))
    counts: dict[tuple, list] = {}
    for waiter, targets_ in waits.items():
        for awaited, how in targets_.items():
            if waiter not in view_of or awaited not in view_of:
                continue
            key = (view_of[waiter], view_of[awaited])
            if key[0] == key[1] and len(view.node(key[0]).ranks) <= 1:
                continue
            entry = counts.setdefault(key, [0, False, "AND", set(), True])
            entry[0] += 1
            entry[1] = entry[1] or (waiter, awaited) in cycle_pairs
            if graph.graph.get("semantics", {}).get(waiter) == "OR":
                entry[2] = "OR"
            entry[3].update(group for group, _ in how if group)
            entry[4] = entry[4] and all(queued for _, queued in how)
    view.edges = [ViewEdge(src, dst, count, on_cycle, semantics, tuple(sorted(groups)[:MAX_GROUPS]), queued)
                  for (src, dst), (count, on_cycle, semantics, groups, queued) in sorted(counts.items())]
    return view


MAX_GROUPS = 3  # group labels kept per drawn edge


def _group_label(incident, gid: str) -> str:
    """`2 (halo_01)`: a group's id with the name an artifact gives it."""
    if gid.startswith("?"):
        return gid[1:]
    pg = incident.groups.get(gid)
    name = pg.name if pg is not None else ""
    return f"{gid} ({name})" if name and name not in (gid, "undefined", "default_pg") else gid


def _direct_group(incident, node) -> str:
    """The group of a wait drawn straight from a rank (a send or recv)."""
    state = incident.ranks.get(node) if isinstance(node, int) else None
    op = state.current_op if state is not None else None
    if op is None or not op.group_known:
        return ""
    return _group_label(incident, op.group or "0")


def _virtual(node) -> bool:
    return isinstance(node, tuple) and node[0] == "coll"


def _pinned(ranks, culprits, cycle_nodes, incident, analysis) -> set:
    chosen: list[int] = []
    for group in (sorted(culprits), sorted(r for r in cycle_nodes if isinstance(r, int)),
                  sorted(r for r in ranks if incident.ranks.get(r) is not None and incident.ranks[r].is_dead),
                  list(analysis.sinks)):
        for rank in group:
            if rank in incident.ranks and rank not in chosen and len(chosen) < MAX_PINNED:
                chosen.append(rank)
    return set(chosen)


def _where(state, relative: bool = False) -> tuple[str, str]:
    """(state, 'blocked recv from 3 group 0 seq 4'); with `relative`, peers
    as offsets from the rank ('from r-1'), so a ring of 10,000 ranks is one class."""
    if state is None:
        return "unknown", "no artifact"
    op = state.current_op
    if state.is_dead:
        return "exited", "exited"
    if op is not None and state.is_blocked:
        parts = [state.activity, op.op]
        if op.peers:
            peers = [f"r{p - state.rank:+d}" for p in op.peers[:4]] if relative else map(str, op.peers[:4])
            parts.append(("to " if op.op == "send" else "from ") + ",".join(peers))
        if op.group:
            parts.append(f"group {op.group}")
        if op.seq is not None:
            parts.append(f"seq {op.seq}")
        return state.activity, " ".join(parts)
    return state.activity, state.activity


def _rank_id(rank: int) -> str:
    return f"rank{rank}"


def _rank_node(incident, rank, culprits, cycle_nodes) -> ViewNode:
    state = incident.ranks.get(rank)
    activity, where = _where(state)
    evidence = state.evidence.cite() if state is not None and state.evidence is not None else ""
    return ViewNode(_rank_id(rank), (rank,), f"rank {rank}", where, activity, culprit=rank in culprits,
                    on_cycle=rank in cycle_nodes, dead=state is not None and state.is_dead, evidence=evidence)


def _class_key(incident, rank, targets, view_of) -> tuple:
    state = incident.ranks.get(rank)
    activity, where = _where(state, relative=True)
    # Awaited pinned nodes by name; others by their offset, like the peers.
    awaited = sorted((view_of[t] if t in view_of else f"r{t - rank:+d}" if isinstance(t, int) else "other"
                      for t in targets), key=str)
    return (activity, where, tuple(awaited[:MAX_TARGETS_IN_KEY]) if len(awaited) <= MAX_TARGETS_IN_KEY
            else ("many", len(set(awaited))))


def _class_node(incident, node_id, members) -> ViewNode:
    state = incident.ranks.get(members[0])
    activity, where = _where(state, relative=len(members) > 1)
    evidence = state.evidence.cite() if state is not None and state.evidence is not None else ""
    label = f"rank {members[0]}" if len(members) == 1 else f"ranks {compact(members)} ({len(members):,})"
    return ViewNode(node_id, tuple(members), label, where, activity,
                    dead=state is not None and state.is_dead, evidence=evidence)


def _safe(text) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in str(text))
