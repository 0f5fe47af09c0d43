"""Transformed copies of an incident folder, for the invariance test
(tests/test_invariance.py): the same evidence, laid out as real consoles lay
it out. Each transform is a pure function `(src, dst) -> None` that writes a
new folder `dst` from the incident folder `src` and never writes into `src`.

    prepend_output(size)   ordinary training output before each text log
    append_output(size)    the same after it
    concat_per_rank        all text files of one rank in one console file per rank
    interleave_two_ranks   two ranks' consoles interleaved line by line under `[rankN]:`
    gzip_logs              every text log gzip-compressed (`name.gz`)

A *text log* is a file without a NUL byte in its head that is neither
structured input (JSON or YAML: snapshots, pid maps, manifests, Flight
Recorder JSON), nor a facts file, a pickle or a compressed file. The
incident's own description (`expected.yaml`, `SOURCE.md` at its top, what
`forensics replay` never reads as evidence) is copied unchanged. Everything
else keeps its bytes, line endings, encoding and name unless the transform
is about them.

The training output holds loss and step lines with timestamps, tqdm bars
redrawn with `\\r`, Python warnings and a few of the job's own prints under
`[rankN]:` (N the rank the file's name gives, else 0): nothing a reader
should take for evidence (no NCCL or c10d line, no timeout, error,
exception, exit or stack), generated deterministically from a seed.
`python tests/transforms.py SRC DST TRANSFORM` writes one copy by hand.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import random
import re
import shutil
from datetime import datetime, timedelta

METADATA = frozenset({"expected.yaml", "SOURCE.md"})
HEAD = 64 * 1024
_BOM = b"\xef\xbb\xbf"
_MAGICS = (b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"\xfd7zXZ\x00", b"BZh", b"\x80", b"FORENSICS-FACTS\n")
_STRUCTURED_EXT = (".json", ".jsonl", ".ndjson", ".yaml", ".yml")
# A `rank` word and its number, in a file's or folder's name (`rank3.pyspy.txt`, `rank-3.log`,
# `nccl_init_rank3.log`, `rank_3/`), unless the word is a group's or a node's (`local_rank3`, `tp_rank0`).
_RANK_WORD = re.compile(r"(?<![a-z])rank[_\-.]?(\d{1,7})(?!\d)", re.IGNORECASE)
_QUALIFIED = re.compile(r"(?:local|node|group|role|dp|tp|pp|ep|cp|sp|mp)[_\-.]?$", re.IGNORECASE)
_RANK_PREFIX = re.compile(rb"^\[rank\d+\]:")


# -- what a file is -------------------------------------------------------------------------------

def is_metadata(rel: str) -> bool:
    return rel in METADATA


def is_text_log(path: str) -> bool:
    """A text log, as the module docstring defines it."""
    with open(path, "rb") as handle:
        head = handle.read(HEAD)
    if b"\0" in head or head.startswith(_MAGICS):
        return False
    if path.lower().endswith(_STRUCTURED_EXT):
        return False
    start = head.lstrip(_BOM + b" \t\r\n")[:1]
    if start in (b"{", b"["):  # a JSON document without the extension; a `[rank0]:` line is not one
        try:
            with open(path, "rb") as handle:
                json.loads(handle.read())
            return False
        except ValueError:
            return True
    return True


def file_rank(rel: str) -> int | None:
    """The rank a path names with a `rank` word (the file's own name first,
    then its folders'), as the corpus names files; None when the name does
    not tell."""
    for part in reversed(rel.replace(os.sep, "/").split("/")):
        found = [m for m in _RANK_WORD.finditer(part) if not _QUALIFIED.search(part, 0, m.start())]
        if found:
            return int(found[-1].group(1))
    return None


def files(folder: str) -> list[str]:
    """Every regular file under `folder`, relative to it, sorted."""
    out = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                out.append(os.path.relpath(path, folder))
    return out


def text_logs(folder: str) -> list[str]:
    return [rel for rel in files(folder) if not is_metadata(rel) and is_text_log(os.path.join(folder, rel))]


def rank_consoles(folder: str) -> dict[tuple[str, int], list[str]]:
    """{(folder of the files, rank): that rank's text logs there, sorted}."""
    out: dict[tuple[str, int], list[str]] = {}
    for rel in text_logs(folder):
        rank = file_rank(rel)
        if rank is not None:
            out.setdefault((os.path.dirname(rel), rank), []).append(rel)
    return out


def rank_pairs(folder: str) -> list[tuple[str, int, int]]:
    """(folder, rank a, rank b): the ranks with text logs in one folder, in pairs by rank order."""
    by_dir: dict[str, list[int]] = {}
    for (where, rank) in sorted(rank_consoles(folder)):
        by_dir.setdefault(where, []).append(rank)
    return [(where, ranks[i], ranks[i + 1]) for where, ranks in sorted(by_dir.items())
            for i in range(0, len(ranks) - 1, 2)]


# -- ordinary training output ---------------------------------------------------------------------

_WARNINGS = (
    ("/opt/conda/lib/python3.11/site-packages/torch/optim/lr_scheduler.py:{n}: UserWarning: Detected call of "
     "`lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and later, you should call them in the "
     "opposite order: `optimizer.step()` before `lr_scheduler.step()`.", "warnings.warn("),
    ("/opt/conda/lib/python3.11/site-packages/torch/amp/grad_scaler.py:{n}: FutureWarning: "
     "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` "
     "instead.", "warnings.warn("),
    ("/workspace/train/data.py:{n}: UserWarning: To copy construct from a tensor, it is recommended to use "
     "sourceTensor.clone().detach() or sourceTensor.clone().detach().requires_grad_(True), rather than "
     "torch.tensor(sourceTensor).", "batch = torch.tensor(batch)"),
    ("/opt/conda/lib/python3.11/site-packages/transformers/tokenization_utils_base.py:{n}: FutureWarning: "
     "`clean_up_tokenization_spaces` was not set. It will be set to `True` by default.", "warnings.warn("),
)
_PRINTS = (
    "epoch {epoch} | step {step} | train_loss {loss:.4f} | tokens {tokens:.2f}M | elapsed {elapsed}",
    "validation after step {step}: ppl {ppl:.2f} acc {acc:.3f}",
    "saving checkpoint to /ckpt/run-17/step-{step:07d}",
    "lr {lr:.3e} grad_norm {gnorm:.3f} loss_scale 65536.0",
)


class _Clock:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.now = datetime(2025, 6, 1, 8, 0, 0)

    def tick(self) -> str:
        self.now += timedelta(milliseconds=self.rng.randint(150, 900))
        return self.now.strftime("%Y-%m-%d %H:%M:%S,") + f"{self.now.microsecond // 1000:03d}"


def _bar(epoch: int, done: int, total: int, rate: float, loss: float, ascii_only: bool) -> str:
    width = 10
    frac = done / total
    if ascii_only:
        filled = "#" * int(frac * width)
        partial = str(int(frac * width * 10) % 10) if len(filled) < width and frac else ""
    else:
        filled = "\u2588" * int(frac * width)
        partial = " \u258f\u258e\u258d\u258c\u258b\u258a\u2589"[int(frac * width * 8) % 8].strip() \
            if len(filled) < width else ""
    body = (filled + partial).ljust(width)
    spent, left = done / rate, (total - done) / rate
    clock = lambda s: f"{int(s) // 60:02d}:{int(s) % 60:02d}"  # noqa: E731
    return (f"Epoch {epoch}: {int(frac * 100):3d}%|{body}| {done}/{total} "
            f"[{clock(spent)}<{clock(left)}, {rate:5.2f}it/s, loss={loss:.3f}]")


def _lines(rng: random.Random, ascii_only: bool):
    """An endless stream of output lines (without their line ending)."""
    clock = _Clock(rng)
    step, epoch, loss = 0, 0, 10.5
    while True:
        roll = rng.random()
        if roll < 0.74:
            step += 1
            loss = max(1.2, loss * 0.9997 + rng.gauss(0, 0.02))
            yield (f"{clock.tick()} - INFO - train.py:{rng.choice((412, 418))} - epoch {epoch} step "
                   f"{step}/200000 loss={loss:.4f} lr={3e-4 * min(1, step / 2000):.2e} "
                   f"grad_norm={abs(rng.gauss(1, 0.3)):.3f} throughput={rng.uniform(380, 420):.1f} samples/s")
        elif roll < 0.90:
            total, rate = rng.choice((250, 500, 1000)), rng.uniform(2, 9)
            start = rng.randrange(0, total - 40)
            updates = [_bar(epoch, done, total, rate, loss + rng.gauss(0, 0.05), ascii_only)
                       for done in range(start, start + rng.randint(10, 40))]
            yield "\r" + "\r".join(updates)
        elif roll < 0.96:
            template = rng.choice(_PRINTS)
            yield "[rank0]:" + template.format(
                epoch=epoch, step=step, loss=loss, tokens=step * 0.52, ppl=2.7 ** min(loss, 6) + 1,
                acc=min(0.9, 1 / loss), lr=3e-4, gnorm=abs(rng.gauss(1, 0.3)),
                elapsed=f"{step // 3600:02d}:{step // 60 % 60:02d}:{step % 60:02d}")
        elif roll < 0.985:
            text, code = rng.choice(_WARNINGS)
            yield text.format(n=rng.randint(100, 900))
            yield "  " + code
        else:
            epoch += 1
            yield f"{clock.tick()} - INFO - train.py:377 - starting epoch {epoch}: 8 loader workers, shuffle seed {rng.randint(0, 9999)}"


@functools.lru_cache(maxsize=8)
def _output(size: int, seed: int, ascii_only: bool, newline: bytes) -> bytes:
    rng = random.Random(seed)
    parts, total = [], 0
    encoding = "ascii" if ascii_only else "utf-8"
    for line in _lines(rng, ascii_only):
        data = line.encode(encoding) + newline
        if total + len(data) > size:
            break
        parts.append(data)
        total += len(data)
    return b"".join(parts)


def training_output(size: int, seed: int = 31, rank: int = 0, ascii_only: bool = False,
                    newline: bytes = b"\n") -> bytes:
    """At most `size` bytes of whole lines of ordinary training output; the
    job's own prints carry `[rank{rank}]:`."""
    data = _output(size, seed, ascii_only, newline)
    return data if rank == 0 else data.replace(b"[rank0]:", f"[rank{rank}]:".encode())


def _newline_of(data: bytes) -> bytes:
    lf = data.count(b"\n")
    return b"\r\n" if lf and data.count(b"\r\n") * 2 >= lf else b"\n"


def _output_for(data: bytes, rel: str, size: int, seed: int) -> bytes:
    """Training output fitting the file it goes into: its line ending, and
    plain ASCII where the file is not UTF-8 (so its encoding stays one)."""
    try:
        data.decode("utf-8")
        ascii_only = False
    except UnicodeDecodeError:
        ascii_only = True
    rank = file_rank(rel)
    return training_output(size, seed, rank if rank is not None else 0, ascii_only, _newline_of(data))


# -- the transforms -------------------------------------------------------------------------------

def _copy_tree(src: str, dst: str, skip=frozenset()) -> None:
    """Copy every file of `src` into `dst` except the relative paths in `skip`."""
    os.makedirs(dst, exist_ok=False)
    for rel in files(src):
        if rel in skip:
            continue
        target = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(src, rel), target)


def _create(dst: str, rel: str):
    path = os.path.join(dst, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return open(path, "wb")


def _ended(data: bytes) -> bytes:
    """`data` ending with its own line ending (empty stays empty)."""
    return data if not data or data.endswith(b"\n") else data + _newline_of(data)


def prepend_output(src: str, dst: str, size: int, seed: int = 31) -> None:
    logs = text_logs(src)
    _copy_tree(src, dst, skip=frozenset(logs))
    for rel in logs:
        with open(os.path.join(src, rel), "rb") as handle:
            data = handle.read()
        bom = _BOM if data.startswith(_BOM) else b""
        with _create(dst, rel) as out:
            out.write(bom)
            out.write(_output_for(data, rel, size, seed))
            out.write(data[len(bom):])


def append_output(src: str, dst: str, size: int, seed: int = 31) -> None:
    logs = text_logs(src)
    _copy_tree(src, dst, skip=frozenset(logs))
    for rel in logs:
        with open(os.path.join(src, rel), "rb") as handle:
            data = handle.read()
        with _create(dst, rel) as out:
            out.write(_ended(data))
            out.write(_output_for(data, rel, size, seed))


def _console(src: str, rels: list[str]) -> bytes:
    parts = []
    for index, rel in enumerate(rels):
        with open(os.path.join(src, rel), "rb") as handle:
            data = handle.read()
        if index and data.startswith(_BOM):
            data = data[len(_BOM):]
        parts.append(_ended(data))
    return b"".join(parts)


def console_name(where: str, rank: int) -> str:
    return os.path.join(where, f"rank{rank}.console.log")


def concat_per_rank(src: str, dst: str) -> None:
    """Each rank's text logs, in name order, as one `rankN.console.log` in
    their folder; files whose rank the name does not tell stay as they are."""
    consoles = rank_consoles(src)
    _copy_tree(src, dst, skip=frozenset(rel for rels in consoles.values() for rel in rels))
    for (where, rank), rels in consoles.items():
        with _create(dst, console_name(where, rank)) as out:
            out.write(_console(src, rels))


def _prefixed(data: bytes, rank: int) -> list[bytes]:
    """`data`'s lines (with their endings), each under `[rank{rank}]:` unless it carries a rank prefix."""
    prefix = f"[rank{rank}]:".encode()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [(line if _RANK_PREFIX.match(line) else prefix + line) + b"\n" for line in lines]


def interleave_name(where: str, index: int) -> str:
    """A name that names no rank (`tee_console_a.log`): the ranks are in the lines."""
    return os.path.join(where, f"tee_console_{chr(ord('a') + index)}.log")


def interleave_two_ranks(src: str, dst: str) -> None:
    """The consoles of ranks a and b (each as `concat_per_rank` makes it),
    one line of a, one of b, under torchrun's `[rankN]:` prefixes, in one
    file per pair (pairs in rank order within a folder); the other files
    stay as they are."""
    consoles = rank_consoles(src)
    pairs = rank_pairs(src)
    paired = {(where, r) for where, a, b in pairs for r in (a, b)}
    _copy_tree(src, dst, skip=frozenset(rel for key in paired for rel in consoles[key]))
    counts: dict[str, int] = {}
    for where, a, b in pairs:
        first = _prefixed(_console(src, consoles[(where, a)]), a)
        second = _prefixed(_console(src, consoles[(where, b)]), b)
        merged = [line for both in zip(first, second) for line in both]
        longer = first if len(first) > len(second) else second
        merged += longer[min(len(first), len(second)):]
        index = counts.get(where, 0)
        counts[where] = index + 1
        with _create(dst, interleave_name(where, index)) as out:
            out.write(b"".join(merged))


def gzip_logs(src: str, dst: str) -> None:
    logs = text_logs(src)
    _copy_tree(src, dst, skip=frozenset(logs))
    for rel in logs:
        with open(os.path.join(src, rel), "rb") as handle:
            data = handle.read()
        with _create(dst, rel + ".gz") as raw:
            with gzip.GzipFile(filename=os.path.basename(rel), mode="wb", fileobj=raw, mtime=0) as out:
                out.write(data)


KB, MB = 1000, 1000 * 1000
TRANSFORMS = {
    "prepend-300KB": functools.partial(prepend_output, size=300 * KB),
    "append-300KB": functools.partial(append_output, size=300 * KB),
    "prepend-30MB": functools.partial(prepend_output, size=30 * MB),
    "append-30MB": functools.partial(append_output, size=30 * MB),
    "concat-per-rank": concat_per_rank,
    "interleave-two-ranks": interleave_two_ranks,
    "gzip": gzip_logs,
}


def applies(transform: str, folder: str) -> bool:
    """Whether `transform` changes anything in `folder`."""
    if transform == "concat-per-rank":
        return bool(rank_consoles(folder))
    if transform == "interleave-two-ranks":
        return bool(rank_pairs(folder))
    return bool(text_logs(folder))


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 4 or sys.argv[3] not in TRANSFORMS:
        sys.exit(f"usage: python tests/transforms.py SRC DST {{{','.join(TRANSFORMS)}}}")
    TRANSFORMS[sys.argv[3]](sys.argv[1], sys.argv[2])
