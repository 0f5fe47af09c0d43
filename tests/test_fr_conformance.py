"""Flight Recorder matching, situation by situation, against PyTorch's own analyzer.

Every situation that PyTorch's analyzer tests exercise
(`test/distributed/flight_recorder/test_fr_analysis.py`: the version that
ships with torch 2.13 and the newer one with the FlightRecorderHook tests)
is rebuilt here as dump files, one per rank, in the shape torch writes them:
their facts (op names, sizes, dtypes, states, groups, coalesced groups),
written by this module's own code. Each situation states what PyTorch's
tests assert and, where forensics deliberately reports something else, what
it reports and why (docs/flight-recorder.md lists every such difference).

- `test_forensics_on_situation` always runs: our findings, reduced to the
  analyzer's classes (type, size, dtype, state, missing), must be what the
  situation says.
- `test_pytorch_analyzer_on_situation` runs PyTorch's analyzer
  (`python -m torch.distributed.flight_recorder.fr_trace`) on the same files
  when torch is importable here or FORENSICS_TORCH_PYTHON names an
  interpreter that has it; its classes must be what PyTorch's tests assert
  (or, for a situation added after that torch, what that torch is known to
  report), and ours must equal them unless the difference is declared.

`python tests/test_fr_conformance.py` prints the agreement table the docs
carry (it needs the analyzer, as above).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import forensics
from forensics.plugins import Plugins

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "flight-recorder.md"

TYPE, SIZE, DTYPE, STATE, MISSING, CRASH = "type", "size", "dtype", "state", "missing", "crash"
NONE = frozenset()
DUMP_VERSION = "2.8"  # what testBuildDB writes ("Same as the version in FlightRecorder.hpp")
PREFIX = "nccl_trace_rank_"


def classes(*names: str) -> frozenset:
    return frozenset(names)


# ---------------------------------------------------------------- dumps, as torch writes them

def entry(record_id: int, name: str, inputs, outputs, *, seq: int = 1, state: str = "scheduled",
          in_dtypes=("Float",), out_dtypes=("Float",), pg=("0", "default_pg"), backend: str = "nccl",
          p2p_seq: int = 0, is_p2p: bool = False) -> dict:
    """One entry with every key `getCollectiveTrace` writes. Dtypes are
    c10's names ("Float", "Half"), one per tensor as torch lists them."""
    done = state == "completed"
    return {
        "frames": [], "record_id": record_id, "pg_id": int(pg[0]) if pg[0].isdigit() else 0,
        "process_group": tuple(pg), "collective_seq_id": 0 if is_p2p else seq,
        "p2p_seq_id": p2p_seq, "op_id": seq, "profiling_name": f"{backend}:{name}" if backend is not None else name,
        "time_created_ns": 1_700_000_000_000_000_000 + record_id,
        "input_sizes": [list(s) for s in inputs], "output_sizes": [list(s) for s in outputs],
        "input_dtypes": [in_dtypes[0]] * len(inputs) if len(in_dtypes) == 1 else list(in_dtypes),
        "output_dtypes": [out_dtypes[0]] * len(outputs) if len(out_dtypes) == 1 else list(out_dtypes),
        "state": state, "time_discovered_started_ns": None if state == "scheduled" else 1,
        "time_discovered_completed_ns": 2 if done else None, "retired": done, "timeout_ms": 600_000,
        "is_p2p": is_p2p,
    }


def ranks_text(ranks) -> str:
    return "[" + ", ".join(map(str, ranks)) + "]"


def write_dumps(folder: Path, situation: "Situation", form: str = "pickle") -> Path:
    """One dump per rank (`nccl_trace_rank_<R>`): the dict torch pickles,
    or with `form="json"` what `_dump_fr_trace_json` writes instead (string
    counters, 0 for unset times, no frames, lists for tuples)."""
    folder.mkdir(parents=True, exist_ok=True)
    world = sorted(situation.ranks)
    for rank, items in situation.ranks.items():
        config = {"0": {"name": "0", "desc": "default_pg", "ranks": ranks_text(world)}}
        for name, (desc, members) in situation.groups(rank).items():
            config[name] = {"name": name, "desc": desc, "ranks": ranks_text(members)}
        status = {}
        for item in items:
            if item["is_p2p"]:
                continue
            counters = status.setdefault(str(item["pg_id"]), {
                "last_enqueued_collective": -1, "last_started_collective": -1, "last_completed_collective": -1})
            seq = item["collective_seq_id"]
            counters["last_enqueued_collective"] = max(counters["last_enqueued_collective"], seq)
            if item["state"] != "scheduled":
                counters["last_started_collective"] = max(counters["last_started_collective"], seq)
            if item["state"] == "completed":
                counters["last_completed_collective"] = max(counters["last_completed_collective"], seq)
        top = {"version": DUMP_VERSION, "pg_config": config, "pg_status": status, "entries": items}
        if form == "json":
            top["pg_status"] = {pg: {k: str(v) for k, v in counters.items()} for pg, counters in status.items()}
            top["entries"] = [{key: (0 if value is None and key.startswith("time_") else value)
                               for key, value in item.items() if key != "frames"} for item in items]
            data = json.dumps(top, sort_keys=True).encode()
        else:
            data = pickle.dumps(top, protocol=2)
        (folder / f"{PREFIX}{rank}").write_bytes(data)
    return folder


# ---------------------------------------------------------------- the situations

def _no_groups(rank):
    return {}


@dataclass(frozen=True)
class Situation:
    name: str
    origin: str                       # where in PyTorch's tests, and since when
    ranks: dict                       # global rank → entries
    pytorch: frozenset                # what PyTorch's tests assert its analyzer reports
    ours: frozenset | None = None     # what forensics reports where it deliberately differs
    why: str = ""                     # the documented difference (a heading in docs/flight-recorder.md)
    torch_2_13: frozenset | None = None  # what torch 2.13's analyzer reports, where it predates the test
    groups: object = field(default=_no_groups)  # rank → {name: (desc, ranks)} besides the default group

    @property
    def expected(self) -> frozenset:
        return self.pytorch if self.ours is None else self.ours


def pair(a: dict, b: dict) -> dict:
    return {0: [a], 1: [b]}


def same(item: dict) -> dict:
    return {0: [item], 1: [dict(item)]}


EVERY_DEFECT = "Every defect of a call, not only the first"
COMPLETED_WARNING = "A mismatch in calls that all completed is a warning"
SINGLE_SIZES = "Size rules for every spelling of all-gather and reduce-scatter"
NO_PREFIX = "Names without a backend prefix"
P2P_SIZES = "Send and recv sizes are not paired"
FIXED_AFTER_2_13 = "Fixed in PyTorch's analyzer after 2.13"

# test_match_one_event: e1 … e13 (two ranks, group "0" of ranks 0 and 1)
E1 = entry(0, "all_reduce", [[4, 4]], [[4, 4]])
E9 = entry(0, "all_reduce", [[4, 4]], [[4, 4]], state="completed")
E10 = entry(0, "all_reduce", [[4, 4]], [[4, 4]], state="completed", out_dtypes=("Half",))
E11 = entry(0, "gather", [[4, 4]], [[4, 4], [4, 4]], state="completed")
E12 = entry(0, "gather", [[4, 4]], [[]], state="completed", out_dtypes=())
E13 = entry(0, "gather", [[4, 4]], [[4, 4]], state="completed", out_dtypes=())

MATCH_ONE_EVENT = "test_match_one_event"
NEWER = "after 2.13"
SITUATIONS = [
    Situation("all_reduce matched", MATCH_ONE_EVENT + " e1/e1", same(E1), NONE),
    Situation("type: all_reduce vs all_gather", MATCH_ONE_EVENT + " e1/e2",
              pair(E1, entry(0, "all_gather", [[4, 4]], [[4, 4]])), classes(TYPE),
              ours=classes(TYPE, SIZE), why=EVERY_DEFECT),
    Situation("all_to_all, equal totals", MATCH_ONE_EVENT + " e3/e4 (UNDECIDED, then the totals)",
              same(entry(0, "all_to_all", [[4, 4]], [[4, 4]])), NONE),
    Situation("input sizes differ", MATCH_ONE_EVENT + " e1/e5",
              pair(E1, entry(0, "all_reduce", [[5, 4]], [[4, 4]], p2p_seq=1)), classes(SIZE)),
    Situation("output sizes differ", MATCH_ONE_EVENT + " e1/e6",
              pair(E1, entry(0, "all_reduce", [[4, 4]], [[5, 4]], p2p_seq=2)), classes(SIZE)),
    Situation("all_reduce writes another shape", MATCH_ONE_EVENT + " e7/e7",
              same(entry(0, "all_reduce", [[4, 4]], [[5, 4]], seq=2)), classes(SIZE)),
    Situation("state: scheduled vs completed", MATCH_ONE_EVENT + " e1/e9", pair(E1, E9), classes(STATE)),
    Situation("dtype: output Half vs Float, completed", MATCH_ONE_EVENT + " e10/e9", pair(E10, E9),
              classes(DTYPE)),
    Situation("gather: root and a rank listing no output", MATCH_ONE_EVENT + " e11/e12",
              pair(E11, E12), NONE),
    Situation("gather: a non-root listing one output", MATCH_ONE_EVENT + " e11/e13",
              pair(E11, E13), NONE),
]

# test_all_events: every op name the analyzer knows, the same call on both ranks
KNOWN_OPS = sorted({
    "broadcast", "_broadcast_oop", "reduce", "_reduce_oop", "all_gather", "all_gather_single", "all_gather_v",
    "all_reduce", "_all_gather_base", "all_gather_into_tensor_coalesced", "reduce_scatter",
    "reduce_scatter_single", "reduce_scatter_v", "reduce_scatter_tensor_coalesced", "_reduce_scatter_base",
    "gather", "scatter", "all_to_all", "all_to_all_single", "all_to_all_v_single", "all_reduce_barrier",
    "barrier", "split", "new_window", "allreduce_coalesced", "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced"})
for op in KNOWN_OPS:
    outputs = [[4, 4]]
    if op in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
        outputs = [[8]]
    if op in ("all_gather", "_all_gather_base", "all_gather_into_tensor_coalesced"):
        outputs = [[32]]
    single = op in ("all_gather_single", "reduce_scatter_single")
    SITUATIONS.append(Situation(
        f"every op: {op}", "test_all_events", same(entry(0, op, [[4, 4]], outputs)), NONE,
        ours=classes(SIZE) if single else None, why=SINGLE_SIZES if single else ""))

# FlightRecorderOpBackendTest: the backend prefixes (torch 2.13's analyzer
# accepts nccl, ncclx, xccl, gloo and the ROCm/Ascend names; later ones any)
for prefix in ("nccl", "ncclx", "gloo", "xccl"):
    SITUATIONS.append(Situation(
        f"backend {prefix}:", "FlightRecorderOpBackendTest",
        same(entry(0, "all_reduce", [[4, 4]], [[4, 4]], state="completed", backend=prefix)), NONE))
for prefix in ("nccl2", "c10d", "unknown_backend", "weird:backend"):
    SITUATIONS.append(Situation(
        f"backend {prefix}:", f"FlightRecorderOpBackendTest ({NEWER})",
        same(entry(0, "all_reduce", [[4, 4]], [[4, 4]], state="completed", backend=prefix)), NONE,
        torch_2_13=classes(CRASH), why=FIXED_AFTER_2_13))
SITUATIONS.append(Situation(
    "no backend prefix", f"test_missing_colon_raises ({NEWER})",
    same(entry(0, "all_reduce", [[4, 4]], [[4, 4]], state="completed", backend=None)), classes(CRASH),
    ours=NONE, why=NO_PREFIX))

# Checks added after 2.13 (FlightRecorderHook work)
for a, b in (("all_gather", "_all_gather_base"), ("all_reduce", "allreduce_coalesced"),
             ("reduce_scatter", "_reduce_scatter_base"), ("all_to_all", "all_to_all_single")):
    shaped = a in ("all_gather", "reduce_scatter")  # [[8]] → [[8]] cannot be either on two ranks
    SITUATIONS.append(Situation(
        f"type: {a} vs {b}", f"test_collective_variants_are_distinct_types ({NEWER})",
        pair(entry(0, a, [[8]], [[8]]), entry(0, b, [[8]], [[8]])), classes(TYPE),
        ours=classes(TYPE, SIZE) if shaped else None, why=EVERY_DEFECT if shaped else ""))
SITUATIONS += [
    Situation("_all_gather_base, right numel", f"test_all_gather_base_numel_is_checked ({NEWER})",
              same(entry(0, "_all_gather_base", [[8]], [[16]])), NONE),
    Situation("_all_gather_base, wrong numel", f"test_all_gather_base_numel_is_checked ({NEWER})",
              same(entry(0, "_all_gather_base", [[8]], [[24]])), classes(SIZE),
              torch_2_13=NONE, why=FIXED_AFTER_2_13),
    Situation("all_to_all_single, uneven splits", f"test_all_to_all_single_uneven_splits_are_not_a_mismatch ({NEWER})",
              pair(entry(0, "all_to_all_single", [[8]], [[12]]), entry(0, "all_to_all_single", [[12]], [[8]])),
              NONE, torch_2_13=classes(SIZE), why=FIXED_AFTER_2_13),
]
ANY_SOURCE_GROUP = {2: [entry(0, "send 0->1", [[8]], [[8]], is_p2p=True, p2p_seq=1)],
                    5: [entry(0, "recv 1<-?", [[8]], [[8]], is_p2p=True, p2p_seq=1)]}
SITUATIONS += [
    Situation("recv from any source", f"test_recv_any_source_has_no_peer ({NEWER})", ANY_SOURCE_GROUP, NONE,
              torch_2_13=classes(CRASH), why=FIXED_AFTER_2_13),
    Situation("send shorter than its recv", f"test_recv_any_source_has_no_peer ({NEWER})",
              {2: [entry(0, "send 0->1", [[4]], [[4]], is_p2p=True, p2p_seq=1)], 5: ANY_SOURCE_GROUP[5]},
              classes(SIZE), ours=NONE, why=P2P_SIZES, torch_2_13=classes(CRASH)),
]


def hook(record_id, name, inputs, outputs, seq):
    return entry(record_id, name, inputs, outputs, seq=seq, backend="nccl2")


HOOK = f"FlightRecorderHookShapeTest ({NEWER})"
SITUATIONS += [
    Situation("hook shapes: a run of five", HOOK, {rank: [
        hook(0, "all_reduce", [[8]], [[8]], 1), hook(1, "reduce", [[8]], [[8]], 2),
        hook(2, "all_gather", [[8]], [[8], [8]], 3), hook(3, "reduce_scatter", [[8], [8]], [[8]], 4),
        hook(4, "allreduce_coalesced", [[8], [4]], [[8], [4]], 5)] for rank in (0, 1)}, NONE,
        torch_2_13=classes(CRASH), why=FIXED_AFTER_2_13),
    Situation("hook shapes: all_gather list of the wrong length", HOOK,
              same(hook(0, "all_gather", [[8]], [[8], [8], [8]], 1)), classes(SIZE),
              torch_2_13=classes(CRASH), why=FIXED_AFTER_2_13),
    Situation("hook shapes: reduce_scatter list of the wrong length", HOOK,
              same(hook(0, "reduce_scatter", [[8], [8], [8]], [[8]], 1)), classes(SIZE),
              torch_2_13=classes(CRASH), why=FIXED_AFTER_2_13),
    Situation("flattened all_gather, wrong numel", HOOK, same(hook(0, "all_gather", [[8]], [[17]], 1)),
              classes(SIZE), torch_2_13=classes(CRASH), why=FIXED_AFTER_2_13),
    Situation("flattened reduce_scatter, wrong numel", HOOK, same(hook(0, "reduce_scatter", [[17]], [[8]], 1)),
              classes(SIZE), torch_2_13=classes(CRASH), why=FIXED_AFTER_2_13),
]


# testBuildDB: whole dumps, every call completed (seq ids as torch numbers
# them: one per collective, one shared by a coalesced group's entries)
def done(record_id, name, inputs, outputs, seq, pg=("0", "default_pg")):
    return entry(record_id, name, inputs, outputs, seq=seq, state="completed", pg=pg)


def coalesced(first_id, member, sizes, end, seq):
    """A coalesced group: its members, then the entry that closes it."""
    items = [done(first_id + i, member, [s], [s], seq) for i, s in enumerate(sizes)]
    return items + [done(first_id + len(sizes), end, [[]], [[]], seq)]


def sub_group(rank):
    return {"1": ("sub_pg", [rank])}  # a group named "1" on each rank, each holding that rank alone


BUILD_DB = "testBuildDB case"
SITUATIONS += [
    Situation("two groups, all matched", BUILD_DB + " 1", {rank: [
        done(0, "all_reduce", [[4, 4]], [[4, 4]], 1),
        done(1, "all_reduce", [[5, 5]], [[5, 5]], 1, pg=("1", "sub_pg"))] for rank in (0, 1)}, NONE,
        groups=sub_group),
    Situation("allreduce_coalesced", BUILD_DB + " 2",
              same(done(0, "allreduce_coalesced", [[4, 4]], [[4, 4]], 1)), NONE),
    Situation("two broadcasts coalesced", BUILD_DB + " 3",
              {rank: coalesced(0, "broadcast", [[4, 4], [4, 4]], "coalesced", 1) for rank in (0, 1)}, NONE),
    Situation("uneven all_gather: a member's size differs", BUILD_DB + " 4", {
        0: coalesced(0, "_broadcast_oop", [[4, 4], [5, 5]], "ALLGATHER_coalesced", 1),
        1: coalesced(0, "_broadcast_oop", [[4, 4], [4, 4]], "ALLGATHER_coalesced", 1)}, classes(SIZE)),
    Situation("uneven reduce_scatter matched", BUILD_DB + " 5",
              {rank: coalesced(0, "_reduce_oop", [[4, 4], [4, 4]], "REDUCE_SCATTER_coalesced", 1)
               for rank in (0, 1)}, NONE),
    Situation("a rank never issues a coalesced group", BUILD_DB + " 6", {
        0: [done(0, "all_reduce", [[4, 4]], [[4, 4]], 1)],
        1: [done(0, "all_reduce", [[4, 4]], [[4, 4]], 1)]
        + coalesced(1, "_reduce_oop", [[4, 4], [4, 4]], "REDUCE_SCATTER_coalesced", 2)}, classes(MISSING)),
]

# Differences the docs explain that no situation's classes show.
OUT_OF_PLACE = "Out-of-place variants are the collective they launch"
DIFFERENCES = (COMPLETED_WARNING, OUT_OF_PLACE) + tuple(sorted({s.why for s in SITUATIONS if s.why}))

IDS = [s.name for s in SITUATIONS]
assert len(set(IDS)) == len(IDS)


# ---------------------------------------------------------------- reading both tools' answers

def analyze(folder: Path):
    return forensics.analyze(folder, hung=False, jobs=1, plugins=Plugins(autoload=False))


_MISMATCH_CLASSES = (("different collectives", TYPE), ("different dtypes", DTYPE), ("different sizes", SIZE),
                     ("different output sizes", SIZE), ("elements in total but", SIZE))


def our_classes(report) -> frozenset:
    """Our findings as the analyzer's classes. A finding of these rules
    that maps to no class fails the test: nothing is dropped unseen."""
    found = set()
    for finding in report.findings:
        if finding.rule == "collective-mismatch":
            if "calls whose own input and output cannot work" in finding.message:
                parts = finding.message.split("cannot work: ", 1)[1].split("; ")
                found.update(DTYPE if " but its output " in part else SIZE for part in parts)
                continue
            hits = {cls for phrase, cls in _MISMATCH_CLASSES if phrase in finding.message}
            assert hits, f"unclassified finding: {finding.message}"
            found |= hits
        elif finding.rule == "collective-state-mismatch":
            found.add(STATE)
        elif finding.rule == "collective-missing-ranks":
            found.add(MISSING)
    return frozenset(found)


_ERROR_TYPES = {"COLLECTIVE_TYPE_MISMATCH": TYPE, "SIZE_OR_SYNTAX_MISMATCH": SIZE,
                "COLLECTIVE_DTYPE_MISMATCH": DTYPE, "COLLECTIVE_STATE_MISMATCH": STATE}


def analyzer_classes(exit_code: int, output: str) -> frozenset:
    """What fr_trace printed, as classes; `crash` when it stopped on an error."""
    if exit_code != 0:
        return classes(CRASH)
    found = set()
    if re.search(r"^Not all ranks joining collective", output, re.M):
        found.add(MISSING)
    if re.search(r"^Input/output mismatch in the collective", output, re.M):
        found.add(SIZE)
    found.update(_ERROR_TYPES[kind] for kind in re.findall(r"Error type: (\w+)", output) if kind in _ERROR_TYPES)
    return frozenset(found)


def torch_python() -> str | None:
    """An interpreter that has torch: FORENSICS_TORCH_PYTHON, else this one if it has torch."""
    named = os.environ.get("FORENSICS_TORCH_PYTHON")
    if named:
        return named
    import importlib.util
    return sys.executable if importlib.util.find_spec("torch") is not None else None


# Runs PyTorch's analyzer (its CLI entry point, `fr_trace.main`) on each
# folder in one interpreter, so torch is imported once, not once a folder;
# prints one JSON line per folder: [exit code, what it printed].
_DRIVER = """
import io, json, logging, sys, traceback
from torch.distributed.flight_recorder import fr_trace
for folder in sys.argv[2:]:
    out = io.StringIO()
    handlers = logging.getLogger("Flight Recorder").handlers
    for handler in handlers:
        handler.setStream(out)
    try:
        fr_trace.main([folder, "-p", sys.argv[1]])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:
        out.write(traceback.format_exc())
        code = 1
    print(json.dumps([folder, code, out.getvalue()]))
"""


def run_analyzer(python: str, folders: list[Path]) -> dict[str, tuple[int, str]]:
    """{folder: (exit code, what PyTorch's analyzer printed)}."""
    result = subprocess.run([python, "-c", _DRIVER, PREFIX, *map(str, folders)], capture_output=True, text=True,
                            timeout=600)
    runs = {}
    for line in result.stdout.splitlines():
        if line.startswith("["):
            folder, code, text = json.loads(line)
            runs[folder] = (code, text)
    assert len(runs) == len(folders), result.stderr[-2000:]
    return runs


def torch_version(python: str) -> tuple[int, int]:
    text = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True, timeout=300, check=True).stdout.strip()
    major, minor = re.match(r"(\d+)\.(\d+)", text).groups()
    return int(major), int(minor)


def analyzer_expected(situation: Situation, version: tuple[int, int]) -> frozenset:
    if version <= (2, 13) and situation.torch_2_13 is not None:
        return situation.torch_2_13
    return situation.pytorch


# ---------------------------------------------------------------- the tests

@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("fr_conformance")
    return {s.name: write_dumps(base / f"s{i:02d}", s) for i, s in enumerate(SITUATIONS)}


@pytest.fixture(scope="module")
def analyzer(dumps):
    python = torch_python()
    if python is None:
        pytest.skip("PyTorch's analyzer is not here: install torch, or set FORENSICS_TORCH_PYTHON")
    runs = run_analyzer(python, list(dumps.values()))
    return torch_version(python), {name: runs[str(folder)] for name, folder in dumps.items()}


@pytest.mark.parametrize("situation", SITUATIONS, ids=IDS)
def test_forensics_on_situation(situation, dumps):
    report = analyze(dumps[situation.name])
    assert our_classes(report) == situation.expected
    # The JSON dumps of the same calls (which PyTorch's analyzer cannot read) say the same.
    as_json = analyze(write_dumps(dumps[situation.name].with_name(dumps[situation.name].name + "_json"),
                                  situation, "json"))
    assert our_classes(as_json) == situation.expected
    if situation.expected and all(op["state"] == "completed" for items in situation.ranks.values() for op in items):
        # nothing hangs: what went wrong is a warning (or, for a rank that
        # only missed a call the others completed, information), never the verdict
        mismatch = [f for f in report.findings if f.rule.startswith("collective-")]
        assert mismatch and all(f.severity in ("warning", "info") for f in mismatch)
        assert report.verdict not in ("collective_mismatch", "missing_rank", "deadlock")


@pytest.mark.parametrize("situation", SITUATIONS, ids=IDS)
def test_pytorch_analyzer_on_situation(situation, dumps, analyzer):
    version, runs = analyzer
    code, output = runs[situation.name]
    theirs = analyzer_classes(code, output)
    assert theirs == analyzer_expected(situation, version), output[-2000:]
    ours = our_classes(analyze(dumps[situation.name]))
    if ours != theirs:  # a disagreement must be one the docs explain
        assert situation.why, f"unexplained: forensics {sorted(ours)}, PyTorch's analyzer {sorted(theirs)}"


def test_unsupported_backend_still_read_and_stuck_ops_compared(tmp_path):
    """Beyond the analyzer's situations: a stuck mismatch in a backend the
    analyzer of torch 2.13 refuses is an error and the verdict."""
    situation = Situation("stuck", "", pair(entry(0, "all_reduce", [[4]], [[4]], backend="nccl2"),
                                            entry(0, "broadcast", [[4]], [[4]], backend="nccl2")), classes(TYPE))
    report = analyze(write_dumps(tmp_path, situation))
    assert our_classes(report) == classes(TYPE)
    assert report.verdict == "collective_mismatch"


def test_out_of_place_variant_matches_its_collective(tmp_path):
    """`_broadcast_oop` and `broadcast` both launch ncclBroadcast: one rank
    calling each is no mismatch (PyTorch's analyzer compares the names);
    a different count still is."""
    for sizes, expected in (([[4, 4]], NONE), ([[5, 5]], classes(SIZE))):
        situation = Situation("oop", "", pair(entry(0, "_broadcast_oop", [[4, 4]], [[4, 4]]),
                                              entry(0, "broadcast", sizes, sizes)), expected)
        report = analyze(write_dumps(tmp_path / str(sizes), situation))
        assert our_classes(report) == expected


def test_every_difference_is_documented():
    """Each declared difference, and every situation, is in the docs."""
    text = DOCS.read_text(encoding="utf-8")
    for reason in DIFFERENCES:
        assert f"### {reason}" in text, reason
    for situation in SITUATIONS:
        assert f"| {situation.name} |" in text, situation.name


# ---------------------------------------------------------------- the table for the docs

def _show(found: frozenset) -> str:
    return ", ".join(sorted(found)) or "matched"


def main() -> int:
    python = torch_python()
    if python is None:
        print("set FORENSICS_TORCH_PYTHON to an interpreter that has torch", file=sys.stderr)
        return 2
    version = torch_version(python)
    base = Path(tempfile.mkdtemp(prefix="fr_conformance_"))
    try:
        folders = [write_dumps(base / f"s{i:02d}", situation) for i, situation in enumerate(SITUATIONS)]
        runs = run_analyzer(python, folders)
        rows, agree, explained, as_tests = [], 0, 0, 0
        for situation, folder in zip(SITUATIONS, folders):
            theirs = analyzer_classes(*runs[str(folder)])
            ours = our_classes(analyze(folder))
            as_tests += ours == situation.pytorch
            if ours == theirs:
                agree += 1
                verdict = "agree"
            else:
                explained += bool(situation.why)
                verdict = f"differ: {situation.why}" if situation.why else "DISAGREE (unexplained)"
            rows.append(f"| {situation.name} | {situation.origin} | {_show(situation.pytorch)} | "
                        f"{_show(theirs)} | {_show(ours)} | {verdict} |")
        total = len(SITUATIONS)
        print(f"PyTorch's analyzer of torch {version[0]}.{version[1]} on {total} situations: {agree} agree, "
              f"{explained} differ as documented, {total - agree - explained} unexplained; "
              f"forensics reports what PyTorch's tests assert in {as_tests} of {total}\n")
        print(f"| situation | PyTorch test | PyTorch's tests assert | torch {version[0]}.{version[1]} analyzer "
              "| forensics | forensics vs analyzer |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
        return 0 if agree + explained == len(SITUATIONS) else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
