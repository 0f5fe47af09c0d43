"""call-site-mismatch: the ranks of a stuck job wait in the same collective,
but reached it from different places of the job's code (or its frameworks'). Each blocking
collective pairs the n-th call of every member; members that came from
different code paths are pairing calls that were never meant to meet (a ZeRO-3
gather of the generation step against one of the teacher's forward, an
evaluation-only all_reduce against the training step's), so none completes.
Stack dumps give no sequence numbers: the code path is what tells them apart.

The odd ones out are the ranks outside the largest class of code paths. Two
classes of equal size name no side, unless one of them is rank 0 alone on a
path that only rank 0 usually takes (evaluation, saving, logging).
"""

from __future__ import annotations

from collections import defaultdict

from ..hookspecs import hookimpl
from ..model import UNIDENTIFIED_GROUP, Finding, group_id
from ..ranges import compact
from ..ruledocs import RuleDoc
from ._semantics import FRAME_LABEL, RANK0_ONLY

ID = "call-site-mismatch"
KIND = "collective_mismatch"
HINT = ("Compare the two code paths: every rank must reach the same collectives in the same order. Look for a "
        "rank-dependent branch (rank 0 evaluates, saves or logs), a data-dependent one (a rank whose sequence "
        "ended early, a batch with no positive samples), or per-rank routing (experts, early exit in generation).")
HINT_ZH = ("比较两条代码路径：每个 Rank 必须以相同顺序到达相同的集合通信。检查依赖 rank 的分支（rank 0 单独评估、保存或"
           "记录日志）、依赖数据的分支（某个 Rank 的序列提前结束、某个 batch 没有正样本）或按 rank 不同的路由（专家、生成中的"
           "提前结束）。")

# Frames that say nothing of which code path a call came from: torch's own machinery (module calls,
# hooks, the collective's wrappers), Python's, and decorators that only wrap.
_PLUMBING_ROOTS = ("torch/", "threading.py", "contextlib.py", "functools.py", "runpy.py", "<frozen")
_WRAPPERS = frozenset({"wrapped_fn", "wrapper", "decorate_context", "_call_impl", "_wrapped_call_impl", "inner"})


def _own_path(stack: tuple[str, ...]) -> tuple[str, ...]:
    """`file:function` of the frames that tell a code path apart, outermost
    first: the job's and its frameworks' (Trainer, DeepSpeed, PEFT, ...)
    Python frames, without torch's machinery and mere wrappers. Lines are left
    out: other lines of the same functions are the same path."""
    out = []
    for label in stack:
        found = FRAME_LABEL.match(label)
        if found is None:
            continue
        file = found["file"].lstrip("/")
        if not file.endswith(".py"):
            continue  # a native frame: gdb's, or py-spy --native's
        for marker in ("site-packages/", "dist-packages/"):
            if marker in file:
                file = file.split(marker, 1)[1]
        if file.startswith(_PLUMBING_ROOTS) or "/lib/python" in file or found["function"] in _WRAPPERS:
            continue
        step = f"{file}:{found['function']}"
        if not out or out[-1] != step:
            out.append(step)
    return tuple(out)


def _function(step: str) -> str:
    return step.rsplit(":", 1)[-1]


@hookimpl
def forensics_findings(incident):
    if not incident.stuck:
        return []  # in a snapshot nobody judged stuck, two paths into one collective may still both complete
    waiting = defaultdict(dict)  # (group, op) → {rank: own path}
    for rank, state in incident.ranks.items():
        op = state.current_op
        if op is None or not op.is_collective or op.seq is not None or not state.stack:
            continue  # numbered calls are compared by collective-mismatch
        path = _own_path(state.stack)
        if path:
            # a stack dump names no group: the call's group is unknown, not the default one
            waiting[(group_id(op.group) if op.group else UNIDENTIFIED_GROUP, op.op)][rank] = path
    findings = []
    for (group, op), paths in sorted(waiting.items(), key=lambda kv: str(kv[0])):
        classes = defaultdict(list)
        for rank, path in paths.items():
            classes[path].append(rank)
        if len(classes) < 2:
            continue
        found = _finding(incident, group, op, classes)
        if found is not None:
            findings.append(found)
    return findings


def _finding(incident, group: str, op: str, classes: dict) -> Finding | None:
    ordered = sorted(classes.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    largest = len(ordered[0][1])
    unknown_group = group.startswith(UNIDENTIFIED_GROUP)
    if sum(1 for _, ranks in ordered if len(ranks) == largest) == 1:
        odd = sorted(r for _, ranks in ordered[1:] for r in ranks)
        level = "medium" if largest >= 2 and not unknown_group else "low"
        why = (f"{largest} of {sum(len(r) for _, r in ordered)} ranks reach {op} from one code path; "
               f"rank {compact(odd)} from another")
        why_zh = f"{sum(len(r) for _, r in ordered)} 个 Rank 中有 {largest} 个从同一代码路径到达 {op}；Rank {compact(odd)} 来自另一条"
    else:
        rank0 = [path for path, ranks in ordered if ranks == [0] and any(RANK0_ONLY.search(_function(f)) for f in path)]
        if rank0:
            odd, level = [0], "medium"
            named = next(_function(f) for f in reversed(rank0[0]) if RANK0_ONLY.search(_function(f)))
            why = f"rank 0 alone reaches {op} from a path only rank 0 usually takes ({named})"
            why_zh = f"只有 Rank 0 从通常只有 rank 0 会走的路径到达 {op}（{named}）"
        else:
            odd, level = sorted(r for _, ranks in ordered for r in ranks), "low"
            why = f"the ranks reach {op} from code paths of equal weight: which side is odd is not told"
            why_zh = f"各 Rank 从同样多的代码路径到达 {op}：无法判断哪一方异常"
    if unknown_group:
        why += "; the group of the call is not known (its members may differ)"
        why_zh += "；该调用所在的通信组未知（成员可能不同）"
    paths = "; ".join(f"rank {compact(ranks)}: {' → '.join(_function(f) for f in _apart(path, ordered)[-3:])}"
                      for path, ranks in ordered[:4])
    where = "an unknown group" if unknown_group else f"group {group}"
    evidence = tuple(incident.ranks[r].evidence for r in odd[:8] if incident.ranks[r].evidence)
    evidence += tuple(incident.ranks[r].evidence for _, ranks in ordered[:1] for r in ranks[:2]
                      if incident.ranks[r].evidence and r not in odd)
    return Finding(
        ID, KIND, "error", tuple(odd),
        f"Rank {compact(odd)} wait in {op} on {where} reached from other code than the rest ({paths}): "
        "the calls being paired are not the same call.",
        evidence, HINT,
        f"Rank {compact(odd)} 在{'未知通信组' if unknown_group else f'通信组 {group}'}的 {op} 中等待，但到达它的代码路径与其余 "
        f"Rank 不同（{paths}）：被配对的并不是同一次调用。", HINT_ZH,
        confidence=level, confidence_reason=why, confidence_reason_zh=why_zh)


def _apart(path: tuple[str, ...], ordered) -> tuple[str, ...]:
    """`path` up to where it parts from the other classes' paths (three steps past the common start)."""
    common = 0
    for steps in zip(*(p for p, _ in ordered)):
        if len(set(steps)) > 1:
            break
        common += 1
    return path[:common + 3]


RULES = (RuleDoc(
    ID, "Same collective, different code paths", "同一集合通信，不同代码路径", "error",
    "In a job judged stuck, the members of a group wait in the same collective (stack dumps, no sequence "
    "numbers), but some reached it from other functions of the job's own code than the rest: a collective "
    "pairs each member's n-th call, so calls from different places are pairing calls that were never meant "
    "to meet. The ranks outside the largest class of code paths are named; two classes of equal size name "
    "both, unless one is rank 0 alone on a path only rank 0 usually takes (evaluation, saving, logging). "
    "A path is the functions of the job's and its frameworks' frames (Trainer, DeepSpeed, PEFT, ...), "
    "without torch's own machinery and mere wrappers; other lines of the same functions are the same path.",
    "在被判定为卡住的作业中，同一通信组的成员在同一个集合通信中等待（栈 dump，没有序号），但其中一些从作业自身代码的"
    "其他函数到达：集合通信按各成员的第 n 次调用配对，来自不同位置的调用是在配对本不该相遇的调用。点名不在最大代码路径类中的 "
    "Rank；两类大小相同时两边都点名，除非其中一类是单独走在通常只有 rank 0 才走的路径（评估、保存、日志）上的 rank 0。"
    "路径由作业及其框架（Trainer、DeepSpeed、PEFT 等）栈帧的函数组成，不含 torch 自身的机制和单纯的包装函数；"
    "同一函数的不同行属于同一路径。",
    HINT, HINT_ZH, kinds=(KIND,), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
