"""gdb backtraces: `thread apply all bt` and `thread apply all py-bt` output.

One file may hold several processes' dumps back to back; each becomes one
`ProcessDump`. A thread keeps what the file says about it: its LWP, its name,
its frames innermost first, each citing its line as an offset from the thread
header (`Frame.at`), so that equal blocks can share one parsed tuple.

Ten thousand ranks mostly repeat the same few dozen stacks. A file is read as
alternating segments: blocks of frame lines and the gaps between them (blank
lines, thread headers, gdb's chatter). Each segment is masked (addresses
become `0x?`, LWP and process numbers `?`), and each distinct masked segment
is parsed once and kept in a bounded module-level cache; what the mask hid (a
header's LWP, a detached process's pid) is read back from the original line.
Only cache misses reach the lark grammar (grammars/gdb.lark), one line per
parse, so one bad line is one diagnostic. A `bt` pass followed by a `py-bt`
pass of the same process is one dump (`_join_passes`).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .. import lazy
from .cache import BoundedCache as _Cache
from .reader import markers_hook, reader_hooks
from ..model import Evidence, Frame, ProcessDump, ThreadStack
from .facts import Facts
from .grammar import parser
from .textio import ANSI_COLOUR, InputError, looks_binary, read_bytes
from .workers import SharedTuple

KIND = "gdb"
SOURCE = "gdb"
MAX_LINE = 64 * 1024

_PAGER = b"--Type <RET> for more, q to quit, c to continue without paging--"
_HEX = lazy.regex(rb"0x[0-9a-fA-F]+")
_LWP = lazy.regex(rb"LWP \d+")
_PROCESS = lazy.regex(rb"process \d+")
_TARGET_NUMBER = lazy.regex(r"(?:LWP|process) (\d+)\b")

# A block is a thread's frame lines: `#N` frames, indented lines (gdb's
# wrapped lines, py-bt frames and their source) and the notes gdb prints among
# them. A gap is everything else. A line longer than MAX_LINE is in neither,
# and is reported and skipped.
_BLOCK_START = (rb"(?:#|[ \t]+\S|Backtrace stopped:|Traceback \(most recent call first\):"
                rb"|Unable to locate python frame)")
_SEGMENT = lazy.regex(
    rb"(?P<block>(?:%(start)s[^\n]{0,%(max)s}(?:\n|\Z))+)"
    rb"|(?P<gap>(?:(?!%(start)s)[^\n]{0,%(max)s}(?:\n|\Z))+)"
    % {b"start": _BLOCK_START, b"max": str(MAX_LINE).encode()})

_SNIFF_HEADER = lazy.regex(
    rb"^Thread \d+(?:\.\d+)? \((?:Thread 0x[0-9a-fA-F]+ \(LWP \d+\)|LWP \d+|process \d+)", re.M)
_SNIFF_FRAME = lazy.regex(rb"^#0  0x[0-9a-fA-F]+ in \S", re.M)
# What each of the two needs: three C scans decline most files (a py-spy
# dump's `Thread 123 (idle)` lines included) before a line-anchored search.
_SNIFF_LITERALS = (b"(LWP ", b"(process ", b"#0  0x")


def sniff(path: str, head: bytes) -> bool:
    if looks_binary(head):
        return False
    if b"\x1b" in head:
        head = ANSI_COLOUR.sub(b"", head)
    if not any(literal in head for literal in _SNIFF_LITERALS):
        return False
    return bool(_SNIFF_HEADER.search(head) or _SNIFF_FRAME.search(head))


# A file that is gdb's `thread apply all bt` and nothing else (`wholedump`):
# `#N` frames (no quote: a string argument may quote anything), and between
# the threads only gdb's own lines as it prints them on attach and detach,
# thread headers and blank lines. Frames are most of the lines: one search
# finds a `#` line of another shape, and a quote count one in a frame.
_WHOLE_DUMP_BAD_FRAME = lazy.regex(rb"\n#(?!\d+ )")
_WHOLE_DUMP_BAD_LINE = lazy.regex(
    rb"(?m)^(?!(?:"
    rb"Thread \d+ \(Thread 0x[0-9a-fA-F]+ \(LWP \d+\)(?: \"[^\n\"]*\")?\):"
    rb"|\[New LWP \d+\]"
    rb"|\[New Thread 0x[0-9a-fA-F]+ \(LWP \d+\)\]"
    rb"|\[Thread debugging using libthread_db enabled\]"
    rb"|\[Inferior \d+ \(process \d+\) detached\]"
    rb"|Using host libthread_db library \"[^\n\"]*\"\."
    rb"|(?:0x[0-9a-fA-F]+ in )?[\w.~:<>$@]+ \([^\n\"]*\) (?:at|from) [^\s\"]+"
    rb"|To enable execution of this file add"
    rb"|\tadd-auto-load-safe-path [^\s\"]+"
    rb"|line to your configuration file \"[^\n\"]*\"\."
    rb"|To completely disable this security protection add"
    rb"|\tset auto-load safe-path /"
    rb"|For more information about this security protection see the"
    rb"|\"Auto-loading safe path\" section in the GDB manual\.  E\.g\., run from the shell:"
    rb"|\tinfo \"\(gdb\)Auto-loading safe path\""
    rb"|)$)[^\n]*")


def whole_dump(data: bytes) -> bool:
    """Whether `data`, a whole file without NUL, CR or escape bytes, is one
    gdb backtrace of all threads: a thread header, then only gdb's own lines."""
    if b"(LWP " not in data or _SNIFF_HEADER.search(data) is None:
        return False
    if _WHOLE_DUMP_BAD_FRAME.search(b"\n" + data) is not None:
        return False
    between = b"\n".join([line for line in data.split(b"\n") if line[:1] != b"#"])
    return between.count(b'"') == data.count(b'"') and _WHOLE_DUMP_BAD_LINE.search(between) is None


def parse(path: str, display: str) -> Facts:
    data = read_bytes(path)
    if not data.strip():
        raise InputError(display, "empty file")
    facts = Facts(KIND, display)
    _Reader(facts, display).read(_clean(data))
    facts.processes[:] = _join_passes(facts.processes)
    if not facts.processes:
        facts.diag(0, "no thread backtraces found")
    return facts


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)},
    lambda path, head: KIND if sniff(path, head) else None)
forensics_sniff_markers = markers_hook(_SNIFF_LITERALS)


def _clean(data: bytes) -> bytes:
    """Undo what a terminal adds: colours, CRLF, the pager's prompt."""
    if b"\x1b" in data:
        data = ANSI_COLOUR.sub(b"", data)
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    if _PAGER in data:
        data = data.replace(_PAGER, b"")
    return data


def _mask(data: bytes) -> bytes:
    """What varies between equal stacks of different ranks, hidden; the
    line count does not change."""
    if b"0x" in data:
        data = _HEX.sub(b"0x?", data)
    if b"LWP " in data:
        data = _LWP.sub(b"LWP ?", data)
    if b"process " in data:
        data = _PROCESS.sub(b"process ?", data)
    return data


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


# ---------------------------------------------------------------- records

class _Record(NamedTuple):
    """What one line is. `value` depends on `kind`:

    header: (gid, target kind, name) · frame: (Frame with at=0, problem or "")
    attach: program path · end: inferior number · prompt: True for a backtrace
    command · error: the text · banner, note, noise: None.
    """

    kind: str
    value: object = None


_UNRECOGNIZED = _Record("unrecognized")


class _GdbTransformer:
    """Turns each parsed line into a `_Record`; lark applies it while parsing."""

    def start(self, children):
        return children[0]

    def header(self, children):
        gid, target = children[0], children[1]
        name = next((str(c)[1:-1] for c in children[2:] if c.type == "THREAD_NAME"), "")
        return _Record("header", (str(gid), target, name))

    def pthread_target(self, children):
        return "lwp"

    def lwp_target(self, children):
        return "lwp"

    def process_target(self, children):
        return "process"

    def other_target(self, children):
        return "other"

    def frame(self, children):
        call = children[-1]
        if call.type == "SPECIAL_FRAME":
            return _Record("frame", (Frame(str(call), native=True), ""))
        return _Record("frame", _call_frame(str(call)))

    def py_frame(self, children):
        path, line, name = children
        return _Record("frame", (Frame(str(name), file=str(path)[1:-1],
                                      line=int(line) if line != "?" else 0), ""))

    def py_builtin(self, children):
        text = str(children[0])
        if text.startswith("<built-in method "):
            text = text.split(" of ", 1)[0] + ">"
        return _Record("frame", (Frame(text, native=True), ""))

    def py_marker(self, children):
        text = str(children[0])
        # "(frame information optimized out)" stands for a Python frame;
        # the GIL wait and the collector are the interpreter's own C code.
        return _Record("frame", (Frame(text, native=not text.startswith("(")), ""))

    def body_note(self, children):
        return _Record("note")

    def attach(self, children):
        program = children[0] if children[0].type == "PROGRAM" else ""
        return _Record("attach", str(program).strip())

    def inferior(self, children):
        return _Record("end", int(children[0]))

    def banner(self, children):
        return _Record("banner")

    def prompt(self, children):
        return _Record("prompt", bool(children) and children[0].type == "BT_COMMAND")

    def current_frame(self, children):
        return _Record("noise")

    def noise(self, children):
        return _Record("noise")

    def gdb_error(self, children):
        return _Record("error", str(children[0]))


_RECORDS = _Cache(16 << 20)


def _record(line: str) -> _Record:
    """The record for one stripped, masked line; parsed once per distinct line."""
    record = _RECORDS.get(line)
    if record is None:
        try:
            record = parser(KIND, "start", _GdbTransformer).parse(line)
        except lazy.lark.exceptions.LarkError:
            record = _UNRECOGNIZED
        _RECORDS.put(line, record)
    return record


# ---------------------------------------------------------------- frame text

# Operator names hold brackets that do not nest: `operator<<`, `operator()`.
_OPERATOR = lazy.regex(r"operator\s*(?:<=>|\(\)|\[\]|->\*?|<<=?|>>=?|&&|\|\||\+\+|--|[-+*/%^&|~!=<>,]=?)")
_NAME_MARK = lazy.regex(r"[(<\[{)>\]}]|\boperator\b")
_CLOSER = {"(": ")", "<": ">", "[": "]", "{": "}"}
_ARG_MARK = lazy.regex(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|[()]')
_SPLIT_MARK = lazy.regex(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|[(<\[{)>\]},]')
_LOCATION = lazy.regex(r"(?: at (?P<file>.+?):(?P<line>\d+))?(?: from (?P<lib>.+))?")
_TRAILING_LOCATION = lazy.regex(r"(?: at (?P<file>.+?):(?P<line>\d+))?(?: from (?P<lib>.+))?$")
_ARG_NAME = lazy.regex(r"\s*([A-Za-z_$][\w$]*)=")


def _call_frame(text: str) -> tuple[Frame, str]:
    """A native frame from gdb's `name (args) at file:line | from lib` text.

    gdb prints the name, then " (", the arguments and ")". A demangled name
    carries its own brackets (`wait(std::unique_lock<std::mutex>&)`,
    `(anonymous namespace)::`, `{lambda(int)#1}`, `std::ratio<1l, 1000l> >`),
    so the argument list is the first " (" outside every bracket of the
    name — found by a bracket scan, since no regular terminal can balance.
    Returns the frame and a problem ("" when the text was fully understood).
    """
    open_at = _args_start(text)
    if open_at < 0:
        where = _TRAILING_LOCATION.search(text)
        return _located(text[:where.start()].strip(), "", where), "no argument list"
    close_at = _args_end(text, open_at + 1)
    name = text[:open_at].rstrip()
    if close_at < 0:
        return Frame(name, native=True), "unbalanced argument list"
    where = _LOCATION.fullmatch(text, close_at + 1)
    frame = _located(name, text[open_at + 1:close_at], where)
    return frame, "" if where else f"unexpected text after the arguments: {text[close_at + 1:][:80]!r}"


def _located(name: str, args: str, where) -> Frame:
    if where is None:
        return Frame(name, native=True, locals=_arguments(args))
    line = where.group("line")
    return Frame(name, file=where.group("file") or "", line=int(line) if line else 0,
                 library=where.group("lib") or "", native=True, locals=_arguments(args))


def _args_start(text: str) -> int:
    stack: list[str] = []
    pos = 0
    while True:
        match = _NAME_MARK.search(text, pos)
        if match is None:
            return -1
        mark, at = match.group(), match.start()
        pos = match.end()
        if mark == "operator":
            op = _OPERATOR.match(text, at)
            if op is not None:
                pos = op.end()
        elif mark in _CLOSER:
            if mark == "(" and not stack and at > 0 and text[at - 1] == " ":
                return at
            stack.append(_CLOSER[mark])
        elif stack and stack[-1] == mark:
            stack.pop()


def _args_end(text: str, pos: int) -> int:
    depth = 0
    for match in _ARG_MARK.finditer(text, pos):
        mark = match.group()
        if mark == "(":
            depth += 1
        elif mark == ")":
            if depth == 0:
                return match.start()
            depth -= 1
    return -1


def _arguments(args: str) -> tuple[tuple[str, str], ...]:
    """`this=0x?, n=n@entry=3` → (("this", "0x…"), ("n", "3")); () unless every
    argument splits cleanly at top-level commas. Masked addresses read `0x…`."""
    if not args.strip():
        return ()
    pieces, start, stack = [], 0, []
    for match in _SPLIT_MARK.finditer(args):
        mark = match.group()
        if mark == ",":
            if not stack:
                pieces.append(args[start:match.start()])
                start = match.end()
        elif mark in _CLOSER:
            stack.append(_CLOSER[mark])
        elif len(mark) == 1 and mark in ")>]}":
            if stack and stack[-1] == mark:
                stack.pop()
    pieces.append(args[start:])
    pairs = []
    for piece in pieces:
        named = _ARG_NAME.match(piece)
        if named is None:
            return ()
        name, value = named.group(1), piece[named.end():].strip()
        if value.startswith(name + "@entry="):
            value = value[len(name) + 7:]
        pairs.append((name, value.replace("0x?", "0x…")))
    return tuple(pairs)


# ---------------------------------------------------------------- thread blocks

class _Block(NamedTuple):
    """A parsed block: frames with `at` counted from the line above the block
    (where its thread header normally is) and problems as (offset, reason)."""

    frames: tuple[Frame, ...]
    problems: tuple[tuple[int, str], ...]


_BLOCKS = _Cache(32 << 20)


def _block(masked: bytes) -> _Block:
    block = _BLOCKS.get(masked)
    return block if block is not None else _BLOCKS.put(masked, _parse_block(masked))


def _parse_block(masked: bytes) -> _Block:
    lines = _text(masked).split("\n")
    if lines[-1] == "":
        lines.pop()
    frames: list[Frame] = []
    problems: list[tuple[int, str]] = []
    source_indent = -1  # a py-bt frame's source line is indented deeper than the frame
    i, count = 0, len(lines)
    while i < count:
        raw = lines[i]
        text = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        at = i + 1
        i += 1
        if indent > source_indent >= 0:
            source_indent = -1
            continue
        source_indent = -1
        if raw.startswith("#"):
            while i < count and lines[i][:1] in (" ", "\t") and _continues(text, lines[i]):
                text = f"{text} {lines[i].strip()}"
                i += 1
        record = _record(text)
        if record.kind == "frame":
            frame, problem = record.value
            frames.append(Frame(frame.function, frame.file, frame.line, frame.library,
                                frame.native, at, frame.locals))
            if problem:
                problems.append((at, problem))
            if not frame.native and frame.file:
                source_indent = indent
        elif record.kind == "unrecognized":
            if indent and frames and frames[-1].native and raw.startswith(" "):
                continue  # `bt full` locals and their multi-line values
            problems.append((at, "unrecognized line"))
        elif record.kind not in ("note", "noise"):
            problems.append((at, f"unexpected {record.kind} line inside a thread"))
    # one object for every dump that shows this block: a worker sends it to the parent once
    return _Block(SharedTuple(frames), tuple(problems))


def _continues(frame_text: str, line: str) -> bool:
    """Whether an indented line is gdb wrapping the frame line above it
    (rather than a `bt full` local): it goes on with the location, or the
    argument list is still open."""
    tail = line.lstrip()
    return tail.startswith(("from ", "at ")) or frame_text.count("(") > frame_text.count(")")


# ---------------------------------------------------------------- gaps between blocks

_BLANK = _Record("blank")
_GAPS = _Cache(4 << 20)


def _gap(masked: bytes) -> tuple[tuple[int, _Record], ...]:
    """The lines of a gap that matter, as (offset, record). Gaps between two
    threads (a blank line and a header) are parsed once per distinct text."""
    records = _GAPS.get(masked)
    return records if records is not None else _GAPS.put(masked, _parse_gap(masked))


def _parse_gap(masked: bytes) -> tuple[tuple[int, _Record], ...]:
    lines = _text(masked).split("\n")
    if masked.endswith(b"\n"):
        lines.pop()
    records: list[tuple[int, _Record]] = []
    for offset, line in enumerate(lines):
        text = line.strip()
        record = _record(text) if text else _BLANK
        if record is _BLANK:
            if not records or records[-1][1] is not _BLANK:
                records.append((offset, record))
        elif record.kind not in ("noise", "note"):
            records.append((offset, record))
    return tuple(records)


# ---------------------------------------------------------------- reading a file

class _Thread:
    __slots__ = ("tid", "name", "line", "text", "order", "lwp", "frames", "body")

    def __init__(self, tid, name, line, text, order, lwp):
        self.tid, self.name, self.line, self.text = tid, name, line, text
        self.order, self.lwp = order, lwp
        self.frames: tuple[Frame, ...] = ()
        self.body = False

    def stack(self, display: str) -> ThreadStack:
        return ThreadStack(self.tid, self.name, frames=self.frames,
                           evidence=Evidence(display, self.line, self.text))


class _Process:
    __slots__ = ("pid", "pid_line", "pid_text", "command", "threads", "inferior",
                 "descending", "ended")

    def __init__(self):
        self.pid: int | None = None
        self.pid_line, self.pid_text, self.command = 0, "", ""
        self.threads: list[_Thread] = []
        self.inferior: int | None = None
        self.descending: bool | None = None
        self.ended = False

    def claim_pid(self, pid: int, line: int, text: str) -> None:
        if self.pid is None:
            self.pid, self.pid_line, self.pid_text = pid, line, text

    def follows(self, order: tuple[int | None, int]) -> bool:
        """Whether a thread numbered `order` continues this dump rather than
        starting the next process's. gdb numbers threads from 1 and prints
        them descending (ascending with `-ascending`), so a number that breaks
        the direction, or another inferior, starts a new process."""
        if not self.threads or self.threads[-1].order is None:
            return True
        inferior, number = order
        last_inferior, last = self.threads[-1].order
        if inferior != last_inferior:
            return False
        if self.descending is None:
            if number < last:
                self.descending = True
                return True
            if last == 1 and number == 2:
                self.descending = False
                return True
            return False
        return number < last if self.descending else number > last

    def dump(self, display: str, truncated: bool) -> ProcessDump:
        """The pid is the one gdb stated (attach, detach, `process N`), else
        the LWP of thread 1: on Linux the main thread's LWP is the pid."""
        pid = self.pid
        if pid is None:
            main = next((t for t in self.threads if t.order and t.order[1] == 1 and t.lwp), None)
            if main is not None:
                pid = int(main.lwp)
        if self.pid_line:
            evidence = Evidence(display, self.pid_line, self.pid_text)
        else:
            evidence = Evidence(display, self.threads[0].line, self.threads[0].text)
        return ProcessDump(SOURCE, display, pid=pid, command=self.command,
                           threads=tuple(t.stack(display) for t in self.threads),
                           evidence=evidence, truncated=truncated)


# ---------------------------------------------------------------- bt and py-bt of one process

def _join_passes(processes: list[ProcessDump]) -> list[ProcessDump]:
    """`-ex "thread apply all bt" -ex "thread apply all py-bt"` prints one
    process twice: C frames, then Python frames. Read apart, neither pass
    says where a thread is (a futex under what? a Python line calling what?),
    so two neighbouring dumps of the same pid and threads, one with only C
    frames and one with only Python frames, become one dump whose threads
    run C frames (innermost first, down to `_start`) then Python frames, as
    a per-thread `bt` + `py-bt` prints them. Each frame keeps its own line."""
    joined: list[ProcessDump] = []
    for process in processes:
        previous = joined[-1] if joined else None
        if previous is not None and _passes_of_one_process(previous, process):
            native, python = (previous, process) if _only_native(previous) else (process, previous)
            joined[-1] = _joined(native, python)
        else:
            joined.append(process)
    return joined


# py-bt lines the reader keeps as native frames: C calls and the interpreter's own waits.
_PY_BT_NATIVE = ("<built-in ", "Waiting for the GIL", "Garbage-collecting")


def _only_native(process: ProcessDump) -> bool:
    return all(f.native and not f.function.startswith(_PY_BT_NATIVE) for t in process.threads for f in t.frames)


def _only_python(process: ProcessDump) -> bool:
    return all(not f.native or f.function.startswith(_PY_BT_NATIVE) for t in process.threads for f in t.frames)


def _passes_of_one_process(a: ProcessDump, b: ProcessDump) -> bool:
    if a.pid is None or a.pid != b.pid or [t.tid for t in a.threads] != [t.tid for t in b.threads]:
        return False
    if not (any(t.frames for t in a.threads) and any(t.frames for t in b.threads)):
        return False
    return (_only_native(a) and _only_python(b)) or (_only_python(a) and _only_native(b))


def _joined(native: ProcessDump, python: ProcessDump) -> ProcessDump:
    threads = []
    for c_side, py_side in zip(native.threads, python.threads):
        shift = py_side.evidence.line - c_side.evidence.line
        extra = tuple(Frame(f.function, f.file, f.line, f.library, f.native, f.at + shift, f.locals)
                      for f in py_side.frames)
        threads.append(ThreadStack(c_side.tid, c_side.name or py_side.name, c_side.active,
                                   c_side.frames + extra, c_side.evidence, c_side.status))
    # The line that states the pid (a detach after the second pass, an
    # attach before the first), else the first thread's header.
    earlier, later = sorted((native, python), key=lambda p: p.threads[0].evidence.line)
    stated = later.evidence if later.evidence != later.threads[0].evidence else earlier.evidence
    return ProcessDump(native.source, native.path, pid=native.pid, host=native.host,
                       command=native.command or python.command, threads=tuple(threads),
                       evidence=stated, truncated=native.truncated or python.truncated)


def _unmasked(value: str, line: str, before: str, after: str) -> str:
    """`value` as the original `line` spells it, should the mask have touched
    it (a thread named `worker-0x1f`): the text between the first `before`
    and the last `after`."""
    if "?" not in value:
        return value
    start = line.find(before)
    end = line.rfind(after)
    return line[start + len(before):end] if 0 <= start < end else value


def _order(gid: str) -> tuple[int | None, int] | None:
    inferior, _, number = gid.rpartition(".")
    try:
        return (int(inferior) if inferior else None, int(number))
    except ValueError:
        return None


class _Reader:
    """Walks a file once, block by gap, and builds its processes from the
    records the caches hand back."""

    def __init__(self, facts: Facts, display: str):
        self.facts = facts
        self.display = display
        self.done: list[_Process] = []
        self.process = _Process()
        self.thread: _Thread | None = None

    def read(self, data: bytes) -> None:
        pos, line_no, size = 0, 1, len(data)
        segment = _SEGMENT.match
        while pos < size:
            match = segment(data, pos)
            if match is None:
                end = data.find(b"\n", pos)
                end = size if end < 0 else end
                self.facts.diag(line_no, f"line longer than {MAX_LINE // 1024} KiB: skipped")
                pos, line_no = end + 1, line_no + 1
                continue
            chunk = match.group()
            if match.lastgroup == "block":
                self._on_block(chunk, line_no)
            else:
                self._on_gap(chunk, line_no)
            line_no += chunk.count(b"\n")
            pos = match.end()
        self._finish(cut=not data.endswith(b"\n"))

    def _on_block(self, chunk: bytes, line_no: int) -> None:
        block = _block(_mask(chunk))
        if block.problems:
            lines = chunk.split(b"\n")
            for offset, reason in block.problems:
                text = _text(lines[offset - 1]).strip()
                self.facts.diag(line_no + offset - 1, f"{reason}: {text[:160]}")
        thread = self.thread
        if thread is None:
            if not block.frames:
                return
            # Frames without a thread header: a plain `bt`, or a garbled header.
            first = _text(chunk.split(b"\n", 1)[0]).strip()
            thread = self.thread = _Thread("", "", line_no, first, None, None)
            self.process.threads.append(thread)
            shift = -1
        else:
            shift = line_no - thread.line - 1
        thread.body = True
        if shift == 0 and not thread.frames:
            thread.frames = block.frames
        else:
            thread.frames += tuple(Frame(f.function, f.file, f.line, f.library, f.native,
                                         f.at + shift, f.locals) for f in block.frames)

    def _on_gap(self, gap: bytes, line_no: int) -> None:
        lines = None
        for offset, record in _gap(_mask(gap)):
            if record is _BLANK:
                self.thread = None
                continue
            if lines is None:
                lines = gap.split(b"\n")
            text = _text(lines[offset]).strip()
            # A header's own number comes first (its name follows); an attach
            # line's pid comes last (the program path precedes it).
            numbers = _TARGET_NUMBER.findall(text)
            number = int(numbers[0 if record.kind == "header" else -1]) if numbers else None
            self._on_record(record, number, line_no + offset, text)

    def _on_record(self, record: _Record, number: int | None, line_no: int, text: str) -> None:
        kind = record.kind
        if kind == "header":
            self._on_header(record.value, number, text, line_no)
        elif kind == "attach":
            self._boundary(reset=True)
            if number is not None:
                self.process.claim_pid(number, line_no, text)
            self.process.command = _unmasked(record.value, text, "program: ", ", process ")
        elif kind == "end":
            self._on_end(record.value, number, line_no, text)
        elif kind == "banner":
            self._boundary(reset=True)
        elif kind == "prompt" and record.value:
            self._boundary()
        elif kind == "prompt":
            return
        elif kind == "error":
            self.facts.diag(line_no, f"gdb: {text[:200]}", "info")
        elif kind == "frame":
            self.facts.diag(line_no, f"frame outside a thread: {text[:160]}")
        else:
            self.facts.diag(line_no, f"unrecognized line: {text[:160]}")

    def _on_header(self, value, number: int | None, text: str, line_no: int) -> None:
        gid, target, name = value
        name = _unmasked(name, text, '"', '"')
        order = _order(gid)
        if order is not None and not self.process.follows(order):
            self._boundary()
        process = self.process
        if order is not None and process.inferior is None:
            process.inferior = order[0]
        lwp = str(number) if target == "lwp" and number is not None else None
        if target == "process" and number is not None:
            process.claim_pid(number, line_no, text)
        self.thread = _Thread(lwp or gid, name, line_no, text, order, lwp)
        process.threads.append(self.thread)

    def _on_end(self, inferior: int, pid: int | None, line_no: int, text: str) -> None:
        """`[Inferior N (process P) detached]`: the pid of inferior N's dump,
        which ends here if it is the current one."""
        self.thread = None
        current = self.process
        if pid is None:
            return
        if current.threads and current.inferior in (None, inferior):
            current.claim_pid(pid, line_no, text)
            current.ended = True
            self._boundary()
            return
        for process in reversed(self.done):  # several inferiors detach one after another
            if process.inferior == inferior and process.pid is None:
                process.claim_pid(pid, line_no, text)
                break
        if not current.threads:
            self.process = _Process()

    def _boundary(self, reset: bool = False) -> None:
        """End the current dump. `reset` also forgets what was said about the
        next one (a new gdb session or attach starts from nothing)."""
        self.thread = None
        if self.process.threads:
            self.done.append(self.process)
            self.process = _Process()
        elif reset:
            self.process = _Process()

    def _finish(self, cut: bool) -> None:
        """Emit the processes. Only the last can be cut short: it is when the
        file stops mid-line inside a thread, on a header with nothing after
        it, or before a descending dump reached thread 1. `Backtrace
        stopped:` is how gdb ends a stack it cannot unwind further, not a cut."""
        last, open_thread = self.process, self.thread
        if last.threads:
            self.done.append(last)
        for process in self.done:
            truncated = False
            if process is last and not process.ended:
                final = process.threads[-1]
                truncated = ((cut and open_thread is final)
                             or not final.body
                             or (process.descending is True and final.order is not None
                                 and final.order[1] > 1))
            self.facts.processes.append(process.dump(self.display, truncated))
