"""Plugins go through the same hooks as the built-ins, and a broken one is a diagnostic."""

import json
import os
import sys
import textwrap
from dataclasses import replace

import pytest

from forensics import hookimpl
from forensics.model import Finding, WaitEdge
from forensics.plugins import Plugins

from conftest import CORPUS
from helpers import incident_of, report_of

HEALTHY_CHAIN = {0: {"current_op": "recv", "waiting_for_ranks": [1]},
                 1: {"current_op": "recv", "waiting_for_ranks": [2]},
                 2: {"current_op": "compute"}}


class ComputeWaitsForRankZero:
    """A team knows rank 2's 'compute' is really a blocking host-side wait on rank 0."""

    @hookimpl
    def forensics_wait_edges(self, incident):
        return [WaitEdge(2, 0, reason="custom barrier in our framework", rule="team-barrier")]


def test_plugin_edge_changes_the_verdict():
    assert report_of(HEALTHY_CHAIN).verdict == "healthy"
    plugins = Plugins(autoload=False, extra=(ComputeWaitsForRankZero(),))
    report = report_of(HEALTHY_CHAIN, plugins=plugins)
    assert report.verdict == "deadlock"
    assert report.cycles == [[0, 1, 2, 0]]
    from forensics.graph import edges_between
    edge = edges_between(report.analysis.graph, 2, 0)[0]
    assert edge.rule == "team-barrier"


class Exploding:
    @hookimpl
    def forensics_findings(self, incident):
        raise RuntimeError("bug in a team rule")


class ExtraFinding:
    @hookimpl
    def forensics_findings(self, incident):
        return [Finding("team-note", "note", "info", (1,), "rank 1 runs our old kernel")]


def test_broken_plugin_is_a_diagnostic_and_others_still_run():
    plugins = Plugins(autoload=False, extra=(Exploding(), ExtraFinding()))
    report = report_of(HEALTHY_CHAIN, plugins=plugins)
    assert report.verdict == "healthy"
    assert any(f.rule == "team-note" for f in report.findings)
    assert any("bug in a team rule" in d.message for d in report.diagnostics)


MISMATCH = CORPUS / "synthetic_watchdog_numel_mismatch_rank1"  # rank 1 passes other element counts
TEAM_HINT = "our data loader pads rank 1's last batch: see the team runbook"


class TeamHintWrapper:
    """A new-style wrapper: it receives what every other implementation answered and hands on its own list."""

    seen = None

    @hookimpl(wrapper=True)
    def forensics_findings(self, incident):
        answers = yield
        self.seen = [f.rule for answer in answers for f in answer]
        return [[replace(f, hint=TEAM_HINT) if f.rule == "collective-mismatch" else f for f in answer]
                for answer in answers]


class TeamHintOldWrapper:
    """The same as an old-style `hookwrapper=True`, which replaces pluggy's Result."""

    seen = None

    @hookimpl(hookwrapper=True)
    def forensics_findings(self, incident):
        outcome = yield
        answers = outcome.get_result()
        self.seen = [f.rule for answer in answers for f in answer]
        outcome.force_result([[replace(f, hint=TEAM_HINT) if f.rule == "collective-mismatch" else f
                               for f in answer] for answer in answers])


@pytest.mark.parametrize("wrapper", [TeamHintWrapper, TeamHintOldWrapper])
def test_a_wrapper_sees_the_real_findings_and_its_change_reaches_the_report(wrapper):
    from forensics import analyze
    from forensics.report import render

    plain = analyze(MISMATCH, plugins=Plugins(autoload=False))
    assert plain.verdict == "collective_mismatch"
    assert all(f.hint != TEAM_HINT for f in plain.findings)
    team = wrapper()
    report = analyze(MISMATCH, plugins=Plugins(autoload=False, extra=(team,)))
    # every other implementation's findings, the built-in rule's two among them
    assert team.seen.count("collective-mismatch") == 2 and "stated-observation" in team.seen
    assert report.verdict == "collective_mismatch" and report.culprit_ranks == plain.culprit_ranks
    changed = [f for f in report.findings if f.rule == "collective-mismatch"]
    assert len(changed) == 2 and all(f.hint == TEAM_HINT for f in changed)
    assert [f.rule for f in report.findings] == [f.rule for f in plain.findings]
    assert TEAM_HINT in json.loads(render(report, "json"))["findings"][0]["hint"]
    assert not report.diagnostics or all("plugin" not in d.path for d in report.diagnostics)


class Ordered:
    """Records when pluggy calls it; answers one edge whose reason is its name."""

    def __init__(self, name, calls, **opts):
        self.name, self.calls = name, calls

        @hookimpl(**opts)
        def forensics_wait_edges(incident):
            calls.append(name)
            return [WaitEdge(0, 1, reason=name, rule="team-order")]

        self.forensics_wait_edges = forensics_wait_edges


def test_tryfirst_and_trylast_set_the_order_of_calls():
    calls = []
    plugins = Plugins(autoload=False, builtins=(), extra=(
        Ordered("last", calls, trylast=True), Ordered("old", calls), Ordered("first", calls, tryfirst=True),
        Ordered("new", calls)))
    edges = plugins.call("forensics_wait_edges", incident=incident_of(HEALTHY_CHAIN))
    assert calls == ["first", "new", "old", "last"]  # pluggy's order: tryfirst, newest to oldest, trylast
    assert [e.reason for e in edges] == ["last", "old", "new", "first"]  # `call` lists them the other way round
    assert plugins.diagnostics == []


class TeamParser:
    """Claims py-spy dumps with a parser of its own; registered after the built-in py-spy reader."""

    def __init__(self, **opts):
        @hookimpl(**opts)
        def forensics_parse(artifact):
            from forensics.ingest.facts import Facts

            return Facts("team-py-spy", artifact.display) if artifact.kind == "py-spy" else None

        self.forensics_parse = forensics_parse


def test_a_trylast_parser_is_asked_after_the_builtin_one_of_a_firstresult_hook():
    from forensics.model import Artifact

    dump = str(CORPUS / "excerpt_dataloader_stall_pyspy" / "rank0.pyspy.txt")
    artifact = Artifact("py-spy", dump, "rank0.pyspy.txt", 0)
    assert Plugins(autoload=False, extra=(TeamParser(),)).first("forensics_parse", artifact=artifact).kind \
        == "team-py-spy"
    assert Plugins(autoload=False, extra=(TeamParser(trylast=True),)).first(
        "forensics_parse", artifact=artifact).kind == "py-spy"


class BrokenWrappers:
    """Wrappers that fail before their yield, after it, and by yielding twice."""

    @hookimpl(wrapper=True)
    def forensics_findings(self, incident):
        raise RuntimeError("team wrapper broke before its yield")
        yield

    @hookimpl(wrapper=True)
    def forensics_wait_edges(self, incident):
        answers = yield
        answers.clear()  # half-done work of a wrapper that then fails is its own; the others' lists stand
        raise RuntimeError("team wrapper broke after its yield")

    @hookimpl(hookwrapper=True)
    def forensics_graph_findings(self, incident, analysis):
        yield
        yield

    @hookimpl(wrapper=True)
    def forensics_rules(self):
        yield
        return [object()]  # not one collection per implementation


def test_a_broken_wrapper_is_a_diagnostic_and_the_others_results_stand():
    plugins = Plugins(autoload=False, extra=(BrokenWrappers(), ExtraFinding()))
    report = report_of(HEALTHY_CHAIN, plugins=plugins)
    plain = report_of(HEALTHY_CHAIN)
    assert report.verdict == plain.verdict == "healthy"
    assert any(f.rule == "team-note" for f in report.findings)
    assert set(report.rules) == set(plain.rules)
    messages = [d.message for d in report.diagnostics if d.path.startswith("<plugin ")]
    assert len(messages) == 4
    assert any("forensics_findings raised RuntimeError: team wrapper broke before its yield" in m for m in messages)
    assert any("forensics_wait_edges raised RuntimeError: team wrapper broke after its yield" in m for m in messages)
    assert any("forensics_graph_findings raised RuntimeError" in m and "second" in m for m in messages)
    assert any("forensics_rules raised TypeError" in m for m in messages)


class NotAGenerator:
    @hookimpl(wrapper=True)
    def forensics_findings(self, incident):
        return []


def test_a_wrapper_that_does_not_yield_is_not_registered_and_says_why():
    plugins = Plugins(autoload=False, extra=(NotAGenerator(), ExtraFinding()))
    (diagnostic,) = plugins.diagnostics
    assert "plugin not registered: forensics_findings is declared a wrapper but does not yield" in diagnostic.message
    assert any(f.rule == "team-note" for f in report_of(HEALTHY_CHAIN, plugins=plugins).findings)


class ParserMeetsBadFile:
    """A wrapper around parsing: the file's own error passes through it, as without it."""

    seen = []

    @hookimpl(wrapper=True)
    def forensics_parse(self, artifact):
        try:
            return (yield)
        except Exception as exc:
            self.seen.append(type(exc).__name__)
            raise


def test_an_input_error_leaves_the_parse_hook_through_wrappers(tmp_path):
    from forensics.ingest.textio import InputError
    from forensics.model import Artifact

    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text('{"0": {"current_op": ')
    team = ParserMeetsBadFile()
    plugins = Plugins(autoload=False, extra=(team,))
    with pytest.raises(InputError):
        plugins.first("forensics_parse", artifact=Artifact("snapshot", str(snapshot), "snapshot.json"))
    assert team.seen == ["InputError"]
    assert plugins.diagnostics == []


def _install_fake_dist(root, module_source, module_name="team_plugin"):
    (root / f"{module_name}.py").write_text(textwrap.dedent(module_source))
    dist = root / f"{module_name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module_name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[forensics]\nteam = {module_name}\n")


PLUGIN_SOURCE = """
    from forensics import hookimpl
    from forensics.model import WaitEdge

    @hookimpl
    def forensics_wait_edges(incident):
        return [WaitEdge(2, 0, reason="from an entry point", rule="ep-edge")]
"""


def test_entry_point_plugin_is_autoloaded(run_cli, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_fake_dist(site, PLUGIN_SOURCE)
    env = {"PYTHONPATH": str(site), "FORENSICS_DISABLE_PLUGIN_AUTOLOAD": ""}
    with_plugin = run_cli("analyze", CORPUS / "seed_healthy_chain", "-f", "json", env=env)
    assert json.loads(with_plugin.stdout)["verdict"] == "deadlock"
    disabled = run_cli("analyze", CORPUS / "seed_healthy_chain", "-f", "json",
                       env={**env, "FORENSICS_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert json.loads(disabled.stdout)["verdict"] == "healthy"
    no_plugins = run_cli("analyze", CORPUS / "seed_healthy_chain", "-f", "json", "--no-plugins", env=env)
    assert json.loads(no_plugins.stdout)["verdict"] == "healthy"


def test_entry_point_that_fails_to_import_is_a_diagnostic(run_cli, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_fake_dist(site, "raise ImportError('missing dependency of the team plugin')\n")
    env = {"PYTHONPATH": str(site), "FORENSICS_DISABLE_PLUGIN_AUTOLOAD": ""}
    result = run_cli("analyze", CORPUS / "seed_p2p_deadlock", "-f", "json", env=env)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["verdict"] == "deadlock"
    assert any("missing dependency of the team plugin" in d["message"] for d in report["diagnostics"])


def test_a_team_parser_can_claim_a_new_kind(tmp_path):
    from forensics import analyze
    from forensics.ingest.facts import Facts
    from forensics.model import CommOp, Evidence, RankState

    class CsvParser:
        @hookimpl
        def forensics_sniff(self, path, head):
            return "team-csv" if head.startswith(b"rank,op,peer") else None

        @hookimpl
        def forensics_parse(self, artifact):
            if artifact.kind != "team-csv":
                return None
            facts = Facts("team-csv", artifact.display)
            with open(artifact.path) as handle:
                for number, line in enumerate(handle, 1):
                    if number == 1:
                        continue
                    rank, op, peer = line.strip().split(",")
                    ev = Evidence(artifact.display, number, line.strip())
                    facts.ranks.append(RankState(int(rank), activity="blocked",
                                                 current_op=CommOp(op, peers=(int(peer),), evidence=ev),
                                                 evidence=ev))
            return facts

    (tmp_path / "ours.csv").write_text("rank,op,peer\n0,send,1\n1,send,0\n")
    report = analyze(tmp_path, plugins=Plugins(autoload=False, extra=(CsvParser(),)))
    assert report.verdict == "deadlock"
    assert report.findings[0].evidence[0].cite() == "ours.csv:2"


def test_entry_point_prefilter_sees_what_importlib_metadata_would(tmp_path, monkeypatch):
    from forensics.plugins import may_declare_entry_points

    site = tmp_path / "site"
    site.mkdir()
    other = site / "other_tool-2.0.dist-info"
    other.mkdir()
    (other / "entry_points.txt").write_text("[console_scripts]\nother = other_tool:main\n")
    (site / "old_style.egg-info").write_text("Metadata-Version: 1.0\n")  # a file, not a folder
    monkeypatch.setattr(sys, "path", [str(site), str(tmp_path / "gone")])
    # Only the path's own finder: importing some libraries adds one that lists distributions
    # (distributed brings importlib_metadata's MetadataPathFinder), and then importlib decides.
    import importlib.machinery
    plain = [f for f in sys.meta_path if f is importlib.machinery.PathFinder or not hasattr(f, "find_distributions")]
    lister = type("Lister", (), {"find_distributions": lambda self, context=None: iter(())})()
    monkeypatch.setattr(sys, "meta_path", [*plain, lister])
    assert may_declare_entry_points("forensics")
    monkeypatch.setattr(sys, "meta_path", plain)
    assert not may_declare_entry_points("forensics")
    assert may_declare_entry_points("console_scripts")
    _install_fake_dist(site, PLUGIN_SOURCE)  # declares [forensics]
    assert may_declare_entry_points("forensics")
    (site / "team_plugin-1.0.dist-info" / "entry_points.txt").write_text(" [ forensics ]\nteam = team_plugin\n")
    assert may_declare_entry_points("forensics")
    (site / "team_plugin-1.0.dist-info" / "entry_points.txt").write_text("[forensics_extra]\nteam = x\n")
    assert not may_declare_entry_points("forensics")
    zipped = tmp_path / "plugins.zip"
    zipped.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip archive on the path: importlib decides
    monkeypatch.setattr(sys, "path", [str(site), str(zipped)])
    assert may_declare_entry_points("forensics")


def test_the_command_still_runs_plugins_atexit_handlers(run_cli, tmp_path):
    """`forensics` ends with os._exit to skip the interpreter's teardown;
    what plugins registered with atexit runs first all the same."""
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "flushed.txt"
    _install_fake_dist(site, PLUGIN_SOURCE + f"""
    import atexit

    atexit.register(lambda: open({str(marker)!r}, "w").write("team log flushed"))
    """)
    env = {"PYTHONPATH": str(site), "FORENSICS_DISABLE_PLUGIN_AUTOLOAD": ""}
    result = run_cli("analyze", CORPUS / "seed_healthy_chain", "-f", "json", env=env)
    assert result.returncode == 1 and json.loads(result.stdout)["verdict"] == "deadlock"
    assert marker.read_text() == "team log flushed"


def _hookimpl_names(module_name):
    import importlib

    import pluggy

    from forensics import hookspecs

    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(importlib.import_module(module_name), name=module_name)
    return {name for name in dir(manager.hook) if name.startswith("forensics_")
            and getattr(manager.hook, name).get_hookimpls()}


def test_no_rule_plugin_implements_an_early_hook():
    """A deferred plugin must never be missed by discovery, parsing or the
    choice of format: those hooks run before it is registered."""
    from forensics.plugins import EARLY_HOOKS, READER_PLUGINS, RULE_PLUGINS

    for name in RULE_PLUGINS:
        implemented = _hookimpl_names(name)
        assert implemented, name
        assert not implemented & EARLY_HOOKS, name
    assert _hookimpl_names(READER_PLUGINS[0]) <= EARLY_HOOKS


def _order(plugins):
    hooks = plugins.pm.hook
    return {name: [impl.plugin_name for impl in getattr(hooks, name).get_hookimpls()]
            for name in dir(hooks) if name.startswith("forensics_")}


def test_deferred_rules_register_on_the_first_later_hook_in_the_same_order():
    from forensics.plugins import RULE_PLUGINS

    eager = Plugins(autoload=False)
    deferred = Plugins(autoload=False, defer_rules=True)
    assert deferred.pending == RULE_PLUGINS
    assert deferred.each("forensics_sniff", path="x.log", head=b"\x80\x02}q\x00.") == []
    assert deferred.first("forensics_report_formats") is not None
    assert deferred.pending == RULE_PLUGINS  # early hooks do not register them
    docs = deferred.call("forensics_rules")
    assert deferred.pending == ()
    assert {doc.id for doc in docs} == {doc.id for doc in eager.call("forensics_rules")}
    assert _order(deferred) == _order(eager)


def test_a_plugin_registered_on_a_deferred_set_comes_after_the_builtins():
    team = ComputeWaitsForRankZero()
    eager = Plugins(autoload=False, extra=(team,))
    deferred = Plugins(autoload=False, extra=(team,), defer_rules=True)
    assert deferred.pending == ()
    assert _order(deferred) == _order(eager)
    report = report_of(HEALTHY_CHAIN, plugins=deferred)
    assert report.verdict == "deadlock"


FORK_SPY = """
import json, sys
import forensics.ingest as ingest, forensics.ingest.workers as workers, forensics.cli as cli
ingest.PARALLEL_MIN = 2
seen = []
run = workers.run
def spy(*args, **kwargs):
    seen.append(sorted(m for m in ("forensics.yamlrules", "forensics.rules.wait_for_cycle", "forensics.analysis",
                                   "networkx") if m in sys.modules))
    return run(*args, **kwargs)
workers.run = spy
code = cli.main(sys.argv[1:])
print(json.dumps({"before_fork": seen, "code": code}), file=sys.stderr)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the parse workers are forked only where fork exists")
def test_the_command_forks_its_parsers_before_importing_rules_and_analysis(tmp_path):
    """The rule plugins, the analysis and networkx load in the parent while
    the workers parse; the report is the same."""
    import subprocess

    incident = CORPUS / "real_missing_rank_early_exit_fr"
    result = subprocess.run([sys.executable, "-c", FORK_SPY, "analyze", str(incident), "-f", "json", "--jobs", "2",
                             "--hung"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "FORENSICS_DISABLE_PLUGIN_AUTOLOAD": "1"})
    spied = json.loads(result.stderr.strip().splitlines()[-1])
    assert spied["before_fork"] == [[]]
    report = json.loads(result.stdout)
    assert report["verdict"] == "missing_rank"
    assert spied["code"] == 1
