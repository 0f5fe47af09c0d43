"""Horovod's stall inspector, in each wording it has printed, read through the shipped catalogue
(rules/messages/horovod.yaml): the listing lines after the warning name the rank everyone waits for."""

import pytest

from helpers import cli_report

HEADER = ("One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
          "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are "
          "trying to submit different tensors or that only subset of ranks is submitting tensors, which will "
          "cause deadlock. ")
TRAINING = "".join(f"Epoch 1/90 step {i}/625 - loss: {7 - i / 100:.4f} - acc: 0.{i:04d}\n" for i in range(400))


def analyze(tmp_path, text: str, name: str = "logs") -> dict:
    (tmp_path / name).mkdir()
    (tmp_path / name / "job.out").write_text(text, encoding="utf-8")
    return cli_report(tmp_path / name, tmp_path / f"{name}.json", "--hung")


def glog(text: str) -> str:
    return f"[2021-02-02 21:19:07.345988: W horovod/common/stall_inspector.cc:105] {text}"


@pytest.mark.parametrize("word", ["Missing", "Stalled"])
def test_the_ranks_listed_after_the_warning_are_missing(tmp_path, word):
    text = TRAINING + glog(HEADER) + f"\n{word} ranks:\n3: [HorovodAllreduce_grads_0, HorovodAllreduce_grads_1]\n" \
        + "5!: [HorovodAllreduce_grads_0]\n" + 'One or more rank (marked by "!") is stalled for longer than 600 ' \
        "seconds. Will shutdown.\n"
    report = analyze(tmp_path, text)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [3, 5]


def test_mpirun_tags_and_timestamps_on_every_line_of_the_listing(tmp_path):
    tag = "Tue Oct  8 15:36:43 2019[1,0]<stderr>:"
    text = TRAINING + tag + glog(HEADER) + f"\n{tag}Stalled ranks:\n{tag}6: [horovod_allreduce.0, " \
        "horovod_allreduce.1 ...]\n[1,3]<stdout>:step 228 loss 3.1\n"
    report = analyze(tmp_path, text)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [6]


def test_the_oldest_wording_names_the_ready_ranks_and_the_gap_is_the_missing_one(tmp_path):
    ready = ", ".join(str(r) for r in range(32) if r != 16)
    one_line = "WARNING: " + HEADER + f"Stalled ops: HorovodAllreduce_conv1_0 [ready ranks: {ready}], " \
        f"HorovodAllreduce_AddN_335_0 [ready ranks: {ready}]\n"
    assert analyze(tmp_path, TRAINING + one_line)["culprit_ranks"] == [16]
    per_line = "WARNING: " + HEADER + "Stalled ops: \n" + "".join(
        f"HorovodBroadcast_layer_{i}_0 [ready ranks: 5, 6, 3, 1, 4, 0], \n" for i in range(4))
    report = analyze(tmp_path, TRAINING + per_line, "per_line")
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [2]


def test_ready_lists_that_do_not_nest_are_ranks_submitting_different_tensors(tmp_path):
    """Two towers' gradients under different name scopes: rank 1 is ready for
    `model/...` ops and rank 0 for `model_1/...` ones; neither is behind on
    everything, so this is a mismatch between them, not a missing rank."""
    ops = ", ".join(f"{scope}/HorovodAllreduce_{scope}_grads_AddN_{i}_0 [ready ranks: {ready}]"
                    for i, (scope, ready) in enumerate([("model", 1), ("model_1", 0), ("model", 1), ("model_1", 0)]))
    report = analyze(tmp_path, TRAINING + "WARNING: " + HEADER + f"Stalled ops: {ops}\n")
    assert report["verdict"] == "collective_mismatch"
    assert report["culprit_ranks"] == [0, 1]
    nested = ", ".join(f"HorovodAllreduce_grads_{i}_0 [ready ranks: {ready}]" for i, ready in
                       enumerate(["0, 1, 3", "0, 1", "0, 1, 3"]))
    report = analyze(tmp_path, TRAINING + "WARNING: " + HEADER + f"Stalled ops: {nested}\n", "nested")
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [2]


def test_numbered_lines_that_follow_no_listing_name_no_rank(tmp_path):
    # the warning alone, then ordinary output shaped like a listing line: nothing is missing by its word
    text = TRAINING + glog(HEADER) + "\n3: [0.25, 0.75]\n"
    report = analyze(tmp_path, text)
    assert report["verdict"] != "missing_rank" and report["culprit_ranks"] == []


def test_the_0_16_wording_names_the_missing_ranks_per_op(tmp_path):
    tag = "[1,0]<stderr>:"
    text = TRAINING + tag + glog(HEADER) + f"\n{tag}Stalled ops:HorovodAllreduce_conv2d_grad_0 [missing ranks: 0]\n" \
        + tag + glog("HorovodAllreduce_batchnorm_grad_0 [missing ranks: 0, 2]") + "\n"
    report = analyze(tmp_path, text)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [0, 2]
