"""The world a launch command states, and the workers a one-node failure
summary leaves out: they had exited cleanly, and the others wait for them."""

from __future__ import annotations

import pytest

from forensics.ingest.torchlog import command_world
from helpers import cli_report


@pytest.mark.parametrize("line, world", [
    ("$ torchrun --nproc-per-node 4 barrier_test.py", (4, 4)),
    ("+ python -m torch.distributed.run --nproc_per_node=8 src/main.py --epochs 10", (8, 8)),
    ("srun torchrun --nnodes 2 --nproc_per_node 8 train.py", (16, 8)),
    ("torchrun --nnodes=2:2 --nproc-per-node=4 train.py", (8, 4)),
    ("python -m torch.distributed.launch --nproc_per_node 2 train.py", (2, 2)),
    ("accelerate launch --num_processes 8 train.py", (8, None)),
    ("mpirun -np 16 -H a:8,b:8 python train.py", (16, None)),
    ("horovodrun -np 4 python train.py", (4, None)),
])
def test_a_launch_command_states_the_world(line, world):
    assert command_world(line) == world


@pytest.mark.parametrize("line", [
    "torchrun --nnodes=1:4 --nproc_per_node 8 train.py",       # elastic: the world is known after rendezvous
    "torchrun --nnodes $NNODES --nproc_per_node 8 train.py",   # not written out
    "torchrun --nproc_per_node=gpu train.py",                  # as many as the node has
    "I ran torchrun yesterday and it hung",
    "epoch 3: loss 0.25, np 4",
])
def test_a_line_that_does_not_state_the_world_gives_none(line):
    assert command_world(line) is None


def _console(workers: int, waiting: list[int], command: str, stopped: list[int] = ()) -> str:
    """A torchrun console (torch 2.4 wording): every worker in `waiting`
    times out in all_reduce #1 and aborts; the others print their last line."""
    out = [f"$ {command}",
           "W1018 15:42:03.118000 139871652611904 torch/distributed/run.py:778] *****"]
    for rank in range(workers):
        if rank not in waiting:
            out.append(f"{rank} Done.")
    for rank in waiting:
        out.append(f"[rank{rank}]:[E1018 15:43:10.1185526{rank}1 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog "
                   f"caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                   f"Timeout(ms)=60000) ran for 6004{rank} milliseconds before timing out.")
    for rank in stopped:
        out.append(f"W1018 15:43:11.000000 139871652611904 torch/distributed/elastic/multiprocessing/api.py:897] "
                   f"Sending process {2210500 + rank} closing signal SIGTERM")
    out += ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================",
            "train.py FAILED",
            "------------------------------------------------------------",
            "Failures:"]
    rows = [r for r in waiting]
    for index, rank in enumerate(rows[1:], 1):
        out += [f"[{index}]:", "  time      : 2024-10-18_15:43:11", "  host      : gpu-a800-11",
                f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : -6 (pid: {2210400 + rank})",
                "  error_file: <N/A>", f"  traceback : Signal 6 (SIGABRT) received by PID {2210400 + rank}"]
    out += ["------------------------------------------------------------",
            "Root Cause (first observed failure):", "[0]:", "  time      : 2024-10-18_15:43:11",
            "  host      : gpu-a800-11", f"  rank      : {rows[0]} (local_rank: {rows[0]})",
            f"  exitcode  : -6 (pid: {2210400 + rows[0]})", "  error_file: <N/A>",
            f"  traceback : Signal 6 (SIGABRT) received by PID {2210400 + rows[0]}",
            "============================================================"]
    return "\n".join(out) + "\n"


def _analyze(tmp_path, text: str) -> dict:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "console.log").write_text(text, encoding="utf-8")
    return cli_report(folder, tmp_path / "out.json", "--hung")


def test_workers_the_summary_leaves_out_had_exited_and_are_waited_for(tmp_path):
    report = _analyze(tmp_path, _console(4, [0, 1, 2], "torchrun --nproc-per-node 4 train.py"))
    assert report["verdict"] == "dead_rank"
    assert report["culprit_ranks"] == [3]
    assert report["ranks"]["3"]["ended"]["exit_code"] == 0
    assert "failure summary" in report["ranks"]["3"]["why"]
    assert report["confidence"]["level"] == "medium"  # inferred from an absence, and said so
    assert "inferred" in report["confidence"]["reason"]


def test_several_clean_exits_on_an_eight_worker_node(tmp_path):
    report = _analyze(tmp_path, _console(8, [1, 4, 6], "python -m torch.distributed.run --nproc_per_node=8 t.py"))
    assert report["verdict"] == "dead_rank"
    assert report["culprit_ranks"] == [0, 2, 3, 5, 7]


def test_a_worker_the_agent_stopped_is_not_a_clean_exit(tmp_path):
    """The agent SIGTERMs workers still running when one fails: then a worker
    missing from the summary may have been anywhere, not exited."""
    report = _analyze(tmp_path, _console(4, [0, 1, 2], "torchrun --nproc-per-node 4 train.py", stopped=[3]))
    assert report["ranks"].get("3", {}).get("ended") is None
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [3]


def test_on_one_node_of_several_the_absent_ranks_live_elsewhere(tmp_path):
    report = _analyze(tmp_path, _console(4, [0, 1, 2], "torchrun --nnodes 2 --nproc-per-node 4 train.py"))
    assert all(state.get("ended") is None or state["ended"]["exit_code"] != 0 for state in report["ranks"].values())
    assert report["verdict"] != "dead_rank"


def test_without_a_stated_world_nothing_is_inferred(tmp_path):
    report = _analyze(tmp_path, _console(4, [0, 1, 2], "python train.py"))
    assert "3" not in report["ranks"] or report["ranks"]["3"].get("ended") is None
    assert report["verdict"] != "dead_rank"
