"""Simulated ranks for `forensics watch` at scale: ranks published from a few
processes to one Redis or TCPStore, through the agent's own store code and
in the shape its publisher sends (forensics/agent.py).

    python benchmarks/sim_ranks.py --store URL --world 10000 --ranks 0:2500 --plan plan.json --out result.json

Once connected it writes result.json.ready and waits for the plan (JSON), which
holds wall-clock times every process follows:
  hello_at      each rank publishes that it computes (its pid and host)
  churn_until   until then, `churn_rate` publications a second per process: a rank
                waits in the step's all_reduce past the threshold, then computes again
                (a healthy job with stragglers)
  storm_at      every rank but the cycle's enters the next all_reduce and waits
  inject_at     the two cycle ranks enter a send to each other: a P2P cycle
The result file says when each of this process's cycle ranks was published.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from forensics.live.stores import StoreDown, open_store  # noqa: E402

STEP_S = 0.2


def state(op, seq, world, host, pid, peer=None, done=0):
    now = time.time()
    out = {"current_op": op, "pid": pid, "host": host, "time": now, "done": done}
    if op != "compute":
        out.update(group="0", op_seq=seq, state="started", elapsed_ms=50, entered_at=now, group_span=[0, world, 1],
                   group_desc="default_pg", progress={"0": {"started": seq, "completed": seq - 1}}, **{"async": False})
        if peer is not None:
            out["peers"] = [peer]
    return json.dumps(out)


def wait_until(t):
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def connect(url):
    deadline = time.time() + 60
    while True:
        try:
            return open_store(url)
        except StoreDown:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--ranks", required=True, help="FIRST:STOP")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    first, stop = map(int, args.ranks.split(":"))
    store = connect(args.store)
    with open(args.out + ".ready", "w"):
        pass  # connected: the runner writes the plan once every simulator is
    while not os.path.exists(args.plan):
        time.sleep(0.05)
    with open(args.plan) as handle:
        plan = json.load(handle)
    mine = range(first, stop)
    cycle = [r for r in plan["cycle"] if first <= r < stop]
    host, base_pid = socket.gethostname(), 100000 + first
    rng = random.Random(first)
    published = 0

    def publish(rank, payload):
        nonlocal published
        for _ in range(50):
            try:
                store.publish(rank, payload, True)
                published += 1
                return
            except StoreDown:
                time.sleep(0.1)
        raise SystemExit(f"sim: {args.store} does not answer")

    wait_until(plan["hello_at"])
    hello_started = time.time()
    for rank in mine:
        publish(rank, state("compute", 0, args.world, host, base_pid + rank - first))
    hello_took = time.time() - hello_started
    churned = published
    waiting: dict[int, float] = {}
    others = [r for r in mine if r not in plan["cycle"]]
    gap = 1.0 / plan["churn_rate"] if plan.get("churn_rate") else None
    while gap and time.time() < plan["churn_until"]:
        now = time.time()
        for rank, since in list(waiting.items()):
            if now - since > STEP_S:
                publish(rank, state("compute", 0, args.world, host, base_pid + rank - first))
                del waiting[rank]
        rank = rng.choice(others)
        if rank not in waiting:
            step = 1 + int((now - plan["hello_at"]) / STEP_S)
            publish(rank, state("all_reduce", step, args.world, host, base_pid + rank - first, done=step - 1))
            waiting[rank] = now
        time.sleep(gap)
    for rank in waiting:
        publish(rank, state("compute", 0, args.world, host, base_pid + rank - first))
    churned = published - churned
    seq = plan["seq"]
    wait_until(plan["storm_at"])
    storm_started = time.time()
    for rank in others:
        publish(rank, state("all_reduce", seq, args.world, host, base_pid + rank - first, done=seq - 1))
    storm_took = time.time() - storm_started
    wait_until(plan["inject_at"])
    injected = {}
    a, b = plan["cycle"]
    for rank in cycle:
        publish(rank, state("send", seq, args.world, host, base_pid + rank - first, peer=b if rank == a else a,
                            done=seq - 1))
        injected[rank] = time.time()
    with open(args.out, "w") as handle:
        json.dump({"published": published, "injected": injected, "storm_s": storm_took, "hello_s": hello_took,
                   "churn_publications": churned}, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
