"""Data-parallel step with a background metrics reporter thread that shares the
default process group with the training loop (the bug: two threads issue
collectives on one communicator, in an order that differs between ranks)."""
import os
import threading
import time

import torch
import torch.distributed as dist


def report_metrics(step, loss_sum, delay):
    time.sleep(delay)
    stats = torch.tensor([loss_sum, float(step), 1.0, 0.0])
    dist.all_reduce(stats)              # same default group as the gradients
    return stats


def sync_gradients(grads, delay):
    time.sleep(delay)
    dist.all_reduce(grads)
    grads /= dist.get_world_size()


def train():
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    torch.manual_seed(0)
    grads = torch.randn(1 << 16)
    dist.barrier()
    print(f"rank {rank}: warm-up done", flush=True)
    # Rank 0's reporter wakes up late, rank 1's early: the two collectives are
    # issued in a different order on the two ranks.
    reporter_delay, step_delay = (1.0, 0.0) if rank == 0 else (0.0, 1.0)
    reporter = threading.Thread(target=report_metrics, args=(1, 0.5, reporter_delay), name="metrics_reporter")
    reporter.start()
    sync_gradients(grads, step_delay)
    reporter.join()
    dist.destroy_process_group()


if __name__ == "__main__":
    train()
