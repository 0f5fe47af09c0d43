#!/usr/bin/env python3
"""Write the Flight Recorder dumps of this incident (synthetic, JSON form).

A 2-stage NCCL pipeline: per step, stage 0 (rank 0) posts one
`dist.isend(acts, dst=1)` per micro-batch (4) and drops the returned Work;
stage 1 (rank 1) was configured with 2 micro-batches per step, so it posts
only 2 matching `irecv` + `wait()`. Both stages all_reduce the loss for
logging once per step on the default group. NCCL matches sends in order,
so after 6 steps 12 of rank 0's 24 sends completed and 12 are outstanding
(p2p seq 13–24), one more pair every step. Nothing is hung yet.

Gloo does not record send/recv in Flight Recorder (shared/formats.md §7),
so this cannot be captured for real on this CPU-only machine: the dumps are
written in the `_dump_fr_trace_json` shape of torch 2.13 (dump version 2.10,
string counters, 0 for unset times) with `nccl:` profiling names.

`--in-flight` writes the healthy counterpart into ../synthetic_async_ops_in_flight:
rank 1 also uses 4 micro-batches, and the dump catches the last step's final two
transfers in flight (2 sends started on rank 0, the 2 matching recvs on rank 1).

    python3 make.py [--in-flight]
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1_795_945_835_000_000_000
STEPS = 6
SENDS_PER_STEP = 4
SIZE = [8, 1024, 4096]


def entry(record_id, seq, p2p_seq, name, state, is_p2p):
    created = T0 + record_id * 50_000_000
    return {
        "record_id": record_id, "pg_id": 0, "process_group": ["0", "default_pg"],
        "thread_name": "pt_main_thread", "thread_id": "140387119213440",
        "collective_seq_id": seq, "p2p_seq_id": p2p_seq, "op_id": record_id + 1,
        "profiling_name": f"nccl:{name}", "time_created_ns": created,
        "input_sizes": [SIZE], "input_dtypes": ["BFloat16"], "output_sizes": [SIZE], "output_dtypes": ["BFloat16"],
        "state": state,
        "time_discovered_started_ns": created + 10_000 if state != "scheduled" else 0,
        "time_discovered_completed_ns": created + 900_000 if state == "completed" else 0,
        "retired": state == "completed", "timeout_ms": 600_000, "is_p2p": is_p2p,
    }


def dumps(recvs_per_step, in_flight=0):
    matched = recvs_per_step * STEPS - in_flight  # sends that found their recv and finished, in order
    ranks = {0: [], 1: []}
    p2p = {0: 0, 1: 0}
    for step in range(1, STEPS + 1):
        for _ in range(SENDS_PER_STEP):
            p2p[0] += 1
            state = ("completed" if p2p[0] <= matched
                     else "started" if p2p[0] == matched + 1 or in_flight else "scheduled")
            ranks[0].append(("send 0->1", state, True, p2p[0]))
        for _ in range(recvs_per_step):
            p2p[1] += 1
            ranks[1].append(("recv 1<-0", "completed" if p2p[1] <= matched else "started", True, p2p[1]))
        for rank in ranks:
            ranks[rank].append(("all_reduce", "completed", False, step))
    out = {}
    for rank, items in ranks.items():
        entries = []
        for record_id, (name, state, is_p2p, seq) in enumerate(items):
            entries.append(entry(record_id, 0 if is_p2p else seq, seq if is_p2p else 0, name, state, is_p2p))
        status = {"0": {"last_enqueued_collective": str(STEPS), "last_started_collective": str(STEPS),
                        "last_completed_collective": str(STEPS)}}
        out[rank] = {"version": "2.10", "comm_lib_version": "2.21.5", "nccl_comm_state": {},
                     "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                     "pg_status": status, "entries": entries}
    return out


def main(argv):
    in_flight = "--in-flight" in argv
    folder = os.path.join(HERE, "..", "synthetic_async_ops_in_flight") if in_flight else HERE
    os.makedirs(os.path.join(folder, "fr_json"), exist_ok=True)
    for rank, data in (dumps(SENDS_PER_STEP, in_flight=2) if in_flight else dumps(2)).items():
        with open(os.path.join(folder, "fr_json", f"rank{rank}.fr.json"), "w", encoding="utf-8") as handle:
            json.dump(data, handle, sort_keys=True, indent=1)
            handle.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
