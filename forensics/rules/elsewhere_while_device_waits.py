"""elsewhere-while-device-waits: in a job judged stuck, no rank is inside a
communication call the stacks show, but some wait on their GPU while others
work on in their own code. With NCCL a collective returns to Python at once
and its kernel waits on the stream: a rank whose host thread then waits for
the device (`.item()`, a stream synchronize, GradScaler's inf check) is
waiting for the collective it queued, and so for the ranks that have not
queued theirs. Those ranks, busy elsewhere (an evaluation only rank 0 runs,
data loading, a save), are the ones everyone waits for.

Where some rank is inside a communication call, the wait-for graph and the
device-sync-stall rule speak instead.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..model import BLOCKED, COMPUTING, DATA_LOADING, DEVICE_WAIT, IO, Finding
from ..ranges import compact
from ..ruledocs import RuleDoc

ID = "elsewhere-while-device-waits"
KIND = "missing_rank"
BUSY = (COMPUTING, DATA_LOADING, IO)
HINT = ("Look at what the busy rank(s) do instead of the next collective (their stack is cited): a rank-0-only "
        "evaluation, logging or checkpoint, slow data loading. Make every rank reach the same collectives, or "
        "have the others wait in a barrier with a timeout long enough for the work.")
HINT_ZH = ("查看忙碌的 Rank 没有进入下一个集合通信而在做什么（已引用其调用栈）：只在 rank 0 上运行的评估、日志或检查点，"
           "缓慢的数据加载。让每个 Rank 到达相同的集合通信，或让其他 Rank 在超时足够长的 barrier 中等待。")


@hookimpl
def forensics_findings(incident):
    if not incident.stuck:
        return []
    ranks = incident.ranks
    if any(s.activity == BLOCKED for s in ranks.values()):
        return []
    waiting = sorted(r for r, s in ranks.items() if s.activity == DEVICE_WAIT and s.alive is not False)
    busy = sorted(r for r, s in ranks.items() if s.activity in BUSY and s.alive is not False and s.stack)
    if not waiting or not busy or len(busy) > len(waiting):
        return []
    level = "medium" if len(waiting) >= 2 else "low"
    evidence = tuple(ranks[r].evidence for r in busy[:8] + waiting[:2] if ranks[r].evidence)
    doing = "; ".join(f"rank {r}: {ranks[r].activity}, {ranks[r].why}" for r in busy[:4])
    return [Finding(
        ID, KIND, "error", tuple(busy),
        f"Rank {compact(waiting)} wait on their GPU, where the collective they queued waits for its peers, "
        f"while rank {compact(busy)} work on elsewhere ({doing}).",
        evidence, HINT,
        f"Rank {compact(waiting)} 在等待 GPU（其排队的集合通信在等待对端），而 Rank {compact(busy)} 仍在别处工作"
        f"（{doing}）。", HINT_ZH,
        confidence=level,
        confidence_reason=(f"{len(waiting)} rank(s) wait on the device and no stack shows a communication call: "
                           "that a queued collective is what they wait for is inferred, not seen"),
        confidence_reason_zh=(f"{len(waiting)} 个 Rank 在等待设备，没有调用栈显示通信调用："
                              "它们等待的是排队的集合通信，这是推断而非直接看到"))]


RULES = (RuleDoc(
    ID, "Busy elsewhere while the others wait on their GPU", "其他 Rank 等待 GPU 时仍在别处忙碌", "error",
    "In a job judged stuck, no stack shows a communication call, some ranks wait on their GPU (`.item()`, a "
    "stream synchronize, GradScaler's inf check) and others work on in their own code. With NCCL a collective "
    "returns to Python at once and its kernel waits on the stream, so a rank waiting on its device waits for the "
    "collective it queued, and for the ranks that have not queued theirs: the busy ones are named (medium "
    "confidence with two or more waiting ranks, else low; the queued collective is inferred, not seen).",
    "在被判定为卡住的作业中，没有调用栈显示通信调用，一些 Rank 在等待 GPU（`.item()`、流同步、GradScaler 的 inf 检查），"
    "另一些仍在自己的代码中工作。使用 NCCL 时集合通信立即返回 Python，其 kernel 在流上等待，所以等待设备的 Rank 是在等它"
    "排队的集合通信，也就是在等尚未排队的 Rank：点名忙碌的 Rank（两个及以上 Rank 等待时置信度中，否则低；排队的集合通信"
    "是推断的，不是直接看到的）。",
    HINT, HINT_ZH, kinds=(KIND,), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
