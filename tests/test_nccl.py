"""The NCCL_DEBUG reader: real lines from public logs, hand-built jobs, tail mode, bad input.

Fixtures (tests/fixtures/nccl/README.md says where each line comes from):
real_*.log are verbatim public logs; job8.log, wrapped.log, warnings.log,
version_mismatch.log and old_versions.log are built from NCCL's own format
strings (formats.md §3) as those versions print them.
"""

import contextlib
import dataclasses
import gzip
import importlib.util
import mmap
import os
import random
import re
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.ingest import nccl
from forensics.ingest.textio import InputError, read_head
from forensics.model import Artifact, CommOp, Evidence, GroupProgress

from conftest import CORPUS, SAMPLES

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
ROOT = Path(__file__).resolve().parent.parent

WORLD = "nccl:0x7e1d0c5a9b2f4e11"
TP_A, TP_B = WORLD + "/split1/color0", WORLD + "/split1/color1"
P2P = "nccl:0x5a5a0c0ffee01234"


def parse(name, **kwargs):
    return nccl.parse(str(FIXTURES / name), name, **kwargs)


def record(facts, host, pid):
    return next(r for r in facts.records if (r.host, r.pid) == (host, pid))


def line_of(path, number):
    with open(path, "rb") as handle:
        return handle.read().split(b"\n")[number - 1].decode("utf-8", "replace").strip()


def generator():
    spec = importlib.util.spec_from_file_location("gen_nccl_logs", ROOT / "benchmarks" / "gen_nccl_logs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def small_tail(threshold=256 << 10, head=64 << 10, tail=256 << 10, chunk=64 << 10, first=None, first_head=None):
    """Tail mode on files of a few MiB: the same code paths as on gigabytes.
    The tail is `tail` bytes long, or, with `first`, starts that long and
    grows up to `tail`; the head likewise with `first_head`."""
    names = ("TAIL_THRESHOLD", "HEAD_BYTES", "TAIL_BYTES", "CHUNK", "TAIL_FIRST", "HEAD_FIRST")
    saved = tuple(getattr(nccl, name) for name in names)
    for name, value in zip(names, (threshold, head, tail, chunk, tail if first is None else first,
                                   head if first_head is None else first_head)):
        setattr(nccl, name, value)
    try:
        yield
    finally:
        for name, value in zip(names, saved):
            setattr(nccl, name, value)


def total_lines(data: bytes) -> int:
    return data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))


def absolute(line: int, data: bytes) -> int:
    """A reported line number as counted from the start: tail mode counts
    lines past the head back from the end (-1 is the last line)."""
    return total_lines(data) + 1 + line if line < 0 else line


def _normal(value, data: bytes):
    if isinstance(value, Evidence):
        return Evidence(value.path, absolute(value.line, data), value.text)
    if dataclasses.is_dataclass(value):
        return tuple(_normal(getattr(value, f.name), data) for f in dataclasses.fields(value))
    if isinstance(value, (list, tuple)):
        return tuple(_normal(item, data) for item in value)
    if isinstance(value, dict):
        return {key: _normal(item, data) for key, item in value.items()}
    return value


def summary(facts, path=None):
    """What must not depend on how the file was read (line numbers made
    absolute when `path` is given)."""
    data = Path(path).read_bytes() if path is not None else b""
    return _normal(([(r.host, r.pid, r.rank, r.local_rank, r.last_op, dict(r.progress), r.errors,
                      r.peers_in_errors, r.evidence) for r in facts.records],
                    facts.pid_ranks, facts.comm_members, facts.unrecognized), data)


# ---------------------------------------------------------------- sniffing


def test_sniff_claims_nccl_logs():
    for path in sorted(FIXTURES.glob("*.log")):
        assert nccl.sniff(str(path), path.read_bytes()[:65536]), path.name


def test_sniff_rejects_other_text():
    assert not nccl.sniff("x", b"")
    assert not nccl.sniff("x", os.urandom(4096) + b"\x00")
    assert not nccl.sniff("x", b"Traceback (most recent call last):\n  File \"train.py\", line 3\n")
    c10d = (b"[rank0]:[E513 18:30:09.806452545 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
            b"Watchdog caught collective operation timeout\n"
            b"torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system "
            b"error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2\n")
    assert not nccl.sniff("x", c10d)
    assert not nccl.sniff("x", b"Thread 2 (Thread 0x7f1c2dfff640 (LWP 1234) \"python\"):\n#0  0x00007f in poll ()\n")
    assert nccl.sniff("x", b"\x1b[33mgpu1:12:12 [0] NCCL INFO Using network IB\x1b[0m\n")
    assert nccl.sniff("x", b"gpu1:12:12 NCCL CALL ncclCommInitRank(0x7ffc,2,0x1a2b,0)\n")


@pytest.mark.skipif(not SAMPLES.exists() and not CORPUS.exists(), reason="samples not available")
def test_sniff_leaves_the_gloo_samples_alone():
    for path in sorted(SAMPLES.glob("*/*")) + sorted(CORPUS.glob("real_*/*")):
        if path.is_file():
            assert not nccl.sniff(str(path), read_head(str(path))), path


def test_sniff_zstd_by_name_when_it_cannot_look_inside(tmp_path):
    frame = b"\x28\xb5\x2f\xfd" + os.urandom(64)
    if importlib.util.find_spec("zstandard") is None:
        assert nccl.sniff(str(tmp_path / "nccl.host.123.log.zst"), frame)
        assert not nccl.sniff(str(tmp_path / "trace.zst"), frame)


def test_hooks():
    path = FIXTURES / "job8.log"
    assert nccl.forensics_sniff(path=str(path), head=path.read_bytes()[:65536]) == "nccl"
    assert nccl.forensics_sniff(path="x", head=b'{"0": {"current_op": "send"}}') is None
    facts = nccl.forensics_parse(artifact=Artifact("nccl", str(path), "logs/job8.log"))
    assert facts.kind == "nccl" and facts.path == "logs/job8.log"
    assert facts.records[0].path == "logs/job8.log" and facts.records[0].evidence.path == "logs/job8.log"
    assert nccl.forensics_parse(artifact=Artifact("gdb", str(path), "x")) is None


# ---------------------------------------------------------------- an 8-rank job


def test_job8_processes_and_ranks():
    facts = parse("job8.log")
    assert facts.kind == "nccl"
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (508, 0, [])
    assert [(r.source, r.host, r.pid, r.rank, r.local_rank, r.evidence.line) for r in facts.records] == [
        ("nccl", "node-a", 7001, 0, None, 3), ("nccl", "node-a", 7002, 1, None, 4),
        ("nccl", "node-a", 7003, 2, None, 5), ("nccl", "node-a", 7004, 3, None, 6),
        ("nccl", "node-b", 8101, None, 0, 7), ("nccl", "node-b", 8102, None, 1, 8),
        ("nccl", "node-b", 8103, None, 2, 9), ("nccl", "node-b", 8104, None, 3, 10)]
    assert facts.records[0].evidence == Evidence(
        "job8.log", 3, "[rank0]:node-a:7001:7001 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>")


def test_job8_pid_ranks_come_from_the_world_communicator():
    facts = parse("job8.log")
    assert [(host, pid, rank, ev.line) for host, pid, rank, ev in facts.pid_ranks] == [
        ("node-a", 7001, 0, 27), ("node-a", 7002, 1, 28), ("node-a", 7003, 2, 29), ("node-a", 7004, 3, 30),
        ("node-b", 8101, 4, 31), ("node-b", 8102, 5, 32), ("node-b", 8103, 6, 33), ("node-b", 8104, 7, 34)]
    assert facts.pid_ranks[5][3].text == (
        "[default1]:node-b:8102:8142 [1] NCCL INFO ncclCommInitRank comm 0x55c51a2b3c40 rank 5 nranks 8 "
        "cudaDev 1 nvmlDev 1 busId 2b000 commId 0x7e1d0c5a9b2f4e11 - Init START")


def test_job8_communicator_members():
    facts = parse("job8.log")
    members = [(group, rank, size, host, pid, ev.line) for group, rank, size, host, pid, ev in facts.comm_members]
    assert members == (
        [(WORLD, r, 8, "node-a" if r < 4 else "node-b", (7001 if r < 4 else 8097) + r, 27 + r) for r in range(8)]
        + [(TP_A, r, 4, "node-a", 7001 + r, 101 + r) for r in range(4)]
        + [(TP_B, r, 4, "node-b", 8101 + r, 105 + r) for r in range(4)]
        + [(P2P, 0, 2, "node-a", 7004, 109), (P2P, 1, 2, "node-b", 8101, 110)])


def test_job8_rank5_stopped_at_a_lower_opcount():
    facts = parse("job8.log")
    rank5 = record(facts, "node-b", 8102)
    text = ("[default1]:node-b:8102:8102 [1] NCCL INFO AllReduce: opCount 19 sendbuff 0x7f8a00200000 recvbuff "
            "0x7f8a00200000 count 19840 datatype 7 op 0 root 0 comm 0x55c51a2b3c40 [nranks=8] stream 0x55c51a2a2f00")
    assert rank5.last_op == CommOp(op="all_reduce", group=WORLD, seq=0x19, state="scheduled", peers=(),
                                   sizes=((19840,),), dtype="float32",
                                   evidence=Evidence("job8.log", 473, text))
    assert line_of(FIXTURES / "job8.log", 473) == text
    assert {g: (p.enqueued, p.evidence.line) for g, p in rank5.progress.items()} == {
        WORLD: (0x19, 473), TP_B: (0xc, 461)}
    assert rank5.progress[WORLD] == GroupProgress(enqueued=0x19, evidence=rank5.last_op.evidence)
    for other in facts.records:
        if other is not rank5:
            assert other.progress[WORLD].enqueued == 0x1b
    assert [(op.op, op.seq) for op in rank5.recent_ops] == [
        ("all_gather", 10), ("all_reduce", 21), ("all_reduce", 22), ("all_gather", 11), ("all_reduce", 23),
        ("all_reduce", 24), ("all_gather", 12), ("all_reduce", 25)]
    assert rank5.recent_ops[-1] is rank5.last_op or rank5.recent_ops[-1] == rank5.last_op


def test_job8_send_recv_name_their_peer_in_the_communicator():
    facts = parse("job8.log")
    sender, receiver = record(facts, "node-a", 7004), record(facts, "node-b", 8101)
    assert sender.last_op == CommOp(
        op="send", group=P2P, seq=0x1b, state="scheduled", peers=(1,), sizes=((524288,),), dtype="bfloat16",
        evidence=Evidence("job8.log", 496, line_of(FIXTURES / "job8.log", 496)))
    assert "sendbuff (nil)" in sender.last_op.evidence.text
    assert (receiver.last_op.op, receiver.last_op.peers, receiver.last_op.seq, receiver.last_op.evidence.line) == (
        "recv", (0,), 0x1b, 498)
    assert {g: p.enqueued for g, p in sender.progress.items()} == {WORLD: 0x1b, TP_A: 0xd, P2P: 0x1b}


def test_job8_warning_with_timestamp_and_outer_prefix():
    facts = parse("job8.log")
    receiver = record(facts, "node-b", 8101)
    assert receiver.errors == (Evidence("job8.log", 502, (
        "[default0]:[2026-05-13 18:31:07] node-b:8101:8190 [0] transport/net_ib.cc:2358 NCCL WARN NET/IB : "
        "Got completion from peer 10.0.0.1<48133> with status=12 opcode=0 len=0 vendor err 129 (Recv) "
        "localGid ::ffff:10.0.0.2 remoteGids::ffff:10.0.0.1 hca mlx5_0")),)
    # 10.0.0.1 is node-a, which runs four ranks: the peer's rank is not known.
    assert receiver.peers_in_errors == ()
    assert all(r.errors == () for r in facts.records if r is not receiver)


def rings(facts) -> dict:
    """{(group, channel): ranks in ring order} of what the ring lines gave."""
    return {(group, channel): ring for group, channel, ring, _ in facts.rings}


def test_job8_rings():
    facts = parse("job8.log")
    assert rings(facts) == {(WORLD, 0): tuple(range(8)), (WORLD, 1): tuple(range(8))}


def test_crlf_and_gzip_read_the_same(tmp_path):
    data = (FIXTURES / "job8.log").read_bytes()
    crlf = tmp_path / "job8.log"
    crlf.write_bytes(data.replace(b"\n", b"\r\n"))
    packed = tmp_path / "job8.log.gz"
    packed.write_bytes(gzip.compress(data))
    plain = parse("job8.log")
    for path in (crlf, packed):
        facts = nccl.parse(str(path), "job8.log")
        assert summary(facts) == summary(plain), path.name
        assert facts.lines_read == 508 and facts.diagnostics == []


# ---------------------------------------------------------------- real logs


def test_real_nccl_229_two_hosts():
    facts = parse("real_nccl229_two_hosts.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (169, 0, [])
    first, second = facts.records
    assert (first.host, first.pid, first.evidence.line, second.host, second.pid, second.evidence.line) == (
        "gpu-st-ml-1", 50292, 7, "gpu-st-ml-2", 49542, 10)
    assert first.errors == (Evidence("real_nccl229_two_hosts.log", 142,
                                     "[2026-03-12 14:17:56] gpu-st-ml-1:50292:50292 [0] enqueue.cc:1694 NCCL WARN "
                                     "Cuda failure 'named symbol not found'"),)
    assert [e.line for e in second.errors] == [156]
    assert first.last_op is None and first.progress == {}  # COLL was not enabled
    group = "nccl:0xc3d9a10350effd4f"
    assert [(g, r, n, h, p, e.line) for g, r, n, h, p, e in facts.comm_members] == [
        (group, 0, 2, "gpu-st-ml-1", 50292, 66), (group, 1, 2, "gpu-st-ml-2", 49542, 68)]
    assert [(h, p, r, e.line) for h, p, r, e in facts.pid_ranks] == [
        ("gpu-st-ml-1", 50292, 0, 66), ("gpu-st-ml-2", 49542, 1, 68)]
    assert rings(facts) == {(group, 0): (0, 1), (group, 1): (0, 1)}


def test_real_init_that_never_completes():
    facts = parse("real_init_never_completes.log")
    assert [(d.line, d.message, d.severity) for d in facts.diagnostics] == [
        (8, "bigo:1884: init of communicator nccl:0x9ca74fa6e40df7f4 (rank 2 of 3) started and never completed",
         "info")]
    (proc,) = facts.records
    assert (proc.host, proc.pid, proc.last_op, proc.progress) == ("bigo", 1884, None, {})
    assert proc.errors == (Evidence(
        "real_init_never_completes.log", 19,
        "bigo:1884:2346 [0] socket.c:446 NCCL WARN socketFinalizeAccept: wrong type 3 != 4"),)


def test_real_coll_lines_rccl_and_warnings():
    facts = parse("real_lines.log")
    assert (facts.lines_read, facts.unrecognized) == (10, 0)
    h015 = record(facts, "h015", 2073494)
    assert h015.last_op == CommOp(
        op="all_reduce", group="nccl-comm:h015:2073494:0x55956223bb90", seq=0x1e7, state="scheduled",
        sizes=((18816,),), dtype="float32",
        evidence=Evidence("real_lines.log", 1, line_of(FIXTURES / "real_lines.log", 1)))
    rccl = record(facts, "banff-cyxtera-s78-4", 52937)
    assert (rccl.last_op.seq, rccl.last_op.dtype, rccl.last_op.sizes) == (3, "float16", ((268435456,),))
    node2 = record(facts, "node-2", 5776)
    assert [e.line for e in node2.errors] == [6]
    ofi = record(facts, "host", 229905)
    assert ofi.errors[0].text.startswith("[2026-05-13 18:01:41] host:229905:230588 [0] ofi_process_cq:196 NCCL WARN")
    assert [(h, p, r) for h, p, r, _ in facts.pid_ranks] == [("pod-vf02", 12090, 0)]
    # NCCL 2.4 printed no commId: a communicator of this process alone.
    assert record(facts, "node01", 3384).progress == {
        "nccl-comm:node01:3384:0x7fe3d4001980": GroupProgress(-1, evidence=Evidence(
            "real_lines.log", 3, line_of(FIXTURES / "real_lines.log", 3)))}


# ---------------------------------------------------------------- prefixes, warnings, old versions


def test_outer_prefixes():
    facts = parse("wrapped.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (14, 0, [])
    got = [(r.host, r.pid, r.rank, r.local_rank, r.last_op and (r.last_op.op, r.last_op.seq, r.last_op.dtype),
            [e.line for e in r.errors]) for r in facts.records]
    assert got == [
        ("gpu-r1", 2345, None, None, ("all_reduce", 0xa, "float32"), []),
        ("gpu-r2", 3456, None, None, ("broadcast", 4, "uint8"), []),
        ("gpu-r3", 4567, None, None, ("reduce_scatter", 0xff, "float64"), []),
        ("gpu-r4", 5678, None, None, ("all_to_all", 0x10, "int64"), []),
        ("gpu-r5", 6789, None, None, ("reduce", 1, "int32"), []),
        ("gpu-r6", 7890, None, None, ("gather", 3, "float8e4m3"), []),
        ("gpu-r7", 8901, 6, None, ("scatter", 7, "float8e5m2"), []),
        ("gpu-r8", 9012, None, None, ("all_gather", 2, "uint32"), []),
        ("gpu-r9", 1234, None, None, ("all_reduce", 5, "uint64"), []),
        ("gpu-r10", 2222, None, 2, None, [10]),
        ("gpu-r11", 3333, None, None, None, []),
        ("gpu-r12", 4444, None, None, None, []),
        ("gpu-r13", 5555, None, None, ("all_reduce", 6, "float16"), [])]
    ansi = record(facts, "gpu-r6", 7890).last_op.evidence
    assert "\x1b" not in ansi.text and ansi.text.startswith("(RayWorkerWrapper pid=7890) gpu-r6:7890:7890")
    tqdm = record(facts, "gpu-r7", 8901).last_op.evidence
    assert tqdm.line == 7 and tqdm.text.startswith("[rank6]:gpu-r7:8901:8901 [0] NCCL INFO Scatter")
    assert [(h, p, r, e.line) for h, p, r, e in facts.pid_ranks] == [("gpu-r7", 8901, 6, 7)]


def test_warnings_name_their_peers_by_address():
    facts = parse("warnings.log")
    assert (facts.lines_read, facts.unrecognized, facts.diagnostics) == (42, 0, [])
    a, b = facts.records
    assert [e.line for e in a.errors] == [28, 35, 40, 42]
    assert [e.line for e in b.errors] == [31, 33, 37, 39]  # Abort START (38) is followed by its COMPLETE
    assert b.errors[-1].text == "hostB:200:200 [0] NCCL INFO comm 0x5600bbbb0000 rank 1 nranks 2 cudaDev 0 " \
                                "busId 1b000 - Abort COMPLETE"
    assert a.errors[2].text.endswith("- Abort START")  # never completed: the abort hangs
    # The NET/IB peer 192.168.7.2 is hostB's only process, world rank 1; and back.
    assert (a.peers_in_errors, b.peers_in_errors) == ((1,), (0,))
    assert (a.last_op.seq, a.last_op.group) == (2, "nccl:0x1122334455667788")


def test_version_mismatch_names_the_other_rank():
    facts = parse("version_mismatch.log")
    assert [(d.line, d.message) for d in facts.diagnostics] == [
        (0, "processes run different NCCL versions: 2.19.3 (1 process), 2.18.1 (1 process)"),
        (3, "hostA:100: init of communicator nccl:0x99aa88bb77cc66dd (rank 0 of 2) started and never completed")]
    a, b = facts.records
    assert [e.line for e in a.errors] == [5] and a.peers_in_errors == (1,)
    assert b.errors == () and b.peers_in_errors == ()


def test_old_versions():
    facts = parse("old_versions.log")
    assert (facts.unrecognized, facts.diagnostics) == (0, [])
    old = record(facts, "oldhost", 11)
    group = "nccl-comm:oldhost:11:0x2222"
    assert (old.last_op.group, old.last_op.seq, old.last_op.dtype) == (group, 0, "float32")
    assert [e.line for e in old.errors] == [9]  # Destroy COMPLETE
    assert facts.comm_members == []  # no commId before NCCL 2.16: nobody else can name it


def test_split_without_comm_id_counts_splits_of_the_parent(tmp_path):
    """NCCL 2.23 prints neither commId nor a split count: members agree on
    the order of their splits of one parent."""
    lines = []
    for rank in range(2):
        prefix = f"h{rank}:{10 + rank}:{10 + rank} [0] NCCL INFO "
        lines.append(prefix + f"ncclCommInitRank comm 0x{rank}a00 rank {rank} nranks 2 cudaDev 0 nvmlDev 0 "
                              "busId 1000 commId 0xfeed - Init COMPLETE")
        for child in (1, 2):
            lines.append(prefix + f"ncclCommSplit comm 0x{rank}b0{child} rank 0 nranks 1 cudaDev 0 nvmlDev 0 "
                                  f"busId 1000 parent 0x{rank}a00 color {rank} key 0- Init START")
            lines.append(prefix + f"ncclCommSplit comm 0x{rank}b0{child} rank 0 nranks 1 cudaDev 0 nvmlDev 0 "
                                  f"busId 1000 parent 0x{rank}a00 color {rank} key 0 - Init COMPLETE")
    path = tmp_path / "split.log"
    path.write_text("\n".join(lines) + "\n")
    facts = nccl.parse(str(path), "split.log")
    assert [(g, r, h) for g, r, _, h, _, _ in facts.comm_members] == [
        ("nccl:0xfeed", 0, "h0"), ("nccl:0xfeed/split1/color0", 0, "h0"), ("nccl:0xfeed/split2/color0", 0, "h0"),
        ("nccl:0xfeed", 1, "h1"), ("nccl:0xfeed/split1/color1", 0, "h1"), ("nccl:0xfeed/split2/color1", 0, "h1")]
    assert facts.diagnostics == []


# ---------------------------------------------------------------- tail mode


def test_tail_mode_matches_full_mode(tmp_path):
    """Tail mode reads the head, the tail and, of the middle, only the last
    calls and inits the tail needs: the same records as reading every line,
    with line numbers past the head counted back from the end."""
    gen = generator()
    path = tmp_path / "job.log"
    made = gen.generate(str(path), ranks=8, size=400 << 10, stop_rank=5, stop_at=0.3)
    lines = path.read_bytes().split(b"\n")
    warn = (b"[2026-05-13 18:31:07] gpu-node000:41034:41090 [2] transport/net_ib.cc:2358 NCCL WARN NET/IB : Got "
            b"completion from peer 10.1.1.12<48133> with status=12 opcode=0 len=0 vendor err 129 (Recv)")
    near_end = len(lines) - 200
    lines[near_end:near_end] = [b"", warn, b"[rank2]:gpu-node000:41034:41034 [2] NCCL INFO Using network IB"]
    path.write_bytes(b"\n".join(lines))
    data = path.read_bytes()
    full = nccl.parse(str(path), "job.log", full=True)
    with small_tail():
        tail = nccl.parse(str(path), "job.log")
    assert summary(tail, path) == summary(full, path)
    assert tail.lines_read < full.lines_read // 2
    # Rank 5's newest calls lie further back than the longest tail: starting
    # short, the tail grows to its longest and the head to its whole, and
    # the file is read as with both fixed at their longest.
    with small_tail(first_head=16 << 10, first=32 << 10):
        grown = nccl.parse(str(path), "job.log")
    assert grown.diagnostics == tail.diagnostics and summary(grown, path) == summary(tail, path)
    (note,) = tail.diagnostics
    tail_count = full.lines_read - _tail_first(path) + 1
    assert note.severity == "info" and note.message.startswith(
        f"tail mode: read lines 1-{_head_lines(path):,} (the first 64 KiB) and the last {tail_count:,} lines "
        "(the last 256 KiB, the most tail mode reads) of 3 MiB, whose line numbers count back from the end of "
        "the file (-1 is the last line: `tail -n N FILE | head -n 1` shows line -N); of the 3 MiB between, ")
    assert "2 last call(s) of processes and communicators the tail does not show" in note.message  # rank 5: 2 comms
    for rank, expected in made["ranks"].items():
        got = record(tail, expected["host"], expected["pid"])
        assert got.progress[expected["world"]].enqueued == expected["world_last"]
        assert got.progress[expected["node"]].enqueued == expected["node_last"]
    stopped = record(tail, made["ranks"][5]["host"], made["ranks"][5]["pid"])
    line = stopped.last_op.evidence.line
    assert line < 0 and absolute(line, data) < _tail_first(path)  # found going back through the middle
    assert stopped.last_op.evidence.text == line_of(path, absolute(line, data))
    # -N is the N-th line from the end, as `tail -n N | head -n 1` shows it
    (error,) = record(tail, "gpu-node000", 41034).errors
    assert error.line == (near_end + 2) - (total_lines(data) + 1)
    assert line_of(path, absolute(error.line, data)) == error.text == warn.decode()
    assert record(tail, "gpu-node000", 41034).rank == 2
    assert rings(tail) == rings(full)


def _reads(monkeypatch) -> list:
    """The tails tail mode reads, as (where it starts, its lines), one per reading."""
    reads = []
    real = nccl._read_ends

    def counted(*args):
        head_lines, tail_start, tail_lines = real(*args)
        reads.append((tail_start, tail_lines))
        return head_lines, tail_start, tail_lines
    monkeypatch.setattr(nccl, "_read_ends", counted)
    return reads


def test_tail_grows_until_it_holds_every_process_newest_calls(tmp_path, monkeypatch):
    """Eight ranks in one log; rank 5 stopped ~80 steps before the others,
    so its last calls lie further back than the first tail. The tail grows
    (once, to the length byte searches say it needs) until it holds each
    process's newest COMM_WINDOW calls: rank 5's last calls are read in the
    tail, not looked up going back, and records and communicator views are
    what a tail of the greatest length gives, and records what every line gives."""
    gen = generator()
    path = tmp_path / "job.log"
    made = gen.generate(str(path), ranks=8, size=400 << 10, stop_rank=5, stop_at=0.95)
    data = path.read_bytes()
    full = nccl.parse(str(path), "job.log", full=True)
    reads = _reads(monkeypatch)
    with small_tail(tail=2 << 20, first=32 << 10):
        grown = nccl.parse(str(path), "job.log")
        grown_views = grown.comm_views
    assert len(reads) == 2  # the first tail, then one long enough
    first_tail, final_tail = reads[0][0], reads[1][0]
    assert len(data) - first_tail < 33 << 10 and len(data) - final_tail < 2 << 20
    stopped = record(grown, made["ranks"][5]["host"], made["ranks"][5]["pid"])
    assert absolute(stopped.last_op.evidence.line, data) < total_lines(data) - reads[0][1]  # before the first tail
    assert stopped.last_op.evidence.line >= -reads[1][1]  # ... and in the grown one
    assert stopped.last_op.seq == max(made["ranks"][5]["world_last"], made["ranks"][5]["node_last"])
    (note,) = grown.diagnostics
    assert f"lines (the last {(len(data) - final_tail) / 1024:,.0f} KiB, what holds each process's newest 256 calls)" \
        in note.message
    assert "0 last call(s) of processes and communicators the tail does not show" in note.message
    with small_tail(tail=2 << 20):
        fixed = nccl.parse(str(path), "job.log")
        fixed_views = fixed.comm_views
    assert len(reads) == 3
    assert [(r.host, r.pid, r.last_op, r.recent_ops, r.progress, r.errors) for r in grown.records] == \
        [(r.host, r.pid, r.last_op, r.recent_ops, r.progress, r.errors) for r in fixed.records]
    assert grown_views == fixed_views and len(grown_views) == 16
    assert all(len(view.calls) > 16 for view in grown_views)
    assert summary(grown, path) == summary(full, path)
    assert [_normal(r.recent_ops, data) for r in grown.records] == [_normal(r.recent_ops, data) for r in full.records]


def test_tail_stays_short_when_it_holds_what_is_needed(tmp_path, monkeypatch):
    """One rank's log (NCCL_DEBUG_FILE): its newest calls are in the first
    tail, which is read once, whatever the file's length."""
    gen = generator()
    made = gen.generate(str(tmp_path), ranks=2, size=3 << 20, stop_rank=None, per_rank_files=True)
    path = made["paths"][0]
    reads = _reads(monkeypatch)
    with small_tail(head=2 << 20, first_head=64 << 10, tail=2 << 20, first=64 << 10):
        facts = nccl.parse(path, "rank0.log")
    ((tail_start, tail_lines),) = reads
    assert os.path.getsize(path) - tail_start < 64 << 10
    assert "read lines 1-" in facts.diagnostics[0].message and "(the first 64 KiB)" in facts.diagnostics[0].message
    (got,) = facts.records
    assert got.progress[made["ranks"][0]["world"]].enqueued == made["ranks"][0]["world_last"]
    assert got.progress[made["ranks"][0]["node"]].enqueued == made["ranks"][0]["node_last"]
    assert len(got.recent_ops) == nccl.RECENT_OPS
    assert "what holds each process's newest 256 calls" in facts.diagnostics[0].message
    assert facts.lines_read < 1000


def test_head_grows_over_what_is_not_a_call(tmp_path):
    """The head is read past its first length when the first HEAD_BYTES
    hold more than calls: a communicator created there and never used
    again (its members, and nothing enqueued on it) and a warning are read
    as with the whole head; with only calls after the first length, the
    head stays short and the same records come out."""
    gen = generator()
    path = tmp_path / "job.log"
    gen.generate(str(path), ranks=2, size=1536 << 10, per_node=2, stop_rank=None)
    clean = path.read_bytes()
    lines = clean.split(b"\n")
    at = next(i for i, line in enumerate(lines) if sum(map(len, lines[:i])) > 300 << 10)
    silent = (b"gpu-node000:41000:41000 [0] NCCL INFO ncclCommInitRank comm 0x55d0eeee0000 rank 0 nranks 1 "
              b"cudaDev 0 nvmlDev 0 busId 1b000 commId 0x00000000005e1e47 - Init COMPLETE")
    warn = b"gpu-node000:41017:41017 [1] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer"
    lines[at:at] = [silent, warn]
    path.write_bytes(b"\n".join(lines))
    clean_path = tmp_path / "clean.log"
    clean_path.write_bytes(clean)
    read = {}
    for file in (path, clean_path):
        with small_tail(head=1 << 20, tail=128 << 10):
            whole = nccl.parse(str(file), "job.log")
        with small_tail(head=1 << 20, first_head=64 << 10, tail=128 << 10):
            short = nccl.parse(str(file), "job.log")
        assert summary(short, file) == summary(whole, file)
        read[file] = (short, whole)
    grown, whole = read[path]
    assert "(the first 1.0 MiB)" in grown.diagnostics[0].message and grown.lines_read == whole.lines_read
    progress = record(grown, "gpu-node000", 41000).progress
    assert progress["nccl:0x00000000005e1e47"].enqueued == -1
    assert [e.text for e in record(grown, "gpu-node000", 41017).errors] == [warn.decode()]
    kept, whole = read[clean_path]
    assert "(the first 64 KiB)" in kept.diagnostics[0].message and kept.lines_read < whole.lines_read


def test_tail_mode_does_not_read_the_middle(tmp_path):
    """A warning in the middle of a big log, followed by megabytes of calls,
    is not read in tail mode (that is the point: the cost stays flat), and
    the tail-mode note says what was not read; --full reads it."""
    gen = generator()
    path = tmp_path / "job.log"
    gen.generate(str(path), ranks=4, size=600 << 10, per_node=2, stop_rank=None)
    lines = path.read_bytes().split(b"\n")
    warn = b"gpu-node000:41000:41000 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer"
    lines.insert(len(lines) // 2, warn)
    path.write_bytes(b"\n".join(lines))
    full = nccl.parse(str(path), "job.log", full=True)
    with small_tail():
        tail = nccl.parse(str(path), "job.log")
    assert [e.text for e in record(full, "gpu-node000", 41000).errors] == [warn.decode()]
    assert record(tail, "gpu-node000", 41000).errors == ()
    (note,) = tail.diagnostics
    assert "warnings and other lines there are not read: parse with full=True (--full)" in note.message
    assert "0 MiB were searched backwards" in note.message  # nothing to look up: the middle was not read


def _lines_before(path, offset):
    """The number of lines that start before the first line at or after `offset`."""
    with open(path, "rb") as handle:
        start = nccl._line_start_after(handle, offset)
        handle.seek(0)
        return handle.read(start).count(b"\n")


def _head_lines(path):
    return _lines_before(path, 64 << 10)


def _tail_first(path):
    return _lines_before(path, os.path.getsize(path) - (256 << 10)) + 1


def test_tail_mode_finds_the_init_of_a_communicator_created_mid_run(tmp_path):
    """A communicator created in the middle of the run (a subgroup made at
    the first evaluation) and used in the tail: the backward search finds
    its init sequence, so it has its members, its id and its ring, as in
    full mode. One created there and never used since is not seen."""
    gen = generator()
    path = tmp_path / "job.log"
    gen.generate(str(path), ranks=4, size=600 << 10, per_node=2, stop_rank=None)
    lines = path.read_bytes().split(b"\n")
    init = []
    for rank, pid in ((0, 41000), (1, 41017)):
        prefix = b"gpu-node000:%d:%d [%d] NCCL INFO " % (pid, pid, rank)
        comm = b"comm 0x55d0ffff000%d rank %d nranks 2 cudaDev %d nvmlDev %d busId 1b000 commId 0x0000000000abcde" % (
            rank, rank, rank, rank)
        init += [prefix + b"ncclCommInitRank " + comm + b" - Init START",
                 prefix + b"Channel 00/02 : 0 1",
                 prefix + b"Ring 00 : %d -> %d -> %d" % (1 - rank, rank, 1 - rank),
                 prefix + b"ncclCommInitRank " + comm + b" - Init COMPLETE"]
    init.append(b"gpu-node000:41000:41000 [0] NCCL INFO ncclCommInitRank comm 0x55d0eeee0000 rank 0 nranks 1 "
                b"cudaDev 0 nvmlDev 0 busId 1b000 commId 0x00000000000silent - Init COMPLETE".replace(
                    b"silent", b"5e1e47"))
    lines[len(lines) // 3:len(lines) // 3] = init
    calls = [b"gpu-node000:%d:%d [%d] NCCL INFO AllReduce: opCount 3 sendbuff 0x7f00 recvbuff 0x7f00 count 8 "
             b"datatype 7 op 0 root 0 comm 0x55d0ffff000%d [nranks=2] stream 0x55d0aaaa0000" % (pid, pid, rank, rank)
             for rank, pid in ((0, 41000), (1, 41017))]
    lines[len(lines) - 50:len(lines) - 50] = calls
    path.write_bytes(b"\n".join(lines))
    full = nccl.parse(str(path), "job.log", full=True)
    with small_tail():
        tail = nccl.parse(str(path), "job.log")
    group = "nccl:0x0000000000abcde"
    for facts in (full, tail):
        assert [(g, r) for g, r, *_ in facts.comm_members if g == group] == [(group, 0), (group, 1)]
        assert record(facts, "gpu-node000", 41000).progress[group].enqueued == 3
    assert rings(tail)[(group, 0)] == rings(full)[(group, 0)] == (0, 1)
    silent = "nccl:0x000000000005e1e47"
    assert silent in record(full, "gpu-node000", 41000).progress
    assert silent not in record(tail, "gpu-node000", 41000).progress
    (note,) = tail.diagnostics
    assert "and 8 init line(s) of communicators it uses" in note.message  # 2 x (START, Channel, Ring, COMPLETE)
    init_line = next(e for g, r, _, h, p, e in tail.comm_members if g == group and r == 0)
    data = path.read_bytes()
    assert init_line.line < 0 and line_of(path, absolute(init_line.line, data)) == init_line.text


def test_tail_mode_with_many_communicators_to_look_for(tmp_path):
    """Past 16 pointers the backward search reads each chunk once instead
    of once per pointer: same answers."""
    gen = generator()
    path = tmp_path / "job.log"
    gen.generate(str(path), ranks=4, size=600 << 10, per_node=2, stop_rank=None)
    lines = path.read_bytes().split(b"\n")
    prefix = b"gpu-node000:41000:41000 [0] NCCL INFO "
    inits = [prefix + b"ncclCommInitRank comm 0x55d0ffff%04x rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 "
                      b"commId 0x%016x - Init COMPLETE" % (i, 0xabc000 + i) for i in range(24)]
    lines[20:20] = inits  # in the head
    at = len(lines) // 3
    calls = [prefix + b"Send: opCount %x sendbuff (nil) recvbuff 0x7f00 count 8 datatype 7 op 0 root 1 "
                      b"comm 0x55d0ffff%04x [nranks=2] stream 0x55d0aaaa0000" % (i, i) for i in range(0, 24, 2)]
    lines[at:at] = calls  # in the middle: the last calls of half of them
    path.write_bytes(b"\n".join(lines))
    full = nccl.parse(str(path), "job.log", full=True)
    with small_tail():
        tail = nccl.parse(str(path), "job.log")
    assert summary(tail, path) == summary(full, path)
    progress = record(tail, "gpu-node000", 41000).progress
    assert progress["nccl:0x0000000000abc006"].enqueued == 6
    assert absolute(progress["nccl:0x0000000000abc006"].evidence.line, path.read_bytes()) == at + 4
    assert [progress[f"nccl:0x{0xabc000 + i:016x}"].enqueued for i in (1, 7, 9, 23)] == [-1, -1, -1, -1]


def test_pathological_lines_stay_fast(tmp_path):
    junk = [b"NCCL INFO " * 6500, b"y:1:" * 16000 + b"NCCL INFO x", b"a:a:" * 16000,
            b"h:1:1 [0] NCCL WARN NET/IB : Got completion from peer " + b"a:" * 30000 + b"<1>",
            b"NCCL version 1.1.1" * 3000, b" " * 60000 + b"[repeated 3x across cluster]"]
    path = tmp_path / "junk.log"
    path.write_bytes(b"\n".join(junk * 10) + b"\n")
    facts = nccl.parse(str(path), "junk.log")  # its time, beside grep: benchmarks/bench_hostile_lines.py
    assert [(r.host, r.pid, len(r.errors)) for r in facts.records] == [("h", 1, 10)]


def _big_size():
    """~200 MB when this machine builds and reads it in under 10 s, else ~70 MB."""
    gen = generator()
    start = time.perf_counter()
    with contextlib.suppress(Exception):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            gen.generate(os.path.join(tmp, "probe.log"), ranks=8, size=1 << 20)
    per_mb = (time.perf_counter() - start) / 8
    projected = per_mb * 200 * 1.3 + 2.0  # build, then tail-mode parse under tracemalloc
    return 25 << 20 if projected < 10 else 9 << 20


def test_big_file_tail_mode(tmp_path):
    gen = generator()
    per_rank = _big_size()
    path = tmp_path / "big.log"
    built = time.perf_counter()
    made = gen.generate(str(path), ranks=8, size=per_rank, stop_rank=5, stop_at=0.5)
    built = time.perf_counter() - built
    size = path.stat().st_size
    assert size > nccl.TAIL_THRESHOLD
    tracemalloc.start()
    try:
        start = time.perf_counter()
        facts = nccl.parse(str(path), "big.log")
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"\nbig file: {size / 2**20:.0f} MiB built in {built:.1f} s, read in tail mode in {elapsed:.2f} s "
          f"(under tracemalloc), peak {peak / 2**20:.0f} MiB")
    assert peak < 100 << 20, f"peak {peak / 2**20:.0f} MiB"
    assert elapsed < 10, f"{size / 2**20:.0f} MiB in {elapsed:.1f} s"
    assert facts.unrecognized == 0 and len(facts.records) == 8
    assert facts.diagnostics[0].message.startswith("tail mode: read lines 1-")
    assert len(facts.comm_members) == 16 and len(facts.pid_ranks) == 8  # the init lines at the head
    last_calls = []
    for rank, expected in made["ranks"].items():
        got = record(facts, expected["host"], expected["pid"])
        assert got.progress[expected["world"]].enqueued == expected["world_last"], rank
        assert got.progress[expected["node"]].enqueued == expected["node_last"], rank
        last_calls.append(got.last_op.evidence)
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        total = data.size() and (data[:].count(b"\n") + (data[-1:] != b"\n"))
        counted = lines = 0
        for evidence in sorted(last_calls, key=lambda e: e.line):  # line numbers, counted once
            assert evidence.line < 0  # past the head: counted back from the end
            at = data.find(evidence.text.encode(), counted)
            assert at >= 0
            lines += data[counted:at].count(b"\n")
            counted = at
            assert lines + 1 == total + 1 + evidence.line
    stopped = record(facts, made["ranks"][5]["host"], made["ranks"][5]["pid"])
    assert made["ranks"][5]["world_last"] < made["ranks"][4]["world_last"] * 0.6
    assert stopped.last_op.seq in (made["ranks"][5]["world_last"], made["ranks"][5]["node_last"])
    assert stopped.last_op.evidence.line < facts.records[0].last_op.evidence.line - 100_000


# ---------------------------------------------------------------- bad input


def test_empty_missing_and_directory(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        nccl.parse(str(empty), "empty.log")
    with pytest.raises(InputError, match="cannot read"):
        nccl.parse(str(tmp_path / "missing.log"), "missing.log")
    with pytest.raises(InputError, match="cannot read"):
        nccl.parse(str(tmp_path), "dir")


def test_unrelated_program(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("starting server\nlistening on :8080\nGET / 200\n" * 50)
    facts = nccl.parse(str(path), "app.log")
    assert (facts.records, facts.lines_read, facts.unrecognized) == ([], 150, 0)
    assert [(d.line, d.message) for d in facts.diagnostics] == [(0, "no NCCL lines")]


def test_binary_garbage(tmp_path):
    path = tmp_path / "core.bin"
    rng = random.Random(3)
    path.write_bytes(bytes(rng.getrandbits(8) for _ in range(300_000)).replace(b"\n", b"") + b"\n" + b"x" * 10)
    facts = nccl.parse(str(path), "core.bin")
    assert facts.records == [] and facts.lines_read == 2
    assert [d.message for d in facts.diagnostics] == ["line longer than 64 KiB: skipped", "no NCCL lines"]


def test_truncated_last_line(tmp_path):
    data = (FIXTURES / "job8.log").read_bytes()
    cut = data[:data.index(b"[default3]:node-b:8104:8104 [3] NCCL INFO AllReduce: opCount 1b") + 120]
    path = tmp_path / "cut.log"
    path.write_bytes(cut)
    facts = nccl.parse(str(path), "cut.log")
    assert (facts.lines_read, facts.unrecognized) == (500, 1)
    assert [(d.line, d.message[:40]) for d in facts.diagnostics] == [
        (500, "unreadable COLL line: '[default3]:node-b")]
    cut_short = record(facts, "node-b", 8104)  # its calls before the cut one
    assert (cut_short.last_op.op, cut_short.last_op.seq, cut_short.progress[WORLD].enqueued) == (
        "all_gather", 0xd, 0x1a)


def test_huge_line_in_the_middle(tmp_path):
    lines = (FIXTURES / "job8.log").read_bytes().split(b"\n")
    lines.insert(200, b"x" * (10 << 20))
    path = tmp_path / "huge.log"
    path.write_bytes(b"\n".join(lines))
    facts = nccl.parse(str(path), "huge.log")
    assert [(d.line, d.message) for d in facts.diagnostics] == [(201, "line longer than 64 KiB: skipped")]
    assert facts.lines_read == 509
    assert record(facts, "node-b", 8102).last_op.evidence.line == 474  # numbering goes on past it
    plain = parse("job8.log")
    assert [r.last_op.seq for r in facts.records] == [r.last_op.seq for r in plain.records]


def test_mixed_encodings(tmp_path):
    data = (FIXTURES / "warnings.log").read_bytes()
    data = data.replace(b"Cuda failure 'an illegal", b"Cuda failure \xe9\xff 'an illegal")
    data = b"caf\xe9 latin-1 line\n\xff\xfe\xfd junk\n" + data
    path = tmp_path / "mixed.log"
    path.write_bytes(data)
    facts = nccl.parse(str(path), "mixed.log")
    assert facts.unrecognized == 0 and facts.lines_read == 44
    assert "\ufffd" in record(facts, "hostA", 100).errors[-1].text


def test_unreadable_lines_are_counted_and_capped(tmp_path):
    good = (FIXTURES / "job8.log").read_bytes().split(b"\n")[200]
    bad = []
    for i in range(120):
        kind = i % 3
        if kind == 0:
            bad.append(b"gpu1:1:1 [0] NCCL INFO AllReduce: opCount %x sendbuff 0x1 recvbuff" % i)
        elif kind == 1:
            bad.append(b"garbled NCCL INFO AllReduce: opCount %x" % i)
        else:
            bad.append(b"gpu1:1:1 [0] NCCL INFO comm 0x5 rank 0 nranks - Init COMPLETE")
    path = tmp_path / "bad.log"
    path.write_bytes(b"\n".join([good] + bad + [good]) + b"\n")
    facts = nccl.parse(str(path), "bad.log")
    assert facts.unrecognized == 120 and facts.lines_read == 122
    messages = [(d.line, d.message) for d in facts.diagnostics]
    assert len(messages) == 51
    assert messages[0] == (2, "unreadable COLL line: 'gpu1:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 "
                              "recvbuff'")
    assert messages[1] == (3, "NCCL line without its host:pid:tid prefix: 'garbled NCCL INFO AllReduce: opCount 1'")
    assert messages[2][1].startswith("unreadable communicator line: ")
    assert messages[-1] == (121, "70 more unreadable NCCL lines")


def test_gzip_cut_short(tmp_path):
    packed = gzip.compress((FIXTURES / "job8.log").read_bytes())
    path = tmp_path / "job8.log.gz"
    path.write_bytes(packed[:len(packed) * 2 // 3])
    facts = nccl.parse(str(path), "job8.log.gz")
    assert facts.diagnostics[-1].severity == "error"
    assert "gzip stream is corrupt or cut short" in facts.diagnostics[-1].message
    assert len(facts.records) == 8 and facts.lines_read > 100


def test_zstd(tmp_path):
    path = tmp_path / "job8.log.zst"
    try:
        import zstandard
    except ImportError:
        path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 32)
        facts = nccl.parse(str(path), "job8.log.zst")
        assert facts.records == []
        assert facts.diagnostics[0].severity == "error"
        assert "zstandard module is not installed" in facts.diagnostics[0].message
        return
    path.write_bytes(zstandard.ZstdCompressor().compress((FIXTURES / "job8.log").read_bytes()))
    assert summary(nccl.parse(str(path), "job8.log")) == summary(parse("job8.log"))


def test_zstd_cut_short_keeps_what_came_before_and_says_so(tmp_path):
    """zstandard's stream reader ends a truncated frame silently, as if the
    log were whole: the cut is an error diagnostic, the lines before it are
    read (the same as a gzip log cut short)."""
    zstandard = pytest.importorskip("zstandard")
    made = generator().generate(str(tmp_path / "job.log"), ranks=4, size=4 << 20, per_node=2, stop_rank=1,
                                stop_at=0.5)
    plain = nccl.parse(made["paths"][0], "job.log")
    packed = zstandard.ZstdCompressor(level=1).compress(open(made["paths"][0], "rb").read())
    path = tmp_path / "job.log.zst"
    path.write_bytes(packed[:len(packed) * 2 // 3])
    facts = nccl.parse(str(path), "job.log.zst")
    assert facts.diagnostics[-1].severity == "error"
    assert facts.diagnostics[-1].message.startswith(f"zstd stream is corrupt or cut short after line {facts.lines_read:,}")
    assert "(the zstd frame at byte 0 ends early: the file is cut short)" in facts.diagnostics[-1].message
    assert plain.lines_read // 2 < facts.lines_read < plain.lines_read
    assert [r.rank for r in facts.records] == [r.rank for r in plain.records]


def test_gzip_streams_with_flat_memory(tmp_path):
    gen = generator()
    path = tmp_path / "job.log.gz"
    made = gen.generate(str(path), ranks=4, size=4 << 20, per_node=2, stop_rank=1, stop_at=0.5,
                        compress=True)
    tracemalloc.start()
    try:
        facts = nccl.parse(made["paths"][0], "job.log.gz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20
    for expected in made["ranks"].values():
        assert record(facts, expected["host"], expected["pid"]).progress[expected["world"]].enqueued == \
            expected["world_last"]


# ---------------------------------------------------------------- fuzz

_SEED_LINES = [line for name in ("job8.log", "real_nccl229_two_hosts.log", "warnings.log", "wrapped.log",
                                 "old_versions.log", "real_lines.log")
               for line in (FIXTURES / name).read_bytes().split(b"\n") if b"NCCL" in line]


@st.composite
def mutated_logs(draw):
    lines = draw(st.lists(st.sampled_from(_SEED_LINES), min_size=1, max_size=30))
    out = []
    for line in lines:
        action = draw(st.integers(0, 9))
        if action == 0:
            line = line[:draw(st.integers(0, len(line)))]
        elif action == 1:
            at = draw(st.integers(0, len(line)))
            line = line[:at] + draw(st.binary(max_size=12)) + line[at:]
        elif action == 2:
            at = draw(st.integers(0, max(0, len(line) - 1)))
            line = line[:at] + bytes([draw(st.integers(0, 255))]) + line[at + 1:]
        elif action == 3:
            line = draw(st.sampled_from([b"\x1b[31m", b"\r", b"[rank3]:", b"\x00", b"0x", b"-1 ", b"(nil)"])) + line
        elif action == 4:
            line = line.replace(b" ", draw(st.sampled_from([b"  ", b"\t", b""])), draw(st.integers(1, 3)))
        elif action == 5 and draw(st.booleans()):
            line = b"y" * (70 << 10) + line
        out.append(line)
    tail = draw(st.sampled_from([b"\n", b"", b"\r\n"]))
    return b"\n".join(out) + tail


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=mutated_logs())
def test_fuzz_mutated_lines(tmp_path, data):
    path = tmp_path / "fuzz.log"
    path.write_bytes(data)
    _check_never_crashes(path, data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=0, max_size=4096))
def test_fuzz_binary_junk(tmp_path, data):
    path = tmp_path / "junk.log"
    path.write_bytes(data)
    _check_never_crashes(path, data)


def _check_never_crashes(path, data):
    nccl.sniff(str(path), data[:65536])
    for mode in ("full", "tail"):
        try:
            if mode == "tail":
                with small_tail(threshold=1024, head=256, tail=512, chunk=256):
                    facts = nccl.parse(str(path), "fuzz.log")
            else:
                facts = nccl.parse(str(path), "fuzz.log", full=True)
        except InputError:
            assert not data
            continue
        assert 0 <= facts.unrecognized <= facts.lines_read <= total_lines(data)
        for proc in facts.records:
            assert isinstance(proc.host, str) and isinstance(proc.pid, int)
            for op in proc.recent_ops:
                number = absolute(op.evidence.line, data)
                assert 1 <= number <= total_lines(data)
                assert op.evidence.text == data.split(b"\n")[number - 1].decode("utf-8", "replace").strip() \
                    or b"\x1b" in data or b"\r" in data or b"\x00" in data
                assert isinstance(op.seq, int) and op.seq >= 0


def test_prefix_rank_that_contradicts_the_world_rank(tmp_path):
    path = tmp_path / "odd.log"
    path.write_text("[rank3]:h:1:1 [0] NCCL INFO comm 0x5 rank 1 nranks 2 cudaDev 0 busId 1000 commId 0x9 "
                    "- Init COMPLETE\n")
    facts = nccl.parse(str(path), "odd.log")
    assert [(h, p, r) for h, p, r, _ in facts.pid_ranks] == [("h", 1, 1), ("h", 1, 3)]
    assert [(d.line, d.message) for d in facts.diagnostics] == [
        (1, "h:1: its [rank3]: prefix and its rank 1 in the largest communicator disagree")]


def test_text_report_explains_lines_counted_from_the_end(tmp_path):
    """A report citing tail-mode lines says how to find line -N."""
    import forensics
    from forensics.report import render

    gen = generator()
    folder = tmp_path / "logs"
    gen.generate(str(folder), ranks=8, size=600 << 10, stop_rank=5, stop_at=0.5, per_rank_files=True)
    with small_tail():
        report = forensics.analyze(folder, hung=True, jobs=1)
    text = render(report, "text")
    cited = re.findall(r"(nccl\.[\w.-]+\.log):(-\d+)", text)
    assert cited and report.verdict == "missing_rank"
    for name, line in cited:  # each citation is the line it claims to be
        data = (folder / name).read_bytes()
        shown = line_of(folder / name, absolute(int(line), data))
        assert shown.startswith("gpu-node")
    assert "Negative line numbers count back from the end of the file (-1 is the last line" in text
    assert "行号为负数表示从文件末尾倒数" in render(report, "text", "zh")
    full = render(forensics.analyze(folder, hung=True, jobs=1), "text")  # files under the threshold
    assert "Negative line numbers" not in full and not re.search(r"\.log:-\d", full)


def test_other_programs_lines_in_an_nccl_log_are_read_through_the_catalogue(tmp_path):
    """mpirun's report and Open MPI's signal handler share the console with
    NCCL's lines: their catalogued messages count (with the process they
    name), while NCCL's own message text without NCCL's prefix does not
    (nothing says which process printed it)."""
    log = tmp_path / "all_reduce_perf.out"
    log.write_text(
        "node-a:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "node-a:4242:4250 [0] NCCL INFO comm 0x55e4b16d7a30 rank 0 nranks 2 cudaDev 0 busId 1a000 "
        "commId 0x83f1d0a29c6b5e47 - Init START\n"
        "[node-a:04242] *** Process received signal ***\n"
        "[node-a:04242] Signal: Bus error (7)\n"
        "NET/IB : Got completion from peer 10.0.0.2<39114> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
        "\x1b[31mmpirun noticed that process rank 0 with PID 4242 on node node-a exited on signal 7 (Bus error).\x1b[0m\n",
        encoding="utf-8")
    facts = nccl.parse(str(log), "all_reduce_perf.out")
    hits = {hit.id: hit for hit in facts.messages}
    assert hits["openmpi-process-received-signal"].fact("pid") == 4242
    assert hits["openmpi-process-received-signal"].fact("signal") == "SIGBUS"
    mpirun = hits["openmpi-process-exited-on-signal"]
    assert (mpirun.fact("rank"), mpirun.fact("host"), mpirun.evidence.line) == (0, "node-a", 6)
    from forensics.messages import catalogue

    bare = "NET/IB : Got completion from peer 10.0.0.2<39114> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
    nccl_ids = [entry.id for entry, _ in catalogue().match(bare)]
    assert nccl_ids and not set(nccl_ids) & set(hits)  # NCCL's words, but no NCCL prefix: whose?
