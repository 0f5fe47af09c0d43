"""Rank identity across groups: a group's members come from what the
evidence states (a member list, or the group-local ranks its members print
under their global `[rankN]:`), never from the world by default."""

from __future__ import annotations

from forensics.ingest.records import members_from_numbering
from forensics.model import ProcessRecord
from helpers import cli_report


def _placed(pairs: dict[int, int], group: str = "9") -> dict:
    """{global rank: [a record stating its rank in `group`]}."""
    return {g: [ProcessRecord("torch", "log", rank=g, group_ranks=((group, local),))] for local, g in pairs.items()}


def test_locals_that_equal_globals_pin_the_members_below_and_between():
    groups: dict = {}
    members_from_numbering(_placed({1: 1, 2: 2, 5: 5, 7: 7}), groups, None)
    assert groups["9"].ranks == tuple(range(8))   # 0 below 1; 3, 4 between 2 and 5; 6 between 5 and 7
    assert groups["9"].partial                    # ranks above 7 may be members too


def test_a_group_pinned_up_to_the_worlds_last_rank_is_complete():
    groups: dict = {}
    members_from_numbering(_placed({1: 1, 7: 7}), groups, 8)
    assert groups["9"].ranks == tuple(range(8)) and not groups["9"].partial


def test_a_strided_group_keeps_only_the_members_it_states():
    """Pipeline stages 2 and 3 of a PP group on global ranks 4 and 6: locals
    0 and 1 are two of ranks 0-3, which two is not stated."""
    groups: dict = {}
    members_from_numbering(_placed({2: 4, 3: 6}, "17"), groups, 8)
    assert groups["17"].ranks == (4, 6) and groups["17"].partial


def test_numbers_that_contradict_the_global_order_infer_nothing():
    groups: dict = {}
    notes = members_from_numbering(_placed({1: 5, 2: 3}), groups, None)
    assert "9" not in groups
    assert any("do not follow" in note.message for note in notes)


def _timeouts(ranks: list[tuple[int, int]], guid: str = "9(TENSOR_MODEL_PARALLEL_GROUP)", op="ALLREDUCE") -> list[str]:
    """Torch 2.4 watchdog lines of each (global, group-local) rank timing out in collective #20006 of one group."""
    out = []
    for index, (rank, local) in enumerate(ranks):
        stamp = f"E528 14:18:43.1{index:02d}331907"
        out += [f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:688] [Rank {local}] Watchdog caught collective operation "
                f"timeout: WorkNCCL(SeqNum=20006, OpType={op}, NumelIn=25165824, NumelOut=25165824, "
                f"Timeout(ms)=600000) ran for 6000{index:02d} milliseconds before timing out.",
                f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:2303] [PG ID 1 PG GUID {guid} Rank {local}]  failure "
                f"detected by watchdog at work sequence id: 20006 PG status: last enqueued work: 20006, last "
                f"completed work: 20005"]
    return out


_DUMP_SIGNAL = ("[rank0]:[E528 14:18:44.551208113 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
                "Received a dump signal due to a collective timeout from  rank 1 and we will try our best to dump the "
                "debug info. Last enqueued NCCL work: 7, last completed NCCL work: 7.")


def _analyze(tmp_path, lines: list[str]) -> dict:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.log").write_text("step 4999 loss 2.31\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return cli_report(folder, tmp_path / "out.json")


def test_the_member_the_numbering_pins_is_the_missing_one(tmp_path):
    """Ranks 1-7 state they are ranks 1-7 of group 9 and time out there: its
    rank 0 is global rank 0, which never joined."""
    report = _analyze(tmp_path, _timeouts([(r, r) for r in range(1, 8)]))
    assert report["verdict"] == "missing_rank"
    assert report["culprit_ranks"] == [0]


def test_the_rank_seen_elsewhere_is_named_and_silent_members_are_unknown(tmp_path):
    """Members 1-3 and 6-7 time out; 4 and 5 (pinned between them) printed
    nothing; rank 0 is seen elsewhere (the dump signal on the default group)."""
    report = _analyze(tmp_path, _timeouts([(r, r) for r in (1, 2, 3, 6, 7)]) + [_DUMP_SIGNAL])
    assert report["verdict"] == "missing_rank"
    assert report["culprit_ranks"] == [0]
    lead = next(f for f in report["findings"] if f["rule"] == "missing-rank")
    assert "no artifact shows" in lead["message"] and "4,5" in lead["message"]


def test_a_group_whose_members_nothing_states_is_not_taken_for_the_world(tmp_path):
    """Pipeline ranks 4 and 6 time out receiving on group 17 as its ranks 2
    and 3: who the other members are is not stated, so no rank is invented
    as missing (ranks 0-3 and 5 only exist because rank 6 does)."""
    report = _analyze(tmp_path, _timeouts([(4, 2), (6, 3)], "17(PIPELINE_MODEL_PARALLEL_GROUP)", "RECV"))
    assert report["verdict"] == "inconclusive"
    assert report["culprit_ranks"] == []
    assert any("members of group 17" in item for item in report["confidence"].get("missing", []))
