"""One call seen by two artifacts: a snapshot (or log) says its group, seq
and peers, a stack dump shows the op and the code. Merged, the rank keeps
what each knows, so adding a stack dump never loses the call's place."""

from __future__ import annotations

import shutil

from conftest import CORPUS
from helpers import cli_report

DUMP = """Process 4101: python -u train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4101 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2950)
    wrapper (torch/distributed/c10d_logger.py:83)
    sync_gradients (train.py:140)
    train_step (train.py:188)
    <module> (train.py:240)
"""


def test_a_stack_dump_of_the_same_call_keeps_the_snapshots_group_and_seq(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(CORPUS / "snapshot_missing_rank" / "snapshot_1.json", folder)
    alone = cli_report(folder, tmp_path / "alone.json", "--hung")
    (folder / "rank0.pyspy.txt").write_text(DUMP, encoding="utf-8")
    both = cli_report(folder, tmp_path / "both.json", "--hung")
    assert (both["ranks"]["0"]["op"], both["ranks"]["0"]["group"], both["ranks"]["0"]["seq"]) == ("all_reduce", "0", 812)
    assert "sync_gradients" in both["ranks"]["0"]["why"]          # the dump's code is kept too
    assert (both["verdict"], both["culprit_ranks"]) == (alone["verdict"], alone["culprit_ranks"]) == ("missing_rank", [2])
    assert both["confidence"]["level"] == alone["confidence"]["level"]
