"""missing-rank: ranks wait in a call that a rank still alive has not joined
(it computes, loads data, writes a checkpoint, or left a loop early).

In one snapshot of a healthy job that is ordinary progress, so this becomes
an error only with evidence that the job is stuck: a watchdog timeout, an
operation past its timeout, no progress between two snapshots, or the
user's --hung. Without it the rule says, as info, who the others wait for."""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..ruledocs import RuleDoc
from ..model import Finding
from ..ranges import compact
from ._semantics import describe_op

ID = "missing-rank"
HINT = ("Look at what the awaited rank is doing instead (its stack dump): data loading, checkpoint I/O, "
        "an early exit from the training loop (uneven shards: use drop_last / DistributedSampler with "
        "equal lengths), or a collective issued only on some ranks.")
HINT_ZH = ("查看被等待的 Rank 在做什么（它的调用栈）：数据加载、Checkpoint I/O、提前退出训练循环（数据分片不均："
           "使用 drop_last 或等长的 DistributedSampler），或只在部分 Rank 上调用的集合通信。")


@hookimpl
def forensics_graph_findings(incident, analysis):
    if not analysis.sinks or not analysis.waiting:
        return []
    sinks = analysis.sinks
    top = analysis.waiters_of.get(sinks[0], 0)
    described = []
    for rank in sinks[:8]:
        state = incident.ranks.get(rank)
        if state is None:
            doing = "no artifact at all"
        else:
            doing = state.activity + (f" in {describe_op(state.current_op)}" if state.current_op else "")
            if state.why:
                doing += f", {state.why}"
        described.append(f"rank {rank}: {doing}")
    evidence = tuple(incident.ranks[r].evidence for r in sinks[:8]
                     if r in incident.ranks and incident.ranks[r].evidence)
    evidence += tuple(s.evidence for s in incident.stuck if s.evidence)[:4]
    if incident.stuck:
        why = "; ".join(s.detail for s in incident.stuck[:3])
        why_zh = "；".join(s.detail_zh or s.detail for s in incident.stuck[:3])
        return [Finding(
            ID, "missing_rank", "error", tuple(sorted(sinks)),
            f"{len(analysis.waiting)} rank(s) wait for rank {compact(sinks)}, which is alive but not in "
            f"the call ({', '.join(described)}). The job is stuck ({why}).",
            evidence, HINT,
            f"{len(analysis.waiting)} 个 Rank 在等待 Rank {compact(sinks)}，它仍然存活却没有进入该通信调用"
            f"（{', '.join(described)}）。作业已卡住（{why_zh}）。", HINT_ZH)]
    return [Finding(
        "waiting-on-progressing-rank", "waiting_on_progressing_rank", "info", tuple(sorted(sinks)),
        f"{len(analysis.waiting)} rank(s) wait for rank {compact(sinks)} ({', '.join(described)}); in a "
        f"single snapshot that is normal progress. If the job is stuck, rerun with --hung "
        f"(most waited on: {top} rank(s)).",
        evidence, HINT,
        f"{len(analysis.waiting)} 个 Rank 在等待 Rank {compact(sinks)}（{', '.join(described)}）；单个快照中这属于正常推进。"
        f"若作业确实卡住，请加 --hung 重新分析。", HINT_ZH)]

RULES = (
    RuleDoc(
        ID, "Missing rank", "成员缺失", "error",
        "Ranks wait in a call that a live rank has not joined: it computes, loads data, writes a "
        "checkpoint, or left the loop early. In one snapshot of a healthy job that is progress, so it "
        "is an error only with evidence that the job is stuck (a watchdog timeout, an op past its "
        "timeout, no progress between two snapshots, or --hung).",
        "多个 Rank 在等待一个仍存活、却没有进入该调用的 Rank：它在计算、加载数据、写 Checkpoint，或提前"
        "退出了循环。健康作业的单次快照中这属于正常推进，因此只有在有卡住证据时（watchdog 超时、操作超过"
        "超时时间、两次快照之间无进展，或 --hung）才记为错误。",
        HINT, HINT_ZH, kinds=("missing_rank",), source=__name__),
    RuleDoc(
        "waiting-on-progressing-rank", "Waiting on a rank that is still working", "等待仍在工作的 Rank",
        "info",
        "Without evidence of a hang, ranks waiting for a rank that is busy elsewhere are reported as "
        "information: who the others wait for, in case the job is in fact stuck.",
        "没有卡住证据时，等待一个正忙于其他工作的 Rank 只作为提示：说明其他 Rank 在等谁，以防作业其实已卡住。",
        "If the job is stuck, rerun with --hung (or collect a second snapshot).",
        "如果作业确实卡住，加 --hung 重新分析（或再采集一次快照）。",
        kinds=("waiting_on_progressing_rank",), source=__name__),
)


@hookimpl
def forensics_rules():
    return RULES
