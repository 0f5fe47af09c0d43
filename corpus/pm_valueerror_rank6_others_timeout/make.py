#!/usr/bin/env python3
"""Write the artifacts of this incident (synthetic: no GPU cluster was used).

Formats followed: PyTorch 2.4.1 (c10 prefix `[rankN]:[E909 09:22:42.411270533
ProcessGroupNCCL.cpp:607] `, PG prefix `[PG 0 (default_pg) Rank N] `, line numbers
of a real 2.4.1 log: 607 timeout, 1664 exception detected, 1709 timeout at NCCL
work, 621/627 teardown, 1515 watchdog thread exit, frames from checkTimeout
../torch/csrc/.../ProcessGroupNCCL.cpp:609 and ncclCommWatchdog :1521), the
`[rankN]: ` excepthook prefix of 2.4 on an uncaught Python traceback, the
DataLoader's `Caught ValueError in DataLoader worker process 1.` / `Original
Traceback` re-raise, torchrun 2.4.1 (glog-style lines whose third field is the
Python thread ident, api.py:833 / api.py:858 / run.py:779, monitor interval
0.1 s, summary and traceback line numbers of the 2.4.1 sources, Python 3.10).

The job: `torchrun --nproc-per-node 8 --log-dir /srv/pretrain/logs --redirects 3`
on gpu-h03, ranks 0-7 = pids 7740-7747, DDP (8 buckets + 1 loss all_reduce per
step), NCCL 2.20.5, timeout 600000 ms. At 09:12:41, fetching step 3312's batch,
a DataLoader worker of rank 6 hits a truncated record in shard 0117 and raises
ValueError; the main thread re-raises it and the traceback is printed. Rank 6's
process does not exit: a non-daemon checkpoint-upload thread keeps the
interpreter waiting at shutdown, so torchrun sees nothing. The seven other
ranks had enqueued step 3312's buckets (SeqNum 29810..29818) and time out ten
minutes later, within 20 ms of each other; the agent's first poll after
09:22:42.43 finds ranks 0, 1, 2, 4, 7 exited with -6, names rank 0 root cause
(all in the same second, local rank 0 first) and SIGTERMs ranks 3, 5 and 6.
Rank 6 appears nowhere in the summary.

    python3 make.py    # rewrites every artifact next to this file
"""

import datetime as dt
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
DAY = dt.datetime(2026, 9, 9)
HOST = "gpu-h03"
PIDS = {r: 7740 + r for r in range(8)}
AGENT_THREAD = 140235587118912
PKG = "/usr/local/lib/python3.10/dist-packages/torch"
STEP = 3312
SEQ = 1 + 9 * STEP + 1                     # first gradient bucket of step 3312 = 29810
FIRE = {4: 0.411, 0: 0.414, 2: 0.417, 7: 0.420, 1: 0.424, 3: 0.444, 5: 0.449}   # s after 09:22:42
rng = random.Random(29810)


def t(hh, mm, ss, us=0):
    return DAY.replace(hour=hh, minute=mm, second=ss, microsecond=us)


def ms(x):
    return dt.timedelta(milliseconds=x)


def c10(rank, when, line, msg):
    return (f"[rank{rank}]:[E{when.month}{when.day:02d} {when:%H:%M:%S}."
            f"{when.microsecond * 1000 + rng.randrange(1000):09d} ProcessGroupNCCL.cpp:{line}] {msg}")


def app(rank, when, msg, level="INFO"):
    return f"{when:%Y-%m-%d %H:%M:%S,%f}"[:-3] + f" - {level} - [rank {rank}] {msg}"


def head(rank):
    start = t(8, 31, 12, 220000 + 5000 * rank)
    out = [app(rank, start, f"pid={PIDS[rank]} host={HOST} local_rank={rank} device=cuda:{rank} torch=2.4.1+cu124"),
           app(rank, start + ms(900), "checkpoint uploader thread started (async upload to s3://ckpt-pretrain/run-0907)"),
           app(rank, start + ms(5200), "dataloader: 2 workers, packed shards 0000-0255, micro_bsz=512 seq_len=2048")]
    for s in range(0, STEP, 250):
        when = t(8, 31, 40) + dt.timedelta(seconds=0.742 * s + 0.002 * rank)
        out.append(app(rank, when, f"step {s} loss {2.9 * 0.9997 ** s + 0.9 + 0.02 * rng.random():.4f} "
                                   f"lr {3e-4 * min(1, (s + 1) / 2000):.2e}"))
    return out


def frames(hi, lib):
    return [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 ({hi | 0x89ef86:#x} in {lib}/libc10.so)",
        f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        f"std::ratio<1l, 1000l> > >) + 0x1d2 ({hi | 0x1b8bf22:#x} in {lib}/libtorch_cuda.so)",
        f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 ({hi | 0x1b92963:#x} in {lib}/libtorch_cuda.so)",
        f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c ({hi | 0x1b94d4c:#x} in {lib}/libtorch_cuda.so)",
        f"frame #4: <unknown function> + 0xdc253 ({hi | 0x5adc253:#x} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        f"frame #5: <unknown function> + 0x94ac3 ({hi | 0x6c94ac3:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #6: <unknown function> + 0x126850 ({hi | 0x6d26850:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


def watch_frames(hi, lib):
    return [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 ({hi | 0x89ef86:#x} in {lib}/libc10.so)",
        f"frame #1: <unknown function> + 0xe52446 ({hi | 0x181e446:#x} in {lib}/libtorch_cuda.so)",
        f"frame #2: <unknown function> + 0xdc253 ({hi | 0x5adc253:#x} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        f"frame #3: <unknown function> + 0x94ac3 ({hi | 0x6c94ac3:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #4: <unknown function> + 0x126850 ({hi | 0x6d26850:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


def waiting_rank_log(rank):
    out = head(rank)
    fire = t(9, 22, 42) + dt.timedelta(seconds=FIRE[rank])
    ran = 600000 + rng.randrange(30, 95)
    pg = f"[PG 0 (default_pg) Rank {rank}]"
    work = f"WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn=33554432, NumelOut=33554432, Timeout(ms)=600000)"
    timeout = f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
    out += [c10(rank, fire, 607, timeout),
            c10(rank, fire + ms(1.4), 1664, f"{pg} Exception (either an error or timeout) detected by watchdog at work: "
                                            f"{SEQ}, last enqueued NCCL work: {SEQ + 8}, last completed NCCL work: {SEQ - 1}."),
            c10(rank, fire + ms(1.45), 1709, f"{pg} Timeout at NCCL work: {SEQ}, last enqueued NCCL work: {SEQ + 8}, "
                                             f"last completed NCCL work: {SEQ - 1}.")]
    if rank in (3, 5):
        return out        # SIGTERM from torchrun (09:22:42.44) arrives before their teardown lines
    lib = f"{PKG}/lib"
    hi = rng.randrange(0x7f00, 0x7fff) << 32 | rng.randrange(0x100) << 28
    exit_msg = f"{pg} Process group watchdog thread terminated with exception: {timeout}"
    raised = ["Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 "
              "(most recent call first):"] + frames(hi, lib) + [""]
    return out + [
        c10(rank, fire + ms(1.46), 621, f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the "
                                        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                                        "corrupted/incomplete data."),
        c10(rank, fire + ms(1.47), 627, f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down."),
        c10(rank, fire + ms(5.8), 1515, exit_msg)] + raised + [
        "terminate called after throwing an instance of 'c10::DistBackendError'", f"  what():  {exit_msg}"] + raised + [
        "Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 "
        "(most recent call first):"] + watch_frames(hi, lib) + [""]


def crashed_rank_log():
    rank = 6
    out = head(rank)
    out.append(app(rank, t(9, 12, 40, 905000), "dataloader worker 1: opening shard 0117 (packed-0117.bin, 3.9 GiB)"))
    tb = ["Traceback (most recent call last):",
          '  File "/srv/pretrain/train.py", line 377, in <module>',
          "    main()",
          '  File "/srv/pretrain/train.py", line 341, in main',
          "    batch = next(train_iter)",
          f'  File "{PKG}/utils/data/dataloader.py", line 630, in __next__',
          "    data = self._next_data()",
          f'  File "{PKG}/utils/data/dataloader.py", line 1344, in _next_data',
          "    return self._process_data(data)",
          f'  File "{PKG}/utils/data/dataloader.py", line 1370, in _process_data',
          "    data.reraise()",
          f'  File "{PKG}/_utils.py", line 706, in reraise',
          "    raise exception",
          "ValueError: Caught ValueError in DataLoader worker process 1.",
          "Original Traceback (most recent call last):",
          f'  File "{PKG}/utils/data/_utils/worker.py", line 309, in _worker_loop',
          "    data = fetcher.fetch(index)  # type: ignore[possibly-undefined]",
          f'  File "{PKG}/utils/data/_utils/fetch.py", line 33, in fetch',
          "    data.append(next(self.dataset_iter))",
          '  File "/srv/pretrain/data/packed.py", line 118, in __iter__',
          "    yield self._decode(record)",
          '  File "/srv/pretrain/data/packed.py", line 92, in _decode',
          "    tokens = np.frombuffer(record[\"tokens\"], dtype=np.int32).reshape(self.micro_bsz, self.seq_len)",
          "ValueError: cannot reshape array of size 1047552 into shape (512,2048)",
          ""]
    return out + ["\n".join(f"[rank{rank}]: {s}" if s != "" else "" for s in tb)]


def torchrun_log():
    def glog(sev, when, where, msg):
        return [f"{sev}{when:%m%d %H:%M:%S}.{when.microsecond // 1000:03d}000 {AGENT_THREAD} {where}] {line}"
                for line in msg.split("\n")]

    api = "torch/distributed/elastic/multiprocessing/api.py"
    out = glog("W", t(8, 31, 7, 201000), "torch/distributed/run.py:779",
               "\n*****************************************\nSetting OMP_NUM_THREADS environment variable for each "
               "process to be 1 in default, to avoid your system being overloaded, please further tune the variable "
               "for optimal performance in your application as needed. \n*****************************************")
    seen = t(9, 22, 42, 438000)
    for r in (3, 5, 6):
        out += glog("W", seen + ms(3 * r), f"{api}:858", f"Sending process {PIDS[r]} closing signal SIGTERM")
    out += glog("E", t(9, 22, 43, 92000), f"{api}:833",
                f"failed (exitcode: -6) local_rank: 0 (pid: {PIDS[0]}) of binary: /usr/bin/python")

    def failure(idx, rank):
        return [f"[{idx}]:", "  time      : 2026-09-09_09:22:42", f"  host      : {HOST}",
                f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : -6 (pid: {PIDS[rank]})",
                "  error_file: <N/A>", f"  traceback : Signal 6 (SIGABRT) received by PID {PIDS[rank]}"]

    others = [line for idx, rank in enumerate((1, 2, 4, 7), start=1) for line in failure(idx, rank)]
    width = min(max(len(x) for x in failure(0, 0) + others + ["train.py FAILED"]), 60)
    return out + [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{PKG}/distributed/elastic/multiprocessing/errors/__init__.py", line 348, in wrapper',
        "    return f(*args, **kwargs)",
        f'  File "{PKG}/distributed/run.py", line 901, in main',
        "    run(args)",
        f'  File "{PKG}/distributed/run.py", line 892, in run',
        "    elastic_launch(",
        f'  File "{PKG}/distributed/launcher/api.py", line 133, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        f'  File "{PKG}/distributed/launcher/api.py", line 264, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * width, "train.py FAILED", "-" * width, "Failures:"] + others + [
        "-" * width, "Root Cause (first observed failure):"] + failure(0, 0) + ["=" * width]


def write(rel, lines):
    path = os.path.join(HERE, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n" if lines else "")


def main():
    run_dir = "logs/none_k3x9q2vb/attempt_0"
    for rank in range(8):
        write(f"{run_dir}/{rank}/stderr.log", crashed_rank_log() if rank == 6 else waiting_rank_log(rank))
        write(f"{run_dir}/{rank}/stdout.log", [])
    write("torchrun.log", torchrun_log())


if __name__ == "__main__":
    main()
