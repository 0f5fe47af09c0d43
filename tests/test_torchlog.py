"""The c10d / torchrun log reader: real logs, hand-made fixtures, bad input."""

import gzip
import json
import os
import re
import random
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.ingest import torchlog
from forensics.ingest.textio import InputError, read_head
from forensics.model import (Artifact, CommOp, Diagnostic, Evidence, GroupProgress, ProcessGroup,
                             ProcessRecord, StuckSignal)

from conftest import CORPUS, SAMPLES
from helpers import mutate_lines

FIXTURES = Path(__file__).parent / "fixtures" / "torchlog"
DETAIL = SAMPLES / "collective_mismatch_detail"
HEALTHY = SAMPLES / "healthy_then_mismatch_at_exit"
P2P = SAMPLES / "p2p_cycle_2"
REAL_LOGS = sorted(p for p in list(SAMPLES.glob("*/*.log*")) + list(CORPUS.glob("real_*/*.log"))
                   if p.stat().st_size)

needs_samples = pytest.mark.skipif(not DETAIL.exists(), reason="shared samples not available")


# Jobs captured while they hung (every rank ended by the collector's SIGTERM);
# the post-mortem captures, whose jobs failed on their own, are not.
HANG_CAPTURES = sorted(f for f in CORPUS.glob("real_*") if (f / "expected.yaml").is_file()
                       and 'mode: "post-mortem"' not in (f / "expected.yaml").read_text())

def parse(path, display=None):
    return torchlog.parse(str(path), display or Path(path).name)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def own(facts, rank=None):
    """The records a file states about its own processes ("torch")."""
    found = [r for r in facts.records if r.source == "torch"]
    return found if rank is None else next(r for r in found if r.rank == rank)


def claims(facts):
    return {r.rank: r for r in facts.records if r.source == "torch-peer-claim"}


def launched(facts):
    return {r.rank: r for r in facts.records if r.source == "launcher"}


def op_of(record):
    op = record.last_op
    return None if op is None else (op.op, op.group, op.seq, op.state, op.sizes, op.dtype)


def lines(records_or_evidence):
    return [e.line for e in records_or_evidence]


def pid_map(folder):
    data = json.loads((folder / "pid_map.json").read_text())
    return {int(rank): entry["pid"] for rank, entry in data["ranks"].items()}


# ---------------------------------------------------------------- sniffing


@needs_samples
def test_sniff_claims_c10d_and_launcher_logs_only():
    for path in sorted(SAMPLES.glob("*/*")) + sorted(p for folder in HANG_CAPTURES for p in folder.glob("*")):
        if not path.is_file() or not path.stat().st_size:
            continue
        expected = ".stderr.log" in path.name or path.name.startswith("torchrun.log")
        assert torchlog.sniff(str(path), read_head(str(path))) is expected, path


def test_sniff_hand_made_forms():
    for path in sorted(FIXTURES.glob("*.log")):
        assert torchlog.sniff(str(path), path.read_bytes()) is (path.name != "nccl_only.log"), path.name
    for other in ("gdb", "pyspy"):
        for path in sorted((FIXTURES.parent / other).glob("*")):
            assert not torchlog.sniff(str(path), path.read_bytes()), path
    assert torchlog.sniff("x", b"\x1b[31m[rank0]:[E1129 10:11:12.123456789 ProcessGroupNCCL.cpp:616] boom\x1b[0m\n")
    assert torchlog.sniff("x", b"[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught ...\n")
    assert torchlog.sniff("x", b"user output\nRoot Cause (first observed failure):\n")
    assert torchlog.sniff("x", b"RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
                               b"Timed out waiting 60000ms for recv operation to complete\n")
    assert torchlog.sniff("x", b"[rank0]: RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms\n")
    assert not torchlog.sniff("x", b'  exception: "RuntimeError: \'Detected mismatch between collectives\n')
    assert not torchlog.sniff("x", b"[rank 0] 10:49:31 init done: world_size=4 host=vm pid=7399\n")
    assert not torchlog.sniff("x", b"\x00\x01\x02" * 100)
    assert not torchlog.sniff("x", b"node1:2837:2837 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n")


def test_hooks(tmp_path):
    path = FIXTURES / "ray.log"
    assert torchlog.forensics_sniff(path=str(path), head=path.read_bytes()) == "torch-log"
    assert torchlog.forensics_sniff(path="x", head=b'{"0": {"current_op": "send"}}') is None
    facts = torchlog.forensics_parse(artifact=Artifact("torch-log", str(path), "logs/worker.log"))
    assert facts.kind == "torch-log" and facts.path == "logs/worker.log"
    assert own(facts, 1).evidence.path == "logs/worker.log"
    assert torchlog.forensics_parse(artifact=Artifact("gdb", str(path), "x")) is None


# ---------------------------------------------------------------- real logs


@needs_samples
def test_detail_fingerprint_mismatch_per_rank():
    # SequenceNumber=3 counts from 0; every seq here counts from 1, as WorkNCCL and FR do.
    expected = {0: ("all_reduce", "0", 4, "started", ((256, 256),), "Float")}
    expected.update({r: ("broadcast", "0", 4, "started", ((256, 256),), "Float") for r in (1, 2, 3)})
    for rank in range(4):
        facts = parse(DETAIL / f"rank{rank}.stderr.log")
        assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (27, 0, [])
        record = own(facts, rank)
        assert len(own(facts)) == 1
        assert op_of(record) == expected[rank]
        assert record.last_op.evidence.line == 27
        assert record.last_op.evidence.text.startswith(f"[rank{rank}]: RuntimeError: Detected mismatch")
        assert [op.seq for op in record.recent_ops] == [1, 2, 3]
        assert lines(record.errors) == [27]
        assert record.evidence.line == 6  # the first line that names the rank
        peer = 1 if rank == 0 else 0
        assert record.peers_in_errors == (peer,)
        claim = claims(facts)
        assert list(claim) == [peer]
        assert op_of(claim[peer]) == expected[peer]
        assert claim[peer].errors == (record.last_op.evidence,)


@needs_samples
def test_detail_torchrun_console_and_failure_summary():
    facts = parse(DETAIL / "torchrun.log")
    pids = pid_map(DETAIL)
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (317, 0, [])
    workers = {r.rank: r for r in own(facts)}
    assert sorted(workers) == [0, 1, 2, 3]
    for rank, record in workers.items():
        assert (record.local_rank, record.pid, record.host) == (rank, pids[rank], "localhost")
        assert record.last_op.op == ("all_reduce" if rank == 0 else "broadcast")
        assert record.last_op.seq == 4
    summary = launched(facts)
    assert {r: (x.pid, x.local_rank, x.exit_code, x.signal, x.alive) for r, x in summary.items()} == {
        0: (20146, 0, -15, "SIGTERM", False), 1: (20147, 1, 1, "", False),
        2: (20148, 2, -15, "SIGTERM", False), 3: (20149, 3, -15, "SIGTERM", False)}
    roots = [r for r, x in summary.items() if any(e.text.startswith("Root Cause") for e in x.errors)]
    assert roots == [1]
    assert [e.text.strip() for e in summary[1].errors] == [
        "E1129 09:54:09.399000 20143 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
        "local_rank: 1 (pid: 20147) of binary: /opt/trainenv/bin/python",
        "Root Cause (first observed failure):", "exitcode  : 1 (pid: 20147)",
        "traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]
    assert "Sending process 20146 closing signal SIGTERM" in summary[0].errors[0].text
    assert sorted((host, pid, rank) for host, pid, rank, _ in facts.pid_ranks) == [
        ("localhost", pids[r], r) for r in range(4)]
    assert all(evidence.text.strip().startswith("rank      :") for *_, evidence in facts.pid_ranks)


@needs_samples
def test_garbage_peer_fingerprint_is_only_a_claim():
    """TRUTH.yaml: rank 2 called barrier #962; what ranks 0, 1, 3 say about it
    (`SequenceNumber=0OpType=REDUCE`) and what rank 2 says about rank 0
    (`SequenceNumber=0OpType=SCATTER`) are garbage."""
    facts = parse(HEALTHY / "rank2.stderr.log.gz", "rank2.stderr.log")
    assert (facts.lines_read, facts.unrecognized) == (982, 0)
    assert op_of(own(facts, 2)) == ("barrier", "0", 963, "started", (), "")
    assert [op.seq for op in own(facts, 2).recent_ops] == [960, 961, 962]
    assert {r: op_of(c) for r, c in claims(facts).items()} == {0: ("scatter", "0", 1, "started", (), "")}
    for rank in (0, 1, 3):
        facts = parse(HEALTHY / f"rank{rank}.stderr.log.gz")
        assert op_of(own(facts, rank)) == ("all_reduce", "0", 963, "started", ((384, 384),), "Float")
        assert {r: op_of(c) for r, c in claims(facts).items()} == {2: ("reduce", "0", 1, "started", (), "")}


@needs_samples
def test_self_claims_win_when_merged():
    from forensics.ingest import merge

    incident = merge([parse(HEALTHY / f"rank{r}.stderr.log.gz") for r in range(4)])
    assert incident.ranks[2].current_op.op == "barrier" and incident.ranks[2].current_op.seq == 963
    assert all(incident.ranks[r].current_op.op == "all_reduce" for r in (0, 1, 3))


@needs_samples
def test_healthy_then_mismatch_torchrun_console():
    facts = parse(HEALTHY / "torchrun.log.gz")
    assert (facts.lines_read, facts.unrecognized) == (4146, 0)
    workers = {r.rank: r for r in own(facts)}
    assert {r: (x.last_op.op, x.last_op.seq, x.pid) for r, x in workers.items()} == {
        0: ("all_reduce", 963, 21166), 1: ("all_reduce", 963, 21167),
        2: ("barrier", 963, 21168), 3: ("all_reduce", 963, 21169)}
    assert {r: op_of(c)[:3] for r, c in claims(facts).items()} == {0: ("scatter", "0", 1), 2: ("reduce", "0", 1)}
    summary = launched(facts)
    assert {r: (x.exit_code, x.signal) for r, x in summary.items()} == {r: (1, "") for r in range(4)}
    assert [r for r, x in summary.items() if x.errors and "Root Cause" in " ".join(e.text for e in x.errors)] == [0]


@needs_samples
@pytest.mark.parametrize("folder", [P2P] + [f for f in HANG_CAPTURES if (f / "torchrun.log").is_file()
                                             and "\ncapture:" in (f / "expected.yaml").read_text()],
                         ids=lambda p: p.name)
def test_torchrun_failure_summaries(folder):
    facts = parse(folder / "torchrun.log")
    pids = pid_map(folder)
    assert facts.unrecognized == 0 and facts.diagnostics == []
    assert own(facts) == [] and claims(facts) == {}
    summary = launched(facts)
    assert {r: x.pid for r, x in summary.items()} == pids
    for rank, record in summary.items():
        assert (record.local_rank, record.host, record.alive, record.exit_code, record.signal) == (
            rank, "localhost", False, -15, "SIGTERM")
        assert record.errors[-1].text.strip() == f"traceback : Signal 15 (SIGTERM) received by PID {pids[rank]}"
        root = any(e.text == "Root Cause (first observed failure):" for e in record.errors)
        assert root is (rank == 0)
    # The agent's first report names local rank 0; its own traceback is not a worker's.
    assert re.match(r"E\d{4} ", summary[0].errors[0].text) and "failed (exitcode: -15) local_rank: 0" in \
        summary[0].errors[0].text  # glog's E<month><day>: the day of the capture
    assert sorted((h, p, r) for h, p, r, _ in facts.pid_ranks) == [("localhost", pids[r], r) for r in sorted(pids)]
    if folder.name == "real_missing_rank_early_exit":
        assert [e.line for r in (2, 3) for e in summary[r].errors[:1]] == [5, 6]
        assert "Sending process 8800 closing signal SIGTERM" in summary[2].errors[0].text


def test_abort_summary_names_the_rank_that_aborted_first():
    """A job that crashed rather than hung (corpus/real_two_threads_one_group_abort): the
    summary's root cause is rank 1's SIGABRT; rank 0 was ended by the agent afterwards."""
    folder = CORPUS / "real_two_threads_one_group_abort"
    facts = parse(folder / "torchrun.log")
    summary = launched(facts)
    assert {r: (x.pid, x.exit_code, x.signal) for r, x in summary.items()} == {
        0: (17905, -15, "SIGTERM"), 1: (17906, -6, "SIGABRT")}
    assert [any(e.text == "Root Cause (first observed failure):" for e in summary[r].errors) for r in (0, 1)] == [
        False, True]
    crashed = parse(folder / "rank1.stderr.log")
    (record,) = crashed.records
    assert record.alive is False and record.signal == "SIGABRT"
    assert "Is there a distributed collective mismatch" in record.errors[-1].text


@needs_samples
def test_p2p_cycle_summary_exact():
    facts = parse(P2P / "torchrun.log")
    assert facts.records == [
        ProcessRecord("launcher", "torchrun.log", host="localhost", pid=19682, rank=0, local_rank=0,
                      errors=(Evidence("torchrun.log", 5, "E1129 09:51:00.973000 19679 torch/distributed/elastic/"
                                                          "multiprocessing/api.py:1002] failed (exitcode: -15) local_rank: 0 "
                                                          "(pid: 19682) of binary: /opt/trainenv/bin/python"),
                              Evidence("torchrun.log", 36, "Root Cause (first observed failure):"),
                              Evidence("torchrun.log", 41, "  exitcode  : -15 (pid: 19682)  (SIGTERM)"),
                              Evidence("torchrun.log", 43, "  traceback : Signal 15 (SIGTERM) received by PID 19682")),
                      alive=False, exit_code=-15, signal="SIGTERM", evidence=Evidence("torchrun.log", 37, "[0]:")),
        ProcessRecord("launcher", "torchrun.log", host="localhost", pid=19683, rank=1, local_rank=1,
                      errors=(Evidence("torchrun.log", 32, "  exitcode  : -15 (pid: 19683)  (SIGTERM)"),
                              Evidence("torchrun.log", 34, "  traceback : Signal 15 (SIGTERM) received by PID 19683")),
                      alive=False, exit_code=-15, signal="SIGTERM", evidence=Evidence("torchrun.log", 28, "[1]:"))]
    assert [(h, p, r, e.line) for h, p, r, e in facts.pid_ranks] == [("localhost", 19682, 0, 40),
                                                                     ("localhost", 19683, 1, 31)]


@needs_samples
def test_user_output_and_empty_logs():
    for path in sorted(CORPUS.glob("real_*/rank*.stdout.log")):
        facts = parse(path)
        assert facts.records == [] and facts.unrecognized == 0
        assert facts.lines_read == len(path.read_text().splitlines())
        assert [d.message for d in facts.diagnostics] == ["no c10d or launcher records found"]
    empty = next(p for p in sorted(CORPUS.glob("real_*/rank0.stderr.log")) if not p.stat().st_size)
    with pytest.raises(InputError, match="empty file"):
        parse(empty)


# ---------------------------------------------------------------- hand-made fixtures (real lines)


def test_watchdog_timeout_names_its_group_on_the_next_line():
    """The timeout line has only `[Rank 0]`; the watchdog's next line says PG GUID 1."""
    facts = parse(FIXTURES / "watchdog_two_ranks.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (45, 0, [])
    for rank, elapsed, timeout_line, failure_line in ((0, 600081, 2, 5), (1, 600088, 3, 4)):
        record = own(facts, rank)
        op = record.last_op
        assert (op.op, op.group, op.seq, op.state, op.timeout_ms, op.elapsed_ms) == (
            "broadcast", "1", 1, "started", 600000, elapsed)
        assert op.past_timeout and record.timed_out and record.alive is None
        assert record.progress == {"1": GroupProgress(enqueued=547, completed=-1, evidence=record.progress["1"].evidence)}
        assert record.progress["1"].evidence.line == failure_line
        assert lines(record.errors)[:2] == sorted([timeout_line, failure_line])
    # The two `terminate called` blocks carry no prefix: some process of this file aborted.
    loose = [r for r in own(facts) if r.rank is None]
    assert len(loose) == 1 and (loose[0].alive, loose[0].signal) == (False, "SIGABRT")
    assert lines(loose[0].errors) == [32, 33, 34]
    assert [(s.kind, s.detail, s.evidence.line) for s in facts.stuck] == [
        ("watchdog_timeout", "rank 0: broadcast #1 ran 600081 ms past its 600000 ms timeout", 2),
        ("watchdog_timeout", "rank 1: broadcast #1 ran 600088 ms past its 600000 ms timeout", 3)]
    assert facts.stuck[0].detail_zh == "rank 0：broadcast #1 已运行 600081 毫秒，超过 600000 毫秒的超时"
    assert facts.groups == [ProcessGroup("1", "", ())]


def test_default_group_console_with_tqdm_and_ansi():
    facts = parse(FIXTURES / "default_pg_console.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (54, 0, [])
    record = own(facts, 0)
    assert len(own(facts)) == 1  # the unprefixed `terminate called` is this (only) rank's
    op = record.last_op
    assert (op.op, op.group, op.seq, op.timeout_ms, op.elapsed_ms) == ("all_reduce", "0", 20585, 600000, 600000)
    # tqdm's text before the glued prefix is not evidence; ANSI colours are gone.
    assert op.evidence.line == 3 and op.evidence.text.startswith("[rank0]:[E709 17:05:38.162555850 ")
    assert record.errors[0].line == 3
    assert not any("\x1b" in e.text for e in record.errors)
    progress = record.progress["0"]
    assert (progress.enqueued, progress.started, progress.completed, progress.evidence.line) == (20589, None, 20584, 7)
    assert (record.alive, record.signal, record.timed_out) == (False, "SIGABRT", True)
    assert (record.pid, record.host) == (56213, "distributed-training.us-central1-a.c.lance-dev-ayush.internal")
    worker = launched(facts)[0]
    assert (worker.pid, worker.exit_code, worker.signal) == (56213, -6, "SIGABRT")
    assert "Root Cause (first observed failure):" in [e.text for e in worker.errors]
    assert [s.detail for s in facts.stuck] == [
        "rank 0: all_reduce #20585 ran 600000 ms past its 600000 ms timeout",
        "rank 0: a collective timed out on this rank (last enqueued work 20589, last completed 20584)"]


def test_desync_report_lagging_ranks():
    """Rank 0 times out in #6; rank 2 joined #5 and never finished it, rank 3
    finished #5 and never joined #6, rank 1 waits in #6 like rank 0."""
    facts = parse(FIXTURES / "desync_lagging.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (15, 0, [])
    reporter = own(facts, 0)
    assert op_of(reporter)[:4] == ("all_reduce", "0", 6, "started")
    progress = reporter.progress["0"]
    assert (progress.enqueued, progress.started, progress.completed) == (6, 6, 5)
    assert lines(reporter.errors) == [2, 4, 6, 7, 9, 10, 11, 12, 13, 14, 15]
    assert reporter.peers_in_errors == (1, 2, 3)
    peers = claims(facts)
    assert {r: (c.progress["0"].started, c.progress["0"].completed) for r, c in peers.items()} == {
        1: (6, 5), 2: (5, 4), 3: (5, 5)}
    assert {r: op_of(c)[:4] for r, c in peers.items()} == {
        1: ("all_reduce", "0", 6, "started"), 2: ("all_reduce", "0", 5, "started"),
        3: ("all_reduce", "0", 5, "completed")}
    assert {r: c.evidence.line for r, c in peers.items()} == {1: 14, 2: 6, 3: 7}


def test_desync_report_ranks_that_never_joined():
    facts = parse(FIXTURES / "desync_missing.log")
    reporter = own(facts, 1)
    assert op_of(reporter)[:3] == ("broadcast", "0", 3)
    progress = reporter.progress["0"]
    assert (progress.enqueued, progress.completed, progress.evidence.line) == (3, 2, 4)
    peers = claims(facts)
    assert sorted(peers) == [2, 3]
    for claim in peers.values():
        assert claim.last_op is None
        assert (claim.progress["0"].started, claim.progress["0"].completed) == (-1, -1)
        assert claim.errors[0].text.startswith("\t - To our best knowledge, ranks [2, 3]")


def test_desync_report_of_a_subgroup_names_no_global_ranks(tmp_path):
    text = ("[rank4]:[E1129 10:31:12.123456789 ProcessGroupNCCL.cpp:1200] [PG ID 1 PG GUID 3 Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=3, OpType=BROADCAST, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=60000) ran for 60012 milliseconds before timing out.\n"
            "\t - [0] Timeout at collective: BROADCAST, #3\n"
            "\t - To our best knowledge, ranks [1] are the lagging ranks that caused this timeout. "
            "They never joined any collectives\n")
    facts = parse(write(tmp_path, "sub.log", text))
    assert claims(facts) == {}
    assert op_of(own(facts, 4))[:3] == ("broadcast", "3", 3)
    assert [(d.line, d.severity) for d in facts.diagnostics] == [(1, "info")]


def test_heartbeat_dump_signal_and_watchdog_hang():
    facts = parse(FIXTURES / "heartbeat.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (7, 0, [])
    record = own(facts, 5)
    progress = record.progress["0"]
    assert (progress.enqueued, progress.completed, progress.evidence.line) == (56116, 56116, 3)
    # `from  rank 3` (two spaces) and `remote error detected from rank: 3` in the default group;
    # the remote error of PG GUID 7 names a group-local rank, not a global one.
    assert record.peers_in_errors == (3,)
    assert (record.alive, record.signal, record.timed_out) == (False, "SIGABRT", True)
    assert lines(record.errors) == [3, 4, 5, 6, 7]
    assert [(s.kind, s.detail) for s in facts.stuck] == [
        ("watchdog_timeout", "rank 5: rank 3 reported a collective timeout (last enqueued work 56116, "
                             "last completed 56116)"),
        ("watchdog_timeout", "rank 5: the ProcessGroupNCCL watchdog made no progress for 480 s")]
    assert facts.groups == [ProcessGroup("0", "default_pg", ()), ProcessGroup("7", "dp_replicate", ())]


def test_monitored_barrier_on_rank_zero():
    facts = parse(FIXTURES / "monitored_barrier.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (9, 0, [])
    record = own(facts, 0)
    assert record.timed_out and record.peers_in_errors == (1,) and record.last_op is None
    assert [e.text for e in record.errors] == [
        "[rank0]: RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms",
        "[rank0]: [gloo/transport/tcp/pair.cc:598] Connection closed by peer "
        "[2401:db00:eef0:1100:3560:0:1c05:25d]:8594"]
    missing = claims(facts)[1]
    assert missing.last_op is None and missing.progress == {} and lines(missing.errors) == [7]
    assert [(s.kind, s.detail, s.evidence.line) for s in facts.stuck] == [
        ("op_past_timeout", "rank 0: rank(s) 1 failed to pass monitoredBarrier in 2000 ms", 7)]
    other = parse(FIXTURES / "monitored_barrier_peer.log")
    assert own(other, 1).peers_in_errors == (0,) and lines(own(other, 1).errors) == [1]


def test_monitored_barrier_in_the_detail_wrapper():
    facts = parse(FIXTURES / "wrapper_barrier.log")
    record = own(facts, 0)
    assert op_of(record) == ("all_reduce", "0", 8, "started", ((1024,),), "Float")
    assert lines(record.errors) == [2, 6, 7] and record.peers_in_errors == (1, 2)
    assert sorted(claims(facts)) == [1, 2]
    assert [s.detail for s in facts.stuck] == ["rank 0: rank(s) 1, 2 failed to pass monitoredBarrier in 60000 ms"]


def test_gloo_timeouts_and_pair_errors():
    facts = parse(FIXTURES / "gloo_send_timeout.log")
    record = own(facts, 4)
    assert record.timed_out and lines(record.errors) == [4]
    assert [(s.kind, s.detail) for s in facts.stuck] == [
        ("op_past_timeout", "rank 4: a Gloo send waited 1800000 ms and timed out")]
    facts = parse(FIXTURES / "gloo_errors.log")
    assert lines(own(facts, 2).errors) == [1, 2, 3]
    assert [s.detail for s in facts.stuck] == ["rank 2: a Gloo recv waited 60000 ms and timed out"]


def test_ray_prefix_gives_pid_and_node():
    facts = parse(FIXTURES / "ray.log")
    record = own(facts, 1)
    assert (record.pid, record.host) == (3490362, "10.1.2.3")
    assert op_of(record)[:3] == ("all_gather_into_tensor", "0", 88)
    assert (record.progress["0"].enqueued, record.progress["0"].completed) == (90, 87)


def test_old_prefix_without_time_or_global_rank():
    facts = parse(FIXTURES / "old_torch.log")
    record, = own(facts)
    # `[Rank 1]` is a rank of the group the work ran in; alone in a file whose name and lines name no other
    # rank or group, it is the only rank there is: taken as global rank 1, and the report says so
    assert record.rank == 1
    assert any("[Rank 1]" in d.message and "taken as the global rank" in d.message for d in facts.diagnostics)
    assert op_of(record) == ("all_reduce", "0", 5, "started", ((1024, 8),), "")
    assert (record.progress["0"].enqueued, record.progress["0"].completed) == (6, 4)
    assert lines(record.errors) == [1, 2, 3, 4]
    assert facts.stuck[0].detail == "rank 1: all_reduce #5 ran 1800523 ms past its 1800000 ms timeout"


def test_hard_wrapped_lines_are_rejoined():
    facts = parse(FIXTURES / "wrapped.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (5, 0, [])
    record = own(facts, 3)
    assert op_of(record)[:3] == ("send", "0", 13)
    wrapped, = record.recent_ops
    assert (wrapped.op, wrapped.seq, wrapped.timeout_ms, wrapped.elapsed_ms) == ("reduce_scatter", 12, 30000, 30007)
    original = "".join((FIXTURES / "wrapped.log").read_text().split("\n")[:3])
    assert wrapped.evidence == Evidence("wrapped.log", 1, original)
    assert [s.detail for s in facts.stuck] == [
        "rank 3: reduce_scatter #12 ran 30007 ms past its 30000 ms timeout",
        "rank 3: send #13 timed out in blocking wait (30000 ms timeout)"]


@needs_samples
def test_hard_wrapped_real_mismatch(tmp_path):
    text = (DETAIL / "rank0.stderr.log").read_text()
    wrapped = "\n".join(part for line in text.split("\n")
                        for part in ([line[i:i + 100] for i in range(0, len(line), 100)] or [""]))
    facts = parse(write(tmp_path, "rank0.stderr.log", wrapped))
    assert facts.unrecognized == 0
    assert op_of(own(facts, 0)) == ("all_reduce", "0", 4, "started", ((256, 256),), "Float")
    assert op_of(claims(facts)[1])[:3] == ("broadcast", "0", 4)


def test_unrecognized_records_are_counted_and_cited():
    facts = parse(FIXTURES / "unrecognized.log")
    assert (facts.lines_read, facts.unrecognized) == (6, 3)
    assert [(d.line, d.message.split(":", 1)[0]) for d in facts.diagnostics] == [
        (3, "unrecognized c10d log line (unexpected text at column 132)"),
        (4, "unrecognized c10d log line (unexpected text at column 165)"),
        (6, "unrecognized c10d log line (the record ends too soon)")]
    text = (FIXTURES / "unrecognized.log").read_text().split("\n")
    assert text[2].index("five") + 1 == 132 and text[3].index("garbled") + 1 == 165
    # What could not be read is still cited as an error of its process.
    assert lines(own(facts, 0).errors) == [3, 4, 6]


def test_unrecognized_diagnostics_are_capped(tmp_path):
    bad = "[rank0]:[E1129 12:00:01.000000002 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective " \
          "operation timeout: WorkNCCL(SeqNum=x{})\n"
    facts = parse(write(tmp_path, "bad.log", "".join(bad.format(i) for i in range(60))))
    assert facts.unrecognized == 60
    assert [d.line for d in facts.diagnostics] == list(range(1, 51)) + [0]
    assert facts.diagnostics[-1].message == "10 more unrecognized records not listed"


def test_nccl_lines_are_read_not_unrecognized():
    facts = parse(FIXTURES / "nccl_mixed.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (5, 0, [])
    assert op_of(own(facts, 0))[:3] == ("all_reduce", "0", 2)
    facts = parse(FIXTURES / "nccl_only.log")
    assert (facts.lines_read, facts.unrecognized, facts.records) == (3, 0, [])


def test_older_launcher_logging_and_child_traceback():
    facts = parse(FIXTURES / "launcher_old.log")
    assert own(facts) == []
    summary = launched(facts)
    assert {r: (x.pid, x.local_rank, x.exit_code, x.signal, x.host) for r, x in summary.items()} == {
        8: (1234, 0, 1, "", "node07.cluster"), 9: (1235, 1, -15, "SIGTERM", "node07.cluster")}
    assert summary[8].errors[-1].text == "  RuntimeError: NCCL communicator was aborted on rank 8."
    assert "Root Cause (first observed failure):" in [e.text for e in summary[8].errors]
    assert summary[9].errors[0].line == 1  # the agent's SIGTERM, before the summary
    assert sorted((h, p, r) for h, p, r, _ in facts.pid_ranks) == [("node07.cluster", 1234, 8),
                                                                   ("node07.cluster", 1235, 9)]


def test_fingerprint_of_a_subgroup_makes_no_claim(tmp_path):
    line = ("[rank5]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=4, OpType=ALLREDUCE, TensorShape=[8], TensorDtypes=Float, "
            "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu)), but Rank 0 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=4, OpType=BROADCAST).\n")
    facts = parse(write(tmp_path, "rank5.log", line))
    assert op_of(own(facts, 5))[:3] == ("all_reduce", "0", 5)
    assert claims(facts) == {}
    assert [(d.line, d.severity) for d in facts.diagnostics] == [(1, "info")]


def test_older_fingerprint_without_sequence_number(tmp_path):
    # Real line, formats.md §2d (index id 16755971083).
    line = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
            "CollectiveFingerPrint(OpType=ALLGATHER, TensorShape=[4], TensorDtypes=Float, "
            "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
            "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))), "
            "but Rank 2 is running collective: CollectiveFingerPrint(OpType=ALLGATHER).\n")
    facts = parse(write(tmp_path, "rank0.log", line))
    record, = own(facts)
    assert record.rank is None and op_of(record) == ("all_gather", "0", None, "started", ((4,),), "Float")
    assert op_of(claims(facts)[2]) == ("all_gather", "0", None, "started", (), "")


def test_flight_recorder_stack_is_one_record(tmp_path):
    # The FR traceback format, formats.md §1b.
    text = ("[rank0]:[E1129 10:11:12.123456789 ProcessGroupNCCL.cpp:670] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
            "Stack trace of the failed collective: \n"
            "#0 all_reduce from pytorch/torch/distributed/distributed_c10d.py:2696\n"
            "#1 wrapper from pytorch/torch/distributed/c10d_logger.py:83\n"
            "#2 bar from /home/user/repro.py:15\n"
            "[rank0]:[E1129 10:11:12.223456789 ProcessGroupNCCL.cpp:684] [Rank 0] Some NCCL operations have failed "
            "or timed out.\n")
    facts = parse(write(tmp_path, "fr.log", text))
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (5, 0, [])
    assert lines(own(facts, 0).errors) == [5]


# ---------------------------------------------------------------- bad input


def test_other_programs_logs_are_read_not_recognized():
    for path in sorted((FIXTURES.parent / "gdb").glob("*.txt"))[:4]:
        facts = parse(path)
        assert facts.records == [] and facts.unrecognized == 0, path
        assert facts.lines_read == path.read_bytes().count(b"\n") + (not path.read_bytes().endswith(b"\n"))



def test_long_lines_are_skipped_with_a_diagnostic(tmp_path):
    text = (FIXTURES / "desync_lagging.log").read_text().split("\n")
    text.insert(3, "[rank0]: " + "x" * 10_000_000)
    facts = parse(write(tmp_path, "long.log", "\n".join(text)))
    assert [(d.line, d.message) for d in facts.diagnostics] == [(4, "line longer than 64 KiB: skipped")]
    assert facts.lines_read == 16
    assert sorted(claims(facts)) == [1, 2, 3]


def test_empty_and_unreadable_files(tmp_path):
    with pytest.raises(InputError, match="empty file"):
        parse(write(tmp_path, "empty.log", ""))
    with pytest.raises(InputError, match="empty file"):
        parse(write(tmp_path, "blank.log", "\n  \n\t\n"))
    with pytest.raises(InputError, match="cannot read"):
        parse(tmp_path / "missing.log")
    with pytest.raises(InputError, match="cannot read"):
        parse(write(tmp_path, "bad.gz", b"\x1f\x8b" + b"\x00" * 40))


@needs_samples
def test_gzip_cut_short_keeps_what_was_read(tmp_path):
    data = gzip.compress((DETAIL / "torchrun.log").read_bytes())
    facts = parse(write(tmp_path, "torchrun.log.gz", data[: len(data) * 2 // 3]))
    assert [d.severity for d in facts.diagnostics if d.message.startswith("file cut short")] == ["error"]
    assert len(own(facts)) == 4


def test_binary_junk_and_mixed_encodings(tmp_path):
    good = (FIXTURES / "heartbeat.log").read_bytes()
    junk = bytes(random.Random(7).randrange(256) for _ in range(5000))
    latin = "[rank5]:[E703 18:00:00.000000000 ProcessGroupNCCL.cpp:1700] [PG ID 3 PG GUID 9(caf\xe9) Rank 0] " \
            "remote error detected from rank: 1\n".encode("latin-1")
    facts = parse(write(tmp_path, "junk.log", good[:400] + b"\n" + junk + b"\n" + latin + good[400:]))
    record = own(facts, 5)
    assert record.peers_in_errors == (3,)
    assert ProcessGroup("9", "caf\ufffd", ()) in facts.groups


def test_memory_stays_flat(tmp_path):
    """Twice the log, the same peak: only open records, per-process state and
    the bounded parse cache are kept."""
    def build(path, repeats):
        template = (FIXTURES / "watchdog_two_ranks.log").read_text()
        rng = random.Random(3)
        with open(path, "w") as out:
            for i in range(repeats):
                rank = rng.randrange(64)
                out.write(f"[rank{rank}]:[I1129 10:02:13.{i:09d} ProcessGroupWrapper.cpp:710] [Rank {rank}] "
                          f"Running collective: CollectiveFingerPrint(SequenceNumber={i}, OpType=ALLREDUCE, "
                          f"TensorShape=[384, 384], TensorDtypes=Float)\n")
                out.write(f"Epoch {i}: {i % 100}%|#####     | {i}/1000000 [00:{i % 60:02d}<00:00]\n")
                if i % 5000 == 0:
                    out.write(template)

    peaks = []
    for repeats in (20_000, 40_000):
        path = tmp_path / f"big{repeats}.log"
        build(path, repeats)
        tracemalloc.start()
        facts = parse(path)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert facts.unrecognized == 0 and len(own(facts)) == 65
    assert peaks[1] < peaks[0] * 1.25 + (1 << 20), peaks


def _plain(value):
    """Every value in a result is a model object or a builtin: no lark Tree or Token."""
    if isinstance(value, (ProcessRecord, CommOp, GroupProgress, Evidence, Diagnostic, StuckSignal, ProcessGroup)):
        return all(_plain(getattr(value, name)) for name in value.__slots__)
    if isinstance(value, tuple):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return value is None or type(value) in (str, int, bool)


_SOURCES = REAL_LOGS + sorted(FIXTURES.glob("*.log"))
_SOURCE_LINES = {}


def _source_lines(path):
    if path not in _SOURCE_LINES:
        data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        _SOURCE_LINES[path] = data.split(b"\n")
    return _SOURCE_LINES[path]


_MUTATION = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate"), st.integers(0, 10_000)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.integers(0, 300)),
    st.tuples(st.just("bytes"), st.integers(0, 10_000), st.binary(min_size=1, max_size=300)),
    st.tuples(st.just("glue"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("prefix"), st.integers(0, 10_000),
              st.sampled_from([b"[rank7]:", b"[default1]:", b"(WorkerDict pid=12) ", b"\t - ", b"frame #3: ",
                               b"  what():  ", b"\r", b"\x1b[31m", b"[0]:", b"  rank      : ", b"Traceback"])),
    st.tuples(st.just("huge"), st.integers(0, 10_000)),
    st.tuples(st.just("repeat"), st.integers(0, 10_000)),
)
_INSERTS = {"huge": b"[rank0]:[E1129 12:00:01.000000002 ProcessGroupNCCL.cpp:632] " + b"(" * 70_000,
            "repeat": b"x[rank0]:" * 5000}


@pytest.mark.skipif(not _SOURCES, reason="no logs")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 10_000), mutations=st.lists(_MUTATION, min_size=1, max_size=8),
       cut=st.none() | st.integers(0, 40_000), compress=st.booleans())
def test_fuzzed_logs_never_crash(which, mutations, cut, compress):
    path = _SOURCES[which % len(_SOURCES)]
    lines_ = mutate_lines(_source_lines(path), mutations, _INSERTS)
    data = b"\n".join(lines_)
    if cut is not None:
        data = data[:cut]
    if compress:
        data = gzip.compress(data)
        if cut is not None and cut % 3 == 0:
            data = data[: len(data) // 2]
    with tempfile.TemporaryDirectory() as folder:
        target = os.path.join(folder, "fuzz.log")
        with open(target, "wb") as handle:
            handle.write(data)
        try:
            torchlog.sniff(target, read_head(target))
        except InputError:
            pass
        try:
            facts = torchlog.parse(target, "fuzz.log")
        except InputError:
            return
    total = facts.lines_read
    assert all(_plain(record) for record in facts.records)
    for record in facts.records:
        cited = list(record.errors) + [record.evidence] + [op.evidence for op in record.recent_ops] + \
            ([record.last_op.evidence] if record.last_op else [])
        assert all(e is None or 1 <= e.line <= total for e in cited)
    assert all(_plain(d) and 0 <= d.line <= total for d in facts.diagnostics)
    assert all(_plain(s) for s in facts.stuck)
    assert all(type(h) is str and type(p) is int and type(r) is int and _plain(e) for h, p, r, e in facts.pid_ranks)
    assert 0 <= facts.unrecognized <= total


def test_sniff_rejects_a_head_with_nul_bytes_before_scanning_it():
    """A NUL in the first 8 KiB makes a file binary (textio.looks_binary):
    the text readers decline it before scanning 64 KiB for their markers,
    which every Flight Recorder pickle in a folder would otherwise cost."""
    from forensics.ingest import snapshot, torchlog

    log = (CORPUS / "real_missing_rank_early_exit" / "torchrun.log").read_bytes()[:65536]
    assert torchlog.sniff("torchrun.log", log)
    assert not torchlog.sniff("torchrun.log", log[:4000] + b"\x00" + log[4000:])
    shot = (CORPUS / "snapshot_missing_rank" / "snapshot_1.json").read_bytes()[:65536]
    assert snapshot.sniff("snapshot_1.json", shot)
    assert not snapshot.sniff("snapshot_1.json", shot[:40] + b"\x00" + shot[40:])


def test_python_source_quoting_c10d_lines_is_not_a_log(tmp_path):
    line = ("[rank1]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
            "for 600031 milliseconds before timing out.\n")
    script = f'LINES = """\n{line}"""\n'.encode()
    assert torchlog.sniff(str(tmp_path / "make.py"), script) is False
    assert torchlog.sniff(str(tmp_path / "rank1.log"), line.encode()) is True
