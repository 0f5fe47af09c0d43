"""NCCL_DEBUG=INFO logs: communicator inits, per-call COLL lines, WARNs, topology.

One file may interleave many processes' lines (torchrun's stdout, Slurm
output) with other programs' lines; each NCCL process (`host:pid`) becomes one
`ProcessRecord`: its last calls per communicator (`opCount`, hex, per
communicator), its WARNs, its global rank when an outer `[rankN]:` prefix
states it. Init lines feed `comm_members` (the communicator's members, by
`commId`, the hash every member prints) and `pid_ranks` (host:pid → rank in
the largest communicator). `topology()` gives the rings and trees of each
communicator, for naming the link a stalled ring depends on.

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
mode: the first HEAD_BYTES and the last TAIL_BYTES line by line, the middle
only through a byte-level search for the lines that matter anywhere (inits,
WARNs, topology; `_ANCHOR`), and then backwards, needle by needle, for the
last call of every process and communicator the tail does not show. Memory
stays flat: at most a chunk and a few lines per process are held.
`parse(..., full=True)` reads every line. gzip and zstd streams cannot be
tailed and are read whole, with the same flat memory.

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
  thread (NCCL before 2.18.3 prints no Init START).
- `opCount` never decreases within a communicator, so its last call is its
  furthest.
"""

from __future__ import annotations

import bisect
import collections
import gzip
import os
import re
import zlib
from typing import Iterable, Iterator, NamedTuple

import lark

from ..hookspecs import hookimpl
from ..model import CommOp, Evidence, GroupProgress, ProcessRecord, normalize_op
from .facts import Facts
from .gdb import _Cache
from .grammar import parser
from .textio import InputError, looks_binary

KIND = "nccl"
SOURCE = "nccl"

MAX_LINE = 64 * 1024            # longer lines are skipped with a diagnostic
MAX_LINE_DIAGNOSTICS = 50       # per kind of problem; then one summary line
TAIL_THRESHOLD = 64 << 20       # plain files above this are read in tail mode
HEAD_BYTES = 8 << 20            # tail mode: read whole at the start ...
TAIL_BYTES = 32 << 20           # ... and at the end
CHUNK = 8 << 20                 # bytes per read
RECENT_OPS = 8
MAX_ERRORS = 64                 # per process: the first 16 and the last 48
MAX_BACK_HOPS = 20000           # tail mode: lines of one process looked at going backwards
MAX_EVIDENCE = 4096

# ncclDataType_t (src/nccl.h.in); older NCCL stops earlier.
DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
          "bfloat16", "float8e4m3", "float8e5m2")

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
_PREFIX = re.compile(rb"""
    (?P<host>[^\s:\[\]()<>]+):(?P<pid>\d+):(?P<tid>\d+)[ ]
    (?:\[(?P<dev>-?\d+)\][ ])?
    (?: (?P<where>\S+:\d+(?:[ ]\([^)\n]*\))?)[ ]NCCL[ ](?P<warn>WARN)
      | -?[\d.]+[ ]\S+:\d+[ ]NCCL[ ](?P<trace>TRACE)
      | (?:[\d.]+[ ])?NCCL[ ](?P<level>INFO|WARN|TRACE|CALL) )
    (?:[ ]|$)""", re.X)
_LOOKS_NCCL = re.compile(rb"NCCL (?:INFO|WARN|TRACE|CALL)(?:\s|$)")
_BARE_VERSION = re.compile(rb"(?:^|[\s\]:])NCCL version \d+\.\d+\.\d+\S*\+(?:cuda|hip|rocm)")
_OUTER_RANK = re.compile(rb"\[rank(\d+)\]:")
_OUTER_LOCAL = re.compile(rb"\[default(\d+)\]:")
_RAY_REPEAT = re.compile(rb"\s*\[repeated \d+x across cluster\]\s*$")
_BOOTSTRAP = re.compile(rb"Bootstrap ?: ?Using")
_END_EVENT = (b"- Init ", b"- Abort ", b"- Destroy ", b"- Revoke ")
# Every number of a message: hex after opCount/busId and inside brackets,
# 0x addresses, decimals (with their sign). Each becomes one NUL.
_MASK = re.compile(rb"(?<=opCount )[0-9a-fA-F]+|(?<=busId )[0-9a-fA-F]+|(?<=\[)[0-9a-fA-F]+(?=\])"
                   rb"|0[xX][0-9a-fA-F]+|-?\d[0-9a-fA-F]*")
_SHAPE = bytes.maketrans(b"0123456789abcdef", b"#" * 16)
# Tail mode, the middle of the file: every NCCL line except COLL lines past
# each communicator's first (opCount 0, which ties lazy connections to it).
_ANCHOR = re.compile(rb"NCCL (?:WARN|INFO (?!\w+: opCount [1-9a-fA-F])|version )")
_IP = re.compile(r"(?:^|[\s\]:/])(\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F]*:[0-9a-fA-F:]+)<-?\d+>")

_SNIFF = re.compile(rb"[^\s:\[\]()<>]+:\d+:\d+ (?:\[-?\d+\] )?(?:\S+ (?:\S+ )?)?NCCL (?:INFO|WARN|TRACE|CALL)\b")


# ------------------------------------------------------------------ entry points

def sniff(path: str, head: bytes) -> bool:
    """Claim files with NCCL lines in their first 64 KiB, behind any outer prefix."""
    if head.startswith(_ZSTD_MAGIC):
        text = _zstd_head(path)
        if text is None:  # cannot look inside: claim only what is named like an NCCL log
            return "nccl" in os.path.basename(path).lower()
        head = text
    if not head or b"\x00" in head[:8192] or looks_binary(head):
        return False
    if b"\x1b" in head:
        head = _ANSI.sub(b"", head)
    return bool(_SNIFF.search(head))


def parse(path: str, display: str, full: bool = False) -> Facts:
    """The processes, communicators and errors an NCCL log shows.

    Plain files over TAIL_THRESHOLD are read in tail mode unless `full`;
    a diagnostic says which part was read.
    """
    facts = Facts(KIND, display)
    reader = _Reader(facts, display)
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
            size = os.fstat(handle.fileno()).st_size
            if not size:
                raise InputError(display, "empty file")
            handle.seek(0)
            if magic.startswith(_GZIP_MAGIC):
                with gzip.GzipFile(fileobj=handle) as stream:
                    _read_stream(stream.read, reader, compressed="gzip")
            elif magic == _ZSTD_MAGIC:
                _read_zstd(handle, reader)
            elif full or size <= TAIL_THRESHOLD:
                _read_stream(handle.read, reader)
            else:
                _read_tail(handle, size, reader)
    except OSError as exc:
        raise InputError(display, f"cannot read: {exc.strerror.lower() if exc.strerror else exc}") from None
    reader.finish()
    _remember(facts, reader.topology)
    return facts


def topology(source) -> dict:
    """{group: {"nranks", "rings", "ring_neighbours", "channel_neighbours",
    "trees", "links"}} for the communicators of a parsed file.

    `source` is the Facts `parse` returned (in this process), or a path,
    which is parsed (once per file version). Per group: `rings` maps a
    channel to its ranks in ring order; `channel_neighbours` maps a channel
    to {rank: (prev, next)} and `ring_neighbours` is that of the lowest
    channel; `trees` maps a channel to {rank: {"up": r, "down": (r, ...)}}
    (-1, "none", left out); `links` lists (channel, connIndex, from, to,
    direction, transport) as the connection lines state them. Ranks are
    ranks in the communicator.
    """
    if isinstance(source, Facts):
        cached = _TOPOLOGY.get(id(source))
        if cached is not None and cached[0] is source:
            return cached[1]
        raise LookupError(f"{source.path}: no NCCL topology for these facts (parsed in another "
                          "process?); call topology() with the file's path")
    path = os.fspath(source)
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror.lower() if exc.strerror else exc}") from None
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    cached = _TOPOLOGY.get(key)
    if cached is None:
        facts = parse(path, path)
        cached = _TOPOLOGY[key] = (facts, _TOPOLOGY[id(facts)][1])
    return cached[1]


@hookimpl
def forensics_sniff(path, head):
    return KIND if sniff(path, head) else None


@hookimpl
def forensics_parse(artifact):
    if artifact.kind != KIND:
        return None
    return parse(artifact.path, artifact.display)


# The topology of the last files parsed, by id(facts) (the Facts kept alive
# with it, so an id is never reused while cached) and by path.
_TOPOLOGY: "collections.OrderedDict" = collections.OrderedDict()
_TOPOLOGY_KEEP = 64


def _remember(facts: Facts, topo: dict) -> None:
    _TOPOLOGY[id(facts)] = (facts, topo)
    while len(_TOPOLOGY) > _TOPOLOGY_KEEP:
        _TOPOLOGY.popitem(last=False)


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
        if skipping:
            newline = block.find(b"\n")
            if newline < 0:
                continue
            block = block[newline + 1:]
            skipping = False
            line_no += 1
        data = carry + block if carry else block
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            if len(carry) > MAX_LINE:
                reader.long_line(line_no)
                carry, skipping = b"", True
            continue
        lines = data[:cut].split(b"\n")
        carry = data[cut + 1:]
        if len(carry) > MAX_LINE:
            reader.long_line(line_no + len(lines))
            carry, skipping = b"", True
        if cut > MAX_LINE and max(map(len, lines)) > MAX_LINE:
            for index, line in enumerate(lines):
                if len(line) > MAX_LINE:
                    reader.long_line(line_no + index)
                    lines[index] = b""
        yield line_no, lines
        line_no += len(lines)
    if skipping:
        line_no += 1
    if carry:
        yield line_no, [carry]
        line_no += 1
    reader.last_line = line_no - 1


def _read_stream(read, reader: "_Reader", compressed: str = "") -> None:
    try:
        for line_no, lines in _chunks(read, reader):
            reader.feed(lines, line_no)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        if not compressed:
            raise
        reader.facts.diag(reader.line_seen, f"{compressed} stream is corrupt or cut short after line "
                                            f"{reader.line_seen:,} ({exc}): the rest is unread", "error")


def _read_zstd(handle, reader: "_Reader") -> None:
    try:
        import zstandard
    except ImportError:
        reader.facts.diag(0, "zstd-compressed log, and the zstandard module is not installed: not read; "
                             "decompress it (zstd -d) or install zstandard", "error")
        return
    with zstandard.ZstdDecompressor().stream_reader(handle) as stream:
        try:
            _read_stream(stream.read, reader)
        except zstandard.ZstdError as exc:
            reader.facts.diag(reader.line_seen, f"zstd stream is corrupt after line {reader.line_seen:,} "
                                                f"({exc}): the rest is unread", "error")


def _zstd_head(path: str) -> bytes | None:
    try:
        import zstandard
        with open(path, "rb") as handle, zstandard.ZstdDecompressor().stream_reader(handle) as stream:
            return stream.read(64 * 1024)
    except Exception:  # not installed or not readable: the caller decides by the name
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


def _read_tail(handle, size: int, reader: "_Reader") -> None:
    """The head and the tail line by line; the middle through `_ANCHOR`, and
    then backwards for the last calls the tail does not show."""
    facts = reader.facts
    head_end = _line_start_after(handle, HEAD_BYTES)
    tail_start = _line_start_after(handle, size - TAIL_BYTES)
    if tail_start <= head_end:
        handle.seek(0)
        _read_stream(handle.read, reader)
        return
    for line_no, lines in _chunks(_Region(handle, 0, head_end).read, reader):
        reader.feed(lines, line_no)
    head_lines = reader.last_line
    line_no = head_lines + 1
    checkpoints: list[tuple[int, int, int]] = []   # (start, end, number of the first line)
    pos, anchors, in_long_line = head_end, 0, False
    while pos < tail_start:
        handle.seek(pos)
        chunk = handle.read(min(CHUNK, tail_start - pos))
        cut = chunk.rfind(b"\n") + 1
        if not cut:  # a whole chunk without a line end: one long line goes on
            pos += len(chunk)
            in_long_line = True
            continue
        chunk = chunk[:cut]
        checkpoints.append((pos, pos + cut, line_no))
        counted = last = 0
        seen = -1
        for match in _ANCHOR.finditer(chunk):
            start = chunk.rfind(b"\n", 0, match.start()) + 1
            if start == seen:
                continue
            seen = start
            counted += chunk.count(b"\n", last, start)
            last = start
            if start == 0 and in_long_line:
                continue
            end = chunk.find(b"\n", start)
            if end - start > MAX_LINE:
                reader.long_line(line_no + counted)
                continue
            anchors += 1
            reader.feed((chunk[start:end],), line_no + counted)
        line_no += counted + chunk.count(b"\n", last)
        in_long_line = False
        pos += cut
    tail_first = line_no
    reader.tail_first = tail_first
    for number, lines in _chunks(_Region(handle, tail_start, size).read, reader, tail_first):
        reader.feed(lines, number)
    found = _search_back(handle, checkpoints, reader)
    total = reader.last_line
    facts.lines_read = head_lines + (total - tail_first + 1) + anchors + found
    facts.diag(0, f"tail mode: read lines 1-{head_lines:,} (the first {head_end / 2**20:.0f} MiB) and "
                  f"{tail_first:,}-{total:,} (the last {(size - tail_start) / 2**20:.0f} MiB) of "
                  f"{size / 2**20:,.0f} MiB; of the lines between, the {anchors:,} that matter anywhere "
                  f"(inits, warnings, topology) and {found:,} last call(s) of processes and communicators "
                  "the tail does not show; parse with full=True to read every line", "info")


def _search_back(handle, checkpoints, reader: "_Reader") -> int:
    """Walk the middle backwards, chunk by chunk, for the newest call of each
    (process, communicator pointer) and each process whose newest known call
    is older than the tail. Needles are `comm <pointer> [nranks=` and
    `host:pid:`; the search for one stops at its floor, the line of the
    newest call or init already known. Returns the lines found."""
    by_comm, by_proc = reader.targets()
    found = 0
    hops: collections.Counter = collections.Counter()
    for start, end, first_line in reversed(checkpoints):
        if not by_comm and not by_proc:
            break
        handle.seek(start)
        chunk = handle.read(end - start)
        for ptr in list(by_comm):
            owners = by_comm[ptr]
            needle = b"comm " + ptr + b" [nranks="
            at = len(chunk)
            while owners:
                at = chunk.rfind(needle, 0, at)
                if at < 0:
                    break
                line_start = chunk.rfind(b"\n", 0, at) + 1
                call = reader.read_call(chunk[line_start:chunk.find(b"\n", at)])
                at = line_start
                if call is None or call[0] not in owners:
                    continue
                number = first_line + chunk.count(b"\n", 0, line_start)
                if number > owners.pop(call[0]):
                    reader.add_older(call, number)
                    found += 1
            for key, floor in list(owners.items()):
                if floor >= first_line:
                    del owners[key]
            if not owners:
                del by_comm[ptr]
        for key in list(by_proc):
            floor = by_proc[key]
            needle = key[0] + b":" + key[1] + b":"
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
                    if number > floor:
                        reader.add_older(call, number)
                        found += 1
                    del by_proc[key]
                elif hops[key] > MAX_BACK_HOPS:
                    reader.facts.diag(first_line, "tail mode: stopped looking back for the last call of "
                                                  f"{_text(needle[:-1])} after {MAX_BACK_HOPS:,} of its lines; "
                                                  "parse with full=True", "info")
                    del by_proc[key]
                at = line_start
    return found


# ------------------------------------------------------------------ records

class _Val(NamedTuple):
    """A token of the masked message: where it starts, its text."""

    pos: int
    text: str


class _Tag(NamedTuple):
    name: str
    values: tuple


class _Tpl(NamedTuple):
    """Masked text whose NULs are the numbers from `first` on."""

    text: str
    first: int


class _Record(NamedTuple):
    """What a message is. Fields map a name to a reference: an int is the
    index of a masked number, a str a constant, a _Tpl text with numbers;
    tuples hold references."""

    kind: str
    fields: dict


def _val(item) -> _Val:
    return item if isinstance(item, _Val) else _Val(item.start_pos, str(item))


class _Records(lark.Transformer):
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

    comm_line = topo_line = misc_line = warn_line = _first

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
            if isinstance(item, _Val):
                fields["comm"] = item
            elif isinstance(item, _Tag):
                if item.name == "split":
                    fields.update(item.values[0])
                else:
                    fields[item.name] = item.values[0]
            elif item.type == "M":
                numbers.append(_val(item))
            else:
                fields[item.type.lower()] = _val(item)
        fields["rank"], fields["nranks"], fields["cuda_dev"] = numbers
        return _Record("comm_event", fields)

    def comm_summary(self, c):
        return _Record("comm_summary", {"comm": c[0], "rank": _val(c[1]), "nranks": _val(c[3])})

    # -- topology

    def channel_ring(self, c):
        ranks = tuple(_val(item) for item in c[2:] if item.type == "M")
        return _Record("ring_dump", {"channel": _val(c[0]), "ranks": ranks,
                                     "cut": "..." if c[-1].type == "ELLIPSIS" else ""})

    def ring(self, c):
        return _Record("ring", {"channel": _val(c[0]), "prev": c[1][0], "me": c[3][0], "next": c[5][0]})

    def connection(self, c):
        """channel [connIndex] : src arrow dst [direction] via transport;
        endpoints are (rank, device) pairs, the only tuples among tokens."""
        numbers = [_val(item) for item in c if not isinstance(item, tuple) and item.type == "M"]
        src, arrow, dst = (item for item in c if isinstance(item, tuple) or isinstance(item, str)
                           and item in ("->", "<-"))
        if arrow == "<-":
            src, dst = dst, src
        direction = next((str(item) for item in c if getattr(item, "type", "") == "DIRECTION"), "")
        return _Record("link", {"channel": numbers[0], "conn": numbers[1] if len(numbers) > 1 else None,
                                "src": src[0], "dst": dst[0], "direction": direction[1:-1],
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
