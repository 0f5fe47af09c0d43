#!/usr/bin/env python3
"""Write the Slurm output of this incident (synthetic: no GPU cluster here).

`sbatch -J llama-pretrain -o %x-%j.out` job 812345 on node02 and node03:
`srun --label --kill-on-bad-exit=1 --ntasks=8 --ntasks-per-node=4
--gpus-per-task=1 python -u train.py`, one task per GPU, no torchrun (the
script reads RANK from SLURM_PROCID). srun --label puts the task id before
every line a task writes (`%0*d: `, src/common/write_labelled_message.c; one
digit for 8 tasks); the batch script's own lines and srun's and slurmstepd's
messages carry none. Task id = SLURM_PROCID = global rank.

PyTorch 2.1.2, NCCL 2.18.6, NCCL_ASYNC_ERROR_HANDLING=1 (tear down): c10 lines
without time or global rank, WorkNCCL's `[Rank N] ` prefix, then the
watchdog's exception: `[E ProcessGroupNCCL.cpp:916] [Rank N] NCCL watchdog
thread terminated with exception: ...`, `terminate called after throwing an
instance of 'std::runtime_error'` and its `  what():  ` line (formats.md §2a, §2b).

What happened (the construction): 8 ranks, pure data parallel. At step
1207 rank 6 (node03) blocks in its data loader and never calls the gradient
all-reduce SeqNum 3622 of the default group. After 1800 s the seven other
ranks report the watchdog timeout and abort (SIGABRT); srun then kills the
step, ending rank 6 with SIGTERM. Their lines interleave line by line in the
file. Rank 6 is the rank everyone waited for.

    python3 make.py    # rewrites llama-pretrain-812345.out next to this file
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = 8
STALLED = 6
SEQ, NUMEL = 3622, 52428800
RAN = {0: 1800311, 1: 1800305, 2: 1800322, 3: 1800317, 4: 1800419, 5: 1800402, 7: 1800426}


def host(rank):
    return f"node0{2 + rank // 4}"


def rank_lines(rank):
    work = f"WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn={NUMEL}, NumelOut={NUMEL}, Timeout(ms)=1800000)"
    caught = f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {RAN[rank]} milliseconds before timing out."
    terminated = f"[Rank {rank}] NCCL watchdog thread terminated with exception: {caught}"
    return [f"[E ProcessGroupNCCL.cpp:475] {caught}",
            "[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous "
            "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            "[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.",
            f"[E ProcessGroupNCCL.cpp:916] {terminated}",
            "terminate called after throwing an instance of 'std::runtime_error'",
            f"  what():  {terminated}"]


def main():
    out = ["Running llama-pretrain (job 812345) on node[02-03], 8 tasks, 1 GPU each",
           "MASTER_ADDR=node02 MASTER_PORT=29511"]
    out += [f"{r}: rank {r} of 8 on {host(r)} cuda:{r % 4}, dataset shard {r}" for r in range(RANKS)]
    out += [f"0: step {s} | loss {2.31 - s / 5000:.4f} | tokens/s 412334" for s in (1180, 1190, 1200)]
    # The seven watchdogs fire within a second: their lines interleave, one line at a time.
    blocks = {r: rank_lines(r) for r in sorted(RAN)}
    for i in range(max(len(b) for b in blocks.values())):
        out += [f"{r}: {b[i]}" for r, b in blocks.items() if i < len(b)]
    out += ["srun: error: node02: task 0: Aborted (core dumped)",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            "slurmstepd: error: *** STEP 812345.0 ON node02 CANCELLED AT 2024-02-20T11:32:45 ***",
            "srun: error: node03: task 6: Terminated",
            "srun: error: node02: tasks 1-3: Aborted (core dumped)",
            "srun: error: node03: tasks 4-5,7: Aborted (core dumped)"]
    with open(os.path.join(HERE, "llama-pretrain-812345.out"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
