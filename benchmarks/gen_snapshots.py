"""Generate watchdog snapshots of N ranks for the engine benchmark.

    python benchmarks/gen_snapshots.py SCENARIO N OUT.json

Scenarios: healthy (everyone in the same all_reduce but a few computing),
missing (one rank loading data, two snapshots' worth of stuck signal via
"hung": true), p2p_cycle (one pipeline ring of N recv-before-send ranks),
mismatch (one rank in broadcast while the rest all_reduce).
"""

from __future__ import annotations

import json
import sys

SCENARIOS = ("healthy", "missing", "p2p_cycle", "mismatch")


def snapshot(scenario: str, n: int) -> dict:
    ranks = {}
    seq = 4242
    if scenario == "p2p_cycle":
        for r in range(n):
            ranks[str(r)] = {"current_op": "recv", "peers": [(r - 1) % n], "op_seq": seq,
                             "host": f"node{r // 8:05d}", "pid": 10000 + r % 8}
        return {"schema": "forensics.snapshot/1", "ranks": ranks}
    for r in range(n):
        ranks[str(r)] = {"current_op": "all_reduce", "group": "0", "op_seq": seq,
                         "host": f"node{r // 8:05d}", "pid": 10000 + r % 8,
                         "stack": ["train_step (train.py:188)", "sync_gradients (train.py:140)",
                                   "all_reduce (torch/distributed/distributed_c10d.py:2950)"]}
    out = {"schema": "forensics.snapshot/1", "groups": {"0": list(range(n))}, "ranks": ranks}
    if scenario == "healthy":
        for r in range(0, n, max(1, n // 7)):
            ranks[str(r)] = {"current_op": "compute", "op_seq": seq - 1}
    elif scenario == "missing":
        ranks[str(n // 3)] = {"current_op": "data_loading", "op_seq": seq - 1,
                              "stack": ["train_step (train.py:180)", "load_next_batch (data.py:77)"]}
        out["hung"] = True
    elif scenario == "mismatch":
        ranks[str(n - 1)]["current_op"] = "broadcast"
    else:
        raise SystemExit(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    return out


def main(argv):
    scenario, n, path = argv[1], int(argv[2]), argv[3]
    with open(path, "w") as handle:
        json.dump(snapshot(scenario, n), handle, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv)
