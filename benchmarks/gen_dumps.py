"""Generate N ranks' worth of py-spy and gdb dumps from real captures.

    python benchmarks/gen_dumps.py N OUTDIR [--threads 40] [--culprit R] [--kinds pyspy.txt] [--first K]

Templates are the real dumps of corpus/real_missing_rank_dataloader (rank 0
waits in all_reduce, rank 2 in data loading). Each generated rank gets its
own pid, thread ids and addresses (as ASLR would give), and background
threads are repeated until a dump holds about --threads threads, as a real
training process with DataLoader workers, NCCL proxies and c10d watchdogs
does. Every 997th rank takes the data-loading template, the rest the
all_reduce one.
"""

from __future__ import annotations

import argparse
import os
import random
import re

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "corpus", "real_missing_rank_dataloader")
_HEX = re.compile(r"0x[0-9a-f]{6,16}")


def _blocks(text: str, header: re.Pattern) -> tuple[str, list[str]]:
    """Split a dump into its preamble and its thread blocks."""
    starts = [m.start() for m in header.finditer(text)]
    if not starts:
        return text, []
    return text[:starts[0]], [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def _pad(blocks: list[str], threads: int) -> list[str]:
    main, background = blocks[:1], blocks[1:] or blocks[:1]
    out = list(main)
    i = 0
    while len(out) < threads:
        out.append(background[i % len(background)])
        i += 1
    return out


def _perturb(text: str, rnd: random.Random, old_pid: int, pid: int) -> str:
    text = _HEX.sub(lambda m: "0x%x" % (int(m.group(0), 16) ^ (rnd.getrandbits(20) << 12)), text)
    return text.replace(str(old_pid), str(pid))


def pyspy_dump(template: str, rank: int, threads: int, rnd: random.Random) -> str:
    pid_match = re.search(r"^Process (\d+)", template, re.M)
    old_pid = int(pid_match.group(1))
    pre, blocks = _blocks(template, re.compile(r"^Thread ", re.M))
    padded = _pad(blocks, threads)
    # Each background copy gets its own thread id.
    renamed = [padded[0]] + [re.sub(r"^Thread \d+", f"Thread {old_pid + 100 + i}", b, count=1)
                             for i, b in enumerate(padded[1:])]
    pid = 100000 + rank
    return _perturb(pre + "".join(renamed), rnd, old_pid, pid)


def gdb_dump(template: str, rank: int, threads: int, rnd: random.Random) -> str:
    lwps = [int(x) for x in re.findall(r"\(LWP (\d+)\)", template)]
    old_pid = min(lwps) if lwps else 1
    pre, blocks = _blocks(template, re.compile(r"^Thread \d+ \(", re.M))
    blocks.reverse()  # gdb prints thread 1 (main) last; pad with the others
    padded = _pad(blocks, threads)
    out = []
    for i, block in enumerate(padded):
        number = i + 1  # main is Thread 1, printed last (gdb counts down)
        lwp = old_pid if i == 0 else old_pid + 1000 + i
        block = re.sub(r"^Thread \d+ \((.*?)\(LWP \d+\)", lambda m: f"Thread {number} ({m.group(1)}(LWP {lwp})",
                       block, count=1)
        out.append(block)
    out.reverse()
    pid = 100000 + rank
    return _perturb(pre + "".join(out), rnd, old_pid, pid)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ranks", type=int)
    parser.add_argument("outdir")
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--culprit", type=int, default=None,
                        help="only this rank takes the data-loading template (default: every 997th rank)")
    parser.add_argument("--kinds", default="pyspy.txt,gdb.txt", help="which dumps to write (comma-separated)")
    parser.add_argument("--first", type=int, default=0, help="the first rank to write (a node's share)")
    args = parser.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    templates = {}
    for rank in (0, 2):
        for kind in ("pyspy.txt", "gdb.txt"):
            with open(os.path.join(TEMPLATES, f"rank{rank}.{kind}"), encoding="utf-8") as handle:
                templates[rank, kind] = handle.read()
    rnd = random.Random(7)
    total = 0
    kinds = set(args.kinds.split(","))
    for rank in range(args.first, args.ranks):
        source = (2 if rank == args.culprit else 0) if args.culprit is not None else (2 if rank % 997 == 2 else 0)
        for kind, make in (("pyspy.txt", pyspy_dump), ("gdb.txt", gdb_dump)):
            if kind not in kinds:
                continue
            text = make(templates[source, kind], rank, args.threads, rnd)
            path = os.path.join(args.outdir, f"rank{rank}.{kind}")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            total += len(text)
    print(f"{(args.ranks - args.first) * len(kinds)} files, {total / 1e6:.1f} MB in {args.outdir}")


if __name__ == "__main__":
    main()
