"""What `forensics collect` saw of the ranks' processes and their kernel:
`rank<R>.proc.json` and `dmesg.txt`.

`rank<R>.proc.json` is the collector's read of `/proc` for one rank at the
end of its last round (forensics/live/collect.py, `_proc_facts`):

    {"pid": 28816,
     "status": {"Name": "python3", "State": "S (sleeping)", "PPid": "28813", …},
     "wchan": "futex_do_wait",
     "threads": {"28816": {"name": "python3", "state": "S", "utime": 145, "stime": 15,
                           "wchan": "futex_do_wait"}, …},
     "clock_ticks_per_s": 100}

What it gives, as a `ProcessRecord` of the rank (named by the file):
- a zombie (`Z`) or dead (`X`) process, or one gone by the time /proc was
  read (no state and no threads left), is not alive;
- a process or thread in uninterruptible sleep (`D`: a kernel call that
  does not return, often storage or a device driver) or stopped (`T`, `t`:
  a signal or a debugger; it runs again only when resumed) is cited as
  evidence of the rank, with the kernel function it waits in (`wchan`);
- running and sleeping processes are what every rank of a hung job looks
  like: read, nothing of note.

`dmesg.txt` (or any kernel log named like one: `dmesg`, `kern.log`) is
searched whole for the message catalogue's kernel lines (OOM kills,
segfaults, NVIDIA Xid errors) by the statements reader's search. That
reader claims a text file only when its first 64 KiB hold such a line; a
kernel log whose first lines are ordinary is claimed here, so a line past
them is still found, and a log with none is read, not skipped. (The claim
here is a wrapper of `forensics_sniff` that sees the statements reader's.)
"""

from __future__ import annotations

import os
import re
from json.decoder import JSONDecodeError

from ..model import Artifact, Evidence, ProcessRecord
from . import jsonwalk, statements
from .attribution import rank_from_path
from .facts import Facts
from .reader import reader_hooks, yielding_sniff
from .textio import InputError, has_nul, looks_binary, read_document

KIND = "proc-state"
KERNEL_LOG = "kernel-log"
SOURCE = "proc"
MAX_BYTES = 16 << 20     # a proc.json of 10,000 threads is about 1.5 MiB
MAX_CITED_THREADS = 8    # threads in D or T state cited per process

STATES = {"R": "running", "S": "sleeping", "D": "disk sleep", "Z": "zombie", "X": "dead", "T": "stopped",
          "t": "tracing stop", "I": "idle", "P": "parked", "W": "paging", "K": "wakekill"}
ENDED = frozenset("ZX")   # the process has exited
NOTED = frozenset("DTt")  # alive, and not going anywhere by itself

_PROC_SHAPE = re.compile(rb'^\s*\{\s*"pid"\s*:\s*\d+\s*,\s*"status"\s*:\s*\{')


def sniff(path: str, head: bytes) -> str | None:
    """A collector's proc.json by its shape."""
    if not head or has_nul(head):
        return None
    return KIND if _PROC_SHAPE.match(head) else None


def sniff_kernel_log(path: str, head: bytes) -> str | None:
    """A kernel log by its name and its first line's time. The hook claims
    it only when the statements reader did not (its head holds a
    catalogued line: the statements reader's search reads it whole)."""
    if not head or has_nul(head):
        return None
    return KERNEL_LOG if _kernel_log(path, head) else None


# ------------------------------------------------------------------ rank<R>.proc.json

def parse(path: str, display: str) -> Facts:
    text = read_document(path, display, MAX_BYTES)
    facts = Facts(KIND, display)
    facts.lines_read = text.count("\n") + 1
    line_of = jsonwalk.LineCounter(text)
    try:
        top, offsets, end = jsonwalk.walk_object(text, jsonwalk.skip_ws(text, 0),
                                                 {"status": _object, "threads": _threads})
    except (JSONDecodeError, RecursionError) as exc:
        where = text.count("\n", 0, getattr(exc, "pos", 0)) + 1
        raise InputError(display, f"invalid JSON: {getattr(exc, 'msg', 'nested too deeply')}", where) from None
    if jsonwalk.skip_ws(text, end) != len(text):
        raise InputError(display, "invalid JSON: extra data after the object", line_of(end))
    at = dict(offsets)
    pid = top.get("pid")
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None
    rank = rank_from_path(display)
    if rank is None and pid is None:
        facts.diag(1, "neither the file's name (rank<R>.proc.json) nor a pid ties this process to a rank: not used")
        return facts
    status, status_at = top.get("status") or ({}, [])
    threads = top.get("threads") or {}
    if not isinstance(status, dict) or not isinstance(threads, dict):
        raise InputError(display, "not a collector's proc.json: 'status' and 'threads' must be objects", 1)
    wchan = _text(top.get("wchan"))
    state = _text(status.get("State"))
    letter = state[:1]
    errors: list[Evidence] = []
    alive: bool | None = True
    if not state and not threads:
        line = line_of(at["status"]) if "status" in at else 1
        evidence = Evidence(display, line, f"process {pid}: gone when /proc was read (no state, no threads)")
        alive = False
    else:
        line = line_of(dict(status_at)["State"]) if "State" in dict(status_at) else 1
        evidence = Evidence(display, line, f"State: {state or '?'}" + (f" — wchan: {wchan}" if wchan else ""))
        if letter in ENDED:
            alive = False
        elif letter in NOTED:
            errors.append(evidence)
        elif letter and letter not in STATES:
            facts.diag(line, f"process state {state!r} is not one Linux reports: not judged")
    cited = 0
    for tid, (values, key_pos) in threads.items():
        thread_state = _text(values.get("state"))[:1]
        if thread_state not in NOTED or str(tid) == str(pid):
            continue  # the main thread is the process's own State
        cited += 1
        if cited > MAX_CITED_THREADS:
            continue
        thread_wchan = _text(values.get("wchan"))
        name = _text(values.get("name"))
        errors.append(Evidence(display, line_of(key_pos),
                               f"thread {tid}" + (f" ({name})" if name else "")
                               + f": state {thread_state} ({STATES[thread_state]})"
                               + (f" — wchan: {thread_wchan}" if thread_wchan else "")))
    if cited > MAX_CITED_THREADS:
        facts.diag(1, f"{cited - MAX_CITED_THREADS} more thread(s) in state D or T not cited "
                      f"(the first {MAX_CITED_THREADS} are)", "info")
    facts.records.append(ProcessRecord(source=SOURCE, path=display, pid=pid, rank=rank, errors=tuple(errors),
                                       alive=alive, evidence=evidence))
    return facts


def _object(text: str, pos: int):
    """An object as ((values, [(key, offset)]), end)."""
    values, offsets, end = jsonwalk.walk_object(text, pos)
    return (values, offsets), end


def _threads(text: str, pos: int):
    """{tid: (values, offset of the tid's key)}: each thread's line is cited."""
    values, offsets, end = jsonwalk.walk_object(text, pos)
    return {key: (values[key] if isinstance(values[key], dict) else {}, key_pos) for key, key_pos in offsets}, end


def _text(value) -> str:
    return value.strip() if isinstance(value, str) else ""


# ------------------------------------------------------------------ dmesg.txt

_KERNEL_NAME = re.compile(r"dmesg|kern(?:el)?[._-]?log", re.I)
_KERNEL_LINE = re.compile(
    rb"(?:<\d{1,3}>)?\[\s*\d{1,10}\.\d{3,9}\]"                      # dmesg: [12345.678901]
    rb"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]"  # dmesg -T
    rb"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[,.]\d+[+-]\d\d:?\d\d "        # dmesg --time-format iso
    rb"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: ")           # journalctl -k, syslog's kern.log


def _kernel_log(path: str, head: bytes) -> bool:
    """A kernel log by name and by its first line."""
    if not _KERNEL_NAME.search(os.path.basename(path)) or looks_binary(head):
        return False
    first = next((line for line in head.split(b"\n", 8)[:8] if line.strip()), b"")
    return bool(_KERNEL_LINE.match(first.lstrip()))


def parse_kernel_log(artifact: Artifact) -> Facts:
    facts = statements.parse(artifact)
    facts.kind = KERNEL_LOG
    return facts


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display), KERNEL_LOG: parse_kernel_log}, sniff)
# a second `forensics_sniff`: an ordinary wrapper, outside the statements reader's (innermost), so it sees its claim
forensics_sniff_kernel_log = yielding_sniff(sniff_kernel_log, frozenset({statements.KIND}))
