"""Live watching: what the agent costs a job, and how fast `forensics watch` finds a hang.

Side by side in one run, each section a real job or store.

    python benchmarks/bench_watch.py [--sections hotpath,overhead,latency,scale] [--report FILE]

hotpath   ns per call the agent adds: a no-op with all_reduce's signature,
          wrapped by the agent and not (a 1-rank Gloo group gives it a real
          process group), and Work.wait's wrapper on the blocking path
overhead  a loop of --iters (100,000) small all_reduces on 2 Gloo ranks under
          torchrun: plain, with the agent (`-m forensics.agent`, publishing to
          the job's own TCPStore), and with the agent and the watcher in rank 0
          (`--watch`); --rounds rounds, the variants interleaved in each, the
          median of the per-round ratios to plain
overhead_ab  the same loop in one job, --iters calls per variant in
          alternating blocks (plain, agent, agent, plain, ...), the agent's
          wrappers switched in and out: the same processes in the same minutes;
          each call also timed alone (median, p10, p90)
overhead_null  that harness with both halves plain: the difference it reads
          when there is none
latency   a 2-rank job that ends its warm-up in a send<->send cycle, watched at
          the default settings (threshold 50 ms, watcher poll 10 ms), through
          the job's TCPStore and through Redis: from the moment the last rank
          of the cycle entered its call (the agent's own timestamp) to the
          verdict (--latency-runs runs each)
scale     --scale-ranks (10,000) simulated ranks published from --scale-procs
          processes (benchmarks/sim_ranks.py, the agent's store code) to one
          Redis and to one TCPStore: a straggler churn, every rank but two in
          the next all_reduce, then a P2P cycle injected: time to the verdict,
          and the watcher's peak RSS and CPU time

Every run is a real process; each job, store and watcher started here is
ended by its pid. The report says on what machine and with what command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
PY = sys.executable

LOOP = '''
import json, os, sys, time
import torch
import torch.distributed as dist


def train_steps(grads, steps):
    for _ in range(steps):
        dist.all_reduce(grads)


def main():
    steps, out = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    grads = torch.ones(16)
    train_steps(grads, 1000)
    dist.barrier()
    started = time.perf_counter()
    train_steps(grads, steps)
    seconds = time.perf_counter() - started
    dist.barrier()
    if dist.get_rank() == 0:
        with open(out, "w") as handle:
            json.dump({"seconds": seconds, "steps": steps}, handle)
    dist.destroy_process_group()


main()
'''

LOOP_AB = '''
import json, statistics, sys, time
from array import array
import torch
import torch.distributed as dist
import forensics.agent as agent


def train_steps(grads, steps, took, clock=time.perf_counter_ns):
    for i in range(steps):
        started = clock()
        dist.all_reduce(grads)
        took[i] = clock() - started


def main():
    steps, blocks, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    agent.install()  # the job's own TCPStore; its publisher runs in both halves
    recorded, plain = dist.all_reduce, agent._installed["all_reduce"]
    work = dist.Work
    recorded_wait, plain_wait = work.wait, agent._installed["Work.wait"]
    if sys.argv[4:] == ["null"]:  # the harness against itself: both halves plain
        recorded, recorded_wait = plain, plain_wait
    dist.init_process_group("gloo")
    grads = torch.ones(16)
    took = array("q", bytes(8 * steps))
    train_steps(grads, 1000, took)
    seconds = {"agent": [], "plain": []}
    calls = {"agent": [], "plain": []}
    for block in range(2 * blocks):
        on = block % 4 in (1, 2)  # plain, agent, agent, plain, ...: a drift of the machine cancels out
        dist.all_reduce, work.wait = (recorded, recorded_wait) if on else (plain, plain_wait)
        dist.barrier()
        started = time.perf_counter()
        train_steps(grads, steps, took)
        seconds["agent" if on else "plain"].append(time.perf_counter() - started)
        calls["agent" if on else "plain"].extend(took)
    dist.barrier()
    if dist.get_rank() == 0:
        publisher = agent._state["publisher"]
        seconds["publications"] = publisher.store.changes() if publisher.store is not None else None
        for name, values in calls.items():
            cut = statistics.quantiles(values, n=10)
            seconds[name + "_call_us"] = {"median": statistics.median(values) / 1000, "p10": cut[0] / 1000,
                                          "p90": cut[-1] / 1000}
        with open(out, "w") as handle:
            json.dump(seconds, handle)
    dist.destroy_process_group()


main()
'''

CYCLE = '''
import sys, time
import torch
import torch.distributed as dist


def pipeline_stage_exchange(acts):
    peer = 1 - dist.get_rank()
    dist.send(acts, dst=peer)       # both stages send first: neither reaches its recv
    dist.recv(acts, src=peer)


def main():
    warmup_s = float(sys.argv[1])
    dist.init_process_group("gloo")
    grads = torch.ones(16)
    until = time.time() + warmup_s
    while time.time() < until:
        dist.all_reduce(grads)
        time.sleep(0.01)
    pipeline_stage_exchange(torch.zeros(4 << 20))


main()
'''


# ---------------------------------------------------------------- processes

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for_jobs(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "RANK", "MASTER", "FORENSICS_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH", "")])), **extra)
    return env


class Job:
    """A torchrun job in its own session, ended by pid (workers too: torchrun
    starts each in a session of its own)."""

    def __init__(self, folder, script, args, nproc=2, agent=(), env=None):
        self.port = free_port()
        self.folder = folder
        cmd = [PY, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(self.port),
               *(["-m", "forensics.agent", *agent] if agent != () else []), script, *args]
        self.log = open(os.path.join(folder, f"job-{self.port}.log"), "wb")
        self.proc = subprocess.Popen(cmd, cwd=folder, env=env_for_jobs(**(env or {})), stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def workers(self) -> list[int]:
        from forensics.live.collect import all_procs

        procs = all_procs()
        found, frontier = [], {self.proc.pid}
        while frontier:
            children = [p.pid for p in procs.values() if p.ppid in frontier and p.pid not in found]
            found += children
            frontier = set(children)
        return found

    def end(self):
        from forensics.live.collect import state_of

        workers = self.workers()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(state_of(p) not in (None, "Z") for p in workers):
            time.sleep(0.2)
        for pid in workers:
            if state_of(pid) not in (None, "Z"):
                os.kill(pid, signal.SIGKILL)
        self.log.close()


class Redis:
    """A redis-server on a free port (None without the binary), ended by pid."""

    def __init__(self, folder, start=True):
        self.binary = shutil.which("redis-server")
        self.proc = None
        if self.binary is None or not start:
            return
        self.port = free_port()
        self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", folder],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def url(self, prefix):
        return f"redis://127.0.0.1:{self.port}/{prefix}"

    def end(self):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)


class TCPStoreHost:
    """A TCPStore served by a process of its own, as torchrun's agent serves the job's."""

    def __init__(self):
        self.port = free_port()
        self.proc = subprocess.Popen([PY, "-W", "ignore", "-c", "import time; from torch.distributed import TCPStore; "
                                      f"s = TCPStore('127.0.0.1', {self.port}, is_master=True, "
                                      "wait_for_workers=False); time.sleep(3600)"], stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("the TCPStore host did not start")

    def url(self):
        return f"tcpstore://127.0.0.1:{self.port}"

    def end(self):
        self.proc.kill()
        self.proc.wait()


def start_watcher(url, world, out, *extra):
    return subprocess.Popen([PY, "-W", "ignore", "-m", "forensics", "watch", "--store", url, "--world-size",
                             str(world), "--out", out, "-f", "json", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env_for_jobs(), text=True)


def wait_rusage(proc, timeout):
    """Wait for a child; (its CPU usage, its peak RSS in MB as last seen in
    /proc: wait4's ru_maxrss would count the pages of this process it was
    forked from)."""
    deadline = time.time() + timeout
    peak = 0.0
    while time.time() < deadline:
        peak = max(peak, rss_mb(proc.pid, "VmHWM") or 0.0)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage, peak
        time.sleep(0.02)
    proc.kill()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return None, peak


def cpu_seconds(pid) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def rss_mb(pid, field="VmRSS") -> float | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


# ---------------------------------------------------------------- sections

def hotpath(args) -> dict:
    """ns per call added by the agent's wrappers, in this process."""
    import datetime

    import torch.distributed as dist

    from forensics import agent

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))
    tensor = __import__("torch").ones(16)

    def all_reduce(tensor, op=None, group=None, async_op=False):
        return None

    wrapped = agent._wrap(dist, "all_reduce", all_reduce)
    work_cls = type(dist.all_reduce(tensor, async_op=True))
    plain_wait = work_cls.wait
    wait_wrapper = agent._wrap_wait(plain_wait)
    work = dist.all_reduce(tensor, async_op=True)
    work.wait()
    n = args.hotpath_calls
    chunk = max(1, n // 40)

    def pending_elsewhere():
        agent._pending[1] = None  # an async record of another Work: the wait does the lookup

    variants = {
        "plain": lambda: all_reduce(tensor), "wrapped": lambda: wrapped(tensor),
        "plain_kw": lambda: all_reduce(tensor, group=None), "wrapped_kw": lambda: wrapped(tensor, group=None),
        "wait_plain": lambda: plain_wait(work), "wait_wrapped": lambda: wait_wrapper(work),
    }
    best = dict.fromkeys(variants, float("inf"))
    best["wait_wrapped_pending"] = float("inf")
    # 40 short windows per variant, interleaved; the fastest window of each is the one
    # the shared machine did not interrupt
    for _ in range(40):
        for name, fn in variants.items():
            best[name] = min(best[name], timeit.timeit(fn, number=chunk) / chunk * 1e9)
        pending_elsewhere()
        best["wait_wrapped_pending"] = min(best["wait_wrapped_pending"],
                                           timeit.timeit(variants["wait_wrapped"], number=chunk) / chunk * 1e9)
        agent._pending.clear()
    plain, agented, plain_kw, agented_kw = best["plain"], best["wrapped"], best["plain_kw"], best["wrapped_kw"]
    wait_plain, wait_wrapped, wait_wrapped_pending = best["wait_plain"], best["wait_wrapped"], \
        best["wait_wrapped_pending"]
    reps = max(1, n // 40)
    wrapped_real = agent._wrap(dist, "all_reduce", dist.all_reduce)
    real_plain = best_real = float("inf")
    for _ in range(20):  # the real all_reduce on a 1-rank group, wrapped and not, interleaved
        real_plain = min(real_plain, timeit.timeit(lambda: dist.all_reduce(tensor), number=reps) / reps * 1e9)
        best_real = min(best_real, timeit.timeit(lambda: wrapped_real(tensor), number=reps) / reps * 1e9)
    dist.destroy_process_group()
    return {
        "noop_plain_ns": round(plain), "noop_wrapped_ns": round(agented), "added_ns": round(agented - plain),
        "added_ns_with_keyword": round(agented_kw - plain_kw),
        "work_wait_added_ns": round(wait_wrapped - wait_plain),
        "work_wait_added_ns_async_pending": round(wait_wrapped_pending - wait_plain),
        "gloo_1rank_all_reduce_ns": round(real_plain), "gloo_1rank_all_reduce_wrapped_ns": round(best_real),
        "calls": n,
    }


def overhead(args, folder) -> dict:
    script = os.path.join(folder, "allreduce_loop.py")
    with open(script, "w") as handle:
        handle.write(LOOP)
    variants = {"plain": (), "agent": [], "agent+watch": ["--watch"]}
    if args.no_watch_variant:
        del variants["agent+watch"]
    runs = {name: [] for name in variants}
    for round_no in range(args.rounds):
        order = list(variants) if round_no % 2 == 0 else list(reversed(variants))
        for name in order:
            out = os.path.join(folder, f"loop-{name}-{round_no}.json")
            job = Job(folder, script, [str(args.iters), out], agent=variants[name],
                      env={"FORENSICS_WATCH_OUT": os.path.join(folder, f"watch-{round_no}")})
            try:
                code = job.proc.wait(args.iters * 0.02 + 300)
            finally:
                job.end()
            if code != 0 or not os.path.exists(out):
                with open(job.log.name, errors="replace") as handle:
                    raise SystemExit(f"overhead: the {name} run failed (exit {code}):\n{handle.read()[-3000:]}")
            with open(out) as handle:
                seconds = json.load(handle)["seconds"]
            runs[name].append(seconds)
            print(f"  overhead round {round_no + 1}/{args.rounds} {name:12s} {seconds:8.2f} s "
                  f"({seconds / args.iters * 1e6:.0f} us/call)", flush=True)
    ratios = {name: [b / a for a, b in zip(runs["plain"], runs[name])] for name in variants if name != "plain"}
    return {"iters": args.iters, "rounds": args.rounds, "seconds": runs,
            "median_ratio": {name: round(statistics.median(r), 4) for name, r in ratios.items()},
            "ratios": {name: [round(x, 4) for x in r] for name, r in ratios.items()},
            "us_per_call_plain_median": round(statistics.median(runs["plain"]) / args.iters * 1e6, 1)}


def overhead_ab(args, folder, null: bool = False) -> dict:
    """Both variants in one job, in alternating blocks: the same processes,
    the same minutes of the shared machine. `null`: both halves plain, what
    the harness reads as a difference when there is none."""
    script = os.path.join(folder, "allreduce_ab.py")
    with open(script, "w") as handle:
        handle.write(LOOP_AB)
    blocks = args.ab_blocks
    steps = args.iters // blocks
    out = os.path.join(folder, "ab.json")
    job = Job(folder, script, [str(steps), str(blocks), out, *(["null"] if null else [])])
    try:
        code = job.proc.wait(args.iters * 2 * 0.02 + 600)
    finally:
        job.end()
    if code != 0 or not os.path.exists(out):
        with open(job.log.name, errors="replace") as handle:
            raise SystemExit(f"overhead_ab: the job failed (exit {code}):\n{handle.read()[-3000:]}")
    with open(out) as handle:
        seconds = json.load(handle)
    pairs = [a / p for a, p in zip(seconds["agent"], seconds["plain"])]
    result = {"calls_per_variant": steps * blocks, "blocks_per_variant": blocks, "steps_per_block": steps,
              "plain_s": round(sum(seconds["plain"]), 2), "agent_s": round(sum(seconds["agent"]), 2),
              "ratio_of_totals": round(sum(seconds["agent"]) / sum(seconds["plain"]), 4),
              "median_block_ratio": round(statistics.median(pairs), 4),
              "publications": seconds.get("publications"),
              "call_us": {"plain": seconds["plain_call_us"], "agent": seconds["agent_call_us"]},
              "median_call_ratio": round(seconds["agent_call_us"]["median"] / seconds["plain_call_us"]["median"], 4),
              "block_ratio_quartiles": [round(q, 3) for q in statistics.quantiles(pairs, n=4)]
              if len(pairs) >= 2 else None}
    print(f"  overhead in one job{' (null: plain against plain)' if null else ''} {result}", flush=True)
    return result


def latency(args, folder, redis) -> dict:
    script = os.path.join(folder, "pipeline_cycle.py")
    with open(script, "w") as handle:
        handle.write(CYCLE)
    backends = ["tcpstore"] + (["redis"] if redis.proc is not None else [])
    found = {b: [] for b in backends}
    for run in range(args.latency_runs):
        for backend in backends:
            out = os.path.join(folder, f"lat-{backend}-{run}")
            if backend == "redis":
                url = redis.url(f"lat-{run}")
                job = Job(folder, script, [str(args.warmup)], env={"FORENSICS_STORE": url}, agent=[])
            else:
                job = Job(folder, script, [str(args.warmup)], agent=[])
                url = f"tcpstore://127.0.0.1:{job.port}"
            watcher = start_watcher(url, 2, out, "--timeout", str(args.warmup + 120))
            try:
                _, err = watcher.communicate(timeout=args.warmup + 180)
            finally:
                job.end()
            try:
                with open(os.path.join(out, "hang-1", "verdict.json")) as handle:
                    verdict = json.load(handle)
            except OSError:
                raise SystemExit(f"latency: no verdict through {backend}: {err[-2000:]}")
            if verdict["verdict"] != "deadlock" or verdict["culprit_ranks"] != [0, 1]:
                raise SystemExit(f"latency: wrong verdict {verdict['verdict']} {verdict['culprit_ranks']}")
            found[backend].append(verdict["latency_ms"])
            print(f"  latency run {run + 1}/{args.latency_runs} {backend:8s} {verdict['latency_ms']:.1f} ms",
                  flush=True)
    return {b: {"runs_ms": v, "median_ms": round(statistics.median(v), 1), "max_ms": max(v)} for b, v in found.items()}


def scale(args, folder, redis) -> dict:
    results = {}
    backends = ["tcpstore"] + (["redis"] if redis.proc is not None else [])
    for backend in backends:
        host = TCPStoreHost() if backend == "tcpstore" else None
        url = host.url() if host else redis.url("scale")
        out = os.path.join(folder, f"scale-{backend}")
        world = args.scale_ranks
        cycle = [world // 3 + 7, world - 3]
        try:
            watcher = start_watcher(url, world, out, "--stuck-after", "600", "--timeout", "900")
            plan_file = os.path.join(folder, f"plan-{backend}.json")
            per = world // args.scale_procs
            sims = []
            for i in range(args.scale_procs):
                lo, hi = i * per, world if i == args.scale_procs - 1 else (i + 1) * per
                sims.append(subprocess.Popen([PY, "-W", "ignore", os.path.join(HERE, "sim_ranks.py"), "--store", url,
                                              "--world", str(world), "--ranks", f"{lo}:{hi}", "--plan", plan_file,
                                              "--out", os.path.join(folder, f"sim-{backend}-{i}.json")],
                                             env=env_for_jobs()))
            deadline = time.time() + 300
            while not all(os.path.exists(os.path.join(folder, f"sim-{backend}-{i}.json.ready"))
                          for i in range(args.scale_procs)):
                if time.time() > deadline:
                    raise SystemExit("scale: the simulators did not connect")
                time.sleep(0.1)
            time.sleep(5)  # the watcher has imported and warmed up its engine by now
            t0 = time.time() + 1
            plan = {"hello_at": t0, "churn_until": t0 + args.churn_s, "churn_rate": args.churn_rate,
                    "storm_at": t0 + args.churn_s + 2, "inject_at": t0 + args.churn_s + 2 + args.settle_s,
                    "cycle": cycle, "seq": 100}
            with open(plan_file + ".tmp", "w") as handle:
                json.dump(plan, handle)
            os.replace(plan_file + ".tmp", plan_file)
            marks, peaks = {}, {}
            for name, at in (("hello", plan["hello_at"]), ("churn_end", plan["churn_until"]),
                             ("storm", plan["storm_at"]), ("inject", plan["inject_at"])):
                while time.time() < at:
                    time.sleep(0.05)
                marks[name] = cpu_seconds(watcher.pid)
                peaks[name] = rss_mb(watcher.pid, "VmHWM")
            usage, peak = wait_rusage(watcher, 300)
            err = watcher.stderr.read()
            for sim in sims:
                sim.wait(120)
        finally:
            if host is not None:
                host.end()
        with open(os.path.join(out, "hang-1", "verdict.json")) as handle:
            verdict = json.load(handle)
        injected = max(t for i in range(args.scale_procs)
                       for t in json.load(open(os.path.join(folder, f"sim-{backend}-{i}.json")))["injected"].values())
        sim = [json.load(open(os.path.join(folder, f"sim-{backend}-{i}.json"))) for i in range(args.scale_procs)]
        published = sum(s["published"] for s in sim)
        storm = max(s["storm_s"] for s in sim)
        hello = max(s["hello_s"] for s in sim)
        churned = sum(s["churn_publications"] for s in sim)
        ok = verdict["verdict"] == "deadlock" and verdict["culprit_ranks"] == cycle
        churn_cpu = marks["churn_end"] - marks["hello"] if None not in marks.values() else None
        results[backend] = {
            "verdict_ok": ok, "verdict": verdict["verdict"], "culprits": verdict["culprit_ranks"],
            "inject_to_verdict_s": round(verdict["detected_at"] - injected, 3),
            "ranks_with_state": verdict["ranks_with_state"], "publications": published,
            "storm_publish_s": round(storm, 2), "hello_publish_s": round(hello, 2), "churn_publications": churned,
            "watcher_peak_rss_mb_before_inject": round(peaks["inject"], 1) if peaks.get("inject") else None,
            "watcher_peak_rss_mb": round(peak, 1),
            "watcher_cpu_s_total": round(usage.ru_utime + usage.ru_stime, 2) if usage else None,
            "watcher_cpu_churn_pct": round(100 * churn_cpu / args.churn_s, 1) if churn_cpu is not None else None,
            "watcher_cpu_s_storm_to_inject": round(marks["inject"] - marks["storm"], 2)
            if None not in marks.values() else None,
        }
        print(f"  scale {backend:8s} {json.dumps(results[backend])}", flush=True)
        if not ok:
            print(err[-3000:], file=sys.stderr)
    return results


# ---------------------------------------------------------------- report

def machine() -> dict:
    import torch

    model = ""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    except OSError:
        pass
    redis_version = ""
    if shutil.which("redis-server"):
        redis_version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
    return {"cpus": os.cpu_count(), "cpu": model, "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(), "torch": torch.__version__, "redis_server": redis_version}


def markdown(result: dict) -> str:
    lines = [f"Command: `{result['command']}`", "",
             f"Machine: {result['machine']['cpus']} CPUs ({result['machine']['cpu']}), load average at start "
             f"{result['machine']['load_average_at_start']}; Python {result['machine']['python']}, torch "
             f"{result['machine']['torch']}, redis-server {result['machine']['redis_server'] or 'absent'}; "
             f"started {result['started']}.", ""]
    if "hotpath" in result:
        h = result["hotpath"]
        lines += [f"**Hot path** ({h['calls']:,} calls per variant in 40 interleaved windows, the fastest window): the all_reduce wrapper adds {h['added_ns']} ns "
                  f"per call ({h['added_ns_with_keyword']} ns with `group=` as a keyword) to a no-op of "
                  f"{h['noop_plain_ns']} ns; Work.wait's wrapper adds {h['work_wait_added_ns']} ns "
                  f"({h['work_wait_added_ns_async_pending']} ns while async work is pending). A real all_reduce on "
                  f"a 1-rank Gloo group: {h['gloo_1rank_all_reduce_ns']} ns plain, "
                  f"{h['gloo_1rank_all_reduce_wrapped_ns']} ns wrapped (fastest of 20 interleaved windows).", ""]
    if "overhead" in result:
        o = result["overhead"]
        lines += [f"**Agent overhead** ({o['iters']:,} all_reduces of 16 floats on 2 Gloo ranks, {o['rounds']} "
                  f"rounds, variants interleaved; plain median {o['us_per_call_plain_median']} us per call):", "",
                  "| variant | seconds per round | ratio to plain (median) |", "|---|---|---|",
                  f"| plain | {', '.join(f'{s:.2f}' for s in o['seconds']['plain'])} | 1 |"]
        for name, ratio in o["median_ratio"].items():
            lines.append(f"| {name} | {', '.join(f'{s:.2f}' for s in o['seconds'][name])} | {ratio:.4f} "
                         f"(rounds: {', '.join(f'{r:.3f}' for r in o['ratios'][name])}) |")
        lines.append("")
    if "overhead_ab" in result:
        o = result["overhead_ab"]
        lines += [f"**Agent overhead in one job** ({o['calls_per_variant']:,} all_reduces per variant in "
                  f"{o['blocks_per_variant']} blocks each, alternating plain/agent/agent/plain in the same two "
                  f"ranks; the publisher runs throughout): plain {o['plain_s']} s, agent {o['agent_s']} s, ratio "
                  f"of the totals {o['ratio_of_totals']:.4f}, median of the paired block ratios "
                  f"{o['median_block_ratio']:.4f} (quartiles {o['block_ratio_quartiles']}); the agents published "
                  f"{o['publications']} changed states (calls past 50 ms, and their ends) in the whole job. "
                  f"Per call (each all_reduce timed alone): median {o['call_us']['plain']['median']:.1f} us plain, "
                  f"{o['call_us']['agent']['median']:.1f} us with the agent (ratio {o['median_call_ratio']:.4f}); "
                  f"p10 {o['call_us']['plain']['p10']:.1f} / {o['call_us']['agent']['p10']:.1f} us, p90 "
                  f"{o['call_us']['plain']['p90']:.1f} / {o['call_us']['agent']['p90']:.1f} us.", ""]
    if "overhead_null" in result:
        o = result["overhead_null"]
        lines += [f"**The same harness, plain against plain** (what it reads as a difference when there is none): "
                  f"ratio of the totals {o['ratio_of_totals']:.4f}, median of the paired block ratios "
                  f"{o['median_block_ratio']:.4f} (quartiles {o['block_ratio_quartiles']}), per-call median ratio "
                  f"{o['median_call_ratio']:.4f} ({o['call_us']['plain']['median']:.1f} / "
                  f"{o['call_us']['agent']['median']:.1f} us).", ""]
    if "latency" in result:
        lines += ["**Detection latency** (last rank of a send<->send cycle entered its call → verdict; default "
                  "settings):", "", "| coordinator | runs (ms) | median | max |", "|---|---|---|---|"]
        for backend, v in result["latency"].items():
            lines.append(f"| {backend} | {', '.join(f'{x:.0f}' for x in v['runs_ms'])} | {v['median_ms']:.0f} ms | "
                         f"{v['max_ms']:.0f} ms |")
        lines.append("")
    if "scale" in result:
        lines += [f"**Scale** ({result['args']['scale_ranks']:,} simulated ranks from {result['args']['scale_procs']} "
                  f"processes; churn {result['args']['churn_rate']} publications/s per process for "
                  f"{result['args']['churn_s']} s):", "",
                  "| coordinator | verdict | inject → verdict | publications (churn) | watcher peak RSS before the "
                  "cycle / overall | watcher CPU total | CPU during churn | CPU storm → inject |",
                  "|---|---|---|---|---|---|---|---|"]
        for backend, v in result["scale"].items():
            lines.append(f"| {backend} | {v['verdict']} {v['culprits']} {'ok' if v['verdict_ok'] else 'WRONG'} | "
                         f"{v['inject_to_verdict_s'] * 1000:.0f} ms | {v['publications']:,} "
                         f"({v['churn_publications']:,}) | {v['watcher_peak_rss_mb_before_inject']} MB / "
                         f"{v['watcher_peak_rss_mb']} MB | {v['watcher_cpu_s_total']} s | "
                         f"{v['watcher_cpu_churn_pct']} % | {v['watcher_cpu_s_storm_to_inject']} s |")
        lines.append("")
    return "\n".join(lines)


def results_rows(result: dict) -> list[list]:
    """The figures as rows of (measure, figure, goal) for benchmarks/results."""
    rows = []
    if "hotpath" in result:
        h = result["hotpath"]
        rows += [["hot path: added per collective call (a no-op wrapped)", f"{h['added_ns']} ns", ""],
                 ["hot path: added per Work.wait (none pending / async work pending)",
                  f"{h['work_wait_added_ns']} / {h['work_wait_added_ns_async_pending']} ns", ""],
                 ["all_reduce on a 1-rank Gloo group, plain / wrapped",
                  f"{h['gloo_1rank_all_reduce_ns'] / 1000:.1f} / {h['gloo_1rank_all_reduce_wrapped_ns'] / 1000:.1f} us",
                  ""]]
    if "overhead" in result:
        o = result["overhead"]
        for name, ratio in o["median_ratio"].items():
            rows.append([f"{o['iters']:,} all_reduces on 2 Gloo ranks, separate jobs: {name} / plain "
                         f"(median of {o['rounds']} rounds: {', '.join(f'{r:.3f}' for r in o['ratios'][name])})",
                         f"{ratio:.3f}", "<= 1.02"])
    for key, label in (("overhead_ab", "agent / plain"), ("overhead_null", "plain / plain (null)")):
        if key in result:
            o = result[key]
            rows.append([f"{o['calls_per_variant']:,} all_reduces per variant in one job, alternating blocks: "
                         f"{label}, totals / median block / median call",
                         f"{o['ratio_of_totals']:.3f} / {o['median_block_ratio']:.3f} / {o['median_call_ratio']:.3f}",
                         "<= 1.02" if key == "overhead_ab" else "1"])
    for backend, v in result.get("latency", {}).items():
        rows.append([f"detection latency, {backend}, {len(v['runs_ms'])} runs: median / max",
                     f"{v['median_ms']:.0f} / {v['max_ms']:.0f} ms", "<= 100 ms"])
    for backend, v in result.get("scale", {}).items():
        rows.append([f"{result['args']['scale_ranks']:,} simulated ranks, {backend}: injected cycle → verdict "
                     f"({'right culprits' if v['verdict_ok'] else 'WRONG verdict'})",
                     f"{v['inject_to_verdict_s'] * 1000:.0f} ms", "<= 1 s"])
        rows.append([f"{result['args']['scale_ranks']:,} simulated ranks, {backend}: watcher peak RSS, CPU in all",
                     f"{v['watcher_peak_rss_mb']} MB, {v['watcher_cpu_s_total']} s", ""])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="hotpath,overhead,overhead_ab,overhead_null,latency,scale")
    parser.add_argument("--ab-blocks", type=int, default=100, help="overhead_ab: blocks per variant")
    parser.add_argument("--iters", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-watch-variant", action="store_true", help="overhead: leave out agent+watch")
    parser.add_argument("--hotpath-calls", type=int, default=200_000)
    parser.add_argument("--latency-runs", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=6.0, help="latency: seconds of all_reduces before the cycle")
    parser.add_argument("--scale-ranks", type=int, default=10_000)
    parser.add_argument("--scale-procs", type=int, default=4)
    parser.add_argument("--churn-rate", type=int, default=100, help="publications/s per simulating process")
    parser.add_argument("--churn-s", type=float, default=10.0)
    parser.add_argument("--settle-s", type=float, default=10.0, help="seconds between the storm and the cycle")
    parser.add_argument("--report", metavar="FILE", help="also write the markdown report here")
    parser.add_argument("--json", metavar="FILE", help="and the raw figures here")
    args = parser.parse_args()
    sections = args.sections.split(",")
    shown = " ".join(a if " " not in a else repr(a) for a in sys.argv[1:])
    result = {"command": f"python benchmarks/bench_watch.py {shown}".strip(), "machine": machine(),
              "started": time.strftime("%Y-%m-%d %H:%M"), "args": vars(args)}
    folder = tempfile.mkdtemp(prefix="bench-watch-")
    redis = Redis(folder, start=bool({"latency", "scale"} & set(sections)))
    try:
        if "hotpath" in sections:
            result["hotpath"] = hotpath(args)
            print(f"  hotpath {result['hotpath']}", flush=True)
        if "overhead" in sections:
            result["overhead"] = overhead(args, folder)
        if "overhead_ab" in sections:
            result["overhead_ab"] = overhead_ab(args, folder)
        if "overhead_null" in sections:
            result["overhead_null"] = overhead_ab(args, folder, null=True)
        if "latency" in sections:
            result["latency"] = latency(args, folder, redis)
        if "scale" in sections:
            result["scale"] = scale(args, folder, redis)
    finally:
        redis.end()
        shutil.rmtree(folder, ignore_errors=True)
    text = markdown(result)
    print(text)
    if args.report:
        with open(args.report, "w") as handle:
            handle.write(text + "\n")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)
    try:  # benchmarks/results.py, where a checkout keeps every benchmark's figures for the docs
        import results
    except ImportError:
        results = None
    if results is not None and hasattr(results, "record"):
        results.record("bench_watch", ["measure", "figure", "goal"], results_rows(result),
                       notes=[f"load average at start {result['machine']['load_average_at_start']}"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
