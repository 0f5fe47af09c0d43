"""Causes the logs state outright, read through the message catalogue.

A monitored barrier names the ranks that never arrived; DETAIL names the
two ranks whose collectives differ; Gloo and NCCL name the peer whose
socket closed; NCCL names the peer an InfiniBand request failed for. One
rank's fragment is then enough for a verdict, with a culprit that may be a
rank, or only a host or an address (`Culprit`). Each finding says how sure
it is: a message naming ranks is high, one rank's word about a peer is
medium. Lines that are usually consequences of another failure (a peer
closed, an abort after the rank's own timeout) blame their peer, never
their printer.

When the structural rules reach the same verdict from rank states, they
lead (the analysis keeps these as corroboration).
"""

from __future__ import annotations

import re
from collections import defaultdict

from ..hookspecs import hookimpl
from .. import messages
from ..model import MAX_RANKS, Culprit, Finding, MessageHit, address_host
from ..ranges import compact
from ..ruledocs import RuleDoc

MISSING = "stated-missing-rank"
MISMATCH = "stated-collective-mismatch"
PEER_GONE = "stated-peer-gone"
CRASH = "stated-crash"
NETWORK = "stated-network-fault"
OBSERVED = "stated-observation"
MAX_CITED = 8

HINTS = {
    MISSING: ("Look at the named rank(s): their stack (py-spy dump) or log shows where they are instead "
              "of the collective (data loading, an early exit, another group).",
              "查看被点名的 Rank：它们的栈（py-spy dump）或日志会显示它们没有进入该集合通信时在做什么"
              "（数据加载、提前退出、另一个通信组）。"),
    MISMATCH: ("Make every rank of the group call the same collectives in the same order with the same "
               "shapes and dtypes; the two fingerprints show where they diverge.",
               "让组内每个 Rank 以相同的顺序、相同的形状和数据类型调用相同的集合通信；两份指纹显示了分歧所在。"),
    PEER_GONE: ("Find why the peer process ended (its own stderr, the launcher's exit codes, dmesg for "
                "OOM kills): the ranks reporting the closed connection are only its victims.",
                "查明对端进程为何结束（它自己的 stderr、启动器的退出码、dmesg 中的 OOM 记录）：报告连接被关闭的 Rank 只是受害者。"),
    CRASH: ("The process died of its own error: fix that error; the other ranks' timeouts and aborts "
            "follow from it.",
            "该进程因自身错误而退出：先修复这个错误；其他 Rank 的超时与中止都源于它。"),
    NETWORK: ("Check the named peer's link and NIC (ibstat, port counters, dmesg, the switch), and "
              "whether the error repeats on the same host or cable.",
              "检查被点名对端的链路与网卡（ibstat、端口计数器、dmesg、交换机），以及错误是否总在同一台主机或同一根线缆上重复。"),
}


def _hits(incident) -> list[tuple[MessageHit, object]]:
    cat = messages.catalogue()
    return [(hit, entry) for hit in incident.messages if (entry := cat.get(hit.id)) is not None]


_IP = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}|\[?[0-9a-fA-F]*:[0-9a-fA-F:.]+\]?")


# Messages that wrap the transport error of their exchange with one named
# peer: ProcessGroupGloo::monitoredBarrier's "Rank R successfully reached
# monitoredBarrier, but received errors while waiting for send/recv from rank
# P. Please check rank P logs for faulty rank." is followed by "Original
# exception:" and the Gloo error of that send/recv, whose address is P's.
_WRAPS_PEER_ERROR = frozenset({"c10d-gloo-monitored-barrier-peer-error"})
_WRAPPED_WITHIN = 4  # lines from the wrapping message to the wrapped error


class AddressBook:
    """Which rank is behind a host or an address, as far as any artifact ties them."""

    def __init__(self, incident, hits):
        self.by_host: dict[str, set[int]] = defaultdict(set)
        self.by_addr: dict[str, int] = {}  # an exact host:port, from a message that names its peer's rank
        for rank, state in incident.ranks.items():
            if state.host:
                self.by_host[state.host].add(rank)
        for hit, _ in hits:
            if hit.rank is None:
                continue
            for name in ("addr", "host"):
                value = hit.fact(name)
                if isinstance(value, str) and value:
                    self.by_host[address_host(value)].add(hit.rank)
            if hit.host:
                self.by_host[hit.host].add(hit.rank)
        self._wrapped(hits)

    def _wrapped(self, hits) -> None:
        """The peer address of a transport error that a message naming its
        peer's rank wraps (`_WRAPS_PEER_ERROR`): the same process's error,
        in the same file a few lines below, is that peer's address. Two
        ranks claimed for one address tie it to neither."""
        claims: dict[str, set[int]] = defaultdict(set)
        wrappers = [h for h, _ in hits if h.id in _WRAPS_PEER_ERROR and isinstance(h.fact("peer_rank"), int)]
        for hit, _ in hits:
            addr = hit.fact("peer_addr")
            if not isinstance(addr, str) or not addr or hit.rank is None:
                continue
            for outer in wrappers:
                if (outer.rank == hit.rank and outer.evidence.path == hit.evidence.path
                        and 0 < hit.evidence.line - outer.evidence.line <= _WRAPPED_WITHIN):
                    claims[addr].add(outer.fact("peer_rank"))
        self.by_addr = {addr: ranks.pop() for addr, ranks in claims.items() if len(ranks) == 1}

    def culprit(self, addr: str = "", host: str = "") -> Culprit:
        key = address_host(addr) if addr else host
        ranks = self.by_host.get(key, set())
        if addr and addr in self.by_addr:  # the exact address, tied to a rank, before its host's ranks
            rank = self.by_addr[addr]
        else:
            rank = next(iter(ranks)) if len(ranks) == 1 else None
        return Culprit(rank=rank, host=host if host else ("" if _IP.fullmatch(key or "") else key),
                       addr=addr)


def _cite(hits) -> tuple:
    seen, out = set(), []
    for hit, _ in hits:
        if hit.evidence not in seen:
            seen.add(hit.evidence)
            out.append(hit.evidence)
    return tuple(out[:MAX_CITED])


def _printer(hit: MessageHit) -> str:
    if hit.rank is not None:
        return f"rank {hit.rank}"
    if hit.host:
        return f"{hit.host}" + (f" (pid {hit.pid})" if hit.pid is not None else "")
    return hit.evidence.path


def _rank_culprit(incident, rank: int) -> Culprit:
    state = incident.ranks.get(rank)
    return Culprit(rank=rank, host=state.host if state else "", pid=state.pid if state else None)


def _missing(incident, hits) -> list[Finding]:
    named: dict[tuple[int, ...], list] = defaultdict(list)
    for hit, entry in hits:
        ranks = hit.fact("ranks")
        if entry.cause == "missing_rank" and ranks:
            named[ranks].append((hit, entry))
    out = []
    for ranks, group in named.items():
        reporters = sorted({_printer(h) for h, _ in group})
        first, entry = group[0]
        message = (f"{', '.join(reporters[:4])} state{'s' if len(reporters) == 1 else ''} that rank "
                   f"{compact(list(ranks))} never arrived: {entry.en}")
        message_zh = f"{'、'.join(reporters[:4])} 的日志指出 Rank {compact(list(ranks))} 始终未到达：{entry.zh}"
        out.append(Finding(MISSING, "missing_rank", "error", ranks, message, _cite(group), HINTS[MISSING][0],
                           message_zh=message_zh, hint_zh=HINTS[MISSING][1],
                           culprits=tuple(_rank_culprit(incident, r) for r in ranks),
                           confidence="high",
                           confidence_reason=f"the message itself names the rank(s) that did not arrive ({entry.id})",
                           confidence_reason_zh=f"消息本身点名了未到达的 Rank（{entry.id}）"))
    return out + _counted_missing(incident, hits)


# The store-based barrier of process-group creation: each process adds
# itself under one key and waits until the count reaches the group's size;
# a process that printed its wait or its timeout on a key had arrived there.
_STORE_BARRIER = frozenset({"torch-store-barrier-timeout", "torch-store-barrier-waiting"})


def _counts_the_absent(hit: MessageHit, entry) -> bool:
    """A store-based barrier's timeout: `count` of `world_size` arrived."""
    world, count = hit.fact("world_size"), hit.fact("count")
    return (entry.cause == "missing_rank" and entry.id in _STORE_BARRIER and not hit.fact("ranks")
            and isinstance(world, int) and isinstance(count, int) and 0 <= count < world <= MAX_RANKS)


def _counted_missing(incident, hits) -> list[Finding]:
    """A barrier that timed out with `count` of `world_size` processes
    arrived states that the others never came, without naming them. When
    the processes that did arrive are all known (each printed its own wait
    on the same key) and every rank any artifact knows lies inside
    `world_size`, the rest are named, as ranks of the whole job; otherwise
    the finding says how many never came and that the message does not say
    which."""
    timeouts: dict[tuple, list] = defaultdict(list)
    for hit, entry in hits:
        if _counts_the_absent(hit, entry):
            timeouts[(hit.fact("store_key"), hit.fact("world_size"))].append((hit, entry))
    out = []
    for (key, world), group in sorted(timeouts.items(), key=lambda kv: str(kv[0])):
        count = max(h.fact("count") for h, _ in group)
        arrived = set()
        for hit, entry in hits:
            if entry.id in _STORE_BARRIER and hit.fact("store_key") == key:
                rank = hit.fact("rank", hit.rank)
                if isinstance(rank, int):
                    arrived.add(rank)
        reporters = sorted({_printer(h) for h, _ in group})
        absent = world - count
        known = set(incident.ranks) | arrived
        said = (f"{', '.join(reporters[:4])} state{'s' if len(reporters) == 1 else ''} that only {count} of "
                f"{world} processes reached the store-based barrier of process-group creation ({key})")
        said_zh = f"{'、'.join(reporters[:4])} 的日志指出进程组创建的 store barrier（{key}）只到达了 {world} 个进程中的 {count} 个"
        if len(arrived) == count and known and max(known) < world:
            ranks = tuple(r for r in range(world) if r not in arrived)
            message = (f"{said}; rank {compact(list(arrived))} printed their own wait there, so rank "
                       f"{compact(list(ranks))} never arrived (not started, crashed, or stuck before "
                       f"init_process_group/new_group).")
            message_zh = (f"{said_zh}；Rank {compact(list(arrived))} 各自打印了在此等待，因此 Rank {compact(list(ranks))} "
                          f"始终未到达（未启动、已崩溃或卡在 init_process_group/new_group 之前）。")
            reason = (f"the barrier's count names no rank; the ranks that printed their wait there are {count} of "
                      f"{world}, and the group is taken to be the whole job")
            reason_zh = (f"barrier 的计数不点名 Rank；在此打印等待的 Rank 是 {world} 个中的 {count} 个，"
                         f"并假定该组即整个作业")
        else:
            ranks = ()
            message = (f"{said}: {absent} never arrived (not started, crashed, or stuck before it); the message does "
                       f"not say which.")
            message_zh = f"{said_zh}：有 {absent} 个始终未到达（未启动、已崩溃或卡在它之前），消息没有说明是哪些。"
            reason = (f"the message counts {absent} absent process(es) of {world} but names none; the logs of the "
                      f"ranks that did arrive would tell the rest")
            reason_zh = f"消息只统计出 {world} 个中有 {absent} 个未到达，但没有点名；已到达的 Rank 的日志可以说明其余是谁"
        out.append(Finding(MISSING, "missing_rank", "error", ranks, message, _cite(group), _START_UP_HINT[0],
                           message_zh=message_zh, hint_zh=_START_UP_HINT[1],
                           culprits=tuple(_rank_culprit(incident, r) for r in ranks),
                           confidence="medium", confidence_reason=reason, confidence_reason_zh=reason_zh))
    return out


_START_UP_HINT = (
    "Find where the absent processes are: whether the launcher started them (its log, the node's "
    "process list), and their stack (py-spy dump) or stderr before init_process_group. Processes that "
    "are only slow to start (long imports, data preparation before the call) need a longer "
    "process-group timeout.",
    "查明缺席的进程在哪里：启动器是否启动了它们（启动器日志、节点上的进程列表），以及它们在 init_process_group "
    "之前的调用栈（py-spy dump）或 stderr。若只是启动慢（导入耗时、调用前的数据准备），需要加大进程组超时。")


def _mismatch(incident, hits) -> list[Finding]:
    pairs = [(h, e) for h, e in hits if e.cause == "collective_mismatch"
             and (h.fact("peer_rank") is not None or h.fact("ranks"))]
    if not pairs:
        return _mismatch_by_op(incident, hits)
    # Each line sets its printer against another rank; a rank named by
    # several printers, or the only one named, is the odd one out.
    accused: dict[int, set] = defaultdict(set)
    sides: set[int] = set()
    for hit, _ in pairs:
        others = (hit.fact("peer_rank"),) if hit.fact("peer_rank") is not None else hit.fact("ranks")
        printer = hit.rank if hit.rank is not None else hit.fact("rank")
        for other in others:
            accused[other].add(printer)
            sides.add(other)
        if printer is not None:
            sides.add(printer)
    most = max(len(v) for v in accused.values())
    top = sorted(r for r, v in accused.items() if len(v) == most)
    if most >= 2 and len(top) == 1:
        culprits, level = top, "high"
        reason = f"{most} ranks each name rank {top[0]} as the one calling something else"
        reason_zh = f"{most} 个 Rank 都指出 Rank {top[0]} 调用了不同的集合通信"
    else:
        culprits, level = sorted(r for r in sides if r is not None), "medium"
        reason = ("one side's log only: it says two ranks differ, not which of them is the odd one out; "
                  "the other ranks' logs would tell")
        reason_zh = "只有一方的日志：它只说明两个 Rank 不一致，无法判断哪一方与众不同；其他 Rank 的日志可以判定"
    entry = pairs[0][1]
    message = f"Rank {compact(culprits)}: {entry.en}"
    return [Finding(MISMATCH, "collective_mismatch", "error", tuple(culprits), message, _cite(pairs),
                    HINTS[MISMATCH][0], f"Rank {compact(culprits)}：{entry.zh}", HINTS[MISMATCH][1],
                    culprits=tuple(_rank_culprit(incident, r) for r in culprits), confidence=level,
                    confidence_reason=reason, confidence_reason_zh=reason_zh)]


def _mismatch_by_op(incident, hits) -> list[Finding]:
    """Lines where each rank says only that its own collective differs from
    some other rank's, naming its op (PyTorch 1.10-1.12's DETAIL check): the
    ranks whose op is the minority's are the odd ones, when two or more ops
    are printed and one is printed by more ranks; otherwise every printer, at
    low confidence (one side's lines only)."""
    ops: dict[str, set[int]] = defaultdict(set)
    cited = []
    for hit, entry in hits:
        printer = hit.rank if hit.rank is not None else hit.fact("rank")
        if entry.cause == "collective_mismatch" and hit.fact("op") and isinstance(printer, int):
            ops[hit.fact("op")].add(printer)
            cited.append((hit, entry))
    if not ops:
        return []
    sizes = sorted((len(ranks), op) for op, ranks in ops.items())
    if len(ops) >= 2 and sizes[-1][0] > sizes[-2][0]:
        major = sizes[-1][1]
        culprits = sorted(r for op, ranks in ops.items() if op != major for r in ranks)
        level = "high" if sizes[-1][0] >= 2 else "medium"
        reason = f"{sizes[-1][0]} rank(s) print {major}; rank {compact(culprits)} another collective"
        reason_zh = f"{sizes[-1][0]} 个 Rank 打印的是 {major}；Rank {compact(culprits)} 是另一个集合通信"
    else:
        culprits, level = sorted(r for ranks in ops.values() for r in ranks), "low"
        reason = ("the lines say each printer's collective differs from another rank's without naming it; the "
                  "other ranks' lines would tell which side is odd")
        reason_zh = "这些行只说明打印者的集合通信与另一个 Rank 不同，没有指出是谁；其他 Rank 的日志可以判断哪一方异常"
    entry = cited[0][1]
    return [Finding(MISMATCH, "collective_mismatch", "error", tuple(culprits),
                    f"Rank {compact(culprits)}: {entry.en}", _cite(cited), HINTS[MISMATCH][0],
                    f"Rank {compact(culprits)}：{entry.zh}", HINTS[MISMATCH][1],
                    culprits=tuple(_rank_culprit(incident, r) for r in culprits), confidence=level,
                    confidence_reason=reason, confidence_reason_zh=reason_zh)]


# Ends that follow another process's failure, not causes: an abort after the
# rank's own timeout (SIGABRT, exit 134 / -6), the launcher stopping the
# survivors (SIGTERM, SIGINT, SIGHUP).
_KNOCK_ON_SIGNALS = frozenset({"SIGABRT", "SIGTERM", "SIGINT", "SIGHUP"})
_KNOCK_ON_EXITS = frozenset({-6, -15, -2, -1, 134, 143, 130})


def _subject(incident, hit: MessageHit) -> Culprit | None:
    """The process a line is about: its printer, or the worker a launcher's
    line names (`failed (exitcode: -9) local_rank: 3 (pid: 123)`)."""
    rank = hit.rank if hit.rank is not None else hit.fact("rank")  # never a local rank: not a global one
    if rank is not None:
        return _rank_culprit(incident, rank)
    pid = hit.pid if hit.pid is not None else hit.fact("pid")
    host = hit.host or hit.fact("host", "")
    if pid is None and not host:
        return None
    owners = [r for r, s in incident.ranks.items() if pid is not None and s.pid == pid and (not host or s.host == host)]
    return _rank_culprit(incident, owners[0]) if len(owners) == 1 else Culprit(host=host, pid=pid)


def _knock_on_end(hit: MessageHit) -> bool:
    return hit.fact("signal") in _KNOCK_ON_SIGNALS or hit.fact("exit_code") in _KNOCK_ON_EXITS


def _ended_as_knock_on(incident, subject: Culprit) -> bool:
    """Whether the post-mortem judged this rank's end a consequence (it
    timed out or lost a peer first): a launcher's line about its exit is
    then no crash of its own."""
    state = incident.ranks.get(subject.rank) if subject.rank is not None else None
    return state is not None and state.ending is not None and state.ending.role == "knock_on"


class _UNIDENTIFIED(str):
    """The printer of a crash line that no rank, host or pid identifies: the file it is in."""


def _crashed(incident, hits) -> list[Finding]:
    """Processes that died of their own error (not a knock-on of a peer's:
    not an abort after their own timeout, not the launcher's SIGTERM)."""
    crashed = []
    # Processes (by file and pid) that stated a communication failure of their own (a watchdog timeout):
    # a report of their death after it is its knock-on (Ray's worker death after the actor's timeout).
    failed_first: dict[tuple, int] = {}  # (file, pid) → the first line where that process failed so
    for hit, entry in hits:
        if entry.cause in ("timeout", "hang", "peer_died") and hit.pid is not None and hit.evidence.line:
            where = (hit.evidence.path, hit.pid)
            failed_first[where] = min(failed_first.get(where, _order(hit)), _order(hit))
    for hit, entry in hits:
        if entry.cause in ("crash", "oom") and not entry.knock_on and entry.blames == "self" \
                and not _knock_on_end(hit):
            first = failed_first.get((hit.evidence.path, hit.fact("pid")))
            if first is not None and hit.evidence.line and first < _order(hit):
                continue  # it timed out first (same file, earlier line): its death is the timeout's consequence
            if _after_a_timeout_storm(hit, entry, hits):
                continue
            subject = _subject(incident, hit)
            if subject is None:
                # Its printer, whom nothing identifies: named by its file, and
                # only where no artifact identifies any process (a lone fragment).
                if not incident.ranks:
                    crashed.append((hit, entry, _UNIDENTIFIED(hit.evidence.path)))
            elif not _ended_as_knock_on(incident, subject):
                crashed.append((hit, entry, subject))
    if not crashed:
        return []
    identified = [c for c in crashed if not isinstance(c[2], _UNIDENTIFIED)]
    if identified:  # a process nothing identifies only leads where no identified one crashed
        crashed = identified
    by_process: dict = {}
    for hit, entry, subject in crashed:
        if isinstance(subject, _UNIDENTIFIED):
            key = subject
        else:
            key = subject.rank if subject.rank is not None else (subject.host, subject.pid)
        by_process.setdefault(key, (subject, []))[1].append((hit, entry))
    # A process nothing identifies is named in the message (by its file), never as an empty culprit.
    culprits = tuple(subject for subject, _ in by_process.values() if not isinstance(subject, _UNIDENTIFIED))
    ranks = tuple(sorted(c.rank for c in culprits if c.rank is not None))
    cited = [(h, e) for _, group in by_process.values() for h, e in group]
    entry = cited[0][1]
    who = ", ".join(f"the process that printed {subject}" if isinstance(subject, _UNIDENTIFIED) else subject.label()
                    for subject, _ in list(by_process.values())[:4])
    level = "high" if len(cited) > 1 else "medium"
    return [Finding(CRASH, "dead_rank", "error", ranks, f"{who} died of its own error: {entry.en}",
                    _cite(cited), HINTS[CRASH][0], f"{who} 因自身错误退出：{entry.zh}", HINTS[CRASH][1],
                    culprits=culprits, confidence=level,
                    confidence_reason=f"the process's own error is logged ({entry.id})"
                                      + ("" if level == "high" else "; one line, not corroborated"),
                    confidence_reason_zh=f"日志记录了该进程自身的错误（{entry.id}）"
                                         + ("" if level == "high" else "；仅一行，无旁证"))]


def _order(hit: MessageHit) -> tuple[bool, int]:
    """Where a hit's line stands in its file: a big file is read as its head
    (lines 1, 2, ...) and its tail (lines counted back from the end, -1 the
    last), so every head line comes before every tail line."""
    return hit.evidence.line < 0, hit.evidence.line


# A launcher's row for a worker that failed (exit code, local rank, pid): the worker's own line is elsewhere.
_LAUNCHER_ROWS = frozenset({"elastic-process-failed"})


def _after_a_timeout_storm(hit: MessageHit, entry, hits) -> bool:
    """A launcher's row for a worker that exited with a Python exception
    (exit code 1), printed after communication failures in the same log
    (watchdog timeouts, transport errors) and with no error of
    the workers' own before it: the exit of the first rank those failures
    ended, not a crash (the launcher then stops the others)."""
    if entry.id not in _LAUNCHER_ROWS or hit.fact("exit_code") != 1 or not hit.evidence.line:
        return False
    path, at = hit.evidence.path, _order(hit)
    before = [(h, e) for h, e in hits if h.evidence.path == path and h.evidence.line and _order(h) < at]
    timeouts = [h for h, e in before if e.cause in ("timeout", "hang", "network_fault")]
    own = [h for h, e in before if e.cause in ("crash", "oom") and e.blames == "self" and e.id not in _LAUNCHER_ROWS]
    return bool(timeouts) and not own


def _peer_gone(incident, hits, book: AddressBook) -> list[Finding]:
    gone = [(h, e) for h, e in hits if _names_a_gone_peer(h, e)]
    if not gone:
        return []
    # A peer whose own processes state a transport failure (a connect that found no route) was alive and
    # closed its side because of it: its closed connections are the network fault's knock-on, not a death.
    failing = {h.host for h, e in hits if e.cause == "network_fault" and not e.knock_on and h.host}
    failing |= {h.rank for h, e in hits if e.cause == "network_fault" and not e.knock_on and h.rank is not None}
    by_peer: dict[tuple, list] = defaultdict(list)
    for hit, entry in gone:
        if hit.fact("peer_rank") is not None:
            culprit = _rank_culprit(incident, hit.fact("peer_rank"))
        else:
            culprit = book.culprit(addr=hit.fact("peer_addr", ""), host=hit.fact("peer_host", ""))
        key = (culprit.rank,) if culprit.rank is not None else (address_host(culprit.addr) or culprit.host,)
        if key[0] in failing or (culprit.host and culprit.host in failing):
            continue
        by_peer[key].append((hit, entry, culprit))
    if not by_peer:
        return []
    # The peer most reporters name, first; each distinct peer is a culprit only
    # when no other peer is named by more processes.
    ranked = sorted(by_peer.values(), key=lambda g: (-len({_printer(h) for h, _, _ in g}), g[0][0].evidence.line))
    best = len({_printer(h) for h, _, _ in ranked[0]})
    chosen = [g for g in ranked if len({_printer(h) for h, _, _ in g}) == best]
    culprits = tuple(g[0][2] for g in chosen)
    cited = [(h, e) for g in chosen for h, e, _ in g]
    reporters = sorted({_printer(h) for h, _ in cited})
    who = "; ".join(c.label() for c in culprits[:4])
    entry = cited[0][1]
    level = "high" if best >= 2 and len(chosen) == 1 else "medium"
    reason = (f"{best} processes report the same peer gone" if level == "high" else
              "the survivors report the peer gone; the peer's own log would say why it ended")
    return [Finding(PEER_GONE, "dead_rank", "error", tuple(sorted(c.rank for c in culprits if c.rank is not None)),
                    f"{who} vanished: {', '.join(reporters[:4])} lost the connection to it ({entry.en})",
                    _cite(cited), HINTS[PEER_GONE][0],
                    f"{who} 已消失：{'、'.join(reporters[:4])} 与它的连接断开（{entry.zh}）", HINTS[PEER_GONE][1],
                    culprits=culprits, confidence=level, confidence_reason=reason,
                    confidence_reason_zh=("多个进程报告同一对端消失" if level == "high"
                                          else "幸存者报告对端消失；对端自己的日志才能说明它为何结束"))]


def _names_a_gone_peer(hit: MessageHit, entry) -> bool:
    """A line saying a named peer vanished (its connection closed, it
    exited, its remote side failed)."""
    return (entry.cause == "peer_died" or (entry.cause == "crash" and entry.blames == "peer")) and bool(
        hit.fact("peer_addr") or hit.fact("peer_host") or hit.fact("peer_rank") is not None)


def _network(incident, hits, book: AddressBook) -> list[Finding]:
    faults = [(h, e) for h, e in hits if e.cause == "network_fault" and not e.knock_on]
    if not faults:
        return []
    peers: dict[str, set] = defaultdict(set)
    for hit, _ in faults:
        addr = hit.fact("peer_addr")
        if isinstance(addr, str) and addr:
            peers[address_host(addr)].add(_printer(hit))
    first, entry = faults[0]
    culprits: tuple[Culprit, ...]
    if peers:
        most = max(len(v) for v in peers.values())
        named = [p for p, v in peers.items() if len(v) == most]
        if len(named) == 1 and (most >= 2 or len(peers) == 1):
            ports = {h.fact("peer_addr") for h, _ in faults if address_host(h.fact("peer_addr") or "") == named[0]}
            # The node is at fault, not one connection: one port is named as is, several by their host.
            culprits = (book.culprit(addr=ports.pop() if len(ports) == 1 else named[0]),)
            level = "high" if most >= 2 else "medium"
            reason = (f"{most} processes report transport errors with the same peer" if most >= 2 else
                      "one process reports transport errors with this peer; its own side was not seen")
        else:
            culprits = _printer_culprits(incident, first)
            level, reason = "medium", "several peers are named; the first error decides"
    else:
        culprits = _printer_culprits(incident, first)
        level, reason = "medium", "the first transport error names no peer; its printer is blamed"
    reporters = sorted({_printer(h) for h, _ in faults})
    who = "; ".join(c.label() for c in culprits) or "unknown process"
    return [Finding(NETWORK, "network_fault", "error", tuple(sorted(c.rank for c in culprits if c.rank is not None)),
                    f"Transport errors on {', '.join(reporters[:6])}; the link to {who} failed first: {entry.en}",
                    _cite(faults), HINTS[NETWORK][0],
                    f"{'、'.join(reporters[:6])} 出现传输错误；最先失败的是通往 {who} 的链路：{entry.zh}",
                    HINTS[NETWORK][1], culprits=culprits, confidence=level, confidence_reason=reason,
                    confidence_reason_zh=("多个进程报告与同一对端的传输错误" if level == "high"
                                          else "只有一方或多个对端的传输错误：以最早的错误为准"))]


def _printer_culprits(incident, hit: MessageHit) -> tuple[Culprit, ...]:
    """The process that printed `hit`; none when its line says nothing of
    who printed it (a culprit with no field would blame nobody)."""
    if hit.rank is not None:
        return (_rank_culprit(incident, hit.rank),)
    if hit.host or hit.pid is not None:
        return (Culprit(host=hit.host, pid=hit.pid),)
    return ()


_VERDICT_CAUSES = ("missing_rank", "collective_mismatch", "network_fault", "crash", "oom", "peer_died")


def _observed(hits) -> list[Finding]:
    """What was read that bears no verdict here (timeouts, aborts, init
    failures, knock-on lines, a cause whose subject the line does not
    name): listed, so the report says what the logs say."""
    by_entry: dict[str, list] = defaultdict(list)
    for hit, entry in hits:
        if entry.cause == "info":
            continue
        bears = entry.cause in _VERDICT_CAUSES and not entry.knock_on and (
            hit.fact("ranks") or hit.fact("peer_rank") is not None or hit.fact("peer_addr")
            or entry.blames == "self" or _counts_the_absent(hit, entry))
        if not bears and not _names_a_gone_peer(hit, entry):
            by_entry[entry.id].append((hit, entry))
    out = []
    for entry_id, group in by_entry.items():
        entry = group[0][1]
        ranks = tuple(sorted({h.rank for h, _ in group if h.rank is not None}))
        printers = sorted({_printer(h) for h, _ in group})
        out.append(Finding(OBSERVED, "observation", "info", ranks,
                           f"{len(group)} line(s) from {', '.join(printers[:6])}: {entry.en} ({entry_id})",
                           _cite(group), message_zh=f"{'、'.join(printers[:6])} 的 {len(group)} 行：{entry.zh}（{entry_id}）"))
    return out


@hookimpl
def forensics_findings(incident):
    if not incident.messages:
        return []
    hits = _hits(incident)
    if not hits:
        return []
    book = AddressBook(incident, hits)
    return (_missing(incident, hits) + _awaited(incident, hits) + _mismatch(incident, hits)
            + _crashed(incident, hits) + _peer_gone(incident, hits, book) + _network(incident, hits, book)
            + _observed(hits))


# A line whose printer waited for a value only the named peer provides (the
# NCCL unique id rank 0 publishes in the store) is an init failure blaming its
# peer: that peer never came, unless something shows it died. (A timeout that
# names a peer, such as a dump signal received from it, says the peer saw the
# timeout first, not that it was awaited.)
_AWAITING = frozenset({"init_failure"})


def _awaited(incident, hits) -> list[Finding]:
    """Processes that each state, in their own words, that they waited for
    one named peer that never provided its part (`[3] is setting up NCCL
    communicator and retrieving ncclUniqueId from [0] ... got error: Socket
    Timeout`): that peer is the missing rank, at medium confidence (the
    peer's own stack or log would confirm where it was). A peer that a
    dump, a log or a launcher shows dead is left to the rules on deaths."""
    by_peer: dict[int, list] = defaultdict(list)
    for hit, entry in hits:
        peer = hit.fact("peer_rank")
        if entry.cause in _AWAITING and entry.blames == "peer" and isinstance(peer, int):
            by_peer[peer].append((hit, entry))
    out = []
    for peer, group in sorted(by_peer.items()):
        state = incident.ranks.get(peer)
        if state is not None and state.ending is not None and state.ending.role == "cause":
            continue
        printers = sorted({p for h, _ in group if (p := h.rank if h.rank is not None else h.fact("rank")) is not None
                           and p != peer})
        if not printers:
            continue
        entry = group[0][1]
        reason = (f"{len(printers)} process(es) (rank {compact(printers)}, as each states) say they waited for rank "
                  f"{peer} in vain ({entry.id}); rank {peer}'s own stack or log would confirm where it was")
        reason_zh = (f"{len(printers)} 个进程（按各自所述为 Rank {compact(printers)}）表示一直在等 Rank {peer}"
                     f"（{entry.id}）；Rank {peer} 自己的调用栈或日志可以确认它当时在哪里")
        message = f"rank {compact(printers)} waited for rank {peer}, which never provided its part: {entry.en}"
        message_zh = f"Rank {compact(printers)} 一直在等 Rank {peer}，而它始终没有提供其部分：{entry.zh}"
        out.append(Finding(MISSING, "missing_rank", "error", (peer,), message, _cite(group), HINTS[MISSING][0],
                           message_zh=message_zh, hint_zh=HINTS[MISSING][1],
                           culprits=(_rank_culprit(incident, peer),), confidence="medium",
                           confidence_reason=reason, confidence_reason_zh=reason_zh))
    return out


def _doc(rule_id, title, title_zh, kind, explanation, explanation_zh, severity="error"):
    hint, hint_zh = HINTS.get(rule_id, ("", ""))
    return RuleDoc(rule_id, title, title_zh, severity, explanation, explanation_zh, hint, hint_zh,
                   kinds=(kind,), source=__name__)


RULES = (
    _doc(MISSING, "Ranks a message names as never arriving", "消息点名的未到达 Rank", "missing_rank",
         "A monitored barrier, the desync report or Flight Recorder's analyzer names the ranks that never "
         "joined the call the others wait in. The message is the verdict; no other rank's state is needed. "
         "The store-based barrier of process-group creation only counts (`world_size=N, worker_count=K`): "
         "its timeout is a missing rank too, and the absent ranks are named where every rank that arrived "
         "printed its own wait on that key and no known rank lies outside the count's world (medium "
         "confidence: the group is taken to be the whole job); otherwise the finding says how many never "
         "came. Processes that each state they waited in vain for one named peer's part (the NCCL unique id "
         "rank 0 publishes in the store) make that peer the missing rank, at medium confidence, unless "
         "something shows it died.",
         "监控屏障、desync 报告或 Flight Recorder 分析器点名了没有加入其他 Rank 所等待之调用的 Rank。消息本身就是结论，无需其他 Rank 的状态。"
         "进程组创建时基于 store 的 barrier 只给出计数（`world_size=N, worker_count=K`）：它的超时同样是成员缺失；"
         "若每个已到达的 Rank 都打印了在该 key 上的等待、且已知 Rank 都在该 world 之内，则点名缺席的 Rank（置信度中："
         "假定该组即整个作业）；否则只说明有几个未到达。若有若干进程各自表示一直在等某个被点名对端提供的数据（rank 0 在 store 中发布的 "
         "NCCL unique id），则该对端即缺失的 Rank（置信度中），除非有证据表明它已死亡。"),
    _doc(MISMATCH, "Collective mismatch a message states", "消息指出的集合通信失配", "collective_mismatch",
         "TORCH_DISTRIBUTED_DEBUG=DETAIL compares each collective's fingerprint across the group and names "
         "two ranks whose calls differ. With several ranks' logs, the rank they all name is the odd one out.",
         "TORCH_DISTRIBUTED_DEBUG=DETAIL 在组内比较每次集合通信的指纹，并点名调用不一致的两个 Rank。有多个 Rank 的日志时，被共同点名的那个就是与众不同者。"),
    _doc(CRASH, "A process died of its own error", "进程因自身错误退出", "dead_rank",
         "A process logged an error of its own (a CUDA error, an uncaught exception that is not a "
         "communication error, an out-of-memory kill, a DataLoader worker's death): it is gone, and every "
         "collective it belongs to can only time out. A line that nothing ties to a rank, host or pid "
         "blames the process that printed its file, and only where no artifact identifies any process "
         "(a pasted traceback on its own).",
         "某个进程记录了自身的错误（CUDA 错误、非通信类的未捕获异常、OOM 被杀、DataLoader worker 死亡）：它已退出，"
         "它所在的每个集合通信都只能超时。无法关联到 Rank、主机或 pid 的行，归咎于打印该文件的进程，且仅在没有任何产物"
         "能识别出进程时（单独粘贴的 traceback）。"),
    _doc(PEER_GONE, "Peer gone, as its survivors report it", "幸存者报告的对端消失", "dead_rank",
         "Gloo's `Connection closed by peer`, NCCL's `Connection closed by remote peer` and similar lines "
         "name the address of a process that went away. The reporters are victims; the named peer is the "
         "culprit, resolved to a rank where any artifact ties its address to one.",
         "Gloo 的 `Connection closed by peer`、NCCL 的 `Connection closed by remote peer` 等消息给出了已离开进程的地址。"
         "报告者是受害者；被点名的对端才是元凶，只要有产物把该地址对应到某个 Rank，就解析为该 Rank。"),
    _doc(NETWORK, "Transport errors a message states", "消息指出的传输错误", "network_fault",
         "NCCL's InfiniBand and socket transports name the peer of a failed work request. The peer that "
         "most processes report is the likely bad link or node; otherwise the first error decides.",
         "NCCL 的 InfiniBand 与 socket 传输会给出失败请求的对端。被最多进程报告的对端最可能是故障链路或节点；否则以最早的错误为准。"),
    _doc(OBSERVED, "What the logs state without a verdict", "日志中不足以单独定论的陈述", "observation",
         "Timeouts, aborts and initialization failures the catalogue recognizes: evidence that the job was "
         "stuck or failing, listed so the report says what the logs say.",
         "目录识别出的超时、中止与初始化失败：作业卡住或失败的证据，列出以便报告如实转述日志。", "info"),
)


@hookimpl
def forensics_rules():
    return RULES
