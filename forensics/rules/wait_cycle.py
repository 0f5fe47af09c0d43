"""wait-for-cycle / p2p-circular-wait / cross-stream-event-cycle: a cycle of
blocking waits among nodes that can never progress. Nothing outside the
cycle can release it, so it needs no further evidence of a hang."""

from __future__ import annotations

from ..graph import edges_between
from ..hookspecs import hookimpl
from ..model import Finding, node_label, node_rank, path_label
from ..ranges import compact
from ._semantics import describe_op, rank_evidence

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
        steps, steps_zh = [], []
        pairs = list(zip(cycle, cycle[1:]))
        for here, there in pairs[:MAX_STEPS]:
            state = incident.ranks.get(node_rank(here))
            if isinstance(here, int) and state is not None:
                evidence.extend(e for e in rank_evidence(state) if e not in evidence)
                steps.append(f"rank {here} ({describe_op(state.current_op)}) waits for {node_label(there)}")
                steps_zh.append(f"Rank {here}（{describe_op(state.current_op)}）等待 {node_label(there)}")
            else:
                steps.append(f"stream {node_label(here)} waits for {node_label(there)}")
                steps_zh.append(f"Stream {node_label(here)} 等待 {node_label(there)}")
            for wait in edges_between(analysis.graph, here, there):
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
        findings.append(Finding(
            RULE_IDS[kind], kind, "error", tuple(sorted(ranks)),
            f"Circular wait {path}: " + "; ".join(steps) + ". None of them can proceed.",
            tuple(evidence), hint,
            f"循环等待 {path}：" + "；".join(steps_zh) + "。环上任何一方都无法继续（死锁）。", hint_zh))
    return findings
