"""Facts files (`forensics parse DIR --out FILE`): what analyze reports from
a node's facts file is what it reports from the node's files; files from
another version, cut short, or shaped by someone else are refused with a
message naming the file, never a traceback, and nothing in them runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zlib

import pytest

from forensics.ingest import factsfile, wire
from forensics.ingest.textio import InputError

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CORPUS = os.path.join(ROOT, "corpus")
INCIDENTS = sorted(d for d in os.listdir(CORPUS) if os.path.isfile(os.path.join(CORPUS, d, "expected.yaml")))


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True,
                          timeout=timeout)


def _report(*args) -> tuple[int, str]:
    proc = _run("analyze", *args, "-f", "json", "-q", "--jobs", "1")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout


# A spread of inputs: logs, Flight Recorder pickles and JSON, stack dumps,
# snapshots, post-mortem launcher logs, collect output, a 10,000-rank case.
SAMPLE = ["real_p2p_cycle_2", "real_pp_dp_cross_group_cycle", "real_collect_missing_rank_snapshots",
          "synthetic_fr_launch_order_tp_world"] + [d for d in INCIDENTS if d.startswith(("pm_", "public_n_", "public_q_"))][::6]


@pytest.mark.parametrize("incident", [d for d in SAMPLE if d in INCIDENTS])
def test_a_facts_file_gives_the_report_its_files_give(incident, tmp_path):
    facts = tmp_path / "node.facts"
    proc = _run("parse", os.path.join(CORPUS, incident), "--out", str(facts), "--prefix", "", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    assert "artifact(s)" in proc.stderr
    assert _report(str(facts)) == _report(os.path.join(CORPUS, incident))


def test_node_facts_files_merge_as_the_nodes_folders_do(tmp_path):
    """Two nodes, each parsed on its own (the default prefix is the node's
    folder name); analyze of the two facts files and of the raw folder agree,
    and so does one facts file beside the other node's raw files."""
    src = os.path.join(CORPUS, "real_pp_dp_cross_group_cycle")
    out = tmp_path / "collected"
    names = sorted(f for f in os.listdir(src) if f not in ("expected.yaml", "SOURCE.md"))
    for node, wanted in (("node1", lambda f: f.startswith(("rank0", "rank1"))),
                         ("node2", lambda f: not f.startswith(("rank0", "rank1")))):
        (out / node).mkdir(parents=True)
        for name in names:
            if wanted(name):
                path = os.path.join(src, name)
                (shutil.copytree if os.path.isdir(path) else shutil.copy)(path, out / node / name)
    for node in ("node1", "node2"):
        proc = _run("parse", str(out / node), "--out", str(tmp_path / f"{node}.facts"))
        assert proc.returncode == 0, proc.stderr
    code, raw = _report(str(out))
    assert (code, raw) == _report(str(tmp_path / "node1.facts"), str(tmp_path / "node2.facts"))
    assert json.loads(raw)["verdict"] == "deadlock"
    mixed = tmp_path / "mixed"
    shutil.copytree(out / "node2", mixed / "node2")
    shutil.copy(tmp_path / "node1.facts", mixed / "node1.facts")
    assert _report(str(mixed)) == (code, raw)


def _facts_bytes(tmp_path) -> bytes:
    facts = tmp_path / "x.facts"
    assert _run("parse", os.path.join(CORPUS, "real_p2p_cycle_2"), "--out", str(facts),
                "--jobs", "1").returncode == 0
    return facts.read_bytes()


def _split(data: bytes) -> tuple[dict, object]:
    end = data.index(b"\n", len(wire.MAGIC))
    return json.loads(data[len(wire.MAGIC):end]), json.loads(zlib.decompress(data[end + 1:]))


def _join(header: dict, body) -> bytes:
    return (wire.MAGIC + json.dumps(header).encode() + b"\n"
            + zlib.compress(json.dumps(body).encode()))


def _refused(tmp_path, data: bytes, *expected: str) -> str:
    path = tmp_path / "bad.facts"
    path.write_bytes(data)
    with pytest.raises(InputError) as caught:
        factsfile.parse(str(path), "bad.facts")
    message = str(caught.value)
    assert caught.value.path == "bad.facts" and all(e in message for e in expected), message
    proc = _run("analyze", str(path))
    assert proc.returncode == 2 and "bad.facts" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    return message


def test_a_facts_file_of_another_version_is_refused_with_what_to_do(tmp_path):
    header, body = _split(_facts_bytes(tmp_path))
    _refused(tmp_path, _join({**header, "version": 0, "forensics": "0.0.9"}, body),
             "format version 0", "written by forensics 0.0.9", "parse the artifacts again with this version")
    _refused(tmp_path, _join({**header, "layout": "0123456789abcdef"}, body), "layout 0123456789abcdef")


def test_a_facts_file_cut_short_or_not_zlib_is_refused(tmp_path):
    data = _facts_bytes(tmp_path)
    _refused(tmp_path, data[:-40], "cut short")
    end = data.index(b"\n", len(wire.MAGIC))
    _refused(tmp_path, data[:end + 1] + b"not zlib at all", "not zlib data")
    _refused(tmp_path, wire.MAGIC + b"{not json\n", "header is not JSON")


def test_a_body_of_the_wrong_shape_is_refused_field_by_field(tmp_path):
    header, body = _split(_facts_bytes(tmp_path))
    text = json.dumps(body)

    def mutated(old: str, new: str) -> bytes:
        assert old in text, old
        return _join(header, json.loads(text.replace(old, new, 1)))

    _refused(tmp_path, _join(header, ["T", ["L"], ["L"]]), "a tuple of 4")
    _refused(tmp_path, _join(header, ["T", ["L", "x"], ["L"], ["L"], ["L"]]), "where a Artifact belongs")
    _refused(tmp_path, _join(header, ["T", ["L", ["R", 99]], ["L"], ["L"], ["L"]]), "a reference to nothing")
    # the first Artifact's display path becomes a number
    artifact = wire.schema().number[__import__("forensics.model", fromlist=["Artifact"]).Artifact]
    first = json.dumps(body[1][1])
    assert first.startswith(f"[{artifact}, ")
    changed = json.loads(first)
    changed[3] = 12
    _refused(tmp_path, _join(header, ["T", ["L", changed], *body[2:]]), "12 where a string belongs")
    # a rank past the ranks a job can have, where a rank number belongs: the `rank` field of the
    # first object that has one (a ProcessRecord, a RankState, a MessageHit)
    sch = wire.schema()
    with_rank = {number: fields.index("rank") + 1 for number, fields in enumerate(sch.fields) if "rank" in fields}
    changed = json.loads(text)

    def first_with_rank(value):
        if isinstance(value, list) and value:
            if value[0] in with_rank and type(value[0]) is int and len(value) > with_rank[value[0]]:
                return value
            for item in value[1:]:
                found = first_with_rank(item)
                if found is not None:
                    return found
        return None
    target = first_with_rank(changed)
    target[with_rank[target[0]]] = 1 << 40
    _refused(tmp_path, _join(header, changed), "rank 1099511627776 is beyond")
    del mutated


def test_nothing_in_a_facts_file_runs_and_no_class_outside_the_model_is_built(tmp_path):
    """A class number beyond the schema, and the names pickle would import,
    are plain data to the decoder."""
    header, body = _split(_facts_bytes(tmp_path))
    beyond = len(wire.schema().classes)
    _refused(tmp_path, _join(header, ["T", ["L", [beyond, "os", "system"]], ["L"], ["L"], ["L"]]),
             "where a Artifact belongs")
    _refused(tmp_path, _join(header, ["T", ["L", ["__reduce__", "os.system", "id"]], ["L"], ["L"], ["L"]]),
             "where a Artifact belongs")


def test_a_decompression_bomb_stops_at_the_limit(tmp_path):
    header, _ = _split(_facts_bytes(tmp_path))
    bomb = (wire.MAGIC + json.dumps(header).encode() + b"\n"
            + zlib.compress(b"[" + b" " * (80 << 20) + b"]", 9))
    path = tmp_path / "bomb.facts"
    path.write_bytes(bomb)
    proc = _run("analyze", str(path), "--limit", "decompressed=16M")
    assert proc.returncode == 2 and "decompresses past 16 MiB" in proc.stderr, proc.stderr


def test_parse_writes_nothing_on_bad_input_and_says_why(tmp_path):
    proc = _run("parse", str(tmp_path / "missing"), "--out", str(tmp_path / "x.facts"))
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.facts").exists()
    proc = _run("parse", os.path.join(CORPUS, "real_p2p_cycle_2"), "--out", str(tmp_path / "no" / "x.facts"))
    assert proc.returncode == 2 and "cannot write" in proc.stderr


def test_every_model_value_survives_the_encoding():
    """Shared objects stay shared, tuples stay tuples, mappings come back as
    mappings: a round trip of a real parse is equal to what went in."""
    from forensics.ingest import read_artifacts
    from forensics.plugins import Plugins

    plugins = Plugins(autoload=False)
    for incident in ("real_pp_dp_cross_group_cycle", "real_collect_missing_rank_snapshots"):
        artifacts, diagnostics, results = read_artifacts([os.path.join(CORPUS, incident)], plugins, jobs=1)
        bundle = factsfile.Bundle(artifacts, results, diagnostics, [])
        _, back = factsfile.from_bytes(factsfile.to_bytes(bundle), "x.facts")
        assert back.artifacts == artifacts and back.diagnostics == diagnostics
        assert back.results == results


def test_an_empty_shared_frames_tuple_goes_over_the_wire_as_an_empty_tuple():
    # stack readers share one frames tuple (a tuple subclass) among dumps; an empty one numbered on one side
    # only shifted every later reference
    from forensics.ingest import factsfile
    from forensics.ingest.facts import Facts
    from forensics.ingest.workers import SharedTuple
    from forensics.model import Evidence, ProcessDump, ThreadStack

    seen = Evidence("rank0.gdb.txt", 3, "Thread 2 (Thread 0x7f (LWP 12)):")
    threads = (ThreadStack("1", "python3", False, SharedTuple(()), seen), ThreadStack("2", "gloo", False,
                                                                                 SharedTuple(()), seen))
    facts = Facts("gdb", "rank0.gdb.txt")
    facts.processes.append(ProcessDump("gdb", "rank0.gdb.txt", pid=12, threads=threads, evidence=seen))
    _, body = wire.loads(wire.dumps({}, ([], [facts], [], [])), "x.facts", factsfile.body_spec(), 1 << 30)
    back = body[1][0].processes[0]
    assert [t.frames for t in back.threads] == [(), ()] and back.threads[1].evidence == seen
