"""call-site-mismatch on py-spy dumps as py-spy prints them: ranks of a stuck job in the same collective,
reached from different functions of the job's own code."""

from helpers import cli_report, finding_rules

HEAD = "Process {pid}: /usr/bin/python3 -u train.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
THREAD = 'Thread {pid} (active): "MainThread"\n'
GATHER = ("    all_gather_into_tensor (torch/distributed/distributed_c10d.py:3002)\n"
          "    wrapper (torch/distributed/c10d_logger.py:83)\n")


def dump(pid: int, own: list[str]) -> str:
    frames = "".join(f"    {frame}\n" for frame in own)
    return HEAD.format(pid=pid) + THREAD.format(pid=pid) + GATHER + frames


ROLLOUT = ["rollout (opsd/trainer.py:212)", "train_step (opsd/trainer.py:301)", "train (opsd/trainer.py:356)",
           "<module> (opsd/main.py:104)"]
TEACHER = ["teacher_logprobs (opsd/trainer.py:248)", "train_step (opsd/trainer.py:305)",
           "train (opsd/trainer.py:356)", "<module> (opsd/main.py:104)"]


def analyze(tmp_path, stacks: dict[int, list[str]], *args) -> dict:
    folder = tmp_path / "dumps"
    folder.mkdir(exist_ok=True)
    for rank, own in stacks.items():
        (folder / f"rank{rank}.pyspy.txt").write_text(dump(4000 + rank, own), encoding="utf-8")
    return cli_report(folder, tmp_path / "report.json", *args)


def test_the_rank_that_came_from_another_code_path_is_the_odd_one(tmp_path):
    report = analyze(tmp_path, {0: ROLLOUT, 1: ROLLOUT, 2: ROLLOUT, 3: TEACHER}, "--hung")
    assert report["verdict"] == "collective_mismatch" and report["culprit_ranks"] == [3]
    assert "call-site-mismatch" in finding_rules(report)


def test_not_judged_stuck_two_paths_into_one_collective_are_no_finding(tmp_path):
    report = analyze(tmp_path, {0: ROLLOUT, 1: ROLLOUT, 2: ROLLOUT, 3: TEACHER})
    assert "call-site-mismatch" not in finding_rules(report)


def test_other_lines_of_the_same_functions_are_the_same_path(tmp_path):
    moved = [frame.replace(":212", ":219") for frame in ROLLOUT]
    report = analyze(tmp_path, {0: ROLLOUT, 1: moved, 2: ROLLOUT, 3: moved}, "--hung")
    assert "call-site-mismatch" not in finding_rules(report)


def test_rank_0_alone_in_evaluation_is_the_odd_side_of_two(tmp_path):
    evaluate = ["evaluation_reward (step2/main.py:318)", "main (step2/main.py:413)", "<module> (step2/main.py:436)"]
    step = ["train_step (step2/main.py:402)", "main (step2/main.py:413)", "<module> (step2/main.py:436)"]
    report = analyze(tmp_path, {0: evaluate, 1: step}, "--hung")
    assert report["verdict"] == "collective_mismatch" and report["culprit_ranks"] == [0]


def test_two_sides_with_nothing_to_tell_them_apart_are_both_named(tmp_path):
    report = analyze(tmp_path, {0: TEACHER, 1: ROLLOUT}, "--hung")
    assert report["verdict"] == "collective_mismatch" and report["culprit_ranks"] == [0, 1]
    assert report["confidence"]["level"] == "low"


def test_a_save_path_inside_the_frameworks_frames_tells_rank_0_apart(tmp_path):
    # the job's own frames are the same on every rank (main → train); the Trainer's frames part ways
    common = ["train (transformers/trainer.py:1780)", "main (run_clm.py:612)", "<module> (run_clm.py:626)"]
    save = ["forward (peft/tuners/prompt_tuning/model.py:88)", "save_pretrained (peft/peft_model.py:249)",
            "_save_checkpoint (transformers/trainer.py:2543)", "_inner_training_loop (transformers/trainer.py:2178)"]
    step = ["forward (transformers/models/llama/modeling_llama.py:740)", "training_step (transformers/trainer.py:3238)",
            "_inner_training_loop (transformers/trainer.py:2122)"]
    report = analyze(tmp_path, {0: save + common, 1: step + common, 2: step + common}, "--hung")
    assert report["verdict"] == "collective_mismatch" and report["culprit_ranks"] == [0]
