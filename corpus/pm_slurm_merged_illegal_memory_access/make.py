#!/usr/bin/env python3
"""Write the artifacts of this incident (synthetic: no GPU cluster was used).

Formats followed: PyTorch 2.6.0 (c10 prefix `[rankN]:[E1003 03:24:27.512874411
ProcessGroupNCCL.cpp:629] `, PG prefix `[PG ID 0 PG GUID 0(default_pg) Rank N] `,
line numbers of real 2.6 logs: 629 timeout, 2168 failure detected, 667 no Flight
Recorder stack, 681/695 teardown, 1895 watchdog thread exit, frames from
checkTimeout :632 and ncclCommWatchdog :1901; CUDA errors raised from
c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 with the
2.6 wording), the `[rankN]: ` prefix that init_process_group's excepthook puts
on every line of an uncaught Python traceback (2.4+), srun's task-exit lines,
and an NVIDIA driver Xid 31 (MMU fault) line in `dmesg -T` format.

The job: Slurm job 771203, `srun --nodes 2 --ntasks-per-node 4 python train.py`
(no torchrun; rank = SLURM_PROCID), so all eight ranks write into one file,
slurm-771203.out. gpu-r07 holds ranks 0-3, gpu-r08 ranks 4-7; DDP with 16
buckets plus one loss all_reduce per step; NCCL 2.21.5; timeout 600000 ms. At
03:14:27 a fused rotary-embedding kernel of a custom extension reads out of
bounds on rank 5 (gpu-r08, cuda:1, pid 73151) at the start of step 2213's
backward: the driver logs Xid 31, rank 5's backward raises "CUDA error: an
illegal memory access was encountered", its watchdog thread hits the same
error and the process aborts. srun (no --kill-on-bad-exit) lets the seven
others run on: they enqueued step 2213's buckets (SeqNum 37623..37638) and time
out ten minutes later, at 03:24:27-28, then abort.

    python3 make.py    # rewrites every artifact next to this file
"""

import datetime as dt
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
DAY = dt.datetime(2026, 10, 3)
PKG = "/home/svc/venvs/llm/lib/python3.10/site-packages/torch"
NODE = {r: ("gpu-r07" if r < 4 else "gpu-r08") for r in range(8)}
PIDS = {0: 88412, 1: 88413, 2: 88414, 3: 88415, 4: 73150, 5: 73151, 6: 73152, 7: 73153}
STEP = 2213
SEQ = 1 + 17 * STEP + 1                       # first gradient bucket of step 2213 = 37623
rng = random.Random(771203)


def t(hh, mm, ss, us=0):
    return DAY.replace(hour=hh, minute=mm, second=ss, microsecond=us)


def ms(x):
    return dt.timedelta(milliseconds=x)


def c10(rank, when, line, msg):
    return (f"[rank{rank}]:[E{when.month}{when.day:02d} {when:%H:%M:%S}."
            f"{when.microsecond * 1000 + rng.randrange(1000):09d} ProcessGroupNCCL.cpp:{line}] {msg}")


def hi():
    return rng.randrange(0x7600, 0x7fff) << 32 | rng.randrange(0x100) << 24


def timeout_frames(h):
    lib = f"{PKG}/lib"
    return [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 ({h | 0xa3c1b6:#x} in {lib}/libc10.so)",
        f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        f"std::ratio<1l, 1000l> > >) + 0x2b4 ({h | 0x4ffec74:#x} in {lib}/libtorch_cuda.so)",
        f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x890 ({h | 0x50007d0:#x} in {lib}/libtorch_cuda.so)",
        f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d ({h | 0x50016ed:#x} in {lib}/libtorch_cuda.so)",
        f"frame #4: <unknown function> + 0x145c0 ({h | 0x8b425c0:#x} in {lib}/libtorch.so)",
        f"frame #5: <unknown function> + 0x94ac3 ({h | 0x9694ac3:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #6: <unknown function> + 0x126850 ({h | 0x9726850:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


def cuda_frames(h):
    lib = f"{PKG}/lib"
    return [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 ({h | 0xa3c1b6:#x} in {lib}/libc10.so)",
        f"frame #1: c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::string const&) + 0x64 "
        f"({h | 0xa3ca76:#x} in {lib}/libc10.so)",
        f"frame #2: c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool) + 0x118 "
        f"({h | 0xb32718:#x} in {lib}/libc10_cuda.so)",
        f"frame #3: c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const + 0xa0 "
        f"({h | 0x4ffb960:#x} in {lib}/libtorch_cuda.so)",
        f"frame #4: c10d::ProcessGroupNCCL::WorkNCCL::isCompleted() + 0x50 ({h | 0x4ffd3f0:#x} in {lib}/libtorch_cuda.so)",
        f"frame #5: c10d::ProcessGroupNCCL::watchdogHandler() + 0x1a8 ({h | 0x50000e8:#x} in {lib}/libtorch_cuda.so)",
        f"frame #6: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d ({h | 0x50016ed:#x} in {lib}/libtorch_cuda.so)",
        f"frame #7: <unknown function> + 0x145c0 ({h | 0x8b425c0:#x} in {lib}/libtorch.so)",
        f"frame #8: <unknown function> + 0x94ac3 ({h | 0x9694ac3:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #9: <unknown function> + 0x126850 ({h | 0x9726850:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


def watchdog_frames(h):
    lib = f"{PKG}/lib"
    return [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 ({h | 0xa3c1b6:#x} in {lib}/libc10.so)",
        f"frame #1: <unknown function> + 0xe5c6fc ({h | 0x4c5c6fc:#x} in {lib}/libtorch_cuda.so)",
        f"frame #2: <unknown function> + 0x145c0 ({h | 0x8b425c0:#x} in {lib}/libtorch.so)",
        f"frame #3: <unknown function> + 0x94ac3 ({h | 0x9694ac3:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #4: <unknown function> + 0x126850 ({h | 0x9726850:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


CUDA_ERR = ["CUDA error: an illegal memory access was encountered",
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
            "be incorrect.",
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
            ""]


def crash_of_rank5():
    rank = 5
    tb = ["Traceback (most recent call last):",
          '  File "/home/svc/llm/train.py", line 412, in <module>',
          "    main()",
          '  File "/home/svc/llm/train.py", line 388, in main',
          "    loss = train_step(model, batch, optimizer, scaler)",
          '  File "/home/svc/llm/train.py", line 231, in train_step',
          "    scaler.scale(loss).backward()",
          f'  File "{PKG}/_tensor.py", line 626, in backward',
          "    torch.autograd.backward(",
          f'  File "{PKG}/autograd/__init__.py", line 347, in backward',
          "    _engine_run_backward(",
          f'  File "{PKG}/autograd/graph.py", line 823, in _engine_run_backward',
          "    return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
          f'  File "{PKG}/autograd/function.py", line 307, in apply',
          "    return user_fn(self, *args)",
          '  File "/home/svc/llm/model/rotary.py", line 96, in backward',
          "    fused_rope.backward(grad_q, grad_k, cos, sin, ctx.positions)",
          "RuntimeError: " + CUDA_ERR[0]] + CUDA_ERR[1:]
    out = [f"[rank{rank}]: {x}" if x else "" for x in tb]
    h = hi()
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    what = (f"{pg} Process group watchdog thread terminated with exception: " + "\n".join(CUDA_ERR) +
            "\nException raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 "
            "(most recent call first):\n" + "\n".join(cuda_frames(h)) + "\n")
    out += [c10(rank, t(3, 14, 27, 512000), 1895, what.split("\n")[0])] + what.split("\n")[1:]
    out += ["terminate called after throwing an instance of 'c10::DistBackendError'",
            "  what():  " + what.split("\n")[0]] + what.split("\n")[1:] + [
            "Exception raised from ncclCommWatchdog at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1901 "
            "(most recent call first):"] + watchdog_frames(h) + [""]
    return out


def timeouts():
    """The seven waiting ranks time out within 0.3 s; srun merges their writes in time order
    (each c10 message, and each multi-line exception block, is one write)."""
    fire = {r: t(3, 24, 27, 431000) + ms(37 * i + rng.randrange(20)) for i, r in enumerate((2, 0, 6, 3, 1, 7, 4))}
    events = []
    for rank, when in fire.items():
        ran = 600000 + rng.randrange(20, 90)
        work = (f"WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn=26214400, NumelOut=26214400, "
                "Timeout(ms)=600000)")
        msg = f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
        pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
        h = hi()
        exit_msg = f"{pg} Process group watchdog thread terminated with exception: {msg}"
        raised = ["Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632 "
                  "(most recent call first):"] + timeout_frames(h) + [""]
        events += [
            (when, [c10(rank, when, 629, msg)]),
            (when + ms(1.9), [c10(rank, when + ms(1.9), 2168, f"{pg}  failure detected by watchdog at work sequence id: "
                                                                f"{SEQ} PG status: last enqueued work: {SEQ + 15}, last "
                                                                f"completed work: {SEQ - 1}")]),
            (when + ms(2.0), [c10(rank, when + ms(2.0), 667, "Stack trace of the failed collective not found, potentially "
                                                              "because FlightRecorder is disabled. You can enable it by "
                                                              "setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.")]),
            (when + ms(61.1), [c10(rank, when + ms(61.1), 681, f"[Rank {rank}] Some NCCL operations have failed or timed "
                                                                "out. Due to the asynchronous nature of CUDA kernels, "
                                                                "subsequent GPU operations might run on corrupted/incomplete "
                                                                "data.")]),
            (when + ms(61.2), [c10(rank, when + ms(61.2), 695, f"[Rank {rank}] To avoid data inconsistency, we are taking "
                                                                "the entire process down.")]),
            (when + ms(62.5), [c10(rank, when + ms(62.5), 1895, exit_msg)] + raised),
            (when + ms(62.6), ["terminate called after throwing an instance of 'c10::DistBackendError'",
                               f"  what():  {exit_msg}"] + raised + [
                "Exception raised from ncclCommWatchdog at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1901 "
                "(most recent call first):"] + watchdog_frames(h) + [""]),
        ]
    return [line for _, lines in sorted(events, key=lambda e: e[0]) for line in lines]


def slurm_out():
    out = []
    for rank in (0, 4, 1, 5, 2, 6, 7, 3):
        out.append(f"rank {rank}/8 on {NODE[rank]} (pid {PIDS[rank]}, local rank {rank % 4}, cuda:{rank % 4})")
    out.append("loaded checkpoint step 2000 from /lustre/ckpt/llm-7b/step_2000 (resume)")
    for s in range(2000, STEP, 100):
        out.append(f"step {s} | loss {2.31 - 0.0004 * (s - 2000) + 0.01 * rng.random():.4f} | lr 2.98e-04 | "
                   f"{408 + rng.randrange(9)} ms/step")
    out += crash_of_rank5()
    out.append("srun: error: gpu-r08: task 5: Aborted (core dumped)")
    out += timeouts()
    out += ["srun: error: gpu-r07: tasks 0-3: Aborted (core dumped)",
            "srun: error: gpu-r08: tasks 4,6-7: Aborted (core dumped)"]
    return out


def dmesg():
    """`dmesg -T` of gpu-r08 around the fault (cuda:1 of that node is PCI 0000:2a:00)."""
    return [
        "[Sat Oct  3 01:02:11 2026] nvidia-nvswitch3: open (major=507)",
        "[Sat Oct  3 03:14:27 2026] NVRM: Xid (PCI:0000:2a:00): 31, pid=73151, name=python, Ch 00000018, intr 00000000. "
        "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f3b_9c000000. Fault is of type FAULT_PDE "
        "ACCESS_TYPE_VIRT_READ",
        "[Sat Oct  3 03:14:28 2026] NVRM: Xid (PCI:0000:2a:00): 43, pid=73151, name=python, Ch 00000018",
    ]


def write(rel, lines):
    with open(os.path.join(HERE, rel), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main():
    write("slurm-771203.out", slurm_out())
    write("gpu-r08.dmesg.txt", dmesg())


if __name__ == "__main__":
    main()
