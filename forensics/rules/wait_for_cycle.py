"""wait-for-cycle / p2p-circular-wait / cross-stream-event-cycle: a cycle of
blocking waits among nodes that can never progress. Nothing outside the
cycle can release it, so it needs no further evidence of a hang."""

from __future__ import annotations

from ..graph import edges_between
from ..hookspecs import hookimpl
from ..ruledocs import RuleDoc
from ..model import Finding, node_label, node_rank, path_label
from ..ranges import compact
from ._semantics import describe_op, rank_evidence
from .comm_waits import LAUNCH_ORDER

HINTS = {
    "p2p_circular_wait": (
        "Order the pairs so one side receives first (e.g. even ranks send then recv, odd ranks recv "
        "then send), or post both directions together with `dist.batch_isend_irecv` and wait on all.",
        "统一配对顺序（例如偶数 Rank 先 send 后 recv，奇数 Rank 先 recv 后 send），或用 "
        "`dist.batch_isend_irecv` 把成对的 send/recv 一起提交后统一 wait()。"),
    "cross_stream_cycle": (
        "Break the event cycle: record the event the communication stream waits on before the compute "
        "stream waits on communication, or make both streams wait on events recorded in one order.",
        "打破事件等待环：让通信流等待的 Event 在计算流等待通信之前就已 record，或让两条流按同一顺序等待事件。"),
    "circular_wait": (
        "The ranks wait on each other through different calls or groups: make every rank issue "
        "collectives across groups in the same order (e.g. always the data-parallel group before the "
        "tensor-parallel one).",
        "这些 Rank 通过不同的调用或通信组互相等待：让所有 Rank 以相同的顺序在各通信组上发起集合通信。"),
}
MAX_STEPS = 8


RULE_IDS = {"p2p_circular_wait": "p2p-circular-wait", "cross_stream_cycle": "cross-stream-event-cycle",
            "circular_wait": "wait-for-cycle"}


def cycle_kind(incident, cycle) -> str:
    if any(isinstance(n, tuple) for n in cycle):
        return "cross_stream_cycle"
    states = [incident.ranks.get(n) for n in cycle[:-1]]
    if states and all(s is not None and s.current_op is not None and s.current_op.is_p2p for s in states):
        return "p2p_circular_wait"
    return "circular_wait"


@hookimpl
def forensics_graph_findings(incident, analysis):
    findings = []
    for cycle, knot in zip(analysis.cycles, analysis.knots):
        kind = cycle_kind(incident, cycle)
        # Culprits: every rank of the knot, not just the witness path.
        ranks = sorted({node_rank(n) for n in knot if node_rank(n) is not None})
        evidence = []
        queued: list[str] = []  # launch-order waits on the cycle, as their edges word them
        steps, steps_zh = [], []
        pairs = list(zip(cycle, cycle[1:]))
        for here, there in pairs[:MAX_STEPS]:
            state = incident.ranks.get(node_rank(here))
            if isinstance(here, int) and state is not None:
                evidence.extend(e for e in rank_evidence(state) if e not in evidence)
                steps.append(f"rank {here} ({describe_op(state.current_op, incident.groups)}) waits for {node_label(there)}")
                steps_zh.append(f"Rank {here}（{describe_op(state.current_op, incident.groups)}）等待 {node_label(there)}")
            else:
                steps.append(f"stream {node_label(here)} waits for {node_label(there)}")
                steps_zh.append(f"Stream {node_label(here)} 等待 {node_label(there)}")
            for wait in edges_between(analysis.graph, here, there):
                evidence.extend(e for e in wait.evidence if e not in evidence)
            for wait in _launch_order(analysis.graph, here, there):
                if wait.reason not in queued:
                    queued.append(wait.reason)
                    evidence.extend(e for e in wait.evidence if e not in evidence)
        if len(pairs) > MAX_STEPS:
            steps.append(f"… {len(pairs) - MAX_STEPS} more waits around the cycle")
            steps_zh.append(f"……环上另有 {len(pairs) - MAX_STEPS} 条等待")
        path = path_label(cycle)
        others = sorted(set(ranks) - {node_rank(n) for n in cycle})
        if others:
            steps.append(f"ranks {compact(others)} are caught in the same knot")
            steps_zh.append(f"Rank {compact(others)} 也被卷入同一等待结")
        hint, hint_zh = HINTS[kind]
        order = order_zh = ""
        if queued:
            order = (" Launch order inside the ranks: " + "; ".join(queued[:MAX_STEPS])
                     + ". Each device runs its calls in the order they were launched, so the ranks that "
                       "launched the same calls in opposite orders wait on each other.")
            order_zh = (" Rank 内的启动顺序：" + "；".join(queued[:MAX_STEPS])
                        + "。每个设备按启动顺序执行调用，以相反顺序启动相同调用的 Rank 因而互相等待。")
        findings.append(Finding(
            RULE_IDS[kind], kind, "error", tuple(sorted(ranks)),
            f"Circular wait {path}: " + "; ".join(steps) + ". None of them can proceed." + order,
            tuple(evidence), hint,
            f"循环等待 {path}：" + "；".join(steps_zh) + "。环上任何一方都无法继续（死锁）。" + order_zh, hint_zh))
    return findings

def _launch_order(graph, here, there) -> list:
    """The launch-order waits by which `here` waits for `there`: directly,
    or through the collective `here` is in."""
    found = [w for w in edges_between(graph, here, there) if w.rule == LAUNCH_ORDER]
    for node in graph.successors(here) if here in graph else ():
        if isinstance(node, tuple) and node and node[0] == "coll":
            found += [w for w in edges_between(graph, node, there) if w.rule == LAUNCH_ORDER]
    return found


RULES = (
    RuleDoc(
        "p2p-circular-wait", "P2P circular wait", "点对点循环等待", "error",
        "Blocking send/recv calls wait on each other around a cycle of any length: rank 0 sends to 1 "
        "while 1 sends to 0 (both wait for a matching recv that is never posted), or a pipeline ring "
        "where every stage receives before it sends. No rank outside the cycle can release it.",
        "阻塞的 send/recv 沿一个环互相等待（任意长度）：Rank 0 向 1 send 的同时 1 也向 0 send（双方都在等"
        "永远不会到来的 recv），或流水线环中每个 stage 都先 recv 后 send。环外任何 Rank 都无法解开它。",
        HINTS["p2p_circular_wait"][0], HINTS["p2p_circular_wait"][1], kinds=("p2p_circular_wait",),
        source=__name__),
    RuleDoc(
        "cross-stream-event-cycle", "Cross-stream event cycle", "跨 Stream 事件循环等待",
        "error",
        "A cycle through CUDA streams and events within or across ranks (stream 1 waits for an event "
        "recorded on stream 2, stream 2 for one recorded on stream 1, collectives on a stream waiting "
        "for their peers), found on nodes (rank, stream) even when no rank-level cycle exists.",
        "CUDA Stream 与 Event 在 Rank 内或跨 Rank 构成的环（Stream 1 等待 Stream 2 上 record 的 Event，"
        "Stream 2 又等待 Stream 1 上的 Event，Stream 上的集合通信还在等待对端）；以 (rank, stream) 为节点，"
        "即使 Rank 级别没有环也能发现。",
        HINTS["cross_stream_cycle"][0], HINTS["cross_stream_cycle"][1], kinds=("cross_stream_cycle",),
        source=__name__),
    RuleDoc(
        "wait-for-cycle", "Circular wait across calls or groups", "跨调用或通信组的循环等待", "error",
        "Ranks wait on each other around a cycle through different collectives or process groups: "
        "rank 0 waits in group A for rank 1 while rank 1 waits in group B for rank 0, because the ranks "
        "issued the calls in a different order (launch order inverted across communicators).",
        "多个 Rank 通过不同的集合通信或通信组构成循环等待：Rank 0 在组 A 中等待 Rank 1，而 Rank 1 在组 B "
        "中等待 Rank 0——各 Rank 发起调用的顺序不一致（跨通信器的启动顺序颠倒）。",
        HINTS["circular_wait"][0], HINTS["circular_wait"][1], kinds=("circular_wait",), source=__name__),
)


@hookimpl
def forensics_rules():
    return RULES
