"""SARIF 2.1.0: the findings as static-analysis results, for code-scanning
dashboards and CI annotations.

One run; `tool.driver.rules` from the rule catalogue (`report.rules`),
results from the findings, each evidence line a location. Paths are the
artifact paths relative to the incident folder (`uriBaseId` INCIDENTROOT).
A negative evidence line counts back from the end of a big log read in
tail mode: SARIF regions count from the top, so such a location has no
`region`; the count from the end is kept in the location's properties as
`lineFromEnd` (1 is the last line) and its text in the location message.
"""

from __future__ import annotations

from urllib.parse import quote

from .. import __version__
from ..words import localized
from .safe_text import json_dumps, neutralize

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
BASE_ID = "INCIDENTROOT"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def artifact_uri(path: str) -> str:
    """A relative URI reference for an artifact path (forward slashes,
    percent-encoded); an absolute path becomes a file: URI."""
    path = path.replace("\\", "/")
    if path.startswith("/"):
        return "file://" + quote(path, safe="/")
    return quote(path, safe="/")


def location(evidence) -> dict | None:
    if not evidence.path or evidence.path.startswith("<"):
        return None
    physical: dict = {"artifactLocation": {"uri": artifact_uri(evidence.path)}}
    if not evidence.path.replace("\\", "/").startswith("/"):
        physical["artifactLocation"]["uriBaseId"] = BASE_ID
    out: dict = {"physicalLocation": physical}
    if evidence.line > 0:
        region: dict = {"startLine": evidence.line}
        if evidence.text:
            region["snippet"] = {"text": evidence.text}
        physical["region"] = region
    elif evidence.line < 0:
        out["properties"] = {"lineFromEnd": -evidence.line}
    if evidence.text:
        out["message"] = {"text": evidence.text}
    return out


def _rule(doc, lang: str) -> dict:
    title, explanation, hint = doc.text(lang)
    rule = {"id": doc.id,
            "shortDescription": {"text": title or doc.id},
            "fullDescription": {"text": explanation or title or doc.id},
            "help": {"text": hint or explanation or title or doc.id},
            "defaultConfiguration": {"level": LEVELS.get(doc.severity, "warning")},
            "properties": {"kinds": list(doc.kinds), "emits": list(doc.emits)}}
    if doc.source:
        rule["properties"]["source"] = doc.source
    return rule


def to_dict(report, lang: str = "en") -> dict:
    rules = [_rule(doc, lang) for doc in report.rules.values()]
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    for finding in report.findings:  # a plugin's rule without a RuleDoc still needs an entry
        if finding.rule not in index:
            index[finding.rule] = len(rules)
            rules.append({"id": finding.rule, "shortDescription": {"text": finding.rule}})
    results = []
    for finding in report.findings:
        message, hint = localized(finding, "message", lang), localized(finding, "hint", lang)
        result = {"ruleId": finding.rule, "ruleIndex": index[finding.rule],
                  "level": LEVELS.get(finding.severity, "warning"),
                  "message": {"text": message or finding.rule},
                  "locations": [loc for loc in map(location, finding.evidence) if loc is not None]}
        properties = {"kind": finding.kind, "ranks": list(finding.ranks)}
        if hint:
            properties["hint"] = hint
        if finding.symptom_of:
            properties["symptomOf"] = finding.symptom_of
        if finding.detail_of:
            properties["detailOf"] = finding.detail_of
        result["properties"] = properties
        results.append(result)
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "forensics", "version": __version__, "rules": rules}},
            "originalUriBaseIds": {BASE_ID: {"description": {
                "text": "the incident folder given to forensics analyze"}}},
            "results": results,
            "properties": {"verdict": report.verdict, "culpritRanks": list(report.culprit_ranks)},
        }],
    }


def inert(value):
    """Every string of a SARIF log with controls and bidi characters shown
    as escapes (safe_text): viewers show message and snippet text as it
    is. Line breaks stay; URIs are percent-encoded already."""
    if isinstance(value, str):
        return neutralize(value, keep="\n")
    if isinstance(value, dict):
        return {inert(k): inert(v) for k, v in value.items()}
    if isinstance(value, list):
        return [inert(v) for v in value]
    return value


def render(report, lang: str = "en") -> str:
    return json_dumps(inert(to_dict(report, lang)), indent=1) + "\n"
