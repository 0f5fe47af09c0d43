"""Flight Recorder dumps: forensics next to PyTorch's own analyzer.

For each scale (`--ranks 64 1024 8192`) and scenario (see gen_fr_dumps.py)
this writes one dump per rank and runs, one after the other on the same
folder:

1. `python -m forensics analyze DIR -f json --hung` (the copy installed in
   this interpreter, else the checkout's source: see where.py), and
2. `python -m torch.distributed.flight_recorder.fr_trace DIR -p nccl_trace_rank_`
   from the venv /opt/trainenv (torch 2.13 CPU; FORENSICS_BENCH_TRAINENV
   names another),

and prints the wall time and peak RSS of each (from `wait4`, so per run and
including the worker processes it reaped), what each concluded, and whether
they agree. With `--repeat N` each tool runs N times, the two interleaved,
and the run of median wall time is the one reported, plus the median of
the per-pair speed-ups (each run of ours against the analyzer's next run,
so a slow spell of the machine that lasts a pair cancels out). `--floor`
adds two more contenders: a bare decode (two forked processes that only
`pickle.loads` each dump: no checks, no analysis), the floor for any Python
tool that decodes every dump, and the same decode while the parent imports
networkx (what any tool built on it pays before its first check), with
forensics's time over each per interleaved pair.
forensics runs with its bytecode cached under the work folder
(PYTHONPYCACHEPREFIX, filled by one untimed warm-up run), as an installed
package has it; the analyzer's venv ships its .pyc files. Then, at the smallest scale, what each does with file names
users really have (`host07_nccl_trace_rank_3`, `fr_dump.5`), with JSON dumps,
and with a cross-group cycle.

The analyzer holds every entry of every rank in memory (tens of GB at 8,192
ranks x 2,000 entries), so both tools run under an address-space cap
(`--mem-gb`, default 8) and a time cap (`--timeout`): "did not finish in N s"
and MemoryError are results, reported as such.

If forensics does not register the Flight Recorder reader as a built-in
plugin yet, the forensics run goes through a two-line shim that adds it
(printed with the command); the engine may also still be learning what to do
with Flight Recorder-only input. Both are reported, not fixed, here.

    python benchmarks/bench_fr.py --ranks 64 1024
    python benchmarks/bench_fr.py --ranks 64 --repeat 5
    python benchmarks/bench_fr.py --ranks 64 --repeat 7 --floor --no-extras
    python benchmarks/bench_fr.py --ranks 8192 --scenarios missing --timeout 300

Target: ten times the analyzer's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import gen_fr_dumps  # noqa: E402
from results import record  # noqa: E402
from where import editable_installs, run_folder  # noqa: E402

# The analyzer's venv (torch 2.13, CPU); FORENSICS_BENCH_TRAINENV names another one that has it.
TRAINENV = os.environ.get("FORENSICS_BENCH_TRAINENV", "/opt/trainenv")
TORCH_PIN = "torch==2.13.0"
PLUGIN = "forensics.ingest.flightrecorder"
SHIM = (
    "import sys, forensics.plugins as p\n"
    f"name = {PLUGIN!r}\n"
    "if name not in p.BUILTIN_PLUGINS:\n"
    "    d = p.Plugins.__init__.__defaults__\n"
    "    p.Plugins.__init__.__defaults__ = d[:-1] + (d[-1] + (name,),)\n"
    "from forensics.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
EXPECTED = {
    "healthy": ("no hang", []),
    "missing": ("missing_rank", "culprit"),
    "mismatch": ("collective_mismatch", "culprit"),
    "cycle": ("deadlock", "all"),
    "state": ("missing_rank", "culprit"),
    "coalesced": ("collective_mismatch", "culprit"),
    "early_exit": ("missing_rank", "culprit"),
}


@dataclass
class Run:
    command: list
    seconds: float = 0.0
    cpu: float = 0.0  # user + system seconds of the child and the workers it reaped
    peak_mb: float = 0.0
    exit_code: int | None = None
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""


@dataclass
class Verdict:
    verdict: str
    culprits: list = field(default_factory=list)
    detail: str = ""


# ---------------------------------------------------------------- running a child

def run(command: list, timeout: float, mem_gb: float, cwd: str | None = None, env=None) -> Run:
    """Run `command`, capped in time and address space; wall time and peak
    RSS (KiB from wait4: the child and every process it reaped)."""
    limit = int(mem_gb * (1 << 30))

    def cap():
        os.setsid()
        if limit > 0:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    result = Run(command)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd, env=env, preexec_fn=cap)

        def kill():
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its workers
                result.timed_out = True
            except ProcessLookupError:  # it ended as the time ran out
                pass

        # A blocking wait4, so the time is the child's to the microsecond: a
        # polling loop rounded every run up to its next 50 ms tick (25 ms on
        # average: 5 % of a 0.5 s run, 0.5 % of a 5 s one).
        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        result.seconds = time.monotonic() - start
        proc.returncode = result.exit_code = os.waitstatus_to_exitcode(status)
        result.peak_mb = usage.ru_maxrss / 1024
        result.cpu = usage.ru_utime + usage.ru_stime
        out.seek(0)
        err.seek(0)
        result.stdout = out.read().decode("utf-8", "replace")
        result.stderr = err.read().decode("utf-8", "replace")
    return result


def forensics_env(work: str) -> dict:
    """The environment forensics runs in: its bytecode cached under WORK
    (PYTHONPYCACHEPREFIX), as an installed package has it, rather than
    compiled from source on every run when PYTHONDONTWRITEBYTECODE is set.
    The analyzer's venv ships its .pyc files already."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    return env


def warm_up(work: str, args) -> None:
    """One untimed run over a 2-rank dump, so every module forensics imports
    is compiled into the bytecode cache before anything is timed."""
    folder = os.path.join(work, "warm_up")
    gen_fr_dumps.write(folder, "missing", 2, 10, 1)
    command, _ = forensics_command(folder)
    subprocess.run(command, cwd=args.cwd, env=args.env, capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def forensics_command(folder: str, hung: bool = True) -> tuple[list, str]:
    sys.path.insert(0, REPO)
    from forensics import plugins as registry
    args = ["analyze", folder, "-f", "json"] + (["--hung"] if hung else [])
    shown = " ".join(["analyze", os.path.basename(folder)] + args[2:])
    if PLUGIN in registry.BUILTIN_PLUGINS:
        return [sys.executable, "-m", "forensics", *args], f"python -m forensics {shown}"
    return ([sys.executable, "-c", SHIM, *args],
            f"python -c <shim: forensics with {PLUGIN} registered> {shown}")


# The floor under any Python reader of these dumps on this machine: two
# forked processes that take the files from one pipe and only `pickle.loads`
# each (the C decoder, no checks, nothing kept, no analysis, no imports of
# ours). Plain pickle.loads runs code a hostile file names, so this runs on
# the benchmark's own generated dumps only; forensics never does it.
FLOOR = """
import os, pickle, sys
folder = sys.argv[1]
files = sorted(os.path.join(folder, name) for name in os.listdir(folder))
tasks, feed = os.pipe()
os.write(feed, b"".join(i.to_bytes(4, "little") for i in range(len(files))))
os.close(feed)
pids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        while True:
            record = os.read(tasks, 4)
            if not record:
                os._exit(0)
            with open(files[int.from_bytes(record, "little")], "rb") as handle:
                pickle.loads(handle.read())
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
"""

# The same decode while the parent imports networkx, the graph library the
# wait-for analysis is built on (a fixed choice of the project), as
# forensics's parent does while its workers parse: what decoding every dump
# plus that one import costs, before any check, rule or analysis.
FLOOR_GRAPH = FLOOR.replace("for pid in pids:", "import networkx\nfor pid in pids:")
FLOORS = (("bare decode", FLOOR, "2 processes, pickle.loads only: the floor",
           "the most any Python tool that decodes every dump can reach on this machine"),
          ("+ networkx", FLOOR_GRAPH, "the same, the parent importing networkx meanwhile",
           "the most a tool that also imports networkx can reach"))


def analyzer_command(folder: str, prefix: str | None = "nccl_trace_rank_", extra=()) -> list:
    command = [os.path.join(TRAINENV, "bin", "python"), "-m", "torch.distributed.flight_recorder.fr_trace", folder]
    if prefix is not None:
        command += ["-p", prefix]
    return command + list(extra)


def ensure_trainenv() -> str:
    """The analyzer's venv. Created only when it does not exist at all."""
    python = os.path.join(TRAINENV, "bin", "python")
    if not os.path.exists(TRAINENV):
        print(f"creating {TRAINENV} with {TORCH_PIN} (CPU) ...", file=sys.stderr)
        subprocess.run(["python3", "-m", "venv", TRAINENV], check=True)
        subprocess.run([os.path.join(TRAINENV, "bin", "pip"), "install", TORCH_PIN], check=True)
    probe = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return ""
    return probe.stdout.strip()


# ---------------------------------------------------------------- reading their answers

def ours(result: Run) -> Verdict:
    if result.timed_out:
        return Verdict("did not finish", detail=f"in {result.seconds:.0f} s")
    try:
        report = json.loads(result.stdout)
    except ValueError:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return Verdict("failed", detail=f"exit {result.exit_code}: {last[:300]}")
    cycles = report.get("cycles") or []
    detail = f"cycles {cycles[:3]}" if cycles else ""
    return Verdict(report.get("verdict", "?"), sorted(report.get("culprit_ranks") or []), detail)


_MISSING = re.compile(r"Not all ranks joining collective, sequence number: (\d+)")
_ERRORS = re.compile(r"Collective sequence number: (\d+) has errors")
_MISSING_RANKS = re.compile(r"^missing ranks: \{([\d, ]*)\}", re.M)
_CULPRIT = re.compile(r"Culprit rank (\d+); Error type: (\w+)")
_GROUP = re.compile(r"^group info: (.*)$", re.M)


def analyzer(result: Run) -> Verdict:
    text = result.stdout + "\n" + result.stderr
    if result.timed_out:
        return Verdict("did not finish", detail=f"in {result.seconds:.0f} s")
    if result.exit_code not in (0, None):
        lines = [l for l in result.stderr.strip().splitlines() if l.strip()]
        error = next((l for l in reversed(lines) if re.match(r"^\w*(Error|Exception)\b", l.strip())),
                     lines[-1] if lines else "")
        if result.exit_code < 0:
            error = f"killed by signal {-result.exit_code} {error}".strip()
        return Verdict("failed", detail=f"exit {result.exit_code}: {error[:300]}")
    blocks = re.split(r"(?=^Not all ranks joining collective|^Collective sequence number: )", text, flags=re.M)
    missing: list[tuple[str, str, list]] = []
    culprits: dict[int, str] = {}
    for block in blocks:
        seq = _MISSING.search(block)
        group = _GROUP.search(block)
        if seq:
            ranks = _MISSING_RANKS.search(block)
            found = sorted(int(r) for r in ranks.group(1).split(",") if r.strip()) if ranks else []
            missing.append((seq.group(1), group.group(1) if group else "?", found))
        if _ERRORS.search(block):
            for rank, kind in _CULPRIT.findall(block):
                culprits[int(rank)] = kind
    if culprits:
        kinds = sorted(set(culprits.values()))
        verdict = "collective_mismatch" if any("TYPE" in k for k in kinds) else "mismatch (" + ", ".join(kinds) + ")"
        return Verdict(verdict, sorted(culprits), f"error types {kinds}")
    if missing:
        union = sorted({r for _, _, ranks in missing for r in ranks})
        detail = "; ".join(f"#{seq} on {group}: missing {_ranks(ranks)}" for seq, group, ranks in missing[:4])
        return Verdict("missing_rank", union, detail + (f" (+{len(missing) - 4} more)" if len(missing) > 4 else ""))
    return Verdict("no errors found")


def _ranks(ranks: list) -> str:
    return str(ranks) if len(ranks) <= 6 else f"[{ranks[0]}, {ranks[1]}, ... {ranks[-1]}] ({len(ranks)} ranks)"


def expected(scenario: str, world: int, culprit: int) -> Verdict:
    verdict, who = EXPECTED[scenario]
    ranks = [culprit] if who == "culprit" else list(range(world)) if who == "all" else []
    return Verdict(verdict, ranks)


def agrees(a: Verdict, b: Verdict) -> bool:
    healthy = {"no errors found", "no hang", "no_hang", "healthy", "ok", "none", "inconclusive"}
    if a.verdict in healthy and b.verdict in healthy:
        return True
    return a.verdict == b.verdict and a.culprits == b.culprits


# ---------------------------------------------------------------- the benchmark

def median_run(runs: list) -> Run:
    """The run of median wall time (the lower middle one of an even count)."""
    return sorted(runs, key=lambda r: r.seconds)[(len(runs) - 1) // 2]


def show(label: str, result: Run, verdict: Verdict, how: str = "", runs=()) -> None:
    state = "TIMEOUT" if result.timed_out else f"exit {result.exit_code}"
    print(f"  {label:<10} {result.seconds:8.2f} s  (CPU {result.cpu:7.2f} s)  peak RSS {result.peak_mb:7.0f} MiB  "
          f"{state:<8}  "
          f"verdict {verdict.verdict} culprits {_ranks(verdict.culprits)}"
          + (f"  [{verdict.detail}]" if verdict.detail else ""))
    if len(runs) > 1:
        times = sorted(r.seconds for r in runs)
        print(f"             median of {len(runs)} runs; all: " + " ".join(f"{t:.2f}" for t in times) + " s")
        if len({ours(r).verdict if label == "forensics" else analyzer(r).verdict for r in runs}) > 1:
            print("             the runs did not all give the same verdict")
    if how:
        print(f"             command: {how}")


def scale(world: int, scenarios, args, work: str, rows: list) -> None:
    for scenario in scenarios:
        folder = os.path.join(work, f"{scenario}_{world}")
        shutil.rmtree(folder, ignore_errors=True)
        started = time.monotonic()
        gen_fr_dumps.write(folder, scenario, world, args.entries, args.culprit)
        made = time.monotonic() - started
        print(f"\n== {world} ranks, scenario {scenario}: {world} dumps x {args.entries} entries "
              f"({_size(folder)}, written in {made:.1f} s)")
        command, how = forensics_command(folder, hung=scenario != "healthy")
        mine_runs, their_runs = [], []
        floor_runs: list[list] = [[] for _ in FLOORS] if args.floor else []
        for _ in range(args.repeat):  # interleaved, so a slow spell of the machine hits both
            mine_runs.append(run(command, args.ours_timeout, args.mem_gb, cwd=args.cwd, env=args.env))
            if not args.no_analyzer:
                their_runs.append(run(analyzer_command(folder), args.timeout, args.mem_gb))
            for (_, code, _, _), runs in zip(FLOORS, floor_runs):
                runs.append(run([sys.executable, "-c", code, folder], args.ours_timeout, args.mem_gb, env=args.env))
        mine = median_run(mine_runs)
        ours_verdict = ours(mine)
        show("forensics", mine, ours_verdict, how, mine_runs)
        if args.no_analyzer:
            theirs, their_verdict = None, Verdict("not run")
        else:
            theirs = median_run(their_runs)
            their_verdict = analyzer(theirs)
            show("fr_trace", theirs, their_verdict, " ".join(analyzer_command(os.path.basename(folder))), their_runs)
        pairs = sorted(t.seconds / m.seconds for m, t in zip(mine_runs, their_runs) if m.seconds and not t.timed_out)
        if len(pairs) > 1:
            # Each run of ours against the analyzer's run right after it: a
            # slow spell of the machine that lasts a pair cancels out.
            print(f"  speed-up per interleaved pair: median {statistics.median(pairs):.1f}x, "
                  f"range {pairs[0]:.1f}-{pairs[-1]:.1f}x")
        for (label, _, what, meaning), runs in zip(FLOORS, floor_runs):
            floor = median_run(runs)
            print(f"  {label:<14} {floor.seconds:.2f} s  (CPU {floor.cpu:6.2f} s)  {what}; all: "
                  + " ".join(f"{r.seconds:.2f}" for r in sorted(runs, key=lambda r: r.seconds)))
            ceiling = sorted(t.seconds / f.seconds for f, t in zip(runs, their_runs) if f.seconds and not t.timed_out)
            if ceiling:
                print(f"  the analyzer's time over that, per pair: median {statistics.median(ceiling):.1f}x ({meaning})")
            over = sorted(m.seconds / f.seconds for m, f in zip(mine_runs, runs) if f.seconds and not m.timed_out)
            if over:
                print(f"  forensics over that, per interleaved pair: median {statistics.median(over):.2f}x, "
                      f"range {over[0]:.2f}-{over[-1]:.2f}x")
        truth = expected(scenario, world, args.culprit)
        print(f"  expected   {truth.verdict} culprits {_ranks(truth.culprits)}")
        if theirs is None:
            agreement = "analyzer not run"
        elif their_verdict.verdict in ("failed", "did not finish"):
            agreement = f"fr_trace {their_verdict.verdict}"
        else:
            agreement = "AGREE" if agrees(ours_verdict, their_verdict) else "DISAGREE"
        print(f"  => {agreement}; forensics {'right' if agrees(ours_verdict, truth) else 'WRONG'}, "
              f"fr_trace {'-' if theirs is None else 'right' if agrees(their_verdict, truth) else 'WRONG'}")
        floors = {label: median_run(runs).seconds for (label, _, _, _), runs in zip(FLOORS, floor_runs)}
        rows.append((world, scenario, mine, ours_verdict, theirs, their_verdict, agreement,
                     statistics.median(pairs) if len(pairs) > 1 else None, floors))
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


def extras(world: int, args, work: str) -> None:
    """File names users have, JSON dumps: what each tool does with them."""
    print(f"\n== extra cases at {world} ranks (scenario missing, culprit {args.culprit})")

    def mixed(rank: int) -> str:
        names = (f"nccl_trace_rank_{rank}", f"host{rank // 8:02d}_nccl_trace_rank_{rank}", f"fr_dump.{rank}")
        return names[rank % 3]

    side_by_side(world, args, work, "mixed_names", "mixed file names: nccl_trace_rank_0, host00_nccl_trace_rank_1, "
                 "fr_dump.2, ...", (("nccl_trace_rank_", ()), (None, ()),
                                    ("nccl_trace_rank_", ("--allow-incomplete-ranks",))), names=mixed)
    side_by_side(world, args, work, "json", "JSON dumps (_dump_fr_trace_json shape): rank0.fr.json ...",
                 (("rank", ()), (None, ())), json_form=True)


def side_by_side(world: int, args, work: str, name: str, title: str, tries, **shape) -> None:
    """Missing-rank dumps written as `shape` says, read by forensics and by
    the analyzer with each (prefix, extra arguments) of `tries`."""
    folder = os.path.join(work, f"{name}_{world}")
    shutil.rmtree(folder, ignore_errors=True)
    gen_fr_dumps.write(folder, "missing", world, args.entries, args.culprit, **shape)
    print(f"-- {title}")
    command, how = forensics_command(folder)
    result = run(command, args.ours_timeout, args.mem_gb, cwd=args.cwd, env=args.env)
    show("forensics", result, ours(result), how)
    if not args.no_analyzer:
        for prefix, extra in tries:
            command = analyzer_command(folder, prefix, extra)
            result = run(command, args.timeout, args.mem_gb)
            show("fr_trace", result, analyzer(result), " ".join(analyzer_command("DIR", prefix, extra)))
    shutil.rmtree(folder, ignore_errors=True)


def _size(folder: str) -> str:
    total = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    return f"{total / (1 << 20):.0f} MiB"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 1024],
                        help="world sizes to run (64 1024 8192); default 64 1024")
    parser.add_argument("--scenarios", nargs="+", choices=gen_fr_dumps.ALL_SCENARIOS,
                        default=list(gen_fr_dumps.SCENARIOS),
                        help=f"default: {' '.join(gen_fr_dumps.SCENARIOS)}; also "
                             f"{' '.join(gen_fr_dumps.EXTRA_SCENARIOS)}")
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--culprit", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300, help="cap on the analyzer, seconds")
    parser.add_argument("--ours-timeout", type=float, default=900, help="cap on forensics, seconds")
    parser.add_argument("--mem-gb", type=float, default=8, help="address-space cap per tool (0: none)")
    parser.add_argument("--work", default="", help="where to write the dumps (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the dumps")
    parser.add_argument("--no-extras", action="store_true", help="skip the mixed-names and JSON cases")
    parser.add_argument("--no-analyzer", action="store_true", help="run forensics only")
    parser.add_argument("--floor", action="store_true",
                        help="also time a bare decode of the dumps (2 processes, pickle.loads only): the floor, "
                             "and the same with the parent importing networkx")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each tool this many times, interleaved, and report the median run "
                             "(a shared machine's speed drifts by a third within minutes)")
    args = parser.parse_args(argv)

    if not args.no_analyzer:
        version = ensure_trainenv()
        if not version:
            print(f"{TRAINENV} has no importable torch: the analyzer is skipped", file=sys.stderr)
            args.no_analyzer = True
        else:
            print(f"analyzer: torch {version} in {TRAINENV}")
    work = args.work or tempfile.mkdtemp(prefix="fr_bench_")
    os.makedirs(work, exist_ok=True)
    print(f"dumps in {work}; caps: analyzer {args.timeout:.0f} s, forensics {args.ours_timeout:.0f} s, "
          f"{args.mem_gb:g} GiB address space each; {os.cpu_count()} CPUs")
    args.env = forensics_env(work)
    args.cwd, what = run_folder(work)
    warm_up(work, args)
    print(f"forensics bytecode cached in {args.env['PYTHONPYCACHEPREFIX']} (one untimed warm-up run)")
    print(f"forensics runs as {sys.executable} -m forensics: {what}")
    editable = editable_installs()
    if editable:
        print(f"note: this interpreter loads {', '.join(editable)} at start-up (an editable install): "
              f"15-20 ms more per run than an installed copy pays, on this machine. For figures users "
              f"see, run the benchmark from a plain venv: python3 -m venv /tmp/fxbench && "
              f"/tmp/fxbench/bin/pip install . && /tmp/fxbench/bin/python benchmarks/bench_fr.py ...")
    rows: list = []
    try:
        for world in args.ranks:
            scale(world, args.scenarios, args, work, rows)
        if not args.no_extras:
            extras(min(args.ranks), args, work)
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)

    print("\n== summary")
    print(f"{'ranks':>6} {'scenario':<10} {'forensics s':>11} {'CPU s':>7} {'MiB':>6} {'verdict':<22} "
          f"{'fr_trace s':>10} {'CPU s':>7} {'MiB':>6} {'verdict':<26} {'speed-up':>8} {'per pair':>8}  agreement")
    for world, scenario, mine, ours_verdict, theirs, their_verdict, agreement, paired, _ in rows:
        their_time = f"{theirs.seconds:10.2f} {theirs.cpu:7.1f}" if theirs else f"{'-':>10} {'-':>7}"
        their_mem = f"{theirs.peak_mb:6.0f}" if theirs else f"{'-':>6}"
        ratio = f"{theirs.seconds / mine.seconds:7.1f}x" if theirs and mine.seconds else f"{'-':>8}"
        print(f"{world:>6} {scenario:<10} {mine.seconds:11.2f} {mine.cpu:7.1f} {mine.peak_mb:6.0f} "
              f"{(ours_verdict.verdict + ' ' + _ranks(ours_verdict.culprits))[:22]:<22} "
              f"{their_time} {their_mem} {(their_verdict.verdict + ' ' + _ranks(their_verdict.culprits))[:26]:<26} "
              f"{ratio} {f'{paired:7.1f}x' if paired else '-':>8}  {agreement}")
    record("bench_fr", ["ranks", "scenario", "forensics wall s", "forensics peak RSS MiB", "forensics verdict",
                        "fr_trace wall s", "fr_trace peak RSS MiB", "fr_trace verdict", "speed-up per pair (median)",
                        "bare decode s", "decode + networkx s", "agreement"],
           [[world, scenario, round(mine.seconds, 2), round(mine.peak_mb), f"{v.verdict} {_ranks(v.culprits)}",
             round(theirs.seconds, 2) if theirs else "-", round(theirs.peak_mb) if theirs else "-",
             f"{tv.verdict} {_ranks(tv.culprits)}" if theirs else "-",
             f"{paired:.1f}x" if paired else "-",
             round(floors["bare decode"], 2) if "bare decode" in floors else "-",
             round(floors["+ networkx"], 2) if "+ networkx" in floors else "-", agreement]
            for world, scenario, mine, v, theirs, tv, agreement, paired, floors in rows],
           notes=[f"{args.entries} entries per dump (pickle, version 2.10); each tool under a "
                  f"{args.mem_gb:g} GiB address-space cap; median run of {args.repeat}, the tools interleaved",
                  "analyzer: not run" if args.no_analyzer else f"analyzer: python -m torch.distributed.flight_recorder.fr_trace DIR -p nccl_trace_rank_, torch from {TRAINENV}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
