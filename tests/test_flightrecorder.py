"""The Flight Recorder reader and the plain-data pickle loader under it.

Real dumps (torch 2.13, Gloo) from the corpus and the shared samples, every
older schema generated here (protocol 2 and 5), hand-written JSON fixtures,
hostile pickles, and a fuzz over mutated real files: only InputError escapes.
"""

import builtins
import gzip
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.ingest import flightrecorder as fr
from forensics.ingest import safepickle
from forensics.ingest.facts import Facts
from forensics.ingest.textio import InputError, read_head
from forensics.model import ProcessGroup

from conftest import CORPUS, SAMPLES

FIXTURES = Path(__file__).parent / "fixtures" / "fr"
REAL = ("real_collective_mismatch", "real_missing_rank_dataloader", "real_missing_rank_early_exit",
        "real_p2p_cycle_2", "real_p2p_ring_4")
C10D = "/opt/trainenv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"

needs_samples = pytest.mark.skipif(not (SAMPLES / "p2p_cycle_2").exists(), reason="shared samples not available")
needs_corpus = pytest.mark.skipif(not (CORPUS / "real_collective_mismatch" / "fr").exists(),
                                  reason="corpus FR dumps not available")


def parse(path, display=None) -> Facts:
    return fr.parse(str(path), display or Path(path).name)


def only(facts: Facts):
    assert len(facts.records) == 1, facts.records
    return facts.records[0]


def where(op):
    """(op, group, seq, state) of a CommOp, None for None."""
    return None if op is None else (op.op, op.group, op.seq, op.state)


def counters(record):
    return {g: (p.enqueued, p.started, p.completed) for g, p in record.progress.items()}


# ---------------------------------------------------------------- real dumps: the corpus (torch 2.13, Gloo)

STUCK_4 = ("all_reduce", "0", 4, "scheduled")
DONE_3 = ("all_reduce", "0", 3, "completed")
SYNC = ("sync_gradients", "train_step")
BROADCAST = ("broadcast_parameters", "train_step")
# incident -> rank -> (last_op, progress, entries, the two innermost frames of the job's own code
# in the stuck entry's stack: torch's frames are left out of the evidence)
REAL_FACTS = {
    "real_collective_mismatch": {
        0: (STUCK_4, {"0": (4, -1, 3)}, 4, SYNC),
        1: (("broadcast", "0", 4, "scheduled"), {"0": (4, -1, 3)}, 4, BROADCAST),
        2: (("broadcast", "0", 4, "scheduled"), {"0": (4, -1, 3)}, 4, BROADCAST),
        3: (("broadcast", "0", 4, "scheduled"), {"0": (4, -1, 3)}, 4, BROADCAST),
    },
    "real_missing_rank_dataloader": {
        0: (STUCK_4, {"0": (4, -1, 3)}, 4, SYNC),
        1: (STUCK_4, {"0": (4, -1, 3)}, 4, SYNC),
        2: (DONE_3, {"0": (3, -1, 3)}, 3, ()),
        3: (STUCK_4, {"0": (4, -1, 3)}, 4, SYNC),
    },
    "real_missing_rank_early_exit": {
        0: (STUCK_4, {"0": (4, -1, 3)}, 4, SYNC),
        1: (STUCK_4, {"0": (4, -1, 3)}, 4, SYNC),
        2: (STUCK_4, {"0": (4, -1, 3)}, 4, SYNC),
        3: (("barrier", "1", 1, "scheduled"), {"0": (3, -1, 3), "1": (1, -1, -1)}, 4,
            ("save_checkpoint", "finalize_run")),
    },
    "real_p2p_cycle_2": {r: (DONE_3, {"0": (3, -1, 3)}, 3, ()) for r in range(2)},
    "real_p2p_ring_4": {r: (DONE_3, {"0": (3, -1, 3)}, 3, ()) for r in range(4)},
}


def real_files(incident, form):
    folder = CORPUS / incident / ("fr" if form == "pickle" else "fr_json")
    return sorted(p for p in folder.iterdir() if p.is_file())


@needs_corpus
@pytest.mark.parametrize("form", ["pickle", "json"])
@pytest.mark.parametrize("incident", REAL)
def test_real_corpus_dumps(incident, form):
    expected = REAL_FACTS[incident]
    files = real_files(incident, form)
    assert len(files) == len(expected)
    for path in files:
        display = f"{incident}/{path.parent.name}/{path.name}"
        facts = parse(path, display)
        record = only(facts)
        last, progress, count, stack = expected[record.rank]
        assert record.source == "flight-recorder" and record.path == display
        assert where(record.last_op) == last, (display, record.last_op)
        assert counters(record) == progress
        assert record.timed_out is False and not facts.stuck
        label = "2.10 dump" if form == "pickle" else "2.10 JSON dump"
        assert record.evidence.text == f"{label}, {count} entries"
        assert facts.lines_read == count and facts.unrecognized == 0
        assert not [d for d in facts.diagnostics if d.severity != "info"], facts.diagnostics
        # pg_config is {"": {"ranks": "[]"}} in these dumps: no member list to report
        assert facts.groups == []
        # every entry is in recent_ops (fewer than 8 per group), oldest first
        assert len(record.recent_ops) == count
        default = [o.seq for o in record.recent_ops if o.group == "0"]
        assert default == list(range(1, len(default) + 1))
        assert all(o.sizes in ((), ((86544,),)) for o in record.recent_ops)
        op = record.last_op
        assert op.timeout_ms == 600000 and op.peers == ()
        if op.op in ("all_reduce", "broadcast"):
            assert op.sizes == ((86544,),) and op.dtype == "Float"
        if form == "pickle":
            assert op.evidence.line == 0
            names = tuple(e.text.split(" ")[1] for e in record.errors[:2])
            assert names == stack
            if stack:
                assert record.errors[0].text.startswith(f"#2 {stack[0]} from /srv/job/train.py:")
                assert len(record.errors) == fr.USER_FRAMES and C10D not in str(record.errors)
        else:
            assert op.evidence.line == 1  # minified JSON: every entry is on line 1
            assert record.errors == ()     # JSON dumps carry no frames
        state = "scheduled" if op.state == "scheduled" else "scheduled, retired"
        assert op.evidence.text == f"entry record_id={count - 1} pg={op.group} seq={op.seq} gloo:{op.op} {state}"


@needs_corpus
def test_real_gloo_entries_finish_through_pg_status_not_state():
    """Gloo leaves every entry `scheduled`: pg_status and `retired` say which finished."""
    record = only(parse(CORPUS / "real_missing_rank_early_exit" / "fr" / "nccl_trace_rank_3"))
    assert [(o.op, o.group, o.seq, o.state) for o in record.recent_ops] == [
        ("all_reduce", "0", 1, "completed"), ("all_reduce", "0", 2, "completed"),
        ("all_reduce", "0", 3, "completed"), ("barrier", "1", 1, "scheduled")]
    assert record.errors[0].text == "#2 save_checkpoint from /srv/job/train.py:287"


@needs_corpus
def test_real_dumps_through_the_plugin_door(tmp_path):
    """Discovery claims the dumps and the records become rank states."""
    from forensics.ingest import load_incident
    from forensics.plugins import BUILTIN_PLUGINS, Plugins

    plugins = Plugins(autoload=False)
    incident = load_incident([str(CORPUS / "real_collective_mismatch" / "fr")], plugins, jobs=1)
    assert {a.kind for a in incident.artifacts} == {"flight-recorder"}
    ops = {r: (s.current_op.op, s.current_op.group, s.current_op.seq) for r, s in incident.ranks.items()}
    assert ops == {0: ("all_reduce", "0", 4), 1: ("broadcast", "0", 4), 2: ("broadcast", "0", 4),
                   3: ("broadcast", "0", 4)}


# ---------------------------------------------------------------- real dumps: the shared samples

@needs_samples
def test_sample_p2p_cycle_pg_config_keyed_by_empty_name():
    """torch 2.13: pg_config {"": {"ranks": "[0, 1]"}} while entries say ("0", "default_pg");
    PyTorch's analyzer dies on it with KeyError: ('0', 0)."""
    folder = SAMPLES / "p2p_cycle_2"
    assert "KeyError: ('0', 0)" in (folder / "fr_analyzer.txt").read_text()
    for path in sorted((folder / "fr").iterdir()) + sorted((folder / "fr_json").iterdir()):
        facts = parse(path)
        record = only(facts)
        assert record.rank == int(path.name.split("_")[-1].split(".")[0].replace("rank", ""))
        assert facts.groups == [ProcessGroup("0", "default_pg", (0, 1))]
        assert where(record.last_op) == ("all_reduce", "0", 3, "completed")
        assert counters(record) == {"0": (3, -1, 3)}
        assert [o.sizes for o in record.recent_ops] == [((1024,),)] * 3


@needs_samples
def test_sample_detail_mode_helper_group_counters():
    """With TORCH_DISTRIBUTED_DEBUG=DETAIL entries name no group (("", "")):
    groups are told apart by pg_id, and rank 0's pg_status for pg_id 1 (32
    collectives) is not the 16 its entries show: those counters are refused."""
    folder = SAMPLES / "collective_mismatch_detail"
    for form in ("fr_after_error", "fr_after_error_json"):
        for path in sorted((folder / form).iterdir()):
            facts = parse(path)
            record = only(facts)
            assert where(record.last_op) == ("all_gather", "1", 16, "completed")
            assert {o.group for o in record.recent_ops} == {"0", "1"}
            warnings = [d.message for d in facts.diagnostics if d.severity == "warning"]
            if record.rank == 0:
                assert counters(record) == {"0": (3, -1, 3)}
                assert len(warnings) == 1 and "newest collective of that group in the entries is #16" in warnings[0]
            else:
                assert counters(record) == {"0": (3, -1, 3), "1": (16, -1, 16)}
                assert warnings == []


@needs_samples
def test_sample_healthy_and_gzipped_dumps():
    folder = SAMPLES / "healthy_then_mismatch_at_exit"
    for path in sorted((folder / "fr").iterdir()):  # taken mid-run, while the job was healthy
        facts = parse(path)
        record = only(facts)
        if record.rank == 0:  # dumped in the middle of a DETAIL-mode fingerprint all_gather
            assert where(record.last_op) == ("all_gather", "1", 664, "scheduled")
            assert counters(record) == {"0": (165, -1, 165)}  # pg_id 1's counters are another group's
            assert "last enqueued 1328" in facts.diagnostics[0].message
        else:
            assert where(record.last_op) == ("all_reduce", "0", 165, "completed") and record.errors == ()
            assert counters(record) == {"0": (165, -1, 165), "1": (660, -1, 660)}
    seen = {}
    for path in sorted((folder / "fr_after_error").iterdir()):  # gzipped pickles
        assert path.suffix == ".gz"
        facts = parse(path)
        record = only(facts)
        seen[record.rank] = where(record.last_op)
        assert record.evidence.text == "2.10 dump, 2000 entries"
        assert len(record.recent_ops) == 16  # the last 8 of each of the two groups
    assert seen == {0: ("all_gather", "1", 3851, "scheduled"), 1: ("all_gather", "1", 3851, "scheduled"),
                    2: ("all_gather", "1", 3851, "completed"), 3: ("all_gather", "1", 3851, "scheduled")}
    for path in sorted((folder / "fr_json").iterdir()):  # gzipped JSON
        record = only(parse(path))
        assert record.evidence.text.startswith("2.10 JSON dump, ")


def all_real_dumps():
    found = []
    for root in (SAMPLES, CORPUS):
        if root.exists():
            found += [p for p in sorted(root.glob("*/fr*/*")) if p.is_file()]
    return found


def test_every_real_dump_is_claimed_and_nothing_else():
    dumps = set(all_real_dumps())
    others = [p for root in (SAMPLES, CORPUS) if root.exists() for p in sorted(root.rglob("*"))
              if p.is_file() and p not in dumps and "/fr" not in str(p.parent)]
    for path in dumps:
        assert fr.sniff(str(path), read_head(str(path))), path
    for path in others:
        assert not fr.sniff(str(path), read_head(str(path))), path


def test_safe_loader_reads_real_pickles_exactly():
    for path in all_real_dumps():
        head = read_head(str(path))
        if head[:1] != b"\x80":
            continue
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        assert safepickle.loads(data, path.name) == pickle.loads(data)  # the repo's own trusted files


# ---------------------------------------------------------------- every schema version, generated

VERSIONS = ("unversioned", "2.3", "2.4", "2.7", "2.10")
FRAMES = [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2696},
          {"name": "wrapper", "filename": "torch/distributed/c10d_logger.py", "line": 83},
          {"name": "train_step", "filename": "/job/train.py", "line": 15}]


def make_entry(version, record_id, name, seq, state="completed", group=("0", "default_pg"), pg_id=0,
               retired=None, p2p=None, sizes=((4, 4),), frames=True, json_form=False, **extra):
    is_p2p = p2p if p2p is not None else any(k in name for k in ("send", "recv"))
    if version == "unversioned":
        item = {"record_id": record_id, "pg_id": pg_id, "seq_id": seq, "profiling_name": name,
                "frames": FRAMES, "input_sizes": [list(s) for s in sizes],
                "output_sizes": [list(s) for s in sizes], "state": state}
        item.update(extra)
        return item
    item = {
        "record_id": record_id, "pg_id": pg_id, "process_group": list(group) if json_form else tuple(group),
        "collective_seq_id": 0 if is_p2p else seq, "p2p_seq_id": seq if is_p2p else 0, "op_id": seq,
        "profiling_name": name, "time_created_ns": 1_700_000_000_000_000_000 + record_id,
        "input_sizes": [list(s) for s in sizes], "input_dtypes": ["Float"] * len(sizes),
        "output_sizes": [list(s) for s in sizes], "output_dtypes": ["Float"] * len(sizes),
        "state": state, "time_discovered_started_ns": (1 if state != "scheduled" else (0 if json_form else None)),
        "time_discovered_completed_ns": (2 if state == "completed" else (0 if json_form else None)),
        "retired": state == "completed" if retired is None else retired, "timeout_ms": 600000,
        "is_p2p": is_p2p,
    }
    if state == "completed":
        item["duration_ms"] = 1.5
    if frames and not json_form:
        item["frames"] = FRAMES
    if version == "2.10":
        item.update(thread_id="140387119213440", thread_name="pt_main_thread")
    item.update(extra)
    return item


def make_dump(version, entries, pg_config=None, pg_status=None, json_form=False):
    if version == "unversioned":
        return entries
    status = pg_status or {}
    if json_form:
        status = {k: {f: str(v) for f, v in c.items()} for k, c in status.items()}
    top = {"version": version, "pg_config": pg_config or {}, "pg_status": status, "nccl_comm_state": {}}
    if entries or not json_form:
        top["entries"] = entries
    if version == "2.7":
        top["nccl_version"] = "2.20.5"
    if version == "2.10":
        top["comm_lib_version"] = "2.21.5"
    return top


def status(enqueued, started, completed):
    return {"last_enqueued_collective": enqueued, "last_started_collective": started,
            "last_completed_collective": completed}


def rich_dump(version, json_form=False):
    """Rank 5 of 8. Group "0" (all ranks, pg_id 0): all_reduce #1, #2 done, #3
    stuck. Group "3" (ranks 4-7, pg_id 1): send 1->2 done, recv 1<-0 stuck."""
    e = lambda *a, **k: make_entry(version, *a, json_form=json_form, **k)  # noqa: E731
    pp = {"group": ("3", "pp"), "pg_id": 1}
    entries = [e(0, "nccl:all_reduce", 1), e(1, "nccl:send 1->2", 1, **pp), e(2, "nccl:all_reduce", 2),
               e(3, "nccl:recv 1<-0", 2, state="scheduled", **pp),
               e(4, "nccl:all_reduce", 3, state="started")]
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"},
              "3": {"name": "3", "desc": "pp", "ranks": "[4, 5, 6, 7]"}}
    return make_dump(version, entries, config, {"0": status(3, 3, 2), "1": status(0, -1, -1)}, json_form)


def write(folder, name, obj, form="pickle2"):
    path = Path(folder) / name
    if form == "json":
        path.write_text(json.dumps(obj, indent=1))
    else:
        path.write_bytes(pickle.dumps(obj, protocol=int(form[-1])))
    return path


@pytest.mark.parametrize("form", ["pickle2", "pickle5"])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_version(tmp_path, version, form):
    path = write(tmp_path, "nccl_trace_rank_5", rich_dump(version), form)
    assert fr.sniff(str(path), read_head(str(path)))
    facts = parse(path)
    record = only(facts)
    assert record.rank == 5
    assert where(record.last_op) == ("all_reduce", "0", 3, "started")
    assert record.last_op.evidence.text == "entry record_id=4 pg=0 seq=3 nccl:all_reduce started"
    assert [e.text for e in record.errors] == ["#2 train_step from /job/train.py:15"]  # torch's own skipped
    recent = {(o.op, o.seq): o for o in record.recent_ops}
    assert [(o.op, o.seq) for o in record.recent_ops] == [
        ("all_reduce", 1), ("send", 1), ("all_reduce", 2), ("recv", 2), ("all_reduce", 3)]
    assert recent[("all_reduce", 1)].sizes == ((4, 4),)
    if version == "unversioned":
        # no process_group: groups are named by pg_id; no pg_config: group "1"'s
        # members are unknown, so its group-local peers cannot be made global
        assert record.evidence.text == "unversioned dump, 5 entries"
        assert recent[("send", 1)].group == "1" and recent[("send", 1)].peers == ()
        assert recent[("recv", 2)].state == "scheduled"
        assert record.progress == {} and facts.groups == []
        assert any("cannot be mapped to global ranks" in d.message for d in facts.diagnostics)
        return
    lib = {"2.7": "; comm lib 2.20.5", "2.10": "; comm lib 2.21.5"}.get(version, "")
    assert record.evidence.text == f"{version} dump, 5 entries{lib}"
    assert recent[("send", 1)].peers == (6,) and recent[("send", 1)].group == "3"
    assert recent[("recv", 2)].peers == (4,) and recent[("recv", 2)].state == "scheduled"
    assert recent[("all_reduce", 1)].dtype == "Float"
    assert counters(record) == {"0": (3, 3, 2), "3": (0, -1, -1)}  # pg_status "1" is pg_id 1 = group "3"
    assert facts.groups == [ProcessGroup("0", "default_pg", tuple(range(8))), ProcessGroup("3", "pp", (4, 5, 6, 7))]
    assert facts.diagnostics == []


@pytest.mark.parametrize("version", ["2.4", "2.10"])
def test_json_dumps_of_every_dict_version(tmp_path, version):
    path = write(tmp_path, "rank5.fr.json", rich_dump(version, json_form=True), "json")
    assert fr.sniff(str(path), read_head(str(path)))
    facts = parse(path)
    record = only(facts)
    assert record.rank == 5 and where(record.last_op) == ("all_reduce", "0", 3, "started")
    assert counters(record) == {"0": (3, 3, 2), "3": (0, -1, -1)}  # string counters
    assert record.errors == ()  # JSON has no frames
    lines = path.read_text().split("\n")
    for op in record.recent_ops:  # indented JSON: each entry cites the line of its "{"
        assert lines[op.evidence.line - 1].strip() == "{", op.evidence
    assert record.last_op.evidence.line > record.recent_ops[0].evidence.line > 1
    assert record.progress["0"].evidence.line == next(
        i for i, line in enumerate(lines, 1) if '"pg_status"' in line)


def test_fixture_nccl_timeout_json():
    facts = parse(FIXTURES / "nccl_timeout_rank3.fr.json")
    record = only(facts)
    assert record.rank == 3 and record.timed_out
    op = record.last_op
    # group "0" is stuck at #42 (record 81, started); the send on group "5" (record 82) is only
    # scheduled, launched after it: it is queued behind the all_reduce the device runs
    assert where(op) == ("all_reduce", "0", 42, "started")
    send = [o for o in record.recent_ops if o.group == "5" and o.seq == 7][0]
    assert (send.op, send.state, send.record_id, send.peers, send.evidence.line) == ("send", "scheduled", 82, (1,), 48)
    stuck = [o for o in record.recent_ops if o.group == "0" and o.seq == 42][0]
    assert stuck.state == "started" and stuck.past_timeout and stuck.elapsed_ms == 600000
    assert record.errors[0].text == ("entry record_id=81 pg=0 seq=42 nccl:all_reduce started, retired without "
                                     "completing (timed out)")
    assert record.errors[0].line == 26
    assert [s.kind for s in facts.stuck] == ["watchdog_timeout"]
    assert facts.stuck[0].detail == ("all_reduce #42 on group 0 was retired without completing: "
                                     "timed out after 600000 ms")
    assert counters(record) == {"0": (42, 42, 41), "5": (0, -1, -1)}
    assert facts.groups == [ProcessGroup("0", "default_pg", tuple(range(8))), ProcessGroup("5", "pp", (1, 3, 5, 7))]


def test_fixture_empty_buffer_json():
    """No `entries` key at all (it is left out when the buffer is empty)."""
    facts = parse(FIXTURES / "empty_buffer_rank0.fr.json")
    record = only(facts)
    assert record.rank == 0 and record.last_op is None and record.recent_ops == ()
    assert counters(record) == {"0": (-1, -1, -1)}
    assert facts.groups == [ProcessGroup("0", "", (0, 1))]
    assert record.evidence.text == "2.10 JSON dump, 0 entries"


# ---------------------------------------------------------------- semantics, one at a time

def one(tmp_path, entries, config=None, pg_status=None, version="2.10", name="nccl_trace_rank_0", form="pickle2"):
    path = write(tmp_path, name, make_dump(version, entries, config, pg_status, json_form=form == "json"), form)
    return parse(path)


def test_nccl_retired_but_not_completed_is_a_timeout(tmp_path):
    entries = [make_entry("2.4", 0, "nccl:all_reduce", 1),
               make_entry("2.4", 1, "nccl:all_reduce", 2, state="started", retired=True),
               make_entry("2.4", 2, "nccl:all_reduce", 3, state="scheduled")]
    facts = one(tmp_path, entries, version="2.4")
    record = only(facts)
    assert record.timed_out and where(record.last_op) == ("all_reduce", "0", 2, "started")
    assert record.last_op.past_timeout
    assert record.errors[0].text.endswith("retired without completing (timed out)")
    assert record.errors[1].text == "#2 train_step from /job/train.py:15"


def test_nccl_state_decides_even_when_pg_status_runs_ahead(tmp_path):
    """A later send can move NCCL's pg_status past a hung collective: the entry's own events decide."""
    entries = [make_entry("2.10", 0, "nccl:all_reduce", 1, state="started", retired=False)]
    record = only(one(tmp_path, entries, pg_status={"0": status(1, 1, 1)}))
    assert where(record.last_op) == ("all_reduce", "0", 1, "started")


def test_gloo_without_pg_status_retired_means_done(tmp_path):
    entries = [make_entry("2.3", 0, "gloo:all_reduce", 1, state="scheduled", retired=True),
               make_entry("2.3", 1, "gloo:all_reduce", 2, state="scheduled", retired=False)]
    record = only(one(tmp_path, entries, version="2.3"))
    assert where(record.last_op) == ("all_reduce", "0", 2, "scheduled") and not record.timed_out
    assert record.recent_ops[0].state == "completed"


def test_gloo_retired_beyond_pg_status_is_a_timeout(tmp_path):
    entries = [make_entry("2.10", 0, "gloo:all_reduce", 1, state="scheduled", retired=True),
               make_entry("2.10", 1, "gloo:all_reduce", 2, state="scheduled", retired=True)]
    record = only(one(tmp_path, entries, pg_status={"0": status(2, -1, 1)}))
    assert record.timed_out and where(record.last_op) == ("all_reduce", "0", 2, "scheduled")


def test_last_op_is_the_latest_of_each_groups_first_unfinished(tmp_path):
    g1 = {"group": ("1", "tp"), "pg_id": 1}
    entries = [make_entry("2.10", 0, "nccl:all_reduce", 1, state="started"),      # group 0 stuck here
               make_entry("2.10", 1, "nccl:all_gather", 1, **g1),
               make_entry("2.10", 2, "nccl:all_gather", 2, state="started", **g1),  # group 1 stuck here
               make_entry("2.10", 3, "nccl:all_gather", 3, state="scheduled", **g1)]
    record = only(one(tmp_path, entries))
    assert where(record.last_op) == ("all_gather", "1", 2, "started")


def test_recent_ops_keep_the_last_eight_of_every_group(tmp_path):
    g1 = {"group": ("1", "tp"), "pg_id": 1}
    entries = [make_entry("2.10", i, "nccl:all_reduce", i + 1) for i in range(20)]
    entries += [make_entry("2.10", 20 + i, "nccl:broadcast", i + 1, **g1) for i in range(3)]
    record = only(one(tmp_path, entries))
    assert [(o.group, o.seq) for o in record.recent_ops] == \
        [("0", s) for s in range(13, 21)] + [("1", s) for s in (1, 2, 3)]
    assert where(record.last_op) == ("broadcast", "1", 3, "completed")  # nothing unfinished: the latest call


def test_coalesced_p2p_group_is_one_op(tmp_path):
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
              "9": {"name": "9", "desc": "pp", "ranks": "[2, 3]"}}
    pp = {"group": ("9", "pp"), "pg_id": 1}
    entries = [make_entry("2.10", 0, "nccl:all_reduce", 1),
               # batch_isend_irecv: members have no events and stay scheduled; the end decides
               make_entry("2.10", 1, "nccl:send 1->0", 4, state="scheduled", retired=False, **pp),
               make_entry("2.10", 2, "nccl:recv 1<-0", 4, state="scheduled", retired=False, **pp),
               make_entry("2.10", 3, "nccl:coalesced", 4, state="started", p2p=True, **pp)]
    facts = one(tmp_path, entries, config, name="nccl_trace_rank_3")
    record = only(facts)
    op = record.last_op
    assert (op.op, op.group, op.seq, op.state, op.peers) == ("coalesced", "9", 4, "started", (2,))
    assert op.evidence.text.endswith("(2 coalesced ops)")
    assert op.sizes == ((4, 4), (4, 4))
    assert [(o.op, o.peers) for o in record.recent_ops] == [
        ("all_reduce", ()), ("send", (2,)), ("recv", (2,)), ("coalesced", (2,))]
    entries[3] = make_entry("2.10", 3, "nccl:coalesced", 4, p2p=True, **pp)  # now completed
    record = only(one(tmp_path, entries, config, name="nccl_trace_rank_3"))
    assert [o.state for o in record.recent_ops] == ["completed"] * 4


def test_coalesced_collectives_and_coalesced_names(tmp_path):
    entries = [make_entry("2.10", 0, "nccl:all_reduce", 5, state="scheduled", retired=False),
               make_entry("2.10", 1, "nccl:all_reduce", 5, state="scheduled", retired=False),
               make_entry("2.10", 2, "nccl:coalesced", 5, state="started"),
               make_entry("2.10", 3, "nccl:all_gather_into_tensor_coalesced", 6, state="scheduled")]
    record = only(one(tmp_path, entries))
    assert where(record.last_op) == ("coalesced", "0", 5, "started")
    assert [o.op for o in record.recent_ops] == ["all_reduce", "all_reduce", "coalesced", "coalesced"]


def test_same_seq_without_a_coalesced_end_is_read_one_by_one(tmp_path):
    entries = [make_entry("2.10", 0, "nccl:all_reduce", 5), make_entry("2.10", 1, "nccl:all_reduce", 5)]
    facts = one(tmp_path, entries)
    assert len(only(facts).recent_ops) == 2
    assert [d.severity for d in facts.diagnostics] == ["info"]
    assert "without a coalesced end" in facts.diagnostics[0].message


@pytest.mark.parametrize("backend", ["nccl", "gloo", "xccl", "ncclx", "nccl2", "mybackend"])
def test_any_backend_prefix(tmp_path, backend):
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    entries = [make_entry("2.10", 0, f"{backend}:all_reduce", 1),
               make_entry("2.10", 1, f"{backend}:send 0->1", 1, state="scheduled", retired=False),
               make_entry("2.10", 2, f"{backend}:_allgather_base", 2, state="scheduled", retired=False)]
    record = only(one(tmp_path, entries, config))
    assert [(o.op, o.peers) for o in record.recent_ops] == [
        ("all_reduce", ()), ("send", (1,)), ("all_gather_into_tensor", ())]


def test_default_group_peers_without_pg_config_are_global_already(tmp_path):
    entries = [make_entry("2.10", 0, "gloo:recv 2<-0", 3, state="scheduled", retired=False)]
    record = only(one(tmp_path, entries, name="nccl_trace_rank_2"))
    assert record.last_op.peers == (0,) and record.last_op.op == "recv"


def test_pg_config_empty_key_and_explicit_default(tmp_path):
    entries = [make_entry("2.10", 0, "gloo:all_reduce", 1)]
    facts = one(tmp_path, entries, {"": {"name": "", "desc": "", "ranks": "[0, 1, 2, 3]"}})
    assert facts.groups == [ProcessGroup("0", "default_pg", (0, 1, 2, 3))]  # desc from the entries
    facts = one(tmp_path, entries, {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
                                    "": {"name": "", "desc": "", "ranks": "[0, 1, 2, 3]"}})
    assert facts.groups == [ProcessGroup("0", "default_pg", (0, 1))]


@pytest.mark.parametrize("text, ranks", [
    ("[0, 1, 2, 3]", (0, 1, 2, 3)), ("[]", ()), ("[ 3,1 ]", (3, 1)), ("[7]", (7,)), ([2, 0], (2, 0)),
    ("0, 1", None), ("[0, -1]", None), ("[0, 1", None), ("[a]", None), ("range(4)", None), (None, None),
    ("[" + ", ".join(map(str, range(8192))) + "]", tuple(range(8192))),
])
def test_parse_ranks(text, ranks):
    assert fr.parse_ranks(text) == ranks


def test_ranks_string_is_never_evaluated(tmp_path):
    canary = tmp_path / "canary"
    payload = f"__import__('os').system('touch {canary}')"
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": payload}}
    facts = one(tmp_path, [make_entry("2.10", 0, "nccl:all_reduce", 1)], config)
    assert not canary.exists()
    assert facts.groups == []
    assert any("is not a list of ranks" in d.message for d in facts.diagnostics)


def test_malformed_entries_are_diagnostics_and_skipped(tmp_path):
    good = make_entry("2.10", 9, "nccl:all_reduce", 1)
    no_seq = make_entry("2.10", 2, "nccl:all_reduce", 1)
    del no_seq["collective_seq_id"]
    bad = [
        "not an entry",
        {k: v for k, v in good.items() if k != "record_id"},
        no_seq,
        dict(good, state="running"),
        dict(good, process_group=5),
        dict(good, retired="yes"),
        dict(good, profiling_name=7),
        dict(good, collective_seq_id="x" * 10_000),
        dict(good, record_id=10 ** 40, collective_seq_id=[1, [2, [3, [4]]]]),
    ]
    facts = one(tmp_path, bad + [good])
    record = only(facts)
    assert where(record.last_op) == ("all_reduce", "0", 1, "completed")
    assert facts.unrecognized == len(bad) and facts.lines_read == len(bad) + 1
    messages = [d.message for d in facts.diagnostics]
    assert messages[:7] == [
        "entry 0: a str, not an entry", "entry 1: missing record_id",
        "entry 2: missing collective_seq_id (record_id 2)", "entry 3: unknown state 'running'",
        "entry 4: process_group 5 is not (name, description)", "entry 5: retired is 'yes', not true/false",
        "entry 6: profiling_name is 7"]
    assert all(len(m) < 300 for m in messages)


def test_malformed_top_level(tmp_path):
    with pytest.raises(InputError, match="top level is a int"):
        parse(write(tmp_path, "nccl_trace_rank_0", 5))
    with pytest.raises(InputError, match="none of the keys"):
        parse(write(tmp_path, "nccl_trace_rank_0", {"protocol_version": 1001}))
    facts = parse(write(tmp_path, "nccl_trace_rank_0", {"version": "2.10", "entries": {"a": 1},
                                                         "pg_config": [1], "pg_status": {"x": 1, "0": {
                                                             "last_enqueued_collective": "many"}}}))
    messages = [d.message for d in facts.diagnostics]
    assert "entries is a dict, not a list: no entries read" in messages
    assert "pg_config is a list, not a mapping: ignored" in messages
    assert "pg_status entry 'x' is not a group's counters: ignored" in messages
    assert any("last_enqueued_collective = 'many' is not a number" in m for m in messages)
    with pytest.raises(InputError, match="empty file"):
        parse(_raw(tmp_path, "nccl_trace_rank_1", b""))
    with pytest.raises(InputError, match="invalid JSON"):
        parse(_raw(tmp_path, "rank0.fr.json", b'{"version": "2.10", "pg_status": {'))
    with pytest.raises(InputError, match="extra data"):
        parse(_raw(tmp_path, "rank0.fr.json", b'{"version": "2.10", "pg_status": {}} trailing'))
    with pytest.raises(InputError, match="neither a pickle nor JSON"):
        parse(_raw(tmp_path, "rank0.fr.json", b"hello"))


def _raw(folder, name, data):
    path = Path(folder) / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name, rank", [
    ("nccl_trace_rank_3", 3), ("host07_nccl_trace_rank_3", 3), ("fr_dump.3", 3), ("rank3/dump", 3),
    ("rank3.fr.json", 3), ("rank3.fr.json.gz", 3), ("nccl_trace_rank_12.gz", 12), ("node02_trace_5", 5),
    ("nccl_trace_rank_container-node02_5", 5), ("rank3/fr_dump.5", 5), ("dumps/rank_7/trace", 7),
    ("nccl_trace", None), ("trace.json", None),
])
def test_rank_from_the_file_name(name, rank):
    assert fr.rank_of(name) == rank


def test_a_dump_without_a_rank_in_its_name(tmp_path):
    path = write(tmp_path, "nccl_trace", rich_dump("2.10"))
    facts = parse(path)
    assert only(facts).rank is None
    assert any("cannot tell which rank" in d.message for d in facts.diagnostics)


# ---------------------------------------------------------------- sniffing

def test_sniff_forms(tmp_path):
    yes = [pickle.dumps(rich_dump(v), protocol=p) for v in VERSIONS for p in (2, 3, 4, 5)]
    yes += [json.dumps(rich_dump("2.10", json_form=True)).encode(),
            json.dumps(make_dump("2.10", [], {}, {"0": status(-1, -1, -1)}, json_form=True)).encode(),
            (FIXTURES / "empty_buffer_rank0.fr.json").read_bytes()]
    no = [
        pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2),  # torch.save's header
        pickle.dumps([{"name": "x"}], protocol=2), pickle.dumps({"versions": 1}, protocol=2),
        pickle.dumps({"entries": 1}, protocol=0),  # no protocol 2+ header
        json.dumps([{"thread_id": 1, "frames": [], "owns_gil": True, "os_thread_id": 1}]).encode(),  # py-spy
        json.dumps({"schema": "forensics.snapshot/1", "ranks": {}, "pg_status": {}, "version": 1}).encode(),
        json.dumps({"0": {"current_op": "send", "op_seq": 3}}).encode(),
        json.dumps({"version": "1.0", "entries": []}).encode(),
        b"\x80\x06garbage", b"\x80", b"", b"version entries pg_config",
    ]
    for data in yes:
        assert fr.sniff("x", data[:65536]), data[:80]
    for data in no:
        assert not fr.sniff("x", data[:65536]), data[:80]
    big = json.dumps(make_dump("2.10", [make_entry("2.10", i, "nccl:all_reduce", i + 1, json_form=True)
                                         for i in range(2000)], {}, {"0": status(1, 1, 1)}, json_form=True),
                     sort_keys=True).encode()
    assert big.index(b'"pg_status"') > 65536 and fr.sniff("x", big[:65536])


# ---------------------------------------------------------------- hostile pickles

class _System:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class _Eval:
    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return (builtins.eval, (self.code,))


class _Popen:
    def __init__(self, argv):
        self.argv = argv

    def __reduce__(self):
        return (subprocess.Popen, (self.argv,))


def hostile(canary):
    """Pickles that would create `canary` if anything in them ran."""
    out = {}
    for proto in range(6):
        out[f"os.system/{proto}"] = pickle.dumps({"version": "2.10", "entries": [_System(f"touch {canary}")]},
                                                 protocol=proto)
    out["eval"] = pickle.dumps(_Eval(f"open({str(canary)!r}, 'w')"), protocol=2)
    out["Popen"] = pickle.dumps({"entries": [_Popen(["touch", str(canary)])]}, protocol=4)
    out["hand GLOBAL+REDUCE"] = (b"\x80\x02cposix\nsystem\nX" + struct.pack("<I", len(f"touch {canary}"))
                                 + f"touch {canary}".encode() + b"\x85R.")
    out["INST"] = b"(S'touch " + str(canary).encode() + b"'\nios\nsystem\n."
    out["BUILD"] = b"\x80\x02}q\x00}q\x01b."
    out["NEWOBJ"] = b"\x80\x02)\x81."
    out["EXT1"] = b"\x80\x02\x82\x01."
    out["PERSID"] = b"\x80\x02P1\n."
    out["NEXT_BUFFER"] = b"\x80\x05\x97."
    return out


@pytest.mark.parametrize("case", sorted(hostile("/x")))
def test_hostile_pickles_never_run(tmp_path, case):
    canary = tmp_path / "canary"
    data = hostile(canary)[case]
    with pytest.raises(InputError) as raised:
        safepickle.loads(data, "evil", require_header=False)
    assert "unsafe pickle" in raised.value.message and "only plain data is accepted" in raised.value.message
    assert " at byte " in raised.value.message
    with pytest.raises(InputError):
        parse(_raw(tmp_path, "nccl_trace_rank_0", data))
    with pytest.raises(InputError):
        parse(_raw(tmp_path, "nccl_trace_rank_1.gz", gzip.compress(data)))
    assert not canary.exists()


def test_hostile_opcode_is_named_with_its_offset(tmp_path):
    data = pickle.dumps({"entries": [_System("true")]}, protocol=2)
    with pytest.raises(InputError, match=r"unsafe pickle: GLOBAL at byte \d+ \(only plain data is accepted\)"):
        safepickle.loads(data, "evil")
    data = pickle.dumps(_System("true"), protocol=5)
    with pytest.raises(InputError, match=r"unsafe pickle: STACK_GLOBAL at byte \d+"):
        safepickle.loads(data, "evil")


def billion_laughs(levels=30, fanout=10):
    out = bytearray(b"\x80\x02]q\x00K\x01a")  # L0 = [1]
    for i in range(1, levels):
        out += b"0]q" + bytes([i]) + b"(" + (b"h" + bytes([i - 1])) * fanout + b"e"  # Li = [L(i-1)] * fanout
    return bytes(out + b".")


def deep_via_memo(depth):
    out = bytearray(b"\x80\x02]q\x00")
    for i in range(1, depth):  # Li = [L(i-1)], each built from the memo, the stack stays shallow
        out += b"0]r" + struct.pack("<I", i) + b"j" + struct.pack("<I", i - 1) + b"a"
    return bytes(out + b".")


BOMBS = {
    "nested list 10**5 deep": (b"\x80\x02" + b"]" * 100_000 + b"a" * 99_999 + b".", "nested deeper than"),
    "nested marks 10**5 deep": (b"\x80\x02" + b"(" * 100_000 + b"l" * 100_000 + b".", "MARK at byte"),
    "deep through the memo": (deep_via_memo(500), "nested deeper than"),
    "list that holds itself": (b"\x80\x02]q\x00h\x00a.", "holds itself"),
    "two lists holding each other": (b"\x80\x02]q\x00]q\x01a0h\x01h\x00a.", "holds itself"),
    "billion laughs": (billion_laughs(), "shared references are expanded"),
    "BINUNICODE8 claims 1 TiB": (b"\x80\x04\x8d" + struct.pack("<Q", 1 << 40) + b"abc.", "declares 1099511627776"),
    "BINBYTES8 claims 2**63-1": (b"\x80\x04\x8e" + struct.pack("<Q", (1 << 63) - 1) + b"abc.", "truncated pickle"),
    "BYTEARRAY8 claims 2**40": (b"\x80\x05\x96" + struct.pack("<Q", 1 << 40) + b"abc.", "truncated pickle"),
    "BINUNICODE claims 4 GiB": (b"\x80\x02X\xff\xff\xff\xffabc.", "truncated pickle"),
    "FRAME claims 2**60": (b"\x80\x04\x95" + struct.pack("<Q", 1 << 60) + b"N.", "truncated pickle"),
    "memo slot 2**32-1": (b"\x80\x02]r\xff\xff\xff\xff.", "memo slot 4294967295"),
    "text PUT far away": (b"\x80\x02]p99999999\n.", "memo slot 99999999"),
    "100 kB integer": (b"\x80\x02\x8b" + struct.pack("<i", 100_000) + b"\x01" * 100_000 + b".",
                       "100000-byte integer"),
    "negative LONG4 length": (b"\x80\x02\x8b\xff\xff\xff\xff.", "negative length"),
    "truncated": (pickle.dumps({"version": "2.10", "entries": [1, 2, 3]}, 2)[:-5], "truncated pickle"),
    "no STOP": (b"\x80\x02]", "ends before its STOP"),
    "unknown opcode": (b"\x80\x02\xff.", "unknown opcode 0xff"),
    "protocol 9": (b"\x80\x09N.", "no protocol 2-5 header"),
    "not a pickle": (b"PK\x03\x04 a zip file", "no protocol 2-5 header"),
    "empty": (b"", "no protocol 2-5 header"),
    "bad UTF-8": (b"\x80\x02X\x02\x00\x00\x00\xff\xfe.", "unreadable pickle"),
}


@pytest.mark.parametrize("case", sorted(BOMBS))
def test_bombs_are_rejected_cleanly(case):
    data, reason = BOMBS[case]
    with pytest.raises(InputError) as raised:
        safepickle.loads(data, "bomb")
    assert reason in raised.value.message, raised.value.message
    assert raised.value.path == "bomb"


def test_headerless_pickles_are_scanned_the_same_way():
    with pytest.raises(InputError, match="not a pickle: protocol 9 at byte 0"):
        safepickle.loads(b"\x80\x09N.", "x", require_header=False)
    assert safepickle.loads(pickle.dumps({"entries": [1, (2, 3)], "v": "x"}, protocol=0), "x",
                            require_header=False) == {"entries": [1, (2, 3)], "v": "x"}
    with pytest.raises(InputError, match="malformed PUT"):
        safepickle.loads(b"(lp-1\n.", "x", require_header=False)


def test_limits_are_parameters(tmp_path):
    data = pickle.dumps({"entries": list(range(100))}, protocol=2)
    assert safepickle.loads(data, "x")["entries"][-1] == 99
    with pytest.raises(InputError, match="more than 50 opcodes"):
        safepickle.loads(data, "x", max_items=50)
    with pytest.raises(InputError, match="larger than"):
        safepickle.loads(data, "x", max_bytes=100)
    path = _raw(tmp_path, "big.gz", gzip.compress(b"\x80\x02" + b"N0" * 100_000 + b"N."))
    with pytest.raises(InputError, match="pickle larger than 1000 bytes"):
        safepickle.load_path(str(path), "big.gz", max_bytes=1000)  # gzip is measured after inflating
    assert safepickle.loads([data, pickle.dumps([[[]]], 5)][1], "x", max_depth=3) == [[[]]]
    with pytest.raises(InputError, match="nested deeper than 3"):
        safepickle.loads(pickle.dumps([[[[]]]], 5), "x", max_depth=3)


def test_shared_references_are_fine_within_the_limits():
    frames = [{"name": "f"}]
    value = {"entries": [{"frames": frames}, {"frames": frames}, (frames, frames)]}
    assert safepickle.loads(pickle.dumps(value, protocol=2), "x") == value
    assert safepickle.check_shape(value, "x") > 0


def _tree_size(value, depth=1):
    """(items, depth) the slow way: every path walked, as whoever walks the data would."""
    if type(value) not in (list, dict, tuple):
        return 1, 0
    kids = list(value.values()) if type(value) is dict else list(value)
    total, deepest = 1, depth
    for kid in kids:
        items, deep = _tree_size(kid, depth + 1)
        total, deepest = total + items, max(deepest, deep)
    return total, deepest


@st.composite
def shared_structures(draw):
    """Nested lists/tuples/dicts whose containers are reused (a DAG)."""
    pool = []

    def build(depth):
        if depth > 5 or draw(st.integers(0, 9)) < 3:
            return draw(st.sampled_from([1, "s", None, 2.5, True]))
        if pool and draw(st.integers(0, 9)) < 3:
            return draw(st.sampled_from(pool))
        items = [build(depth + 1) for _ in range(draw(st.integers(0, 4)))]
        kind = draw(st.sampled_from(["list", "tuple", "dict"]))
        value = items if kind == "list" else tuple(items) if kind == "tuple" else {
            f"k{i}": item for i, item in enumerate(items)}
        pool.append(value)
        return value

    return build(0)


@settings(max_examples=300, deadline=None)
@given(shared_structures())
def test_shape_check_counts_like_a_full_walk(value):
    if type(value) not in (list, dict, tuple):
        return
    items, depth = _tree_size(value)
    assert safepickle.check_shape(value, "x") == items
    assert safepickle.check_shape(value, "x", max_depth=depth) == items
    if depth > 1:
        with pytest.raises(InputError, match="nested deeper"):
            safepickle.check_shape(value, "x", max_depth=depth - 1)
    if items > 2:
        with pytest.raises(InputError, match="items once shared"):
            safepickle.check_shape(value, "x", max_items=items - 1)
    assert safepickle.loads(pickle.dumps(value, protocol=2), "x") == value


# ---------------------------------------------------------------- fuzz: only InputError escapes

def _seeds():
    seeds = []
    for path in all_real_dumps():
        if path.suffix != ".gz" and path.stat().st_size < 100_000:
            seeds.append(path.read_bytes())
    seeds.append(pickle.dumps(rich_dump("2.10"), protocol=2))
    seeds.append(pickle.dumps(rich_dump("unversioned"), protocol=5))
    seeds.append(json.dumps(rich_dump("2.4", json_form=True), indent=1).encode())
    seeds.append((FIXTURES / "nccl_timeout_rank3.fr.json").read_bytes())
    return seeds


SEEDS = _seeds()

mutation = st.one_of(
    st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=200_000)),
    st.tuples(st.just("flip"), st.integers(min_value=0, max_value=200_000), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(min_value=0, max_value=200_000), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(min_value=0, max_value=200_000), st.integers(1, 64)),
)


def mutate(data: bytes, steps) -> bytes:
    buf = bytearray(data)
    for step in steps:
        at = step[1] % (len(buf) + 1)
        if step[0] == "truncate":
            del buf[at:]
        elif step[0] == "flip" and buf:
            buf[at % len(buf)] = step[2]
        elif step[0] == "insert":
            buf[at:at] = step[2]
        elif step[0] == "delete":
            del buf[at:at + step[2]]
    return bytes(buf)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=len(SEEDS) - 1), steps=st.lists(mutation, min_size=1, max_size=4),
       name=st.sampled_from(["nccl_trace_rank_3", "rank2.fr.json", "fr_dump.1", "nccl_trace"]))
def test_fuzz_mutated_dumps(seed, steps, name):
    data = mutate(SEEDS[seed], steps)
    with tempfile.TemporaryDirectory() as folder:
        path = _raw(folder, name, data)
        try:
            facts = fr.parse(str(path), name)
        except InputError:
            return
        assert len(facts.records) == 1
        record = facts.records[0]
        groups = {op.group for op in record.recent_ops}
        assert len(record.recent_ops) <= fr.RECENT * len(groups)
        assert facts.unrecognized <= facts.lines_read
        fr.sniff(str(path), read_head(str(path)))  # sniffing never raises either


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_in_the_loader(data):
    for blob in (data, b"\x80\x02" + data, b"\x80\x05" + data):
        try:
            safepickle.loads(blob, "x")
        except InputError:
            pass


# ---------------------------------------------------------------- the fast path: C loader under a memory cap

FAST_PATH_BOMBS = {
    # name: (pickle, what the detailed scan then says)
    "memo index 2**31 (LONG_BINPUT)": (b"\x80\x02]r\x00\x00\x00\x80.", "LONG_BINPUT at byte 3 puts memo slot 2147483648"),
    "memo index 2**32-1": (b"\x80\x02]r\xff\xff\xff\xff.", "memo slot 4294967295"),
    "BINBYTES8 declares 1 TiB": (b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"abc.",
                                 "BINBYTES8 at byte 2 declares 1099511627776 bytes but 4 remain"),
    "BYTEARRAY8 declares 16 GiB": (b"\x80\x05\x96" + struct.pack("<Q", 1 << 34) + b"abc.",
                                   "BYTEARRAY8 at byte 2 declares 17179869184 bytes"),
    "BINBYTES8 declares 2**63-1": (b"\x80\x04\x8e" + struct.pack("<Q", (1 << 63) - 1) + b"abc.",
                                   "truncated pickle: BINBYTES8 at byte 2"),
    "os.system through REDUCE": (pickle.dumps(_System("true"), protocol=2), "GLOBAL at byte 2"),
    "REDUCE on a str (no callable to find)": (b"\x80\x02X\x04\x00\x00\x00echo)R.", "REDUCE at byte 12"),
    "BUILD on a dict": (b"\x80\x02}q\x00}q\x01b.", "BUILD at byte 8"),
    "billion laughs (shared references)": (billion_laughs(), "shared references are expanded"),
    "list nested 10**5 deep": (b"\x80\x02" + b"]" * 100_000 + b"a" * 99_999 + b".", "nested deeper than 100"),
    "list that holds itself (memo)": (b"\x80\x02]q\x00h\x00a.", "holds itself"),
    "list that holds itself (DUP)": (b"\x80\x02]2a.", "holds itself"),
    "100 kB integer": (b"\x80\x02\x8b" + struct.pack("<i", 100_000) + b"\x01" * 100_000 + b".",
                       "LONG4 at byte 2 holds a 100000-byte integer"),
    "text INT of 300 digits": (b"\x80\x02I" + b"9" * 300 + b"\n.", "holds a 125-byte integer"),
}


@pytest.mark.parametrize("case", sorted(FAST_PATH_BOMBS))
def test_fast_path_failures_end_in_the_scanners_precise_error(case):
    data, reason = FAST_PATH_BOMBS[case]
    value, built = safepickle.fast_load(data)
    with pytest.raises(InputError) as raised:
        safepickle.loads(data, "bomb.pkl")
    assert reason in raised.value.message, raised.value.message
    assert raised.value.path == "bomb.pkl" and str(raised.value).startswith("bomb.pkl: ")
    if "memo index" in case or "declares" in case or "REDUCE" in case or "BUILD" in case:
        assert not built  # the C loader itself failed (MemoryError, refused class, nothing to call)


def test_the_fast_path_never_scans_a_real_dump(monkeypatch):
    data = pickle.dumps(rich_dump("2.10"), protocol=2)
    monkeypatch.setattr(safepickle, "scan", lambda *a, **k: pytest.fail("the scanner ran"))
    assert safepickle.loads(data, "x") == pickle.loads(data)
    assert safepickle.loads_unchecked(data, "x") == pickle.loads(data)


def test_address_space_limit_is_restored():
    import resource
    before = resource.getrlimit(resource.RLIMIT_AS)
    safepickle.loads(pickle.dumps(rich_dump("2.10"), protocol=2), "x")
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    with pytest.raises(InputError):
        safepickle.loads(b"\x80\x02]r\x00\x00\x00\x80.", "x")
    assert resource.getrlimit(resource.RLIMIT_AS) == before


_BOMB_SCRIPT = r"""
import resource, struct, sys, tempfile, os
from forensics.ingest import safepickle, flightrecorder
from forensics.ingest.textio import InputError
bombs = {
    "memo": b"\x80\x02]r\x00\x00\x00\x80.",
    "memo2": b"\x80\x02]p99999999\n.",
    "bytes8": b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"abc.",
    "bytearray8": b"\x80\x05\x96" + struct.pack("<Q", 1 << 33) + b"abc.",
    "laughs": b"\x80\x02]q\x00K\x01a" + b"".join(b"0]q" + bytes([i]) + b"(" + (b"h" + bytes([i - 1])) * 10 + b"e"
                                               for i in range(1, 30)) + b".",
    "cycle": b"\x80\x02]2a.",
    "deep tuple key": b"\x80\x02}" + b")" + b"\x85" * int(sys.argv[1]) + b"K\x01s.",
}
folder = tempfile.mkdtemp()
for name, data in bombs.items():
    path = os.path.join(folder, "nccl_trace_rank_0")
    with open(path, "wb") as handle:
        handle.write(data)
    for load in (lambda: safepickle.loads(data, name), lambda: flightrecorder.parse(path, name)):
        try:
            load()
        except InputError as exc:
            print(name, "|", exc.message)
        else:
            print(name, "| ACCEPTED")
# VmHWM, this program's own peak: ru_maxrss keeps the forking parent's across exec (getrusage(2)),
# so a large pytest process would show here as a large child.
print("peak_mib", next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) // 1024)
"""


@pytest.mark.parametrize("nesting", [200_000, 3_000_000])
def test_bombs_cost_little_memory_and_never_crash(nesting):
    """Each bomb, through the loader and through the Flight Recorder reader,
    in a child process (a crash there cannot take the test run down): every
    one ends in InputError and the child never grows past a few hundred MiB.
    A tuple nested 3,000,000 deep as a dict key overflows the C stack when
    hashed (CPython has no recursion limit there) unless loaded with care."""
    result = subprocess.run([sys.executable, "-c", _BOMB_SCRIPT, str(nesting)], capture_output=True, text=True,
                            timeout=600, cwd=Path(__file__).parent.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert not [line for line in lines if "ACCEPTED" in line], lines
    assert len(lines) == 2 * 7 + 1
    peak = int(lines[-1].split()[1])
    assert peak < 400, lines  # MiB; the memo bomb alone would clear 32 GiB
    messages = "\n".join(lines)
    assert "memo | unsafe pickle: LONG_BINPUT at byte 3 puts memo slot 2147483648" in messages
    assert "bytes8 | truncated pickle: BINBYTES8 at byte 2 declares 1099511627776 bytes" in messages
    assert "cycle | unsafe pickle: nested deeper than 100 levels (or a container holds itself)" in messages
    assert "laughs | unsafe pickle: more than 50000000 items once shared references are expanded" in messages
    if nesting > 1_000_000:
        assert f"deep tuple key | unsafe pickle: {nesting} tuple opcodes" in messages
    else:
        assert "deep tuple key | unsafe pickle: nested deeper than 100 levels" in messages


def test_flight_recorder_reader_refuses_shapes_it_never_walks(tmp_path):
    """The reader loads without the walk (it only reaches in by key and
    bounded slices): data that is not entries is refused, not walked."""
    cyclic = []
    cyclic.append(cyclic)
    deep = []
    for _ in range(300):  # as deep as pickle.dumps goes here; the reader would take any depth
        deep = [deep]
    laughs = [1]
    for _ in range(30):
        laughs = [laughs] * 10
    for name, value in (("cyclic", cyclic), ("deep", deep), ("laughs", laughs)):
        for top in (value, {"version": "2.10", "entries": value}):
            path = tmp_path / "nccl_trace_rank_0"
            path.write_bytes(pickle.dumps(top, protocol=2))
            with pytest.raises(InputError, match="not a Flight Recorder dump: .* list of list, not of entries"):
                parse(path)
    # Inside an entry, hostile values in the fields read are cut to size or ignored.
    entry = make_entry("2.10", 0, "nccl:all_reduce", 1, state="started", input_sizes=laughs,
                       input_dtypes=cyclic, timeout_ms=10 ** 40)
    entry["frames"] = deep
    record = only(one(tmp_path, [entry]))
    assert record.last_op.sizes == () and record.last_op.dtype == "" and record.last_op.timeout_ms is None
    assert record.errors == ()


def test_integers_beyond_64_bits_never_reach_the_model(tmp_path):
    entries = [make_entry("2.10", 10 ** 30, "nccl:all_reduce", 1), make_entry("2.10", 1, "nccl:all_reduce", 2 ** 70),
               make_entry("2.10", 2, "nccl:all_reduce", 3, input_sizes=[[2 ** 80]])]
    facts = one(tmp_path, entries)
    record = only(facts)
    assert facts.unrecognized == 2 and where(record.last_op) == ("all_reduce", "0", 3, "completed")
    assert record.last_op.sizes == ()


# ---------------------------------------------------------------- the column path equals the entry path

_ODD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 66), 2 ** 66), st.floats(allow_nan=False),
                        st.text(max_size=3), st.sampled_from(fr._STATES), st.just(""), st.just([]), st.just({}),
                        st.tuples(st.text(max_size=2), st.text(max_size=2)),
                        st.lists(st.text(max_size=2), max_size=3), st.tuples(st.text(max_size=2)),
                        st.tuples(st.text(max_size=2), st.text(max_size=2), st.text(max_size=2)))
_NAMES = ("nccl:all_reduce", "gloo:broadcast", "nccl:send 0->1", "nccl:recv 1->0", "nccl:coalesced",
          "gloo:allreduce_coalesced", "nccl:_reduce_scatter_base")


@st.composite
def _entry_lists(draw):
    """Entries as dumps have them (every field of the right type), some with
    a field changed to any plain value or removed: record ids in order or
    shuffled, with repeats; one group or several."""
    n = draw(st.integers(min_value=1, max_value=40))
    start = draw(st.integers(min_value=-3, max_value=2 ** 64 - 100))
    rids = [start + i for i in range(n)]
    order = draw(st.sampled_from(["sorted", "shuffled", "repeats"]))
    if order == "shuffled":
        rids = draw(st.permutations(rids))
    elif order == "repeats":
        rids = sorted(draw(st.lists(st.sampled_from(rids), min_size=n, max_size=n)))
    groups = draw(st.lists(st.sampled_from([("0", "default_pg"), ("1", "tp"), ("", ""), ("2", "")]),
                           min_size=1, max_size=3, unique=True))
    as_json = draw(st.booleans())  # JSON dumps have lists where pickles have tuples
    entries = []
    for rid in rids:
        name = draw(st.sampled_from(_NAMES))
        is_p2p = "send" in name or "recv" in name
        group = draw(st.sampled_from(groups))
        entry = {"record_id": rid, "profiling_name": name,
                 "process_group": list(group) if as_json else group,
                 "pg_id": draw(st.sampled_from([0, 1, None])) if len(groups) > 1 else 0, "is_p2p": is_p2p,
                 "collective_seq_id": draw(st.integers(0, 50)), "p2p_seq_id": draw(st.integers(0, 50)),
                 "state": draw(st.sampled_from(fr._STATES)), "retired": draw(st.booleans())}
        entries.append(entry)
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        entry = draw(st.sampled_from(entries))
        field = draw(st.sampled_from(sorted(entry)))
        if draw(st.booleans()):
            entry[field] = draw(_ODD_VALUES)
        else:
            del entry[field]
    return entries


_ENTRY_TYPES = {"record_id": {int}, "profiling_name": {str}, "process_group": {tuple, list},
                "pg_id": {int, type(None)}, "is_p2p": {bool}, "collective_seq_id": {int}, "p2p_seq_id": {int},
                "state": {str}, "retired": {bool}}


def _as_torch_writes(entries) -> bool:
    """Every entry has exactly the fields `_bulk` reads, each of the type
    torch writes, and the process groups are all tuples or all lists."""
    return all(type(e) is dict and set(e) == set(_ENTRY_TYPES)
               and all(type(e[k]) in _ENTRY_TYPES[k] for k in e)
               and all(-(1 << 63) <= e[k] < (1 << 63) for k in e if type(e[k]) is int)  # torch writes int64
               and e["state"] in fr._STATES and e["profiling_name"] and len(e["process_group"]) == 2
               for e in entries) and len({type(e["process_group"]) for e in entries}) == 1


@settings(max_examples=300, deadline=None)
@given(entries=_entry_lists())
def test_column_path_reads_what_the_entry_path_reads(entries):
    """`_bulk` (all entries at once, a column at a time) either declines or
    returns exactly the rows the entry-by-entry path builds, in the same
    order; and it never declines a dump whose entries are all as torch
    writes them."""
    reader = fr._Reader(Facts(fr.KIND, "nccl_trace_rank_0"), "nccl_trace_rank_0", fr.Dump("pickle", entries))
    rows = []
    for index, raw in enumerate(entries):
        try:
            rows.append(reader.entry(index, raw))
        except fr._BadEntry:
            rows = None
            break
    columns = fr._bulk(entries)
    if _as_torch_writes(entries):
        assert columns is not None
    if columns is None:
        return
    assert rows is not None, "the column path took entries the entry path refuses"
    rows.sort(key=lambda row: row[1])
    assert [list(column) for column in columns] == [list(values) for values in zip(*rows)]


@pytest.mark.parametrize("odd", [("0", "default_pg", "x"), ("0",), ["0", "default_pg"], ("0", 1), None])
def test_column_path_declines_a_group_that_is_not_a_name_and_description(tmp_path, odd):
    entries = [make_entry("2.10", i, "nccl:all_reduce", i + 1) for i in range(6)]
    entries[3]["process_group"] = odd
    assert fr._bulk(entries) is None
    facts = one(tmp_path, entries)
    if odd is None:  # pg_id still names the group
        assert facts.unrecognized == 0
    elif isinstance(odd, list):  # a list where the others are tuples: read entry by entry, all good
        assert facts.unrecognized == 0
    else:
        assert facts.unrecognized == 1
        assert any("entry 3: process_group" in d.message for d in facts.diagnostics)
