#!/usr/bin/env python3
"""Write the Slurm output of this incident (synthetic: no GPU cluster here).

`sbatch` job 34446 on node01 and node02: the batch script echoes its
environment, then `srun --ntasks-per-node=1 torchrun --nnodes=2
--nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=node01:29500
train.py`. No --tee and no --redirects: the workers inherit torchrun's
stdout/stderr, so every process of both nodes writes into the one file
Slurm names after the job, `slurm-34446.out` (#SBATCH default `slurm-%j.out`).

PyTorch 2.4.0, NCCL 2.20.5, default TORCH_NCCL_ASYNC_ERROR_HANDLING (3).
c10 lines as 2.4 prints them (formats.md §2a: `[rankN]:[E1003 18:37:01.833575187
ProcessGroupNCCL.cpp:607] ` then WorkNCCL's `[Rank N] ` or the PG prefix
`[PG 0 (default_pg) Rank N] `); the C++ exception block after the watchdog
line and `terminate called after throwing an instance of
'c10::DistBackendError'` carry no `[rankN]:` (they are not c10 log lines).
torchrun 2.4 logs in glog style (`W1003 18:37:03.118000 139872
torch/distributed/elastic/multiprocessing/api.py:858] `) and prints its
ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors).

What happened (the construction): 8 ranks, pure data parallel. At step 2871
rank 5 (node02, local rank 1, pid 201877) blocks in its data loader (a read
from a hung NFS mount) and never calls the gradient all-reduce, SeqNum 2871
of the default group; every other rank enters it. After the 600 s NCCL
timeout the seven waiting ranks report the watchdog timeout and abort
(SIGABRT, exit code -6). Each torchrun agent sees its workers fail; node02's
agent sends SIGTERM to rank 5, still alive and blocked in I/O (exit code -15).
Rank 5 is the rank everyone waited for.

    python3 make.py    # rewrites slurm-34446.out next to this file
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
NODES = {0: "node01", 1: "node02"}
AGENT_PIDS = {0: 139872, 1: 201750}
PIDS = {0: 139900, 1: 139901, 2: 139902, 3: 139903, 4: 201876, 5: 201877, 6: 201878, 7: 201879}
STALLED = 5
SEQ, NUMEL, TIMEOUT = 2871, 26214400, 600000
LIB = "/opt/conda/lib/python3.11/site-packages/torch/lib"
RAN = {0: 600081, 1: 600079, 2: 600084, 3: 600080, 4: 600112, 6: 600109, 7: 600115}
NS = {0: "833575187", 1: "833590112", 2: "834001764", 3: "834233101", 4: "871204455", 6: "871409980",
      7: "871622318"}


def work(seq=SEQ):
    return f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={NUMEL}, NumelOut={NUMEL}, Timeout(ms)={TIMEOUT})"


def timeout_block(rank):
    ran = RAN[rank]
    sec = "01" if rank < 4 else "02"
    caught = f"[Rank {rank}] Watchdog caught collective operation timeout: {work()} ran for {ran} milliseconds before timing out."
    stamps = iter(range(int(NS[rank]), int(NS[rank]) + 10 ** 6, 17_331))

    def head():
        return f"[rank{rank}]:[E1003 18:37:{sec}.{next(stamps):09d} ProcessGroupNCCL.cpp:"
    frames = [
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 (most recent call first):",
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3e8bd12f86 in {LIB}/libc10.so)",
        f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x7f3e8d00f8f2 in {LIB}/libtorch_cuda.so)",
        f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f3e8d016333 in {LIB}/libtorch_cuda.so)",
        f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x7f3e8d01871c in {LIB}/libtorch_cuda.so)",
        "frame #4: <unknown function> + 0xdbbf4 (0x7f3ed8f3dbf4 in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        "frame #5: <unknown function> + 0x94ac3 (0x7f3ee0b94ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
        "frame #6: clone + 0x44 (0x7f3ee0c25a04 in /lib/x86_64-linux-gnu/libc.so.6)",
        "",
    ]
    terminated = f"[PG 0 (default_pg) Rank {rank}] Process group watchdog thread terminated with exception: {caught}"
    return [
        f"{head()}607] {caught}",
        f"{head()}1664] [PG 0 (default_pg) Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: {SEQ}, last enqueued NCCL work: {SEQ}, last completed NCCL work: {SEQ - 1}.",
        f"{head()}1709] [PG 0 (default_pg) Rank {rank}] Timeout at NCCL work: {SEQ}, last enqueued NCCL work: {SEQ}, last completed NCCL work: {SEQ - 1}.",
        f"{head()}621] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"{head()}627] [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
        f"{head()}1515] {terminated}",
        *frames,
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {terminated}",
        *frames,
    ]


def agent_warning(node, stamp):
    pid = AGENT_PIDS[node]
    pre = f"W1003 {stamp} {pid} torch/distributed/run.py:779] "
    return [pre, pre + "*****************************************",
            pre + "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
                  "your system being overloaded, please further tune the variable for optimal performance in your "
                  "application as needed. ",
            pre + "*****************************************"]


def summary(node):
    """torchrun's ChildFailedError for one node: the first failure (local
    rank 0) is the root cause, the others are listed as failures."""
    base = node * 4
    root = base
    agent = AGENT_PIDS[node]
    stamp = "18:37:04.120000" if node == 0 else "18:37:05.433000"
    lines = []
    if node == 1:
        lines.append(f"W1003 18:37:05.231000 {agent} torch/distributed/elastic/multiprocessing/api.py:858] "
                     f"Sending process {PIDS[STALLED]} closing signal SIGTERM")
    lines.append(f"E1003 {stamp} {agent} torch/distributed/elastic/multiprocessing/api.py:833] failed "
                 f"(exitcode: -6) local_rank: 0 (pid: {PIDS[root]}) of binary: /opt/conda/bin/python3.11")
    lines += [
        "Traceback (most recent call last):",
        '  File "/opt/conda/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "             ^^^^^^",
        '  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 348, in wrapper',
        "    return f(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^",
        '  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/run.py", line 901, in main',
        "    run(args)",
        '  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/run.py", line 892, in run',
        "    elastic_launch(",
        '  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 133, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 264, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
    ]
    day = "2024-10-03_18:37:04" if node == 0 else "2024-10-03_18:37:05"
    for local in (1, 2, 3):
        rank = base + local
        if rank == STALLED:
            code, tail = "-15", "  (SIGTERM)"
            trace = f"Signal 15 (SIGTERM) received by PID {PIDS[rank]}"
        else:
            code, tail = "-6", "  (SIGABRT)"
            trace = f"Signal 6 (SIGABRT) received by PID {PIDS[rank]}"
        lines += [f"[{local}]:", f"  time      : {day}", f"  host      : {NODES[node]}",
                  f"  rank      : {rank} (local_rank: {local})", f"  exitcode  : {code} (pid: {PIDS[rank]}){tail}",
                  "  error_file: <N/A>", f"  traceback : {trace}"]
    lines += ["------------------------------------------------------------",
              "Root Cause (first observed failure):", "[0]:", f"  time      : {day}", f"  host      : {NODES[node]}",
              f"  rank      : {root} (local_rank: 0)", f"  exitcode  : -6 (pid: {PIDS[root]})  (SIGABRT)",
              "  error_file: <N/A>", f"  traceback : Signal 6 (SIGABRT) received by PID {PIDS[root]}",
              "============================================================"]
    return lines


def main():
    out = [
        "Starting job 34446 on node[01-02] at Thu Oct  3 18:01:12 UTC 2024",
        "MASTER_ADDR=node01 MASTER_PORT=29500 NNODES=2 GPUS_PER_NODE=4 WORLD_SIZE=8",
    ]
    out += agent_warning(0, "18:01:20.412000") + agent_warning(1, "18:01:20.530000")
    out += [f"step {s} | loss {2.2 - s / 10000:.4f} | 1.21 s/it" for s in (2800, 2825, 2850)]
    for rank in sorted(RAN):
        out += timeout_block(rank)
    out += summary(0) + summary(1)
    out += ["srun: error: node01: task 0: Exited with exit code 1",
            "srun: error: node02: task 1: Exited with exit code 1"]
    with open(os.path.join(HERE, "slurm-34446.out"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
