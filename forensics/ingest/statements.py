"""Lines that state a cause, in any text file: the message catalogue's reader.

A user's folder often holds only fragments — WARN lines pasted from three
hosts, one rank's stderr, a traceback — in files no structured reader
claims, or whose decisive line sits where a structured reader does not look.
This reader claims every other text file whose head holds a line the
catalogue (rules/messages/) knows (the NCCL, c10d and RAS readers look up the
lines they read themselves; its sniffer is the innermost wrapper of
`forensics_sniff`, which sees what they claimed), finds every such line in
the file with one search per file, and records each as a `MessageHit`, tagged with the process that
printed it as far as the line's prefixes say: a launcher's `[rank3]:` or
`[default3]:`, Ray's `(pid=N)`, NCCL's `host:pid:tid [dev]`, or the rank in
the file's name. What the lines mean is decided by rules (rules/stated_cause.py).
"""

from __future__ import annotations

import re

from .. import messages
from ..model import Evidence, MessageHit
from .attribution import STRONG, path_rank
from .facts import Facts
from . import gdb, nccl, ncclras, pyspy, pystack, torchlog
from .nccl import _PREFIX as _NCCL_PREFIX
from .reader import markers_hook, reader_hooks, yielding_sniff
from .textio import (STREAM_ERRORS, InputError, compression, file_size, has_nul, looks_binary, open_binary,
                     read_at_most)
from .torchlog import _ANSI, _OUTER

KIND = "messages"
HEAD_WINDOW = 8 << 20    # a big file: its first 8 MiB (init lines, the first errors) …
TAIL_WINDOW = 56 << 20   # … and its last 56 MiB (where it stopped) are searched
KEEP_PER_ENTRY = 32      # hits of one entry kept per file: the first and the last halves
MAX_LINE = 64 * 1024


# Kinds whose readers run the catalogue over the lines they read themselves (a second pass over a
# big log would cost more than the log's own parse), or whose lines are frames that name
# functions, not messages (a console with a dump pasted at its head is still searched where its
# log is: each sample of a file is asked about on its own).
LEFT_TO_THEIR_READERS = frozenset({nccl.KIND, torchlog.KIND, ncclras.KIND, gdb.KIND, pyspy.KIND, pyspy.KIND_JSON,
                                   pystack.KIND})


def sniff(path: str, head: bytes) -> str | None:
    """A text file holding a catalogued line. The hook claims it only when no
    reader of LEFT_TO_THEIR_READERS did (`forensics_sniff` below)."""
    if has_nul(head) or looks_binary(head) or path.endswith((".py", ".pyi")):
        return None  # Python source quotes these messages as literals: a script, not what a run printed
    return KIND if messages.catalogue().mentions(head.decode("utf-8", "replace")) else None


def parse(artifact) -> Facts:
    facts = Facts(KIND, artifact.display)
    windows, skipped = _read(artifact.path, artifact.display)
    if skipped:
        facts.diag(0, f"{skipped} bytes in the middle of this {file_size(artifact.path)}-byte file were not "
                      f"searched for stated causes (its first {HEAD_WINDOW >> 20} MiB and last "
                      f"{TAIL_WINDOW >> 20} MiB were; lines of the last are numbered back from the end, "
                      f"-1 being the last line)", "info")
    cat = messages.catalogue()
    labels = _labels_are_ranks(windows[0][0])
    in_path = path_rank(artifact.display)
    kept: dict[str, list[MessageHit]] = {}
    dropped: dict[str, int] = {}
    lines = 0
    for number, line in ((n if last is None else n - last - 1, line)
                         for text, last in windows for n, line in _with_listings(text, cat)):
        lines += 1
        if len(line) > MAX_LINE:
            facts.diag(number, f"line of {len(line)} characters not searched for stated causes (limit {MAX_LINE})")
            continue
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        rank, local_rank, host, pid, body = _prefixes(line, labels)
        if rank is None and local_rank is None and in_path is not None and (in_path.strength == STRONG or pid is None):
            rank = in_path.rank  # a weak trailing number yields to the line's pid (a pid map places it)
        for hit in messages.line_hits(body, Evidence(artifact.display, number, line.strip()[:2000]),
                                      rank, host, pid, local_rank):
            bucket = kept.setdefault(hit.id, [])
            if len(bucket) < KEEP_PER_ENTRY:
                bucket.append(hit)
            else:  # keep the first half and a sliding last half
                bucket.pop(KEEP_PER_ENTRY // 2)
                bucket.append(hit)
                dropped[hit.id] = dropped.get(hit.id, 0) + 1
    for entry_id, count in dropped.items():
        facts.diag(0, f"{count} more lines of message {entry_id} not kept (the first and last "
                      f"{KEEP_PER_ENTRY // 2} are)", "info")
    facts.messages = sorted((h for hs in kept.values() for h in hs),
                            key=lambda h: (h.evidence.line < 0, h.evidence.line))
    facts.lines_read = lines
    return facts


# Horovod's stall inspector prints a header line, then `Missing ranks:` (0.16-0.19: `Stalled
# ranks:`) and one `N: [tensor, ...]` line per rank that has not submitted them; its oldest
# wording, `Stalled ops:` and `NAME [ready ranks: 0, 1, ...]` per op, one line or several.
# Such a listing is read as one line: the line that opens it with the lines that list.
_OPENS_LISTING = re.compile(r"(?:Missing ranks|Stalled ranks):\s*$|Stalled ops:")
_LISTING_LINE = re.compile(r"\s*(?:\d{1,7}!?: \[|[^\s\[\]]+ \[ready ranks:)")
_MAX_LISTING = 4096  # lines: Horovod lists one per rank


def _with_listings(text: str, cat):
    """(number, line) of the lines holding a catalogue literal, a listing
    (`_OPENS_LISTING`) joined with its listing lines, each without its prefixes."""
    joined_until = -1
    for number, line, end in cat.lines_with_literals(text, ends=True):
        if end <= joined_until:
            continue  # a listing line, read with the line that opened its listing
        if _OPENS_LISTING.search(line) is None:
            yield number, line
            continue
        parts = [line.rstrip()]
        for _ in range(_MAX_LISTING):
            nxt = text.find("\n", end + 1)
            following = text[end + 1:] if nxt < 0 else text[end + 1:nxt]
            body = _prefixes(following)[4] if following else ""
            if end >= len(text) or _LISTING_LINE.match(body) is None:
                break
            parts.append(body.strip())
            end = len(text) if nxt < 0 else nxt
        joined_until = end
        yield number, " ".join(parts)


def _read(path: str, display: str) -> tuple[list[tuple[str, int | None]], int]:
    """The file's text as windows (text, None) — or, for a big file, its
    head and its tail (text, lines in it), whose lines are numbered back
    from the end (-1 is the last) — and how many bytes were left between
    them. A compressed file gives its first windows' worth: it cannot seek."""
    size = file_size(path)
    try:
        with open_binary(path) as handle:
            if size <= HEAD_WINDOW + TAIL_WINDOW or compression(path):
                return [(read_at_most(handle, HEAD_WINDOW + TAIL_WINDOW).decode("utf-8", "replace"), None)], 0
            head = read_at_most(handle, HEAD_WINDOW)
            handle.seek(size - TAIL_WINDOW)
            tail = read_at_most(handle, TAIL_WINDOW)
    except STREAM_ERRORS as exc:
        raise InputError(display, f"cannot read: {exc}") from None
    tail = tail[tail.find(b"\n") + 1:]
    tail_lines = tail.count(b"\n") + (bool(tail) and not tail.endswith(b"\n"))
    return ([(head.decode("utf-8", "replace"), None), (tail.decode("utf-8", "replace"), tail_lines)],
            size - len(head) - len(tail))


def _labels_are_ranks(text: str) -> bool:
    """Whether the file is `srun --label` output whose labels are global
    ranks (SLURM_PROCID): consistent labels (torchlog.labelled) and none
    on a launcher's line (`[defaultN]:` workers, torchelastic's logging)."""
    head = text[:1 << 16].split("\n", torchlog.LABEL_HEAD_LINES)[:torchlog.LABEL_HEAD_LINES]
    if not torchlog.labelled([line.encode("utf-8", "replace") for line in head]):
        return False
    return not any(_LAUNCHED.match(line) for line in head)


_LAUNCHED = re.compile(r" *\d{1,6}: (?:\[default\d+\]:|.*\btorch\.distributed\.(?:elastic|run|launch))")


def _prefixes(line: str, labels: bool = False) -> tuple[int | None, int | None, str, int | None, str]:
    """(global rank, local rank, host, pid, the rest) from a line's outer
    launcher prefixes and NCCL's `host:pid:tid [dev]` prefix. With
    `labels`, a leading srun label (`12: `) is global rank 12 unless a
    `[rankN]:` follows it."""
    rank = local_rank = pid = label = None
    host = ""
    position = 0
    if labels:
        found = torchlog._LABEL.match(line)
        if found is not None:
            label, position = int(found.group(1)), found.end()
    while True:
        found = _OUTER.match(line, position)
        if found is None:
            break
        if found["rank"] is not None:
            rank = int(found["rank"])
        elif found["local"] is not None:
            local_rank = int(found["local"])
        elif found["pid"] is not None:
            pid = int(found["pid"])
        position = found.end()
    if rank is None and local_rank is None and label is not None:
        rank = label
    body = line[position:]
    if "NCCL " in body:
        nccl = _NCCL_PREFIX.match(body.lstrip().encode("utf-8", "replace")[:2048])
        if nccl is not None:
            host = nccl["host"].decode("utf-8", "replace")
            pid = int(nccl["pid"])
    return rank, local_rank, host, pid, body


_, forensics_parse = reader_hooks({KIND: parse}, sniff)
forensics_sniff = yielding_sniff(sniff, LEFT_TO_THEIR_READERS, innermost=True)
forensics_sniff_markers = markers_hook((b"Connection closed by peer", b"Timed out", b"timed out", b"CUDA error",
                                        b"out of memory", b"Killed process", b"Stalled", b"Missing ranks", b"Gloo",
                                        b"gloo", b"collective", b"signal ", b"Signal ", b"ncclInternalError",
                                        b"ncclSystemError", b"ncclRemoteError"))
