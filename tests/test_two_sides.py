"""One rank against one at the same position of a group: the watchdog lines
disagree and say nothing of which side is odd. A rank-0-only path (a save,
an evaluation, logging) in rank 0's stack, and not in the other's, decides;
without it both are named at medium confidence."""

from __future__ import annotations

from helpers import cli_report

_WATCHDOG = ("[E ProcessGroupNCCL.cpp:821] [Rank {rank}] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=16033, OpType={op}, Timeout(ms)=1800000) ran for 18005{rank}7 milliseconds before "
             "timing out.")


def _dump(pid: int, frames: list[str]) -> str:
    return "\n".join([f"Process {pid}: /usr/bin/python -u train.py --output_dir=out", "Python v3.9.16 (/usr/bin/python3.9)",
                      "", f'Thread {pid} (idle): "MainThread"', *[f"    {f}" for f in frames]]) + "\n"


_SAVE = ["barrier (torch/distributed/distributed_c10d.py:3145)", "barrier (deepspeed/comm/torch.py:160)",
         "barrier (deepspeed/comm/comm.py:469)", "log_wrapper (deepspeed/comm/comm.py:127)",
         "save_checkpoint (deepspeed/runtime/engine.py:3098)", "save_state (accelerate/accelerator.py:1994)",
         "main (train.py:815)", "<module> (train.py:894)"]
_STEP = ["has_overflow (deepspeed/runtime/zero/stage_1_and_2.py:1963)",
         "_check_overflow (deepspeed/runtime/zero/stage_1_and_2.py:1922)",
         "step (deepspeed/runtime/zero/stage_1_and_2.py:1759)", "step (deepspeed/runtime/engine.py:2172)",
         "main (train.py:790)", "<module> (train.py:894)"]
_FORWARD = ["forward (model.py:88)", "_call_impl (torch/nn/modules/module.py:1501)", "main (train.py:790)",
            "<module> (train.py:894)"]


def _analyze(tmp_path, rank0_frames: list[str], rank1_frames: list[str]) -> dict:
    folder = tmp_path / "job"
    folder.mkdir()
    console = [_WATCHDOG.format(rank=1, op="REDUCE"), _WATCHDOG.format(rank=0, op="ALLREDUCE")]
    (folder / "train_console.log").write_text("\n".join(console) + "\n", encoding="utf-8")
    (folder / "rank0.pyspy.txt").write_text(_dump(41729, rank0_frames), encoding="utf-8")
    (folder / "rank1.pyspy.txt").write_text(_dump(41730, rank1_frames), encoding="utf-8")
    return cli_report(folder, tmp_path / "out.json", "--hung")


def test_rank0_alone_on_a_save_path_is_the_odd_side(tmp_path):
    report = _analyze(tmp_path, _SAVE, _STEP)
    assert report["verdict"] == "collective_mismatch"
    assert report["culprit_ranks"] == [0]
    assert report["confidence"]["level"] == "medium"
    assert "save_checkpoint" in report["confidence"]["reason"]   # not DeepSpeed's own log_wrapper


def test_without_a_rank0_only_path_both_sides_are_named(tmp_path):
    report = _analyze(tmp_path, _FORWARD, _STEP)
    assert report["verdict"] == "collective_mismatch"
    assert report["culprit_ranks"] == [0, 1]
    assert "each side" in report["confidence"]["reason"]


def test_ddp_forwards_buffer_broadcast_is_a_collective(tmp_path):
    """Rank 0 validates alone and its DDP forward broadcasts buffers, while
    rank 1 waits in the barrier after the epoch: a broadcast against a
    barrier, rank 0 the odd side (its validation is a rank-0-only path)."""
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "rank0.pyspy.txt").write_text(_dump(501, [
        "_distributed_broadcast_coalesced (torch/nn/parallel/distributed.py:1022)",
        "_sync_buffers (torch/nn/parallel/distributed.py:1420)", "forward (torch/nn/parallel/distributed.py:1008)",
        "_call_impl (torch/nn/modules/module.py:1501)", "validate (train_ddp.py:92)", "main (train_ddp.py:131)"]))
    (folder / "rank1.pyspy.txt").write_text(_dump(502, [
        "barrier (torch/distributed/distributed_c10d.py:3145)", "main (train_ddp.py:134)"]))
    report = cli_report(folder, tmp_path / "out.json", "--hung")
    assert report["ranks"]["0"]["op"] == "broadcast"
    assert report["verdict"] == "collective_mismatch"
    assert report["culprit_ranks"] == [0]
