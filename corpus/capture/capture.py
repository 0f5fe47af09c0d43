#!/usr/bin/env python3
"""Run a real hung torch.distributed job and capture it like an on-call engineer would.

    python3 capture.py SCENARIO OUTDIR [--venv /opt/trainenv]

SCENARIO is one of the keys of SCENARIOS below (with or without the ``real_`` prefix).
The runner copies train.py (next to this file) to /srv/job/train.py, launches it with
torchrun on 127.0.0.1 from /srv/job, waits until every rank is hung, then captures from
every rank:

    rank<R>.pyspy.txt    py-spy dump --pid P
    rank<R>.pyspy.json   py-spy dump --pid P --json
    rank<R>.native.txt   py-spy dump --pid P --native
    rank<R>.locals.txt   py-spy dump --pid P --locals
    rank<R>.gdb.txt      gdb -p P -batch -ex "set pagination off" -ex "thread apply all bt"
    rank<R>.gdb_pybt.txt the same with CPython's gdb extension: thread apply all py-bt
    <file>.err           the capturing tool's stderr, where not empty

and then ends the processes it started (by pid: SIGTERM, then SIGKILL), and collects
torchrun's console (torchrun.log), the per-rank logs (rank<R>.stdout.log / .stderr.log),
the job's Flight Recorder dumps (fr/, fr_json/, fr_after_error*/), the output of
PyTorch's own Flight Recorder analyzer (fr_analyzer*.txt), pid_map.json and expected.yaml.

Every captured file is raw tool output; files over 200 KB are gzip -9'd (noted in
expected.yaml).  Only the standard library is used here; torch/py-spy come from --venv.

Scenarios with "mode": "postmortem" instead let the job fail, or end it the way the
scenario says (a signal to one rank, by pid), with torchrun's --tee console; they take
py-spy dumps only where the scenario asks, before the end, and then collect what is on
disk: torchrun.log, rank<R>.stdout.log / .stderr.log, the fr*/ dumps, pid_map.json and
expected.yaml (see README.md, "Post-mortem mode").
"""

import argparse
import fnmatch
import glob
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_DIR = "/srv/job"
JOB_SCRIPT = os.path.join(JOB_DIR, "train.py")
JOB_OUT = os.path.join(JOB_DIR, "out")
JOB_LOGS = os.path.join(JOB_DIR, "logs")
REQ_DIR = "/tmp/fr_job"
DUMP_REQUEST = os.path.join(REQ_DIR, "dump_request")
GZIP_OVER = 200 * 1024
# The hang scenarios need gdb's py-bt, which works with the pyenv-built interpreter the
# venv in /opt was made from. The post-mortem scenarios keep tracebacks, faulthandler
# dumps and torchrun's log lines, which print the interpreter's and torch's file paths:
# they run from a venv made at a neutral path from the system python, so that nothing
# of this machine's /opt, /root or /work ends up in the captured files.
HANG_VENV = "/opt/trainenv"
POSTMORTEM_VENV = "/srv/trainenv"

# One job, killed the same way, under torchrun and under mp.spawn: a long loop of gradient
# all_reduces, rank 2 a straggler; once py-spy shows ranks 0 and 1 waiting in the
# all_reduce for rank 2, rank 2 is killed at once.
SIGKILL_JOB_ARGS = ["--stall-rank", "2", "--extra-steps", "100000", "--step-time", "0.05",
                    "--slow-rank-step-time", "0.3"]
SIGKILL_ACTIONS = [
    {"wait_log": {0: "warm-up done", 1: "warm-up done", 2: "warm-up done"}},
    {"sleep": 3.0},
    {"pyspy": "all", "until": {0: "all_reduce (", 1: "all_reduce ("}, "tries": 30},
    {"signal": "SIGKILL", "rank": 2},
    {"wait_exit": 90},
]

SCENARIOS = {
    "real_p2p_cycle_2": {
        "job_scenario": "p2p_cycle_2",
        "nproc": 2,
        "verdict": "deadlock",
        "culprit_ranks": [0, 1],
        "cycle": [0, 1, 0],
        "expect_main": {0: "send_activations", 1: "send_activations"},
        "how": (
            "2-stage pipeline job (train.py under torchrun, gloo, 2 ranks). After 3 healthy "
            "warm-up steps (load_next_batch -> train_step -> sync_gradients all_reduce), step 3 "
            "calls pipeline_stage_exchange, where both stages call send_activations (blocking "
            "dist.send of a 16 MiB activation tensor) to each other before recv_activations. "
            "Gloo's send of a tensor this large waits until the peer posts the matching recv, "
            "so rank 0 waits for rank 1 and rank 1 waits for rank 0: a circular wait."
        ),
    },
    "real_p2p_ring_4": {
        "job_scenario": "p2p_ring_4",
        "nproc": 4,
        "verdict": "deadlock",
        "culprit_ranks": [0, 1, 2, 3],
        "cycle": [0, 3, 2, 1, 0],
        "expect_main": {r: "recv_activations" for r in range(4)},
        "how": (
            "4-stage pipeline job in a ring (train.py under torchrun, gloo, 4 ranks). After 3 "
            "healthy warm-up steps with gradient all_reduces, step 3 calls "
            "pipeline_stage_exchange, where every stage first calls recv_activations "
            "(blocking dist.recv from stage r-1) and only then would send_activations to "
            "stage r+1. Nobody sends first, so every rank waits in recv for its predecessor: "
            "0 waits for 3, 3 for 2, 2 for 1, 1 for 0."
        ),
    },
    "real_collective_mismatch": {
        "job_scenario": "collective_mismatch",
        "nproc": 4,
        "verdict": "collective_mismatch",
        "culprit_ranks": [0],
        "expect_main": {0: "sync_gradients", 1: "broadcast_parameters",
                        2: "broadcast_parameters", 3: "broadcast_parameters"},
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 4 ranks, no "
            "TORCH_DISTRIBUTED_DEBUG). Weights are re-broadcast from rank 0 every 4 global "
            "steps (should_resync_weights); ranks 1-3 resumed from a checkpoint one step "
            "later than rank 0, so at step 3 they call broadcast_parameters "
            "(dist.broadcast(src=0) of the flat parameter vector) while rank 0 calls "
            "sync_gradients (dist.all_reduce of the flat gradient vector, same size) as "
            "the 4th collective of the default group. Rank 0 is the odd one out."
        ),
    },
    "real_boundary_exchange_3_group_cycle": {
        "job_scenario": "boundary_exchange_3",
        "nproc": 3,
        "verdict": "deadlock",
        "culprit_ranks": [0, 1, 2],
        "cycle": [0, 1, 2, 0],
        "expect_main": {r: "reduce_boundary_gradients" for r in range(3)},
        "how": (
            "3 ranks (train.py under torchrun, gloo), each sharing a boundary with the two "
            "others: three 2-rank groups made with dist.new_group and group_desc halo_01 "
            "{0,1}, halo_12 {1,2} and halo_02 {0,2}. Warm-up steps reduce the boundary "
            "gradients (reduce_boundary_gradients: dist.all_reduce on the group) walking the "
            "groups in one global order. From step 3 the overlapped schedule starts with the "
            "boundary to the next rank: rank 0 all_reduces on halo_01 and waits for rank 1, "
            "rank 1 on halo_12 waits for rank 2, rank 2 on halo_02 waits for rank 0. No rank "
            "is in a wrong call of its own group: the waits form a cycle across three groups."
        ),
    },
    "real_boundary_exchange_3_group_cycle_detail": {
        "job_scenario": "boundary_exchange_3",
        "nproc": 3,
        "env": {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        "verdict": "deadlock",
        "culprit_ranks": [0, 1, 2],
        "cycle": [0, 1, 2, 0],
        "expect_main": {r: "reduce_boundary_gradients" for r in range(3)},
        "how": (
            "The same job as real_boundary_exchange_3_group_cycle (3 ranks, groups halo_01 "
            "{0,1}, halo_12 {1,2}, halo_02 {0,2}, the overlapped schedule from step 3), run "
            "with TORCH_DISTRIBUTED_DEBUG=DETAIL. Each group is wrapped by c10d's "
            "ProcessGroupWrapper, whose pre-check before every collective is a monitored "
            "barrier on the group's own gloo helper group: rank 0 waits in halo_01's check "
            "for rank 1, rank 1 in halo_12's for rank 2, rank 2 in halo_02's for rank 0. The "
            "checks never compare fingerprints, since no group has all its members in them: "
            "the waits are the same cycle across three groups."
        ),
    },
    "real_pp_dp_cross_group_cycle": {
        "job_scenario": "pp_dp_cross_group",
        "nproc": 4,
        "verdict": "deadlock",
        "culprit_ranks": [0, 1, 2, 3],
        "cycle": [0, 2, 3, 1, 0],
        "expect_main": {0: "send_activations", 1: "stage_exchange_and_sync",
                        2: "stage_exchange_and_sync", 3: "recv_activations"},
        "how": (
            "2 pipeline stages x 2 data-parallel replicas (train.py under torchrun, gloo, 4 "
            "ranks): dp groups dp_stage0 {0,1} and dp_stage1 {2,3}, pipeline groups "
            "pp_replica0 {0,2} and pp_replica1 {1,3} (dist.new_group with group_desc). Each "
            "step stage 0 sends 16 MiB of activations to stage 1 of its replica (dist.send on "
            "the pp group; gloo's send of a tensor this large waits for the matching recv), "
            "then each stage all_reduces its gradients on its dp group. From step 3 ranks 1 "
            "and 2 run with overlapped gradient sync (the all_reduce before the stage "
            "exchange), ranks 0 and 3 without. Rank 0 sends to rank 2 and waits for it; rank 2 "
            "all_reduces on dp_stage1 and waits for rank 3; rank 3 receives from rank 1 and "
            "waits for it; rank 1 all_reduces on dp_stage0 and waits for rank 0: a cycle "
            "across four groups, point-to-point and collective."
        ),
    },
    "real_missing_rank_dataloader": {
        "job_scenario": "missing_rank_dataloader",
        "nproc": 4,
        "verdict": "missing_rank",
        "culprit_ranks": [2],
        "expect_main": {0: "sync_gradients", 1: "sync_gradients", 2: "load_next_batch",
                        3: "sync_gradients"},
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 4 ranks). Each rank's "
            "ShardedLoader has a batch_prefetch thread that reads shard records into a "
            "queue. After 3 healthy steps, rank 2's prefetch thread blocks forever in "
            "read_shard_record (an os.read on a storage pipe nobody writes to, standing in "
            "for a stalled storage mount), so rank 2's main thread waits in load_next_batch "
            "(queue.get) and never reaches step 3's gradient all_reduce; ranks 0, 1 and 3 "
            "wait in sync_gradients -> dist.all_reduce for it."
        ),
    },
    "real_missing_rank_early_exit": {
        "job_scenario": "missing_rank_early_exit",
        "nproc": 4,
        "verdict": "missing_rank",
        "culprit_ranks": [3],
        "expect_main": {0: "sync_gradients", 1: "sync_gradients", 2: "sync_gradients",
                        3: "save_checkpoint"},
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 4 ranks) with an uneven "
            "dataset split: rank 3's shard holds 3 batches, the others' 6. After 3 healthy "
            "steps rank 3's load_next_batch returns end-of-shard, it leaves the training "
            "loop and calls finalize_run -> save_checkpoint, which waits in "
            "dist.barrier(group=ckpt) on the separate checkpoint-coordination group, while "
            "ranks 0-2 wait in step 3's sync_gradients -> dist.all_reduce on the default "
            "group. Verdict missing_rank, not collective_mismatch: rank 3 never posts any "
            "4th collective on the default group (its barrier is on a different process "
            "group, which the others never enter), so from the default group's view rank 3 "
            "is simply absent."
        ),
    },
    "real_checkpoint_io_stall": {
        "job_scenario": "checkpoint_io_stall",
        "nproc": 4,
        "verdict": "missing_rank",
        "culprit_ranks": [0],
        "expect_main": {0: "save_periodic_checkpoint", 1: "sync_gradients",
                        2: "sync_gradients", 3: "sync_gradients"},
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 4 ranks). After 3 healthy "
            "steps rank 0 writes a periodic checkpoint (save_periodic_checkpoint -> "
            "torch.save) before step 3's gradient all_reduce; the checkpoint storage stopped "
            "accepting writes (a FIFO nobody reads stands in for a hung mount), so torch.save "
            "never returns, while ranks 1-3 wait in sync_gradients -> dist.all_reduce for it."
        ),
    },
    # ------------------------------------------------------------------ post-mortem
    # The job fails by itself, or the collector ends it the way the scenario says
    # (a signal to one rank, by pid); then only what is on disk is collected.
    "real_monitored_barrier_names_rank": {
        "mode": "postmortem",
        "job_scenario": "monitored_barrier_names_rank",
        "job_args": ["--stall-rank", "1"],
        "nproc": 3,
        "verdict": "missing_rank",
        "culprit_ranks": [1],
        "culprit_pids": True,
        "actions": [
            {"wait_log": {0: "end_of_epoch_sync", 1: "evaluate: 100000", 2: "end_of_epoch_sync"}},
            {"sleep": 1.0},
            {"pyspy": "all"},
            {"wait_exit": 90},
        ],
        "expect": [("rank0.stderr.log", "Rank 1 failed to pass monitoredBarrier in 10000 ms"),
                   ("rank1.stdout.log", "evaluate: 100000 validation batches")],
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 3 ranks), captured post mortem. "
            "After 3 healthy warm-up steps (load_next_batch -> train_step -> sync_gradients "
            "all_reduce) every rank reaches the end of the epoch: end_of_epoch -> evaluate() "
            "over its validation shard, then end_of_epoch_sync -> "
            "dist.monitored_barrier(timeout=timedelta(seconds=10)). Ranks 0 and 2 finish their "
            "4 validation batches at once and wait in the monitored barrier; rank 1's "
            "validation shard sits on a slow store (100000 batches, fetch_validation_batch "
            "sleeps 0.5 s each), so rank 1 stays in evaluate and never reaches the barrier. "
            "After 10 s rank 0's monitored_barrier raises, naming rank 1 as the rank that did "
            "not pass the barrier in time; rank 2's raises too, saying it reached the barrier "
            "but lost its connection to rank 0 (a knock-on: rank 0 had closed its "
            "connections); torchrun then ends rank 1, alive and still in evaluate, with "
            "signal 15 and prints its failure summary. The collector "
            "took one py-spy dump of each rank while they waited, before the barrier timed "
            "out. Rank 1 is the rank the others waited for: alive and busy elsewhere, not dead."
        ),
    },
    "real_monitored_barrier_pod_log_timestamps": {
        "mode": "postmortem",
        "job_scenario": "monitored_barrier_names_rank",
        "job_args": ["--stall-rank", "1"],
        "nproc": 3,
        "verdict": "missing_rank",
        "culprit_ranks": [1],
        "console_stamps": "pod.log",
        "actions": [{"wait_exit": 90}],
        "keep": ["pod.log"],
        "pid_map": False,
        "expect": [("pod.log", "Rank 1 failed to pass monitoredBarrier in 10000 ms")],
        "how": (
            "The job of real_monitored_barrier_names_rank (train.py under torchrun --tee 3, gloo, "
            "3 ranks), as a Kubernetes user has it: only the launcher's console, with every line "
            "after the time it was read (`kubectl logs --timestamps` of the launcher's pod: "
            "RFC 3339 with nanoseconds, `2026-12-02T04:05:06.123456789Z `). Rank 1's validation "
            "shard sits on a slow store, so rank 1 stays in evaluate and never reaches the "
            "end-of-epoch dist.monitored_barrier(timeout=10 s) that ranks 0 and 2 wait in. After "
            "10 s rank 0's monitored_barrier raises naming rank 1, rank 2's raises because rank 0 "
            "closed its connections (a knock-on), and torchrun ends rank 1 with signal 15. The "
            "console holds the ranks' tee'd stderr ([defaultN]: lines) and torchrun's failure "
            "summary. Rank 1 is the rank the others waited for: alive and busy elsewhere, not dead."
        ),
    },
    "real_sigkill_one_rank_gloo_fast_failure": {
        "mode": "postmortem",
        "job_scenario": "sigkill_one_rank",
        "job_args": SIGKILL_JOB_ARGS,
        "nproc": 3,
        "verdict": "dead_rank",
        "culprit_ranks": [2],
        "culprit_pids": True,
        "actions": SIGKILL_ACTIONS,
        "expect": [("rank0.stderr.log", "by peer"), ("rank1.stderr.log", "by peer")],
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 3 ranks) in a long training "
            "loop: each step runs forward/backward plus modelled compute (0.05 s; 0.3 s on "
            "rank 2, a straggler), then sync_gradients (dist.all_reduce of the flat "
            "gradients); every 4th step broadcast_parameters (dist.broadcast from rank 0) "
            "instead. Once every rank was past warm-up the collector took py-spy dumps of "
            "every rank until ranks 0 and 1 were seen waiting in the all_reduce for rank 2, "
            "and right after killed rank 2 with SIGKILL (kill -9 of its pid, standing in for "
            "the kernel's OOM killer). Ranks 0 and 1 fail at once with Gloo "
            "transport errors (pair.cc: the peer closed or reset the connection) naming "
            "rank 2's address, and write a Flight Recorder dump after the error; torchrun "
            "ends them with signal 15 and its failure summary shows rank 2 killed by "
            "signal 9. Rank 2 "
            "died; the others' transport errors are knock-ons of its death, not a network "
            "fault."
        ),
    },
    "real_watchdog_timeout_missing_rank": {
        "mode": "postmortem",
        "job_scenario": "pg_timeout_missing_rank",
        "job_args": ["--stall-rank", "1", "--pg-timeout", "20"],
        "nproc": 2,
        "verdict": "missing_rank",
        "culprit_ranks": [1],
        "culprit_pids": True,
        "actions": [{"wait_exit": 120}],
        "expect": [("rank0.stderr.log", "Timed out waiting 20000ms"),
                   ("rank1.stdout.log", "wait_for_shard_manifest")],
        "how": (
            "Data-parallel job (train.py --pg-timeout 20 under torchrun, gloo, 2 ranks): "
            "init_process_group(backend='gloo', timeout=timedelta(seconds=20)). After 3 "
            "healthy warm-up steps rank 1, before step 3's gradient all_reduce, calls "
            "wait_for_shard_manifest, which polls (time.sleep(1)) for a data manifest that "
            "never appears, so it never calls the all_reduce; rank 0 enters sync_gradients "
            "-> dist.all_reduce and after 20 s Gloo's timeout fires (unbound_buffer.cc: the "
            "recv did not complete within the 20 s). Rank 0 writes a Flight Recorder dump "
            "after the error (fr_after_error/) and exits 1; torchrun ends rank 1, alive and "
            "still polling, with signal 15. Both ranks' hooks had written an idle Flight "
            "Recorder dump (fr/) 5 s after they stopped making progress. Rank 1 is the rank "
            "rank 0 waited for: alive and elsewhere, not dead."
        ),
    },
    "real_detail_mismatch_one_log": {
        "mode": "postmortem",
        "job_scenario": "detail_mismatch",
        "nproc": 3,
        "env": {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        "verdict": "collective_mismatch",
        "culprit_ranks": [2],
        "actions": [{"wait_exit": 90}],
        "keep": ["rank0.stderr.log"],
        "pid_map": False,
        "expect": [("rank0.stderr.log", "Detected mismatch between collectives on ranks")],
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 3 ranks, "
            "TORCH_DISTRIBUTED_DEBUG=DETAIL). Weights are re-broadcast from rank 0 every 4 "
            "global steps (should_resync_weights); rank 2 resumed from a checkpoint one step "
            "later than ranks 0 and 1, so at step 3 rank 2 calls broadcast_parameters "
            "(dist.broadcast src=0 of the flat parameters) while ranks 0 and 1 call "
            "sync_gradients (dist.all_reduce of the flat gradients, same size and dtype), as "
            "the 4th collective of the default group. DETAIL's ProcessGroupWrapper compares "
            "the ranks' collective fingerprints before the op runs and every rank raises its "
            "collective-mismatch error. Only rank 0's stderr is kept, "
            "a fragment as a user pastes it. Its message names two ranks, one on each side: "
            "rank 0 (ALLREDUCE) and rank 2 (BROADCAST). One log cannot tell which side is "
            "odd: the wrapper compares ranks in ascending order and reports the first that "
            "differs, so rank 1 matched rank 0, but the fragment does not give the world size "
            "and any rank above 2 could side with rank 2. culprit_ranks [2] come from how the "
            "incident was made (ranks 0 and 1 are the majority of 3)."
        ),
    },
    "real_faulthandler_sigabrt_waiting_rank": {
        "mode": "postmortem",
        "job_scenario": "faulthandler_waiting_rank",
        "job_args": ["--stall-rank", "1", "--faulthandler"],
        "nproc": 2,
        "verdict": "missing_rank",
        "culprit_ranks": [1],
        "culprit_pids": True,
        "args": {"hung": True},
        "actions": [
            {"wait_log": {0: "sync_gradients (all_reduce)", 1: "evaluate: 100000"}},
            {"wait_fr_idle": [0]},
            {"sleep": 20.0},
            {"signal": "SIGABRT", "rank": 0},
            {"wait_exit": 90},
        ],
        "expect": [("rank0.stderr.log", "Fatal Python error: Aborted"),
                   ("rank0.stderr.log", "in all_reduce"),
                   ("rank1.stdout.log", "evaluate: 100000 validation batches")],
        "how": (
            "Data-parallel job (train.py --faulthandler under torchrun, gloo, 2 ranks; "
            "faulthandler.enable() before init_process_group; process-group timeout 600 s). "
            "After 3 healthy warm-up steps rank 1, before step 3's gradient all_reduce, "
            "enters evaluate() over a validation shard on a slow store (100000 batches, "
            "fetch_validation_batch sleeps 0.5 s each) and never reaches the all_reduce; "
            "rank 0 waits in sync_gradients -> dist.all_reduce. About 25 s after rank 0 "
            "entered it (20 s after its hook's idle Flight Recorder dump), the collector sent "
            "SIGABRT to rank 0 (kill -ABRT of its pid), as an engineer does to get a stack: "
            "faulthandler printed its fatal-error banner and every thread's stack to rank "
            "0's stderr (current thread: all_reduce <- sync_gradients <- train_step). "
            "torchrun reports rank 0, ended by signal 6, as the first failure and ends rank "
            "1 with signal 15. Rank 0's death is the operator's doing; the fault is rank "
            "1 missing from the all_reduce. No timeout fired, so nothing in the files proves "
            "the job was stuck: hence args hung: true (the engineer knows it hung)."
        ),
    },
    "real_exception_one_rank_peers_closed": {
        "mode": "postmortem",
        "job_scenario": "exception_one_rank",
        "job_args": ["--stall-rank", "1"],
        "nproc": 3,
        "verdict": "dead_rank",
        "culprit_ranks": [1],
        "culprit_pids": True,
        "actions": [{"wait_exit": 90}],
        "expect": [("rank1.stderr.log", "mat1 and mat2 shapes cannot be multiplied"),
                   ("rank0.stderr.log", "by peer"), ("rank2.stderr.log", "by peer")],
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 3 ranks). Rank 1's data shard "
            "holds a truncated record at batch 3 (63 features instead of 64): at step 3 its "
            "forward pass in train_step raises a RuntimeError in the first Linear layer (a "
            "32x63 batch against a 64x256 weight), an ordinary Python exception, not a "
            "communication error; rank 1 logs it, writes a Flight Recorder dump and exits "
            "with the traceback. Ranks 0 and 2 had finished their backward pass and wait in "
            "sync_gradients -> dist.all_reduce; when rank 1's process exits its sockets close "
            "and both fail at once with Gloo's peer-closed error (pair.cc) naming rank 1's "
            "address (knock-on errors); torchrun ends them with signal 15 and prints its "
            "failure summary. Rank 1 is the dead rank."
        ),
    },
    "real_spawn_sigkill_one_process": {
        "mode": "postmortem",
        "launcher": "spawn",
        "job_scenario": "sigkill_one_rank",
        "job_args": SIGKILL_JOB_ARGS,
        "nproc": 3,
        "verdict": "dead_rank",
        "culprit_ranks": [2],
        "actions": SIGKILL_ACTIONS,
        "keep": ["console.log"],
        "pid_map": False,
        "expect": [("console.log", "process 2 terminated with signal SIGKILL")],
        "how": (
            "The same data-parallel job as real_sigkill_one_rank_gloo_fast_failure, started the "
            "way DDP tutorials start it: torch.multiprocessing.spawn of 3 processes from the "
            "script itself (no torchrun), the process index being the rank. Once ranks 0 and "
            "1 were seen waiting in the gradient all_reduce for rank 2, the collector killed "
            "rank 2's process with SIGKILL (standing in for the kernel's OOM killer). mp.spawn "
            "notices, ends the survivors and raises ProcessExitedException 'process 2 "
            "terminated with signal SIGKILL'. Only the console is kept, as a user pastes it: "
            "the ranks' own progress lines, mp.spawn's warnings as it terminates the survivors "
            "and its traceback. Rank 2 is the dead rank."
        ),
    },
    "real_dataloader_worker_oom_killed": {
        "mode": "postmortem",
        "job_scenario": "dataloader_worker_killed",
        "job_args": ["--stall-rank", "1"],
        "nproc": 3,
        "verdict": "dead_rank",
        "culprit_ranks": [1],
        "culprit_pids": True,
        "actions": [
            {"wait_log": {0: "warm-up done", 1: "warm-up done", 2: "warm-up done"}},
            {"sleep": 2.0},
            {"pyspy": "all", "until": {0: "all_reduce (", 2: "all_reduce ("}, "tries": 30},
            {"signal_child": "SIGKILL", "rank": 1},
            {"wait_exit": 90},
        ],
        "expect": [("rank1.stderr.log", "is killed by signal: Killed"),
                   ("rank0.stderr.log", "by peer"), ("rank2.stderr.log", "by peer")],
        "how": (
            "Data-parallel job (train.py under torchrun, gloo, 3 ranks); each rank reads its "
            "shard through torch.utils.data.DataLoader with one worker process. At step 3 the "
            "worker of rank 1 decodes an oversized sample (slow, its memory growing) while "
            "ranks 0 and 2 wait in sync_gradients -> dist.all_reduce. Once py-spy showed them "
            "there, the collector killed rank 1's DataLoader worker with SIGKILL (kill -9 of "
            "the worker's pid, standing in for the kernel's OOM killer). Rank 1's DataLoader "
            "raised 'DataLoader worker (pid N) is killed by signal: Killed.' and rank 1 exited "
            "with the traceback; ranks 0 and 2 fail with Gloo's peer-closed errors naming rank "
            "1's address (knock-ons), and torchrun ends them. Rank 1 is the dead rank: its "
            "worker's death took it down."
        ),
    },
}


# --------------------------------------------------------------------------- helpers

def t_rel(t0):
    return round(time.time() - t0, 1)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def children_of(pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(p))
    return out


def descendants(pid):
    todo, seen = [pid], []
    while todo:
        cur = todo.pop()
        for c in children_of(cur):
            if c not in seen:
                seen.append(c)
                todo.append(c)
    return seen


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def run_tool(cmd, out_path, timeout=120):
    """Run one capture tool; stdout -> out_path, stderr -> out_path.err if not empty."""
    t = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, cwd=JOB_DIR)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or b"", (e.stderr or b"")
    with open(out_path, "wb") as f:
        f.write(out)
    if err:
        with open(out_path + ".err", "wb") as f:
            f.write(err)
    return rc, round(time.time() - t, 1)


def tool_version(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=60).stdout.strip().splitlines()[0]
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"


def q(s):
    """YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    return json.dumps(str(s), ensure_ascii=False)


def job_env(venv):
    # Keep paths of the tree holding this script out of the job (and so out of the
    # captured files): drop every variable pointing into its top-level folder.
    top = os.sep + HERE.strip(os.sep).split(os.sep)[0]
    env = {k: v for k, v in os.environ.items()
           if top not in v and not k.startswith("TORCH") and k != "OLDPWD"}
    env.update({
        "PWD": JOB_DIR,
        "TORCH_FR_BUFFER_SIZE": "2000",
        "JOB_OUTDIR": JOB_OUT,
        "FR_DUMP_REQUEST": DUMP_REQUEST,
        "FR_IDLE_DUMP_S": "5",
        "PATH": os.path.join(venv, "bin") + ":" + env.get("PATH", "/usr/bin:/bin"),
        "VIRTUAL_ENV": venv,
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    return env


def rank_log_files(local_rank):
    base = glob.glob(os.path.join(JOB_LOGS, "*", "attempt_*", str(local_rank)))
    if not base:
        return None, None
    base = sorted(base)[-1]
    return os.path.join(base, "stdout.log"), os.path.join(base, "stderr.log")


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except (OSError, TypeError):
        return ""


def main_thread_frames(pyspy_json_path):
    """Python function names of the main thread, innermost first, from py-spy --json."""
    try:
        with open(pyspy_json_path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    for thread in data:
        if thread.get("thread_name") == "MainThread" or thread.get("os_thread_id") == thread.get("pid"):
            return [(fr.get("name"), os.path.basename(fr.get("filename", "")), fr.get("line"))
                    for fr in thread.get("frames", [])]
    return None


def prepare_job_dir(outdir):
    """A neutral job folder: train.py copied to /srv/job, empty out/ and logs/."""
    os.makedirs(JOB_DIR, exist_ok=True)
    shutil.copyfile(os.path.join(HERE, "train.py"), JOB_SCRIPT)
    for d in (JOB_OUT, JOB_LOGS):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    os.makedirs(REQ_DIR, exist_ok=True)
    if os.path.exists(DUMP_REQUEST):
        os.unlink(DUMP_REQUEST)
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)


def find_rank_pids(agent, nproc, t0):
    """Rank pids: descendants of the torchrun agent with RANK=r in their environ."""
    ranks = {}
    started_at = {}
    while time.time() - t0 < 60 and len(ranks) < nproc and agent.poll() is None:
        for pid in descendants(agent.pid):
            env = read_environ(pid)
            if env and "RANK" in env and "LOCAL_RANK" in env:
                r = int(env["RANK"])
                if r not in ranks:
                    ranks[r] = pid
                    started_at[r] = t_rel(t0)
        time.sleep(0.1)
    pid_check = ", ".join(f"{r}: RANK={read_environ(p).get('RANK') if read_environ(p) else '?'}"
                          for r, p in sorted(ranks.items()))
    print(f"[capture] rank pids: {ranks} ({pid_check})", flush=True)
    return ranks, started_at, "rank -> pid verified against RANK= in /proc/<pid>/environ: " + pid_check


def find_spawned_pids(parent, nproc, t0, console_path):
    """Rank pids of an mp.spawn job: each process prints `[rank R] ... init done: ... pid=P`
    (its rank is set inside the process, so its environ does not hold it); P must be a child
    of the spawning process."""
    ranks, started_at = {}, {}
    said = re.compile(r"^\[rank (\d+)\] \S+ init done: .*\bpid=(\d+)", re.M)
    while time.time() - t0 < 60 and len(ranks) < nproc and parent.poll() is None:
        for r, pid in said.findall(read_text(console_path)):
            if int(r) not in ranks and int(pid) in children_of(parent.pid):
                ranks[int(r)] = int(pid)
                started_at[int(r)] = t_rel(t0)
        time.sleep(0.1)
    print(f"[capture] rank pids: {ranks} (from each process's init line)", flush=True)
    return ranks, started_at, ("rank -> pid from each process's own 'init done ... pid=' line, each a child of "
                               "the spawning process: " + ", ".join(f"{r}: {p}" for r, p in sorted(ranks.items())))


def gzip_big_files(outdir):
    gzipped = []
    for dirpath, _, files in os.walk(outdir):
        for fn in files:
            p = os.path.join(dirpath, fn)
            if os.path.getsize(p) > GZIP_OVER and not fn.endswith(".gz"):
                with open(p, "rb") as f_in, gzip.GzipFile(p + ".gz", "wb", compresslevel=9,
                                                          mtime=0) as f_out:
                    shutil.copyfileobj(f_in, f_out)
                os.unlink(p)
                gzipped.append(os.path.relpath(p, outdir))
    return sorted(gzipped)


def run_fr_analyzer(py, outdir, fr_dirs):
    """PyTorch's own Flight Recorder analyzer on the pickled dumps (fr_analyzer*.txt)."""
    for sub in fr_dirs:
        if sub.endswith("_json"):
            continue
        an_cmd = [py, "-m", "torch.distributed.flight_recorder.fr_trace", sub, "-p",
                  "nccl_trace_rank_", "--allow-incomplete-ranks"]
        p = subprocess.run(an_cmd, cwd=outdir, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        suffix = sub[2:]  # "" or "_after_error"
        with open(os.path.join(outdir, f"fr_analyzer{suffix}.txt"), "w") as f:
            f.write("$ python -m torch.distributed.flight_recorder.fr_trace "
                    f"{sub} -p nccl_trace_rank_ --allow-incomplete-ranks\n")
            f.write(f"# exit code {p.returncode}\n")
            f.write(p.stdout)


# --------------------------------------------------------------------------- post-mortem

def wait_until(pred, timeout, agent, step=0.25):
    """Poll pred() until true; False on timeout or when the job has ended."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        if agent.poll() is not None:
            return bool(pred())
        time.sleep(step)
    return False


def torchrun_summary(text):
    """{rank: exit code} from torchrun's failure summary, and the root-cause rank."""
    out = {}
    for block in re.finditer(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)",
                             text):
        out[int(block.group(1))] = int(block.group(2))
    root = re.search(r"Root Cause \(first observed failure\):\s*\n\[\d+\]:\s*\n(?:.*\n)*?\s*rank\s*:\s*(\d+)",
                     text)
    return out, (int(root.group(1)) if root else None)


def stamp_console(pipe, console, stamped_path):
    """The launcher's console as a container runtime logs it: each line as
    it is read, to `console` as it is and to `stamped_path` after the time
    it was read, in the RFC 3339 form with nanoseconds and `Z` that
    `kubectl logs --timestamps` and `docker logs --timestamps` print."""
    with open(stamped_path, "wb") as stamped:
        for line in iter(pipe.readline, b""):
            now = time.time_ns()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now // 1_000_000_000))
            console.write(line)
            console.flush()
            stamped.write(f"{stamp}.{now % 1_000_000_000:09d}Z ".encode() + line)
            stamped.flush()


def postmortem(name, sc, args):
    """Run the job, let it fail (or end it as the scenario says), collect what is on disk."""
    nproc = sc["nproc"]
    venv = os.path.abspath(args.venv or POSTMORTEM_VENV)
    outdir = os.path.abspath(args.outdir)
    py = os.path.join(venv, "bin", "python")
    pyspy = os.path.join(venv, "bin", "py-spy")
    torchrun = os.path.join(venv, "bin", "torchrun")
    prepare_job_dir(outdir)
    torch_version = tool_version([py, "-c", "import torch; print(torch.__version__)"])
    pyspy_version = tool_version([pyspy, "--version"])

    port = free_port()
    job_args = [JOB_SCRIPT, "--scenario", sc["job_scenario"]] + list(sc.get("job_args", []))
    spawn = sc.get("launcher") == "spawn"
    if spawn:  # torch.multiprocessing.spawn from the job script itself; its console is all there is
        cmd = [py, "-u"] + job_args + ["--spawn", str(nproc)]
    else:
        cmd = [torchrun, "--nnodes", "1", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(port),
               "--log-dir", JOB_LOGS, "--redirects", "3", "--tee", "3"] + job_args
    env = job_env(venv)
    if spawn:
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    env.update(sc.get("env", {}))
    console_path = os.path.join(JOB_DIR, "torchrun.console")
    console = open(console_path, "wb")
    t0 = time.time()
    started_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))
    print(f"[capture] launching {name}: {' '.join(cmd)}", flush=True)
    stamped_name = sc.get("console_stamps")
    agent = subprocess.Popen(cmd, cwd=JOB_DIR, env=env, stdout=subprocess.PIPE if stamped_name else console,
                             stderr=subprocess.STDOUT, start_new_session=True)
    reader = None
    if stamped_name:
        reader = threading.Thread(target=stamp_console, daemon=True,
                                  args=(agent.stdout, console, os.path.join(JOB_DIR, stamped_name)))
        reader.start()
    if spawn:
        ranks, started_at, pid_check = find_spawned_pids(agent, nproc, t0, console_path)
    else:
        ranks, started_at, pid_check = find_rank_pids(agent, nproc, t0)

    def rank_says(r, sub):
        if spawn:
            return any(line.startswith(f"[rank {r}] ") and sub in line
                       for line in read_text(console_path).splitlines())
        return sub in read_text(rank_log_files(r)[0])

    # ---- the scenario's actions, in order
    done = []        # what the collector did, when
    problems = []    # what did not go as the scenario says
    for action in sc.get("actions", []):
        if "wait_log" in action:
            want = action["wait_log"]

            def logged(want=want):
                return all(rank_says(r, sub) for r, sub in want.items())
            ok = wait_until(logged, action.get("timeout", 120), agent)
            done.append(f"+{t_rel(t0)}s waited for log lines "
                        + ", ".join(f"rank {r}: {sub!r}" for r, sub in want.items())
                        + ("" if ok else " (NOT SEEN)"))
            if not ok:
                problems.append(f"log lines not seen: {want}")
        elif "wait_fr_idle" in action:
            want = action["wait_fr_idle"]
            ok = wait_until(lambda: all(os.path.exists(os.path.join(
                JOB_OUT, "fr", f"nccl_trace_rank_{r}")) for r in want),
                action.get("timeout", 120), agent)
            done.append(f"+{t_rel(t0)}s waited for the idle Flight Recorder dump of ranks {want}"
                        + ("" if ok else " (NOT SEEN)"))
            if not ok:
                problems.append(f"idle Flight Recorder dump of ranks {want} not seen")
        elif "sleep" in action:
            time.sleep(action["sleep"])
            done.append(f"+{t_rel(t0)}s waited {action['sleep']}s")
        elif "pyspy" in action:
            who = sorted(ranks) if action["pyspy"] == "all" else action["pyspy"]
            until = action.get("until")
            for attempt in range(1, action.get("tries", 1) + 1):
                took = []
                for r in who:
                    pid = ranks.get(r)
                    if pid is None or not alive(pid):
                        took.append(f"rank {r} not alive")
                        continue
                    rc, dt = run_tool([pyspy, "dump", "--pid", str(pid)],
                                      os.path.join(outdir, f"rank{r}.pyspy.txt"))
                    took.append(f"py-spy dump --pid {pid} (rank {r}) rc={rc}")
                if not until or all(sub in read_text(os.path.join(outdir, f"rank{r}.pyspy.txt"))
                                    for r, sub in until.items()):
                    break
                time.sleep(0.2)
            done.append(f"+{t_rel(t0)}s " + "; ".join(took)
                        + (f" (attempt {attempt}: until ranks {sorted(until)} show "
                           f"{sorted(set(until.values()))})" if until else ""))
            if until and not all(sub in read_text(os.path.join(outdir, f"rank{r}.pyspy.txt"))
                                 for r, sub in until.items()):
                problems.append(f"py-spy dumps never showed {until}")
        elif "signal" in action:
            r = action["rank"]
            pid = ranks.get(r)
            signame = action["signal"]
            if pid is not None and alive(pid) and pid in descendants(agent.pid):
                os.kill(pid, getattr(signal, signame))
                done.append(f"+{t_rel(t0)}s kill -{signame[3:]} {pid} (rank {r})")
            else:
                done.append(f"+{t_rel(t0)}s {signame} to rank {r}: not alive")
                problems.append(f"rank {r} not alive for {signame}")
        elif "signal_child" in action:
            # A process the rank forked (its DataLoader worker), as the kernel's OOM
            # killer picks it: the one child of the rank that is a python process.
            r = action["rank"]
            signame = action["signal_child"]
            kids = [c for c in children_of(ranks[r]) if alive(c)] if ranks.get(r) is not None else []
            kids = [c for c in kids if "python" in read_text(f"/proc/{c}/cmdline").split("\0")[0]]
            if len(kids) == 1 and kids[0] in descendants(agent.pid):
                os.kill(kids[0], getattr(signal, signame))
                done.append(f"+{t_rel(t0)}s kill -{signame[3:]} {kids[0]} (the DataLoader worker of rank {r}, "
                            f"pid {ranks[r]})")
            else:
                done.append(f"+{t_rel(t0)}s {signame} to a child of rank {r}: children {kids}")
                problems.append(f"rank {r} has not exactly one child process: {kids}")
        elif "wait_exit" in action:
            try:
                agent.wait(action["wait_exit"])
                done.append(f"+{t_rel(t0)}s {'the spawning process' if spawn else 'torchrun'} exited by itself "
                            f"(exit code {agent.returncode})")
            except subprocess.TimeoutExpired:
                done.append(f"+{t_rel(t0)}s torchrun still running after {action['wait_exit']}s")
                problems.append("the job did not end by itself")

    # ---- end whatever is left (by pid), as the hang mode does
    left = [r for r, pid in sorted(ranks.items()) if alive(pid)]
    for r in left:
        os.kill(ranks[r], signal.SIGTERM)
        done.append(f"+{t_rel(t0)}s SIGTERM to rank {r} (pid {ranks[r]}) by the collector")
    if agent.poll() is None:
        try:
            agent.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(agent.pid, signal.SIGTERM)
            done.append(f"+{t_rel(t0)}s SIGTERM to the torchrun agent by the collector")
            try:
                agent.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(agent.pid, signal.SIGKILL)
                agent.wait()
    for r, pid in sorted(ranks.items()):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            done.append(f"+{t_rel(t0)}s SIGKILL to rank {r} (pid {pid}) by the collector")
    agent_rc = agent.wait()
    if reader is not None:
        reader.join(30)
    console.close()
    duration = t_rel(t0)
    for line in done:
        print(f"[capture] {line}", flush=True)

    # ---- collect what is on disk
    console_name = "console.log" if spawn else "torchrun.log"
    shutil.copyfile(console_path, os.path.join(outdir, console_name))
    if stamped_name:
        shutil.copyfile(os.path.join(JOB_DIR, stamped_name), os.path.join(outdir, stamped_name))
    for r in sorted(ranks):
        out, err = rank_log_files(r)
        for src, dst in ((out, f"rank{r}.stdout.log"), (err, f"rank{r}.stderr.log")):
            if src and os.path.exists(src):
                shutil.copyfile(src, os.path.join(outdir, dst))
    keep = sc.get("keep")
    fr_dirs = []
    for sub in sorted(os.listdir(JOB_OUT)):
        if sub.startswith("fr") and keep is None:
            shutil.copytree(os.path.join(JOB_OUT, sub), os.path.join(outdir, sub))
            fr_dirs.append(sub)
    if fr_dirs:
        run_fr_analyzer(py, outdir, fr_dirs)

    # ---- did it go as the scenario says? (checked before any file is left out)
    for fn, sub in sc.get("expect", []):
        if sub not in read_text(os.path.join(outdir, fn)):
            problems.append(f"{fn} lacks {sub!r}")
    console_text = read_text(os.path.join(outdir, console_name))
    summary, root_rank = torchrun_summary(console_text)
    # whether each rank's stderr ends in an error (the lines themselves stay in the logs:
    # expected.yaml quotes no log line, so that nothing reads it as evidence)
    stderr_error = {}
    for r in sorted(ranks):
        err = read_text(os.path.join(outdir, f"rank{r}.stderr.log"))
        stderr_error[r] = bool(re.search(r"Error|Fatal Python error", err))

    # ---- leave out what the scenario does not keep (a fragment, as a user pastes it)
    if keep is not None:
        for fn in os.listdir(outdir):
            if not any(fnmatch.fnmatch(fn, pat) for pat in keep):
                p = os.path.join(outdir, fn)
                shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
    gzipped = gzip_big_files(outdir)

    host = socket.gethostname()
    if sc.get("pid_map", True):
        with open(os.path.join(outdir, "pid_map.json"), "w") as f:
            json.dump({"ranks": {str(r): {"pid": p, "host": host}
                                 for r, p in sorted(ranks.items())},
                       "launcher_pids": {"torchrun_agent": agent.pid}}, f, indent=1)
    files = sorted(os.path.relpath(os.path.join(d, fn), outdir)
                   for d, _, fns in os.walk(outdir) for fn in fns)

    # ---- expected.yaml: the diagnosis from how the incident was made
    shown_cmd = ["python"] + cmd[1:] if spawn else ["torchrun"] + cmd[1:]
    y = ["# Checked by `forensics replay`: verdict, culprit_ranks, culprits, args.",
         "# Written by corpus/capture/capture.py from the scenario, before any analysis.",
         f"description: {q(sc['how'])}",
         f"verdict: {q(sc['verdict'])}",
         f"culprit_ranks: {json.dumps(sc['culprit_ranks'])}"]
    if sc.get("culprit_pids") and sc.get("pid_map", True):
        y.append("culprits:")
        for r in sc["culprit_ranks"]:
            y.append(f"  - {{rank: {r}, pid: {ranks.get(r)}}}")
    if sc.get("args"):
        y.append("args: {" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in sc["args"].items())
                 + "}")
    y.append("captured_with:")
    y.append(f"  torch: {q(torch_version)}")
    y.append(f"  py-spy: {q(pyspy_version)}")
    y.append(f"  backend: {q('gloo (CPU, 127.0.0.1)')}")
    y.append(f"  command: {q(' '.join(shown_cmd))}")
    y.append(f"  cwd: {q(JOB_DIR)}")
    if sc.get("env"):
        y.append("  env: {" + ", ".join(f"{k}: {q(v)}" for k, v in sc["env"].items()) + "}")
    y.append(f"regenerate: {q(f'python3 capture.py {name} ../{name}  (from corpus/capture/)')}")
    y.append("capture:")
    y.append(f"  mode: {q('post-mortem')}")
    y.append(f"  job_scenario: {q(sc['job_scenario'])}")
    y.append(f"  world_size: {nproc}")
    y.append(f"  started_utc: {q(started_utc)}")
    y.append("  pids:")
    for r, p in sorted(ranks.items()):
        y.append(f"    {r}: {p}")
    y.append(f"  {'spawn_parent_pid' if spawn else 'torchrun_agent_pid'}: {agent.pid}")
    y.append(f"  pid_check: {q(pid_check)}")
    y.append("  collector_did:")
    for line in done:
        y.append(f"    - {q(line)}")
    y.append(f"  launcher_exit_code: {agent_rc}")
    y.append(f"  duration_s: {duration}")
    # what the kept files show (nothing here from files the scenario leaves out)
    kept = set(files)
    y.append("  observed:")
    if "torchrun.log" in kept:
        y.append("    torchrun_exit_codes: {" + ", ".join(f"{r}: {c}" for r, c in
                                                       sorted(summary.items())) + "}")
        y.append(f"    torchrun_root_cause_rank: {json.dumps(root_rank)}")
    y.append("    stderr_has_error: {" + ", ".join(
        f"{r}: {json.dumps(stderr_error[r])}" for r in sorted(ranks)
        if f"rank{r}.stderr.log" in kept) + "}")
    y.append(f"    checks_passed: {len(sc.get('expect', [])) - len([p for p in problems if ' lacks ' in p])}"
             f" of {len(sc.get('expect', []))}")
    if problems:
        y.append("    unexpected:")
        for m in problems:
            y.append(f"      - {q(m)}")
    y.append(f"  files: {json.dumps(files + ['expected.yaml'])}")
    y.append(f"  gzipped: {json.dumps(gzipped)}")
    with open(os.path.join(outdir, "expected.yaml"), "w") as f:
        f.write("\n".join(y) + "\n")

    still = [p for p in list(ranks.values()) + [agent.pid] if alive(p)]
    print(f"[capture] done in {duration}s -> {outdir}; still alive: {still}; "
          f"unexpected: {problems or 'none'}", flush=True)
    return 1 if still or problems else 0


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("outdir")
    ap.add_argument("--venv", default=None,
                    help=f"venv with torch, py-spy (default: {HANG_VENV} for the hang "
                         f"scenarios, {POSTMORTEM_VENV} for the post-mortem ones)")
    ap.add_argument("--ready-timeout", type=float, default=120.0)
    ap.add_argument("--settle", type=float, default=2.0,
                    help="seconds to wait after every rank is hung")
    args = ap.parse_args()

    name = args.scenario if args.scenario.startswith("real_") else "real_" + args.scenario
    if name not in SCENARIOS:
        sys.exit(f"unknown scenario {args.scenario!r}; one of {', '.join(SCENARIOS)}")
    sc = SCENARIOS[name]
    if sc.get("mode") == "postmortem":
        return postmortem(name, sc, args)
    nproc = sc["nproc"]
    venv = os.path.abspath(args.venv or HANG_VENV)
    outdir = os.path.abspath(args.outdir)
    py = os.path.join(venv, "bin", "python")
    pyspy = os.path.join(venv, "bin", "py-spy")
    torchrun = os.path.join(venv, "bin", "torchrun")

    prepare_job_dir(outdir)

    torch_version = tool_version([py, "-c", "import torch; print(torch.__version__)"])
    pyspy_version = tool_version([pyspy, "--version"])
    gdb_version = tool_version(["gdb", "--version"])
    real_python = os.path.realpath(py)

    port = free_port()
    cmd = [torchrun, "--nnodes", "1", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(port),
           "--log-dir", JOB_LOGS, "--redirects", "3",
           JOB_SCRIPT, "--scenario", sc["job_scenario"]] + list(sc.get("job_args", []))
    env = job_env(venv)
    env.update(sc.get("env", {}))
    console_path = os.path.join(JOB_DIR, "torchrun.console")
    console = open(console_path, "wb")
    t0 = time.time()
    started_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))
    print(f"[capture] launching {name}: {' '.join(cmd)}", flush=True)
    agent = subprocess.Popen(cmd, cwd=JOB_DIR, env=env, stdout=console,
                             stderr=subprocess.STDOUT, start_new_session=True)

    ranks, started_at, pid_check = find_rank_pids(agent, nproc, t0)

    # ---- wait until every rank is hung: it logged past warm-up and its flight recorder
    #      hook wrote the idle dump (no progress for FR_IDLE_DUMP_S seconds)
    ready_at = None
    exited_early = False
    marker_at = {}
    while time.time() - t0 < args.ready_timeout:
        if agent.poll() is not None or any(not alive(p) for p in ranks.values()):
            exited_early = True
            break
        for r in ranks:
            out, _ = rank_log_files(r)
            if r not in marker_at and "warm-up done" in read_text(out):
                marker_at[r] = t_rel(t0)
        idle = [os.path.exists(os.path.join(JOB_OUT, "fr", f"nccl_trace_rank_{r}"))
                for r in ranks]
        if len(ranks) == nproc and len(marker_at) == nproc and all(idle):
            ready_at = t_rel(t0)
            break
        time.sleep(0.25)
    if ready_at is not None:
        print(f"[capture] all ranks hung at +{ready_at}s; settling {args.settle}s", flush=True)
        time.sleep(args.settle)
    else:
        print(f"[capture] job not hung (exited_early={exited_early}) at +{t_rel(t0)}s",
              flush=True)

    # ---- capture every live rank
    alive_at_capture = [r for r, p in sorted(ranks.items()) if alive(p)]
    captures = {}
    cap_start = t_rel(t0)
    for r in alive_at_capture:
        pid = ranks[r]
        base = os.path.join(outdir, f"rank{r}")
        res = []
        for label, tool_cmd, path in [
            ("pyspy", [pyspy, "dump", "--pid", str(pid)], base + ".pyspy.txt"),
            ("pyspy_json", [pyspy, "dump", "--pid", str(pid), "--json"], base + ".pyspy.json"),
            ("native", [pyspy, "dump", "--pid", str(pid), "--native"], base + ".native.txt"),
            ("locals", [pyspy, "dump", "--pid", str(pid), "--locals"], base + ".locals.txt"),
            ("gdb", ["gdb", "-p", str(pid), "-batch", "-ex", "set pagination off",
                     "-ex", "thread apply all bt"], base + ".gdb.txt"),
            ("gdb_pybt", ["gdb", "-p", str(pid), "-batch",
                          "-iex", f"add-auto-load-safe-path {real_python}-gdb.py",
                          "-ex", "set pagination off", "-ex", "thread apply all py-bt"],
             base + ".gdb_pybt.txt"),
        ]:
            rc, dt = run_tool(tool_cmd, path)
            res.append(f"{label} rc={rc} {dt}s")
        captures[r] = ", ".join(res)
        print(f"[capture] rank {r} (pid {pid}): {captures[r]}", flush=True)
    cap_end = t_rel(t0)

    # ---- end every process we started, by pid
    ended = {}
    for r, pid in sorted(ranks.items()):
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
            ended[r] = f"SIGTERM by the collector at +{t_rel(t0)}s"
        else:
            ended[r] = "exited before the collector ended it"
    deadline = time.time() + 15
    while time.time() < deadline and (agent.poll() is None
                                      or any(alive(p) for p in ranks.values())):
        time.sleep(0.2)
    agent_note = "exited by itself after its ranks ended"
    if agent.poll() is None:
        os.kill(agent.pid, signal.SIGTERM)
        agent_note = "SIGTERM by the collector"
        try:
            agent.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(agent.pid, signal.SIGKILL)
            agent_note = "SIGKILL by the collector"
            agent.wait()
    for r, pid in sorted(ranks.items()):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            ended[r] += ", then SIGKILL"
    agent_rc = agent.wait()
    console.close()
    duration = t_rel(t0)

    # ---- collect logs, flight recorder dumps
    shutil.copyfile(console_path, os.path.join(outdir, "torchrun.log"))
    for r in sorted(ranks):
        out, err = rank_log_files(r)
        for src, dst in ((out, f"rank{r}.stdout.log"), (err, f"rank{r}.stderr.log")):
            if src and os.path.exists(src):
                shutil.copyfile(src, os.path.join(outdir, dst))
    fr_dirs = []
    for sub in sorted(os.listdir(JOB_OUT)):
        if sub.startswith("fr"):
            shutil.copytree(os.path.join(JOB_OUT, sub), os.path.join(outdir, sub))
            fr_dirs.append(sub)
    fr_dump_lines = {}
    for r in sorted(ranks):
        out, _ = rank_log_files(r)
        fr_dump_lines[r] = [l.split("] ", 1)[-1] for l in read_text(out).splitlines()
                            if "flight recorder dump" in l]

    # ---- PyTorch's own flight recorder analyzer on the pickled dumps
    run_fr_analyzer(py, outdir, fr_dirs)

    # ---- what the main threads were doing (from py-spy --json)
    observed_main = {}
    mismatches = []
    for r in sorted(ranks):
        frames = main_thread_frames(os.path.join(outdir, f"rank{r}.pyspy.json"))
        if frames is None:
            observed_main[r] = None
            continue
        own = [f[0] for f in frames if f[1] == "train.py"]
        observed_main[r] = {"top": f"{frames[0][0]} ({frames[0][1]}:{frames[0][2]})"
                            if frames else "", "train_py": " <- ".join(own)}
        want = sc["expect_main"].get(r)
        if want and want not in own:
            mismatches.append(f"rank {r}: expected {want} on the main thread, got {own}")

    # ---- gzip big files
    gzipped = gzip_big_files(outdir)

    # ---- pid_map.json
    host = socket.gethostname()
    with open(os.path.join(outdir, "pid_map.json"), "w") as f:
        json.dump({"ranks": {str(r): {"pid": p, "host": host} for r, p in sorted(ranks.items())},
                   "launcher_pids": {"torchrun_agent": agent.pid}}, f, indent=1)

    # ---- expected.yaml
    hung = ready_at is not None
    checks = ["# Checked by `forensics replay`: verdict, culprit_ranks, cycles, findings, args.",
              "# `capture:` records how the artifacts were made (written by corpus/capture/capture.py).",
              f"description: {q(sc['how'])}",
              f"verdict: {q(sc['verdict'])}",
              f"culprit_ranks: {json.dumps(sc['culprit_ranks'])}"]
    if sc.get("cycle"):
        checks.append(f"cycles: [{json.dumps(sc['cycle'])}]")
    if sc["verdict"] == "missing_rank":
        # Stacks alone show ranks waiting on a rank that still works; the
        # collector knows the job hung, as a user running --hung does.
        checks.append("args: {hung: true}")
        checks.append("decided_by: [cli_hung]")
    y = []
    y.append(f"scenario: {q(name)}")
    y.append(f"job_scenario: {q(sc['job_scenario'])}")
    y.append(f"hang: {'true' if hung else 'false'}")
    y.append(f"world_size: {nproc}")
    y.append(f"backend: {q('gloo (CPU, 127.0.0.1)')}")
    if sc.get("env"):
        y.append("env: {" + ", ".join(f"{k}: {q(v)}" for k, v in sc["env"].items()) + "}")
    y.append(f"how: {q(sc['how'])}")
    y.append("captured_with:")
    y.append(f"  torch: {q(torch_version)}")
    y.append(f"  py-spy: {q(pyspy_version)}")
    y.append(f"  gdb: {q(gdb_version)}")
    y.append(f"regenerate: {q(f'python3 capture.py {name} ../{name}')}")
    y.append(f"regenerate_from: {q('corpus/capture/ (capture.py + train.py), venv ' + venv)}")
    y.append("observed:")
    y.append("  main_thread:")
    for r in sorted(ranks):
        o = observed_main.get(r)
        if o is None:
            y.append(f"    {r}: null")
        else:
            y.append(f"    {r}:")
            y.append(f"      top: {q(o['top'])}")
            y.append(f"      train_py: {q(o['train_py'])}")
    if mismatches:
        y.append("  unexpected:")
        for m in mismatches:
            y.append(f"    - {q(m)}")
    if not hung:
        y.append(f"  note: {q('the job did not hang: it exited before capture; see torchrun.log and rank*.stderr.log')}")
    y.append("run:")
    y.append(f"  started_utc: {q(started_utc)}")
    y.append(f"  launcher: {q('torchrun')}")
    y.append(f"  launcher_cmd: {q(' '.join(cmd))}")
    y.append("  launcher_pids:")
    y.append(f"    torchrun_agent: {agent.pid}")
    y.append("  pids:")
    for r, p in sorted(ranks.items()):
        y.append(f"    {r}: {p}")
    y.append(f"  pid_check: {q(pid_check)}")
    y.append(f"  ready_after_s: {json.dumps(ready_at)}")
    y.append(f"  alive_at_capture: {json.dumps(alive_at_capture)}")
    y.append(f"  capture_window_s: [{cap_start}, {cap_end}]")
    y.append("  captures:")
    for r, c in captures.items():
        y.append(f"    {r}: {q(c)}")
    y.append("  ranks:")
    for r in sorted(ranks):
        y.append(f"    {r}:")
        y.append(f"      started_at_s: {started_at.get(r)}")
        y.append(f"      warmup_done_at_s: {json.dumps(marker_at.get(r))}")
        y.append(f"      fr_dumps: {json.dumps(fr_dump_lines.get(r, []))}")
        y.append(f"      ended: {q(ended.get(r, ''))}")
    y.append(f"  launcher_exit_code: {agent_rc}")
    y.append(f"  launcher_ended: {q(agent_note)}")
    y.append(f"  duration_s: {duration}")
    y.append(f"  times: {q('seconds after the collector launched the job')}")
    y.append(f"gzipped: {json.dumps(gzipped)}")
    with open(os.path.join(outdir, "expected.yaml"), "w") as f:
        f.write("\n".join(checks + ["capture:"] + ["  " + line for line in y]) + "\n")

    # ---- leave nothing running
    left = [p for p in list(ranks.values()) + [agent.pid] if alive(p)]
    print(f"[capture] done in {duration}s -> {outdir}; still alive: {left}; "
          f"unexpected: {mismatches or 'none'}", flush=True)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
