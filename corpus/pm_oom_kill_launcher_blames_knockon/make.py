#!/usr/bin/env python3
"""Write the artifacts of this incident (synthetic: no GPU cluster was used).

Formats followed: PyTorch 2.7.1 (c10 log prefix `[rankN]:[E314 10:48:42.930451207
ProcessGroupNCCL.cpp:632] `, PG prefix `[PG ID 0 PG GUID 0(default_pg) Rank N] `,
and the line numbers of a real 2.7.x watchdog log: 632 timeout, 2271 failure,
670 no Flight Recorder stack, 2106 first PG to signal dumping, 1746 dump signal,
1536 preparing to dump, 684/698 teardown, 1899 watchdog thread exit, exception
frames from checkTimeout :635 and ncclCommWatchdog :1905); torchrun 2.7.1
(glog-style lines from `api.py:874` / `api.py:900` / `run.py:766`, the
ChildFailedError summary of torch/distributed/elastic/multiprocessing/errors,
traceback line numbers of the 2.7.1 sources, Python 3.10); Linux 5.15
mm/oom_kill.c and memcontrol.c for the memory-cgroup OOM kill (raw `dmesg`,
seconds since boot).

The job: Slurm job 4417702, `srun torchrun --nnodes 2 --nproc-per-node 4` on
node-a (ranks 0-3) and node-b (ranks 4-7), DDP with 20 gradient buckets and one
loss all_reduce per step, default NCCL timeout (600000 ms). Rank 5's main
process leaks host memory (a growing sample cache); during step 1786's data
fetch the memory cgroup of the job on node-b is exhausted and the kernel
OOM-kills rank 5 (pid 48215) at 10:38:42.5. node-b's torchrun agent sees the
-9 at once and sends SIGTERM to ranks 4, 6, 7. Ranks 0-3 on node-a had already
enqueued step 1786's bucket all_reduces (SeqNum 37509..37529) and wait for the
dead peers until their watchdogs fire at 10:48:42.9-10:48:43.0; they abort
(SIGABRT, exit -6). node-a's agent polls, sees rank 1 exit -6 first and names
it "Root Cause (first observed failure)": a knock-on, ten minutes after the
real first failure.

    python3 make.py    # rewrites every artifact next to this file
"""

import datetime as dt
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
DAY = dt.datetime(2026, 3, 14)
TORCH = "/opt/venv/lib/python3.10/site-packages/torch"
PIDS = {0: 51230, 1: 51231, 2: 51232, 3: 51233, 4: 48214, 5: 48215, 6: 48216, 7: 48217}
AGENT = {"node-a": 51211, "node-b": 48190}
HOST = {r: ("node-a" if r < 4 else "node-b") for r in range(8)}
T0 = DAY.replace(hour=10, minute=2, second=59)        # step 0 starts
STEP_S = 1.2
LAST_DONE = 1785                                      # last step every rank finished
SEQ0 = 2 + 21 * (LAST_DONE + 1) + 1                   # first bucket of step 1786 = 37509
OOM_AT = DAY.replace(hour=10, minute=38, second=42, microsecond=520000)
ENQ = {1: 0.884, 0: 0.902, 3: 0.925, 2: 0.958}        # s after 10:38:42 that bucket 0 was enqueued
rng = random.Random(4417702)


def t(hh, mm, ss, us=0):
    return DAY.replace(hour=hh, minute=mm, second=ss, microsecond=us)


def c10(rank, sev, when, line, msg):
    """c10 logger prefix of PyTorch >= 2.4 (non-glog build)."""
    return (f"[rank{rank}]:[{sev}{when.month}{when.day:02d} {when:%H:%M:%S}."
            f"{when.microsecond * 1000 + rng.randrange(1000):09d} ProcessGroupNCCL.cpp:{line}] {msg}")


def app(rank, when, msg):
    return f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} INFO [rank{rank}] {msg}"


def frames(base):
    lib = f"{TORCH}/lib"
    return [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
        f"std::allocator<char> >) + 0x98 ({base[0]:#x} in {lib}/libc10.so)",
        f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        f"std::ratio<1l, 1000l> > >) + 0x23d ({base[1]:#x} in {lib}/libtorch_cuda.so)",
        f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0xc80 ({base[1] + 0x1d83:#x} in {lib}/libtorch_cuda.so)",
        f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d ({base[1] + 0x3490:#x} in {lib}/libtorch_cuda.so)",
        f"frame #4: <unknown function> + 0xdc253 ({base[2]:#x} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        f"frame #5: <unknown function> + 0x94ac3 ({base[3]:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #6: <unknown function> + 0x126850 ({base[3] + 0x91d8d:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


def watch_frames(base):
    lib = f"{TORCH}/lib"
    return [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
        f"std::allocator<char> >) + 0x98 ({base[0]:#x} in {lib}/libc10.so)",
        f"frame #1: <unknown function> + 0x11b4abe ({base[1] - 0x2df6f:#x} in {lib}/libtorch_cuda.so)",
        f"frame #2: <unknown function> + 0xe07bed ({base[1] - 0x3dae80:#x} in {lib}/libtorch_cuda.so)",
        f"frame #3: <unknown function> + 0xdc253 ({base[2]:#x} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        f"frame #4: <unknown function> + 0x94ac3 ({base[3]:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #5: <unknown function> + 0x126850 ({base[3] + 0x91d8d:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


def bases():
    hi = rng.randrange(0x7f00, 0x7fff)
    return (hi << 32 | rng.randrange(0x100) << 24 | 0x2535e8, hi << 32 | rng.randrange(0x100) << 24 | 0x56ea6d,
            hi << 32 | rng.randrange(0x100) << 24 | 0x6dc253, hi << 32 | rng.randrange(0x100) << 24 | 0x694ac3)


def step_lines(rank, upto, rss0, rss_per_100):
    out = []
    for s in range(0, upto + 1, 50):
        when = T0 + dt.timedelta(seconds=STEP_S * (s + 1) + 0.004 * rank)
        loss = 3.9 * (0.9994 ** s) + 0.03 * rng.random() + 1.6
        rss = rss0 + rss_per_100 * s / 100
        out.append(app(rank, when, f"step {s} loss {loss:.4f} tok/s {50800 + rng.randrange(900)} host_rss_gib {rss:.1f}"))
    return out


def rank_log(rank):
    host = HOST[rank]
    start = t(10, 2, 44, 310000 + 9000 * rank)
    out = [app(rank, start, f"init: host={host} pid={PIDS[rank]} local_rank={rank % 4} world_size=8 "
                            f"device=cuda:{rank % 4} backend=nccl torch=2.7.1+cu126 nccl=2.26.2"),
           app(rank, start + dt.timedelta(seconds=11.8), "DDP ready: 20 buckets, bucket_cap_mb=100"),
           app(rank, start + dt.timedelta(seconds=12.1), "resuming from step 0; dataset=web-mix-v7 shard "
                                                            f"{rank:04d}/0008")]
    if rank == 5:
        out += step_lines(rank, 1750, 22.0, 9.2)
        out.append(app(rank, t(10, 38, 1, 880000), "sample cache: 1.41M entries, evictions=0 (limit disabled)"))
        return out        # OOM-killed at 10:38:42.5: nothing more is written
    out += step_lines(rank, 1750, 21.5 + 0.3 * (rank % 4), 0.02)
    if rank >= 4:
        return out        # SIGTERM from node-b's agent at 10:38:42.6: python dies without a word
    # node-a: the watchdog fires 600 s after bucket 0 of step 1786 was enqueued
    enq = t(10, 38, 42) + dt.timedelta(seconds=ENQ[rank])
    fire = enq + dt.timedelta(milliseconds=600000 + 38 + 8 * rank)
    ran = int((fire - enq).total_seconds() * 1000)
    work = (f"WorkNCCL(SeqNum={SEQ0}, OpType=ALLREDUCE, NumelIn=26214400, NumelOut=26214400, "
            f"Timeout(ms)=600000)")
    timeout_msg = f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    ms = dt.timedelta(milliseconds=1)
    out += [
        c10(rank, "E", fire, 632, timeout_msg),
        c10(rank, "E", fire + ms * 0.3, 2271, f"{pg}  failure detected by watchdog at work sequence id: {SEQ0} "
                                              f"PG status: last enqueued work: {SEQ0 + 20}, last completed work: {SEQ0 - 1}"),
        c10(rank, "E", fire + ms * 0.33, 670, "Stack trace of the failed collective not found, potentially because "
                                              "FlightRecorder is disabled. You can enable it by setting "
                                              "TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value."),
        c10(rank, "E", fire + ms * 0.4, 2106, f"{pg} First PG on this rank to signal dumping."),
        c10(rank, "E", fire + ms * 318, 1746,
            f"{pg} Received a dump signal due to a collective timeout from this local rank and we will try our best "
            f"to dump the debug info. Last enqueued NCCL work: {SEQ0 + 20}, last completed NCCL work: {SEQ0 - 1}."
            "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, "
            "the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't "
            "run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in "
            "the communications library (e.g. NCCL), etc. "),
        c10(rank, "E", fire + ms * 319, 1536, f"{pg} ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1"),
    ]
    if rank == 2:
        return out        # node-a's agent SIGTERMs rank 2 at 10:48:43.64, before its teardown lines
    end = fire + ms * 601
    b = bases()
    terminated = f"{pg} Process group watchdog thread terminated with exception: {timeout_msg}"
    raised = [f"Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 "
              "(most recent call first):"] + frames(b) + [""]
    out += [
        c10(rank, "E", end, 684, f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous "
                                 "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data."),
        c10(rank, "E", end + ms * 0.03, 698, f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down."),
        c10(rank, "E", end + ms * 1.7, 1899, terminated),
    ] + raised + ["terminate called after throwing an instance of 'c10::DistBackendError'",
                  f"  what():  {terminated}"] + raised + [
        "Exception raised from ncclCommWatchdog at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1905 "
        "(most recent call first):"] + watch_frames(b) + [""]
    return out


def glog(sev, when, pid, where, msg):
    return [f"{sev}{when:%m%d %H:%M:%S}.{when.microsecond // 1000:03d}000 {pid} {where}] {line}" for line in msg.split("\n")]


def summary(title, failures, root):
    """torch.distributed.elastic ChildFailedError.format_msg (2.7.1)."""
    def fmt(idx, f):
        return "\n".join([f"[{idx}]:", f"  time      : {f['time']}", f"  host      : {f['host']}",
                          f"  rank      : {f['rank']} (local_rank: {f['local_rank']})",
                          f"  exitcode  : {f['exitcode']} (pid: {f['pid']})", "  error_file: <N/A>",
                          f"  traceback : Signal {-f['exitcode']} ({f['sig']}) received by PID {f['pid']}"])
    others = [fmt(i, f) for i, f in enumerate(failures) if f is not root]
    width = min(max([len(title)] + [len(x) for f in failures for x in fmt(0, f).split("\n")]), 60)
    return ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * width, title,
            "-" * width, "Failures:"] + ("\n".join(others) or "  <NO_OTHER_FAILURES>").split("\n") + [
            "-" * width, "Root Cause (first observed failure):"] + fmt(failures.index(root), root).split("\n") + ["=" * width]


TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/opt/venv/bin/torchrun", line 8, in <module>',
    "    sys.exit(main())",
    f'  File "{TORCH}/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper',
    "    return f(*args, **kwargs)",
    f'  File "{TORCH}/distributed/run.py", line 892, in main',
    "    run(args)",
    f'  File "{TORCH}/distributed/run.py", line 883, in run',
    "    elastic_launch(",
    f'  File "{TORCH}/distributed/launcher/api.py", line 139, in __call__',
    "    return launch_agent(self._config, self._entrypoint, list(args))",
    f'  File "{TORCH}/distributed/launcher/api.py", line 270, in launch_agent',
    "    raise ChildFailedError(",
]
OMP = ("\n*****************************************\nSetting OMP_NUM_THREADS environment variable for each process "
       "to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal "
       "performance in your application as needed. \n*****************************************")
API = "site-packages/torch/distributed/elastic/multiprocessing/api.py"


def agent_log(host):
    pid = AGENT[host]
    out = glog("W", t(10, 2, 41, 118000 if host == "node-a" else 131000), pid, "site-packages/torch/distributed/run.py:766", OMP)
    if host == "node-b":
        seen = t(10, 38, 42, 611000)
        for r in (4, 6, 7):
            out += glog("W", seen + dt.timedelta(milliseconds=2 * r), pid, f"{API}:900",
                        f"Sending process {PIDS[r]} closing signal SIGTERM")
        out += glog("E", t(10, 38, 43, 187000), pid, f"{API}:874",
                    f"failed (exitcode: -9) local_rank: 1 (pid: {PIDS[5]}) of binary: /opt/venv/bin/python3")
        root = dict(time="2026-03-14_10:38:42", host="node-b", rank=5, local_rank=1, exitcode=-9, pid=PIDS[5], sig="SIGKILL")
    else:
        seen = t(10, 48, 43, 641000)
        for r in (0, 2, 3):
            out += glog("W", seen + dt.timedelta(milliseconds=2 * r), pid, f"{API}:900",
                        f"Sending process {PIDS[r]} closing signal SIGTERM")
        out += glog("E", t(10, 48, 44, 96000), pid, f"{API}:874",
                    f"failed (exitcode: -6) local_rank: 1 (pid: {PIDS[1]}) of binary: /opt/venv/bin/python3")
        root = dict(time="2026-03-14_10:48:43", host="node-a", rank=1, local_rank=1, exitcode=-6, pid=PIDS[1], sig="SIGABRT")
    return out + TRACEBACK + summary("train.py FAILED", [root], root)


def dmesg():
    """Raw `dmesg` of node-b (seconds since boot; boot was ~21 days before)."""
    base = 1834212.118402
    rss = {48190: 41211, 48214: 5652310, 48215: 50334178, 48216: 5701942, 48217: 5633117, 48236: 912311}
    lines = [
        (0.0, "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"),
        (0.000015, "CPU: 37 PID: 48236 Comm: python3 Tainted: P           OE     5.15.0-105-generic #115-Ubuntu"),
        (0.000018, "Hardware name: Supermicro SYS-821GE-TNHR/X13DEG-OAD, BIOS 2.1 11/02/2023"),
        (0.000019, "Call Trace:"),
        (0.000020, " <TASK>"),
        (0.000024, " dump_stack_lvl+0x4a/0x63"),
        (0.000029, " dump_header+0x4a/0x1f4"),
        (0.000033, " oom_kill_process.cold+0xb/0x10"),
        (0.000040, " out_of_memory+0x106/0x2e0"),
        (0.000046, " mem_cgroup_out_of_memory+0x13b/0x160"),
        (0.000051, " try_charge_memcg+0x68a/0x740"),
        (0.000057, " charge_memcg+0x45/0xb0"),
        (0.000061, " __mem_cgroup_charge+0x2d/0x80"),
        (0.000066, " do_anonymous_page+0x110/0x3b0"),
        (0.000070, " __handle_mm_fault+0x8ca/0x900"),
        (0.000074, " handle_mm_fault+0xd8/0x2c0"),
        (0.000079, " do_user_addr_fault+0x1c2/0x660"),
        (0.000083, " exc_page_fault+0x77/0x170"),
        (0.000087, " asm_exc_page_fault+0x27/0x30"),
        (0.000090, " </TASK>"),
        (0.000122, "memory: usage 268435456kB, limit 268435456kB, failcnt 48211"),
        (0.000125, "memory+swap: usage 268435456kB, limit 9007199254740988kB, failcnt 0"),
        (0.000127, "kmem: usage 1187320kB, limit 9007199254740988kB, failcnt 0"),
        (0.000129, "Memory cgroup stats for /slurm/uid_1000/job_4417702:"),
        (0.000301, "Tasks state (memory values in pages):"),
        (0.000302, "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name"),
    ]
    for i, (pid, name) in enumerate([(48190, "torchrun"), (48214, "python3"), (48215, "python3"), (48216, "python3"),
                                     (48217, "python3"), (48236, "python3")]):
        lines.append((0.000305 + i * 0.000003,
                      f"[{pid:7d}] {1000:5d} {pid:5d} {rss[pid] + 3100000:8d} {rss[pid]:8d} {rss[pid] * 8 // 1000 * 1024:8d} "
                      f"{0:8d}         {0:5d} {name}"))
    lines += [
        (0.000388, "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
                   "oom_memcg=/slurm/uid_1000/job_4417702,task_memcg=/slurm/uid_1000/job_4417702/step_0/task_1,"
                   "task=python3,pid=48215,uid=1000"),
        (0.000464, "Memory cgroup out of memory: Killed process 48215 (python3) total-vm:213737112kB, "
                   "anon-rss:199240432kB, file-rss:1054280kB, shmem-rss:2097152kB, UID:1000 pgtables:398712kB "
                   "oom_score_adj:0"),
        (0.284309, "oom_reaper: reaped process 48215 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:2097152kB"),
    ]
    return [f"[{base + d:14.6f}] {text}" for d, text in lines]


def write(rel, lines):
    path = os.path.join(HERE, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main():
    for rank in range(8):
        write(f"{HOST[rank]}/rank{rank}.stderr.log", rank_log(rank))
    for host in AGENT:
        write(f"{host}/torchrun.out", agent_log(host))
    write("node-b/dmesg.txt", dmesg())


if __name__ == "__main__":
    main()
