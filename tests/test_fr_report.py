"""The reader of PyTorch's Flight Recorder analyzer output: real runs of torch
2.13's analyzer, the corpus's and shared samples' real outputs, the tutorial's,
older wordings from the analyzer's source, garbage."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS, ROOT, SAMPLES
from helpers import mutate_lines, parse_bytes
from forensics import analyze_incident, messages
from forensics import model as m
from forensics.ingest import fr_report, merge
from forensics.ingest.textio import read_head
from forensics.model import Artifact
from forensics.plugins import Plugins

FIXTURES = Path(__file__).parent / "fixtures" / "fr_report"
RUNS = FIXTURES / "torch-2.13"
TUTORIAL = FIXTURES / "upstream" / "tutorial_flight_recorder.txt"
CORPUS_OUTPUTS = sorted(CORPUS.glob("*/fr_analyzer*.txt"))
SAMPLE_OUTPUTS = sorted(SAMPLES.glob("*/fr_*analyzer*.txt")) if SAMPLES.is_dir() else []
FIXTURE_OUTPUTS = sorted(RUNS.glob("*.txt")) + [TUTORIAL]
ALL = FIXTURE_OUTPUTS + CORPUS_OUTPUTS + SAMPLE_OUTPUTS
CATALOGUE = ROOT / "rules" / "messages" / "pytorch_fr_analyzer.yaml"


def read(path, display=None):
    path = str(path)
    assert fr_report.sniff(path, read_head(path)) == fr_report.KIND, f"{path} not claimed"
    return fr_report.parse(path, display or Path(path).name)


def write(tmp_path, text, name="fr.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def hits(facts, entry_id):
    return [(dict(h.facts), h.evidence.line) for h in facts.messages if h.id == entry_id]


def test_the_catalogue_file_checks_clean():
    assert messages.check([str(CATALOGUE)]) == []
    ids = [e.id for e in messages.load([str(CATALOGUE)])[0]]
    assert ids and all(i.startswith("fr-analyzer-") for i in ids)


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_real_output_is_claimed_and_every_line_read(path):
    facts = read(path)
    assert facts.unrecognized == 0, facts.diagnostics
    assert facts.lines_read == len(path.read_text().split("\n"))
    assert not facts.stuck  # nothing the analyzer prints carries a time


# ------------------------------------------------------------------ torch 2.13, real runs

def test_missing_rank_block():
    facts = read(RUNS / "stall_default.txt")
    assert hits(facts, "fr-analyzer-not-all-ranks-joined") == [({
        "seq": 13, "group": "0", "group_desc": "default_pg", "op": "all_reduce", "transport": "gloo",
        "ranks": (1,), "state": "scheduled", "sizes": "[[128, 64]]", "world_size": 2}, 2)]
    assert facts.messages[0].evidence == m.Evidence("stall_default.txt", 2,
                                                    "Not all ranks joining collective, sequence number: 13")
    assert facts.groups == [m.ProcessGroup("0", "default_pg", (0, 1))]
    assert facts.diagnostics == []


def test_mismatch_block_and_one_hit_per_culprit():
    facts = read(RUNS / "mismatch_default.txt")
    assert hits(facts, "fr-analyzer-collective-errors") == [({
        "seq": 13, "group": "1", "op": "all_reduce", "transport": "gloo", "ranks": (1, 2, 3),
        "state": "scheduled", "sizes": "[[128, 64]]", "world_size": 4}, 2)]
    culprits = hits(facts, "fr-analyzer-type-mismatch")
    assert [(f["rank"], f["op"], f["error"], f["seq"], f["group"], line) for f, line in culprits] == [
        (1, "broadcast", "COLLECTIVE_TYPE_MISMATCH", 13, "1", 11),
        (2, "broadcast", "COLLECTIVE_TYPE_MISMATCH", 13, "1", 11),
        (3, "broadcast", "COLLECTIVE_TYPE_MISMATCH", 13, "1", 11)]
    assert facts.groups == [m.ProcessGroup("1", "", (0, 1, 2, 3))]


def test_missing_dump_files_and_the_analyzer_failing():
    facts = read(RUNS / "mismatch_missing_dump.txt")
    assert hits(facts, "fr-analyzer-missing-dump-files") == [({"ranks": (3,)}, 14)]
    (diag,) = facts.diagnostics
    assert (diag.line, diag.severity) == (14, "warning")
    assert diag.message == ("PyTorch's Flight Recorder analyzer failed: AssertionError: Missing dump files from "
                            "ranks {3} (at utils.py:706 in check_no_missing_dump_files)")


def test_undecidable_entries_and_the_mismatch_cap():
    facts = read(RUNS / "mismatch_incomplete.txt")
    assert hits(facts, "fr-analyzer-undecidable") == [({"ranks": (3,)}, line) for line in range(2, 13)]
    # the cap names the group by its guid; this file shows no members to name it back
    assert hits(facts, "fr-analyzer-too-many-mismatches") == [
        ({"group": "17327027465595056883", "group_desc": "undefined"}, 13)]


def test_verbose_tables_give_the_groups(tmp_path):
    text = (RUNS / "stall_v.txt").read_text()
    facts = read(RUNS / "stall_v.txt")
    assert len(facts.messages) == 1 and facts.groups == [m.ProcessGroup("0", "default_pg", (0, 1))]
    # without the block, the Groups/Memberships tables alone name group 0 and its members:
    # guid 09000494312501845833 is "0" + hash(frozenset({0, 1}))
    start, end = text.index("Not all ranks"), text.index("appending a non-matching")
    tables_only = read(write(tmp_path, text[:start] + text[end:]))
    assert tables_only.messages == [] and tables_only.unrecognized == 0
    assert tables_only.groups == [m.ProcessGroup("0", "default_pg", (0, 1))]
    capped = read(write(tmp_path, text + "Too many mismatches for process_group 09000494312501845833: "
                        "default_pg aborting\n", "capped.txt"))
    assert hits(capped, "fr-analyzer-too-many-mismatches")[0][0]["group"] == "0"


def test_entries_tables_are_read_and_judge_nothing():
    for name in ("stall_j.txt", "mismatch_j.txt"):
        facts = read(RUNS / name)
        assert facts.messages == [] and facts.unrecognized == 0
        assert [d.message for d in facts.diagnostics] == [
            "the analyzer only printed each rank's entries (-j): it judged nothing"]


# ------------------------------------------------------------------ the corpus and the shared samples

CRASHES = [p for p in CORPUS_OUTPUTS + SAMPLE_OUTPUTS if "\nKeyError: ('" in p.read_text()]


def test_the_corpus_holds_the_analyzer_failing_on_gloo_dumps():
    assert len([p for p in CRASHES if p.is_relative_to(CORPUS)]) >= 6


@pytest.mark.parametrize("path", CRASHES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_analyzer_failing_on_gloo_dumps_is_one_warning_at_its_exception(path):
    facts = read(path)
    assert facts.messages == [] and facts.groups == []
    lines = path.read_text().split("\n")
    exception = next(i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("KeyError: ('")) + 1
    (diag,) = facts.diagnostics
    assert diag.severity == "warning" and diag.line == exception
    assert diag.message.startswith(f"PyTorch's Flight Recorder analyzer failed: {lines[exception - 1]}")
    assert "(at builder.py:212 in build_collectives)" in diag.message and "pg_config" in diag.message


@pytest.mark.skipif(not SAMPLE_OUTPUTS, reason="shared samples not present")
def test_blocks_without_members_name_no_missing_rank():
    for path in SAMPLE_OUTPUTS:
        facts = read(path)
        if "KeyError" in path.read_text():
            continue
        assert hits(facts, "fr-analyzer-not-all-ranks-joined") == []
        assert facts.groups == []
        memberless = [d for d in facts.diagnostics if "name no member" in d.message]
        assert len(memberless) == 1 and memberless[0].message.startswith("11 block(s)")
        assert [f for f, _ in hits(facts, "fr-analyzer-too-many-mismatches")] == [
            {"group": "133146708735736", "group_desc": ""}]


# ------------------------------------------------------------------ older analyzers

def test_tutorial_output_of_the_2_5_analyzer():
    facts = read(TUTORIAL)
    assert hits(facts, "fr-analyzer-not-all-ranks-joined") == [({
        "seq": 5, "group": "0", "group_desc": "default_pg", "op": "all_reduce", "transport": "nccl",
        "ranks": (1,), "state": "scheduled", "sizes": "[[3, 4]]", "world_size": 2}, 2)]
    assert facts.groups == []  # "expected ranks: 2" is a count, not the members


# Built from the analyzer's format strings (tools/flight_recorder/fr_trace.py and
# components/builder.py of 2.4-2.6): print() of several arguments joins them by spaces.
OLD_PRINTS = [
    ("Not all ranks joining collective for group 0:default_pg collective nccl:all_reduce "
     "Missing ranks are {1, 3}\n",
     "fr-analyzer-not-all-ranks-joined", {"group": "0", "group_desc": "default_pg", "op": "all_reduce",
                                          "transport": "nccl", "ranks": (1, 3)}),
    ("Not all ranks joining collective for group 0:default_pg collective nccl:all_reduce  "
     "Missing ranks are {2}  [[3, 4]] [[3, 4]] 4 scheduled  \nCollective stack traces: \n"
     "all_reduce at /t/torch/distributed/distributed_c10d.py:2696\n<module> at /job/crash.py:44\n",
     "fr-analyzer-not-all-ranks-joined", {"group": "0", "group_desc": "default_pg", "op": "all_reduce",
                                          "transport": "nccl", "ranks": (2,)}),
    ("Collective 7 errors for group 0:default_pg collective nccl:all_reduce  [[3, 4]] [[3, 4]] 2 scheduled  \n"
     "Found errors: Error rank 1, MatchState.SIZE_OR_SYNTAX_MISMATCH\n \n"
     "Collective stack traces: \nall_reduce at /t/torch/distributed/distributed_c10d.py:2696 \n",
     "fr-analyzer-collective-errors", {"group": "0", "group_desc": "default_pg", "op": "all_reduce",
                                       "transport": "nccl", "ranks": (1,)}),
    ("Collective 5 at entry 4 errors\ngroup info: 0:default_pg\ncollective: nccl:all_gather\n"
     "input sizes: [[3, 4]]\noutput sizes: [[6, 4]]\nexpected ranks: 2\ncollective state: completed\n"
     "error message: Culprit rank 1; Error type: COLLECTIVE_STATE_MISMATCH, Expected state: 'completed' "
     "does not match found state: 'scheduled'\ncollective stack trace: \n"
     "all_gather at /t/torch/distributed/distributed_c10d.py:3000\n",
     "fr-analyzer-collective-errors", {"seq": 5, "group": "0", "group_desc": "default_pg", "op": "all_gather",
                                       "transport": "nccl", "ranks": (1,), "state": "completed",
                                       "sizes": "[[3, 4]]", "world_size": 2}),
    ("Input/output mismatch in the collective sequence number: 9\ninternal record id: 30\n"
     "group info: 2:tp\ncollective: nccl:all_to_all\ntotal input numel: 96\ntotal output numel: 64\n"
     "input sizes: [[4, 6]]\noutput sizes: [[4, 4]]\nworld size: 4\nexpected ranks: {0, 1, 2, 3}\n"
     "collective state: scheduled\ncollective stack trace: \n",
     "fr-analyzer-alltoall-numel-mismatch", {"seq": 9, "group": "2", "group_desc": "tp", "op": "all_to_all",
                                             "transport": "nccl", "state": "scheduled", "sizes": "[[4, 6]]",
                                             "world_size": 4}),
]


@pytest.mark.parametrize("text, entry_id, expected", OLD_PRINTS, ids=lambda v: str(v)[:30])
def test_older_wordings(tmp_path, text, entry_id, expected):
    facts = read(write(tmp_path, text))
    assert facts.unrecognized == 0, facts.diagnostics
    assert hits(facts, entry_id) == [(expected, 1)]


def test_culprit_lines_of_each_error_type(tmp_path):
    text = ("Collective sequence number: 4 has errors\ninternal record id: 3\ngroup info: 0:default_pg\n"
            "collective: nccl:all_reduce\ninput sizes: [[1024]]\noutput sizes: [[1024]]\nworld size: 4\n"
            "expected ranks: {0, 1, 2, 3}\ncollective state: completed\n"
            "error msg: Culprit rank 1; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[1024]]' does "
            "not match found input sizes: '[[2048]]', Culprit rank 2; Error type: COLLECTIVE_DTYPE_MISMATCH, "
            "Expected dtypes: '{'Float'}' does not match found dtype: '{'Float'}/{'BFloat16'}/{'BFloat16'}', "
            "Culprit rank 3; Error type: COLLECTIVE_STATE_MISMATCH, Expected state: 'completed' does not match "
            "found state: 'scheduled'\ncollective stack trace: \n")
    facts = read(write(tmp_path, text))
    found = {h.id: dict(h.facts) for h in facts.messages}
    assert found["fr-analyzer-collective-errors"]["ranks"] == (1, 2, 3)
    assert found["fr-analyzer-size-mismatch"] == {"rank": 1, "error": "SIZE_OR_SYNTAX_MISMATCH",
                                                  "sizes": "[[2048]]", "seq": 4, "group": "0",
                                                  "group_desc": "default_pg", "op": "all_reduce",
                                                  "transport": "nccl"}
    assert found["fr-analyzer-dtype-mismatch"]["rank"] == 2
    assert (found["fr-analyzer-state-mismatch"]["rank"], found["fr-analyzer-state-mismatch"]["state"]) == (
        3, "scheduled")
    assert facts.groups == [m.ProcessGroup("0", "default_pg", (0, 1, 2, 3))]


def test_coalesced_mismatch_table(tmp_path):
    # utils.py visualize_ops: logger.info("%s \n", "MISMATCH"), then tabulate(table) without
    # headers (printed here by tabulate 0.10 itself), then the next verdict
    rule = "-------------------------------------------------  -------------------------------------------------"
    text = ("MISMATCH \n\n" + rule + "\n"
            "send(s=0 d=1, input_sizes=[[4]], state=scheduled)  recv(s=0 d=1, input_sizes=[[4]], state=scheduled)\n"
            "send(s=0 d=1, input_sizes=[[8]], state=scheduled)\n" + rule + "\n"
            "Rank 2 does not have a coalesced end.\n")
    facts = read(write(tmp_path, text))
    assert facts.unrecognized == 0
    assert [(h.id, dict(h.facts), h.evidence.line) for h in facts.messages] == [
        ("fr-analyzer-coalesced-mismatch", {}, 1), ("fr-analyzer-no-coalesced-end", {"rank": 2}, 7)]


def test_analyzer_of_another_backend_and_chatter(tmp_path):
    text = ("tabulate is not installed. Proceeding without it.\nloaded 2 files in 0.01s\n"
            "built groups, memberships\nTraceback (most recent call last):\n"
            '  File "/t/tools/flight_recorder/components/types.py", line 120, in __init__\n'
            "    assert nccl == \"nccl\", f\"name formatting error? {nccl} != 'nccl'\"\n"
            "AssertionError: name formatting error? gloo != 'nccl'\n")
    facts = read(write(tmp_path, text))
    assert hits(facts, "fr-analyzer-unsupported-backend") == [({"transport": "gloo"}, 7)]
    assert facts.unrecognized == 0 and "(at types.py:120 in __init__)" in facts.diagnostics[0].message


def test_a_traceback_cut_short_is_diagnosed(tmp_path):
    text = (CORPUS / "real_p2p_cycle_2" / "fr_analyzer.txt").read_text()
    facts = read(write(tmp_path, text[:text.index("KeyError")]))
    assert [d.message for d in facts.diagnostics] == ["a traceback with no exception line (the text is cut short)"]


def test_unknown_lines_are_diagnosed_not_dropped(tmp_path):
    lines = (RUNS / "stall_default.txt").read_text().split("\n")
    lines.insert(5, "something the analyzer never prints")
    facts = read(write(tmp_path, "\n".join(lines)))
    assert [(d.line, d.message) for d in facts.diagnostics] == [
        (6, "unrecognized line: 'something the analyzer never prints'")]
    assert hits(facts, "fr-analyzer-not-all-ranks-joined")[0][0]["ranks"] == (1,)


def test_sniffing_by_content(tmp_path):
    assert fr_report.sniff("x", b"collective: nccl:all_reduce\n") is None
    assert fr_report.sniff("x", b"\x00Not all ranks joining collective, sequence number: 1") is None
    coloured = b"\x1b[32mNot all ranks joining collective, sequence number: 1\x1b[0m\n"
    assert fr_report.sniff("x", coloured) == fr_report.KIND
    python_tb = b'Traceback (most recent call last):\n  File "/job/train.py", line 3, in <module>\n'
    assert fr_report.sniff("x", python_tb) is None


def test_hooks_claim_and_parse():
    plugins = Plugins(autoload=False, builtins=("forensics.ingest.fr_report",))
    path = RUNS / "stall_default.txt"
    assert plugins.hook.forensics_sniff(path=str(path), head=read_head(str(path))) == [fr_report.KIND]
    facts = plugins.hook.forensics_parse(artifact=Artifact(fr_report.KIND, str(path), "stall_default.txt"))
    assert facts.messages[0].id == "fr-analyzer-not-all-ranks-joined"


def test_the_stated_missing_rank_reaches_a_verdict():
    facts = read(RUNS / "stall_default.txt")
    report = analyze_incident(merge([facts]), Plugins(autoload=False))
    assert report.verdict == "missing_rank" and list(report.culprit_ranks) == [1]
    assert any(e == facts.messages[0].evidence for f in report.findings for e in f.evidence)


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_analyze_of_one_file_never_exits_2(run_cli, tmp_path, path):
    (tmp_path / path.name).write_bytes(path.read_bytes())
    result = run_cli("analyze", tmp_path)
    assert result.returncode in (0, 1), result.stderr


# ------------------------------------------------------------------ garbage in, no crash out

_SOURCES = {p: p.read_bytes().split(b"\n") for p in ALL}
_MUTATION = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate"), st.integers(0, 10_000)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.integers(0, 200)),
    st.tuples(st.just("bytes"), st.integers(0, 10_000), st.binary(min_size=1, max_size=200)),
    st.tuples(st.just("glue"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("prefix"), st.integers(0, 10_000), st.sampled_from([b" ", b"  ", b"\t", b"----  ", b"> "])),
    st.tuples(st.sampled_from(["huge", "latin1", "utf16", "rule", "header", "tb"]), st.integers(0, 10_000)),
)
_INSERTS = {"huge": b"missing ranks: {" + b"1, " * 3_000_000 + b"}",
            "latin1": "group info: 0:gr\xfcppe".encode("latin-1"),
            "utf16": "Not all ranks joining collective, sequence number: 3".encode("utf-16"),
            "rule": b"-----  ----  ---",
            "header": b"Collective sequence number: 99999999999999999999 has errors",
            "tb": b"Traceback (most recent call last):"}


def _parse_checked(data: bytes) -> None:
    facts = parse_bytes(fr_report, data, "fr.txt")
    if facts is None:
        return
    total = data.count(b"\n") + 1
    for hit in facts.messages:
        assert hit.id.startswith("fr-analyzer-") and 1 <= hit.evidence.line <= total
        assert all(isinstance(k, str) and type(v) in (int, str, tuple) for k, v in hit.facts)
    for group in facts.groups:
        assert group.ranks and all(type(r) is int for r in group.ranks)
    assert all(0 <= d.line <= total for d in facts.diagnostics)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 10_000), mutations=st.lists(_MUTATION, min_size=1, max_size=8),
       cut=st.none() | st.integers(0, 20_000))
def test_fuzzed_real_outputs_never_crash(which, mutations, cut):
    path = ALL[which % len(ALL)]
    data = b"\n".join(mutate_lines(_SOURCES[path], mutations, _INSERTS))
    _parse_checked(data if cut is None else data[:cut])


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=5000))
def test_random_bytes_never_crash(data):
    _parse_checked(data)
