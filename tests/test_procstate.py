"""What `forensics collect` writes of the ranks' processes and the kernel
(rank<R>.proc.json, dmesg.txt) is evidence: read, never listed as not read;
a zombie or vanished rank is not alive, one in uninterruptible sleep or
stopped is cited; the kernel's OOM kill of a rank is found anywhere in the
kernel log."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import forensics
from forensics.ingest import procstate, statements
from forensics.ingest.textio import InputError, read_head
from forensics.live.collect import _proc_facts
from forensics.plugins import BUILTIN_PLUGINS, Plugins

from conftest import CORPUS

CAPTURE = CORPUS / "real_collect_missing_rank_snapshots"  # written by `forensics collect --snapshots 3`
RANK2_PID = 28818


def capture(tmp_path):
    folder = tmp_path / "capture"
    shutil.copytree(CAPTURE, folder, ignore=shutil.ignore_patterns("expected.yaml"))
    return folder


def analyze(folder, builtins=BUILTIN_PLUGINS):
    return forensics.analyze(folder, jobs=1, plugins=Plugins(autoload=False, builtins=builtins))


def not_read(report) -> set[str]:
    """The files the report lists under "Not read"."""
    return {d.path for d in report.diagnostics if d.severity == "info" and d.line == 0}


def set_state(folder, rank, state, wchan=None, thread_states=None):
    path = folder / f"rank{rank}.proc.json"
    data = json.loads(path.read_text())
    data["status"]["State"] = state
    if wchan is not None:
        data["wchan"] = wchan
    for tid, (thread_state, thread_wchan) in (thread_states or {}).items():
        data["threads"][tid].update(state=thread_state, wchan=thread_wchan)
    path.write_text(json.dumps(data, indent=1))


# ------------------------------------------------------------------ the real capture

def test_the_collectors_proc_files_are_read_and_change_nothing_when_all_sleep(tmp_path, run_cli):
    result = run_cli("analyze", CAPTURE, "-f", "json", "-j", "1")
    report = json.loads(result.stdout)
    kinds = {entry["path"]: entry["kind"] for entry in report["read"]}
    assert {kinds.get(f"rank{r}.proc.json") for r in range(4)} == {"proc-state"}
    assert not any(d["path"].endswith("proc.json") for d in report["diagnostics"])
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [2]
    # the same verdict as without the reader: sleeping processes are what every rank of a hang looks like
    without = analyze(CAPTURE, tuple(b for b in BUILTIN_PLUGINS if b != "forensics.ingest.procstate"))
    assert without.verdict == report["verdict"] and {f"rank{r}.proc.json" for r in range(4)} <= not_read(without)


def test_a_zombie_rank_is_dead(tmp_path):
    folder = capture(tmp_path)
    set_state(folder, 2, "Z (zombie)", wchan="")
    report = analyze(folder)
    state = report.incident.ranks[2]
    assert report.verdict == "dead_rank" and state.is_dead
    assert state.ending.evidence.path == "rank2.proc.json" and state.ending.evidence.text == "State: Z (zombie)"
    # where the stack dump saw it before it ended is kept
    assert state.ending.activity == "data_loading" and "load_next_batch" in state.ending.why
    lines = (folder / "rank2.proc.json").read_text().splitlines()
    assert '"State": "Z (zombie)"' in lines[state.ending.evidence.line - 1]


def test_disk_sleep_of_the_process_and_of_a_thread_is_cited_with_the_kernel_function(tmp_path):
    folder = capture(tmp_path)
    set_state(folder, 2, "D (disk sleep)", wchan="nfs_wait_bit_killable",
              thread_states={"28848": ("D", "io_schedule")})
    report = analyze(folder)
    state = report.incident.ranks[2]
    assert not state.is_dead and report.verdict == "missing_rank"
    cited = {e.text: e.line for e in state.log_events if e.path == "rank2.proc.json"}
    assert set(cited) == {"State: D (disk sleep) — wchan: nfs_wait_bit_killable",
                          "thread 28848 (python3): state D (disk sleep) — wchan: io_schedule"}
    lines = (folder / "rank2.proc.json").read_text().splitlines()
    assert '"28848": {' in lines[cited["thread 28848 (python3): state D (disk sleep) — wchan: io_schedule"] - 1]
    # the other ranks, asleep in their all_reduce, cite nothing of the kind
    assert not [e for r in (0, 1, 3) for e in report.incident.ranks[r].log_events if e.path.endswith("proc.json")]


def test_a_broken_proc_file_is_one_diagnostic_naming_file_and_line(tmp_path):
    folder = capture(tmp_path)
    path = folder / "rank1.proc.json"
    path.write_text(path.read_text()[:400])
    report = analyze(folder)
    (problem,) = [d for d in report.diagnostics if d.path == "rank1.proc.json"]
    assert problem.message.startswith("invalid JSON") and problem.line > 1
    assert report.verdict == "missing_rank"


# ------------------------------------------------------------------ real processes, read by the collector's own code

def _write_proc(folder, rank, pid):
    (folder / f"rank{rank}.proc.json").write_text(json.dumps(_proc_facts(pid), indent=1))
    (folder / "manifest.json").write_text(json.dumps({"ranks": {str(rank): {"pid": pid, "host": "h"}}}))
    return procstate.parse(str(folder / f"rank{rank}.proc.json"), f"rank{rank}.proc.json")


def _wait_for_state(pid, letter):
    """Signals are delivered asynchronously: poll /proc until the state shows."""
    for _ in range(500):
        with open(f"/proc/{pid}/stat") as handle:
            if handle.read().rsplit(") ", 1)[1][:1] == letter:
                return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never reached state {letter}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_stopped_zombie_and_vanished_processes_as_the_collector_records_them(tmp_path):
    child = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        _wait_for_state(child.pid, "T")
        (record,) = _write_proc(tmp_path, 1, child.pid).records
        assert record.rank == 1 and record.pid == child.pid and record.alive is True
        assert record.errors == (record.evidence,) and record.evidence.text.startswith("State: T (stopped)")
        os.kill(child.pid, signal.SIGKILL)
        _wait_for_state(child.pid, "Z")
        (record,) = _write_proc(tmp_path, 1, child.pid).records
        assert record.alive is False and record.evidence.text.startswith("State: Z (zombie)") and not record.errors
    finally:
        child.kill()
        child.wait()
    (record,) = _write_proc(tmp_path, 1, child.pid).records  # reaped: /proc has nothing of it
    assert record.alive is False
    assert record.evidence.text == f"process {child.pid}: gone when /proc was read (no state, no threads)"


# ------------------------------------------------------------------ dmesg.txt

def _kernel_lines(count, start=12850.0):
    return "".join(f"[{start + i * 0.25:12.6f}] audit: type=1400 audit(1796000000.{i:03d}:{i}): apparmor=\"ALLOWED\" "
                   f"operation=\"open\" profile=\"unconfined\" name=\"/proc/{1000 + i}/status\" pid={1000 + i}\n"
                   for i in range(count))


OOM = ("[13160.250000] Out of memory: Killed process 28818 (python3) total-vm:41237654kB, anon-rss:19844102kB, "
       "file-rss:40211kB, shmem-rss:0kB, UID:1000 pgtables:40220kB oom_score_adj:0\n")


def test_a_kernel_log_with_nothing_of_note_is_read_not_skipped(tmp_path):
    folder = capture(tmp_path)
    (folder / "dmesg.txt").write_text(_kernel_lines(40))
    report = analyze(folder)
    assert "dmesg.txt" not in not_read(report)
    (read,) = [r for r in report.incident.read if r.path == "dmesg.txt"]
    assert read.kind == "kernel-log"
    assert report.verdict == "missing_rank"


def test_an_oom_kill_of_a_rank_past_the_head_of_the_kernel_log_is_found(tmp_path):
    folder = capture(tmp_path)
    (folder / "dmesg.txt").write_text(_kernel_lines(1200) + OOM)
    assert len((folder / "dmesg.txt").read_bytes()) > len(read_head(str(folder / "dmesg.txt")))
    report = analyze(folder)
    assert report.verdict == "dead_rank" and [c.rank for c in report.culprits] == [2]
    lead = report.findings[0]
    assert lead.ranks == (2,) and any(e.path == "dmesg.txt" and e.line == 1201 for e in lead.evidence)
    # without the kernel-log reader, the catalogue reader finds the kill too: the scan shows it the log's tail
    without = analyze(folder, tuple(b for b in BUILTIN_PLUGINS if b != "forensics.ingest.procstate"))
    assert without.verdict == "dead_rank" and "dmesg.txt" not in not_read(without)


def test_a_kernel_log_that_opens_with_a_catalogued_line_is_read_once(tmp_path):
    head = (OOM + _kernel_lines(3)).encode()
    assert procstate.sniff_kernel_log("dmesg.txt", head) == procstate.KERNEL_LOG  # a kernel log by its shape,
    # which its hook leaves to the statements reader, whose claim it sees
    assert Plugins(autoload=False).each("forensics_sniff", path="dmesg.txt", head=head) == [statements.KIND]
    assert Plugins(autoload=False).each("forensics_sniff", path="dmesg.txt", head=_kernel_lines(3).encode()) \
        == [procstate.KERNEL_LOG]
    folder = capture(tmp_path)
    (folder / "dmesg.txt").write_bytes(head)
    report = analyze(folder)
    assert [r.kind for r in report.incident.read if r.path == "dmesg.txt"] == ["messages"]
    assert report.verdict == "dead_rank"


@pytest.mark.parametrize("name, text", [
    ("dmesg-notes.txt", "We looked at dmesg on node 3 and saw nothing.\n"),
    ("train.log", _kernel_lines(3)),
])
def test_only_kernel_logs_are_claimed(name, text):
    assert procstate.sniff_kernel_log(name, text.encode()) is None
    assert procstate.KERNEL_LOG not in Plugins(autoload=False).each("forensics_sniff", path=name, head=text.encode())


@pytest.mark.parametrize("first", [
    "[Sun Dec  6 00:43:15 2026] NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
    "2026-12-06T00:43:15,123456+00:00 gpu-b12 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
    "Dec  6 00:43:15 gpu-b12 kernel: [  12.345678] NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
    "<6>[   12.345678] NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
])
def test_the_kernel_logs_time_formats_are_claimed(first):
    assert procstate.sniff_kernel_log("node3.dmesg.txt", (first + "\n").encode()) == procstate.KERNEL_LOG


def test_a_proc_file_that_ties_to_no_rank_says_so(tmp_path):
    path = tmp_path / "proc.json"
    path.write_text(json.dumps({"status": {"State": "S (sleeping)"}, "threads": {}}))
    assert procstate.sniff(str(path), path.read_bytes()) is None  # not the collector's shape (no pid first)
    path.write_text(json.dumps({"pid": 0, "status": {"State": "Z (zombie)"}, "threads": {}}))
    facts = procstate.parse(str(path), "proc.json")
    assert not facts.records and "ties this process to a rank" in facts.diagnostics[0].message
    with pytest.raises(InputError):
        path.write_text('{"pid": 3, "status": []}')
        procstate.parse(str(path), "rank3.proc.json")
