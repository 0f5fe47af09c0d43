"""PyTorch c10d logs and torchrun / torchelastic consoles.

What the ProcessGroupNCCL / ProcessGroupGloo / ProcessGroupWrapper messages of
one process say about it becomes one `ProcessRecord` (source "torch"): the
collective it was in (watchdog timeouts, DETAIL fingerprints, the desync
report), each group's progress counters, its errors, whether it died. What the
launcher says about its workers (`failed (exitcode: -15) ...`, the
ChildFailedError summary) becomes one record per worker (source "launcher"),
plus (host, pid, rank) facts.

What one rank's log says about *another* rank (the other side of a DETAIL
fingerprint mismatch, the ranks a desync report or a monitored barrier
names) becomes a record of that rank with source "torch-peer-claim". Such a
claim can be wrong: when the fingerprint tensors themselves differ, the
wrapper prints garbage for the peer (`CollectiveFingerPrint(SequenceNumber=0OpType=SCATTER)`).
The merger (ingest/records.py) uses a peer claim only when the rank's own
logs are silent.

A log is read as a stream of records: a line with a c10 or Python-logging
prefix, a Python traceback, a `terminate called` block or one entry of the
launcher's failure summary, with the lines that continue it (C++ `frame #N:`
lines, the desync report's tab-indented lines, `what():`, hard-wrapped
remainders). Launcher prefixes (`[rank3]:`, `[default3]:`, Ray's
`(WorkerDict pid=…)`, srun's `--label` `3: `) say which process a line
belongs to; records of different processes may interleave. A merged log
comes apart per rank (`_Reader._resolve`): `[defaultN]:` through the
agent's rendezvous result (`global_ranks`), srun labels when consistent,
and unprefixed c10d lines by the rank their own prefix states. Each record is masked (every number
becomes `0`) and each distinct masked record is parsed once by
grammars/torch_log.lark; the parse says where the values sit and they are
read back from the record's own text. Memory stays flat: only open records,
the per-process state and a bounded parse cache are kept.

What goes where, for the merger:
- `last_op` is the latest call a process's lines state (a watchdog timeout,
  a blocking-wait or async error, DETAIL's `Running collective` or the
  fingerprint of a mismatch or a monitored barrier, the desync report's
  own timeout), `recent_ops` the ones before it; the group is the PG GUID
  of the line, else of the record, else "0" (default_pg). A timeout line
  that names no group takes the GUID of the watchdog's next line when that
  line reports the same sequence number.
- `progress[group]`: the latest counters. Desync reports give the ranks they
  name (started, completed): never joined any collective → (-1, -1),
  c10d's value before any work; joined but didn't finish #N → (N, N-1);
  finished #N but didn't join #N+1 → (N, N); snapshot lines likewise.
- Ranks in messages (`Rank N`, `[PG … Rank N]`, desync and monitored
  barrier lists) are group-local: they become global ranks (`rank`,
  peer claims, `peers_in_errors`) only in the default group.
- The launcher's records: `alive=False`, exit code and signal of each
  failed worker. Workers the launcher (or a collector) killed with SIGTERM
  after the hang are not its cause; the entry torchelastic calls the root
  cause has the `Root Cause (first observed failure):` line among its
  `errors`, and `Sending process N closing signal SIGTERM` is in the
  errors of the worker it names. The engine decides what they mean.
- A worker's tee'd lines (`[default1]:`) and the launcher's summary entry
  for local rank 1 are one process: the torch record takes the summary's
  rank, pid and host.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import deque
from dataclasses import replace
from typing import NamedTuple

from .. import lazy
from .reader import markers_hook, reader_hooks
from .. import messages
from ..model import (DEFAULT_GROUP, MAX_RANKS, CommOp, Evidence, GroupProgress, ProcessGroup, ProcessRecord,
                     normalize_op, plausible_rank)
from ..words import say_stuck, stuck_signal
from .facts import Facts
from .cache import BoundedCache as _Cache
from .grammar import parser
from .attribution import path_rank, section_header
from ..ranges import compact
from .textio import (BIG_TEXT, BIG_TEXT_HEAD, STREAM_ERRORS, InputError, compression, file_size, has_nul, lines_with,
                     looks_binary, open_binary)

KIND = "torch-log"
SOURCE = "torch"
PEER_CLAIM = "torch-peer-claim"  # what one rank's log says about another rank
LAUNCHER = "launcher"
GRAMMAR = "torch_log"

MAX_LINE = 64 * 1024         # longer lines are skipped with a diagnostic
MAX_RECORD_LINES = 400       # a record's further continuation lines are read, not kept
MAX_RECORD_CHARS = 256 * 1024
MAX_LISTED = 50              # unrecognized records listed one by one per file
MAX_ERRORS = 64              # error lines kept per process
MAX_STUCK = 200              # stuck signals per file
MAX_CLAIMS = 4               # distinct claims kept about one rank
RECENT_OPS = 3
WRAP_MIN = 60                # a hard-wrapped line is at least this long
MAX_WRAP_CHECKS = 20_000     # parses spent per file on telling wraps from other output
EVIDENCE_CHARS = 2000
PLAIN_BATCH = 4096            # other programs' lines sifted for catalogued messages at once
MAX_STATED = 64              # lines of one catalogue entry kept per file (the first): others' are never crowded out
MAX_GLUED = 8                # log lines looked for inside one line of other output

# ---------------------------------------------------------------- sniffing

_ANSI_PATTERN = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]"  # CSI sequences (colours, tqdm's cursor moves)
_ANSI_BYTES = lazy.regex(_ANSI_PATTERN.encode())
_OUTER_BYTES = rb"(?: *\d{1,6}: )?(?:\[(?:rank|default)\d+\]:|\([^()\n]*pid=\d+[^()\n]*\) ?)*"
_SNIFF = lazy.regex(
    rb"\[[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{6,9} [\w.\-]+\.(?:cpp|cc|h|hpp|cu|cxx):\d+\] "
    rb"|^" + _OUTER_BYTES + rb"\[[FEWIV] [\w\-]+\.(?:cpp|cc|h|hpp|cu|cxx):\d+\] "
    rb"|^" + _OUTER_BYTES + rb"[FEWIV]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ \S*torch/distributed/\S+\.py:\d+\] "
    rb"|^" + _OUTER_BYTES + rb"(?:\[\d{4}-\d\d-\d\d [\d:,]+\] |(?:INFO|WARNING|ERROR|CRITICAL|DEBUG):)"
    rb"torch\.distributed\.[\w.]+:"
    rb"|^(?:torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError:"
    rb"|^Root Cause \(first observed failure\):"
    rb"|^" + _OUTER_BYTES + rb" ?[\w.]+(?:Error|Exception): (?:Detected mismatch between collectives"
    rb"|(?:\[Rank \d+\]: )?Ranks? [\d, ]+ failed to pass monitoredBarrier"
    rb"|\[[^\]\s]+\] Timed out waiting \d+ms for (?:recv|send) operation)",
    re.M)


# Every alternative of _SNIFF needs one of these: C-speed scans rule out
# most files (each stack dump of a 10,000-rank collection, each NCCL log)
# before the multi-line regex runs, which is slow on a 64 KiB head. The
# source-file endings are the c10 prefixes' (`ProcessGroupNCCL.cpp:1234] `).
# The glog form of the Python loggers (`I0612 … torch/distributed/….py:12] `)
# has no literal of its own that a py-spy dump's frames lack: its time stamp
# is searched for, only in files naming torch/distributed/ with a "] ".
_SNIFF_LITERALS = (b"torch.distributed.", b"ChildFailedError", b"Root Cause", b"Detected mismatch",
                   b"monitoredBarrier", b"Timed out waiting", b".cpp:", b".cc:", b".h:", b".hpp:", b".cu:",
                   b".cxx:")
_SNIFF_GLOG = lazy.regex(rb"[FEWIV]\d{4} \d\d:\d\d:\d\d\.\d{6}")


def sniff(path: str, head: bytes) -> bool:
    """c10 log prefixes, torchelastic's logging and failure summary, or the
    exceptions c10d raises. NCCL_DEBUG lines alone are the NCCL reader's."""
    if has_nul(head):  # binary: declined before any search of 64 KiB
        return False
    if path.endswith((".py", ".pyi")):
        return False  # Python source quotes these messages as literals: a script, not what a run printed
    if _crash_report(head):  # a rank's stderr: a traceback through c10d, or a C++ abort
        return not looks_binary(head)
    glog = b"torch/distributed/" in head and b"] " in head and _SNIFF_GLOG.search(head) is not None
    if not (glog or any(literal in head for literal in _SNIFF_LITERALS)):
        return False
    if looks_binary(head):
        return False
    if b"\x1b" in head:
        head = _ANSI_BYTES.sub(b"", head)
    # only the lines that hold a literal can match: the pattern runs over them, not every position of the head
    candidates = lines_with(head, _SNIFF_LITERALS + ((b"torch/distributed/",) if glog else ()))
    return _SNIFF.search(candidates) is not None


def _crash_report(head: bytes) -> bool:
    """A rank's stderr when it died: a Python traceback through
    torch.distributed (the exception c10d raised), or a C++ exception from
    Gloo or c10 that terminated the process. (A JSON document quoting one,
    torchelastic's error.json, is the elastic_error reader's.)"""
    if head.lstrip()[:1] == b"{":
        return False
    return ((b"Traceback (most recent call last):" in head
             and (b"torch/distributed/distributed_c10d.py" in head or b"torch/distributed/c10d_logger.py" in head))
            or b"terminate called after throwing an instance of 'gloo::" in head
            or b"terminate called after throwing an instance of 'c10::" in head)


# A plain log larger than BIG_FILE is read as its head (BIG_HEAD: init lines, the job's ranks,
# groups, hosts) and its tail, numbered as every reader numbers a big file (textio.cited_head_lines).
BIG_FILE, BIG_HEAD = BIG_TEXT, BIG_TEXT_HEAD
BIG_TAIL = 256 << 10   # where it stopped: timeouts, desync reports, exceptions, exits; grown while
BIG_TAIL_MOST = 16 << 20  # it holds nothing of c10d's (a console whose last hours are NCCL INFO lines)
# What marks a c10d line or block: a big log's tail grows until it holds one, and the scan
# looks around each in the middle of a big file (with the sniffer's own literals).
_C10D_MARKS = (b"ProcessGroup", b"c10d", b"Watchdog", b"Traceback", b"torch.distributed", b"torch/distributed",
               b"terminate called", b"[Rank ", b"Desync", b"NCCL error", b"ChildFailedError")


def parse(path: str, display: str) -> Facts:
    facts = Facts(KIND, display)
    size = file_size(path)
    lines = _ends(path, display, facts, size) if size > BIG_FILE and not compression(path) else \
        _lines(path, display, facts)
    head = list(itertools.islice(lines, LABEL_HEAD_LINES))
    reader = _Reader(facts, display, labelled=labelled([data for _, data in head if data is not None]))
    for line_no, data in itertools.chain(head, lines):
        reader.feed(line_no, data)
    if not reader.seen_text:
        raise InputError(display, "empty file")
    reader.finish()
    return facts


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)},
    lambda path, head: KIND if sniff(path, head) else None)
forensics_sniff_markers = markers_hook(_SNIFF_LITERALS + _C10D_MARKS)


# ---------------------------------------------------------------- reading lines

def _lines(path: str, display: str, facts: Facts):
    """(line number, bytes without the newline) for every line, streamed;
    lines longer than MAX_LINE are skipped (None). A file that breaks off
    (a cut gzip stream, an I/O error) ends with a diagnostic."""
    try:
        handle = open_binary(path)
    except OSError as exc:
        raise InputError(display, f"cannot read: {(exc.strerror or str(exc)).lower()}") from None
    line_no = 0
    with handle:
        while True:
            try:
                data = handle.readline(MAX_LINE + 1)
                if len(data) > MAX_LINE and not data.endswith(b"\n"):
                    while data and not data.endswith(b"\n"):
                        data = handle.readline(1 << 20)
                    line_no += 1
                    facts.lines_read += 1
                    facts.diag(line_no, f"line longer than {MAX_LINE // 1024} KiB: skipped")
                    yield line_no, None
                    continue
            except STREAM_ERRORS as exc:
                reason = f"{exc.__class__.__name__}: {exc}"[:200]
                if line_no == 0:
                    raise InputError(display, f"cannot read: {reason}") from None
                facts.diag(line_no, f"file cut short after line {line_no}: {reason}", "error")
                return
            if not data:
                return
            line_no += 1
            facts.lines_read += 1
            yield line_no, data


def _ends(path: str, display: str, facts: Facts, size: int):
    """The head and the tail of a big plain log, as `_lines` gives lines: the
    head's lines numbered from 1, the tail's counted back from the end (-1
    the last), without the NCCL INFO lines among them (the NCCL reader's).
    The tail grows (256 KiB, 1, 4, 16 MiB) until it holds a c10d line. Hours
    of a console are never read whole: what a c10d verdict needs is at its
    two ends, whatever its size."""
    try:
        with open_binary(path) as handle:
            raw = handle.read(BIG_HEAD)
            head = raw[:raw.rfind(b"\n") + 1]  # whole lines only, numbered from 1
            want = BIG_TAIL
            while True:
                start = max(len(raw), size - want)
                handle.seek(start - 1)
                before = handle.read(1)
                tail = handle.read(want)
                if want >= BIG_TAIL_MOST or len(raw) + len(tail) >= size \
                        or any(mark in tail for mark in _C10D_MARKS):
                    break
                want *= 4
    except STREAM_ERRORS as exc:
        raise InputError(display, f"cannot read: {exc.__class__.__name__}: {exc}"[:200]) from None
    if start == len(raw):
        tail = raw[len(head):] + tail  # the tail reaches the head: the line across the two is whole
    elif before != b"\n":
        tail = tail[tail.find(b"\n") + 1:]  # begun mid-line: that line's end only
    facts.diag(0, f"{size - len(head) - len(tail):,} bytes between this log's first {len(head) >> 10:,} KiB and "
                  f"its last {len(tail) >> 10:,} KiB were not read by the c10d reader (lines of the tail are "
                  f"numbered back from the end, -1 being the last)", "info")
    for number, data in enumerate(_newline_lines(head), 1):
        facts.lines_read += 1
        if b" NCCL INFO " not in data:
            yield number, data if len(data) <= MAX_LINE else None
    lines = _newline_lines(tail)
    for number, data in enumerate(lines, -len(lines)):
        facts.lines_read += 1
        if b" NCCL INFO " not in data:
            yield number, data if len(data) <= MAX_LINE else None


def _newline_lines(data: bytes) -> list[bytes]:
    """`data`'s lines split at "\\n" only, as `tail -n` and the NCCL reader
    count them (a progress bar's "\\r" is inside a line, not a line break)."""
    lines = data.split(b"\n")
    last = lines.pop()
    out = [line + b"\n" for line in lines]
    if last:
        out.append(last)
    return out


# ---------------------------------------------------------------- masking

_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def _mask(text: str) -> str:
    """Every digit becomes `0`: records that differ only in their numbers
    share one parse, and every value keeps its place."""
    return text.encode("utf-8", "surrogatepass").translate(_DIGITS).decode("utf-8", "surrogatepass")


class _Text:
    """A record's text and its masked form; spans of the one are spans of the other."""

    __slots__ = ("text", "masked")

    def __init__(self, text: str):
        self.text = text
        self.masked = _mask(text)

    def get(self, ref) -> str:
        return self.text[ref[0]:ref[1]] if ref is not None else ""

    def int(self, ref) -> int | None:
        if ref is None:
            return None
        text = self.text[ref[0]:ref[1]].strip()
        try:
            return int(text, 16) if text[:2] in ("0x", "0X") else int(text)
        except ValueError:
            return None


# ---------------------------------------------------------------- parsing records

class _Event(NamedTuple):
    """One thing a record says. `at` is a position in the masked record
    (a line index once the template is built); `data` holds masked-text
    spans (start, end) and tagged tuples of them; `pg` is the PG prefix the
    message carried: (GUID span, desc span, group-local rank span)."""

    kind: str
    at: int = -1
    data: tuple = ()
    pg: tuple | None = None


class _Unreadable(NamedTuple):
    line: int        # 0-based line of the record where the parse stopped
    column: int      # 1-based column in that line (0: the end of the record)
    at_end: bool = False  # the text stops inside a known shape: it may go on


def _ref(token) -> tuple[int, int]:
    return (token.start_pos, token.end_pos)


def _tokens(children, *types):
    return [c for c in children if isinstance(c, lazy.lark.Token) and c.type in types]


def _token(children, *types):
    found = _tokens(children, *types)
    return found[0] if found else None


def _at(children) -> int:
    for child in children:
        if isinstance(child, lazy.lark.Token):
            return child.start_pos
        if isinstance(child, _Event):
            return child.at
        if isinstance(child, list) and child:
            return child[0].at
    return -1


def _events(children) -> list[_Event]:
    out: list[_Event] = []
    for child in children:
        if isinstance(child, _Event):
            out.append(child)
        elif isinstance(child, list):
            out.extend(child)
    return out


def _tagged(children, tag):
    return next((c for c in children if isinstance(c, tuple) and c and c[0] == tag), None)


def _num(children, index=0):
    found = _tokens(children, "NUM")
    return _ref(found[index]) if len(found) > index else None


def _text_ref(children):
    token = _token(children, "TEXT")
    return _ref(token) if token is not None else None


def _event(kind):
    """A transformer callback for a rule that states one event, and what it nests."""
    def callback(self, children):
        return [_Event(kind, _at(children))] + _events(children)
    return callback


class _C10dTransformer:
    """Builds a record's template (a tuple of `_Event`) while lark parses."""

    # -- values
    def shape(self, c):
        return ("shape", tuple(_ref(t) for t in _tokens(c, "NUM")))

    def ranks(self, c):
        return ("ranks", tuple(_ref(t) for t in _tokens(c, "NUM")))

    def work_seq(self, c):
        return ("seq", _num(c))

    def work_op(self, c):
        return ("op", _ref(_token(c, "OPNAME")))

    def work_timeout(self, c):
        return ("timeout", _num(c))

    def work_numel_in(self, c):
        return ("numel_in", _num(c))

    def work_numel_out(self, c):
        return ("numel_out", _num(c))

    def work_shape(self, c):
        return c[0]

    fp_seq = work_seq
    fp_op = work_op
    fp_shape = work_shape

    def fp_dtype(self, c):
        return ("dtype", _ref(_token(c, "DTYPES")))

    def work(self, c):
        return ("work", tuple(x for x in c if isinstance(x, tuple)))

    def fingerprint(self, c):
        return ("fp", tuple(x for x in c if isinstance(x, tuple)))

    def counters(self, c):
        return ("counters", _num(c, 0), _num(c, 1))

    def dump_source(self, c):
        return ("from", _num(c))

    def noise(self, c):
        return None

    # -- prefixes and messages
    def rank_prefix(self, c):
        return ("pg", None, None, _num(c), _at(c))

    def pg_prefix(self, c):
        guid, desc = _token(c, "GUID"), _token(c, "DESC")
        return ("pg", _ref(guid) if guid else None, _ref(desc) if desc else None,
                _num(c, len(_tokens(c, "NUM")) - 1), _at(c))

    def message(self, c):
        """Events of the message carry its PG prefix (the last one naming a
        GUID); a nested message without a GUID inherits this one's."""
        context = None
        for child in c:
            if isinstance(child, tuple) and child[0] == "pg":
                if context is None or child[1] is not None or context[1] is None:
                    context = child
        events = _events(c)
        if context is None:
            return events
        pg = context[1:4]
        out = [_Event("pg", context[4], (), pg)]
        for ev in events:
            if ev.pg is None:
                ev = ev._replace(pg=pg)
            elif ev.pg[0] is None and pg[0] is not None:
                ev = ev._replace(pg=(pg[0], pg[1], ev.pg[2] if ev.pg[2] is not None else pg[2]))
            out.append(ev)
        return out

    # -- records
    def c10_record(self, c):
        head = c[0]
        return [_Event("c10", head.start_pos, (head.value[1],))] + _events(c)

    def log_record(self, c):
        head = c[0]
        text = head.value
        level = text[0] if text[0] in "FEWIV" else next(
            (name[0] for name in ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG") if name in text), "I")
        level = "F" if level == "C" else level
        where = _LOG_WHERE.match(text)
        source = pid = None
        if where is not None:
            group = next(g for g in ("glog", "stamped", "plain") if where.group(g) is not None)
            source = (head.start_pos + where.start(group), head.start_pos + where.end(group))
            if where.group("pid") is not None:
                pid = (head.start_pos + where.start("pid"), head.start_pos + where.end("pid"))
        return [_Event("log", head.start_pos, (level, source, pid))] + _events(c)

    traceback = _event("traceback")
    terminate = _event("terminate")
    what = _event("what")

    def exception(self, c):
        name = c[0]
        return [_Event("exception", name.start_pos, (_ref(name),))] + _events(c)

    # -- c10d events
    def watchdog_timeout(self, c):
        return [_Event("timeout", _at(c), (_tagged(c, "work"), _num(c)))]

    def failure_detected(self, c):
        return [_Event("failure", _at(c), (_num(c, 0), _num(c, 1), _num(c, 2)))]

    def old_failure(self, c):
        counters = _tagged(c, "counters")
        return [_Event("failure", _at(c), (_num(c, 0), counters[1], counters[2]))]

    def periodic(self, c):
        counters = _tagged(c, "counters")
        return [_Event("progress", _at(c), (counters[1], counters[2]))]

    def dump_signal(self, c):
        counters = _tagged(c, "counters")
        source = _tagged(c, "from")
        return [_Event("dump_signal", _at(c), (source[1] if source else None, counters[1], counters[2]))]

    def watchdog_hang(self, c):
        return [_Event("watchdog_hang", _at(c), (_num(c),))]

    def terminating(self, c):
        return [_Event("terminating", _at(c), (_text_ref(c),))]

    watchdog_exit = _event("watchdog_exit")
    process_down = _event("process_down")

    def async_error(self, c):
        return [_Event("async_error", _at(c), (_tagged(c, "work"),))] + _events(c)

    def blocking_wait(self, c):
        return [_Event("blocking_wait", _at(c), (_tagged(c, "work"),))]

    def remote_error(self, c):
        return [_Event("remote_error", _at(c), (_num(c),))]

    # -- DETAIL
    def running(self, c):
        return [_Event("running", _at(c), (_tagged(c, "fp"),))]

    def mismatch(self, c):
        prints = [x for x in c if isinstance(x, tuple) and x[0] == "fp"]
        return [_Event("mismatch", _at(c), (_num(c, 0), prints[0], _num(c, 1), prints[1]))]

    def wrapper_barrier(self, c):
        return [_Event("wrapper_barrier", _at(c), (_tagged(c, "fp"),))]

    # -- monitored barrier
    def barrier_failed(self, c):
        listed = _tagged(c, "ranks")
        if listed is not None:
            return [_Event("barrier_failed", _at(c), (listed[1], _num(c)))]
        return [_Event("barrier_failed", _at(c), ((_num(c, 0),), _num(c, 1)))]

    def barrier_peer_error(self, c):
        return [_Event("barrier_peer_error", _at(c), (_num(c),))]

    def barrier_timeout(self, c):
        return [_Event("barrier_timeout", _at(c), (_num(c, 0), _num(c, 1)))]

    # -- desync report
    def desync_timeout(self, c):
        return [_Event("desync_timeout", _at(c), (_num(c, 0), _ref(_token(c, "OPNAME")), _num(c, 1)))]

    def desync_missing(self, c):
        return [_Event("desync_missing", _at(c), (_tagged(c, "ranks")[1],))]

    def desync_joined(self, c):
        return [_Event("desync_joined", _at(c), (_tagged(c, "ranks")[1], _num(c, 0)))]

    def desync_finished(self, c):
        return [_Event("desync_finished", _at(c), (_tagged(c, "ranks")[1], _num(c, 0)))]

    def desync_snapshot_head(self, c):
        head = c[0]
        verb = "started" if "started" in head.value else "finished"
        digits = len(head.value[1:].split(" ", 1)[0])
        return [_Event("desync_snapshot_head", head.start_pos,
                    ((head.start_pos + 1, head.start_pos + 1 + digits), verb))]

    def desync_snapshot(self, c):
        verb = _token(c, "SNAPSHOT_VERB").value
        return [_Event("desync_snapshot", _at(c), (_tagged(c, "ranks")[1], verb, _ref(_token(c, "OPNAME"))))]

    # -- Gloo
    def gloo_timeout(self, c):
        return [_Event("gloo_timeout", _at(c), (_num(c), _token(c, "GLOO_DIRECTION").value))]

    def gloo_peer_error(self, c):
        return [_Event("gloo_error", _at(c), ())]

    def gloo_error(self, c):
        return [_Event("gloo_error", _at(c), ())]

    # -- launcher
    def child_failed(self, c):
        return [_Event("child_failed", _at(c), (_num(c, 0), _num(c, 1), _num(c, 2)))]

    def child_signalled(self, c):
        return [_Event("child_signalled", _at(c), (_num(c), _token(c, "SIGNAL").value))]

    def summary_entry(self, c):
        fields = tuple(x for x in c if isinstance(x, tuple))
        return [_Event("entry", c[0].start_pos, fields)]

    # Entry fields start with their line's newline: their position is the field name's.
    def entry_host(self, c):
        return ("host", _at(c[1:]), _text_ref(c))

    def entry_rank(self, c):
        return ("rank", _at(c[1:]), _num(c, 0), _num(c, 1))

    def entry_exitcode(self, c):
        name = _token(c, "SIGNAL_NAME")
        return ("exitcode", _at(c[1:]), _num(c, 0), _num(c, 1), name.value[1:-1] if name else "")

    def entry_signal(self, c):
        return ("traceback", _at(c[1:]), _token(c, "SIGNAL").value)

    def entry_traceback(self, c):
        return ("traceback", _at(c[1:]), "")

    def entry_more(self, c):
        return ("more", _at(c[1:]), "")

    root_cause = _event("root_cause")

    def __default__(self, data, children, meta):
        """Rules that state nothing themselves pass on what they nest. Lark's
        own repetition rules (`__…`) must stay trees: lark splices them into
        their parent while parsing, so none reaches a template."""
        if data.startswith("_"):
            return lazy.lark.Tree(data, children)
        return _events(children)

    def start(self, c):
        return _events(c)


_LOG_WHERE = lazy.regex(r"[FEWIV]0+ 0+:0+:0+\.0+ +(?P<pid>0+) (?P<glog>[^\]\s]+):0+\]"
                        r"|\[[^\]]*\] (?P<stamped>[\w.]+):|[A-Z]+:(?P<plain>[\w.]+):")

_TEMPLATES = _Cache(32 << 20)


def _template(masked: str):
    """The events a masked record states, as a tuple of `_Event` whose `at`
    is a line index within the record; or `_Unreadable`."""
    found = _TEMPLATES.get(masked)
    if found is None:
        try:
            events = parser(GRAMMAR, "start", _C10dTransformer).parse(masked)
            found = tuple(ev._replace(at=masked.count("\n", 0, ev.at) if ev.at > 0 else 0) for ev in events)
        except lazy.lark.exceptions.UnexpectedInput as exc:
            line = max(0, (getattr(exc, "line", 1) or 1) - 1)
            column = 0 if _at_end(exc) else (getattr(exc, "column", 0) or 0)
            found = _Unreadable(line, column, _stops_short(exc, masked))
        except Exception:  # noqa: BLE001 - whatever a record does to the parser, it is one unread record
            found = _Unreadable(0, 1)
        _TEMPLATES.put(masked, found)
    return found


def _stops_short(exc, masked: str) -> bool:
    """Whether the text ends where more of a known shape was expected: at
    the end of the record, or inside a keyword cut in two."""
    if isinstance(exc, lazy.lark.exceptions.UnexpectedEOF):
        return True
    if isinstance(exc, lazy.lark.exceptions.UnexpectedToken):
        if exc.token.type == "$END":
            return True
        expected, at = exc.expected, exc.token.start_pos
    elif isinstance(exc, lazy.lark.exceptions.UnexpectedCharacters):
        expected, at = exc.allowed, exc.pos_in_stream
    else:
        return False
    rest = masked[at:] if at is not None else ""
    if not rest or "\n" in rest:
        return not rest
    if len(rest) <= 40:
        return True  # a few characters before the end: a word cut in two
    literals = _literals()
    return any(literals.get(name, "").startswith(rest) for name in expected or ())


@functools.lru_cache(maxsize=1)
def _literals() -> dict[str, str]:
    return {t.name: t.pattern.value for t in parser(GRAMMAR, "start", _C10dTransformer).terminals
            if t.pattern.type == "str"}


def _at_end(exc) -> bool:
    token = getattr(exc, "token", None)
    return isinstance(exc, lazy.lark.exceptions.UnexpectedEOF) or getattr(token, "type", "") == "$END"


_PLAIN_EVENTS = frozenset({"c10", "log", "pg"})


def _specific(template) -> int:
    return sum(1 for ev in template if ev.kind not in _PLAIN_EVENTS)


# ---------------------------------------------------------------- cutting the stream into records

_ANSI = lazy.regex(_ANSI_PATTERN)
# `[rankN]:` (torchrun --tee), Open MPI's --tag-output `[JOB,N]<stderr>:` (N is the MPI rank: Horovod's and a
# torch job's under mpirun; with --timestamp-output a ctime before it), `[defaultN]:` (a local rank), Ray's
# `(pid=N, ip=…)`
_OUTER = lazy.regex(r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?"  # mpirun --timestamp-output
                    r"\[(?:rank|\d{1,6},)(?P<rank>\d{1,7})\](?:<std(?:out|err|diag)>)?:|\[default(?P<local>\d{1,7})\]:"
                    r"|\((?:[A-Za-z_][\w.:\-]*\s+)?pid=(?P<pid>\d{1,10})(?:,\s*ip=(?P<ip>[^)\s]+))?\)\s?")
_GLUED = lazy.regex(r"\[(?:rank|default)\d{1,7}\]:|\[[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{6,9} "
                    r"|\[[FEWIV] [\w\-]+\.(?:cpp|cc|cu|cxx):\d+\] \[(?:Rank \d|PG )")  # <= 2.2: no time
_HEAD = lazy.regex(r"""
  (?P<c10>\[[FEWIV](?:\d{1,4}\ \d\d:\d\d:\d\d\.\d+)?\ [^\]\s]+:\d+\])
| (?P<log>[FEWIV]\d{4}\ \d\d:\d\d:\d\d\.\d+\ +\d+\ [^\]\s]+:\d+\]
         | \[\d{4}-\d\d-\d\d\ \d\d:\d\d:\d\d,\d+\]\ torch\.[\w.]*:\ \[[A-Z]+\]
         | (?:DEBUG|INFO|WARNING|ERROR|CRITICAL):torch\.[\w.]*:)
| (?P<tb>Traceback\ \(most\ recent\ call\ last\):)
| (?P<term>terminate\ called\b)
| (?P<original>\s?Original\ exception:\s*$)
| (?P<cont>\t|Exception\ raised\ from\ |frame\ \#\d+:\ |\#\d+\ \S|\s*what\(\):)
| (?P<entry>\[\d+\]:\s*$)
| (?P<marker>(?:={3,}|-{3,}|Failures:|\s*<NO_OTHER_FAILURES>|Root\ Cause\ \(first\ observed\ failure\):
             |\S+\ FAILED)\s*$)
| (?P<field>\ \ (?:time|host|rank|exitcode|error_file|traceback)\s*:)
| (?P<gloo>\[[^\]\s]+\.(?:cc|cpp|cxx|h|hpp):\d+\]\ )
| (?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure)\b(?::|\s*$))
| (?P<indent>[ \t]+\S)
| (?P<chain>The\ above\ exception\ was\ the\ direct\ cause|During\ handling\ of\ the\ above\ exception)
""", re.X)
_EXCEPTION_LINE = lazy.regex(r"[A-Za-z_][\w.]*(?::|\s*$)")
_NEW_RECORD = frozenset({"c10", "log", "tb", "term", "entry", "marker"})
_AGENT_LOGGERS = ("torch/distributed/elastic/", "torch/distributed/run.py", "torch/distributed/launch",
                  "torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launch")

_KIND_NAMES = {"c10": "c10d log line", "log": "launcher log line", "tb": "traceback",
               "exc": "exception line", "term": "terminate message", "gloo": "Gloo error",
               "entry": "failure summary entry", "marker": "failure summary line"}

FILE = ("file",)
AGENT = ("agent",)
SUMMARY = ("summary",)

# -- who printed a line: launcher labels, old c10d rank prefixes, the launcher's rank assignment

LABEL_HEAD_LINES = 200  # lines read before deciding whether a file is `srun --label` output
_LABEL = lazy.regex(r" *(\d{1,6}): ")  # srun --label: `%0*d: ` (older Slurm) or space-padded
_LABEL_BYTES = lazy.regex(rb" *\d{1,6}: ")
_SLURM_OWN = (b"srun: ", b"slurmstepd: ", b"slurmstepd-")
# A c10 line's own rank: `[Rank N]` (WorkNCCL's prefix, <= 2.2: group-local, the
# global rank in the default group) or a PG prefix naming its group.
_OWN_RANK = lazy.regex(
    r"(?:\[[FEWIV][^\]\n]{0,80}\]|[FEWIV]\d{4} [\d:.]+ +\d+ [^\]\s]+:\d+\]) +"
    r"\[(?:Rank (?P<rank>\d{1,7})|PG (?:ID \d+ PG GUID )?(?P<guid>[^\s()\]]+)(?: ?\([^)\]\n]*\))? "
    r"Rank (?P<pg_rank>\d{1,7}))\] ")
# torchelastic's rendezvous result (api.py `_rendezvous`, one field a line in
# every version), its launch configs, and the world size c10d states.
_LAUNCH_HINT = lazy.regex(r"_ranks=|group_rank=|world_sizes?=|restart_count=|WORLD_SIZE|"
                          r"initialization options: size|nproc_per_node|_nodes\s*:|joined round|"
                          r"torchrun|torch\.distributed\.(?:run|launch)|--num[_-]processes|mpirun|horovodrun|"
                          r"\bmpiexec\b| closing signal ")
_AGENT_FIELD = lazy.regex(r"\b(restart_count|group_rank|group_world_size|local_ranks|global_ranks|"
                          r"global_world_sizes)=(\[[\d,\s]*\]|\d{1,9}(?!\d))")
_LAUNCH_FIELD = lazy.regex(r"\b(nproc_per_node|min_nodes|max_nodes)\s*:\s*(\d{1,7})\s*$")
_INIT_SIZE = lazy.regex(r"initialization options: size: (\d{1,7}), global rank: \d+.*?PG Name: (\S+?),?(?:\s|$)")
_JOINED = lazy.regex(r"has joined round \d+ of the rendezvous '[^'\n]*' as rank (\d{1,7}) in a world of size")
_WORLD_ENV = lazy.regex(r"\bWORLD_SIZE\s*[=:]\s*['\"]?(\d{1,7})\b")
# A launch command echoed into the console (`$ torchrun --nproc-per-node 4 train.py`,
# `+ python -m torch.distributed.run --nproc_per_node=8 …` under `bash -x`,
# `accelerate launch --num_processes 8 …`, `mpirun -np 16 …`): torchrun's
# world is nproc × nnodes where nnodes is fixed (default 1; `2` or `2:2`, not
# an elastic range `1:4`); accelerate's --num_processes and mpirun's -np are
# the whole world.
_TORCHRUN = lazy.regex(r"(?:^|[\s/'\"=])(?:torchrun|-m\s+torch\.distributed\.(?:run|launch))\s")
_NPROC = lazy.regex(r"\s--nproc[_-]per[_-]node(?:=|\s+)(\d{1,5})(?=\s|$)")
_NNODES = lazy.regex(r"\s--nnodes(?:=|\s+)(\d{1,5})(?::(\d{1,5}))?(?=\s|$)")
_NNODES_ANY = lazy.regex(r"\s--nnodes(?:=|\s)")
_WHOLE_WORLD = lazy.regex(r"(?:^|[\s/'\"])(?:accelerate\s+launch(?:\s.*?)?\s--num[_-]processes(?:=|\s+)|"
                          r"(?:mpirun|mpiexec|horovodrun)\s(?:.*?\s)?-(?:np|n)\s+)(\d{1,7})(?=\s|$)")


def command_world(body: str) -> tuple[int, int | None] | None:
    """(world size, workers per node where the command says) a launch
    command line states, or None."""
    if _TORCHRUN.search(body):
        nproc = _NPROC.search(body)
        if nproc is None:
            return None
        nodes = _NNODES.search(body)
        if nodes is None:
            if _NNODES_ANY.search(body):
                return None  # --nnodes $NNODES, an elastic range written otherwise
            return int(nproc.group(1)), int(nproc.group(1))
        if nodes.group(2) is not None and nodes.group(2) != nodes.group(1):
            return None  # an elastic range: the world is known only after rendezvous
        return int(nproc.group(1)) * int(nodes.group(1)), int(nproc.group(1))
    found = _WHOLE_WORLD.search(body)
    return (int(found.group(1)), None) if found is not None else None


def labelled(lines: list[bytes]) -> bool:
    """Whether a file's head is `srun --label` output: from its first
    labelled line on, every line carries a label (Slurm's own `srun:` and
    `slurmstepd:` lines aside; lines before it are the batch script's), and
    at least two do. Then `12: text` is task 12's line."""
    count = 0
    for data in lines:
        text = data.rstrip(b"\r\n")
        if not text.strip():
            continue
        if _LABEL_BYTES.match(text):
            count += 1
        elif count and not text.startswith(_SLURM_OWN):
            return False
    return count >= 2


_LIST_FIELDS = frozenset({"local_ranks", "role_ranks", "global_ranks", "role_world_sizes", "global_world_sizes"})


def _numbers(text: str) -> list[int] | None:
    """The numbers of a printed list; None when one is longer than any rank."""
    found = re.findall(r"\d+", text)
    return None if any(len(n) > 9 for n in found) else [int(n) for n in found]


class _Pending:
    """A record being assembled: its lines (body text, full text for
    evidence, physical line number)."""

    __slots__ = ("kind", "key", "bodies", "fulls", "numbers", "last_len", "last_line",
                 "tb_done", "expect_more", "dropped", "size", "label")

    def __init__(self, kind, key, line_no, full, body):
        self.kind, self.key = kind, key
        self.bodies, self.fulls, self.numbers = [body], [full], [line_no]
        self.last_len, self.last_line = len(full), line_no
        self.tb_done = False
        # A line ending in ":" announces more: `. Error: `, ` Original exception: `.
        self.expect_more = kind in ("c10", "exc", "term") and body.rstrip().endswith(":")
        self.dropped = 0
        self.size = len(body)
        self.label: int | None = None  # the srun task that printed it

    def add(self, line_no, full, body) -> None:
        self.last_len, self.last_line = len(full), line_no
        self.size += len(body)
        self.expect_more = ((self.kind in ("c10", "exc", "term") or (self.kind == "tb" and self.tb_done))
                            and body.rstrip().endswith(":"))
        if len(self.bodies) >= MAX_RECORD_LINES or self.size > MAX_RECORD_CHARS:
            self.dropped += 1
            return
        self.bodies.append(body)
        self.fulls.append(full)
        self.numbers.append(line_no)

    def join(self, line_no, full, body) -> None:
        """A hard-wrapped remainder: glued to the line it continues."""
        self.bodies[-1] += body
        self.fulls[-1] += full
        self.last_len, self.last_line = len(full), line_no
        self.size += len(body)
        self.expect_more = self.expect_more and self.bodies[-1].rstrip().endswith(":")

    def text(self) -> str:
        return "\n".join(self.bodies)

    def evidence(self, display: str, index: int) -> Evidence:
        index = min(max(index, 0), len(self.fulls) - 1)
        return Evidence(display, self.numbers[index], self.fulls[index].rstrip()[:EVIDENCE_CHARS])


def _unbalanced(text: str) -> bool:
    return text.count("(") > text.count(")") or text.count("[") > text.count("]")


# ---------------------------------------------------------------- what a log says about a process

class _Proc:
    """What the file says about one process, built up record by record."""

    __slots__ = ("key", "rank", "local_rank", "pid", "host", "ops", "progress", "pending_progress",
                 "errors", "error_lines", "errors_dropped", "peers", "timed_out", "alive", "exit_code",
                 "signal", "evidence", "stuck", "guessed_group_op", "meaningful", "c10",
                 "rank_conflict", "group_ranks")

    def __init__(self, key):
        self.key = key
        self.rank = key[1] if key[0] == "rank" else None
        self.local_rank = key[1] if key[0] == "local" else None
        self.pid = key[1] if key[0] == "pid" else None
        self.host = ""
        # The last calls, oldest first, as (CommOp or _Lazy, line). A call read
        # lazily is a DETAIL `Running collective` line: when an error line
        # restates the call, the error line is the better evidence.
        self.ops: deque[tuple] = deque(maxlen=RECENT_OPS + 1)
        self.progress: dict[str, GroupProgress] = {}
        self.pending_progress: dict[str, _Lazy] = {}
        self.errors: list[Evidence] = []
        self.error_lines: set[int] = set()
        self.errors_dropped = 0
        self.peers: list[int] = []
        self.timed_out = False
        self.alive: bool | None = None
        self.exit_code: int | None = None
        self.signal = ""
        self.evidence: Evidence | None = None
        self.stuck: list[tuple] = []  # (kind, message key, facts, evidence), labelled at the end
        self.group_ranks: dict[str, int] = {}  # group (not the default one) → this process's rank in it
        self.guessed_group_op: CommOp | None = None
        self.meaningful = False
        self.c10 = False
        self.rank_conflict = False

    def error(self, evidence: Evidence) -> None:
        self.meaningful = True
        if evidence.line in self.error_lines:
            return
        if len(self.errors) >= MAX_ERRORS:
            self.errors_dropped += 1
            return
        self.error_lines.add(evidence.line)
        self.errors.append(evidence)

    def peer(self, rank: int | None) -> None:
        if rank is not None and rank not in self.peers:
            self.peers.append(rank)

    def op(self, op: CommOp, line: int) -> None:
        """The most recent call; a statement about the same call (same op,
        group and seq) completes it rather than pushing it down."""
        self.meaningful = True
        last = self.last_op
        if last is not None and _same_call(last, op):
            self.ops[-1] = (_merged(last, op, self.ops[-1][2]), self.ops[-1][1], False)
        else:
            self.ops.append((op, line, False))

    def lazy_op(self, build, line: int) -> None:
        """A call stated by a line of which thousands may follow (DETAIL's
        `Running collective`): read only if no later call pushes it out."""
        self.meaningful = True
        self.ops.append((_Lazy(build), line, True))

    @property
    def last_op(self) -> CommOp | None:
        if not self.ops:
            return None
        item, line, weak = self.ops[-1]
        if isinstance(item, _Lazy):
            item = item.build()
            self.ops[-1] = (item, line, weak)
        return item

    def set_last_op(self, op: CommOp) -> None:
        self.ops[-1] = (op,) + self.ops[-1][1:]

    def calls(self) -> tuple[CommOp | None, tuple[CommOp, ...]]:
        """(last call, the ones before it)."""
        merged: list[CommOp] = []
        weak = False
        for item, _, lazy in self.ops:
            op = item.build() if isinstance(item, _Lazy) else item
            if op is None:
                continue
            if merged and _same_call(merged[-1], op):
                merged[-1] = _merged(merged[-1], op, weak)
                weak = weak and lazy
            else:
                merged.append(op)
                weak = lazy
        return (merged[-1] if merged else None), tuple(merged[-1 - RECENT_OPS:-1])

    def set_progress(self, group: str, progress: GroupProgress) -> None:
        """The latest counters of a group; what a later line does not state
        (a failure line has no `started`) is kept from the earlier one."""
        self.meaningful = True
        pending = self.pending_progress.pop(group, None)
        if pending is not None:
            self.set_progress(group, pending.build())
        old = self.progress.get(group)
        if old is not None:
            progress = GroupProgress(
                enqueued=progress.enqueued if progress.enqueued is not None else old.enqueued,
                started=progress.started if progress.started is not None else old.started,
                completed=progress.completed if progress.completed is not None else old.completed,
                evidence=progress.evidence or old.evidence)
        self.progress[group] = progress

    def lazy_progress(self, group: str, build) -> None:
        """Counters the next periodic line of the group replaces outright."""
        self.meaningful = True
        self.pending_progress[group] = _Lazy(build)

    def final_progress(self) -> dict[str, GroupProgress]:
        for group in list(self.pending_progress):
            self.set_progress(group, self.pending_progress.pop(group).build())
        return self.progress

    def absorb(self, other: "_Proc") -> None:
        """Another key's state of the same process (e.g. its `[default3]:`
        lines before `[rank3]:` appeared)."""
        for name in ("rank", "local_rank", "pid", "exit_code", "alive", "evidence"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(other, name))
        self.host = self.host or other.host
        self.signal = self.signal or other.signal
        self.timed_out = self.timed_out or other.timed_out
        self.ops = deque(sorted(list(self.ops) + list(other.ops), key=lambda item: item[1]),
                         maxlen=RECENT_OPS + 1)
        mine = self.final_progress()
        for group, progress in other.final_progress().items():
            if group not in mine or _line(progress) > _line(mine[group]):
                mine[group] = progress
        for evidence in other.errors:
            self.error(evidence)
        self.errors.sort(key=lambda evidence: evidence.line)  # one file's lines, in its order
        for rank in other.peers:
            self.peer(rank)
        self.stuck.extend(other.stuck)
        self.meaningful = self.meaningful or other.meaningful
        self.c10 = self.c10 or other.c10
        for group, local in other.group_ranks.items():
            self.group_ranks.setdefault(group, local)


class _Lazy:
    """A value read from its record only when it is needed."""

    __slots__ = ("_build", "_value", "_done")

    def __init__(self, build):
        self._build, self._value, self._done = build, None, False

    def build(self):
        if not self._done:
            self._value, self._done, self._build = self._build(), True, None
        return self._value


def _same_call(a: CommOp, b: CommOp) -> bool:
    return (a.op, a.group, a.seq) == (b.op, b.group, b.seq)


def _merged(old: CommOp, new: CommOp, old_is_weak: bool = False) -> CommOp:
    """A second statement about the same call (an exception restating a
    watchdog line): what it adds is kept, and the first statement stays the
    evidence unless that was only a DETAIL `Running collective` line."""
    return replace(new, sizes=new.sizes or old.sizes, dtype=new.dtype or old.dtype,
                   numel_in=new.numel_in if new.numel_in is not None else old.numel_in,
                   numel_out=new.numel_out if new.numel_out is not None else old.numel_out,
                   timeout_ms=new.timeout_ms if new.timeout_ms is not None else old.timeout_ms,
                   elapsed_ms=new.elapsed_ms if new.elapsed_ms is not None else old.elapsed_ms,
                   any_source=new.any_source or old.any_source,
                   state=old.state if new.state == "started" else new.state,
                   evidence=new.evidence if old_is_weak or old.evidence is None else old.evidence)


def _numel(value: int | None) -> int | None:
    """A WorkNCCL's NumelIn/NumelOut, or None where it says nothing: a work
    whose sizes were never recorded prints its initial value, 0 or (a
    size_t of -1) 18446744073709551615 by version, as a coalesced group's
    closing work does."""
    return value if value is not None and 0 < value < 1 << 63 else None


def _line(progress: GroupProgress) -> int:
    return progress.evidence.line if progress.evidence is not None else 0


class _Child:
    """A worker as its launcher reports it."""

    __slots__ = ("pid", "rank", "local_rank", "host", "exit_code", "signal",
                 "errors", "evidence", "rank_evidence")

    def __init__(self, pid):
        self.pid = pid
        self.rank = self.local_rank = self.exit_code = None
        self.host = self.signal = ""
        self.errors: list[Evidence] = []
        self.evidence = self.rank_evidence = None

    def error(self, evidence: Evidence) -> None:
        if len(self.errors) < MAX_ERRORS and evidence not in self.errors:
            self.errors.append(evidence)


_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
            8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
            14: "SIGALRM", 15: "SIGTERM"}
_ERROR_EVENTS = frozenset({
    "timeout", "failure", "dump_signal", "watchdog_hang", "terminating", "watchdog_exit", "async_error",
    "blocking_wait", "remote_error", "process_down", "mismatch", "wrapper_barrier", "barrier_failed",
    "barrier_peer_error", "barrier_timeout", "desync_timeout", "desync_missing", "desync_joined",
    "desync_finished", "desync_snapshot_head", "desync_snapshot", "gloo_timeout", "gloo_error", "terminate",
    "what"})


# ---------------------------------------------------------------- the reader

class _Reader:
    def __init__(self, facts: Facts, display: str, labelled: bool = False):
        self.facts, self.display = facts, display
        # Who printed what: srun labels, the c10d lines' own ranks, the
        # launcher's rank assignment and world size (see _resolve).
        self.labelled = labelled
        self.section: int | None = None  # the rank of the file a `==> logs/rank3.log <==` header began
        self.label: int | None = None       # the current line's srun label
        self.last_of: dict[int | None, _Pending] = {}  # a label's most recent record (None: unlabelled lines)
        self.label_ranks: dict[int, set[int]] = {}  # label → `[rankN]:` seen under it
        self.launcher_labels: set[int] = set()  # labels whose lines show a launcher: not ranks
        self.default_ranks: set[int] = set()  # ranks a default-group PG prefix states
        self.rendezvous: dict = {}  # stream (label or None) → {restart: {group_rank: {local: global}}}
        self.block: dict = {}       # stream → the rendezvous result being read
        self.launch: dict = {}      # stream → launch config fields
        self.node_rank: dict = {}   # stream → the group ranks its agent states (one, unless merged)
        self.local_size: dict = {}  # stream → its nproc_per_node
        self.worlds: list[tuple[int, int, str]] = []  # (world size, line, what states it)
        # torchelastic's failure summary: its first line, and whether the agent
        # stopped workers still running (`Sending process N closing signal`).
        self.summary_at: Evidence | None = None
        self.stopped_workers = False
        self.hit_keys: list[tuple] = []  # (index in facts.messages, record key): a hit's rank once known
        self.stated = messages.Kept(MAX_STATED)
        self.owner: dict[tuple, tuple] = {}
        self.open: dict[tuple, _Pending] = {}
        self.last: _Pending | None = None
        self.procs: dict[tuple, _Proc] = {}
        self.aliases: dict[tuple, tuple] = {}
        self.children: dict[int, _Child] = {}
        self.claims: dict[int, dict[tuple, ProcessRecord]] = {}
        self.groups: dict[str, str] = {}
        self.root_cause: Evidence | None = None
        self.listed = 0
        self.seen_text = False
        self.widest = 0           # the longest line so far: hard wrapping caps it
        self.after_last_error = False  # the line before was c10d's "Last error:" (a quote follows)
        self.plain: list[tuple] = []   # other programs' lines not yet sifted for catalogued messages
        self.wrap_checks = 0
        self.wraps_found = 0
        self.stuck_count = 0

    # -- lines
    def feed(self, line_no: int, data: bytes | None) -> None:
        if data is None:  # a skipped line: what follows may still continue the record before it
            self.seen_text = True
            return
        text = data.decode("utf-8", "replace")
        if text.endswith("\n"):
            text = text[:-1]
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        if not self.seen_text and text.strip(" \t\r\x00"):
            self.seen_text = True
        if "\r" in text:
            for piece in text.split("\r"):
                if piece:
                    self._piece(line_no, piece)
        else:
            self._piece(line_no, text)

    def _piece(self, line_no: int, full: str) -> None:
        full, body, kind, key = self._split(full)
        if _LAUNCH_HINT.search(body):
            self._launcher_line(body, line_no, full)
        same = self.open.get(key)
        # Lines without prefix continue the most recent record (a C++
        # message's later lines carry no prefix), or the file's own; under
        # an srun label, that label's most recent record.
        stream_last = self._stream_last(key)
        recent = stream_last if stream_last is not None else same
        blank = not body.strip()
        awaiting = same is not None and same.kind == "tb" and not same.tb_done
        if (kind in (None, "indent") and not blank and recent is not None
                and not (recent.kind == "tb" and not recent.tb_done) and self._wraps(recent, line_no, body)):
            self._join(recent, line_no, full, body)
        elif recent is not None and recent.expect_more and kind not in _NEW_RECORD and not blank:
            self._extend(recent, line_no, full, body)
        elif (same is None and (key == FILE or key[0] == "task") and kind is None and not blank and recent is not None
              and recent.kind == "tb" and not recent.tb_done and recent.last_line == line_no - 1
              and not _EXCEPTION_LINE.match(body)):
            self._join(recent, line_no, full, body)  # a wrapped frame line whose rest lost the prefix
        elif awaiting and kind not in _NEW_RECORD:
            if kind in ("indent", "field"):
                self._extend(same, line_no, full, body)
            elif _EXCEPTION_LINE.match(body):
                same.tb_done = True  # the first unindented line is the exception
                self._extend(same, line_no, full, body)
            elif not blank:
                self._join(same, line_no, full, body)  # the rest of a hard-wrapped frame line
        elif kind in ("cont", "original"):
            if recent is not None:
                self._extend(recent, line_no, full, body)
            else:
                self._other(key)
        elif kind in ("field", "indent") and self._entry(key, same) is not None:
            self._extend(self._entry(key, same), line_no, full, body)
        elif kind in (None, "indent", "field"):
            if not blank:
                self.widest = max(self.widest, len(full))
                self._other(key)
                self._plain_stated(key, line_no, full, body)
        elif kind == "chain":
            self._close(key)
            self._other(key)
        else:
            self._start(kind, SUMMARY if kind in ("entry", "marker") else key, line_no, full, body)

    def _split(self, full: str) -> tuple[str, str, str | None, tuple]:
        """A line's launcher prefixes, its body and what the body starts
        with; a log line glued to another program's text (a tqdm bar) is
        cut out of it (a few times per line: junk full of prefixes costs no more)."""
        label, lead = None, ""
        if self.labelled:
            found = _LABEL.match(full)
            if found is not None:
                label, lead, full = int(found.group(1)), full[:found.end()], full[found.end():]
        self.label = label
        if label is None and full.startswith("==> "):
            header, named = section_header(full)
            if header:
                self.section = named
        for attempt in range(MAX_GLUED):
            pos, rank, local, pid, host, after_rank = 0, None, None, None, "", False
            while True:
                match = _OUTER.match(full, pos)
                if match is None or match.end() == pos:
                    break
                pos = match.end()
                if match.group("rank") is not None:
                    rank, after_rank = int(match.group("rank")), True
                elif match.group("local") is not None:
                    local, after_rank = int(match.group("local")), False
                else:
                    pid, host, after_rank = int(match.group("pid")), match.group("ip") or host, False
            if after_rank and full.startswith(" ", pos):
                pos += 1  # Python's lines under `[rankN]: ` keep their own indentation
            body = full[pos:]
            head = _HEAD.match(body)
            kind = head.lastgroup if head is not None else None
            glued = _GLUED.search(body, 1) if kind is None and attempt < MAX_GLUED - 1 else None
            if glued is None:
                break
            full = body[glued.start():]
        if rank is None and local is None and pid is None and label is None and self.section is not None:
            rank = self.section  # under `tail`'s `==> logs/rank3.log <==`: that file's lines
        return lead + full, body, kind, self._key(rank, local, pid, host, label, body if kind == "c10" else "")

    def _stream_last(self, key) -> _Pending | None:
        """The most recent record of the stream a prefix-less line belongs
        to: the file's, or its srun label's."""
        if key == FILE:  # in an srun --label file, the unlabelled lines' own
            return self.last_of.get(None) if self.labelled else self.last
        if key[0] == "task":
            return self.last_of.get(key[1])
        return None

    def _entry(self, key, same):
        """The failure-summary entry an indented line continues, if any."""
        last = self._stream_last(key)
        record = last if last is not None and last.kind == "entry" else same
        return record if record is not None and record.kind == "entry" else None

    def _key(self, rank, local, pid, host, label=None, c10_body="") -> tuple:
        """Which process a line is: its `[rankN]:`, its `[defaultN]:` (on
        its srun task's node), Ray's pid, its srun label, or — for a c10
        line with no launcher prefix — the rank its own prefix states
        (`("wrank", N, label)`, settled in _resolve)."""
        if rank is not None:
            key = ("rank", rank)
            if label is not None:
                self.label_ranks.setdefault(label, set()).add(rank)
            own = _OWN_RANK.match(c10_body) if c10_body and "PG " in c10_body else None
            if own is not None and own.group("guid") not in (None, DEFAULT_GROUP):
                # `[rank4]:… [PG ID 5 PG GUID 17(PIPELINE_MODEL_PARALLEL_GROUP) Rank 2]`: rank 4 is
                # rank 2 of group 17; merge learns the group's members from such pairs
                self._proc(key).group_ranks.setdefault(own.group("guid"), int(own.group("pg_rank")))
            if local is not None:
                self.aliases.setdefault(("local", local) if label is None else ("tasklocal", label, local), key)
            if pid is not None:
                self.aliases.setdefault(("pid", pid), key)
        elif local is not None:
            key = ("local", local) if label is None else ("tasklocal", label, local)
            if label is not None:
                self.launcher_labels.add(label)
        elif pid is not None:
            key = ("pid", pid)
        else:
            key = FILE if label is None else ("task", label)
            own = _OWN_RANK.match(c10_body) if c10_body else None
            if own is not None:
                if own.group("rank") is not None:
                    key = ("wrank", int(own.group("rank")), label)
                elif own.group("guid") == DEFAULT_GROUP:
                    key = ("wrank", int(own.group("pg_rank")), label)
                    self.default_ranks.add(key[1])
            return key
        if host:
            proc = self._proc(key)
            proc.host = proc.host or host
        if pid is not None:
            proc = self._proc(key)
            if proc.pid is None:
                proc.pid = pid
        return key

    def _start(self, kind, key, line_no, full, body) -> None:
        self.widest = max(self.widest, len(full))
        self._close(key)
        record = _Pending(kind, key, line_no, full, body)
        record.label = self.label
        self.open[key] = record
        self._latest(record)

    def _extend(self, record: _Pending, line_no, full, body) -> None:
        self.widest = max(self.widest, len(full))
        record.add(line_no, full, body)
        self._latest(record)

    def _join(self, record: _Pending, line_no, full, body) -> None:
        record.join(line_no, full, body)
        self._latest(record)

    def _latest(self, record: _Pending) -> None:
        self.last = record
        if self.labelled:
            self.last_of[self.label] = record

    def _plain_stated(self, key, line_no: int, full: str, body: str) -> None:
        """A line of another program that the message catalogue knows (a Ray
        worker's death, an NCCL WARN printed beside c10d's lines): read as the
        catalogue reader would read it, since that reader leaves this file to us."""
        quoted, self.after_last_error = self.after_last_error, body.strip() == "Last error:"
        if quoted:
            return  # c10d's exception quotes NCCL's last WARN line after "Last error:": read where NCCL printed it
        if key != FILE and key[0] != "task":
            return  # a worker's own lines under a launcher prefix: its process records read what it printed
        # Hours of training output pass here: the lines wait in a batch that one search of the joined
        # text sifts for the catalogue's literals (a search per line cost more than the rest of the read).
        self.plain.append((key, line_no, full, body))
        if len(self.plain) >= PLAIN_BATCH:
            self._sift_plain()

    def _sift_plain(self) -> None:
        """The catalogue's hits on the batched plain lines: the file's or an srun task's, no process's own."""
        batch, self.plain = self.plain, []
        if not batch:
            return
        text = "\n".join(body.replace("\n", " ") for _, _, _, body in batch)
        cat = messages.catalogue()
        if not cat.mentions(text):  # the common case: the anchors decline the whole batch
            return
        for number, _ in cat.lines_with_literals(text):
            key, line_no, full, body = batch[number - 1]
            self._keep_hits(key, body, full, line_no, None, "", None, None)

    def _other(self, key) -> None:
        """A line of another program: it ends an unprefixed record."""
        if key == FILE:
            self._close(FILE)
            self.last = None
            self.last_of.pop(None, None)
        elif key[0] == "task":
            self._close(key)
            self.last_of.pop(key[1], None)

    def _close(self, key) -> None:
        record = self.open.pop(key, None)
        if record is not None:
            if self.last is record:
                self.last = None
            if self.last_of.get(record.label) is record:
                del self.last_of[record.label]
            self._finish(record)

    def _wraps(self, record: _Pending, line_no: int, body: str) -> bool:
        """Whether a line without prefix is the hard-wrapped rest of the
        record's last line. A wrapped line is as long as the longest line
        (wrapping caps them all) and the record reads better with the rest
        glued back: a bracket closes, a cut shape goes on or completes, or
        a known message appears that the cut hid."""
        if (record.last_line != line_no - 1 or record.last_len < WRAP_MIN
                or record.last_len < self.widest or record.dropped
                or len(record.bodies[-1]) + len(body) > MAX_LINE):
            return False
        if _unbalanced(record.bodies[-1]):
            return True
        if self.wrap_checks >= MAX_WRAP_CHECKS or (self.wrap_checks >= 500 and not self.wraps_found):
            return False  # a file that is not hard-wrapped costs no more parses
        text = record.text()
        now = _template(_mask(text))
        if not isinstance(now, _Unreadable) and _specific(now):
            return False  # the message was read: the rest could add only free text
        self.wrap_checks += 1
        then = _template(_mask(text + body))
        if isinstance(now, _Unreadable):
            wraps = now.at_end and (not isinstance(then, _Unreadable) or then.at_end)
        elif isinstance(then, _Unreadable):
            wraps = then.at_end
        else:
            wraps = _specific(then) > _specific(now)
        self.wraps_found += wraps
        return wraps

    # -- the launcher's word on ranks and world size
    def _launcher_line(self, body: str, line_no: int, full: str) -> None:
        """torchelastic's rendezvous result (`group_rank=`, `local_ranks=[..]`,
        `global_ranks=[..]`, `global_world_sizes=[..]`, one field a line),
        its launch configs (`nproc_per_node`, `min_nodes`, `max_nodes`), a
        `WORLD_SIZE`, c10d's default-group init line: which global rank a
        `[defaultN]:` worker of this agent is, and how many ranks there are."""
        stream = self.label
        fields = _AGENT_FIELD.findall(body)
        if fields and stream is not None:
            self.launcher_labels.add(stream)
        for name, value in fields:
            block = self.block.setdefault(stream, {})
            if name in ("restart_count", "group_rank") and name in block:
                block = self.block[stream] = {}  # the next rendezvous (a restart)
            block[name] = _numbers(value) if value.startswith("[") else int(value)
            if (name in _LIST_FIELDS) != isinstance(block[name], list):
                # torchelastic prints these as lists, the others as numbers: a line
                # that does not is not its rendezvous result
                del block[name]
                continue
            if name == "global_ranks" and "local_ranks" in block and len(block["local_ranks"]) == len(block[name]):
                attempts = self.rendezvous.setdefault(stream, {})
                assigned = attempts.setdefault(block.get("restart_count", 0), {})
                assigned[block.get("group_rank")] = dict(zip(block["local_ranks"], block[name]))
            elif name == "global_world_sizes" and block[name]:
                self.worlds.append((max(block[name]), line_no, "the launcher's global_world_sizes"))
            if name == "group_rank":
                self.node_rank.setdefault(stream, set()).add(block[name])
            elif name == "local_ranks":
                self.local_size[stream] = len(block[name])
        found = _JOINED.search(body)
        if found is not None:
            self.node_rank.setdefault(stream, set()).add(int(found.group(1)))
        found = _LAUNCH_FIELD.search(body)
        if found is not None:
            launch = self.launch.setdefault(stream, {})
            launch[found.group(1)] = int(found.group(2))
            if found.group(1) == "nproc_per_node":
                self.local_size[stream] = int(found.group(2))
            if {"nproc_per_node", "min_nodes", "max_nodes"} <= launch.keys() \
                    and launch["min_nodes"] == launch["max_nodes"]:
                size = launch["nproc_per_node"] * launch["max_nodes"]
                self.worlds.append((size, line_no, "the launcher's nproc_per_node × nodes"))
                self.launch[stream] = {}
        found = _INIT_SIZE.search(body)
        if found is not None and found.group(2) == DEFAULT_GROUP:
            self.worlds.append((int(found.group(1)), line_no, "c10d's default-group init line"))
        found = _WORLD_ENV.search(body)
        if found is not None:
            self.worlds.append((int(found.group(1)), line_no, "WORLD_SIZE"))
        if " closing signal " in body:
            self.stopped_workers = True
        stated = command_world(body)
        if stated is not None and stated[0] > 0:
            self.worlds.append((stated[0], line_no, "the launch command"))
            if stated[1] is not None:
                self.local_size.setdefault(stream, stated[1])

    def _assignment(self, stream) -> dict[int, int] | None:
        """{local rank: global rank} of the workers of the agent whose lines
        are `stream` (None: the file's unlabelled lines), from its latest
        rendezvous; None when unknown or when several agents' results share
        the stream (two nodes' consoles merged without labels)."""
        attempts = self.rendezvous.get(stream)
        if not attempts:
            # Its group rank (`group_rank=`, or the dynamic rendezvous' "has
            # joined round R of the rendezvous … as rank G") and its local world
            # size (`nproc_per_node`): torchelastic numbers the nodes' workers
            # in group-rank order, G × n + local rank when every node runs n.
            groups, size = self.node_rank.get(stream, ()), self.local_size.get(stream)
            if len(groups) != 1 or not size:
                return None
            group = next(iter(groups))
            if not plausible_rank(group * size + size - 1):
                return None
            return {local: group * size + local for local in range(size)}
        latest = attempts[max(attempts)]
        if len(latest) > 1:
            where = f"srun task {stream}'s lines" if stream is not None else "this file's unlabelled lines"
            self.facts.diag(0, f"{where} hold the rendezvous results of {len(latest)} launcher agents "
                               f"(group ranks {', '.join(str(g) for g in sorted(latest, key=str))}): their "
                               f"[defaultN]: local ranks cannot be told apart, so none is mapped to a global rank",
                            "info")
            return None
        return next(iter(latest.values()))

    # -- records
    def _finish(self, record: _Pending) -> None:
        first_hit = len(self.hit_keys)
        self._stated(record)
        text = _Text(record.text())
        template = _template(text.masked)
        if record.dropped:
            self.facts.diag(record.numbers[0], f"record of {record.dropped + len(record.bodies)} lines: "
                                               f"the last {record.dropped} were read, not kept", "info")
        if isinstance(template, _Unreadable):
            self._unrecognized(record, template)
            return
        if len(template) == 1 and template[0].kind == "c10" and template[0].data[0] != "F":
            # The common case: a c10 line that says nothing this reader uses.
            proc = self._proc(record.key)
            proc.c10 = True
            if proc.evidence is None:
                proc.evidence = record.evidence(self.display, 0)
            return
        try:
            applied = _TemplateRun(self, record, text, template)
            applied.run()
            if applied.owner != record.key:  # its hits belong to whom the record turned out to be
                self.hit_keys[first_hit:] = [(index, applied.owner) for index, _ in self.hit_keys[first_hit:]]
        except Exception as exc:  # noqa: BLE001 - one record, not the file
            self.facts.diag(record.numbers[0], f"could not use this record ({exc.__class__.__name__}): "
                                               f"{record.fulls[0][:160]}", "error")

    def _stated(self, record: _Pending) -> None:
        """What the message catalogue recognizes in the record's lines."""
        kind, value = record.key if isinstance(record.key, tuple) and len(record.key) == 2 else (None, None)
        proc = self.procs.get(record.key)
        rank = value if kind == "rank" else None
        local = value if kind == "local" else None
        pid = value if kind == "pid" else (proc.pid if proc is not None else None)
        host = proc.host if proc is not None else ""
        for body, full, number in zip(record.bodies, record.fulls, record.numbers):
            self._keep_hits(record.key, body, full, number, rank, host, pid, local)

    def _keep_hits(self, key, body: str, full: str, number: int, rank, host: str, pid, local) -> None:
        """The catalogue's hits on one line, kept (up to MAX_STATED per entry) as `key`'s."""
        evidence = Evidence(self.display, number, full.rstrip()[:EVIDENCE_CHARS])
        for hit in messages.line_hits(body, evidence, rank, host, pid, local, self.stated.full):
            if self.stated.take(hit):
                self.facts.messages.append(hit)
                self.hit_keys.append((len(self.facts.messages) - 1, key))

    def _unrecognized(self, record: _Pending, why: _Unreadable) -> None:
        self.facts.unrecognized += 1
        evidence = record.evidence(self.display, why.line)
        if self.listed < MAX_LISTED:
            index = min(why.line, len(record.bodies) - 1)
            if why.column:
                column = why.column + len(record.fulls[index]) - len(record.bodies[index])
                where = f"unexpected text at column {column}"
            else:
                where = "the record ends too soon"
            self.facts.diag(evidence.line, f"unrecognized {_KIND_NAMES.get(record.kind, record.kind)} "
                                           f"({where}): {evidence.text[:160]}")
        self.listed += 1
        if record.kind == "c10" and record.key != SUMMARY:
            head = _HEAD.match(record.bodies[0])
            severity = head.group(0)[1] if head is not None else ""
            if severity in "EF":
                proc = self._proc(record.key)
                proc.error(record.evidence(self.display, 0))
                if severity == "F":
                    proc.alive, proc.signal = False, proc.signal or "SIGABRT"

    def _proc(self, key) -> _Proc:
        proc = self.procs.get(key)
        if proc is None:
            proc = self.procs[key] = _Proc(key)
        return proc

    def child(self, pid: int) -> _Child:
        child = self.children.get(pid)
        if child is None:
            child = self.children[pid] = _Child(pid)
        return child

    def claim(self, rank: int | None, evidence: Evidence, last_op: CommOp | None = None,
              progress: dict | None = None) -> None:
        """What this file says about another rank: a peer claim. The same
        claim made again (by the same message printed twice, or by several
        ranks) is kept once; a rank keeps its latest few."""
        if rank is None or rank < 0:
            return
        key = (None if last_op is None else (last_op.op, last_op.group, last_op.seq, last_op.state),
               tuple(sorted((g, p.started, p.completed) for g, p in (progress or {}).items())))
        kept = self.claims.setdefault(rank, {})
        if key in kept:
            return
        if len(kept) >= MAX_CLAIMS:
            del kept[next(iter(kept))]
        kept[key] = ProcessRecord(PEER_CLAIM, self.display, rank=rank, last_op=last_op,
                                  progress=progress or {}, errors=(evidence,), evidence=evidence)

    def stuck(self, proc: _Proc, kind: str, key: str, evidence: Evidence, **facts) -> None:
        """A stuck signal of `proc`: its message key (forensics/words.py) and facts."""
        proc.meaningful = True
        proc.stuck.append((kind, key, facts, evidence))

    # -- the end
    def finish(self) -> None:
        self._sift_plain()
        for key in list(self.open):
            self._close(key)
        if self.listed > MAX_LISTED:
            self.facts.diag(0, f"{self.listed - MAX_LISTED} more unrecognized records not listed")
        procs = self._resolve()
        self._link_children(procs)
        self._rank_hits(procs)
        facts = self.facts
        self.stated: set = set()
        for proc in sorted(procs, key=lambda p: p.rank is None and p.local_rank is None and p.pid is None):
            facts.records.append(self._record(proc))
        for child in sorted(self.children.values(), key=lambda c: (c.rank is None, c.rank, c.pid)):
            facts.records.append(self._child_record(child))
            if child.rank is not None:
                facts.pid_ranks.append((child.host, child.pid, child.rank, child.rank_evidence or child.evidence))
        for rank in sorted(self.claims):
            facts.records.extend(self.claims[rank].values())
        world = self._world()
        facts.records.extend(self._clean_exits(world, procs))
        for guid, desc in self.groups.items():
            if guid != DEFAULT_GROUP or world is None:
                facts.groups.append(ProcessGroup(guid, desc, ()))
        if world is not None:
            facts.groups.append(ProcessGroup(DEFAULT_GROUP, self.groups.get(DEFAULT_GROUP, ""), tuple(range(world))))
        if not facts.records:
            facts.diag(0, "no c10d or launcher records found", "info")

    def _resolve(self) -> list[_Proc]:
        """Merge the keys of one process; decide what the unprefixed lines
        were: the one process of the file, or a process of their own.

        A merged log is split per process: `[rankN]:` is rank N; a
        `[defaultN]:` worker is the global rank its agent's rendezvous
        result gives local rank N (`global_ranks`), on the agent's srun
        task where labels tell nodes apart; an srun label is the global
        rank (SLURM_PROCID) when the file's labels are consistent and none
        shows a launcher (`[defaultN]:` workers, torchelastic's logging, a
        rendezvous result) or a `[rankN]:` other than itself; and a c10d
        line without a launcher prefix is the rank its own prefix states —
        `[PG … 0(default_pg) Rank N]` always, old `[Rank N]` (group-local)
        only in a merged log (several such ranks) that shows no group but
        the default one."""
        procs = dict(self.procs)
        procs.pop(AGENT, None)
        owner = self.owner

        def move(source_key, target_key) -> None:
            source = procs.pop(source_key)
            owner[source_key] = target_key
            if target_key in procs:
                procs[target_key].absorb(source)
            else:
                source.key = target_key
                if target_key[0] == "rank":
                    source.rank = target_key[1]
                procs[target_key] = source

        for alias, target in self.aliases.items():
            if alias in procs:
                move(alias, target)
        labels_are_ranks = self.labelled and not self.launcher_labels and all(
            seen <= {label} for label, seen in self.label_ranks.items())
        # Several processes' old `[Rank N]` lines in one file, and no group
        # but the default one: each N is a global rank. One process's alone
        # names no global rank (it may be group-local): its path does.
        only_default = all(guid == DEFAULT_GROUP for guid in self.groups)
        old_ranks = {k[1] for k in procs if k[0] == "wrank"}
        split_old = only_default and len(old_ranks) > 1
        # One process's old `[Rank N]` lines alone, in a file whose name names
        # no rank and whose lines name no other process nor any group but the
        # default: its watchdog's word is the only rank there is. Taken as the
        # global rank (the default group's numbering) and said so.
        lone_old = (only_default and len(old_ranks) == 1 and path_rank(self.display) is None
                    and not any(k[0] in ("rank", "local", "tasklocal", "pid") for k in procs))
        assignments = {}
        for key in sorted((k for k in procs if k[0] in ("local", "tasklocal", "wrank", "task")), key=str):
            kind = key[0]
            if kind in ("local", "tasklocal"):
                stream, local = (None, key[1]) if kind == "local" else key[1:]
                if stream not in assignments:
                    assignments[stream] = self._assignment(stream)
                rank = (assignments[stream] or {}).get(local)
                if rank is not None:
                    move(key, ("rank", rank))
                elif kind == "tasklocal":
                    procs[key].local_rank = local
            elif kind == "wrank":
                rank, label = key[1], key[2]
                if label is not None and labels_are_ranks:
                    move(key, ("rank", label))
                elif rank in self.default_ranks or split_old:
                    move(key, ("rank", rank))
                elif lone_old:
                    move(key, ("rank", rank))
                    self.facts.diag(0, f"rank {rank} as this process's own c10d lines state it ([Rank {rank}]): "
                                       "a rank of the group its work ran in, which these lines do not name; "
                                       "taken as the global rank, since no other group is named", "info")
                else:
                    move(key, FILE if label is None else ("task", label))
            elif labels_are_ranks:
                move(key, ("rank", key[1]))
        loose = procs.pop(FILE, None)
        if loose is not None:
            if len(procs) == 1:
                target = next(iter(procs.values()))
                target.absorb(loose)
                owner[FILE] = target.key
            elif (not procs and loose.c10) or loose.meaningful:
                procs[FILE] = loose
        for proc in procs.values():
            if proc.errors_dropped:
                self.facts.diag(0, f"{self._label(proc)}: {proc.errors_dropped} more error lines not kept",
                                "info")
        return sorted(procs.values(), key=lambda p: (p.rank is None, p.rank if p.rank is not None else 0,
                                                     p.local_rank if p.local_rank is not None else -1,
                                                     p.pid or 0))

    def _rank_hits(self, procs: list[_Proc]) -> None:
        """Catalogue hits take the rank of the process their lines turned
        out to be (a `[defaultN]:` worker mapped, a label, an old `[Rank N]`)."""
        by_key = {proc.key: proc for proc in procs}
        messages = self.facts.messages
        for index, key in self.hit_keys:
            hit = messages[index]
            if hit.rank is not None:
                continue
            target = key
            while target in self.owner:
                target = self.owner[target]
            proc = by_key.get(target)
            if proc is not None and proc.rank is not None:
                messages[index] = replace(hit, rank=proc.rank, pid=hit.pid if hit.pid is not None else proc.pid,
                                          host=hit.host or proc.host)

    def _world(self) -> int | None:
        """The world size the file states (the latest statement: an elastic
        job may restart with fewer nodes)."""
        if not self.worlds:
            return None
        size, line, what = self.worlds[-1]
        if not plausible_rank(size - 1):
            if size > 0:
                self.facts.diag(line, f"a world size of {size} ({what}) is not believed "
                                      f"(at most {MAX_RANKS:,} ranks); no world size is taken from this file")
            return None
        sizes = sorted({size for size, _, _ in self.worlds})
        if len(sizes) > 1:
            self.facts.diag(line, f"this file states world sizes {', '.join(map(str, sizes))}: the latest, "
                                  f"{size} ({what}), is used", "info")
        return size if size > 0 else None

    def _link_children(self, procs: list[_Proc]) -> None:
        """The launcher's word on its workers applies to the same workers'
        tee'd lines in this file (`[default1]:` is local rank 1)."""
        for child in self.children.values():
            for proc in procs:
                same = ((proc.local_rank is not None and proc.local_rank == child.local_rank)
                        or (proc.rank is not None and proc.rank == child.rank))
                if not same:
                    continue
                if proc.rank is None and child.rank is not None:
                    proc.rank = child.rank
                if proc.pid is None:
                    proc.pid = child.pid
                if not proc.host:
                    proc.host = child.host

    def _who(self, proc: _Proc) -> tuple[str, object]:
        """Which process a line is of, as far as it says: (rank | local_rank | pid | file, its value)."""
        if proc.rank is not None:
            return "rank", proc.rank
        if proc.local_rank is not None:
            return "local_rank", proc.local_rank
        if proc.pid is not None:
            return "pid", proc.pid
        return "file", self.display

    def _label(self, proc: _Proc) -> str:
        kind, value = self._who(proc)
        return f"{kind.replace('_', ' ')} {value}" if kind != "file" else str(value)

    def _record(self, proc: _Proc) -> ProcessRecord:
        who = self._who(proc)
        last_op, recent = proc.calls()
        progress = proc.final_progress()
        seen = set()
        anonymous = proc.rank is None and proc.local_rank is None and proc.pid is None
        for kind, key, facts, evidence in proc.stuck:
            detail = say_stuck(key, facts)
            if (kind, detail) in seen or (anonymous and (kind, detail) in self.stated):
                continue
            seen.add((kind, detail))
            self.stated.add((kind, detail))
            if self.stuck_count < MAX_STUCK:
                self.facts.stuck.append(stuck_signal(kind, key, evidence, who=who, **facts))
            elif self.stuck_count == MAX_STUCK:
                self.facts.diag(0, f"more than {MAX_STUCK} stuck signals: the rest are not listed", "info")
            self.stuck_count += 1
        return ProcessRecord(SOURCE, self.display, host=proc.host, pid=proc.pid, rank=proc.rank,
                             local_rank=proc.local_rank, last_op=last_op, recent_ops=recent,
                             progress=dict(progress), errors=tuple(proc.errors),
                             peers_in_errors=tuple(proc.peers), timed_out=proc.timed_out, alive=proc.alive,
                             exit_code=proc.exit_code, signal=proc.signal, evidence=proc.evidence,
                             group_ranks=tuple(sorted(proc.group_ranks.items())))

    def _clean_exits(self, world: int | None, procs: list[_Proc]) -> list[ProcessRecord]:
        """Workers torchelastic's failure summary leaves out, on a one-node job.

        The agent lists every worker that failed and sends the ones still
        running a closing signal (`Sending process N closing signal SIGTERM`),
        so when the whole world is this agent's workers (the world equals its
        workers per node), every row of the summary is on one host, and no
        worker was stopped, a worker the summary does not list had already
        exited with code 0. A worker the file shows failing is not one."""
        if self.summary_at is None or self.stopped_workers or world is None:
            return []
        rows = [c for c in self.children.values() if c.exit_code is not None]
        hosts = {c.host for c in rows}
        if not rows or len(hosts) != 1 or any(c.rank is None or c.rank != c.local_rank for c in rows):
            return []
        if set(self.local_size.values()) != {world}:
            return []
        listed = {c.rank for c in rows}
        failing = {p.rank for p in procs if p.rank is not None and p.errors}
        absent = [r for r in range(world) if r not in listed and r not in failing]
        if not absent or len(absent) == world:
            return []
        self.facts.diag(self.summary_at.line,
                        f"rank(s) {compact(absent)} are not in the launcher's failure summary of this one-node job "
                        f"of {world} workers, and no worker was sent a closing signal: they had exited with code 0 "
                        f"before the failures", "info")
        host = hosts.pop()
        why = (f"not in the launcher's failure summary of this one-node job of {world} workers, and no worker "
               f"was sent a closing signal")
        return [ProcessRecord(LAUNCHER, self.display, host=host, rank=r, local_rank=r, alive=False, exit_code=0,
                              evidence=self.summary_at, inferred=why) for r in absent]

    def _child_record(self, child: _Child) -> ProcessRecord:
        signal = child.signal
        if not signal and child.exit_code is not None and child.exit_code < 0:
            signal = _SIGNALS.get(-child.exit_code, f"signal {-child.exit_code}")
        return ProcessRecord(LAUNCHER, self.display, host=child.host, pid=child.pid, rank=child.rank,
                             local_rank=child.local_rank, errors=tuple(child.errors),
                             alive=False if child.exit_code is not None else None,
                             exit_code=child.exit_code, signal=signal, evidence=child.evidence)


class _TemplateRun:
    """Applies one record's template to the reader's state."""

    def __init__(self, reader: _Reader, record: _Pending, text: _Text, template: tuple):
        self.reader, self.record, self.text, self.template = reader, record, text, template
        self.display = reader.display
        self.owner = record.key
        self.desync: list[_Event] = []

    def run(self) -> None:
        record, reader = self.record, self.reader
        if record.key == SUMMARY:
            self.proc = None
        else:
            owner = self.owner = self._owner()
            self.proc = reader._proc(owner)
            if self.proc.evidence is None and owner != AGENT:
                self.proc.evidence = record.evidence(self.display, 0)
        for ev in self.template:
            handler = getattr(self, "on_" + ev.kind, None)
            if handler is not None:
                handler(ev)
            if ev.kind in _ERROR_EVENTS and self.proc is not None:
                self.proc.error(self.evidence(ev))
        if self.desync:
            self.apply_desync()

    def _owner(self) -> tuple:
        """Launcher logging and the launcher's own ChildFailedError belong to
        the agent, whatever process wrote the lines around them."""
        record = self.record
        if record.key != FILE and record.key[0] != "task":
            return record.key
        first = self.template[0] if self.template else None
        if first is not None and first.kind == "log":
            where = self.text.get(first.data[1])
            if where and any(name in where for name in _AGENT_LOGGERS):
                if record.key[0] == "task":
                    self.reader.launcher_labels.add(record.key[1])
                return AGENT
        if record.kind in ("tb", "exc"):
            for ev in self.template:
                if ev.kind == "exception":
                    name = self.text.get(ev.data[0])
                    if name.endswith(("ChildFailedError", "SignalException")):
                        if record.key[0] == "task":
                            self.reader.launcher_labels.add(record.key[1])
                        return AGENT
        return self._stated_rank() or record.key

    def _stated_rank(self) -> tuple | None:
        """A record without a launcher prefix (a `terminate called` block, a
        C++ exception) whose own lines name its rank — `[PG … 0(default_pg)
        Rank N]`, or an old `[Rank N]` (settled in _Reader._resolve) — is
        that rank's, not the file's: merged logs interleave such blocks."""
        label = self.record.key[1] if self.record.key[0] == "task" else None
        for ev in self.template:
            if ev.kind != "pg" or ev.pg is None or ev.pg[2] is None:
                continue
            rank = self.num(ev.pg[2])
            guid = self.text.get(ev.pg[0]) if ev.pg[0] is not None else None
            if rank is None or (guid is not None and guid != DEFAULT_GROUP):
                continue
            if guid == DEFAULT_GROUP:
                self.reader.default_ranks.add(rank)
            return ("wrank", rank, label)
        return None

    # -- helpers
    def evidence(self, ev: _Event) -> Evidence:
        return self.record.evidence(self.display, ev.at)

    def line(self, ev: _Event) -> int:
        numbers = self.record.numbers
        return numbers[min(max(ev.at, 0), len(numbers) - 1)]

    def group(self, ev: _Event) -> str:
        """The PG GUID of the message, else of the record (a desync report's
        lines belong to the line they follow), else the default group."""
        if ev.pg is not None and ev.pg[0] is not None:
            return self.text.get(ev.pg[0]) or DEFAULT_GROUP
        for other in self.template:
            if other.pg is not None and other.pg[0] is not None:
                return self.text.get(other.pg[0]) or DEFAULT_GROUP
        return DEFAULT_GROUP

    def has_guid(self, ev: _Event) -> bool:
        return ev.pg is not None and ev.pg[0] is not None

    def num(self, ref) -> int | None:
        return self.text.int(ref) if ref is not None else None

    def peer_rank(self, ev: _Event, ref) -> int | None:
        """A rank another rank's message names, as a global rank: ranks in
        messages are group-local, the same as global only in the default group."""
        rank = self.num(ref)
        return rank if self.group(ev) == DEFAULT_GROUP else None

    def comm_op(self, fields, ev: _Event, state="started", elapsed=None) -> CommOp | None:
        if not fields:
            return None
        values: dict = {}
        for item in fields[1]:
            tag = item[0]
            if tag == "shape":
                values["sizes"] = (tuple(n for n in (self.num(r) for r in item[1]) if n is not None),)
            elif tag in ("seq", "timeout", "numel_in", "numel_out"):
                values[tag] = self.num(item[1])
            elif tag in ("op", "dtype"):
                values[tag] = self.text.get(item[1])
        name = values.get("op", "")
        dtype = values.get("dtype", "")
        if dtype.startswith("[") and dtype.endswith("]"):
            dtype = dtype[1:-1]
        seq = values.get("seq")
        if fields[0] == "fp" and seq is not None:
            # A fingerprint's SequenceNumber counts from 0 (the first
            # collective prints 0); WorkNCCL's SeqNum, pg_status and Flight
            # Recorder's collective_seq_id count from 1. One numbering for all.
            seq += 1
        return CommOp(op=normalize_op(name) or "comm", group=self.group(ev), seq=seq,
                      state=state, any_source=name.upper() == "RECVANYSOURCE",
                      sizes=values.get("sizes", ()), dtype=dtype, timeout_ms=values.get("timeout"),
                      elapsed_ms=elapsed, evidence=self.evidence(ev),
                      numel_in=_numel(values.get("numel_in")), numel_out=_numel(values.get("numel_out")))

    def op_label(self, op: CommOp) -> str:
        return f"{op.op} #{op.seq}" if op.seq is not None else op.op

    # -- events
    def on_c10(self, ev: _Event) -> None:
        self.proc.c10 = True
        if ev.data[0] == "F":
            self.proc.alive = False
            self.proc.signal = self.proc.signal or "SIGABRT"
            self.proc.error(self.evidence(ev))

    def on_pg(self, ev: _Event) -> None:
        """A PG GUID names a group; in the default group ("0") the
        group-local rank is the global rank."""
        guid = self.text.get(ev.pg[0]) if ev.pg[0] is not None else None
        if guid is None or self.proc is None:
            return
        desc = self.text.get(ev.pg[1]) if ev.pg[1] is not None else ""
        if not self.reader.groups.get(guid):
            self.reader.groups[guid] = desc
        rank = self.num(ev.pg[2]) if guid == DEFAULT_GROUP else None
        proc = self.proc
        if rank is None or proc.key == AGENT:
            return
        if proc.rank is None:
            proc.rank = rank
        elif proc.rank != rank and not proc.rank_conflict:
            proc.rank_conflict = True  # said once: lines of several processes share no prefix here
            self.reader.facts.diag(self.evidence(ev).line,
                                   f"the default group calls this process rank {rank}, "
                                   f"its other lines rank {proc.rank}")

    def on_timeout(self, ev: _Event) -> None:
        work, elapsed = ev.data
        op = self.comm_op(work, ev, elapsed=self.num(elapsed))
        if op is None:
            return
        proc = self.proc
        proc.op(op, self.line(ev))
        proc.guessed_group_op = proc.last_op if not self.has_guid(ev) else None
        proc.timed_out = True
        timeout = f"{op.timeout_ms}" if op.timeout_ms is not None else "?"
        self.reader.stuck(proc, "watchdog_timeout", "tl_past_timeout", self.evidence(ev), op=self.op_label(op),
                          elapsed_ms=op.elapsed_ms, timeout=timeout)

    def on_failure(self, ev: _Event) -> None:
        seq, enqueued, completed = (self.num(r) for r in ev.data)
        group = self.group(ev)
        proc = self.proc
        proc.set_progress(group, GroupProgress(enqueued=enqueued, completed=completed,
                                               evidence=self.evidence(ev)))
        guessed = proc.guessed_group_op
        if (guessed is not None and self.has_guid(ev) and proc.last_op is guessed
                and guessed.seq == seq and group != guessed.group):
            # The timeout line names no group; the watchdog's next line does.
            proc.set_last_op(replace(guessed, group=group))
        proc.guessed_group_op = None

    def on_progress(self, ev: _Event) -> None:
        def build():
            enqueued, completed = (self.num(r) for r in ev.data)
            return GroupProgress(enqueued=enqueued, completed=completed, evidence=self.evidence(ev))
        self.proc.lazy_progress(self.group(ev), build)

    def on_dump_signal(self, ev: _Event) -> None:
        source, enqueued, completed = ev.data
        proc = self.proc
        proc.set_progress(self.group(ev), GroupProgress(enqueued=self.num(enqueued),
                                                        completed=self.num(completed),
                                                        evidence=self.evidence(ev)))
        counts = {"enqueued": self.num(enqueued), "completed": self.num(completed)}
        if source is None:
            proc.timed_out = True
            self.reader.stuck(proc, "watchdog_timeout", "tl_timed_out_here", self.evidence(ev), **counts)
        else:
            rank = self.num(source)
            proc.peer(rank)
            self.reader.stuck(proc, "watchdog_timeout", "tl_peer_timed_out", self.evidence(ev), rank=rank, **counts)

    def on_watchdog_hang(self, ev: _Event) -> None:
        seconds = self.num(ev.data[0])
        self.proc.timed_out = True
        if seconds is not None:
            self.reader.stuck(self.proc, "watchdog_timeout", "tl_watchdog_stalled", self.evidence(ev), seconds=seconds)
        else:
            self.reader.stuck(self.proc, "watchdog_timeout", "tl_heartbeat", self.evidence(ev))

    def on_terminating(self, ev: _Event) -> None:
        self.proc.alive = False
        self.proc.signal = "SIGABRT"

    def on_terminate(self, ev: _Event) -> None:
        self.proc.alive = False
        self.proc.signal = self.proc.signal or "SIGABRT"

    def on_async_error(self, ev: _Event) -> None:
        op = self.comm_op(ev.data[0], ev)
        if op is not None:
            self.proc.op(op, self.line(ev))

    def on_blocking_wait(self, ev: _Event) -> None:
        op = self.comm_op(ev.data[0], ev)
        if op is None:
            return
        proc = self.proc
        proc.op(op, self.line(ev))
        proc.timed_out = True
        timeout = op.timeout_ms if op.timeout_ms is not None else "?"
        self.reader.stuck(proc, "op_past_timeout", "tl_blocking_wait", self.evidence(ev), op=self.op_label(op),
                          timeout=timeout)

    def on_remote_error(self, ev: _Event) -> None:
        self.proc.peer(self.peer_rank(ev, ev.data[0]))

    def on_running(self, ev: _Event) -> None:
        if ev.data[0] is not None:
            self.proc.lazy_op(lambda: self.comm_op(ev.data[0], ev), self.line(ev))

    def on_wrapper_barrier(self, ev: _Event) -> None:
        op = self.comm_op(ev.data[0], ev)
        if op is not None:
            self.proc.op(op, self.line(ev))

    def on_mismatch(self, ev: _Event) -> None:
        """`Rank A is running X, but Rank B is running Y`: A is this rank;
        what it says about B is a peer claim (and may be garbage)."""
        me, mine, other, theirs = ev.data
        op = self.comm_op(mine, ev)
        proc = self.proc
        if op is not None:
            proc.op(op, self.line(ev))
        own = self.num(me)
        peer = self.num(other)
        if proc.rank is not None and own is not None and own != proc.rank:
            self.reader.facts.diag(self.evidence(ev).line,
                                   f"fingerprint mismatch names rank {own} in a process group where this "
                                   f"is global rank {proc.rank}: the peer rank {peer} is group-local, "
                                   f"no claim recorded for it", "info")
            return
        if peer is not None and peer != own and self.group(ev) == DEFAULT_GROUP:
            proc.peer(peer)
            self.reader.claim(peer, self.evidence(ev), last_op=self.comm_op(theirs, ev))

    def on_barrier_failed(self, ev: _Event) -> None:
        refs, ms = ev.data
        ranks = [r for r in (self.peer_rank(ev, ref) for ref in refs) if r is not None]
        timeout = self.num(ms)
        proc = self.proc
        proc.timed_out = True
        for rank in ranks:
            proc.peer(rank)
            self.reader.claim(rank, self.evidence(ev))
        self.reader.stuck(proc, "op_past_timeout", "tl_barrier_failed", self.evidence(ev), ranks=tuple(ranks),
                          timeout=timeout)

    def on_barrier_timeout(self, ev: _Event) -> None:
        timeout = self.num(ev.data[1])
        self.proc.timed_out = True
        self.reader.stuck(self.proc, "op_past_timeout", "tl_barrier_timeout", self.evidence(ev), timeout=timeout)

    def on_barrier_peer_error(self, ev: _Event) -> None:
        self.proc.peer(0 if self.group(ev) == DEFAULT_GROUP else None)

    def on_gloo_timeout(self, ev: _Event) -> None:
        timeout, direction = self.num(ev.data[0]), ev.data[1]
        self.proc.timed_out = True
        self.reader.stuck(self.proc, "op_past_timeout", "tl_gloo_timeout", self.evidence(ev), direction=direction,
                          timeout=timeout)

    def on_exception(self, ev: _Event) -> None:
        self.proc.error(self.evidence(ev))

    # -- desync report (TORCH_NCCL_DESYNC_DEBUG)
    def on_desync_timeout(self, ev: _Event) -> None:
        self.desync.append(ev)

    on_desync_missing = on_desync_joined = on_desync_finished = on_desync_timeout
    on_desync_snapshot_head = on_desync_snapshot = on_desync_timeout

    def apply_desync(self) -> None:
        """Each rank the report names, as (started, completed) on the group:
        never joined → (-1, -1), c10d's value before any work; joined but
        didn't finish #N → (N, N-1); finished #N, didn't join #N+1 → (N, N)."""
        proc = self.proc
        me = None
        group = DEFAULT_GROUP
        states: dict[int, list] = {}  # rank → [started, completed, op name, evidence]
        snapshot_seq = None
        for ev in self.desync:
            group = self.group(ev)
            evidence = self.evidence(ev)
            if ev.kind == "desync_timeout":
                me = self.num(ev.data[0])
                seq = self.num(ev.data[2])
                name = self.text.get(ev.data[1])
                op = CommOp(normalize_op(name) or "comm", group=group, seq=seq, evidence=evidence)
                proc.op(op, evidence.line)
                proc.timed_out = True
                continue
            if ev.kind == "desync_snapshot_head":
                snapshot_seq = self.num(ev.data[0])
                continue
            ranks = [self.num(r) for r in ev.data[0]]
            if ev.kind == "desync_missing":
                update = (-1, -1, "")
            elif ev.kind == "desync_joined":
                seq = self.num(ev.data[1])
                update = (seq, None if seq is None else seq - 1, "")
            elif ev.kind == "desync_finished":
                seq = self.num(ev.data[1])
                update = (seq, seq, "")
            else:  # a snapshot line
                verb, name = ev.data[1], self.text.get(ev.data[2])
                seq = snapshot_seq
                update = (seq, seq if verb == "finished" or seq is None else seq - 1, name)
            for rank in ranks:
                if rank is None:
                    continue
                state = states.setdefault(rank, [None, None, "", evidence])
                state[0] = update[0] if update[0] is not None else state[0]
                state[1] = update[1] if update[1] is not None else state[1]
                state[2] = update[2] or state[2]
        if group != DEFAULT_GROUP:
            if states:
                self.reader.facts.diag(self.record.numbers[0], f"desync report of group {group}: its ranks are "
                                                               f"group-local, no claims recorded for them", "info")
            return
        for rank, (started, completed, name, evidence) in sorted(states.items()):
            progress = {group: GroupProgress(started=started, completed=completed, evidence=evidence)}
            op = None
            if name and started is not None and started >= 0:
                op = CommOp(normalize_op(name), group=group, seq=started,
                            state="completed" if completed == started else "started", evidence=evidence)
            if rank == me:
                proc.set_progress(group, progress[group])
                continue
            proc.peer(rank)
            self.reader.claim(rank, evidence, last_op=op, progress=progress)

    # -- launcher
    def on_log(self, ev: _Event) -> None:
        if ev.data[2] is not None and self.proc.pid is None and self.proc.key == AGENT:
            self.proc.pid = self.num(ev.data[2])

    def on_child_failed(self, ev: _Event) -> None:
        code, local, pid = (self.num(r) for r in ev.data)
        if pid is None:
            return
        child = self.reader.child(pid)
        child.exit_code, child.local_rank = code, local
        child.evidence = child.evidence or self.evidence(ev)
        child.error(self.evidence(ev))

    def on_child_signalled(self, ev: _Event) -> None:
        pid = self.num(ev.data[0])
        if pid is None:
            return
        child = self.reader.child(pid)
        child.evidence = child.evidence or self.evidence(ev)
        child.error(self.evidence(ev))

    def on_root_cause(self, ev: _Event) -> None:
        self.reader.root_cause = self.evidence(ev)

    def on_entry(self, ev: _Event) -> None:
        fields = {item[0]: item for item in ev.data}
        exitcode = fields.get("exitcode")
        if exitcode is None or self.num(exitcode[3]) is None:
            return
        child = self.reader.child(self.num(exitcode[3]))
        header = self.record.evidence(self.display, 0)
        child.evidence = header
        self.reader.summary_at = self.reader.summary_at or header
        root, self.reader.root_cause = self.reader.root_cause, None
        if root is not None:  # torchelastic's root cause: its marker line joins the entry's errors
            child.error(root)
        child.exit_code = self.num(exitcode[2])
        if exitcode[4]:
            child.signal = exitcode[4]
        child.error(self.line_of(exitcode[1]))
        if "rank" in fields:
            rank = fields["rank"]
            child.rank, child.local_rank = self.num(rank[2]), self.num(rank[3])
            child.rank_evidence = self.line_of(rank[1])
        if "host" in fields:
            child.host = self.text.get(fields["host"][2]).strip()
        trace = fields.get("traceback")
        if trace is not None:
            if trace[2] and not child.signal:
                child.signal = trace[2]
            child.error(self.line_of(trace[1]))
        more = [item for item in ev.data if item[0] == "more"]
        if more:
            child.error(self.line_of(more[-1][1]))

    def line_of(self, at: int) -> Evidence:
        """The evidence for a position in the masked record."""
        return self.record.evidence(self.display, self.text.masked.count("\n", 0, max(at, 0)))
