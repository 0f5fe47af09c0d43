"""Run every fuzz target (or the named ones) for a fixed budget, one after
the other, and print inputs per second and coverage for each.

    python tests/fuzz/run_all.py --seconds 10                # the CI step
    python tests/fuzz/run_all.py --runs 1000000 --seconds 3600 --keep /var/tmp/fuzz
    python tests/fuzz/run_all.py pyspy gdb --seconds 600 -max_len=4096   # libFuzzer flags pass through

Each target runs in its own process (tests/fuzz/fuzz.py). `--keep DIR`
keeps each target's growing corpus in DIR/TARGET and its crash files in
DIR/TARGET/crashes, so a long run can be resumed where it stopped. Exit
status 1 when any target found a crash, else 0. A crash is named, and its
traceback and input (base64) are printed, so that a CI log alone is enough
to reproduce it: `base64 -d > tests/fuzz/regressions/TARGET/crash-NAME`.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import targets  # noqa: E402

_DONE = re.compile(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/")
_PROGRESS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/")
_RATE = re.compile(r"stat::average_exec_per_sec:\s+(\d+)")
_CRASH = re.compile(r"(?:Test unit written to|artifact_prefix.*?;) ?(\S+)")


def run_one(name: str, seconds: int, runs: int | None, keep: str | None, extra: list[str]) -> dict:
    base = os.path.join(keep, name) if keep else tempfile.mkdtemp(prefix=f"fuzz-{name}-")
    corpus = os.path.join(base, "corpus")
    crashes = os.path.join(base, "crashes") + os.sep
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(crashes, exist_ok=True)
    if not os.listdir(corpus):
        for index, data in enumerate(targets.seeds(name)):
            with open(os.path.join(corpus, f"seed{index:04d}"), "wb") as handle:
                handle.write(data)
    command = [sys.executable, os.path.join(HERE, "fuzz.py"), name, f"-max_total_time={seconds}",
               f"-artifact_prefix={crashes}", *extra, corpus]
    if runs:
        command.insert(3, f"-runs={runs}")
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, errors="replace")
    elapsed = time.monotonic() - started
    log = proc.stderr + proc.stdout
    with open(os.path.join(base, "last.log"), "w") as handle:
        handle.write(log)
    done = _DONE.findall(log) or _PROGRESS.findall(log)
    execs, cov, ft, corp = map(int, done[-1]) if done else (0, 0, 0, 0)
    rate = _RATE.findall(log)
    found = sorted(os.path.join(crashes, f) for f in os.listdir(crashes))
    return {"target": name, "inputs": execs, "seconds": round(elapsed), "per_second": int(rate[-1]) if rate else 0,
            "cov": cov, "ft": ft, "corpus": corp, "exit": proc.returncode, "crashes": found,
            "log": os.path.join(base, "last.log")}


def crash_report(log: str, crashes: list[str], limit: int = 8192) -> str:
    """The traceback libFuzzer's log holds and each crash input, base64-encoded
    (inputs over `limit` bytes are cut, and say so)."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines) if "Uncaught Python exception" in line
                  or line.startswith("Traceback")), None)
    out = []
    if start is not None:
        stop = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("==")), len(lines))
        out += lines[start:min(stop, start + 80)]
    for path in crashes:
        with open(path, "rb") as handle:
            data = handle.read()
        cut = f" (first {limit} of {len(data)} bytes)" if len(data) > limit else ""
        out.append(f"input {os.path.basename(path)}, base64{cut}:")
        out.append(base64.b64encode(data[:limit]).decode())
    return "\n".join("    " + line for line in out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", metavar="TARGET", help="default: every target")
    parser.add_argument("--seconds", type=int, default=10, help="budget per target (default 10)")
    parser.add_argument("--runs", type=int, default=None, help="stop a target after this many inputs")
    parser.add_argument("--keep", metavar="DIR", help="keep corpora and crashes here (resumable)")
    args, extra = parser.parse_known_args(argv)  # what is left: libFuzzer flags (-max_len=4096 ...)
    names = args.names or list(targets.TARGETS)
    unknown = [n for n in names if n not in targets.TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(targets.TARGETS)}")
    extra = [a for a in extra if a != "--"]
    if any(not a.startswith("-") for a in extra):
        parser.error(f"not a libFuzzer flag: {next(a for a in extra if not a.startswith('-'))}")
    print(f"{'target':12} {'inputs':>10} {'s':>6} {'inputs/s':>9} {'cov':>6} {'ft':>7} {'corpus':>7}  result",
          flush=True)
    failed = False
    for name in names:
        r = run_one(name, args.seconds, args.runs, args.keep, extra)
        bad = r["crashes"] or r["exit"] not in (0,)
        failed |= bool(bad)
        result = "ok" if not bad else (f"CRASH {' '.join(r['crashes'])}" if r["crashes"]
                                       else f"exit {r['exit']}, see {r['log']}")
        print(f"{name:12} {r['inputs']:>10,} {r['seconds']:>6} {r['per_second']:>9,} {r['cov']:>6} {r['ft']:>7} "
              f"{r['corpus']:>7}  {result}", flush=True)
        if r["crashes"]:
            with open(r["log"], encoding="utf-8", errors="replace") as handle:
                print(crash_report(handle.read(), r["crashes"]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
