"""The message catalogue: every entry's example yields exactly its facts,
the checker catches broken entries, and the reader attributes lines."""

import os

import pytest

from forensics import messages, messages_match
from forensics.cli import main
from forensics.model import Artifact

HERE = os.path.dirname(__file__)
SAMPLE = os.path.join(HERE, "fixtures", "messages", "sample.yaml")
SHIPPED = messages.catalogue().entries


def test_the_shipped_catalogue_is_large_and_spans_the_three_projects():
    projects = {e.project for e in SHIPPED}
    assert len(SHIPPED) >= 100, len(SHIPPED)
    assert projects == {"pytorch", "nccl", "gloo", "linux", "nvidia", "openmpi", "horovod", "deepspeed", "lightning", "sglang", "ray"}


@pytest.mark.parametrize("entry", SHIPPED, ids=[e.id for e in SHIPPED])
def test_every_example_yields_exactly_its_facts(entry):
    found = {e.id: facts for e, facts in messages.catalogue().match(entry.example)}
    assert entry.id in found, f"{entry.id}: its example is not recognized"
    assert found[entry.id] == entry.facts


WITH_OK = [e for e in SHIPPED if e.ok]


@pytest.mark.parametrize("entry", WITH_OK, ids=[e.id for e in WITH_OK])
def test_no_ok_line_is_taken_for_its_entry(entry):
    """semgrep's `ok:` cases: lines of the same programs that hold the
    entry's literal (so its patterns are tried) and mean something else."""
    for line in entry.ok:
        assert any(literal in line for literal in entry.match), line
        assert entry.extract(line) is None, line
        assert entry.id not in {e.id for e, _ in messages.catalogue().match(line)}, line


def test_the_entries_most_at_risk_carry_ok_lines():
    """At least 25 entries carry negative examples, and entries that share
    a literal, so that one's line is always tried against the other, each
    carry the other's example where it means something else."""
    assert len(WITH_OK) >= 25, len(WITH_OK)
    missing = [(e.id, other.id) for e in SHIPPED for other in SHIPPED
               if other is not e and set(e.match) & set(other.match)
               and e.extract(other.example) is None and other.example not in e.ok]
    assert not missing, f"add the second entry's example to the first one's ok lines: {missing}"


WITH_EXAMPLES = [e for e in SHIPPED if e.examples]


@pytest.mark.parametrize("entry", WITH_EXAMPLES, ids=[e.id for e in WITH_EXAMPLES])
def test_every_further_example_yields_exactly_its_facts(entry):
    """Each `examples` line is found by the catalogue as a reader meets it
    (the literal search first, then the patterns) and yields its facts."""
    for line, facts in entry.examples:
        found = {e.id: got for e, got in messages.catalogue().match(line)}
        assert found.get(entry.id) == facts, (line, found.get(entry.id))


def test_every_shipped_pattern_is_exercised_by_an_example_line():
    """One example line per wording: a pattern that no `example` or
    `examples` line matches is a wording nothing tests."""
    unexercised = [(e.path, e.line, e.id, index) for e in SHIPPED for index, pattern in enumerate(e.regexes)
                   if not any(pattern.search(line) for line, _ in e.all_examples)]
    assert unexercised == []
    assert sum(len(e.patterns) > 1 for e in SHIPPED) >= 45  # the rule has entries of several wordings to hold


def test_the_cached_catalogue_keeps_the_further_examples(tmp_path, monkeypatch):
    """The per-user cache stores `examples` and gives back the same entries."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FORENSICS_NO_CACHE", raising=False)
    paths = messages.shipped_files()
    parsed, problems = messages.load(paths, check_examples=False, validate=False)
    assert problems == []
    messages._store(paths, parsed)
    cached = messages._cached(paths)
    assert cached is not None
    assert [(e.id, e.examples) for e in cached] == [(e.id, e.examples) for e in parsed]
    assert any(e.examples for e in cached)


def test_the_shipped_files_pass_the_checker():
    assert messages.check(messages.shipped_files()) == []


def _write(tmp_path, body: str) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(body, encoding="utf-8")
    return str(path)


ENTRY = """messages:
  - id: test-entry
    project: gloo
    source: gloo/transport/tcp/pair.cc
    versions: "1.13-2.13"
    level: exception
    match: "Connection closed by peer"
    patterns: ['Connection closed by peer (?P<peer_addr>\\S+)']
    example: "RuntimeError: [x.cc:1] Connection closed by peer [10.0.0.2]:5000"
    facts: {FACTS}
    proves: {cause: peer_died, stuck: false, blames: peer, knock_on: true}
    en: "The peer closed the connection."
    zh: "对端关闭了连接。"
"""


def test_the_checker_names_an_example_whose_facts_differ(tmp_path):
    path = _write(tmp_path, ENTRY.replace("{FACTS}", '{peer_addr: "[10.0.0.3]:5000"}'))
    problems = messages.check([path])
    assert len(problems) == 1
    where, line, text = problems[0]
    assert line == 2 and "test-entry" in text and "[10.0.0.2]:5000" in text


def test_the_checker_accepts_the_right_facts(tmp_path):
    assert messages.check([_write(tmp_path, ENTRY.replace("{FACTS}", '{peer_addr: "[10.0.0.2]:5000"}'))]) == []


@pytest.mark.parametrize("change, needle", [
    (("(?P<peer_addr>", "(?P<peer_address>"), "unknown named group"),
    (("cause: peer_died", "cause: sadness"), "proves.cause"),
    (("    zh: \"对端关闭了连接。\"\n", ""), "missing 'zh'"),
    (("match: \"Connection closed by peer\"", "match: \"closed by the peer\""), "none of the 'match' literals"),
    (("id: test-entry", "id: Test_Entry"), "kebab-case"),
    (("patterns: ['Connection", "patterns: ['(Connection"), "does not compile"),
])
def test_the_checker_rejects_broken_entries(tmp_path, change, needle):
    body = ENTRY.replace("{FACTS}", '{peer_addr: "[10.0.0.2]:5000"}').replace(*change)
    problems = messages.check([_write(tmp_path, body)])
    assert problems and any(needle in text for _, _, text in problems), problems


@pytest.mark.parametrize("ok, needle", [
    ("RuntimeError: [x.cc:1] Connection closed by peer [10.0.0.9]:5000", "matches the entry"),
    ("RuntimeError: [x.cc:1] Connection reset by peer", "tests no pattern"),
])
def test_the_checker_rejects_an_ok_line_that_matches_or_tests_nothing(tmp_path, ok, needle):
    body = ENTRY.replace("{FACTS}", '{peer_addr: "[10.0.0.2]:5000"}').replace(
        "    facts:", f"    ok: [{ok!r}]\n    facts:")
    problems = messages.check([_write(tmp_path, body)])
    assert len(problems) == 1 and problems[0][1] == 2 and needle in problems[0][2], problems


TWO_WORDINGS = ENTRY.replace("{FACTS}", '{peer_addr: "[10.0.0.2]:5000"}').replace(
    "patterns: ['Connection closed by peer (?P<peer_addr>\\S+)']",
    "patterns: ['Connection closed by peer (?P<peer_addr>\\S+)', 'Connection closed by peer$']")


def test_the_checker_names_file_line_id_and_index_of_a_pattern_no_example_exercises(tmp_path):
    path = _write(tmp_path, TWO_WORDINGS)
    problems = messages.check([path])
    assert len(problems) == 1, problems
    where, line, text = problems[0]
    assert where == messages._display(path) and line == 2
    assert text.startswith("test-entry: pattern 1 'Connection closed by peer$' matches no example line"), text


def test_an_examples_line_exercises_its_pattern_and_must_yield_its_facts(tmp_path):
    covered = TWO_WORDINGS.replace("    proves:", "    examples:\n"
                                   "      - line: 'RuntimeError: [x.cc:1] Connection closed by peer'\n"
                                   "        facts: {}\n    proves:")
    assert messages.check([_write(tmp_path, covered)]) == []
    wrong = covered.replace("        facts: {}", "        facts: {peer_addr: x}")
    problems = messages.check([_write(tmp_path, wrong)])
    assert [(line, text) for _, line, text in problems] == [
        (2, "test-entry: examples.0 'RuntimeError: [x.cc:1] Connection closed by peer' yields {}, "
            "the entry states {'peer_addr': 'x'}")]
    unmatched = covered.replace("line: 'RuntimeError: [x.cc:1] Connection closed by peer'",
                                "line: 'RuntimeError: [x.cc:1] Connection closed by the peer'")
    problems = messages.check([_write(tmp_path, unmatched)])
    assert sorted(text.split(" '")[0] for _, _, text in problems) == [
        "test-entry: examples.0", "test-entry: pattern 1"], problems


def test_the_checker_rejects_an_id_another_file_uses(tmp_path):
    taken = SHIPPED[0].id
    body = ENTRY.replace("{FACTS}", '{peer_addr: "[10.0.0.2]:5000"}').replace("test-entry", taken)
    problems = messages.check([_write(tmp_path, body)])
    assert any("already used" in text for _, _, text in problems)


def test_the_checker_rejects_a_catastrophically_slow_pattern(tmp_path):
    body = ENTRY.replace("{FACTS}", "{}").replace(
        "patterns: ['Connection closed by peer (?P<peer_addr>\\S+)']",
        "patterns: ['Connection closed by peer (?:a|a?)+$']")
    body = body.replace('example: "RuntimeError: [x.cc:1] Connection closed by peer [10.0.0.2]:5000"',
                        'example: "Connection closed by peer aaaa"')
    problems = messages.check([_write(tmp_path, body)])
    assert any("took" in text for _, _, text in problems), problems


def test_invalid_yaml_is_named_with_its_line(tmp_path):
    problems = messages.check([_write(tmp_path, "messages:\n  - id: x\n    bad: [unclosed\n")])
    assert problems and problems[0][1] >= 3 and "invalid YAML" in problems[0][2]


def test_normalization_of_the_named_groups():
    assert messages.normalize({"op": "ALLREDUCE", "ranks": "[3, 1, 3]", "op_count_hex": "2a",
                               "timeout_s": "1.5", "signal": "Signals.SIGKILL", "error": "12",
                               "rank": "7", "peer_addr": " 10.0.0.2<5> ", "seq": None}) == {
        "op": "all_reduce", "ranks": (1, 3), "op_count": 42, "timeout_ms": 1500, "signal": "SIGKILL",
        "error": 12, "rank": 7, "peer_addr": "10.0.0.2<5>"}
    assert messages.normalize({"signal": "-9", "error": "ncclRemoteError"}) == {
        "signal": "SIGKILL", "error": "ncclRemoteError"}


def test_lines_with_literals_numbers_lines_from_one():
    entries, problems = messages.load([SAMPLE])
    assert not problems
    cat = messages.Catalogue(entries)
    text = "x\nRanks 1 failed to pass monitoredBarrier in 5 ms\n\ny NET/IB : Got completion from peer\nz"
    assert [n for n, _ in cat.lines_with_literals(text)] == [2, 4]


def test_pasted_nccl_warn_lines_are_looked_up_by_the_nccl_reader_with_host_and_pid(tmp_path):
    example = next(e for e in SHIPPED if e.project == "nccl" and e.cause == "network_fault"
                   and "peer_addr" in e.facts and " NCCL WARN " in e.example)
    path = tmp_path / "pasted.txt"
    path.write_text("from the three hosts:\n" + example.example + "\n", encoding="utf-8")
    from forensics.ingest import nccl, statements
    from forensics.plugins import Plugins

    kinds = Plugins(autoload=False).each("forensics_sniff", path=str(path), head=path.read_bytes())
    assert nccl.KIND in kinds and statements.KIND not in kinds  # the catalogue's reader leaves them to it
    facts = nccl.parse(str(path), "pasted.txt")
    hit = next(h for h in facts.messages if h.id == example.id)
    assert hit.evidence.line == 2 and hit.rank is None and hit.host and hit.pid is not None
    assert dict(hit.facts) == example.facts


def test_launcher_prefixes_say_which_rank_printed_a_line(tmp_path):
    example = next(e for e in SHIPPED if e.cause == "missing_rank" and "ranks" in e.facts)
    line = example.example
    (tmp_path / "console.log").write_text("[rank0]:" + line.split("]:", 1)[-1] if line.startswith("[rank")
                                          else "[rank0]:" + line, encoding="utf-8")
    from forensics.ingest import statements

    facts = statements.parse(Artifact(statements.KIND, str(tmp_path / "console.log"), "console.log", rank_hint=5))
    hit = next(h for h in facts.messages if h.id == example.id)
    assert hit.rank == 0  # the prefix, not the file's rank hint


def test_forensics_messages_list_and_show(capsys):
    assert main(["messages", "list"]) == 0
    listing = capsys.readouterr().out
    assert all(e.id in listing for e in SHIPPED)
    entry = SHIPPED[0]
    assert main(["messages", "show", entry.id]) == 0
    shown = capsys.readouterr().out
    assert entry.example in shown and entry.source in shown and entry.en in shown
    with_ok = WITH_OK[0]
    assert main(["messages", "show", with_ok.id]) == 0
    assert all(line in capsys.readouterr().out for line in with_ok.ok)
    assert main(["messages", "show", entry.id, "--lang", "zh"]) == 0
    assert entry.zh in capsys.readouterr().out
    assert main(["messages", "show", "no-such-message"]) == 2


def test_a_folder_holding_any_one_catalogued_line_never_exits_2(tmp_path):
    """Whatever single line a user pastes, if the catalogue knows it, the
    folder is read (exit 0 or 1), never refused as unrecognized."""
    refused = []
    for entry in SHIPPED:
        folder = tmp_path / entry.id
        folder.mkdir()
        (folder / "pasted.txt").write_text(entry.example + "\n", encoding="utf-8")
        code = main(["analyze", str(folder), "--no-plugins", "-q", "-j", "1", "-o", str(folder / "report.txt")])
        if code not in (0, 1):
            refused.append(entry.id)
    assert not refused


def test_a_flood_of_one_message_never_hides_another_at_the_end_of_a_log(tmp_path):
    """Readers keep a bounded number of hits per message, not per file: the
    watchdog timeout after 600 repeated lines of another message is read."""
    from forensics.ingest import torchlog

    flood = messages.catalogue().get("c10d-nccl-teardown").example
    timeout = messages.catalogue().get("c10d-nccl-watchdog-timeout").example
    path = tmp_path / "rank3.log"
    path.write_text("\n".join([flood] * 600 + [timeout]) + "\n", encoding="utf-8")
    facts = torchlog.parse(str(path), "rank3.log")
    ids = [h.id for h in facts.messages]
    assert ids.count("c10d-nccl-teardown") == torchlog.MAX_STATED
    assert "c10d-nccl-watchdog-timeout" in ids and facts.messages[-1].evidence.line == 601


def test_mentions_finds_every_literal_wherever_it_stands_and_nothing_else():
    """The anchors only decline texts quickly: every literal, alone, inside
    stack-dump text or cut short by one character, gets the answer of the
    search for all literals."""
    cat = messages.catalogue()
    filler = "    all_reduce (torch/distributed/distributed_c10d.py:3252)\nThread 7877 (idle): \"MainThread\"\n"
    assert not cat.mentions(filler * 50)
    for literal in cat._by_literal:
        for text in (literal, filler + literal + filler, filler[:17] + literal):
            assert cat.mentions(text), literal
        for cut in (literal[1:], literal[:-1]):
            assert cat.mentions(cut) == (cat._any.search(cut) is not None), literal


def test_each_anchor_is_a_tail_of_its_literal_starting_where_text_is_thin():
    assert messages_match._anchor("wait timeout after ") == " timeout after "  # all common: the first non-letter
    assert messages_match._anchor("Watchdog caught collective") == "Watchdog caught collective"
    assert messages_match._anchor("connect to rank NCCL") == "NCCL"  # the first capital, four characters kept
    assert messages_match._anchor("exceeded error retry count") == "xceeded error retry count"  # x is uncommon
    assert messages_match._anchor(".h:") == ".h:"  # short: itself
    for literal in messages.catalogue()._by_literal:
        tail = messages_match._anchor(literal)
        assert literal.endswith(tail) and len(tail) >= min(len(literal), messages_match._ANCHOR_MIN)


def test_the_catalogue_imports_nothing_of_ingest():
    """ingest reads lines through the catalogue; the catalogue must not need
    ingest back (an import cycle): a fresh interpreter loads it and matches a
    line without importing any of forensics.ingest."""
    import subprocess
    import sys

    code = ("import sys; from forensics import messages; "
            "hits = messages.catalogue().match(messages.catalogue().entries[0].example); "
            "print(len(hits), sorted(m for m in sys.modules if m.startswith('forensics.ingest')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split(" ", 1)[0] != "0" and out.strip().endswith("[]"), out
