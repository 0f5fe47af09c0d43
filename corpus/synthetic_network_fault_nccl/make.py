#!/usr/bin/env python3
"""Write the NCCL logs of this incident (synthetic: no GPU cluster here).

Four ranks on two hosts (gpu-a: ranks 0, 1; gpu-b: ranks 2, 3), NCCL 2.26
line formats (timestamped WARN lines, see shared/formats.md §3a, §3e), one
world communicator with two ring channels 0 → 1 → 2 → 3 → 0 whose
host-crossing hops (1 → 2, 3 → 0) go over NET/IB. After 42 healthy
all_reduces (opCount 0x0 … 0x29) every rank issues opCount 0x2a; during it
rank 2's receive from rank 1 over IB fails with retry exhaustion (status 12)
at 18:31:07; two seconds later rank 1's send side reports a flush error for
the same queue pair and rank 3's proxy thread gives up on its connection.
Nobody exits: NCCL has no timeout of its own and async error handling is
off, so every rank sits in all_reduce 0x2a.

    python3 make.py    # rewrites rank<R>.nccl.log next to this file
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTS = {0: ("gpu-a", "10.1.0.1", 4101), 1: ("gpu-a", "10.1.0.1", 4102),
         2: ("gpu-b", "10.1.0.2", 5201), 3: ("gpu-b", "10.1.0.2", 5202)}
COMM_ID = "0x3c9a51e07d2b6f48"
LAST = 0x2a
WARNS = {
    2: [("2026-05-13 18:31:07", "transport/net_ib.cc:2358",
         "NET/IB : Got completion from peer 10.1.0.1<48133> with status=12 opcode=0 len=0 vendor err 129 (Recv) "
         "localGid ::ffff:10.1.0.2 remoteGids::ffff:10.1.0.1 hca mlx5_0")],
    1: [("2026-05-13 18:31:09", "transport/net_ib.cc:2358",
         "NET/IB : Got completion from peer 10.1.0.2<39211> with status=5 opcode=0 len=0 vendor err 249 (Send) "
         "localGid ::ffff:10.1.0.1 remoteGids::ffff:10.1.0.2 hca mlx5_0")],
    3: [("2026-05-13 18:31:09", "proxy.cc:1484",
         "[Service thread] Error encountered progressing operation=Connect, res=3, closing connection")],
}


def lines_of(rank):
    host, ip, pid = HOSTS[rank]
    main, init, proxy = f"{host}:{pid}:{pid}", f"{host}:{pid}:{pid + 40}", f"{host}:{pid}:{pid + 70}"
    comm = f"0x55d0{rank:02d}a2b3c40"
    stream = f"0x55d0{rank:02d}a2a2f00"
    prev, nxt = (rank - 1) % 4, (rank + 1) % 4
    out = [f"{main} [{rank % 2}] NCCL INFO Bootstrap : Using ib0:{ip}<0>",
           f"{main} [{rank % 2}] NCCL INFO NCCL version 2.26.2+cuda12.2",
           f"{main} [{rank % 2}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:{ip}<0>",
           f"{init} [{rank % 2}] NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks 4 cudaDev {rank % 2} "
           f"nvmlDev {rank % 2} busId 1b000 commId {COMM_ID} - Init START"]
    if rank == 0:
        out += [f"{init} [0] NCCL INFO Channel 00/02 :    0   1   2   3",
                f"{init} [0] NCCL INFO Channel 01/02 :    0   1   2   3"]
    for channel in (0, 1):
        out.append(f"{init} [{rank % 2}] NCCL INFO Ring {channel:02d} : {prev} -> {rank} -> {nxt}")
    for channel in (0, 1):
        via = "NET/IB/0" if HOSTS[nxt][0] != host else "P2P/CUMEM/read"
        extra = " [send]" if via.startswith("NET") else ""
        out.append(f"{init} [{rank % 2}] NCCL INFO Channel {channel:02d}/0 : {rank}[{rank % 2}] -> "
                   f"{nxt}[{nxt % 2}]{extra} via {via}")
    out += [f"{init} [{rank % 2}] NCCL INFO Connected all rings",
            f"{init} [{rank % 2}] NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks 4 cudaDev {rank % 2} "
            f"nvmlDev {rank % 2} busId 1b000 commId {COMM_ID} - Init COMPLETE"]
    for op in range(LAST + 1):
        out.append(f"{main} [{rank % 2}] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f7a00000000 "
                   f"recvbuff 0x7f7a00000000 count 18816 datatype 7 op 0 root 0 comm {comm} [nranks=4] "
                   f"stream {stream}")
    for when, where, text in WARNS.get(rank, []):
        out += ["", f"[{when}] {proxy} [{rank % 2}] {where} NCCL WARN {text}"]
        if "net_ib" in where:
            out.append(f"{proxy} [{rank % 2}] NCCL INFO transport/net.cc:1134 -> 6")
    return out


def main():
    for rank in HOSTS:
        with open(os.path.join(HERE, f"rank{rank}.nccl.log"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines_of(rank)) + "\n")


if __name__ == "__main__":
    main()
