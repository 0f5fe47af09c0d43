"""The text and Markdown reports of every corpus incident, English and
Chinese, say each fact once: no sentence twice, no parenthesis right after
another, no `exit code -15 (SIGTERM): exit code -15 (SIGTERM)`, no `1
classes`; the Markdown timeline is a table, not list items."""

import re

import pytest

from forensics.report import markdown, text

from conftest import CORPUS, corpus_report

INCIDENTS = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.yaml").is_file())

CITATION = re.compile(r" ?\[[^\[\]\s]+(?::-?\d+)?(?:, [^\[\]\s]+(?::-?\d+)?)*\]")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(\[])|(?<=[。！？])")
QUOTE = re.compile(r"^\s+- \S+:-?\d+: ")  # the narrative's Evidence lines quote artifact lines verbatim
# A parenthesis (with words in it, not `rank(s)` or a tuple) right after another.
DOUBLED = re.compile(r"(?<![\w(（])[(（](?=[^)）]*[A-Za-z\u4e00-\u9fff]{3})[^()（）]*"
                     r"(?:[(（][^()（）]*[)）][^()（）]*)*[)）] ?[(（]")
STUTTER = re.compile(r"(?<![\w'])([^:\n]{6,80}?): \1(?![\w'])")
PLURAL = re.compile(r"(?<![\d,.])1 (?:classes|ranks|files|dumps|frames)\b"
                    r"|(?<![\d,.])(?:0|[2-9]|\d{2,}) (?:class|file|dump)\b(?!s|\()")


def report(incident):
    """The incident's report, shared by the session's corpus-wide tests; skipped when nothing in it is
    readable (tests/test_narrative_golden.py holds such an incident to being a known miss)."""
    found = corpus_report(incident)
    if isinstance(found, Exception):
        pytest.skip("no report: nothing in the incident is readable")
    return found


def prose(report, lang) -> list[str]:
    """The report's own lines: no table cells, no stack frames, no quoted artifact lines."""
    return [str(item) for item in text.blocks(report, lang)
            if not isinstance(item, text.Table) and item.style != "stack" and not QUOTE.match(item)]


def sentences(lines):
    for line in lines:
        for sentence in SENTENCE_END.split(CITATION.sub("", line).strip()):
            sentence = sentence.strip(" -↳")
            if len(sentence) >= 20:
                yield sentence


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("incident", INCIDENTS)
def test_the_text_report_says_each_fact_once(incident, lang):
    found = report(incident)
    lines = prose(found, lang)
    seen, twice = set(), []
    for sentence in sentences(lines):
        if sentence in seen:
            twice.append(sentence)
        seen.add(sentence)
    assert twice == [], f"said twice: {twice[:3]}"
    body = "\n".join(lines)
    assert not DOUBLED.search(body), DOUBLED.search(body).group(0)[-120:]
    assert not STUTTER.search(body), STUTTER.search(body).group(0)
    assert not PLURAL.search(body), PLURAL.search(body).group(0)


@pytest.mark.parametrize("incident", INCIDENTS)
def test_the_markdown_timeline_is_a_table(incident):
    found = report(incident)
    if not found.timeline:
        return
    out = markdown.render(found)
    if "**Timeline" not in out:
        return
    lines = out.split("**Timeline", 1)[1].split("\n")[2:]
    rows = lines[:lines.index("")]
    assert rows[0] == "| time | who | role | what | evidence |" and rows[1] == "|---|---|---|---|---|"
    for row in rows[2:]:
        cells = re.split(r"(?<!\\)\|", row)[1:-1]
        assert len(cells) == 5, row
    # No event line became a list item or emphasis with a stray `*`.
    assert not re.search(r"^\*\s+(?:\?|\d\d-\d\d \d\d:)", out, re.M)


def test_the_checks_catch_what_they_look_for():
    """The patterns above fire on the faults they name."""
    assert DOUBLED.search("which sent nothing (is its host up?) (rank 2: unknown)")
    assert not DOUBLED.search("3 rank(s) (0-2) wait") and not DOUBLED.search("KeyError: ('0', 0) (at x)")
    assert STUTTER.search("exit code -15 (SIGTERM): exit code -15 (SIGTERM): stopped by its launcher")
    assert not STUTTER.search("needs rank 0: rank 0's all_reduce")
    assert PLURAL.search("(main thread, 2 ranks, 1 classes)") and PLURAL.search("Not read (3 file): x")
    assert not PLURAL.search("(main thread, 2 ranks, 1 class)")
    assert list(sentences(["A fact stated once here. A fact stated once here. [a.log:3]"])) == \
        ["A fact stated once here.", "A fact stated once here."]


def test_a_repeated_sentence_is_left_out_and_a_different_fact_kept():
    from forensics.once import Said

    said = Said()
    said.add("rank 1: all_reduce #3 ran 600047 ms past its timeout [a.log:6]")
    said.add("The watchdog saw collective #seq run past its timeout (hung peers, status 12: never acknowledged). "
             "The rank number is group-local. [a.log:6]")
    # Everything new gone: a pointer between the lead-in and the id.
    assert said.unsaid("5 line(s) from rank 2, rank 7: The watchdog saw collective #seq run past its timeout "
                       "(hung peers, status 12: never acknowledged). The rank number is group-local. (c10d-x)",
                       "see above") == "5 line(s) from rank 2, rank 7: see above (c10d-x)"
    # Something new left: the repeat just goes.
    assert said.unsaid("A new fact about rank 4 here. The rank number is group-local. (c10d-x)", "see above") == \
        "A new fact about rank 4 here. (c10d-x)"
    # The same words about another rank are another fact.
    message = "rank 2: all_reduce #3 ran 600047 ms past its timeout"
    assert said.unsaid(message, "see above") == message
