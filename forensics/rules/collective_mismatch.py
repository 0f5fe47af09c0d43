"""collective-mismatch: members of one group at the same position (seq) call
different collectives, or the same one with different sizes or dtypes. No
amount of waiting completes such a call: it needs no evidence of a hang."""

from __future__ import annotations

from collections import Counter, defaultdict

from ..hookspecs import hookimpl
from ..model import UNIDENTIFIED_GROUP, Finding, group_id
from ..ranges import compact as _ranks

ID = "collective-mismatch"
KIND = "collective_mismatch"
HINT = ("Make every rank of the group issue the same collectives in the same order: look for "
        "rank-dependent branches (`if rank == 0: all_reduce(...)`), uneven data shards that end one "
        "rank's loop early, or tensors built with rank-dependent shapes or dtypes.")
HINT_ZH = ("让同一通信组的所有 Rank 以相同顺序调用相同的集合通信：检查依赖 rank 的分支（如 `if rank == 0: "
           "all_reduce(...)`）、导致某个 Rank 提前退出循环的数据分片不均，以及形状或 dtype 依赖 rank 的张量。")


def _signature(op):
    return (op.op, op.dtype or None, op.sizes or None)


@hookimpl
def forensics_findings(incident):
    positions = defaultdict(list)
    unnumbered = defaultdict(list)
    for rank, state in incident.ranks.items():
        op = state.current_op
        if op is None or not op.is_collective or state.is_dead:
            continue
        if op.seq is None:
            unnumbered[group_id(op.group)].append(state)
        else:
            positions[(group_id(op.group), op.seq)].append(state)
    # Stack dumps give the call but not its sequence number. When every member
    # of a group is blocked in one of its collectives, they are at the same
    # position: none of them can have passed a collective the others are in.
    for group, states in unnumbered.items():
        if group.startswith(UNIDENTIFIED_GROUP):
            continue
        members = set(incident.members(group))
        if {s.rank for s in states} >= members and (group, "?") not in positions:
            positions[(group, "?")] = states
    findings = []
    for (group, seq), states in sorted(positions.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        ops = Counter(s.current_op.op for s in states)
        field = "op"
        key = lambda s: s.current_op.op  # noqa: E731
        if len(ops) == 1:
            dtypes = Counter(s.current_op.dtype for s in states if s.current_op.dtype)
            sizes = Counter(s.current_op.sizes for s in states if s.current_op.sizes)
            if len(dtypes) > 1:
                field, key = "dtype", (lambda s: s.current_op.dtype)
            elif len(sizes) > 1:
                field, key = "sizes", (lambda s: s.current_op.sizes)
            else:
                continue
        findings.append(_finding(group, seq, states, field, key))
    return findings


def _finding(group, seq, states, field, key):
    votes = Counter(key(s) for s in states if key(s))
    (top, top_count), *rest = votes.most_common()
    # The plurality is "the majority"; a tie means nobody can be singled out.
    majority = top if not rest or top_count > rest[0][1] else None
    if majority is None:
        culprits = sorted(s.rank for s in states)
    else:
        culprits = sorted(s.rank for s in states if key(s) != majority)
    by_value = {}
    for s in sorted(states, key=lambda s: s.rank):
        by_value.setdefault(key(s), []).append(s.rank)
    parts = [f"{'rank' if len(r) == 1 else 'ranks'} {_ranks(r)} {'calls' if len(r) == 1 else 'call'} "
             f"{_show(v, field)}" for v, r in by_value.items()]
    parts_zh = [f"Rank {_ranks(r)} 调用 {_show(v, field)}" for v, r in by_value.items()]
    evidence = tuple(next(s for s in states if key(s) == v).current_op.evidence
                     for v in by_value if next(s for s in states if key(s) == v).current_op.evidence)
    what = {"op": "different collectives", "dtype": "different dtypes", "sizes": "different sizes"}[field]
    what_zh = {"op": "不同的集合通信算子", "dtype": "不同的 dtype", "sizes": "不同的张量大小"}[field]
    where = f"position {seq}" if seq != "?" else "the position every member is blocked in"
    where_zh = f"第 {seq} 次集合通信" if seq != "?" else "所有成员当前阻塞的位置"
    message = (f"Group {group}, {where}: {'; '.join(parts)} — {what} at the same position, "
               f"so none of them can complete.")
    message_zh = (f"通信组 {group}，{where_zh}：{'；'.join(parts_zh)}——同一位置{what_zh}，"
                  f"任何一方都无法完成（集合通信失配）。")
    return Finding(ID, KIND, "error", tuple(culprits), message, evidence, HINT,
                   message_zh, HINT_ZH)


def _show(value, field):
    if field == "sizes":
        return "sizes " + str([list(x) for x in value])
    return str(value)
