"""The root-cause narrative, in English and Chinese.

It reads like an on-call engineer's incident note: what is stuck, who
everyone waits for, why that hangs, the evidence with file:line, and what to
do next. Deterministic: the same report gives the same words.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import replace

from . import confidence, topology
from .model import path_label
from .once import Said
from .rules._semantics import describe_op
from .ranges import compact
from .words import LANGS, lang_of, localized

MAX_EVIDENCE = 6
RING_VERDICTS = ("missing_rank", "dead_rank", "network_fault")

def _by_lang(pairs: dict) -> dict:
    """{key: (English, Chinese)} as one table per language: {lang: {key: words}}.
    The pairs keep each sentence beside its translation."""
    return {lang: {key: pair[index] for key, pair in pairs.items()} for index, lang in enumerate(LANGS)}


_HEADLINE = _by_lang({
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
})

# Verdicts read from what a message states (rules/stated_cause.py): the
# rank states behind the generic headlines may be unknown.
_STATED_HEADLINE = _by_lang({
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
})
_STATED_SKIPS_WHY = ("stated-network-fault", "stated-missing-rank")

_WHY = _by_lang({
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
})

# Which of the three ways a communication deadlock forms (the seed's causal
# chain) a lead finding is — or that it is none of them.
_CAUSE = _by_lang({
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
})
MAX_PLACES = 4
_WHO = {"deadlock": "on_cycle", "collective_mismatch": "odd_one", "network_fault": "first_error"}

_LABELS = {
    "en": {"rank": "rank", "exited": "exited", "sep": "; ", "end": ".", "stuck_join": "; ",
           "places": " {places}.", "rank_in": "rank {ranks} in {place}", "ranks_in": "ranks {ranks} in {place}",
           "group_unknown": " on an unknown group", "unidentified": "an unidentified process",
           "evidence": "Evidence", "next": "Next", "decided": "Judged stuck because",
           "where": "Where they are", "on_cycle": "On the cycle", "awaited": "Who everyone waits for",
           "odd_one": "The rank(s) calling something else", "first_error": "Whose error came first",
           "positions": "What is stuck", "cause": "Cause", "detail": "Why rank {ranks} is there",
           "knock_on": "Knock-on effects (consequences, not causes)",
           "more": "… and {n} more", "none": "(no file evidence)", "see_above": "see above",
           "healthy": "No hang found: {n} rank(s) examined, none is blocked in a way that cannot resolve.",
           "healthy_wait": " {w} rank(s) are waiting on ranks that are still working, which is normal "
                           "progress in a single snapshot; rerun with --hung if the job is stuck.",
           "inconclusive": "Inconclusive: the artifacts show no rank waiting on another, so there is "
                           "nothing to explain the hang.",
           "inconclusive_empty": "Inconclusive: no rank states were found in the artifacts.",
           "inconclusive_unseen": "Inconclusive: {w} rank(s) wait for rank {ranks}, which no artifact shows at "
                                  "work (nothing describes it, only records that never show some of its calls "
                                  "place it, or its stack dump shows it idle, not running): whether the wait "
                                  "resolves, and so whether the job is stuck, is not seen.",
           "decide": "What would decide it",
           "stuck": "{s} of {n} rank(s) can never progress.",
           "waiting": "{w} of {n} rank(s) wait for others.",
           "unknown_groups": " {n} rank(s) ({ranks}) are blocked in collectives on process groups that the "
                             "stack dumps show only as objects, and no log or Flight Recorder entry names: "
                             "whom they wait for, and so whether their waits form a cycle, cannot be told.",
           "unlisted_groups": " {n} rank(s) ({ranks}) wait in calls on group {groups}, whose members no "
                              "artifact lists (the ranks it names are group-local numbers): whom they wait for "
                              "is not guessed.",
           "all_joined": " {b} rank(s) are inside communication calls that every member has joined, yet "
                         "the job is stuck: suspect the transport (network fault) and collect "
                         "NCCL_DEBUG=INFO logs or Flight Recorder dumps."},
    "zh": {"rank": "Rank", "exited": "已退出", "sep": "；", "end": "。", "stuck_join": "；",
           "places": "{places}。", "rank_in": "Rank {ranks} 在 {place}", "ranks_in": "Rank {ranks} 在 {place}",
           "group_unknown": "（通信组未知）", "unidentified": "某个未能识别的进程",
           "evidence": "证据", "next": "下一步", "decided": "判定为卡住的依据",
           "where": "各自所在位置", "on_cycle": "环上的 Rank", "awaited": "所有人在等待谁",
           "odd_one": "调用与众不同的 Rank", "first_error": "最早出错的 Rank",
           "positions": "卡在哪里", "cause": "原因类别", "detail": "Rank {ranks} 为何在那里",
           "knock_on": "连锁反应（是结果，不是原因）",
           "more": "……另有 {n} 条", "none": "（无文件证据）", "see_above": "见上文",
           "healthy": "未发现挂起：检查了 {n} 个 Rank，没有 Rank 处于无法解除的阻塞中。",
           "healthy_wait": "其中 {w} 个 Rank 正在等待仍在工作的 Rank，单个快照中这属于正常推进；若作业确实卡住，请加 --hung 重新分析。",
           "inconclusive": "无法判定：产物中没有任何 Rank 在等待其他 Rank，无法解释挂起。",
           "inconclusive_empty": "无法判定：产物中没有找到任何 Rank 的状态。",
           "inconclusive_unseen": "无法判定：有 {w} 个 Rank 在等待 Rank {ranks}，但没有任何产物显示它在工作（没有产物描述它，"
                                  "只有不记录其部分调用的记录能定位它，或它的栈 dump 显示它处于空闲、并未运行）："
                                  "看不出这一等待是否会结束，也就无法判断作业是否卡住。",
           "decide": "可以判定的产物",
           "stuck": "{n} 个 Rank 中有 {s} 个永远无法推进。",
           "waiting": "{n} 个 Rank 中有 {w} 个在等待其他 Rank。",
           "unknown_groups": "有 {n} 个 Rank（{ranks}）阻塞在集合通信中，其通信组在栈里只显示为对象，日志和 Flight Recorder "
                             "也没有写明：无法判断它们在等谁，也就无法判断这些等待是否成环。",
           "unlisted_groups": "有 {n} 个 Rank（{ranks}）在通信组 {groups} 的调用中等待，但没有任何产物列出该组的成员"
                              "（其中的 Rank 编号是组内编号）：不猜测它们在等谁。",
           "all_joined": "有 {b} 个 Rank 处于所有成员都已加入的通信调用中，但作业仍然卡住：怀疑是传输层（网络故障），"
                         "请收集 NCCL_DEBUG=INFO 日志或 Flight Recorder dump。"},
}


def narrative(report, lang: str = "en") -> str:
    """The note, section by section; each section returns its lines (none
    when it has nothing to say), in the words of `lang`'s table."""
    story = _Story(report, lang_of(lang))
    if story.lead is None:
        return _undecided(story)
    sections = (_headline, _what_is_stuck, _who_section, _lead_message, _why_it_hangs, _cause, _details,
                _ring_links, _decided, _knock_ons, _evidence, _next)
    lines = []
    for section in sections:
        for line in section(story):
            story.said.add(line)
            lines.append(line)
    return "\n".join(lines)


class _Story:
    """What every section reads: the report, its language and words, and what
    the sections say about ranks, so no section says it twice."""

    def __init__(self, report, lang: str):
        self.report, self.lang = report, lang
        self.labels = _LABELS[lang]
        self.lead = report.root_cause.finding
        self.incident = report.incident
        # The culprits whose whereabouts "Who" lists, each with its state's why.
        self.described = described_ranks(report)
        self.said = Said()  # the sentences of the sections so far

    def once(self, text: str) -> str:
        """`text` less the sentences said before (a catalogue explanation is
        both a finding's message and a stuck signal's detail)."""
        text = self.said.unsaid(text, self.labels["see_above"])
        self.said.add(text)
        return text

    def local(self, thing, name: str):
        """`thing.name` in the story's language (forensics.words.localized)."""
        return localized(thing, name, self.lang)

    def message(self, finding) -> str:
        return self.local(finding, "message")


def section_labels(lang: str) -> tuple[str, ...]:
    """The words that open the narrative's sections ("Judged stuck because",
    "Why rank {ranks} is there"), for renderers that set them apart."""
    words = _LABELS[lang_of(lang)]
    return tuple(words[key] for key in ("positions", "cause", "decided", "evidence", "next", "knock_on", "decide",
                                        "on_cycle", "awaited", "odd_one", "first_error", "detail"))


def described_ranks(report) -> list[int]:
    """The culprits whose place the narrative's "Who" lines describe."""
    return [r for r in report.culprit_ranks if r in report.incident.ranks][:MAX_PLACES]


def told(report) -> frozenset[int]:
    """The findings (by id) whose message the narrative already tells: the
    lead, every detail of a finding, the knock-ons it lists. A report quoting
    the narrative need not repeat them."""
    lead = report.root_cause.finding
    if lead is None:
        return frozenset()
    knock_on = [f for f in report.findings if f.symptom_of][:MAX_PLACES]
    return frozenset(id(f) for f in [lead, *[f for f in report.findings if f.detail_of], *knock_on])


def _undecided(story: _Story) -> str:
    report, labels = story.report, story.labels
    n_ranks = len(report.incident.ranks)
    if report.verdict == "inconclusive":
        text = labels["inconclusive_empty"] if not n_ranks else labels["inconclusive"]
        blocked = sum(1 for s in report.incident.ranks.values() if s.is_blocked)
        blind = confidence.unknown_group_ranks(report.incident)
        unlisted = confidence.unlisted_group_ranks(report.incident)
        unseen = confidence.awaited_unseen(report.incident, report.analysis) if not report.incident.stuck else []
        if unseen:
            text = labels["inconclusive_unseen"].format(w=len(report.analysis.waiting), ranks=compact(unseen))
        elif blind:
            text += labels["unknown_groups"].format(ranks=compact(blind), n=len(blind))
        elif unlisted:
            ranks = sorted(unlisted)
            text += labels["unlisted_groups"].format(ranks=compact(ranks), n=len(ranks),
                                                     groups=", ".join(sorted(set(unlisted.values()))))
        elif blocked:
            text += labels["all_joined"].format(b=blocked)
        return text + _would_decide(story)
    text = labels["healthy"].format(n=n_ranks)
    waiting = len(report.analysis.waiting)
    if waiting and not report.incident.stuck:
        text += labels["healthy_wait"].format(w=waiting)
    return text


def _headline(story: _Story) -> list[str]:
    report, lead = story.report, story.lead
    cycle = report.cycles[0] if report.cycles else []
    headline = (_STATED_HEADLINE[story.lang].get(lead.rule) or _HEADLINE[story.lang].get(lead.kind)
                or _HEADLINE[story.lang].get(report.verdict, "{ranks}"))
    return [headline.format(ranks=compact(report.culprit_ranks), who=_who(story), cycle=path_label(cycle))]


def _what_is_stuck(story: _Story) -> list[str]:
    """Where the stuck (or, waiting on a rank that is elsewhere, the waiting) ranks are."""
    report, labels = story.report, story.labels
    n_ranks = len(report.incident.ranks)
    culprit_set = set(report.culprit_ranks)
    stuck_ranks = sorted(n for n in report.analysis.stuck if isinstance(n, int))
    waiting = sorted(n for n in report.analysis.waiting if isinstance(n, int) and n not in culprit_set)
    if not stuck_ranks and not waiting:
        return []
    if stuck_ranks:
        text = labels["stuck"].format(s=len(stuck_ranks), n=n_ranks)
        shown = stuck_ranks if report.verdict == "deadlock" else [r for r in stuck_ranks if r not in culprit_set]
    else:
        text = labels["waiting"].format(w=len(waiting), n=n_ranks)
        shown = waiting
    places = _places(story.incident, shown, labels)
    if places:
        text += labels["places"].format(places=labels["sep"].join(places))
    return [f"{labels['positions']}: {text}"]


def _who_section(story: _Story) -> list[str]:
    """The culprits, each with where its own code is and the file that shows it."""
    report, labels, incident = story.report, story.labels, story.incident
    title = labels[_WHO.get(report.verdict, "awaited")]
    culprits = [r for r in report.culprit_ranks if r in incident.ranks]
    lines = []
    if culprits:
        lines.append(f"{title}:")
        lines += ["  - " + _whereabouts(incident.ranks[rank], labels, incident.groups) for rank in story.described]
        if len(culprits) > MAX_PLACES:
            lines.append("  " + labels["more"].format(n=len(culprits) - MAX_PLACES))
    elsewhere = [c for c in report.culprits if c.rank is None or c.rank not in incident.ranks]
    if elsewhere:
        if not culprits:
            lines.append(f"{title}:")
        lines.extend(f"  - {c.label()}" for c in elsewhere[:MAX_PLACES])
    return lines


def _lead_message(story: _Story) -> list[str]:
    """The chain the lead rule found, less what other sections say: the
    places "Who" lists, and the stuck evidence "Judged stuck because" cites."""
    message = story.message(story.lead)
    if story.report.decided_by:
        message = _drop_sentence_holding(message, story.labels["stuck_join"].join(
            story.local(s, "detail") for s in story.report.decided_by[:3]))
    listed = {r for r in story.report.culprit_ranks if r in story.incident.ranks}
    return [without_described(message, story.incident, listed)]


def _why_it_hangs(story: _Story) -> list[str]:
    why = None if story.lead.rule in _STATED_SKIPS_WHY else _WHY[story.lang].get(story.lead.kind)
    return [why] if why else []


def _cause(story: _Story) -> list[str]:
    cause = None if story.lead.rule in _STATED_SKIPS_WHY else _CAUSE[story.lang].get(story.lead.kind)
    return [f"{story.labels['cause']}: {cause}"] if cause else []


def _details(story: _Story) -> list[str]:
    return [story.labels["detail"].format(ranks=compact(f.ranks)) + f": {story.once(story.message(f))}"
            + _cites(f.evidence, story.message(f)) for f in story.report.findings if f.detail_of]


def _ring_links(story: _Story) -> list[str]:
    """The links a stalled rank sits on, from NCCL's rings."""
    if story.report.verdict not in RING_VERDICTS:
        return []
    return [topology.describe(link, story.lang == "zh") for rank in story.report.culprit_ranks[:3]
            for link in topology.ring_links(story.incident, rank)[:topology.MAX_GROUPS]]


def _decided(story: _Story) -> list[str]:
    signals = story.report.decided_by
    if not signals:
        return []
    # The same statement in several files is one reason citing them all.
    same: dict[str, list] = {}
    for signal in signals[:3]:
        same.setdefault(story.local(signal, "detail"), []).append(signal)
    reasons = "; ".join(_signal_text(detail, [s.evidence for s in group if s.evidence], story)
                        for detail, group in same.items())
    return [f"{story.labels['decided']}: {reasons}{story.labels['end']}"]


def _knock_ons(story: _Story) -> list[str]:
    knock_on = [f for f in story.report.findings if f.symptom_of]
    if not knock_on:
        return []
    labels = story.labels
    lines = [f"{labels['knock_on']}:"]
    for finding in knock_on[:MAX_PLACES]:
        message = story.message(finding)
        lines.append(f"  - {finding.rule}: {_clip(story.once(message))}" + _cites(finding.evidence, message))
    if len(knock_on) > MAX_PLACES:
        lines.append("  " + labels["more"].format(n=len(knock_on) - MAX_PLACES))
    return lines


def _evidence(story: _Story) -> list[str]:
    lead, labels = story.lead, story.labels
    lines = [f"{labels['evidence']}:"]
    if not lead.evidence:
        return lines + ["  " + labels["none"]]
    cited = list(dict.fromkeys(lead.evidence))  # a line cited twice is shown once
    lines += [f"  - {item.cite()}: {_clip(item.text)}" for item in cited[:MAX_EVIDENCE]]
    if len(cited) > MAX_EVIDENCE:
        lines.append("  " + labels["more"].format(n=len(cited) - MAX_EVIDENCE))
    return lines


def _next(story: _Story) -> list[str]:
    hint = story.local(story.lead, "hint")
    return [f"{story.labels['next']}: {hint}"] if hint else []


_OPEN, _CLOSE = "(（", ")）"


def _groups(text: str):
    """(start, end) of each top-level parenthesis of `text`, ASCII or full width."""
    depth, start = 0, 0
    for at, char in enumerate(text):
        if char in _OPEN:
            if depth == 0:
                start = at
            depth += 1
        elif char in _CLOSE and depth:
            depth -= 1
            if depth == 0:
                yield start, at + 1


_DESCRIBED = re.compile(r"(?:^|, )rank (\d+): ")


def without_described(message: str, incident, listed: set[int]) -> str:
    """The message without a parenthesis that only describes, as `rank N:
    <its state>…`, ranks the "Who" lines list already."""
    for start, end in reversed(list(_groups(message))):
        inner = message[start + 1:end - 1]
        found = [(int(m.group(1)), m.end()) for m in _DESCRIBED.finditer(inner)]
        if not inner.startswith("rank ") or not found or not {r for r, _ in found} <= listed:
            continue
        if all(inner.startswith(incident.ranks[r].activity, at) for r, at in found):
            cut = start - 1 if start and message[start - 1] == " " else start
            message = message[:cut] + message[end:]
    return message


def _drop_sentence_holding(message: str, part: str) -> str:
    """The message without the sentence that holds `part` whole."""
    at = message.find(part) if len(part) > 8 else -1
    if at < 0:
        return message
    start = max(message.rfind(". ", 0, at) + 1, message.rfind("。", 0, at) + 1, 0)
    after = at + len(part)
    stops = [i for i in (message.find(". ", after), message.find("。", after)) if i >= 0]
    stop = min(stops) if stops else len(message) - 1
    kept = (message[:start] + message[stop + 1:]).rstrip()
    return kept if kept.strip() else message


def _who(story: _Story) -> str:
    """'rank 1,3' — or, when the culprits are known only by host or address, those."""
    report = story.report
    if report.culprit_ranks:
        return f"{story.labels['rank']} {compact(report.culprit_ranks)}"
    if report.culprits:
        return "; ".join(c.label() for c in report.culprits[:3])
    return story.labels["unidentified"]


def _would_decide(story: _Story) -> str:
    sure = story.report.confidence
    if sure is None or not sure.missing:
        return ""
    wanted = story.local(sure, "missing")
    return "\n" + story.labels["decide"] + ":\n" + "\n".join(f"  - {item}" for item in wanted)


def _places(incident, ranks: list[int], labels: dict) -> list[str]:
    """'ranks 0,1,3 in all_reduce group 0 seq 4', grouped, largest first.
    Only the places shown are described: a 100,000-rank ring has as many
    places as ranks (each sends to its own peer)."""
    groups: dict[tuple, list[int]] = {}
    for rank in ranks:
        state = incident.ranks.get(rank)
        if state is None:
            continue
        op = state.current_op
        key = (op.op, op.group, op.seq, op.peers, op.group_known) if state.is_blocked else (state.activity,)
        groups.setdefault(key, []).append(rank)
    shown = heapq.nsmallest(MAX_PLACES, groups.items(), key=lambda item: (-len(item[1]), item[1][0]))
    out = []
    for key, members in shown:
        place = key[0] if len(key) == 1 else op_text(incident.ranks[members[0]].current_op, incident.groups, labels)
        out.append(labels["ranks_in" if len(members) > 1 else "rank_in"].format(ranks=compact(members), place=place))
    if len(groups) > MAX_PLACES:
        out.append("…")
    return out


def op_text(op, groups, labels: dict) -> str:
    """The call in words: `send to 1 group 0 seq 4`; a call whose group no
    artifact names says so (a stack dump shows the call, not its group)."""
    if op is not None and not op.group_known:
        return describe_op(replace(op, group="", group_known=True), groups) + labels["group_unknown"]
    return describe_op(op, groups)


def _whereabouts(state, labels: dict, groups=None) -> str:
    """'rank 2: data_loading — Condition.wait (threading.py:327) ← load_next_batch (train.py:190) [rank2.locals.txt:5]'."""
    op = state.current_op
    if state.is_dead:
        what = labels["exited"]
    elif op is not None and state.is_blocked:
        what = op_text(op, groups, labels)
    else:
        what = state.activity
    text = f"{labels['rank']} {state.rank}: {what}"
    if state.why:
        text += f" — {_clip(state.why, 160)}"
    if state.evidence is not None and state.evidence.cite() not in state.why:
        text += f" [{state.evidence.cite()}]"
    return text


def _cites(evidence, said: str = "") -> str:
    """` [a.log:3, b.log:9]`: the first two citations, less those `said` already holds."""
    cites = [e.cite() for e in evidence[:2] if e.cite() not in said]
    return f" [{', '.join(cites)}]" if cites else ""


def _clip(text: str, width: int = 200) -> str:
    """Log lines can run to kilobytes (a fingerprint mismatch is one line)."""
    text = text.strip()
    return text if len(text) <= width else text[:width - 1] + "…"


def _signal_text(detail: str, evidence: list, story: _Story) -> str:
    """A stuck signal and its citations; a detail ending in a parenthesis
    takes them inside it (`(c10d-nccl-watchdog-timeout, train.log:31)`)."""
    detail = story.once(detail)
    if not evidence:
        return detail
    cite = ", ".join(dict.fromkeys(e.cite() for e in evidence))
    if detail.endswith(")"):
        return f"{detail[:-1]}, {cite})"
    if detail.endswith("）"):
        return f"{detail[:-1]}，{cite}）"
    return f"{detail} ({cite})"
