"""Data-parallel step with a background metrics reporter thread that issues its
all_reduce on the same default process group as the training loop, while rank 1
is still busy evaluating: rank 0 ends up with two threads blocked in collectives
on one communicator."""
import threading
import time

import torch
import torch.distributed as dist


def report_metrics(step, loss_sum):
    stats = torch.tensor([loss_sum, float(step), 1.0, 0.0])
    dist.all_reduce(stats)              # same default group as the gradients
    return stats


def sync_gradients(grads):
    dist.all_reduce(grads)
    grads /= dist.get_world_size()


def run_evaluation(rank, seconds):
    deadline = time.time() + seconds
    acc = torch.zeros(256, 256)
    while time.time() < deadline:
        acc = acc @ torch.eye(256) + 1e-3


def train():
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    grads = torch.randn(1 << 16)
    dist.barrier()
    print(f"rank {rank}: warm-up done", flush=True)
    if rank == 1:
        run_evaluation(rank, 600)
    reporter = threading.Thread(target=report_metrics, args=(1, 0.5), name="metrics_reporter")
    reporter.start()
    time.sleep(0.5)
    sync_gradients(grads)
    reporter.join()
    dist.destroy_process_group()


if __name__ == "__main__":
    train()
