"""The hooks a forensics plugin can implement. These docstrings are the plugin reference.

A plugin is any module or object with functions marked `@forensics.hookimpl`.
Built-in parsers and rules are registered exactly like third-party ones; a
third-party package exposes its plugin through the entry-point group
`forensics` in its packaging metadata:

    [project.entry-points.forensics]
    myteam = "myteam_forensics.plugin"

Set FORENSICS_DISABLE_PLUGIN_AUTOLOAD=1 to skip entry points (the test suite
does). A plugin that fails to import or raises in a hook becomes a diagnostic
in the report, never a crash.

pluggy calls every hook: `tryfirst`/`trylast`, `firstresult`, `wrapper=True`
and `hookwrapper=True` mean what they mean in pluggy. The newest registration
is called first; the hooks that return lists are joined oldest first.

Data flows one way: parsers see files, rules see the merged `Incident`, graph
rules see the incident plus the reduced wait-for graph. No rule sees a
report; only the renderers a format plugin returns do, once it is final.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Mapping

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from .graph import GraphAnalysis
    from .ingest.facts import Facts
    from .model import Artifact, Finding, Incident, WaitEdge
    from .report import ReportFormat
    from .ruledocs import RuleDoc

PROJECT = "forensics"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def forensics_sniff(path: str, head: bytes) -> str | None:
    """Claim a file: return the artifact kind your parser reads, or None.

    `head` is a sample of the file, already decompressed: its first 64 KiB,
    and for a bigger text file also its last 64 KiB and the windows of its
    middle around your `forensics_sniff_markers` (each sample is one call).
    Every parser that claims a file reads it: a launcher's console log holds
    c10d lines and NCCL lines side by side, and each reader takes its own
    (and counts the others as read, not as unrecognized). Sniff by content
    where you can: users name files anything.

    Precedence is pluggy's order, never one reader asking another's
    sniffer: `tryfirst` claims are listed first, and a `wrapper=True`
    implementation receives at its `yield` the list of kinds claimed and
    returns the list that stands. The message catalogue's reader is such
    a wrapper (`trylast`: the innermost), claiming what no log reader did.
    """


@hookspec
def forensics_sniff_markers() -> tuple:
    """Byte strings that mark a line of your format (NCCL's `b" NCCL INFO "`).

    Discovery searches the middle of a big text file for every reader's
    markers and shows each reader the lines around them, so your format is
    found wherever it stands in a console, not only at its start or end.
    Keep them few and specific: each is one search of the file.
    """


@hookspec(firstresult=True)
def forensics_parse(artifact: "Artifact") -> "Facts | None":
    """Parse an artifact of a kind you claimed; return None for other kinds.
    Plugins registered later are asked first, so a team's parser can take
    over a kind from a built-in one.

    Raise `forensics.ingest.textio.InputError(path, message, line)` when the
    file cannot be read at all; record per-line problems as diagnostics on
    the returned Facts (`facts.diag(line, message)`). Never return lark
    trees or tokens: only model objects.
    """


@hookspec
def forensics_prepare() -> None:
    """Get ready to analyze: load tables, compile patterns, import what the
    rules need. Called once per analysis before the first rule hook, and by
    the CLI while worker processes are still parsing the files, so that
    this work shares the CPUs with parsing instead of following it. Must
    not depend on the incident. Return nothing; raise nothing (a rule that
    cannot get ready says so when its rule hooks are called)."""


@hookspec
def forensics_wait_edges(incident: "Incident") -> "Iterable[WaitEdge] | None":
    """Add wait-for edges: `WaitEdge(waiter, awaited, AND|OR, reason, rule, evidence)`.

    Nodes are global ranks (int), CUDA streams `("stream", rank, name)` or a
    collective instance `("coll", group, seq)`. Give every edge the evidence
    that justifies it.
    """


@hookspec
def forensics_findings(incident: "Incident") -> "Iterable[Finding] | None":
    """Report findings that need only the incident (e.g. a collective mismatch)."""


@hookspec
def forensics_graph_findings(incident: "Incident", analysis: "GraphAnalysis") -> "Iterable[Finding] | None":
    """Report findings that need the reduced wait-for graph: cycles
    (`analysis.cycles`), nodes that can never progress (`analysis.stuck`),
    dead ranks waited on (`analysis.dead_awaited`) and the ranks everyone
    waits for (`analysis.sinks`)."""


@hookspec
def forensics_rules() -> "Iterable[RuleDoc] | None":
    """Describe the rules you implement: one `forensics.ruledocs.RuleDoc`
    per rule id your findings or edges carry (id, title, severity,
    explanation and hint, in English and Chinese). `forensics rules list`
    and the reports show them."""


@hookspec
def forensics_report_formats() -> "Iterable[ReportFormat] | Mapping[str, Callable] | None":
    """Offer output formats for `forensics analyze --format NAME`.

    Return `forensics.report.ReportFormat(name, render, description,
    extension)` objects, or a plain mapping {name: render}. `render(report,
    lang)` gets the finished `Report` (the object the JSON contract
    serializes) and a language ("en" or "zh") and returns the whole output
    as one string; it must not print. The built-in formats (text, json,
    markdown, mermaid, dot, sarif, junit, html) come through this hook too;
    a format registered later under the same name replaces the earlier one.
    """
