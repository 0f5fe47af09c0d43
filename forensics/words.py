"""Language at the edges: which words a report is written in, and the words
of the facts the model names by key.

The model and ingest carry facts (kinds, ranks, numbers, names); a renderer
or the narrative turns them into English or Chinese here, from one table per
language. A finding's message is a rule's own words: rules write them in
English and, where they have them, in Chinese (`message_zh`); `localized`
is the one place that picks between the two.
"""

from __future__ import annotations

import re

from .ranges import compact

LANGS = ("en", "zh")


def lang_of(lang: str) -> str:
    """The language a report is written in: Chinese when asked for, else English."""
    return "zh" if lang == "zh" else "en"


def localized(thing, name: str, lang: str):
    """`thing.name` in `lang`: a stuck signal said by its key; otherwise the
    Chinese twin (`name_zh`) where its writer gave one, else the English."""
    if name == "detail" and getattr(thing, "key", ""):
        return stuck_detail(thing, lang)
    if lang_of(lang) == "zh":
        twin = getattr(thing, f"{name}_zh", None)
        if twin:
            return twin
    return getattr(thing, name)


# --------------------------------------------------------------------------
# Stuck signals (model.StuckSignal): key → words, by language. A key's
# optional parts are keys of their own (`.after`, `.more`); `_SAYERS` says
# which parts a signal's parameters call for, the tables say them.

STUCK = {
    "en": {
        "cli_hung": "the user says the job is hung (--hung)",
        "fr_retired": "{op} #{seq} on group {group} was retired without completing: timed out{after}{more}",
        "fr_retired.after": " after {timeout_ms} ms",
        "fr_retired.more": " ({n} more calls timed out)",
        "collect_v1": "forensics collect saw rank {still} not move in {span} (same stacks{fr}){moved}",
        "collect_v1.fr": ", same Flight Recorder sequence numbers",
        "collect_v1.moved": "; rank {moved} moved",
        "collect_busy": "{where} for {seconds} while {waiting} waited in {call}{window}",
        "collect_busy.idle": "rank {rank} stayed idle in {busy_in}",
        "collect_busy.busy": "rank {rank} kept busy in {busy_in}",
        "collect_busy.sep": "; ",
        "collect_still": "rank {waiting} waited in {call} for {seconds} without moving{window}",
        "collect.window": " ({by}, {span}; stuck after {threshold} s: {source})",
        "collect.span": "{rounds} rounds over {span_s} s",
        "collect.span_unknown": "its rounds",
        # how forensics collect states a threshold taken from the job's timeout (its `stuck_after_from`)
        "collect.half_timeout": "half the collective timeout of {timeout} s",
        # PyTorch's c10d lines (ingest/torchlog.py), each said of its process (`tl.who.*`)
        "tl.said": "{who}: {detail}",
        "tl.who.rank": "rank {n}", "tl.who.local_rank": "local rank {n}", "tl.who.pid": "pid {n}", "tl.who.file": "{n}",
        "tl_past_timeout": "{op} ran {elapsed_ms} ms past its {timeout} ms timeout",
        "tl_timed_out_here": "a collective timed out on this rank (last enqueued work {enqueued}, "
                             "last completed {completed})",
        "tl_peer_timed_out": "rank {rank} reported a collective timeout (last enqueued work {enqueued}, "
                             "last completed {completed})",
        "tl_watchdog_stalled": "the ProcessGroupNCCL watchdog made no progress for {seconds} s",
        "tl_heartbeat": "the ProcessGroupNCCL heartbeat monitor timed out",
        "tl_blocking_wait": "{op} timed out in blocking wait ({timeout} ms timeout)",
        "tl_barrier_failed": "rank(s) {ranks} failed to pass monitoredBarrier in {timeout} ms",
        "tl_barrier_timeout": "monitoredBarrier timed out after {timeout} ms",
        "tl_gloo_timeout": "a Gloo {direction} waited {timeout} ms and timed out",
        # snapshots (ingest/snapshot.py) and two snapshots compared (ingest/merge.py)
        "snap_past_timeout": "rank {rank} has been in {op} for {elapsed_ms} ms, past its {timeout} ms timeout",
        "snap_declared_hung": "the snapshot says the job is hung",
        "snap_no_progress": "no rank moved between {before} and {after} ({n} ranks compared)",
    },
    "zh": {
        "cli_hung": "用户指明作业已挂起（--hung）",
        "fr_retired": "{op} #{seq} on group {group} 未完成即被回收：已超时{after}",
        "fr_retired.after": " after {timeout_ms} ms",
        "fr_retired.more": "",
        "collect_v1": "forensics collect 在 {span} 中看到 Rank {still} 没有任何进展（调用栈不变{fr}）",
        "collect_v1.fr": "，Flight Recorder 序号不变",
        "collect_v1.moved": "",
        "collect_busy": "{where} 长达 {seconds}，而 Rank {waiting} 一直在 {call} 中等待{window}",
        "collect_busy.idle": "Rank {rank} 一直空闲于 {busy_in}",
        "collect_busy.busy": "Rank {rank} 一直忙于 {busy_in}",
        "collect_busy.sep": "；",
        "collect_still": "Rank {waiting} 在 {call} 中等待了 {seconds}，位置没有变化{window}",
        "collect.window": "（{by}，{span}；超过 {threshold} 秒即视为卡住：{source}）",
        "collect.span": "{rounds} 轮，共 {span_s:g} 秒",
        "collect.span_unknown": "各轮",
        "collect.half_timeout": "集合通信超时（{timeout} 秒）的一半",
        "tl.said": "{who}：{detail}",
        "tl.who.rank": "rank {n}", "tl.who.local_rank": "本地 rank {n}", "tl.who.pid": "进程 {n}", "tl.who.file": "{n}",
        "tl_past_timeout": "{op} 已运行 {elapsed_ms} 毫秒，超过 {timeout} 毫秒的超时",
        "tl_timed_out_here": "本 rank 的集合通信超时（最后入队 {enqueued}，最后完成 {completed}）",
        "tl_peer_timed_out": "rank {rank} 报告集合通信超时（最后入队 {enqueued}，最后完成 {completed}）",
        "tl_watchdog_stalled": "ProcessGroupNCCL 看门狗 {seconds} 秒没有进展",
        "tl_heartbeat": "ProcessGroupNCCL 心跳监视器超时",
        "tl_blocking_wait": "{op} 在阻塞等待中超时（超时 {timeout} 毫秒）",
        "tl_barrier_failed": "rank {ranks} 未能在 {timeout} 毫秒内通过 monitoredBarrier",
        "tl_barrier_timeout": "monitoredBarrier 在 {timeout} 毫秒后超时",
        "tl_gloo_timeout": "Gloo {direction} 等待 {timeout} 毫秒后超时",
        "snap_past_timeout": "Rank {rank} 已在 {op} 中停留 {elapsed_ms} ms，超过了 {timeout} ms 的超时",
        "snap_declared_hung": "快照声明作业已挂起",
        "snap_no_progress": "{before} 与 {after} 之间没有任何 Rank 推进（比较了 {n} 个 Rank）",
    },
}
# Where a collect threshold came from (progress.json's `stuck_after_from`, or
# analyze's own), as collect and analyze state it in English: the known ones
# in each language; any other is shown as written.
_HALF_TIMEOUT = re.compile(re.escape(STUCK["en"]["collect.half_timeout"]).replace(re.escape("{timeout}"), "(.+)"))
STUCK_SOURCES = {
    "en": {},
    "zh": {"--stuck-after": "--stuck-after 指定", "analyze --stuck-after": "analyze --stuck-after 指定",
           "the default": "默认值", "the default (no collective timeout known)": "默认值（未知集合通信超时）"},
}


def stuck_detail(signal, lang: str = "en") -> str:
    """A keyed stuck signal in `lang`."""
    return say_stuck(signal.key, dict(signal.params), lang)


def say_stuck(key: str, params: dict, lang: str = "en") -> str:
    """What a stuck signal's key and facts say in `lang`."""
    lang = lang_of(lang)
    return _SAYERS.get(key, _c10d)(STUCK[lang], params, lang, key)


def _fr_retired(t: dict, p: dict, lang: str, key: str) -> str:
    after = t["fr_retired.after"].format(**p) if p.get("timeout_ms") is not None else ""
    more = t["fr_retired.more"].format(n=p["others"]) if p.get("others") else ""
    return t["fr_retired"].format(op=p["op"], seq=p["seq"], group=p["group"], after=after, more=more)


def _collect_v1(t: dict, p: dict, lang: str, key: str) -> str:
    # The first schema's Chinese words kept its span in English.
    span = _span(STUCK["en"], p)
    moved = t["collect_v1.moved"].format(moved=compact(p["moved"])) if p.get("moved") else ""
    return t["collect_v1"].format(still=compact(p["still"]), span=span, fr=t["collect_v1.fr"] if p.get("fr") else "",
                                  moved=moved)


def _collect(t: dict, p: dict, lang: str, key: str) -> str:
    waiting = _ranks(p["waiting"])
    seconds = f"{p['seconds']:g} s"
    span = _span(t, p)
    half = _HALF_TIMEOUT.fullmatch(p["source"])
    source = t["collect.half_timeout"].format(timeout=half.group(1)) if half \
        else STUCK_SOURCES[lang].get(p["source"], p["source"])
    window = t["collect.window"].format(by=p.get("by") or "forensics collect", span=span,
                                        threshold=f"{p['threshold']:g}", source=source)
    if p.get("suspects"):
        where = t["collect_busy.sep"].join(
            t["collect_busy.idle" if idle else "collect_busy.busy"].format(rank=rank, busy_in=busy_in)
            for rank, idle, busy_in in p["suspects"])
        return t["collect_busy"].format(where=where, seconds=seconds, waiting=waiting, call=p["call"], window=window)
    return t["collect_still"].format(waiting=waiting, call=p["call"], seconds=seconds, window=window)


def _span(t: dict, p: dict) -> str:
    """`3 rounds over 20.0 s` as progress.json states it (Chinese: `3 轮，共 20 秒`)."""
    if p.get("rounds") is None:
        return t["collect.span_unknown"]
    return t["collect.span"].format(rounds=p["rounds"], span_s=p["span_s"])


def _ranks(ranks) -> str:
    """`0, 2, 3` as people write a few ranks; ranges past eight."""
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else compact(ranks)


def _c10d(t: dict, p: dict, lang: str, key: str) -> str:
    """A c10d line's words (`tl_*`), said of its process where `who` names it."""
    facts = dict(p)
    if "ranks" in facts:
        facts["ranks"] = ", ".join(map(str, facts["ranks"])) or "?"
    who = facts.pop("who", None)
    detail = t[key].format(**facts)
    if who is None:
        return detail
    return t["tl.said"].format(who=t["tl.who." + who[0]].format(n=who[1]), detail=detail)


_SAYERS = {
    "cli_hung": lambda t, p, lang, key: t["cli_hung"],
    "fr_retired": _fr_retired,
    "collect_v1": _collect_v1,
    "collect_busy": _collect,
    "collect_still": _collect,
}


def stuck_signal(kind: str, key: str, evidence=None, **params):
    """A stuck signal named by `key` with its facts. Its `detail` and
    `detail_zh` are said from the tables above, for the readers that still
    take them as text."""
    from .model import StuckSignal

    return StuckSignal(kind, say_stuck(key, params, "en"), evidence, say_stuck(key, params, "zh"), key=key,
                       params=tuple(sorted(params.items())))
