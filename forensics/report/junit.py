"""JUnit XML: one testsuite whose test cases are the findings, for CI
systems that show test reports. An error finding is a failure; warnings
and notes pass, with their text in system-out.

`testsuite()` is the writer, shaped like `forensics replay --junit`
(same header, suite and case attributes), with the characters XML 1.0
forbids (NUL, ANSI escape, other controls from broken logs) replaced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from xml.sax.saxutils import escape as _escape
from xml.sax.saxutils import quoteattr as _quoteattr

from ..ranges import compact
from ..words import lang_of, localized
from .safe_text import neutralize

_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def clean(text) -> str:
    """Controls and bidi characters as visible escapes (safe_text; tab and
    line breaks stay), and what XML 1.0 cannot hold at all as U+FFFD."""
    return _NOT_XML.sub("\ufffd", neutralize(text, keep="\t\n\r"))


def escape(text) -> str:
    return _escape(clean(text))


def quoteattr(text) -> str:
    return _quoteattr(clean(text), {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


@dataclass
class Case:
    name: str
    classname: str
    outcome: str = "pass"          # pass | failure | error | skipped
    message: str = ""
    body: str = ""
    output: str = ""               # system-out
    seconds: float = 0.0


@dataclass
class Suite:
    name: str
    cases: list[Case] = field(default_factory=list)
    properties: dict = field(default_factory=dict)


def testsuite(suite: Suite) -> str:
    count = {kind: sum(1 for c in suite.cases if c.outcome == kind) for kind in ("failure", "error", "skipped")}
    total = sum(c.seconds for c in suite.cases)
    out = ['<?xml version="1.0" encoding="utf-8"?>',
           f'<testsuite name={quoteattr(suite.name)} tests="{len(suite.cases)}" failures="{count["failure"]}" '
           f'errors="{count["error"]}" skipped="{count["skipped"]}" time="{total:.3f}">']
    if suite.properties:
        out.append("  <properties>")
        out.extend(f"    <property name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in suite.properties.items())
        out.append("  </properties>")
    for case in suite.cases:
        out.append(f"  <testcase classname={quoteattr(case.classname)} name={quoteattr(case.name)} "
                   f'time="{case.seconds:.3f}">')
        if case.outcome in ("failure", "error", "skipped"):
            out.append(f"    <{case.outcome} message={quoteattr(case.message)}>{escape(case.body)}</{case.outcome}>")
        if case.output:
            out.append(f"    <system-out>{escape(case.output)}</system-out>")
        out.append("  </testcase>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"


# The words this format adds, by language.
WORDS = {"en": {"hint": "Hint: "}, "zh": {"hint": "建议: "}}


def to_suite(report, lang: str = "en") -> Suite:
    words = WORDS[lang_of(lang)]
    suite = Suite("forensics-analyze", properties={
        "verdict": report.verdict,
        "culprit_ranks": compact(report.culprit_ranks) if report.culprit_ranks else "-"})
    seen: dict[str, int] = {}
    for finding in report.findings:
        message, hint = localized(finding, "message", lang), localized(finding, "hint", lang)
        name = f"{finding.rule} [ranks {compact(finding.ranks)}]" if finding.ranks else finding.rule
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:  # test-case names must stay distinct for CI dashboards
            name += f" #{seen[name]}"
        details = [message]
        if hint:
            details.append(words["hint"] + hint)
        details += [f"{e.cite()}: {e.text}" if e.text else e.cite() for e in finding.evidence]
        if finding.symptom_of:
            details.append(f"symptom of {finding.symptom_of}")
        if finding.detail_of:
            details.append(f"detail of {finding.detail_of}")
        case = Case(name, f"forensics.{finding.kind or 'finding'}")
        if finding.severity == "error":
            case.outcome, case.message, case.body = "failure", message, "\n".join(details)
        else:
            case.output = f"[{finding.severity}] " + "\n".join(details)
        suite.cases.append(case)
    return suite


def render(report, lang: str = "en") -> str:
    return testsuite(to_suite(report, lang))
