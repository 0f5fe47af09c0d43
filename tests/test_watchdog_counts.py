"""Element counts of watchdog lines (torch 2.1+: `WorkNCCL(..., NumelIn=N,
NumelOut=M, ...)`) compared across ranks: the same collective at the same
position with another count on one rank is a collective mismatch, where
the lines give no shape to compare."""

from forensics import analyze
from forensics.ingest import torchlog

NOT_RECORDED = 18446744073709551615  # a size_t of -1: the count a work never given one prints


def _line(rank: int, seq: int, op: str, numel_in: int, numel_out: int) -> str:
    return (f"[rank{rank}]:[E1127 03:12:44.{318204 + rank:06d}551 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog "
            f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel_in}, "
            f"NumelOut={numel_out}, Timeout(ms)=600000) ran for {600040 + rank} milliseconds before timing out.\n")


def _analyze(tmp_path, counts: dict, op: str = "ALLREDUCE", seq: int = 1203):
    text = "".join(_line(rank, seq, op, numel_in, numel_out) for rank, (numel_in, numel_out) in counts.items())
    (tmp_path / "train.log").write_text(text, encoding="utf-8")
    return analyze(str(tmp_path), jobs=1)


def _mismatches(report):
    return [f for f in report.findings if f.rule == "collective-mismatch"]


def test_the_counts_are_read_and_an_unrecorded_count_is_none(tmp_path):
    path = tmp_path / "r.log"
    path.write_text(_line(0, 7, "ALLREDUCE", 4096, 4096) + _line(1, 7, "COALESCED", 0, NOT_RECORDED),
                    encoding="utf-8")
    facts = torchlog.parse(str(path), "r.log")
    ops = {r.rank: r.last_op for r in facts.records if r.source == "torch"}
    assert (ops[0].op, ops[0].seq, ops[0].numel_in, ops[0].numel_out) == ("all_reduce", 7, 4096, 4096)
    assert (ops[1].numel_in, ops[1].numel_out) == (None, None)


def test_the_rank_with_the_odd_count_is_the_culprit(tmp_path):
    report = _analyze(tmp_path, {0: (25165824,) * 2, 1: (26214400,) * 2, 2: (25165824,) * 2, 3: (25165824,) * 2})
    assert report.verdict == "collective_mismatch" and report.culprit_ranks == [1]
    assert report.confidence.level == "high"
    (finding,) = [f for f in _mismatches(report) if "input" in f.message]
    assert "rank 1 calls 26,214,400 input elements" in finding.message
    assert "ranks 0,2,3 call 25,165,824 input elements" in finding.message
    assert finding.evidence[0].line in (1, 2, 3, 4)


def test_one_rank_against_one_names_both_and_says_it_cannot_tell(tmp_path):
    report = _analyze(tmp_path, {2: (24084544,) * 2, 3: (64,) * 2}, op="BROADCAST", seq=7219)
    assert report.verdict == "collective_mismatch" and report.culprit_ranks == [2, 3]
    assert report.confidence.level == "medium"
    assert "2 against 3" in report.confidence.reason


def test_counts_that_agree_are_no_mismatch(tmp_path):
    # An all-gather's output is its group's inputs side by side: in and out differ on every rank alike.
    report = _analyze(tmp_path, {0: (2097152, 8388608), 1: (2097152, 8388608), 3: (2097152, 8388608)},
                      op="_ALLGATHER_BASE")
    assert report.verdict != "collective_mismatch" and not _mismatches(report)


def test_counts_that_may_differ_are_not_compared(tmp_path):
    # An all-to-all's split is each rank's own; a coalesced group's closing work states no count of its own.
    for op in ("ALLTOALL_BASE", "COALESCED"):
        report = _analyze(tmp_path, {0: (4096, 4096), 1: (8192, 8192), 2: (4096, 4096)}, op=op)
        assert not _mismatches(report), op


def test_an_unrecorded_count_is_not_a_different_one(tmp_path):
    report = _analyze(tmp_path, {0: (4096, 4096), 1: (0, 0), 2: (NOT_RECORDED, NOT_RECORDED), 3: (4096, 4096)})
    assert not _mismatches(report)
