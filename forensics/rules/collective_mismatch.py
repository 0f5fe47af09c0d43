"""collective-mismatch: members of one group at the same position (seq) call
different collectives, or the same one with different sizes or dtypes, or a
call whose own buffers cannot work (an all_gather whose output is not input
x group size), or, where a record states only element counts (a watchdog
line's NumelIn/NumelOut), different counts. No amount of waiting completes such a call: it needs no
evidence of a hang. Which buffers members must pass alike depends on the
collective: a gather's outputs exist only on its root, a scatter's inputs
only on its root, an all_to_all's split is each rank's own (only the group's
totals must agree). docs/flight-recorder.md has the table, and how this
agrees with PyTorch's own analyzer.

Two more of the classes PyTorch's Flight Recorder analyzer reports, each its
own rule, every position of every group (the analyzer stops at a group's
first):

- collective-state-mismatch: at one position some members completed the
  call while others are still in it (scheduled or started), or, with CUDA
  events, some started it while others have not (their stream is busy with
  something before it); coalesced groups of different lengths. The members
  behind are named.
- collective-missing-ranks: members with no entry at a position others
  reached: their last call on the group came before it (or, for a group
  whose members are known, they never called on it at all).

Neither bears a verdict: the rank everyone waits for is the wait-for graph's
to find (comm-waits already draws those waits: a member that has not
arrived at a position is waited on). They say, position by position, what
the dumps disagree about."""

from __future__ import annotations

from collections import Counter, defaultdict

from ..hookspecs import hookimpl
from ..ruledocs import RuleDoc
from ..model import UNIDENTIFIED_GROUP, Finding, group_id
from ..ranges import compact as _ranks
from ._semantics import odd_side_of_two, on_rank0_only_path

ID = "collective-mismatch"
KIND = "collective_mismatch"
STATE_ID, STATE_KIND = "collective-state-mismatch", "collective_state_mismatch"
MISSING_ID, MISSING_KIND = "collective-missing-ranks", "collective_missing_ranks"
SHOWN = 8  # positions spelled out in a message; evidence per finding is 2 × SHOWN at most
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
        if _differs(ops, _OP):
            findings.append(_finding(group, seq, ops, "op", _OP, incident))
            continue  # sizes and dtypes of different collectives say nothing more
        shapes_differ = False
        for field, key in _compared(next(iter(ops.values())).op):
            if _differs(ops, key):
                findings.append(_finding(group, seq, ops, field, key, incident))
                shapes_differ = shapes_differ or field != "dtype"
        if not shapes_differ:  # counts say more only where shapes did not already differ
            for field, key in _counted(next(iter(ops.values())).op):
                if _differs(ops, key):
                    findings.append(_finding(group, seq, ops, field, key, incident))
    numbered = defaultdict(dict)  # group → {seq: {rank: CommOp}}
    for (group, seq), ops in positions.items():
        if seq != "?" and not group.startswith(UNIDENTIFIED_GROUP):
            numbered[group][seq] = ops
    findings += _syntax_mismatches(incident, positions)
    findings += _exchange_mismatches(incident, positions)
    for group in sorted(numbered, key=str):
        findings += _state_mismatches(group, numbered[group])
        findings += _missing_ranks(incident, group, numbered[group], set(numbered))
    return findings


def _OP(op):
    return op.op


def _DTYPE(op):
    """A call's dtypes as compared and shown: `Float`, or `Float→Half`
    when its output dtypes differ from its input's (`Float→` when it
    lists none)."""
    source, target = _dtypes(op)
    return source if source == target else f"{source}→{target}"


def _IN_DTYPE(op):
    return _dtypes(op)[0]


def _OUT_DTYPE(op):
    return _dtypes(op)[1]


def _SIZES(op):
    return op.sizes


def _OUT_SIZES(op):
    return op.out_sizes


# ---------------------------------------------------------------- what each collective's members share

# Which buffers every member of a collective passes alike, so are compared
# across ranks (PyTorch's analyzer compares the same ones: types.py
# `Op.match`, `Op.dtype_mismatch`):
_ROOT_RECEIVES = frozenset({"gather"})    # only the root has outputs (the others list none)
_ROOT_SENDS = frozenset({"scatter"})      # only the root has inputs
_ROOT_BUFFER = frozenset({"broadcast"})   # the root's tensor lands in every output: outputs tell
# Each rank brings its own split of the exchange: per-rank counts may differ,
# the group's totals may not (see `_exchange_mismatches`).
_EXCHANGES = frozenset({"all_to_all", "all_to_all_single"})
# Calls whose own input and output must hold one dtype (in-place, or the same
# data moved): all but the rooted ones, and a coalesced group, whose members
# may be different collectives.
_MIXED_DTYPES_OK = _ROOT_RECEIVES | _ROOT_SENDS | _ROOT_BUFFER | {"coalesced"}
def _dtypes(op) -> tuple[str, str]:
    """(input dtypes, output dtypes) of a call; the inputs' where the
    artifact records no output dtypes."""
    return op.dtype, op.dtype if op.out_dtype is None else op.out_dtype


def _compared(kind: str) -> tuple:
    """(field, key) of what the members of a `kind` call must agree on."""
    if kind in _ROOT_RECEIVES:
        return ("dtype", _IN_DTYPE), ("sizes", _SIZES)
    if kind in _ROOT_SENDS:
        return ("dtype", _OUT_DTYPE), ("out_sizes", _OUT_SIZES)
    if kind in _ROOT_BUFFER:
        return ("dtype", _OUT_DTYPE), ("sizes", _SIZES), ("out_sizes", _OUT_SIZES)
    if kind in _EXCHANGES:
        return (("dtype", _DTYPE),)
    return ("dtype", _DTYPE), ("sizes", _SIZES), ("out_sizes", _OUT_SIZES)


def _NUMEL_IN(op):
    """Elements the call reads: a watchdog line's NumelIn, else the total of
    a record that lists every input and output tensor (Flight Recorder);
    None from one shape alone (an old WorkNCCL's or a fingerprint's
    TensorShape need not be the only tensor)."""
    if op.numel_in is not None:
        return op.numel_in
    return _total(op.sizes) or None if op.sizes and op.out_sizes else None


def _NUMEL_OUT(op):
    if op.numel_out is not None:
        return op.numel_out
    return _total(op.out_sizes) or None if op.sizes and op.out_sizes else None


def _counted(kind: str) -> tuple:
    """(field, key) of the element counts the members of a `kind` call must
    agree on, compared where the shapes are not known on every side: a
    rank's watchdog line states only NumelIn/NumelOut. Never for an
    exchange (each rank's own split) or a coalesced group (its closing
    work's count is the members', by version, or none)."""
    if kind in _EXCHANGES or kind == "coalesced":
        return ()
    if kind in _ROOT_RECEIVES:
        return (("numel_in", _NUMEL_IN),)
    if kind in _ROOT_SENDS:
        return (("numel_out", _NUMEL_OUT),)
    if kind in _ROOT_BUFFER:
        return (("numel_in", _NUMEL_IN),)
    return ("numel_in", _NUMEL_IN), ("numel_out", _NUMEL_OUT)


def _differs(ops, key) -> bool:
    return len({key(op) for op in ops.values() if key(op)}) > 1


def _finding(group, seq, ops, field, key, incident=None):
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
    parts_zh = [f"Rank {_ranks(r)} 调用 {_show(v, field, zh=True)}" for v, r in by_value.items()]
    evidence = tuple(ops[r[0]].evidence for r in by_value.values() if ops[r[0]].evidence)
    done = all(op.state == "completed" for op in ops.values())
    what = {"op": "different collectives", "dtype": "different dtypes", "sizes": "different sizes",
            "out_sizes": "different output sizes", "numel_in": "different input element counts",
            "numel_out": "different output element counts"}[field]
    what_zh = {"op": "不同的集合通信算子", "dtype": "不同的 dtype", "sizes": "不同的张量大小",
               "out_sizes": "不同的输出张量大小", "numel_in": "不同的输入元素个数",
               "numel_out": "不同的输出元素个数"}[field]
    where = f"position {seq}" if seq != "?" else "the position every member is blocked in"
    where_zh = f"第 {seq} 次集合通信" if seq != "?" else "所有成员当前阻塞的位置"
    outcome = ("they completed anyway, but the results are wrong" if done
               else "so none of them can complete")
    outcome_zh = "虽然已完成，但结果是错误的" if done else "任何一方都无法完成（集合通信失配）"
    message = f"Group {group}, {where}: {'; '.join(parts)} — {what} at the same position, {outcome}."
    message_zh = f"通信组 {group}，{where_zh}：{'；'.join(parts_zh)}——同一位置{what_zh}，{outcome_zh}。"
    level = reason = reason_zh = ""
    odd = odd_side_of_two(incident, sorted(ops)) if majority is None and incident is not None else None
    if odd is not None:  # one against one, and rank 0 alone is on a path only rank 0 usually takes
        culprits = [odd]
        path = on_rank0_only_path(incident.ranks.get(odd))
        level = "medium"
        reason = (f"one rank on each side; rank {odd} alone is in {path}, a path only rank 0 usually takes (a save, "
                  f"an evaluation, logging), so its call is taken for the odd one")
        reason_zh = f"双方各一个 Rank；只有 Rank {odd} 处在 {path} 中（通常只有 rank 0 执行的路径：保存、评估、日志），因此认为它的调用是异常的一方"
    elif majority is None:  # as many ranks on each side: the calls disagree, which side is odd they do not say
        sides = " against ".join(_ranks(r) for r in by_value.values())
        level = "medium"
        reason = f"as many ranks on each side ({sides}): which call is the odd one needs the other members' calls " \
                 f"at this position"
        reason_zh = f"双方 Rank 数相同（{sides}）：要判断哪一方异常，需要该位置上其他成员的调用"
    return Finding(ID, KIND, "warning" if done else "error", tuple(culprits), message, evidence, HINT,
                   message_zh, HINT_ZH, confidence=level, confidence_reason=reason, confidence_reason_zh=reason_zh)


def _show(value, field, zh=False):
    if field == "sizes":
        return "sizes " + str([list(x) for x in value])
    if field == "out_sizes":
        return "output sizes " + str([list(x) for x in value])
    if field == "numel_in":
        return f"{value:,} 个输入元素" if zh else f"{value:,} input elements"
    if field == "numel_out":
        return f"{value:,} 个输出元素" if zh else f"{value:,} output elements"
    return str(value)


# ---------------------------------------------------------------- size/syntax (one rank's own call)

_SAME_SHAPE = frozenset({"all_reduce"})                                   # writes what it reads
_GATHERS = frozenset({"all_gather", "all_gather_into_tensor"})            # out = in x group size
_SCATTERS = frozenset({"reduce_scatter", "reduce_scatter_tensor"})        # in = out x group size


def _numel(shape) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def _total(shapes) -> int:
    """Elements in all of a call's tensors: a flattened all_gather output
    ([[2048]]) and the list form, one tensor per rank ([[1024], [1024]]),
    hold the same."""
    return sum(map(_numel, shapes))


def _syntax(op, size: int) -> list[tuple[str, str]]:
    """What is wrong with one call's own buffers, as PyTorch's analyzer
    checks them (SIZE_OR_SYNTAX_MISMATCH, and COLLECTIVE_DTYPE_MISMATCH for
    a call whose input and output dtypes differ): (text, text_zh) each."""
    wrong = []
    source, target = _dtypes(op)
    if op.op not in _MIXED_DTYPES_OK and source and target and source != target:
        wrong.append((f"its input is {source} but its output {target} ({op.op} moves data of one dtype)",
                      f"输入为 {source} 而输出为 {target}（{op.op} 的输入与输出 dtype 相同）"))
    if not op.sizes or not op.out_sizes:
        return wrong
    read, written = _total(op.sizes), _total(op.out_sizes)
    if op.op in _SAME_SHAPE and op.sizes != op.out_sizes:
        wrong.append((f"its input {[list(s) for s in op.sizes]} and output {[list(s) for s in op.out_sizes]} "
                       "differ (an all_reduce writes what it reads)",
                       f"输入 {[list(s) for s in op.sizes]} 与输出 {[list(s) for s in op.out_sizes]} 不同"
                       "（all_reduce 的输出与输入同形）"))
    elif op.op in _GATHERS and written != read * size:
        wrong.append((f"its output holds {written:,} elements, not input {read:,} × group size {size}",
                      f"输出 {written:,} 个元素，不等于输入 {read:,} × 组大小 {size}"))
    elif op.op in _SCATTERS and read != written * size:
        wrong.append((f"its input holds {read:,} elements, not output {written:,} × group size {size}",
                      f"输入 {read:,} 个元素，不等于输出 {written:,} × 组大小 {size}"))
    return wrong


def _syntax_mismatches(incident, positions) -> list[Finding]:
    """Calls whose own shapes cannot work with the group's size: every one,
    one finding per group."""
    by_group = defaultdict(list)  # group → [(seq, rank, op, text, text_zh)]
    for (group, seq), ops in positions.items():
        if group.startswith(UNIDENTIFIED_GROUP):
            continue
        size = len(incident.members(group))
        for rank, op in ops.items():
            for wrong in _syntax(op, size):
                by_group[group].append((seq, rank, op, *wrong))
    findings = []
    for group in sorted(by_group, key=str):
        items = sorted(by_group[group], key=lambda item: (str(item[0]), item[1]))
        parts = [f"rank {rank} {op.op} at position {seq}: {text}" for seq, rank, op, text, _ in items[:8]]
        parts_zh = [f"Rank {rank} 在第 {seq} 次的 {op.op}：{text_zh}" for seq, rank, op, _, text_zh in items[:8]]
        more = f"; … {len(items) - 8} more" if len(items) > 8 else ""
        done = all(op.state == "completed" for _, _, op, _, _ in items)
        findings.append(Finding(
            ID, KIND, "warning" if done else "error", tuple(sorted({rank for _, rank, *_ in items})),
            f"Group {group} ({len(incident.members(group))} ranks): calls whose own input and output cannot "
            f"work: " + "; ".join(parts) + more + ".",
            tuple(dict.fromkeys(op.evidence for _, _, op, _, _ in items[:8] if op.evidence)), HINT,
            f"通信组 {group}（{len(incident.members(group))} 个 Rank）：自身输入与输出无法成立的调用："
            + "；".join(parts_zh) + ("……" if more else "") + "。", HINT_ZH))
    return findings


def _exchange_mismatches(incident, positions) -> list[Finding]:
    """An all_to_all whose members' splits do not add up: what the group
    sends in total is not what it receives. Each rank's counts may differ,
    so only the totals tell, and only when every member's call is known
    (PyTorch's analyzer: "Input/output mismatch"); nobody can be singled
    out, so every member is named."""
    findings = []
    for (group, seq), ops in sorted(positions.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        if group.startswith(UNIDENTIFIED_GROUP) or seq == "?":
            continue
        kinds = {op.op for op in ops.values()}
        if len(kinds) != 1 or not kinds <= _EXCHANGES or set(ops) < set(incident.members(group)):
            continue
        if not all(op.sizes and op.out_sizes for op in ops.values()):
            continue
        sent = sum(_total(op.sizes) for op in ops.values())
        received = sum(_total(op.out_sizes) for op in ops.values())
        if sent == received:
            continue
        kind = kinds.pop()
        done = all(op.state == "completed" for op in ops.values())
        first = ops[min(ops)]
        findings.append(Finding(
            ID, KIND, "warning" if done else "error", tuple(sorted(ops)),
            f"Group {group}, position {seq}: the members' {kind} calls send {sent:,} elements in total but "
            f"receive {received:,}: some rank's split sizes do not match what its peers expect from it.",
            (first.evidence,) if first.evidence else (), HINT,
            f"通信组 {group}，第 {seq} 次：各成员的 {kind} 共发送 {sent:,} 个元素，却共接收 {received:,} 个："
            f"某个 Rank 的切分大小与其对端的预期不符。", HINT_ZH))
    return findings


# ---------------------------------------------------------------- collective-state-mismatch

HINT_STATE = ("Look at the members behind: their stack (or Flight Recorder frames) shows what holds them "
              "before the call completes — a hung kernel or host sync earlier on their stream, a slow or "
              "dead peer of theirs, or a dump taken before they got there.")
HINT_STATE_ZH = ("查看落后的成员：它们的调用栈（或 Flight Recorder 帧）会显示在该调用完成之前是什么拖住了它们——"
                 "同一 Stream 上更早的卡住的 kernel 或主机同步、它们自己的慢或已退出的对端，或是 dump 时尚未到达。")


def _state_mismatches(group: str, seqs: dict) -> list[Finding]:
    """One finding for the group: every position where members' states
    differ, and coalesced groups of different lengths."""
    found = []  # (seq, behind ranks, text, text_zh, evidence)
    for seq in sorted(seqs):
        ops = seqs[seq]
        if len(ops) < 2:
            continue
        done = sorted(r for r, op in ops.items() if op.state == "completed")
        started = sorted(r for r, op in ops.items() if op.state == "started")
        scheduled = sorted(r for r, op in ops.items() if op.state not in ("completed", "started"))
        if done and (started or scheduled):
            behind = sorted(started + scheduled)
            ahead, what = done, "completed"
        elif started and scheduled:
            behind, ahead, what = scheduled, started, "started"
        else:
            behind = []
        if behind:
            states = ", ".join(f"{_who(rs)} {state}" for state, rs in (("scheduled", scheduled),
                                                                      ("started", started)) if rs)
            found.append((seq, behind, f"#{seq}: {_who(ahead)} {what}, {states}",
                          f"第 {seq} 次：Rank {_ranks(ahead)} {_STATE_ZH[what]}，"
                          + "，".join(f"Rank {_ranks(rs)} {_STATE_ZH[state]}"
                                      for state, rs in (("scheduled", scheduled), ("started", started)) if rs),
                          _two(ops, ahead[0], behind[0])))
        lengths = {r: len(op.sizes) for r, op in ops.items() if op.op == "coalesced" and op.sizes}
        if len(ops) == len(lengths) and len(set(lengths.values())) > 1:
            votes = Counter(lengths.values()).most_common()
            common = votes[0][0] if votes[0][1] > votes[1][1] else None
            odd = sorted(r for r, n in lengths.items() if n != common)
            by_length = {}
            for rank in sorted(lengths):
                by_length.setdefault(lengths[rank], []).append(rank)
            spelled = ", ".join(f"{_who(rs)} {n} tensors" for n, rs in sorted(by_length.items()))
            spelled_zh = "，".join(f"Rank {_ranks(rs)} {n} 个张量" for n, rs in sorted(by_length.items()))
            first = next(r for r in sorted(lengths) if r not in odd) if common is not None else odd[0]
            found.append((seq, odd, f"#{seq}: coalesced groups of different lengths ({spelled})",
                          f"第 {seq} 次：合并（coalesced）调用的长度不同（{spelled_zh}）", _two(ops, first, odd[-1])))
    if not found:
        return []
    named = sorted({r for _, rs, _, _, _ in found for r in rs})
    shown, shown_zh = [t for _, _, t, _, _ in found[:SHOWN]], [t for _, _, _, t, _ in found[:SHOWN]]
    if len(found) > SHOWN:  # the rest by position only: every one is named
        rest = _positions_text(tuple(seq for seq, _, _, _, _ in found[SHOWN:]))
        shown.append(f"also at {rest}")
        shown_zh.append(f"另见{_positions_text(tuple(seq for seq, _, _, _, _ in found[SHOWN:]), zh=True)}")
    evidence = tuple(dict.fromkeys(e for _, _, _, _, pair in found[:SHOWN] for e in pair))
    return [Finding(
        STATE_ID, STATE_KIND, "warning", tuple(named),
        f"Group {group}: members' calls at the same position disagree in state, at {len(found)} position(s) — "
        f"{'; '.join(shown)}. Named: {_who(named)} (behind the others, or holding a different coalesced group).",
        evidence, HINT_STATE,
        f"通信组 {group}：同一位置上成员调用的状态不一致，共 {len(found)} 个位置——{'；'.join(shown_zh)}。"
        f"涉及 Rank {_ranks(named)}（落后于其他成员，或合并调用与其他成员不同）。", HINT_STATE_ZH)]


_STATE_ZH = {"completed": "已完成", "started": "已开始", "scheduled": "仅已调度"}


def _who(ranks) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {_ranks(ranks)}"


def _two(ops, first, second) -> tuple:
    return tuple(ops[r].evidence for r in (first, second) if ops[r].evidence)


# ---------------------------------------------------------------- collective-missing-ranks

HINT_MISSING = ("The members without an entry never made the call: see where they are instead (their stack "
                "or their stuck Flight Recorder entry) — an early exit, a rank-dependent branch, data "
                "loading or I/O, or a dump taken before they got there.")
HINT_MISSING_ZH = ("没有该条目的成员从未发起这次调用：查看它们实际在哪里（调用栈或卡住的 Flight Recorder 条目）——"
                   "提前退出、依赖 rank 的分支、数据加载或 I/O，或是 dump 时它们尚未到达。")


def _missing_ranks(incident, group: str, seqs: dict, groups: set) -> list[Finding]:
    """One finding for the group: for each member that stopped short, the
    positions others reached and it has no entry at."""
    pg = incident.groups.get(group)
    known = pg is not None and bool(pg.ranks)
    absent: dict[tuple, list[int]] = {}  # (its last call, the positions it misses) → ranks
    for rank in incident.members(group):
        last = _last_call(incident.ranks.get(rank), group, groups, known)
        if last is None:
            continue
        missed = tuple(seq for seq in sorted(seqs) if seq > last and rank not in seqs[seq])
        if missed:
            absent.setdefault((last, missed), []).append(rank)
    if not absent:
        return []
    parts, parts_zh, evidence, pending = [], [], [], False
    for (last, missed), ranks in sorted(absent.items(), key=lambda kv: (kv[0][1], kv[1])):
        reached = sorted({r for seq in missed for r in seqs[seq]})
        where = _positions_text(missed)
        since = f"its last call there is #{last}" if last else "it never called on this group"
        if len(ranks) > 1:
            since = f"their last call there is #{last}" if last else "they never called on this group"
        since_zh = f"其在该组的最后一次调用是第 {last} 次" if last else "从未在该组发起调用"
        parts.append(f"{_who(ranks)} {'has' if len(ranks) == 1 else 'have'} no entry at {where}, which "
                     f"{_who(reached)} reached ({since})")
        parts_zh.append(f"Rank {_ranks(ranks)} 在{_positions_text(missed, zh=True)}没有条目，而 Rank {_ranks(reached)} "
                        f"已到达（{since_zh}）")
        for seq in missed[:SHOWN]:
            op = seqs[seq][min(seqs[seq])]
            pending = pending or any(o.state != "completed" for o in seqs[seq].values())
            if op.evidence and op.evidence not in evidence:
                evidence.append(op.evidence)
        for rank in ranks[:SHOWN]:
            mark = _last_evidence(incident.ranks[rank], group)
            if mark is not None and mark not in evidence:
                evidence.append(mark)
    missing = sorted(r for ranks in absent.values() for r in ranks)
    return [Finding(
        MISSING_ID, MISSING_KIND, "warning" if pending else "info", tuple(missing),
        f"Group {group}: not every member joined — {'; '.join(parts)}.",
        tuple(evidence[:2 * SHOWN]), HINT_MISSING,
        f"通信组 {group}：并非所有成员都加入了调用——{'；'.join(parts_zh)}。", HINT_MISSING_ZH)]


def _last_call(state, group: str, groups: set, known: bool) -> int | None:
    """The last seq the rank issued on `group`; 0 when its artifacts count
    calls per group (Flight Recorder's pg_status, c10d's counters) for
    groups compared here but not this one and the group's members are known
    (so it is a member that never called); None when nothing tells."""
    if state is None:
        return None
    seqs = [op.seq for op in state.history if op.is_collective and op.seq is not None
            and group_id(op.group) == group]
    op = state.current_op
    if op is not None and op.is_collective and op.seq is not None and group_id(op.group) == group:
        seqs.append(op.seq)
    progress = state.progress.get(group)
    if progress is not None and progress.enqueued is not None:
        seqs.append(progress.enqueued)
    if seqs:
        return max(seqs)
    if known and any(other in groups for other in state.progress):
        return 0
    return None


def _last_evidence(state, group: str):
    ops = [op for op in state.history if group_id(op.group) == group and op.evidence]
    if ops:
        return max(ops, key=lambda op: op.seq if op.seq is not None else -1).evidence
    progress = state.progress.get(group)
    if progress is not None and progress.evidence is not None:
        return progress.evidence
    return next((p.evidence for p in state.progress.values() if p.evidence is not None), None)


def _positions_text(seqs: tuple, zh: bool = False) -> str:
    """Every position, runs joined: `#4`, `#5-#9, #12`."""
    runs, start = [], seqs[0]
    for before, after in zip(seqs, seqs[1:] + (None,)):
        if after is None or after != before + 1:
            runs.append(f"#{start}" if start == before else f"#{start}-#{before}")
            start = after
    text = ", ".join(runs)
    return f" {text} " if zh else text

RULES = (RuleDoc(
    ID, "Collective mismatch", "集合通信失配", "error",
    "Members of one process group at the same position (sequence number) call different collectives, "
    "or the same collective with different sizes or dtypes: one rank calls a collective the others "
    "skip (`if rank == 0: all_reduce()`), or uneven shards end one rank's loop early. Only the buffers "
    "every member passes alike are compared (a gather's outputs exist only on its root; an all_to_all "
    "must only add up over the group); a call whose own input and output cannot work is reported too. "
    "Where a rank's record gives only element counts (the NumelIn/NumelOut of a watchdog or error line "
    "of torch 2.1 and later), the counts are compared instead; a count the work never recorded (0, or "
    "a size_t of -1) is not compared. The odd ones out are the ranks against the majority; with as many "
    "ranks on each side, all are named at medium confidence. "
    "Every position is compared, not only the first; a disagreement in calls that all completed is a "
    "warning.",
    "同一进程组的成员在相同位置（序号）调用了不同的集合通信，或同一集合通信的大小、dtype 不同："
    "某个 Rank 调用了其他 Rank 跳过的集合通信（`if rank == 0: all_reduce()`），或数据分片不均使某个 Rank "
    "提前结束循环。只比较所有成员都同样传入的缓冲区（gather 的输出只在 root 上存在；all_to_all 只需全组总量相符）；"
    "自身输入与输出无法成立的调用也会报告。某个 Rank 的记录只给出元素个数时（torch 2.1 及以后版本 watchdog "
    "或错误行中的 NumelIn/NumelOut），改为比较元素个数；work 未记录的个数（0，或 size_t 的 -1）不参与比较。"
    "与多数不同的 Rank 即为异常方；双方 Rank 数相同时全部列出，置信度为中。"
    "比较所有位置而不仅是第一个；已全部完成的调用之间的不一致记为警告。",
    HINT, HINT_ZH, kinds=(KIND,), source=__name__),
    RuleDoc(
        STATE_ID, "Members disagree on a call's state", "成员对调用状态不一致", "warning",
        "At one position of a group, some members completed the call while others are still in it "
        "(scheduled or started), or some started it while others have not; or coalesced groups at one "
        "position hold different numbers of tensors. The members behind are named, every position "
        "listed (Flight Recorder's COLLECTIVE_STATE_MISMATCH, not only the first per group).",
        "在通信组的同一位置，部分成员已完成调用而其他成员仍在其中（已调度或已开始），或部分成员已开始而其他成员"
        "尚未开始；或同一位置的合并（coalesced）调用包含的张量个数不同。列出落后的成员和每一个位置"
        "（即 Flight Recorder 的 COLLECTIVE_STATE_MISMATCH，而不只是每组第一个）。",
        HINT_STATE, HINT_STATE_ZH, kinds=(STATE_KIND,), source=__name__),
    RuleDoc(
        MISSING_ID, "Members missing from a call others reached", "有成员未加入其他成员已到达的调用", "warning",
        "Members of a group have no entry at positions other members reached: their last call on the "
        "group came before (or, when the group's members are known, they never called on it). Every "
        "position is named (Flight Recorder's \"Not all ranks joining collective\"). A warning while "
        "the call is pending, information when it completed (the dumps were taken at different times).",
        "通信组的部分成员在其他成员已到达的位置上没有条目：它们在该组的最后一次调用更早（或在成员已知时，"
        "从未在该组调用）。列出每一个位置（即 Flight Recorder 的 \"Not all ranks joining collective\"）。"
        "调用未完成时记为警告，已完成时记为提示（各 dump 的时间不同）。",
        HINT_MISSING, HINT_MISSING_ZH, kinds=(MISSING_KIND,), source=__name__),
)


@hookimpl
def forensics_rules():
    return RULES
