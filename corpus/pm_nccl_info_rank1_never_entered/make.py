#!/usr/bin/env python3
"""Write the artifacts of this incident (synthetic: no GPU cluster was used).

Formats followed: NCCL 2.20.5 with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL
(checked against NVIDIA/nccl tag v2.20.5-1: src/debug.cc prefix
`host:pid:tid [cudaDev] NCCL INFO `, no timestamps; init.cc Init START/COMPLETE
without the function name, `comm %p rank %d nRanks %d nNodes ...`, `Trees`,
`P2P Chunksize`, `Connected all rings/trees`, the coll/p2p channel count line;
rings.cc `Channel 00/02 :    0   1   2   3` printed by rank 0 only; p2p.cc
`via P2P/CUMEM/read`; enqueue.cc `AllReduce: opCount %lx ... count %zi ...`;
the plain `NCCL version 2.20.5+cuda12.4` printf of rank 0), interleaved in the
same per-rank file with PyTorch 2.4.1 c10 lines (`[rankN]:[E506 ...
ProcessGroupNCCL.cpp:607] `, PG prefix `[PG 0 (default_pg) Rank N] `, line
numbers of a real 2.4.1 log: 607 timeout, 1664 exception detected, 1709
timeout at NCCL work, 621/627 teardown, 1515 watchdog thread exit, frames from
checkTimeout :609 and ncclCommWatchdog :1521, relative `../torch/csrc` paths of
the 2.4.1 pip wheels).

The job: `srun --ntasks 4 --output logs/rank-%t.log python train.py` on dgx-14
(no torchrun; each task's stdout and stderr go to its own file), ranks 0-3 =
pids 30411-30414, DDP with 2 buckets plus a loss all_reduce per step, timeout
600000 ms. Step 15 on rank 1 starts with a hard-negative index refresh (FAISS
IVF over 4.2M vectors, ~45 minutes) that the other ranks skip; ranks 0, 2, 3
enqueue step 15's collectives (opCount 0x2f..0x31, SeqNum 48..50) and time out
at 17:05:15; rank 1's last collective is opCount 0x2e. srun does not kill rank 1
when the others abort; its log keeps reporting the index refresh.

    python3 make.py    # rewrites every artifact next to this file
"""

import datetime as dt
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
DAY = dt.datetime(2026, 5, 6)
HOST = "dgx-14"
PIDS = {0: 30411, 1: 30412, 2: 30413, 3: 30414}
BUS = {0: "18000", 1: "2a000", 2: "3a000", 3: "5d000"}
COMM = {r: f"0x55b{r}3e{rng_hex}" for r, rng_hex in zip(range(4), ("8a41c0", "1f9d30", "b02e10", "77c4a0"))}
STREAM = {r: f"0x55b{r}3e{h}" for r, h in zip(range(4), ("8a1f00", "1f7a80", "b00b90", "77a1e0"))}
COMM_ID = "0xc4a7d21e9b03f516"
STUCK_STEP = 15
rng = random.Random(883412)


def t(hh, mm, ss, us=0):
    return DAY.replace(hour=hh, minute=mm, second=ss, microsecond=us)


def ms(x):
    return dt.timedelta(milliseconds=x)


def nccl(rank, msg, tid=None):
    return f"{HOST}:{PIDS[rank]}:{tid or PIDS[rank]} [{rank}] NCCL INFO {msg}"


def coll(rank, op, count, dtype=7, root=0):
    return nccl(rank, f"{op['name']}: opCount {op['n']:x} sendbuff 0x7f2{rank}c{op['n'] * 4096 + 0x200000:07x} "
                      f"recvbuff 0x7f2{rank}c{op['n'] * 4096 + 0x200000:07x} count {count} datatype {dtype} op 0 "
                      f"root {root} comm {COMM[rank]} [nranks=4] stream {STREAM[rank]}")


def app(rank, when, msg):
    return f"[{when:%H:%M:%S}] [rank{rank}] {msg}"


def c10(rank, when, line, msg):
    return (f"[rank{rank}]:[E{when.month}{when.day:02d} {when:%H:%M:%S}."
            f"{when.microsecond * 1000 + rng.randrange(1000):09d} ProcessGroupNCCL.cpp:{line}] {msg}")


def init_lines(rank):
    pid = PIDS[rank]
    prev, nxt = (rank - 1) % 4, (rank + 1) % 4
    down = f"{rank + 1}/-1/-1" if rank < 3 else "-1/-1/-1"
    up = rank - 1
    out = [app(rank, t(16, 54, 20, 112000), f"pid {pid} on {HOST}, cuda:{rank}, torch 2.4.1+cu124, "
                                            "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL"),
           nccl(rank, "Bootstrap : Using ib0:10.12.0.14<0>"),
           nccl(rank, "cudaDriverVersion 12040")]
    if rank == 0:
        out.append("NCCL version 2.20.5+cuda12.4")
    out += [nccl(rank, "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.12.0.14<0>"),
            nccl(rank, "Using network IB"),
            nccl(rank, f"comm {COMM[rank]} rank {rank} nranks 4 cudaDev {rank} nvmlDev {rank} busId {BUS[rank]} "
                       f"commId {COMM_ID} - Init START"),
            nccl(rank, f"comm {COMM[rank]} rank {rank} nRanks 4 nNodes 1 localRanks 4 localRank {rank} MNNVL 0")]
    if rank == 0:
        out += [nccl(rank, "Channel 00/02 :    0   1   2   3"), nccl(rank, "Channel 01/02 :    0   1   2   3")]
    out += [nccl(rank, f"Trees [0] {down}->{rank}->{up} [1] {down}->{rank}->{up}"),
            nccl(rank, "P2P Chunksize set to 524288")]
    for channel in (0, 1):
        out.append(nccl(rank, f"Channel {channel:02d}/0 : {rank}[{rank}] -> {nxt}[{nxt}] via P2P/CUMEM/read"))
    out += [nccl(rank, "Connected all rings")]
    for channel in (0, 1):
        if rank > 0:
            out.append(nccl(rank, f"Channel {channel:02d}/0 : {rank}[{rank}] -> {prev}[{prev}] via P2P/CUMEM/read"))
    out += [nccl(rank, "Connected all trees"),
            nccl(rank, "2 coll channels, 0 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer"),
            nccl(rank, f"comm {COMM[rank]} rank {rank} nranks 4 cudaDev {rank} nvmlDev {rank} busId {BUS[rank]} "
                       f"commId {COMM_ID} - Init COMPLETE")]
    return out


def collectives(rank, steps):
    out = [coll(rank, {"name": "AllGather", "n": 0}, 1, dtype=4),
           coll(rank, {"name": "Broadcast", "n": 1}, 31457280)]
    for s in range(steps):
        if s % 5 == 0:
            out.append(app(rank, t(16, 54, 30) + dt.timedelta(seconds=3.0 * s), f"step {s} start"))
        base = 2 + 3 * s
        out += [coll(rank, {"name": "AllReduce", "n": base}, 25165824),
                coll(rank, {"name": "AllReduce", "n": base + 1}, 16777216),
                coll(rank, {"name": "AllReduce", "n": base + 2}, 1)]
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
    out = init_lines(rank) + collectives(rank, STUCK_STEP)
    out.append(app(rank, t(16, 55, 15, 120000), f"step {STUCK_STEP} start"))
    base = 2 + 3 * STUCK_STEP
    out += [coll(rank, {"name": "AllReduce", "n": base}, 25165824),
            coll(rank, {"name": "AllReduce", "n": base + 1}, 16777216),
            coll(rank, {"name": "AllReduce", "n": base + 2}, 1)]
    seq = base + 1                                  # WorkNCCL SeqNum counts from 1, opCount from 0
    fire = t(17, 5, 15, 303000) + ms(29 * rank)
    ran = 600000 + 60 + 13 * rank
    pg = f"[PG 0 (default_pg) Rank {rank}]"
    work = f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000)"
    timeout = f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
    lib = "/opt/conda/envs/ret/lib/python3.10/site-packages/torch/lib"
    hi = rng.randrange(0x7f00, 0x7fff) << 32 | rng.randrange(0x100) << 28
    exit_msg = f"{pg} Process group watchdog thread terminated with exception: {timeout}"
    raised = ["Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 "
              "(most recent call first):"] + frames(hi, lib) + [""]
    return out + [
        c10(rank, fire, 607, timeout),
        c10(rank, fire + ms(1.4), 1664, f"{pg} Exception (either an error or timeout) detected by watchdog at work: "
                                        f"{seq}, last enqueued NCCL work: {seq + 2}, last completed NCCL work: {seq - 1}."),
        c10(rank, fire + ms(1.45), 1709, f"{pg} Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq + 2}, last "
                                         f"completed NCCL work: {seq - 1}."),
        c10(rank, fire + ms(1.46), 621, f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the "
                                        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                                        "corrupted/incomplete data."),
        c10(rank, fire + ms(1.47), 627, f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down."),
        c10(rank, fire + ms(5.9), 1515, exit_msg)] + raised + [
        "terminate called after throwing an instance of 'c10::DistBackendError'", f"  what():  {exit_msg}"] + raised + [
        "Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 "
        "(most recent call first):"] + watch_frames(hi, lib) + [""]


def missing_rank_log():
    rank = 1
    out = init_lines(rank) + collectives(rank, STUCK_STEP)
    out.append(app(rank, t(16, 55, 15, 131000), f"step {STUCK_STEP} start"))
    out.append(app(rank, t(16, 55, 15, 140000), "refreshing hard-negative index before step 15 (faiss IVF4096, "
                                                 "4.2M vectors, rebuild_every=15)"))
    when, pct = t(16, 55, 15), 0
    while pct + 6 <= 96:
        when += dt.timedelta(seconds=150 + 20 * rng.random())
        pct += 6
        out.append(app(rank, when, f"index refresh: added {int(4.2e6 * pct / 100):,} / 4,200,000 vectors ({pct}%)"))
    return out


def write(rel, lines):
    path = os.path.join(HERE, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main():
    for rank in (0, 2, 3):
        write(f"logs/rank-{rank}.log", waiting_rank_log(rank))
    write("logs/rank-1.log", missing_rank_log())


if __name__ == "__main__":
    main()
