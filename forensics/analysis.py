"""Rules → wait-for graph → verdict. A pure function of the Incident."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from . import clock, confidence, explain, postmortem, progress_table, stackclasses
from .graph import GraphAnalysis, analyze_graph, build_graph
from .model import EXITED, UNKNOWN, Confidence, Event, Evidence, Finding, Incident
from .postmortem import decisive, first_causes
from .ruledocs import catalogue
from .ranking import VERDICT_OF_KIND, VERDICT_ORDER, link_symptoms, rank_findings

PROBLEM_VERDICTS = frozenset(VERDICT_ORDER)


@dataclass(slots=True)
class RootCause:
    kind: str
    ranks: tuple[int, ...]
    narrative: dict[str, str]  # lang → text
    finding: Finding | None = None


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One decisive event as every report lists it: `what` says it once (an
    exit's code is not repeated by the reason that starts with it)."""

    event: Event
    first: bool  # (one of) the first failure(s) by time
    what: str
    also: tuple = ()  # further lines that state the same event (Evidence)

    @property
    def cites(self) -> str:
        return ", ".join(e.cite() for e in (self.event.evidence, *self.also))


@dataclass(frozen=True, slots=True)
class RankNote:
    """What a per-rank table adds to the rank's state: the last line its
    logs hold, and when it last completed a call or printed a progress line
    (a wall time as its line states it), where an artifact says; and that
    progress line of its console (a step or loss line), where one shows."""

    last_line: Evidence | None = None
    last_progress: float | None = None
    progress_line: Evidence | None = None


@dataclass(frozen=True, slots=True)
class Provenance:
    """Which run wrote the report, for a ticket. With SOURCE_DATE_EPOCH set
    the time is that one and the host is left out: the same inputs then give
    the same bytes (reproducible-builds.org's convention)."""

    version: str
    generated: float
    inputs: tuple[str, ...]
    host: str = ""

    @classmethod
    def now(cls, incident: Incident) -> "Provenance":
        import socket
        import time

        from . import __version__

        fixed = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
        if fixed.isdigit():
            return cls(__version__, float(fixed), input_paths(incident))
        return cls(__version__, time.time(), input_paths(incident), socket.gethostname())


def input_paths(incident: Incident) -> tuple[str, ...]:
    """The paths the user gave, in order: each artifact's path less the part
    shown relative to its folder (a file given alone is its own path)."""
    found: dict[str, None] = {}
    for artifact in incident.artifacts:
        path, shown = artifact.path, artifact.display
        root = path[:-len(shown)].rstrip("/" + os.sep) if shown != path and path.endswith(shown) else path
        found.setdefault(root or ".")
    return tuple(found)


@dataclass(slots=True)
class Report:
    verdict: str
    culprit_ranks: list[int]
    cycles: list[list]
    root_cause: RootCause
    findings: list[Finding]
    incident: Incident
    analysis: GraphAnalysis
    decided_by: list = field(default_factory=list)  # StuckSignals that made waiting a hang
    diagnostics: list = field(default_factory=list)
    rules: dict = field(default_factory=dict)  # rule id → RuleDoc, for the findings' titles and docs
    # The blamed processes: `culprit_ranks` as processes, plus those known
    # only by host, pid or address.
    culprits: list = field(default_factory=list)
    confidence: Confidence | None = None
    # What every renderer shows, computed once here (renderers only format):
    # the main threads' stacks as one prefix tree, the decisive events on one
    # clock, each rank's last log line and progress, who wrote the report.
    stack_tree: stackclasses.StackNode | None = None
    timeline: list = field(default_factory=list)  # TimelineEntry, oldest first: every decisive event
    first_failures: list = field(default_factory=list)  # the Events nothing surely precedes
    dump_groups: list = field(default_factory=list)  # unattributed dumps by where they are: [(judged, [dumps])]
    notes: dict = field(default_factory=dict)  # rank → RankNote
    group_progress: list = field(default_factory=list)  # progress_table.GroupRows: who reached which seq
    # Stacks `forensics watch` dumped when it found the hang (forensics.live.watch.StackCapture), read once.
    captured_stacks: list = field(default_factory=list)
    provenance: Provenance | None = None

    def decisive(self, limit: int) -> list[TimelineEntry]:
        """At most `limit` of the timeline's entries: the first failures
        always, then the others oldest first."""
        if len(self.timeline) <= limit:
            return list(self.timeline)
        firsts = sum(1 for entry in self.timeline if entry.first)
        others = max(0, limit - firsts)
        kept = []
        for entry in self.timeline:
            if entry.first:
                kept.append(entry)
            elif others:
                kept.append(entry)
                others -= 1
        return kept

    @property
    def named_processes(self) -> list:
        """The culprits to list as processes: all of them once any is known
        by something other than a rank number (else the ranks say it all)."""
        return self.culprits if any(c.rank is None for c in self.culprits) else []

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict in PROBLEM_VERDICTS else 0


def prepare(plugins) -> None:
    """What every analysis needs before its first rule: the graph library
    (a tenth of a second to import) and each plugin's `forensics_prepare`.
    Cheap when done already; the CLI runs it while files are parsed."""
    import networkx  # noqa: F401  imported here so graph.py and rules need not at start-up

    if plugins.prepared:
        return
    plugins.call("forensics_prepare")
    plugins.prepared = True


def analyze_incident(incident: Incident, plugins) -> Report:
    """The stages after merge, in order: the post-mortem (how each rank
    ended, knock-ons put back where they waited, one clock for every dated
    line), the rules' wait-for edges and findings, the graph, the verdict,
    then what the report shows, computed once for every renderer."""
    prepare(plugins)
    incident = postmortem.settle(incident)
    edges = plugins.call("forensics_wait_edges", incident=incident)
    findings = plugins.call("forensics_findings", incident=incident)
    analysis = analyze_graph(build_graph(edges, incident), incident)
    findings += plugins.call("forensics_graph_findings", incident=incident, analysis=analysis)
    findings = [with_stacks(f, incident) for f in defer_stated(settle_knots(findings, analysis), incident)]
    findings = rank_findings(findings)
    verdict, lead = decide(findings, incident, analysis)
    findings = link_symptoms(findings, lead, analysis.graph)
    # Every finding that bears the verdict contributes: all knots of a
    # deadlock, the minorities of every mismatched group.
    culprits = sorted({r for f in findings if f.severity == "error"
                       and VERDICT_OF_KIND.get(f.kind) == verdict for r in f.ranks})
    root = RootCause(kind=lead.kind if lead else verdict, ranks=tuple(lead.ranks) if lead else (),
                     narrative={}, finding=lead)
    report = Report(
        verdict=verdict, culprit_ranks=culprits,
        cycles=analysis.cycles if verdict == "deadlock" else [],
        root_cause=root, findings=findings, incident=incident, analysis=analysis,
        decided_by=list(incident.stuck) if verdict == "missing_rank" else [],
        diagnostics=list(incident.diagnostics))
    report.rules = catalogue(plugins)
    report.culprits = confidence.culprit_processes(findings, verdict, incident, VERDICT_OF_KIND)
    report.confidence = confidence.assess(report, VERDICT_OF_KIND)
    _merge_plugin_diagnostics(report, plugins)
    report.stack_tree = stackclasses.build(incident)
    report.timeline = timeline_of(incident)
    report.first_failures = first_causes(incident)
    report.dump_groups = stackclasses.group_dumps(incident.unattributed) if incident.unattributed else []
    report.notes = rank_notes(incident)
    report.group_progress = progress_table.build(incident)
    report.provenance = Provenance.now(incident)
    root.narrative = {lang: explain.narrative(report, lang) for lang in explain.LANGS}
    return report


def timeline_of(incident: Incident) -> list[TimelineEntry]:
    """The decisive events, one entry per thing that happened: lines that
    state the same event of the same process at the same time are one entry
    citing them all."""
    entries: dict[tuple, TimelineEntry] = {}
    for event, first in decisive(incident, limit=len(incident.events)):
        what = _what(event)
        key = (event.time, event.clock, event.rank, event.host, event.role, what)
        known = entries.get(key)
        entries[key] = TimelineEntry(event, first, what) if known is None else \
            replace(known, first=known.first or first, also=known.also + (event.evidence,))
    return list(entries.values())


def _what(event: Event) -> str:
    """`exit code -15 (SIGTERM): stopped by its launcher …`, said once: an
    exit's detail is `how it ended: why`, and the why may start with the how."""
    if event.kind != "exit":
        return f"{event.kind} ({event.detail})" if event.detail else event.kind
    how, sep, why = event.detail.partition(": ")
    return why if sep and why.startswith(how) else event.detail


def rank_notes(incident: Incident) -> dict[int, RankNote]:
    """Each rank's last log line and the time of its last completed call, for
    the ranks any artifact says something of."""
    notes = {}
    for rank, state in incident.ranks.items():
        last = next((e for e in reversed(state.log_events) if not _FRAME.fullmatch(e.text)), None)
        if last is None and state.last_words:
            last = state.last_words[-1]
        progress = _last_progress(state)
        if last is not None or progress is not None or state.last_progress is not None:
            notes[rank] = RankNote(last, progress, state.last_progress)
    return notes


def _last_progress(state) -> float | None:
    """The wall time of the line that shows the rank's last completed call:
    its last completed call in the history, or its group counters' line."""
    lines = [op.evidence for op in _last_completed(state.history) if op.evidence is not None]
    lines += [p.evidence for p in state.progress.values() if p.evidence is not None and p.completed is not None]
    if state.last_progress is not None:  # its console's last step or loss line
        lines.append(state.last_progress)
    times = [found[0] for found in map(clock.stamp, (e.text for e in lines))
             if found is not None and found[1].startswith("wall")]
    return max(times, default=None)


def _last_completed(history) -> list:
    for op in reversed(history):
        if op.state == "completed":
            return [op]
    return []


STATED = "stated-"  # rules/stated_cause.py: causes read from what a message says


def defer_stated(findings: list[Finding], incident: Incident) -> list[Finding]:
    """A cause a message states yields to a verdict drawn from rank states
    (that one has the whole picture: a survivor's exit or a peer's closed
    socket after the others waited on a missing rank is a consequence);
    it stays, as a warning, to corroborate. It keeps its weight where it
    says what became of a rank the rank states blame (that rank died, not
    merely elsewhere). And a verdict from rank states that rests on ranks
    that sent nothing (known only from a member list or rank numbering)
    weighs less than a line naming the cause: then the message leads, and
    the guess from the waits is the warning."""
    silent = set(confidence.silent_ranks(incident))

    def bears(f: Finding) -> bool:
        return f.severity == "error" and f.kind in VERDICT_OF_KIND

    def guessed(f: Finding) -> bool:
        return bool(set(f.ranks) & silent)

    findings = _peer_gone_after_a_cause(findings, incident)
    stated = [f for f in findings if bears(f) and f.rule.startswith(STATED)]
    structural = [f for f in findings if bears(f) and not f.rule.startswith(STATED) and not guessed(f)]
    if not structural:
        told = {VERDICT_OF_KIND[f.kind] for f in stated}
        return [replace(f, severity="warning") if bears(f) and not f.rule.startswith(STATED)
                and VERDICT_OF_KIND[f.kind] in told else f for f in findings]
    verdicts = {VERDICT_OF_KIND[f.kind] for f in structural}
    blamed = {r for f in structural for r in f.ranks}

    def keeps(f: Finding) -> bool:
        return VERDICT_OF_KIND.get(f.kind) not in verdicts and bool(set(f.ranks) & blamed)

    return [replace(f, severity="warning") if bears(f) and f.rule.startswith(STATED) and not keeps(f) else f
            for f in findings]


def _peer_gone_after_a_cause(findings: list[Finding], incident: Incident) -> list[Finding]:
    """A peer that vanished is a death with a reason of its own: when
    another stated cause was logged surely before the first report of the
    vanished peer (by the timeline's clock), or the vanished peer itself
    logged it, the peer most likely ended because of it (it raised, or its
    launcher stopped it), so the stated cause leads and the lost connection
    is its echo."""
    from .postmortem import before
    from .rules.stated_cause import PEER_GONE

    dated = {(e.evidence.path, e.evidence.line): e for e in incident.events if e.time is not None}
    by_file: dict[str, list] = {}
    for (path, line), event in dated.items():
        by_file.setdefault(path, []).append((line, event))

    def at(evidence):
        """When a line was written: its own time, else no earlier than the
        last dated line above it in the same file (a log is written in order)."""
        if (evidence.path, evidence.line) in dated:
            return dated[(evidence.path, evidence.line)]
        above = [(line, e) for line, e in by_file.get(evidence.path, ()) if line < evidence.line]
        return max(above, key=lambda item: (item[0], item[1].time))[1] if above else None

    def first(f: Finding, lower_bound: bool = False):
        events = [e for e in map(at if lower_bound else (lambda x: dated.get((x.path, x.line))), f.evidence)
                  if e is not None]
        return min(events, key=lambda e: e.time) if events else None

    gone = [f for f in findings if f.rule == PEER_GONE and f.severity == "error"]
    others = [f for f in findings if f.severity == "error" and f.rule.startswith(STATED) and f.rule != PEER_GONE
              and f.kind in VERDICT_OF_KIND]
    if not gone or not others:
        return findings
    earlier = [first(f) for f in others]
    # Which rank printed each line a stated cause rests on.
    printed_by = {(hit.evidence.path, hit.evidence.line): hit.rank for hit in incident.messages
                  if hit.rank is not None}
    printers = [{printed_by.get((e.path, e.line)) for e in f.evidence} - {None} for f in others]
    demoted = set()
    for finding in gone:
        mine = first(finding, lower_bound=True)
        if mine is not None and any(e is not None and before(e, mine, incident.skew_s) for e in earlier):
            demoted.add(id(finding))
        # Without a clock: the vanished peer logged a cause of its own (rank 0's
        # monitored barrier names rank 1, then rank 0 ends; rank 2 loses it).
        elif finding.ranks and any(set(finding.ranks) <= who for who in printers):
            demoted.add(id(finding))
    return [replace(f, severity="warning") if id(f) in demoted else f for f in findings]


_CYCLE_KINDS = frozenset(kind for kind, verdict in VERDICT_OF_KIND.items() if verdict == "deadlock")


def settle_knots(findings: list[Finding], analysis: GraphAnalysis) -> list[Finding]:
    """A knot some of whose members a missing-rank error names is their
    absence, not a deadlock: they moved on (left the loop) and wait, ahead
    of the others, in a call on another group (rules/missing_rank.py). The
    knot's cycle finding stays, as a warning: the circular wait is real, its
    cause is the rank that left."""
    explained = [{n for n in knot if isinstance(n, int)} for knot in analysis.knots
                 if any(f.kind == "missing_rank" and f.severity == "error" and f.ranks and set(f.ranks) <= knot
                        for f in findings)]
    if not explained:
        return findings
    return [replace(f, severity="warning")
            if f.kind in _CYCLE_KINDS and f.severity == "error" and set(f.ranks) in explained else f
            for f in findings]


# A stack frame as Flight Recorder and c10d print it (`#2 train_step from
# train.py:15`); the Flight Recorder reader cites its stuck entry's frames so.
_FRAME = re.compile(r"#\d+ \S.* from \S.*")
STACK_RANKS = 8   # ranks of one finding whose stacks are cited
STACK_FRAMES = 3  # frames cited per rank


def with_stacks(finding: Finding, incident: Incident) -> Finding:
    """The finding, with the frames of the stuck call of each rank it names
    (when a dump recorded them) added to its evidence."""
    extra: list = []
    for rank in finding.ranks[:STACK_RANKS]:
        state = incident.ranks.get(rank)
        if state is None:
            continue
        frames = dict.fromkeys(e for e in state.log_events if _FRAME.fullmatch(e.text))
        extra += [e for e in frames if e not in finding.evidence and e not in extra][:STACK_FRAMES]
    return replace(finding, evidence=finding.evidence + tuple(extra)) if extra else finding


def _merge_plugin_diagnostics(report: Report, plugins) -> None:
    seen = set(report.diagnostics)
    report.diagnostics.extend(d for d in plugins.diagnostics if d not in seen)


def decide(findings: list[Finding], incident: Incident,
           analysis: GraphAnalysis) -> tuple[str, Finding | None]:
    for finding in findings:
        if finding.severity == "error" and finding.kind in VERDICT_OF_KIND:
            return VERDICT_OF_KIND[finding.kind], finding
    if not incident.ranks:
        return "inconclusive", None
    if incident.stuck:
        # Stuck, yet no finding says why: nobody waits on anybody (everyone
        # joined and nothing completes points at the transport), or the waits
        # end at a rank nothing places (rules/missing_rank.py's warning).
        return "inconclusive", None
    if confidence.unknown_group_ranks(incident):
        # Blocked in collectives on groups whose members nothing names: no
        # wait could be drawn, which is not the same as none existing.
        return "inconclusive", None
    if not any(s.activity not in (UNKNOWN, EXITED) for s in incident.ranks.values()):
        # Nothing read shows where any live rank is now (dumps whose calls all
        # completed, a launcher's exit codes): no hang found is not health seen.
        return "inconclusive", None
    if confidence.awaited_unseen(incident, analysis):
        # Waiting on a rank is progress only while that rank is seen at work.
        return "inconclusive", None
    return "healthy", None
