"""A rank that sent nothing at all: others wait in a collective, and only a
pid map (or a launcher summary, or NCCL init lines) says the rank exists."""

import json
import shutil

from conftest import CORPUS

INCIDENT = CORPUS / "real_missing_rank_dataloader"


def _without_rank_2(tmp_path):
    folder = tmp_path / "collected"
    folder.mkdir()
    for path in INCIDENT.iterdir():
        # Rank 2's own files, and the files that speak for it (FR, launcher), are gone.
        if path.name.startswith("rank2.") or path.name in ("fr", "fr_json", "torchrun.log", "expected.yaml",
                                                             "fr_analyzer.txt"):
            continue
        (shutil.copytree if path.is_dir() else shutil.copy)(path, folder / path.name)
    return folder


def test_a_rank_with_no_artifact_is_the_one_everyone_waits_for(run_cli, tmp_path):
    folder = _without_rank_2(tmp_path)
    report = json.loads(run_cli("analyze", folder, "--hung", "-f", "json").stdout)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [2]
    silent = report["ranks"]["2"]
    assert silent["state"] == "unknown" and silent["op"] is None
    assert "no artifact describes this rank" in silent["why"] and "pid_map.json:" in silent["why"]
    (lead,) = [f for f in report["findings"] if f["rule"] == "missing-rank"]
    assert "which sent no artifact of its own" in lead["message"] and "alive" not in lead["message"]
    cited = silent["evidence"]
    assert cited["path"] == "pid_map.json"
    lines = (folder / "pid_map.json").read_text().split("\n")
    assert lines[cited["line"] - 1].strip() == cited["text"] == '"2": {'
    assert [report["ranks"][r]["waiting_for"] for r in "013"] == [[2], [2], [2]]


def test_without_the_pid_map_rank_numbering_alone_says_rank_2_exists(run_cli, tmp_path):
    """Ranks run from 0: rank 3's dump proves rank 2 exists. The verdict that
    rests on that says so and is not sure (the world size is unknown)."""
    folder = _without_rank_2(tmp_path)
    (folder / "pid_map.json").unlink()
    report = json.loads(run_cli("analyze", folder, "--hung", "-f", "json").stdout)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [2]
    assert "because rank 3 does" in report["ranks"]["2"]["why"]
    assert report["confidence"]["level"] == "low"