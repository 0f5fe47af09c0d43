"""Files that are one stack dump and nothing else, or a pickled Flight Recorder
dump, known without asking every reader.

A collection of ten thousand ranks is mostly `py-spy dump` and gdb `thread
apply all bt` files, one per process. Asking every reader about each (and
about its tail and marked middle once it passes 64 KiB) cost more than
parsing it. A file whose every line is of one dump's own shapes (`pyspy.whole_dump`,
`gdb.whole_dump`) can hold nothing another reader claims; that holds only
while the built-in readers are the only ones asked, so a plugin with a
sniffer of its own turns this off (`applies`). Anything else, or anything
in doubt, goes to the full look (`scan.sniff`). A pickle is binary, so no
text reader claims it, and the full look searched a 300 KB Flight Recorder
dump's middle and tail for text marks: a pickle whose head the Flight
Recorder reader claims is its, from the head alone.
"""

from __future__ import annotations

from . import flightrecorder, gdb, pyspy
from .textio import HEAD_BYTES, has_nul

MOST = 1 << 20  # a bigger file is not one process's dump of a few dozen threads: the full look
# What another reader's lines hold and a dump's free text (a command line, a
# frame's name or arguments) does not: a log prefix's "] ", a NCCL line, an
# error or a traceback; and bytes a plain dump lacks. (Every other line shape
# a reader claims starts a line, which a dump's own shapes exclude.)
FOREIGN = (b"\x00", b"\r", b"\x1b", b"] ", b"NCCL ", b"Traceback", b"Error", b"Exception", b"Timed out")


def applies(plugins) -> bool:
    """Only the built-in readers are asked what a file is."""
    builtins = set(plugins.builtins)
    return all(impl.plugin_name in builtins for impl in plugins.pm.hook.forensics_sniff.get_hookimpls())


def kind_of(path: str) -> str | None:
    """The kind of a file that is one whole py-spy or gdb text dump, or a
    pickled Flight Recorder dump, else None."""
    try:  # discovery passes regular files only: one open, one or two reads
        with open(path, "rb", buffering=0) as handle:
            data = handle.read(HEAD_BYTES)
            if data[:1] == b"\x80":  # a pickle: binary, which no text reader claims
                return flightrecorder.KIND if has_nul(data) and flightrecorder.sniff(path, data) else None
            if not (data.startswith(b"Process ") or b"(LWP " in data):
                return None
            if len(data) == HEAD_BYTES:
                data += handle.read(MOST + 1 - HEAD_BYTES)
    except OSError:
        return None
    if not data or len(data) > MOST or any(literal in data for literal in FOREIGN):
        return None
    if data.startswith(b"Process "):
        return pyspy.KIND if pyspy.whole_dump(data) else None
    return gdb.KIND if gdb.whole_dump(data) else None
