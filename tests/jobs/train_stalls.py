#!/usr/bin/env python
"""A small data-parallel Gloo training loop in which one rank (--stall-rank)
stalls after warm-up the ways a real job does, while the others wait for it
in the gradient all_reduce:

  spin       decode_batch loops forever over a corrupt record (pure Python, busy CPU)
  sleep      fetch_remote_shard sleeps, waiting for a shard that never arrives
  long_eval  compute_eval_metrics computes for --eval-s seconds (or until
             --release-file exists), then training goes on
  none       no stall: every step takes about --step-s seconds of compute

Every rank prints "warm-up done" once the first all_reduce completed, and a
line per step after it (flushed), as training scripts log their loss.
With TORCH_FR_DEBUG_INFO_PIPE_FILE set, each rank serves <stem><rank>.pipe:
a write to it dumps the Flight Recorder to <TORCH_FR_DUMP_TEMP_FILE><rank>,
as ProcessGroupNCCL does (Gloo has no such pipe).

    torchrun --nproc-per-node 3 train_stalls.py --stall spin --stall-rank 1
"""

import argparse
import datetime
import os
import threading
import time

import torch
import torch.distributed as dist


def serve_debug_info_pipe(pipe, dump_path):
    if not os.path.exists(pipe):
        os.mkfifo(pipe)
    c10d = torch._C._distributed_c10d
    while True:
        with open(pipe, "rb") as reader:  # blocks until a writer opens it
            if not reader.read(1):
                continue
        try:
            data = c10d._dump_fr_trace(True, True, False)
            tmp = dump_path + ".tmp"
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, dump_path)
        except Exception as exc:  # keep serving
            print(f"flight recorder dump failed: {exc!r}", flush=True)


def start_debug_info_pipe(rank):
    stem = os.environ.get("TORCH_FR_DEBUG_INFO_PIPE_FILE", "")
    if stem:
        dump_path = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", "/tmp/nccl_trace_rank_") + str(rank)
        threading.Thread(target=serve_debug_info_pipe, args=(f"{stem}{rank}.pipe", dump_path),
                         name="debug_info_pipe", daemon=True).start()


def _decode_record(record):
    value = 0
    for byte in record:
        value = (value * 31 + byte) % 1_000_003
    return value


def decode_batch(records):
    """Retries a record whose checksum never matches: the loop the stalled rank spins in."""
    checksum = -1
    while checksum != 0:
        for record in records:
            checksum = _decode_record(record) + 1
        records = records[1:] + records[:1]
    return records


def fetch_remote_shard(step):
    while True:  # the shard never arrives
        time.sleep(3600)


def compute_eval_metrics(seconds, release_file):
    ends = time.monotonic() + seconds
    x = torch.randn(64, 64)
    while time.monotonic() < ends and not (release_file and os.path.exists(release_file)):
        x = torch.tanh(x @ x.T / 64)
    return float(x.sum())


def train_step(weights, step, seconds):
    ends = time.monotonic() + seconds
    loss = weights.sum()
    while time.monotonic() < ends:
        loss = (weights * weights).sum()
    return weights.grad if weights.grad is not None else torch.ones_like(weights) * float(loss) * 1e-6


def sync_gradients(grads):
    dist.all_reduce(grads)
    return grads / dist.get_world_size()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stall", choices=("spin", "sleep", "long_eval", "none"), default="none")
    parser.add_argument("--stall-rank", type=int, default=1)
    parser.add_argument("--stall-step", type=int, default=1)
    parser.add_argument("--step-s", type=float, default=0.05, help="compute per step")
    parser.add_argument("--eval-s", type=float, default=4.0)
    parser.add_argument("--release-file", default="")
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()

    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    start_debug_info_pipe(rank)
    weights = torch.randn(4096)
    sync_gradients(torch.ones(4096))
    print(f"[rank {rank}] warm-up done", flush=True)
    records = [bytes(range(256)) * 4 for _ in range(8)]
    for step in range(1, args.steps + 1):
        if rank == args.stall_rank and step == args.stall_step:
            if args.stall == "spin":
                decode_batch(records)
            elif args.stall == "sleep":
                fetch_remote_shard(step)
            elif args.stall == "long_eval":
                compute_eval_metrics(args.eval_s, args.release_file)
        grads = train_step(weights, step, args.step_s * (1.5 if rank == args.stall_rank else 1.0))
        grads = sync_gradients(grads.clone())
        weights -= 0.01 * grads
        print(f"[rank {rank}] step {step} loss {float(weights.sum()):.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
