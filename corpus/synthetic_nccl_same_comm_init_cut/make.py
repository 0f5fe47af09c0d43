#!/usr/bin/env python3
"""Write the log of this incident (synthetic: no GPU cluster here).

A Slurm job's output file from one node (dgx-a100-12), four processes (one
per GPU) of a data-parallel job launched by `srun python train.py`, NCCL
2.21.5 with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL. The user pasted only the
end of it: the file starts in the middle of a line, long after the init
lines (its first line is the end of a COLL line, whose cut prefix reads as
another host), so there is no commId, no rank in any line (srun without --label) and
no ring line: only the COLL lines (src/enqueue.cc, formats.md §3c) of the
four processes, interleaved as they reach the file, and the training
script's progress lines between them.

All four use one communicator of four ranks (the world): per step two
AllGathers (8388608 bfloat16) and two ReduceScatters (2097152 bfloat16,
sum) of a sharded model, then an AllReduce of the loss (1 float32, avg).
Process 60417 ran out of data first: at opCount 2d5 it calls AllReduce of
its stop flag (1 int32, max) while the other three call AllGather for the
next step. All four sit there. Three agree, so the odd one out is 60417;
no line says its global rank.

    python3 make.py    # rewrites slurm-882211.out next to this file
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
HOST = "dgx-a100-12"
PIDS = (60414, 60415, 60416, 60417)
COMMS = ("0x55f0c81e2d40", "0x5631a0b4f7c0", "0x55b7e22a9a10", "0x560c4d713e80")
FIRST, LAST = 0x2b0, 0x2d5
BF16, FP32, INT32 = 9, 7, 2
SUM, MAX, AVG = 0, 2, 4


def call_at(opcount, index):
    """(op, count, datatype, redop) process `index` calls at `opcount`."""
    position = opcount % 5
    if opcount == LAST and PIDS[index] == 60417:
        return "AllReduce", 1, INT32, MAX
    if position in (0, 1):
        return "AllGather", 8388608, BF16, SUM
    if position in (2, 3):
        return "ReduceScatter", 2097152, BF16, SUM
    return "AllReduce", 1, FP32, AVG


def line(index, opcount):
    op, count, dtype, redop = call_at(opcount, index)
    pid = PIDS[index]
    buf = f"0x7f{index}a{opcount:04x}c000"
    return (f"{HOST}:{pid}:{pid} [{index}] NCCL INFO {op}: opCount {opcount:x} sendbuff {buf} recvbuff {buf} "
            f"count {count} datatype {dtype} op {redop} root 0 comm {COMMS[index]} [nranks=4] "
            f"stream 0x5{index}f1c2d3e00")


def main():
    # The paste starts inside a line: what is left of its prefix reads as host "a100-12".
    out = [line(2, FIRST - 1)[len("dgx-"):-len("uff 0x7f2a02afc000 count 2097152 datatype 9 op 0 root 0 comm "
                                               "0x55b7e22a9a10 [nranks=4] stream 0x52f1c2d3e00")]]
    step = 6270
    for opcount in range(FIRST, LAST + 1):
        order = (opcount % 4, (opcount + 1) % 4, (opcount + 2) % 4, (opcount + 3) % 4)
        out += [line(index, opcount) for index in order]
        if opcount % 5 == 4:
            step += 1
            out.append(f"step {step} | loss 2.{(step * 37) % 1000:03d} | lr 2.4e-04 | 412.7 samples/s")
    with open(os.path.join(HERE, "slurm-882211.out"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
