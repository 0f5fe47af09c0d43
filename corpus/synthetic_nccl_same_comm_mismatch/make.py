#!/usr/bin/env python3
"""Write the NCCL logs of this incident (synthetic: no GPU cluster here).

One node (gpu-node-7), two processes of a 2-GPU job, NCCL 2.14.3 with
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL and NCCL_DEBUG_FILE=nccl.%h.%p.log
(one file per process). NCCL 2.14 prints Init COMPLETE without a commId
(`comm %p rank %d nranks %d cudaDev %d busId %lx - Init COMPLETE`,
src/init.cc at v2.14.3-1) and no Init START; the init lines before it are
the ring dump of rank 0 (`Channel %02d/%02d : ` then ` %3d` per rank,
src/graph/rings.cc), every rank's `Trees [c] d0/d1/d2->me->up` (src/init.cc;
the `Ring` lines are NCCL_GRAPH, not printed here), the P2P connection lines
(`Channel %02d/%01d : %d[%lx] -> %d[%lx] via P2P/IPC`, src/transport/p2p.cc)
and `Connected all rings/trees`. COLL lines as src/enqueue.cc prints them
(formats.md §3c).

Each process has two communicators of two ranks, both over the same two
processes, created in the same order: the default process group (created at
start) and a metrics group (created at step 3, its init after calls on the
first). The default group all-reduces two gradient buckets per step
(float32); the metrics group all-reduces 4 floats every other step. At step
14 the ranks disagree on whether to re-sync weights (rank 1 resumed from a
later checkpoint): at the default group's opCount 1c, rank 0 calls
AllReduce (the first gradient bucket, 25557032 float32) while rank 1 calls
Broadcast of the flattened weights (25557032 float32, root 0). Both sit in
that call; neither process printed anything after it. Every member and no
majority: both processes differ.

    python3 make.py    # rewrites nccl.gpu-node-7.<pid>.log next to this file
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
HOST = "gpu-node-7"
PIDS = {0: 51342, 1: 51343}
BUS = {0: "1b000", 1: "1c000"}
COMMS = {"default": {0: "0x564a3e5c2a10", 1: "0x55d81f0b7c30"},
         "metrics": {0: "0x564a3f1d9e80", 1: "0x55d81fd02b50"}}
GRADS = (25557032, 11000000)
FP32, SUM = 7, 0
MISMATCH_STEP = 14


def init_lines(rank, which, tid):
    head = f"{HOST}:{PIDS[rank]}:{tid} [{rank}] NCCL INFO "
    peer = 1 - rank
    out = []
    if rank == 0:
        out += [head + "Channel 00/02 :    0   1", head + "Channel 01/02 :    0   1"]
    tree = "1/-1/-1->0->-1" if rank == 0 else "-1/-1/-1->1->0"
    out.append(head + f"Trees [0] {tree} [1] {tree}")
    for channel in (0, 1):
        out.append(head + f"Channel {channel:02d}/0 : {rank}[{BUS[rank]}] -> {peer}[{BUS[peer]}] via P2P/IPC/read")
    out += [head + "Connected all rings", head + "Connected all trees",
            head + f"comm {COMMS[which][rank]} rank {rank} nranks 2 cudaDev {rank} busId {BUS[rank]} - Init COMPLETE"]
    return out


def coll(rank, op, opcount, count, which, root=0):
    head = f"{HOST}:{PIDS[rank]}:{PIDS[rank]} [{rank}] NCCL INFO "
    buf = f"0x7f{rank}e8c{opcount:05x}00"
    return head + (f"{op}: opCount {opcount:x} sendbuff {buf} recvbuff {buf} count {count} datatype {FP32} "
                   f"op {SUM} root {root} comm {COMMS[which][rank]} [nranks=2] stream 0x5{rank}c3a0e1f00")


def lines_of(rank):
    pid = PIDS[rank]
    out = [f"{HOST}:{pid}:{pid} [{rank}] NCCL INFO Bootstrap : Using eth0:10.7.0.7<0>",
           f"{HOST}:{pid}:{pid} [{rank}] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), "
           "using internal implementation",
           f"{HOST}:{pid}:{pid} [{rank}] NCCL INFO NCCL version 2.14.3+cuda11.7",
           f"{HOST}:{pid}:{pid} [{rank}] NCCL INFO NET/Socket : Using [0]eth0:10.7.0.7<0>",
           f"{HOST}:{pid}:{pid} [{rank}] NCCL INFO Using network Socket"]
    out += init_lines(rank, "default", pid)
    counts = {"default": 0, "metrics": 0}
    for step in range(MISMATCH_STEP + 1):
        if step == 3:
            out += init_lines(rank, "metrics", pid)
        if step == MISMATCH_STEP:
            op = "AllReduce" if rank == 0 else "Broadcast"
            out.append(coll(rank, op, counts["default"], GRADS[0], "default"))
            break
        for count in GRADS:
            out.append(coll(rank, "AllReduce", counts["default"], count, "default"))
            counts["default"] += 1
        if step >= 3 and step % 2 == 1:
            out.append(coll(rank, "AllReduce", counts["metrics"], 4, "metrics"))
            counts["metrics"] += 1
    return out


def main():
    for rank, pid in PIDS.items():
        with open(os.path.join(HERE, f"nccl.{HOST}.{pid}.log"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines_of(rank)) + "\n")


if __name__ == "__main__":
    main()
