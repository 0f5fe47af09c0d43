"""How sure a verdict is, and what would decide an undecided one.

A fragment from one rank can decide when the message itself states the
cause; a verdict drawn from rank states is as good as the states it had.
The lead finding's rule may say how sure it is (a monitored barrier naming
ranks: high); otherwise the shape of the incident decides: a cycle needs no
more evidence, a wait on a rank that sent nothing does.
"""

from __future__ import annotations

from .ingest.merge import IMPLIED
from .model import UNIDENTIFIED_GROUP, UNKNOWN, Confidence, Culprit, ProcessDump
from .ranges import compact


def silent_ranks(incident) -> list[int]:
    """Ranks some artifact lists but none describes (no stack, log or dump of their own)."""
    return [r for r, s in incident.ranks.items()
            if s.activity == UNKNOWN and s.current_op is None and not s.threads and s.alive is None
            and s.ending is None and not s.history and not s.log_events and not s.progress
            and not s.last_words]


def awaited_unseen(incident, analysis) -> list[int]:
    """The ranks the others wait for when none of them is seen at work:
    nothing describes them; only records that never show some of their
    calls place them (torch's Gloo Flight Recorder records no send or recv),
    all of those calls completed; or their stack dump shows the main thread
    idle (py-spy: not running, asleep or waiting on a lock, a queue or I/O
    that no dump shows), wherever in the job's code it is. Each may be
    blocked, or gone: whether the wait resolves is not seen. A rank blocked
    in a call whose own waits cannot be drawn (its group's members are not
    stated) is not seen at work either. Empty when any
    awaited rank is seen at work (a thread running, or records of every
    call, all completed, that place it between calls)."""
    from .ingest.progress import window_says_not_stuck

    if window_says_not_stuck(incident.diagnostics):
        return []  # a window watched them move, or below its threshold: said as such
    silent = set(silent_ranks(incident))
    sinks = [r for r in analysis.sinks if isinstance(r, int)]
    unseen = [r for r in sinks if r not in incident.ranks or r in silent
              or (incident.ranks[r].activity == UNKNOWN and incident.ranks[r].unrecorded)
              or idle_in_its_dump(incident.ranks[r])
              # blocked in a call whose waits cannot be drawn (a group whose members nothing lists)
              or _blocked_on_unlisted_group(incident, incident.ranks[r])]
    return sorted(unseen) if sinks and len(unseen) == len(sinks) else []


def _blocked_on_unlisted_group(incident, state) -> bool:
    op = state.current_op
    return state.is_blocked and op is not None and op.group_known and incident.members_unlisted(op.group)


def idle_in_its_dump(state) -> bool:
    """The rank's stack dump states its main thread is not running (py-spy's
    `idle`); a dump that does not say (gdb, a snapshot) states nothing."""
    if not state.threads:
        return False
    from .ingest.stacks import main_thread

    thread = main_thread(ProcessDump("", "", pid=state.pid, threads=state.threads))
    return thread is not None and thread.active is False


LEVELS = ("low", "medium", "high")


def assess(report, verdict_of: dict) -> Confidence:
    """The lead's own confidence when its rule states one; otherwise the
    incident's shape, lowered by any finding of the same verdict that knows
    it is less sure (one rank's log about a mismatch cannot say which side
    is odd, however the rank states read)."""
    lead = report.root_cause.finding
    if lead is not None and lead.confidence:
        return Confidence(lead.confidence, lead.confidence_reason, lead.confidence_reason_zh)
    shape = _by_shape(report)
    # A finding that states the same culprits with a confidence of its own (a
    # message naming the rank that did not arrive) confirms the shape's reading.
    confirms = [f for f in report.findings if f.confidence and f is not lead and lead is not None
                and verdict_of.get(f.kind) == report.verdict and set(f.ranks) == set(lead.ranks)
                and LEVELS.index(f.confidence) > LEVELS.index(shape.level)]
    if confirms:
        best = max(confirms, key=lambda f: LEVELS.index(f.confidence))
        return Confidence(best.confidence, best.confidence_reason, best.confidence_reason_zh)
    doubts = [f for f in report.findings if f.confidence and f is not lead
              and verdict_of.get(f.kind) == report.verdict and LEVELS.index(f.confidence) < LEVELS.index(shape.level)]
    if doubts:
        least = min(doubts, key=lambda f: LEVELS.index(f.confidence))
        return Confidence(least.confidence, least.confidence_reason, least.confidence_reason_zh)
    return shape


def _by_shape(report) -> Confidence:
    shape = _shape(report)
    assumed = assumed_group_ranks(report.incident)
    if assumed and report.verdict not in ("healthy", "inconclusive") and shape.level == "high":
        return Confidence(
            "medium", f"the stack dumps do not show which group rank {compact(assumed)} wait"
                      f"{'s' if len(assumed) == 1 else ''} in (no --locals, or cut short): the default group is "
                      f"assumed",
            f"栈没有显示 Rank {compact(assumed)} 在哪个通信组中等待（没有 --locals，或被截断）：假定为默认通信组",
            (f"py-spy dump --locals, or Flight Recorder dumps, of rank {compact(assumed)}",),
            (f"Rank {compact(assumed)} 的 py-spy dump --locals 或 Flight Recorder dump",))
    return shape


def assumed_group_ranks(incident) -> list[int]:
    """Ranks blocked in a collective whose group no artifact shows: the
    wait rules take it for the default group, a guess the report owns up to."""
    return sorted(r for r, s in incident.ranks.items()
                  if s.is_blocked and s.current_op.is_collective and not s.current_op.group_known)


def _shape(report) -> Confidence:
    incident = report.incident
    verdict = report.verdict
    silent = silent_ranks(incident)
    if verdict == "deadlock":
        return Confidence("high", "the waits form a cycle: no order of events can resolve it",
                          "等待关系构成环：任何事件顺序都无法解开")
    if verdict == "collective_mismatch":
        return Confidence("high", "the ranks' own records show different calls at the same position of one group",
                          "各 Rank 自己的记录显示同一组的同一位置上调用不同")
    if verdict in ("missing_rank", "dead_rank", "network_fault"):
        silent_set = set(silent)
        implied = [r for r in report.culprit_ranks if r in silent_set and IMPLIED in incident.ranks[r].why]
        if implied:
            return Confidence(
                "low", f"rank {compact(implied)} is only known to exist because higher ranks do (ranks run from 0); "
                       "the world size is not known from these files, so other ranks may be missing too",
                f"Rank {compact(implied)} 只是因为更高编号的 Rank 存在而推断存在（Rank 从 0 编号）；这些文件看不出作业规模，"
                "可能还有其他 Rank 缺失",
                (f"logs or stack dumps of rank {compact(implied)} and of every other rank of the job",),
                (f"Rank {compact(implied)} 以及作业中其他所有 Rank 的日志或栈",))
        if silent:
            return Confidence(
                "medium", f"{len(silent)} rank(s) sent no artifact of their own ({compact(silent)}): "
                          "what they were doing is inferred from the others' waits",
                f"{len(silent)} 个 Rank 没有任何自己的产物（{compact(silent)}）：它们的状态是从其他 Rank 的等待推断的",
                (f"stack dumps (py-spy dump) or logs of rank {compact(silent)}",),
                (f"Rank {compact(silent)} 的栈（py-spy dump）或日志",))
        inferred = [r for r in report.culprit_ranks
                    if r in incident.ranks and incident.ranks[r].ending is not None and incident.ranks[r].ending.inferred]
        if inferred:
            return Confidence(
                "medium", f"how rank {compact(inferred)} ended is inferred, not stated: "
                          f"{incident.ranks[inferred[0]].ending.inferred}",
                f"Rank {compact(inferred)} 的结束方式是推断的，并非日志明言",
                (f"rank {compact(inferred)}'s own log or exit status",),
                (f"Rank {compact(inferred)} 自己的日志或退出状态",))
        kinds = {s.kind for s in report.decided_by}
        if verdict == "missing_rank" and kinds == {"cli_hung"}:
            return Confidence("medium", "judged stuck only because --hung says so; the states are read, not timed",
                              "仅因 --hung 判定为卡住；各 Rank 状态来自产物，没有时间上的证据",
                              ("a second snapshot a minute later, or the watchdog's timeout lines",),
                              ("一分钟后的第二个快照，或看门狗的超时日志",))
        return Confidence("high", "every member involved was read from its own artifacts",
                          "涉及的每个成员都有自己的产物可读")
    if verdict == "healthy":
        if report.analysis.waiting and not incident.stuck:
            return Confidence("medium", "one snapshot: ranks waiting on ranks that still work may be progressing",
                              "单个快照：等待仍在工作的 Rank 的 Rank 可能正在推进",
                              ("a second snapshot, or --hung if the job is known to be stuck",),
                              ("第二个快照；若确知作业卡住，加 --hung",))
        return Confidence("high" if not silent else "medium",
                          "no rank is blocked in a way that cannot resolve" if not silent else
                          f"no rank read is blocked, but rank {compact(silent)} sent nothing",
                          "没有 Rank 处于无法解除的阻塞" if not silent else f"读到的 Rank 都没有阻塞，但 Rank {compact(silent)} 没有产物")
    missing, missing_zh = would_decide(report)
    unseen = awaited_unseen(incident, report.analysis) if not incident.stuck else []
    if unseen:
        idle = [r for r in unseen if r in incident.ranks and idle_in_its_dump(incident.ranks[r])]
        if idle:
            missing = (f"a second stack dump of rank {compact(idle)} a minute later (does it move?), or --hung if "
                       f"the job is known to be stuck",) + missing
            missing_zh = (f"一分钟后 Rank {compact(idle)} 的第二次栈 dump（它是否在动？）；若确知作业卡住，加 --hung",) + missing_zh
        return Confidence("low", f"ranks wait for rank {compact(unseen)}, which no artifact shows at work",
                          f"有 Rank 在等待 Rank {compact(unseen)}，但没有任何产物显示它在工作", missing, missing_zh)
    return Confidence("low", "nothing read states a cause or shows who waits on whom",
                      "读到的内容既未说明原因，也看不出谁在等谁", missing, missing_zh)


def would_decide(report) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The artifacts that would decide an inconclusive incident."""
    incident = report.incident
    if not incident.ranks:
        return (("stack dumps (py-spy dump --pid PID) or the c10d / NCCL logs of the ranks",),
                ("各 Rank 的栈（py-spy dump --pid PID）或 c10d / NCCL 日志",))
    out, out_zh = [], []
    silent = set(silent_ranks(incident))
    unseen = sorted(r for r, s in incident.ranks.items() if s.unrecorded and s.activity == UNKNOWN)
    if unseen:
        kinds = "/".join(dict.fromkeys(k for r in unseen for k in incident.ranks[r].unrecorded))
        out.append(f"stack dumps of rank {compact(unseen)} (py-spy dump --pid PID): only Flight Recorder dumps "
                   f"place {'it' if len(unseen) == 1 else 'them'}, and torch's Gloo Flight Recorder records no "
                   f"{kinds}")
        out_zh.append(f"Rank {compact(unseen)} 的调用栈（py-spy dump --pid PID）：只有 Flight Recorder dump 能定位它们，"
                      f"而 torch 的 Gloo Flight Recorder 不记录 {kinds}")
    blind = unknown_group_ranks(incident)
    if blind:
        out.append(f"which process group rank {compact(blind)} wait{'s' if len(blind) == 1 else ''} in, and its "
                   f"members: Flight Recorder dumps or NCCL_DEBUG=INFO logs of every rank name the group of each "
                   f"call (py-spy --locals shows a group passed explicitly only as an object)")
        out_zh.append(f"Rank {compact(blind)} 在哪个通信组中等待、该组有哪些成员：每个 Rank 的 Flight Recorder dump 或 "
                      f"NCCL_DEBUG=INFO 日志会写明每次调用的通信组（py-spy --locals 只把显式传入的通信组显示为对象）")
    for group in sorted({s.current_op.group or "0" for s in incident.ranks.values() if s.is_blocked
                         and s.rank not in blind}):
        stated = incident.stated_members(group)
        if incident.members_unlisted(group):
            waiting = sorted(s.rank for s in incident.ranks.values() if s.is_blocked and (s.current_op.group or "0") == group)
            out.append(f"the members of group {group} (rank {compact(waiting)} wait in it; no artifact lists all its "
                       f"ranks, so whom they wait for is not guessed): c10d's group creation lines, NCCL_DEBUG=INFO "
                       f"init lines or Flight Recorder dumps, and the stacks or logs of its other members")
            out_zh.append(f"通信组 {group} 的成员（Rank {compact(waiting)} 在其中等待；没有产物列出它的成员，因此不猜测它们在等谁）："
                          f"c10d 建组日志、NCCL_DEBUG=INFO 初始化日志或 Flight Recorder dump，以及其他成员的栈或日志")
            continue
        absent = [r for r in stated if r not in incident.ranks or r in silent]
        pg = incident.groups.get(group)
        if absent:
            out.append(f"stack dumps or logs of rank {compact(absent)} (members of group {group} with nothing read)")
            out_zh.append(f"Rank {compact(absent)} 的栈或日志（通信组 {group} 中没有任何产物的成员）")
        elif pg is None or not pg.ranks:
            out.append(f"stack dumps or logs of the other members of group {group} (its size is not known from these files)")
            out_zh.append(f"通信组 {group} 其他成员的栈或日志（这些文件看不出该组的大小）")
    if not out:
        out.append("Flight Recorder dumps (TORCH_NCCL_TRACE_BUFFER_SIZE) or NCCL_DEBUG=INFO logs of every rank")
        out_zh.append("每个 Rank 的 Flight Recorder dump（TORCH_NCCL_TRACE_BUFFER_SIZE）或 NCCL_DEBUG=INFO 日志")
    return tuple(out), tuple(out_zh)


def unlisted_group_ranks(incident) -> dict[int, str]:
    """{rank: group} of ranks blocked in a call on a named group whose
    members no artifact lists in full (stated_members): whom they wait for
    is not guessed."""
    return {state.rank: state.current_op.group for state in incident.ranks.values()
            if _blocked_on_unlisted_group(incident, state)
            and not state.current_op.group.startswith(UNIDENTIFIED_GROUP)}


def unknown_group_ranks(incident) -> list[int]:
    """Ranks blocked in a collective on a group whose members no artifact
    tells (a stack dump shows it only as an object, `?name`): whom they
    wait for cannot be said. (An NCCL communicator known by one process's
    pointer, `?nccl-comm:…`, is a logged call, not a thread seen waiting;
    rules/nccl_opcount_mismatch.py reads the communicators merge pairs.)"""
    out = []
    for state in incident.ranks.values():
        op = state.current_op
        if (state.is_blocked and op is not None and op.is_collective and op.group.startswith(UNIDENTIFIED_GROUP)
                and not op.group.startswith(UNIDENTIFIED_GROUP + "nccl-comm:")):
            known = incident.groups.get(op.group)
            if known is None or not known.ranks:
                out.append(state.rank)
    return sorted(out)


def culprit_processes(findings, verdict: str, incident, verdict_of) -> list[Culprit]:
    """The processes the verdict blames: every culprit the bearing findings
    name, and a Culprit (with host and pid where known) for each rank they
    name without one."""
    out: dict = {}
    for finding in findings:
        if finding.severity != "error" or verdict_of.get(finding.kind) != verdict:
            continue
        for culprit in finding.culprits:
            out.setdefault(_key(culprit), culprit)
        for rank in finding.ranks:
            if ("rank", rank) not in out:
                state = incident.ranks.get(rank)
                out[("rank", rank)] = Culprit(rank=rank, host=state.host if state else "",
                                              pid=state.pid if state else None)
    return sorted(out.values(), key=lambda c: (c.rank is None, c.rank if c.rank is not None else 0,
                                               c.host, c.addr, c.pid or 0))


def _key(culprit: Culprit) -> tuple:
    if culprit.rank is not None:
        return ("rank", culprit.rank)
    return ("process", culprit.host, culprit.pid, culprit.addr, culprit.node)
