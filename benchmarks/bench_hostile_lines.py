"""Hostile lines through the NCCL reader, side by side with `grep -c` over the same bytes.

Lines built to make a careless pattern backtrack (prefixes repeated tens of thousands of times, a WARN
line whose peer address never ends, 60 KB of blanks before a Ray suffix): the reader must cost what
ordinary lines cost, not grow with each line's length squared. The goal is a small multiple of grep.

    python benchmarks/bench_hostile_lines.py --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time

from forensics.ingest import nccl

JUNK = [b"NCCL INFO " * 6500, b"y:1:" * 16000 + b"NCCL INFO x", b"a:a:" * 16000,
        b"h:1:1 [0] NCCL WARN NET/IB : Got completion from peer " + b"a:" * 30000 + b"<1>",
        b"NCCL version 1.1.1" * 3000, b" " * 60000 + b"[repeated 3x across cluster]"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--copies", type=int, default=10, help="how many times the hostile lines repeat")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "junk.log")
        with open(path, "wb") as out:
            out.write(b"\n".join(JUNK * args.copies) + b"\n")
        ours, grep = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            facts = nccl.parse(path, "junk.log")
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            subprocess.run(["grep", "-c", "NCCL", path], capture_output=True, check=False)
            grep.append(time.perf_counter() - start)
        size = os.path.getsize(path)
    ours_s, grep_s = statistics.median(ours), statistics.median(grep)
    print(f"{size / 1e6:.1f} MB of hostile lines: forensics' NCCL reader {ours_s:.3f} s, grep -c {grep_s:.3f} s "
          f"({ours_s / grep_s:.0f}x); {len(facts.records)} process record(s) read")


if __name__ == "__main__":
    main()
