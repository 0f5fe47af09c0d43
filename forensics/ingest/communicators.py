"""Which NCCL processes share a communicator: merge work, done once per incident.

A COLL line (`AllReduce: opCount 5 … comm 0x55d2c8a0 [nranks=2] …`) names its
communicator by its address in the process that printed it, and `opCount`
counts that communicator's kernel launches. The commId every member prints is
on the init lines only, which a log cut at the top, or
NCCL_DEBUG_SUBSYS=COLL, leaves out. So the views the NCCL reader records per
process and pointer (`forensics.ingest.nccl.CommView`) are matched here, with
a stated confidence:

- high: every member printed the same commId; or, on one host, the views
  also agree on their ring/tree lines (distinct ranks in the communicator,
  the same channel count, neighbours that point at each other);
- medium: on one host, the same nranks and the same calls at at least
  MIN_AGREE opCounts before they part;
- low: less than that (down to views of one host that share no call before
  they differ, grouped only when each process there shows no other
  communicator of that size), or another view of the host could stand in
  for a member as well (two communicators of one size over the same
  processes, as TP and DP groups).

Views are matched greedily, pairs that never part first, then the longest
agreement, never two views of one process (its two pointers are two
communicators), never more views than nranks (nor than the comm summary's
localRanks), never views whose ranks, channel counts or ring/tree
neighbours contradict. Calls compare by op, count, datatype, reduction op
for reductions, root for rooted calls, and which calls one
ncclGroupStart/End launched; the peers of Send/Recv are not compared. At
the oldest opCount of a log that starts after opCount 0 a group may be cut:
showing only the end of the other's group there is no difference. What the
members' calls at `diverge` mean is the rules' to say
(rules/nccl_opcount_mismatch.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Evidence

MIN_AGREE = 2            # agreeing opCounts before the divergence for medium confidence
MAX_BUCKET = 256         # views of one nranks on one host compared pairwise; more are not compared

COMM_ID, RINGS, CALLS, FEW_CALLS, NO_CALL, STAND_INS = "commId", "rings", "calls", "few-calls", "no-call", "stand-ins"

_REDUCING = frozenset({"AllReduce", "Reduce", "ReduceScatter"})
_ROOTED = frozenset({"Broadcast", "Reduce", "Gather", "Scatter"})
_P2P = frozenset({"Send", "Recv"})
REDOPS = ("sum", "prod", "max", "min", "avg")  # ncclRedOp_t; higher values are PreMulSum handles


# ---------------------------------------------------------------- what each process saw

class Member:
    """One view, with its calls by opCount: the signature of what it
    launched there (collectives as compared; Send/Recv as one `p2p` mark)
    and the line that shows it. `partial` is its oldest opCount when calls
    before it may be missing (the log or the window starts after opCount
    0): of a group of calls launched together there, only the last ones
    may be left. `alone_in_file`: no other process's views come from its
    file (so the file's name, or a pid map, may name its rank)."""

    __slots__ = ("index", "view", "process", "sigs", "lines", "partial", "alone_in_file")

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
        self.alone_in_file = True

    def differs(self, other: "Member", opcount: int) -> bool | None:
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
        redop = call.redop if 0 <= call.redop < len(REDOPS) else "dynamic"  # PreMulSum handles differ
    return (call.op, call.count, call.datatype, redop, call.root if call.op in _ROOTED else None)


def _launch(parts: list) -> tuple:
    """What one opCount launched: its collectives in order, and whether Send/Recv were among them."""
    if len(parts) == 1:  # most opCounts: one call (a million of them at 16,384 ranks)
        return (parts[0],)
    collectives = tuple(p for p in parts if p != ("p2p",))
    return collectives + ((("p2p",),) if len(collectives) < len(parts) else ())


def _usable(comm_views) -> list:
    """The views worth matching, one per process and pointer (a process
    logged in two files is kept once, from the longer)."""
    kept: dict[tuple, object] = {}
    for view in comm_views:
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


def _compare(a: Member, b: Member) -> _Pair | None:
    """How two views of different processes relate; None when they cannot
    be one communicator."""
    va, vb = a.view, b.view
    if a.process == b.process or va.nranks != vb.nranks:
        return None
    if va.shared and vb.shared and va.group != vb.group:
        return None
    ra, rb = comm_rank_of(va), comm_rank_of(vb)
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


def comm_rank_of(view) -> int | None:
    """The view's rank in its communicator, where it states one that fits."""
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
class Communicator:
    """Views identified as one communicator, and how sure that is.

    `basis` says what ties the members: COMM_ID (one commId), RINGS (ring or
    tree lines that fit, and calls in common), CALLS (MIN_AGREE calls in
    common before they part), FEW_CALLS (fewer), NO_CALL (only the opCount
    where they differ: the only views of their size on their host), or
    STAND_INS (other views of the host fit as well). `agreed`: the opCounts
    before `diverge` (the first where the members' calls differ) that at
    least two members show."""

    members: list
    confidence: str = "low"
    basis: str = ""
    agreed: tuple = ()
    diverge: int | None = None
    stand_ins: list = field(default_factory=list)   # views that could replace a member as well
    comm_ranks: tuple = ()                          # each member's rank in it, None where unknown


def of_views(comm_views) -> tuple[Communicator, ...]:
    """The communicators an incident's views show (merge calls it)."""
    views = _usable(comm_views)
    return tuple(identify(views)) if len(views) >= 2 else ()


def identify(views) -> list[Communicator]:
    """Group the views into communicators (see the module docs)."""
    seqs = [Member(index, view) for index, view in enumerate(views)]
    processes_in: dict[str, set] = {}
    for seq in seqs:
        processes_in.setdefault(seq.view.path, set()).add(seq.process)
    for seq in seqs:
        seq.alone_in_file = len(processes_in[seq.view.path]) == 1
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


def _pair(pairs: dict, seqs: list, a: Member, b: Member) -> _Pair | None:
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


def _judge(members: list, seqs: list, pairs: dict) -> Communicator:
    members = sorted(members, key=lambda s: (s.view.host, s.view.pid))
    comm = Communicator(members)
    opcounts = sorted({o for s in members for o in s.sigs})
    for opcount in opcounts:
        if _parts(members, opcount):
            comm.diverge = opcount
            break
    before = [o for o in opcounts if comm.diverge is None or o < comm.diverge]
    comm.agreed = tuple(o for o in before if sum(1 for s in members if o in s.sigs) >= 2)
    comm.comm_ranks = tuple(comm_rank_of(s.view) for s in members)
    ids = {s.view.group for s in members if s.view.shared}
    if len(ids) == 1 and all(s.view.shared for s in members):
        comm.confidence, comm.basis = "high", COMM_ID
        return comm
    ringed = (None not in comm.comm_ranks and _spanning(members, seqs, pairs, lambda p: p.linked))
    strong = _spanning(members, seqs, pairs, lambda p: len(p.agree) >= MIN_AGREE)
    if comm.diverge is not None:
        comm.stand_ins = _stand_ins(comm, seqs, pairs)
    if comm.stand_ins:
        comm.basis = STAND_INS
    elif ringed and comm.agreed:
        comm.confidence, comm.basis = "high", RINGS
    elif strong:
        comm.confidence, comm.basis = "medium", CALLS
    else:
        comm.basis = FEW_CALLS if comm.agreed else NO_CALL
    return comm


def _parts(members: list, opcount: int) -> bool:
    """Members launched different calls at `opcount` (one per distinct
    launch compared, so ten thousand members cost what a few do)."""
    distinct: dict[tuple, Member] = {}
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


def _stand_ins(comm: Communicator, seqs: list, pairs: dict) -> list:
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
