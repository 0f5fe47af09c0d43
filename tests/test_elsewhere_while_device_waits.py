"""elsewhere-while-device-waits on py-spy dumps as py-spy prints them: with NCCL, ranks whose host thread waits
on the GPU wait for the collective they queued; the rank busy in its own code is the one they wait for."""

from helpers import cli_report, finding_rules

HEAD = "Process {pid}: /usr/bin/python3 -u train.py\nPython v3.10.12 (/usr/bin/python3.10)\n\n"
THREAD = 'Thread {pid} (active+gil): "MainThread"\n'
TRAIN = ["    training_step (train.py:88)\n", "    fit (train.py:140)\n", "    <module> (train.py:170)\n"]
SCALER = ["    _maybe_opt_step (torch/cuda/amp/grad_scaler.py:350)\n", "    step (torch/cuda/amp/grad_scaler.py:416)\n"]
EVALUATE = ["    _compute_projection_filters (museval/metrics.py:618)\n", "    evaluate_sdr (callbacks.py:51)\n",
            "    on_validation_epoch_end (callbacks.py:77)\n", "    fit (train.py:140)\n", "    <module> (train.py:170)\n"]
ALL_REDUCE = ["    all_reduce (torch/distributed/distributed_c10d.py:2050)\n"]


def analyze(tmp_path, stacks: dict[int, list[str]], *args) -> dict:
    folder = tmp_path / "dumps"
    folder.mkdir(exist_ok=True)
    for rank, frames in stacks.items():
        pid = 7000 + rank
        (folder / f"rank{rank}.pyspy.txt").write_text(HEAD.format(pid=pid) + THREAD.format(pid=pid) + "".join(frames),
                                                      encoding="utf-8")
    return cli_report(folder, tmp_path / "report.json", *args)


def test_the_rank_busy_in_its_evaluation_is_the_one_the_device_waiters_wait_for(tmp_path):
    report = analyze(tmp_path, {0: EVALUATE, 1: SCALER + TRAIN, 2: SCALER + TRAIN}, "--hung")
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [0]
    assert "elsewhere-while-device-waits" in finding_rules(report)


def test_not_judged_stuck_a_device_wait_is_no_finding(tmp_path):
    assert "elsewhere-while-device-waits" not in finding_rules(analyze(tmp_path, {0: EVALUATE, 1: SCALER + TRAIN}))


def test_a_rank_inside_a_collective_leaves_it_to_the_wait_for_graph(tmp_path):
    report = analyze(tmp_path, {0: EVALUATE, 1: SCALER + TRAIN, 2: ALL_REDUCE + TRAIN}, "--hung")
    assert "elsewhere-while-device-waits" not in finding_rules(report)
