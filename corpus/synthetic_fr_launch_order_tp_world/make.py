#!/usr/bin/env python3
"""Write this incident's Flight Recorder dumps (synthetic: no GPU here).

Four ranks, TP 2 x DP 2, NCCL Flight Recorder dump version 2.10 as torch
writes it with TORCH_NCCL_ENABLE_TIMING=1: entries carry `record_id` (one
counter per process across its groups), `pg_id` (per process), the global
`process_group` (name, desc), `collective_seq_id`, `state`
(scheduled/started/completed) and `time_discovered_started_ns`; pg_config
lists the members of each group the process belongs to, as a string. The
pickles are written the way torch's C++ pickler writes them
(benchmarks/gen_fr_dumps.py: TorchStylePickler).

    python3 make.py    # rewrites fr/nccl_trace_rank_<R> next to this file
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "benchmarks"))

from gen_fr_dumps import TorchStylePickler  # noqa: E402

STEPS = 40
T0 = 1_795_945_835_000_000_000
FRAMES = {
    "tp": [{"name": "all_reduce", "filename": "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py",
            "line": 3245},
           {"name": "reduce_tp_partials", "filename": "/srv/job/model/parallel.py", "line": 118},
           {"name": "forward", "filename": "/srv/job/model/layers.py", "line": 77}],
    "world": [{"name": "all_reduce", "filename": "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py",
               "line": 3245},
              {"name": "sync_loss_scale", "filename": "/srv/job/train.py", "line": 241},
              {"name": "train_step", "filename": "/srv/job/train.py", "line": 290}],
}


def entry(record_id, pg_id, group, seq, frames, state):
    started = T0 + record_id * 2_000_000
    item = {
        "record_id": record_id, "pg_id": pg_id, "process_group": group,
        "thread_name": "pt_main_thread", "thread_id": "140387119213440",
        "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": T0 + record_id * 2_000_000 - 50_000,
        "input_sizes": [[2048, 1024]], "input_dtypes": ["BFloat16"],
        "output_sizes": [[2048, 1024]], "output_dtypes": ["BFloat16"],
        "state": state,
        "time_discovered_started_ns": started if state != "scheduled" else None,
        "time_discovered_completed_ns": started + 400_000 if state == "completed" else None,
        "retired": state == "completed", "timeout_ms": 600_000, "is_p2p": False,
        "frames": frames,
    }
    if state == "completed":
        item["duration_ms"] = 0.4
    return item


def dump(rank):
    tp_name = "1" if rank < 2 else "2"
    tp_ranks = "[0, 1]" if rank < 2 else "[2, 3]"
    world = ("0", "default_pg")
    tp = (tp_name, "tp")
    entries = []
    for step in range(1, STEPS):
        entries.append(entry(len(entries), 1, tp, step, FRAMES["tp"], "completed"))
        entries.append(entry(len(entries), 0, world, step, FRAMES["world"], "completed"))
    last = STEPS
    if rank == 0:  # the world call first, against everyone else's order
        entries.append(entry(len(entries), 0, world, last, FRAMES["world"], "started"))
        entries.append(entry(len(entries), 1, tp, last, FRAMES["tp"], "scheduled"))
        status = {0: (last, last, last - 1), 1: (last, last - 1, last - 1)}
    elif rank == 1:
        entries.append(entry(len(entries), 1, tp, last, FRAMES["tp"], "started"))
        entries.append(entry(len(entries), 0, world, last, FRAMES["world"], "scheduled"))
        status = {0: (last, last - 1, last - 1), 1: (last, last, last - 1)}
    else:
        entries.append(entry(len(entries), 1, tp, last, FRAMES["tp"], "completed"))
        entries.append(entry(len(entries), 0, world, last, FRAMES["world"], "started"))
        status = {0: (last, last, last - 1), 1: (last, last, last)}
    top = {
        "version": "2.10", "comm_lib_version": "2.21.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                      tp_name: {"name": tp_name, "desc": "tp", "ranks": tp_ranks}},
        "pg_status": {pg: {"last_enqueued_collective": e, "last_started_collective": s,
                           "last_completed_collective": c} for pg, (e, s, c) in status.items()},
        "entries": entries,
    }
    shared = {id(f) for f in FRAMES.values()}
    return TorchStylePickler(shared).dumps(top)


def main():
    out = os.path.join(HERE, "fr")
    os.makedirs(out, exist_ok=True)
    for rank in range(4):
        with open(os.path.join(out, f"nccl_trace_rank_{rank}"), "wb") as handle:
            handle.write(dump(rank))


if __name__ == "__main__":
    main()
