"""nccl-opcount-mismatch: NCCL communicators told apart and matched across
processes without a comm id, and a different call at one opCount of one."""

import re
import shutil
from dataclasses import replace

import pytest

from conftest import CORPUS
from forensics import analyze, analyze_incident
from forensics.ingest import load_incident
from forensics.ingest import communicators, nccl
from forensics.plugins import Plugins
from forensics.rules import nccl_opcount_mismatch as rule

FP32, BF16, INT32 = 7, 9, 2


def coll(host, pid, op, opcount, comm, nranks, count=1048576, dtype=FP32, redop=0, root=0, dev=0, prefix=""):
    """A COLL line as src/enqueue.cc prints it (formats.md §3c)."""
    return (f"{prefix}{host}:{pid}:{pid} [{dev}] NCCL INFO {op}: opCount {opcount:x} sendbuff 0x7f3a00000000 "
            f"recvbuff 0x7f3a00000000 count {count} datatype {dtype} op {redop} root {root} comm {comm} "
            f"[nranks={nranks}] stream 0x55a1bf000000")


def run(folder, **kwargs):
    return analyze(str(folder), plugins=Plugins(autoload=False), jobs=1, **kwargs)


def ours(report):
    return [f for f in report.findings if f.rule == rule.ID]


def write(folder, name, lines):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def steps(host, pid, comm, nranks, ops, start=0, **kwargs):
    """COLL lines of one process on one communicator: `ops` is a list of
    (op, count) from opCount `start` on."""
    return [coll(host, pid, op, start + i, comm, nranks, count=count, **kwargs) for i, (op, count) in enumerate(ops)]


# ---------------------------------------------------------------- the brief's case

def test_two_files_of_one_node_a_different_op_at_one_opcount_is_a_mismatch(tmp_path):
    same = [("AllReduce", 1048576)] * 5
    write(tmp_path, "a.log", steps("node0", 4101, "0x55d2c8a0", 2, same + [("AllReduce", 1048576)]))
    write(tmp_path, "b.log", steps("node0", 4102, "0x5611aa00", 2, same + [("Broadcast", 1048576)]))
    report = run(tmp_path)
    (finding,) = ours(report)
    assert report.verdict == "collective_mismatch"
    assert finding.kind == "collective_mismatch" and finding.severity == "error"
    assert finding.confidence == "medium" and "identified with medium confidence" in finding.message
    assert "the same calls at 5 opCounts (0-4)" in finding.message
    assert "node0:4101 calls AllReduce(count 1048576, float32, sum)" in finding.message
    assert "node0:4102 calls Broadcast(count 1048576, float32, root 0)" in finding.message
    # no global rank anywhere: the finding names processes, not ranks
    assert finding.ranks == () and report.culprit_ranks == []
    assert {(c.host, c.pid, c.rank) for c in finding.culprits} == {("node0", 4101, None), ("node0", 4102, None)}
    cited = [(e.path, e.line) for e in finding.evidence[:2]]
    assert cited == [("a.log", 6), ("b.log", 6)]
    assert "opCount 5 " in finding.evidence[0].text and "Broadcast: opCount 5 " in finding.evidence[1].text
    assert finding.message_zh and "opCount 5" in finding.message_zh and finding.hint_zh


def test_one_merged_log_names_the_minority(tmp_path):
    lines = []
    for opcount in range(8):
        for pid, comm in ((700, "0xa0"), (701, "0xb0"), (702, "0xc0")):
            op = "AllGather" if (pid, opcount) == (701, 7) else "ReduceScatter"
            lines.append(coll("gpu3", pid, op, opcount, comm, 3, count=4096, dtype=BF16, prefix=f"[rank{pid - 700}]:"))
    write(tmp_path, "console.log", lines)
    report = run(tmp_path)
    (finding,) = ours(report)
    assert report.verdict == "collective_mismatch" and report.culprit_ranks == [1]
    assert finding.ranks == (1,) and [c.pid for c in finding.culprits] == [701]
    assert "gpu3:701 (rank 1) calls AllGather" in finding.message
    assert "gpu3:700 (rank 0) and gpu3:702 (rank 2) call ReduceScatter" in finding.message
    assert "Differing: gpu3:701 (rank 1)." in finding.message
    # the rank states are not taken for a deadlock on "the world" (per-process groups are unidentified)
    assert not [f for f in report.findings if f.kind in ("p2p_circular_wait", "circular_wait")]


@pytest.mark.parametrize("change, what", [
    (dict(count=2048), "different counts"),
    (dict(dtype=BF16), "different datatypes"),
    (dict(redop=2), "different reduction ops"),
])
def test_the_field_that_differs_is_named(tmp_path, change, what):
    base = dict(count=1024, dtype=FP32, redop=0)
    lines = []
    for opcount in range(4):
        for pid in (1, 2):
            fields = dict(base, **change) if (pid, opcount) == (2, 3) else base
            lines.append(coll("h", pid, "AllReduce", opcount, f"0x{pid}f", 2, **fields))
    write(tmp_path, "node.log", lines)
    (finding,) = ours(run(tmp_path))
    assert what in finding.message


def test_a_different_root_of_a_broadcast_is_a_mismatch_but_send_recv_peers_are_not(tmp_path):
    lines = []
    for opcount in range(4):
        lines.append(coll("h", 1, "Send", opcount, "0x1f", 2, root=1))
        lines.append(coll("h", 2, "Recv", opcount, "0x2f", 2, root=0))
    write(tmp_path, "p2p.log", lines)
    assert not ours(run(tmp_path))
    lines += [coll("h", 1, "Broadcast", 4, "0x1f", 2, root=0), coll("h", 2, "Broadcast", 4, "0x2f", 2, root=1)]
    write(tmp_path, "p2p.log", lines)
    (finding,) = ours(run(tmp_path))
    assert "different roots" in finding.message and "at opCount 4" in finding.message


def test_calls_launched_together_are_compared_as_one_launch(tmp_path):
    # ncclGroupStart/End: every call of the group prints the same opCount
    lines = []
    for pid in (1, 2):
        for opcount in range(3):
            lines.append(coll("h", pid, "AllReduce", opcount, f"0x{pid}f", 2, count=10))
            lines.append(coll("h", pid, "AllReduce", opcount, f"0x{pid}f", 2, count=20))
        lines.append(coll("h", pid, "AllReduce", 3, f"0x{pid}f", 2, count=10))
        if pid == 1:
            lines.append(coll("h", pid, "AllReduce", 3, f"0x{pid}f", 2, count=20))
    write(tmp_path, "group.log", lines)
    (finding,) = ours(run(tmp_path))
    assert "different sets of calls launched together" in finding.message
    assert "AllReduce(count 10, float32, sum) + AllReduce(count 20, float32, sum)" in finding.message


# ---------------------------------------------------------------- never a false alarm

def tp_dp_lines(pid, tp, dp, tp_odd_at=None):
    """One process's calls on a TP and a DP communicator of 2 ranks, interleaved.
    Both start with the same Broadcast, then differ: a TP view paired with a
    DP view agrees at opCount 0 and parts at 1."""
    out = [coll("n", pid, "Broadcast", 0, tp, 2, count=1024), coll("n", pid, "Broadcast", 0, dp, 2, count=1024)]
    tp_count = dp_count = 1
    for _ in range(5):
        for op in ("AllGather", "ReduceScatter"):
            odd = tp_odd_at == tp_count
            out.append(coll("n", pid, "Broadcast" if odd else op, tp_count, tp, 2, count=4096, dtype=BF16))
            tp_count += 1
        out.append(coll("n", pid, "AllReduce", dp_count, dp, 2, count=2097152))
        dp_count += 1
    return out


def test_two_communicators_of_one_size_in_one_process_are_not_confused(tmp_path):
    lines = tp_dp_lines(11, "0x1a", "0x1b") + tp_dp_lines(12, "0x2a", "0x2b")
    write(tmp_path, "node.log", lines)
    report = run(tmp_path)
    assert not ours(report) and report.verdict != "collective_mismatch"
    comms = load_incident([str(tmp_path)], Plugins(autoload=False), jobs=1).communicators  # merge identifies them
    assert sorted(sorted(s.view.pointer for s in c.members) for c in comms) == [["0x1a", "0x2a"], ["0x1b", "0x2b"]]
    assert all(c.diverge is None for c in comms)


def test_the_rule_reads_the_communicators_merge_identified(tmp_path):
    lines = tp_dp_lines(11, "0x1a", "0x1b") + tp_dp_lines(12, "0x2a", "0x2b", tp_odd_at=7)
    write(tmp_path, "node.log", lines)
    plugins = Plugins(autoload=False)
    incident = load_incident([str(tmp_path)], plugins, jobs=1)
    (comm,) = [c for c in incident.communicators if c.diverge is not None]
    assert comm.diverge == 7 and comm.basis == communicators.CALLS and comm.confidence == "medium"
    assert len(ours(analyze_incident(incident, plugins))) == 1
    assert not ours(analyze_incident(replace(incident, communicators=()), plugins))  # the views alone: nothing


def test_a_mismatch_on_one_of_two_equal_communicators_names_only_that_one(tmp_path):
    lines = tp_dp_lines(11, "0x1a", "0x1b") + tp_dp_lines(12, "0x2a", "0x2b", tp_odd_at=7)
    write(tmp_path, "node.log", lines)
    (finding,) = ours(run(tmp_path))
    assert finding.severity == "error" and finding.confidence == "medium"
    assert "at opCount 7" in finding.message
    pointers = {re.search(r"comm (0x\w+)", e.text).group(1) for e in finding.evidence}
    assert pointers == {"0x1a", "0x2a"}


def test_the_corpus_console_without_rank_prefixes_is_still_quiet(tmp_path):
    text = (CORPUS / "synthetic_nccl_same_comm_tp_dp_healthy" / "node3.console.log").read_text()
    write(tmp_path, "console.log", [re.sub(r"^\[rank\d\]:", "", line) for line in text.splitlines()])
    assert not ours(run(tmp_path))
    views = nccl.parse(str(tmp_path / "console.log"), "console.log").comm_views
    comms = communicators.identify(views)
    assert len(views) == 12 and all(c.diverge is None for c in comms)
    for comm in comms:  # never two views of one process, never more than nranks
        assert len({s.process for s in comm.members}) == len(comm.members) <= comm.members[0].view.nranks


def test_processes_of_different_hosts_are_not_matched_without_a_comm_id(tmp_path):
    same = [("AllReduce", 64)] * 4
    write(tmp_path, "a.log", steps("node-a", 1, "0xaa", 2, same + [("AllReduce", 64)]))
    write(tmp_path, "b.log", steps("node-b", 2, "0xbb", 2, same + [("Broadcast", 64)]))
    assert not ours(run(tmp_path))


def trees(pid, me, up, down):
    return f"h:{pid}:{pid} [0] NCCL INFO Trees [0] {down}/-1/-1->{me}->{up} [1] {down}/-1/-1->{me}->{up}"


def test_ranks_in_the_communicator_that_clash_keep_views_apart(tmp_path):
    same = [("AllReduce", 64)] * 4
    a = [trees(1, 0, -1, 1), "h:1:1 [0] NCCL INFO comm 0xaa rank 0 nranks 2 cudaDev 0 busId 1b000 - Init COMPLETE"]
    b = [trees(2, 0, -1, 1), "h:2:2 [1] NCCL INFO comm 0xbb rank 0 nranks 2 cudaDev 1 busId 1c000 - Init COMPLETE"]
    write(tmp_path, "a.log", a + steps("h", 1, "0xaa", 2, same + [("AllReduce", 64)]))
    write(tmp_path, "b.log", b + steps("h", 2, "0xbb", 2, same + [("Broadcast", 64)]))
    assert not ours(run(tmp_path))  # both are rank 0 of theirs: two communicators
    b[0], b[1] = trees(2, 1, 0, -1), b[1].replace("rank 0 nranks", "rank 1 nranks")
    write(tmp_path, "b.log", b + steps("h", 2, "0xbb", 2, same + [("Broadcast", 64)]))
    (finding,) = ours(run(tmp_path))
    assert finding.confidence == "high" and "ring/tree lines that fit together" in finding.message
    assert any("Trees" in e.text for e in finding.evidence)


def test_a_comm_summary_saying_its_members_are_on_two_nodes_keeps_two_local_views_apart(tmp_path):
    same = [("AllReduce", 64)] * 4
    summary = "h:{0}:{0} [0] NCCL INFO comm {1} rank {2} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0"
    write(tmp_path, "a.log", [summary.format(1, "0xaa", 0)] + steps("h", 1, "0xaa", 2, same + [("AllReduce", 64)]))
    write(tmp_path, "b.log", [summary.format(2, "0xbb", 1)] + steps("h", 2, "0xbb", 2, same + [("Broadcast", 64)]))
    assert not ours(run(tmp_path))


def test_four_processes_two_identical_communicators_low_confidence_and_the_odd_one(tmp_path):
    # TP groups {0,1} and {2,3} of one node call the same ops; process 1 parts at opCount 5.
    lines = []
    for pid in (20, 21, 22, 23):
        ops = [("AllReduce", 512)] * 5 + [("AllGather" if pid == 21 else "AllReduce", 512)]
        lines += steps("h", pid, f"0x{pid}0", 2, ops)
    write(tmp_path, "node.log", lines)
    (finding,) = ours(run(tmp_path))
    assert finding.severity == "warning" and finding.confidence == "low"
    assert "cannot be told without comm ids" in finding.message
    assert [c.pid for c in finding.culprits] == [21]


def test_one_line_each_is_a_low_confidence_warning(tmp_path):
    write(tmp_path, "a.log", [coll("node0", 4101, "AllReduce", 5, "0x55d2c8a0", 2)])
    write(tmp_path, "b.log", [coll("node0", 4102, "Broadcast", 5, "0x5611aa00", 2)])
    report = run(tmp_path)
    (finding,) = ours(report)
    assert finding.severity == "warning" and finding.confidence == "low"
    assert "no earlier call to compare" in finding.message and "if they are one communicator" in finding.message
    assert report.verdict != "collective_mismatch"


def test_the_end_of_a_group_cut_by_the_log_start_is_not_a_mismatch(tmp_path):
    # The log starts inside process 2's group at opCount 9: it shows only the group's last call.
    a = [coll("h", 1, "AllReduce", 9, "0x1f", 2, count=10), coll("h", 1, "AllReduce", 9, "0x1f", 2, count=20)]
    b = [coll("h", 2, "AllReduce", 9, "0x2f", 2, count=20)]
    for opcount in range(10, 14):
        a.append(coll("h", 1, "AllReduce", opcount, "0x1f", 2, count=30))
        b.append(coll("h", 2, "AllReduce", opcount, "0x2f", 2, count=30))
    write(tmp_path, "a.log", a)
    write(tmp_path, "b.log", b)
    assert not ours(run(tmp_path))


def test_a_process_logged_twice_is_not_its_own_partner(tmp_path):
    same = [("AllReduce", 64)] * 4
    first = steps("h", 1, "0xaa", 2, same + [("AllReduce", 64)])
    write(tmp_path, "console.log", first)
    write(tmp_path, "nccl.h.1.log", first)
    assert not ours(run(tmp_path))
    write(tmp_path, "nccl.h.2.log", steps("h", 2, "0xbb", 2, same + [("Broadcast", 64)]))
    (finding,) = ours(run(tmp_path))
    assert sorted(c.pid for c in finding.culprits) == [1, 2]


# ---------------------------------------------------------------- comm ids

def init(pid, comm, rank, comm_id, nranks=2):
    return (f"h:{pid}:{pid} [{rank}] NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev "
            f"{rank} nvmlDev {rank} busId 1b000 commId {comm_id} - Init COMPLETE")


def test_a_shared_comm_id_with_known_ranks_is_left_to_collective_mismatch(tmp_path):
    same = [("AllReduce", 64)] * 4
    write(tmp_path, "a.log", [init(1, "0xaa", 0, "0x1234")] + steps("h", 1, "0xaa", 2, same + [("AllReduce", 64)]))
    write(tmp_path, "b.log", [init(2, "0xbb", 1, "0x1234")] + steps("h", 2, "0xbb", 2, same + [("Broadcast", 64)]))
    report = run(tmp_path)
    assert not ours(report)
    assert [f.rule for f in report.findings if f.kind == "collective_mismatch"] == ["collective-mismatch"]


def test_one_init_line_cut_the_other_kept_is_still_matched(tmp_path):
    same = [("AllReduce", 64)] * 4
    write(tmp_path, "a.log", [init(1, "0xaa", 0, "0x1234")] + steps("h", 1, "0xaa", 2, same + [("AllReduce", 64)]))
    write(tmp_path, "b.log", steps("h", 2, "0xbb", 2, same + [("Broadcast", 64)]))
    (finding,) = ours(run(tmp_path))
    assert finding.severity == "error" and finding.confidence == "medium"


# ---------------------------------------------------------------- reading

def test_views_parsed_by_worker_processes_travel_with_their_facts(tmp_path, monkeypatch):
    import forensics.ingest as ingest

    same = [("AllReduce", 64)] * 4
    write(tmp_path, "a.log", steps("h", 1, "0xaa", 2, same + [("AllReduce", 64)]))
    write(tmp_path, "b.log", steps("h", 2, "0xbb", 2, same + [("Broadcast", 64)]))
    monkeypatch.setattr(ingest, "PARALLEL_MIN", 2)  # two files are enough for the forked workers
    forked = []
    real = ingest._parse_forked
    monkeypatch.setattr(ingest, "_parse_forked", lambda *args: forked.append(len(args[0])) or real(*args))
    plugins = Plugins(autoload=False)
    incident = load_incident([str(tmp_path)], plugins, jobs=2)
    assert forked == [2]  # both files parsed by forked worker processes
    assert {v.pid for v in incident.comm_views} == {1, 2}
    (comm,) = incident.communicators
    assert {s.view.pid for s in comm.members} == {1, 2} and comm.diverge == 4
    assert len(ours(analyze_incident(incident, plugins))) == 1


def test_views_carry_ranks_channels_and_neighbours_from_init_lines():
    folder = CORPUS / "synthetic_nccl_same_comm_mismatch"
    (log,) = [p for p in folder.iterdir() if p.name.endswith("51342.log")]
    views = {v.pointer: v for v in nccl.parse(str(log), log.name).comm_views}
    default, metrics = views["0x564a3e5c2a10"], views["0x564a3f1d9e80"]
    assert default.comm_rank == 0 and default.channels == 2 and default.rank == 0
    assert default.ring_orders == ((0, (0, 1)), (1, (0, 1))) and default.trees[0] == (0, -1, (1,))
    assert len(default.calls) == 29 and default.calls[-1].op == "AllReduce" and default.calls[-1].opcount == 0x1c
    # the metrics group's init lines come after calls on the default group: still its own
    assert metrics.comm_rank == 0 and metrics.trees and "rank 0 nranks 2" in metrics.comm_rank_evidence.text


def test_tail_mode_keeps_the_calls_it_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(nccl, "TAIL_THRESHOLD", 4096)
    monkeypatch.setattr(nccl, "HEAD_BYTES", 1024)
    monkeypatch.setattr(nccl, "TAIL_BYTES", 4096)
    same = [("AllReduce", 64)] * 60
    write(tmp_path, "a.log", steps("h", 1, "0xaa", 2, same + [("AllReduce", 64)]))
    write(tmp_path, "b.log", steps("h", 2, "0xbb", 2, same + [("Broadcast", 64)]))
    (finding,) = ours(run(tmp_path))
    assert "at opCount 3c" in finding.message and finding.evidence[0].line < 0  # counted from the end


def test_bad_input_is_diagnosed_never_a_traceback(tmp_path):
    lines = [coll("h", 1, "AllReduce", 0, "0xaa", 0), coll("h", 2, "AllReduce", 0, "0xbb", 0),  # nranks 0
             coll("h", 1, "AllReduce", 1, "0xcc", 99999999999), coll("h", 2, "AllReduce", 1, "0xdd", 99999999999),
             "h:1:1 [0] NCCL INFO AllReduce: opCount zz sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 "
             "comm 0xaa [nranks=2] stream 0x1",
             coll("h", 1, "AllReduce", 2, "0xee", 2, dtype=77, redop=99),
             coll("h", 2, "AllReduce", 2, "0xff", 2, dtype=77, redop=98),
             coll("h", 1, "AllReduce", 3, "0xee", 2, dtype=77, redop=99),
             coll("h", 2, "Bogus_Op", 3, "0xff", 2, dtype=-3, redop=-1),
             "h:1:1 [0] NCCL INFO Trees [0] 5/-1/-1->9->7 [1] 5/-1/-1->9->7",   # rank 9 of 2: not a rank
             "h:2:2 [0] NCCL INFO Channel 00/02 :    0   9   9   9",
             "h:2:2 [0] NCCL INFO comm 0xff rank 7 nranks 2 cudaDev 0 busId 1 - Init COMPLETE",
             "h:3 NCCL INFO AllReduce: opCount"]
    write(tmp_path, "junk.log", lines)
    report = run(tmp_path)
    assert report.diagnostics
    assert any("unreadable COLL line" in d.message for d in report.diagnostics)
    assert any("without its host:pid:tid prefix" in d.message for d in report.diagnostics)
    # 0xee and 0xff: one call alike (datatype 77, ops past ncclNumOps), then a made-up op
    (finding,) = ours(report)
    assert finding.severity == "warning" and "at opCount 3" in finding.message
    assert "AllReduce(count 1048576, datatype 77, a PreMulSum op)" in finding.message and "Bogus_Op" in finding.message


# ---------------------------------------------------------------- corpus and docs

def test_corpus_incidents_state_what_they_identified():
    mismatch = ours(run(CORPUS / "synthetic_nccl_same_comm_mismatch"))
    assert [f.confidence for f in mismatch] == ["high"] and mismatch[0].ranks == (0, 1)
    cut = run(CORPUS / "synthetic_nccl_same_comm_init_cut")
    (finding,) = ours(cut)
    assert finding.confidence == "medium" and finding.ranks == ()
    assert [(c.host, c.pid, c.rank) for c in finding.culprits] == [("dgx-a100-12", 60417, None)]
    assert cut.diagnostics  # the cut first line
    assert not ours(run(CORPUS / "synthetic_nccl_same_comm_tp_dp_healthy"))


def test_the_rule_is_documented_in_both_languages():
    (doc,) = rule.RULES
    assert doc.id == rule.ID and doc.kinds == ("collective_mismatch",) and doc.severity == "error"
    assert "What it detects" in doc.explanation and "confidence" in doc.explanation
    assert any("\u4e00" <= ch <= "\u9fff" for ch in doc.title_zh + doc.explanation_zh + doc.hint_zh)


def test_two_sides_of_a_communicator_mismatch_rank_0_on_its_evaluation_path_is_the_odd_one(tmp_path):
    # NCCL INFO lines of two processes: ten all-reduces alike, then AllGather against AllReduce at one opCount;
    # their py-spy dumps (named by rank, with the pids of the NCCL lines) show rank 0 in its evaluation
    coll = ("dgx-a03:{pid}:{tid} [{dev}] NCCL INFO {op}: opCount {n:x} sendbuff 0x7f1a4e000000 recvbuff "
            "0x7f1a4e000000 count {count} datatype 6 op 0 root 0 comm 0x55f3c1d2e4a{dev} [nranks=2] stream 0x55f3\n")
    lines = []
    for n in range(0x3e9, 0x3f3):
        lines += [coll.format(pid=71408 + d, tid=72019 + d, dev=d, op="AllReduce", n=n, count=6553600 - n)
                  for d in range(2)]
    lines += [coll.format(pid=71408, tid=72019, dev=0, op="AllGather", n=0x3f3, count=1024),
              coll.format(pid=71409, tid=72020, dev=1, op="AllReduce", n=0x3f3, count=1024)]
    (tmp_path / "nccl.log").write_text("".join(lines))
    for rank, frames in ((0, "    evaluate (train.py:214)\n    main (train.py:301)\n"),
                         (1, "    main (train.py:286)\n    <module> (train.py:342)\n")):
        (tmp_path / f"rank{rank}.pyspy.txt").write_text(
            f"Process {71408 + rank}: python train.py\nPython v3.10.12 (/usr/bin/python3)\n\n"
            f'Thread {71408 + rank} (active+gil): "MainThread"\n{frames}')
    report = analyze(tmp_path, hung=True, jobs=1, plugins=Plugins(autoload=False))
    assert report.verdict == "collective_mismatch" and report.culprit_ranks == [0]
