"""network-fault: every member joined the call and nobody completes, and the
logs carry transport errors (NCCL NET/IB completion errors, socket errors,
proxy failures; Gloo's pair errors). One broken link stalls every ring or
mesh collective that crosses it, and the ranks on the other side of it
then report errors of their own: the rank whose error came first is where
to look, the later ones are knock-on effects.

Which error came first is read from the artifacts: wall-clock timestamps
where the lines carry them (NCCL 2.26+ WARN lines, c10 and Python logging
prefixes, to the second), else the order of one shared console log, else
the kind of error (a completion error or a reset looks like a cause; a
closed connection or an aborted communicator like a consequence). The
report says which of these decided.

A dead or missing rank, a cycle and a mismatched call are other rules'
diagnoses: transport errors there are their consequence, so this rule
stays silent."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..hookspecs import hookimpl
from ..model import Evidence, Finding, group_id
from ..ranges import compact
from ..ruledocs import RuleDoc
from ..topology import ring_links
from ._semantics import describe_op

ID = "network-fault"
KIND = "network_fault"
MAX_LISTED = 8
HINT = ("Check the link named first: the NIC, cable and switch port of that rank's host and of the peer "
        "it names (ibstat / ibv_devinfo, `ip -s link`, dmesg for link flaps, the switch's port counters), "
        "and NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT for IB retry exhaustion. Later errors on other ranks are "
        "consequences. Set a finite process-group timeout and TORCH_NCCL_ASYNC_ERROR_HANDLING=1 so a "
        "broken link ends the job instead of hanging it.")
HINT_ZH = ("先检查最先报错的那条链路：该 Rank 所在主机以及报错中对端的网卡、线缆和交换机端口（ibstat / "
           "ibv_devinfo、`ip -s link`、dmesg 中的链路抖动、交换机端口计数），IB 重传耗尽时再看 NCCL_IB_TIMEOUT / "
           "NCCL_IB_RETRY_CNT。其他 Rank 随后的报错只是连锁反应。设置有限的进程组超时和 "
           "TORCH_NCCL_ASYNC_ERROR_HANDLING=1，让链路故障使作业退出而不是挂起。")

# Errors that look like a cause: the transport itself failed here.
_CAUSE = re.compile(
    r"Got completion from peer"                     # NCCL NET/IB work completion with an error status
    r"|NET/\w+[^\n]{0,200}?(?:completed with error|[Ee]rror|failed|truncated)"  # NET/IB, NET/OFI, NET/Socket
    r"|Call to ibv_\w+ failed|ibv_\w+ failed"
    r"|Read error|Write error|Connect(?:ion)? timeout|Connection (?:reset|refused|timed out)"
    r"|No route to host|Network is unreachable"
    r"|socket\w*: [^\n]{0,120}?(?:failed|error)")
# Errors that usually follow another one: the other side went away, the
# communicator is being torn down.
_CONSEQUENCE = re.compile(
    r"Connection closed by (?:remote )?peer|\[Service thread\] Error encountered|closing connection"
    r"|is in abort state|Broken pipe")
# Not transport faults, even when they mention a connection.
_NOT_TRANSPORT = re.compile(r"Timed out waiting|Application timeout caused pair closure|Watchdog caught")

_ISO_TIME = re.compile(r"\[(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?\]")
# c10: [E1218 20:27:21.426415540 file:line]; the fraction is CLOCK_MONOTONIC,
# not the wall clock's sub-second, so only whole seconds are comparable.
_C10_TIME = re.compile(r"\[[IWEF](\d{3,4}) (\d\d):(\d\d):(\d\d)(?:\.\d+)? ")
_NCCL_PEER = re.compile(r"(?:peer |from peer )?((?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f:]*:[0-9A-Fa-f:]+)<(\d{1,5})>")
_GLOO_PEER = re.compile(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})")


@dataclass(frozen=True, slots=True)
class TransportError:
    rank: int
    evidence: Evidence
    cause_like: bool
    when: tuple[int, float | None] | None   # (seconds within the year, fraction), None without a timestamp
    peer: str

    def short(self, limit: int = 160) -> str:
        text = self.evidence.text
        at = text.find("NCCL WARN ")
        text = text[at + len("NCCL WARN "):] if at >= 0 else text
        text = text.strip()
        return text if len(text) <= limit else text[:limit - 1] + "…"


def classify(rank: int, evidence: Evidence) -> TransportError | None:
    """A transport error in one log line, or None when it is something else."""
    text = evidence.text
    if _NOT_TRANSPORT.search(text):
        return None
    cause = bool(_CAUSE.search(text))
    if not cause and not _CONSEQUENCE.search(text):
        return None
    return TransportError(rank, evidence, cause, timestamp(text), peer_address(text))


def timestamp(text: str) -> tuple[int, float | None] | None:
    """Wall-clock time of a log line as (seconds since 1 Jan, fraction or
    None), from an ISO-like prefix (NCCL, Python logging) or the c10 one.
    Years are ignored: c10 lines do not print one."""
    found = _ISO_TIME.search(text)
    if found:
        _, month, day, hour, minute, second, frac = found.groups()
        fraction = float("0." + frac) if frac else None
        return _seconds(int(month), int(day), int(hour), int(minute), int(second)), fraction
    found = _C10_TIME.search(text)
    if found:
        monthday, hour, minute, second = found.groups()
        return _seconds(int(monthday[:-2]), int(monthday[-2:]), int(hour), int(minute), int(second)), None
    return None


def _seconds(month: int, day: int, hour: int, minute: int, second: int) -> int:
    return ((month * 31 + day) * 24 + hour) * 3600 + minute * 60 + second


def peer_address(text: str) -> str:
    found = _NCCL_PEER.search(text)
    if found:
        return f"{found.group(1)}<{found.group(2)}>"
    found = _GLOO_PEER.search(text)
    if found:
        return f"[{found.group(1)}]:{found.group(2)}"
    return ""


def transport_errors(incident) -> dict[int, list[TransportError]]:
    """Every rank's transport errors, in the order its artifacts list them."""
    found: dict[int, list[TransportError]] = {}
    for rank in sorted(incident.ranks):
        seen = set()
        for evidence in incident.ranks[rank].log_events:
            if evidence.text in seen:  # the same message through LOG(ERROR), what() and the traceback
                continue
            error = classify(rank, evidence)
            if error is not None:
                seen.add(evidence.text)
                found.setdefault(rank, []).append(error)
    return found


def _earliest_of_rank(errors: list[TransportError]) -> TransportError:
    timed = [e for e in errors if e.when is not None]
    if timed:
        return min(timed, key=lambda e: (e.when[0], e.when[1] or 0.0))
    return errors[0]


def order_ranks(firsts: list[TransportError]) -> tuple[list[TransportError], str, str]:
    """The ranks' first errors, earliest first, and what decided (en, zh)."""
    if all(e.when is not None for e in firsts):
        ordered = sorted(firsts, key=lambda e: (e.when[0], e.when[1] if e.when[1] is not None else 0.0,
                                                not e.cause_like, e.rank))
        if len(ordered) > 1 and ordered[0].when[0] == ordered[1].when[0] and (
                ordered[0].when[1] is None or ordered[1].when[1] is None
                or ordered[0].when[1] == ordered[1].when[1]):
            return (ordered, "by timestamp; the first two fall in the same second, so the one that looks "
                             "like a cause is put first",
                    "按时间戳排序；前两条在同一秒内，故把更像原因的一条排在前面")
        return ordered, "by timestamp", "按时间戳排序"
    paths = {e.evidence.path for e in firsts}
    if len(paths) == 1 and all(e.evidence.line > 0 for e in firsts):
        ordered = sorted(firsts, key=lambda e: e.evidence.line)
        (path,) = paths
        return (ordered, f"no timestamps: by their order in {path}",
                f"没有时间戳：按它们在 {path} 中的先后顺序")
    ordered = sorted(firsts, key=lambda e: (not e.cause_like, e.rank))
    return (ordered, "no timestamps to order them: the error that looks like a cause (completion error, "
                     "reset, timeout) is put before those that look like consequences (connection closed, "
                     "abort), then by rank",
            "没有可用于排序的时间戳：把更像原因的错误（完成错误、连接重置、超时）排在更像后果的错误"
            "（连接被关闭、abort）之前，再按 Rank 排序")


def _blocked_ops_disagree(blocked) -> bool:
    """Blocked ranks at the same (group, seq) in different calls: a mismatch,
    which another rule diagnoses."""
    seen: dict = {}
    for state in blocked:
        op = state.current_op
        if not op.is_collective or op.seq is None:
            continue
        key = (group_id(op.group), op.seq)
        if seen.setdefault(key, op.op) != op.op:
            return True
    return False


def _link_text(first: TransportError, incident, knock_on: set[int]) -> tuple[str, str, list[Evidence]]:
    parts, parts_zh, evidence = [], [], []
    if first.peer:
        parts.append(f"the other end of its failing connection is {first.peer}")
        parts_zh.append(f"出错连接的对端是 {first.peer}")
    for link in ring_links(incident, first.rank)[:2]:
        flagged = [r for r in (link.prev, link.next) if r in knock_on]
        note = f" (ring neighbour(s) {compact(flagged)} reported errors after it)" if flagged else ""
        note_zh = f"（环上邻居 {compact(flagged)} 随后也报错）" if flagged else ""
        where = f"; {link.evidence.cite()}" if link.evidence else ""
        parts.append(f"on {link.group}'s ring (channel(s) {compact(link.channels)}{where}) it receives from "
                     f"{link.prev} and sends to {link.next}: links {link.prev} → {first.rank} → {link.next}"
                     + note)
        parts_zh.append(f"在 {link.group} 的环上（通道 {compact(link.channels)}{where}）它从 {link.prev} 接收、"
                        f"向 {link.next} 发送：链路 {link.prev} → {first.rank} → {link.next}" + note_zh)
        if link.evidence is not None and link.evidence not in evidence:
            evidence.append(link.evidence)
    if not parts:
        return ("no peer address or ring topology in the artifacts names the link",
                "制品中没有对端地址或环拓扑可以确定具体链路", evidence)
    return "; ".join(parts), "；".join(parts_zh), evidence


@hookimpl
def forensics_graph_findings(incident, analysis):
    errors = transport_errors(incident)
    if not errors:
        return []
    # Dead, missing, deadlocked: those are diagnoses of their own, and the
    # transport errors their consequence.
    if any(s.is_dead for s in incident.ranks.values()):
        return []
    if not any(e.cause_like for found in errors.values() for e in found):
        # Only closed connections, broken pipes and aborts: the other side
        # went away (rules/stated_cause.py: stated-peer-gone), the link did not fail.
        return []
    if analysis.cycles or analysis.dead_awaited or analysis.sinks:
        return []
    blocked = [incident.ranks[r] for r in sorted(incident.ranks) if incident.ranks[r].is_blocked]
    if _blocked_ops_disagree(blocked):
        return []

    firsts, basis, basis_zh = order_ranks([_earliest_of_rank(found) for found in errors.values()])
    first, later = firsts[0], firsts[1:]
    knock_on = {e.rank for e in later}
    link, link_zh, link_evidence = _link_text(first, incident, knock_on)

    stuck = bool(blocked) or bool(incident.stuck)
    severity = "error" if stuck else "warning"
    if blocked:
        ops = sorted({describe_op(s.current_op, incident.groups) for s in blocked})
        shown = "; ".join(ops[:3]) + (f" and {len(ops) - 3} more" if len(ops) > 3 else "")
        state = (f"{len(blocked)} rank(s) ({compact([s.rank for s in blocked])}) sit in {shown} with every "
                 f"member joined, and nothing completes")
        state_zh = (f"{len(blocked)} 个 Rank（{compact([s.rank for s in blocked])}）停在 {shown}，所有成员都已"
                    f"加入，却没有任何调用完成")
    elif incident.stuck:
        state = "the job is stuck (" + "; ".join(s.detail for s in incident.stuck[:2]) + ")"
        state_zh = "作业已卡住（" + "；".join(s.detail_zh or s.detail for s in incident.stuck[:2]) + "）"
    else:
        state = "no rank is known to be blocked, so this may not (yet) be a hang"
        state_zh = "没有已知阻塞的 Rank，因此这可能（尚）不是挂起"

    def cite(e: TransportError) -> str:
        return f" [{e.evidence.cite()}]"

    later_en = "; ".join(f"rank {e.rank}: \"{e.short(100)}\"{cite(e)}" for e in later[:MAX_LISTED])
    if len(later) > MAX_LISTED:
        later_en += f"; … {len(later) - MAX_LISTED} more rank(s)"
    message = (f"Transport fault: rank {first.rank}'s transport error came first ({basis}): "
               f"\"{first.short()}\"{cite(first)}. Link: {link}. ")
    message_zh = (f"网络/传输故障：Rank {first.rank} 的传输错误最先出现（{basis_zh}）："
                  f"\"{first.short()}\"{cite(first)}。链路：{link_zh}。")
    if later:
        message += (f"{len(later)} other rank(s) reported transport errors after it, knock-on effects: "
                    f"{later_en}. ")
        message_zh += (f"另有 {len(later)} 个 Rank 随后报告传输错误，属于连锁反应：{later_en}。")
    message += state[0].upper() + state[1:] + "."
    message_zh += state_zh + "。"

    evidence = [first.evidence] + [e.evidence for e in later[:MAX_LISTED]] + link_evidence
    for state_ in blocked[:4]:
        if state_.current_op is not None and state_.current_op.evidence is not None:
            evidence.append(state_.current_op.evidence)
    evidence = list(dict.fromkeys(evidence))
    return [Finding(ID, KIND, severity, (first.rank,), message, tuple(evidence), HINT, message_zh, HINT_ZH)]


RULES = (RuleDoc(
    ID, "Network / transport fault", "网络/传输故障", "error",
    "Every member joined the call and nobody completes, and the logs carry transport errors: NCCL NET/IB "
    "completion errors, socket errors, proxy failures, Gloo pair errors (connection closed or reset). The "
    "rank whose error came first (by timestamp where the lines have one, else by log order or by the kind "
    "of error) is named with its link: the peer address in its error and its neighbours on the NCCL ring. "
    "Later errors on other ranks are knock-on effects. Silent when a rank is dead or missing, or when the "
    "calls form a cycle or a mismatch: those are other rules' diagnoses. A warning when no rank is known "
    "to be blocked.",
    "所有成员都已加入调用却没有任何一个完成，且日志中有传输错误：NCCL NET/IB 完成错误、socket 错误、proxy 失败、"
    "Gloo pair 错误（连接被关闭或重置）。报告最先出错的 Rank（有时间戳时按时间戳，否则按日志顺序或错误类型）及其"
    "链路：错误中的对端地址以及它在 NCCL 环上的邻居。其他 Rank 随后的错误是连锁反应。当有 Rank 已退出或缺失、"
    "调用构成循环或不匹配时不报告（那是其他规则的诊断）。没有已知阻塞的 Rank 时只作为警告。",
    HINT, HINT_ZH, kinds=(KIND,), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
