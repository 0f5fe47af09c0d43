"""The normalized model every stage shares.

Parsers produce these objects, rules read them, the graph engine and the
reporters consume them. They are frozen and slotted: a stage can never mutate
what an earlier stage produced, and ten thousand ranks stay cheap.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, is_dataclass
from operator import attrgetter
from typing import Mapping, Union

# --------------------------------------------------------------------------
# Evidence


@dataclass(frozen=True, slots=True)
class Evidence:
    """Where a fact came from: a file, a 1-based line (0 when unknown), the text."""

    path: str
    line: int
    text: str

    def cite(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path

    def to_json(self) -> dict:
        return {"path": self.path, "line": self.line, "text": self.text}


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """Something in the input we could not use; never silently dropped."""

    path: str
    line: int
    message: str
    severity: str = "warning"  # "info" | "warning" | "error"

    def to_json(self) -> dict:
        return {"path": self.path, "line": self.line, "message": self.message,
                "severity": self.severity}


# --------------------------------------------------------------------------
# Stacks


@dataclass(frozen=True, slots=True)
class Frame:
    """One stack frame. `line` is the source line; `at` is where the frame
    sits in the dump, as an offset from its thread's header line, so that
    identical thread blocks of ten thousand ranks can share one parsed tuple.
    `locals` holds (name, repr) pairs from py-spy --locals or gdb arguments."""

    function: str
    file: str = ""
    line: int = 0
    library: str = ""
    native: bool = False
    at: int = 0
    locals: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """A thread's frames, innermost first. `evidence` is its header line."""

    tid: str
    name: str = ""
    active: bool | None = None
    frames: tuple[Frame, ...] = ()
    evidence: Evidence | None = None
    status: str = ""  # py-spy: idle | active | active+gil; gdb: ""

    def cite(self, frame: Frame) -> Evidence | None:
        """Evidence (file:line of the dump) for one of this thread's frames."""
        if self.evidence is None:
            return None
        line = self.evidence.line + frame.at if self.evidence.line else 0
        where = f"{frame.function} ({frame.file}:{frame.line})" if frame.file else frame.function
        return Evidence(self.evidence.path, line, where)


@dataclass(frozen=True, slots=True)
class ProcessDump:
    """One process's stacks as a dump tool printed them (py-spy, gdb).

    Rank attribution and classification happen later, in ingest: a parser
    reports what the file says, nothing more. `rank_hint` is a rank the dump
    itself states (e.g. a `rank`/`RANK` local); None when it does not.
    """

    source: str  # "py-spy" | "py-spy-json" | "gdb"
    path: str
    pid: int | None = None
    host: str = ""
    command: str = ""
    python: str = ""
    threads: tuple[ThreadStack, ...] = ()
    evidence: Evidence | None = None
    rank_hint: int | None = None
    truncated: bool = False
    # The stack of a process that ended with it: an uncaught exception's
    # traceback, faulthandler's dump on a fatal signal, `pystack core`. It
    # says where the process was when it died, not that it is still there.
    exited: bool = False
    signal: str = ""  # the fatal signal such a dump names ("SIGABRT"), when it does


# --------------------------------------------------------------------------
# Messages


@dataclass(frozen=True, slots=True)
class MessageHit:
    """One line that a message catalogue entry (rules/messages/) recognizes.

    `facts` are the entry's named groups, normalized ((name, value) pairs,
    values int, str or tuple of ints). `rank`, `host` and `pid` say which
    process printed the line, where the line or its file says so; ingest
    attributes the rest.
    """

    id: str
    facts: tuple[tuple[str, object], ...]
    evidence: Evidence
    rank: int | None = None
    host: str = ""
    pid: int | None = None
    local_rank: int | None = None

    def fact(self, name: str, default=None):
        for key, value in self.facts:
            if key == name:
                return value
        return default


@dataclass(frozen=True, slots=True)
class Culprit:
    """A process the evidence blames, as far as the evidence identifies it:
    a rank, or only a host, a pid, a peer address (`ip:port`, an IB GID) or a
    node. `culprit_ranks` of the report are the culprits that have a rank."""

    rank: int | None = None
    host: str = ""
    pid: int | None = None
    addr: str = ""
    node: str = ""

    def to_json(self) -> dict:
        out: dict = {}
        if self.rank is not None:
            out["rank"] = self.rank
        for name in ("host", "pid", "addr", "node"):
            value = getattr(self, name)
            if value not in ("", None):
                out[name] = value
        return out

    def label(self) -> str:
        parts = [f"rank {self.rank}"] if self.rank is not None else []
        parts += [f"{name} {value}" for name, value in (("host", self.host), ("pid", self.pid),
                                                        ("addr", self.addr), ("node", self.node))
                  if value not in ("", None)]
        return ", ".join(parts) or "unknown process"


def address_host(addr: str) -> str:
    """The host part of `10.0.0.2<5432>`, `[10.0.0.2]:5432`, `10.0.0.2:5432`, `node7:29500`."""
    text = addr.strip().strip(",;.")
    if "<" in text:
        return text.split("<", 1)[0]
    if text.startswith("["):
        return text[1:].split("]", 1)[0]
    if text.count(":") == 1:
        return text.split(":", 1)[0]
    return text


# --------------------------------------------------------------------------
# Communication

COLLECTIVE_OPS = frozenset({
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
    "reduce_scatter", "reduce_scatter_tensor", "reduce", "gather", "scatter",
    "all_to_all", "all_to_all_single", "barrier", "monitored_barrier",
    "all_gather_object", "broadcast_object_list", "coalesced",
})
P2P_OPS = frozenset({"send", "recv", "isend", "irecv"})

# Spellings seen in snapshots, py-spy frames, FR profiling names and c10d OpType.
_OP_ALIASES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "bcast": "broadcast", "broadcast": "broadcast",
    "allgather": "all_gather", "all_gather": "all_gather",
    "_allgather_base": "all_gather_into_tensor", "all_gather_into_tensor": "all_gather_into_tensor",
    "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor", "reduce_scatter_tensor": "reduce_scatter_tensor",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all_single",
    "all_to_all_single": "all_to_all_single",
    "send": "send", "recv": "recv", "isend": "send", "irecv": "recv",
    "recvanysource": "recv", "barrier": "barrier", "monitored_barrier": "monitored_barrier",
    "monitoredbarrier": "monitored_barrier", "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    # Flight Recorder's own spellings of the collective a call launches:
    # broadcast/reduce with separate buffers (the members of an uneven
    # all_gather or reduce_scatter), the one-tensor forms, NCCL's barrier
    # (a one-element all_reduce), uneven per-rank counts.
    "_broadcast_oop": "broadcast", "_reduce_oop": "reduce",
    "_all_gather_base": "all_gather_into_tensor", "all_gather_single": "all_gather_into_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor", "all_gather_v": "all_gather",
    "reduce_scatter_v": "reduce_scatter", "all_to_all_v_single": "all_to_all_single",
    "all_reduce_barrier": "barrier", "sparse_all_reduce": "all_reduce",
}


@functools.lru_cache(maxsize=4096)
def normalize_op(name: str | None) -> str:
    """`ALLREDUCE`, `nccl:all_reduce`, `AllReduce`, `allreduce` → `all_reduce`.

    Unknown names are lower-cased and kept (compute, data_loading, …).
    """
    if not name:
        return ""
    text = str(name).strip()
    if ":" in text:  # profiling names: "nccl:all_reduce", "gloo:send 0->1"
        text = text.split(":", 1)[1]
    text = text.split(" ", 1)[0].lower()
    return _OP_ALIASES.get(text, _OP_ALIASES.get(text.replace("_", ""), text))


def is_collective(op: str) -> bool:
    return op in COLLECTIVE_OPS


def is_p2p(op: str) -> bool:
    return op in P2P_OPS


# The most global ranks a job is taken to have: 2.6 times the largest
# clusters our users run (100,000 GPUs). A larger rank number or world size
# in an artifact is not believed (a diagnostic names it): the silent ranks
# below it are filled in, one state each, and at a million that took many
# seconds and hundreds of MB for one pasted line claiming such a world (a fuzzed
# c10d log, tests/fuzz/regressions/c10d/).
MAX_RANKS = 1 << 18


def plausible_rank(value: int) -> bool:
    return 0 <= value < MAX_RANKS


DEFAULT_GROUP = "0"  # c10d's default_pg; snapshots and dumps that name no group mean it


def group_id(group: str) -> str:
    return group or DEFAULT_GROUP


# A group a stack dump shows only as an object address ("?0x7fc7…"): not the
# default group, but whose members cannot be told from the dump.
UNIDENTIFIED_GROUP = "?"


@dataclass(frozen=True, slots=True)
class CommOp:
    """One communication call as a rank sees it.

    `seq` is the per-group collective sequence number (P2P ops count on their
    own). `peers` are global ranks: the destination of a send, the source of a
    recv, empty for collectives (membership comes from the group). `any_source`
    marks a receive that any peer can satisfy (an OR wait).
    """

    op: str
    group: str = ""
    seq: int | None = None
    state: str = "started"  # scheduled | started | completed
    peers: tuple[int, ...] = ()
    any_source: bool = False
    sizes: tuple[tuple[int, ...], ...] = ()
    dtype: str = ""
    timeout_ms: int | None = None
    elapsed_ms: int | None = None
    evidence: Evidence | None = None
    # Output tensor shapes where the artifact records them (Flight Recorder).
    out_sizes: tuple[tuple[int, ...], ...] = ()
    # Output dtypes where the artifact records them ("" when it lists none,
    # as a gather's non-root does); None when it does not say.
    out_dtype: str | None = None
    # False when the artifact cannot tell which group the call is on (a
    # stack dump without --locals, or whose locals are cut short): `group`
    # is then "" and the default group only an assumption, until another
    # artifact of the same call names its group (ingest/records.py joins them).
    group_known: bool = True
    # Where the call is in its rank's launch order (Flight Recorder's
    # record_id: one counter across all groups of the process).
    record_id: int | None = None
    # Elements in the call's input and output tensors, where the artifact
    # states a count but maybe no shape (WorkNCCL's NumelIn/NumelOut in
    # watchdog and error lines of torch 2.1 and later).
    numel_in: int | None = None
    numel_out: int | None = None

    @property
    def is_collective(self) -> bool:
        return is_collective(self.op)

    @property
    def is_p2p(self) -> bool:
        return is_p2p(self.op)

    @property
    def past_timeout(self) -> bool:
        return (self.timeout_ms is not None and self.elapsed_ms is not None
                and self.timeout_ms > 0 and self.elapsed_ms >= self.timeout_ms)


@dataclass(frozen=True, slots=True)
class StreamState:
    """The head of one CUDA stream of a rank: what it waits on, what it runs."""

    name: str
    waits_event: str | None = None
    op: str = ""
    evidence: Evidence | None = None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A CUDA event and the stream (of `rank`, default the owner) that records it."""

    name: str
    recorded_on: str
    rank: int | None = None
    evidence: Evidence | None = None


@dataclass(frozen=True, slots=True)
class GroupProgress:
    """c10d's per-group counters (`pg_status` / `last enqueued … completed`)."""

    enqueued: int | None = None
    started: int | None = None
    completed: int | None = None
    evidence: Evidence | None = None


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """What a log says about one process: its communicators' progress, the
    communication calls it issued last, its errors, and whether it died.

    Like ProcessDump, a record is what the file says; ingest attributes it to
    a global rank (by `rank`, by a pid map, or by host:pid seen elsewhere)
    and merges it with the other artifacts of that rank.
    """

    source: str  # "nccl" | "torch" | "launcher"
    path: str
    host: str = ""
    pid: int | None = None
    rank: int | None = None        # global rank, when the log states it
    local_rank: int | None = None  # a launcher's local rank ([default3]:, local_rank: 3)
    # The most recent communication call the log shows, with group and seq
    # where known, and up to a few before it (oldest first).
    last_op: CommOp | None = None
    recent_ops: tuple[CommOp, ...] = ()
    progress: Mapping[str, GroupProgress] = field(default_factory=dict)
    errors: tuple[Evidence, ...] = ()   # transport errors, timeouts, exceptions worth citing
    peers_in_errors: tuple[int, ...] = ()  # global ranks named as the other side of an error
    timed_out: bool = False             # a watchdog / Gloo / monitoredBarrier timeout fired here
    alive: bool | None = None           # False when the log shows the process died
    exit_code: int | None = None
    signal: str = ""                    # "SIGKILL", "SIGABRT", ...
    evidence: Evidence | None = None    # the line that identifies the process
    # Every group the record shows a call on, and whether it holds every
    # call the process made (a Flight Recorder ring that never wrapped):
    # then a group it does not name had no call from this process.
    named_groups: tuple[str, ...] = ()
    whole_history: bool = False
    unrecorded: tuple[str, ...] = ()   # calls of kinds the record never shows (Gloo's FR: "send", "recv")
    # Why the record's end is inferred rather than stated (a worker a
    # launcher's failure summary leaves out had exited with code 0); "" when stated.
    inferred: str = ""
    # The process's rank in groups other than the default one, as its own
    # lines state it ((group, group-local rank), e.g. from `[PG ID 5 PG GUID
    # 17(PIPELINE_MODEL_PARALLEL_GROUP) Rank 2]` under `[rank4]:`).
    group_ranks: tuple[tuple[str, int], ...] = ()


# Activities a rank can be in, from most to least informative.
BLOCKED = "blocked"        # inside a communication call that has not completed
COMPUTING = "computing"
DATA_LOADING = "data_loading"
IO = "io"
DEVICE_WAIT = "device_wait"
LOCK_WAIT = "lock_wait"    # a lock, condition variable, queue or the GIL
IDLE = "idle"
EXITED = "exited"          # process gone (exit code, signal, alive: false)
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Ending:
    """How a process ended, and where it was before: a launcher's exit code
    or signal, with the call or activity the rank was in until then."""

    exit_code: int | None = None
    signal: str = ""
    evidence: Evidence | None = None
    activity: str = UNKNOWN
    position: CommOp | None = None
    why: str = ""  # why the rank was where it was, before it ended
    # "cause": it ended of its own (killed, crashed, its own error);
    # "knock_on": because another did (an abort after its own timeout, the
    # launcher's SIGTERM, a peer's closed socket); "" until judged.
    role: str = ""
    reason: str = ""
    inferred: str = ""  # why the end is inferred rather than stated; "" when stated

    def describe(self) -> str:
        how = f"exit code {self.exit_code}" if self.exit_code is not None else "exited"
        return how + (f" ({self.signal})" if self.signal else "")


@dataclass(frozen=True, slots=True)
class RankState:
    rank: int
    host: str = ""
    pid: int | None = None
    alive: bool | None = None
    activity: str = UNKNOWN
    current_op: CommOp | None = None
    # Waits the artifact states outright (a watchdog's `waiting_for_ranks`);
    # None when the artifact says nothing, () when it says "nobody".
    declared_waits: tuple[int, ...] | None = None
    threads: tuple[ThreadStack, ...] = ()
    stack: tuple[str, ...] = ()  # main thread, outermost frame first
    streams: tuple[StreamState, ...] = ()
    events: tuple[EventRecord, ...] = ()
    progress: Mapping[str, GroupProgress] = field(default_factory=dict)
    log_events: tuple[Evidence, ...] = ()
    evidence: Evidence | None = None
    # Recent communication calls from logs and Flight Recorder, oldest first,
    # so rules can compare ranks call by call, not only where they stopped.
    history: tuple[CommOp, ...] = ()
    # Why the rank is in this state, for people: the deciding frame and the
    # job's own call site ("send (distributed_c10d.py:2753) ← send_activations (train.py:277)").
    why: str = ""
    # How the process ended, when an artifact says it did.
    ending: Ending | None = None
    # Calls the artifacts that place this rank cannot show ("send", "recv":
    # torch's Gloo Flight Recorder records no point-to-point call): when
    # nothing else shows where the rank is, it may be in one of them.
    unrecorded: tuple[str, ...] = ()
    # What the rank's own console printed last where no reader recognizes its
    # lines (forensics.ingest.console): its last lines, oldest first, and its
    # last progress line (a step, iteration, epoch, loss or progress-bar line).
    last_words: tuple[Evidence, ...] = ()
    last_progress: Evidence | None = None

    @property
    def position(self) -> CommOp | None:
        """The call the rank is in, or was in when it ended."""
        if self.current_op is not None:
            return self.current_op
        return self.ending.position if self.ending is not None else None

    @property
    def is_dead(self) -> bool:
        return self.alive is False or self.activity == EXITED

    @property
    def is_blocked(self) -> bool:
        return (not self.is_dead and self.current_op is not None
                and self.current_op.state != "completed")


@dataclass(frozen=True, slots=True)
class Ring:
    """One channel's ring of a communicator, as NCCL's init lines print it:
    `order` in global ranks, each sending to the next (the last to the first)."""

    channel: int
    order: tuple[int, ...]
    evidence: Evidence | None = None

    def neighbours(self, rank: int) -> tuple[int, int] | None:
        """(the rank it receives from, the rank it sends to)."""
        if rank not in self.order or len(self.order) < 2:
            return None
        at = self.order.index(rank)
        return self.order[at - 1], self.order[(at + 1) % len(self.order)]


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    id: str
    name: str = ""
    ranks: tuple[int, ...] = ()
    # True when `ranks` are the members known so far, not all of them (the
    # group-local numbers its members state pin some members, not its size).
    partial: bool = False
    # NCCL ring channels (lowest channel first), where logs show them.
    rings: tuple[Ring, ...] = ()


@dataclass(frozen=True, slots=True)
class StuckSignal:
    """Evidence that the job as a whole is not progressing.

    kind: cli_hung | declared_hung | watchdog_timeout | op_past_timeout |
    no_progress_between_snapshots | no_progress (forensics collect --snapshots)
    """

    kind: str
    detail: str
    evidence: Evidence | None = None
    detail_zh: str = ""
    # What the signal says, as a message key and its facts ((name, value), …):
    # forensics/words.py says it in each language. `detail` and `detail_zh`
    # are its English and Chinese words, for readers that take text (and the
    # whole of a signal written without a key).
    key: str = ""
    params: tuple = ()


@dataclass(frozen=True, slots=True)
class Event:
    """One dated thing that happened, on the incident's one clock.

    `time` is seconds on `clock`: "wall" (corrected for the host's offset
    where other lines bound it), "boot:<host>" (dmesg without an anchor:
    comparable only within that host), or None when the line carries no
    time (then only the file's order is known). `role` says what the event
    is for the incident: a `cause` candidate (a kill, a crash, an error of
    the process's own), a `knock_on` (an abort after the rank's own
    timeout, a peer's closed socket, the launcher's SIGTERM) or `info`.
    """

    time: float | None
    clock: str
    kind: str
    role: str
    evidence: Evidence
    host: str = ""
    rank: int | None = None
    pid: int | None = None
    detail: str = ""

    def to_json(self) -> dict:
        out = {"time": self.time, "clock": self.clock, "kind": self.kind, "role": self.role,
               "evidence": self.evidence.to_json()}
        for name in ("host", "rank", "pid", "detail"):
            value = getattr(self, name)
            if value not in ("", None):
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class Artifact:
    kind: str
    path: str
    display: str  # the path as the report shows it (relative to the input)
    rank_hint: int | None = None
    full: bool = False  # read every line (timelines), not only what the last state needs
    stamped: bool = False  # every line starts with a log collector's timestamp: parsed without them
    # A launcher prefix (`[rank3]:`): only the lines under it are this artifact, read without it
    # (a console interleaving several processes' dumps and tracebacks, split by process).
    lines_of: str = ""


@dataclass(frozen=True, slots=True)
class ReadStats:
    """How much of one artifact was read, and how much of it was not understood."""

    path: str
    kind: str
    lines: int = 0
    unrecognized: int = 0


@dataclass(frozen=True, slots=True)
class Incident:
    ranks: Mapping[int, RankState]
    groups: Mapping[str, ProcessGroup]
    artifacts: tuple[Artifact, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    stuck: tuple[StuckSignal, ...] = ()
    # Stack dumps no rank could be attributed to: still shown, never dropped.
    unattributed: tuple[ProcessDump, ...] = ()
    read: tuple[ReadStats, ...] = ()
    # What the catalogue recognized in any artifact, each attributed to a
    # global rank where its prefixes, file name or a pid map allow.
    messages: tuple[MessageHit, ...] = ()
    # The dated events of every artifact on one clock, oldest first
    # (forensics/postmortem.py), and how far apart hosts' clocks may be.
    events: tuple[Event, ...] = ()
    skew_s: float | None = None
    # Each NCCL process's view of each communicator pointer it called on
    # (forensics.ingest.nccl.CommView), and which of them merge found to be
    # one communicator (forensics.ingest.communicators.Communicator).
    comm_views: tuple = ()
    communicators: tuple = ()

    def members(self, group: str) -> tuple[int, ...]:
        """Global ranks of `group`; the world when the group is unknown or
        only some of its members are (see stated_members for the evidence's word)."""
        pg = self.groups.get(group) or self.groups.get(group_id(group))
        if pg is not None and pg.ranks and not pg.partial:
            return pg.ranks
        return tuple(sorted(self.ranks))

    def stated_members(self, group: str) -> tuple[int, ...] | None:
        """Global ranks of `group` as the evidence states them: its member
        list (for a `partial` group, the members known so far), or for the
        default group the world; None for another group whose members nothing
        states (its ranks are then not guessed)."""
        pg = self.groups.get(group) or self.groups.get(group_id(group))
        if pg is not None and pg.ranks:
            return pg.ranks
        if group_id(group) == DEFAULT_GROUP or (pg is not None and pg.name == "default_pg"):
            return tuple(sorted(self.ranks))
        return None

    def members_unlisted(self, group: str) -> bool:
        """Whether no artifact states all of `group`'s members: none stated,
        or only some (a `partial` group)."""
        pg = self.groups.get(group) or self.groups.get(group_id(group))
        return self.stated_members(group) is None or (pg is not None and pg.partial)


# --------------------------------------------------------------------------
# Rule output

Node = Union[int, tuple]  # a rank, or ("stream", rank, name), or ("coll", group, seq)


def stream_node(rank: int, stream: str) -> tuple:
    return ("stream", rank, stream)


def node_rank(node: Node) -> int | None:
    if isinstance(node, int):
        return node
    if node and node[0] == "stream":
        return node[1]
    return None


def node_label(node: Node) -> str:
    if isinstance(node, int):
        return str(node)
    if node[0] == "stream":
        return f"{node[1]}:{node[2]}"
    return ":".join(str(part) for part in node)


def path_label(path: list, keep: int = 8) -> str:
    """`0 → 1 → 0`; a long cycle keeps its head and tail: 100,000 ranks stay one line."""
    if len(path) <= 2 * keep:
        return " → ".join(node_label(n) for n in path)
    return (" → ".join(node_label(n) for n in path[:keep]) + f" → … ({len(path) - keep - 3} more) … → "
            + " → ".join(node_label(n) for n in path[-3:]))


AND = "AND"
OR = "OR"


@dataclass(frozen=True, slots=True)
class WaitEdge:
    """`waiter` cannot progress until `awaited` does (AND) — or, for OR edges
    sharing a waiter, until any one of them does."""

    waiter: Node
    awaited: Node
    semantics: str = AND
    reason: str = ""
    rule: str = ""
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    kind: str
    severity: str  # error | warning | info
    ranks: tuple[int, ...]
    message: str
    evidence: tuple[Evidence, ...] = ()
    hint: str = ""
    message_zh: str = ""
    hint_zh: str = ""
    # Set by the analysis when this finding is a consequence of the leading
    # one (its rule id): a peer's socket error after a rank died, ranks
    # waiting on a deadlocked pair.
    symptom_of: str = ""
    # Set when this finding tells more about the leading finding's culprit
    # ranks (why the missing rank is elsewhere) without bearing a verdict.
    detail_of: str = ""
    # The processes blamed, where the evidence identifies them by more (or
    # other) than a rank number: a host, a pid, a peer address.
    culprits: tuple[Culprit, ...] = ()
    # How sure the rule is, when it knows better than the analysis would
    # judge from the incident's shape: "high" | "medium" | "low", and why.
    confidence: str = ""
    confidence_reason: str = ""
    confidence_reason_zh: str = ""

    def to_json(self) -> dict:
        out = {"rule": self.rule, "kind": self.kind, "severity": self.severity,
               "ranks": list(self.ranks), "message": self.message, "hint": self.hint,
               "evidence": [e.to_json() for e in self.evidence]}
        if self.symptom_of:
            out["symptom_of"] = self.symptom_of
        if self.detail_of:
            out["detail_of"] = self.detail_of
        if self.culprits:
            out["culprits"] = [c.to_json() for c in self.culprits]
        return out


@dataclass(frozen=True, slots=True)
class Confidence:
    """How sure the verdict is, in one line, and for an undecided one which
    artifacts would decide it."""

    level: str  # high | medium | low
    reason: str
    reason_zh: str = ""
    missing: tuple[str, ...] = ()
    missing_zh: tuple[str, ...] = ()


def _pickled_as_fields(cls: type) -> None:
    """Pickle `cls` as its class and its field values, rebuilt by its
    constructor. A frozen, slotted dataclass otherwise pickles through
    dataclasses' own __getstate__/__setstate__, which call `fields()` for
    every object, in Python, on both sides: most of the cost of a worker's
    records travelling to the parent (150 µs a Flight Recorder dump)."""
    names = [f.name for f in fields(cls)]
    values = attrgetter(*names)
    if len(names) == 1:
        def __reduce__(self):
            return cls, (values(self),)
    else:
        def __reduce__(self):
            return cls, values(self)
    cls.__reduce__ = __reduce__


for _model_class in [value for value in globals().values()
                     if isinstance(value, type) and value.__module__ == __name__ and is_dataclass(value)]:
    _pickled_as_fields(_model_class)
