"""Logs alone, and logs beside stack dumps, through the whole pipeline."""

import json
import sys
from pathlib import Path

from conftest import CORPUS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gen_nccl_logs import generate  # noqa: E402


def test_nccl_logs_alone_name_the_rank_that_did_not_join(run_cli, tmp_path):
    truth = generate(str(tmp_path / "logs"), ranks=8, size=256 << 10, stop_rank=5, stop_at=0.6,
                     per_rank_files=True)
    result = run_cli("analyze", tmp_path / "logs", "--hung", "-f", "json")
    report = json.loads(result.stdout)
    assert report["verdict"] == "missing_rank", report["root_cause"]["narrative"]
    assert report["culprit_ranks"] == [5]
    world = truth["ranks"][0]["world"]
    assert report["ranks"]["5"]["group"] == world
    assert report["ranks"]["5"]["seq"] == truth["ranks"][5]["world_last"]
    assert report["ranks"]["1"]["waiting_for"] == [5]
    # Without --hung it is progress in one snapshot, but the lagging rank is named.
    calm = json.loads(run_cli("analyze", tmp_path / "logs", "-f", "json").stdout)
    assert calm["verdict"] == "healthy"
    assert [f["ranks"] for f in calm["findings"] if f["rule"] == "waiting-on-progressing-rank"] == [[5]]


def test_a_dump_named_nothing_is_placed_by_the_pid_in_nccl_init_lines(run_cli, tmp_path):
    truth = generate(str(tmp_path / "logs"), ranks=8, size=64 << 10, stop_rank=None, per_rank_files=True)
    pid = truth["ranks"][6]["pid"]
    template = (CORPUS / "real_missing_rank_dataloader" / "rank2.pyspy.txt").read_text()
    old_pid = template.split()[1].rstrip(":")
    (tmp_path / "logs" / "stacks-after-10min.txt").write_text(template.replace(old_pid, str(pid)))
    report = json.loads(run_cli("analyze", tmp_path / "logs", "-f", "json").stdout)
    assert report["unattributed"] == []
    assert report["ranks"]["6"]["state"] == "data_loading"
    assert "load_next_batch" in report["ranks"]["6"]["why"]


def test_torchrun_summary_maps_pids_of_unnamed_dumps(run_cli, tmp_path):
    incident = CORPUS / "real_p2p_cycle_2"
    (tmp_path / "torchrun.log").write_text((incident / "torchrun.log").read_text())
    (tmp_path / "dump_a.txt").write_text((incident / "rank0.locals.txt").read_text())
    (tmp_path / "dump_b.txt").write_text((incident / "rank1.locals.txt").read_text())
    report = json.loads(run_cli("analyze", tmp_path, "-f", "json").stdout)
    assert report["unattributed"] == []
    assert report["verdict"] == "deadlock" and report["cycles"] == [[0, 1, 0]]


def test_zstd_and_gzip_logs_read_like_plain_ones(run_cli, tmp_path):
    import gzip

    import zstandard

    generate(str(tmp_path / "plain"), ranks=8, size=128 << 10, stop_rank=5, stop_at=0.6, per_rank_files=True)
    plain = json.loads(run_cli("analyze", tmp_path / "plain", "--hung", "-f", "json").stdout)
    console = CORPUS / "real_p2p_cycle_2" / "torchrun.log"
    plain_console = json.loads(run_cli("analyze", console, "-f", "json").stdout)
    for name, compress in (("zst", zstandard.ZstdCompressor().compress), ("gz", gzip.compress)):
        folder = tmp_path / name
        folder.mkdir()
        for log in (tmp_path / "plain").iterdir():
            (folder / f"{log.name}.{name}").write_bytes(compress(log.read_bytes()))
        report = json.loads(run_cli("analyze", folder, "--hung", "-f", "json").stdout)
        assert (report["verdict"], report["culprit_ranks"]) == (plain["verdict"], plain["culprit_ranks"]) == \
            ("missing_rank", [5])
        assert report["ranks"]["5"]["seq"] == plain["ranks"]["5"]["seq"]
        packed = tmp_path / f"torchrun.log.{name}"
        packed.write_bytes(compress(console.read_bytes()))
        same = json.loads(run_cli("analyze", packed, "-f", "json").stdout)
        def facts(report):
            return {r: (v["state"], v["op"], v["seq"], v["evidence"]["line"]) for r, v in report["ranks"].items()}
        assert facts(same) == facts(plain_console) and len(facts(same)) == 2
        assert [r["lines"] for r in same["read"]] == [r["lines"] for r in plain_console["read"]]


def test_the_report_names_the_ring_links_of_the_rank_everyone_waits_for(run_cli, tmp_path):
    """NCCL's init lines give each channel's ring; the report says where the
    awaited rank sits on it (whom it receives from, whom it sends to), per
    communicator, citing the line that states the ring. Channel 0 of the
    world communicator is rewritten to a ring that is not 0..7, so the
    neighbours come from the ring, not from rank arithmetic."""
    import re

    logs = tmp_path / "logs"
    generate(str(logs), ranks=8, size=128 << 10, stop_rank=5, stop_at=0.6, per_rank_files=True)
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    for path in logs.iterdir():
        text = path.read_text()
        text = text.replace("Channel 00/02 : 0 1 2 3 4 5 6 7", "Channel 00/02 : " + " ".join(map(str, order)))

        def ring_line(match):
            me = int(match.group(2))
            at = order.index(me)
            return f"Ring 00 : {order[at - 1]} -> {me} -> {order[(at + 1) % 8]}"
        text = re.sub(r"Ring 00 : (\d+) -> (\d+) -> (\d+)", ring_line, text, count=1)
        path.write_text(text)
    report = json.loads(run_cli("analyze", logs, "--hung", "-f", "json").stdout)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [5]
    links = report["ranks"]["5"]["ring_links"]
    world = [link for link in links if link["ranks"] == 8]
    assert [(link["channels"], link["receives_from"], link["sends_to"]) for link in world] == [
        ([0], 3, 7), ([1], 4, 6)]
    for link in world:
        cited = link["evidence"]
        lines = (logs / cited["path"]).read_text().split("\n")
        assert lines[cited["line"] - 1].strip() == cited["text"]
    assert "Channel 00/02 : 0 2 4 6 1 3 5 7" in world[0]["evidence"]["text"]
    narrative = report["root_cause"]["narrative"]
    assert "rank 5 receives from 3 and sends to 7" in narrative and "passes 3 → 5 → 7" in narrative
    zh = json.loads(run_cli("analyze", logs, "--hung", "-f", "json", "--lang", "zh").stdout)
    assert "从 3 接收、向 7 发送" in zh["root_cause"]["narrative"]
    # Only the awaited rank carries its links.
    assert all("ring_links" not in entry for rank, entry in report["ranks"].items() if rank != "5")
