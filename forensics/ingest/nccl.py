"""NCCL_DEBUG=INFO logs: communicator inits, per-call COLL lines, WARNs, topology.

One file may interleave many processes' lines (torchrun's stdout, Slurm
output) with other programs' lines; each NCCL process (`host:pid`) becomes one
`ProcessRecord`: its last calls per communicator (`opCount`, hex, per
communicator), its WARNs, its global rank when an outer `[rankN]:` prefix
states it. Init lines feed `comm_members` (the communicator's members, by
`commId`, the hash every member prints) and `pid_ranks` (host:pid → rank in
the largest communicator), ring lines feed `rings` (for naming the link a
stalled ring depends on), and each process's view of each communicator it
called on (`CommView`: its newest calls, its rank there, its ring and tree
lines) travels as `comm_views`, for merge to tell which per-process pointers
are one communicator when no commId does (ingest/communicators.py).

Reading. A line is found by its NCCL prefix anywhere in it (launchers and
terminals glue `[rank3]:`, `(RayWorkerWrapper pid=…)`, timestamps, colours
and progress bars before it). Everything between the prefix regular
expression and the lark grammar (grammars/nccl.lark) is shared work: numbers
are masked and each distinct masked message is parsed once. The hot path,
COLL lines by the million, does not even mask: a line's *shape* (every hex
digit turned into `#`, so equal shapes have equal field positions) maps to
the positions of its fields, learnt from the first line of that shape.

Size. With COLL enabled a rank writes gigabytes. Hang forensics needs each
process's last state, so a plain file over TAIL_THRESHOLD is read in tail
mode: a head and a tail line by line; of the middle only what the tail
needs, found going backwards chunk by chunk with byte searches: the last
call of every process and communicator the tail does not show, and the init
sequence (Init START, topology, Init COMPLETE) of each communicator the
tail uses whose init the head does not hold. Both are as long as they must
be and no longer. The head is the first HEAD_BYTES, less what of it holds
nothing but calls (every line a COLL line, counted with byte searches: no
init, warning or topology line there), down to HEAD_FIRST: those calls are
what the tail and the backward search read anyway. The tail starts at
TAIL_FIRST and grows while a process's newest COMM_WINDOW calls (what its
record and its communicator views keep) are not all in it, up to
TAIL_BYTES; when even that misses some, the head is read whole. One rank's
file holds them in its last ~50 KB, eight ranks interleaved in ~0.4 MB,
whatever the file's size. The rest of the middle is never read, so the cost
does not grow with the file. Lines past the head are numbered from the end
of the file (-1 is the last line; `tail -n N FILE | head -n 1` shows line
-N): counting the lines of the middle would mean reading it. A warning in
the middle (before every process's newest COMM_WINDOW calls), or a
communicator created there and never used since, is not seen; the
tail-mode diagnostic says so, and `parse(..., full=True)` reads every line.
Memory stays flat: at most the tail, a chunk and a few lines per process
are held. gzip and zstd streams cannot be tailed and are read whole, with
the same flat memory.

What the file cannot tell, and what we assume:
- `[d]` after the pid is a local CUDA device, never a rank.
- A communicator's id is `nccl:<commId>`. NCCL 2.23+ prints no commId for
  `ncclCommSplit`; members of one split share the parent, the split's count
  (`splitCount`/`childCount`, else its order among this process's splits of
  that parent) and the colour, so its id is `nccl:<parent id>/split<n>/color<c>`.
  A pointer whose init line is missing keeps a per-process id
  `nccl-comm:<host>:<pid>:<pointer>` and is nobody's member.
- Topology lines do not name their communicator: they belong to the init in
  progress on the same thread (Init START or the comm summary line before
  them), else to the communicator of the process's last call (NCCL 2.19+
  connects lazily at the first call), else to the next Init COMPLETE on the
  thread (NCCL before 2.18.3 prints no Init START), else to the process's
  only communicator; rings and trees, which NCCL prints at init only, go to
  that next Init COMPLETE before the last call's communicator. Lines none
  of these place are counted, not guessed.
- `opCount` never decreases within a communicator, so its last call is its
  furthest. A communicator with an init line and no call has enqueued -1
  (none, as c10d counts), when the file shows COLL lines at all.
- A WARN names a peer by address (`10.0.0.2<port>`); it becomes a rank
  only when exactly one process of the file announced that address
  (Bootstrap / `OOB`) and its rank is known. `Mismatched NCCL version`
  names ranks of the communicator being initialised: kept when that is the
  largest one, whose ranks are the global ranks.
- In tail mode `recent_ops` are the calls the tail shows, or, for a
  process silent there, the newest call of each of its communicators;
  `lines_read` counts the lines actually read.
"""

from __future__ import annotations

import bisect
import collections
import gzip
import io
import os
import re
import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

from .. import lazy
from .reader import markers_hook, reader_hooks
from .. import messages
from ..model import CommOp, Evidence, GroupProgress, ProcessRecord, normalize_op
from .facts import Facts
from .cache import BoundedCache as _Cache
from .grammar import parser
from .textio import InputError, ZstdStream, cited_head_lines, looks_binary, read_head

KIND = "nccl"
SOURCE = "nccl"

MAX_LINE = 64 * 1024            # longer lines are skipped with a diagnostic
MAX_LINE_DIAGNOSTICS = 50       # per kind of problem; then one summary line
TAIL_THRESHOLD = 64 << 20       # plain files above this are read in tail mode
HEAD_FIRST = 256 << 10          # tail mode: read whole at the start, this much ...
HEAD_BYTES = 4 << 20            # ... or up to this while there is more than calls in it,
TAIL_FIRST = 256 << 10          # and at the end, first this much,
TAIL_BYTES = 16 << 20           # growing up to this while the tail misses a process's newest calls
CHUNK = 8 << 20                 # bytes per read
RECENT_OPS = 8
COMM_WINDOW = 256               # calls kept per process for its communicator views (RECENT_OPS of them for records)
MAX_ERRORS = 64                 # per process: the first 16 and the last 48
MAX_BACK_HOPS = 20000           # tail mode: lines of one process looked at going backwards
FROM_END = 1 << 62              # tail mode: line k from the end is FROM_END - k inside the reader
MAX_EVIDENCE = 4096

# ncclDataType_t (src/nccl.h.in); older NCCL stops earlier.
DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
          "bfloat16", "float8e4m3", "float8e5m2")

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"

_ANSI = lazy.regex(rb"\x1b\[[0-9;?]*[A-Za-z]")
# The prefix ends at the first `NCCL <LEVEL>` it can; every part of it is
# bounded, and `_prefix` only looks PREFIX_REACH bytes before each `NCCL `,
# so a long line costs linear time, not quadratic.
_PREFIX = lazy.regex(rb"""
    (?P<host>[^\s:\[\]()<>]{1,255}):(?P<pid>\d{1,10}):(?P<tid>\d{1,10})[ ]
    (?:\[(?P<dev>-?\d{1,5})\][ ])?
    (?: (?P<where>\S{1,300}:\d{1,9}(?:[ ]\([^)\n]{0,200}\))?)[ ]NCCL[ ](?P<warn>WARN)
      | -?[\d.]{1,30}[ ]\S{1,300}:\d{1,9}[ ]NCCL[ ](?P<trace>TRACE)
      | (?:[\d.]{1,30}[ ])?NCCL[ ](?P<level>INFO|WARN|TRACE|CALL) )
    (?:[ ]|$)""", re.X)
PREFIX_REACH = 1024
_LOOKS_NCCL = lazy.regex(rb"NCCL (?:INFO|WARN|TRACE|CALL)(?:\s|$)")
_BARE_VERSION = lazy.regex(rb"(?:^|[\s\]:])NCCL version \d{1,3}\.\d{1,3}\.\d{1,3}\S{0,40}\+(?:cuda|hip|rocm)")
_OUTER_RANK = lazy.regex(rb"\[rank(\d+)\]:")
_OUTER_LOCAL = lazy.regex(rb"\[default(\d+)\]:")
_RAY_REPEAT = lazy.regex(rb" ?\[repeated \d{1,9}x across cluster\]")
_BOOTSTRAP = lazy.regex(rb"Bootstrap ?: ?Using")
# Lines whose text the message catalogue reads too (rules/messages/): the
# rest (COLL, ring, init lines) this reader reads itself, and there are many.
_STATED_RULES = frozenset({"warn_line", "misc_line"})
MAX_STATED = 64  # lines of one catalogue entry kept per file (the first): others' are never crowded out
MAX_OTHER = 16384  # another program's line longer than this is not searched for catalogued messages
_ANSI_TEXT = lazy.regex(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_END_EVENT = (b"- Init ", b"- Abort ", b"- Destroy ", b"- Revoke ")
# Every number of a message: hex after opCount/busId and inside brackets,
# 0x addresses, decimals (with their sign). Each becomes one NUL.
_MASK = lazy.regex(rb"(?<=opCount )[0-9a-fA-F]+|(?<=busId )[0-9a-fA-F]+|(?<=\[)[0-9a-fA-F]+(?=\])"
                   rb"|0[xX][0-9a-fA-F]+|-?\d[0-9a-fA-F]*")
_SHAPE = bytes.maketrans(b"0123456789abcdef", b"#" * 16)
_IP = lazy.regex(r"(?:^|[\s\]:/])(\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F]*:[0-9a-fA-F:]+)<-?\d+>")


# ------------------------------------------------------------------ communicators as each process saw them

class NcclCall(NamedTuple):
    """One COLL line: a call as NCCL enqueued it (`src/enqueue.cc`). `op`
    and the numbers as printed: `opcount` counts the communicator's kernel
    launches (calls of one ncclGroupStart/End share it), `redop` is
    ncclRedOp_t, `root` the peer of a Send or Recv."""

    opcount: int
    op: str
    count: int
    datatype: int
    redop: int
    root: int
    evidence: Evidence


@dataclass(frozen=True, slots=True)
class CommView:
    """What one process's log shows of one communicator it called on.

    COLL lines name a communicator only by a pointer, different in every
    process; `group` is this reader's id for it: `nccl:<commId>…`, which
    every member prints, when an init line gave one, else the per-process
    `nccl-comm:<host>:<pid>:<pointer>`. Telling which views across processes
    are one communicator is left to merge (ingest/communicators.py):
    `calls` (those among the process's newest COMM_WINDOW, oldest first;
    `cut` when calls before them may be missing, so the oldest opCount may
    be incomplete), the process's rank in the communicator (`comm_rank`,
    from its init, comm summary, Trees or Ring lines, or 0 when it printed
    the ring dump, which rank 0 alone does), the channel count, its ring
    neighbours per channel
    (`rings`: (channel, prev, next)), the whole rings of rank 0's dump
    (`ring_orders`), its tree neighbours (`trees`: (channel, up, downs)),
    and `nodes`/`local_ranks` from the comm summary line (2.20+).
    """

    path: str
    host: str
    pid: int
    rank: int | None                  # the process's global rank, when the file states it
    pointer: str
    group: str
    nranks: int
    calls: tuple[NcclCall, ...]
    cut: bool = False
    comm_rank: int | None = None
    comm_rank_evidence: Evidence | None = None
    channels: int | None = None
    rings: tuple[tuple[int, int, int], ...] = ()
    ring_orders: tuple[tuple[int, tuple[int, ...]], ...] = ()
    trees: tuple[tuple[int, int, tuple[int, ...]], ...] = ()
    nodes: int | None = None
    local_ranks: int | None = None
    topology_evidence: tuple[Evidence, ...] = ()
    process_evidence: Evidence | None = None

    @property
    def shared(self) -> bool:
        """Its id is one every member prints (a commId, or a split of one)."""
        return self.group.startswith("nccl:")


# ------------------------------------------------------------------ entry points

def sniff(path: str, head: bytes) -> bool:
    """Claim files with NCCL lines in their first 64 KiB, behind any outer prefix."""
    if head.startswith(_ZSTD_MAGIC):
        text = _zstd_head(path)
        if text is None:  # cannot look inside: claim only what is named like an NCCL log
            return "nccl" in os.path.basename(path).lower()
        head = text
    if not head or looks_binary(head):
        return False
    if b"\x1b" in head:
        head = _ANSI.sub(b"", head)
    return any(_prefix(line) is not None for line in head.split(b"\n") if b"NCCL " in line)


def parse(path: str, display: str, full: bool = False) -> Facts:
    """The processes, communicators and errors an NCCL log shows.

    Plain files over TAIL_THRESHOLD are read in tail mode unless `full`;
    a diagnostic says which part was read.
    """
    reader = _Reader(Facts(KIND, display), display)
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
            stat = os.fstat(handle.fileno())
            size = stat.st_size
            if not size:
                raise InputError(display, "empty file")
            handle.seek(0)
            if magic.startswith(_GZIP_MAGIC):
                with gzip.GzipFile(fileobj=handle) as stream:
                    _read_stream(stream.read1, reader, compressed="gzip")
            elif magic == _ZSTD_MAGIC:
                _read_zstd(handle, reader)
            elif full or size <= TAIL_THRESHOLD:
                _read_whole(handle, size, reader)
            else:
                reader = _read_tail(handle, size, lambda: _Reader(Facts(KIND, display), display))
    except OSError as exc:
        raise InputError(display, f"cannot read: {exc.strerror.lower() if exc.strerror else exc}") from None
    facts = reader.facts
    reader.finish()
    facts.comm_views.extend(reader.views)  # they travel with the facts, from worker processes too
    return facts


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display, full=artifact.full)},
    lambda path, head: KIND if sniff(path, head) else None)
forensics_sniff_markers = markers_hook((b" NCCL INFO ", b" NCCL WARN "))


# ------------------------------------------------------------------ sources

def _chunks(read, reader: "_Reader", first_line: int = 1) -> Iterator[tuple[int, list[bytes]]]:
    """(number of the first line, lines) from a byte source. A line longer
    than MAX_LINE is reported and left out (as b""); the last line may lack
    its newline. `reader.last_line` ends as the number of the last line."""
    carry = b""
    line_no = first_line
    skipping = False  # inside a line too long to keep, whose end is not read yet
    while True:
        block = read(CHUNK)
        if not block:
            break
        lines = block.split(b"\n")
        if skipping:
            if len(lines) == 1:
                continue
            del lines[0]
            skipping = False
            line_no += 1
        elif carry:
            lines[0] = carry + lines[0]
        carry = lines.pop()
        if len(carry) > MAX_LINE:
            reader.long_line(line_no + len(lines))
            carry, skipping = b"", True
        if lines and max(map(len, lines)) > MAX_LINE:
            for index, line in enumerate(lines):
                if len(line) > MAX_LINE:
                    reader.long_line(line_no + index)
                    lines[index] = b""
        if lines:
            yield line_no, lines
            line_no += len(lines)
    if skipping:
        line_no += 1
    if carry:
        yield line_no, [carry]
        line_no += 1
    reader.last_line = line_no - 1


def _read_stream(read, reader: "_Reader", compressed: str = "") -> None:
    if compressed:
        read = _Salvage(read).read
    try:
        for line_no, lines in _chunks(read, reader):
            reader.feed(lines, line_no)
    except _CORRUPT as exc:
        if not compressed:
            raise
        reader.last_line = max(reader.last_line, reader.line_seen)
        reader.facts.diag(reader.line_seen, f"{compressed} stream is corrupt or cut short after line "
                                            f"{reader.line_seen:,} ({exc}): the rest is unread", "error")


_CORRUPT = (EOFError, zlib.error, gzip.BadGzipFile)


def _read_whole(handle, size: int, reader: "_Reader") -> None:
    """Every line of a plain file, numbered as the readers that read only a
    big file's ends number it (`textio.cited_head_lines`): past the head of a
    file above textio.BIG_TEXT, back from the end. The c10d reader quotes the
    same WARN and error lines; one numbering makes them one line."""
    ends = cited_head_lines(handle, size)
    handle.seek(0)
    if ends is None:
        _read_stream(handle.read, reader)
        return
    start, after = ends
    for line_no, lines in _chunks(_Region(handle, 0, start).read, reader):
        reader.feed(lines, line_no)
    head_lines = reader.last_line
    for line_no, lines in _chunks(_Region(handle, start, size).read, reader, FROM_END - after):
        reader.feed(lines, line_no)
    reader.last_line = FROM_END - 1
    reader.counted_lines = head_lines + after
    reader.facts.diag(0, f"read whole: lines 1-{head_lines:,} (the first {_amount(start)}) are numbered from the "
                         f"start and the {after:,} lines after them back from the end of the file (-1 is the "
                         "last line: `tail -n N FILE | head -n 1` shows line -N), as the readers that read "
                         "only the ends of a file this big number them", "info")


class _Salvage:
    """Reads a decompressing stream in small steps, so that a stream cut
    short or corrupt gives up what came before the damage (a big read that
    hits it returns nothing), then raises the error."""

    def __init__(self, read1):
        self.read1, self.error = read1, None

    def read(self, size: int) -> bytes:
        if self.error is not None:
            raise self.error
        parts, got = [], 0
        while got < size:
            try:
                block = self.read1(min(size - got, 1 << 20))
            except _CORRUPT + (OSError,) as exc:
                self.error = exc if isinstance(exc, _CORRUPT) else EOFError(str(exc))
                break
            if not block:
                break
            parts.append(block)
            got += len(block)
        if not parts and self.error is not None:
            raise self.error
        return b"".join(parts)


def _read_zstd(handle, reader: "_Reader") -> None:
    try:
        stream = io.BufferedReader(ZstdStream(handle, reader.facts.path), 1 << 20)
    except InputError:
        reader.facts.diag(0, "zstd-compressed log, and the zstandard module is not installed: not read; "
                             "decompress it (zstd -d) or install zstandard", "error")
        return
    with stream:  # corrupt or cut short: _read_stream keeps what came before and says so
        _read_stream(stream.read1, reader, compressed="zstd")


def _zstd_head(path: str) -> bytes | None:
    try:
        return read_head(path)
    except InputError:  # zstandard not installed, or not readable: the caller decides by the name
        return None


class _Region:
    """Reads [start, end) of a file."""

    def __init__(self, handle, start: int, end: int):
        self.handle, self.pos, self.end = handle, start, end

    def read(self, size: int) -> bytes:
        if self.pos >= self.end:
            return b""
        self.handle.seek(self.pos)
        data = self.handle.read(min(size, self.end - self.pos))
        self.pos += len(data)
        return data


def _line_start_after(handle, pos: int) -> int:
    """Where the first line starting at or after `pos` starts."""
    if pos <= 0:
        return 0
    handle.seek(pos - 1)
    while True:
        block = handle.read(1 << 16)
        if not block:
            return handle.tell()
        newline = block.find(b"\n")
        if newline >= 0:
            return handle.tell() - len(block) + newline + 1


def _read_tail(handle, size: int, new_reader) -> "_Reader":
    """The head and the tail line by line; of the middle only what the tail
    needs: the newest call of every process and communicator the tail does
    not show, and the init lines of communicators the tail uses. Lines
    after the head are numbered from the end of the file (`_Reader.out`).

    The head ends where the first HEAD_BYTES hold nothing but calls
    (`_head_end`). The tail starts at TAIL_FIRST; while a process's newest
    COMM_WINDOW calls are not all in it (`_Reader.short_in_tail`), the file
    is read again, by a fresh reader from `new_reader()`, with a tail long
    enough for them (`_tail_for`, at least twice as long), up to TAIL_BYTES,
    and then with the whole head: its calls may be among them.
    Returns the reader that read the file."""
    whole_head = _line_start_after(handle, HEAD_BYTES)
    head_end = _head_end(handle, whole_head)
    window = min(TAIL_FIRST, TAIL_BYTES)
    while True:
        reader = new_reader()
        tail_start = _line_start_after(handle, max(0, size - window))
        if tail_start <= head_end:
            _read_whole(handle, size, reader)
            return reader
        head_lines, tail_start, tail_lines = _read_ends(handle, size, head_end, tail_start, reader)
        short = reader.short_in_tail()
        if not short:
            break
        if window < TAIL_BYTES:
            window = min(TAIL_BYTES, max(2 * window, _tail_for(handle, size, head_end, short)))
        elif head_end < whole_head:
            head_end = whole_head
        else:
            break
    facts = reader.facts
    found, inits, walked = _search_back(handle, head_end, tail_start, tail_lines, reader)
    reader.last_line = FROM_END - 1
    facts.lines_read = head_lines + tail_lines + found + inits
    mib = 2 ** 20
    middle = tail_start - head_end
    why = ("the most tail mode reads" if window >= TAIL_BYTES else
           f"what holds each process's newest {COMM_WINDOW} calls")
    facts.diag(0, f"tail mode: read lines 1-{head_lines:,} (the first {_amount(head_end)}) and the last "
                  f"{tail_lines:,} lines (the last {_amount(size - tail_start)}, {why}) of {size / mib:,.0f} MiB, "
                  "whose line numbers count back from the end of the file (-1 is the last line: "
                  "`tail -n N FILE | head -n 1` shows line -N); of the "
                  f"{middle / mib:,.0f} MiB between, {walked / mib:,.0f} MiB were searched backwards for "
                  f"{found:,} last call(s) of processes and communicators the tail does not show and "
                  f"{inits:,} init line(s) of communicators it uses; warnings and other lines there are not "
                  "read: parse with full=True (--full) to read every line", "info")
    return reader


def _read_ends(handle, size: int, head_end: int, tail_start: int, reader: "_Reader") -> tuple[int, int, int]:
    """Feed the head [0, head_end) and the tail [tail_start, size) to
    `reader`. Returns (lines in the head, where the tail starts, its lines):
    a last line longer than the tail moves its start back, or is counted
    and not read when it is too long to read."""
    for line_no, lines in _chunks(_Region(handle, 0, head_end).read, reader):
        reader.feed(lines, line_no)
    head_lines = reader.last_line
    handle.seek(size - 1)
    if tail_start == size and handle.read(1) != b"\n":  # the last line is longer than the tail, unended
        tail_start = _line_start_before(handle, size, head_end)
    if size - tail_start > max(TAIL_BYTES, MAX_LINE):  # ... and too long to read: counted, not read
        reader.long_line(FROM_END - 1)
        tail, tail_lines = b"", 1
    else:
        handle.seek(tail_start)
        tail = handle.read(size - tail_start)
        tail_lines = tail.count(b"\n") + (bool(tail) and not tail.endswith(b"\n"))
    reader.tail_first = FROM_END - tail_lines
    for number, lines in _chunks(io.BytesIO(tail).read, reader, reader.tail_first):
        reader.feed(lines, number)
    return head_lines, tail_start, tail_lines


def _head_end(handle, whole: int) -> int:
    """Where the head ends: at HEAD_FIRST, or 4, 16, ... times that, the
    first of these after which the first HEAD_BYTES (up to `whole`, a line
    start) hold only calls: as many lines as `: opCount ` and no `\\r`
    gluing two lines into one. Init, topology, warning and other lines
    there are read in the head; the calls there are older than the tail's,
    and the backward search, which starts where the head ends, finds those
    it needs."""
    end = _line_start_after(handle, min(HEAD_FIRST, HEAD_BYTES))
    if end >= whole:
        return whole
    handle.seek(end)
    rest = handle.read(whole - end)
    first = end
    while end < whole:
        at = end - first
        if rest.find(b"\r", at) < 0 and rest.count(b"\n", at) == rest.count(b": opCount ", at):
            return end
        end = _line_start_after(handle, min(4 * end, whole))
    return whole


def _tail_for(handle, size: int, head_end: int, keys: list[bytes]) -> int:
    """How long a tail holds the newest COMM_WINDOW calls of each process
    in `keys`, by byte searches in the last TAIL_BYTES (lines holding
    `host:pid:` and `: opCount `); TAIL_BYTES when one has fewer there.
    An estimate: the reader that reads that tail has the last word."""
    start = max(head_end, size - TAIL_BYTES)
    handle.seek(start)
    data = handle.read(size - start)
    need = 0
    for key in keys:
        needle = key + b":"
        at, count = len(data), 0
        while count < COMM_WINDOW:
            at = data.rfind(needle, 0, at)
            if at < 0:
                return TAIL_BYTES
            line_start = data.rfind(b"\n", 0, at) + 1
            line_end = data.find(b"\n", at)
            if data.find(b": opCount ", at, len(data) if line_end < 0 else line_end) >= 0:
                count += 1
            at = line_start
        need = max(need, len(data) - at)
    return need


def _amount(size: int) -> str:
    """A byte count as the tail-mode note gives it."""
    return f"{size / 2 ** 20:,.1f} MiB" if size >= 1 << 20 else f"{size / 1024:,.0f} KiB"


def _search_back(handle, head_end: int, tail_start: int, tail_lines: int, reader: "_Reader") -> tuple[int, int, int]:
    """Walk the middle backwards, chunk by chunk, for the newest call of each
    (process, communicator pointer) and each process whose newest known call
    is older than the tail, and for the init lines the head and tail did not
    show (`_Reader.init_targets`, `_find_inits`). Needles are
    `comm <pointer> [nranks=`, `host:pid:` and `- Init `; the search for a
    call stops at its floor, the line of the newest call or init already
    known; the search for a process's inits at its first NCCL line. At most
    one scan of the middle, whatever the number of processes.
    Returns (calls found, init lines found, bytes read)."""
    by_comm, by_proc = reader.targets()
    by_init, unnamed = reader.init_targets()
    found = inits = 0
    hops: collections.Counter = collections.Counter()
    end, after = tail_start, tail_lines   # `end` starts a line; `after` lines start at or after it
    walked = 0
    while end > head_end and (by_comm or by_proc or by_init or unnamed):
        start = max(head_end, end - CHUNK)
        handle.seek(start)
        chunk = handle.read(end - start)
        walked += len(chunk)
        if start > head_end:
            cut = chunk.find(b"\n") + 1   # >= 1: the byte before `end` ends a line
            if cut == len(chunk):  # a line longer than a chunk ends here: counted, not read
                start = _line_start_before(handle, start, head_end)
                after += 1
                end = start
                continue
            chunk, start = chunk[cut:], start + cut
        lines_here = chunk.count(b"\n")
        first_line = FROM_END - after - lines_here
        after += lines_here
        end = start
        for at, ptr in _pointer_hits(chunk, by_comm):
            owners = by_comm[ptr]
            line_start = chunk.rfind(b"\n", 0, at) + 1
            call = reader.read_call(chunk[line_start:chunk.find(b"\n", at)])
            if call is not None and call[0] in owners:
                number = first_line + chunk.count(b"\n", 0, line_start)
                if number > owners.pop(call[0]) and reader.add_older(call, number):
                    found += 1
                if not owners:
                    del by_comm[ptr]
        for ptr in list(by_comm):
            owners = by_comm[ptr]
            for key, floor in list(owners.items()):
                if floor >= first_line:  # this chunk holds the floor: nothing newer is left
                    del owners[key]
            if not owners:
                del by_comm[ptr]
        for key in list(by_proc):
            floor = by_proc[key]
            needle = key + b":"
            at = len(chunk)
            while key in by_proc:
                at = chunk.rfind(needle, 0, at)
                if at < 0:
                    if floor >= first_line:
                        del by_proc[key]
                    break
                line_start = chunk.rfind(b"\n", 0, at) + 1
                line = chunk[line_start:chunk.find(b"\n", at)]
                hops[key] += 1
                call = reader.read_call(line) if b": opCount " in line else None
                if call is not None and call[0] == key:
                    number = first_line + chunk.count(b"\n", 0, line_start)
                    if number > floor and reader.add_older(call, number):
                        found += 1
                    del by_proc[key]
                elif hops[key] > MAX_BACK_HOPS:
                    reader.facts.diag(reader.out(first_line), "tail mode: stopped looking back for the last "
                                      f"call of {_text(needle[:-1])} after {MAX_BACK_HOPS:,} of its lines; "
                                      "parse with full=True", "info")
                    del by_proc[key]
                at = line_start
        if by_init or unnamed:
            inits += _find_inits(chunk, first_line, by_init, unnamed, reader)
    return found, inits, walked


_INIT_POINTER = lazy.regex(rb"comm (0x[0-9a-fA-F]+) rank ")
_INIT_BACK = 256 << 10  # how far back an init sequence without its Init START is read


def _find_inits(chunk: bytes, first_line: int, by_init: dict, unnamed: set, reader: "_Reader") -> int:
    """Init lines in `chunk`, newest first, by one C-speed search for
    `- Init `: for each pointer of `by_init` ({pointer: {process}}) the
    newest of each of its processes (found ones leave it); for each
    process of `unnamed` (none of its init lines seen: the head held other
    output) every one, until its first NCCL line (`Bootstrap : Using`, which
    NCCL prints once per process, before any init) shows nothing of it is
    older. Each is fed to the reader with the lines of its init sequence
    before it (Init START, topology) that the chunk holds. Returns the
    lines fed."""
    fed = 0
    fed_from: dict[bytes, int] = {}  # process → where the oldest of its sequences found in this chunk starts
    sequences: list[tuple[int, int, bytes]] = []
    first_lines: dict[bytes, int] = {}  # process of `unnamed` → where its Bootstrap line starts in this chunk
    at = len(chunk)
    while len(first_lines) < len(unnamed):
        at = chunk.rfind(b"Bootstrap", 0, at)
        if at < 0:
            break
        line_start = chunk.rfind(b"\n", 0, at) + 1
        line = chunk[line_start:chunk.find(b"\n", at)]
        at = line_start
        key = _owner_key(line)
        if key in unnamed and key not in first_lines and _BOOTSTRAP.search(line):
            first_lines[key] = line_start
    at = len(chunk)
    while by_init or unnamed:
        at = chunk.rfind(b"- Init ", 0, at)
        if at < 0:
            break
        line_start = chunk.rfind(b"\n", 0, at) + 1
        line_end = chunk.find(b"\n", at)
        line_end = len(chunk) if line_end < 0 else line_end
        at = line_start
        line = chunk[line_start:line_end]
        key, ptr = _owner_key(line), _INIT_POINTER.search(line)
        if key is None or ptr is None or line_start >= fed_from.get(key, len(chunk) + 1):
            continue  # not an init line, or one of a sequence already fed
        ptr = ptr.group(1)
        by_pointer = key in by_init.get(ptr, ())
        if not (by_pointer or key in unnamed and line_start > first_lines.get(key, -1)):
            continue
        if by_pointer:
            by_init[ptr].discard(key)
            if not by_init[ptr]:
                del by_init[ptr]
        # The init sequence: back to this pointer's Init START (or _INIT_BACK)
        # on this process, then forward, without calls (already known).
        needle = b"comm " + ptr + b" rank "
        begin = max(0, line_start - _INIT_BACK)
        start_at = chunk.rfind(needle, begin, line_start)
        while start_at >= 0:
            start_line = chunk.rfind(b"\n", 0, start_at) + 1
            candidate = chunk[start_line:chunk.find(b"\n", start_at)]
            if key + b":" in candidate and b"Init START" in candidate:
                begin = start_line
                break
            start_at = chunk.rfind(needle, begin, start_line)
        else:
            begin = chunk.find(b"\n", begin) + 1 if begin else 0
        begin = max(begin, first_lines.get(key, 0))
        sequences.append((begin, line_end, key))
        fed_from[key] = begin
    for key, line_start in first_lines.items():
        unnamed.discard(key)
        # its identity lines before its inits (addresses, version), unless an init sequence took them
        taken = fed_from.get(key, len(chunk))
        if taken > line_start:
            stop = chunk.rfind(b"\n", line_start, min(taken, line_start + _INIT_BACK))
            if stop < 0:  # the chunk's last line, or one longer than the window: the Bootstrap line alone
                stop = chunk.find(b"\n", line_start)
            sequences.append((line_start, len(chunk) if stop < 0 else stop, key))
    for begin, line_end, key in sorted(sequences):  # in file order, as a forward read meets them
        number = first_line + chunk.count(b"\n", 0, begin)
        for offset, text in enumerate(chunk[begin:line_end].split(b"\n")):
            if key + b":" in text and b": opCount " not in text:
                reader.feed_older(text, number + offset)
                fed += 1
    return fed


def _owner_key(line: bytes) -> bytes | None:
    """The `host:pid` of an NCCL line, or None."""
    found = _prefix(line)
    return line[found.start("host"):found.end("pid")] if found is not None else None


def _line_start_before(handle, pos: int, floor: int) -> int:
    """Where the line holding byte `pos - 1` starts (not before `floor`)."""
    while pos > floor:
        step = max(floor, pos - (1 << 20))
        handle.seek(step)
        block = handle.read(pos - step)
        newline = block.rfind(b"\n")
        if newline >= 0:
            return step + newline + 1
        pos = step
    return floor


_POINTER_HIT = lazy.regex(rb"comm (0x[0-9a-fA-F]+) \[nranks=")


def _pointer_hits(chunk: bytes, by_comm: dict) -> Iterator[tuple[int, bytes]]:
    """Where `comm <pointer> [nranks=` names a pointer still looked for,
    newest first for each: one `rfind` per pointer when they are few, one
    pass over the chunk when they are many."""
    if len(by_comm) <= 16:
        for ptr in list(by_comm):
            needle = b"comm " + ptr + b" [nranks="
            at = len(chunk)
            while ptr in by_comm:
                at = chunk.rfind(needle, 0, at)
                if at < 0:
                    break
                yield at, ptr
        return
    for match in reversed(list(_POINTER_HIT.finditer(chunk))):
        if match.group(1) in by_comm:
            yield match.start(), match.group(1)


# ------------------------------------------------------------------ records

class _Value(NamedTuple):
    """A token of the masked message: where it starts, its text."""

    pos: int
    text: str


class _Tag(NamedTuple):
    """A sub-rule's values, named for the rule that takes them."""

    name: str
    values: tuple


class _Template(NamedTuple):
    """Masked text whose NULs are the numbers from `first` on."""

    text: str
    first: int


class _Record(NamedTuple):
    """What a message is. Fields map a name to a reference: an int is the
    index of a masked number, a str a constant, a _Template text with numbers;
    tuples hold references."""

    kind: str
    fields: dict


def _val(item) -> _Value:
    return item if isinstance(item, _Value) else _Value(item.start_pos, str(item))


class _NcclTransformer:
    """Each start rule becomes a `_Record`; lark applies this while parsing,
    so no tree is built and no token leaves this class."""

    def ptr(self, c):
        return _val(c[0])

    def endpoint(self, c):
        return (_val(c[0]), _val(c[1]) if len(c) > 1 else None)

    def forward(self, c):
        return "->"

    def backward(self, c):
        return "<-"

    def _first(self, c):
        return c[0]

    start = comm_line = topo_line = misc_line = warn_line = _first

    # -- COLL

    def rccl_suffix(self, c):
        return _Tag("rccl", (_val(c[0]), _val(c[1])))

    def coll_line(self, c):
        names = ("op", "opcount", "sendbuff", "recvbuff", "count", "datatype", "redop", "root", "comm",
                 "nranks", "stream")
        fields = {name: _val(item) for name, item in zip(names, c)}
        if len(c) > len(names):
            fields["task"], fields["globalrank"] = c[len(names)].values
        return _Record("coll", fields)

    # -- communicators

    def rank_tag(self, c):
        return _Tag("rank_tag", (_val(c[0]),))

    def nvml(self, c):
        return _Tag("nvml_dev", (_val(c[0]),))

    def bus(self, c):
        return _Tag("bus_id", (_val(c[0]),))

    def comm_id(self, c):
        return _Tag("comm_id", (_val(c[0]),))

    def split_count(self, c):
        return _Tag("split_count", (_val(c[1]),))

    def result(self, c):
        return _Tag("result", (_val(c[0]),))

    def split(self, c):
        fields = {"parent": c[0]}
        rest = list(c[1:])
        if isinstance(rest[0], _Tag):
            fields["split_count"] = rest.pop(0).values[0]
        fields["color"], fields["key"] = _val(rest[0]), _val(rest[1])
        return _Tag("split", (fields,))

    def comm_event(self, c):
        fields, numbers = {}, []
        for item in c:
            if isinstance(item, _Value):
                fields["comm"] = item
            elif isinstance(item, _Tag):
                if item.name == "split":
                    fields.update(item.values[0])
                else:
                    fields[item.name] = item.values[0]
            elif item.type == "M":
                numbers.append(_val(item))
            elif item.type != "NRANKS":  # FUNC_NAME, EVENT, PHASE
                fields[item.type.lower()] = _val(item)
        fields["rank"], fields["nranks"], fields["cuda_dev"] = numbers
        return _Record("comm_event", fields)

    def comm_summary(self, c):
        return _Record("comm_summary", {"comm": c[0], "rank": _val(c[1]), "nranks": _val(c[3]),
                                        "nodes": _val(c[4]), "local_ranks": _val(c[5])})

    # -- topology

    def slash(self, c):
        return _Tag("slash", (_val(c[0]),))

    def channel_ring(self, c):
        ranks = tuple(_val(item) for item in c[1:] if getattr(item, "type", "") == "M")
        count = next((item.values[0] for item in c[1:2] if isinstance(item, _Tag)), None)
        return _Record("ring_dump", {"channel": _val(c[0]), "ranks": ranks, "channels": count,
                                     "cut": "..." if getattr(c[-1], "type", "") == "ELLIPSIS" else ""})

    def ring(self, c):
        return _Record("ring", {"channel": _val(c[0]), "prev": c[1][0], "me": c[3][0], "next": c[5][0]})

    def connection(self, c):
        """channel [/connIndex] : src arrow dst [direction] via transport;
        endpoints are (rank, device) tuples, arrows plain strings."""
        numbers, ends, arrow, direction = [], [], "->", ""
        for item in c:
            if isinstance(item, _Tag):
                numbers.append(item.values[0])
            elif isinstance(item, tuple):
                ends.append(item)
            elif not isinstance(item, lazy.lark.Token):
                arrow = item
            elif item.type == "M":
                numbers.append(_val(item))
            elif item.type == "DIRECTION":
                direction = str(item)[1:-1]
        src, dst = ends if arrow == "->" else reversed(ends)
        return _Record("link", {"channel": numbers[0], "conn": numbers[1] if len(numbers) > 1 else None,
                                "src": src[0], "dst": dst[0], "direction": direction,
                                "transport": _val(c[-1])})

    ring_connection = connection

    def tree(self, c):
        return tuple(_val(item) for item in c[:6])

    def trees(self, c):
        return _Record("trees", {"trees": tuple(c)})

    # -- identity

    def version(self, c):
        return _Record("version", {"version": _val(c[0])})

    def bootstrap(self, c):
        return _Record("address", {"addresses": tuple(_val(item) for item in c)})

    def net_using(self, c):
        return _Record("address", {"addresses": tuple(_val(item) for item in c[1:])})

    # -- warnings

    def _peer(self, kind, c):
        peer = next((item for item in c if getattr(item, "type", "") == "PEER"), None)
        return _Record(kind, {"peer": _val(peer) if peer is not None else None})

    def ib_completion(self, c):
        return self._peer("ib_completion", c)

    def socket_closed(self, c):
        return self._peer("socket_closed", c)

    def socket_truncated(self, c):
        return self._peer("socket_truncated", c)

    def ibv_failure(self, c):
        return _Record("ibv_failure", {"call": _val(c[0])})

    def proxy_error(self, c):
        return _Record("proxy_error", {})

    def abort_state(self, c):
        return _Record("abort_state", {"comm": c[0]})

    def version_mismatch(self, c):
        return _Record("version_mismatch", {"ranks": (_val(c[0]), _val(c[2]))})

    def ring_error(self, c):
        return _Record("ring_error", {})


_RULES = {"coll_line": "COLL", "comm_line": "communicator", "topo_line": "topology",
          "misc_line": "identity", "warn_line": "WARN"}
_RULE_TAG = {rule: bytes([i]) for i, rule in enumerate(_RULES)}
_RULE_SELECT = {rule: f"@{rule} " for rule in _RULES}  # the grammar's `start` picks a rule by this tag
_BAD = _Record("bad", {})
_RECORDS = _Cache(16 << 20)   # rule tag + masked message → _Record


def _mask(body: bytes) -> tuple[bytes, list[tuple[int, int]]]:
    spans = [m.span() for m in _MASK.finditer(body)]
    if not spans:
        return body, spans
    pieces, last = [], 0
    for start, end in spans:
        pieces.append(body[last:start])
        last = end
    pieces.append(body[last:])
    return b"\x00".join(pieces), spans


def _record(rule: str, masked: bytes) -> _Record | None:
    """The record of a masked message, parsed once per distinct message."""
    key = _RULE_TAG[rule] + masked
    record = _RECORDS.get(key)
    if record is None:
        text = _RULE_SELECT[rule] + masked.decode("utf-8", "replace")
        try:
            parsed = parser(KIND, "start", _NcclTransformer).parse(text)
            record = _Record(parsed.kind, {name: _refs(value, text) for name, value in parsed.fields.items()})
        except (lazy.lark.exceptions.LarkError, ValueError, TypeError, AttributeError, IndexError):
            record = _BAD
        _RECORDS.put(key, record)
    return None if record is _BAD else record


def _refs(value, text: str):
    """A transformer value as references to the masked numbers (see _Record)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, _Value):
        if value.text == "\x00":
            return text.count("\x00", 0, value.pos)
        if "\x00" in value.text:
            return _Template(value.text, text.count("\x00", 0, value.pos))
        return value.text
    return tuple(_refs(item, text) for item in value)


def _fill(ref, values: list[str]):
    if isinstance(ref, int):
        return values[ref]
    if isinstance(ref, _Template):
        parts = ref.text.split("\x00")
        out = [parts[0]]
        for index, part in enumerate(parts[1:]):
            out.append(values[ref.first + index])
            out.append(part)
        return "".join(out)
    if isinstance(ref, tuple):
        return tuple(_fill(item, values) for item in ref)
    return ref


def _fields(record: _Record, values: list[str]) -> dict:
    return {name: _fill(ref, values) for name, ref in record.fields.items()}


def _info_rule(body: bytes) -> str | None:
    """Which grammar rule an INFO message needs; None for the many we skip."""
    if b": opCount " in body:
        return "coll_line"
    if body.startswith((b"Channel ", b"Ring ", b"Trees")):
        return "topo_line"
    if any(event in body for event in _END_EVENT) or (body.startswith(b"comm 0x") and b" nNodes " in body):
        return "comm_line"
    if body.startswith((b"NCCL version ", b"NET/IB : Using", b"NET/Socket : Using")) or _BOOTSTRAP.match(body):
        return "misc_line"
    return None


class _Layout(NamedTuple):
    """Where the fields of a line are, valid for every line of its shape.
    `who` is `host:pid`; `outer` says an outer `[rankN]:`/`[defaultN]:`
    prefix is there. `coll` lines carry their masked numbers' slices and
    record; other layouts only say whose line it is."""

    coll: bool
    who: slice
    outer: bool
    comm: slice | None
    rank: slice | None
    local: slice | None
    spans: tuple = ()
    record: _Record | None = None


_SHAPES = _Cache(16 << 20)    # line shape → _Layout


_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")


class _OtherLines:
    """Which lines of other programs the catalogue's entries of other
    projects than NCCL may match, decided once per line shape (digits
    masked): which digit-free literals a line holds depends on its shape
    alone, and a literal with digits can be in a line only if its masked
    form is in the shape. A log's own lines (training progress, a
    launcher's) repeat a few shapes, so most lines cost a translate and a
    lookup."""

    SHAPES = 4096
    NO, YES, DIGITS = 0, 1, 2  # per shape: no entry can match; try them; only if a literal with digits is there

    def __init__(self):
        self.catalogue = cat = messages.catalogue()
        self.skip = frozenset(e.id for e in cat.entries if e.project == "nccl")
        self.digits = tuple((literal.encode(), literal.encode().translate(_ZERO_DIGITS))
                            for literal, entries in cat.literals_with_digits()
                            if any(e.id not in self.skip for e in entries))
        self.shapes: dict[bytes, int] = {}

    def judge(self, line: bytes, shape: bytes) -> int:
        if len(self.shapes) >= self.SHAPES:
            self.shapes.clear()
        text = line.decode("utf-8", "replace")
        if b"\x1b" in line or any(e.id not in self.skip for e in self.catalogue.candidates(text)):
            verdict = self.YES  # colour codes may split a literal: such shapes are always tried
        else:
            verdict = self.DIGITS if any(masked in shape for _, masked in self.digits) else self.NO
        self.shapes[shape] = verdict
        return verdict

    def may_match(self, line: bytes) -> bool:
        shape = line.translate(_ZERO_DIGITS)
        verdict = self.shapes.get(shape)
        if verdict is None:
            verdict = self.judge(line, shape)
        if verdict == self.DIGITS:
            return any(literal in line for literal, _ in self.digits)
        return verdict == self.YES


def _text(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text if len(text) <= MAX_EVIDENCE else text[:MAX_EVIDENCE - 1] + "…"


def _show(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return repr(text if len(text) <= 160 else text[:157] + "...")


def _clean(line: bytes) -> list[bytes]:
    """The NCCL parts of a line a terminal touched: colours out, NULs out,
    progress bars (`\\r`) split off."""
    if b"\x1b" in line:
        line = _ANSI.sub(b"", line)
    if b"\x00" in line:
        line = line.replace(b"\x00", b"")
    if b"\r" in line:
        return [part for part in line.split(b"\r") if b"NCCL" in part]
    return [line]


def _dtype(value: int) -> str:
    return DTYPES[value] if 0 <= value < len(DTYPES) else f"datatype{value}"


def _ip(text: str | None) -> str:
    if not text or len(text) > 256:
        return ""
    match = _IP.search(" " + text)
    if match:
        return match.group(1)
    bare = text.strip()
    return bare if re.fullmatch(r"\d{1,3}(?:\.\d{1,3}){3}", bare) else ""


class _Line(NamedTuple):
    """A line's NCCL prefix and message, as `_analyse` reads them."""

    layout: _Layout
    tid: int
    rule: str | None
    body: bytes
    spans: list
    record: _Record | None


def _prefix(seg: bytes):
    """The NCCL prefix of a line, searched a bounded way before each of the
    first few `NCCL <LEVEL>` in it: junk cannot make a line cost more than
    a few milliseconds."""
    for tried, marker in enumerate(_LOOKS_NCCL.finditer(seg)):
        if tried == 4:
            break
        at = marker.start()
        match = _PREFIX.search(seg, max(0, at - PREFIX_REACH), at + 11)
        if match is not None:
            return match
    return None


def _analyse(seg: bytes, cacheable: bool) -> _Line | None:
    """Read one cleaned line; None when it has no NCCL prefix. COLL and
    skipped INFO lines teach `_SHAPES` their layout when `cacheable`."""
    match = _prefix(seg)
    if match is None:
        return None
    level = match.group("warn") or match.group("trace") or match.group("level")
    body_start = match.end()
    body = seg[body_start:].rstrip()
    if body.endswith(b" across cluster]"):
        cut = body.rfind(b"[repeated ")
        if cut >= 0 and _RAY_REPEAT.fullmatch(body, cut - (body[cut - 1:cut] == b" ")):
            body = body[:cut].rstrip()
    rank = local = None
    if match.start():
        outer = seg[:match.start()]
        found = _OUTER_RANK.search(outer)
        rank = slice(*found.span(1)) if found else None
        found = _OUTER_LOCAL.search(outer)
        local = slice(*found.span(1)) if found else None
    who = slice(match.start("host"), match.end("pid"))
    outer = rank is not None or local is not None
    tid = int(match.group("tid"))
    rule = _info_rule(body) if level == b"INFO" else "warn_line" if level == b"WARN" else None
    if rule is None:
        layout = _Layout(False, who, outer, None, rank, local)
        if cacheable and level == b"INFO":
            _SHAPES.put(seg.translate(_SHAPE), layout)
        return _Line(layout, tid, None, body, [], None)
    masked, spans = _mask(body)
    record = _record(rule, masked)
    layout = _Layout(False, who, outer, None, rank, local)
    if rule == "coll_line" and record is not None and isinstance(record.fields.get("comm"), int):
        slices = tuple(slice(body_start + a, body_start + b) for a, b in spans)
        layout = _Layout(True, who, outer, slices[record.fields["comm"]], rank, local, slices, record)
        if cacheable:
            _SHAPES.put(seg.translate(_SHAPE), layout)
    return _Line(layout, tid, rule, body, spans, record)


class _Err(NamedTuple):
    line: int
    evidence: Evidence
    kind: str
    peer_ip: str = ""
    ranks: tuple = ()
    comm: str = ""   # the communicator pointer it concerns, when known


class _Init(NamedTuple):
    line: int
    key: bytes
    ptr: str
    group: str
    phase: str
    rank: int
    nranks: int
    evidence: Evidence


class _Proc:
    """What one host:pid printed, kept small: its newest calls, the newest
    call per communicator pointer, its inits, errors and addresses."""

    __slots__ = ("key", "host", "pid", "first", "rank", "rank_evidence", "local", "recent", "older",
                 "by_comm", "inits", "errors", "late_errors", "dropped", "ips", "version")

    def __init__(self, key: bytes, first: Evidence):
        self.key = key
        host, _, pid = key.rpartition(b":")
        self.host = host.decode("utf-8", "replace")
        self.pid = int(pid)
        self.first = first
        self.rank = self.local = self.rank_evidence = None
        self.recent: collections.deque = collections.deque(maxlen=COMM_WINDOW)
        self.older: list = []           # calls found going backwards (tail mode)
        self.by_comm: dict = {}         # pointer as printed → newest call (line, text, layout)
        self.inits: dict = {}           # pointer → (line, evidence) of its newest init line
        self.errors: list[_Err] = []
        self.late_errors: collections.deque = collections.deque(maxlen=MAX_ERRORS - MAX_ERRORS // 4)
        self.dropped = 0
        self.ips: set[str] = set()
        self.version = ""


class _Reader:
    """Takes lines in file order (and, in tail mode, older calls found going
    backwards), keeps per process only what the records need, and builds
    the facts at the end."""

    def __init__(self, facts: Facts, display: str):
        self.facts = facts
        self.display = display
        self.stated = messages.Kept(MAX_STATED)
        self.others: _OtherLines | None = None  # made when a line of another program first comes
        self.procs: dict[tuple, _Proc] = {}
        self.coll_lines = 0
        self.last_line = 0       # set by _chunks
        self.line_seen = 0
        self.tail_first = 0      # tail mode: the first line of the tail
        self.counted_lines = 0   # a whole file whose later lines are numbered from its end: its lines
        self.bad = self.bad_last = 0
        self.long = self.long_last = 0
        self.history: dict[tuple, list] = {}      # (process, pointer) → [(line, group, shared)]
        self.inits: list[_Init] = []
        self.members: dict[tuple, tuple] = {}
        self.split_order: dict[tuple, dict] = {}
        self.tid_events: dict[tuple, list] = {}   # (process, tid) → [(line, pointer, phase)]
        self.topo_items: list[tuple] = []
        self.topology: dict = {}
        self.summaries: list[tuple] = []          # (process, pointer, line, rank, nNodes, localRanks, evidence)
        self.member_topo: dict[tuple, dict] = {}  # (process, group) → what its topology lines say of it
        self.parsed: dict[int, tuple] = {}        # id(call) → (call, its fields or None)
        self.views: tuple = ()

    # -- lines

    def feed(self, lines: Iterable[bytes], first: int) -> None:
        """The hot loop: one shape lookup per NCCL line; only lines of a new
        shape, and the few kinds of lines that matter beyond COLL, go on to
        `_line`."""
        shapes_get, procs_get, table = _SHAPES.get, self.procs.get, _SHAPE
        calls = 0
        number = first - 1
        for number, line in enumerate(lines, first):
            layout = shapes_get(line.translate(table))
            if layout is None:
                if b"NCCL" in line:
                    self._slow(line, number)
                else:
                    self._other(line, number)
                continue
            proc = procs_get(line[layout.who])
            if proc is None or layout.outer:
                proc = self._owner(line, number, layout)
                if proc is None:
                    continue
            if layout.coll:
                call = (number, line, layout)
                proc.recent.append(call)
                proc.by_comm[line[layout.comm]] = call
                calls += 1
        self.coll_lines += calls
        self.line_seen = number

    def out(self, number: int) -> int:
        """A line number as reports show it: from the start of the file, or,
        in tail mode past the head, negative, counted back from its end."""
        return number - FROM_END if number > FROM_END >> 1 else number

    def feed_older(self, line: bytes, number: int) -> None:
        """One line from before the tail (tail mode: an init sequence found
        going backwards), read like any other but never as a call."""
        seen = self.line_seen
        self.feed((line,), number)
        self.line_seen = seen

    def _slow(self, line: bytes, number: int) -> None:
        if b"\x1b" in line or b"\x00" in line or b"\r" in line:
            for part in _clean(line):
                self._line(part, number, cacheable=False)
        else:
            self._line(line, number, cacheable=True)

    def _line(self, seg: bytes, number: int, cacheable: bool) -> None:
        read = _analyse(seg, cacheable)
        if read is None:
            if _LOOKS_NCCL.search(seg) and not _BARE_VERSION.search(seg):
                self._bad(number, seg, "NCCL line without its host:pid:tid prefix")
            return
        proc = self._owner(seg, number, read.layout)
        if proc is None:
            return
        if read.layout.coll:
            call = (number, seg, read.layout)
            proc.recent.append(call)
            proc.by_comm[seg[read.layout.comm]] = call
            self.coll_lines += 1
            return
        rule, record = read.rule, read.record
        if rule is None:
            return
        if rule in _STATED_RULES:
            self._stated(proc, number, seg)
        if record is None:
            if rule == "warn_line":
                self._warn(proc, number, seg, read.tid, "warn", {})
            else:
                self._bad(number, seg, f"unreadable {_RULES[rule]} line")
            return
        fields = _fields(record, [read.body[a:b].decode("utf-8", "replace") for a, b in read.spans])
        kind = record.kind
        try:
            if rule == "warn_line":
                self._warn(proc, number, seg, read.tid, kind, fields)
            elif kind == "comm_event":
                self._comm_event(proc, number, seg, read.tid, fields)
            elif kind == "comm_summary":
                self._tid_event(proc.key, read.tid, number, fields["comm"].lower(), "summary")
                self.summaries.append((proc.key, fields["comm"].lower(), number, int(fields["rank"]),
                                       int(fields["nodes"]), int(fields["local_ranks"]),
                                       Evidence(self.display, self.out(number), _text(seg))))
            elif kind in ("ring_dump", "ring", "link", "trees"):
                self._topology_line(proc, number, seg, read.tid, kind, fields)
            elif kind == "version":
                proc.version = fields["version"]
            elif kind == "address":
                proc.ips.update(ip for ip in map(_ip, fields["addresses"]) if ip)
        except ValueError:  # a number the mask took that int() does not
            self._bad(number, seg, f"unreadable {_RULES[rule]} line")

    def _owner(self, line: bytes, number: int, layout: _Layout) -> _Proc | None:
        key = line[layout.who]
        proc = self.procs.get(key)
        if proc is None:
            host, _, pid = key.rpartition(b":")
            if not pid.isdigit() or not host:
                self._bad(number, line, "unreadable NCCL prefix")
                return None
            proc = self.procs[key] = _Proc(key, Evidence(self.display, self.out(number), _text(line)))
        if layout.rank is not None and proc.rank is None:
            value = line[layout.rank]
            if value.isdigit():
                proc.rank = int(value)
                proc.rank_evidence = Evidence(self.display, self.out(number), _text(line))
        if layout.local is not None and proc.local is None and line[layout.local].isdigit():
            proc.local = int(line[layout.local])
        return proc

    def _bad(self, number: int, data: bytes, reason: str) -> None:
        self.bad += 1
        self.bad_last = number
        if self.bad <= MAX_LINE_DIAGNOSTICS:
            self.facts.diag(self.out(number), f"{reason}: {_show(data)}")

    def long_line(self, number: int) -> None:
        self.long += 1
        self.long_last = number
        if self.long <= MAX_LINE_DIAGNOSTICS:
            self.facts.diag(self.out(number), f"line longer than {MAX_LINE // 1024} KiB: skipped")

    # -- messages

    def _comm_event(self, proc: _Proc, number: int, seg: bytes, tid: int, f: dict) -> None:
        ptr = f["comm"].lower()
        rank, nranks = int(f["rank"]), int(f["nranks"])
        evidence = Evidence(self.display, self.out(number), _text(seg))
        if f["event"] != "Init":
            self._error(proc, _Err(number, evidence, f"{f['event']} {f['phase']}", comm=ptr))
            return
        group, shared = self._init_group(proc, ptr, f, number)
        history = self.history.setdefault((proc.key, ptr), [])
        index = bisect.bisect_right(history, number, key=lambda item: item[0])
        if not index or history[index - 1][1] != group:  # lines come in file order, but for tail mode's
            history.insert(index, (number, group, shared))  # init sequences found going backwards
        proc.inits[ptr] = (number, evidence)
        self.inits.append(_Init(number, proc.key, ptr, group, f["phase"], rank, nranks, evidence))
        if shared:
            self.members.setdefault((group, proc.key, rank), (group, rank, nranks, proc.host, proc.pid, evidence))
        self._tid_event(proc.key, tid, number, ptr, f["phase"])

    def _init_group(self, proc: _Proc, ptr: str, f: dict, number: int) -> tuple[str, bool]:
        """`nccl:<commId>`; for a split without commId (2.23+), the parent's
        id, the split's count and the colour, which all members share."""
        if f.get("comm_id"):
            return f"nccl:{f['comm_id'].lower()}", True
        parent = (f.get("parent") or "").lower()
        if parent and parent != "(nil)":
            parent_group, shared = self._group_at(proc.key, parent, number)
            if shared:
                count = f.get("split_count")
                if count is None:
                    order = self.split_order.setdefault((proc.key, parent), {})
                    count = order.setdefault(ptr, len(order) + 1)
                return f"{parent_group}/split{count}/color{f['color']}", True
        return self._local_group(proc.key, ptr), False

    def _local_group(self, key: bytes, ptr: str) -> str:
        return f"nccl-comm:{key.decode('utf-8', 'replace')}:{ptr}"

    def _group_at(self, key: bytes, ptr: str, number: int) -> tuple[str, bool]:
        """The communicator a pointer of this process named at that line."""
        history = self.history.get((key, ptr))
        if not history:
            return self._local_group(key, ptr), False
        index = bisect.bisect_right(history, number, key=lambda item: item[0])
        _, group, shared = history[max(index - 1, 0)]
        return group, shared

    def _tid_event(self, key: bytes, tid: int, number: int, ptr: str, phase: str) -> None:
        events = self.tid_events.setdefault((key, tid), [])
        if events and events[-1][0] > number:  # tail mode: an init sequence from before the tail
            bisect.insort(events, (number, ptr, phase), key=lambda event: event[0])
        else:
            events.append((number, ptr, phase))

    def _topology_line(self, proc: _Proc, number: int, seg: bytes, tid: int, kind: str, f: dict) -> None:
        if kind == "ring_dump":
            data = (int(f["channel"]), tuple(int(r) for r in f["ranks"]), bool(f["cut"]),
                    int(f["channels"]) if f["channels"] is not None else None)
        elif kind == "ring":
            data = (int(f["channel"]), int(f["prev"]), int(f["me"]), int(f["next"]))
        elif kind == "link":
            data = (int(f["channel"]), int(f["conn"]) if f["conn"] is not None else None,
                    int(f["src"]), int(f["dst"]), f["direction"], f["transport"])
        else:
            data = tuple(tuple(int(x) for x in tree) for tree in f["trees"])
        newest = proc.recent[-1] if proc.recent else None
        context = None
        if newest is not None and newest[0] < number:
            context = (newest[0], newest[1][newest[2].comm].decode("ascii", "replace").lower())
        text = _text(seg) if kind in ("ring_dump", "ring", "trees") else ""
        self.topo_items.append((proc.key, tid, number, context, kind, data, text))

    def _other(self, line: bytes, number: int) -> None:
        """Another program's line in this log (mpirun's report of the process
        that died, a crash handler's signal line, the kernel's): what the
        message catalogue's entries of other projects than NCCL recognize in
        it. NCCL's own messages count only on lines with NCCL's prefix, which
        says which process printed them. No other reader reads the lines of
        a file this one claims unless it claims the file too; a line two
        readers see is one hit (merge)."""
        if len(line) > MAX_OTHER:
            return
        if self.others is None:
            self.others = _OtherLines()
        if not self.others.may_match(line):
            return
        text = line.decode("utf-8", "replace")
        if "\x1b" in text:
            text = _ANSI_TEXT.sub("", text)
        text = text.strip()
        if text:
            self.facts.messages.extend(hit for hit in messages.line_hits(
                text, Evidence(self.display, self.out(number), _text(line)), skip=self.stated.full | self.others.skip)
                if self.stated.take(hit))

    def _stated(self, proc: _Proc, number: int, seg: bytes) -> None:
        """What the message catalogue recognizes in a WARN or identity line."""
        text = _text(seg)
        self.facts.messages.extend(hit for hit in messages.line_hits(
            text, Evidence(self.display, self.out(number), text), proc.rank, proc.host, proc.pid, proc.local,
            self.stated.full) if self.stated.take(hit))

    def _warn(self, proc: _Proc, number: int, seg: bytes, tid: int, kind: str, f: dict) -> None:
        ranks: tuple = ()
        if kind == "version_mismatch":
            ranks = tuple(int(r) for r in f["ranks"])
        events = self.tid_events.get((proc.key, tid))
        in_init = events[-1][1] if events and events[-1][2] in ("START", "summary") else ""
        comm = (f.get("comm") or in_init).lower()
        self._error(proc, _Err(number, Evidence(self.display, self.out(number), _text(seg)), kind,
                               _ip(f.get("peer")), ranks, comm))

    def _error(self, proc: _Proc, error: _Err) -> None:
        if len(proc.errors) < MAX_ERRORS // 4:
            proc.errors.append(error)
            return
        if len(proc.late_errors) == proc.late_errors.maxlen:
            proc.dropped += 1
        proc.late_errors.append(error)

    # -- tail mode

    def short_in_tail(self) -> list[bytes]:
        """Processes whose newest COMM_WINDOW calls are not all in the tail:
        a longer tail would change the calls their record and views keep."""
        tail = self.tail_first
        return [key for key, proc in self.procs.items()
                if len(proc.recent) < COMM_WINDOW or proc.recent[0][0] < tail]

    def init_targets(self) -> tuple[dict[bytes, set], set]:
        """What the backward search looks for init lines of: {pointer:
        {process}}, the communicators the calls read use whose init line was
        not seen; and {process}, those none of whose init lines was seen
        (the head held other output: a job's own prints before its first
        communicator, a log reused by a restart), whose ranks and
        communicators only their init lines state."""
        wanted: dict[bytes, set] = {}
        for key, proc in self.procs.items():
            for ptr in proc.by_comm:
                if ptr.decode("ascii", "replace").lower() not in proc.inits:
                    wanted.setdefault(ptr, set()).add(key)
        return wanted, {key for key, proc in self.procs.items() if not proc.inits}

    def targets(self) -> tuple[dict, dict]:
        """What the backward search looks for: {pointer: {process: floor}}
        and {process: floor}, the floor being the newest line already known
        (a call or the pointer's init). None when no COLL line was seen."""
        by_comm: dict[bytes, dict] = {}
        by_proc: dict[tuple, int] = {}
        if not self.coll_lines:
            return by_comm, by_proc
        tail = self.tail_first
        for key, proc in self.procs.items():
            newest = proc.recent[-1][0] if proc.recent else 0
            if newest < tail:
                by_proc[key] = newest
            pointers = dict.fromkeys(proc.by_comm)
            for ptr in proc.inits:
                pointers.setdefault(ptr.encode(), None)
            for ptr in pointers:
                call = proc.by_comm.get(ptr)
                init = proc.inits.get(ptr.decode("ascii", "replace").lower())
                floor = max(call[0] if call else 0, init[0] if init else 0)
                if floor < tail:
                    by_comm.setdefault(ptr, {})[key] = floor
        return by_comm, by_proc

    def read_call(self, line: bytes) -> tuple | None:
        """(process, text, layout) when `line` is a readable COLL line."""
        dirty = b"\x1b" in line or b"\x00" in line or b"\r" in line
        for part in _clean(line) if dirty else (line,):
            layout = _SHAPES.get(part.translate(_SHAPE))
            if layout is None:
                read = _analyse(part, not dirty)
                layout = read.layout if read is not None else None
            if layout is not None and layout.coll:
                key = part[layout.who]
                if key in self.procs:
                    return key, part, layout
        return None

    def add_older(self, call: tuple, number: int) -> bool:
        key, line, layout = call
        proc = self.procs[key]
        if any(known[0] == number for known in proc.older):
            return False  # found twice: by its communicator and by its process
        entry = (number, line, layout)
        proc.older.append(entry)
        ptr = line[layout.comm]
        known = proc.by_comm.get(ptr)
        if known is None or known[0] < number:
            proc.by_comm[ptr] = entry
        return True

    # -- the facts

    def finish(self) -> None:
        facts = self.facts
        if self.counted_lines:
            facts.lines_read = self.counted_lines
        elif not self.tail_first:
            facts.lines_read = self.last_line
        self.inits.sort(key=lambda init: init.line)
        world = max((init.nranks for init in self.inits), default=0)
        world_rank: dict[tuple, int] = {}
        stated: set[tuple] = set()
        for init in self.inits:
            if init.nranks == world and (init.key, init.rank) not in stated:
                stated.add((init.key, init.rank))
                world_rank.setdefault(init.key, init.rank)
                proc = self.procs[init.key]
                facts.pid_ranks.append((proc.host, proc.pid, init.rank, init.evidence))
        for proc in self.procs.values():
            if proc.rank is not None and (proc.key, proc.rank) not in stated:
                stated.add((proc.key, proc.rank))
                facts.pid_ranks.append((proc.host, proc.pid, proc.rank, proc.rank_evidence))
                if proc.key in world_rank:
                    facts.diag(proc.rank_evidence.line, f"{proc.host}:{proc.pid}: its [rank{proc.rank}]: prefix "
                                                        f"and its rank {world_rank[proc.key]} in the largest "
                                                        "communicator disagree")
        facts.comm_members.extend(self.members.values())
        sizes = {(init.key, init.ptr): init.nranks for init in self.inits}
        by_ip: dict[str, set] = {}
        for proc in self.procs.values():
            for ip in proc.ips:
                by_ip.setdefault(ip, set()).add(proc.key)

        def global_rank(key):
            proc = self.procs[key]
            return proc.rank if proc.rank is not None else world_rank.get(key)

        for proc in sorted(self.procs.values(), key=lambda p: (p.first.line < 0, p.first.line)):
            facts.records.append(self._record_of(proc, global_rank, by_ip, sizes, world))
        self.topology = self._build_topology()
        self.views = self._build_views(global_rank)
        self._notes()
        facts.unrecognized = self.bad

    def _record_of(self, proc: _Proc, global_rank, by_ip: dict, sizes: dict, world: int) -> ProcessRecord:
        converted: dict[int, CommOp | None] = {}

        def op_of(call):  # a call kept twice (newest overall and per pointer) is read once
            if id(call) not in converted:
                converted[id(call)] = self._op(proc, call)
            return converted[id(call)]

        calls = list(proc.recent)[-RECENT_OPS:]
        if self.tail_first:  # tail mode: the calls in the tail, else the newest found going back
            in_tail = [call for call in calls if call[0] >= self.tail_first]
            calls = in_tail or sorted(proc.older, key=lambda call: call[0])[-RECENT_OPS:] or calls
        recent = tuple(op for op in map(op_of, calls) if op is not None)
        progress: dict[str, GroupProgress] = {}
        for call in proc.by_comm.values():
            op = op_of(call)
            if op is not None and (op.group not in progress or progress[op.group].enqueued < op.seq):
                progress[op.group] = GroupProgress(enqueued=op.seq, evidence=op.evidence)
        if self.coll_lines:  # a communicator with no call: none enqueued (-1, as c10d counts)
            for ptr, (line, evidence) in proc.inits.items():
                group = self._group_at(proc.key, ptr, line)[0]
                progress.setdefault(group, GroupProgress(enqueued=-1, evidence=evidence))
        errors = sorted(proc.errors + list(proc.late_errors), key=lambda e: e.line)
        aborted = {e.comm for e in errors if e.kind == "Abort COMPLETE"}
        errors = [e for e in errors if not (e.kind == "Abort START" and e.comm in aborted)]
        own = global_rank(proc.key)
        peers: set[int] = set()
        for error in errors:
            owners = by_ip.get(error.peer_ip) if error.peer_ip else None
            if owners and len(owners) == 1:
                (owner,) = owners
                rank = global_rank(owner) if owner != proc.key else None
                if rank is not None:
                    peers.add(rank)
            if error.ranks and sizes.get((proc.key, error.comm)) == world:
                peers.update(r for r in error.ranks if r != own)
        if proc.dropped:
            self.facts.diag(proc.first.line, f"{proc.host}:{proc.pid}: {proc.dropped:,} warning(s) between "
                                             f"its first {MAX_ERRORS // 4} and last "
                                             f"{proc.late_errors.maxlen} not kept", "info")
        return ProcessRecord(
            source=SOURCE, path=self.display, host=proc.host, pid=proc.pid, rank=proc.rank,
            local_rank=proc.local, last_op=recent[-1] if recent else None, recent_ops=recent,
            progress=progress, errors=tuple(e.evidence for e in errors),
            peers_in_errors=tuple(sorted(peers)), evidence=proc.first)

    def _read(self, call: tuple) -> tuple | None:
        """(op name, opCount, count, datatype, redop, root, nranks, pointer) of
        a COLL line, read once (a call is kept in several places); None, and
        one diagnostic, when a number does not read."""
        known = self.parsed.get(id(call))
        if known is not None:
            return known[1]
        number, line, layout = call
        f = _fields(layout.record, [line[s].decode("ascii", "replace") for s in layout.spans])
        try:
            read = (f["op"], int(f["opcount"], 16), int(f["count"]), int(f["datatype"]), int(f["redop"]),
                    int(f["root"]), int(f["nranks"]), f["comm"].lower())
        except ValueError:
            self._bad(number, line, "unreadable COLL line")
            read = None
        self.parsed[id(call)] = (call, read)
        return read

    def _op(self, proc: _Proc, call: tuple) -> CommOp | None:
        read = self._read(call)
        if read is None:
            return None
        number, line = call[0], call[1]
        op, seq, count, dtype, _, root, _, pointer = read
        name = normalize_op(op)
        return CommOp(op=name, group=self._group_at(proc.key, pointer, number)[0], seq=seq,
                      state="scheduled", peers=(root,) if name in ("send", "recv") else (),
                      sizes=((count,),), dtype=_dtype(dtype),
                      evidence=Evidence(self.display, self.out(number), _text(line)))

    def _topology_comm(self, key: bytes, tid: int, number: int, context, init_time: bool) -> str | None:
        """The pointer of the communicator a topology line belongs to (see the
        module docs). Rings and trees are printed while a communicator is
        initialised, never lazily: before 2.18.3 (no Init START) the next
        Init COMPLETE on the thread names theirs, even after calls on another."""
        events = self.tid_events.get((key, tid), [])
        index = bisect.bisect_right(events, number, key=lambda event: event[0])
        before = events[index - 1] if index else None
        if before is not None and before[2] in ("START", "summary"):
            return before[1]
        completes = index < len(events) and events[index][2] == "COMPLETE"
        if completes and init_time:
            return events[index][1]
        if context is not None and (before is None or context[0] > before[0]):
            return context[1]
        if completes:
            return events[index][1]
        inited = {ptr for line, ptr in self._inits_of(key) if line < number}
        return inited.pop() if len(inited) == 1 else None

    def _inits_of(self, key: bytes) -> list[tuple[int, str]]:
        proc = self.procs[key]
        return [(line, ptr) for ptr, (line, _) in proc.inits.items()]

    def _build_topology(self) -> dict:
        topo: dict[str, dict] = {}
        lost = 0
        cited: dict[tuple, Evidence] = {}   # (group, channel) → the first line that shows its ring
        for key, tid, number, context, kind, data, text in self.topo_items:
            ptr = self._topology_comm(key, tid, number, context, kind != "link")
            if ptr is None:
                lost += 1
                continue
            group = self._group_at(key, ptr, number)[0]
            evidence = Evidence(self.display, self.out(number), text) if text else None
            if evidence is not None and kind != "trees" and (group, data[0]) not in cited:
                cited[(group, data[0])] = evidence
            self._member_topology(key, group, kind, data, evidence)
            comm = topo.setdefault(group, {"nranks": None, "rings": {}, "ring_neighbours": {},
                                           "channel_neighbours": {}, "trees": {}, "links": set()})
            if kind == "ring_dump":
                comm["rings"][data[0]] = list(data[1])
            elif kind == "ring":
                channel, prev, me, nxt = data
                comm["channel_neighbours"].setdefault(channel, {})[me] = (prev, nxt)
            elif kind == "link":
                comm["links"].add(data)
            else:
                for channel, down0, down1, down2, me, up in data:
                    comm["trees"].setdefault(channel, {})[me] = {
                        "up": up if up >= 0 else None, "down": tuple(d for d in (down0, down1, down2) if d >= 0)}
        sizes = {init.group: init.nranks for init in self.inits}
        for group, comm in topo.items():
            comm["nranks"] = sizes.get(group)
            _complete_rings(comm)
            # (channel, connIndex, src, dst): connIndex is None where the line has no `/N`
            comm["links"] = sorted(comm["links"], key=lambda link: (link[0], -1 if link[1] is None else link[1],
                                                                   link[2], link[3]))
        if lost:
            self.facts.diag(0, f"{lost:,} topology line(s) could not be tied to a communicator", "info")
        for group, comm in topo.items():
            if group.startswith("nccl:"):  # shared ids only: per-process ones have no members
                for channel, ring in comm["rings"].items():
                    self.facts.rings.append((group, channel, tuple(ring), cited.get((group, channel))))
        return topo

    def _member_topology(self, key: bytes, group: str, kind: str, data: tuple, evidence: Evidence | None) -> None:
        """What one process's topology lines say of its place in a
        communicator: its rank there (Trees and Ring lines name it; the
        `Channel NN/MM :` ring dump is printed by rank 0 only), the channel
        count, its ring and tree neighbours, and the whole rings."""
        if kind == "link":
            return
        mine = self.member_topo.setdefault((key, group), {"ranks": set(), "channels": None, "rings": {},
                                                          "orders": {}, "trees": {}, "evidence": []})
        if kind == "ring_dump":
            channel, order, cut, count = data
            mine["ranks"].add(0)
            if not cut and len(order) > 1:
                mine["orders"].setdefault(channel, order)
            if count is not None:
                mine["channels"] = count
        elif kind == "ring":
            channel, prev, me, nxt = data
            mine["ranks"].add(me)
            mine["rings"].setdefault(channel, (prev, nxt))
        else:
            for channel, down0, down1, down2, me, up in data:
                mine["ranks"].add(me)
                mine["trees"].setdefault(channel, (up, tuple(d for d in (down0, down1, down2) if d >= 0)))
        if evidence is not None and len(mine["evidence"]) < 3:
            mine["evidence"].append(evidence)

    def _build_views(self, global_rank) -> tuple:
        """Each process's view of each communicator it called on (see `CommView`)."""
        inits = {(init.key, init.group): init for init in self.inits}
        summaries = {}
        for key, ptr, number, rank, nodes, local_ranks, evidence in self.summaries:
            summaries[(key, self._group_at(key, ptr, number)[0])] = (rank, nodes, local_ranks, evidence)
        views = []
        for proc in self.procs.values():
            # Its newest calls; in tail mode also those found going backwards.
            kept = sorted({id(call): call for call in list(proc.older) + list(proc.recent)}.values(),
                          key=lambda call: call[0])
            cut = bool(self.tail_first) or len(proc.recent) == COMM_WINDOW
            by_group: dict[tuple, list] = {}
            for call in kept:
                read = self._read(call)
                if read is None:
                    continue
                op, opcount, count, dtype, redop, root, nranks, pointer = read
                group = self._group_at(proc.key, pointer, call[0])[0]
                by_group.setdefault((pointer, group), []).append(
                    (nranks, NcclCall(opcount, op, count, dtype, redop, root,
                                      Evidence(self.display, self.out(call[0]), _text(call[1])))))
            for (pointer, group), calls in by_group.items():
                views.append(self._view(proc, pointer, group, calls, global_rank(proc.key),
                                        inits.get((proc.key, group)), summaries.get((proc.key, group)), cut))
        return tuple(views)

    def _view(self, proc: _Proc, pointer: str, group: str, calls: list, rank, init, summary, cut: bool):
        topo = self.member_topo.get((proc.key, group), {})
        comm_rank, comm_rank_evidence = None, None
        claimed = topo.get("ranks", set())
        evidence = tuple(topo.get("evidence", ()))
        if init is not None:
            comm_rank, comm_rank_evidence = init.rank, init.evidence
        elif summary is not None:
            comm_rank, comm_rank_evidence = summary[0], summary[3]
        elif len(claimed) == 1:
            comm_rank, comm_rank_evidence = next(iter(claimed)), evidence[0] if evidence else None
        trees = topo.get("trees", {})
        rings = topo.get("rings", {})
        channels = topo.get("channels") or (len(trees) or None)
        return CommView(
            path=self.display, host=proc.host, pid=proc.pid, rank=rank, pointer=pointer, group=group,
            nranks=calls[-1][0], calls=tuple(call for _, call in calls), cut=cut, comm_rank=comm_rank,
            comm_rank_evidence=comm_rank_evidence, channels=channels,
            rings=tuple((c, prev, nxt) for c, (prev, nxt) in sorted(rings.items())),
            ring_orders=tuple(sorted(topo.get("orders", {}).items())),
            trees=tuple((c, up, downs) for c, (up, downs) in sorted(trees.items())),
            nodes=summary[1] if summary is not None else None,
            local_ranks=summary[2] if summary is not None else None,
            topology_evidence=evidence, process_evidence=proc.first)

    def _notes(self) -> None:
        facts = self.facts
        if self.bad > MAX_LINE_DIAGNOSTICS:
            facts.diag(self.out(self.bad_last), f"{self.bad - MAX_LINE_DIAGNOSTICS:,} more unreadable NCCL lines")
        if self.long > MAX_LINE_DIAGNOSTICS:
            facts.diag(self.out(self.long_last), f"{self.long - MAX_LINE_DIAGNOSTICS:,} more lines longer than "
                                       f"{MAX_LINE // 1024} KiB skipped")
        if not self.procs:
            facts.diag(0, "no NCCL lines" if not self.bad else "no readable NCCL lines")
        versions = collections.Counter(p.version.split("+")[0] for p in self.procs.values() if p.version)
        if len(versions) > 1:
            spread = ", ".join(f"{v} ({n} process{'es' if n > 1 else ''})" for v, n in versions.most_common())
            facts.diag(0, f"processes run different NCCL versions: {spread}")
        phase: dict[tuple, _Init] = {}
        for init in self.inits:
            phase[(init.key, init.ptr)] = init
        unfinished = [init for init in phase.values() if init.phase == "START"]
        for init in unfinished[:MAX_LINE_DIAGNOSTICS]:
            proc = self.procs[init.key]
            facts.diag(self.out(init.line), f"{proc.host}:{proc.pid}: init of communicator {init.group} (rank {init.rank} "
                                  f"of {init.nranks}) started and never completed", "info")
        if len(unfinished) > MAX_LINE_DIAGNOSTICS:
            facts.diag(0, f"{len(unfinished) - MAX_LINE_DIAGNOSTICS:,} more communicator inits never "
                          "completed", "info")


def _complete_rings(comm: dict) -> None:
    """Fill each channel's neighbours from its ring dump and the ring from
    complete neighbours; `ring_neighbours` is the lowest channel's."""
    neighbours, rings = comm["channel_neighbours"], comm["rings"]
    for channel, ring in rings.items():
        if len(ring) < 2:
            continue
        known = neighbours.setdefault(channel, {})
        cut = comm["nranks"] is not None and len(ring) < comm["nranks"]
        for index, rank in enumerate(ring):
            if index == 0 and cut or index == len(ring) - 1 and cut:
                continue
            known.setdefault(rank, (ring[index - 1], ring[(index + 1) % len(ring)]))
    for channel, known in neighbours.items():
        if channel in rings or not known or comm["nranks"] is None or len(known) != comm["nranks"]:
            continue
        start = min(known)
        ring, rank = [start], known[start][1]
        while rank != start and rank in known and len(ring) <= len(known):
            ring.append(rank)
            rank = known[rank][1]
        if rank == start and len(ring) == len(known):
            rings[channel] = ring
    comm["rings"] = dict(sorted(rings.items()))
    comm["channel_neighbours"] = {c: dict(sorted(n.items())) for c, n in sorted(neighbours.items())}
    comm["ring_neighbours"] = comm["channel_neighbours"][min(neighbours)] if neighbours else {}
    comm["trees"] = {c: dict(sorted(t.items())) for c, t in sorted(comm["trees"].items())}
