#!/usr/bin/env python3
"""Write the pod logs of this incident (synthetic: no GPU cluster here).

A Kubeflow PyTorchJob of two worker pods, each running
`LOGLEVEL=INFO torchrun --nnodes=2 --nproc-per-node=2 --tee=3
--rdzv-backend=c10d --rdzv-endpoint=pytorchjob-llama-worker-0:23456
--rdzv-id=llama-7b-ft train.py`; `kubectl logs` of each pod is saved as
<pod>.log. PyTorch 2.1.2, NCCL 2.18.6, NCCL_ASYNC_ERROR_HANDLING=0 (the
job's own setting: no teardown after a timeout, so the job stays hung).

Formats, as PyTorch 2.1 prints them:
- torchelastic's logging, `[%(asctime)s] %(name)s: [%(levelname)s] ` before
  every line of a message (launcher/api.py's launch configs, the dynamic
  rendezvous' "has joined round" line, agent/server/api.py's
  "Rendezvous complete for workers. Result:" block: restart_count,
  master_addr, master_port, group_rank, group_world_size, local_ranks,
  role_ranks, global_ranks, role_world_sizes, global_world_sizes);
- a worker's tee'd lines behind `[default<local_rank>]:` (TailLog's prefix
  `[{role}{local_rank}]:`);
- c10 lines without time or global rank (`[E ProcessGroupNCCL.cpp:475] `),
  WorkNCCL's `[Rank N] ` prefix (formats.md §2a).

What happened (the construction): the c10d rendezvous gave
pytorchjob-llama-worker-1 group_rank 0 (global ranks 0 and 1) and
pytorchjob-llama-worker-0 group_rank 1 (global ranks 2 and 3): the pod index
is not the node's rank. World size 4, pure data parallel. At step 4411
global rank 3 (worker-0, local rank 1) deadlocks in its data pipeline and
never calls the gradient all-reduce, SeqNum 4411 of the default group.
Ranks 0, 1 and 2 report the NCCL watchdog timeout after 1800 s and, with
NCCL_ASYNC_ERROR_HANDLING=0, stay hung; rank 3 prints nothing. The logs were
taken 45 minutes into the hang. Rank 3 is the rank everyone waits for.

    python3 make.py    # rewrites the two <pod>.log files next to this file
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_ID = "llama-7b-ft"
PODS = {"pytorchjob-llama-worker-0": 1, "pytorchjob-llama-worker-1": 0}  # pod → group_rank
AGENT_PID = {"pytorchjob-llama-worker-0": 52, "pytorchjob-llama-worker-1": 49}
STALLED = 3
SEQ, NUMEL = 4411, 131072000
RAN = {0: 1800412, 1: 1800398, 2: 1800431}


def log(stamp, name, level, message):
    return [f"[2024-03-12 {stamp}] {name}: [{level}] {line}" for line in message.split("\n")]


def agent(pod):
    group_rank = PODS[pod]
    ranks = [2 * group_rank, 2 * group_rank + 1]
    launcher, elastic, api = "torch.distributed.launcher.api", "torch.distributed.elastic", \
        "torch.distributed.elastic.agent.server.api"
    tmp = f"/tmp/torchelastic_{'9g50nxjq' if group_rank else 'p2r8k1d0'}/{RUN_ID}_tflt1tcd"
    configs = "\n".join([
        "Starting elastic_operator with launch configs:",
        "  entrypoint       : train.py",
        "  min_nodes        : 2",
        "  max_nodes        : 2",
        "  nproc_per_node   : 2",
        f"  run_id           : {RUN_ID}",
        "  rdzv_backend     : c10d",
        "  rdzv_endpoint    : pytorchjob-llama-worker-0:23456",
        "  rdzv_configs     : {'timeout': 900}",
        "  max_restarts     : 0",
        "  monitor_interval : 5",
        "  log_dir          : None",
        "  metrics_cfg      : {}",
        ""])
    result = "\n".join([
        "[default] Rendezvous complete for workers. Result:",
        "  restart_count=0",
        "  master_addr=pytorchjob-llama-worker-1",
        "  master_port=45813",
        f"  group_rank={group_rank}",
        "  group_world_size=2",
        "  local_ranks=[0, 1]",
        f"  role_ranks={ranks}",
        f"  global_ranks={ranks}",
        "  role_world_sizes=[4, 4]",
        "  global_world_sizes=[4, 4]",
        ""])
    node = f"{pod}_{AGENT_PID[pod]}_0"
    out = log("08:22:45,549", launcher, "INFO", configs)
    out += log("08:22:45,552", f"{elastic}.agent.server.local_elastic_agent", "INFO", f"log directory set to: {tmp}")
    out += log("08:22:45,552", api, "INFO", "[default] starting workers for entrypoint: python")
    out += log("08:22:45,552", api, "INFO", "[default] Rendezvous'ing worker group")
    out += log("08:22:58,104" if group_rank else "08:22:51,877", f"{elastic}.rendezvous.dynamic_rendezvous", "INFO",
               f"The node '{node}' has joined round 0 of the rendezvous '{RUN_ID}' as rank {group_rank} in a world "
               f"of size 2.")
    out += log("08:22:58,131", api, "INFO", result)
    out += log("08:22:58,131", api, "INFO", "[default] Starting worker group")
    out += log("08:22:58,132", f"{elastic}.agent.server.local_elastic_agent", "INFO",
               "Environment variable 'TORCHELASTIC_ENABLE_FILE_TIMER' not found. Do not start FileTimerServer.")
    for local in (0, 1):
        out += log("08:22:58,133", f"{elastic}.multiprocessing", "INFO",
                   f"Setting worker{local} reply file to: {tmp}/attempt_0/{local}/error.json")
    return out, ranks


def worker_lines(rank, local):
    tee = f"[default{local}]:"
    out = []
    if rank == 0:
        out += [f"{tee}step {s} | loss {1.9 - s / 20000:.4f} | 3.91 s/it" for s in (4380, 4390, 4400, 4410)]
    if rank in RAN:
        work = (f"WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn={NUMEL}, NumelOut={NUMEL}, "
                f"Timeout(ms)=1800000)")
        out += [f"{tee}[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation timeout: "
                f"{work} ran for {RAN[rank]} milliseconds before timing out.",
                f"{tee}[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the "
                f"asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete "
                f"data."]
    return out


def rank_shard(rank):
    return f"dataset shard {rank} of 4 (1,048,576 sequences of 4096 tokens)"


def main():
    for pod in PODS:
        out, ranks = agent(pod)
        out += [f"[default{local}]:Loaded {rank_shard(rank)}" for local, rank in enumerate(ranks)]
        lines = [worker_lines(rank, local) for local, rank in enumerate(ranks)]
        out += [line for line in lines[0] if "step " in line]  # rank 0's progress, then the hang
        timeouts = [[line for line in worker if "step " not in line] for worker in lines]
        for pair in zip(*[worker + [None] * (2 - len(worker)) for worker in timeouts]):
            out += [line for line in pair if line is not None]  # the two watchdogs' lines interleave
        with open(os.path.join(HERE, f"{pod}.log"), "w") as f:
            f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
