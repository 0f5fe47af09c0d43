"""The NCCL RAS status report reader (forensics/ingest/ncclras.py): which
ranks a communicator's op-count mismatch leaves behind, when they are
global ranks, the processes RAS considers dead; sniffing and bad input."""

import pytest

from forensics import analyze
from forensics.ingest import ncclras
from forensics.ingest.textio import InputError

from conftest import CORPUS

REPORT = CORPUS / "public_n_ras_allgather_count_stragglers" / "ncclras_report.txt"

HEAD = """NCCL version 2.27.7 compiled with CUDA 12.8
CUDA runtime version 12080, driver version 12080

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      2          4            1          8        8

Communicators... (0.01s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         4         8         8   RUNNING  MISMATCH
    1         2         1         4         4         8   RUNNING  OK

Errors
======

Warnings
========

"""


def _parse(tmp_path, text, name="ras.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return ncclras.parse(str(path), name)


def _mismatch(facts):
    return [dict(h.facts) for h in facts.messages if h.id == "nccl-ras-op-count-mismatch"]


def test_the_unlisted_majority_is_the_rest_of_the_communicator():
    facts = ncclras.parse(str(REPORT), "ncclras_report.txt")
    (hit,) = _mismatch(facts)
    assert hit["op"] == "all_gather" and hit["count"] == 641
    assert hit["ranks"] == tuple(r for r in range(32) if r not in (12, 13))
    assert sorted((rank, host, pid) for host, pid, rank, _ in facts.pid_ranks) == [
        (12, "10.12.3.41", 417251), (13, "10.12.3.41", 417252)]
    assert next(h for h in facts.messages if h.id == "nccl-ras-op-count-mismatch").evidence.line == 25


def test_the_listed_minority_behind_is_named(tmp_path):
    facts = _parse(tmp_path, HEAD + """#0-0 (00000000deadbeef) MISMATCH
  Communicator ranks have different AllReduce operation counts
  6 ranks have launched up to operation 1203
  2 ranks have launched up to operation 1202
  Rank 2 -- GPU 2 managed by process 5102 on node n1
  Rank 6 -- GPU 2 managed by process 5206 on node n2
""")
    (hit,) = _mismatch(facts)
    assert (hit["op"], hit["count"], hit["ranks"]) == ("all_reduce", 1203, (2, 6))


def test_a_count_held_by_one_rank_and_the_2_24_wording(tmp_path):
    facts = _parse(tmp_path, HEAD + """#0-0 (00000000deadbeef) MISMATCH
  Communicator ranks have different collective operation counts
  7 ranks have launched up to operation 88
  Rank 5 has launched up to operation 87 -- GPU 1 managed by process 5205 on node n2
""")
    (hit,) = _mismatch(facts)
    assert "op" not in hit and hit["ranks"] == (5,) and hit["count"] == 88


def test_a_rank_that_launched_nothing_is_behind(tmp_path):
    facts = _parse(tmp_path, HEAD + """#0-0 (00000000deadbeef) MISMATCH
  Communicator ranks have different Broadcast operation counts
  7 ranks have launched up to operation 3
  Rank 0 has not launched any operations -- GPU 0 managed by process 5100 on node n1
""")
    assert _mismatch(facts)[0]["ranks"] == (0,)


def test_ranks_of_a_smaller_communicator_are_not_named_as_global_ranks(tmp_path):
    facts = _parse(tmp_path, HEAD.replace("RUNNING  OK", "RUNNING  MISMATCH") + """#1-0 (00000000cafef00d) MISMATCH
  Communicator ranks have different AllGather operation counts
  3 ranks have launched up to operation 40
  Rank 1 has launched up to operation 39 -- GPU 1 managed by process 5101 on node n1
""")
    (hit,) = _mismatch(facts)
    assert "ranks" not in hit
    assert any("communicator ranks, not global ranks" in d.message for d in facts.diagnostics)
    assert facts.pid_ranks == []  # its rank 1 is not global rank 1


def test_a_pasted_block_without_the_job_summary_names_no_rank(tmp_path):
    facts = _parse(tmp_path, """#0-0 (5c27e0b91fa4d368) MISMATCH
  Communicator ranks have different AllGather operation counts
  30 ranks have launched up to operation 640
  2 ranks have launched up to operation 641
  Rank 12 -- GPU 4 managed by process 417251 on node 10.12.3.41
  Rank 13 -- GPU 5 managed by process 417252 on node 10.12.3.41
""")
    (hit,) = _mismatch(facts)
    assert "ranks" not in hit and hit["count"] == 641


def test_counts_that_do_not_add_up_name_no_rank(tmp_path):
    facts = _parse(tmp_path, HEAD + """#0-0 (00000000deadbeef) MISMATCH
  Communicator ranks have different AllReduce operation counts
  5 ranks have launched up to operation 10
  2 ranks have launched up to operation 9
  Rank 2 -- GPU 2 managed by process 5102 on node n1
""")
    assert "ranks" not in _mismatch(facts)[0]
    assert any("do not add up" in d.message for d in facts.diagnostics)


def test_dead_processes_are_named_by_node_and_pid(tmp_path):
    (tmp_path / "ras.txt").write_text(HEAD.replace("Errors\n======\n\n", """Errors
======

DEAD
  1 job process considered dead (unreachable via the RAS network)
  Process 5206 on node n2 managing GPU 2

"""), encoding="utf-8")
    facts = ncclras.parse(str(tmp_path / "ras.txt"), "ras.txt")
    dead = [dict(h.facts) for h in facts.messages if h.id == "nccl-ras-process-dead"]
    assert dead == [{"count": 1}, {"peer_host": "n2", "peer_pid": 5206}]  # the heading, then each process
    report = analyze(str(tmp_path), hung=True, jobs=1)
    assert report.verdict == "dead_rank"
    assert any(c.host == "n2" for f in report.findings for c in f.culprits)


def test_the_report_is_read_end_to_end(tmp_path):
    (tmp_path / "ras.txt").write_bytes(REPORT.read_bytes())
    report = analyze(str(tmp_path), hung=True, jobs=1)
    assert report.verdict == "missing_rank" and len(report.culprit_ranks) == 30


def test_sniff():
    assert ncclras.sniff("r.txt", REPORT.read_bytes()[:4096]) == ncclras.KIND
    assert ncclras.sniff("r.txt", b"#0-0 (5c27e0b91fa4d368) MISMATCH\n  Communicator ranks have different status\n")
    assert ncclras.sniff("r.txt", b"node-0:2874:7128 [3] NCCL INFO comm 0x55b1 rank 3 nranks 32 - Init COMPLETE\n") is None
    assert ncclras.sniff("r.txt", b"Job summary\nnothing here\n") is None
    assert ncclras.sniff("r.bin", b"\x00" * 64) is None


def test_bad_input(tmp_path):
    with pytest.raises(InputError, match="empty"):
        _parse(tmp_path, "   \n")
    facts = _parse(tmp_path, HEAD + "#0-0 (00000000deadbeef) MISMATCH\n"
                   "  Communicator ranks have different AllReduce operation counts\n"
                   "  7 ranks have launched up to operation 10\n"
                   "  Rank 99999999 has launched up to operation 9 -- [process information not found]\n"
                   + "x" * (70 * 1024) + "\n")
    assert "ranks" not in _mismatch(facts)[0]
    assert {d.line for d in facts.diagnostics if "characters skipped" in d.message} == {HEAD.count("\n") + 5}
    assert any("is not a rank" in d.message for d in facts.diagnostics)


def test_a_communicator_beyond_any_job_names_nobody_and_costs_nothing(tmp_path):
    # Listing "every rank but these" of a billion-rank communicator would never end.
    facts = _parse(tmp_path, HEAD.replace("    0         1         2         4         8         8   RUNNING  MISMATCH",
                                          "    0         1         2         4 999999999 999999999   RUNNING  MISMATCH")
                   .replace("      2          4            1          8        8",
                            "      2          4            1  999999999 999999999") + """#0-0 (00000000deadbeef) MISMATCH
  Communicator ranks have different AllReduce operation counts
  999999998 ranks have launched up to operation 10
  Rank 2 has launched up to operation 9 -- GPU 2 managed by process 5102 on node n1
""")
    assert "ranks" not in _mismatch(facts)[0]


def test_a_broken_catalogue_is_an_error_and_the_blocks_are_still_read(monkeypatch):
    from forensics import messages

    def broken():
        raise messages.CatalogueError([("nccl_ras.yaml", 3, "bad entry")])
    monkeypatch.setattr(messages, "catalogue", broken)
    facts = ncclras.parse(str(REPORT), "ncclras_report.txt")
    assert [d.message for d in facts.diagnostics if d.severity == "error"] == [
        "the message catalogue could not be loaded: nccl_ras.yaml:3: bad entry"]
    assert _mismatch(facts)[0]["ranks"] == tuple(r for r in range(32) if r not in (12, 13))
