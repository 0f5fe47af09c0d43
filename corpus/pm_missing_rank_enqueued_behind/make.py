#!/usr/bin/env python3
"""Write the artifacts of this incident (synthetic: no GPU cluster was used).

Formats followed: PyTorch 2.9.1 (c10 prefix `[rankN]:[E618 14:43:06.120448791
ProcessGroupNCCL.cpp:683] `, PG prefix `[PG ID 0 PG GUID 0(default_pg) Rank N] `;
line numbers of real 2.9.x logs: 683 timeout, 2241 failure detected, 730 no
Flight Recorder stack, 2573 first PG to signal dumping, 1794 dump signal
observed through the TCPStore, 1858 dump signal received, 1575 preparing to
dump, 744/758 teardown, 2057 watchdog thread exit; the two `Exception raised
from` line numbers below the exit line are estimates), the 2.9 watchdog class
(`ProcessGroupNCCL::Watchdog::runLoop`/`run` frames), torchrun 2.9.1 (api.py:882,
api.py:908, run.py:803; traceback line numbers of the 2.9.1 sources, Python
3.10), py-spy 0.3.14 text dumps (Python 3.10: unqualified function names).

The job: `torchrun --nproc-per-node 4` on gpu-n17 (ranks 0-3, pids 61203-61206),
DDP, NCCL 2.27.5, timeout 600000 ms. Every step first all_reduces the batch's
token count (the divisor of the loss) and reads it back with `.item()`, then
runs forward/backward (12 gradient buckets). At step 1840 rank 2 reaches the
end of shard 00041; the token cache of shard 00042 is missing, so rank 2
re-tokenizes 1,048,576 documents on its main process, which takes about 20
minutes. Ranks 0, 1 and 3 enqueue step 1840's token all_reduce (SeqNum 23923)
and block in `.item()`. An engineer takes py-spy dumps of all four ranks at
14:38. At 14:43:06 the watchdogs of ranks 0, 1, 3 fire (last enqueued 23923,
last completed 23922), each signals a Flight Recorder dump; rank 2 only
observes the signal (last enqueued 23922 = last completed 23922) and keeps
tokenizing. A minute later ranks 0, 1, 3 abort (SIGABRT); torchrun sees rank 3
exit -6 first, SIGTERMs the rest (rank 2 dies mid-tokenization, -15) and names
rank 3 as the root cause.

    python3 make.py    # rewrites every artifact next to this file
"""

import datetime as dt
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
DAY = dt.datetime(2026, 6, 18)
HOST = "gpu-n17"
TORCH = "/opt/venv/lib/python3.10/site-packages/torch"
PIDS = {0: 61203, 1: 61204, 2: 61205, 3: 61206}
AGENT = 61180
T0 = DAY.replace(hour=14, minute=5, second=30)
STEP_S = 0.9
STUCK_STEP = 1840
SEQ = 3 + 13 * STUCK_STEP                      # the token-count all_reduce of step 1840 = 23923
ENQ = {3: 0.071, 0: 0.093, 1: 0.118}          # s after 14:33:06 that ranks enqueued SeqNum 23923
rng = random.Random(23923)


def t(hh, mm, ss, us=0):
    return DAY.replace(hour=hh, minute=mm, second=ss, microsecond=us)


def ms(x):
    return dt.timedelta(milliseconds=x)


def c10(rank, sev, when, line, msg):
    return (f"[rank{rank}]:[{sev}{when.month}{when.day:02d} {when:%H:%M:%S}."
            f"{when.microsecond * 1000 + rng.randrange(1000):09d} ProcessGroupNCCL.cpp:{line}] {msg}")


def app(rank, when, msg, level="INFO"):
    return f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} {level} [rank{rank}] {msg}"


def frames(hi):
    lib = f"{TORCH}/lib"
    return [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
        f"std::allocator<char> >) + 0x80 ({hi | 0x2e0b80:#x} in {lib}/libc10.so)",
        f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        f"std::ratio<1l, 1000l> > >) + 0x2b5 ({hi | 0x91e2c5:#x} in {lib}/libtorch_cuda.so)",
        f"frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0xc2a ({hi | 0x92a9fa:#x} in {lib}/libtorch_cuda.so)",
        f"frame #3: c10d::ProcessGroupNCCL::Watchdog::run() + 0xe0 ({hi | 0x92c1f0:#x} in {lib}/libtorch_cuda.so)",
        f"frame #4: <unknown function> + 0xdc253 ({hi | 0x6dc253:#x} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        f"frame #5: <unknown function> + 0x94ac3 ({hi | 0x494ac3:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #6: <unknown function> + 0x126850 ({hi | 0x526850:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


def run_frames(hi):
    lib = f"{TORCH}/lib"
    return [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
        f"std::allocator<char> >) + 0x80 ({hi | 0x2e0b80:#x} in {lib}/libc10.so)",
        f"frame #1: <unknown function> + 0x12c3c1b ({hi | 0x8c3c1b:#x} in {lib}/libtorch_cuda.so)",
        f"frame #2: <unknown function> + 0xdc253 ({hi | 0x6dc253:#x} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        f"frame #3: <unknown function> + 0x94ac3 ({hi | 0x494ac3:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #4: <unknown function> + 0x126850 ({hi | 0x526850:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


RECEIVED_TAIL = ("This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, "
                 "the order of collectives is not same for all ranks or the scheduled collective, for some reason, "
                 "didn't run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors "
                 "or bugs in the communications library (e.g. NCCL), etc. ")


def head(rank):
    start = t(14, 5, 15, 402000 + 7000 * rank)
    out = [app(rank, start, f"init: host={HOST} pid={PIDS[rank]} local_rank={rank} world_size=4 device=cuda:{rank} "
                            "backend=nccl torch=2.9.1+cu128 nccl=2.27.5"),
           app(rank, start + dt.timedelta(seconds=13.1), "DDP ready: 12 buckets; loss normalised by the global token "
                                                          "count (all_reduce per step)")]
    for s in range(0, STUCK_STEP, 100):
        when = T0 + dt.timedelta(seconds=STEP_S * (s + 1) + 0.003 * rank)
        out.append(app(rank, when, f"step {s} loss {2.4 * 0.9996 ** s + 0.8 + 0.02 * rng.random():.4f} "
                                   f"global_tokens {1048000 + rng.randrange(2000)} shard {41 if s > 1500 else 40:05d}"))
    return out


def waiting_rank_log(rank):
    out = head(rank)
    enq = t(14, 33, 6) + dt.timedelta(seconds=ENQ[rank])
    fire = enq + ms(600000 + 31 + 11 * rank)
    ran = int((fire - enq).total_seconds() * 1000)
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    work = f"WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)"
    timeout = f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
    out += [
        c10(rank, "E", fire, 683, timeout),
        c10(rank, "E", fire + ms(0.2), 2241, f"{pg}  failure detected by watchdog at work sequence id: {SEQ} PG status: "
                                             f"last enqueued work: {SEQ}, last completed work: {SEQ - 1}"),
        c10(rank, "E", fire + ms(0.21), 730, "Stack trace of the failed collective not found, potentially because "
                                             "FlightRecorder is disabled. You can enable it by setting "
                                             "TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value."),
        c10(rank, "E", fire + ms(0.25), 2573, f"{pg} First PG on this rank to signal dumping."),
        c10(rank, "E", fire + ms(412), 1858, f"{pg} Received a dump signal due to a collective timeout from this local "
                                             "rank and we will try our best to dump the debug info. Last enqueued NCCL "
                                             f"work: {SEQ}, last completed NCCL work: {SEQ - 1}." + RECEIVED_TAIL),
        c10(rank, "E", fire + ms(412.3), 1575, f"{pg} ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1"),
    ]
    end = fire + ms(60000 + 9)
    hi = rng.randrange(0x7f10, 0x7ff0) << 32 | rng.randrange(0x100) << 24
    exit_msg = f"{pg} Process group watchdog thread terminated with exception: {timeout}"
    raised = ["Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:686 "
              "(most recent call first):"] + frames(hi) + [""]
    out += [
        c10(rank, "E", end, 744, f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous "
                                 "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data."),
        c10(rank, "E", end + ms(0.05), 758, f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down."),
        c10(rank, "E", end + ms(3.4), 2057, exit_msg),
    ] + raised + ["terminate called after throwing an instance of 'c10::DistBackendError'",
                  f"  what():  {exit_msg}"] + raised + [
        "Exception raised from run at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2063 "
        "(most recent call first):"] + run_frames(hi) + [""]
    return out


def missing_rank_log():
    rank = 2
    out = head(rank)
    began = t(14, 33, 6, 204000)
    out.append(app(rank, began, "shard 00042: token cache /mnt/cache/tok/shard-00042.npy missing, re-tokenizing "
                                "1048576 documents in-process", level="WARNING"))
    done = 0
    when = began
    while True:
        when += dt.timedelta(seconds=70.4 + rng.random())
        done += 65536
        if when > t(14, 43, 6, 600000):
            break
        out.append(app(rank, when, f"re-tokenized {done}/1048576 documents of shard 00042 "
                                   f"(elapsed {(when - began).total_seconds():.1f}s)"))
    pg = "[PG ID 0 PG GUID 0(default_pg) Rank 2]"
    seen = t(14, 43, 6, 667000)
    out += [
        c10(rank, "E", seen, 1794, f"{pg} Observed flight recorder dump signal from another rank via TCPStore."),
        c10(rank, "E", seen + ms(0.2), 1858, f"{pg} Received a dump signal due to a collective timeout from  rank 3 and we "
                                             "will try our best to dump the debug info. Last enqueued NCCL work: "
                                             f"{SEQ - 1}, last completed NCCL work: {SEQ - 1}." + RECEIVED_TAIL),
        c10(rank, "E", seen + ms(0.5), 1575, f"{pg} ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1"),
        app(rank, when, f"re-tokenized {done}/1048576 documents of shard 00042 "
                        f"(elapsed {(when - began).total_seconds():.1f}s)"),
    ]
    return out        # SIGTERM from torchrun at 14:44:06.3


def pyspy(rank):
    cmd = "/opt/venv/bin/python3 -u train.py --config configs/retriever-1b.yaml"
    tid = PIDS[rank]
    out = [f"Process {tid}: {cmd}", "Python v3.10.12 (/usr/bin/python3.10)", ""]
    if rank == 2:
        out += [f"Thread {tid} (active+gil): \"MainThread\"",
                "    _tokenize_doc (data/shards.py:147)",
                "    retokenize_shard (data/shards.py:133)",
                "    load_shard (data/shards.py:88)",
                "    _next_batch (data/loader.py:61)",
                "    train (train.py:283)",
                "    main (train.py:402)",
                "    <module> (train.py:410)"]
    else:
        out += [f"Thread {tid} (active): \"MainThread\"",
                "    train (train.py:291)",
                "    main (train.py:402)",
                "    <module> (train.py:410)"]
    out += [f"Thread {tid + 171} (idle): \"Thread-2\"",
            "    wait (threading.py:324)",
            "    get (queue.py:180)",
            "    do_one_step (torch/utils/data/_utils/pin_memory.py:31)",
            "    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:58)",
            "    run (threading.py:953)",
            "    _bootstrap_inner (threading.py:1016)",
            "    _bootstrap (threading.py:973)",
            f"Thread {tid + 176} (idle): \"Thread-3 (_heartbeat)\"",
            "    _heartbeat (utils/watch.py:40)",
            "    run (threading.py:953)",
            "    _bootstrap_inner (threading.py:1016)",
            "    _bootstrap (threading.py:973)"]
    return out


def glog(sev, when, msg, where):
    return [f"{sev}{when:%m%d %H:%M:%S}.{when.microsecond // 1000:03d}000 {AGENT} {where}] {line}" for line in msg.split("\n")]


def torchrun_log():
    api = "site-packages/torch/distributed/elastic/multiprocessing/api.py"
    out = glog("W", t(14, 5, 12, 88000), "\n*****************************************\nSetting OMP_NUM_THREADS "
               "environment variable for each process to be 1 in default, to avoid your system being overloaded, please "
               "further tune the variable for optimal performance in your application as needed. \n"
               "*****************************************", "site-packages/torch/distributed/run.py:803")
    seen = t(14, 44, 6, 311000)
    for r in (0, 1, 2):
        out += glog("W", seen + ms(2 * r), f"Sending process {PIDS[r]} closing signal SIGTERM", f"{api}:908")
    out += glog("E", t(14, 44, 6, 790000), f"failed (exitcode: -6) local_rank: 3 (pid: {PIDS[3]}) of binary: "
                "/opt/venv/bin/python3", f"{api}:882")
    root = ["[0]:", "  time      : 2026-06-18_14:44:06", f"  host      : {HOST}", "  rank      : 3 (local_rank: 3)",
            f"  exitcode  : -6 (pid: {PIDS[3]})", "  error_file: <N/A>",
            f"  traceback : Signal 6 (SIGABRT) received by PID {PIDS[3]}"]
    width = min(max(len(x) for x in root + ["train.py FAILED"]), 60)
    return out + [
        "Traceback (most recent call last):",
        '  File "/opt/venv/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{TORCH}/distributed/elastic/multiprocessing/errors/__init__.py", line 357, in wrapper',
        "    return f(*args, **kwargs)",
        f'  File "{TORCH}/distributed/run.py", line 936, in main',
        "    run(args)",
        f'  File "{TORCH}/distributed/run.py", line 927, in run',
        "    elastic_launch(",
        f'  File "{TORCH}/distributed/launcher/api.py", line 156, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        f'  File "{TORCH}/distributed/launcher/api.py", line 293, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * width, "train.py FAILED", "-" * width, "Failures:", "  <NO_OTHER_FAILURES>", "-" * width,
        "Root Cause (first observed failure):"] + root + ["=" * width]


def write(rel, lines):
    with open(os.path.join(HERE, rel), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main():
    for rank in (0, 1, 3):
        write(f"rank{rank}.stderr.log", waiting_rank_log(rank))
    write("rank2.stderr.log", missing_rank_log())
    for rank in range(4):
        write(f"rank{rank}.pyspy.txt", pyspy(rank))
    write("torchrun.log", torchrun_log())


if __name__ == "__main__":
    main()
