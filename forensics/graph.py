"""The wait-for graph: who waits for whom, and who can never progress.

Nodes are ranks (ints), CUDA streams `("stream", rank, name)`, and one
virtual node per collective instance `("coll", group, seq)`. A rank inside a
collective waits on the collective node; the collective node waits on every
member that has not arrived. That keeps the graph linear in ranks (a
100,000-rank all_reduce with half the members missing is 100,000 edges, not
2.5 billion) and gives AND semantics for free.

Reduction (the classic deadlock-detection algorithm for AND/OR graphs): a node
that waits on nothing can progress; an AND waiter progresses when everything
it waits on can; an OR waiter when anything can. Dead ranks never progress.
What is left after reduction can never progress: that is the deadlock, and a
cycle among it is the witness.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from .model import AND, OR, Incident, Node, WaitEdge, node_rank

if TYPE_CHECKING:
    import networkx as nx


@dataclass(slots=True)
class GraphAnalysis:
    graph: nx.DiGraph
    # Nodes that can never progress, given the artifacts.
    stuck: frozenset
    # Witness cycles among the stuck nodes, each closed on its first node and
    # started at its smallest member: [0, 1, 0]. Collective nodes are elided.
    cycles: list[list[Node]]
    # The strongly connected knot each witness cycle was drawn from (same
    # order): every node in it is part of the deadlock, not only the witness.
    knots: list[frozenset]
    # Dead ranks that a stuck node transitively waits on.
    dead_awaited: list[int]
    # Ranks that are blocked in a communication call (have outgoing waits).
    waiting: frozenset
    # Alive, non-waiting ranks that waiting ranks transitively depend on,
    # ordered by how many ranks wait on them (most first): who to look at.
    sinks: list[int]
    waiters_of: dict[int, int] = field(default_factory=dict)

    def waits_of(self, node: Node, limit: int | None = None) -> tuple[list[Node], int]:
        """Direct waits of a node, collective nodes expanded to their missing
        ranks: (the first `limit` of them in order, how many in all)."""
        if node not in self.graph:
            return [], 0
        direct = []
        expanded = []
        for succ in self.graph.successors(node):
            if _is_virtual(succ):
                expanded.append(self._expansion(succ))
            elif succ != node:
                direct.append(succ)
        if not expanded:
            ordered = sorted(direct, key=_node_key)
            return (ordered if limit is None else ordered[:limit]), len(ordered)
        total = len(direct) + sum(len(e) for e in expanded)
        if len(expanded) == 1 and not direct:
            only = [n for n in expanded[0] if n != node]
            return (only if limit is None else only[:limit]), len(only)
        merged = sorted({n for e in expanded for n in e} | set(direct), key=_node_key)
        merged = [n for n in merged if n != node]
        return (merged if limit is None else merged[:limit]), (len(merged) if limit is None or
                                                               total <= 4 * limit else total)

    def _expansion(self, virtual: Node) -> list[Node]:
        cache = self.graph.graph.setdefault("_expansions", {})
        found = cache.get(virtual)
        if found is None:
            found = cache[virtual] = sorted(self.graph.successors(virtual), key=_node_key)
        return found


def _is_virtual(node: Node) -> bool:
    return isinstance(node, tuple) and node[0] == "coll"


def _waits_on_someone(graph: nx.DiGraph, node: Node) -> bool:
    succ = graph.succ
    return any(not _is_virtual(s) or len(succ[s]) > 0 for s in succ[node])


def _node_key(node: Node):
    """Total order over mixed node types: ranks first, then streams, then others."""
    if isinstance(node, int):
        return (0, node, "")
    if node[0] == "stream":
        return (1, node[1], str(node[2]))
    return (2, 0, repr(node))


def build_graph(edges: Iterable[WaitEdge], incident: Incident) -> nx.DiGraph:
    """The wait-for graph. Edge objects are kept beside it, keyed by
    (waiter, awaited), rather than as per-edge attribute dicts: a 100,000-rank
    incident builds twice as fast."""
    import networkx as nx  # here, not at import: see prepare()

    graph = nx.DiGraph()
    graph.add_nodes_from(incident.ranks)
    by_pair: dict = {}
    semantics: dict = {}
    for edge in edges:
        if edge.waiter == edge.awaited:
            continue
        key = (edge.waiter, edge.awaited)
        found = by_pair.get(key)
        if found is None:
            by_pair[key] = [edge]
        else:
            found.append(edge)
        # A waiter is OR only if all its edges say so; any AND edge makes it AND.
        if edge.semantics == OR:
            semantics.setdefault(edge.waiter, OR)
        else:
            semantics[edge.waiter] = AND
    graph.add_edges_from(by_pair)
    for node, kind in semantics.items():
        if kind == OR:
            graph.nodes[node]["semantics"] = OR
    graph.graph["edges"] = by_pair
    return graph


def edges_between(graph: nx.DiGraph, waiter: Node, awaited: Node) -> list[WaitEdge]:
    """The WaitEdges (with rule, reason, evidence) behind one graph edge."""
    return graph.graph.get("edges", {}).get((waiter, awaited), [])


def reduce_graph(graph: nx.DiGraph, dead: set) -> set:
    """Return the set of nodes that can progress."""
    remaining: dict = {}
    progressed: set = set()
    queue: deque = deque()
    for node in graph.nodes:
        if node in dead:
            continue
        out = graph.out_degree(node)
        if out == 0:
            progressed.add(node)
            queue.append(node)
        else:
            remaining[node] = 1 if graph.nodes[node].get("semantics") == OR else out
    while queue:
        node = queue.popleft()
        for waiter in graph.predecessors(node):
            if waiter in progressed or waiter in dead:
                continue
            remaining[waiter] -= 1
            if remaining[waiter] == 0:
                progressed.add(waiter)
                queue.append(waiter)
    return progressed


def _witness_cycles(graph: nx.DiGraph, stuck: set) -> list[tuple[list[Node], frozenset]]:
    """One shortest cycle per strongly connected knot, from its smallest rank."""
    import networkx as nx

    # A subgraph *view* filters every lookup; a plain copy is much faster to
    # walk, and when everything is stuck the graph itself will do.
    sub = graph if len(stuck) == graph.number_of_nodes() else graph.subgraph(stuck).copy()
    cycles = []
    for component in nx.strongly_connected_components(sub):
        if len(component) == 1:
            (only,) = component
            if not sub.has_edge(only, only):
                continue
        start = min(component, key=_start_key)
        path = _shortest_cycle(sub, start, component)
        if path:
            shown = [n for n in path if not _is_virtual(n)]
            if len(shown) >= 2:
                knot = frozenset(n for n in component if not _is_virtual(n))
                cycles.append((shown, knot))
    cycles.sort(key=lambda c: [_node_key(n) for n in c[0]])
    return cycles


def _start_key(node: Node):
    # Prefer starting the witness at a rank, then a stream, never a virtual node.
    return _node_key(node)


def _shortest_cycle(graph, start, component) -> list[Node]:
    parent = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(graph.successors(node), key=_node_key):
            if succ not in component:
                continue
            if succ == start:
                path = [node]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                path.reverse()
                return path + [start]
            if succ not in parent:
                parent[succ] = node
                queue.append(succ)
    return []


def waiters(graph: nx.DiGraph, targets) -> set:
    """Every node that waits on one of `targets`, directly or through others
    (the targets themselves only if they wait on each other)."""
    starts = [t for t in targets if t in graph]
    seen = set(starts)
    found: set = set()
    queue = deque(starts)
    while queue:
        for pred in graph.predecessors(queue.popleft()):
            if pred not in seen:
                seen.add(pred)
                found.add(pred)
                queue.append(pred)
    return found


def _count_waiters(graph: nx.DiGraph, target: Node, memo: dict | None = None) -> int:
    """How many rank nodes transitively wait on `target`.

    Sinks reached only through the same waiters (the computing members of
    one collective) share the answer, so it is memoized on that set."""
    preds = frozenset(graph.predecessors(target))
    if memo is not None and preds in memo:
        return memo[preds]
    count = sum(1 for node in waiters(graph, (target,)) if isinstance(node, int))
    if memo is not None:
        memo[preds] = count
    return count


_EXACT_COUNT_LIMIT = 16


def _count_direct_waiters(graph: nx.DiGraph, target: Node) -> int:
    """Ranks that wait on `target` directly or through one collective node."""
    count = 0
    for pred in graph.predecessors(target):
        if _is_virtual(pred):
            count += sum(1 for p in graph.predecessors(pred) if isinstance(p, int))
        elif isinstance(pred, int):
            count += 1
    return count


def analyze_graph(graph: nx.DiGraph, incident: Incident) -> GraphAnalysis:
    dead = {r for r, s in incident.ranks.items() if s.is_dead}
    progressed = reduce_graph(graph, dead)
    stuck = frozenset(n for n in graph.nodes if n not in progressed and n not in dead)
    witnesses = _witness_cycles(graph, set(stuck))
    waits = {n: _waits_on_someone(graph, n) for n in graph.nodes if isinstance(n, int)}
    waiting = frozenset(n for n, yes in waits.items() if yes)

    # Walk forward from every waiting rank to find what everyone depends on.
    reach: set = set()
    queue = deque(sorted(waiting))
    reach.update(waiting)
    while queue:
        node = queue.popleft()
        for succ in graph.successors(node):
            if succ not in reach:
                reach.add(succ)
                queue.append(succ)
    dead_awaited = sorted(n for n in reach if n in dead)
    sink_nodes = [n for n in reach if isinstance(n, int) and n not in dead and not waits[n]]
    targets = sink_nodes + dead_awaited
    # Exact transitive counts are a BFS each: affordable for the handful of
    # culprits a real hang has; thousands of sinks get direct-waiter counts.
    if len(targets) <= _EXACT_COUNT_LIMIT:
        memo: dict = {}
        waiters_of = {n: _count_waiters(graph, n, memo) for n in targets}
    else:
        waiters_of = {n: _count_direct_waiters(graph, n) for n in targets}
    sinks = sorted(sink_nodes, key=lambda n: (-waiters_of.get(n, 0), n))
    return GraphAnalysis(graph=graph, stuck=stuck, cycles=[c for c, _ in witnesses],
                         knots=[k for _, k in witnesses],
                         dead_awaited=dead_awaited, waiting=waiting, sinks=sinks,
                         waiters_of=waiters_of)


def cycle_ranks(cycle: list[Node]) -> list[int]:
    """Ranks on a witness cycle, each once, in cycle order."""
    out: list[int] = []
    for node in cycle[:-1]:
        rank = node_rank(node)
        if rank is not None and rank not in out:
            out.append(rank)
    return out
