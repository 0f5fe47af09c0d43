#!/usr/bin/env python3
"""Write the artifacts of this incident (synthetic: no GPU cluster was used).

Formats followed: PyTorch 2.1.2 ProcessGroupNCCL (c10 prefix without time or
rank, `[E ProcessGroupNCCL.cpp:475] `; 475 checkTimeout, 985 the desync report
logged by workCleanupLoop, 489/495 handleException, 916 ncclCommWatchdog; the
exception is a plain std::runtime_error, so no C++ frames), the desync report
of torch/csrc/distributed/c10d/TraceUtils.h (retrieveDesyncReport,
analyzeLaggingRanks, dumpSnapshot: a multi-line message whose continuation
lines start with a tab), torchrun 2.1.2 (`[2026-02-03 12:50:11,043]
torch.distributed.elastic.multiprocessing.api: [ERROR] ...`, monitor interval
5 s, summary of torch/distributed/elastic/multiprocessing/errors, traceback
line numbers of the 2.1.2 sources, Python 3.10).

The job: `torchrun --nproc-per-node 4 --log-dir logs --redirects 3` on trn-04
(ranks 0-3, pids 90110-90113), NCCL 2.18.1, NCCL_DESYNC_DEBUG=1 (the 2.1 name of
the switch), default timeout 1800000 ms. Gradients are all_reduced as one flat
buffer, then the loss: two ALLREDUCEs per step, so the epoch's last step 304
ends with collective #611. After epoch 0, a bug (`if rank == val_shard_owner:`)
makes only rank 3 run its validation shard (41,234 batches, about an hour)
before training resumes. Ranks 0, 1, 2 start epoch 1 and enqueue the gradient
all_reduce #612 at 12:20:07; 30 minutes later their watchdogs time out, the
desync report says rank 3 finished #611 but never joined #612, and they abort
(SIGABRT). torchrun (polling every 5 s) records the three -6 exits in one
poll, names rank 0 as root cause and SIGTERMs rank 3, still validating.

    python3 make.py    # rewrites every artifact next to this file
"""

import datetime as dt
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
DAY = dt.datetime(2026, 2, 3)
HOST = "trn-04"
PIDS = {0: 90110, 1: 90111, 2: 90112, 3: 90113}
AGENT = 90081
PKG = "/usr/local/lib/python3.10/dist-packages/torch"
LAST_DONE = 611                 # rank 3's last collective (loss all_reduce of step 304)
STUCK = 612                     # gradient all_reduce of epoch 1's first step
rng = random.Random(612)


def t(hh, mm, ss, us=0):
    return DAY.replace(hour=hh, minute=mm, second=ss, microsecond=us)


def app(rank, when, msg):
    return f"{when:%Y-%m-%d %H:%M:%S} | rank {rank} | {msg}"


def head(rank):
    start = t(11, 58, 46, 120000 + 8000 * rank)
    out = [app(rank, start, f"pid {PIDS[rank]} on {HOST}, cuda:{rank}, world 4, torch 2.1.2+cu121, NCCL_DESYNC_DEBUG=1")]
    for s in range(0, 305, 25):
        when = t(11, 59, 2) + dt.timedelta(seconds=4.2 * (s + 1) + 0.01 * rank)
        out.append(app(rank, when, f"epoch 0 step {s}/305 loss {3.1 * 0.997 ** s + 0.4 + 0.01 * rng.random():.4f}"))
    out.append(app(rank, t(12, 20, 3, 910000 + 5000 * rank), "epoch 0 done: 305 steps, 611 collectives"))
    return out


def desync_report(rank):
    return [f"[E ProcessGroupNCCL.cpp:985] ",
            f"\t - [{rank}] Timeout at collective: ALLREDUCE, #{STUCK}",
            "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
            f"\t     [3] finished collective #{LAST_DONE}, but didn't join collective #{STUCK} (count from 1)",
            "\t - Snapshot of ranks' latest states:",
            f"\t   #{LAST_DONE} finished ranks:",
            "\t     [3] finished ALLREDUCE",
            f"\t   #{STUCK} started ranks:",
            "\t     [0, 1, 2] started ALLREDUCE"]


def waiting_rank_log(rank):
    out = head(rank)
    out.append(app(rank, t(12, 20, 4, 2000 + 3000 * rank), "epoch 1 starting (train shard "
                                                         f"{rank:02d}, 305 steps)"))
    fired_ms = 1800000 + 301 + 17 * rank
    work = (f"WorkNCCL(SeqNum={STUCK}, OpType=ALLREDUCE, NumelIn=124634112, NumelOut=124634112, "
            "Timeout(ms)=1800000)")
    timeout = (f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {fired_ms} "
               "milliseconds before timing out.")
    return out + [f"[E ProcessGroupNCCL.cpp:475] {timeout}"] + desync_report(rank) + [
        "[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
        "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        "[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.",
        f"[E ProcessGroupNCCL.cpp:916] [Rank {rank}] NCCL watchdog thread terminated with exception: {timeout}",
        "terminate called after throwing an instance of 'std::runtime_error'",
        f"  what():  [Rank {rank}] NCCL watchdog thread terminated with exception: {timeout}",
    ]


def validating_rank_log():
    rank = 3
    out = head(rank)
    began = t(12, 20, 4, 31000)
    out.append(app(rank, began, "val_shard_owner == 3: running validation on shard val-0003 (41234 batches) "
                                "before epoch 1"))
    done, when = 0, began
    while when < t(12, 50, 8):
        when += dt.timedelta(seconds=275 + 10 * rng.random())
        done += 3072
        if when < t(12, 50, 8):
            out.append(app(rank, when, f"validation {done}/41234 batches, running acc {0.6112 + done * 1e-6:.4f}"))
    return out        # SIGTERM from torchrun at 12:50:11.0


def torchrun_log():
    def line(when, name, level, msg):
        return [f"[{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d}] {name}: [{level}] {x}" for x in msg.split("\n")]

    out = line(t(11, 58, 40, 114000), "torch.distributed.run", "WARNING",
               "\n*****************************************\nSetting OMP_NUM_THREADS environment variable for each "
               "process to be 1 in default, to avoid your system being overloaded, please further tune the variable "
               "for optimal performance in your application as needed. \n*****************************************")
    api = "torch.distributed.elastic.multiprocessing.api"
    out += line(t(12, 50, 10, 652000), api, "WARNING", f"Sending process {PIDS[3]} closing signal SIGTERM")
    out += line(t(12, 50, 11, 43000), api, "ERROR", f"failed (exitcode: -6) local_rank: 0 (pid: {PIDS[0]}) of binary: "
                                                     "/usr/bin/python3")

    def failure(idx, rank):
        return [f"[{idx}]:", "  time      : 2026-02-03_12:50:10", f"  host      : {HOST}",
                f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : -6 (pid: {PIDS[rank]})",
                "  error_file: <N/A>", f"  traceback : Signal 6 (SIGABRT) received by PID {PIDS[rank]}"]

    others = failure(1, 1) + failure(2, 2)
    width = min(max(len(x) for x in others + failure(0, 0) + ["train.py FAILED"]), 60)
    return out + [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{PKG}/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper',
        "    return f(*args, **kwargs)",
        f'  File "{PKG}/distributed/run.py", line 806, in main',
        "    run(args)",
        f'  File "{PKG}/distributed/run.py", line 797, in run',
        "    elastic_launch(",
        f'  File "{PKG}/distributed/launcher/api.py", line 134, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        f'  File "{PKG}/distributed/launcher/api.py", line 264, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * width, "train.py FAILED", "-" * width, "Failures:"] + others + [
        "-" * width, "Root Cause (first observed failure):"] + failure(0, 0) + ["=" * width]


def write(rel, lines):
    with open(os.path.join(HERE, rel), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main():
    for rank in (0, 1, 2):
        write(f"rank{rank}.stderr.log", waiting_rank_log(rank))
    write("rank3.stderr.log", validating_rank_log())
    write("torchrun.log", torchrun_log())


if __name__ == "__main__":
    main()
