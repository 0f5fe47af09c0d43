"""The root-cause narrative, in English and Chinese.

It reads like an on-call engineer's incident note: what is stuck, who
everyone waits for, why that hangs, the evidence with file:line, and what to
do next. Deterministic: the same report gives the same words.
"""

from __future__ import annotations

import heapq

from . import confidence, topology
from .model import path_label
from .rules._semantics import describe_op
from .ranges import compact

LANGS = ("en", "zh")
MAX_EVIDENCE = 6
RING_VERDICTS = ("missing_rank", "dead_rank", "network_fault")

_HEADLINE = {
    "deadlock": ("Deadlock: ranks {ranks} wait on each other in a cycle ({cycle}).",
                 "死锁：Rank {ranks} 形成循环等待（{cycle}）。"),
    "cross_stream_cycle": ("Deadlock: CUDA streams of rank {ranks} wait on each other's events in a cycle "
                           "({cycle}).",
                           "死锁：Rank {ranks} 的 CUDA Stream 通过 Event 形成循环等待（{cycle}）。"),
    "collective_mismatch": ("Collective mismatch: at the same position of its group, {who} called a different "
                            "collective than the rest, or the same one with other sizes or dtypes.",
                            "集合通信失配：在通信组的同一位置，{who} 调用了与其他 Rank 不同的集合通信，"
                            "或同一集合通信但大小或 dtype 不同。"),
    "dead_rank": ("Dead rank: {who} has exited while others still wait for it.",
                  "成员退出：{who} 已退出，其他 Rank 仍在等待它。"),
    "missing_rank": ("Missing rank: everyone waits for {who}, which never joined the call.",
                     "成员缺失：所有人都在等待 {who}，它始终没有进入该通信调用。"),
    "network_fault": ("Network fault: every member joined but nothing completes; the first transport "
                      "error came from {who}.",
                      "网络故障：所有成员都已加入但通信无法完成；最早的传输错误来自 {who}。"),
}

# Verdicts read from what a message states (rules/stated_cause.py): the
# rank states behind the generic headlines may be unknown.
_STATED_HEADLINE = {
    "stated-network-fault": ("Network fault: the transport to {who} failed, as the logs state.",
                             "网络故障：日志表明通往 {who} 的传输失败。"),
    "stated-peer-gone": ("Dead peer: {who} went away, and the others lost their connections to it.",
                         "对端消失：{who} 已离开，其他进程与它的连接随之断开。"),
    "stated-crash": ("Crash: {who} died of its own error; the others can only time out.",
                     "崩溃：{who} 因自身错误退出；其他进程只能等到超时。"),
    "stated-missing-rank": ("Missing rank: {who} never arrived, as the logs state.",
                            "成员缺失：日志表明 {who} 始终没有到达。"),
    "stated-collective-mismatch": ("Collective mismatch: {who} called a different collective than its "
                                   "group, as the logs state.",
                                   "集合通信失配：日志表明 {who} 调用了与组内不同的集合通信。"),
}
_STATED_SKIPS_WHY = ("stated-network-fault", "stated-missing-rank")

_WHY = {
    "p2p_circular_wait": (
        "A blocking send completes only when its peer posts the matching recv, whatever the tensor "
        "size. Every rank on the cycle called send (or recv) first, so none of them ever reaches the "
        "call its peer needs.",
        "阻塞的 send 只有在对端发出匹配的 recv 后才能完成，与张量大小无关。环上的每个 Rank 都先调用了 send（或 recv），"
        "因此没有一方能走到对端所需要的那个调用。"),
    "circular_wait": (
        "Each rank on the cycle is blocked in a call that needs the next one, which is itself blocked "
        "in a different call or group: the calls were issued in an order that differs between ranks.",
        "环上每个 Rank 阻塞在需要下一个 Rank 参与的调用中，而后者阻塞在另一个调用或通信组中：各 Rank 发起调用的顺序不一致。"),
    "cross_stream_cycle": (
        "Computation and communication run on different CUDA streams; each stream's head waits on an "
        "event that only the other stream will record, so the GPU scheduler can run neither.",
        "计算与通信运行在不同的 CUDA Stream 上；每条流的队首都在等待只有另一条流才会 record 的 Event，GPU 调度器两条都无法推进。"),
    "collective_mismatch": (
        "All ranks of a process group must call the same collectives in the same order. At this "
        "position they disagree, so each side waits for partners that are inside a different call.",
        "同一进程组的所有 Rank 必须以相同顺序调用相同的集合通信。在这个位置它们不一致，每一方都在等待正处于另一个调用中的伙伴。"),
    "dead_rank": (
        "A collective or point-to-point call needs every participant; a participant that exited will "
        "never arrive, and without a timeout the others wait forever.",
        "集合通信或点对点通信需要所有参与方；已退出的参与方永远不会到达，没有超时的话其他 Rank 会永远等待。"),
    "missing_rank": (
        "The waiting ranks are inside a collective the awaited rank has not called: it is alive but "
        "busy elsewhere (computation, data loading, I/O, or an early exit from the loop).",
        "等待中的 Rank 已进入集合通信，而被等待的 Rank 尚未调用它：它仍然存活，但在做别的事（计算、数据加载、I/O，或提前退出了循环）。"),
    "network_fault": (
        "Everyone joined the same call, so the ranks agree; the transport between them failed, and "
        "later errors on other ranks are knock-on effects of the first.",
        "所有人都进入了同一个调用，说明各 Rank 的调用一致；是它们之间的传输失败了，其他 Rank 上较晚的错误只是第一个错误的连锁反应。"),
}

# Which of the three ways a communication deadlock forms (the seed's causal
# chain) a lead finding is — or that it is none of them.
_CAUSE = {
    "p2p_circular_wait": ("P2P circular wait — the first of the three ways a communication deadlock forms "
                          "(P2P circular wait, collective mismatch, cross-stream dependency).",
                          "点对点循环等待——通信死锁三种成因（点对点循环等待、集合通信失配、跨 Stream 依赖）中的第一种。"),
    "circular_wait": ("circular wait across calls or groups — a variant of the P2P circular wait, through "
                      "collectives issued in a different order (of the three: P2P circular wait, collective "
                      "mismatch, cross-stream dependency).",
                      "跨调用或通信组的循环等待——点对点循环等待的变体，经由顺序不一致的集合通信"
                      "（三种成因：点对点循环等待、集合通信失配、跨 Stream 依赖）。"),
    "collective_mismatch": ("collective mismatch — the second of the three ways a communication deadlock "
                            "forms (P2P circular wait, collective mismatch, cross-stream dependency).",
                            "集合通信失配——通信死锁三种成因（点对点循环等待、集合通信失配、跨 Stream 依赖）中的第二种。"),
    "cross_stream_cycle": ("cross-stream dependency — the third of the three ways a communication deadlock "
                           "forms (P2P circular wait, collective mismatch, cross-stream dependency).",
                           "跨 Stream 依赖——通信死锁三种成因（点对点循环等待、集合通信失配、跨 Stream 依赖）中的第三种。"),
    "missing_rank": ("none of the three deadlock patterns (P2P circular wait, collective mismatch, "
                     "cross-stream dependency): the waiting ranks agree, one rank is simply elsewhere.",
                     "不属于三种死锁模式（点对点循环等待、集合通信失配、跨 Stream 依赖）：等待的 Rank 之间是一致的，"
                     "只是有一个 Rank 在别处。"),
    "dead_rank": ("none of the three deadlock patterns (P2P circular wait, collective mismatch, cross-stream "
                  "dependency): a participant is gone.",
                  "不属于三种死锁模式（点对点循环等待、集合通信失配、跨 Stream 依赖）：有参与方已经不在了。"),
    "network_fault": ("none of the three deadlock patterns (P2P circular wait, collective mismatch, "
                      "cross-stream dependency): the calls agree and the transport failed.",
                      "不属于三种死锁模式（点对点循环等待、集合通信失配、跨 Stream 依赖）：调用一致，是传输层失败。"),
}
MAX_PLACES = 4
_WHO = {"deadlock": "on_cycle", "collective_mismatch": "odd_one", "network_fault": "first_error"}

_LABELS = {
    "en": {"evidence": "Evidence", "next": "Next", "decided": "Judged stuck because",
           "where": "Where they are", "on_cycle": "On the cycle", "awaited": "Who everyone waits for",
           "odd_one": "The rank(s) calling something else", "first_error": "Whose error came first",
           "positions": "What is stuck", "cause": "Cause", "detail": "Why rank {ranks} is there",
           "knock_on": "Knock-on effects (consequences, not causes)",
           "more": "… and {n} more", "none": "(no file evidence)",
           "healthy": "No hang found: {n} rank(s) examined, none is blocked in a way that cannot resolve.",
           "healthy_wait": " {w} rank(s) are waiting on ranks that are still working, which is normal "
                           "progress in a single snapshot; rerun with --hung if the job is stuck.",
           "inconclusive": "Inconclusive: the artifacts show no rank waiting on another, so there is "
                           "nothing to explain the hang.",
           "inconclusive_empty": "Inconclusive: no rank states were found in the artifacts.",
           "decide": "What would decide it",
           "stuck": "{s} of {n} rank(s) can never progress.",
           "waiting": "{w} of {n} rank(s) wait for others.",
           "unknown_groups": " {n} rank(s) ({ranks}) are blocked in collectives on process groups that the "
                             "stack dumps show only as objects, and no log or Flight Recorder entry names: "
                             "whom they wait for, and so whether their waits form a cycle, cannot be told.",
           "all_joined": " {b} rank(s) are inside communication calls that every member has joined, yet "
                         "the job is stuck: suspect the transport (network fault) and collect "
                         "NCCL_DEBUG=INFO logs or Flight Recorder dumps."},
    "zh": {"evidence": "证据", "next": "下一步", "decided": "判定为卡住的依据",
           "where": "各自所在位置", "on_cycle": "环上的 Rank", "awaited": "所有人在等待谁",
           "odd_one": "调用与众不同的 Rank", "first_error": "最早出错的 Rank",
           "positions": "卡在哪里", "cause": "原因类别", "detail": "Rank {ranks} 为何在那里",
           "knock_on": "连锁反应（是结果，不是原因）",
           "more": "……另有 {n} 条", "none": "（无文件证据）",
           "healthy": "未发现挂起：检查了 {n} 个 Rank，没有 Rank 处于无法解除的阻塞中。",
           "healthy_wait": "其中 {w} 个 Rank 正在等待仍在工作的 Rank，单个快照中这属于正常推进；若作业确实卡住，请加 --hung 重新分析。",
           "inconclusive": "无法判定：产物中没有任何 Rank 在等待其他 Rank，无法解释挂起。",
           "inconclusive_empty": "无法判定：产物中没有找到任何 Rank 的状态。",
           "decide": "可以判定的产物",
           "stuck": "{n} 个 Rank 中有 {s} 个永远无法推进。",
           "waiting": "{n} 个 Rank 中有 {w} 个在等待其他 Rank。",
           "unknown_groups": "有 {n} 个 Rank（{ranks}）阻塞在集合通信中，其通信组在栈里只显示为对象，日志和 Flight Recorder "
                             "也没有写明：无法判断它们在等谁，也就无法判断这些等待是否成环。",
           "all_joined": "有 {b} 个 Rank 处于所有成员都已加入的通信调用中，但作业仍然卡住：怀疑是传输层（网络故障），"
                         "请收集 NCCL_DEBUG=INFO 日志或 Flight Recorder dump。"},
}


def narrative(report, lang: str = "en") -> str:
    zh = lang == "zh"
    labels = _LABELS["zh" if zh else "en"]
    lead = report.root_cause.finding
    n_ranks = len(report.incident.ranks)
    if lead is None:
        if report.verdict == "inconclusive":
            text = labels["inconclusive_empty"] if not n_ranks else labels["inconclusive"]
            blocked = sum(1 for s in report.incident.ranks.values() if s.is_blocked)
            blind = confidence.unknown_group_ranks(report.incident)
            if blind:
                text += labels["unknown_groups"].format(ranks=compact(blind), n=len(blind))
            elif blocked:
                text += labels["all_joined"].format(b=blocked)
            return text + _would_decide(report, labels, zh)
        text = labels["healthy"].format(n=n_ranks)
        waiting = len(report.analysis.waiting)
        if waiting and not report.incident.stuck:
            text += labels["healthy_wait"].format(w=waiting)
        return text

    cycle = report.cycles[0] if report.cycles else []
    headline = (_STATED_HEADLINE.get(lead.rule) or _HEADLINE.get(lead.kind)
                or _HEADLINE.get(report.verdict, ("{ranks}", "{ranks}")))[1 if zh else 0]
    lines = [headline.format(ranks=compact(report.culprit_ranks), who=_who(report, zh), cycle=path_label(cycle))]
    incident = report.incident
    # What is stuck: where the stuck (or, waiting on a rank that is elsewhere, the waiting) ranks are.
    culprit_set = set(report.culprit_ranks)
    stuck_ranks = sorted(n for n in report.analysis.stuck if isinstance(n, int))
    waiting = sorted(n for n in report.analysis.waiting if isinstance(n, int) and n not in culprit_set)
    if stuck_ranks or waiting:
        if stuck_ranks:
            text = labels["stuck"].format(s=len(stuck_ranks), n=n_ranks)
            shown = stuck_ranks if report.verdict == "deadlock" else [r for r in stuck_ranks
                                                                      if r not in culprit_set]
        else:
            text = labels["waiting"].format(w=len(waiting), n=n_ranks)
            shown = waiting
        places = _places(incident, shown, zh)
        if places:
            text += ("；".join(places) + "。") if zh else (" " + "; ".join(places) + ".")
        lines.append(f"{labels['positions']}: {text}")
    # Who: the culprits, each with where its own code is and the file that shows it.
    title = labels[_WHO.get(report.verdict, "awaited")]
    culprits = [r for r in report.culprit_ranks if r in incident.ranks]
    if culprits:
        lines.append(f"{title}:")
        for rank in culprits[:MAX_PLACES]:
            lines.append("  - " + _whereabouts(incident.ranks[rank], zh, incident.groups))
        if len(culprits) > MAX_PLACES:
            lines.append("  " + labels["more"].format(n=len(culprits) - MAX_PLACES))
    elsewhere = [c for c in report.culprits if c.rank is None or c.rank not in incident.ranks]
    if elsewhere:
        if not culprits:
            lines.append(f"{title}:")
        lines.extend(f"  - {c.label()}" for c in elsewhere[:MAX_PLACES])
    # Why: the chain the lead rule found, what makes it hang, which cause it is.
    lines.append(lead.message_zh if zh and lead.message_zh else lead.message)
    why = None if lead.rule in _STATED_SKIPS_WHY else _WHY.get(lead.kind)
    if why:
        lines.append(why[1 if zh else 0])
    cause = None if lead.rule in _STATED_SKIPS_WHY else _CAUSE.get(lead.kind)
    if cause:
        lines.append(f"{labels['cause']}: {cause[1 if zh else 0]}")
    for finding in report.findings:
        if finding.detail_of:
            message = finding.message_zh if zh and finding.message_zh else finding.message
            lines.append(labels["detail"].format(ranks=compact(finding.ranks)) + f": {message}"
                         + _cites(finding.evidence))
    if report.verdict in RING_VERDICTS:  # the links a stalled rank sits on, from NCCL's rings
        for rank in report.culprit_ranks[:3]:
            lines.extend(topology.describe(link, zh)
                         for link in topology.ring_links(incident, rank)[:topology.MAX_GROUPS])
    if report.decided_by:
        reasons = "; ".join(_signal_text(s, zh) for s in report.decided_by[:3])
        lines.append(f"{labels['decided']}: {reasons}{'。' if zh else '.'}")
    knock_on = [f for f in report.findings if f.symptom_of]
    if knock_on:
        lines.append(f"{labels['knock_on']}:")
        for finding in knock_on[:MAX_PLACES]:
            message = finding.message_zh if zh and finding.message_zh else finding.message
            lines.append(f"  - {finding.rule}: {_clip(message)}" + _cites(finding.evidence))
        if len(knock_on) > MAX_PLACES:
            lines.append("  " + labels["more"].format(n=len(knock_on) - MAX_PLACES))
    lines.append(f"{labels['evidence']}:")
    if lead.evidence:
        for item in lead.evidence[:MAX_EVIDENCE]:
            lines.append(f"  - {item.cite()}: {_clip(item.text)}")
        if len(lead.evidence) > MAX_EVIDENCE:
            lines.append("  " + labels["more"].format(n=len(lead.evidence) - MAX_EVIDENCE))
    else:
        lines.append("  " + labels["none"])
    hint = lead.hint_zh if zh and lead.hint_zh else lead.hint
    if hint:
        lines.append(f"{labels['next']}: {hint}")
    return "\n".join(lines)


def _who(report, zh: bool) -> str:
    """'rank 1,3' — or, when the culprits are known only by host or address, those."""
    if report.culprit_ranks:
        return f"{'Rank' if zh else 'rank'} {compact(report.culprit_ranks)}"
    if report.culprits:
        return "; ".join(c.label() for c in report.culprits[:3])
    return "某个未能识别的进程" if zh else "an unidentified process"


def _would_decide(report, labels, zh: bool) -> str:
    sure = report.confidence
    if sure is None or not sure.missing:
        return ""
    wanted = sure.missing_zh if zh and sure.missing_zh else sure.missing
    return "\n" + labels["decide"] + ":\n" + "\n".join(f"  - {item}" for item in wanted)


def _places(incident, ranks: list[int], zh: bool) -> list[str]:
    """'ranks 0,1,3 in all_reduce group 0 seq 4', grouped, largest first.
    Only the places shown are described: a 100,000-rank ring has as many
    places as ranks (each sends to its own peer)."""
    groups: dict[tuple, list[int]] = {}
    for rank in ranks:
        state = incident.ranks.get(rank)
        if state is None:
            continue
        op = state.current_op
        key = (op.op, op.group, op.seq, op.peers) if state.is_blocked else (state.activity,)
        groups.setdefault(key, []).append(rank)
    shown = heapq.nsmallest(MAX_PLACES, groups.items(), key=lambda item: (-len(item[1]), item[1][0]))
    ordered = []
    for key, members in shown:
        place = key[0] if len(key) == 1 else describe_op(incident.ranks[members[0]].current_op, incident.groups)
        ordered.append((place, members))
    if zh:
        out = [f"Rank {compact(members)} 在 {place}" for place, members in ordered]
    else:
        out = [f"rank{'s' if len(members) > 1 else ''} {compact(members)} in {place}"
               for place, members in ordered]
    if len(groups) > MAX_PLACES:
        out.append("…")
    return out


def _whereabouts(state, zh: bool, groups=None) -> str:
    """'rank 2: data_loading — Condition.wait (threading.py:327) ← load_next_batch (train.py:190) [rank2.locals.txt:5]'."""
    op = state.current_op
    if state.is_dead:
        what = "已退出" if zh else "exited"
    elif op is not None and state.is_blocked:
        what = describe_op(op, groups)
    else:
        what = state.activity
    text = f"{'Rank' if zh else 'rank'} {state.rank}: {what}"
    if state.why:
        text += f" — {_clip(state.why, 160)}"
    if state.evidence is not None:
        text += f" [{state.evidence.cite()}]"
    return text


def _cites(evidence) -> str:
    return f" [{', '.join(e.cite() for e in evidence[:2])}]" if evidence else ""


def _clip(text: str, width: int = 200) -> str:
    """Log lines can run to kilobytes (a fingerprint mismatch is one line)."""
    text = text.strip()
    return text if len(text) <= width else text[:width - 1] + "…"


def _signal_text(signal, zh: bool) -> str:
    where = f" ({signal.evidence.cite()})" if signal.evidence else ""
    return f"{signal.detail_zh if zh and signal.detail_zh else signal.detail}{where}"
