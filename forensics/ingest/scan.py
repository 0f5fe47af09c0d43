"""What a file is, decided from all of it: the one look every file gets before it is read.

A text file is not one kind decided by its first lines. Every reader is asked
about its head, its tail and the windows of its middle around lines some
reader may claim (`textio.read_ends`), and the file gets every kind any of
them shows. A console interleaving processes under launcher prefixes
(`[rank3]:`) becomes one artifact per process for the formats whose lines only
make sense in sequence. Readers then read only what is theirs.
"""

from __future__ import annotations

import os
import re

from ..model import Artifact
from .attribution import STRONG, path_rank, rank_from_path
from .textio import (HEAD_BYTES, LAUNCHER_PREFIX, InputError, has_nul, launcher_prefixes, looks_binary, looks_json,
                     read_ends, read_head, stamped, stamped_somewhere, unstamp)


def markers(plugins) -> tuple[bytes, ...]:
    """Every reader's `forensics_sniff_markers`, once per plugin set: what the
    middle of a big text file is searched for."""
    count = len(plugins.pm.get_plugins())
    known = getattr(plugins, "_sniff_markers", None)
    if known is None or known[0] != count:  # a plugin registered since brings its own
        # `call` puts every implementation's answer in one list
        known = count, tuple(dict.fromkeys(m for m in plugins.call("forensics_sniff_markers")
                                           if isinstance(m, bytes) and m))
        plugins._sniff_markers = known
    return known[1]


def artifacts_of(kinds: list[str], path: str, display: str, full: bool, stamps: bool):
    """One Artifact per kind; a `kind@[rankN]:` kind (`_split_by_process`) is the lines
    under that prefix, shown as `display[rankN]` (which names its rank)."""
    for kind in kinds:
        kind, _, prefix = kind.partition(SPLIT)
        shown = f"{display}{prefix[:-1]}" if prefix else display
        yield Artifact(kind, path, shown, rank_from_path(shown), full, stamps, prefix)


# What forensics itself writes beside the evidence (a watch verdict's folder,
# `-o` into the incident): its JSON report, watch's verdict summary, its HTML report.
_OWN_OUTPUT = re.compile(rb'"schema"\s*:\s*"(forensics\.(?:report|watch-verdict)/\d+)"'
                         rb'|<meta name="generator" content="(forensics) ')


STAMPED = ("every line starts with a log collector's timestamp (kubectl or docker logs --timestamps, "
           "GitHub Actions): read without them")


def sniff(path: str, display: str, plugins) -> tuple[list[str], str, bool]:
    """(kinds, why none, stamped): the kinds of every parser that claims the
    file (a console log can hold c10d and NCCL lines both), or none and why;
    and whether its lines start with a log collector's timestamps
    (`textio.stamped`), which neither the sniffers nor the parsers then see
    (`_parse_one` parses a copy without them)."""
    try:
        head = read_head(path)
    except InputError as exc:
        return [], exc.message, False
    if not head:
        return [], "empty file", False
    own = _OWN_OUTPUT.search(head[:4096])
    if own is not None:
        what = (own.group(1) or own.group(2)).decode()
        return [], f"a report this tool wrote ({what}): not evidence, skipped", False
    stamps = stamped(head)
    if stamps:
        head = unstamp(head)
    kinds = plugins.each("forensics_sniff", path=path, head=head)
    tail = head
    if len(head) >= HEAD_BYTES and _plain_text(head):
        more, stamped_later, tail = _sniff_beyond_head(path, plugins)
        kinds += [kind for kind in more if kind not in kinds]
        stamps = stamps or stamped_later
    if b"]:" in head or len(head) >= HEAD_BYTES:
        split, only_prefixed = _split_by_process(path, head, plugins, stamps)
        # a format read per process is not read whole too, where only its prefixed lines show it
        kinds = [kind for kind in kinds if kind not in only_prefixed] + split
    if not has_nul(head) and not looks_binary(head) and (not kinds or _ends_unclaimed(path, tail, plugins, stamps)):
        # a rank's console nothing else reads, or whose last lines nothing else reads: its last words
        from . import console
        kinds += [kind for kind in (console.sniff(path, head),) if kind and kind not in kinds]
    if kinds:
        return kinds, STAMPED if stamps else "", stamps
    if looks_binary(head):
        return [], "binary file, not a recognized artifact: skipped", False
    return [], "not a recognized artifact: skipped", False


def _plain_text(head: bytes) -> bool:
    """Text that is not a structured document (JSON: snapshots, facts, maps), which is known by its head."""
    if has_nul(head) or looks_binary(head):
        return False
    return not looks_json(head)


LAST_LINES = 5  # a console's last lines that, when they are its own output, are its last words
_NATIVE_FRAME = re.compile(rb"(?:frame )?#\d")  # c10d's `frame #4: …`, gdb's `#0  0x…`


def _ends_unclaimed(path: str, tail: bytes, plugins, stamps: bool) -> bool:
    """Whether a text file (`tail`: its end, or all of a small file) ends in
    LAST_LINES non-blank lines of the job's own output: lines no reader claims,
    holding none of the readers' markers, none indented or a native frame
    (stack dumps and tracebacks are). A rank's console whose NCCL init lines
    or early warnings a reader reads, and which ends in what the job printed
    ("loading shard 17 from …"), has last words too."""
    # the file's own name (`rank3.stdout.log`: not a folder's, which may be the incident's) names its rank,
    # or each line does (`[rank3]:`)
    found = path_rank(os.path.basename(path))
    own = found is not None and found.strength == STRONG
    lines: list[bytes] = []
    end = len(tail)
    while end > 0 and len(lines) < LAST_LINES:
        start = tail.rfind(b"\n", 0, end - 1) + 1
        line = unstamp(tail[start:end]) if stamps else tail[start:end]
        end = start
        prefix = LAUNCHER_PREFIX.match(line)
        text = line[prefix.end():] if prefix else line
        if not text.strip():
            continue
        if text[:1].isspace() or _NATIVE_FRAME.match(text) or any(mark in text for mark in markers(plugins)) \
                or not (own or prefix and prefix.group(1) == b"rank"):
            return False
        lines.append(line)
    return len(lines) == LAST_LINES and not plugins.each("forensics_sniff", path=path,
                                                         head=b"".join(reversed(lines)))


def _sniff_beyond_head(path: str, plugins) -> tuple[list[str], bool, bytes]:
    """The kinds the rest of a text file shows: its tail (where a console log
    ends in watchdog timeouts and tracebacks after hours of training output)
    and the windows of its middle around lines some reader may claim; whether
    the tail's lines carry a collector's timestamps (a job's output stamped
    from some point on: the stamps are taken off line by line); and the tail."""
    try:
        _, middle, tail = read_ends(path, markers(plugins))
    except InputError:
        return [], False, b""
    kinds: list[str] = []
    stamps = False
    for sample in (tail, middle):
        if not sample:
            continue
        if stamped_somewhere(sample):
            stamps = True
        if stamps:
            sample = unstamp(sample)
        kinds += [k for k in plugins.each("forensics_sniff", path=path, head=sample) if k not in kinds]
    return kinds, stamps, tail


# Formats whose lines make sense only in sequence, one process's: a console
# interleaving processes under launcher prefixes is read per process for them.
# (The line readers, c10d, NCCL and the catalogue, take the prefix line by line;
# the c10d reader also reads the Python tracebacks under each prefix.)
BLOCK_KINDS = frozenset({"py-spy", "gdb", "pystack", "faulthandler"})
SPLIT = "@"  # "py-spy@[rank3]:": the kind, read from the lines under that prefix only


def _split_by_process(path: str, head: bytes, plugins, stamps: bool) -> tuple[list[str], set[str]]:
    """`kind@prefix` for every block format the file's prefixed lines hold,
    once per launcher prefix (`[rank3]:`): two ranks' py-spy dumps or
    faulthandler dumps interleaved line by line are two dumps. And the block
    kinds not to read whole as well: those only the prefixed lines show (a
    dump the file holds without a prefix, beside a job's `[rank0]:` prints,
    is still read whole)."""
    sample = unstamp(head) if stamps else head
    if not LAUNCHER_PREFIX.search(sample):
        try:
            _, middle, tail = read_ends(path, markers(plugins))
        except InputError:
            return [], set()
        sample = unstamp(tail + middle) if stamps else tail + middle
        if not LAUNCHER_PREFIX.search(sample):
            return [], set()
    by_prefix: dict[bytes, list[bytes]] = {}
    plain = []
    for line in sample.splitlines(keepends=True):
        found = LAUNCHER_PREFIX.match(line)
        if found:
            by_prefix.setdefault(found.group(0), []).append(line[found.end():])
        else:
            plain.append(line)

    def block_kinds(lines: list[bytes]) -> set[str]:
        return {k for k in plugins.each("forensics_sniff", path=path, head=b"".join(lines)) if k in BLOCK_KINDS} \
            if lines else set()

    shown = {prefix: kinds for prefix, lines in by_prefix.items() if (kinds := block_kinds(lines))}
    if not shown:
        return [], set()
    found = set().union(*shown.values())
    # each process's kinds where its own lines show them: a process that printed no dump is no artifact of one
    split = [f"{kind}{SPLIT}{prefix.decode('ascii')}" for kind in sorted(found) for prefix in launcher_prefixes(path)
             if kind in shown.get(prefix, ())]
    return split, found - block_kinds(plain)
