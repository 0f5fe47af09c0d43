"""Generate an N-rank NCCL_DEBUG=INFO log with COLL lines, one rank stopping early.

    python benchmarks/gen_nccl_logs.py OUT --ranks 8 --size 128M [--per-rank-files]
        [--stop-rank 5] [--stop-at 0.9] [--per-node 4] [--gzip] [--coll-share]

--size is per rank: eight ranks of 128M make a 1 GiB interleaved file.

Each rank prints what NCCL 2.21 prints with NCCL_DEBUG=INFO and
NCCL_DEBUG_SUBSYS=INIT,COLL: the version and network lines, the world
communicator's init (Init START, the comm summary, rings, trees, connections,
Init COMPLETE), then a split communicator per node (`ncclCommSplit ... color
<node>`), then COLL lines until its share of --size is written: an AllReduce
on the world communicator every step and an AllGather on the node
communicator every third step. --stop-rank stops at --stop-at of its share,
as a rank that hangs in its data loader would.

By default all ranks go to one file, interleaved line by line as torchrun's
stdout shows them; --per-rank-files writes NCCL_DEBUG_FILE-style files
(`nccl.<host>.<pid>.log`) instead. `generate()` returns what a reader must
find: per rank its host, pid, communicator ids and last opCounts.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random

_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_FLUSH_LINES = 20000


def _size(text: str) -> int:
    text = text.strip().lower().rstrip("ib").rstrip("b")
    if text and text[-1] in _UNITS:
        return int(float(text[:-1]) * _UNITS[text[-1]])
    return int(text)


class _Rank:
    def __init__(self, rank: int, ranks: int, per_node: int, rnd: random.Random,
                 world_id: int, node_ids: list[int]):
        self.rank = rank
        self.node = rank // per_node
        self.local = rank % per_node
        self.host = f"gpu-node{self.node:03d}"
        self.pid = 41000 + 17 * rank
        self.ip = f"10.1.{self.node}.{11 + self.node}"
        self.prefix = f"{self.host}:{self.pid}:{self.pid} [{self.local}] NCCL INFO "
        self.world_ptr = 0x55d0_0000_0000 + (rnd.getrandbits(28) << 4)
        self.node_ptr = self.world_ptr + 0x1_2340
        self.stream = self.world_ptr - 0x8_0000
        self.buf = 0x7f00_0000_0000 + (rnd.getrandbits(24) << 12)
        self.world_id = world_id
        self.node_id = node_ids[self.node]
        self.world_ops = 0
        self.node_ops = 0
        self.written = 0
        self.stopped = False
        self.ranks = ranks
        self.per_node = min(per_node, ranks - self.node * per_node)
        p = self.prefix
        self.allreduce = (f"{p}AllReduce: opCount %x sendbuff 0x%x recvbuff 0x%x count %d datatype 7 "
                          f"op 0 root 0 comm 0x{self.world_ptr:x} [nranks={ranks}] stream 0x{self.stream:x}\n")
        self.allgather = (f"{p}AllGather: opCount %x sendbuff 0x%x recvbuff 0x%x count %d datatype 9 "
                          f"op 0 root 0 comm 0x{self.node_ptr:x} [nranks={self.per_node}] "
                          f"stream 0x{self.stream:x}\n")

    def init_lines(self, per_node: int) -> list[str]:
        p, r, n = self.prefix, self.rank, self.ranks
        bus = 0x1b000 + 0x10000 * self.local
        nodes = (n + per_node - 1) // per_node
        lines = [
            f"{p}Bootstrap : Using eth0:{self.ip}<0>\n",
            f"{p}NCCL version 2.21.5+cuda12.4\n",
            f"{p}NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:{self.ip}<0>\n",
            f"{p}Using network IB\n",
            f"{p}ncclCommInitRank comm 0x{self.world_ptr:x} rank {r} nranks {n} cudaDev {self.local} "
            f"nvmlDev {self.local} busId {bus:x} commId 0x{self.world_id:016x} - Init START\n",
            f"{p}comm 0x{self.world_ptr:x} rank {r} nRanks {n} nNodes {nodes} localRanks {self.per_node} "
            f"localRank {self.local} MNNVL 0\n",
        ]
        if r == 0:
            width = len(str(n - 1))
            ring = "".join(f" {i:>{width}}" for i in range(n))
            lines += [f"{p}Channel {c:02d}/02 :{ring}\n" for c in range(2)]
        up, down = (r - 1 if r else -1), (r + 1 if r + 1 < n else -1)
        lines.append(f"{p}Trees [0] {down}/-1/-1->{r}->{up} [1] {down}/-1/-1->{r}->{up}\n")
        prev, nxt = (r - 1) % n, (r + 1) % n
        lines += [f"{p}Ring {c:02d} : {prev} -> {r} -> {nxt}\n" for c in range(2)]
        for c in range(2):
            if nxt // per_node == self.node:
                lines.append(f"{p}Channel {c:02d}/0 : {r}[{self.local}] -> {nxt}[{nxt % per_node}] via P2P/IPC\n")
            else:
                lines.append(f"{p}Channel {c:02d}/0 : {r}[{self.local}] -> {nxt}[{nxt % per_node}] "
                             f"[send] via NET/IB/0/GDRDMA\n")
        lines += [
            f"{p}Connected all rings\n",
            f"{p}ncclCommInitRank comm 0x{self.world_ptr:x} rank {r} nranks {n} cudaDev {self.local} "
            f"nvmlDev {self.local} busId {bus:x} commId 0x{self.world_id:016x} - Init COMPLETE\n",
            f"{p}ncclCommSplit comm 0x{self.node_ptr:x} rank {self.local} nranks {self.per_node} "
            f"cudaDev {self.local} nvmlDev {self.local} busId {bus:x} parent 0x{self.world_ptr:x} "
            f"color {self.node} key {r} commId 0x{self.node_id:016x} - Init COMPLETE\n",
        ]
        return lines

    def step_lines(self, step: int) -> list[str]:
        buf = self.buf + (step % 7) * 0x100000
        out = [self.allreduce % (self.world_ops, buf, buf, 18816 + (step % 3) * 4096)]
        self.world_ops += 1
        if step % 3 == 2:
            out.append(self.allgather % (self.node_ops, buf, buf + 0x40000, 262144))
            self.node_ops += 1
        return out


def timeout_lines(rank: int, seq: int, numel: int) -> list[str]:
    """What torch 2.2-2.13 prints on a rank's stderr when its watchdog gives up
    on collective #seq of the default group (ProcessGroupNCCL.cpp)."""
    return [
        f"[rank{rank}]:[E1206 03:14:15.926535897 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
        f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, "
        f"NumelOut={numel}, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.\n",
        f"[rank{rank}]:[E1206 03:14:15.926771384 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) "
        f"Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued "
        f"NCCL work: {seq}, last completed NCCL work: {seq - 1}.\n",
    ]


def generate(out: str, ranks: int = 8, size: int = 8 << 20, per_node: int = 4,
             stop_rank: int | None = 5, stop_at: float = 0.9, per_rank_files: bool = False,
             compress: bool = False, seed: int = 0, coll_share: bool = False, console: bool = False) -> dict:
    """Write the log(s) of `ranks` ranks, about `size` bytes per rank.

    With `coll_share`, the share counts COLL lines only: the init lines of
    a 16,384-rank communicator (rank 0's ring dump alone is hundreds of KB)
    would otherwise fill a small share at once and end every healthy rank's
    log at its first call.

    Returns {"paths": [...], "ranks": {rank: {"host", "pid", "world", "node",
    "world_last", "node_last", "last_op"}}} with commIds as printed
    (`0x%016x`) and the last opCounts each rank printed (-1 when none).
    """
    rnd = random.Random(seed)
    world_id = rnd.getrandbits(64)
    nodes = (ranks + per_node - 1) // per_node
    node_ids = [rnd.getrandbits(64) for _ in range(nodes)]
    rows = [_Rank(r, ranks, per_node, rnd, world_id, node_ids) for r in range(ranks)]
    limits = {r.rank: int(size * (stop_at if r.rank == stop_rank else 1.0)) for r in rows}
    opener = (lambda p: gzip.open(p, "wb", compresslevel=1)) if compress else (lambda p: open(p, "wb"))
    suffix = ".gz" if compress else ""
    if console:  # each rank's console (torchrun --tee, a pod's log): NCCL INFO, then c10d's timeout
        per_rank_files = True
        os.makedirs(out, exist_ok=True)
        paths = [os.path.join(out, f"rank{r.rank}.console.log{suffix}") for r in rows]
    elif per_rank_files:
        os.makedirs(out, exist_ok=True)
        paths = [os.path.join(out, f"nccl.{r.host}.{r.pid}.log{suffix}") for r in rows]
    else:
        paths = [out]
    handles = [opener(p) for p in paths]
    pending: list[list[str]] = [[] for _ in handles]

    def emit(index: int, lines: list[str]) -> None:
        bucket = pending[index]
        bucket.extend(lines)
        if len(bucket) >= _FLUSH_LINES:
            handles[index].write("".join(bucket).encode())
            bucket.clear()

    try:
        for r in rows:
            lines = r.init_lines(per_node)
            if not coll_share:
                r.written += sum(map(len, lines))
            emit(r.rank if per_rank_files else 0, lines)
        step = 0
        live = list(rows)
        while live:
            for r in live:
                lines = r.step_lines(step)
                r.written += sum(map(len, lines))
                emit(r.rank if per_rank_files else 0, lines)
                if r.written >= limits[r.rank]:
                    r.stopped = True
            # The healthy ranks of a hung job all stop at the same call: the
            # first to fill its share ends the step for every healthy rank.
            if any(r.stopped and r.rank != stop_rank for r in live):
                for r in live:
                    if r.rank != stop_rank:
                        r.stopped = True
            live = [r for r in live if not r.stopped]
            step += 1
        if console:  # the ranks that reached the last call time out in it; the stopped rank says nothing
            for r in rows:
                if r.rank != stop_rank:
                    emit(r.rank, timeout_lines(r.rank, r.world_ops, 18816))
        for index, bucket in enumerate(pending):
            handles[index].write("".join(bucket).encode())
    finally:
        for handle in handles:
            handle.close()
    return {"paths": paths, "ranks": {r.rank: {
        "host": r.host, "pid": r.pid, "world": f"nccl:0x{world_id:016x}",
        "node": f"nccl:0x{r.node_id:016x}", "world_ptr": f"0x{r.world_ptr:x}",
        "node_ptr": f"0x{r.node_ptr:x}", "world_last": r.world_ops - 1, "node_last": r.node_ops - 1,
    } for r in rows}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--size", default="8M", help="bytes per rank (K, M, G suffixes)")
    ap.add_argument("--per-node", type=int, default=4)
    ap.add_argument("--stop-rank", type=int, default=5)
    ap.add_argument("--stop-at", type=float, default=0.9)
    ap.add_argument("--per-rank-files", action="store_true")
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--coll-share", action="store_true", help="--size counts COLL lines only, not init lines")
    ap.add_argument("--console", action="store_true",
                    help="one console per rank (rankN.console.log): its NCCL lines, then c10d's watchdog "
                         "timeout on every rank but --stop-rank")
    args = ap.parse_args(argv)
    made = generate(args.out, args.ranks, _size(args.size), args.per_node,
                    args.stop_rank if args.stop_rank >= 0 else None, args.stop_at,
                    args.per_rank_files, args.gzip, args.seed, args.coll_share, args.console)
    for path in made["paths"]:
        print(path)


if __name__ == "__main__":
    main()
