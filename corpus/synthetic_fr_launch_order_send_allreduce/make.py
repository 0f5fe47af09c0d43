#!/usr/bin/env python3
"""Write this incident's Flight Recorder dumps (synthetic: no GPU here).

Two ranks, one per pipeline stage, in the JSON form torch writes
(`torch._C._distributed_c10d._dump_nccl_trace_json`, dump version 2.10,
TORCH_NCCL_ENABLE_TIMING=1): pg_status counters as strings, unset times as
0, no frames. Point-to-point entries are named as ProcessGroupNCCL names
them, `nccl:send <rank>-><peer>` and `nccl:recv <rank><-<peer>` with ranks
in the group, `is_p2p` true and their own `p2p_seq_id`; they do not move
`collective_seq_id`.

    python3 make.py    # rewrites fr/rank<R>.fr.json next to this file
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 30
T0 = 1_795_946_112_000_000_000
WORLD, PP = ["0", "default_pg"], ["1", "pp"]


def entry(record_id, pg_id, group, name, seq, p2p_seq, state, is_p2p):
    started = T0 + record_id * 3_000_000
    return {
        "record_id": record_id, "pg_id": pg_id, "process_group": group,
        "thread_name": "pt_main_thread", "thread_id": "139871140550464",
        "collective_seq_id": seq, "p2p_seq_id": p2p_seq, "op_id": record_id,
        "profiling_name": name, "time_created_ns": started - 40_000,
        "input_sizes": [[8, 4096, 1024]] if is_p2p else [[1]],
        "input_dtypes": ["BFloat16"] if is_p2p else ["Float"],
        "output_sizes": [[8, 4096, 1024]] if is_p2p else [[1]],
        "output_dtypes": ["BFloat16"] if is_p2p else ["Float"],
        "state": state,
        "time_discovered_started_ns": started if state != "scheduled" else 0,
        "time_discovered_completed_ns": started + 900_000 if state == "completed" else 0,
        "retired": state == "completed", "timeout_ms": 600_000, "is_p2p": is_p2p,
        **({"duration_ms": 0.9} if state == "completed" else {}),
    }


def dump(rank):
    exchange = "nccl:send 0->1" if rank == 0 else "nccl:recv 1<-0"
    entries = []
    for step in range(1, STEPS):
        entries.append(entry(len(entries), 1, PP, exchange, step - 1, step, "completed", True))
        entries.append(entry(len(entries), 0, WORLD, "nccl:all_reduce", step, 0, "completed", False))
    if rank == 0:  # the usual order: the send, then the all_reduce
        entries.append(entry(len(entries), 1, PP, exchange, STEPS - 1, STEPS, "started", True))
        entries.append(entry(len(entries), 0, WORLD, "nccl:all_reduce", STEPS, 0, "scheduled", False))
        world = (STEPS, STEPS - 1, STEPS - 1)
    else:  # the all_reduce launched before the recv
        entries.append(entry(len(entries), 0, WORLD, "nccl:all_reduce", STEPS, 0, "started", False))
        entries.append(entry(len(entries), 1, PP, exchange, STEPS - 1, STEPS, "scheduled", True))
        world = (STEPS, STEPS, STEPS - 1)
    top = {
        "version": "2.10", "comm_lib_version": "2.21.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
                      "1": {"name": "1", "desc": "pp", "ranks": "[0, 1]"}},
        "pg_status": {"0": dict(zip(("last_enqueued_collective", "last_started_collective",
                                     "last_completed_collective"), map(str, world))),
                      "1": {"last_enqueued_collective": str(STEPS - 1), "last_started_collective": str(STEPS - 1),
                            "last_completed_collective": str(STEPS - 1)}},
        "entries": entries,
        "nccl_comm_state": {},
    }
    return json.dumps(top, sort_keys=True, separators=(",", ":"))


def main():
    out = os.path.join(HERE, "fr")
    os.makedirs(out, exist_ok=True)
    for rank in range(2):
        with open(os.path.join(out, f"rank{rank}.fr.json"), "w") as handle:
            handle.write(dump(rank))


if __name__ == "__main__":
    main()
