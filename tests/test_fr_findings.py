"""What Flight Recorder dumps alone lead to: a rank that left the loop early
(not a deadlock), every mismatch class PyTorch's analyzer knows, and the
stuck entry's stack frames as evidence. Real dumps from the corpus (torch
2.13, Gloo) and dumps written by benchmarks/gen_fr_dumps.py (NCCL shape).
"""

import json
import sys

import pytest

import forensics
from forensics.model import Finding
from forensics.plugins import Plugins
from forensics.report import render
from forensics.ruledocs import catalogue

from conftest import CORPUS, ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import gen_fr_dumps  # noqa: E402

EARLY_EXIT = CORPUS / "real_missing_rank_early_exit"
SAVE_CHECKPOINT = "#2 save_checkpoint from /srv/job/train.py:287"


def analyze(folder, hung=True):
    return forensics.analyze(folder, hung=hung, jobs=1, plugins=Plugins(autoload=False))


def by_rule(report):
    found = {}
    for finding in report.findings:
        found.setdefault(finding.rule, []).append(finding)
    return found


def generated(tmp_path, scenario, world=8, entries=40, culprit=1, **kwargs):
    folder = tmp_path / scenario
    gen_fr_dumps.write(str(folder), scenario, world, entries, culprit, **kwargs)
    return folder


def write_roles(folder, scenario, world, entries, assignment, groups=("0",)):
    """Dumps of `scenario`'s roles given to ranks as `assignment` says
    ({role: [ranks]}), for splits gen_fr_dumps.write does not make."""
    folder.mkdir(parents=True, exist_ok=True)
    roles = gen_fr_dumps.roles(scenario, world, entries, 0)
    for role, ranks in assignment.items():
        items, status, _ = roles[role]
        data = gen_fr_dumps.dump(items, status, world, groups, False)
        for rank in ranks:
            (folder / f"nccl_trace_rank_{rank}").write_bytes(data)
    return folder


def write_odd_one(folder, world, items, status, odd_rank, odd):
    """Dumps of one group "0" in which every rank holds `items` but
    `odd_rank`, which holds `odd`."""
    folder.mkdir()
    for rank in range(world):
        data = gen_fr_dumps.dump(odd if rank == odd_rank else items, status, world, ("0",), False)
        (folder / f"nccl_trace_rank_{rank}").write_bytes(data)
    return folder


# ---------------------------------------------------------------- a rank that left the loop early

@pytest.mark.parametrize("form", ["fr", "fr_json"])
def test_real_early_exit_from_flight_recorder_alone_is_a_missing_rank(form):
    """Ranks 0-2 in all_reduce #4 on the default group; rank 3 completed #3,
    left the loop and waits in barrier #1 on the ckpt group, whose members no
    dump lists: rank 3 is the cause, as the stack dumps say, and no cycle
    through the ckpt group is claimed (its members are not stated)."""
    report = analyze(EARLY_EXIT / form)
    with_stacks = analyze(EARLY_EXIT)
    assert (report.verdict, report.culprit_ranks) == (with_stacks.verdict, with_stacks.culprit_ranks) \
        == ("missing_rank", [3])
    assert report.cycles == []
    lead = report.root_cause.finding
    assert lead.rule == "missing-rank" and lead.ranks == (3,)
    assert "left the loop early" in lead.message and "never entered" in lead.message
    assert "提前离开了循环" in lead.message_zh
    assert "wait-for-cycle" not in by_rule(report)
    assert [s.kind for s in report.decided_by] == ["cli_hung"]
    # without --hung, rank 3 is blocked in a call whose waits cannot be drawn: not healthy, not decided
    assert analyze(EARLY_EXIT / form, hung=False).verdict == "inconclusive"


def test_real_early_exit_dumps_name_no_members():
    """torch 2.13 with Gloo writes pg_config {"": {"ranks": "[]"}} and
    nothing for the ckpt group: no dump claims members, so both groups are
    every rank with a dump (new_group(ranks=range(4)) in train.py)."""
    from forensics.ingest import flightrecorder as fr
    from forensics.ingest import safepickle
    for path in sorted((EARLY_EXIT / "fr").iterdir()):
        top = safepickle.loads(path.read_bytes(), path.name)
        assert top["pg_config"] == {"": {"name": "", "desc": "", "ranks": "[]"}}
        assert fr.parse(str(path), path.name).groups == []
    report = analyze(EARLY_EXIT / "fr")
    assert report.incident.groups == {}
    assert report.incident.members("1") == report.incident.members("0") == (0, 1, 2, 3)


def test_generated_early_exit_and_cycle(tmp_path):
    early = analyze(generated(tmp_path, "early_exit", world=16, culprit=5))
    assert (early.verdict, early.culprit_ranks) == ("missing_rank", [5])
    assert "cross-group wait" in early.root_cause.finding.message
    # the same shape where the others used group 1 all along: an inverted order, a deadlock
    cycle = analyze(generated(tmp_path, "cycle", world=16, culprit=5))
    assert cycle.verdict == "deadlock" and cycle.culprit_ranks == list(range(16))


@pytest.mark.parametrize("world, moved_on", [(2, [1]), (4, [1, 3])])
def test_no_majority_stays_a_deadlock(tmp_path, world, moved_on):
    """1 against 1, 2 against 2: nobody can be called the one that left."""
    folder = write_roles(tmp_path / "split", "early_exit", world, 40,
                         {"waiting": [r for r in range(world) if r not in moved_on], "culprit": moved_on},
                         groups=("0", "2"))
    report = analyze(folder)
    assert report.verdict == "deadlock" and report.culprit_ranks == list(range(world))
    assert "missing-rank" not in by_rule(report)


def test_a_rank_behind_rather_than_ahead_stays_a_deadlock(tmp_path):
    """The odd rank did not complete the others' previous position: it did
    not move on, the order of calls differs."""
    roles = gen_fr_dumps.roles("early_exit", 8, 40, 0)
    left, status, _ = roles["culprit"]
    behind = left[:-2] + [gen_fr_dumps.entry(38, "2", 1, "barrier", False)]  # last on group 0: #38 of 40
    status = dict(status, **{"0": dict(status["0"], last_enqueued_collective=38, last_completed_collective=38)})
    folder = write_roles(tmp_path / "behind", "early_exit", 8, 40, {"waiting": [0, 2, 3, 4, 5, 6, 7]},
                         groups=("0", "2"))
    (folder / "nccl_trace_rank_1").write_bytes(gen_fr_dumps.dump(behind, status, 8, ("0", "2"), False))
    report = analyze(folder)
    assert report.verdict == "deadlock"


def test_snapshot_cross_group_cycle_stays_a_deadlock():
    report = analyze(CORPUS / "snapshot_cross_group_cycle", hung=False)
    assert (report.verdict, report.culprit_ranks, report.cycles) == ("deadlock", [0, 1], [[0, 1, 0]])


# ---------------------------------------------------------------- every mismatch class

def test_rules_are_documented():
    docs = catalogue(Plugins(autoload=False))
    for rule in ("collective-mismatch", "collective-state-mismatch", "collective-missing-ranks", "missing-rank"):
        doc = docs[rule]
        assert doc.title and doc.title_zh and doc.explanation and doc.explanation_zh and doc.hint_zh


def test_state_mismatch_and_missing_ranks_generated(tmp_path):
    """NCCL with timing: the others completed #39 and wait in #40; rank 1 is
    still inside #39 and never issued #40."""
    report = analyze(generated(tmp_path, "state"))
    assert (report.verdict, report.culprit_ranks) == ("missing_rank", [1])
    found = by_rule(report)
    (state,) = found["collective-state-mismatch"]
    assert state.kind == "collective_state_mismatch" and state.ranks == (1,) and state.severity == "warning"
    assert "#39: ranks 0,2-7 completed, rank 1 started" in state.message
    assert "第 39 次：Rank 0,2-7 已完成，Rank 1 已开始" in state.message_zh
    cited = [(e.path, e.text) for e in state.evidence]
    assert ("nccl_trace_rank_0", "entry record_id=38 pg=0 seq=39 nccl:all_reduce completed, retired") in cited
    assert ("nccl_trace_rank_1", "entry record_id=38 pg=0 seq=39 nccl:all_reduce started") in cited
    (missing,) = found["collective-missing-ranks"]
    assert missing.kind == "collective_missing_ranks" and missing.ranks == (1,)
    assert "rank 1 has no entry at #40, which ranks 0,2-7 reached (its last call there is #39)" in missing.message
    assert "Rank 1 在 #40 没有条目" in missing.message_zh
    assert "collective-mismatch" not in found


def test_every_position_is_named(tmp_path):
    """Rank 1 stopped three calls early and its last two are still in flight
    (started) while the others completed them: every position is listed."""
    items = [gen_fr_dumps.entry(i, "0", i + 1, "all_reduce", i + 1 < 36) for i in range(37)]
    status = {"0": {"last_enqueued_collective": 37, "last_started_collective": 37,
                    "last_completed_collective": 35}}
    # the others: #1-#39 completed, #40 started
    folder = write_roles(tmp_path / "positions", "missing", 8, 40, {"waiting": [0, 2, 3, 4, 5, 6, 7]})
    (folder / "nccl_trace_rank_1").write_bytes(gen_fr_dumps.dump(items, status, 8, ("0",), False))
    report = analyze(folder)
    found = by_rule(report)
    (missing,) = found["collective-missing-ranks"]
    assert "rank 1 has no entry at #38-#40" in missing.message
    (state,) = found["collective-state-mismatch"]
    assert "at 2 position(s)" in state.message and "#36: ranks 0,2-7 completed, rank 1 started" in state.message \
        and "#37: ranks 0,2-7 completed, rank 1 started" in state.message
    assert report.verdict == "missing_rank" and report.culprit_ranks == [1]


def test_coalesced_groups_of_different_lengths(tmp_path):
    report = analyze(generated(tmp_path, "coalesced", culprit=3))
    assert (report.verdict, report.culprit_ranks) == ("collective_mismatch", [3])
    (state,) = by_rule(report)["collective-state-mismatch"]
    assert "#40: coalesced groups of different lengths (rank 3 2 tensors, ranks 0-2,4-7 3 tensors)" in state.message
    assert state.ranks == (3,)
    assert "collective-missing-ranks" not in by_rule(report)


def test_type_size_and_dtype_every_class_every_position(tmp_path):
    """Type at one position; size and dtype together at another: each class
    is its own finding, each position its own. (Positions compared are the
    last RECENT entries of each group, plus stuck and timed-out ones.)"""
    items = [gen_fr_dumps.entry(i, "0", i + 1, "all_reduce", i + 1 < 40) for i in range(40)]
    odd = [dict(item) for item in items]
    odd[34]["input_sizes"] = [[8, 8]]
    odd[34]["input_dtypes"] = ["BFloat16"]
    odd[39]["profiling_name"] = "nccl:broadcast"
    status = {"0": {"last_enqueued_collective": 40, "last_started_collective": 40, "last_completed_collective": 39}}
    report = analyze(write_odd_one(tmp_path / "classes", 4, items, status, 2, odd))
    # type, dtype and size across ranks, and rank 2's own all_reduce reading [8, 8] into [4096, 1024]
    assert len(by_rule(report)["collective-mismatch"]) == 4
    messages = " | ".join(f.message for f in by_rule(report)["collective-mismatch"])
    assert ("rank 2 all_reduce at position 35: its input [[8, 8]] and output [[4096, 1024]] differ "
            "(an all_reduce writes what it reads)") in messages
    assert "position 35: ranks 0,1,3 call Float; rank 2 calls BFloat16" in messages
    assert "position 35: ranks 0,1,3 call sizes [[4096, 1024]]; rank 2 calls sizes [[8, 8]]" in messages
    assert "position 40: ranks 0,1,3 call all_reduce; rank 2 calls broadcast" in messages
    assert report.verdict == "collective_mismatch" and report.culprit_ranks == [2]


def test_real_dumps_every_class():
    found = by_rule(analyze(CORPUS / "real_missing_rank_dataloader" / "fr"))
    (missing,) = found["collective-missing-ranks"]
    assert missing.ranks == (2,) and "rank 2 has no entry at #4, which ranks 0,1,3 reached" in missing.message
    assert {e.path for e in missing.evidence} >= {"nccl_trace_rank_0", "nccl_trace_rank_2"}
    found = by_rule(analyze(CORPUS / "real_collective_mismatch" / "fr_json"))
    (mismatch,) = found["collective-mismatch"]
    assert mismatch.ranks == (0,) and "rank 0 calls all_reduce" in mismatch.message
    assert [e.line for e in mismatch.evidence[:2]] == [1, 1]  # JSON: the entry's line
    found = by_rule(analyze(EARLY_EXIT / "fr"))
    (missing,) = found["collective-missing-ranks"]
    assert missing.ranks == (3,) and "rank 3 has no entry at #4" in missing.message
    assert "collective-state-mismatch" not in found  # Gloo: entries never leave "scheduled"


def test_missing_ranks_are_wait_for_edges(tmp_path):
    """A member that has not arrived at a position is waited on: the
    graph's edges carry what the missing-ranks finding says."""
    report = analyze(generated(tmp_path, "missing", world=8, culprit=6))
    data = json.loads(render(report, "json"))
    assert all(data["ranks"][str(r)]["waiting_for"] == [6] for r in range(8) if r != 6)
    (missing,) = by_rule(report)["collective-missing-ranks"]
    assert missing.ranks == (6,)


# ---------------------------------------------------------------- stack frames as evidence

def test_real_stuck_frames_in_text_and_json_reports():
    report = analyze(EARLY_EXIT / "fr")
    lead = report.root_cause.finding
    frames = [e for e in lead.evidence if e.text.startswith("#")]
    assert [(e.path, e.text) for e in frames] == [
        ("nccl_trace_rank_3", SAVE_CHECKPOINT), ("nccl_trace_rank_3", "#3 finalize_run from /srv/job/train.py:292"),
        ("nccl_trace_rank_3", "#4 train from /srv/job/train.py:344")]
    assert not [e for f in report.findings for e in f.evidence if "distributed_c10d.py" in e.text]
    text = render(report, "text")
    assert f"nccl_trace_rank_3: {SAVE_CHECKPOINT}" in text
    data = json.loads(render(report, "json"))
    cited = {(f["rule"], e["path"], e["text"]) for f in data["findings"] for e in f["evidence"]}
    assert ("missing-rank", "nccl_trace_rank_3", SAVE_CHECKPOINT) in cited
    # the waiting ranks are cited by the entry they wait in
    assert ("missing-rank", "nccl_trace_rank_0", "entry record_id=3 pg=0 seq=4 gloo:all_reduce scheduled") in cited
    # JSON dumps carry no frames, so none are cited
    data = json.loads(render(analyze(EARLY_EXIT / "fr_json"), "json"))
    assert not [e for f in data["findings"] for e in f["evidence"] if e["text"].startswith("#")]


def test_real_collective_mismatch_frames_of_the_odd_rank():
    report = analyze(CORPUS / "real_collective_mismatch" / "fr")
    lead = report.root_cause.finding
    assert lead.ranks == (0,)
    assert [e.text for e in lead.evidence if e.text.startswith("#")] == [
        "#2 sync_gradients from /srv/job/train.py:206", "#3 train_step from /srv/job/train.py:315",
        "#4 train from /srv/job/train.py:346"]


def test_generated_frames_only_for_named_ranks(tmp_path):
    report = analyze(generated(tmp_path, "mismatch", culprit=4))
    lead = report.root_cause.finding
    assert lead.ranks == (4,)
    frames = [(e.path, e.text) for e in lead.evidence if e.text.startswith("#")]
    assert frames == [("nccl_trace_rank_4", "#2 sync_gradients from /srv/job/train.py:267"),
                      ("nccl_trace_rank_4", "#3 train_step from /srv/job/train.py:366"),
                      ("nccl_trace_rank_4", "#4 <module> from /srv/job/train.py:426")]


def test_stack_evidence_is_bounded():
    """A finding naming thousands of ranks cites the frames of a few."""
    from forensics.analysis import STACK_FRAMES, STACK_RANKS, with_stacks
    from forensics.model import Evidence, Incident, RankState
    frames = tuple(Evidence(f"r{r}", 0, f"#{i} f{i} from /job/train.py:{i}") for r in range(1) for i in range(10))
    ranks = {r: RankState(r, log_events=tuple(Evidence(f"r{r}", 0, e.text) for e in frames)) for r in range(1000)}
    finding = with_stacks(Finding("x", "y", "error", tuple(range(1000)), "m"), Incident(ranks, {}))
    assert len(finding.evidence) == STACK_RANKS * STACK_FRAMES


def test_size_and_syntax_mismatches_as_the_official_analyzer_checks_them(tmp_path):
    """Output sizes that differ between ranks, and calls whose own shapes do
    not fit the group: an all_gather whose output is not input x group size,
    a reduce_scatter whose input is not output x group size."""
    items = [gen_fr_dumps.entry(i, "0", i + 1, "all_reduce", True) for i in range(12)]
    odd = [dict(item) for item in items]
    items[9] = dict(items[9], profiling_name="nccl:all_gather", input_sizes=[[256]], output_sizes=[[1024]])
    odd[9] = dict(items[9], output_sizes=[[512]])            # rank 3: 256 in, 512 out, 4 ranks
    items[10] = dict(items[10], profiling_name="nccl:reduce_scatter", input_sizes=[[1024]], output_sizes=[[256]])
    odd[10] = dict(items[10])
    items[11] = dict(items[11], output_sizes=[[4096, 1024]])
    odd[11] = dict(items[11], output_sizes=[[1024, 1024]])   # rank 3 writes a different shape
    status = {"0": {"last_enqueued_collective": 12, "last_started_collective": 12, "last_completed_collective": 12}}
    report = analyze(write_odd_one(tmp_path / "syntax", 4, items, status, 3, odd))
    messages = " | ".join(f.message for f in by_rule(report)["collective-mismatch"])
    assert "position 10: ranks 0-2 call output sizes [[1024]]; rank 3 calls output sizes [[512]]" in messages
    assert "rank 3 all_gather at position 10: its output holds 512 elements, not input 256 × group size 4" in messages
    assert "position 12: ranks 0-2 call output sizes [[4096, 1024]]; rank 3 calls output sizes [[1024, 1024]]" in messages
    assert "reduce_scatter" not in messages  # 1,024 in = 256 out x 4 ranks: fine
    assert all(f.severity == "warning" for f in by_rule(report)["collective-mismatch"])  # all completed
