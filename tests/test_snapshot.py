"""The watchdog snapshot format: JSON or YAML, bare or wrapped, every rank citing its line."""

import gzip
import json

import pytest

from forensics import analyze
from forensics.ingest.snapshot import parse, sniff
from forensics.ingest.textio import InputError


def test_json_lines_are_the_lines_of_rank_keys(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{\n  "schema": "forensics.snapshot/1",\n  "hung": true,\n  "ranks": {\n'
                    '    "0": {"current_op": "ALLREDUCE", "op_seq": 4},\n\n'
                    '    "rank1": {"current_op": "nccl:all_reduce", "op_seq": 4}\n  }\n}\n')
    facts = parse(str(path), "s.json")
    assert [(s.rank, s.evidence.line, s.current_op.op) for s in facts.ranks] == [
        (0, 5, "all_reduce"), (1, 7, "all_reduce")]
    assert facts.stuck[0].kind == "declared_hung" and facts.stuck[0].evidence.line == 3


def test_duplicate_rank_is_a_diagnostic(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"0": {"current_op": "send"},\n "0": {"current_op": "recv"}}')
    facts = parse(str(path), "s.json")
    assert facts.ranks[0].current_op.op == "recv"
    assert [(d.line, "duplicate" in d.message) for d in facts.diagnostics] == [(2, True)]


def test_yaml_wrapper_with_groups(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("schema: forensics.snapshot/1\ngroups:\n  tp: [0, 1]\nranks:\n"
                    "  0:\n    current_op: all_gather\n    group: tp\n    op_seq: 2\n"
                    "  1:\n    current_op: compute\n")
    facts = parse(str(path), "s.yaml")
    assert facts.groups[0].ranks == (0, 1)
    assert facts.ranks[0].evidence.line == 6 and facts.ranks[0].evidence.text == "current_op: all_gather"


def test_unknown_fields_and_bad_values_are_diagnostics(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"0": {"current_op": "send", "colour": "red", "op_seq": "x", "alive": "yes"},
                                "zero": {"current_op": "recv"}}))
    facts = parse(str(path), "s.json")
    messages = " | ".join(d.message for d in facts.diagnostics)
    assert "unknown field(s) 'colour'" in messages
    assert "op_seq must be an integer" in messages
    assert "alive must be true or false" in messages
    assert "key 'zero' is not a rank number" in messages


def test_gzip_snapshot_is_read_transparently(tmp_path):
    raw = json.dumps({"0": {"current_op": "send", "waiting_for_ranks": [1]},
                      "1": {"current_op": "send", "waiting_for_ranks": [0]}}).encode()
    (tmp_path / "snap.json.gz").write_bytes(gzip.compress(raw))
    assert analyze(tmp_path).verdict == "deadlock"


@pytest.mark.parametrize("head, claimed", [
    (b'{"0": {"current_op": "send"}}', True),
    (b'0:\n  waiting_for_ranks: [1]\n', True),
    (b'{"schema": "forensics.snapshot/1", "ranks": {}}', True),
    (b'[{"pid": 1, "frames": []}]', False),          # a py-spy --json dump
    (b'{"version": "2.10", "entries": []}', False),  # a Flight Recorder JSON dump
    (b'\x00\x01current_op:', False),
])
def test_sniff_by_content(head, claimed):
    assert sniff("any.name", head) is claimed


def test_deeply_nested_json_is_an_input_error(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"0": {"current_op": "send", "stack": ' + "[" * 100000 + "]" * 100000 + "}}")
    with pytest.raises(InputError):
        parse(str(path), "s.json")
