"""Catalogue files are read against rules/messages.schema.json: a broken file
is named by file and line (the YAML node's), never a traceback, and the
entries of the file that are fine are still read."""

import os

import jsonschema
import pytest

from forensics import messages, messages_schema
from forensics.cli import main
from test_messages import ENTRY

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)

GOOD = ENTRY.replace("{FACTS}", '{peer_addr: "[10.0.0.2]:5000"}').replace(
    "    facts:", '    ok: ["RuntimeError: [x.cc:1] Connection closed by peer"]\n    facts:')


def _problems(tmp_path, body: str, name: str = "bad.yaml"):
    path = tmp_path / name
    path.write_text(body, encoding="utf-8") if isinstance(body, str) else path.write_bytes(body)
    entries, problems = messages.load([str(path)])
    return entries, problems


def test_the_shipped_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(messages_schema.schema())


def test_every_shipped_file_fits_the_schema():
    for path in messages.shipped_files():
        entries, problems = messages_schema.read(path, os.path.basename(path))
        assert problems == [] and entries, path


def test_a_good_entry_is_read_with_its_line_and_ok_lines(tmp_path):
    entries, problems = _problems(tmp_path, GOOD)
    assert problems == []
    assert [(e.id, e.line, e.ok) for e in entries] == [
        ("test-entry", 2, ("RuntimeError: [x.cc:1] Connection closed by peer",))]


@pytest.mark.parametrize("change, line, needle", [
    (("cause: peer_died", "cause: sadness"), 12, "test-entry: proves.cause: 'sadness' is not one of"),
    (("    zh: \"对端关闭了连接。\"\n", ""), 2, "test-entry: missing 'zh'"),
    (("    level: exception\n", "    level: exception\n    severity: high\n"), 7,
     "test-entry: unknown key(s): severity (allowed: "),
    (("id: test-entry", "id: Test_Entry"), 2, "Test_Entry: id: 'Test_Entry' must be kebab-case"),
    (('versions: "1.13-2.13"', "versions: 2021-05-21"), 5, "versions: datetime.date(2021, 5, 21) must be a string"),
    (("match: \"Connection closed by peer\"", "match: []"), 7,
     "test-entry: match: must be a non-empty string or a non-empty list of them"),
    (("patterns: ['Connection", "patterns: ['', 'Connection"), 8, "patterns.0: '' must be a non-empty string"),
    (('example: "RuntimeError', 'example: "first line\\nRuntimeError'), 9, "must be one line of text"),
    (("ok: [\"RuntimeError", "ok: [7, \"RuntimeError"), 10, "ok.0: 7 must be one line of text"),
    (('facts: {peer_addr: "[10.0.0.2]:5000"}', "facts: {peer_addr: {deep: 1}}"), 11, "facts.peer_addr:"),
    (("stuck: false", 'stuck: "no"'), 12, "proves.stuck: 'no' is not of type 'boolean'"),
    (('en: "The peer closed the connection."', 'en: "   "'), 13, "en: '   ' must be non-empty text"),
])
def test_a_broken_entry_is_named_with_its_file_and_the_line_of_its_node(tmp_path, change, line, needle):
    entries, problems = _problems(tmp_path, GOOD.replace(*change))
    assert entries == []
    assert len(problems) == 1, problems
    where, number, text = problems[0]
    assert where.endswith("bad.yaml") and number == line and needle in text, problems[0]


WITH_EXAMPLES = GOOD.replace("    proves:", "    examples:\n"
                             "      - line: 'RuntimeError: [x.cc:1] Connection closed by peer [10.0.0.5]:5000'\n"
                             "        facts: {peer_addr: '[10.0.0.5]:5000'}\n    proves:")


def test_further_examples_are_read_with_their_facts(tmp_path):
    entries, problems = _problems(tmp_path, WITH_EXAMPLES)
    assert problems == []
    assert entries[0].examples == (("RuntimeError: [x.cc:1] Connection closed by peer [10.0.0.5]:5000",
                                    {"peer_addr": "[10.0.0.5]:5000"}),)


@pytest.mark.parametrize("change, line, needle", [
    (("        facts: {peer_addr: '[10.0.0.5]:5000'}\n", ""), 13, "test-entry: examples.0: missing 'facts'"),
    (("        facts: {peer_addr", "        seen: 3\n        facts: {peer_addr"), 14,
     "test-entry: examples.0: unknown key(s): seen (allowed: facts, line)"),
    (("- line: 'RuntimeError", "- line: 7\n        said: 'RuntimeError"), 13, "examples.0.line: 7 must be one line"),
    (("    examples:\n", "    examples: []\n    old:\n"), 13, "test-entry: unknown key(s): old"),
])
def test_a_broken_further_example_is_named_with_its_line(tmp_path, change, line, needle):
    entries, problems = _problems(tmp_path, WITH_EXAMPLES.replace(*change))
    assert entries == [] and problems, problems
    assert any(number == line and needle in text for _, number, text in problems), problems


def test_one_broken_entry_leaves_the_others_of_its_file(tmp_path):
    second = GOOD.split("messages:\n", 1)[1].replace("test-entry", "second-entry").replace("project: gloo",
                                                                                           "project: gl00")
    entries, problems = _problems(tmp_path, GOOD + second)
    assert [e.id for e in entries] == ["test-entry"]
    assert [(n, t.split(":")[0]) for _, n, t in problems] == [(16, "second-entry")]


@pytest.mark.parametrize("body, line, needle", [
    ("messages:\n  - id: x\n    bad: [unclosed\n", 4, "invalid YAML"),
    ("", 1, "empty file"),
    ("- just\n- a list\n", 1, "is a mapping with a 'messages' list"),
    ("entries: []\n", 1, "unknown key(s): entries"),
    ("messages:\n  - &one {id: a}\n  - *one\n", 2, "anchors and aliases are not allowed in catalogue files (anchor &one)"),
    ("messages:\n  - !!python/object/apply:os.system ['true']\n", 2, "invalid YAML"),
    (b"messages:\n  - id: caf\xe9\n", 2, "not UTF-8"),
])
def test_a_file_that_is_no_catalogue_is_one_problem_with_its_line(tmp_path, body, line, needle):
    entries, problems = _problems(tmp_path, body)
    assert entries == [] and len(problems) >= 1, problems
    assert problems[0][1] == line and needle in problems[0][2], problems


def test_a_file_too_big_to_be_a_catalogue_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(messages_schema, "MAX_FILE_BYTES", 100)
    entries, problems = _problems(tmp_path, GOOD)
    assert entries == [] and "larger than 100 bytes" in problems[0][2]


def test_forensics_messages_check_prints_file_and_line_and_no_traceback(tmp_path, capsys):
    path = tmp_path / "team.yaml"
    path.write_text(GOOD.replace("cause: peer_died", "cause: sadness"), encoding="utf-8")
    assert main(["messages", "check", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{messages._display(str(path))}:12: test-entry: proves.cause: 'sadness' is not one of")
    assert "Traceback" not in out + err


def test_the_cause_classes_docs_messages_md_lists_are_the_schemas():
    """docs/messages.md names the cause classes a user may write: the schema's."""
    causes = messages_schema.schema()["$defs"]["entry"]["properties"]["proves"]["properties"]["cause"]["enum"]
    text = open(os.path.join(ROOT, "docs", "messages.md"), encoding="utf-8").read()
    assert all(f"`{cause}`" in text for cause in causes)


def test_the_entry_docs_messages_md_shows_is_a_valid_entry_with_an_ok_line(tmp_path):
    text = open(os.path.join(ROOT, "docs", "messages.md"), encoding="utf-8").read()
    block = text.split("## An entry", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    entries, problems = _problems(tmp_path, block, "doc.yaml")
    assert problems == [] and len(entries) == 1 and entries[0].ok


def test_without_the_schema_an_entry_that_cannot_be_built_is_a_problem_not_a_traceback(tmp_path):
    """The shipped files are read without the schema (the suite validates
    them): a broken one is still named by file and line."""
    path = tmp_path / "shipped.yaml"
    path.write_text(GOOD + GOOD.split("messages:\n", 1)[1].replace("test-entry", "other-entry")
                    .replace('facts: {peer_addr: "[10.0.0.2]:5000"}', "facts: [1]"), encoding="utf-8")
    entries, problems = messages.load([str(path)], check_examples=False, validate=False)
    assert [e.id for e in entries] == ["test-entry"]
    assert [(n, t.split(":")[0]) for _, n, t in problems] == [(15, "other-entry")]


def test_each_missing_key_is_named_once(tmp_path):
    body = GOOD.replace('    en: "The peer closed the connection."\n', "").replace('    zh: "对端关闭了连接。"\n', "")
    entries, problems = _problems(tmp_path, body)
    assert sorted(text for _, _, text in problems) == ["test-entry: missing 'en'", "test-entry: missing 'zh'"]


def test_a_long_value_is_shortened_in_its_problem(tmp_path):
    entries, problems = _problems(tmp_path, GOOD.replace('example: "RuntimeError', 'example: "' + "x" * 500 + '\\nRuntimeError'))
    assert len(problems) == 1 and len(problems[0][2]) < 200 and "must be one line of text" in problems[0][2]
