"""nccl-opcount-mismatch: processes call different collectives at the same
opCount of one NCCL communicator, which NCCL's COLL lines name only by a
per-process pointer.

Which processes share a communicator, and how sure that is, merge decides
(forensics/ingest/communicators.py); this rule reads `Incident.communicators`.
At the first opCount where a communicator's members' calls differ, the
minority differs, or every member when there is no majority. Where the
collective-mismatch rule already sees the difference (a shared commId and
ranks known for every member), this rule stays silent.
"""

from __future__ import annotations

from collections import Counter

from ..hookspecs import hookimpl
from ._semantics import odd_side_of_two
from ..ingest import nccl
from ..ingest.communicators import (CALLS, COMM_ID, FEW_CALLS, REDOPS, RINGS, STAND_INS, Communicator, Member,
                                     comm_rank_of)
from ..model import Culprit, Finding, group_id
from ..ruledocs import RuleDoc

ID = "nccl-opcount-mismatch"
KIND = "collective_mismatch"
MAX_CITED = 8            # members whose COLL line at the divergence is cited
HINT = ("Make every process of the communicator issue the same collectives in the same order (look for "
        "rank-dependent branches, uneven data that ends one loop early, rank-dependent shapes or dtypes). "
        "Keep NCCL_DEBUG_SUBSYS=INIT,COLL so the logs carry each communicator's commId and ring lines.")
HINT_ZH = ("让通信器的所有进程以相同顺序调用相同的集合通信（检查依赖 rank 的分支、使某个循环提前结束的不均匀数据、"
           "依赖 rank 的形状或 dtype）。保留 NCCL_DEBUG_SUBSYS=INIT,COLL，使日志带有每个通信器的 commId 和 ring 行。")


@hookimpl
def forensics_findings(incident):
    if not incident.communicators:
        return []
    rank_of = _global_ranks(incident)
    findings = []
    for comm in incident.communicators:
        finding = _finding(comm, incident, rank_of)
        if finding is not None:
            findings.append(finding)
    return findings


def _global_ranks(incident):
    """A member's global rank: what its own file states ([rankN]: prefixes,
    the world's init line), else what the incident says of its process
    (a pid map, its file's name) when the process is alone in its file: a
    file of several processes named `slurm-882211.out` names none of them."""
    by_process: dict[tuple, set] = {}
    dumped: set[int] = set()  # ranks whose pid a stack dump of theirs states (py-spy's `Process N:`)
    for rank, state in incident.ranks.items():
        if state.pid is not None:
            by_process.setdefault((state.host, state.pid), set()).add(rank)
            if state.stack:
                dumped.add(rank)

    def rank_of(member: Member) -> int | None:
        if member.view.rank is not None:
            return member.view.rank
        ranks = by_process.get(member.process, set())
        if len(ranks) != 1:
            return None
        rank = next(iter(ranks))
        # alone in its file, or its pid tied to the rank by that rank's own stack dump
        return rank if member.alone_in_file or rank in dumped else None
    return rank_of


def _reason(comm: Communicator) -> tuple[str, str]:
    """What ties the members, in words (en, zh)."""
    span = _span(comm.agreed)
    ranks = ", ".join(map(str, comm.comm_ranks))
    if comm.basis == COMM_ID:
        comm_id = comm.members[0].view.group[5:]
        return (f"every member printed commId {comm_id} on its init line",
                f"每个成员的 init 行都打印了 commId {comm_id}")
    if comm.basis == STAND_INS:
        return (f"same nranks and the same calls at {span}, but "
                f"{_count(comm.stand_ins, 'other communicator')} of this host fit as well: which ones "
                "pair up cannot be told without comm ids",
                f"nranks 相同且 {span} 的调用一致，但本机另有 {len(comm.stand_ins)} 个通信器同样吻合："
                "没有 comm id 无法确定哪些通信器彼此配对")
    if comm.basis == RINGS:
        return (f"same nranks, the same calls at {span}, and ring/tree lines that fit together "
                f"(ranks {ranks} in the communicator)",
                f"nranks 相同，{span} 的调用一致，且 ring/tree 行彼此吻合（通信器内 rank {ranks}）")
    if comm.basis == CALLS:
        reason = f"same nranks and the same calls at {span}; no comm id or ring lines tie them"
        reason_zh = f"nranks 相同且 {span} 的调用一致；没有 comm id 或 ring 行可以佐证"
        if None not in comm.comm_ranks:
            reason += f"; their ranks in it are {ranks}"
            reason_zh += f"；它们在通信器内的 rank 分别为 {ranks}"
        return reason, reason_zh
    if comm.basis == FEW_CALLS:
        return (f"same nranks, but only {span} in common before they differ",
                f"nranks 相同，但分歧之前只有 {span} 一致")
    return ("same nranks and the same opCount, with no earlier call to compare; on this host no "
            "process shows another communicator of that size",
            "nranks 相同、opCount 相同，但没有更早的调用可比；本机没有进程显示另一个同样大小的通信器")


# ---------------------------------------------------------------- the finding

def _finding(comm: Communicator, incident, rank_of) -> Finding | None:
    d = comm.diverge
    if d is None:
        return None
    present = [s for s in comm.members if d in s.sigs]
    if len(present) < 2:
        return None
    if _seen_by_collective_mismatch(comm, incident):
        return None
    voters = present + [s for s in comm.stand_ins if d in s.sigs]
    votes = Counter(s.sigs[d] for s in voters)
    (top, top_count), *rest = votes.most_common()
    majority = top if not rest or top_count > rest[0][1] else None
    culprits = [s for s in present if majority is None or s.sigs[d] != majority]
    global_rank = {id(s): rank_of(s) for s in comm.members}
    if majority is None and len(culprits) == 2:  # two sides: rank 0 on a path only it takes is the odd one
        odd = odd_side_of_two(incident, [global_rank[id(s)] for s in culprits])
        if odd is not None:
            culprits = [s for s in culprits if global_rank[id(s)] == odd]
    groups: dict[tuple, list] = {}
    for s in present:
        groups.setdefault(s.sigs[d], []).append(s)
    what, what_zh = _what_differs(list(groups))
    parts = [f"{_join([_who(s, global_rank) for s in group])} "
             f"{'calls' if len(group) == 1 else 'call'} {_describe(sig)}" for sig, group in groups.items()]
    parts_zh = [f"{'、'.join(_who(s, global_rank) for s in group)} 调用 {_describe(sig)}"
                for sig, group in groups.items()]
    host = ", ".join(sorted({s.view.host for s in comm.members}))
    nranks = comm.members[0].view.nranks
    seen = len(comm.members)
    scope = ("the logs of both members" if seen == nranks == 2 else f"the logs of all {nranks} members"
             if seen == nranks else f"the logs of {seen} of its {nranks} members")
    scope_zh = f"全部 {nranks} 个" if seen == nranks else f"{nranks} 个成员中的 {seen} 个"
    blamed = _join([_who(s, global_rank) for s in culprits])
    certain = comm.confidence != "low"
    reason, reason_zh = _reason(comm)
    message = (f"NCCL communicator of {nranks} ranks on {host}, seen in {scope}, identified "
               f"with {comm.confidence} confidence ({reason}): at opCount {d:x}, {'; '.join(parts)} — "
               f"{what} at the same position of one communicator, so "
               + ("none of them can complete" if certain else "if they are one communicator, none of them "
                                                             "can complete")
               + f". Differing: {blamed}.")
    message_zh = (f"{host} 上一个 {nranks} rank 的 NCCL 通信器（日志中可见{scope_zh}成员），识别置信度"
                  f"{_CONFIDENCE_ZH[comm.confidence]}（{reason_zh}）：在 opCount {d:x}，{'；'.join(parts_zh)}"
                  f"——同一通信器的同一位置{what_zh}，" + ("任何一方都无法完成" if certain else
                                                         "若它们确属同一通信器，任何一方都无法完成")
                  + f"。不一致的一方：{blamed}。")
    evidence = [s.lines[d] for s in (culprits + [s for s in present if s not in culprits])[:MAX_CITED]]
    evidence += _identity_evidence(comm, d)
    return Finding(ID, KIND, "error" if certain else "warning",
                   tuple(sorted({global_rank[id(s)] for s in culprits if global_rank[id(s)] is not None})),
                   message, tuple(dict.fromkeys(evidence)), HINT, message_zh, HINT_ZH,
                   culprits=tuple(Culprit(rank=global_rank[id(s)], host=s.view.host, pid=s.view.pid)
                                  for s in culprits),
                   confidence=comm.confidence,
                   confidence_reason=f"the NCCL communicator was identified with {comm.confidence} confidence: "
                                     f"{reason}",
                   confidence_reason_zh=f"NCCL 通信器的识别置信度为{_CONFIDENCE_ZH[comm.confidence]}："
                                        f"{reason_zh}")


_CONFIDENCE_ZH = {"high": "高", "medium": "中", "low": "低"}


def _seen_by_collective_mismatch(comm: Communicator, incident) -> bool:
    """The collective-mismatch rule compares ranks' calls by (group, seq):
    it already reports a difference it can see in the incident."""
    ids = {s.view.group for s in comm.members}
    if len(ids) != 1 or not comm.members[0].view.shared:
        return False
    group = group_id(next(iter(ids)))
    calls = set()
    for state in incident.ranks.values():
        for op in state.history + ((state.current_op,) if state.current_op is not None else ()):
            if group_id(op.group) == group and op.seq == comm.diverge and op.is_collective:
                calls.add((op.op, op.dtype, op.sizes))
    return len(calls) > 1


def _what_differs(sigs: list) -> tuple[str, str]:
    if any(len(sig) != len(sigs[0]) for sig in sigs):
        return "different sets of calls launched together", "一起启动的调用不同"
    for index, (name, name_zh) in ((0, ("different collectives", "不同的集合通信")),
                                   (1, ("different counts", "不同的元素个数")),
                                   (2, ("different datatypes", "不同的 datatype")),
                                   (3, ("different reduction ops", "不同的归约操作")),
                                   (4, ("different roots", "不同的 root"))):
        if any(len({sig[k][index] for sig in sigs if len(sig[k]) > index}) > 1 for k in range(len(sigs[0]))):
            return name, name_zh
    return "different calls", "不同的调用"


def _describe(sig: tuple) -> str:
    return " + ".join(_call_text(part) for part in sig)


def _call_text(part: tuple) -> str:
    if part == ("p2p",):
        return "Send/Recv"
    op, count, dtype, redop, root = part
    words = [f"count {count}", nccl.DTYPES[dtype] if 0 <= dtype < len(nccl.DTYPES) else f"datatype {dtype}"]
    if redop is not None:
        words.append(REDOPS[redop] if isinstance(redop, int) else "a PreMulSum op")
    if root is not None:
        words.append(f"root {root}")
    return f"{op}({', '.join(words)})"


def _who(seq: Member, global_rank: dict) -> str:
    view = seq.view
    known = []
    if global_rank.get(id(seq)) is not None:
        known.append(f"rank {global_rank[id(seq)]}")
    if comm_rank_of(view) is not None:
        known.append(f"comm rank {view.comm_rank}")
    return f"{view.host}:{view.pid}" + (f" ({', '.join(known)})" if known else "")


def _identity_evidence(comm: Communicator, d: int) -> list:
    """What ties the members together: their init lines (commId), their
    rank in it and ring or tree lines, and the last call they agree on
    before opCount d."""
    out = []
    for seq in comm.members[:2]:
        view = seq.view
        if comm.basis in ("commId", "rings") and view.comm_rank_evidence is not None:
            out.append(view.comm_rank_evidence)
        if comm.basis == "rings":
            out.extend(e for e in view.topology_evidence if "Trees" in e.text or " -> " in e.text)
    for seq in comm.members[:2]:
        agreed = [o for o in seq.lines if o < d]
        if agreed:
            out.append(seq.lines[max(agreed)])
    return out


def _join(names: list) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _span(opcounts: list) -> str:
    if not opcounts:
        return "no opCount"
    if len(opcounts) == 1:
        return f"opCount {opcounts[0]:x}"
    return f"{len(opcounts)} opCounts ({opcounts[0]:x}-{opcounts[-1]:x})"


def _count(items: list, noun: str) -> str:
    return f"{len(items)} {noun}{'s' if len(items) != 1 else ''}"


RULES = (RuleDoc(
    ID, "NCCL calls differ at one opCount of one communicator", "同一 NCCL 通信器的同一 opCount 上调用不一致",
    "error",
    "What it detects: NCCL_DEBUG=INFO COLL lines of processes of one node (or of one commId) that belong to "
    "one communicator, and at the same opCount launch different collectives, or the same one with a "
    "different count, datatype, reduction op or root. COLL lines name the communicator only by a "
    "per-process pointer, so the communicator is identified first, with a stated confidence: high when "
    "the members printed one commId, or their ring/tree lines fit together; medium from the same nranks "
    "and the same calls at the opCounts before they part; low (a warning) when that is thin or another "
    "communicator of the same size fits as well. Why it hangs: NCCL pairs the members' kernels by launch "
    "order; different collectives at one position wait for partners that never come. Evidence it needs: "
    "the COLL lines of at least two members (NCCL_DEBUG_SUBSYS=COLL), best with INIT. Fix: see the hint.",
    "检测内容：同一节点（或同一 commId）上多个进程的 NCCL_DEBUG=INFO COLL 行属于同一通信器，却在同一 opCount 上"
    "启动了不同的集合通信，或同一集合通信的 count、datatype、归约操作或 root 不同。COLL 行只用进程内的指针标识"
    "通信器，因此先识别通信器并给出置信度：成员打印了同一个 commId、或 ring/tree 行彼此吻合时为高；nranks 相同且"
    "分歧前各 opCount 的调用一致时为中；证据不足或有同样大小的其他通信器同样吻合时为低（仅警告）。为何挂起："
    "NCCL 按启动顺序为成员的 kernel 配对；同一位置上的不同集合通信在等待永远不会到来的伙伴。所需证据：至少两个"
    "成员的 COLL 行（NCCL_DEBUG_SUBSYS=COLL），最好同时开启 INIT。修复：见提示。",
    HINT, HINT_ZH, kinds=(KIND,), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
