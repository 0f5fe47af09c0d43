"""Stack-dump benchmark: N ranks × (py-spy + gdb) dumps → verdict, beside grep.

    python benchmarks/bench_stacks.py [--ranks 10000] [--threads 40] [--keep DIR] [--repeat 1]

Generates the dumps with gen_dumps.py (real captures, perturbed per rank),
then in one run on the same files:
  forensics  `forensics analyze DIR --hung -f json` (discover, parse with the
             lark grammars, attribute ranks, classify, graph, verdict)
  grep -c    `grep -c Thread` over every file: a plain full read of the
             same bytes, the floor for anything that looks at them
  read+split two Python processes that read every file and split it into
             lines: the floor the goal is stated against (at most 10x),
             timed right before each of the `--repeat` forensics runs
Prints files/s and MB/s for each, forensics' peak RSS, and the verdict
(expected missing_rank with the data-loading ranks as culprits).

Goal: at most 10x the read+split floor at 10,000 ranks.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from results import record  # noqa: E402


def timed(cmd, **kwargs):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return out, elapsed, max(peak, before)


FLOOR = """
import os, sys
from multiprocessing import Pool

def lines(path):
    with open(path, 'rb') as handle:
        return len(handle.read().splitlines())

if __name__ == '__main__':
    folder = sys.argv[1]
    paths = [os.path.join(folder, name) for name in os.listdir(folder)]
    with Pool(2) as pool:
        print(sum(pool.map(lines, paths, chunksize=256)))
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--keep", help="generate into (or reuse) this folder instead of a temp dir")
    parser.add_argument("--repeat", type=int, default=1, help="runs of forensics, each after its own floor run")
    args = parser.parse_args()
    folder = args.keep or tempfile.mkdtemp(prefix="fx-stacks-")
    if not glob.glob(os.path.join(folder, "rank*.gdb.txt")):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_dumps.py"), str(args.ranks), folder,
                        "--threads", str(args.threads)], check=True)
    files = glob.glob(os.path.join(folder, "*"))
    size = sum(os.path.getsize(f) for f in files)
    # Piped: GNU grep stops at the first match when its stdout is /dev/null.
    grep, grep_s, _ = timed(["bash", "-c", f"cd {folder} && grep -c Thread -- * | cat > /dev/null"])
    env = {**os.environ, "FORENSICS_DISABLE_PLUGIN_AUTOLOAD": "1"}
    expected = sorted(r for r in range(args.ranks) if r % 997 == 2)
    print(f"{len(files)} files, {size / 1e6:.0f} MB, {args.threads} threads per dump, {os.cpu_count()} CPUs")
    print(f"{'tool':10} {'seconds':>8} {'files/s':>9} {'MB/s':>7}")
    print(f"{'grep -c':10} {grep_s:>8.1f} {len(files) / grep_s:>9.0f} {size / 1e6 / grep_s:>7.1f}")
    rows = [["grep -c Thread", len(files), round(size / 1e6), round(grep_s, 1), round(len(files) / grep_s),
             round(size / 1e6 / grep_s, 1), "", ""]]
    ratios, all_good = [], True
    for run in range(1, args.repeat + 1):
        # The floor for a Python tool: two processes that read every file and split it into lines.
        floor, floor_s, _ = timed([sys.executable, "-c", FLOOR, folder])
        ours, ours_s, rss = timed([sys.executable, "-m", "forensics", "analyze", folder, "--hung", "-f", "json"],
                                  env=env)
        if ours.returncode not in (0, 1):
            raise SystemExit(f"forensics failed: {ours.stderr.strip()}")
        report = json.loads(ours.stdout)
        good = report["verdict"] == "missing_rank" and report["culprit_ranks"] == expected
        all_good = all_good and good
        verdict = f"{report['verdict']} {report['culprit_ranks'][:5]}{'' if good else ' (WRONG)'}"
        ratios.append(ours_s / floor_s)
        label = f", run {run}" if args.repeat > 1 else ""
        print(f"{'forensics':10} {ours_s:>8.1f} {len(files) / ours_s:>9.0f} {size / 1e6 / ours_s:>7.1f}"
              f"   peak RSS {rss / 1024:.0f} MB, verdict {verdict}")
        print(f"{'read+split':10} {floor_s:>8.2f} {len(files) / floor_s:>9.0f} {size / 1e6 / floor_s:>7.1f}"
              f"   (2 Python processes reading every file and splitting it into lines)")
        print(f"ratio forensics/grep: {ours_s / grep_s:.1f}x; forensics/read+split: {ours_s / floor_s:.1f}x; "
              f"stack classes: {len(report.get('stack_classes', []))} top-level", flush=True)
        rows += [[f"forensics analyze --hung{label}", len(files), round(size / 1e6), round(ours_s, 1),
                  round(len(files) / ours_s), round(size / 1e6 / ours_s, 1), round(rss / 1024), verdict],
                 [f"2-process read + split lines{label}", len(files), round(size / 1e6), round(floor_s, 2),
                  round(len(files) / floor_s), round(size / 1e6 / floor_s, 1), "", ""]]
    record("bench_stacks", ["tool", "files", "MB", "seconds", "files/s", "MB/s", "peak RSS MB", "verdict"], rows,
           notes=[f"{args.ranks} ranks, a py-spy and a gdb dump each, {args.threads} threads per dump; "
                  f"forensics / read+split {', '.join(f'{r:.1f}x' for r in ratios)} (each run against the floor "
                  f"timed just before it; goal: at most 10x), files in the page cache (grep ran first)"])
    return 0 if all_good else 1


if __name__ == "__main__":
    raise SystemExit(main())
