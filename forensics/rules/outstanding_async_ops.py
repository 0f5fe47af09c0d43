"""outstanding-async-ops: isend/irecv posted and never waited on, piling up.

`dist.isend` / `dist.irecv` return a Work that must be waited on; dropped,
nothing ties the buffer's lifetime or the program's order to the transfer.
When the peer never posts the matching call, the entries stay unfinished in
Flight Recorder, one more per step, and on NCCL every later call on the same
stream queues behind them. A batched `batch_isend_irecv` is one coalesced
entry and is not counted.

Only artifacts that record completion count: Flight Recorder marks entries
completed (or retires them), so an unfinished entry there means something.
NCCL's COLL lines say a call was issued, never that it finished, and py-spy
shows one call: neither is evidence of a pile-up. Flight Recorder keeps a
rank's last few entries per group, so the count is a lower bound; the
sequence numbers give the span.
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..model import Finding, group_id
from ..ranges import compact
from ..ruledocs import RuleDoc

ID = "outstanding-async-ops"
KIND = "outstanding_async_ops"
MIN_OUTSTANDING = 4   # a pipeline stage in flight legitimately has one or two per peer
MAX_LISTED = 8
HINT = ("Keep the Work that `dist.isend` / `dist.irecv` return and call `wait()` on each before the buffer "
        "is reused and before the next step (or post matching pairs together with `dist.batch_isend_irecv` "
        "and wait on all of them); check that both sides post the same number of sends and receives per "
        "step.")
HINT_ZH = ("保存 `dist.isend` / `dist.irecv` 返回的 Work，在复用缓冲区之前、进入下一步之前对每个调用 `wait()`"
           "（或用 `dist.batch_isend_irecv` 成对提交后统一 wait）；并检查两端每一步发出的 send 与 recv 数量是否一致。")


def _key(op):
    return group_id(op.group), op.seq, op.op, op.peers


def outstanding(state) -> list:
    """The rank's send/recv calls that an artifact tracking completion shows
    unfinished, oldest first, each once."""
    if not state.history:  # a snapshot or a stack dump: no call history to pile up in
        return []
    tracking = {op.evidence.path for op in state.history
                if op.state == "completed" and op.evidence is not None}
    done = {_key(op) for op in state.history if op.state == "completed"}
    found, seen = [], set()
    for op in state.history:
        if (not op.is_p2p or op.state == "completed" or op.evidence is None
                or op.evidence.path not in tracking):
            continue
        key = _key(op)
        if key in done or key in seen:
            continue
        seen.add(key)
        found.append(op)
    # Records list their calls in their own order (a dump's stuck entry last):
    # per group, sequence numbers say which is oldest.
    return sorted(found, key=lambda op: (group_id(op.group), op.seq is None, op.seq or 0))


def _describe(ops) -> tuple[str, str]:
    by_kind: dict[tuple[str, tuple], list] = {}
    for op in ops:
        by_kind.setdefault((op.op, op.peers), []).append(op)
    parts, parts_zh = [], []
    for (name, peers), group in sorted(by_kind.items(), key=lambda item: (-len(item[1]), item[0])):
        way = ("to " if name == "send" else "from ") + (compact(peers) if peers else "?")
        parts.append(f"{len(group)} {'isend' if name == 'send' else 'irecv'} {way}")
        parts_zh.append(f"{len(group)} 个{'发往' if name == 'send' else '来自'} {compact(peers) if peers else '?'} "
                        f"的 {'isend' if name == 'send' else 'irecv'}")
    return ", ".join(parts), "，".join(parts_zh)


def _blocks(state, ops, incident, analysis) -> bool:
    """It is what blocks: the job is stuck and this rank sits in (behind)
    one of these entries, or others wait on it."""
    if not incident.stuck:
        return False
    op = state.current_op
    if state.is_blocked and op is not None and op.is_p2p and _key(op) in {_key(o) for o in ops}:
        return True
    return state.rank in analysis.sinks or state.rank in analysis.stuck


@hookimpl
def forensics_graph_findings(incident, analysis):
    piles = []
    for rank in sorted(incident.ranks):
        state = incident.ranks[rank]
        ops = outstanding(state)
        if len(ops) >= MIN_OUTSTANDING:
            piles.append((state, ops))
    if not piles:
        return []
    piles.sort(key=lambda pile: (-len(pile[1]), pile[0].rank))
    blocking = [state.rank for state, ops in piles if _blocks(state, ops, incident, analysis)]
    lines, lines_zh, evidence = [], [], []
    for state, ops in piles[:MAX_LISTED]:
        oldest = ops[0]
        seqs = sorted(op.seq for op in ops if op.seq is not None)
        span = f"p2p seq {seqs[0]}–{seqs[-1]}" if len(seqs) > 1 else f"p2p seq {seqs[0]}" if seqs else "no seq"
        what, what_zh = _describe(ops)
        where = f" [{oldest.evidence.cite()}]" if oldest.evidence else ""
        group = group_id(oldest.group)
        lines.append(f"{len(ops)} isend/irecv entries on rank {state.rank} not completed ({what}; oldest seq "
                     f"{oldest.seq} on group {group}{where}; {span})")
        lines_zh.append(f"Rank {state.rank} 上有 {len(ops)} 个 isend/irecv 未完成（{what_zh}；最早的 seq "
                        f"{oldest.seq}，通信组 {group}{where}；{span}）")
        evidence.extend(op.evidence for op in ops[:3] if op.evidence is not None)
    if len(piles) > MAX_LISTED:
        lines.append(f"… {len(piles) - MAX_LISTED} more rank(s)")
        lines_zh.append(f"……另有 {len(piles) - MAX_LISTED} 个 Rank")
    message = "; ".join(lines) + ", piling up: posted without wait() or never matched by the peer."
    message_zh = "；".join(lines_zh) + "，正在堆积：发起后没有 wait()，或对端从未发起匹配的调用。"
    if blocking:
        message += (f" The job is stuck and rank(s) {compact(blocking)} sit behind these entries: they are "
                    f"what blocks (Flight Recorder keeps the last entries per group, so counts are a lower "
                    f"bound).")
        message_zh += f" 作业已卡住，Rank {compact(blocking)} 正卡在这些调用之后：它们就是阻塞所在（Flight Recorder 每组只保留最近的条目，数量是下限）。"
    else:
        message += " Flight Recorder keeps the last entries per group, so counts are a lower bound."
        message_zh += " Flight Recorder 每组只保留最近的条目，数量是下限。"
    return [Finding(ID, KIND, "error" if blocking else "warning",
                    tuple(sorted(state.rank for state, _ in piles)), message, tuple(evidence),
                    HINT, message_zh, HINT_ZH)]


RULES = (RuleDoc(
    ID, "Outstanding isend/irecv piling up", "isend/irecv 未完成并堆积", "warning",
    f"A rank has {MIN_OUTSTANDING} or more point-to-point calls (isend/irecv) that Flight Recorder shows "
    "unfinished: Works dropped without `wait()`, or sends and receives whose counts differ between the "
    "two sides, so entries pile up and later calls on the same stream queue behind them. A warning; an "
    "error when the job is stuck and a rank sits behind these entries (or others wait on it). Artifacts "
    "that do not record completion (NCCL COLL lines, stack dumps) are not used.",
    f"某个 Rank 有 {MIN_OUTSTANDING} 个或更多点对点调用（isend/irecv）在 Flight Recorder 中未完成：返回的 Work "
    "没有 `wait()`，或两端的 send/recv 数量不一致，于是条目不断堆积，同一 stream 上之后的调用都排在它们后面。"
    "默认是警告；当作业已卡住且某个 Rank 正卡在这些条目之后（或其他 Rank 在等它）时为错误。不记录完成状态的"
    "制品（NCCL COLL 行、调用栈）不作为依据。",
    HINT, HINT_ZH, kinds=(KIND,), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
