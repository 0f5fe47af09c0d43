"""`pystack remote PID` and `pystack core FILE` text output (bloomberg/pystack).

pystack prints, per thread, most recent call LAST (src/pystack/traceback_formatter.py):

    Traceback for thread 13829 (python3.11) [] (most recent call last):
        (C) File "Modules/main.c", line 680, in Py_RunMain (libpython3.11.so.1.0)   # --native
        (Python) File "/srv/train/train.py", line 58, in sync_grads
            dist.all_reduce(p.grad, group=group)           # the source line, when pystack could read the file
          Arguments:                                       # --locals
            group: None
          Locals:
            p: <Parameter at 0x7f583ca0bf20>
        (C) File "???", line 0, in c10d::Work::wait(std::chrono::duration<...>) (/…/libtorch_cpu.so)

The status is `[Has the GIL]`, `[Waiting for the GIL]`, `[Garbage collecting]`,
`[Thread terminated]`, comma-joined, or `[]`; the name (the OS thread name) is
absent in some cores. With several interpreters a thread's status moves to
`  In interpreter 2 […]` lines. `--native-all` adds threads Python does not
know (`pt_gloo_runloop`, `gloo_tcp_loop`) with C frames only. `pystack core`
first prints what the core file says of its process:

    Using executable found in the core file: /opt/venv/bin/python3.11
    Core file information:
    state: R zombie: True niceness: 0
    pid: 13830 ppid: 13825 sid: 13830
    uid: 0 gid: 0 pgrp: 13830
    executable: python3.11 arguments: /opt/venv/bin/python3.11 -u train.py
    The process died due receiving signal SIGABRT

Each thread block goes through the lark grammar `grammars/pystack.lark`, one
block per parse; a line it rejects is one diagnostic and the block is parsed
again without it. Blocks are masked (hex addresses and the thread id become
NUL) so that ten thousand ranks' identical stacks cost one parse; the values
are put back from each block's own text.

What the text cannot tell, and what we assume:
- `pystack remote` prints no pid. On Linux a process's main thread has the
  pid as its thread id, and the main thread is the one whose outermost Python
  frame is `<module>`: when exactly one thread shows that, its tid is the pid.
- A core whose signal is SIGSTOP (`gcore`, a ptrace stop) or that pystack
  calls "generated on demand" is a snapshot of a live process, not its death;
  any other signal (SIGABRT, SIGSEGV, a segmentation fault line) ended it:
  the dump is `exited`, with that signal.
- Frames come innermost first, like every other dump; a C frame's `???` file
  is no file, and its library is kept as a base name (`libc.so.6`) whether
  pystack printed the path (remote) or not (core).
"""

from __future__ import annotations

import os
import re
import threading

from .. import lazy
from ..model import Evidence, Frame, ProcessDump, ThreadStack
from .cache import BoundedCache
from .facts import Facts
from .grammar import parser
from .pyspy import _rank_hint, _split_call
from .reader import markers_hook, reader_hooks
from .textio import InputError, head_shows, read_text, uncoloured

KIND = "pystack"
SOURCE = "pystack"

MAX_LINE = 64 * 1024          # longer lines are skipped with a diagnostic
MAX_LINE_DIAGNOSTICS = 200    # then one summary: garbage must not make 10^5 warnings
MAX_BAD_IN_BLOCK = 16         # lines dropped from one block before the rest of it is given up
_BLOCK_CACHE_CHARS = 32 * 1024 * 1024

_MASK = "\x00"
_ADDRESS = lazy.regex(r"0[xX][0-9a-fA-F]+")
_HEADER_TID = lazy.regex(r"(Traceback for thread )(\d+)")

# ------------------------------------------------------------------ sniffing

_SNIFF = lazy.regex(
    rb"^(?:Traceback for thread \d+ [^\n]*\(most recent call last\):"
    rb"|The frame stack for thread \d+ is empty"
    rb"|Using executable found in the core file: "
    rb"|Core file information:\r?\n(?:\x1b\[[0-9;]*m)*state: )", re.M)


_SNIFF_LITERALS = (b"Traceback for thread ", b"The frame stack for thread ",
                   b"Using executable found in the core file: ", b"Core file information:")


def sniff(path: str, head: bytes) -> str | None:
    """pystack's own lines: a `Traceback for thread N … (most recent call
    last):` header (Python's tracebacks say `Traceback (most recent…`, gdb's
    py-bt `(most recent call first)`), an empty-stack line, or the core-file
    preamble. By content, never by name."""
    return KIND if head_shows(head, _SNIFF_LITERALS, _SNIFF) else None


# ------------------------------------------------------------------ process lines

_PROCESS_LINES = (
    ("exe", lazy.regex(r"Using executable found in the core file: (?P<value>.+)")),
    ("core", lazy.regex(r"Core file information:\s*")),
    ("state", lazy.regex(r"state: \S* zombie: \S* niceness: \S*\s*")),
    ("pid", lazy.regex(r"pid: (?P<pid>\d{1,9}) ppid: \d+ sid: \d+\s*")),
    ("ids", lazy.regex(r"uid: \S+ gid: \S+ pgrp: \S+\s*")),
    ("command", lazy.regex(r"executable: \S* arguments: ?(?P<value>.*)")),
    ("signal", lazy.regex(r"The process died due receiving signal (?P<value>[A-Z0-9_]+)(?: sent by pid \d+)?\s*")),
    ("segv", lazy.regex(r"The process died due a segmentation fault accessing address: (?P<value>0x[0-9a-fA-F]+)\s*")),
    ("on_demand", lazy.regex(r"The core file seems to have been generated on demand \(the process did not crash\)\s*")),
    ("empty", lazy.regex(r"The frame stack for thread (?P<value>\d+) is empty\s*")),
    ("log", lazy.regex(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\(\w+\): (?P<value>.*)")),
    ("failure", lazy.regex(r"\U0001F480 (?P<value>.*?) \U0001F480\s*")),
    ("command_echo", lazy.regex(r"\$ (?:\S*/)?pystack (?:remote|core)\b.*")),
)
# Signals that stop a process without ending it: what a core of a live process says.
_LIVE_SIGNALS = {"SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU"}

_HEADER_FIELDS = lazy.regex(r"Traceback for thread (?P<tid>\x00|\d+)(?: \((?P<name>.*)\))?"
                            r"(?: \[(?P<status>[^\]]*)\])? \(most recent call last\):[ \t]*")
_PY_FIELDS = lazy.regex(r'    \(Python\) File "(?P<file>.*)", line (?P<line>\d{1,9}), in (?P<scope>.*)')
_C_FIELDS = lazy.regex(r'    \(C\) File "(?P<path>.*?)", line (?P<line>\d{1,9}), in (?P<rest>.*)')
_UNKNOWN_FILES = ("???", "")
_SECTION_INDENT = ("      Arguments:", "      Locals:")
_VARIABLE_INDENT = "        "


def _is_process_line(line: str) -> bool:
    text = line.strip()
    return any(pattern.fullmatch(text) for _, pattern in _PROCESS_LINES)


# ------------------------------------------------------------------ block grammar

class _Rules:
    """Grammar rules → plain tuples `(kind, index in the block, *text)`;
    tokens' 1-based line numbers give the index."""

    def start(self, *items):
        return items

    def header(self, token):
        return ("header", token.line - 1, str(token))

    def py_frame(self, token, *rest):
        return ("py", token.line - 1, str(token), rest)

    def source(self, token):
        return ("source", token.line - 1, str(token))

    def section(self, token, *variables):
        return ("section", token.line - 1, str(token).lstrip().startswith("Arguments"), variables)

    def var(self, token):
        return ("var", token.line - 1, str(token))

    def c_frame(self, token):
        return ("c", token.line - 1, str(token))

    def note(self, token):
        return ("note", token.line - 1, str(token))


# A parsed block: records in text order, every masked value inside a str field, so
# that `_fill` can put a block's own values back field after field:
#   ("header", i, tid, name, status)   ("py", i, file, line, scope)   ("source", i, text)
#   ("section", i, is_arguments)       ("var", i, name, value)
#   ("c", i, path, line, symbol, library)   ("note", i, text)   ("bad", i, text, why)
_BLOCKS = BoundedCache(_BLOCK_CACHE_CHARS)
_lock = threading.Lock()


def _parse_block(lines: tuple[str, ...]) -> tuple:
    """The records of one masked block (its lines, without newlines)."""
    key = "\n".join(lines)
    with _lock:
        cached = _BLOCKS.get(key)
    if cached is not None:
        return cached
    alive = list(range(len(lines)))
    bad: list[tuple] = []
    parsed = ()
    while alive:
        text = "".join(lines[i] + "\n" for i in alive)
        try:
            parsed = parser(KIND, "start", _Rules, inline=True).parse(text)
            break
        except lazy.lark.exceptions.UnexpectedInput as exc:
            at = getattr(exc, "line", -1)
            if not isinstance(at, int) or not 1 <= at <= len(alive) or len(bad) >= MAX_BAD_IN_BLOCK:
                bad.extend(("bad", i, lines[i], "thread block given up") for i in alive)
                alive, parsed = [], ()
                break
            index = alive.pop(at - 1)
            bad.append(("bad", index, lines[index], "unrecognized line"))
    records = list(bad)
    for item in parsed:
        records.extend(_records(item, alive))
    records.sort(key=lambda r: r[1])
    result = tuple(records)
    with _lock:
        _BLOCKS.put(key, result)
    return result


def _records(item, alive) -> list[tuple]:
    kind, index = item[0], alive[item[1]]
    if kind == "header":
        found = _HEADER_FIELDS.fullmatch(item[2])
        if found is None:
            return [("bad", index, item[2], "unrecognized thread header")]
        return [("header", index, found["tid"], found["name"] or "", found["status"] or "")]
    if kind == "py":
        found = _PY_FIELDS.fullmatch(item[2].rstrip())
        out = [("py", index, found["file"], int(found["line"]), found["scope"]) if found
               else ("bad", index, item[2], "unrecognized Python frame")]
        for part in item[3]:
            if part[0] == "source":
                out.append(("source", alive[part[1]], part[2]))
                continue
            out.append(("section", alive[part[1]], part[2]))
            for _, at, text in part[3]:
                name, _, value = text[8:].partition(": ")
                out.append(("var", alive[at], name.strip(), value))
        return out
    if kind == "c":
        found = _C_FIELDS.fullmatch(item[2].rstrip())
        split = _split_call(found["rest"]) if found else None
        if split is None:
            return [("bad", index, item[2], "unrecognized C frame")]
        symbol, library = split
        if symbol.endswith(" (inlined)"):
            symbol = symbol[:-len(" (inlined)")]
        return [("c", index, found["path"], int(found["line"]), symbol, library)]
    return [("note", index, item[2])]


def _fill(text: str, values) -> str:
    if _MASK not in text:
        return text
    parts = text.split(_MASK)
    return "".join(part + (next(values, "?") if i < len(parts) - 1 else "") for i, part in enumerate(parts))


# ------------------------------------------------------------------ the reader

class _Process:
    __slots__ = ("pid", "command", "exe", "signal", "exited", "threads", "evidence", "core", "stated_pid")

    def __init__(self, evidence: Evidence):
        self.pid: int | None = None
        self.stated_pid = False
        self.command = self.exe = self.signal = ""
        self.exited = False
        self.core = False
        self.threads: list[ThreadStack] = []
        self.evidence = evidence


def parse(path: str, display: str) -> Facts:
    text = read_text(path)
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise InputError(display, "empty file")
    return _Reader(display).read(text)


class _Reader:
    def __init__(self, display: str):
        self.display = display
        self.facts = Facts(KIND, display)
        self.processes: list[_Process] = []
        self.unrecognized = 0
        self.last_bad = 0

    @property
    def current(self) -> _Process:
        return self.processes[-1]

    def read(self, text: str) -> Facts:
        text = text.replace("\x00", "")
        text = uncoloured(text)
        lines = text.split("\n")
        self.facts.lines_read = len(lines)
        self.last_line = max((i for i, line in enumerate(lines, 1) if line.strip()), default=0)
        block: list[tuple[int, str]] = []
        in_variables = False  # the block's last lines are variables under `Arguments:`/`Locals:`
        for number, line in enumerate(lines, 1):
            line = line.rstrip("\r")
            if len(line) > MAX_LINE:
                self.facts.diag(number, f"line of {len(line):,} characters skipped")
                continue
            if line.startswith("Traceback for thread "):
                self._block(block)
                block, in_variables = [(number, line)], False
            elif not line.strip():
                self._block(block)
                block, in_variables = [], False
            elif line.startswith((" ", "\t", "* - ")):
                block.append((number, line))
                if line.startswith(_SECTION_INDENT):
                    in_variables = True
                elif not line.startswith(_VARIABLE_INDENT):
                    in_variables = False
            elif in_variables and block and not _is_process_line(line):
                # pystack prints a `Locals:` string value as is: a newline in it
                # goes on at column 0. The value gets the line back, escaped.
                first, previous = block[-1]
                block[-1] = (first, previous + "\\n" + line)
            else:
                self._block(block)
                block, in_variables = [], False
                self._process_line(number, line)
        self._block(block)
        return self._finish()

    # -- process lines

    def _process(self, number: int, line: str, fresh: bool = False) -> _Process:
        """The process lines belong to; with `fresh`, a new one unless the
        current one has nothing yet (a core's preamble opens a process)."""
        if not self.processes or (fresh and (self.current.threads or self.current.core)):
            self.processes.append(_Process(Evidence(self.display, number, line.strip()[:200])))
        return self.current

    def _process_line(self, number: int, line: str) -> None:
        text = line.strip()
        for kind, pattern in _PROCESS_LINES:
            found = pattern.fullmatch(text)
            if found is not None:
                break
        else:
            self._unrecognized(number, line)
            return
        value = found.groupdict().get("value") or ""
        if kind == "exe":
            process = self._process(number, line, fresh=True)
            process.exe, process.core = value.strip(), True
        elif kind == "core":  # follows `Using executable…`, or opens a core's output on its own
            current = self.current if self.processes else None
            opened_here = current is not None and current.exe and not current.threads and not current.stated_pid
            process = current if opened_here else self._process(number, line, fresh=True)
            process.core = True
        elif kind == "pid":
            process = self._process(number, line)
            process.pid, process.stated_pid = int(found["pid"]), True
            process.evidence = Evidence(self.display, number, text)
        elif kind == "command":
            self._process(number, line).command = value.strip()
        elif kind in ("signal", "segv"):
            process = self._process(number, line)
            signal = "SIGSEGV" if kind == "segv" else value
            if signal in _LIVE_SIGNALS:
                self.facts.diag(number, f"a core of a live process ({signal}: gcore or a ptrace stop), "
                                        "not of its death", "info")
            else:
                process.exited, process.signal = True, signal
        elif kind == "empty":
            self._process(number, line).threads.append(
                ThreadStack(value, "", None, (), Evidence(self.display, number, text)))
        elif kind == "log":
            self.facts.diag(number, f"pystack: {value}", "info")
        elif kind == "failure":
            self.facts.diag(number, f"pystack failed: {value}")
        elif kind in ("state", "ids", "on_demand"):
            self._process(number, line)
        # command_echo: the command that made the file; nothing to keep

    # -- thread blocks

    def _block(self, block: list[tuple[int, str]]) -> None:
        if not block:
            return
        masked_lines, values = [], []
        for _, line in block:
            if line.startswith("Traceback for thread "):
                tid = _HEADER_TID.match(line)
                if tid is not None:
                    values.append(tid.group(2))
                    line = tid.group(1) + _MASK + line[tid.end():]
            if "0x" in line or "0X" in line:
                parts = _ADDRESS.split(line)
                values.extend(_ADDRESS.findall(line))
                line = _MASK.join(parts)
            masked_lines.append(line)
        records = _parse_block(tuple(masked_lines))
        values = iter(values)
        first = block[0][0]
        tid = name = status = ""
        frames: list[Frame] = []
        py_frame: list | None = None  # [file, line, scope, at, locals]
        for record in records:
            kind, index = record[0], record[1]
            at = block[index][0] - first
            if kind == "header":
                tid, name, status = (_fill(field, values) for field in record[2:5])
            elif kind == "py":
                self._close(py_frame, frames)
                py_frame = [_fill(record[2], values), record[3], _fill(record[4], values), at, []]
            elif kind == "var":
                var = (_fill(record[2], values), _fill(record[3], values))
                if py_frame is not None:
                    py_frame[4].append(var)
            elif kind == "c":
                self._close(py_frame, frames)
                py_frame = None
                frames.append(_c_frame(_fill(record[2], values), record[3], _fill(record[4], values),
                                       _fill(record[5], values), at))
            elif kind in ("source", "note"):
                _fill(record[2], values)
            elif kind == "bad":
                self._unrecognized(block[index][0], _fill(record[2], values), record[3])
        self._close(py_frame, frames)
        header_line = block[0][1].strip()
        if not tid:
            self.facts.diag(first, "frames without a `Traceback for thread` header: read as an unnamed thread")
        active = True if "Has the GIL" in status else None
        process = self._process(first, header_line)
        frames.reverse()  # pystack prints the most recent call last
        process.threads.append(ThreadStack(tid, name, active, tuple(frames),
                                           Evidence(self.display, first, header_line[:300]), status))

    @staticmethod
    def _close(py_frame, frames: list[Frame]) -> None:
        if py_frame is not None:
            file, line, scope, at, pairs = py_frame
            frames.append(Frame(scope, file, line, "", False, at, tuple(pairs)))

    def _unrecognized(self, number: int, line: str, why: str = "unrecognized line") -> None:
        self.unrecognized += 1
        self.last_bad = number
        if self.unrecognized <= MAX_LINE_DIAGNOSTICS:
            shown = line.strip()
            self.facts.diag(number, f"{why}: {shown if len(shown) <= 120 else shown[:117] + '...'!r}")

    def _finish(self) -> Facts:
        facts = self.facts
        facts.unrecognized = self.unrecognized
        if self.unrecognized > MAX_LINE_DIAGNOSTICS:
            facts.diag(self.last_bad, f"{self.unrecognized - MAX_LINE_DIAGNOSTICS:,} more "
                                      "unrecognized lines not listed")
        for process in self.processes:
            if not process.threads:
                facts.diag(process.evidence.line, "pystack printed no thread for this process", "info")
                continue
            pid = process.pid if process.stated_pid else _main_thread_pid(process.threads)
            facts.processes.append(ProcessDump(
                source=SOURCE, path=self.display, pid=pid, command=process.command or process.exe,
                threads=tuple(process.threads), evidence=process.evidence,
                rank_hint=_rank_hint(process.threads, pid),
                truncated=process is self.processes[-1] and self.last_bad == self.last_line > 0,
                exited=process.exited, signal=process.signal))
        if not facts.processes:
            facts.diag(1, "no pystack thread found")
        return facts


def _c_frame(path: str, line: int, symbol: str, library: str, at: int) -> Frame:
    library = library.strip()
    base = os.path.basename(library) if library else ""
    has_file = path not in _UNKNOWN_FILES and path != library and os.path.basename(path) != base
    return Frame(symbol, path if has_file else "", line if has_file else 0, base, True, at)


def _main_thread_pid(threads) -> int | None:
    """The tid of the one thread whose outermost Python frame is `<module>`."""
    found = []
    for thread in threads:
        outer = next((f for f in reversed(thread.frames) if not f.native), None)
        if outer is not None and outer.function == "<module>" and thread.tid.isdigit():
            found.append(thread)
    if len(found) != 1 or len(found[0].tid) > 9:
        return None
    return int(found[0].tid)


# ------------------------------------------------------------------ plugin hooks

forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)}, sniff)
forensics_sniff_markers = markers_hook(_SNIFF_LITERALS)
