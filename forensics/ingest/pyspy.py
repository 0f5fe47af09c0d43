"""`py-spy dump` output: text (plain, `--native`, `--locals`, `--subprocesses`) and `--json`.

Text (benfred/py-spy `src/dump.rs`):

    Process 19682: /opt/venv/bin/python -u train.py
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 19682 (idle): "MainThread"
        send (torch/distributed/distributed_c10d.py:2753)
            Arguments:
                dst: 1
        pthread_cond_wait (libc.so.6)                  # --native
        0x7fae6bea3f16 (libc.so.6)                     # --native, unsymbolized

Every line goes through the lark grammar `grammars/pyspy.lark` on its own, so
a garbled line is one diagnostic and the rest of the dump still counts.

Ten thousand ranks of one job print the same stacks with different pids,
tids and addresses. So the reader cuts the dump into thread blocks (a
`Thread` header and the indented lines under it), masks every hex address and
id to a NUL, and parses each distinct masked block once (`_BLOCKS`); lines are
cached the same way (`_LINES`) so a block that differs from a known one in a
single local value costs one lark parse. The masked values are put back, in
text order, from the block's own text: nothing one file says leaks into
another's result.

`--json` has no header and no line structure worth a grammar; it is decoded
by the C scanner, walking only the two levels whose lines we cite.

What the text cannot tell, and what we assume:
- `--subprocesses` prints each child (after a `-----` rule) from inside its
  loop over the parent's threads, so parent threads printed after a child
  look exactly like the child's: threads go to the latest `Process` header.
- A line-less `name (location)` is a native frame when the location names a
  binary (`libc.so.6`, `python3.12`, `?`), else a Python frame with line 0.
- A JSON thread without an OS tid is named `0x<thread_id in hex>`, as the
  text dump prints it.
"""

from __future__ import annotations

import threading
from json.decoder import JSONDecodeError

from .. import lazy
from ..model import Evidence, Frame, ProcessDump, ThreadStack
from . import jsonwalk
from .attribution import GROUP_LOCAL, announced_dump, dump_console_statements, process_identity
from .facts import Facts
from .grammar import parser
from .textio import ANSI_COLOUR, InputError, has_nul, read_text, uncoloured
from .workers import SharedTuple

KIND = "py-spy"
KIND_JSON = "py-spy-json"

MAX_LINE = 64 * 1024          # longer lines are skipped with a diagnostic
MAX_LINE_DIAGNOSTICS = 200    # then one summary: a binary file must not make 10^5 warnings
# The caches forget everything when full: simpler than LRU, and a run that
# fills them (hundreds of thousands of distinct stacks) gains little from them.
_BLOCK_CACHE_CHARS = 32 * 1024 * 1024
_LINE_CACHE_CHARS = 16 * 1024 * 1024

_MASK = "\x00"                # a masked address or id; NUL never survives _clean()
_SKIPPED = "\x01"             # stands for a line too long to keep; likewise removed by _clean()
# Hex addresses anywhere (group kept: re.split returns the values between
# the text around them). Header ids are masked by `_mask`, not here: a
# lookbehind alternative would make the scan twenty times slower.
_ADDRESS = lazy.regex(r"(0[xX][0-9a-fA-F]+)")
_HEADER_ID = lazy.regex(r"(?:Thread|Process|Parent Process) (0[xX][0-9a-fA-F]+|[0-9]+)")
# Every alternative of the grammar starts with one of these: a line that
# starts with none of them is unrecognized without asking lark (binary junk
# would otherwise cost a parse per line).
_GRAMMAR_PREFIXES = ("Process ", "Parent Process ", "Python v", "Thread ", "    ", "---", "\u2500\u2500\u2500")
_PROCESS_PREFIXES = ("Process ", "Parent Process ", "Python v")
_RULE_PREFIXES = ("---", "\u2500\u2500\u2500")

# What a line-less `(location)` of a --native frame looks like: a shared
# object, an executable (a static `python3.12`), `?` or `[vdso]`; never a .py.
_NATIVE_MODULE = lazy.regex(
    r"(?!.*\.py[cdiwx]?$)"
    r"(?:\?|\[.*\]|(?:.*/)?(?:lib[^/]*|[^/]*\.(?:so(?:\.[\w.]+)?|dylib|dll|pyd|exe)|python[\d.]*[a-z]?))")
_NATIVE_SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".cu",
                           ".cuh", ".inl", ".ipp", ".tcc", ".rs", ".s", ".S", ".go", ".f90")
_RANK_NAMES = ("rank", "global_rank", "RANK")
_RANK_VALUE = lazy.regex(r'-?[0-9]{1,9}|"-?[0-9]{1,9}"|\'-?[0-9]{1,9}\'')

# ------------------------------------------------------------------ sniffing

_SNIFF_PROCESS = lazy.regex(rb"(?m)^[ \t]*Process \d+: [^\n]*\r?\n[ \t]*Python v")
_SNIFF_THREAD = lazy.regex(rb"(?m)^[ \t]*Thread (?:0[xX][0-9a-fA-F]+|\d+) \((?:idle|active|active\+gil)\)")
_SNIFF_JSON_START = lazy.regex(rb"\[\s*\{")
_SNIFF_JSON_KEY = lazy.regex(rb'"(thread_id|frames|owns_gil|os_thread_id|short_filename)"\s*:')


def sniff(path: str, head: bytes) -> str | None:
    """The kind of a py-spy dump, judged by content; None for anything else.

    Text must hold, at the start of a line, `Process N: ...` + `Python v...`,
    or a `Thread N (idle|active|active+gil)` line when the header was lost. gdb's
    `Thread 2 (Thread 0x7f... (LWP 12))` never matches that. JSON must be a list
    of objects carrying py-spy's own keys: Flight Recorder dumps and our
    snapshots are objects, and FR entries have thread_id and frames but not
    owns_gil / os_thread_id / short_filename.
    """
    # Only a NUL rules a file out here: the patterns below are stricter than
    # the control-byte count of textio.looks_binary, which is not needed.
    if not head or has_nul(head):
        return None
    text = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    if b"\x1b" in text[:4096]:
        text = ANSI_COLOUR.sub(b"", text)
    text = text.lstrip()
    if _SNIFF_JSON_START.match(text):  # a JSON list; gdb's "[New LWP 12]" lines are text
        keys = set(_SNIFF_JSON_KEY.findall(text))
        if b"thread_id" in keys and b"frames" in keys and keys & {b"owns_gil", b"os_thread_id",
                                                                  b"short_filename"}:
            return KIND_JSON
        return None
    if b"Python v" in text and _SNIFF_PROCESS.search(text) or b"Thread " in text and _SNIFF_THREAD.search(text):
        return KIND  # wherever the dump starts: pasted into a console log after hours of output
    return None


# A file that is one text dump and nothing else (`wholedump`): every line of
# one of the dump's own shapes, quotes only around a thread's name.
_WHOLE_DUMP_BAD_LINE = lazy.regex(
    rb"(?m)^(?!(?:"
    rb"Process \d+: [^\n\"]*"
    rb"|Python v[^\s(\"][^\n\"]*"
    rb"|Thread (?:0[xX][0-9a-fA-F]+|\d+) \((?:idle|active|active\+gil)\)(?:: \"[^\n\"]*\")?"
    rb"|    [^\s\"][^\n\"]*\)"
    rb"|)$)[^\n]*")


def whole_dump(data: bytes) -> bool:
    """Whether `data`, a whole file without NUL, CR or escape bytes, is one
    py-spy text dump: its header first, then only thread, frame and blank lines."""
    return (data.startswith(b"Process ") and b"\nPython v" in data[:4096]
            and _WHOLE_DUMP_BAD_LINE.search(data) is None)


# ------------------------------------------------------------------ lines

class _LineTransformer:
    """One grammar line → a plain tuple `(kind, *fields)` of str/int/bool.

    Fields keep their masked NULs; `_fill` puts the real values back.
    """

    def process_line(self, pid, text=None):
        return ("process", str(pid), _value(text))

    def parent_line(self, pid, text=None):
        return ("parent", str(pid), _value(text))

    def python_line(self, version, text=None):
        exe = str(text or "").strip()
        if exe.startswith("(") and exe.endswith(")"):
            exe = exe[1:-1]
        return ("python", str(version), exe)

    def thread_line(self, tid, *rest):
        status, name = "", ""
        for token in rest:
            if token.type == "STATUS":
                status = str(token).strip()[1:-1]
            else:
                name = str(token).strip()
                if len(name) >= 2 and name[0] == name[-1] == '"':
                    name = name[1:-1]
        return ("thread", str(tid), status, name)

    def frame_line(self, call):
        split = _split_call(str(call).rstrip())
        if split is None:
            return ("error",)
        return ("frame",) + _frame_fields(*split)

    def section_line(self, section):
        return ("section", str(section).startswith("Arguments"))

    def variable_line(self, name, text=None):
        return ("var", str(name), _value(text))

    def rule_line(self, rule):
        return ("rule",)


def _value(token) -> str:
    """py-spy prints `{name}: {value}`: drop exactly the one separating space."""
    text = str(token) if token is not None else ""
    return text[1:] if text.startswith(" ") else text


def _split_call(text: str) -> tuple[str, str] | None:
    """`name (location)` → (name, location), the location being the LAST
    balanced parenthesized group. Done here, not in the grammar: C++ names
    hold their own balanced groups (`{lambda(c10d::Work*)#1}::_FUN`,
    `operator()`), which no regular terminal can skip."""
    if not text.endswith(")"):
        return None
    open_at = text.rfind("(")
    if ")" in text[open_at + 1:-1]:  # the location itself holds parentheses: balance them
        depth = 0
        for open_at in range(len(text) - 1, -1, -1):
            char = text[open_at]
            if char == ")":
                depth += 1
            elif char == "(":
                depth -= 1
                if depth == 0:
                    break
        else:
            return None
    name = text[:open_at].rstrip()
    if open_at <= 0 or not name:
        return None
    return name, text[open_at + 1:-1]


def _frame_fields(name: str, location: str) -> tuple:
    """(function, file, line, library, native) from py-spy's `name (location)`.

    Python frames print `(file:line)`, or `(file)` when the line is 0.
    `--native` frames print `(module)` (`libc.so.6`, `python3.11`), `(?)` for
    an unknown module, or `(source.cpp:line)` when debug info had one. A frame
    is native when its name is an address or C++ (`::`), its source is C-like,
    or its line-less location names a binary rather than a Python file.
    """
    path, colon, number = location.rpartition(":")
    cxx = name.startswith((_MASK, "0x", "0X")) or "::" in name
    if colon and path and number.isdigit() and number.isascii() and len(number) <= 9:
        return (name, path, int(number), "", cxx or path.endswith(_NATIVE_SOURCE_SUFFIXES))
    if cxx or _NATIVE_MODULE.fullmatch(location):
        return (name, "", 0, location, True)
    return (name, location, 0, "", False)


_LINES: dict[str, tuple] = {}
_line_chars = 0
_JUNK = ("junk",)
_LONG = ("long",)
_BLANK = ("blank",)
_lock = threading.Lock()


def _parse_line(masked: str) -> tuple:
    """The cached grammar result for one masked line."""
    global _line_chars
    parsed = _LINES.get(masked)
    if parsed is not None:
        return parsed
    if masked == _SKIPPED:
        return _LONG
    if not masked or masked.isspace():
        return _BLANK
    if not masked.startswith(_GRAMMAR_PREFIXES):
        return _JUNK
    try:
        parsed = parser("pyspy", "start", _LineTransformer, inline=True).parse(masked)
    except lazy.lark.exceptions.LarkError:
        parsed = ("error",)
    with _lock:
        if _line_chars + len(masked) > _LINE_CACHE_CHARS:
            _LINES.clear()
            _line_chars = 0
        _LINES[masked] = parsed
        _line_chars += len(masked)
    return parsed


# ------------------------------------------------------------------ thread blocks

class _Block:
    """A parsed, masked thread block: shared by every dump that prints it.

    `frames` carry `at` relative to the block's first line (the header).
    Frames whose text held a masked value are listed in `refill` as (index,
    recipe): the frame's fields with each mask replaced by the index of the
    dump value that belongs there (`_recipe`), so that every dump gets its own
    addresses back. `rank` is the block's own rank hint.
    """

    __slots__ = ("header", "header_masks", "tid", "name", "status", "frames", "refill",
                 "problems", "rank", "size")

    def __init__(self, masked: str):
        lines = masked.split("\n")
        self.size = len(masked)
        self.header = lines[0].startswith("Thread ")
        self.header_masks = lines[0].count(_MASK) if self.header else 0
        self.tid, self.name, self.status = "", "", ""
        problems: list[tuple[int, str]] = []
        start = 0
        if self.header:
            start = 1
            parsed = _parse_line(lines[0])
            if parsed[0] == "thread":
                _, self.tid, self.status, self.name = parsed
            else:
                problems.append((0, "unrecognized"))
        raw: list[list] = []   # [function, file, line, library, native, at, items]
        slots: list[list[int]] = []  # per frame: which masked values (indices) are its own
        items = None
        is_arg = False
        seen = self.header_masks  # masked values in the lines before this one
        for offset in range(start, len(lines)):
            line = lines[offset]
            masks = line.count(_MASK)
            own = range(seen, seen + masks)
            seen += masks
            parsed = _parse_line(line)
            kind = parsed[0]
            if kind == "frame":
                items = []
                is_arg = False
                raw.append([*parsed[1:], offset, items])
                slots.append(list(own))
            elif kind == "section":
                if items is None:
                    problems.append((offset, "outside"))
                is_arg = parsed[1]
            elif kind == "var":
                if items is None:
                    problems.append((offset, "outside"))
                else:
                    items.append((is_arg, parsed[1], parsed[2]))
                    slots[-1].extend(own)
            elif kind not in ("blank", "long"):
                problems.append((offset, "unrecognized"))
        self.problems = tuple(problems)
        frames, refill = [], []
        for index, parts in enumerate(raw):
            frames.append(_build_frame(parts))
            if slots[index]:
                refill.append((index, _frame_recipe(parts, iter(slots[index]))))
        # one object for every dump that shows this block: a worker sends it to the parent once
        self.frames = SharedTuple(frames)
        self.refill = tuple(refill)
        self.rank = _rank_in_frames(reversed(self.frames))

    def frames_for(self, values: list[str]) -> tuple[Frame, ...]:
        """This block's frames with one dump's masked values put back."""
        if not self.refill:
            return self.frames
        frames = list(self.frames)
        for index, (function, file, line, library, native, at, local_vars) in self.refill:
            frames[index] = Frame(
                _cook(function, values), _cook(file, values), line, _cook(library, values), native, at,
                tuple([pair if pair.__class__ is tuple else (_cook(pair[0], values), _cook(pair[1], values))
                       for pair in local_vars]))
        return tuple(frames)


def _build_frame(parts) -> Frame:
    function, file, line, library, native, at, items = parts
    return Frame(function, file, line, library, native, at, _arguments_first(items))


def _arguments_first(items) -> tuple:
    """(is_arg, name, value) in text order → (name, value) pairs, arguments first."""
    if not items:
        return ()
    return (tuple((name, value) for is_arg, name, value in items if is_arg)
            + tuple((name, value) for is_arg, name, value in items if not is_arg))


def _frame_recipe(parts, slots) -> tuple:
    """A frame's fields as `_recipe`s; `slots` yields its value indices in text order."""
    function, file, line, library, native, at, items = parts
    function, file, library = _recipe(function, slots), _recipe(file, slots), _recipe(library, slots)
    items = [(is_arg, _recipe(name, slots), _recipe(value, slots)) for is_arg, name, value in items]
    local_vars = tuple(pair if all(part.__class__ is str for part in pair) else list(pair)
                       for pair in _arguments_first(items))
    return (function, file, line, library, native, at, local_vars)


def _recipe(text: str, slots):
    """`text` unchanged when it holds no mask; else a list of its pieces with
    each mask replaced by the index of the dump value that fills it."""
    if _MASK not in text:
        return text
    pieces = text.split(_MASK)
    recipe = [pieces[0]]
    for piece in pieces[1:]:
        recipe.append(next(slots))
        recipe.append(piece)
    return [part for part in recipe if part != ""]


def _cook(recipe, values: list[str]) -> str:
    if recipe.__class__ is str:
        return recipe
    return "".join([values[part] if part.__class__ is int else part for part in recipe])


def _fill(text: str, values) -> str:
    """Put the next masked values (an iterator over the dump's own) back into `text`."""
    if _MASK not in text:
        return text
    pieces = text.split(_MASK)
    out = [pieces[0]]
    for piece in pieces[1:]:
        out.append(next(values, "?"))
        out.append(piece)
    return "".join(out)


def _mask(text: str) -> tuple[str, list[str]]:
    """(text with its header id and hex addresses masked, the masked values in order)."""
    values: list[str] = []
    head = _HEADER_ID.match(text)
    if head is not None:
        values.append(head.group(1))
        text = text[:head.start(1)] + _MASK + text[head.end(1):]
    if "0x" in text or "0X" in text:
        pieces = _ADDRESS.split(text)
        values.extend(pieces[1::2])
        text = _MASK.join(pieces[0::2])
    return text, values


_BLOCKS: dict[str, _Block] = {}
_block_chars = 0


def _block(masked: str) -> _Block:
    global _block_chars
    block = _BLOCKS.get(masked)
    if block is not None:
        return block
    block = _Block(masked)
    with _lock:
        if _block_chars + block.size > _BLOCK_CACHE_CHARS:
            _BLOCKS.clear()
            _block_chars = 0
        _BLOCKS[masked] = block
        _block_chars += block.size
    return block


def clear_caches() -> None:
    """Forget every parsed line and block (tests; memory-conscious callers)."""
    global _block_chars, _line_chars
    with _lock:
        _BLOCKS.clear()
        _LINES.clear()
        _block_chars = _line_chars = 0


# ------------------------------------------------------------------ text dumps

def parse(path: str, display: str) -> Facts:
    """Read a py-spy text dump: one ProcessDump per `Process` header."""
    text = _clean(read_text(path))
    if not text.strip():
        raise InputError(display, "empty file")
    return _TextReader(text, display).read()


def _clean(text: str) -> str:
    """Strip what py-spy adds on a terminal (colours) and what editors add (BOM,
    CRLF); NUL and \\x01 are ours (mask, skipped line), so the input loses them."""
    if text.startswith("\ufeff"):
        text = text[1:]
    text = uncoloured(text)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if _MASK in text or _SKIPPED in text:
        text = text.replace(_MASK, "\ufffd").replace(_SKIPPED, "\ufffd")
    return text


# A newline followed by a line that is not indented: headers, blanks, junk.
# Indented lines (the bulk of a dump) are never visited one by one here.
_BOUNDARY = lazy.regex(r"\n(?!    )")


class _Process:
    __slots__ = ("pid", "command", "python", "evidence", "threads", "ranks")

    def __init__(self, pid, command, evidence):
        self.pid, self.command, self.python, self.evidence = pid, command, "", evidence
        self.threads: list[ThreadStack] = []
        self.ranks: list[int | None] = []


class _TextReader:
    """One pass over the dump's unindented lines (headers); the indented
    lines between them are sliced out whole as thread blocks."""

    def __init__(self, text: str, display: str):
        self.display = display
        self.facts = Facts(KIND, display)
        if text.endswith("\n"):
            text = text[:-1]
        self.text = self._drop_long_lines(text)
        self.processes: list[_Process] = []
        self.current: _Process | None = None
        self.unrecognized = 0
        self.last_bad = 0
        self.memo: dict = {}   # (block, values) → frames, for threads repeated within this dump
        self.announced = None  # (pid, identity, line) of the last SGLang line announcing a dump of its own process

    def _drop_long_lines(self, text: str) -> str:
        if len(text) <= MAX_LINE:
            return text
        lines = text.split("\n")
        if max(map(len, lines)) <= MAX_LINE:
            return text
        for index, line in enumerate(lines):
            if len(line) > MAX_LINE:
                self.facts.diag(index + 1, f"line of {len(line):,} characters skipped "
                                           f"(longer than {MAX_LINE:,})")
                lines[index] = _SKIPPED
        return "\n".join(lines)

    def read(self) -> Facts:
        text = self.text
        starts = [] if text.startswith("    ") else [0]
        starts += [match.end() for match in _BOUNDARY.finditer(text)]
        counted, line_no = 0, 1   # line_no is the line at offset `counted`
        block = -1                # offset of the open block's first line, -1 when none
        block_line = 0            # its line number
        block_end = 0             # one past its last non-blank character
        region = 0                # where the indented run after the last boundary line begins
        for start in starts:
            if start > region:  # indented lines since the last boundary
                if block < 0:
                    line_no += text.count("\n", counted, region)
                    counted = block = region
                    block_line = line_no
                block_end = start - 1
            end = text.find("\n", start)
            if end < 0:
                end = len(text)
            line = text[start:end]
            region = end + 1
            if line.startswith("Thread "):
                if block >= 0:
                    self._thread(block, block_line, block_end)
                line_no += text.count("\n", counted, start)
                counted = block = start
                block_line, block_end = line_no, end
            elif not line or line.isspace():
                continue
            elif line == _SKIPPED:
                if block >= 0:
                    block_end = end
            elif block >= 0 and not line.startswith(_PROCESS_PREFIXES + _RULE_PREFIXES):
                block_end = end  # junk inside a block: diagnosed there, the block goes on
            else:
                if block >= 0:
                    self._thread(block, block_line, block_end)
                    block = -1
                line_no += text.count("\n", counted, start)
                counted = start
                if line.startswith(_PROCESS_PREFIXES + _RULE_PREFIXES):
                    self._process_line(line_no, line)
                else:
                    self._unrecognized(line_no, line)
        if region < len(text):
            if block < 0:
                block, block_line = region, line_no + text.count("\n", counted, region)
            block_end = len(text)
        if block >= 0:
            self._thread(block, block_line, block_end)
        return self._finish(text.count("\n") + 1)

    # -- process-level lines

    def _process_line(self, line_no: int, line: str) -> None:
        masked, values = _mask(line)
        parsed = _parse_line(masked)
        values = iter(values)
        kind = parsed[0]
        if kind == "process":
            pid = _fill(parsed[1], values)
            number = int(pid) if pid.isdigit() and pid.isascii() and len(pid) <= 12 else None
            self.current = _Process(number, _fill(parsed[2], values),
                                    Evidence(self.display, line_no, line.strip()))
            self.processes.append(self.current)
            self._check_announced(line_no, number, self.current.command)
        elif kind == "python":
            self._process(line_no, line).python = _fill(parsed[1], values)
        elif kind not in ("parent", "rule"):  # a child's parent, the rule between processes
            self._unrecognized(line_no, line)

    def _process(self, line_no: int, line: str) -> _Process:
        """The process lines belong to; a header-less one when the dump lost its header."""
        if self.current is None:
            self.current = _Process(None, "", Evidence(self.display, line_no, line.strip()[:200]))
            self.processes.append(self.current)
            self.facts.diag(line_no, "no `Process <pid>:` header before this line: pid unknown", "info")
        return self.current

    # -- thread blocks

    def _thread(self, position: int, line_no: int, end: int) -> None:
        text = self.text[position:end]
        masked, values = _mask(text)
        block = _BLOCKS.get(masked) or _block(masked)
        newline = text.find("\n")
        header = text if newline < 0 else text[:newline]
        if not block.header:
            tid, name = "", ""
            self.facts.diag(line_no, "frames without a `Thread` header: read as an unnamed thread")
        elif block.header_masks == 1 and block.tid == _MASK:  # the usual header: only the tid masked
            tid, name = values[0], block.name
        else:
            head = iter(values[:block.header_masks])
            tid, name = _fill(block.tid, head), _fill(block.name, head)
        frames = block.frames
        if block.refill:
            key = (block, tuple(values[block.header_masks:]))
            frames = self.memo.get(key)
            if frames is None:
                frames = self.memo[key] = block.frames_for(values)
        if block.problems:
            lines = text.split("\n")
            for offset, problem in block.problems:
                if problem == "outside":
                    self.facts.diag(line_no + offset, "Arguments/Locals outside a frame: ignored")
                else:
                    self._unrecognized(line_no + offset, lines[offset])
        status = block.status
        process = self.current or self._process(line_no, header)
        process.threads.append(ThreadStack(
            tid, name, None if not status else status != "idle", frames,
            Evidence(self.display, line_no, header.strip()), status))
        process.ranks.append(block.rank)

    def _check_announced(self, line_no: int, pid: int | None, command: str) -> None:
        """A dump SGLang's scheduler announced as its own (`[... TP1] Pyspy
        dump for PID N:`) is that TP rank's process; its title says the same
        (both come from one prefix), and a diagnostic says where they differ."""
        announced, self.announced = self.announced, None
        if announced is None or announced[0] != pid:
            return
        said = announced[1]
        title = process_identity(command)
        if title is None or title.scope != GROUP_LOCAL or title.rank != said.rank:
            self.facts.diag(line_no, f"line {announced[2]} announces this dump as the process of tensor-parallel "
                                     f"rank {said.rank} ({said.said}), but its title ({command.strip()[:80]}) does "
                                     f"not say so: the title is what the rank is taken from", "info")

    def _unrecognized(self, line_no: int, line: str) -> None:
        said = dump_console_statements(line, Evidence(self.display, line_no, line.strip()[:2000]))
        if said:  # a line of the console the dumps were printed into that the catalogue knows
            self.facts.messages.extend(said)
            return
        announced = announced_dump(line)
        if announced is not None:
            self.announced = (*announced, line_no)
            return
        if self.current is None:
            return  # before the first dump: the lines of the console the dump was pasted into
        self.unrecognized += 1
        self.last_bad = line_no
        if self.unrecognized <= MAX_LINE_DIAGNOSTICS:
            self.facts.diag(line_no, f"unrecognized line: {_show(line)}")

    def _finish(self, last_line: int) -> Facts:
        facts = self.facts
        if self.unrecognized > MAX_LINE_DIAGNOSTICS:
            facts.diag(self.last_bad, f"{self.unrecognized - MAX_LINE_DIAGNOSTICS:,} more "
                                      "unrecognized lines not listed")
        for process in self.processes:
            truncated = process is self.processes[-1] and self.last_bad == last_line
            facts.processes.append(ProcessDump(
                source=KIND, path=self.display, pid=process.pid, command=process.command,
                python=process.python, threads=tuple(process.threads), evidence=process.evidence,
                rank_hint=_rank_hint(process.threads, process.pid, process.ranks),
                truncated=truncated))
        if not facts.processes:
            facts.diag(1, "no py-spy process or thread found")
        return facts


def _show(line: str) -> str:
    line = line.strip()
    return repr(line if len(line) <= 120 else line[:117] + "...")


# ------------------------------------------------------------------ rank hint

def _rank_in_frames(frames) -> int | None:
    """The first `rank`/`global_rank`/`RANK` local holding an integer."""
    for frame in frames:
        for name, value in frame.locals:
            if name in _RANK_NAMES and _RANK_VALUE.fullmatch(value.strip()):
                return int(value.strip().strip("\"'"))
    return None


def _rank_hint(threads, pid, ranks=None) -> int | None:
    """The rank the dump states itself: the main thread first, outermost frame
    first (a job's own `rank` lives near `main`), then the other threads in
    order. `ranks` holds each thread's own hint when already known."""
    if not threads:
        return None
    if ranks is None:
        ranks = [_rank_in_frames(reversed(t.frames)) if any(f.locals for f in t.frames) else None
                 for t in threads]
    main = next((i for i, t in enumerate(threads) if t.name == "MainThread"), None)
    if main is None and pid is not None:
        main = next((i for i, t in enumerate(threads) if t.tid == str(pid)), None)
    main = main or 0
    if ranks[main] is not None:
        return ranks[main]
    return next((rank for rank in ranks if rank is not None), None)


# ------------------------------------------------------------------ JSON dumps


def parse_json(path: str, display: str) -> Facts:
    """Read `py-spy dump --json`: a list of thread objects, grouped by pid.

    Each thread cites the line where its object opens (serde_json pretty
    prints one object per line run); frames cite theirs as offsets from it.
    Several lists one after another (concatenated dumps) are all read, each
    list's processes apart from the next one's.
    """
    text = read_text(path)
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise InputError(display, "empty file")
    start = jsonwalk.skip_ws(text, 0)
    if text[start] != "[":
        raise InputError(display, "not a py-spy --json dump: expected a list of threads",
                         text.count("\n", 0, start) + 1)
    try:
        threads = _json_threads(text)
    except JSONDecodeError as exc:
        raise InputError(display, f"invalid JSON: {exc.msg}", exc.lineno) from None
    except RecursionError:
        raise InputError(display, "invalid JSON: nested too deeply") from None
    facts = Facts(KIND_JSON, display)
    by_pid: dict = {}
    for dump, raw, line, frame_lines in threads:
        thread = _json_thread(raw, line, frame_lines, display, facts)
        if thread is None:
            continue
        pid = raw.get("pid")
        pid = pid if _is_int(pid) else None
        entry = by_pid.get((dump, pid))
        if entry is None:
            info = raw.get("process_info")
            command = info.get("command_line") if isinstance(info, dict) else None
            entry = by_pid[dump, pid] = {"line": line, "threads": [],
                                         "command": command if isinstance(command, str) else ""}
        entry["threads"].append(thread)
    for (_, pid), entry in by_pid.items():
        facts.processes.append(ProcessDump(
            source=KIND_JSON, path=display, pid=pid, command=entry["command"],
            threads=tuple(entry["threads"]),
            evidence=Evidence(display, entry["line"], f"pid {pid}" if pid is not None else "pid unknown"),
            rank_hint=_rank_hint(entry["threads"], pid)))
    if not facts.processes:
        facts.diag(1, "no py-spy thread objects in the JSON dump")
    return facts


def _json_thread(raw, line, frame_lines, display, facts) -> ThreadStack | None:
    if not isinstance(raw, dict) or not ("thread_id" in raw or "os_thread_id" in raw):
        facts.diag(line, "not a py-spy thread object (needs thread_id and frames): ignored")
        return None
    os_tid, tid = raw.get("os_thread_id"), raw.get("thread_id")
    if _is_int(os_tid):
        tid_text = str(os_tid)
    elif _is_int(tid):
        tid_text = f"0x{tid:X}"  # what the text dump prints without an OS tid
    else:
        tid_text = str(tid or os_tid or "")
    name = raw.get("thread_name")
    name = name if isinstance(name, str) else ""
    active, owns_gil = raw.get("active"), raw.get("owns_gil")
    if isinstance(active, bool):
        status = "idle" if not active else ("active+gil" if owns_gil is True else "active")
    else:
        active, status = None, ""
    frames = []
    raw_frames = raw.get("frames")
    if not isinstance(raw_frames, list):
        facts.diag(line, f"thread {tid_text}: frames must be a list: none read")
        raw_frames = []
    for index, item in enumerate(raw_frames):
        at = frame_lines[index] - line if index < len(frame_lines) else 0
        frame = _json_frame(item, at)
        if frame is None:
            facts.diag(line + at, f"thread {tid_text}: frame {index} is not a frame object: ignored")
            continue
        frames.append(frame)
    label = f'Thread {tid_text}' + (f' ({status})' if status else '') + (f': "{name}"' if name else '')
    return ThreadStack(tid_text, name, active, tuple(frames), Evidence(display, line, label), status)


def _json_frame(item, at: int) -> Frame | None:
    if not isinstance(item, dict):
        return None
    name = _text(item.get("name"))
    filename = _text(item.get("filename"))
    short = _text(item.get("short_filename"))
    module = _text(item.get("module"))
    line = item.get("line")
    line = line if _is_int(line) and line > 0 else 0
    if module or name.startswith(("0x", "0X")) or filename == "?":
        # --native: `module` is the shared object; `filename` is the module
        # again, "?" when unknown, or a source file when debug info had one.
        library = module.rsplit("/", 1)[-1] if module else "?"
        has_source = filename not in ("", "?", module)
        file = (short or filename) if has_source else ""
        return Frame(name, file, line if file else 0, library, True, at)
    local_vars = item.get("locals")
    pairs = ()
    if isinstance(local_vars, list):
        args = [v for v in local_vars if isinstance(v, dict) and v.get("arg") is True]
        rest = [v for v in local_vars if isinstance(v, dict) and v.get("arg") is not True]
        pairs = tuple((_text(v.get("name")), v["repr"] if isinstance(v.get("repr"), str) else "?")
                      for v in args + rest)
    return Frame(name, short or filename, line, "", False, at, pairs)


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_threads(text: str) -> list[tuple[int, object, int, list[int]]]:
    """(which list, thread object, line of its `{`, lines of its frames' `{`)
    for every element of every top-level list. Values are decoded by the C scanner;
    only the list, the thread objects and their `frames` lists are walked."""
    line_of = jsonwalk.LineCounter(text)

    def thread(t, p):
        if t[p:p + 1] != "{":
            return jsonwalk.decode_at(t, p)
        values, _, end = jsonwalk.walk_object(t, p, {"frames": _frames_with_starts})
        return values, end

    out = []
    pos = jsonwalk.skip_ws(text, 0)
    dump = -1
    while pos < len(text):
        dump += 1
        if text[pos] != "[":
            raise JSONDecodeError("extra data after the list of threads", text, pos)
        items, starts, pos = jsonwalk.walk_array(text, pos, thread)
        for value, start in zip(items, starts):
            offsets = []
            if isinstance(value, dict) and isinstance(value.get("frames"), tuple):
                value["frames"], offsets = value["frames"]
            line = line_of(start)
            out.append((dump, value, line, [line_of(o) for o in offsets]))
        pos = jsonwalk.skip_ws(text, pos)
    return out


def _frames_with_starts(text: str, pos: int):
    """A thread's `frames` list as ((frames, offset of each), end)."""
    if text[pos:pos + 1] != "[":
        return jsonwalk.decode_at(text, pos)
    items, starts, end = jsonwalk.walk_array(text, pos)
    return (items, starts), end


# ------------------------------------------------------------------ plugin hooks

from .reader import markers_hook, reader_hooks  # noqa: E402  (hooks last: the module reads top-down)


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display),
     KIND_JSON: lambda artifact: parse_json(artifact.path, artifact.display)},
    sniff)
forensics_sniff_markers = markers_hook((b"Python v", b" (active", b" (idle)"))
