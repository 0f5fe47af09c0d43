#!/usr/bin/env python3
"""Run a real hung torch.distributed job and capture it like an on-call engineer would.

    python3 capture.py SCENARIO OUTDIR [--venv /opt/trainenv]

SCENARIO is one of the keys of SCENARIOS below (with or without the ``real_`` prefix).
The runner copies train.py (next to this file) to /srv/job/train.py, launches it with
torchrun on 127.0.0.1 from /srv/job, waits until every rank is hung, then captures from
every rank:

    rank<R>.pyspy.txt    py-spy dump --pid P
    rank<R>.pyspy.json   py-spy dump --pid P --json
    rank<R>.native.txt   py-spy dump --pid P --native
    rank<R>.locals.txt   py-spy dump --pid P --locals
    rank<R>.gdb.txt      gdb -p P -batch -ex "set pagination off" -ex "thread apply all bt"
    rank<R>.gdb_pybt.txt the same with CPython's gdb extension: thread apply all py-bt
    <file>.err           the capturing tool's stderr, where not empty

and then ends the processes it started (by pid: SIGTERM, then SIGKILL), and collects
torchrun's console (torchrun.log), the per-rank logs (rank<R>.stdout.log / .stderr.log),
the job's Flight Recorder dumps (fr/, fr_json/, fr_after_error*/), the output of
PyTorch's own Flight Recorder analyzer (fr_analyzer*.txt), pid_map.json and expected.yaml.

Every captured file is raw tool output; files over 200 KB are gzip -9'd (noted in
expected.yaml).  Only the standard library is used here; torch/py-spy come from --venv.
"""

import argparse
import glob
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_DIR = "/srv/job"
JOB_SCRIPT = os.path.join(JOB_DIR, "train.py")
JOB_OUT = os.path.join(JOB_DIR, "out")
JOB_LOGS = os.path.join(JOB_DIR, "logs")
REQ_DIR = "/tmp/fr_job"
DUMP_REQUEST = os.path.join(REQ_DIR, "dump_request")
GZIP_OVER = 200 * 1024

SCENARIOS = {
    "real_p2p_cycle_2": {
        "job_scenario": "p2p_cycle_2",
        "nproc": 2,
        "verdict": "deadlock",
        "culprit_ranks": [0, 1],
        "cycle": [0, 1, 0],
        "expect_main": {0: "send_activations", 1: "send_activations"},
        "how": (
            "2-stage pipeline job (train.py under torchrun, gloo, 2 ranks). After 3 healthy "
            "warm-up steps (load_next_batch -> train_step -> sync_gradients all_reduce), step 3 "
            "calls pipeline_stage_exchange, where both stages call send_activations (blocking "
            "dist.send of a 16 MiB activation tensor) to each other before recv_activations. "
            "Gloo's send of a tensor this large waits until the peer posts the matching recv, "
            "so rank 0 waits for rank 1 and rank 1 waits for rank 0: a circular wait."
        ),
    },
    "real_p2p_ring_4": {
        "job_scenario": "p2p_ring_4",
        "nproc": 4,
        "verdict": "deadlock",
        "culprit_ranks": [0, 1, 2, 3],
        "cycle": [0, 3, 2, 1, 0],
        "expect_main": {r: "recv_activations" for r in range(4)},
        "how": (
            "4-stage pipeline job in a ring (train.py under torchrun, gloo, 4 ranks). After 3 "
            "healthy warm-up steps with gradient all_reduces, step 3 calls "
            "pipeline_stage_exchange, where every stage first calls recv_activations "
            "(blocking dist.recv from stage r-1) and only then would send_activations to "
            "stage r+1. Nobody sends first, so every rank waits in recv for its predecessor: "
            "0 waits for 3, 3 for 2, 2 for 1, 1 for 0."
        ),
    },
    "real_collective_mismatch": {
        "job_scenario": "collective_mismatch",
        "nproc": 4,
        "verdict": "collective_mismatch",
        "culprit_ranks": [0],
        "expect_main": {0: "sync_gradients", 1: "broadcast_parameters",
                        2: "broadcast_parameters", 3: "broadcast_parameters"},
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 4 ranks, no "
            "TORCH_DISTRIBUTED_DEBUG). Weights are re-broadcast from rank 0 every 4 global "
            "steps (should_resync_weights); ranks 1-3 resumed from a checkpoint one step "
            "later than rank 0, so at step 3 they call broadcast_parameters "
            "(dist.broadcast(src=0) of the flat parameter vector) while rank 0 calls "
            "sync_gradients (dist.all_reduce of the flat gradient vector, same size) as "
            "the 4th collective of the default group. Rank 0 is the odd one out."
        ),
    },
    "real_missing_rank_dataloader": {
        "job_scenario": "missing_rank_dataloader",
        "nproc": 4,
        "verdict": "missing_rank",
        "culprit_ranks": [2],
        "expect_main": {0: "sync_gradients", 1: "sync_gradients", 2: "load_next_batch",
                        3: "sync_gradients"},
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 4 ranks). Each rank's "
            "ShardedLoader has a batch_prefetch thread that reads shard records into a "
            "queue. After 3 healthy steps, rank 2's prefetch thread blocks forever in "
            "read_shard_record (an os.read on a storage pipe nobody writes to, standing in "
            "for a stalled storage mount), so rank 2's main thread waits in load_next_batch "
            "(queue.get) and never reaches step 3's gradient all_reduce; ranks 0, 1 and 3 "
            "wait in sync_gradients -> dist.all_reduce for it."
        ),
    },
    "real_missing_rank_early_exit": {
        "job_scenario": "missing_rank_early_exit",
        "nproc": 4,
        "verdict": "missing_rank",
        "culprit_ranks": [3],
        "expect_main": {0: "sync_gradients", 1: "sync_gradients", 2: "sync_gradients",
                        3: "save_checkpoint"},
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 4 ranks) with an uneven "
            "dataset split: rank 3's shard holds 3 batches, the others' 6. After 3 healthy "
            "steps rank 3's load_next_batch returns end-of-shard, it leaves the training "
            "loop and calls finalize_run -> save_checkpoint, which waits in "
            "dist.barrier(group=ckpt) on the separate checkpoint-coordination group, while "
            "ranks 0-2 wait in step 3's sync_gradients -> dist.all_reduce on the default "
            "group. Verdict missing_rank, not collective_mismatch: rank 3 never posts any "
            "4th collective on the default group (its barrier is on a different process "
            "group, which the others never enter), so from the default group's view rank 3 "
            "is simply absent."
        ),
    },
    "real_checkpoint_io_stall": {
        "job_scenario": "checkpoint_io_stall",
        "nproc": 4,
        "verdict": "missing_rank",
        "culprit_ranks": [0],
        "expect_main": {0: "save_periodic_checkpoint", 1: "sync_gradients",
                        2: "sync_gradients", 3: "sync_gradients"},
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 4 ranks). After 3 healthy "
            "steps rank 0 writes a periodic checkpoint (save_periodic_checkpoint -> "
            "torch.save) before step 3's gradient all_reduce; the checkpoint storage stopped "
            "accepting writes (a FIFO nobody reads stands in for a hung mount), so torch.save "
            "never returns, while ranks 1-3 wait in sync_gradients -> dist.all_reduce for it."
        ),
    },
}


# --------------------------------------------------------------------------- helpers

def t_rel(t0):
    return round(time.time() - t0, 1)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def children_of(pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(p))
    return out


def descendants(pid):
    todo, seen = [pid], []
    while todo:
        cur = todo.pop()
        for c in children_of(cur):
            if c not in seen:
                seen.append(c)
                todo.append(c)
    return seen


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def run_tool(cmd, out_path, timeout=120):
    """Run one capture tool; stdout -> out_path, stderr -> out_path.err if not empty."""
    t = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, cwd=JOB_DIR)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or b"", (e.stderr or b"")
    with open(out_path, "wb") as f:
        f.write(out)
    if err:
        with open(out_path + ".err", "wb") as f:
            f.write(err)
    return rc, round(time.time() - t, 1)


def tool_version(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=60).stdout.strip().splitlines()[0]
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"


def q(s):
    """YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    return json.dumps(str(s))


def job_env(venv):
    # Keep paths of the tree holding this script out of the job (and so out of the
    # captured files): drop every variable pointing into its top-level folder.
    top = os.sep + HERE.strip(os.sep).split(os.sep)[0]
    env = {k: v for k, v in os.environ.items()
           if top not in v and not k.startswith("TORCH") and k != "OLDPWD"}
    env.update({
        "PWD": JOB_DIR,
        "TORCH_FR_BUFFER_SIZE": "2000",
        "JOB_OUTDIR": JOB_OUT,
        "FR_DUMP_REQUEST": DUMP_REQUEST,
        "FR_IDLE_DUMP_S": "5",
        "PATH": os.path.join(venv, "bin") + ":" + env.get("PATH", "/usr/bin:/bin"),
        "VIRTUAL_ENV": venv,
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    return env


def rank_log_files(local_rank):
    base = glob.glob(os.path.join(JOB_LOGS, "*", "attempt_*", str(local_rank)))
    if not base:
        return None, None
    base = sorted(base)[-1]
    return os.path.join(base, "stdout.log"), os.path.join(base, "stderr.log")


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except (OSError, TypeError):
        return ""


def main_thread_frames(pyspy_json_path):
    """Python function names of the main thread, innermost first, from py-spy --json."""
    try:
        with open(pyspy_json_path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    for thread in data:
        if thread.get("thread_name") == "MainThread" or thread.get("os_thread_id") == thread.get("pid"):
            return [(fr.get("name"), os.path.basename(fr.get("filename", "")), fr.get("line"))
                    for fr in thread.get("frames", [])]
    return None


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("outdir")
    ap.add_argument("--venv", default="/opt/trainenv")
    ap.add_argument("--ready-timeout", type=float, default=120.0)
    ap.add_argument("--settle", type=float, default=2.0,
                    help="seconds to wait after every rank is hung")
    args = ap.parse_args()

    name = args.scenario if args.scenario.startswith("real_") else "real_" + args.scenario
    if name not in SCENARIOS:
        sys.exit(f"unknown scenario {args.scenario!r}; one of {', '.join(SCENARIOS)}")
    sc = SCENARIOS[name]
    nproc = sc["nproc"]
    venv = os.path.abspath(args.venv)
    outdir = os.path.abspath(args.outdir)
    py = os.path.join(venv, "bin", "python")
    pyspy = os.path.join(venv, "bin", "py-spy")
    torchrun = os.path.join(venv, "bin", "torchrun")

    # ---- prepare a neutral job folder
    os.makedirs(JOB_DIR, exist_ok=True)
    shutil.copyfile(os.path.join(HERE, "train.py"), JOB_SCRIPT)
    for d in (JOB_OUT, JOB_LOGS):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    os.makedirs(REQ_DIR, exist_ok=True)
    if os.path.exists(DUMP_REQUEST):
        os.unlink(DUMP_REQUEST)
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)

    torch_version = tool_version([py, "-c", "import torch; print(torch.__version__)"])
    pyspy_version = tool_version([pyspy, "--version"])
    gdb_version = tool_version(["gdb", "--version"])
    real_python = os.path.realpath(py)

    port = free_port()
    cmd = [torchrun, "--nnodes", "1", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(port),
           "--log-dir", JOB_LOGS, "--redirects", "3",
           JOB_SCRIPT, "--scenario", sc["job_scenario"]]
    console_path = os.path.join(JOB_DIR, "torchrun.console")
    console = open(console_path, "wb")
    t0 = time.time()
    started_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))
    print(f"[capture] launching {name}: {' '.join(cmd)}", flush=True)
    agent = subprocess.Popen(cmd, cwd=JOB_DIR, env=job_env(venv), stdout=console,
                             stderr=subprocess.STDOUT, start_new_session=True)

    # ---- find rank pids (descendants of the torchrun agent with RANK=r in environ)
    ranks = {}
    started_at = {}
    while time.time() - t0 < 60 and len(ranks) < nproc and agent.poll() is None:
        for pid in descendants(agent.pid):
            env = read_environ(pid)
            if env and "RANK" in env and "LOCAL_RANK" in env:
                r = int(env["RANK"])
                if r not in ranks:
                    ranks[r] = pid
                    started_at[r] = t_rel(t0)
        time.sleep(0.1)
    pid_check = ", ".join(f"{r}: RANK={read_environ(p).get('RANK') if read_environ(p) else '?'}"
                          for r, p in sorted(ranks.items()))
    print(f"[capture] rank pids: {ranks} ({pid_check})", flush=True)

    # ---- wait until every rank is hung: it logged past warm-up and its flight recorder
    #      hook wrote the idle dump (no progress for FR_IDLE_DUMP_S seconds)
    ready_at = None
    exited_early = False
    marker_at = {}
    while time.time() - t0 < args.ready_timeout:
        if agent.poll() is not None or any(not alive(p) for p in ranks.values()):
            exited_early = True
            break
        for r in ranks:
            out, _ = rank_log_files(r)
            if r not in marker_at and "warm-up done" in read_text(out):
                marker_at[r] = t_rel(t0)
        idle = [os.path.exists(os.path.join(JOB_OUT, "fr", f"nccl_trace_rank_{r}"))
                for r in ranks]
        if len(ranks) == nproc and len(marker_at) == nproc and all(idle):
            ready_at = t_rel(t0)
            break
        time.sleep(0.25)
    if ready_at is not None:
        print(f"[capture] all ranks hung at +{ready_at}s; settling {args.settle}s", flush=True)
        time.sleep(args.settle)
    else:
        print(f"[capture] job not hung (exited_early={exited_early}) at +{t_rel(t0)}s",
              flush=True)

    # ---- capture every live rank
    alive_at_capture = [r for r, p in sorted(ranks.items()) if alive(p)]
    captures = {}
    cap_start = t_rel(t0)
    for r in alive_at_capture:
        pid = ranks[r]
        base = os.path.join(outdir, f"rank{r}")
        res = []
        for label, tool_cmd, path in [
            ("pyspy", [pyspy, "dump", "--pid", str(pid)], base + ".pyspy.txt"),
            ("pyspy_json", [pyspy, "dump", "--pid", str(pid), "--json"], base + ".pyspy.json"),
            ("native", [pyspy, "dump", "--pid", str(pid), "--native"], base + ".native.txt"),
            ("locals", [pyspy, "dump", "--pid", str(pid), "--locals"], base + ".locals.txt"),
            ("gdb", ["gdb", "-p", str(pid), "-batch", "-ex", "set pagination off",
                     "-ex", "thread apply all bt"], base + ".gdb.txt"),
            ("gdb_pybt", ["gdb", "-p", str(pid), "-batch",
                          "-iex", f"add-auto-load-safe-path {real_python}-gdb.py",
                          "-ex", "set pagination off", "-ex", "thread apply all py-bt"],
             base + ".gdb_pybt.txt"),
        ]:
            rc, dt = run_tool(tool_cmd, path)
            res.append(f"{label} rc={rc} {dt}s")
        captures[r] = ", ".join(res)
        print(f"[capture] rank {r} (pid {pid}): {captures[r]}", flush=True)
    cap_end = t_rel(t0)

    # ---- end every process we started, by pid
    ended = {}
    for r, pid in sorted(ranks.items()):
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
            ended[r] = f"SIGTERM by the collector at +{t_rel(t0)}s"
        else:
            ended[r] = "exited before the collector ended it"
    deadline = time.time() + 15
    while time.time() < deadline and (agent.poll() is None
                                      or any(alive(p) for p in ranks.values())):
        time.sleep(0.2)
    agent_note = "exited by itself after its ranks ended"
    if agent.poll() is None:
        os.kill(agent.pid, signal.SIGTERM)
        agent_note = "SIGTERM by the collector"
        try:
            agent.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(agent.pid, signal.SIGKILL)
            agent_note = "SIGKILL by the collector"
            agent.wait()
    for r, pid in sorted(ranks.items()):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            ended[r] += ", then SIGKILL"
    agent_rc = agent.wait()
    console.close()
    duration = t_rel(t0)

    # ---- collect logs, flight recorder dumps
    shutil.copyfile(console_path, os.path.join(outdir, "torchrun.log"))
    for r in sorted(ranks):
        out, err = rank_log_files(r)
        for src, dst in ((out, f"rank{r}.stdout.log"), (err, f"rank{r}.stderr.log")):
            if src and os.path.exists(src):
                shutil.copyfile(src, os.path.join(outdir, dst))
    fr_dirs = []
    for sub in sorted(os.listdir(JOB_OUT)):
        if sub.startswith("fr"):
            shutil.copytree(os.path.join(JOB_OUT, sub), os.path.join(outdir, sub))
            fr_dirs.append(sub)
    fr_dump_lines = {}
    for r in sorted(ranks):
        out, _ = rank_log_files(r)
        fr_dump_lines[r] = [l.split("] ", 1)[-1] for l in read_text(out).splitlines()
                            if "flight recorder dump" in l]

    # ---- PyTorch's own flight recorder analyzer on the pickled dumps
    for sub in fr_dirs:
        if sub.endswith("_json"):
            continue
        an_cmd = [py, "-m", "torch.distributed.flight_recorder.fr_trace", sub, "-p",
                  "nccl_trace_rank_", "--allow-incomplete-ranks"]
        p = subprocess.run(an_cmd, cwd=outdir, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        suffix = sub[2:]  # "" or "_after_error"
        with open(os.path.join(outdir, f"fr_analyzer{suffix}.txt"), "w") as f:
            f.write("$ python -m torch.distributed.flight_recorder.fr_trace "
                    f"{sub} -p nccl_trace_rank_ --allow-incomplete-ranks\n")
            f.write(f"# exit code {p.returncode}\n")
            f.write(p.stdout)

    # ---- what the main threads were doing (from py-spy --json)
    observed_main = {}
    mismatches = []
    for r in sorted(ranks):
        frames = main_thread_frames(os.path.join(outdir, f"rank{r}.pyspy.json"))
        if frames is None:
            observed_main[r] = None
            continue
        own = [f[0] for f in frames if f[1] == "train.py"]
        observed_main[r] = {"top": f"{frames[0][0]} ({frames[0][1]}:{frames[0][2]})"
                            if frames else "", "train_py": " <- ".join(own)}
        want = sc["expect_main"].get(r)
        if want and want not in own:
            mismatches.append(f"rank {r}: expected {want} on the main thread, got {own}")

    # ---- gzip big files
    gzipped = []
    for dirpath, _, files in os.walk(outdir):
        for fn in files:
            p = os.path.join(dirpath, fn)
            if os.path.getsize(p) > GZIP_OVER and not fn.endswith(".gz"):
                with open(p, "rb") as f_in, gzip.GzipFile(p + ".gz", "wb", compresslevel=9,
                                                          mtime=0) as f_out:
                    shutil.copyfileobj(f_in, f_out)
                os.unlink(p)
                gzipped.append(os.path.relpath(p, outdir))

    # ---- pid_map.json
    host = socket.gethostname()
    with open(os.path.join(outdir, "pid_map.json"), "w") as f:
        json.dump({"ranks": {str(r): {"pid": p, "host": host} for r, p in sorted(ranks.items())},
                   "launcher_pids": {"torchrun_agent": agent.pid}}, f, indent=1)

    # ---- expected.yaml
    hung = ready_at is not None
    checks = ["# Checked by `forensics replay`: verdict, culprit_ranks, cycles, findings, args.",
              "# `capture:` records how the artifacts were made (written by corpus/capture/capture.py).",
              f"description: {q(sc['how'])}",
              f"verdict: {q(sc['verdict'])}",
              f"culprit_ranks: {json.dumps(sc['culprit_ranks'])}"]
    if sc.get("cycle"):
        checks.append(f"cycles: [{json.dumps(sc['cycle'])}]")
    if sc["verdict"] == "missing_rank":
        # Stacks alone show ranks waiting on a rank that still works; the
        # collector knows the job hung, as a user running --hung does.
        checks.append("args: {hung: true}")
        checks.append("decided_by: [cli_hung]")
    y = []
    y.append(f"scenario: {q(name)}")
    y.append(f"job_scenario: {q(sc['job_scenario'])}")
    y.append(f"hang: {'true' if hung else 'false'}")
    y.append(f"world_size: {nproc}")
    y.append(f"backend: {q('gloo (CPU, 127.0.0.1)')}")
    y.append(f"how: {q(sc['how'])}")
    y.append("captured_with:")
    y.append(f"  torch: {q(torch_version)}")
    y.append(f"  py-spy: {q(pyspy_version)}")
    y.append(f"  gdb: {q(gdb_version)}")
    y.append(f"regenerate: {q(f'python3 capture.py {name} ../{name}')}")
    y.append(f"regenerate_from: {q('corpus/capture/ (capture.py + train.py), venv ' + venv)}")
    y.append("observed:")
    y.append("  main_thread:")
    for r in sorted(ranks):
        o = observed_main.get(r)
        if o is None:
            y.append(f"    {r}: null")
        else:
            y.append(f"    {r}:")
            y.append(f"      top: {q(o['top'])}")
            y.append(f"      train_py: {q(o['train_py'])}")
    if mismatches:
        y.append("  unexpected:")
        for m in mismatches:
            y.append(f"    - {q(m)}")
    if not hung:
        y.append(f"  note: {q('the job did not hang: it exited before capture; see torchrun.log and rank*.stderr.log')}")
    y.append("run:")
    y.append(f"  started_utc: {q(started_utc)}")
    y.append(f"  launcher: {q('torchrun')}")
    y.append(f"  launcher_cmd: {q(' '.join(cmd))}")
    y.append("  launcher_pids:")
    y.append(f"    torchrun_agent: {agent.pid}")
    y.append("  pids:")
    for r, p in sorted(ranks.items()):
        y.append(f"    {r}: {p}")
    y.append(f"  pid_check: {q('rank -> pid verified against RANK= in /proc/<pid>/environ: ' + pid_check)}")
    y.append(f"  ready_after_s: {json.dumps(ready_at)}")
    y.append(f"  alive_at_capture: {json.dumps(alive_at_capture)}")
    y.append(f"  capture_window_s: [{cap_start}, {cap_end}]")
    y.append("  captures:")
    for r, c in captures.items():
        y.append(f"    {r}: {q(c)}")
    y.append("  ranks:")
    for r in sorted(ranks):
        y.append(f"    {r}:")
        y.append(f"      started_at_s: {started_at.get(r)}")
        y.append(f"      warmup_done_at_s: {json.dumps(marker_at.get(r))}")
        y.append(f"      fr_dumps: {json.dumps(fr_dump_lines.get(r, []))}")
        y.append(f"      ended: {q(ended.get(r, ''))}")
    y.append(f"  launcher_exit_code: {agent_rc}")
    y.append(f"  launcher_ended: {q(agent_note)}")
    y.append(f"  duration_s: {duration}")
    y.append(f"  times: {q('seconds after the collector launched the job')}")
    y.append(f"gzipped: {json.dumps(gzipped)}")
    with open(os.path.join(outdir, "expected.yaml"), "w") as f:
        f.write("\n".join(checks + ["capture:"] + ["  " + line for line in y]) + "\n")

    # ---- leave nothing running
    left = [p for p in list(ranks.values()) + [agent.pid] if alive(p)]
    print(f"[capture] done in {duration}s -> {outdir}; still alive: {left}; "
          f"unexpected: {mismatches or 'none'}", flush=True)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
