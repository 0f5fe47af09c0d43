"""The per-group progress table ("who stopped where"): computed once into
the Report from real Flight Recorder captures of the corpus, and shown by
every format, English and Chinese, from that one computation."""

import json
import re

import pytest

import forensics
from forensics import progress_table
from forensics.plugins import Plugins
from forensics.replay import METADATA
from forensics.report import formats, html, json_report, markdown, text

from conftest import CORPUS, schema_problems

# Flight Recorder alone (torch 2.13, Gloo, 4 ranks): rank 3 completed all_reduce #3 and went on to
# barrier #1 of group 1; ranks 0-2 wait in all_reduce #4 (Gloo's entries stay 'scheduled').
EARLY_EXIT_FR = [
    {"group": "0", "rows": [{"seq": 3, "op": "all_reduce", "state": "completed", "ranks": [3]},
                            {"seq": 4, "op": "all_reduce", "state": "scheduled", "ranks": [0, 1, 2]}]},
    {"group": "1", "rows": [{"seq": 1, "op": "barrier", "state": "scheduled", "ranks": [3]}]},
]
# Three ranks, three two-rank groups (Flight Recorder, stack dumps, logs): each rank waits in all_reduce #4
# of one halo group whose other member completed #3 and is waiting in another.
BOUNDARY_EXCHANGE = [
    {"group": "0", "rows": [{"seq": 3, "op": "all_reduce", "state": "completed", "ranks": [0, 1, 2]}]},
    {"group": "2", "name": "halo_01", "rows": [{"seq": 3, "op": "all_reduce", "state": "completed", "ranks": [1]},
                                               {"seq": 4, "op": "all_reduce", "state": "started", "ranks": [0]}]},
    {"group": "3", "name": "halo_12", "rows": [{"seq": 3, "op": "all_reduce", "state": "completed", "ranks": [2]},
                                               {"seq": 4, "op": "all_reduce", "state": "started", "ranks": [1]}]},
    {"group": "4", "name": "halo_02", "rows": [{"seq": 3, "op": "all_reduce", "state": "completed", "ranks": [0]},
                                               {"seq": 4, "op": "all_reduce", "state": "started", "ranks": [2]}]},
]


def _analyze(name, **args):
    return forensics.analyze(CORPUS / name, jobs=1, plugins=Plugins(autoload=False), exclude=METADATA, **args)


@pytest.fixture(scope="module")
def early_exit():
    return _analyze("real_missing_rank_early_exit_fr", hung=True)


@pytest.fixture(scope="module")
def boundary():
    return _analyze("real_boundary_exchange_3_group_cycle")


def test_the_table_is_computed_into_the_report(early_exit, boundary):
    assert early_exit.verdict == "missing_rank" and early_exit.culprit_ranks == [3]
    assert progress_table.to_json(early_exit.group_progress) == EARLY_EXIT_FR
    assert boundary.verdict == "deadlock"
    assert progress_table.to_json(boundary.group_progress) == BOUNDARY_EXCHANGE


def test_renderers_only_format_what_was_computed(early_exit, monkeypatch):
    """Every format renders with the computation gone: none computes the table again."""
    def computed_again(incident):
        raise AssertionError("a renderer built the progress table")

    monkeypatch.setattr(progress_table, "build", computed_again)
    for name, fmt in formats().items():
        for lang in ("en", "zh"):
            assert fmt.render(early_exit, lang)


def test_json_has_the_table_and_meets_the_schema(early_exit, boundary):
    for report, expected in ((early_exit, EARLY_EXIT_FR), (boundary, BOUNDARY_EXCHANGE)):
        for lang in ("en", "zh"):
            data = json.loads(json_report.render(report, lang))
            assert data["group_progress"] == expected
            assert schema_problems(data) == []


def test_a_report_without_numbered_calls_has_no_table():
    """py-spy dumps alone number no collective: no field, no section."""
    report = _analyze("excerpt_dataloader_stall_pyspy")
    assert report.group_progress == []
    assert "group_progress" not in json.loads(json_report.render(report))
    assert "Progress by group" not in text.render(report) and 'id="progress"' not in html.render(report)


def test_text_shows_group_then_seq_rows(early_exit, boundary):
    lines = text.render(early_exit).splitlines()
    at = lines.index("Progress by group (the furthest collective each rank reached):")
    assert [" ".join(line.split()) for line in lines[at + 1:at + 5]] == [
        "group seq op state ranks",
        "0 3 all_reduce completed 3",
        "4 all_reduce scheduled 0-2",
        "1 1 barrier scheduled 3"]
    column = lines[at + 1].index("seq")  # one column: every row's seq starts under the heading
    assert (lines[at + 2][column], lines[at + 3][column], lines[at + 4][column]) == ("3", "4", "1")
    zh = text.render(early_exit, "zh").splitlines()
    at = zh.index("各通信组进度（每个 Rank 到达的最远集合通信）:")
    assert zh[at + 1].split() == ["通信组", "序号", "操作", "状态", "Rank"]
    assert zh[at + 2].split() == ["0", "3", "all_reduce", "completed", "3"]
    named = [" ".join(line.split()) for line in text.render(boundary).splitlines()]
    at = named.index("Progress by group (the furthest collective each rank reached):")
    assert named[at + 1:at + 9] == [
        "group seq op state ranks", "0 3 all_reduce completed 0-2",
        "2 (halo_01) 3 all_reduce completed 1", "4 all_reduce started 0",
        "3 (halo_12) 3 all_reduce completed 2", "4 all_reduce started 1",
        "4 (halo_02) 3 all_reduce completed 0", "4 all_reduce started 2"]


def test_the_terminal_shows_the_same_rows(early_exit):
    shown = text.render_terminal(early_exit, "en", width=120, color=False)
    rows = [" ".join(line.split()) for line in shown.splitlines()]
    at = rows.index("Progress by group (the furthest collective each rank reached):")
    assert rows[at + 1:at + 5] == ["group seq op state ranks", "0 3 all_reduce completed 3",
                                   "4 all_reduce scheduled 0-2", "1 1 barrier scheduled 3"]


def test_markdown_is_a_table_with_the_culprits_rows_picked_out(early_exit):
    for lang, title, head in (("en", "**Progress by group (the furthest collective each rank reached):**",
                               "| group | seq | op | state | ranks |"),
                              ("zh", "**各通信组进度（每个 Rank 到达的最远集合通信）:**", "| 通信组 | 序号 | 操作 | 状态 | Rank |")):
        lines = markdown.render(early_exit, lang).splitlines()
        at = lines.index(title)
        assert lines[at - 1] == "" and lines[at + 1] == ""
        assert lines[at + 2:at + 7] == [head, "|---|---|---|---|---|",
                                        "| **0** | 3 | all_reduce | completed | 3 |",
                                        "|   | 4 | all_reduce | scheduled | 0-2 |",
                                        "| **1** | 1 | barrier | scheduled | 3 |"], lines[at:at + 7]


def test_html_has_a_section_a_row_per_seq_and_the_group_spanning_its_rows(early_exit, boundary):
    page = html.render(boundary)
    section = re.search(r'<section id="progress">.*?</section>', page).group(0)
    assert '<a href="#progress">Progress by group</a>' in page
    rows = re.findall(r"<tr( class=\"culprit\")?>(.*?)</tr>", section)[1:]
    cells = [(bool(c), re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", body)) for c, body in rows]
    assert cells == [(True, ["0", "3", "all_reduce", "completed", "0-2"]),
                     (True, ["2 (halo_01)", "3", "all_reduce", "completed", "1"]),
                     (True, ["4", "all_reduce", "started", "0"]),
                     (True, ["3 (halo_12)", "3", "all_reduce", "completed", "2"]),
                     (True, ["4", "all_reduce", "started", "1"]),
                     (True, ["4 (halo_02)", "3", "all_reduce", "completed", "0"]),
                     (True, ["4", "all_reduce", "started", "2"])]
    assert section.count('rowspan="2"') == 3
    zh = html.render(early_exit, "zh")
    section = re.search(r'<section id="progress">.*?</section>', zh).group(0)
    assert "<h2>各通信组进度</h2>" in section and "<th>通信组</th><th>序号</th>" in section
    assert '<tr class="culprit"><td class="group" rowspan="2">0</td><td>3</td>' in section
    assert "<tr><td>4</td><td>all_reduce</td><td>scheduled</td><td>0-2</td></tr>" in section  # not a culprit row
