"""Reading artifacts that come from broken machines.

Files may be gzip-compressed, binary, non-UTF-8 or huge. Everything here
returns text or raises `InputError` with a reason a person can act on.

Some files change while they are read (a log still being written, one
rotated away); some decompress to far more than they hold. Reading a plain
file stops at the size it had when opened (a consistent prefix), and a
compressed one at `limits.decompressed_bytes`; either leaves a note
(`take_notes`) that the ingest turns into a diagnostic on that file.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import re
import stat
import zlib

from .. import lazy

HEAD_BYTES = 64 * 1024
# Terminal colour codes (py-spy on a TTY, gdb >= 10 styling), in bytes.
ANSI_COLOUR = re.compile(rb"\x1b\[[0-9;]*m")
_ANSI_TEXT = lazy.regex(r"\x1b\[[0-9;]*m")  # the same, in decoded text


def uncoloured(text: str) -> str:
    """Decoded `text` without terminal colour codes."""
    return _ANSI_TEXT.sub("", text) if "\x1b" in text else text

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# What a broken compressed stream raises part-way through (zstd errors
# arrive as OSError: see ZstdStream).
STREAM_ERRORS = (OSError, EOFError, zlib.error)


class InputError(Exception):
    """Unreadable input: the CLI turns it into exit code 2 and a one-line reason."""

    def __init__(self, path: str, message: str, line: int = 0):
        self.path = path
        self.line = line
        self.message = message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


class NothingReadable(InputError):
    """Input in which nothing describes a process: no file any reader claims,
    or files whose claimed lines held nothing (exit 2 all the same)."""


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


def not_regular(mode: int) -> str:
    """What a non-regular file is ("a FIFO (named pipe)", …), or "" for a regular file."""
    if stat.S_ISREG(mode):
        return ""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotRegular(OSError):
    """Raised instead of opening a FIFO, socket or device: reading one can
    block for ever (a FIFO with no writer) or never end (/dev/zero)."""


def open_regular(path: str):
    """`open(path, "rb")` for regular files only. The open itself does not
    block (O_NONBLOCK: a FIFO opens at once), and the file is checked
    after opening, so a file swapped for a pipe meanwhile is refused too."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        kind = not_regular(os.fstat(fd).st_mode)
        if kind:
            raise NotRegular(errno.EINVAL, f"{kind}, not a regular file: not read")
        os.set_blocking(fd, True)
        size = os.fstat(fd).st_size
        handle = os.fdopen(fd, "rb")
        handle.size_at_open, handle.path_at_open = size, path  # what read_at_most reads up to
        return handle
    except BaseException:
        os.close(fd)
        raise


def compression(path: str) -> str:
    """"gzip", "zstd" or "" by the file's magic bytes, not its name."""
    try:
        with open_regular(path) as handle:
            magic = handle.read(4)
    except OSError:
        return ""
    if magic[:2] == _GZIP_MAGIC:
        return "gzip"
    if magic == _ZSTD_MAGIC:
        return "zstd"
    return ""


def is_gzip(path: str) -> bool:
    return compression(path) == "gzip"


def open_binary(path: str):
    """A binary reader with readline(), decompressing gzip and zstd."""
    kind = compression(path)
    if kind == "gzip":
        raw = open_regular(path)
        stream = gzip.GzipFile(fileobj=raw, mode="rb")
        stream.myfileobj = raw  # what GzipFile closes with itself (it leaves a given fileobj open)
        return io.BufferedReader(Capped(stream, path), 1 << 20)
    if kind == "zstd":
        return io.BufferedReader(Capped(io.BufferedReader(ZstdStream(open_regular(path), path), 1 << 20), path),
                                 1 << 20)
    return open_regular(path)


class Capped(io.RawIOBase):
    """A decompressing stream that ends after `limits.decompressed_bytes`
    (a gzip or zstd bomb: a few MB that inflate to terabytes), with a note
    naming the file and the limit. It closes `inner` with itself."""

    def __init__(self, inner, path: str, cap: int | None = None):
        from .. import limits

        self._inner, self._path = inner, path
        self._cap = limits.current().decompressed_bytes if cap is None else cap
        self._left = self._cap

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._left <= 0:
            if self._left == 0:
                self._left = -1
                if self._inner.read(1):
                    from ..limits import describe_bytes

                    note(self._path, f"decompresses to more than {describe_bytes(self._cap)} (the limit on "
                                     f"decompressed bytes per file): only its first {describe_bytes(self._cap)} "
                                     f"were read")
            return 0
        with memoryview(buffer) as view:
            # readinto1: what is decompressed so far, not a full buffer — a
            # stream cut short then gives its lines before raising at its end.
            n = self._inner.readinto1(view[:self._left])
        self._left -= n
        return n

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


class ZstdStream(io.RawIOBase):
    """A zstd stream (every frame in it) decompressed from the binary file
    `raw`, which it closes. Its errors are OSError: a corrupt frame, and a
    stream that ends inside a frame (a log cut short when its machine died),
    which zstandard's stream reader ends silently, as if the file were whole:
    at its end the frames are walked (`zstd_cut_short`). zstandard (a
    declared dependency; zstd logs are common on clusters) is imported when
    a zstd file is met, not by every run: 5 ms of start-up."""

    def __init__(self, raw, name: str):
        try:
            import zstandard
        except ImportError:  # only when installed without it
            raw.close()
            raise InputError(name, "zstd-compressed, and the zstandard module is not installed") from None
        self._error = zstandard.ZstdError
        self._raw = raw
        self._stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
        self._checked = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            n = self._stream.readinto(buffer)
        except self._error as exc:
            raise OSError(f"zstd: {exc}") from None
        if not n and not self._checked:
            self._checked = True
            where = zstd_cut_short(self._raw)
            if where is not None:
                raise OSError(f"the zstd frame at byte {where:,} ends early: the file is cut short")
        return n

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
        super().close()


_ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)


def zstd_cut_short(raw) -> int | None:
    """Where the zstd frames in `raw` stop before their end (the offset of
    the frame cut short), or None when every frame is whole (or `raw`
    cannot seek). Only headers are read (RFC 8878: frame header, then
    blocks of a 3-byte header each, then an optional 4-byte checksum)."""
    try:
        size = os.fstat(raw.fileno()).st_size
        raw.seek(0)
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return None
    pos = 0
    while pos < size:
        frame = pos
        raw.seek(pos)
        head = raw.read(14)
        if len(head) < 4:
            return frame
        magic = int.from_bytes(head[:4], "little")
        if magic in _ZSTD_SKIPPABLE:
            if len(head) < 8:
                return frame
            pos += 8 + int.from_bytes(head[4:8], "little")
            if pos > size:
                return frame
            continue
        if magic != 0xFD2FB528 or len(head) < 5:
            return frame  # the decompressor has said so already, or will
        flags = head[4]
        single = flags >> 5 & 1
        header = 1 + (0 if single else 1) + (0, 1, 2, 4)[flags & 3] + ((1 if single else 0), 2, 4, 8)[flags >> 6]
        pos += 4 + header
        while True:
            raw.seek(pos)
            block = raw.read(3)
            if len(block) < 3:
                return frame
            value = int.from_bytes(block, "little")
            kind, length = value >> 1 & 3, value >> 3
            pos += 3 + (1 if kind == 1 else length)
            if pos > size:
                return frame
            if value & 1:  # the last block
                break
        pos += 4 if flags >> 2 & 1 else 0
        if pos > size:
            return frame
    return None


def read_head(path: str, size: int = HEAD_BYTES) -> bytes:
    """The first `size` bytes, decompressed if the file is gzip or zstd."""
    try:
        with open_binary(path) as handle:
            return handle.read(size)
    except STREAM_ERRORS as exc:
        raise InputError(path, f"cannot read: {_reason(exc)}") from None


TAIL_BYTES = 64 * 1024
MIDDLE_SCAN_BYTES = 8 << 20    # a text file up to this size is searched whole for the readers' markers
MIDDLE_HITS = 16               # windows kept per marker from the middle of a file
MIDDLE_WINDOW = 4096           # bytes kept around each hit (a block format's lines after its marker)
LATE_SCAN_BYTES = 1 << 20      # of a bigger file, this much before its tail is searched for the last hits


# How a big plain text file's lines are cited, by every reader of it. A reader that reads only the
# ends of such a file (the c10d reader: torchlog.BIG_FILE, BIG_HEAD) cannot count the lines of its
# middle, so it numbers the whole lines of its first BIG_TEXT_HEAD bytes from 1 and every later line
# back from the end (-1 is the last). A reader that reads all of the file numbers it the same way
# (`cited_head_lines`), so that a line two readers quote is one line in the merge, not two.
BIG_TEXT = 16 << 20
BIG_TEXT_HEAD = 256 << 10


def cited_head_lines(handle, size: int) -> tuple[int, int] | None:
    """For a plain file of `size` bytes open in `handle` (binary, seekable):
    None when its lines are numbered from 1 throughout (size up to
    BIG_TEXT); else (the byte where lines counted back from the end start,
    how many lines start there or later), counted with C-speed byte counts.
    The handle's position is left anywhere."""
    if size <= BIG_TEXT:
        return None
    handle.seek(0)
    start = handle.read(BIG_TEXT_HEAD).rfind(b"\n") + 1
    handle.seek(start)
    lines, last = 0, b"\n"
    while True:
        block = handle.read(min(_STEP * 8, size - handle.tell()))
        if not block:
            break
        lines += block.count(b"\n")
        last = block[-1:]
    return start, lines + (last != b"\n")


def read_ends(path: str, markers: tuple[bytes, ...] = (), size: int = HEAD_BYTES) -> tuple[bytes, bytes, bytes]:
    """(head, middle, tail) of a file, decompressed: its first `size` bytes,
    windows around the lines of its middle that hold one of `markers` (first
    hits of each, for files up to MIDDLE_SCAN_BYTES; of a bigger plain file,
    the last hit of each in the LATE_SCAN_BYTES before its tail), and its
    last TAIL_BYTES from a line start. A file that fits in the head has no middle or tail.
    Evidence is where it stands: a console log ends in its watchdog lines
    after hours of training output, a pasted dump sits in the middle."""
    try:
        with open_binary(path) as handle:
            head = handle.read(size)
            if len(head) < size:
                return head, b"", b""
            known = getattr(handle, "size_at_open", None)
            if known is not None and known <= MIDDLE_SCAN_BYTES:
                rest = read_at_most(handle, known - size)
            elif known is not None:  # a big plain file: its tail, and the last marked lines before it
                start = max(size, known - LATE_SCAN_BYTES)
                handle.seek(start)
                rest = _from_line_start(read_at_most(handle, known - start)) if start > size else \
                    read_at_most(handle, known - start)
                tail = _from_line_start(rest[-TAIL_BYTES:])
                return head, _marked_windows(rest[:-TAIL_BYTES], markers, last=True), tail
            else:  # compressed: streamed, keeping what the scan can afford
                rest = _stream_rest(handle)
    except STREAM_ERRORS as exc:
        raise InputError(path, f"cannot read: {_reason(exc)}") from None
    tail = _from_line_start(rest[-TAIL_BYTES:]) if len(rest) > TAIL_BYTES else rest
    middle = _marked_windows(rest[:-TAIL_BYTES], markers) if len(rest) > TAIL_BYTES else b""
    return head, middle, tail


def _stream_rest(handle) -> bytes:
    kept = bytearray()
    while True:
        chunk = handle.read(_STEP)
        if not chunk:
            return bytes(kept)
        kept += chunk
        if len(kept) > MIDDLE_SCAN_BYTES + TAIL_BYTES:  # past the scan: only the tail is worth keeping
            del kept[:len(kept) - TAIL_BYTES]


def _from_line_start(data: bytes) -> bytes:
    cut = data.find(b"\n")
    return data[cut + 1:] if 0 <= cut < len(data) - 1 else data


def _marked_windows(data: bytes, markers: tuple[bytes, ...], last: bool = False) -> bytes:
    """Windows around the first MIDDLE_HITS lines of `data` holding each marker
    (with `last`, around the last such line of each), in file order, merged."""
    spans: list[tuple[int, int]] = []
    for marker in markers:
        if last:
            at = data.rfind(marker)
            if at >= 0:
                start = data.rfind(b"\n", 0, at) + 1
                spans.append((start, min(len(data), start + MIDDLE_WINDOW)))
            continue
        at = data.find(marker)
        hits = 0
        while at >= 0 and hits < MIDDLE_HITS:
            start = data.rfind(b"\n", 0, at) + 1
            end = min(len(data), start + MIDDLE_WINDOW)
            spans.append((start, end))
            hits += 1
            at = data.find(marker, end)
    if not spans:
        return b""
    spans.sort()
    merged = [list(spans[0])]
    for start, end in spans[1:]:
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces = []
    for start, end in merged:
        stop = data.rfind(b"\n", start, end)  # whole lines only
        pieces.append(data[start:stop + 1 if stop > start else end])
    return b"".join(pieces)


def lines_with(data: bytes, literals: tuple[bytes, ...], most: int = 4096) -> bytes:
    """The whole lines of `data` that hold one of `literals` (each once, in
    order, at most `most`): what a sniffer's line-anchored pattern needs to
    see, found with C-speed scans instead of running the pattern over every
    position of 64 KiB."""
    starts: set[int] = set()
    for literal in literals:
        at = data.find(literal)
        while at >= 0 and len(starts) < most:
            start = data.rfind(b"\n", 0, at) + 1
            starts.add(start)
            end = data.find(b"\n", at)
            if end < 0:
                break
            at = data.find(literal, end)
    pieces = []
    for start in sorted(starts):
        end = data.find(b"\n", start)
        pieces.append(data[start:end + 1 if end >= 0 else len(data)])
    return b"".join(pieces)


def read_bytes(path: str, limit: int | None = None) -> bytes:
    """The file's bytes (decompressed), at most `limit` of them; of a
    plain file, at most the bytes it had when opened (`read_at_most`)."""
    try:
        with open_binary(path) as handle:
            return read_at_most(handle, _UNLIMITED if limit is None else limit)
    except STREAM_ERRORS as exc:
        raise InputError(path, f"cannot read: {_reason(exc)}") from None


_STEP = 1 << 20
_UNLIMITED = 1 << 62


def read_at_most(handle, limit: int) -> bytes:
    """Up to `limit` bytes from `handle`, in reads sized by what is there.

    `read(limit)` allocates `limit` bytes before it reads one: with the
    512 MiB cap of a pickle that is a mapping made and given back for every
    file, several times the cost of the read itself of a Flight Recorder
    dump. A plain file's size is known, so its first read takes it
    all (one byte more finds the end, or a file still growing); a
    decompressing stream is read in steps that double. `handle` is what
    `open_binary` returns: a buffered reader, whose short read is the end.

    A plain file (from `open_regular`) is read up to the size it had when
    opened, and no further: a log still being written gives a consistent
    prefix, and a note says it grew; one truncated meanwhile gives what
    was left, and a note says so."""
    opened = getattr(handle, "size_at_open", None)
    if opened is not None:
        return _read_opened(handle, opened, limit)
    try:
        size = os.fstat(handle.fileno()).st_size
    except (OSError, AttributeError, io.UnsupportedOperation):
        size = 0
    step = size + 1 if size else _STEP
    parts = []
    left = limit
    while left > 0:
        want = min(step, left)
        chunk = handle.read(want)
        parts.append(chunk)
        left -= len(chunk)
        if len(chunk) < want:  # a buffered reader returns less only at the end
            break
        step = max(_STEP, 2 * want)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _read_opened(handle, size: int, limit: int) -> bytes:
    path = getattr(handle, "path_at_open", "")
    available = max(0, size - handle.tell())  # a caller may have read some, or sought to its tail
    data = handle.read(min(available, limit))
    if len(data) < min(available, limit):
        note(path, f"shrank while it was read (truncated or rotated?): it had {size:,} bytes when opened, "
                   f"{len(data):,} of the {available:,} wanted were there")
    elif limit > available and handle.read(1):
        note(path, f"grew while it was read (a log still being written?): the {size:,} bytes it had when "
                   f"opened were read, not what was added since")
    return data


_NOTES: list[tuple[str, str]] = []


def note(path: str, message: str) -> None:
    """Something about how a file was read that its report must say."""
    if (path, message) not in _NOTES:
        _NOTES.append((path, message))


def take_notes() -> list[tuple[str, str]]:
    """The notes since the last call, as (path, message); the list is emptied."""
    notes = _NOTES[:]
    del _NOTES[:]
    return notes


def read_text(path: str, limit: int | None = None) -> str:
    """Decode as UTF-8, replacing what is not: a stray byte must not lose a file."""
    return read_bytes(path, limit).decode("utf-8", errors="replace")


def read_document(path: str, display: str, limit: int | None = None) -> str:
    """A whole text document (a JSON file, a pasted report): its text, less
    a UTF-8 byte-order mark; an empty or blank one is an InputError."""
    text = read_text(path, limit)
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise InputError(display, "empty file")
    return text


_INT_TEXT = re.compile(r"[-+]?[0-9]+")


def int_text(text: str, most: int = 20) -> int | None:
    """The int a text spells (ASCII digits, one sign at most, blanks around;
    `most` characters at most), else None. Not `str.isdigit()`: it takes
    "²" and "١٢", which `int()` refuses or reads; nor `lstrip("-")`, which
    lets "--1" through."""
    text = text.strip()
    return int(text) if len(text) <= most and _INT_TEXT.fullmatch(text) else None


# ---------------------------------------------------------------- collectors' timestamps

# What a log collector writes before every line of a program's output: the
# UTC time it read the line, RFC 3339 with `Z` and up to nanoseconds, and one
# space (`kubectl logs --timestamps`, `docker logs --timestamps`, GitHub
# Actions' raw job logs: `2026-04-07T10:14:02.1183452Z `). The readers know
# the programs' own line formats; a file whose lines all carry such a stamp
# is read as if it had none (see `stamped`). Times a program writes itself
# (`dmesg --time-format=iso`: `2026-11-12T09:16:24,011000+00:00`) are not
# a collector's, and stay.
_STAMP = rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z "
_STAMP_AT_START = re.compile(_STAMP)
_STAMPS = re.compile(rb"(?m)^(?:" + _STAMP + rb"){1,4}")  # a stamped log collected again is stamped twice
_STAMP_SAMPLE = 50  # the head's lines that decide
_STAMP_SHARE = 0.9  # of them, at least this share stamped (a line the program wrote with a carriage return may not be)


def stamped(head: bytes) -> bool:
    """The head's first line, and nine in ten of its first 50 lines, start
    with a collector's timestamp."""
    if not head[:1].isdigit() or _STAMP_AT_START.match(head) is None:
        return False
    lines = head.split(b"\n", _STAMP_SAMPLE)[:_STAMP_SAMPLE]
    if len(lines) > 1 and not lines[-1]:
        lines.pop()  # the newline that ends the head
    hits = sum(1 for line in lines if _STAMP_AT_START.match(line))
    return hits >= _STAMP_SHARE * len(lines)


_STAMPED_RUN = 10  # stamped lines that make a sample's stamps a collector's, wherever they start


def stamped_somewhere(sample: bytes) -> bool:
    """Whether a run of a collector's timestamps starts lines somewhere in
    `sample` (a tail or middle window of a file whose head was the job's own
    output: the stamps began when the collector did)."""
    return len(_STAMPS.findall(sample, 0, len(sample))) >= _STAMPED_RUN if b"Z " in sample else False


def unstamp(data: bytes) -> bytes:
    """`data` (whole lines, or a head) without the collectors' timestamps at the start of each line."""
    return _STAMPS.sub(b"", data)


# A launcher's prefix naming the process a line came from: torchrun --tee's
# `[rank3]:` (a global rank) or `[default3]:` (the role's local rank).
LAUNCHER_PREFIX = re.compile(rb"(?m)^\[(rank|default)(\d{1,7})\]:")
MAX_PREFIXED_PROCESSES = 256  # a file interleaving more processes than this is not split by process


def launcher_prefixes(path: str) -> list[bytes]:
    """The distinct launcher prefixes (`[rank3]:`) starting lines of the file, in order of
    rank; empty when there are more than MAX_PREFIXED_PROCESSES (not a console split by process)."""
    found: set[bytes] = set()
    try:
        with open_binary(path) as handle:
            carry = b""
            while True:
                chunk = handle.read(_STEP)
                if not chunk:
                    break
                chunk = carry + chunk
                cut = chunk.rfind(b"\n") + 1
                found.update(m.group(0) for m in LAUNCHER_PREFIX.finditer(chunk, 0, cut))
                carry = chunk[cut:][-4096:]
                if len(found) > MAX_PREFIXED_PROCESSES:
                    return []
    except STREAM_ERRORS:
        return []
    return sorted(found, key=lambda p: (p.startswith(b"[default"), int(re.sub(rb"\D", b"", p))))


def lines_of_copy(path: str, folder: str, prefix: bytes, stamps: bool) -> tuple[str, list[int]]:
    """A copy in `folder` of the lines of one process in a console that
    interleaves several: those under launcher `prefix`, without it (and
    without collectors' stamps where `stamps`), in their order; and for each
    line of the copy (1-based: index 0 is line 1) its number in the file."""
    name = re.sub(r"\.(?:gz|zst|zstd)$", "", os.path.basename(path)) or "log"
    copy = os.path.join(folder, name)
    where: list[int] = []
    cut = len(prefix)
    try:
        with open(copy, "wb") as out, open_binary(path) as source:
            data = read_at_most(source, _UNLIMITED)
            kept = []
            for number, line in enumerate(data.split(b"\n"), 1):
                if stamps and line[:1].isdigit():
                    line = unstamp(line)
                if line.startswith(prefix):
                    kept.append(line[cut:])
                    where.append(number)
            out.write(b"\n".join(kept) + b"\n")
    except STREAM_ERRORS as exc:
        raise InputError(path, f"cannot read it or write the copy it is read from: {_reason(exc)}") from None
    return copy, where


def unstamped_copy(path: str, folder: str) -> str:
    """A copy of a stamped file in `folder`, decompressed, each run of whole
    lines without its collector's stamps (`unstamp` keeps every line: what a
    reader cites of the copy is where it stands in the file). Read as
    `read_bytes` reads (up to the size a plain file had when opened, a
    compressed one up to the limit), in steps of whole lines."""
    transform = unstamp
    name = re.sub(r"\.(?:gz|zst|zstd)$", "", os.path.basename(path)) or "log"
    copy = os.path.join(folder, name)
    try:
        out = open(copy, "wb")
    except OSError as exc:
        raise InputError(path, f"cannot write the copy it is read from: {_reason(exc)}") from None
    try:
        with out:
            with open_binary(path) as source:
                left = getattr(source, "size_at_open", _UNLIMITED)
                carry = b""   # the start of a line not ended yet
                mid = False   # what comes next continues a line already written in part (one over 4 MiB)
                while left > 0:
                    chunk = source.read(min(_STEP, left))
                    if not chunk:
                        break
                    left -= len(chunk)
                    if mid:
                        end = chunk.find(b"\n") + 1
                        if not end:
                            out.write(chunk)
                            continue
                        out.write(chunk[:end])
                        chunk, mid = chunk[end:], False
                    chunk = carry + chunk
                    cut = chunk.rfind(b"\n") + 1
                    out.write(transform(chunk[:cut]))
                    carry = chunk[cut:]
                    if len(carry) > 4 * _STEP:
                        out.write(transform(carry))
                        carry, mid = b"", True
                out.write(transform(carry))
    except STREAM_ERRORS as exc:
        raise InputError(path, f"cannot read it or write the copy it is read from: {_reason(exc)}") from None
    return copy


_TEXT_BYTES = bytes(range(32, 256)) + b"\t\n\r\x1b\x0c\x08"
_SAMPLE = 8192  # the bytes of a head that tell binary from text


_JSON_DOCUMENT = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*(?:\{|\[\s*[\{\]])")


def looks_json(head: bytes) -> bool:
    """A JSON document's start (an object, or a list of objects): snapshots,
    facts files, py-spy --json, maps. A text starting with a bracket is not one
    by that alone: gdb's `[New LWP 12]` and `[2024-05-01 10:00:00] ...` log
    lines are text."""
    return bool(_JSON_DOCUMENT.match(head))


def has_nul(head: bytes) -> bool:
    """A NUL byte in the first 8 KiB: binary for every text reader, and the
    cheap first test of `looks_binary` (no copy, one C scan), which a
    sniffer can run before searching 64 KiB for its markers."""
    return head.find(b"\x00", 0, _SAMPLE) >= 0


def head_shows(head: bytes, literals: tuple[bytes, ...], *patterns) -> bool:
    """Whether a text head (no NUL in its first 8 KiB) shows a report's own
    lines: terminal colours in its first 8 KiB taken out, one of `literals`
    (C scans that decline most files, each a string every alternative of the
    patterns needs), then a match of one of `patterns`."""
    if not head or has_nul(head):
        return False
    if b"\x1b" in head[:_SAMPLE]:
        head = ANSI_COLOUR.sub(b"", head)
    if not any(literal in head for literal in literals):
        return False
    return any(pattern.search(head) for pattern in patterns)


def looks_binary(head: bytes) -> bool:
    """NUL bytes, or more than 15 % control bytes in the first 8 KiB.
    (bytes.translate keeps this in C: discovery calls it for every file.)"""
    if has_nul(head):
        return True
    sample = head[:_SAMPLE]
    return bool(sample) and len(sample.translate(None, _TEXT_BYTES)) / len(sample) > 0.15


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _reason(exc: BaseException) -> str:
    if isinstance(exc, NotRegular):
        return exc.strerror
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or exc.__class__.__name__
