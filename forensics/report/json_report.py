"""The stable JSON contract, `forensics.report/1` (see DESIGN.md).

`schema.json` beside this module is its JSON Schema: `forensics schema
report` prints it, the docs publish it, and the tests validate every report
they produce against it, so a field added here without it fails the tests.
"""

from __future__ import annotations

from .. import progress_table, stackclasses, topology
from ..model import node_label
from ..words import localized
from .safe_text import json_dumps

SCHEMA = "forensics.report/1"
MAX_WAITING_FOR = 64
MAX_EVENTS = 500
MAX_FRAMES = 200  # frames of one thread of a captured stack


def node_json(node):
    return node if isinstance(node, int) else node_label(node)


def to_dict(report, lang: str = "en") -> dict:
    analysis = report.analysis
    culprits = set(report.culprit_ranks)
    ranks = {}
    for rank, state in report.incident.ranks.items():
        op = state.position
        waits, n_waits = analysis.waits_of(rank, MAX_WAITING_FOR)
        entry = {
            "state": state.activity,
            "op": op.op if op else None,
            "group": (op.group or "0") if op and op.group_known else None,
            "seq": op.seq if op else None,
            "waiting_for": [node_json(n) for n in waits],
            "can_progress": rank not in analysis.stuck and not state.is_dead,
        }
        if n_waits > len(waits):
            entry["waiting_for_count"] = n_waits
        if op and op.peers:
            entry["peers"] = list(op.peers)
        if state.why:
            entry["why"] = state.why
        if state.evidence:
            entry["evidence"] = state.evidence.to_json()
        entry.update(_last(state, report.notes.get(rank)))
        if state.ending is not None:
            ending = state.ending
            entry["ended"] = {"exit_code": ending.exit_code, "signal": ending.signal or None,
                              "role": ending.role or None, "reason": ending.reason or None,
                              "evidence": ending.evidence.to_json() if ending.evidence else None}
        if rank in culprits:
            links = topology.ring_links(report.incident, rank)
            if links:
                entry["ring_links"] = [link.to_json() for link in links]
        ranks[str(rank)] = entry
    root = report.root_cause
    out = {
        "schema": SCHEMA,
        "verdict": report.verdict,
        "culprit_ranks": list(report.culprit_ranks),
        "culprits": [c.to_json() for c in report.culprits],
        "confidence": _confidence(report.confidence, lang) if report.confidence else None,
        "cycles": [[node_json(n) for n in cycle] for cycle in report.cycles],
        "root_cause": {
            "kind": root.kind,
            "ranks": list(root.ranks),
            "rule": root.finding.rule if root.finding else None,
            "narrative": root.narrative.get(lang, root.narrative.get("en", "")),
            "narratives": dict(root.narrative),
        },
        "events": [e.to_json() for e in report.incident.events[:MAX_EVENTS]],
        "timeline": _timeline(report),
        "decided_by": [{"kind": s.kind, "detail": s.detail,
                        "evidence": s.evidence.to_json() if s.evidence else None}
                       for s in report.decided_by],
        "findings": [_finding(f, report.rules.get(f.rule), lang) for f in report.findings],
        "ranks": ranks,
        "stack_classes": stackclasses.to_json(report.stack_tree) if report.stack_tree is not None else [],
        "unattributed": [{"dumps": [{"path": d.path, "pid": d.pid, "source": d.source} for d in dumps],
                          "state": c.activity, "op": c.op or None, "why": c.why}
                         for c, dumps in report.dump_groups],
        "read": [{"path": r.path, "kind": r.kind, "lines": r.lines, "unrecognized": r.unrecognized}
                 for r in report.incident.read],
        "diagnostics": [d.to_json() for d in report.diagnostics],
    }
    if report.group_progress:  # optional: only where some rank's calls are numbered
        out["group_progress"] = progress_table.to_json(report.group_progress)
    if report.captured_stacks:  # optional: only in the reports `forensics watch` writes
        out["captured_stacks"] = [_captured(c, lang) for c in report.captured_stacks]
    return out


def _captured(capture, lang: str) -> dict:
    """A stack the watcher dumped on its verdict: the file and its threads, or why there is none."""
    from .text import frame_label, stack_problem

    out = {"rank": capture.rank, "role": capture.role, "pid": capture.pid, "file": capture.file or None}
    if capture.waits_for is not None:
        out["waits_for"] = capture.waits_for
    if capture.problem:
        out["problem"] = {"kind": capture.problem, "message": stack_problem(capture, lang)}
    out["threads"] = [{"tid": t.tid, "name": t.name, "status": t.status,
                       "evidence": t.evidence.to_json() if t.evidence is not None else None,
                       "frames": [frame_label(f) for f in t.frames[:MAX_FRAMES]]}
                      for t in capture.threads]
    return out


def _last(state, note) -> dict:
    """The rank's last log line and last progress, as the HTML table shows
    them, and its console's last lines where no reader recognized them."""
    out = {}
    if state.last_words:
        out["last_words"] = [e.to_json() for e in state.last_words]
    if note is None:
        return out
    if note.last_line is not None:
        out["last_line"] = note.last_line.to_json()
    if note.progress_line is not None:
        out["last_progress"] = note.progress_line.to_json()
    if note.last_progress is not None:
        from ..model import Event
        from ..postmortem import when

        out["last_progress_at"] = when(Event(note.last_progress, "wall", "", "", None))
    return out


def _timeline(report) -> dict:
    """The clock the events share: the bound on host skew left, and the
    first failure(s) by time (indices into `events`)."""
    shown = report.incident.events[:MAX_EVENTS]
    return {"skew_s": report.incident.skew_s,
            "first_failure": [shown.index(e) for e in report.first_failures if e in shown]}


def _confidence(sure, lang: str) -> dict:
    out = {"level": sure.level, "reason": localized(sure, "reason", lang)}
    if sure.missing:
        out["missing"] = list(localized(sure, "missing", lang))
    return out


def _finding(finding, doc, lang: str) -> dict:
    out = finding.to_json()
    out["message"], out["hint"] = localized(finding, "message", lang), localized(finding, "hint", lang)
    if doc is not None:
        title, explanation, _ = doc.text(lang)
        out["title"], out["explanation"] = title, explanation
    return out


def schema_text() -> str:
    """The JSON Schema of the report, as shipped (`forensics/report/schema.json`)."""
    from importlib import resources

    return resources.files(__package__).joinpath("schema.json").read_text("utf-8")


def render(report, lang: str = "en") -> str:
    return json_dumps(to_dict(report, lang), indent=1) + "\n"
