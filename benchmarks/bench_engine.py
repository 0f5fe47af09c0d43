"""Engine benchmark: snapshot of N ranks → verdict, beside two peers on the same file.

    python benchmarks/bench_engine.py [--sizes 1000,10000,100000]

For each scenario and size, in separate processes (so peak RSS is per run):
  forensics  load + rules + wait-for graph + verdict (timed apart from the
             imports and from rendering the JSON report, both also shown)
  json.load  just decoding the same file (the floor any tool pays)
  nx-cycle   build a networkx DiGraph of rank→awaited edges and ask
             networkx.find_cycle (what a naive tool does; it knows no AND
             semantics, no collectives, no verdicts)
Prints a table of seconds and peak RSS, and ratios to json.load.

Targets: 0.5 s for 10,000 ranks and 5 s for 100,000 (load → verdict).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_snapshots import SCENARIOS, snapshot  # noqa: E402
from results import record  # noqa: E402

EXPECTED = {"healthy": "healthy", "missing": "missing_rank", "p2p_cycle": "deadlock",
            "mismatch": "collective_mismatch"}

RUNNERS = {
    "forensics": """
import json, sys, time, resource
t0 = time.perf_counter()
from forensics import analyze
from forensics.report.json_report import to_dict
from forensics.plugins import Plugins
from forensics.analysis import prepare
plugins = Plugins(autoload=False)
prepare(plugins)  # what the CLI does while files are parsed: import networkx, load the shipped rules
t1 = time.perf_counter()
report = analyze(sys.argv[1], plugins=plugins, jobs=1)
t2 = time.perf_counter()
to_dict(report)
t3 = time.perf_counter()
print(json.dumps({"s": t2 - t1, "import": t1 - t0, "render": t3 - t2,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "verdict": report.verdict}))
""",
    "json.load": """
import json, sys, time, resource
t = time.perf_counter()
with open(sys.argv[1]) as f: data = json.load(f)
print(json.dumps({"s": time.perf_counter() - t, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "verdict": "-"}))
""",
    "nx-cycle": """
import json, sys, time, resource
t = time.perf_counter()
import networkx as nx
with open(sys.argv[1]) as f: data = json.load(f)
ranks = data.get("ranks", data)
g = nx.DiGraph()
for r, s in ranks.items():
    for p in s.get("peers", []) or s.get("waiting_for_ranks", []):
        g.add_edge(int(r), p)
try:
    nx.find_cycle(g); verdict = "cycle"
except nx.NetworkXNoCycle:
    verdict = "no cycle"
print(json.dumps({"s": time.perf_counter() - t, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "verdict": verdict}))
""",
}


def run(runner: str, path: str) -> dict:
    out = subprocess.run([sys.executable, "-c", RUNNERS[runner], path], capture_output=True, text=True,
                         env={**os.environ, "FORENSICS_DISABLE_PLUGIN_AUTOLOAD": "1"})
    if out.returncode != 0:
        raise SystemExit(f"{runner} failed on {path}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("forensics s = load → verdict in one process on one core (no imports); import and JSON "
          "rendering are shown apart")
    print(f"{'scenario':10} {'ranks':>7} {'MB':>6}  {'forensics s':>11} {'import s':>8} {'render s':>8} "
          f"{'RSS MB':>7} {'json.load s':>11} {'nx-cycle s':>10}  {'x json':>6}  verdict")
    ok = True
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in args.scenarios.split(","):
            for n in sizes:
                path = os.path.join(tmp, f"{scenario}_{n}.json")
                with open(path, "w") as handle:
                    json.dump(snapshot(scenario, n), handle, separators=(",", ":"))
                ours = run("forensics", path)
                floor = run("json.load", path)
                naive = run("nx-cycle", path)
                good = ours["verdict"] == EXPECTED[scenario]
                ok &= good
                print(f"{scenario:10} {n:>7} {os.path.getsize(path) / 1e6:>6.1f}  {ours['s']:>11.3f} "
                      f"{ours['import']:>8.3f} {ours['render']:>8.3f} "
                      f"{ours['rss'] / 1024:>7.0f} {floor['s']:>11.3f} {naive['s']:>10.3f}  "
                      f"{ours['s'] / max(floor['s'], 1e-9):>6.1f}  {ours['verdict']}"
                      f"{'' if good else '  (WRONG: expected ' + EXPECTED[scenario] + ')'}")
                rows.append([scenario, n, round(os.path.getsize(path) / 1e6, 1), round(ours["s"], 3),
                             round(ours["import"], 3), round(ours["render"], 3), round(ours["rss"] / 1024),
                             round(floor["s"], 3), round(naive["s"], 3),
                             ours["verdict"] + ("" if good else f" (WRONG: expected {EXPECTED[scenario]})")])
    record("bench_engine", ["scenario", "ranks", "snapshot MB", "load → verdict s", "imports s",
                            "JSON render s", "peak RSS MB", "json.load s", "nx find_cycle s", "verdict"], rows)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
