"""collective-mismatch: members of one group at the same position (seq) call
different collectives, or the same one with different sizes or dtypes. No
amount of waiting completes such a call: it needs no evidence of a hang."""

from __future__ import annotations

from collections import Counter, defaultdict

from ..hookspecs import hookimpl
from ..ruledocs import RuleDoc
from ..model import UNIDENTIFIED_GROUP, Finding, group_id
from ..ranges import compact as _ranks

ID = "collective-mismatch"
KIND = "collective_mismatch"
HINT = ("Make every rank of the group issue the same collectives in the same order: look for "
        "rank-dependent branches (`if rank == 0: all_reduce(...)`), uneven data shards that end one "
        "rank's loop early, or tensors built with rank-dependent shapes or dtypes.")
HINT_ZH = ("让同一通信组的所有 Rank 以相同顺序调用相同的集合通信：检查依赖 rank 的分支（如 `if rank == 0: "
           "all_reduce(...)`）、导致某个 Rank 提前退出循环的数据分片不均，以及形状或 dtype 依赖 rank 的张量。")


@hookimpl
def forensics_findings(incident):
    """Every position where a group's members disagree, not only the first:
    the calls ranks are in now, and the recent calls logs and Flight
    Recorder show. A disagreement in calls that all completed is a warning
    (it did not hang, but it is a bug); otherwise an error."""
    positions = defaultdict(dict)  # (group, seq) → {rank: CommOp}
    unnumbered = defaultdict(dict)
    # Dead ranks count too: a rank that died in (or because of) a mismatched
    # collective is evidence of the mismatch, as with DETAIL mode's error.
    for rank, state in incident.ranks.items():
        for op in state.history:
            if op.is_collective and op.seq is not None:
                positions[(group_id(op.group), op.seq)][rank] = op
        op = state.current_op
        if op is None or not op.is_collective:
            continue
        if op.seq is None:
            unnumbered[group_id(op.group)][rank] = op
        else:
            positions[(group_id(op.group), op.seq)][rank] = op
    # Stack dumps give the call but not its sequence number. When every member
    # of a group is blocked in one of its collectives, they are at the same
    # position: none of them can have passed a collective the others are in.
    for group, ops in unnumbered.items():
        if group.startswith(UNIDENTIFIED_GROUP):
            continue
        if set(ops) >= set(incident.members(group)) and (group, "?") not in positions:
            positions[(group, "?")] = ops
    findings = []
    for (group, seq), ops in sorted(positions.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        if len(ops) < 2:
            continue
        for field, key in (("op", lambda op: op.op), ("dtype", lambda op: op.dtype),
                           ("sizes", lambda op: op.sizes)):
            if len({key(op) for op in ops.values() if key(op)}) > 1:
                findings.append(_finding(group, seq, ops, field, key))
                break
    return findings


def _finding(group, seq, ops, field, key):
    votes = Counter(key(op) for op in ops.values() if key(op))
    (top, top_count), *rest = votes.most_common()
    # The plurality is "the majority"; a tie means nobody can be singled out.
    majority = top if not rest or top_count > rest[0][1] else None
    if majority is None:
        culprits = sorted(ops)
    else:
        culprits = sorted(r for r, op in ops.items() if key(op) != majority)
    by_value = {}
    for rank in sorted(ops):
        by_value.setdefault(key(ops[rank]), []).append(rank)
    parts = [f"{'rank' if len(r) == 1 else 'ranks'} {_ranks(r)} {'calls' if len(r) == 1 else 'call'} "
             f"{_show(v, field)}" for v, r in by_value.items()]
    parts_zh = [f"Rank {_ranks(r)} 调用 {_show(v, field)}" for v, r in by_value.items()]
    evidence = tuple(ops[r[0]].evidence for r in by_value.values() if ops[r[0]].evidence)
    done = all(op.state == "completed" for op in ops.values())
    what = {"op": "different collectives", "dtype": "different dtypes", "sizes": "different sizes"}[field]
    what_zh = {"op": "不同的集合通信算子", "dtype": "不同的 dtype", "sizes": "不同的张量大小"}[field]
    where = f"position {seq}" if seq != "?" else "the position every member is blocked in"
    where_zh = f"第 {seq} 次集合通信" if seq != "?" else "所有成员当前阻塞的位置"
    outcome = ("they completed anyway, but the results are wrong" if done
               else "so none of them can complete")
    outcome_zh = "虽然已完成，但结果是错误的" if done else "任何一方都无法完成（集合通信失配）"
    message = f"Group {group}, {where}: {'; '.join(parts)} — {what} at the same position, {outcome}."
    message_zh = f"通信组 {group}，{where_zh}：{'；'.join(parts_zh)}——同一位置{what_zh}，{outcome_zh}。"
    return Finding(ID, KIND, "warning" if done else "error", tuple(culprits), message, evidence, HINT,
                   message_zh, HINT_ZH)


def _show(value, field):
    if field == "sizes":
        return "sizes " + str([list(x) for x in value])
    return str(value)

RULES = (RuleDoc(
    ID, "Collective mismatch", "集合通信失配", "error",
    "Members of one process group at the same position (sequence number) call different collectives, "
    "or the same collective with different sizes or dtypes: one rank calls a collective the others "
    "skip (`if rank == 0: all_reduce()`), or uneven shards end one rank's loop early. Every position "
    "is compared, not only the first; a disagreement in calls that all completed is a warning.",
    "同一进程组的成员在相同位置（序号）调用了不同的集合通信，或同一集合通信的大小、dtype 不同："
    "某个 Rank 调用了其他 Rank 跳过的集合通信（`if rank == 0: all_reduce()`），或数据分片不均使某个 Rank "
    "提前结束循环。比较所有位置而不仅是第一个；已全部完成的调用之间的不一致记为警告。",
    HINT, HINT_ZH, kinds=(KIND,), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
