"""Python tracebacks and faulthandler dumps, wherever they were printed.

Two kinds of stack a Python process writes about itself, usually on stderr:

- A traceback (`Lib/traceback.py`, or the interpreter's own printer at exit):
  `Traceback (most recent call last):`, frames outermost first as
  `  File "x.py", line 12, in f`, then the exception line(s). A chain of them
  (`The above exception was the direct cause …`, `During handling of …`) and
  an exception group (`  + Exception Group Traceback …`, `  | ` margins) are
  one report. Each report becomes one `ProcessDump` (source "traceback") with
  one thread, frames innermost first, and a `ProcessRecord` whose `errors`
  are its exception lines, cause first, so that the report can cite them
  whether or not the message catalogue knows them.
- A faulthandler dump (`Modules/faulthandler.c`, `Python/traceback.c`): an
  optional header (`Fatal Python error: Aborted`, `Timeout (0:00:10)!`), then
  every thread as `Thread 0x… (most recent call first):` (`Current thread`
  for the one that caught the signal) with frames innermost first as
  `  File "x.py", line 12 in f` (no comma). Each dump becomes one
  `ProcessDump` (source "faulthandler") with all its threads; a fatal one
  also a `ProcessRecord` saying the process died, and of which signal.

Where the lines come from. A rank's own stderr holds them plain; a
launcher's console or a Slurm output holds several processes' lines, each
behind the prefixes its launcher adds: torchrun's `[default3]:` (local
rank), PyTorch's `[rank3]: ` (global rank; its excepthook adds it to the
uncaught exception's lines only, so a line carrying it ended its process),
Ray's `(RayWorker pid=1234, ip=…) `, timestamps, srun's `--label` (` 3: `).
A prefix of no known shape in front of a report's first line (pdsh's
`node-3: `, a logging formatter's `ERROR 09-17 15:23:51 [x.py:597] ` that
vLLM repeats on every line of a record) is learned for that stream, and
dropped again when the next line lacks it (it was text glued on, a progress
bar). Lines are grouped by their prefixes into streams, one per process, so
interleaved reports of several ranks come apart. torchrun's `[defaultN]:`
is a local rank, never taken for a global one by itself: only a file that
ties the two, in a `[defaultN]:[rankM]:` line or torchrun's failure summary
(`rank : M (local_rank: N)`), and ties local rank N to one rank M only, names
the global rank of its `[defaultN]:` reports.

Reading. Reports are rare and files can be gigabytes: the file is mapped,
not read, and searched for the two byte strings every report holds
(`most recent call`, `Fatal Python error`); only the lines from there (or
from a `Timeout (…)!`, `Exception in thread …:` just before) until every
open report has ended are decoded,
split from their prefixes and fed one at a time to grammars/pytrace.lark
(each distinct line parsed once), so one bad line is one diagnostic.

What the text cannot tell, and what we assume:
- Whether a traceback ended its process. It did when PyTorch's excepthook
  prefixed it with `[rankN]:`; else a report is taken to have ended its
  process when nothing else of that process follows it in the file: no
  later traceback, no later faulthandler dump of a live process. Tracebacks
  after `Exception in thread NAME:` (a thread died) or `Exception ignored
  in:` never ended it.
- faulthandler names no thread: threads keep their hex id and an empty name.
  The current thread (the one that caught the signal) is `active`.
- `dump_traceback_later` and `faulthandler.register` dumps show a live
  process; `Fatal Python error:` a dead one, killed by the signal it names
  (SIGABRT for the interpreter's own fatal errors, which abort()).
- torchrun's own traceback (its ChildFailedError, or a SignalException) is
  the launcher's, not a rank's, and the Flight Recorder analyzer's crash is
  the analyzer's: they are listed as read (an info diagnostic), not turned
  into dumps.
"""

from __future__ import annotations

import itertools

from .. import lazy, messages
from ..model import Evidence, Frame, ProcessDump, ProcessRecord, ThreadStack
from .cache import BoundedCache
from .facts import Facts
from .attribution import section_header
from .grammar import parser
from .reader import markers_hook, reader_hooks
from .statements import HEAD_WINDOW, TAIL_WINDOW, _read as read_windows  # a big file's head and tail
from .textio import InputError, has_nul, int_text, looks_binary
from .torchlog import _ANSI, _ANSI_PATTERN, _LABEL, _OUTER, LABEL_HEAD_LINES, labelled  # the prefixes c10d logs carry too

KIND_TRACEBACK = "traceback"
KIND_FAULTHANDLER = "faulthandler"
GRAMMAR = "pytrace"

MAX_LINE = 64 * 1024          # longer lines are skipped with a diagnostic
MAX_MESSAGE_LINES = 40        # lines of one exception message kept after its first
MAX_FRAMES = 2000             # frames kept per report (a RecursionError prints ~1000)
MAX_LISTED = 100              # unrecognized lines listed one by one per file
# A stream that prints nothing for this many lines has finished its report:
# a traceback's frames may be spread thin among other ranks' lines, its
# message does not wait long for a continuation.
SILENT_IN_FRAMES = 5000
SILENT_AFTER = 200
EVIDENCE_CHARS = 2000

# ---------------------------------------------------------------- sniffing

# Every report holds one of these, and nothing else needs a look: a traceback
# and a thread its header, a fatal dump its first line (it may have no thread).
# A region starts earlier when one of the lines just before says how the
# report is to be read: `Timeout (…)!`, `Exception in thread …:`. Each marker
# costs one pass over the file, so the second kind is looked for only there.
_MARKERS = ("most recent call", "Fatal Python error")
_LEADS = ("Timeout (", "Windows fatal exception: ", "Exception in thread ", "Exception ignored")
LOOKBACK = 64                 # lines before a marker searched for a lead
_SNIFF_TRACEBACK = lazy.regex(rb"Traceback \(most recent call last\):")
_SNIFF_FAULTHANDLER = lazy.regex(
    rb"(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):"
    rb"|Stack \(most recent call first\):|Fatal Python error(?::| from unexpected signum:) "
    rb"|Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!")
_ANSI_BYTES = lazy.regex(_ANSI_PATTERN.encode())


def sniff(path: str, head: bytes) -> str | None:
    """"traceback" or "faulthandler" by what the sample shows first; the
    reader reads both either way. (The scan shows every reader a big file's
    tail and the windows around its markers too: a rank's stderr holds its
    fatal traceback at the end.) gdb's py-bt (`Traceback (most recent call
    first):`) is not claimed, nor Python source (a collector's script quoting
    these lines)."""
    if not head or has_nul(head) or looks_binary(head) or path.endswith((".py", ".pyi")):
        return None
    return _sniff_text(head)


def _sniff_text(text: bytes) -> str | None:
    if b"most recent call" not in text and b"Fatal Python error" not in text and b"Timeout (" not in text:
        return None  # most files of a collection: declined by three C scans
    if b"\x1b" in text:
        text = _ANSI_BYTES.sub(b"", text)
    traceback = _SNIFF_TRACEBACK.search(text)
    fault = _SNIFF_FAULTHANDLER.search(text)
    if traceback is None and fault is None:
        return None
    if fault is None or (traceback is not None and traceback.start() < fault.start()):
        return KIND_TRACEBACK
    return KIND_FAULTHANDLER


# ---------------------------------------------------------------- lines

class _Lines:
    """One parsed line → a plain tuple `(kind, *fields)` of str/int: a
    method per grammar rule, called with the rule's tokens. (The parse tree
    of one line is tiny; a tree-building parser's tables are cached by lark
    between runs, where a transformer's are rebuilt by every process.)"""

    def tb_header(self):
        return ("tb_header",)

    def eg_header(self):
        return ("eg_header",)

    def file_line(self, path, lineno, style=None, name=None):
        path = str(path)
        path = path[1:-1] if path.startswith('"') else ""
        line = max(0, int_text(str(lineno), 12) or 0)
        if style is None:
            return ("location", path, line)  # a SyntaxError's `  File "x", line 3`
        function = str(name) if name is not None else ""
        return ("frame", path, line, "?" if function == "???" else function,
                "traceback" if style.type == "IN_TRACEBACK" else "faulthandler")

    def source_line(self, *_):
        return ("source",)

    def repeat_line(self, _):
        return ("repeat",)

    def chain_line(self, token):
        return ("chain", "cause" if token.type == "CAUSE" else "context")

    def thread_intro(self, text):
        name = str(text).rstrip()
        return ("thread_intro", name[:-1] if name.endswith(":") else name)

    def ignored_intro(self, _):
        return ("ignored_intro",)

    def fatal_line(self, text=None):
        return ("fatal", str(text).strip() if text is not None else "")

    def fatal_signum(self, number):
        return ("fatal_signum", int(number))

    def windows_line(self, text=None):
        return ("windows", str(text).strip() if text is not None else "")

    def timeout_line(self, _):
        return ("timeout",)

    def thread_line(self, word, hex_id):
        return ("thread", str(hex_id), str(word).startswith("Current"))

    def stack_line(self, _):
        return ("stack",)

    def note_line(self, token):
        return ("note", str(token).strip())

    def more_threads_line(self, _):
        return ("more_threads",)

    def extensions_line(self, *_):
        return ("extensions",)

    def runtime_line(self, *_):
        return ("runtime",)

    def c_stack_line(self, _):
        return ("c_stack",)

    def c_frame_line(self, _):
        return ("c_frame",)

    def exception_line(self, name, text=None):
        return ("exception", str(name))


_LINES = _Lines()
_UNREADABLE = ("unreadable",)
_BLANK = ("blank",)
_PARSED = BoundedCache(8 << 20)


_THREAD_ID = lazy.regex(r"((?:Current thread|Thread) )(0x[0-9a-fA-F]+)")


def _parse_line(body: str) -> tuple:
    """What one prefix-free line is; each distinct line is parsed once (a
    thread header once whatever its id: ten thousand ranks' dumps differ
    in nothing else)."""
    body = body.rstrip()
    if not body:
        return _BLANK
    thread_id = _THREAD_ID.match(body) if body.startswith(("Thread 0x", "Current thread 0x")) else None
    if thread_id is not None:
        parsed = _parse_cached(body[:thread_id.start(2)] + "0x0" + body[thread_id.end(2):])
        return parsed[:1] + (thread_id.group(2),) + parsed[2:] if parsed[0] == "thread" else parsed
    return _parse_cached(body)


def _parse_cached(body: str) -> tuple:
    found = _PARSED.get(body)
    if found is None:
        try:
            tree = parser(GRAMMAR).parse(body)
            found = getattr(_LINES, tree.data)(*tree.children)
        except lazy.lark.exceptions.LarkError:
            found = _UNREADABLE
        _PARSED.put(body, found)
    return found


def _section_before(text: str, start: int) -> int | None:
    """The rank of the file whose `tail`/`head` header (`==> logs/rank3.log <==`)
    last precedes offset `start` of `text`, or None."""
    at = text.rfind("\n==> ", 0, start)
    begin = at + 1 if at >= 0 else (0 if text.startswith("==> ") else -1)
    if begin < 0:
        return None
    end = text.find("\n", begin)
    header, named = section_header(text[begin:end if end >= 0 else len(text)])
    return named if header else None


# The prefixes a line may carry besides torchlog's `_OUTER` ones.
_STAMP = lazy.regex(r"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\] ?"
                    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? ")
# A line that starts another program's record, never an exception message's continuation.
_LOG_HEAD = lazy.regex(r"\[?[FEWIV]\d{4} \d\d:\d\d:\d\d|\[[FEWIV] |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):"
                       r"|\[\d{4}-\d\d-\d\d |\*{5,}")
_GROUP_MARGIN = lazy.regex(r"( *)([|+])(.*)")
# Lines that tie torchrun's local rank to the global rank, in a console of
# one agent: its workers' `[default3]:[rank3]:` lines and its failure
# summary's `rank : 3 (local_rank: 3)`.
_ALIAS_LITERALS = ("]:[rank", "(local_rank: ")
_ALIAS = lazy.regex(r"\[default(\d{1,7})\]:\[rank(\d{1,7})\]:|rank +: (\d{1,7}) \(local_rank: (\d{1,7})\)")
MAX_ALIAS_LINES = 4096        # lines looked at per literal: enough to meet every local rank
# Tracebacks of the tools around the job, not of its ranks: torchrun's agent
# (its ChildFailedError, a SignalException when it is killed) and PyTorch's
# Flight Recorder analyzer, whose crash a collector keeps beside the dumps.
# Known by their outermost frames.
_TOOLS = (("torch/distributed/run.py", "torchrun"), ("torch/distributed/launch.py", "torch.distributed.launch"),
          ("/bin/torchrun", "torchrun"), ("torch/distributed/flight_recorder/fr_trace.py", "fr_trace"),
          ("/bin/torchfrtrace", "fr_trace"), ("tools/flight_recorder/fr_trace.py", "fr_trace"))
_LAUNCHER_ERRORS = ("ChildFailedError", "SignalException")
_FATAL_SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
                  "Illegal instruction": "SIGILL", "Floating-point exception": "SIGFPE",
                  "Floating point exception": "SIGFPE"}
_SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
                 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
                 14: "SIGALRM", 15: "SIGTERM"}
# Windows exception codes after which the process goes on (faulthandler
# prints them all; only the named ones are faults).
_WINDOWS_BENIGN = "code 0x"


class _Key(tuple):
    """(srun task, Ray pid, Ray host, global rank, local rank, learned
    prefix) of a line: which process printed it."""

    __slots__ = ()


_FILE = _Key((None, None, "", None, None, ""))
# Where a report starts inside a line whose front is not a prefix we know.
_START_INSIDE = lazy.regex(r"Traceback \(most recent call last\):|Fatal Python error|Timeout \(\d+:\d\d:\d\d"
                           r"|(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):"
                           r"|Stack \(most recent call first\):|Exception in thread |Windows fatal exception: ")
MAX_LEARNED_PREFIX = 300
_RAY_REPEAT = lazy.regex(r" ?\[repeated \d{1,9}x across cluster\]$")


class _Line:
    """One physical line, split: where it is, its text, its prefix-free body."""

    __slots__ = ("number", "full", "body", "key", "excepthook", "outer")

    def __init__(self, number, full, body, key, excepthook, outer=()):
        self.number, self.full, self.body, self.key, self.excepthook = number, full, body, key, excepthook
        self.outer = outer  # the stream as the prefixes before any learned one say

    def evidence(self, display: str) -> Evidence:
        return Evidence(display, self.number, self.full.rstrip()[:EVIDENCE_CHARS])


# ---------------------------------------------------------------- reports being assembled

class _Part:
    """One traceback of a chain: frames (outermost first, as printed) and
    the exception line(s) it ends with."""

    __slots__ = ("header", "frames", "message")

    def __init__(self, header: "_Line"):
        self.header = header  # its `Traceback (most recent call last):` line
        self.frames: list[tuple[str, str, int, int]] = []  # (function, file, line, line number)
        self.message: list[_Line] = []


class _Trace:
    """A traceback report (a chain of tracebacks, or a group) of one stream."""

    __slots__ = ("header", "parts", "state", "thread", "ignored", "excepthook", "truncated", "last",
                 "margin", "sub_messages", "more_frames")

    def __init__(self, header: _Line, group_margin: int | None, thread: str, ignored: bool):
        self.header = header
        self.parts = [_Part(header)]
        self.state = "group" if group_margin is not None else "frames"
        self.margin = group_margin   # the column of an exception group's `+`/`|` margin
        self.thread, self.ignored = thread, ignored
        self.excepthook = header.excepthook
        self.truncated = False
        self.last = header.number
        self.sub_messages: list[_Line] = []  # exception lines of a group's sub-exceptions
        self.more_frames = 0

    @property
    def part(self) -> _Part:
        return self.parts[-1]


class _Thread:
    __slots__ = ("tid", "current", "header", "frames", "truncated")

    def __init__(self, tid: str, current: bool, header: _Line):
        self.tid, self.current, self.header = tid, current, header
        self.frames: list[tuple[str, str, int, int]] = []
        self.truncated = False


class _Dump:
    """A faulthandler dump of one stream."""

    __slots__ = ("header", "kind", "signal", "exited", "threads", "blank", "last", "truncated")

    def __init__(self, header: _Line, kind: str, signal: str = "", exited: bool = False):
        self.header, self.kind = header, kind
        self.signal, self.exited = signal, exited
        self.threads: list[_Thread] = []
        self.blank = False
        self.last = header.number
        self.truncated = False


# ---------------------------------------------------------------- the reader

class _Reader:
    def __init__(self, facts: Facts, display: str):
        self.facts, self.display = facts, display
        self.traces: dict[_Key, _Trace] = {}
        self.dumps: dict[_Key, _Dump] = {}
        self.intro: dict[_Key, tuple[str, bool, int]] = {}  # key → (thread name, ignored, line)
        self.done: list[tuple[_Key, object]] = []  # finished reports in file order
        self.aliases: dict[tuple, set[int]] = {}    # (task, local rank) → global ranks seen with it
        self.labelled = False                       # srun --label output (torchlog.labelled on the head)
        self.section: int | None = None             # the rank of the file a `==> rank3.log <==` header began
        # Prefixes met in front of a report's first line and repeated on every
        # line of it (pdsh's `node-3: `, vLLM's `ERROR 09-17 15:23:51 [x.py:597] `),
        # newest first, per stream; `fresh`: those not yet seen on a second line.
        self.learned: dict[tuple, list[str]] = {}
        self.fresh: dict[tuple, tuple[str, _Key]] = {}  # stream → (prefix, the report it opened)
        self.unrecognized = 0

    # -- the file
    def read(self, text: str, first_line: int = 1) -> int:
        """Visit every region of `text` (the file, or a window of it whose
        first line is numbered `first_line`) that holds a report; the
        number of lines in `text`. Reports open at its end are closed."""
        size = len(text)
        next_at = {marker: text.find(marker) for marker in _MARKERS}
        pos, line_no = 0, first_line
        while True:
            found = [at for at in next_at.values() if at >= 0]
            if not found:
                break
            start = _lead(text, text.rfind("\n", 0, min(found)) + 1, pos)
            line_no += text.count("\n", pos, start)
            self.section = _section_before(text, start)
            pos, line_no = self._region(text, start, line_no, size)
            for marker, where in next_at.items():
                if 0 <= where < pos:
                    next_at[marker] = text.find(marker, pos)
        lines = line_no - first_line + text.count("\n", pos) + (1 if pos < size and not text.endswith("\n") else 0)
        keys = [key for key, _ in self.done] + list(self.traces) + list(self.dumps)
        if not self.labelled and any(key[3] is None and key[4] is not None for key in keys):
            self._learn_aliases(text)  # a report known only by its local rank
        self._close_all(cut_short=bool(text) and not text.endswith("\n"))
        return lines

    def _learn_aliases(self, text: str) -> None:
        """Local → global rank pairs the text states beyond the lines of its
        reports (a console's c10d lines, torchrun's summary at its end)."""
        for literal in _ALIAS_LITERALS:
            at = text.find(literal)
            for _ in range(MAX_ALIAS_LINES):
                if at < 0:
                    break
                start = text.rfind("\n", max(0, at - MAX_LINE), at) + 1
                end = text.find("\n", at)
                end = len(text) if end < 0 else end
                found = _ALIAS.search(text, start, min(end, start + MAX_LINE))
                if found is not None:
                    local, rank = ((found.group(1), found.group(2)) if found.group(1)
                                   else (found.group(4), found.group(3)))
                    self.aliases.setdefault((None, int(local)), set()).add(int(rank))
                at = text.find(literal, end)

    def _region(self, text: str, pos: int, line_no: int, size: int) -> tuple[int, int]:
        """Read lines from `pos` until no stream has a report open; the
        offset and the number of the line after the last one read."""
        while pos < size:
            end = text.find("\n", pos)
            end = size if end < 0 else end
            if end - pos > MAX_LINE:
                self.facts.diag(line_no, f"line longer than {MAX_LINE // 1024} KiB: skipped")
            else:
                self._physical(line_no, text[pos:end])
            pos = end + 1
            line_no += 1
            if not self.traces and not self.dumps and not self.intro:
                break
            if not line_no & 63:
                self._expire(line_no)
        return min(pos, size), line_no

    def _physical(self, line_no: int, text: str) -> None:
        if text.endswith("\r"):
            text = text[:-1]
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        if "\r" in text:  # a progress bar's carriage returns: each piece is a line of its own
            for piece in text.split("\r"):
                if piece:
                    self._feed(self._split(line_no, piece))
            return
        self._feed(self._split(line_no, text))

    def _split(self, line_no: int, full: str) -> _Line:
        """A line's launcher prefixes off: which process it belongs to.

        Known prefixes first; then a prefix learned from an earlier line of
        the same stream, and known prefixes again behind it (pdsh's `node-3: `
        before PyTorch's `[rank0]: `)."""
        pos, task = 0, None
        if self.labelled:
            label = _LABEL.match(full)
            if label is not None:
                task, pos = int(label.group(1)), label.end()
        found: dict = {"pid": None, "host": "", "rank": None, "local": None}
        pos = _known_prefixes(full, pos, found)
        outer = (task, found["pid"], found["host"], found["rank"], found["local"])
        learned = ""
        for prefix in self.learned.get(outer, ()):
            if full.startswith(prefix, pos) or full[pos:] == prefix.rstrip():
                learned = prefix
                pos = _known_prefixes(full, min(pos + len(prefix), len(full)), found)
                break
        rank, local = found["rank"], found["local"]
        if task is None and not pos and full.startswith("==> "):
            header, named = section_header(full)
            if header:
                self.section = named
        if rank is None and local is None and found["pid"] is None and task is None and self.section is not None:
            rank = found["rank"] = self.section  # under `tail`'s `==> logs/rank3.log <==`: that file's lines
            outer = (task, found["pid"], found["host"], rank, local)
        if rank is not None and local is not None:
            self.aliases.setdefault((task, local), set()).add(rank)
        body = full[pos:]
        if body.endswith(" across cluster]"):
            body = _RAY_REPEAT.sub("", body)  # Ray's note on a line it printed once for several workers
        key = _Key((task, found["pid"], found["host"], rank, local, learned)) if pos or rank is not None else _FILE
        return _Line(line_no, full, body, key, rank is not None, outer)

    # -- one line
    def _feed(self, line: _Line) -> None:
        if self.fresh:
            self._confirm(line)
        key = line.key
        trace = self.traces.get(key)
        if trace is not None:
            trace.last = line.number
            if self._trace_line(trace, line):
                return
        dump = self.dumps.get(key)
        if dump is not None:
            dump.last = line.number
            if self._dump_line(dump, line):
                return
        self._idle_line(line)

    def _confirm(self, line: _Line) -> None:
        """The line after a report started behind a learned prefix: without
        the prefix, the prefix was glued-on text, not the stream's."""
        entry = self.fresh.pop(line.outer, None)
        if entry is None:
            return
        prefix, report = entry
        if line.key[5]:
            return
        learned = self.learned.get(line.outer, [])
        if prefix in learned:
            learned.remove(prefix)
        for table, close in ((self.traces, self._close_trace), (self.dumps, self._close_dump), (self.intro, None)):
            if report in table:
                if line.key in table and close is not None:
                    close(line.key)
                table[line.key] = table.pop(report)

    def _idle_line(self, line: _Line) -> None:
        """A line of a stream inside no report: does one start here?"""
        key = line.key
        margin = _group_header(line.body)
        parsed = ("eg_header",) if margin is not None else _parse_line(line.body)
        kind = parsed[0]
        if kind in ("exception", "unreadable") and not key[5]:
            inside = _START_INSIDE.search(line.body, 1)
            if inside is not None and inside.start() <= MAX_LEARNED_PREFIX:
                self._learn(line, inside.start())
                return
        intro = self.intro.pop(key, None)
        if kind in ("tb_header", "eg_header"):
            thread, ignored = (intro[0], intro[1]) if intro is not None else ("", False)
            self.traces[key] = _Trace(line, margin, thread, ignored)
        elif kind == "thread_intro":
            self.intro[key] = (parsed[1], False, line.number)
        elif kind == "ignored_intro":
            self.intro[key] = ("", True, line.number)
        elif kind == "fatal":
            self._open_dump(line, "fatal", _FATAL_SIGNALS.get(parsed[1], "SIGABRT"), True)
        elif kind == "fatal_signum":
            self._open_dump(line, "fatal", _SIGNAL_NAMES.get(parsed[1], ""), True)
        elif kind == "windows":
            self._open_dump(line, "windows", "", not parsed[1].startswith(_WINDOWS_BENIGN))
        elif kind == "timeout":
            self._open_dump(line, "timeout")
        elif kind in ("thread", "stack"):
            dump = self._open_dump(line, "user")
            self._dump_line(dump, line)
        elif intro is not None and kind == "blank":
            self.intro[key] = intro  # `Exception in thread X:` is followed by its traceback

    def _learn(self, line: _Line, at: int) -> None:
        """A report starts at `at` in this line: the unknown text before it is
        taken for a prefix of the stream's lines until the next line says
        otherwise, and the line is read again without it."""
        prefix = _unknown_part(line.body[:at])
        if not prefix:
            return
        learned = self.learned.setdefault(line.outer, [])
        if prefix in learned:
            learned.remove(prefix)
        learned.insert(0, prefix)
        del learned[8:]
        again = self._split(line.number, line.full)
        if again.key[5] == prefix:
            self._idle_line(again)
            self.fresh[line.outer] = (prefix, again.key)

    def _open_dump(self, line: _Line, kind: str, signal: str = "", exited: bool = False) -> _Dump:
        self._close_dump(line.key)
        dump = self.dumps[line.key] = _Dump(line, kind, signal, exited)
        return dump

    # -- tracebacks
    def _trace_line(self, trace: _Trace, line: _Line) -> bool:
        """Feed a line to an open traceback; False when the line is not its
        own (the traceback has ended and the line starts something else)."""
        if trace.state == "group":
            return self._group_line(trace, line)
        parsed = _parse_line(line.body)
        kind = parsed[0]
        state = trace.state
        if state == "frames":
            if kind == "frame":
                self._add_frame(trace, parsed, line)
            elif kind in ("source", "repeat", "location", "blank"):
                pass
            elif kind in ("tb_header", "eg_header", "fatal", "fatal_signum", "timeout", "thread", "stack"):
                trace.truncated = True
                self._close_trace(line.key)
                return False
            elif line.body[:1] in (" ", "\t"):
                self._unrecognized(line, "unrecognized line in a traceback")
            else:  # the first line that is not indented: the exception
                trace.part.message.append(line)
                trace.state = "message"
            return True
        if kind == "chain":
            trace.state = "chained"
            return True
        if state == "chained":
            if kind == "blank":
                return True
            margin = _group_header(line.body)
            if kind == "tb_header" or margin is not None:
                trace.parts.append(_Part(line))
                trace.state, trace.margin = ("group", margin) if margin is not None else ("frames", None)
                return True
            trace.truncated = True  # a chain that promises another traceback and stops
        elif state == "message":
            if kind == "blank":
                trace.state = "message_blank"
                return True
            part = trace.part
            if (kind not in ("tb_header", "eg_header", "fatal", "fatal_signum", "timeout", "thread", "stack",
                             "thread_intro", "ignored_intro")
                    and len(part.message) <= MAX_MESSAGE_LINES and not _LOG_HEAD.match(line.body)):
                part.message.append(line)  # an exception message's later lines, a note
                return True
        elif state == "after_group":
            if kind == "blank":
                return True
        self._close_trace(line.key)
        return False

    def _group_line(self, trace: _Trace, line: _Line) -> bool:
        """A line of an exception group: its own frames and exception at the
        first margin, its sub-exceptions deeper (their messages are kept)."""
        body, margin = line.body, trace.margin
        found = _GROUP_MARGIN.match(body)
        if found is None or len(found.group(1)) < margin:
            trace.state = "after_group"
            return self._trace_line(trace, line)
        depth = len(found.group(1))
        content = found.group(3)
        if found.group(2) == "+":
            return True  # the group's header, `+-+---- 1 ----`, `+-----`: where sub-exceptions start and end
        content = content[1:] if content.startswith(" ") else content
        if depth > margin:
            while True:  # nested margins: `    | ` … `      | `
                inner = _GROUP_MARGIN.match(content)
                if inner is None:
                    break
                if inner.group(2) == "+":
                    return True
                content = inner.group(3)[1:] if inner.group(3).startswith(" ") else inner.group(3)
            if _parse_line(content)[0] == "exception":
                trace.sub_messages.append(_Line(line.number, line.full, content, line.key, line.excepthook))
            return True
        parsed = _parse_line(content)
        kind = parsed[0]
        part = trace.part
        if kind == "frame" and not part.message:
            self._add_frame(trace, parsed, line)
        elif kind in ("source", "repeat", "location", "blank", "tb_header"):
            pass
        elif not part.message or len(part.message) <= MAX_MESSAGE_LINES:
            part.message.append(_Line(line.number, line.full, content, line.key, line.excepthook))
        return True

    def _add_frame(self, trace: _Trace, parsed: tuple, line: _Line) -> None:
        _, path, number, function, style = parsed
        if len(trace.part.frames) >= MAX_FRAMES:
            trace.more_frames += 1
            return
        trace.part.frames.append((function, path, number, line.number))

    def _close_trace(self, key: _Key) -> None:
        trace = self.traces.pop(key, None)
        if trace is not None:
            if trace.state in ("frames", "chained") or (trace.state == "group" and not trace.part.message):
                trace.truncated = True
            self.done.append((key, trace))

    # -- faulthandler dumps
    def _dump_line(self, dump: _Dump, line: _Line) -> bool:
        parsed = _parse_line(line.body)
        kind = parsed[0]
        if kind == "blank":
            dump.blank = True
            return True
        blank, dump.blank = dump.blank, False
        if kind == "thread":
            if dump.threads and (not blank or any(t.tid == parsed[1] for t in dump.threads)):
                # Threads of one dump are separated by a blank line; a
                # header straight after a frame starts the next dump.
                self._close_dump(line.key)
                return False
            dump.threads.append(_Thread(parsed[1], parsed[2], line))
            return True
        if kind == "stack":
            if dump.threads:
                self._close_dump(line.key)
                return False
            dump.threads.append(_Thread("", True, line))
            return True
        thread = dump.threads[-1] if dump.threads else None
        if kind == "frame" and thread is not None:
            if len(thread.frames) < MAX_FRAMES:
                thread.frames.append((parsed[3], parsed[1], parsed[2], line.number))
            return True
        if kind == "note":
            if parsed[1] == "..." and thread is not None:
                thread.truncated = True
            return True
        if kind == "more_threads":
            dump.truncated = True
            return True
        if kind in ("runtime", "c_stack", "c_frame"):
            return True
        if kind == "extensions":  # the last line of a fatal dump (3.10+)
            self._close_dump(line.key)
            return True
        if kind == "tb_header" and not dump.threads:
            return False  # Py_FatalError prints the pending exception before the threads
        if kind == "unreadable" and line.body.startswith("  ") and thread is not None:
            self._unrecognized(line, "unrecognized line in a faulthandler dump")
            return True
        self._close_dump(line.key)
        return False

    def _close_dump(self, key: _Key) -> None:
        dump = self.dumps.pop(key, None)
        if dump is not None:
            self.done.append((key, dump))

    # -- housekeeping
    def _expire(self, line_no: int) -> None:
        """Reports whose stream has been silent long enough have ended."""
        if self.traces:
            for key, trace in list(self.traces.items()):
                limit = SILENT_IN_FRAMES if trace.state in ("frames", "group", "chained") else SILENT_AFTER
                if line_no - trace.last > limit:
                    self._close_trace(key)
        if self.dumps:
            for key, dump in list(self.dumps.items()):
                if line_no - dump.last > SILENT_AFTER:
                    self._close_dump(key)
        if self.intro:
            for key, (_, _, at) in list(self.intro.items()):
                if line_no - at > SILENT_AFTER:
                    del self.intro[key]

    def _unrecognized(self, line: _Line, why: str) -> None:
        self.unrecognized += 1
        if self.unrecognized <= MAX_LISTED:
            self.facts.diag(line.number, f"{why}: {line.full.strip()[:160]!r}")

    # -- the end
    def _close_all(self, cut_short: bool) -> None:
        """The end of the text: what is open ends here (cut short when the
        text stops inside a line)."""
        for key in list(self.traces):
            trace = self.traces[key]
            if cut_short and trace.state != "message_blank":
                trace.truncated = True
            self._close_trace(key)
        for key in list(self.dumps):
            if cut_short:
                self.dumps[key].truncated = True
            self._close_dump(key)
        self.intro.clear()
        self.fresh.clear()

    def finish(self) -> None:
        if self.unrecognized > MAX_LISTED:
            self.facts.diag(0, f"{self.unrecognized - MAX_LISTED} more unrecognized lines not listed")
        self.facts.unrecognized += self.unrecognized
        _Emitter(self).run()


def _known_prefixes(text: str, pos: int, found: dict) -> int:
    """Past the timestamps and launcher prefixes at `pos`, noting in `found`
    the rank, local rank, pid and host they state; where the text begins."""
    after = False
    for _ in range(8):
        stamp = _STAMP.match(text, pos)
        if stamp is not None and stamp.end() > pos:
            pos, after = stamp.end(), False
            continue
        outer = _OUTER.match(text, pos)
        if outer is None or outer.end() == pos:
            break
        pos = outer.end()
        if outer.group("rank") is not None:
            found["rank"], after = int(outer.group("rank")), True
        elif outer.group("local") is not None:
            found["local"], after = int(outer.group("local")), False
        else:
            found["pid"], after = int(outer.group("pid")), False
            found["host"] = outer.group("ip") or found["host"]
    if after and text.startswith(" ", pos):
        pos += 1  # PyTorch's excepthook writes `[rankN]: ` before each line
    return pos


def _nothing_found() -> dict:
    return {"pid": None, "host": "", "rank": None, "local": None}


def _unknown_part(prefix: str) -> str:
    """The front of `prefix` that is no known prefix: `node-3: [rank0]: ` → `node-3: `."""
    for cut in range(len(prefix) + 1):
        if _known_prefixes(prefix, cut, _nothing_found()) == len(prefix):
            return prefix[:cut]
    return prefix


def _lead(text: str, start: int, floor: int) -> int:
    """Where a region with its marker on the line at `start` begins: the
    earliest of the LOOKBACK lines before it (not before `floor`) that holds
    a lead, else `start` itself."""
    at = begin = start
    for _ in range(LOOKBACK):
        if at <= floor:
            break
        previous = max(text.rfind("\n", floor, at - 1) + 1, floor)
        if at - previous <= MAX_LINE and any(text.find(lead, previous, at) >= 0 for lead in _LEADS):
            begin = previous
        at = previous
    return begin


def _group_header(body: str) -> int | None:
    """The margin column of `  + Exception Group Traceback (most recent call last):`."""
    found = _GROUP_MARGIN.match(body)
    if found is None or found.group(2) != "+":
        return None
    return len(found.group(1)) if found.group(3).rstrip() == " Exception Group Traceback (most recent call last):" else None


# ---------------------------------------------------------------- model objects

class _Emitter:
    """Finished reports → ProcessDumps, ProcessRecords and catalogue hits."""

    def __init__(self, reader: _Reader):
        self.reader, self.facts, self.display = reader, reader.facts, reader.display
        self.ranks = {pair: next(iter(ranks)) for pair, ranks in reader.aliases.items() if len(ranks) == 1}

    def run(self) -> None:
        done = sorted(self.reader.done, key=lambda item: item[1].header.number)  # file order
        ending = self._endings(done)
        for index, (key, report) in enumerate(done):
            if isinstance(report, _Trace):
                self._trace(key, report, index in ending)
            else:
                self._dump(key, report)

    def _endings(self, done) -> set[int]:
        """The tracebacks that ended their process: per stream, the last
        uncaught one with no live dump after it, and every one PyTorch's
        excepthook prefixed. (A fatal dump says so itself.)"""
        ending: set[int] = set()
        last: dict[_Key, int] = {}
        for index, (key, report) in enumerate(done):
            if isinstance(report, _Trace):
                if report.thread or report.ignored:
                    continue
                if report.excepthook:
                    ending.add(index)
                last[key] = index
            elif not report.exited:
                last.pop(key, None)  # the process was alive after it
        ending.update(last.values())
        return ending

    def _rank(self, key: _Key) -> int | None:
        task, _, _, rank, local, _ = key
        if rank is not None:
            return rank
        return self.ranks.get((task, local)) if local is not None else None

    def _trace(self, key: _Key, trace: _Trace, ended: bool) -> None:
        final = trace.parts[-1]
        frames_printed = final.frames
        messages = [line for part in trace.parts for line in part.message] + trace.sub_messages
        headline = next((part.message[0] for part in reversed(trace.parts) if part.message), None)
        name = _exception_name(headline.body) if headline is not None else ""
        tool = _tool(trace, name)
        if tool:
            self.facts.diag(trace.header.number, f"the traceback of {tool} itself: read, not a rank's stack "
                                                 f"({name or 'no exception line'})", "info")
            return
        header = final.header.evidence(self.display)
        frames = tuple(Frame(function, file, line, at=number - final.header.number)
                       for function, file, line, number in reversed(frames_printed))
        if trace.more_frames:
            self.facts.diag(trace.header.number, f"traceback of {len(frames_printed) + trace.more_frames} "
                                                 f"frames: the first {MAX_FRAMES} kept")
        rank, (_, pid, host, _, local, _) = self._rank(key), key
        signal = "SIGINT" if name == "KeyboardInterrupt" and ended else ""
        evidence = headline.evidence(self.display) if headline is not None else header
        thread = ThreadStack("", trace.thread or "MainThread", None, frames, header)
        self.facts.processes.append(ProcessDump(
            source=KIND_TRACEBACK, path=self.display, pid=pid, host=host, threads=(thread,),
            evidence=evidence, rank_hint=rank, truncated=trace.truncated, exited=ended, signal=signal))
        errors = tuple(part.message[0].evidence(self.display) for part in trace.parts if part.message)
        errors += tuple(line.evidence(self.display) for line in trace.sub_messages)
        self.facts.records.append(ProcessRecord(
            source=KIND_TRACEBACK, path=self.display, host=host, pid=pid, rank=rank, local_rank=local,
            errors=errors or (header,), alive=False if ended else None, signal=signal, evidence=evidence))
        self._hits(messages, rank, host, pid, local)

    def _dump(self, key: _Key, dump: _Dump) -> None:
        rank, (_, pid, host, _, local, _) = self._rank(key), key
        threads = []
        for thread in dump.threads:
            frames = tuple(Frame(function, file, line, at=number - thread.header.number)
                           for function, file, line, number in thread.frames)
            threads.append(ThreadStack(thread.tid, "", True if thread.current else None, frames,
                                       thread.header.evidence(self.display)))
        truncated = dump.truncated or any(t.truncated for t in dump.threads) or (
            dump.kind != "user" and not dump.threads)
        header = dump.header.evidence(self.display)
        self.facts.processes.append(ProcessDump(
            source=KIND_FAULTHANDLER, path=self.display, pid=pid, host=host, threads=tuple(threads),
            evidence=header, rank_hint=rank, truncated=truncated, exited=dump.exited, signal=dump.signal))
        if dump.kind in ("fatal", "windows"):
            self.facts.records.append(ProcessRecord(
                source=KIND_FAULTHANDLER, path=self.display, host=host, pid=pid, rank=rank, local_rank=local,
                errors=(header,), alive=False if dump.exited else None, signal=dump.signal, evidence=header))
            self._hits([dump.header], rank, host, pid, local)

    def _hits(self, lines: list[_Line], rank, host, pid, local) -> None:
        """The lines the message catalogue (rules/messages/) recognizes. A
        run of consecutive lines goes in one call, numbered from its first."""
        if not lines:
            return
        runs: list[list[_Line]] = []
        for line in sorted(lines, key=lambda item: item.number):
            if runs and line.number == runs[-1][-1].number + 1:
                runs[-1].append(line)
            elif not runs or line.number != runs[-1][-1].number:
                runs.append([line])
        for run in runs:
            try:
                found = messages.hits([line.body for line in run], self.display, run[0].number,
                                      rank=rank, host=host, pid=pid, local_rank=local)
            except Exception as exc:  # noqa: BLE001 - the catalogue is data; its fault must not lose the file
                self.facts.diag(run[0].number, f"message catalogue failed on this line ({exc.__class__.__name__})",
                                "error")
                return
            self.facts.messages.extend(found)


def _tool(trace: _Trace, name: str) -> str:
    """The tool whose own traceback this is, or ""."""
    if name.rsplit(".", 1)[-1] in _LAUNCHER_ERRORS:
        return "torchrun"
    for frame in trace.parts[-1].frames[:4]:
        for suffix, tool in _TOOLS:
            if frame[1].endswith(suffix):
                return tool
    return ""


def _exception_name(body: str) -> str:
    parsed = _parse_line(body)
    return parsed[1] if parsed[0] == "exception" else ""


# ---------------------------------------------------------------- entry point

def parse(path: str, display: str, kind: str = KIND_TRACEBACK) -> Facts:
    """Every traceback and faulthandler dump in the file, whatever `kind`
    the sniffer saw first. A big file is read as its head and its tail
    (statements.HEAD_WINDOW, TAIL_WINDOW: a rank's last words are at its
    end); lines of the tail are numbered back from the end, -1 the last."""
    facts = Facts(kind, display)
    windows, skipped = read_windows(path, display)
    if not any(text.strip() for text, _ in windows):
        raise InputError(display, "empty file")
    if skipped:
        facts.diag(0, f"{skipped:,} bytes in the middle of this file were not searched for tracebacks (its first "
                      f"{HEAD_WINDOW >> 20} MiB and last {TAIL_WINDOW >> 20} MiB were; lines of the last are "
                      "numbered back from the end, -1 being the last line)", "info")
    reader = _Reader(facts, display)
    head = list(itertools.islice(iter(windows[0][0].split("\n", LABEL_HEAD_LINES)), LABEL_HEAD_LINES))
    reader.labelled = labelled([line.encode("utf-8", "replace") for line in head])
    for text, tail_lines in windows:
        facts.lines_read += reader.read(text, 1 if tail_lines is None else -tail_lines)
    reader.finish()
    if not facts.processes and not facts.diagnostics:
        facts.diag(0, "no Python traceback or faulthandler dump found")
    return facts


forensics_sniff, forensics_parse = reader_hooks(
    {KIND_TRACEBACK: lambda artifact: parse(artifact.path, artifact.display, KIND_TRACEBACK),
     KIND_FAULTHANDLER: lambda artifact: parse(artifact.path, artifact.display, KIND_FAULTHANDLER)},
    sniff)
forensics_sniff_markers = markers_hook((b"Traceback (most recent call last)", b"Fatal Python error", b"Current thread 0x",
                                        b"Thread 0x"))
