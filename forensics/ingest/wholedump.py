"""Files that are one stack dump and nothing else, known without asking every reader.

A collection of ten thousand ranks is mostly `py-spy dump` and gdb `thread
apply all bt` files, one per process. Asking every reader about each (and
about its tail and marked middle once it passes 64 KiB) cost more than
parsing it. A file whose every line is of one dump's own shapes (`pyspy.whole_dump`,
`gdb.whole_dump`) can hold nothing another reader claims; that holds only
while the built-in readers are the only ones asked, so a plugin with a
sniffer of its own turns this off (`applies`). Anything else, or anything
in doubt, goes to the full look (`scan.sniff`).
"""

from __future__ import annotations

from . import gdb, pyspy

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
    """The kind of a file that is one whole py-spy or gdb text dump, else None."""
    try:  # discovery passes regular files only: one open, one read
        with open(path, "rb", buffering=0) as handle:
            data = handle.read(MOST + 1)
    except OSError:
        return None
    if not data or len(data) > MOST or any(literal in data for literal in FOREIGN):
        return None
    if data.startswith(b"Process "):
        return pyspy.KIND if pyspy.whole_dump(data) else None
    return gdb.KIND if gdb.whole_dump(data) else None
