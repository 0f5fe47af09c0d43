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
`(WorkerDict pid=…)`) say which process a line belongs to; records of
different processes may interleave. Each record is masked (every number
becomes `0`) and each distinct masked record is parsed once by
grammars/torch_log.lark; the parse says where the values sit and they are
read back from the record's own text. Memory stays flat: only open records,
the per-process state and a bounded parse cache are kept.
"""

from __future__ import annotations

import bisect
import gzip
import re
import zlib
from collections import deque
from dataclasses import replace
from typing import NamedTuple

import lark
from lark import Token

from ..hookspecs import hookimpl
from ..model import (DEFAULT_GROUP, CommOp, Evidence, GroupProgress, ProcessGroup, ProcessRecord,
                     StuckSignal, normalize_op)
from .facts import Facts
from .gdb import _Cache
from .grammar import parser
from .textio import InputError, looks_binary

KIND = "torch-log"
SOURCE = "torch"
PEER_CLAIM = "torch-peer-claim"  # what one rank's log says about another rank
LAUNCHER = "launcher"
GRAMMAR = "torch_log"

MAX_LINE = 64 * 1024         # longer lines are skipped with a diagnostic
MAX_RECORD_LINES = 400       # a record's further continuation lines are read, not kept
MAX_LISTED = 50              # unrecognized records listed one by one per file
MAX_ERRORS = 64              # error lines kept per process
MAX_STUCK = 200              # stuck signals per file
RECENT_OPS = 3
WRAP_MIN = 60                # a hard-wrapped line is at least this long
EVIDENCE_CHARS = 2000

# ---------------------------------------------------------------- sniffing

_ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
_OUTER_BYTES = rb"(?:\[(?:rank|default)\d+\]:|\([^()\n]*pid=\d+[^()\n]*\) ?)*"
_SNIFF = re.compile(
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


def sniff(path: str, head: bytes) -> bool:
    """c10 log prefixes, torchelastic's logging and failure summary, or the
    exceptions c10d raises. NCCL_DEBUG lines alone are the NCCL reader's."""
    if looks_binary(head):
        return False
    if b"\x1b" in head:
        head = _ANSI_BYTES.sub(b"", head)
    return _SNIFF.search(head) is not None


def parse(path: str, display: str) -> Facts:
    facts = Facts(KIND, display)
    reader = _Reader(facts, display)
    for line_no, data in _lines(path, display, facts):
        reader.feed(line_no, data)
    if not reader.seen_text:
        raise InputError(display, "empty file")
    reader.finish()
    return facts


@hookimpl
def forensics_sniff(path, head):
    return KIND if sniff(path, head) else None


@hookimpl
def forensics_parse(artifact):
    if artifact.kind != KIND:
        return None
    return parse(artifact.path, artifact.display)


# ---------------------------------------------------------------- reading lines

def _lines(path: str, display: str, facts: Facts):
    """(line number, bytes without the newline) for every line, streamed;
    lines longer than MAX_LINE are skipped (None). A file that breaks off
    (a cut gzip stream, an I/O error) ends with a diagnostic."""
    try:
        with open(path, "rb") as probe:
            compressed = probe.read(2) == b"\x1f\x8b"
        handle = gzip.open(path, "rb") if compressed else open(path, "rb")
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
            except (OSError, EOFError, zlib.error) as exc:
                facts.diag(line_no + 1, f"file cut short: {exc.__class__.__name__}: {exc}"[:200], "error")
                return
            if not data:
                return
            line_no += 1
            facts.lines_read += 1
            yield line_no, data


# ---------------------------------------------------------------- masking

_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|[0-9]+")


def _mask(text: str) -> str:
    return _NUMBER.sub("0", text)


class _Text:
    """A record's text, and the way back from a position in its masked form
    (where every number is one `0`) to the original."""

    __slots__ = ("text", "_ends", "_shift")

    def __init__(self, text: str):
        self.text = text
        self._ends: list[int] | None = None

    def _map(self) -> None:
        ends, shift, extra = [], [], 0
        for match in _NUMBER.finditer(self.text):
            start, end = match.span()
            ends.append(start - extra + 1)
            extra += end - start - 1
            shift.append(extra)
        self._ends, self._shift = ends, shift

    def _orig(self, pos: int) -> int:
        if self._ends is None:
            self._map()
        k = bisect.bisect_right(self._ends, pos)
        return pos + (self._shift[k - 1] if k else 0)

    def get(self, ref) -> str:
        if ref is None:
            return ""
        return self.text[self._orig(ref[0]):self._orig(ref[1])]

    def int(self, ref) -> int | None:
        text = self.get(ref).strip()
        try:
            return int(text, 0) if text[:2] in ("0x", "0X") else int(text)
        except ValueError:
            return None


# ---------------------------------------------------------------- parsing records

class _Ev(NamedTuple):
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
    reason: str


def _ref(token) -> tuple[int, int]:
    return (token.start_pos, token.end_pos)


def _tokens(children, *types):
    return [c for c in children if isinstance(c, Token) and c.type in types]


def _token(children, *types):
    found = _tokens(children, *types)
    return found[0] if found else None


def _at(children) -> int:
    for child in children:
        if isinstance(child, Token):
            return child.start_pos
        if isinstance(child, _Ev):
            return child.at
        if isinstance(child, list) and child:
            return child[0].at
    return -1


def _events(children) -> list[_Ev]:
    out: list[_Ev] = []
    for child in children:
        if isinstance(child, _Ev):
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


def _event(kind, data=()):
    """A transformer callback for a rule that states one event."""
    def callback(self, children):
        at = _at(children)
        return [_Ev(kind, at, data(children) if callable(data) else data)] + _events(children)
    return callback


class _Records(lark.Transformer):
    """Builds a record's template (a tuple of `_Ev`) while lark parses."""

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

    def tb_frame(self, c):
        return None

    # -- prefixes and messages
    def rank_prefix(self, c):
        return ("pg", None, None, _num(c), _at(c))

    def pg_prefix(self, c):
        guid, desc = _token(c, "GUID"), _token(c, "DESC")
        return ("pg", _ref(guid) if guid else None, _ref(desc) if desc else None,
                _num(c, len(_tokens(c, "NUM")) - 1), _at(c))

    def message(self, c):
        context = None
        for child in c:
            if isinstance(child, tuple) and child[0] == "pg":
                if context is None or child[1] is not None or context[1] is None:
                    context = child
        events = _events(c)
        if context is None:
            return events
        pg = context[1:4]
        out = [_Ev("pg", context[4], (), pg)]
        for ev in events:
            if ev.pg is None:
                ev = ev._replace(pg=pg)
            elif ev.pg[0] is None and pg[0] is not None:
                ev = ev._replace(pg=(pg[0], pg[1], ev.pg[2] if ev.pg[2] is not None else pg[2]))
            out.append(ev)
        return out

    def generic(self, c):
        return []

    # -- records
    def c10_record(self, c):
        head = c[0]
        return [_Ev("c10", head.start_pos, (head.value[1],))] + _events(c)

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
        return [_Ev("log", head.start_pos, (level, source, pid))] + _events(c)

    def traceback(self, c):
        return [_Ev("traceback", _at(c))] + _events(c)

    def exception(self, c):
        name = c[0]
        return [_Ev("exception", name.start_pos, (_ref(name),))] + _events(c)

    def terminate(self, c):
        return [_Ev("terminate", _at(c))] + _events(c)

    def what(self, c):
        return [_Ev("what", _at(c))] + _events(c)

    def tail(self, c):
        return _events(c)

    def tail_line(self, c):
        return _events(c)

    # -- c10d events
    def watchdog_timeout(self, c):
        return [_Ev("timeout", _at(c), (_tagged(c, "work"), _num(c)))]

    def failure_detected(self, c):
        return [_Ev("failure", _at(c), (_num(c, 0), _num(c, 1), _num(c, 2)))]

    def old_failure(self, c):
        counters = _tagged(c, "counters")
        return [_Ev("failure", _at(c), (_num(c, 0), counters[1], counters[2]))]

    def periodic(self, c):
        counters = _tagged(c, "counters")
        return [_Ev("progress", _at(c), (counters[1], counters[2]))]

    def dump_signal(self, c):
        counters = _tagged(c, "counters")
        source = _tagged(c, "from")
        return [_Ev("dump_signal", _at(c), (source[1] if source else None, counters[1], counters[2]))]

    def watchdog_hang(self, c):
        return [_Ev("watchdog_hang", _at(c), (_num(c),))]

    def terminating(self, c):
        return [_Ev("terminating", _at(c), (_text_ref(c),))]

    watchdog_exit = _event("watchdog_exit")
    process_down = _event("process_down")

    def async_error(self, c):
        return [_Ev("async_error", _at(c), (_tagged(c, "work"),))] + _events(c)

    def blocking_wait(self, c):
        return [_Ev("blocking_wait", _at(c), (_tagged(c, "work"),))]

    def remote_error(self, c):
        return [_Ev("remote_error", _at(c), (_num(c),))]

    def stack_trace(self, c):
        return []

    # -- DETAIL
    def running(self, c):
        return [_Ev("running", _at(c), (_tagged(c, "fp"),))]

    def mismatch(self, c):
        prints = [x for x in c if isinstance(x, tuple) and x[0] == "fp"]
        return [_Ev("mismatch", _at(c), (_num(c, 0), prints[0], _num(c, 1), prints[1]))]

    def wrapper_barrier(self, c):
        return [_Ev("wrapper_barrier", _at(c), (_tagged(c, "fp"),))]

    # -- monitored barrier
    def rank_only(self, c):
        return [_Ev("rank_only", _at(c), (_num(c),))]

    def barrier_failed(self, c):
        listed = _tagged(c, "ranks")
        if listed is not None:
            return [_Ev("barrier_failed", _at(c), (listed[1], _num(c)))]
        return [_Ev("barrier_failed", _at(c), ((_num(c, 0),), _num(c, 1)))]

    def barrier_peer_error(self, c):
        return [_Ev("barrier_peer_error", _at(c), (_num(c),))]

    def barrier_timeout(self, c):
        return [_Ev("barrier_timeout", _at(c), (_num(c, 0), _num(c, 1)))]

    # -- desync report
    def desync_timeout(self, c):
        return [_Ev("desync_timeout", _at(c), (_num(c, 0), _ref(_token(c, "OPNAME")), _num(c, 1)))]

    def desync_missing(self, c):
        return [_Ev("desync_missing", _at(c), (_tagged(c, "ranks")[1],))]

    def desync_joined(self, c):
        return [_Ev("desync_joined", _at(c), (_tagged(c, "ranks")[1], _num(c, 0)))]

    def desync_finished(self, c):
        return [_Ev("desync_finished", _at(c), (_tagged(c, "ranks")[1], _num(c, 0)))]

    def desync_snapshot_head(self, c):
        head = c[0]
        verb = "started" if "started" in head.value else "finished"
        return [_Ev("desync_snapshot_head", head.start_pos, ((head.start_pos + 1, head.start_pos + 2), verb))]

    def desync_snapshot(self, c):
        verb = _token(c, "SNAPSHOT_VERB").value
        return [_Ev("desync_snapshot", _at(c), (_tagged(c, "ranks")[1], verb, _ref(_token(c, "OPNAME"))))]

    # -- Gloo
    def gloo_timeout(self, c):
        return [_Ev("gloo_timeout", _at(c), (_num(c), _token(c, "GLOO_DIRECTION").value))]

    def gloo_peer_error(self, c):
        return [_Ev("gloo_error", _at(c), ())]

    def gloo_error(self, c):
        return [_Ev("gloo_error", _at(c), ())]

    # -- launcher
    def child_failed(self, c):
        return [_Ev("child_failed", _at(c), (_num(c, 0), _num(c, 1), _num(c, 2)))]

    def child_signalled(self, c):
        return [_Ev("child_signalled", _at(c), (_num(c), _token(c, "SIGNAL").value))]

    def summary_entry(self, c):
        fields = tuple(x for x in c if isinstance(x, tuple))
        return [_Ev("entry", c[0].start_pos, fields)]

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

    def root_cause(self, c):
        return [_Ev("root_cause", _at(c))]

    def summary_marker(self, c):
        return []

    def __default__(self, data, children, meta):
        if data.startswith("_"):  # lark's own repetition rules: spliced into their parent
            return lark.Tree(data, children)
        return _events(children)

    def start(self, c):
        return _events(c)


_LOG_WHERE = re.compile(r"[FEWIV]0 0:0:0\.0 +(?P<pid>0) (?P<glog>[^\]\s]+):0\]"
                        r"|\[[^\]]*\] (?P<stamped>[\w.]+):|[A-Z]+:(?P<plain>[\w.]+):")

_TEMPLATES = _Cache(32 << 20)


def _template(masked: str):
    """The events a masked record states, as a tuple of `_Ev` whose `at`
    is a line index within the record; or `_Unreadable`."""
    found = _TEMPLATES.get(masked)
    if found is None:
        try:
            events = parser(GRAMMAR, "start", _Records).parse(masked)
            found = tuple(ev._replace(at=masked.count("\n", 0, ev.at) if ev.at > 0 else 0) for ev in events)
        except lark.exceptions.UnexpectedInput as exc:
            line = max(0, (getattr(exc, "line", 1) or 1) - 1)
            found = _Unreadable(line, "unexpected " + _describe(exc))
        except (lark.exceptions.LarkError, RecursionError) as exc:
            found = _Unreadable(0, exc.__class__.__name__)
        _TEMPLATES.put(masked, found)
    return found


def _describe(exc) -> str:
    token = getattr(exc, "token", None)
    if token is not None and getattr(token, "type", "") == "$END":
        return "end of record"
    char = getattr(exc, "char", None)
    if char is not None:
        return f"text at column {getattr(exc, 'column', '?')}"
    return f"text at column {getattr(exc, 'column', '?')}"


# ---------------------------------------------------------------- cutting the stream into records

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_OUTER = re.compile(r"\[rank(?P<rank>\d{1,7})\]:|\[default(?P<local>\d{1,7})\]:"
                    r"|\((?:[A-Za-z_][\w.:\-]*\s+)?pid=(?P<pid>\d{1,10})(?:,\s*ip=(?P<ip>[^)\s]+))?\)\s?")
_GLUED = re.compile(r"\[(?:rank|default)\d{1,7}\]:|\[[FEWIV]\d{3,4} \d\d:\d\d:\d\d\.\d{6,9} ")
_HEAD = re.compile(r"""
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
_NEW_RECORD = frozenset({"c10", "log", "tb", "term", "entry", "marker"})
_AGENT_LOGGERS = ("torch/distributed/elastic/", "torch/distributed/run.py", "torch/distributed/launch",
                  "torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launch")

FILE = ("file",)
AGENT = ("agent",)
SUMMARY = ("summary",)


class _Pending:
    """A record being assembled: its lines (body text, full text for
    evidence, physical line number)."""

    __slots__ = ("kind", "key", "bodies", "fulls", "numbers", "last_len", "last_line",
                 "tb_done", "expect_original", "dropped", "root_cause")

    def __init__(self, kind, key, line_no, full, body):
        self.kind, self.key = kind, key
        self.bodies, self.fulls, self.numbers = [body], [full], [line_no]
        self.last_len, self.last_line = len(full), line_no
        self.tb_done = False
        self.expect_original = False
        self.dropped = 0
        self.root_cause = None

    def add(self, line_no, full, body) -> None:
        self.last_len, self.last_line = len(full), line_no
        if len(self.bodies) >= MAX_RECORD_LINES:
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

    __slots__ = ("key", "rank", "local_rank", "pid", "host", "last_op", "op_line", "recent", "progress",
                 "errors", "error_lines", "errors_dropped", "peers", "timed_out", "alive", "exit_code",
                 "signal", "evidence", "stuck", "guessed_group_op", "records", "meaningful")

    def __init__(self, key):
        self.key = key
        self.rank = key[1] if key[0] == "rank" else None
        self.local_rank = key[1] if key[0] == "local" else None
        self.pid = key[1] if key[0] == "pid" else None
        self.host = ""
        self.last_op: CommOp | None = None
        self.op_line = 0
        self.recent: deque[CommOp] = deque(maxlen=RECENT_OPS)
        self.progress: dict[str, GroupProgress] = {}
        self.errors: list[Evidence] = []
        self.error_lines: set[int] = set()
        self.errors_dropped = 0
        self.peers: list[int] = []
        self.timed_out = False
        self.alive: bool | None = None
        self.exit_code: int | None = None
        self.signal = ""
        self.evidence: Evidence | None = None
        self.stuck: list[tuple] = []  # (kind, english, chinese, evidence), labelled at the end
        self.guessed_group_op: CommOp | None = None
        self.records = 0
        self.meaningful = False

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
        if last is not None and (last.op, last.group, last.seq) == (op.op, op.group, op.seq):
            op = replace(op, sizes=op.sizes or last.sizes, dtype=op.dtype or last.dtype,
                         timeout_ms=op.timeout_ms if op.timeout_ms is not None else last.timeout_ms,
                         elapsed_ms=op.elapsed_ms if op.elapsed_ms is not None else last.elapsed_ms,
                         any_source=op.any_source or last.any_source,
                         state=last.state if op.state == "started" else op.state)
        elif last is not None:
            self.recent.append(last)
        self.last_op, self.op_line = op, line

    def set_progress(self, group: str, progress: GroupProgress) -> None:
        self.meaningful = True
        self.progress[group] = progress

    def absorb(self, other: "_Proc") -> None:
        """Another key's state of the same process (e.g. its `[default3]:`
        lines before `[rank3]:` appeared)."""
        for name in ("rank", "local_rank", "pid", "exit_code", "alive", "evidence"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(other, name))
        self.host = self.host or other.host
        self.signal = self.signal or other.signal
        self.timed_out = self.timed_out or other.timed_out
        if other.last_op is not None and (self.last_op is None or other.op_line > self.op_line):
            if self.last_op is not None:
                self.recent.append(self.last_op)
            self.last_op, self.op_line = other.last_op, other.op_line
        for group, progress in other.progress.items():
            mine = self.progress.get(group)
            if mine is None or _line(progress) > _line(mine):
                self.progress[group] = progress
        for evidence in other.errors:
            self.error(evidence)
        for rank in other.peers:
            self.peer(rank)
        self.stuck.extend(other.stuck)
        self.records += other.records
        self.meaningful = self.meaningful or other.meaningful


def _line(progress: GroupProgress) -> int:
    return progress.evidence.line if progress.evidence is not None else 0


class _Child:
    """A worker as its launcher reports it."""

    __slots__ = ("pid", "rank", "local_rank", "host", "exit_code", "signal", "root_cause",
                 "errors", "evidence", "rank_evidence")

    def __init__(self, pid):
        self.pid = pid
        self.rank = self.local_rank = self.exit_code = None
        self.host = self.signal = ""
        self.root_cause = False
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
    def __init__(self, facts: Facts, display: str):
        self.facts, self.display = facts, display
        self.open: dict[tuple, _Pending] = {}
        self.last: _Pending | None = None
        self.procs: dict[tuple, _Proc] = {}
        self.aliases: dict[tuple, tuple] = {}
        self.children: dict[int, _Child] = {}
        self.claims: dict[tuple, ProcessRecord] = {}
        self.groups: dict[str, str] = {}
        self.root_cause: Evidence | None = None
        self.listed = 0
        self.seen_text = False
        self.stuck_count = 0

    # -- lines
    def feed(self, line_no: int, data: bytes | None) -> None:
        if data is None:
            self.seen_text = True
            self.last = None
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
            pos += 1
        body = full[pos:]
        head = _HEAD.match(body)
        kind = head.lastgroup if head is not None else None
        if kind is None:
            glued = _GLUED.search(body, 1)
            if glued is not None:
                self._piece(line_no, body[glued.start():])
                return
        key = self._key(rank, local, pid, host)
        same = self.open.get(key)
        # Lines without prefix continue the most recent record (a C++
        # message's later lines carry no prefix), or the file's own.
        recent = same if key != FILE else (self.last if self.last is not None else same)
        if recent is not None and recent.expect_original and kind not in _NEW_RECORD:
            recent.expect_original = False
            self._extend(recent, line_no, full, body)
            return
        if same is not None and same.kind == "tb" and not same.tb_done and kind not in _NEW_RECORD:
            if kind in ("indent", "field"):
                self._extend(same, line_no, full, body)
            elif body.strip():
                same.tb_done = True  # an unindented line ends the frames: the exception
                self._extend(same, line_no, full, body)
            return
        if kind in ("cont", "original"):
            if recent is None:
                self._other(key)
                return
            recent.expect_original = kind == "original"
            self._extend(recent, line_no, full, body)
            return
        if kind in ("field", "indent"):
            entry = self.last if key == FILE and self.last is not None and self.last.kind == "entry" else same
            if entry is not None and entry.kind == "entry":
                self._extend(entry, line_no, full, body)
                return
        if kind in (None, "indent"):
            if not body.strip():
                return
            if recent is not None and self._wraps(recent, line_no, body):
                recent.join(line_no, full, body)
                self.last = recent
                return
            self._other(key)
            return
        if kind == "field":
            self._other(key)
            return
        if kind == "chain":
            self._close(key)
            self._other(key)
            return
        if kind in ("entry", "marker"):
            key = SUMMARY
        self._start(kind, key, line_no, full, body)

    def _key(self, rank, local, pid, host) -> tuple:
        if rank is not None:
            key = ("rank", rank)
            if local is not None:
                self.aliases.setdefault(("local", local), key)
            if pid is not None:
                self.aliases.setdefault(("pid", pid), key)
        elif local is not None:
            key = ("local", local)
        elif pid is not None:
            key = ("pid", pid)
        else:
            return FILE
        if host and key not in self.procs:
            self._proc(key).host = host
        if pid is not None:
            proc = self._proc(key)
            if proc.pid is None:
                proc.pid = pid
        return key

    def _start(self, kind, key, line_no, full, body) -> None:
        self._close(key)
        record = _Pending(kind, key, line_no, full, body)
        self.open[key] = record
        self.last = record

    def _extend(self, record: _Pending, line_no, full, body) -> None:
        record.add(line_no, full, body)
        self.last = record

    def _other(self, key) -> None:
        """A line of another program: it ends an unprefixed record."""
        if key == FILE:
            self._close(FILE)
            self.last = None

    def _close(self, key) -> None:
        record = self.open.pop(key, None)
        if record is not None:
            if self.last is record:
                self.last = None
            self._finish(record)

    def _wraps(self, record: _Pending, line_no: int, body: str) -> bool:
        """Whether a line without prefix is the hard-wrapped rest of the
        record's last line: that line was long, and the record reads only
        with the rest glued back (or leaves a bracket open)."""
        if record.last_line != line_no - 1 or record.last_len < WRAP_MIN or record.dropped:
            return False
        if _unbalanced(record.bodies[-1]):
            return True
        if not isinstance(_template(_mask(record.text())), _Unreadable):
            return False
        joined = record.text() + body
        return not isinstance(_template(_mask(joined)), _Unreadable)

    # -- records
    def _finish(self, record: _Pending) -> None:
        text = record.text()
        masked = _mask(text)
        template = _template(masked)
        if record.dropped:
            self.facts.diag(record.numbers[0], f"record of {record.dropped + len(record.bodies)} lines: "
                                               f"the last {record.dropped} were read, not kept", "info")
        if isinstance(template, _Unreadable):
            self._unrecognized(record, template)
            return
        _Apply(self, record, _Text(text), masked, template).run()

    def _unrecognized(self, record: _Pending, why: _Unreadable) -> None:
        self.facts.unrecognized += 1
        evidence = record.evidence(self.display, why.line)
        if self.listed < MAX_LISTED:
            self.facts.diag(evidence.line, f"unrecognized {record.kind} record ({why.reason}): "
                                           f"{evidence.text[:160]}")
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
        """What this file says about another rank: a peer claim."""
        if rank is None or rank < 0:
            return
        key = (rank, None if last_op is None else (last_op.op, last_op.group, last_op.seq, last_op.state),
               tuple(sorted((g, p.started, p.completed) for g, p in (progress or {}).items())))
        known = self.claims.get(key)
        if known is not None:
            return
        self.claims[key] = ProcessRecord(PEER_CLAIM, self.display, rank=rank, last_op=last_op,
                                         progress=progress or {}, errors=(evidence,), evidence=evidence)

    def stuck(self, proc: _Proc, kind: str, english: str, chinese: str, evidence: Evidence) -> None:
        proc.meaningful = True
        proc.stuck.append((kind, english, chinese, evidence))

    # -- the end
    def finish(self) -> None:
        for key in list(self.open):
            self._close(key)
        if self.listed > MAX_LISTED:
            self.facts.diag(0, f"{self.listed - MAX_LISTED} more unrecognized records not listed")
        procs = self._resolve()
        self._link_children(procs)
        facts = self.facts
        for proc in procs:
            facts.records.append(self._record(proc))
        for child in sorted(self.children.values(), key=lambda c: (c.rank is None, c.rank, c.pid)):
            facts.records.append(self._child_record(child))
            if child.rank is not None:
                facts.pid_ranks.append((child.host, child.pid, child.rank, child.rank_evidence or child.evidence))
        facts.records.extend(self.claims.values())
        for guid, desc in self.groups.items():
            facts.groups.append(ProcessGroup(guid, desc, ()))
        if not facts.records:
            facts.diag(0, "no c10d or launcher records found", "info")

    def _resolve(self) -> list[_Proc]:
        """Merge the keys of one process; decide what the unprefixed lines
        were: the one process of the file, or a process of their own."""
        procs = dict(self.procs)
        procs.pop(AGENT, None)
        for alias, target in self.aliases.items():
            if alias in procs:
                source = procs.pop(alias)
                if target in procs:
                    procs[target].absorb(source)
                else:
                    source.key = target
                    source.rank = target[1]
                    procs[target] = source
        loose = procs.pop(FILE, None)
        if loose is not None:
            if len(procs) == 1:
                next(iter(procs.values())).absorb(loose)
            elif not procs or loose.meaningful:
                procs[FILE] = loose
        for proc in procs.values():
            if proc.errors_dropped:
                self.facts.diag(0, f"{self._label(proc)[0]}: {proc.errors_dropped} more error lines not kept",
                                "info")
        return sorted(procs.values(), key=lambda p: (p.rank is None, p.rank if p.rank is not None else 0,
                                                     p.local_rank if p.local_rank is not None else -1,
                                                     p.pid or 0))

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

    def _label(self, proc: _Proc) -> tuple[str, str]:
        if proc.rank is not None:
            return f"rank {proc.rank}", f"rank {proc.rank}"
        if proc.local_rank is not None:
            return f"local rank {proc.local_rank}", f"本地 rank {proc.local_rank}"
        if proc.pid is not None:
            return f"pid {proc.pid}", f"进程 {proc.pid}"
        return self.display, self.display

    def _record(self, proc: _Proc) -> ProcessRecord:
        english, chinese = self._label(proc)
        seen = set()
        for kind, detail, detail_zh, evidence in proc.stuck:
            if (kind, detail) in seen:
                continue
            seen.add((kind, detail))
            if self.stuck_count < MAX_STUCK:
                self.facts.stuck.append(StuckSignal(kind, f"{english}: {detail}", evidence,
                                                    detail_zh=f"{chinese}：{detail_zh}"))
            elif self.stuck_count == MAX_STUCK:
                self.facts.diag(0, f"more than {MAX_STUCK} stuck signals: the rest are not listed", "info")
            self.stuck_count += 1
        return ProcessRecord(SOURCE, self.display, host=proc.host, pid=proc.pid, rank=proc.rank,
                             local_rank=proc.local_rank, last_op=proc.last_op, recent_ops=tuple(proc.recent),
                             progress=dict(proc.progress), errors=tuple(proc.errors),
                             peers_in_errors=tuple(proc.peers), timed_out=proc.timed_out, alive=proc.alive,
                             exit_code=proc.exit_code, signal=proc.signal, evidence=proc.evidence)

    def _child_record(self, child: _Child) -> ProcessRecord:
        signal = child.signal
        if not signal and child.exit_code is not None and child.exit_code < 0:
            signal = _SIGNALS.get(-child.exit_code, f"signal {-child.exit_code}")
        return ProcessRecord(LAUNCHER, self.display, host=child.host, pid=child.pid, rank=child.rank,
                             local_rank=child.local_rank, errors=tuple(child.errors),
                             alive=False if child.exit_code is not None else None,
                             exit_code=child.exit_code, signal=signal, evidence=child.evidence)


class _Apply:
    """Applies one record's template to the reader's state."""

    def __init__(self, reader: _Reader, record: _Pending, text: _Text, masked: str, template: tuple):
        self.reader, self.record, self.text, self.template = reader, record, text, template
        self.masked = masked
        self.display = reader.display
        self.desync: list[_Ev] = []

    def run(self) -> None:
        record, reader = self.record, self.reader
        if record.key == SUMMARY:
            self.proc = None
        else:
            owner = self._owner()
            self.proc = reader._proc(owner)
            self.proc.records += 1
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
        if record.key != FILE:
            return record.key
        first = self.template[0] if self.template else None
        if first is not None and first.kind == "log":
            where = self.text.get(first.data[1])
            if where and any(name in where for name in _AGENT_LOGGERS):
                return AGENT
        if record.kind == "tb":
            for ev in self.template:
                if ev.kind == "exception":
                    name = self.text.get(ev.data[0])
                    if name.endswith(("ChildFailedError", "SignalException")):
                        return AGENT
        return record.key

    # -- helpers
    def evidence(self, ev: _Ev) -> Evidence:
        return self.record.evidence(self.display, ev.at)

    def group(self, ev: _Ev) -> str:
        if ev.pg is not None and ev.pg[0] is not None:
            return self.text.get(ev.pg[0]) or DEFAULT_GROUP
        return DEFAULT_GROUP

    def has_guid(self, ev: _Ev) -> bool:
        return ev.pg is not None and ev.pg[0] is not None

    def num(self, ref) -> int | None:
        return self.text.int(ref) if ref is not None else None

    def peer_rank(self, ev: _Ev, ref) -> int | None:
        """A rank another rank's message names, as a global rank: ranks in
        messages are group-local, the same as global only in the default group."""
        rank = self.num(ref)
        return rank if self.group(ev) == DEFAULT_GROUP else None

    def comm_op(self, fields, ev: _Ev, state="started", elapsed=None) -> CommOp | None:
        if not fields:
            return None
        values: dict = {}
        for item in fields[1]:
            tag = item[0]
            if tag == "shape":
                values["sizes"] = (tuple(n for n in (self.num(r) for r in item[1]) if n is not None),)
            elif tag in ("seq", "timeout"):
                values[tag] = self.num(item[1])
            elif tag in ("op", "dtype"):
                values[tag] = self.text.get(item[1])
        name = values.get("op", "")
        dtype = values.get("dtype", "")
        if dtype.startswith("[") and dtype.endswith("]"):
            dtype = dtype[1:-1]
        return CommOp(op=normalize_op(name) or "comm", group=self.group(ev), seq=values.get("seq"),
                      state=state, any_source=name.upper() == "RECVANYSOURCE",
                      sizes=values.get("sizes", ()), dtype=dtype, timeout_ms=values.get("timeout"),
                      elapsed_ms=elapsed, evidence=self.evidence(ev))

    def op_label(self, op: CommOp) -> str:
        return f"{op.op} #{op.seq}" if op.seq is not None else op.op

    # -- events
    def on_c10(self, ev: _Ev) -> None:
        if ev.data[0] == "F":
            self.proc.alive = False
            self.proc.signal = self.proc.signal or "SIGABRT"
            self.proc.error(self.evidence(ev))

    def on_pg(self, ev: _Ev) -> None:
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
        elif proc.rank != rank:
            self.reader.facts.diag(self.evidence(ev).line,
                                   f"the default group calls this process rank {rank}, "
                                   f"its other lines rank {proc.rank}")

    def on_timeout(self, ev: _Ev) -> None:
        work, elapsed = ev.data
        op = self.comm_op(work, ev, elapsed=self.num(elapsed))
        if op is None:
            return
        proc = self.proc
        proc.op(op, self.evidence(ev).line)
        proc.guessed_group_op = proc.last_op if not self.has_guid(ev) else None
        proc.timed_out = True
        timeout = f"{op.timeout_ms}" if op.timeout_ms is not None else "?"
        self.reader.stuck(proc, "watchdog_timeout",
                          f"{self.op_label(op)} ran {op.elapsed_ms} ms past its {timeout} ms timeout",
                          f"{self.op_label(op)} 已运行 {op.elapsed_ms} 毫秒，超过 {timeout} 毫秒的超时",
                          self.evidence(ev))

    def on_failure(self, ev: _Ev) -> None:
        seq, enqueued, completed = (self.num(r) for r in ev.data)
        group = self.group(ev)
        proc = self.proc
        proc.set_progress(group, GroupProgress(enqueued=enqueued, completed=completed,
                                               evidence=self.evidence(ev)))
        guessed = proc.guessed_group_op
        if (guessed is not None and self.has_guid(ev) and proc.last_op is guessed
                and guessed.seq == seq and group != guessed.group):
            # The timeout line names no group; the watchdog's next line does.
            proc.last_op = replace(guessed, group=group)
        proc.guessed_group_op = None

    def on_progress(self, ev: _Ev) -> None:
        enqueued, completed = (self.num(r) for r in ev.data)
        self.proc.set_progress(self.group(ev), GroupProgress(enqueued=enqueued, completed=completed,
                                                             evidence=self.evidence(ev)))

    def on_dump_signal(self, ev: _Ev) -> None:
        source, enqueued, completed = ev.data
        proc = self.proc
        proc.set_progress(self.group(ev), GroupProgress(enqueued=self.num(enqueued),
                                                        completed=self.num(completed),
                                                        evidence=self.evidence(ev)))
        if source is None:
            proc.timed_out = True
            english, chinese = "a collective timed out on this rank", "本 rank 的集合通信超时"
        else:
            rank = self.num(source)
            proc.peer(rank)
            english, chinese = f"rank {rank} reported a collective timeout", f"rank {rank} 报告集合通信超时"
        self.reader.stuck(proc, "watchdog_timeout",
                          f"{english} (last enqueued work {self.num(enqueued)}, "
                          f"last completed {self.num(completed)})",
                          f"{chinese}（最后入队 {self.num(enqueued)}，最后完成 {self.num(completed)}）",
                          self.evidence(ev))

    def on_watchdog_hang(self, ev: _Ev) -> None:
        seconds = self.num(ev.data[0])
        english = (f"the ProcessGroupNCCL watchdog made no progress for {seconds} s" if seconds is not None
                   else "the ProcessGroupNCCL heartbeat monitor timed out")
        chinese = (f"ProcessGroupNCCL 看门狗 {seconds} 秒没有进展" if seconds is not None
                   else "ProcessGroupNCCL 心跳监视器超时")
        self.proc.timed_out = True
        self.reader.stuck(self.proc, "watchdog_timeout", english, chinese, self.evidence(ev))

    def on_terminating(self, ev: _Ev) -> None:
        self.proc.alive = False
        self.proc.signal = "SIGABRT"

    def on_terminate(self, ev: _Ev) -> None:
        self.proc.alive = False
        self.proc.signal = self.proc.signal or "SIGABRT"

    def on_async_error(self, ev: _Ev) -> None:
        op = self.comm_op(ev.data[0], ev)
        if op is not None:
            self.proc.op(op, self.evidence(ev).line)

    def on_blocking_wait(self, ev: _Ev) -> None:
        op = self.comm_op(ev.data[0], ev)
        if op is None:
            return
        proc = self.proc
        proc.op(op, self.evidence(ev).line)
        proc.timed_out = True
        timeout = op.timeout_ms if op.timeout_ms is not None else "?"
        self.reader.stuck(proc, "op_past_timeout",
                          f"{self.op_label(op)} timed out in blocking wait ({timeout} ms timeout)",
                          f"{self.op_label(op)} 在阻塞等待中超时（超时 {timeout} 毫秒）", self.evidence(ev))

    def on_remote_error(self, ev: _Ev) -> None:
        self.proc.peer(self.peer_rank(ev, ev.data[0]))

    def on_running(self, ev: _Ev) -> None:
        op = self.comm_op(ev.data[0], ev)
        if op is not None:
            self.proc.op(op, self.evidence(ev).line)

    def on_wrapper_barrier(self, ev: _Ev) -> None:
        self.on_running(ev)

    def on_mismatch(self, ev: _Ev) -> None:
        """`Rank A is running X, but Rank B is running Y`: A is this rank;
        what it says about B is a peer claim (and may be garbage)."""
        me, mine, other, theirs = ev.data
        op = self.comm_op(mine, ev)
        proc = self.proc
        if op is not None:
            proc.op(op, self.evidence(ev).line)
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

    def on_barrier_failed(self, ev: _Ev) -> None:
        refs, ms = ev.data
        ranks = [r for r in (self.peer_rank(ev, ref) for ref in refs) if r is not None]
        timeout = self.num(ms)
        proc = self.proc
        proc.timed_out = True
        for rank in ranks:
            proc.peer(rank)
            self.reader.claim(rank, self.evidence(ev))
        listed = ", ".join(str(r) for r in ranks) or "?"
        self.reader.stuck(proc, "op_past_timeout",
                          f"rank(s) {listed} failed to pass monitoredBarrier in {timeout} ms",
                          f"rank {listed} 未能在 {timeout} 毫秒内通过 monitoredBarrier", self.evidence(ev))

    def on_barrier_timeout(self, ev: _Ev) -> None:
        timeout = self.num(ev.data[1])
        self.proc.timed_out = True
        self.reader.stuck(self.proc, "op_past_timeout", f"monitoredBarrier timed out after {timeout} ms",
                          f"monitoredBarrier 在 {timeout} 毫秒后超时", self.evidence(ev))

    def on_barrier_peer_error(self, ev: _Ev) -> None:
        self.proc.peer(0 if self.group(ev) == DEFAULT_GROUP else None)

    def on_gloo_timeout(self, ev: _Ev) -> None:
        timeout, direction = self.num(ev.data[0]), ev.data[1]
        self.proc.timed_out = True
        self.reader.stuck(self.proc, "op_past_timeout",
                          f"a Gloo {direction} waited {timeout} ms and timed out",
                          f"Gloo {direction} 等待 {timeout} 毫秒后超时", self.evidence(ev))

    def on_exception(self, ev: _Ev) -> None:
        self.proc.error(self.evidence(ev))

    # -- desync report (TORCH_NCCL_DESYNC_DEBUG)
    def on_rank_only(self, ev: _Ev) -> None:
        pass

    def on_desync_timeout(self, ev: _Ev) -> None:
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
    def on_log(self, ev: _Ev) -> None:
        if ev.data[2] is not None and self.proc.pid is None and self.proc.key == AGENT:
            self.proc.pid = self.num(ev.data[2])

    def on_child_failed(self, ev: _Ev) -> None:
        code, local, pid = (self.num(r) for r in ev.data)
        if pid is None:
            return
        child = self.reader.child(pid)
        child.exit_code, child.local_rank = code, local
        child.evidence = child.evidence or self.evidence(ev)
        child.error(self.evidence(ev))

    def on_child_signalled(self, ev: _Ev) -> None:
        pid = self.num(ev.data[0])
        if pid is None:
            return
        child = self.reader.child(pid)
        child.evidence = child.evidence or self.evidence(ev)
        child.error(self.evidence(ev))

    def on_root_cause(self, ev: _Ev) -> None:
        self.reader.root_cause = self.evidence(ev)

    def on_entry(self, ev: _Ev) -> None:
        fields = {item[0]: item for item in ev.data}
        exitcode = fields.get("exitcode")
        if exitcode is None or self.num(exitcode[3]) is None:
            return
        child = self.reader.child(self.num(exitcode[3]))
        header = self.record.evidence(self.display, 0)
        child.evidence = header
        root, self.reader.root_cause = self.reader.root_cause, None
        if root is not None:
            child.root_cause = True
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
        return self.record.evidence(self.display, self.masked.count("\n", 0, max(at, 0)))
