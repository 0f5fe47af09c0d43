#!/usr/bin/env python
"""Small data-parallel / pipeline training job used to produce real hang artifacts.

Launched by torchrun (Gloo backend, CPU, 127.0.0.1).  A few healthy warm-up steps
all_reduce the gradients of a tiny MLP; at step ``--warmup-steps`` the job hits the
bug selected with ``--scenario``:

  p2p_cycle_2              2 ranks: both stages send activations before receiving.
  p2p_ring_4               4 ranks in a ring: every stage receives from the previous
                           stage before sending to the next one.
  collective_mismatch      rank 0 all_reduces gradients while ranks 1-3 broadcast
                           parameters from rank 0 (diverging weight-resync schedule).
  missing_rank_dataloader  rank 2's data loader prefetch thread stalls on a shard
                           read, so its main thread waits in load_next_batch while the
                           others wait in the gradient all_reduce.
  missing_rank_early_exit  rank 3's shard is shorter: it leaves the training loop,
                           then waits in a checkpoint barrier on a separate group while
                           the others wait in the next gradient all_reduce.
  checkpoint_io_stall      rank 0 writes a periodic checkpoint (torch.save) to storage
                           that stopped accepting writes, while the others wait in the
                           next gradient all_reduce.

Post-mortem scenarios (the job fails, or is ended the way an operator would end it):

  monitored_barrier_names_rank  3 ranks: at the end of the epoch rank 1 (--stall-rank) runs
                           a long evaluate() pass while ranks 0 and 2 wait in
                           end_of_epoch_sync -> dist.monitored_barrier(timeout=10 s);
                           rank 0's monitored barrier fails naming rank 1.
  sigkill_one_rank         3 ranks train in a long loop of gradient all_reduces
                           (--extra-steps large, --step-time per step; --stall-rank is a
                           straggler with --slow-rank-step-time) until the runner kills
                           that rank with SIGKILL; the others fail on closed sockets.
  pg_timeout_missing_rank  2 ranks, --pg-timeout 20: rank 1 polls for a data manifest that
                           never appears (wait_for_shard_manifest) instead of reaching the
                           gradient all_reduce, so rank 0's all_reduce times out.
  detail_mismatch          3 ranks under TORCH_DISTRIBUTED_DEBUG=DETAIL: rank 2 resumed
                           from a later checkpoint, so at step 3 it calls
                           broadcast_parameters while ranks 0 and 1 call sync_gradients.
  faulthandler_waiting_rank  2 ranks, --faulthandler: rank 1 runs a long evaluate() pass
                           while rank 0 waits in the gradient all_reduce, until the
                           runner sends rank 0 SIGABRT and faulthandler prints its stacks.
  (With --spawn N every scenario runs as N processes of torch.multiprocessing.spawn
  instead of under torchrun: the process index is the rank.)

  exception_one_rank       3 ranks: rank 1 (--stall-rank) reads a truncated record from its
                           shard, so its forward pass raises a shape error at step 3 while
                           the others wait in the gradient all_reduce.
  dataloader_worker_killed 3 ranks read their shards through torch.utils.data.DataLoader with
                           one worker process each; at step 3 the worker of rank 1
                           (--stall-rank) decodes an oversized sample (slow, growing memory)
                           while the others wait in the gradient all_reduce, until the
                           runner kills that worker with SIGKILL as the kernel's OOM killer
                           would: rank 1's DataLoader raises and rank 1 exits.

Process-group scenarios (subgroups made with dist.new_group and a group_desc):

  boundary_exchange_3      3 ranks, each sharing a boundary with the two others: three
                           2-rank groups halo_01, halo_12, halo_02. Warm-up steps reduce the
                           boundary gradients group by group in one global order; from step 3
                           (--warmup-steps) the overlapped schedule reduces the boundary with
                           the next rank first, so 0 waits in halo_01 for 1, 1 in halo_12 for
                           2 and 2 in halo_02 for 0. Run it with TORCH_DISTRIBUTED_DEBUG=DETAIL
                           too: the wrapper's pre-checks wait the same way.
  pp_dp_cross_group        4 ranks, 2 pipeline stages x 2 data-parallel replicas: dp groups
                           dp_stage0 {0,1} and dp_stage1 {2,3}, pipeline groups pp_replica0
                           {0,2} and pp_replica1 {1,3}. From step 3 ranks 1 and 2 run with
                           overlapped gradient sync (reduce before the stage exchange), ranks 0
                           and 3 without: 0 sends to 2 (pp_replica0), 2 all_reduces dp_stage1
                           waiting for 3, 3 receives from 1 (pp_replica1), 1 all_reduces
                           dp_stage0 waiting for 0.

Environment (set by the launcher / capture runner):
  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT   from torchrun
  TORCH_FR_BUFFER_SIZE      flight recorder ring size (e.g. 2000)
  JOB_OUTDIR                where flight recorder dumps go (fr/, fr_json/)
  FR_DUMP_REQUEST           a file; when it appears (or its mtime changes) every rank
                            writes a fresh flight recorder dump
  FR_IDLE_DUMP_S            dump once after the job made no progress for this long
  TORCH_FR_DEBUG_INFO_PIPE_FILE, TORCH_FR_DUMP_TEMP_FILE
                            serve <stem><rank>.pipe as ProcessGroupNCCL does: a write to it
                            dumps the flight recorder to <TORCH_FR_DUMP_TEMP_FILE><rank>
"""

import argparse
import faulthandler
import os
import queue
import socket
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.utils.data
import torch.nn as nn

SCENARIOS = (
    "p2p_cycle_2",
    "p2p_ring_4",
    "collective_mismatch",
    "missing_rank_dataloader",
    "missing_rank_early_exit",
    "checkpoint_io_stall",
    "monitored_barrier_names_rank",
    "sigkill_one_rank",
    "pg_timeout_missing_rank",
    "detail_mismatch",
    "faulthandler_waiting_rank",
    "exception_one_rank",
    "dataloader_worker_killed",
    "boundary_exchange_3",
    "pp_dp_cross_group",
)

ACTIVATION_MIB = 16
PG_TIMEOUT = timedelta(seconds=600)
BARRIER_TIMEOUT = timedelta(seconds=10)


# --------------------------------------------------------------------------- logging

def log(msg):
    rank = os.environ.get("RANK", "?")
    print(f"[rank {rank}] {time.strftime('%H:%M:%S')} {msg}", flush=True)


class Progress:
    """Last time the training loop made progress (read by the dump hook)."""

    def __init__(self):
        self.last = time.time()
        self.step = -1
        self.phase = "init"

    def mark(self, step, phase):
        self.step = step
        self.phase = phase
        self.last = time.time()


PROGRESS = Progress()


# --------------------------------------------------------------------------- flight recorder hook

def _atomic_write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_flight_recorder_dump(outdir, rank, reason, subdir="fr"):
    c10d = torch._C._distributed_c10d
    pickled = c10d._dump_fr_trace(True, True, False)
    as_json = c10d._dump_fr_trace_json(True, False)
    json_dir = "fr_json" if subdir == "fr" else subdir + "_json"
    _atomic_write(os.path.join(outdir, subdir, f"nccl_trace_rank_{rank}"), pickled)
    _atomic_write(os.path.join(outdir, json_dir, f"rank{rank}.fr.json"), as_json)
    log(f"flight recorder dump written ({reason}) step={PROGRESS.step} phase={PROGRESS.phase}")


def debug_dump_hook(outdir, rank, request_path, idle_dump_s):
    """Background thread: dump the flight recorder on request or when the job is idle."""
    dumped_idle = False
    handled_mtime = None
    if request_path and os.path.exists(request_path):
        handled_mtime = os.stat(request_path).st_mtime  # stale request from an old run
    while True:
        time.sleep(0.5)
        requested = False
        if request_path:
            try:
                mtime = os.stat(request_path).st_mtime
                requested = mtime != handled_mtime
            except FileNotFoundError:
                mtime = None
        idle_s = time.time() - PROGRESS.last
        try:
            if requested:
                handled_mtime = mtime
                write_flight_recorder_dump(outdir, rank, "request")
            elif not dumped_idle and idle_s > idle_dump_s:
                dumped_idle = True
                write_flight_recorder_dump(outdir, rank, f"idle {idle_s:.1f}s")
        except Exception as exc:  # keep the watchdog alive
            log(f"flight recorder dump failed: {exc!r}")


def serve_debug_info_pipe(pipe, dump_path):
    """What ProcessGroupNCCL does for TORCH_FR_DEBUG_INFO_PIPE_FILE (Gloo has
    no such pipe): a FIFO <stem><rank>.pipe; anything written to it asks for
    a Flight Recorder dump to <TORCH_FR_DUMP_TEMP_FILE><rank>."""
    if not os.path.exists(pipe):
        os.mkfifo(pipe)
    c10d = torch._C._distributed_c10d
    while True:
        with open(pipe, "rb") as reader:  # blocks until a writer opens it
            if not reader.read(1):
                continue
        try:  # quiet, as ProcessGroupNCCL is below TORCH_CPP_LOG_LEVEL=INFO
            _atomic_write(dump_path, c10d._dump_fr_trace(True, True, False))
        except Exception as exc:  # keep serving
            log(f"flight recorder dump failed: {exc!r}")


def start_debug_dump_hook():
    stem = os.environ.get("TORCH_FR_DEBUG_INFO_PIPE_FILE", "")
    if stem:
        rank = dist.get_rank()
        dump_path = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", "/tmp/nccl_trace_rank_") + str(rank)
        threading.Thread(target=serve_debug_info_pipe, args=(f"{stem}{rank}.pipe", dump_path),
                         name="debug_info_pipe", daemon=True).start()
    outdir = os.environ.get("JOB_OUTDIR", "/srv/job/out")
    request_path = os.environ.get("FR_DUMP_REQUEST", "")
    idle_dump_s = float(os.environ.get("FR_IDLE_DUMP_S", "5"))
    t = threading.Thread(
        target=debug_dump_hook,
        args=(outdir, dist.get_rank(), request_path, idle_dump_s),
        name="debug_dump_hook",
        daemon=True,
    )
    t.start()
    return t


# --------------------------------------------------------------------------- model and data

class TinyModel(nn.Module):
    def __init__(self, d_in=64, d_hidden=256, d_out=16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_hidden), nn.ReLU(),
            nn.Linear(d_hidden, d_out),
        )

    def forward(self, x):
        return self.net(x)


class ShardedLoader:
    """DataLoader-like iterator: a prefetch thread reads shard records into a queue."""

    def __init__(self, rank, num_batches, batch_size=32, d_in=64, d_out=16,
                 stall_at=None, corrupt_at=None):
        self.rank = rank
        self.num_batches = num_batches
        self.batch_size = batch_size
        self.d_in = d_in
        self.d_out = d_out
        self.stall_at = stall_at
        self.corrupt_at = corrupt_at
        self.queue = queue.Queue(maxsize=2)
        self._stalled_fd = None
        self.worker = threading.Thread(target=self._prefetch_worker, name="batch_prefetch",
                                       daemon=True)
        self.worker.start()

    def read_shard_record(self, index):
        if self.stall_at is not None and index >= self.stall_at:
            # The shard lives on a storage mount that stopped answering: the read never
            # returns (modelled with a pipe nobody writes to).
            if self._stalled_fd is None:
                self._stalled_fd, self._writer_fd = os.pipe()
            os.read(self._stalled_fd, 1 << 20)
        g = torch.Generator().manual_seed(1000 * self.rank + index)
        d_in = self.d_in
        if self.corrupt_at is not None and index == self.corrupt_at:
            d_in -= 1  # a truncated record: one feature column short
        x = torch.randn(self.batch_size, d_in, generator=g)
        y = torch.randn(self.batch_size, self.d_out, generator=g)
        return x, y

    def _prefetch_worker(self):
        for index in range(self.num_batches):
            self.queue.put(self.read_shard_record(index))
        self.queue.put(None)  # end of shard


class ShardDataset(torch.utils.data.Dataset):
    """One rank's shard as a map-style dataset: each item is a whole batch."""

    def __init__(self, rank, num_batches, batch_size=32, d_in=64, d_out=16, heavy_at=None):
        self.rank, self.num_batches, self.batch_size = rank, num_batches, batch_size
        self.d_in, self.d_out, self.heavy_at = d_in, d_out, heavy_at

    def __len__(self):
        return self.num_batches

    def decode_sample(self, index):
        if self.heavy_at is not None and index == self.heavy_at:
            # An oversized sample: decoding it takes long and keeps growing the
            # worker's memory (modelled: the decode never finishes).
            buffers = []
            while True:
                buffers.append(bytearray(1 << 20))
                time.sleep(0.5)
        g = torch.Generator().manual_seed(1000 * self.rank + index)
        return torch.randn(self.batch_size, self.d_in, generator=g), torch.randn(self.batch_size, self.d_out,
                                                                                  generator=g)

    def __getitem__(self, index):
        return self.decode_sample(index)


class WorkerLoader:
    """torch.utils.data.DataLoader with one worker process, behind the `queue.get()`
    that load_next_batch uses."""

    def __init__(self, rank, num_batches, heavy_at=None):
        dataset = ShardDataset(rank, num_batches, heavy_at=heavy_at)
        self._batches = iter(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=1))
        self.queue = self

    def get(self):
        try:
            return next(self._batches)
        except StopIteration:
            return None


def load_next_batch(loader, step):
    PROGRESS.mark(step, "load_next_batch")
    return loader.queue.get()


def shard_sizes(world_size, scenario, total_steps, short_shard_steps):
    sizes = [total_steps] * world_size
    if scenario == "missing_rank_early_exit":
        # Uneven split of the dataset: the last rank's shard holds fewer batches.
        sizes[world_size - 1] = short_shard_steps
    return sizes


# --------------------------------------------------------------------------- communication

def sync_gradients(model, step):
    PROGRESS.mark(step, "sync_gradients")
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    dist.all_reduce(grads, op=dist.ReduceOp.SUM)
    grads /= dist.get_world_size()
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.grad.copy_(grads[offset:offset + n].view_as(p.grad))
        offset += n
    return grads


def broadcast_parameters(model, step, src=0):
    PROGRESS.mark(step, "broadcast_parameters")
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    dist.broadcast(flat, src=src)
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p))
            offset += n
    return flat


def send_activations(acts, dst, group=None):
    dist.send(acts, dst=dst, group=group)


def recv_activations(like, src, group=None):
    buf = torch.empty_like(like)
    dist.recv(buf, src=src, group=group)
    return buf


def pipeline_stage_exchange(acts, step, scenario):
    rank = dist.get_rank()
    world = dist.get_world_size()
    next_stage = (rank + 1) % world
    prev_stage = (rank - 1) % world
    PROGRESS.mark(step, "pipeline_stage_exchange")
    if scenario == "p2p_cycle_2":
        # Both stages push their activations first and only then receive: with a tensor
        # this large gloo's send waits for the matching recv, so each stage waits forever.
        log(f"step {step}: pipeline_stage_exchange: send {acts.numel() * 4 >> 20} MiB "
            f"to stage {next_stage}, then recv from stage {prev_stage}")
        send_activations(acts, next_stage)
        inbound = recv_activations(acts, prev_stage)
    else:
        # Ring schedule: every stage waits for its predecessor's activations before it
        # sends its own -- nobody goes first.
        log(f"step {step}: pipeline_stage_exchange: recv from stage {prev_stage}, "
            f"then send {acts.numel() * 4 >> 20} MiB to stage {next_stage}")
        inbound = recv_activations(acts, prev_stage)
        send_activations(acts, next_stage)
    return inbound


def make_parallel_groups(scenario, timeout):
    """Subgroups of the process-group scenarios, by name; every rank creates
    every group, in the same order (dist.new_group is collective)."""
    if scenario == "boundary_exchange_3":
        spec = [("halo_01", [0, 1]), ("halo_12", [1, 2]), ("halo_02", [0, 2])]
    elif scenario == "pp_dp_cross_group":
        spec = [("dp_stage0", [0, 1]), ("dp_stage1", [2, 3]),
                ("pp_replica0", [0, 2]), ("pp_replica1", [1, 3])]
    else:
        return {}
    groups = {}
    for name, ranks in spec:
        groups[name] = (dist.new_group(ranks=ranks, timeout=timeout, group_desc=name), ranks)
    return groups


def reduce_boundary_gradients(model, step, group, name):
    PROGRESS.mark(step, f"reduce_boundary_gradients {name}")
    halo = torch.cat([p.grad.reshape(-1)[:1024] for p in model.parameters()])
    dist.all_reduce(halo, op=dist.ReduceOp.SUM, group=group)
    return halo


def boundary_exchange(model, step, groups, overlapped):
    """Reduce the gradients this rank shares with each neighbour. The plain
    schedule walks the groups in one global order; the overlapped one starts
    with the boundary to the next rank (it is ready first)."""
    rank = dist.get_rank()
    mine = [(name, group) for name, (group, ranks) in groups.items() if rank in ranks]
    if overlapped:
        right = (rank + 1) % dist.get_world_size()
        mine.sort(key=lambda item: right not in groups[item[0]][1])
        log(f"step {step}: boundary_exchange (overlapped): {' then '.join(n for n, _ in mine)}")
    for name, group in mine:
        reduce_boundary_gradients(model, step, group, name)


def stage_exchange_and_sync(model, step, groups, overlap_grad_sync):
    """One pipeline step of a 2-stage x 2-replica job: stage 0 sends its
    activations to stage 1 of the same replica, then the stage's replicas
    all_reduce their gradients; with overlap_grad_sync the all_reduce comes
    first."""
    rank = dist.get_rank()
    stage, replica = divmod(rank, 2)
    dp_group = groups[f"dp_stage{stage}"][0]
    pp_group, pp_ranks = groups[f"pp_replica{replica}"]
    peer = next(r for r in pp_ranks if r != rank)
    acts = torch.full((ACTIVATION_MIB << 18,), float(rank))  # 16 MiB of float32

    def exchange():
        PROGRESS.mark(step, "stage_exchange")
        if stage == 0:
            log(f"step {step}: send_activations {ACTIVATION_MIB} MiB to stage 1 (rank {peer})")
            send_activations(acts, peer, pp_group)
        else:
            log(f"step {step}: recv_activations from stage 0 (rank {peer})")
            recv_activations(acts, peer, pp_group)

    def sync():
        PROGRESS.mark(step, "sync_stage_gradients")
        log(f"step {step}: sync_stage_gradients (dp_stage{stage} all_reduce)")
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(grads, op=dist.ReduceOp.SUM, group=dp_group)

    for part in ((sync, exchange) if overlap_grad_sync else (exchange, sync)):
        part()


def load_resume_step(rank, scenario):
    """Global step this rank resumed from (read from the checkpoint it loaded)."""
    if scenario == "collective_mismatch" and rank != 0:
        # Ranks 1..3 picked up the checkpoint written one step later than rank 0's.
        return 1
    if scenario == "detail_mismatch" and rank == 2:
        # Rank 2 picked up the checkpoint written one step later than ranks 0 and 1.
        return 1
    return 0


def should_resync_weights(step, resume_step, resync_every):
    # Weights are re-broadcast from rank 0 every `resync_every` global steps.  Each rank
    # computes the schedule from its own resume step, so if they resumed from different
    # checkpoints they disagree on which step resyncs.
    global_step = resume_step + step
    return global_step > 0 and global_step % resync_every == 0


# --------------------------------------------------------------------------- checkpointing

def save_checkpoint(model, step, groups):
    PROGRESS.mark(step, "save_checkpoint")
    path = os.path.join(os.environ.get("JOB_OUTDIR", "/srv/job/out"), "ckpt")
    os.makedirs(path, exist_ok=True)
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()},
               os.path.join(path, f"model_rank{dist.get_rank()}.pt"))
    # Wait until every rank has flushed its checkpoint shard.
    dist.barrier(group=groups["ckpt"])


def save_periodic_checkpoint(model, step):
    """Rank 0 writes a full checkpoint every few steps before the next all_reduce."""
    PROGRESS.mark(step, "save_periodic_checkpoint")
    path = os.path.join(os.environ.get("JOB_OUTDIR", "/srv/job/out"), "ckpt_periodic")
    os.makedirs(path, exist_ok=True)
    target = os.path.join(path, f"step{step}.pt")
    if not os.path.exists(target):
        # The storage mount stopped accepting writes: opening the file never returns
        # (modelled with a FIFO nobody reads).
        os.mkfifo(target)
    log(f"step {step}: save_periodic_checkpoint -> torch.save({target})")
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, target)


# --------------------------------------------------------------------------- evaluation

def fetch_validation_batch(rank, index, slow):
    if slow:
        # This rank's validation shard sits on a slow remote store: each read takes a
        # while (modelled with a sleep) and the shard is huge.
        time.sleep(0.5)
    g = torch.Generator().manual_seed(7000 + 1000 * rank + index)
    return torch.randn(256, 64, generator=g)


def evaluate(model, step, slow, max_batches=4, slow_batches=100000):
    """Validation pass over this rank's held-out shard."""
    PROGRESS.mark(step, "evaluate")
    rank = dist.get_rank()
    n = slow_batches if slow else max_batches
    log(f"step {step}: evaluate: {n} validation batches")
    model.eval()
    total = 0.0
    with torch.no_grad():
        for index in range(n):
            x = fetch_validation_batch(rank, index, slow)
            total += model(x).square().mean().item()
    model.train()
    log(f"step {step}: evaluate done: val {total / n:.4f}")
    return total / n


def end_of_epoch_sync(step):
    """Make sure every rank finished the epoch (and its evaluation) before going on."""
    PROGRESS.mark(step, "end_of_epoch_sync")
    log(f"step {step}: end_of_epoch_sync -> monitored_barrier("
        f"timeout={BARRIER_TIMEOUT.total_seconds():.0f}s)")
    dist.monitored_barrier(timeout=BARRIER_TIMEOUT)


def end_of_epoch(model, step, args):
    evaluate(model, step, slow=dist.get_rank() == args.stall_rank)
    end_of_epoch_sync(step)


def wait_for_shard_manifest(step):
    """Before the next stage of the data schedule, wait until the data pipeline has
    staged the manifest of this rank's next shard (it never does)."""
    PROGRESS.mark(step, "wait_for_shard_manifest")
    path = os.path.join(os.environ.get("JOB_OUTDIR", "/srv/job/out"), "manifests",
                        f"shard{dist.get_rank()}.step{step}.json")
    log(f"step {step}: wait_for_shard_manifest {os.path.basename(path)}")
    while not os.path.exists(path):
        time.sleep(1.0)


def finalize_run(model, step, groups):
    log(f"step {step}: end of shard, finalize_run -> save_checkpoint")
    save_checkpoint(model, step, groups)


# --------------------------------------------------------------------------- training

def train_step(step, model, opt, batch, groups, args):
    rank = dist.get_rank()
    x, y = batch
    opt.zero_grad(set_to_none=False)
    out = model(x)
    loss = nn.functional.mse_loss(out, y)
    loss.backward()
    step_time = args.step_time
    if rank == args.stall_rank and args.slow_rank_step_time:
        step_time = args.slow_rank_step_time  # a straggler: a slower (throttled) host
    if step_time:
        time.sleep(step_time)  # stands in for a bigger model's forward/backward

    bug_step = step == args.warmup_steps
    if bug_step and rank == args.stall_rank:
        if args.scenario == "pg_timeout_missing_rank":
            wait_for_shard_manifest(step)
        elif args.scenario == "faulthandler_waiting_rank":
            evaluate(model, step, slow=True)
    if bug_step and args.scenario in ("p2p_cycle_2", "p2p_ring_4"):
        acts = torch.full((ACTIVATION_MIB << 18,), float(rank))  # 16 MiB of float32
        pipeline_stage_exchange(acts, step, args.scenario)
    if args.scenario == "boundary_exchange_3":
        boundary_exchange(model, step, groups["parallel"], overlapped=step >= args.warmup_steps)
    if args.scenario == "pp_dp_cross_group":
        # Ranks 1 and 2 were restarted with --overlap-grad-sync; 0 and 3 were not.
        overlap = step >= args.warmup_steps and rank in (1, 2)
        stage_exchange_and_sync(model, step, groups["parallel"], overlap)
    if bug_step and args.scenario == "checkpoint_io_stall" and rank == 0:
        save_periodic_checkpoint(model, step)
    if should_resync_weights(step, args.resume_step, args.resync_every):
        log(f"step {step}: broadcast_parameters (weight resync from rank 0)")
        broadcast_parameters(model, step, src=0)
    else:
        if bug_step:
            log(f"step {step}: sync_gradients (all_reduce)")
        sync_gradients(model, step)
    opt.step()
    return loss.item()


def train(args):
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.manual_seed(0)
    model = TinyModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # Separate gloo group used to coordinate checkpoint writes.
    groups = {"ckpt": dist.new_group(ranks=list(range(world)), timeout=args.pg_timeout,
                                     backend="gloo")}
    groups["parallel"] = make_parallel_groups(args.scenario, args.pg_timeout)
    total_steps = args.warmup_steps + args.extra_steps
    sizes = shard_sizes(world, args.scenario, total_steps, args.warmup_steps)
    stall_at = args.warmup_steps if (args.scenario == "missing_rank_dataloader"
                                     and rank == args.stall_rank) else None
    corrupt_at = args.warmup_steps if (args.scenario == "exception_one_rank"
                                       and rank == args.stall_rank) else None
    if args.scenario == "dataloader_worker_killed":
        loader = WorkerLoader(rank, sizes[rank], heavy_at=args.warmup_steps if rank == args.stall_rank else None)
    else:
        loader = ShardedLoader(rank, sizes[rank], stall_at=stall_at, corrupt_at=corrupt_at)
    log(f"shard has {sizes[rank]} batches")

    step = 0
    while True:
        if step == args.warmup_steps:
            log(f"warm-up done ({args.warmup_steps} steps)")
            if args.scenario == "monitored_barrier_names_rank":
                end_of_epoch(model, step, args)
        if step >= args.warmup_steps and not args.step_time:
            log(f"step {step}: load_next_batch")
        batch = load_next_batch(loader, step)
        if batch is None:
            finalize_run(model, step, groups)
            break
        loss = train_step(step, model, opt, batch, groups, args)
        PROGRESS.mark(step, "step_done")
        log(f"step {step}: loss {loss:.4f}")
        step += 1
        if step >= total_steps:
            finalize_run(model, step, groups)
            break
    return step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", choices=SCENARIOS, required=True)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--extra-steps", type=int, default=3)
    parser.add_argument("--stall-rank", type=int, default=2)
    parser.add_argument("--resync-every", type=int, default=4)
    parser.add_argument("--step-time", type=float, default=0.0,
                        help="extra seconds of compute per training step")
    parser.add_argument("--slow-rank-step-time", type=float, default=0.0,
                        help="--step-time of --stall-rank when it is slower than the others")
    parser.add_argument("--pg-timeout", type=float, default=PG_TIMEOUT.total_seconds(),
                        help="process-group timeout in seconds")
    parser.add_argument("--faulthandler", action="store_true",
                        help="faulthandler.enable(): dump the stacks on a fatal signal")
    parser.add_argument("--spawn", type=int, default=0, metavar="N",
                        help="start N processes with torch.multiprocessing.spawn (MASTER_ADDR and "
                             "MASTER_PORT from the environment), as DDP tutorials do, instead of torchrun")
    args = parser.parse_args()
    if args.spawn:
        import torch.multiprocessing as mp

        mp.spawn(spawned_worker, args=(args.spawn, sys.argv[1:]), nprocs=args.spawn)
        return 0
    args.pg_timeout = timedelta(seconds=args.pg_timeout)
    if args.faulthandler:
        faulthandler.enable()

    dist.init_process_group(backend="gloo", timeout=args.pg_timeout)
    rank = dist.get_rank()
    args.resume_step = load_resume_step(rank, args.scenario)
    log(f"init done: world_size={dist.get_world_size()} host={socket.gethostname()} "
        f"pid={os.getpid()} scenario={args.scenario}")
    start_debug_dump_hook()
    try:
        steps = train(args)
    except Exception as exc:
        log(f"training failed: {exc!r}")
        try:
            write_flight_recorder_dump(os.environ.get("JOB_OUTDIR", "/srv/job/out"), rank,
                                       "after error", subdir="fr_after_error")
        except Exception as dump_exc:
            log(f"flight recorder dump after error failed: {dump_exc!r}")
        raise
    log(f"training finished after {steps} steps")
    dist.destroy_process_group()
    return 0


def spawned_worker(index, nprocs, argv):
    """One process of an mp.spawn job: its process index is its rank."""
    os.environ.update({"RANK": str(index), "LOCAL_RANK": str(index), "WORLD_SIZE": str(nprocs)})
    at = argv.index("--spawn")
    sys.argv = [sys.argv[0]] + argv[:at] + argv[at + 2:]
    main()


if __name__ == "__main__":
    sys.exit(main())
