#!/usr/bin/env python3
"""Write the console log of this incident (synthetic: no GPU cluster here).

One node, `nohup torchrun --nproc-per-node=4 train.py > train.log 2>&1`:
no --tee and no --redirects, so the four workers and the torchrun agent
write into one file and no line says which process wrote it. PyTorch
2.1.2, NCCL 2.18.6, default NCCL_ASYNC_ERROR_HANDLING (1, tear down).

Formats, as PyTorch 2.1 prints them: c10 lines without time and without
the `[rankN]:` prefix (that came in 2.2), `[E ProcessGroupNCCL.cpp:475] `;
only WorkNCCL's `[Rank N] ` says which rank printed a line (group-local:
the global rank here, the job has no group but the default one); the
teardown lines (489, 495) and `terminate called after throwing an instance
of 'std::runtime_error'` name no rank, its `  what():  ` line does.
torchrun's own lines: `[%(asctime)s] %(name)s: [%(levelname)s] ` (WARNING and
above by default), then the ChildFailedError summary.

What happened (the construction): 4 ranks, pure data parallel. Rank 2
(pid 4103) blocks writing its checkpoint shard to a full NFS volume and
never calls all-reduce SeqNum 918 of the default group. Ranks 0, 1 and 3
report the watchdog timeout after 1800 s and abort (SIGABRT); torchrun sees
local rank 0 fail first and sends SIGTERM to rank 2, still blocked in I/O.
Rank 2 is the rank everyone waited for.

    python3 make.py    # rewrites train.log next to this file
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
PIDS = {0: 4101, 1: 4102, 2: 4103, 3: 4104}
AGENT = 4087
STALLED = 2
SEQ, NUMEL = 918, 1
RAN = {0: 1800203, 1: 1800214, 3: 1800198}
WARN = "[2024-02-14 {}] torch.distributed.{}: [{}] "


def caught(rank):
    work = f"WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn={NUMEL}, NumelOut={NUMEL}, Timeout(ms)=1800000)"
    return f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {RAN[rank]} milliseconds before timing out."


def teardown(rank):
    terminated = f"[Rank {rank}] NCCL watchdog thread terminated with exception: {caught(rank)}"
    return ["[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous "
            "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            "[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.",
            f"[E ProcessGroupNCCL.cpp:916] {terminated}",
            "terminate called after throwing an instance of 'std::runtime_error'",
            f"  what():  {terminated}"]


def launcher():
    run = WARN.format("01:17:54,433", "run", "WARNING")
    return [run, run + "*****************************************",
            run + "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
                  "system being overloaded, please further tune the variable for optimal performance in your "
                  "application as needed. ",
            run + "*****************************************"]


def summary():
    api = "elastic.multiprocessing.api"
    out = [WARN.format("01:50:03,118", api, "WARNING") + f"Sending process {PIDS[1]} closing signal SIGTERM",
           WARN.format("01:50:03,118", api, "WARNING") + f"Sending process {PIDS[2]} closing signal SIGTERM",
           WARN.format("01:50:03,119", api, "WARNING") + f"Sending process {PIDS[3]} closing signal SIGTERM",
           WARN.format("01:50:04,201", api, "ERROR") + f"failed (exitcode: -6) local_rank: 0 (pid: {PIDS[0]}) of "
                                                      f"binary: /usr/bin/python3",
           "Traceback (most recent call last):",
           '  File "/usr/local/bin/torchrun", line 8, in <module>',
           "    sys.exit(main())",
           '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper',
           "    return f(*args, **kwargs)",
           '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 806, in main',
           "    run(args)",
           '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 797, in run',
           "    elastic_launch(",
           '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 134, in __call__',
           "    return launch_agent(self._config, self._entrypoint, list(args))",
           '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 264, in launch_agent',
           "    raise ChildFailedError(",
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
           "============================================================",
           "train.py FAILED",
           "------------------------------------------------------------",
           "Failures:"]
    for rank in (1, 2, 3):
        code, name = ("-15", "SIGTERM") if rank == STALLED else ("-6", "SIGABRT")
        number = 15 if rank == STALLED else 6
        out += [f"[{rank}]:", "  time      : 2024-02-14_01:50:03", "  host      : gpu-a100-17",
                f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : {code} (pid: {PIDS[rank]})",
                "  error_file: <N/A>", f"  traceback : Signal {number} ({name}) received by PID {PIDS[rank]}"]
    out += ["------------------------------------------------------------",
            "Root Cause (first observed failure):", "[0]:", "  time      : 2024-02-14_01:50:03",
            "  host      : gpu-a100-17", "  rank      : 0 (local_rank: 0)", f"  exitcode  : -6 (pid: {PIDS[0]})",
            "  error_file: <N/A>", f"  traceback : Signal 6 (SIGABRT) received by PID {PIDS[0]}",
            "============================================================"]
    return out


def main():
    out = launcher()
    out += [f"epoch 3 step {s} loss {0.912 - s / 100000:.4f}" for s in (900, 910)]
    out += ["[E ProcessGroupNCCL.cpp:475] " + caught(rank) for rank in sorted(RAN)]
    for rank in sorted(RAN):
        out += teardown(rank)
    out += summary()
    with open(os.path.join(HERE, "train.log"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
