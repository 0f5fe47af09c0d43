"""torchelastic error files (`error.json`): the exception a worker died of.

A job whose entry point is wrapped with
`torch.distributed.elastic.multiprocessing.errors.record` writes, when it
raises, to the file named by `TORCHELASTIC_ERROR_FILE` (torchrun sets it per
worker: `<log_dir>/<run_id>_<rand>/attempt_<n>/<local_rank>/error.json`).
`ErrorHandler.record_exception` (errors/error_handler.py) writes one line:

    {"message": {"message": "RuntimeError: … Timed out waiting 15000ms for recv operation to complete",
                 "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  File …",
                               "timestamp": "1796144717"}}}

torchrun's own error file (`dump_error_file`, when the agent has one) is the
root-cause worker's copy with `"errorCode": <exit code>` added inside
`message`. `ProcessFailure._get_error_data` (errors/__init__.py) also reads
the other shape, `{"message": "<text>", "timestamp": "…"}`, which it leaves as
is ("a new message format"). A hand-formatted file (indented JSON) is read the
same way.

What one file gives:
- a `ProcessRecord` (source "elastic-error"): not alive, its error the
  exception line (the first line of `message`), `errorCode` as exit code,
  timed out when the catalogue says the exception is a timeout;
- a `ProcessDump` (source "traceback", `exited`) of the `py_callstack` frames,
  innermost first. A chained exception (`raise … from exc`, or one raised
  while handling another) is printed as several tracebacks: when the earlier
  one starts in the function where the later one ends, the two are one stack
  (the error was caught there), and the frames are joined, so the stack
  reaches down to where the first error happened (`work.wait()` in the
  all_reduce that timed out) — else the last traceback alone;
- `MessageHit`s of the message catalogue for each line of the message and for
  the exception lines of earlier chained tracebacks (the root cause's text).

Which rank: the file says none. A `rank3`-style name in its path is taken as
the global rank. torchrun's layout names the folder by the LOCAL rank: it is
kept as `local_rank` only (global and local ranks agree on one node only);
torchrun's failure summary (`rank : 3 (local_rank: 3)` … `error_file: …`)
ties them. Evidence lines are the lines of the file where each value sits
(all on line 1 of a file the handler wrote).
"""

from __future__ import annotations

import json
import os
from json.decoder import JSONDecodeError, scanstring

from .. import lazy
from ..model import Evidence, Frame, ProcessDump, ProcessRecord, ThreadStack
from . import jsonwalk
from .attribution import rank_from_path
from .facts import Facts
from .reader import reader_hooks
from .textio import InputError, has_nul, read_document

KIND = "elastic-error"
SOURCE = "elastic-error"
DUMP_SOURCE = "traceback"
MAX_BYTES = 64 * 1024 * 1024   # an error file is a few KiB; more is not one
EVIDENCE_CHARS = 2000

# ------------------------------------------------------------------ sniffing

_SNIFF_RECORD = lazy.regex(rb'^\s*\{\s*"message"\s*:\s*\{\s*"message"\s*:')
_SNIFF_STRING = lazy.regex(rb'^\s*\{\s*"message"\s*:\s*"')
_SNIFF_KEYS = lazy.regex(rb'"(?:extraInfo|py_callstack|errorCode|errorTraits)"\s*:')


def sniff(path: str, head: bytes) -> str | None:
    """The handler's own shape: an object whose first key is `message`,
    holding `message` + `extraInfo` (or `errorCode`), or holding a string
    beside a `timestamp` in a file named like an error file."""
    if not head or has_nul(head):
        return None
    text = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    if _SNIFF_RECORD.match(text) and _SNIFF_KEYS.search(text):
        return KIND
    if _SNIFF_STRING.match(text) and (b'"timestamp"' in text or b'"errorTraits"' in text) \
            and "error" in os.path.basename(path).lower():
        return KIND
    return None


# ------------------------------------------------------------------ reading

_TORCHRUN_LAYOUT = lazy.regex(r"(?:^|/)attempt_(\d+)/(\d{1,7})/[^/]+$")
_STRING_MESSAGE = lazy.regex(r'"message"\s*:\s*"((?:[^"\\\n]|\\.)*)"')


class _Value:
    """A decoded value and the 1-based line where it starts."""

    __slots__ = ("value", "line")

    def __init__(self, value, line: int):
        self.value, self.line = value, line


def parse(path: str, display: str) -> Facts:
    text = read_document(path, display, MAX_BYTES)
    facts = Facts(KIND, display)
    facts.lines_read = text.count("\n") + 1
    try:
        fields = _fields(text)
    except (JSONDecodeError, RecursionError) as exc:
        fields = _salvage(text, display, exc, facts)
    message, callstack, timestamp, code = (fields.get(k) for k in ("message", "py_callstack", "timestamp",
                                                                     "errorCode"))
    if message is None or not isinstance(message.value, str):
        raise InputError(display, "not a torchelastic error file: no 'message' text", 1)
    _read(facts, display, message, callstack, timestamp, code)
    return facts


def _fields(text: str) -> dict[str, _Value]:
    """message, py_callstack, timestamp, errorCode of either shape, with lines."""
    line_of = jsonwalk.LineCounter(text)
    start = jsonwalk.skip_ws(text, 0)
    top, offsets, end = jsonwalk.walk_object(text, start, {"message": _object_or_value})
    if jsonwalk.skip_ws(text, end) != len(text):
        raise JSONDecodeError("extra data after the error object", text, jsonwalk.skip_ws(text, end))
    found: dict[str, _Value] = {}
    where = dict((key, pos) for key, pos in offsets)
    message = top.get("message")
    if isinstance(message, tuple):  # {"message": {"message": …, "extraInfo": {…}, "errorCode": N}}
        inner, inner_offsets = message
        inner_at = dict(inner_offsets)
        if "message" in inner:
            found["message"] = _Value(inner["message"], line_of(_value_pos(text, inner_at["message"])))
        if "errorCode" in inner:
            found["errorCode"] = _Value(inner["errorCode"], line_of(_value_pos(text, inner_at["errorCode"])))
        extra = inner.get("extraInfo")
        if isinstance(extra, tuple):
            extra_values, extra_offsets = extra
            extra_at = dict(extra_offsets)
            for key in ("py_callstack", "timestamp"):
                if key in extra_values:
                    found[key] = _Value(extra_values[key], line_of(_value_pos(text, extra_at[key])))
    elif message is not None:  # {"message": "…", "timestamp": "…"}
        found["message"] = _Value(message, line_of(_value_pos(text, where["message"])))
        if "timestamp" in top:
            found["timestamp"] = _Value(top["timestamp"], line_of(_value_pos(text, where["timestamp"])))
    return found


def _object_or_value(text: str, pos: int):
    """An object as ((values, offsets), end), walking one level further for
    `extraInfo`; anything else decoded whole."""
    if text[pos:pos + 1] != "{":
        return jsonwalk.decode_at(text, pos)
    values, offsets, end = jsonwalk.walk_object(text, pos, {"extraInfo": _object_or_value})
    return (values, offsets), end


def _value_pos(text: str, key_pos: int) -> int:
    """Where the value of the key quoted at `key_pos` starts."""
    _, pos = scanstring(text, key_pos + 1)
    pos = jsonwalk.skip_ws(text, pos)
    return jsonwalk.skip_ws(text, pos + 1)  # past the ':'


def _salvage(text: str, display: str, exc: Exception, facts: Facts) -> dict[str, _Value]:
    """A file cut short (the worker died writing it): the first complete
    `"message": "…"` string, if any, and a warning naming where it broke."""
    where = getattr(exc, "lineno", 0)
    reason = getattr(exc, "msg", "") or "nested too deeply"
    for found in _STRING_MESSAGE.finditer(text):
        try:
            value = json.loads(f'"{found.group(1)}"')
        except JSONDecodeError:
            continue
        facts.diag(where, f"invalid JSON ({reason}): only the message text was read")
        return {"message": _Value(value, text.count("\n", 0, found.start()) + 1)}
    raise InputError(display, f"invalid JSON: {reason}", where) from None


def _read(facts: Facts, display: str, message: _Value, callstack: _Value | None,
          timestamp: _Value | None, code: _Value | None) -> None:
    lines = [line for line in message.value.split("\n") if line.strip()] or [message.value]
    headline = lines[0].strip()
    evidence = Evidence(display, message.line, headline[:EVIDENCE_CHARS])
    rank = rank_from_path(display)
    layout = _TORCHRUN_LAYOUT.search(display.replace(os.sep, "/"))
    local_rank = int(layout.group(2)) if layout else None
    if rank is None and local_rank is not None:
        facts.diag(message.line, f"torchrun names this folder by local rank {local_rank} "
                                 f"(attempt {layout.group(1)}); the file does not say the global rank "
                                 "(torchrun's failure summary does: `rank : R (local_rank: L)` … `error_file:`)",
                   "info")
    stacks = _tracebacks(callstack.value) if callstack is not None and isinstance(callstack.value, str) \
        else _tracebacks(message.value)
    causes = [line for block in stacks[:-1] for line in block[1]]  # earlier chained exceptions
    hits = _catalogue_hits(facts, [(message.line, line) for line in lines]
                           + [(callstack.line if callstack else message.line, line) for line in causes],
                           rank, local_rank)
    facts.messages.extend(hits)
    timed_out = any(_cause(hit.id) == "timeout" for hit in hits)
    peers = tuple(sorted({hit.fact("peer_rank") for hit in hits if isinstance(hit.fact("peer_rank"), int)}))
    exit_code = code.value if code is not None and isinstance(code.value, int) \
        and not isinstance(code.value, bool) else None
    facts.records.append(ProcessRecord(
        source=SOURCE, path=display, rank=rank, local_rank=local_rank, errors=(evidence,),
        peers_in_errors=peers, timed_out=timed_out, alive=False, exit_code=exit_code, evidence=evidence))
    if timestamp is not None:
        seconds = _seconds(timestamp.value)
        if seconds is None:
            facts.diag(timestamp.line, f"timestamp {timestamp.value!r} is not epoch seconds: ignored")
        facts.observed_at = seconds
    frames = _frames(stacks)
    if frames:
        line = callstack.line if callstack is not None else message.line
        header = Evidence(display, line, "Traceback (most recent call last):")
        facts.processes.append(ProcessDump(
            source=DUMP_SOURCE, path=display, threads=(ThreadStack("", "", None, frames, header),),
            evidence=evidence, exited=True))
    elif callstack is not None:
        facts.diag(callstack.line, "py_callstack holds no `File \"…\", line N, in …` frame")


def _seconds(value) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return seconds if 0 < seconds < 1e11 else None


# ------------------------------------------------------------------ tracebacks

_FRAME = lazy.regex(r'  File "(?P<file>.*)", line (?P<line>\d{1,9}), in (?P<function>.+)')
_CHAIN = ("The above exception was the direct cause of the following exception:",
          "During handling of the above exception, another exception occurred:")


def _tracebacks(text: str) -> list[tuple[list[Frame], list[str]]]:
    """Each `Traceback (most recent call last):` block of a formatted
    exception: its frames (outermost first, as printed) and its exception
    lines (the unindented lines after the frames)."""
    blocks: list[tuple[list[Frame], list[str]]] = []
    frames: list[Frame] | None = None
    exception: list[str] = []
    for line in text.split("\n"):
        if line.startswith("Traceback (most recent call last):"):
            if frames is not None:
                blocks.append((frames, exception))
            frames, exception = [], []
        elif frames is None:
            continue
        elif line.strip() in _CHAIN:
            blocks.append((frames, exception))
            frames, exception = None, []
        elif line.startswith("  File "):
            found = _FRAME.fullmatch(line.rstrip())
            if found is not None and not exception:
                frames.append(Frame(found["function"], found["file"], int(found["line"])))
        elif line.strip() and not line.startswith((" ", "\t")):
            exception.append(line.strip())
    if frames is not None:
        blocks.append((frames, exception))
    return blocks


def _frames(blocks) -> tuple[Frame, ...]:
    """The frames of the last traceback, innermost first, extended by each
    earlier traceback that starts in the function where the next one ends."""
    blocks = [frames for frames, _ in blocks if frames]
    if not blocks:
        return ()
    stack = list(blocks[-1])
    for earlier in reversed(blocks[:-1]):
        inner, outer = stack[-1], earlier[0]
        if (inner.function, inner.file) != (outer.function, outer.file):
            break
        stack = stack[:-1] + list(earlier)
    return tuple(reversed(stack))


# ------------------------------------------------------------------ the message catalogue

def _catalogue_hits(facts: Facts, lines, rank, local_rank) -> list:
    try:
        from .. import messages
    except ImportError:  # a build without the catalogue
        return []
    hits = []
    try:
        for number, line in lines:
            hits.extend(messages.hits([line], facts.path, number, rank=rank, local_rank=local_rank))
    except messages.CatalogueError as exc:
        facts.diag(0, f"the message catalogue could not be loaded: {exc}", "error")
        return []
    return hits


def _cause(entry_id: str) -> str:
    from .. import messages
    entry = messages.catalogue().get(entry_id)
    return entry.cause if entry is not None else ""


# ------------------------------------------------------------------ plugin hooks

forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)}, sniff)
