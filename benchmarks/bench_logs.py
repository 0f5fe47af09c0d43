"""Log benchmark: 8 ranks × 1 GB of NCCL COLL logs → verdict, beside grep.

    python benchmarks/bench_logs.py [--size 1G] [--ranks 8] [--keep DIR] [--full-mb 256] [--repeat 3]

Generates NCCL_DEBUG=INFO,COLL logs with gen_nccl_logs.py (one file per rank,
as NCCL_DEBUG_FILE writes them; rank 5 stops early, as a rank stuck in its
data loader), then, alternating `--repeat` times on the same files (medians):
  forensics       `forensics analyze DIR --hung -f json`: reads each big log
                  from its head and tail plus byte searches for what the
                  tail needs (see forensics/ingest/nccl.py)
  grep -c opCount a full read of the same bytes (what a person does first)
and, on one --full-mb slice, `forensics analyze --full` (every line through
the grammar) for full-parse MB/s. Prints seconds (wall and CPU), MB/s, peak
RSS, and forensics's time over grep's per interleaved pair (each run of
ours against grep's run just before it: a slow spell of the shared machine
that lasts a pair cancels out). forensics runs as installed in this
interpreter when it is (where.py), with its bytecode cached
(PYTHONPYCACHEPREFIX, filled by one untimed warm-up run) as an installed
package has it.

With --console, each rank's console instead: its NCCL INFO,COLL lines, then
c10d's watchdog timeouts on every rank but 5, analyzed without --hung (the
right verdict, missing_rank [5], must come from the logs; a wrong one fails).

Target: faster than grep's full read of the same files (tail mode).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from results import record  # noqa: E402
from where import bytecode_env, kind_of_run, run_folder  # noqa: E402


def run(cmd, **kwargs):
    """(the completed process, wall seconds, CPU seconds of it and every
    process it reaped), the wall time from a blocking wait4."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, **kwargs)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read().decode("utf-8", "replace"),
                                           err.read().decode("utf-8", "replace"))
    return done, seconds, usage.ru_utime + usage.ru_stime


def peak_rss_mb(cmd, env, cwd=None):
    """Peak RSS of one child, measured with a fresh python wrapper."""
    probe = ("import resource,subprocess,sys;"
             "subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, env=env, cwd=cwd)
    return int(out.stdout.strip() or 0) / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1G", help="per rank")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--keep")
    parser.add_argument("--full-mb", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs of each tool")
    parser.add_argument("--console", action="store_true",
                        help="each rank's console instead (NCCL INFO lines, then c10d's watchdog timeouts on "
                             "every rank but 5): no --hung, the verdict must come from the logs themselves")
    args = parser.parse_args()
    folder = os.path.abspath(args.keep or tempfile.mkdtemp(prefix="fx-logs-"))
    pattern = "rank*.console.log" if args.console else "nccl.*"
    if not glob.glob(os.path.join(folder, pattern)):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_nccl_logs.py"), folder, "--ranks",
                        str(args.ranks), "--size", args.size,
                        "--console" if args.console else "--per-rank-files"], check=True)
    files = sorted(glob.glob(os.path.join(folder, pattern)))
    size = sum(os.path.getsize(f) for f in files)
    env = bytecode_env({**os.environ, "FORENSICS_DISABLE_PLUGIN_AUTOLOAD": "1"})
    where, what = run_folder(tempfile.gettempdir())
    print(f"forensics runs as {sys.executable} -m forensics: {what}")
    # Piped: GNU grep stops at the first match when its stdout is /dev/null.
    grep_cmd = ["bash", "-c", f"cd {folder} && grep -c opCount -- {pattern} | cat > /dev/null"]
    cmd = [sys.executable, "-m", "forensics", "analyze", folder, "-f", "json"] + ([] if args.console else ["--hung"])
    run(cmd, env=env, cwd=where)  # untimed: fills the bytecode cache (see where.bytecode_env)
    print(f"forensics bytecode cached in {env['PYTHONPYCACHEPREFIX']} (one untimed warm-up run)")
    # Alternating runs, so neither tool is the one that warms the page cache.
    grep_times, our_times, grep_cpu, our_cpu = [], [], [], []
    for _ in range(args.repeat):
        _, seconds, cpu = run(grep_cmd)
        grep_times.append(seconds)
        grep_cpu.append(cpu)
        ours, seconds, cpu = run(cmd, env=env, cwd=where)
        our_times.append(seconds)
        our_cpu.append(cpu)
        if ours.returncode not in (0, 1):
            raise SystemExit(f"forensics failed: {ours.stderr.strip()[:500]}")
    grep_s, ours_s = statistics.median(grep_times), statistics.median(our_times)
    pairs = sorted(o / g for o, g in zip(our_times, grep_times))
    print(f"runs (s): forensics {', '.join(f'{t:.2f}' for t in our_times)}; "
          f"grep {', '.join(f'{t:.2f}' for t in grep_times)}; medians below")
    report = json.loads(ours.stdout)
    if args.console and (report["verdict"], report["culprit_ranks"]) != ("missing_rank", [5]):
        raise SystemExit(f"wrong verdict: {report['verdict']} {report['culprit_ranks']} (missing_rank [5] is right)")
    rss = peak_rss_mb(cmd, env, where)
    print(f"{len(files)} files, {size / 1e9:.2f} GB, {os.cpu_count()} CPUs")
    print(f"{'tool':22} {'seconds':>8} {'CPU s':>7} {'MB/s':>9} {'peak RSS':>9}")
    print(f"{'forensics (tail)':22} {ours_s:>8.2f} {statistics.median(our_cpu):>7.2f} {size / 1e6 / ours_s:>9.0f} "
          f"{rss:>7.0f}MB   verdict {report['verdict']} culprits {report['culprit_ranks']}")
    print(f"{'grep -c opCount':22} {grep_s:>8.2f} {statistics.median(grep_cpu):>7.2f} {size / 1e6 / grep_s:>9.0f}")
    # Full parse of one slice: every line through the grammar.
    slice_dir = tempfile.mkdtemp(prefix="fx-full-")
    try:
        target = os.path.join(slice_dir, os.path.basename(files[0]))
        with open(files[0], "rb") as src, open(target, "wb") as dst:
            dst.write(src.read(args.full_mb << 20))
        full_cmd = [sys.executable, "-m", "forensics", "analyze", target, "--full", "-f", "json"]
        full, full_s, _ = run(full_cmd, env=env, cwd=where)
        full_rss = peak_rss_mb(full_cmd, env, where)
        mb = os.path.getsize(target) / 1e6
        print(f"{'forensics --full':22} {full_s:>8.2f} {mb / full_s:>9.1f} {full_rss:>7.0f}MB   "
              f"({mb:.0f} MB slice, exit {full.returncode})")
    finally:
        shutil.rmtree(slice_dir, ignore_errors=True)
    print(f"ratio tail-read forensics / grep: {ours_s / grep_s:.2f}x of the medians; per interleaved pair: "
          f"median {statistics.median(pairs):.2f}x, range {pairs[0]:.2f}-{pairs[-1]:.2f}x")
    runs = lambda times: ", ".join(f"{t:.2f}" for t in sorted(times))  # noqa: E731
    record("bench_logs", ["tool", "input", "seconds (median)", "all runs s", "MB/s", "peak RSS MB", "verdict"],
           [["forensics analyze (consoles: NCCL INFO + c10d timeouts)" if args.console else
             "forensics analyze --hung (tail mode)", f"{len(files)} files, {size / 1e9:.2f} GB", round(ours_s, 2),
             runs(our_times), round(size / 1e6 / ours_s), round(rss), f"{report['verdict']} {report['culprit_ranks']}"],
            ["grep -c opCount", f"{len(files)} files, {size / 1e9:.2f} GB", round(grep_s, 2), runs(grep_times),
             round(size / 1e6 / grep_s), "", ""],
            ["forensics analyze --full (every line)", f"one {mb:.0f} MB slice", round(full_s, 2), f"{full_s:.2f}",
             round(mb / full_s, 1), round(full_rss), f"exit {full.returncode}"]],
           notes=[f"forensics / grep: {ours_s / grep_s:.2f}x the time of the medians; per interleaved pair median "
                  f"{statistics.median(pairs):.2f}x, range {pairs[0]:.2f}-{pairs[-1]:.2f}x; warm page cache, "
                  f"{args.repeat} alternating runs; CPU seconds (user + system, medians) forensics "
                  f"{statistics.median(our_cpu):.2f}, grep {statistics.median(grep_cpu):.2f}; forensics ran as "
                  f"{kind_of_run()}, its bytecode cached"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
