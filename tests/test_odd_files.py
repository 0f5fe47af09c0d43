"""Folders copied from a node's /tmp hold FIFOs, sockets and symlinks to
anywhere: only regular files are read, nothing blocks, symlinks that leave
the given paths are listed and skipped unless -L, and the rest of the
folder is still analyzed."""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from forensics.ingest.textio import InputError, open_regular, read_head

HERE = os.path.dirname(__file__)
CORPUS = os.path.join(HERE, "..", "corpus", "real_p2p_cycle_2")
PIPELINE = ["rank0.pyspy.txt", "rank1.pyspy.txt"]


def _incident(tmp_path):
    folder = tmp_path / "incident"
    folder.mkdir()
    for name in PIPELINE:
        shutil.copy(os.path.join(CORPUS, name), folder / name)
    return folder


def _analyze(*args, timeout=60):
    """The CLI in its own process, so that a blocking open fails the test by timeout, not by hanging it."""
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", *map(str, args), "-f", "json",
                           "--no-plugins", "-q"], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _skipped(report) -> dict:
    return {d["path"]: d["message"] for d in report["diagnostics"] if d["severity"] == "info"}


def test_a_fifo_a_socket_and_a_device_link_are_listed_not_read(tmp_path):
    folder = _incident(tmp_path)
    os.mkfifo(folder / "nccl_trace_rank_0.pipe")  # where PyTorch's Flight Recorder pipe lives
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "agent.sock"))
    os.symlink("/dev/zero", folder / "zeros.log")
    try:
        report = _analyze(folder, timeout=30)
    finally:
        server.close()
    skipped = _skipped(report)
    assert "FIFO" in skipped["nccl_trace_rank_0.pipe"]
    assert "socket" in skipped["agent.sock"]
    # /dev/zero is outside the folder: skipped as a symlink leaving it ...
    assert "outside the given paths" in skipped["zeros.log"]
    # ... and the regular files still give the verdict they support
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]


def test_a_device_is_refused_even_when_links_are_followed(tmp_path):
    folder = _incident(tmp_path)
    os.symlink("/dev/zero", folder / "zeros.log")
    report = _analyze(folder, "-L", timeout=30)
    assert "character device" in _skipped(report)["zeros.log"]
    assert report["verdict"] == "deadlock"


def test_a_fifo_named_on_the_command_line_does_not_block(tmp_path):
    folder = _incident(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    report = _analyze(fifo, folder, timeout=30)
    assert "FIFO" in _skipped(report)[str(fifo)]
    assert report["verdict"] == "deadlock"


def test_open_regular_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        open_regular(str(fifo))
    with pytest.raises(InputError, match="FIFO"):
        read_head(str(fifo))


def test_symlinks_inside_the_folder_are_read_and_those_leaving_it_only_with_follow(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(os.path.join(CORPUS, "rank1.pyspy.txt"), outside / "rank1.pyspy.txt")
    folder = tmp_path / "incident"
    folder.mkdir()
    shutil.copy(os.path.join(CORPUS, "rank0.pyspy.txt"), folder / "real_rank0.txt")
    os.symlink(folder / "real_rank0.txt", folder / "rank0.pyspy.txt")   # inside: read
    os.symlink(outside / "rank1.pyspy.txt", folder / "rank1.pyspy.txt")  # leaves the folder
    report = _analyze(folder)
    assert "outside the given paths" in _skipped(report)["rank1.pyspy.txt"]
    assert "1" not in report["ranks"] or report["ranks"]["1"]["state"] == "unknown"
    assert report["ranks"]["0"]["op"] == "send"
    followed = _analyze(folder, "--follow-symlinks")
    assert "rank1.pyspy.txt" not in _skipped(followed)
    assert followed["verdict"] == "deadlock" and followed["culprit_ranks"] == [0, 1]


def test_symlinked_folders_and_loops(tmp_path):
    folder = _incident(tmp_path)
    os.symlink(folder, folder / "again")            # a loop through a folder link
    os.symlink(folder / "loop_a", folder / "loop_b")
    os.symlink(folder / "loop_b", folder / "loop_a")  # a loop of file links
    os.symlink(tmp_path / "missing", folder / "dangling")
    for extra in ((), ("-L",)):
        report = _analyze(folder, *extra, timeout=30)
        skipped = _skipped(report)
        assert "symlink loop" in skipped["loop_a"] and "symlink loop" in skipped["loop_b"]
        assert "broken symlink" in skipped["dangling"]
        assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]
        # the folder link is never walked twice: each dump is read once
        assert sorted(r["path"] for r in report["read"]) == sorted(PIPELINE)
