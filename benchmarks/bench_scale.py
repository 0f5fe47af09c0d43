"""Scale: a 16,384-rank incident end to end, locally and through a Dask
cluster, and 131,072 ranks as 8 node facts files merged by analyze.

    python benchmarks/bench_scale.py --work /var/tmp/scale [--ranks 16384] [--facts-ranks 131072]
        [--nodes 8] [--no-local] [--no-dask] [--no-facts] [--versus-pickle [--repeat 2]]

The incident (generated once under WORK, reused after): for every rank a
Flight Recorder dump of 2,000 entries (gen_fr_dumps.py, scenario
`missing`), a py-spy dump (gen_dumps.py, 40 threads, real captures as
templates) and an NCCL_DEBUG_FILE tail (gen_nccl_logs.py, 16 KiB); rank
`--culprit` never issued the collective everyone else waits in, its
py-spy dump shows it in its data loader, and its NCCL log stops early.

1. `forensics analyze DIR --hung -f json` (the local forked workers, one per CPU);
2. the same with `--scheduler` on a `distributed.LocalCluster` of 2 worker
   processes (1 thread each) over TCP on 127.0.0.1, started here: the
   overhead is its time over the local run's;
3. with `--versus-pickle`, on an incident of Flight Recorder dumps and
   py-spy dumps only (the 16,384-rank goal of the performance page):
   `forensics analyze` beside the bare floor, two processes that
   `pickle.load` every Flight Recorder dump and read every py-spy dump's
   bytes, interleaved `--repeat` times (the benchmark unpickles for that
   peer only: forensics never does);
4. `--facts-ranks` ranks of py-spy dumps (12 threads each) in `--nodes`
   node folders; each folder is turned into a facts file (`forensics parse`,
   one node after the other here; on a cluster each node parses its own
   disk at the same time), then `forensics analyze` merges the facts files.

Wall time and peak RSS (the largest single process: wait4 of the command,
whose own reaped workers count in its figure) for every step; the verdict
and culprits each run gives. Figures go to stdout and to
benchmarks/results/bench_scale.json, which the benchmarks page reads.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def peak_of(cmd: list[str], env=None) -> dict:
    """Wall seconds, peak RSS (MiB: the largest process the command or its
    reaped workers reached), CPU seconds (user + system of the command and
    every process it reaped), exit code and output of one run. A fresh helper
    process runs it, so earlier runs' peaks do not count."""
    helper = [sys.executable, "-c", (
        "import json,resource,subprocess,sys,time\n"
        "t=time.monotonic();p=subprocess.run(sys.argv[1:],capture_output=True)\n"
        "u=resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'seconds':round(time.monotonic()-t,2),'peak_mib':round(u.ru_maxrss/1024),"
        "'cpu_seconds':round(u.ru_utime+u.ru_stime,1),"
        "'exit':p.returncode,'stdout':p.stdout.decode(errors='replace'),"
        "'stderr':p.stderr.decode(errors='replace')[-2000:]}))"), *cmd]
    done = subprocess.run(helper, capture_output=True, text=True, env=env)
    return json.loads(done.stdout)


def verdict(run: dict) -> str:
    try:
        report = json.loads(run["stdout"])
    except ValueError:
        return f"failed (exit {run['exit']}): {run['stderr'].strip().splitlines()[-1:] or ''}"
    if not isinstance(report, dict):  # a peer's count, not a report
        return ""
    return f"{report.get('verdict')} {report.get('culprit_ranks')}"


def generate(work: str, ranks: int, culprit: int) -> str:
    folder = os.path.join(work, f"incident{ranks}")
    done = os.path.join(folder, ".complete")
    if os.path.exists(done):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    py = sys.executable
    subprocess.run([py, os.path.join(HERE, "gen_fr_dumps.py"), os.path.join(folder, "fr"), "--ranks", str(ranks),
                    "--scenario", "missing", "--culprit", str(culprit)], check=True)
    subprocess.run([py, os.path.join(HERE, "gen_dumps.py"), str(ranks), os.path.join(folder, "pyspy"),
                    "--culprit", str(culprit), "--kinds", "pyspy.txt"], check=True)
    subprocess.run([py, os.path.join(HERE, "gen_nccl_logs.py"), os.path.join(folder, "nccl"), "--ranks", str(ranks),
                    "--size", "16K", "--per-rank-files", "--stop-rank", str(culprit), "--stop-at", "0.5",
                    "--per-node", "8", "--coll-share"],
                   check=True, stdout=subprocess.DEVNULL)
    open(done, "w").close()
    return folder


def generate_nodes(work: str, ranks: int, nodes: int, culprit: int) -> list[str]:
    base = os.path.join(work, f"nodes{ranks}")
    folders = [os.path.join(base, f"node{n}") for n in range(nodes)]
    if os.path.exists(os.path.join(base, ".complete")):
        return folders
    shutil.rmtree(base, ignore_errors=True)
    per = ranks // nodes
    for n, folder in enumerate(folders):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_dumps.py"), str((n + 1) * per), folder,
                        "--first", str(n * per), "--culprit", str(culprit), "--kinds", "pyspy.txt",
                        "--threads", "12"], check=True)
    open(os.path.join(base, ".complete"), "w").close()
    return folders


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="where the generated incidents go (tens of GB at full size)")
    ap.add_argument("--ranks", type=int, default=16384)
    ap.add_argument("--culprit", type=int, default=4242)
    ap.add_argument("--facts-ranks", type=int, default=131072)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--no-local", action="store_true", help="skip the 16,384-rank runs (local and Dask)")
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--no-facts", action="store_true")
    ap.add_argument("--versus-pickle", action="store_true",
                    help="Flight Recorder + py-spy dumps only, beside a bare 2-process pickle.load of them")
    ap.add_argument("--repeat", type=int, default=2, help="interleaved pairs for --versus-pickle")
    args = ap.parse_args(argv)
    forensics = [sys.executable, "-m", "forensics"]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    results = {"runs": []}

    def record(label: str, run: dict, **extra) -> dict:
        row = {"label": label, "seconds": run["seconds"], "peak_mib": run["peak_mib"], "verdict": verdict(run),
               **extra}
        results["runs"].append(row)
        print(f"{label:<48} {run['seconds']:>8.2f} s  peak {run['peak_mib']:>6} MiB  {row['verdict']}"
              + "".join(f"  {k}={v}" for k, v in extra.items()), flush=True)
        return row

    if args.versus_pickle:
        _versus_pickle(args, forensics, env, record)
    if not args.no_local:
        _incident(args, forensics, env, record)
    if not args.no_facts:
        _facts(args, forensics, env, record, results)
    import results as kept  # benchmarks/results.py: the figures, the command and the machine, for the docs

    rows = [[r["label"], r["seconds"], r["peak_mib"], r.get("verdict", ""),
             "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in r.items()
                       if k not in ("label", "seconds", "peak_mib", "verdict"))] for r in results["runs"]]
    kept.record("bench_scale", ["run", "seconds", "peak RSS (MiB)", "verdict", "notes"], rows,
                notes=[f"{args.ranks:,}-rank incident: goal 60 s and 2 GiB locally on 2 cores; "
                       f"{args.facts_ranks:,} ranks as {args.nodes} facts files: time and memory reported"]
                + ([f"{args.ranks:,} ranks of Flight Recorder (2,000 entries) and py-spy dumps only, rank "
                    f"{args.culprit} missing: goal at most 1.25x the 2-process pickle.load floor (which also "
                    f"reads the py-spy files' bytes) and at most 2 GiB"] if args.versus_pickle else []),
                argv=[sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    return 0


def _incident(args, forensics, env, record) -> None:
    started = time.monotonic()
    folder = generate(args.work, args.ranks, args.culprit)
    print(f"incident: {args.ranks:,} ranks in {folder} ({_size(folder)}; made or found in "
          f"{time.monotonic() - started:.0f} s)", flush=True)
    local = peak_of([*forensics, "analyze", folder, "--hung", "-f", "json", "-q"], env)
    record(f"local, {os.cpu_count()} forked workers", local, files=_count(folder))
    if not args.no_dask:
        from distributed import LocalCluster

        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, silence_logs=40)
        try:
            remote = peak_of([*forensics, "analyze", folder, "--hung", "-f", "json", "-q", "--scheduler",
                              cluster.scheduler_address], env)
        finally:
            cluster.close()
        record("Dask LocalCluster, 2 workers x 1 thread", remote,
               overhead=f"{remote['seconds'] / local['seconds']:.2f}x the local time",
               same_report=remote["stdout"] == local["stdout"])


# The floor of the 16,384-rank goal: what decoding the same dumps costs with
# nothing else done, in two processes like our workers on this machine.
PICKLE_PEER = """
import os, pickle, sys
from multiprocessing import Pool

def load(path):
    with open(path, 'rb') as handle:
        if os.path.basename(path).startswith('nccl_trace_rank_'):
            return len(pickle.load(handle)['entries'])
        return len(handle.read())

if __name__ == '__main__':
    paths = sorted(os.path.join(d, f) for d, _, names in os.walk(sys.argv[1]) for f in names)
    with Pool(2) as pool:
        print(sum(pool.map(load, paths, chunksize=64)))
"""


def generate_fr_pyspy(work: str, ranks: int, culprit: int) -> str:
    """Every rank's Flight Recorder dump (2,000 entries, rank `culprit` one
    collective short) and py-spy dump (it in its data loader), nothing else."""
    folder = os.path.join(work, f"frpyspy{ranks}")
    done = os.path.join(folder, ".complete")
    if os.path.exists(done):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    py = sys.executable
    subprocess.run([py, os.path.join(HERE, "gen_fr_dumps.py"), os.path.join(folder, "fr"), "--ranks", str(ranks),
                    "--scenario", "missing", "--culprit", str(culprit)], check=True)
    subprocess.run([py, os.path.join(HERE, "gen_dumps.py"), str(ranks), os.path.join(folder, "pyspy"),
                    "--culprit", str(culprit), "--kinds", "pyspy.txt"], check=True)
    open(done, "w").close()
    return folder


def _versus_pickle(args, forensics, env, record) -> None:
    started = time.monotonic()
    folder = generate_fr_pyspy(args.work, args.ranks, args.culprit)
    inputs = [os.path.join(folder, "fr"), os.path.join(folder, "pyspy")]
    print(f"incident: {args.ranks:,} ranks, Flight Recorder + py-spy dumps in {folder} ({_size(folder)}; made or "
          f"found in {time.monotonic() - started:.0f} s)", flush=True)
    peer_cmd = [sys.executable, "-c", PICKLE_PEER, folder]
    ours_cmd = [*forensics, "analyze", *inputs, "--hung", "-f", "json", "-q"]
    peak_of(peer_cmd, env)  # the page cache warm for both, as far as the machine keeps it
    for i in range(args.repeat):
        peer = peak_of(peer_cmd, env)
        if peer["exit"] != 0:
            raise SystemExit(f"pickle.load peer failed: {peer['stderr']}")
        ours = peak_of(ours_cmd, env)
        record(f"forensics analyze (FR + py-spy), run {i + 1}", ours, files=_count(folder) - 1,
               cpu_seconds=ours["cpu_seconds"],
               ratio=f"{ours['seconds'] / peer['seconds']:.2f}x the pickle.load floor of this pair "
                     f"({ours['cpu_seconds'] / peer['cpu_seconds']:.2f}x in CPU time)")
        record(f"2-process pickle.load + read, run {i + 1}", peer, files=_count(folder) - 1,
               cpu_seconds=peer["cpu_seconds"])


def _facts(args, forensics, env, record, results) -> None:
    started = time.monotonic()
    nodes = generate_nodes(args.work, args.facts_ranks, args.nodes, args.culprit)
    print(f"{args.facts_ranks:,} ranks of py-spy dumps in {len(nodes)} node folders (made or found in "
          f"{time.monotonic() - started:.0f} s)", flush=True)
    facts_files, parse_seconds, parse_peak = [], [], 0
    for node in nodes:
        out = node.rstrip("/") + ".facts"
        run = peak_of([*forensics, "parse", node, "--out", out, "-q"], env)
        if run["exit"] != 0:
            raise SystemExit(f"parse {node} failed: {run['stderr']}")
        facts_files.append(out)
        parse_seconds.append(run["seconds"])
        parse_peak = max(parse_peak, run["peak_mib"])
    results["runs"].append({"label": f"forensics parse, one node of {args.facts_ranks // args.nodes:,} ranks",
                            "seconds": max(parse_seconds), "peak_mib": parse_peak,
                            "all_nodes_seconds": parse_seconds,
                            "facts_bytes": sum(os.path.getsize(f) for f in facts_files)})
    print(f"{'parse per node (slowest of ' + str(len(nodes)) + ')':<48} {max(parse_seconds):>8.2f} s  "
          f"peak {parse_peak:>6} MiB  facts files {sum(os.path.getsize(f) for f in facts_files) / 1e6:.0f} MB",
          flush=True)
    merged = peak_of([*forensics, "analyze", *facts_files, "--hung", "-f", "json", "-q"], env)
    record(f"analyze {len(facts_files)} facts files, {args.facts_ranks:,} ranks", merged)


def _count(folder: str) -> int:
    return sum(len(files) for _, _, files in os.walk(folder))


def _size(folder: str) -> str:
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)
    return f"{total / 1e9:.1f} GB"


if __name__ == "__main__":
    sys.exit(main())
