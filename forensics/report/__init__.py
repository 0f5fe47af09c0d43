"""Reporters: each renders the same Report object; none sees artifacts or rules.

Every format, built-in or a team's, is a `ReportFormat` offered through the
`forensics_report_formats` hook (see forensics/hookspecs.py). The built-in
ones come from this module, registered as a built-in plugin like the
readers and rules, through the same door.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from ..hookspecs import hookimpl

BUILTIN_PLUGIN_NAME = "forensics.report"


class FormatUnavailable(Exception):
    """A format is registered but cannot render here (its module is missing)."""


@dataclass(frozen=True)
class ReportFormat:
    name: str
    render: Callable[..., str]             # render(report, lang) -> str
    description: str = ""
    extension: str = ".txt"
    # For a terminal: render_terminal(report, lang, width=..., color=...) -> str.
    # Piped output and files always get `render`.
    render_terminal: Callable[..., str] | None = None


def _module_render(module: str, fallback_hint: str = ""):
    """A render function that imports its module on first use, so a format
    whose module is absent fails when chosen, not when the CLI starts."""
    def render(report, lang: str = "en") -> str:
        try:
            mod = importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{module}":
                raise
            raise FormatUnavailable(f"the {module} format is not available in this installation "
                                    f"(forensics/report/{module}.py is missing){fallback_hint}") from None
        return mod.render(report, lang)
    render.__name__ = f"render_{module}"
    return render


def _text_terminal(report, lang: str = "en", width: int | None = None, color: bool = True) -> str:
    from . import text
    return text.render_terminal(report, lang, width=width, color=color)


class _BuiltinFormats:
    """The formats that ship with forensics, registered like any plugin's."""

    @hookimpl(trylast=True)
    def forensics_report_formats(self):
        return [
            ReportFormat("text", _module_render("text"), "plain text; styled and wrapped on a terminal",
                         ".txt", render_terminal=_text_terminal),
            ReportFormat("json", _module_render("json_report"), "the stable forensics.report/1 contract",
                         ".json"),
            ReportFormat("markdown", _module_render("markdown"),
                         "for tickets and PR comments, with a Mermaid wait-for graph", ".md"),
            ReportFormat("mermaid", _module_render("mermaid"), "the wait-for graph alone, Mermaid", ".mmd"),
            ReportFormat("dot", _module_render("dot"), "the wait-for graph alone, Graphviz DOT", ".dot"),
            ReportFormat("sarif", _module_render("sarif"), "SARIF 2.1.0: findings with evidence locations",
                         ".sarif"),
            ReportFormat("junit", _module_render("junit"), "JUnit XML: one test case per finding", ".xml"),
            ReportFormat("html", _module_render("html", "; use --format markdown or text"),
                         "one self-contained page with an SVG graph", ".html"),
        ]


BUILTIN = _BuiltinFormats()


@hookimpl(trylast=True)
def forensics_report_formats():
    """This module is a built-in plugin (forensics.plugins.BUILTIN_PLUGINS)."""
    return BUILTIN.forensics_report_formats()


def _as_formats(answer) -> list[ReportFormat]:
    if isinstance(answer, ReportFormat):
        return [answer]
    if isinstance(answer, dict) or hasattr(answer, "items"):
        return [value if isinstance(value, ReportFormat) else ReportFormat(str(name), value)
                for name, value in answer.items()]
    return [item for item in answer if isinstance(item, ReportFormat)]


def formats(plugins=None) -> dict[str, ReportFormat]:
    """Every format the plugins offer, by name. The built-in plugin answers
    first (`trylast`), the others after it in registration order, and a
    later format of the same name replaces an earlier one. A plugin whose
    hook raises becomes a diagnostic on `plugins`, never a crash."""
    if plugins is None:
        return {f.name: f for f in _as_formats(BUILTIN.forensics_report_formats())}
    if plugins.pm.get_plugin(BUILTIN_PLUGIN_NAME) is None:  # a plugin set built without the built-ins
        plugins.register(BUILTIN, name=BUILTIN_PLUGIN_NAME)
    found: dict[str, ReportFormat] = {}
    for answer in reversed(plugins.each("forensics_report_formats")):  # oldest first
        for fmt in _as_formats(answer):
            found[fmt.name] = fmt
    return found


# The built-in renderers by name, for callers that want a plain function.
FORMATS = {name: fmt.render for name, fmt in formats().items()}


def render(report, fmt: str = "text", lang: str = "en", plugins=None) -> str:
    table = formats(plugins)
    if fmt not in table:
        raise KeyError(f"unknown format {fmt!r} (known: {', '.join(sorted(table))})")
    return table[fmt].render(report, lang)
