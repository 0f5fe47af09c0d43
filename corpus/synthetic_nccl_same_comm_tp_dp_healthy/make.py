#!/usr/bin/env python3
"""Write the console log of this incident (synthetic: no GPU cluster here).

One node (gpu-node-3), four processes of a torchrun job (tensor parallel 2 ×
data parallel 2), NCCL 2.21.5 with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL:
no init, ring or tree lines, so no commId — only the `NCCL version` line
(subsystem ALL) and one COLL line per call (src/enqueue.cc, formats.md §3c),
behind torchrun's `[rankN]:` prefix, the four processes' lines interleaved
as they reach the console.

Every process has three communicators: the world (nranks 4), its TP group
({0,1} or {2,3}, nranks 2) and its DP group ({0,2} or {1,3}, nranks 2) —
two communicators of the same size in every process. Both size-2
communicators start with the same call (a Broadcast of 1024 float32 at
opCount 0: the initial parameter sync on DP, the RNG-seed sync on TP), so a
TP communicator of one process paired with the DP communicator of another
agrees at opCount 0 and differs from opCount 1 on. Then, per step: TP runs
AllGather + ReduceScatter (bf16, 4096) twice, DP AllReduces two gradient
buckets (float32), the world AllReduces the loss. Every process calls the
same ops on every communicator: the job is healthy. The log ends while
rank 3 is one TP call behind the others (a snapshot of a running job).

    python3 make.py    # rewrites node3.console.log next to this file
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
HOST = "gpu-node-3"
PIDS = {0: 31207, 1: 31208, 2: 31209, 3: 31210}
STEPS = 4
BF16, FP32, SUM = 9, 7, 0


def pointer(rank, which):
    return f"0x{0x55a1c0000000 + rank * 0x1000000 + which * 0x4a2000:x}"


def calls_of(rank):
    """(communicator, op, count, datatype, redop, root) in the order the process issues them."""
    out = [("tp", "Broadcast", 1024, FP32, SUM, 0), ("dp", "Broadcast", 1024, FP32, SUM, 0)]
    for _ in range(STEPS):
        for _ in range(2):
            out += [("tp", "AllGather", 4096, BF16, SUM, 0), ("tp", "ReduceScatter", 4096, BF16, SUM, 0)]
        out += [("dp", "AllReduce", 2097152, FP32, SUM, 0), ("dp", "AllReduce", 1048576, FP32, SUM, 0),
                ("world", "AllReduce", 1, FP32, SUM, 0)]
    out += [("tp", "AllGather", 4096, BF16, SUM, 0), ("tp", "ReduceScatter", 4096, BF16, SUM, 0)]
    return out[:-1] if rank == 3 else out


def lines_of(rank):
    pid = PIDS[rank]
    prefix = f"[rank{rank}]:{HOST}:{pid}:{pid} [{rank}] NCCL INFO "
    comms = {"world": (pointer(rank, 0), 4), "tp": (pointer(rank, 1), 2), "dp": (pointer(rank, 2), 2)}
    counts = {"world": 0, "tp": 0, "dp": 0}
    out = [prefix + "NCCL version 2.21.5+cuda12.4"]
    for which, op, count, dtype, redop, root in calls_of(rank):
        comm, nranks = comms[which]
        buf = f"0x7f3a{rank}c{counts[which]:06x}00"
        out.append(prefix + f"{op}: opCount {counts[which]:x} sendbuff {buf} recvbuff {buf} count {count} "
                   f"datatype {dtype} op {redop} root {root} comm {comm} [nranks={nranks}] stream 0x55a1bf{rank}0a000")
        counts[which] += 1
    return out


def main():
    per_rank = [lines_of(rank) for rank in PIDS]
    merged = []
    for index in range(max(map(len, per_rank))):  # round robin: the order processes reach the console
        for rank in (index % 4, (index + 1) % 4, (index + 2) % 4, (index + 3) % 4):
            if index < len(per_rank[rank]):
                merged.append(per_rank[rank][index])
    with open(os.path.join(HERE, "node3.console.log"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(merged) + "\n")


if __name__ == "__main__":
    main()
