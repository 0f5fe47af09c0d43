#!/usr/bin/env python
"""A two-rank Gloo job that walks through the torch.distributed calls the
in-job agent records. Rank 1 arrives late at each call (--late seconds), so
rank 0 waits in every one of them; a sampler thread on rank 0 keeps what the
agent says rank 0 is in (forensics.agent.current_state) and writes the list
to --out at the end, with the results of the calls (the agent must not
change them).

    torchrun --nproc-per-node 2 -m forensics.agent comm_patterns.py --out calls.json
"""

import argparse
import json
import os
import threading
import time
import warnings

import torch
import torch.distributed as dist

ACTIVATIONS = 4 << 20  # float32 elements: 16 MiB, so a Gloo send waits for its receive


class CallLog:
    """What the agent says this rank is in, sampled every few milliseconds."""

    def __init__(self):
        self.seen, self.stop = [], threading.Event()

    def run(self):
        import forensics.agent as agent

        while not self.stop.is_set():
            state = agent.current_state(threshold_ns=30_000_000)
            if state["current_op"] != "compute":
                entry = {k: state.get(k) for k in ("current_op", "group", "group_desc", "op_seq", "peers", "async",
                                                   "any_source")}
                entry["site"] = next((f for f in reversed(state.get("stack", [])) if "comm_patterns.py" in f), "")
                if not self.seen or self.seen[-1] != entry:
                    self.seen.append(entry)
            time.sleep(0.005)


def arrive(late):
    if dist.get_rank() == 1:
        time.sleep(late)


def sync_gradients(grads, late):
    arrive(late)
    dist.all_reduce(grads)


def sync_gradients_overlapped(grads, late):
    arrive(late)
    work = dist.all_reduce(grads, async_op=True)
    work.wait()


def broadcast_parameters(params, late):
    arrive(late)
    dist.broadcast(params, src=1)


def gather_shards(shard, late):
    arrive(late)
    out = torch.empty(shard.numel() * dist.get_world_size())
    dist.all_gather_into_tensor(out, shard)
    return out


def reduce_shards(shards, late):
    arrive(late)
    dist.all_reduce_coalesced(shards)


def exchange_experts(tokens, late):
    arrive(late)
    out = torch.empty_like(tokens)
    dist.all_to_all_single(out, tokens)
    return out


def end_of_epoch_sync(late):
    arrive(late)
    dist.monitored_barrier(timeout=__import__("datetime").timedelta(seconds=60))


def pipeline_send(acts, late):
    if dist.get_rank() == 0:
        dist.send(acts, dst=1)
    else:
        time.sleep(late)
        dist.recv(acts, src=0)


def pipeline_recv(acts, late):
    if dist.get_rank() == 0:
        dist.recv(acts, src=1)
    else:
        time.sleep(late)
        dist.send(acts, dst=0)


def pipeline_isend(acts, late):
    if dist.get_rank() == 0:
        dist.isend(acts, dst=1).wait()
    else:
        time.sleep(late)
        dist.recv(acts, src=0)


def pipeline_irecv(acts, late):
    if dist.get_rank() == 0:
        dist.irecv(acts, src=1).wait()
    else:
        time.sleep(late)
        dist.send(acts, dst=0)


def pipeline_batch(acts, late):
    peer = 1 - dist.get_rank()
    inbound = torch.empty_like(acts)
    if dist.get_rank() == 1:
        time.sleep(late)
    ops = [dist.P2POp(dist.irecv, inbound, peer), dist.P2POp(dist.isend, acts, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return inbound


def receive_from_any(acts, late):
    if dist.get_rank() == 0:
        dist.recv(acts)
    else:
        time.sleep(late)
        dist.send(acts, dst=0)


def sync_pair_group(grads, group, late):
    arrive(late)
    dist.all_reduce(grads, group=group)


def sync_world_explicitly(grads, late):
    arrive(late)
    dist.all_reduce(grads, group=dist.group.WORLD)


def collect_metrics(loss, late):
    arrive(late)
    gathered = [torch.empty_like(loss) for _ in range(dist.get_world_size())] if dist.get_rank() == 0 else None
    dist.gather(loss, gathered, dst=0)
    return [t.tolist() for t in gathered] if gathered else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--late", type=float, default=0.3)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)  # all_reduce_coalesced's deprecation notice
    dist.init_process_group("gloo")
    rank, late = dist.get_rank(), args.late
    pair = dist.new_group([0, 1], group_desc="pairs")
    log = CallLog()
    sampler = threading.Thread(target=log.run, daemon=True)
    if rank == 0:
        sampler.start()
    grads = torch.full((8,), float(rank + 1))
    results = {}
    sync_gradients(grads, late)
    results["all_reduce"] = grads.tolist()
    sync_gradients_overlapped(grads, late)
    broadcast_parameters(params := torch.full((4,), float(rank)), late)
    results["broadcast"] = params.tolist()
    results["all_gather_into_tensor"] = gather_shards(torch.full((2,), float(rank)), late).tolist()
    shards = [torch.ones(2), torch.ones(3)]
    reduce_shards(shards, late)
    results["all_reduce_coalesced"] = [s.tolist() for s in shards]
    results["all_to_all_single"] = exchange_experts(torch.arange(2.0) + 10 * rank, late).tolist()
    end_of_epoch_sync(late)
    acts = torch.full((ACTIVATIONS,), float(rank))
    pipeline_send(acts, late)
    pipeline_recv(acts, late)
    pipeline_isend(acts, late)
    pipeline_irecv(acts, late)
    results["batch_isend_irecv"] = float(pipeline_batch(torch.full((ACTIVATIONS,), float(rank)), late)[0])
    receive_from_any(acts, late)
    sync_pair_group(grads, pair, late)
    sync_world_explicitly(grads, late)
    results["gather"] = collect_metrics(torch.full((1,), float(rank)), late)
    dist.barrier()
    if rank == 0:
        log.stop.set()
        sampler.join()
        with open(args.out, "w") as handle:
            json.dump({"calls": log.seen, "results": results, "pid": os.getpid()}, handle, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
