"""Start-up of `forensics analyze` on a one-file incident, side by side.

Each `--run LABEL=COMMAND` is timed on the same input, the runs interleaved
so a slow spell of the machine hits all alike; `FORENSICS_NO_CACHE=1` in a
command's environment (`--run nocache=env FORENSICS_NO_CACHE=1 forensics`)
measures building the parser tables on every start. One warm-up run of each
fills its cache first.

    python benchmarks/bench_startup.py --input corpus/synthetic_network_fault_nccl/rank0.nccl.log \
        --run before=/srv/venv-before/bin/forensics --run after=/srv/venv-after/bin/forensics \
        --run nocache="env FORENSICS_NO_CACHE=1 /srv/venv-after/bin/forensics" --repeat 21
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True)
    ap.add_argument("--run", action="append", required=True, help="LABEL=COMMAND (the forensics executable)")
    ap.add_argument("--repeat", type=int, default=21)
    args = ap.parse_args()
    runs = [(label, shlex.split(command)) for label, command in (r.split("=", 1) for r in args.run)]
    times: dict[str, list[float]] = {label: [] for label, _ in runs}
    verdicts: dict[str, set] = {label: set() for label, _ in runs}
    for round_ in range(args.repeat + 1):
        for label, command in runs:
            start = time.perf_counter()
            done = subprocess.run(command + ["analyze", args.input, "-f", "json", "-q"], capture_output=True,
                                  text=True)
            took = time.perf_counter() - start
            verdicts[label].add(json.loads(done.stdout)["verdict"])
            if round_:  # the first round fills the caches
                times[label].append(took)
    out = {label: {"median_s": round(statistics.median(t), 4), "min_s": round(min(t), 4),
                   "max_s": round(max(t), 4), "verdicts": sorted(verdicts[label])} for label, t in times.items()}
    print(json.dumps({"input": args.input, "repeat": args.repeat, "runs": out}, indent=1))


if __name__ == "__main__":
    main()
