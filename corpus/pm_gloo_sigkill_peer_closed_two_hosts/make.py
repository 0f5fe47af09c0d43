#!/usr/bin/env python3
"""Write the artifacts of this incident (synthetic: no cluster was used).

Formats followed: PyTorch 2.13.0 CPU wheel with the Gloo backend, as captured in
this repository's real incidents (corpus/real_sigkill_one_rank_gloo_fast_failure):
the `[rankN]: ` excepthook prefix on the Python traceback, Gloo's
`[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553]
Connection closed by peer [ip]:port. This is typically caused by a remote worker
crashing. ...` (pair.cc `Address::str()` prints `[ip]:port`), torchrun 2.13.0
with `--log-dir --redirects 3 --tee 3` (`[defaultN]:` console prefixes,
api.py:1002 / api.py:1028 / run.py:874 glog-style lines, the 2.13 summary whose
exitcode line carries the signal name, traceback line numbers of the 2.13.0
sources, Python 3.11 carets), and the collector's pid_map.json layout.

The job: two CPU hosts, `torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend
c10d --rdzv-endpoint 10.0.0.11:29400` on each; cpu-a (10.0.0.11) runs ranks 0
and 1, cpu-b (10.0.0.12) ranks 2 and 3. Every step all_reduces the gradients
(every 4th step broadcasts the weights from rank 0 instead). At 14:22:05.31
rank 3 (pid 31308 on cpu-b) is killed with SIGKILL. Within 0.1 s ranks 0 and 1
fail in their all_reduce with Gloo "Connection closed by peer [10.0.0.12]:41907"
(rank 3's listening address) and exit 1; cpu-b's agent sees rank 3 exit -9 and
SIGTERMs rank 2; cpu-a's agent sees rank 0 exit 1, SIGTERMs rank 1 (already
unwinding) and names rank 0 as its root cause. Nobody hangs.

    python3 make.py    # rewrites every artifact next to this file
"""

import datetime as dt
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
DAY = dt.datetime(2026, 8, 21)
HOSTS = {"cpu-a": "10.0.0.11", "cpu-b": "10.0.0.12"}
RANK_HOST = {0: "cpu-a", 1: "cpu-a", 2: "cpu-b", 3: "cpu-b"}
PIDS = {0: 20410, 1: 20411, 2: 31307, 3: 31308}
AGENT = {"cpu-a": 20377, "cpu-b": 31269}
PORT3 = 41907
VENV = "/home/ml/venv"
TORCH = f"{VENV}/lib/python3.11/site-packages/torch"
KILLED_AT = DAY.replace(hour=14, minute=22, second=5, microsecond=310000)
T0 = DAY.replace(hour=14, minute=20, second=58, microsecond=420000)
STEP_S = 0.33
LAST_STEP = 203                    # step in progress when rank 3 is killed
rng = random.Random(31308)
GLOO = (f"[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        f"[{HOSTS['cpu-b']}]:{PORT3}. This is typically caused by a remote worker crashing. Check the logs of the "
        "remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f")


def t(hh, mm, ss, us=0):
    return DAY.replace(hour=hh, minute=mm, second=ss, microsecond=us)


def stdout(rank):
    """(time, line) pairs of the rank's stdout (print statements of train.py)."""
    host = RANK_HOST[rank]
    out = [(t(14, 20, 54, 101000 + 3000 * rank), f"[rank {rank}] 14:20:54 init done: world_size=4 host={host} "
                                                  f"({HOSTS[host]}) pid={PIDS[rank]} backend=gloo")]
    out.append((t(14, 20, 58, 2000 * rank), f"[rank {rank}] 14:20:58 shard has 100003 batches"))
    last = LAST_STEP if rank != 3 else LAST_STEP - 1
    for s in range(0, last):
        when = T0 + dt.timedelta(seconds=STEP_S * s + 0.004 * rank)
        if s % 4 == 0 and s:
            out.append((when, f"[rank {rank}] {when:%H:%M:%S} step {s}: broadcast_parameters (weight resync from rank 0)"))
        if s % 10 == 0 or s > last - 4:
            out.append((when + dt.timedelta(seconds=0.2), f"[rank {rank}] {when:%H:%M:%S} step {s}: loss "
                                                          f"{1.0 + 0.08 * (rng.random() - 0.5):.4f}"))
    if rank in (0, 1):
        failed = KILLED_AT + dt.timedelta(milliseconds=61 + 17 * rank)
        out.append((failed, f"[rank {rank}] {failed:%H:%M:%S} training failed: RuntimeError('{GLOO}')"))
    return out


def stderr(rank):
    if rank not in (0, 1):
        return []
    tb = ["Traceback (most recent call last):",
          '  File "/home/ml/job/train.py", line 522, in <module>',
          "    sys.exit(main())",
          "             ^^^^^^",
          '  File "/home/ml/job/train.py", line 507, in main',
          "    steps = train(args)",
          "            ^^^^^^^^^^^",
          '  File "/home/ml/job/train.py", line 470, in train',
          "    loss = train_step(step, model, opt, batch, groups, args)",
          "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
          '  File "/home/ml/job/train.py", line 435, in train_step',
          "    sync_gradients(model, step)",
          '  File "/home/ml/job/train.py", line 245, in sync_gradients',
          "    dist.all_reduce(grads, op=dist.ReduceOp.SUM)",
          f'  File "{TORCH}/distributed/c10d_logger.py", line 83, in wrapper',
          "    return func(*args, **kwargs)",
          "           ^^^^^^^^^^^^^^^^^^^^^",
          f'  File "{TORCH}/distributed/distributed_c10d.py", line 3252, in all_reduce',
          "    work.wait()",
          f"RuntimeError: {GLOO}"]
    when = KILLED_AT + dt.timedelta(milliseconds=58 + 17 * rank)
    return [(when, f"[rank{rank}]: {line}") for line in tb]


def glog(sev, when, pid, where, msg):
    return [f"{sev}{when:%m%d %H:%M:%S}.{when.microsecond // 1000:03d}000 {pid} {where}] {line}" for line in msg.split("\n")]


def failure_block(idx, f):
    sig = f" ({f['sig']})" if f.get("sig") else ""
    if f["exitcode"] < 0:
        tb = f"Signal {-f['exitcode']} ({f['sig']}) received by PID {f['pid']}"
    else:
        tb = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    return [f"[{idx}]:", f"  time      : {f['time']}", f"  host      : {f['host']}",
            f"  rank      : {f['rank']} (local_rank: {f['local_rank']})",
            f"  exitcode  : {f['exitcode']} (pid: {f['pid']}) {sig}", "  error_file: <N/A>", f"  traceback : {tb}"]


def torchrun_log(host):
    pid = AGENT[host]
    events = [(t(14, 20, 51, 402000 if host == "cpu-a" else 447000), line)
              for line in glog("W", t(14, 20, 51, 402000 if host == "cpu-a" else 447000), pid,
                               "torch/distributed/run.py:874",
                               "\n*****************************************\nSetting OMP_NUM_THREADS environment "
                               "variable for each process to be 1 in default, to avoid your system being overloaded, "
                               "please further tune the variable for optimal performance in your application as "
                               "needed. \n*****************************************")]
    for rank in (r for r in PIDS if RANK_HOST[r] == host):
        local = rank % 2
        events += [(when, f"[default{local}]:{line}") for when, line in stdout(rank) + stderr(rank)]
    api = "torch/distributed/elastic/multiprocessing/api.py"
    if host == "cpu-a":
        seen = KILLED_AT + dt.timedelta(milliseconds=137)
        events += [(seen, line) for line in glog("W", seen, pid, f"{api}:1028", f"Sending process {PIDS[1]} closing signal SIGTERM")]
        done = seen + dt.timedelta(milliseconds=181)
        events += [(done, line) for line in glog("E", done, pid, f"{api}:1002",
                                                 f"failed (exitcode: 1) local_rank: 0 (pid: {PIDS[0]}) of binary: {VENV}/bin/python3")]
        failures = [dict(time="2026-08-21_14:22:05", host="cpu-a", rank=0, local_rank=0, exitcode=1, pid=PIDS[0]),
                    dict(time="2026-08-21_14:22:05", host="cpu-a", rank=1, local_rank=1, exitcode=-15, pid=PIDS[1], sig="SIGTERM")]
    else:
        seen = KILLED_AT + dt.timedelta(milliseconds=74)
        events += [(seen, line) for line in glog("W", seen, pid, f"{api}:1028", f"Sending process {PIDS[2]} closing signal SIGTERM")]
        done = seen + dt.timedelta(milliseconds=166)
        events += [(done, line) for line in glog("E", done, pid, f"{api}:1002",
                                                 f"failed (exitcode: -9) local_rank: 1 (pid: {PIDS[3]}) of binary: {VENV}/bin/python3")]
        failures = [dict(time="2026-08-21_14:22:05", host="cpu-b", rank=3, local_rank=1, exitcode=-9, pid=PIDS[3], sig="SIGKILL"),
                    dict(time="2026-08-21_14:22:05", host="cpu-b", rank=2, local_rank=0, exitcode=-15, pid=PIDS[2], sig="SIGTERM")]
    out = [line for _, line in sorted(events, key=lambda e: e[0])]
    blocks = [failure_block(i, f) for i, f in enumerate(failures)]
    width = min(max(len(x) for b in blocks for x in b + ["/home/ml/job/train.py FAILED"]), 60)
    return out + [
        "Traceback (most recent call last):",
        f'  File "{VENV}/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "             ^^^^^^",
        f'  File "{TORCH}/distributed/elastic/multiprocessing/errors/__init__.py", line 367, in wrapper',
        "    return f(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^",
        f'  File "{TORCH}/distributed/run.py", line 1028, in main',
        "    run(args)",
        f'  File "{TORCH}/distributed/run.py", line 1019, in run',
        "    elastic_launch(",
        f'  File "{TORCH}/distributed/launcher/api.py", line 194, in __call__',
        "    return launch_agent(",
        "           ^^^^^^^^^^^^^",
        f'  File "{TORCH}/distributed/launcher/api.py", line 383, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * width, "/home/ml/job/train.py FAILED", "-" * width, "Failures:"] + [
        line for b in blocks[1:] for line in b] + ["-" * width, "Root Cause (first observed failure):"] + blocks[0] + [
        "=" * width]


def write(rel, lines, end="\n"):
    path = os.path.join(HERE, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + (end if lines else ""))


def main():
    for rank, host in RANK_HOST.items():
        write(f"{host}/rank{rank}.stdout.log", [line for _, line in stdout(rank)])
        write(f"{host}/rank{rank}.stderr.log", [line for _, line in stderr(rank)])
    for host in HOSTS:
        write(f"{host}/torchrun.log", torchrun_log(host))
    pid_map = {"ranks": {str(r): {"pid": PIDS[r], "host": RANK_HOST[r]} for r in PIDS},
               "launcher_pids": {f"torchrun_agent@{h}": AGENT[h] for h in HOSTS}}
    with open(os.path.join(HERE, "pid_map.json"), "w", encoding="utf-8") as handle:
        json.dump(pid_map, handle, indent=1)


if __name__ == "__main__":
    main()
