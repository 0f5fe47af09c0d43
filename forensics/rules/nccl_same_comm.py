"""nccl-opcount-mismatch: processes call different collectives at the same
opCount of one NCCL communicator, which NCCL's COLL lines name only by a
per-process pointer.

A COLL line (`AllReduce: opCount 5 … comm 0x55d2c8a0 [nranks=2] …`) says
which communicator by its address in the process that printed it, and
`opCount` counts that communicator's kernel launches. The commId that every
member prints is on the init lines only, which a log cut at the top, or
NCCL_DEBUG_SUBSYS=COLL, leaves out. So the communicators of several
processes are identified here, with a stated confidence:

- high: every member printed the same commId; or, on one host, the views
  also agree on their ring/tree lines (distinct ranks in the communicator,
  the same channel count, neighbours that point at each other);
- medium: on one host, the same nranks and the same calls at at least
  MIN_AGREE opCounts before they part;
- low: less than that (down to views of one host that share no call before
  they differ, grouped only when each process there shows no other
  communicator of that size), or another view of the host could stand in
  for a member as well (two communicators of one size over the same
  processes, as TP and DP groups): a warning, not a verdict.

Views are matched greedily, pairs that never part first, then the longest
agreement, never two views of one process (its two pointers are two
communicators), never more views than nranks (nor than the comm summary's
localRanks), never views whose ranks, channel counts or ring/tree
neighbours contradict. On the matched communicator, the first opCount where
the members' calls differ (op, count, datatype, reduction op for
reductions, root for rooted calls, or which calls one ncclGroupStart/End
launched; the peers of Send/Recv are not compared) is a collective
mismatch: the minority differs, or every member when there is no majority.
At the oldest opCount of a log that starts after opCount 0 a group may be
cut: showing only the end of the other's group there is no difference.

The views are what the NCCL reader recorded per process and pointer
(forensics.ingest.nccl.CommView), carried by the incident. Where the collective-mismatch
rule already sees the difference (a shared commId and ranks known for every
member), this rule stays silent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..hookspecs import hookimpl
from ._semantics import odd_side_of_two
from ..ingest import nccl
from ..model import Culprit, Evidence, Finding, group_id
from ..ruledocs import RuleDoc

ID = "nccl-opcount-mismatch"
KIND = "collective_mismatch"
MIN_AGREE = 2            # agreeing opCounts before the divergence for medium confidence
MAX_BUCKET = 256         # views of one nranks on one host compared pairwise; more are not compared
MAX_CITED = 8            # members whose COLL line at the divergence is cited
HINT = ("Make every process of the communicator issue the same collectives in the same order (look for "
        "rank-dependent branches, uneven data that ends one loop early, rank-dependent shapes or dtypes). "
        "Keep NCCL_DEBUG_SUBSYS=INIT,COLL so the logs carry each communicator's commId and ring lines.")
HINT_ZH = ("让通信器的所有进程以相同顺序调用相同的集合通信（检查依赖 rank 的分支、使某个循环提前结束的不均匀数据、"
           "依赖 rank 的形状或 dtype）。保留 NCCL_DEBUG_SUBSYS=INIT,COLL，使日志带有每个通信器的 commId 和 ring 行。")

_REDUCING = frozenset({"AllReduce", "Reduce", "ReduceScatter"})
_ROOTED = frozenset({"Broadcast", "Reduce", "Gather", "Scatter"})
_P2P = frozenset({"Send", "Recv"})
_REDOPS = ("sum", "prod", "max", "min", "avg")


@hookimpl
def forensics_findings(incident):
    views = _views(incident)
    if len(views) < 2:
        return []
    rank_of = _global_ranks(views, incident)
    findings = []
    for comm in identify(views):
        finding = _finding(comm, incident, rank_of)
        if finding is not None:
            findings.append(finding)
    return findings


def _global_ranks(views, incident):
    """A view's global rank: what its own file states ([rankN]: prefixes,
    the world's init line), else what the incident says of its process
    (a pid map, its file's name) when the process is alone in its file: a
    file of several processes named `slurm-882211.out` names none of them."""
    in_file: dict[str, set] = {}
    for view in views:
        in_file.setdefault(view.path, set()).add((view.host, view.pid))
    by_process: dict[tuple, set] = {}
    dumped: set[int] = set()  # ranks whose pid a stack dump of theirs states (py-spy's `Process N:`)
    for rank, state in incident.ranks.items():
        if state.pid is not None:
            by_process.setdefault((state.host, state.pid), set()).add(rank)
            if state.stack:
                dumped.add(rank)

    def rank_of(view) -> int | None:
        if view.rank is not None:
            return view.rank
        ranks = by_process.get((view.host, view.pid), set())
        if len(ranks) != 1:
            return None
        rank = next(iter(ranks))
        # alone in its file, or its pid tied to the rank by that rank's own stack dump
        return rank if len(in_file[view.path]) == 1 or rank in dumped else None
    return rank_of


# ---------------------------------------------------------------- what each process saw

class _Seq:
    """One view, with its calls by opCount: the signature of what it
    launched there (collectives as compared; Send/Recv as one `p2p` mark).
    `partial` is its oldest opCount when calls before it may be missing
    (the log or the window starts after opCount 0): of a group of calls
    launched together there, only the last ones may be left."""

    __slots__ = ("index", "view", "process", "sigs", "lines", "partial")

    def __init__(self, index: int, view):
        self.index = index
        self.view = view
        self.process = (view.host, view.pid)
        sigs: dict[int, list] = {}
        lines: dict[int, Evidence] = {}
        for call in view.calls:
            sigs.setdefault(call.opcount, []).append(_signature(call))
            lines.setdefault(call.opcount, call.evidence)
        oldest = min(sigs, default=None)
        self.partial = oldest if oldest is not None and (view.cut or oldest != 0) else None
        self.sigs = {opcount: _launch(parts) for opcount, parts in sigs.items()}
        self.lines = lines

    def differs(self, other: "_Seq", opcount: int) -> bool | None:
        """Whether the two launched different calls at `opcount`; None when
        one of them may only show the end of its group there."""
        mine, theirs = self.sigs[opcount], other.sigs[opcount]
        if mine == theirs:
            return False
        for seq, short, full in ((self, mine, theirs), (other, theirs, mine)):
            if seq.partial == opcount and len(short) < len(full) and full[len(full) - len(short):] == short:
                return None
        return True


def _signature(call) -> tuple:
    if call.op in _P2P:
        return ("p2p",)
    redop = None
    if call.op in _REDUCING:
        redop = call.redop if 0 <= call.redop < len(_REDOPS) else "dynamic"  # PreMulSum handles differ
    return (call.op, call.count, call.datatype, redop, call.root if call.op in _ROOTED else None)


def _launch(parts: list) -> tuple:
    """What one opCount launched: its collectives in order, and whether Send/Recv were among them."""
    if len(parts) == 1:  # most opCounts: one call (a million of them at 16,384 ranks)
        return (parts[0],)
    collectives = tuple(p for p in parts if p != ("p2p",))
    return collectives + ((("p2p",),) if len(collectives) < len(parts) else ())


def _views(incident) -> list:
    """The communicator views of every NCCL log, one per process and
    pointer (a process logged in two files is kept once, from the longer)."""
    kept: dict[tuple, object] = {}
    for view in incident.comm_views:
        if view.nranks < 2 or not view.calls:
            continue
        key = (view.host, view.pid, view.pointer, view.group)
        if key not in kept or len(view.calls) > len(kept[key].calls):
            kept[key] = view
    return list(kept.values())


@dataclass
class _Pair:
    """How two views of one size compare: the opCounts where they agree,
    oldest first, the first where they differ, and whether their ring or
    tree lines point at each other."""

    agree: list
    diverge: int | None
    linked: bool


def _compare(a: _Seq, b: _Seq) -> _Pair | None:
    """How two views of different processes relate; None when they cannot
    be one communicator."""
    va, vb = a.view, b.view
    if a.process == b.process or va.nranks != vb.nranks:
        return None
    if va.shared and vb.shared and va.group != vb.group:
        return None
    ra, rb = _comm_rank(va), _comm_rank(vb)
    if ra is not None and ra == rb:
        return None
    for mine, theirs in ((va.channels, vb.channels), (va.nodes, vb.nodes)):
        if mine is not None and theirs is not None and mine != theirs:
            return None
    linked = False
    if ra is not None and rb is not None:
        checks = _links(va, ra, vb, rb) + _links(vb, rb, va, ra)
        if False in checks:
            return None
        linked = True in checks
    agree, diverge = [], None
    for opcount in sorted(set(a.sigs) & set(b.sigs)):
        differs = a.differs(b, opcount)
        if differs:
            diverge = opcount
            break
        if differs is False:
            agree.append(opcount)
    return _Pair(agree, diverge, linked)


def _comm_rank(view) -> int | None:
    rank = view.comm_rank
    return rank if rank is not None and 0 <= rank < view.nranks else None


def _links(a, ra: int, b, rb: int) -> list[bool]:
    """What `a`'s ring and tree lines say of `b`: True for each neighbour
    relation both confirm, False for each one `b`'s lines contradict."""
    out = []
    rings_b = {channel: (prev, nxt) for channel, prev, nxt in b.rings}
    for channel, prev, nxt in a.rings:
        if channel in rings_b:
            if nxt == rb:
                out.append(rings_b[channel][0] == ra)
            if prev == rb:
                out.append(rings_b[channel][1] == ra)
    for channel, order in a.ring_orders:
        if channel in rings_b and rb in order and len(order) == a.nranks:
            at = order.index(rb)
            out.append(rings_b[channel] == (order[at - 1], order[(at + 1) % len(order)]))
    trees_b = {channel: (up, downs) for channel, up, downs in b.trees}
    for channel, up, downs in a.trees:
        if channel in trees_b:
            if up == rb:
                out.append(ra in trees_b[channel][1])
            if rb in downs:
                out.append(trees_b[channel][0] == ra)
    return out


# ---------------------------------------------------------------- communicators

@dataclass
class Comm:
    """Views identified as one communicator, and how sure that is."""

    members: list
    confidence: str = "low"
    basis: str = ""          # commId | rings | calls: what ties the members
    reason: str = ""
    reason_zh: str = ""
    diverge: int | None = None
    stand_ins: list = field(default_factory=list)   # views that could replace a member as well


def identify(views) -> list[Comm]:
    """Group the views into communicators (see the module docs)."""
    seqs = [_Seq(index, view) for index, view in enumerate(views)]
    clusters: dict[int, list] = {}
    owner: dict[int, int] = {}
    by_id: dict[str, int] = {}     # a commId's cluster: its members are certain
    processes: dict[int, set] = {}  # the processes in each commId cluster (a set: 16,384 members are common)
    for index, seq in enumerate(seqs):
        home = by_id.get(seq.view.group) if seq.view.shared else None
        if home is not None and seq.process in processes[home]:
            home = None
        if home is None:
            clusters[index] = [seq]
            owner[index] = index
            if seq.view.shared and seq.view.group not in by_id:
                by_id[seq.view.group] = index
                processes[index] = {seq.process}
        else:
            clusters[home].append(seq)
            owner[index] = home
            processes[home].add(seq.process)
    pairs = _pairs(seqs)
    order = sorted(pairs, key=lambda ij: (pairs[ij].diverge is not None, -len(pairs[ij].agree), ij))
    for i, j in order:
        if not pairs[(i, j)].agree:
            continue
        a, b = owner[i], owner[j]
        if a == b or not _can_merge(clusters[a], clusters[b], seqs, pairs):
            continue
        for seq in clusters[b]:
            owner[seq.index] = a
        clusters[a].extend(clusters.pop(b))
    for lone in _lone(seqs, clusters, owner, pairs):
        home = owner[lone[0].index]
        for seq in lone[1:]:
            clusters.pop(owner[seq.index])
            owner[seq.index] = home
            clusters[home].append(seq)
    comms = []
    for members in clusters.values():
        if len({s.process for s in members}) < 2:
            continue
        comms.append(_judge(members, seqs, pairs))
    return comms


def _lone(seqs: list, clusters: dict, owner: dict, pairs: dict) -> list[list]:
    """Views with no call in common before they differ, grouped only when
    nothing else could be: on their host, the only views of their nranks,
    one per process, none matched yet, all overlapping, at most nranks."""
    buckets: dict[tuple, list] = {}
    for seq in seqs:
        buckets.setdefault((seq.view.host, seq.view.nranks), []).append(seq)
    out = []
    for (_, nranks), bucket in buckets.items():
        if not 2 <= len(bucket) <= _room(bucket) or len({s.process for s in bucket}) < len(bucket):
            continue
        if any(len(clusters[owner[s.index]]) > 1 or s.view.shared for s in bucket):
            continue
        found = [_pair(pairs, seqs, a, b) for x, a in enumerate(bucket) for b in bucket[x + 1:]]
        if all(p is not None and (p.agree or p.diverge is not None) for p in found):
            out.append(bucket)
    return out


def _pairs(seqs: list) -> dict[tuple, _Pair]:
    """Every pair of views of one host and nranks that may be one
    communicator (MAX_BUCKET views per host and size), but for two with
    commIds: the same id needs no comparing, different ones never match."""
    buckets: dict[tuple, list] = {}
    for index, seq in enumerate(seqs):
        buckets.setdefault((seq.view.host, seq.view.nranks), []).append(index)
    pairs: dict[tuple, _Pair] = {}
    for indices in buckets.values():
        if len(indices) > MAX_BUCKET:
            continue
        for x, i in enumerate(indices):
            for j in indices[x + 1:]:
                if seqs[i].view.shared and seqs[j].view.shared:
                    continue
                pair = _compare(seqs[i], seqs[j])
                if pair is not None:
                    pairs[(i, j)] = pair
    return pairs


def _pair(pairs: dict, seqs: list, a: _Seq, b: _Seq) -> _Pair | None:
    return pairs.get((min(a.index, b.index), max(a.index, b.index)))


def _room(members: list) -> int:
    """How many views of one host one communicator can hold: its nranks,
    or fewer when a comm summary line says how many of its ranks are local."""
    return min([members[0].view.nranks] + [s.view.local_ranks for s in members if s.view.local_ranks])


def _can_merge(left: list, right: list, seqs: list, pairs: dict) -> bool:
    members = left + right
    if len({s.process for s in members}) < len(members):
        return False
    if len(members) > _room(members) or len({s.view.group for s in members if s.view.shared}) > 1:
        return False
    for a in left:
        for b in right:
            pair = _pair(pairs, seqs, a, b)
            if pair is None and not (a.view.shared and b.view.group == a.view.group):
                return False
            if pair is not None and pair.diverge is not None and not pair.agree:
                return False  # they overlap only where they differ: nothing says they are one
    return True


def _judge(members: list, seqs: list, pairs: dict) -> Comm:
    members = sorted(members, key=lambda s: (s.view.host, s.view.pid))
    comm = Comm(members)
    opcounts = sorted({o for s in members for o in s.sigs})
    for opcount in opcounts:
        if _parts(members, opcount):
            comm.diverge = opcount
            break
    before = [o for o in opcounts if comm.diverge is None or o < comm.diverge]
    agreed = [o for o in before if sum(1 for s in members if o in s.sigs) >= 2]
    ids = {s.view.group for s in members if s.view.shared}
    if len(ids) == 1 and all(s.view.shared for s in members):
        comm.confidence, comm.basis = "high", "commId"
        comm.reason = f"every member printed commId {next(iter(ids))[5:]} on its init line"
        comm.reason_zh = f"每个成员的 init 行都打印了 commId {next(iter(ids))[5:]}"
        return comm
    ranks = [_comm_rank(s.view) for s in members]
    ringed = (None not in ranks and _spanning(members, seqs, pairs, lambda p: p.linked))
    strong = _spanning(members, seqs, pairs, lambda p: len(p.agree) >= MIN_AGREE)
    if comm.diverge is not None:
        comm.stand_ins = _stand_ins(comm, seqs, pairs)
    span = _span(agreed)
    if comm.stand_ins:
        comm.reason = (f"same nranks and the same calls at {span}, but "
                       f"{_count(comm.stand_ins, 'other communicator')} of this host fit as well: which ones "
                       "pair up cannot be told without comm ids")
        comm.reason_zh = (f"nranks 相同且 {span} 的调用一致，但本机另有 {len(comm.stand_ins)} 个通信器同样吻合："
                          "没有 comm id 无法确定哪些通信器彼此配对")
    elif ringed and agreed:
        comm.confidence, comm.basis = "high", "rings"
        comm.reason = (f"same nranks, the same calls at {span}, and ring/tree lines that fit together "
                       f"(ranks {', '.join(map(str, ranks))} in the communicator)")
        comm.reason_zh = (f"nranks 相同，{span} 的调用一致，且 ring/tree 行彼此吻合（通信器内 rank "
                          f"{', '.join(map(str, ranks))}）")
    elif strong:
        comm.confidence, comm.basis = "medium", "calls"
        comm.reason = f"same nranks and the same calls at {span}; no comm id or ring lines tie them"
        comm.reason_zh = f"nranks 相同且 {span} 的调用一致；没有 comm id 或 ring 行可以佐证"
        if None not in ranks:
            comm.reason += f"; their ranks in it are {', '.join(map(str, ranks))}"
            comm.reason_zh += f"；它们在通信器内的 rank 分别为 {', '.join(map(str, ranks))}"
    elif agreed:
        comm.reason = f"same nranks, but only {span} in common before they differ"
        comm.reason_zh = f"nranks 相同，但分歧之前只有 {span} 一致"
    else:
        comm.reason = ("same nranks and the same opCount, with no earlier call to compare; on this host no "
                       "process shows another communicator of that size")
        comm.reason_zh = "nranks 相同、opCount 相同，但没有更早的调用可比；本机没有进程显示另一个同样大小的通信器"
    return comm


def _parts(members: list, opcount: int) -> bool:
    """Members launched different calls at `opcount` (one per distinct
    launch compared, so ten thousand members cost what a few do)."""
    distinct: dict[tuple, _Seq] = {}
    for seq in members:
        if opcount in seq.sigs:
            known = distinct.get(seq.sigs[opcount])
            if known is None or (known.partial == opcount and seq.partial != opcount):
                distinct[seq.sigs[opcount]] = seq
    ones = list(distinct.values())
    return any(a.differs(b, opcount) for x, a in enumerate(ones) for b in ones[x + 1:])


def _spanning(members: list, seqs: list, pairs: dict, good) -> bool:
    """The members are connected by pairs for which `good` holds (or that share a commId)."""
    reached, frontier = {0}, [0]
    while frontier:
        b = members[frontier.pop()]
        for x, a in enumerate(members):
            if x in reached:
                continue
            pair = _pair(pairs, seqs, a, b)
            if (a.view.shared and a.view.group == b.view.group) or (pair is not None and good(pair)):
                reached.add(x)
                frontier.append(x)
    return len(reached) == len(members)


def _stand_ins(comm: Comm, seqs: list, pairs: dict) -> list:
    """Views outside the communicator that could replace one of its
    members at least as well: agree with the others as long, and do not
    part from them before the divergence."""
    found = []
    taken = {s.index for s in comm.members}
    hosts = {s.view.host for s in comm.members}
    nearby = [c for c in seqs if c.view.host in hosts and c.view.nranks == comm.members[0].view.nranks
              and c.index not in taken]
    for member in comm.members:
        rest = [s for s in comm.members if s is not member]
        best = min((len(p.agree) for p in (_pair(pairs, seqs, member, r) for r in rest) if p is not None), default=0)
        for candidate in nearby:
            if candidate.index in taken or any(candidate.process == r.process for r in rest):
                continue
            fits = [_pair(pairs, seqs, candidate, r) for r in rest]
            if all(p is not None and p.agree and len(p.agree) >= best
                   and (p.diverge is None or p.diverge > comm.diverge) for p in fits):
                found.append(candidate)
                taken.add(candidate.index)
    return found


# ---------------------------------------------------------------- the finding

def _finding(comm: Comm, incident, rank_of) -> Finding | None:
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
    global_rank = {id(s): rank_of(s.view) for s in comm.members}
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
    message = (f"NCCL communicator of {nranks} ranks on {host}, seen in {scope}, identified "
               f"with {comm.confidence} confidence ({comm.reason}): at opCount {d:x}, {'; '.join(parts)} — "
               f"{what} at the same position of one communicator, so "
               + ("none of them can complete" if certain else "if they are one communicator, none of them "
                                                             "can complete")
               + f". Differing: {blamed}.")
    message_zh = (f"{host} 上一个 {nranks} rank 的 NCCL 通信器（日志中可见{scope_zh}成员），识别置信度"
                  f"{_CONFIDENCE_ZH[comm.confidence]}（{comm.reason_zh}）：在 opCount {d:x}，{'；'.join(parts_zh)}"
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
                                     f"{comm.reason}",
                   confidence_reason_zh=f"NCCL 通信器的识别置信度为{_CONFIDENCE_ZH[comm.confidence]}："
                                        f"{comm.reason_zh}")


_CONFIDENCE_ZH = {"high": "高", "medium": "中", "low": "低"}


def _seen_by_collective_mismatch(comm: Comm, incident) -> bool:
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
        words.append(_REDOPS[redop] if isinstance(redop, int) else "a PreMulSum op")
    if root is not None:
        words.append(f"root {root}")
    return f"{op}({', '.join(words)})"


def _who(seq: _Seq, global_rank: dict) -> str:
    view = seq.view
    known = []
    if global_rank.get(id(seq)) is not None:
        known.append(f"rank {global_rank[id(seq)]}")
    if _comm_rank(view) is not None:
        known.append(f"comm rank {view.comm_rank}")
    return f"{view.host}:{view.pid}" + (f" ({', '.join(known)})" if known else "")


def _identity_evidence(comm: Comm, d: int) -> list:
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
