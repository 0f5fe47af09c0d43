"""A rank's own console whose lines no reader recognizes: its last words.

Hours of training output end where the process stopped printing. When a
rank's stdout or stderr holds no NCCL, c10d, catalogue or stack-dump line,
no other reader claims it; yet what it printed last is often what explains
it ("loading shard 17 from /mnt/data/…" while its peers time out in an
all_reduce). This reader takes such a file when it is a rank's own — its
name says which (`rank3.stdout.log`, `rank_3/console.txt`), or its lines
carry torchrun's `[rankN]:` prefixes — and keeps, per rank, its last
non-blank lines and its last progress line: a step, iteration, epoch, loss
or progress-bar line as PyTorch examples, Lightning, the Hugging Face
Trainer, Megatron-LM, DeepSpeed and torchtitan print them. The time of
that line, where it carries one, is when the rank last made progress.

Discovery asks this reader only about plain text files no other reader
claims (`forensics.ingest.scan.sniff`): its hook answers no sniff of its own.

The file is read from its end: its last TAIL_BYTES, and further back in
growing windows (up to MAX_BACK_BYTES) while no progress line has shown;
a console of many GB costs a few reads. Lines are numbered back from the
end of the file (-1 is the last) unless the whole file was read.
"""

from __future__ import annotations

import os
import re

from ..model import Evidence, RankState, plausible_rank
from .attribution import STRONG, path_rank
from .facts import Facts
from .reader import reader_hooks
from .textio import (HEAD_BYTES, STREAM_ERRORS, InputError, has_nul, looks_binary, looks_json, open_binary,
                     read_at_most, read_ends, uncoloured)

KIND = "console"
LAST_WORDS = 5                 # non-blank lines kept per rank
TAIL_BYTES = 64 * 1024         # the first window read from the end
MAX_BACK_BYTES = 8 << 20       # how far back a progress line is looked for
MAX_TEXT = 400                 # characters of a line kept
_STEP = 1 << 20

# Files that are not a process's console even when a rank names them.
_NOT_CONSOLE = re.compile(r"\.(?:py|pyc|json|ya?ml|toml|ini|cfg|sh|md|csv|tsv|html?|svg|png|jpe?g|pkl|pt|pth)"
                          r"(?:\.gz|\.zst)?$", re.I)
# A debugger's or dump tool's own output about a rank (gdb's stderr beside
# its backtrace: `rank0.gdb.txt.err`) is not what the rank printed.
_TOOL_OUTPUT = re.compile(r"gdb|lldb|py-?spy|pystack|nccl_trace|flight|locals|native", re.I)
_RANK_PREFIX = re.compile(rb"(?m)^\[rank(\d{1,7})\]:")
_RANK_PREFIX_TEXT = re.compile(r"^\[rank(\d{1,7})\]:\s?")

# Progress lines, as training loops print them:
#   PyTorch examples  `Train Epoch: 3 [1200/60000 (2%)]	Loss: 0.123456`
#   nanoGPT           `step 1200: train loss 2.3456, val loss 2.4567` / `iter 1200: loss 2.3456, time 512.3ms`
#   HF Trainer        `{'loss': 2.3456, 'grad_norm': 1.2, 'learning_rate': 4.5e-05, 'epoch': 0.12}`
#   Lightning / tqdm  `Epoch 3:  45%|████▌     | 450/1000 [02:13<02:43,  3.37it/s, v_num=0, train_loss=0.123]`
#   Megatron-LM       ` iteration     1200/  500000 | consumed samples: 153600 | … | lm loss: 2.345678E+00 |`
#   DeepSpeed         `[Rank 0] step=1200, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]`,
#                     `steps: 1200 loss: 2.3456 iter time (s): 0.500 samples/sec: 64.000`
#   torchtitan        `step: 1200  loss:  2.3456  memory: 30.12GiB(38.10%)  tps: 3,456  mfu: 41.2%`
PROGRESS = re.compile(
    r"(?:\b|_)(?:global_)?steps?\b['\"]?\s*[:=]?\s*\d"          # step 1200, step: 1200, step=1200, 'step': 3
    r"|\b(?:iter|iteration)s?\b['\"]?\s*[:=]?\s*\d"              # iter 1200/5000, iteration     1200/  500000
    r"|\bepoch\b['\"]?\s*[:=]?\s*\d+(?:\.\d+)?\s*(?:[:/,\[|}]|$)"  # Epoch 3:, Epoch: 3 [, 'epoch': 0.12}
    r"|(?:\b|_)loss\b['\"]?\s*[:=]?\s*[-+]?(?:\d|nan|inf)"       # loss 3.5, loss=, 'loss': , lm loss:, train_loss=
    r"|\d{1,3}%\|[^|\n]{0,200}\|\s*\d+/\d+",                     # tqdm: 12%|███ | 1200/10000 [01:02<…]
    re.I)


def sniff(path: str, head: bytes) -> str | None:
    """KIND for a text file that is a rank's console: a rank in its name
    (strong: a `rank` word) or `[rankN]:` prefixes on its lines. Asked
    only about files no other reader claims."""
    name = os.path.basename(path)
    if not head or has_nul(head) or looks_binary(head) or _NOT_CONSOLE.search(name) or _TOOL_OUTPUT.search(name):
        return None
    if looks_json(head) and not _RANK_PREFIX.search(head):
        return None  # JSON: a document, not a console
    found = path_rank(path)
    if found is not None and found.strength == STRONG:
        return KIND
    if _RANK_PREFIX.search(head):
        return KIND
    if len(head) >= HEAD_BYTES:
        try:
            _, _, tail = read_ends(path)
        except InputError:
            return None
        if _RANK_PREFIX.search(tail):
            return KIND
    return None


def parse(path: str, display: str) -> Facts:
    facts = Facts(KIND, display)
    found = path_rank(display)
    own = found.rank if found is not None and found.strength == STRONG else None
    words: dict[int, list[Evidence]] = {}
    progress: dict[int, Evidence] = {}
    size = TAIL_BYTES
    while True:
        data, from_start, total = _last_bytes(path, display, size)
        lines = data.decode("utf-8", "replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        # a file that fits in the first window is numbered from its start, a bigger one from its end
        words, progress = _read_back(lines, display, own, total <= TAIL_BYTES)
        facts.lines_read = len(lines)
        if from_start or (progress and all(r in progress for r in words)) or size >= MAX_BACK_BYTES:
            break
        size = min(size * 8, MAX_BACK_BYTES)
    if not words:
        facts.diag(0, "no line of this console names a rank (no rank in the file's name, no [rankN]: prefix)"
                      if own is None else "this console holds no line", "info")
    for rank in sorted(words):
        said = tuple(reversed(words[rank]))
        facts.ranks.append(RankState(rank=rank, last_words=said, last_progress=progress.get(rank)))
    return facts


def _read_back(lines: list[str], display: str, own: int | None, whole: bool):
    """Per rank, its last LAST_WORDS non-blank lines (newest first) and its
    last progress line, from `lines` read from the last one back."""
    words: dict[int, list[Evidence]] = {}
    progress: dict[int, Evidence] = {}
    count = len(lines)
    for index in range(count - 1, -1, -1):
        text = _shown(lines[index])
        if not text:
            continue
        rank = own
        prefixed = _RANK_PREFIX_TEXT.match(text)
        if prefixed:
            rank = int(prefixed.group(1))
            text = text[prefixed.end():].strip()
            if not text:
                continue
        if rank is None or not plausible_rank(rank):
            continue
        kept = words.setdefault(rank, [])
        if len(kept) >= LAST_WORDS and rank in progress:
            if own is not None and prefixed is None:
                break  # one rank's console: all it needs is in hand
            continue
        evidence = Evidence(display, index + 1 if whole else index - count, text[:MAX_TEXT])
        if len(kept) < LAST_WORDS:
            kept.append(evidence)
        if rank not in progress and PROGRESS.search(text):
            progress[rank] = evidence
    return words, progress


def _shown(line: str) -> str:
    """A line as a terminal last showed it: a progress bar redrawn with
    carriage returns is its last drawing; colours are taken off."""
    if "\r" in line:
        line = next((part for part in reversed(line.split("\r")) if part.strip()), "")
    if "\x1b" in line:
        line = uncoloured(line)
    return line.strip()


def _last_bytes(path: str, display: str, size: int) -> tuple[bytes, bool, int]:
    """The file's last `size` bytes or more, from a line start
    (decompressed); whether they start at the file's start; and the file's
    size (decompressed). A plain file is read by seeking; a compressed one
    is streamed, keeping its last MAX_BACK_BYTES at once."""
    try:
        with open_binary(path) as handle:
            known = getattr(handle, "size_at_open", None)
            if known is not None:
                start = max(0, known - size)
                handle.seek(start)
                data = read_at_most(handle, known - start)
                total = known
            else:
                kept = bytearray()
                total = 0
                while True:
                    chunk = handle.read(_STEP)
                    if not chunk:
                        break
                    total += len(chunk)
                    kept += chunk
                    if len(kept) > MAX_BACK_BYTES:
                        del kept[:len(kept) - MAX_BACK_BYTES]
                data = bytes(kept)
                start = total - len(data)
    except STREAM_ERRORS as exc:
        raise InputError(display, f"cannot read: {exc}") from None
    if start > 0:
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else b""
    return data, start == 0, total


def _no_sniff(path: str, head: bytes) -> None:
    return None  # discovery asks `sniff` itself, only when no other reader claims the file


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)}, _no_sniff)

