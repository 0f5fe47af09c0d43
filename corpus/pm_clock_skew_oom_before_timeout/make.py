#!/usr/bin/env python3
"""Write the artifacts of this incident (synthetic: no GPU cluster was used).

Formats followed: PyTorch 2.6.0 (c10 prefix `[rankN]:[E1112 10:00:05.112403877
ProcessGroupNCCL.cpp:629] `, PG prefix `[PG ID 0 PG GUID 0(default_pg) Rank N] `,
line numbers of real 2.6 logs: 629 timeout, 2168 failure detected, 667 no Flight
Recorder stack, 681/695 teardown, 1895 watchdog thread exit, frames from
checkTimeout :632 and ncclCommWatchdog :1901), torchrun 2.6.0 (api.py:869,
api.py:897, run.py:792, summary and traceback line numbers of the 2.6.0 sources,
Python 3.10), Linux 6.5 global OOM kill (mm/oom_kill.c dump_header /
dump_oom_summary / __oom_kill_process, `,global_oom` from memcontrol.c) as
printed by `dmesg --time-format iso` (`2026-11-12T10:00:07,201534+00:00 `).

The job: Slurm job 559023, one torchrun agent per node; gpu-a07 runs ranks 0-3
(pids 41251-41254), gpu-b12 ranks 4-7 (pids 66119-66122); DDP with 10 buckets
plus one loss all_reduce per step, NCCL 2.21.5, timeout 600000 ms. THE CLOCK OF
gpu-b12 IS 4.000 s AHEAD of gpu-a07's (its chrony lost its sources); every
timestamp written on gpu-b12 (application log, torchrun, kernel log) is
shifted by +4 s. A second clue bounds the skew: every rank logs `init barrier
passed` right after a barrier and `step N done` right after the step's loss
all_reduce returns, i.e. at the same true instant on all ranks (to a few ms);
gpu-b12's copies of those lines are 3.99-4.01 s later than gpu-a07's.

True timeline (gpu-a07's clock): step 1999 ends at 09:50:04.5. Rank 5 (gpu-b12,
pid 66120) then stalls in its data prefetch under host-memory pressure (its log
says so) and never issues step 2000's collectives; the other seven enqueue
bucket 0 (SeqNum 22003) at 09:50:05.05. At 10:00:03.20 the kernel OOM-kills
rank 5 (gpu-b12 writes 10:00:07.20); gpu-b12's agent SIGTERMs ranks 4, 6, 7 at
10:00:03.31 (written 10:00:07.31). Ranks 0-3 time out at 10:00:05.11-.12 and
abort. Read naively, gpu-a07's first timeout (10:00:05.11) precedes the OOM
kill (10:00:07.20); corrected by the skew the kill is 1.9 s earlier, far more
than the +-0.01 s the barrier lines leave uncertain.

    python3 make.py    # rewrites every artifact next to this file
"""

import datetime as dt
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
DAY = dt.datetime(2026, 11, 12)
SKEW = {"gpu-a07": 0.0, "gpu-b12": 4.000}
HOST = {r: ("gpu-a07" if r < 4 else "gpu-b12") for r in range(8)}
PIDS = {0: 41251, 1: 41252, 2: 41253, 3: 41254, 4: 66119, 5: 66120, 6: 66121, 7: 66122}
AGENT = {"gpu-a07": 41230, "gpu-b12": 66097}
TORCH = "/opt/venv/lib/python3.10/site-packages/torch"
T0 = DAY.replace(hour=9, minute=16, second=45, microsecond=500000)   # true end of step 0
STUCK = 2000
SEQ = 2 + 11 * STUCK + 1                   # bucket 0 of step 2000 = 22003
OOM_TRUE = DAY.replace(hour=10, minute=0, second=3, microsecond=201534)
FIRE = {2: 0.112, 0: 0.115, 3: 0.118, 1: 0.121}    # true s after 10:00:05 the node-a watchdogs fire
rng = random.Random(559023)


def true(hh, mm, ss, us=0):
    return DAY.replace(hour=hh, minute=mm, second=ss, microsecond=us)


def local(host, when):
    """The wall clock of `host` at true instant `when`."""
    return when + dt.timedelta(seconds=SKEW[host])


def ms(x):
    return dt.timedelta(milliseconds=x)


def app(rank, when_true, msg, level="INFO"):
    when = local(HOST[rank], when_true)
    return f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} {level} [rank{rank}] {msg}"


def c10(rank, when_true, line, msg):
    when = local(HOST[rank], when_true)
    return (f"[rank{rank}]:[E{when.month}{when.day:02d} {when:%H:%M:%S}."
            f"{when.microsecond * 1000 + rng.randrange(1000):09d} ProcessGroupNCCL.cpp:{line}] {msg}")


def jitter():
    return ms(rng.uniform(-4, 4))


def rank_log(rank):
    host = HOST[rank]
    out = [app(rank, true(9, 16, 21, 640000) + ms(11 * rank), f"init: host={host} pid={PIDS[rank]} local_rank={rank % 4} "
                                                             "world_size=8 torch=2.6.0+cu124 nccl=2.21.5"),
           app(rank, true(9, 16, 33, 918000) + jitter(), "init barrier passed (world_size=8)")]
    last = STUCK - 1
    for s in list(range(0, last, 100)) + list(range(last - 4, last + 1)):
        when = T0 + dt.timedelta(seconds=1.0 * s) + jitter()
        out.append(app(rank, when, f"step {s} done loss={2.7 * 0.9997 ** s + 0.7 + 0.01 * rng.random():.4f} "
                                   f"host_rss_gib={(41.0 + 0.2 * s if rank == 5 else 40.2 + 0.0005 * s):.1f}"))
    if rank == 5:
        began = T0 + dt.timedelta(seconds=1.0 * STUCK)
        for waited, avail in ((60.0, 2.1), (180.1, 0.6), (420.4, 0.2)):
            out.append(app(rank, began + dt.timedelta(seconds=waited), f"step {STUCK}: batch prefetch stalled "
                                                                       f"{waited:.1f}s (MemAvailable {avail} GiB)",
                           level="WARNING"))
        return out                    # OOM-killed at true 10:00:03.20
    if host == "gpu-b12":
        return out                    # SIGTERM from gpu-b12's agent at true 10:00:03.31
    fire = true(10, 0, 5) + dt.timedelta(seconds=FIRE[rank])
    enq = true(9, 50, 5, 50000) + ms(3 * rank)
    ran = int((fire - enq).total_seconds() * 1000)
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    work = f"WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn=25690112, NumelOut=25690112, Timeout(ms)=600000)"
    timeout = f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
    hi = rng.randrange(0x7600, 0x7fff) << 32 | rng.randrange(0x100) << 24
    lib = f"{TORCH}/lib"
    frames = [
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 ({hi | 0xa3c1b6:#x} in {lib}/libc10.so)",
        f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        f"std::ratio<1l, 1000l> > >) + 0x2b4 ({hi | 0x4ffec74:#x} in {lib}/libtorch_cuda.so)",
        f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x890 ({hi | 0x50007d0:#x} in {lib}/libtorch_cuda.so)",
        f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d ({hi | 0x50016ed:#x} in {lib}/libtorch_cuda.so)",
        f"frame #4: <unknown function> + 0x145c0 ({hi | 0x8b425c0:#x} in {lib}/libtorch.so)",
        f"frame #5: <unknown function> + 0x94ac3 ({hi | 0x9694ac3:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #6: <unknown function> + 0x126850 ({hi | 0x9726850:#x} in /lib/x86_64-linux-gnu/libc.so.6)",
    ]
    watch = [
        frames[0],
        f"frame #1: <unknown function> + 0xe5c6fc ({hi | 0x4c5c6fc:#x} in {lib}/libtorch_cuda.so)",
    ] + frames[4:]
    exit_msg = f"{pg} Process group watchdog thread terminated with exception: {timeout}"
    raised = ["Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632 "
              "(most recent call first):"] + frames + [""]
    return out + [
        c10(rank, fire, 629, timeout),
        c10(rank, fire + ms(1.9), 2168, f"{pg}  failure detected by watchdog at work sequence id: {SEQ} PG status: "
                                        f"last enqueued work: {SEQ + 10}, last completed work: {SEQ - 1}"),
        c10(rank, fire + ms(2.0), 667, "Stack trace of the failed collective not found, potentially because "
                                       "FlightRecorder is disabled. You can enable it by setting "
                                       "TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value."),
        c10(rank, fire + ms(2.05), 681, f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the "
                                        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                                        "corrupted/incomplete data."),
        c10(rank, fire + ms(2.1), 695, f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down."),
        c10(rank, fire + ms(3.4), 1895, exit_msg)] + raised + [
        "terminate called after throwing an instance of 'c10::DistBackendError'", f"  what():  {exit_msg}"] + raised + [
        "Exception raised from ncclCommWatchdog at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1901 "
        "(most recent call first):"] + watch + [""]


def agent_log(host):
    pid = AGENT[host]

    def glog(sev, when_true, where, msg):
        when = local(host, when_true)
        return [f"{sev}{when:%m%d %H:%M:%S}.{when.microsecond // 1000:03d}000 {pid} {where}] {line}"
                for line in msg.split("\n")]

    api = "site-packages/torch/distributed/elastic/multiprocessing/api.py"
    out = glog("W", true(9, 16, 17, 301000 if host == "gpu-a07" else 366000), "site-packages/torch/distributed/run.py:792",
               "\n*****************************************\nSetting OMP_NUM_THREADS environment variable for each "
               "process to be 1 in default, to avoid your system being overloaded, please further tune the variable "
               "for optimal performance in your application as needed. \n*****************************************")

    def failure(idx, rank, exitcode, sig, stamp):
        return [f"[{idx}]:", f"  time      : {stamp}", f"  host      : {host}",
                f"  rank      : {rank} (local_rank: {rank % 4})", f"  exitcode  : {exitcode} (pid: {PIDS[rank]})",
                "  error_file: <N/A>", f"  traceback : Signal {-exitcode} ({sig}) received by PID {PIDS[rank]}"]

    if host == "gpu-b12":
        seen = OOM_TRUE + ms(109)
        for r in (4, 6, 7):
            out += glog("W", seen + ms(2 * (r - 4)), f"{api}:897", f"Sending process {PIDS[r]} closing signal SIGTERM")
        out += glog("E", seen + ms(463), f"{api}:869", f"failed (exitcode: -9) local_rank: 1 (pid: {PIDS[5]}) of binary: "
                                                       "/opt/venv/bin/python3")
        others, root = ["  <NO_OTHER_FAILURES>"], failure(0, 5, -9, "SIGKILL", "2026-11-12_10:00:07")
    else:
        done = true(10, 0, 5, 138000)
        out += glog("E", done + ms(402), f"{api}:869", f"failed (exitcode: -6) local_rank: 0 (pid: {PIDS[0]}) of binary: "
                                                       "/opt/venv/bin/python3")
        others = [x for i, r in enumerate((1, 2, 3), start=1) for x in failure(i, r, -6, "SIGABRT", "2026-11-12_10:00:05")]
        root = failure(0, 0, -6, "SIGABRT", "2026-11-12_10:00:05")
    width = min(max(len(x) for x in root + others + ["train.py FAILED"]), 60)
    return out + [
        "Traceback (most recent call last):",
        '  File "/opt/venv/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{TORCH}/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper',
        "    return f(*args, **kwargs)",
        f'  File "{TORCH}/distributed/run.py", line 918, in main',
        "    run(args)",
        f'  File "{TORCH}/distributed/run.py", line 909, in run',
        "    elastic_launch(",
        f'  File "{TORCH}/distributed/launcher/api.py", line 138, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        f'  File "{TORCH}/distributed/launcher/api.py", line 269, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * width, "train.py FAILED", "-" * width, "Failures:"] + others + [
        "-" * width, "Root Cause (first observed failure):"] + root + ["=" * width]


def dmesg_b():
    """`dmesg --time-format iso` on gpu-b12: wall clock of gpu-b12 (4 s ahead)."""
    def k(when_true, text):
        when = local("gpu-b12", when_true)
        return f"{when:%Y-%m-%dT%H:%M:%S},{when.microsecond:06d}+00:00 {text}"

    t0 = OOM_TRUE - ms(0.9)
    rows = [(66097, 0, "torchrun", 52211), (66119, 0, "python3", 10422334), (66120, 0, "python3", 121733018),
            (66121, 0, "python3", 10398812), (66122, 0, "python3", 10441907), (66141, 0, "python3", 2210734)]
    lines = [
        (0.0, "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"),
        (0.02, "CPU: 91 PID: 66141 Comm: python3 Tainted: P           OE      6.5.0-45-generic #45~22.04.1-Ubuntu"),
        (0.03, "Hardware name: Dell Inc. PowerEdge XE9680/0K0TC2, BIOS 1.6.10 01/17/2024"),
        (0.04, "Call Trace:"),
        (0.05, " <TASK>"),
        (0.06, " dump_stack_lvl+0x76/0xa0"),
        (0.07, " dump_header+0x47/0x210"),
        (0.08, " oom_kill_process+0x116/0x270"),
        (0.09, " out_of_memory+0x103/0x350"),
        (0.10, " __alloc_pages_slowpath.constprop.0+0xd06/0xe50"),
        (0.11, " __alloc_pages+0x31f/0x350"),
        (0.12, " alloc_pages_mpol+0x91/0x210"),
        (0.13, " folio_alloc+0x1d/0x60"),
        (0.14, " __filemap_get_folio+0x138/0x310"),
        (0.15, " </TASK>"),
        (0.18, "Mem-Info:"),
        (0.19, "active_anon:128904521 inactive_anon:3201877 isolated_anon:0"),
        (0.20, " active_file:1288 inactive_file:902 isolated_file:0"),
        (0.21, " unevictable:0 dirty:0 writeback:0"),
        (0.22, " free:221043 free_pcp:288 free_cma:0"),
        (0.31, "Tasks state (memory values in pages):"),
        (0.32, "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name"),
    ]
    for i, (pid, uid, name, rss) in enumerate(rows):
        lines.append((0.33 + 0.001 * i, f"[{pid:7d}] {uid:5d} {pid:5d} {rss + 2900000:8d} {rss:8d} {rss * 8:8d} "
                                        f"{0:8d}         {0:5d} {name}"))
    lines += [
        (0.47, "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
               "task_memcg=/system.slice/slurmstepd.scope/job_559023/step_0/user/task_0,task=python3,pid=66120,uid=0"),
        (0.53, "Out of memory: Killed process 66120 (python3) total-vm:498534072kB, anon-rss:486900072kB, "
               "file-rss:28000kB, shmem-rss:4000kB, UID:0 pgtables:951039kB oom_score_adj:0"),
        (2117.0, "oom_reaper: reaped process 66120 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:4000kB"),
    ]
    head = [k(true(9, 16, 20, 11000), "NVRM: GPU at PCI:0000:9a:00: GPU-5c3b0f6e-2d4b-7a1e-9c8f-1e2d3c4b5a69"),
            k(true(9, 16, 20, 15000), "NVRM: GPU Board Serial Number: 1653923004217")]
    return head + [k(t0 + ms(d), text) for d, text in lines]


def write(rel, lines):
    path = os.path.join(HERE, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main():
    for rank in range(8):
        write(f"{HOST[rank]}/rank{rank}.stderr.log", rank_log(rank))
    for host in SKEW:
        write(f"{host}/torchrun.out", agent_log(host))
    write("gpu-b12/dmesg.txt", dmesg_b())


if __name__ == "__main__":
    main()
