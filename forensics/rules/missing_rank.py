"""missing-rank: ranks wait in a call that a rank still alive has not joined
(it computes, loads data, writes a checkpoint, or left a loop early).

In one snapshot of a healthy job that is ordinary progress, so this becomes
an error only with evidence that the job is stuck: a watchdog timeout, an
operation past its timeout, no progress between two snapshots, or the
user's --hung. Without it the rule says, as info, who the others wait for.

A rank that left the loop early can also close a cycle: it waits in a call
on another group (a checkpoint barrier) that the others, still inside the
loop, will reach only after the collective they wait in — for it. The wait
is circular, yet the ranks did not call in different orders: one of them
moved on. That knot is read as a missing rank, not a deadlock, when

- a strict majority of a group's members sit together in the same
  collective instance (group, seq), waiting only for the rest (a 1-vs-1 or
  an even split has no majority and stays a deadlock);
- every one of the rest completed the position before (it is ahead, not
  behind) and now sits in a collective on another group that none of the
  majority ever entered (no call, no counters: a new phase, not an
  interleaving of the two groups the whole loop uses);
- nobody else is in the knot.

The finding still states the cross-group wait; the cycle stays in the
findings as a warning (see `analysis.py`)."""

from __future__ import annotations

from collections import defaultdict

from ..confidence import awaited_unseen
from ..hookspecs import hookimpl
from ..model import UNIDENTIFIED_GROUP, UNKNOWN, Finding, group_id, path_label
from ..ranges import compact
from ..ruledocs import RuleDoc
from ._semantics import describe_op

ID = "missing-rank"
HINT = ("Look at what the awaited rank is doing instead (its stack dump): data loading, checkpoint I/O, "
        "an early exit from the training loop (uneven shards: use drop_last / DistributedSampler with "
        "equal lengths), or a collective issued only on some ranks.")
HINT_ZH = ("查看被等待的 Rank 在做什么（它的调用栈）：数据加载、Checkpoint I/O、提前退出训练循环（数据分片不均："
           "使用 drop_last 或等长的 DistributedSampler），或只在部分 Rank 上调用的集合通信。")
HINT_MOVED_ON = ("The awaited rank left the loop before the others (uneven data shards, a rank-dependent "
                 "`break` or step count) and went on to the code after it. Give every rank the same number "
                 "of steps (DistributedSampler with drop_last, or agree on the step count with an all_reduce "
                 "before the loop), or make the post-loop call wait until every rank has left the loop.")
HINT_MOVED_ON_ZH = ("被等待的 Rank 比其他 Rank 先离开了循环（数据分片不均、依赖 rank 的 `break` 或步数），"
                    "已经执行到循环之后的代码。让所有 Rank 执行相同的步数（使用 drop_last 的 DistributedSampler，"
                    "或在循环前用 all_reduce 统一步数），或让循环之后的调用等所有 Rank 都离开循环后再进行。")


@hookimpl
def forensics_graph_findings(incident, analysis):
    findings = [finding for cycle, knot in zip(analysis.cycles, analysis.knots)
                if (finding := _moved_on(incident, cycle, knot)) is not None]
    if not analysis.sinks or not analysis.waiting:
        return findings
    if incident.stuck and not findings:
        moved = _moved_on_sinks(incident, analysis)
        if moved is not None:
            findings.append(moved)
    sinks = analysis.sinks
    # Awaited ranks an artifact shows elsewhere before ranks nothing shows: in
    # a fragment, a rank that printed nothing is unknown, not the cause; the
    # one seen doing something else is (the silent ones are named as unknown).
    seen = [r for r in sinks if r in incident.ranks and not _silent(incident.ranks[r])]
    unseen = [r for r in sinks if r not in seen]
    if seen and unseen:
        sinks = seen
    else:
        unseen = []
    top = analysis.waiters_of.get(sinks[0], 0)
    described = []
    for rank in sinks[:8]:
        state = incident.ranks.get(rank)
        if state is None:
            doing = "no artifact at all"
        else:
            doing = state.activity + (f" in {describe_op(state.current_op, incident.groups)}" if state.current_op else "")
            if state.why:
                doing += f", {state.why}"
        described.append(f"rank {rank}: {doing}")
    evidence = tuple(incident.ranks[r].evidence for r in sinks[:8]
                     if r in incident.ranks and incident.ranks[r].evidence)
    evidence += tuple(s.evidence for s in incident.stuck if s.evidence)[:4]
    if incident.stuck:
        # the same statement from several ranks is said once
        why = "; ".join(list(dict.fromkeys(s.detail for s in incident.stuck))[:3])
        why_zh = "；".join(list(dict.fromkeys(s.detail_zh or s.detail for s in incident.stuck))[:3])
        # A rank only a pid map or a member list names: alive or not, nothing says.
        silent = all(r not in incident.ranks or _silent(incident.ranks[r]) for r in sinks[:8])
        where, where_zh = (("which sent no artifact of its own (no stack dump, log or dump: is its host "
                            "up, was it collected?)", "它没有留下任何自己的产物（没有调用栈、日志或 dump：主机是否存活、"
                            "是否漏采？）") if silent else
                           ("which is alive but not in the call", "它仍然存活却没有进入该通信调用"))
        # Placed only by records that never show some calls (Gloo's Flight
        # Recorder: no send/recv): "not in the call" may be "in a send".
        blind = list(dict.fromkeys(k for r in sinks[:8] if r in incident.ranks for k in incident.ranks[r].unrecorded))
        if blind and all(r in incident.ranks and incident.ranks[r].activity == UNKNOWN
                         and incident.ranks[r].unrecorded for r in sinks[:8]):
            kinds = "/".join(blind)
            where = (f"which is in none of the calls its records show; they never show a {kinds} (torch's Gloo "
                     f"Flight Recorder records no point-to-point call), so it may be blocked in one")
            where_zh = (f"它不在其记录所显示的任何调用中；但这些记录从不包含 {kinds}（torch 的 Gloo Flight Recorder "
                        f"不记录点对点调用），它可能正阻塞在其中")
            level = ("medium", f"only Gloo Flight Recorder dumps place rank {compact(sinks)}, and they record no "
                               f"{kinds}: it may wait in one, on a rank that waits for it",
                     f"只有 Gloo Flight Recorder dump 能定位 Rank {compact(sinks)}，而它们不记录 {kinds}：它可能正在其中"
                     f"等待一个也在等它的 Rank")
        else:
            level = ("", "", "")
        return findings + [Finding(
            ID, "missing_rank", "error", tuple(sorted(sinks)),
            f"{len(analysis.waiting)} rank(s) wait for rank {compact(sinks)}, {where}. "
            f"{'; '.join(described)}. The job is stuck ({why}).{_also(unseen)}",
            evidence, HINT,
            f"{len(analysis.waiting)} 个 Rank 在等待 Rank {compact(sinks)}，{where_zh}。"
            f"{'；'.join(described)}。作业已卡住（{why_zh}）。{_also_zh(unseen)}", HINT_ZH,
            confidence=level[0], confidence_reason=level[1], confidence_reason_zh=level[2])]
    if awaited_unseen(incident, analysis):
        reading = "no artifact shows it at work, so whether the wait resolves is not seen"
        reading_zh = "没有任何产物显示它在工作，因此看不出这一等待是否会结束"
    else:
        reading, reading_zh = "in a single snapshot that is normal progress", "单个快照中这属于正常推进"
    return findings + [Finding(
        "waiting-on-progressing-rank", "waiting_on_progressing_rank", "info", tuple(sorted(sinks)),
        f"{len(analysis.waiting)} rank(s) wait for rank {compact(sinks)} ({', '.join(described)}); "
        f"{reading}. If the job is stuck, rerun with --hung (most waited on: {top} rank(s)).",
        evidence, HINT,
        f"{len(analysis.waiting)} 个 Rank 在等待 Rank {compact(sinks)}（{', '.join(described)}）；{reading_zh}。"
        f"若作业确实卡住，请加 --hung 重新分析。", HINT_ZH)]


def _also(unseen: list[int]) -> str:
    if not unseen:
        return ""
    return (f" They also wait for rank {compact(unseen)}, which no artifact shows (not collected, or it printed "
            f"nothing): its state is unknown, so it is not named.")


def _also_zh(unseen: list[int]) -> str:
    if not unseen:
        return ""
    return f"它们也在等待 Rank {compact(unseen)}，但没有任何产物显示它（未采集或没有输出）：状态未知，因此不列为原因。"


def _silent(state) -> bool:
    """A state made only from a list that names the rank (see ingest)."""
    return (state.activity == UNKNOWN and state.current_op is None and not state.threads
            and not state.log_events and state.alive is None and not state.last_words)


RULES = (
    RuleDoc(
        ID, "Missing rank", "成员缺失", "error",
        "Ranks wait in a call that a live rank has not joined: it computes, loads data, writes a "
        "checkpoint, or left the loop early. In one snapshot of a healthy job that is progress, so it "
        "is an error only with evidence that the job is stuck (a watchdog timeout, an op past its "
        "timeout, no progress between two snapshots, or --hung). A rank that left the loop early and "
        "waits in a call on another group the others never entered closes a cycle with them; that "
        "knot is this rank's absence, not a deadlock, and needs no further evidence.",
        "多个 Rank 在等待一个仍存活、却没有进入该调用的 Rank：它在计算、加载数据、写 Checkpoint，或提前"
        "退出了循环。健康作业的单次快照中这属于正常推进，因此只有在有卡住证据时（watchdog 超时、操作超过"
        "超时时间、两次快照之间无进展，或 --hung）才记为错误。提前退出循环的 Rank 若在其他 Rank 从未进入的"
        "另一个通信组上等待，会与它们形成环；这个环是该 Rank 的缺席而非死锁，无需其他卡住证据。",
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


def _moved_on(incident, cycle, knot) -> Finding | None:
    """The knot read as ranks that moved on (see the module doc), or None."""
    if not all(isinstance(node, int) for node in knot):
        return None  # CUDA streams in the knot: not a matter of who called what
    instances = defaultdict(list)  # (group, seq) → ranks of the knot blocked in that collective
    for rank in knot:
        state = incident.ranks.get(rank)
        op = state.current_op if state is not None else None
        if op is None or not state.is_blocked or not op.is_collective or op.seq is None:
            return None
        instances[(group_id(op.group), op.seq)].append(rank)
    for (group, seq), together in sorted(instances.items(), key=lambda kv: (-len(kv[1]), str(kv[0]))):
        members = set(incident.members(group))
        rest = sorted(members - set(together))
        if not set(together) <= members or not rest or 2 * len(together) <= len(members):
            continue
        if set(knot) != set(together) | set(rest) or seq < 2:
            continue
        if all(_left_for_new_group(incident, rank, group, seq, together) for rank in rest):
            return _finding(incident, cycle, group, seq, sorted(together), rest)
    return None


def _moved_on_sinks(incident, analysis) -> Finding | None:
    """The same reading without a cycle: the awaited ranks sit in a
    collective on a group whose members no artifact states (so they wait for
    no one known), after completing the position before the one the
    majority waits in."""
    sinks = [r for r in analysis.sinks if r in incident.ranks]
    if not sinks or len(sinks) != len(analysis.sinks) or not all(incident.ranks[r].is_blocked for r in sinks):
        return None
    instances = defaultdict(list)
    for rank in analysis.waiting:
        state = incident.ranks.get(rank) if isinstance(rank, int) else None
        op = state.current_op if state is not None else None
        if op is None or not state.is_blocked or not op.is_collective or op.seq is None:
            return None
        instances[(group_id(op.group), op.seq)].append(rank)
    if len(instances) != 1:
        return None
    (group, seq), together = next(iter(instances.items()))
    members = incident.stated_members(group)
    if members is None or set(members) != set(together) | set(sinks) or seq < 2 or 2 * len(together) <= len(members):
        return None
    if all(_left_for_new_group(incident, rank, group, seq, sorted(together)) for rank in sinks):
        return _finding(incident, None, group, seq, sorted(together), sorted(sinks))
    return None


def _left_for_new_group(incident, rank: int, group: str, seq: int, majority: list[int]) -> bool:
    """`rank` completed (group, seq - 1), never entered (group, seq), and is
    blocked in a collective on a group none of `majority` ever entered."""
    state = incident.ranks[rank]
    op = state.current_op
    elsewhere = group_id(op.group)
    if elsewhere == group or elsewhere.startswith(UNIDENTIFIED_GROUP):
        return False
    if _position(state, group) != seq - 1:
        return False
    return not any(_entered(incident.ranks[other], elsewhere) for other in majority)


def _position(state, group: str) -> int | None:
    """The last seq `state` completed on `group`, when it has entered nothing
    after it there; None when that is not known or it went further."""
    done, issued = None, None
    for op in state.history:
        if op.is_collective and op.seq is not None and group_id(op.group) == group:
            issued = op.seq if issued is None else max(issued, op.seq)
            if op.state == "completed":
                done = op.seq if done is None else max(done, op.seq)
    progress = state.progress.get(group)
    if progress is not None:
        if progress.completed is not None and progress.completed >= 0:
            done = progress.completed if done is None else max(done, progress.completed)
        if progress.enqueued is not None and progress.enqueued >= 0:
            issued = progress.enqueued if issued is None else max(issued, progress.enqueued)
    if done is None or (issued is not None and issued > done):
        return None
    return done


def _entered(state, group: str) -> bool:
    """Any sign that the rank ever issued a call on `group`."""
    op = state.current_op
    if op is not None and group_id(op.group) == group:
        return True
    if any(group_id(o.group) == group for o in state.history):
        return True
    progress = state.progress.get(group)
    return progress is not None and any(x is not None and x >= 1 for x in
                                        (progress.enqueued, progress.started, progress.completed))


def _call(op) -> str:
    return f"{op.op} #{op.seq} on group {group_id(op.group)}"


def _call_zh(op) -> str:
    return f"通信组 {group_id(op.group)} 的第 {op.seq} 次 {op.op}"


def _finding(incident, cycle, group, seq, together, rest) -> Finding:
    first = incident.ranks[together[0]].current_op
    call, call_zh = _call(first), _call_zh(first)
    where = "; ".join(sorted({_call(incident.ranks[r].current_op) for r in rest}))
    where_zh = "；".join(sorted({_call_zh(incident.ranks[r].current_op) for r in rest}))
    many = len(rest) > 1
    path = path_label(cycle) if cycle is not None else ""
    evidence = [first.evidence] if first.evidence else []
    for rank in rest:
        state = incident.ranks[rank]
        if state.current_op.evidence and state.current_op.evidence not in evidence:
            evidence.append(state.current_op.evidence)
        before = next((o for o in reversed(state.history) if group_id(o.group) == group and o.seq == seq - 1
                       and o.state == "completed" and o.evidence), None)
        if before is not None and before.evidence not in evidence:
            evidence.append(before.evidence)
    evidence += [s.evidence for s in incident.stuck[:2] if s.evidence]
    who, who_zh = f"rank{'s' if many else ''} {compact(rest)}", f"Rank {compact(rest)}"
    head = (f"{len(together)} of the {len(together) + len(rest)} members of group {group} (ranks {compact(together)}) "
            f"wait in {call} for {who}, which completed #{seq - 1} there and moved on to {where}, a group ranks "
            f"{compact(together)} never entered. ")
    head_zh = (f"通信组 {group} 的 {len(together) + len(rest)} 个成员中有 {len(together)} 个（Rank {compact(together)}）"
               f"在{call_zh} 中等待 {who_zh}；{who_zh} 已在该组完成第 {seq - 1} 次调用，随后进入了{where_zh}，"
               f"而 Rank {compact(together)} 从未进入过那个通信组。")
    if cycle is not None:
        message = head + (f"{who.capitalize()} in turn wait{'' if many else 's'} there for them — a cross-group wait "
                          f"({path}) — but the order of calls did not differ: {who} left the loop early and will "
                          f"not come back to {call}.")
        message_zh = head_zh + (f"{who_zh} 反过来也在那里等待它们——形成跨通信组的等待（{path}）——但各 Rank 的调用顺序"
                                f"并无不同：是 {who_zh} 提前离开了循环，不会再回到{call_zh}。")
    else:
        message = head + f"{who.capitalize()} left the loop early and will not come back to {call}."
        message_zh = head_zh + f"是 {who_zh} 提前离开了循环，不会再回到{call_zh}。"
    return Finding(ID, "missing_rank", "error", tuple(rest), message, tuple(evidence), HINT_MOVED_ON,
                   message_zh, HINT_MOVED_ON_ZH)
