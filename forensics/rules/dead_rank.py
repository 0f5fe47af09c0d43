"""dead-rank: live ranks wait, directly or transitively, on a rank whose
process has exited or crashed. It will never arrive."""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..ruledocs import RuleDoc
from ..model import Finding
from ..ranges import compact

ID = "dead-rank"
HINT = ("Find why the rank died (its stderr, exit code or signal, the launcher's failure summary, "
        "dmesg for OOM kills); the others are only waiting for it. Make the job fail fast instead of "
        "hanging: TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a finite process-group timeout.")
HINT_ZH = ("先查这个 Rank 为何退出（stderr、退出码或信号、启动器的失败汇总、dmesg 中的 OOM）；其余 Rank 只是在等它。"
           "设置 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 和有限的进程组超时，让作业快速失败而不是挂起。")


@hookimpl
def forensics_graph_findings(incident, analysis):
    if not analysis.dead_awaited:
        return []
    dead = sorted(analysis.dead_awaited, key=lambda r: (-analysis.waiters_of.get(r, 0), r))
    evidence = tuple(incident.ranks[r].evidence for r in dead[:8] if incident.ranks[r].evidence)
    waiting = analysis.waiters_of.get(dead[0], 0)
    return [Finding(
        ID, "dead_rank", "error", tuple(sorted(dead)),
        f"Rank {compact(dead)} has exited, and {waiting} rank(s) wait on it; they can never proceed.",
        evidence, HINT,
        f"Rank {compact(dead)} 已退出，另有 {waiting} 个 Rank 在等待它，永远无法继续。", HINT_ZH)]

RULES = (RuleDoc(
    ID, "Dead rank", "成员已退出", "error",
    "Live ranks wait, directly or through others, on a rank whose process exited or crashed (an exit "
    "code, a signal, `Terminating the process`, a launcher's failure summary). It will never arrive.",
    "存活的 Rank 直接或间接地等待一个进程已退出或崩溃的 Rank（退出码、信号、`Terminating the process`、"
    "启动器的失败汇总）。它永远不会到来。",
    HINT, HINT_ZH, kinds=("dead_rank",), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
