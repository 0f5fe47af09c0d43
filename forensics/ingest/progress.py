"""What `forensics collect --snapshots N` saw between its rounds
(progress.json). Progress is a change of position, not activity: a rank
moved when its main stack moved beyond one loop's lines, its Flight
Recorder's sequence numbers moved, or it wrote output; CPU time and wakeups
are shown as activity only (a polling wait, a spinning NCCL kernel and a
busy loop all burn CPU).

Ranks that kept their place in one communication call through the whole
window wait on someone: past the stuck-after threshold (collect's
--stuck-after, half the job's collective timeout where a dump states it,
else 60 s; analyze --stuck-after overrides it) that is a stuck signal naming
the rank that kept busy elsewhere; below it, a note that it is not a hang
yet and when to look again. Files of the first schema
(`forensics.progress/1`, no positions) read as before: a rank whose stack
did not move is stuck."""

from __future__ import annotations

import contextlib
import json
import math
import os

from .. import model as m
from ..ranges import compact
from ..words import stuck_signal
from .facts import Facts
from .reader import reader_hooks
from .textio import InputError, int_text, read_text

KIND = "collect-progress"
SCHEMA_V1 = "forensics.progress/1"
SCHEMA = "forensics.progress/2"
SCHEMAS = (SCHEMA_V1, SCHEMA)
DEFAULT_STUCK_AFTER_S = 60.0
# How a window judged below its threshold is said (a diagnostic): the ranks were watched for a
# while and their waits are not yet a hang; the verdict stays healthy (confidence.awaited_unseen).
NOT_A_HANG_YET = "not a hang yet"
MAKING_PROGRESS = "the job is making progress"  # how a window in which every rank moved is said


def window_says_not_stuck(diagnostics) -> bool:
    """Whether a window this module (or the merge's snapshot window) judged
    says the ranks are not stuck: every rank moved, or not a hang yet."""
    return any(d.message.startswith(NOT_A_HANG_YET) or d.message.endswith(MAKING_PROGRESS) for d in diagnostics)

_override: list[float] = []  # analyze --stuck-after, for what is read inside `stuck_after`


@contextlib.contextmanager
def stuck_after(seconds: float | None):
    """Judge the progress files read inside with this threshold instead of
    the one collect recorded (forked parse workers inherit it)."""
    if seconds is None:
        yield
        return
    _override.append(float(seconds))
    try:
        yield
    finally:
        _override.pop()


def sniff(path: str, head: bytes) -> bool:
    return os.path.basename(path) == "progress.json" and any(s.encode() in head for s in SCHEMAS)


def parse(path: str, display: str) -> Facts:
    text = read_text(path)
    facts = Facts(KIND, display)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(display, f"invalid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") not in SCHEMAS or not isinstance(data.get("ranks"), dict):
        raise InputError(display, f"not a {SCHEMA} (or {SCHEMA_V1}) file", 1)
    entries = {}
    for key, entry in data["ranks"].items():
        rank = int_text(str(key), 12)
        if rank is None or rank < 0 or not isinstance(entry, dict) or not isinstance(entry.get("moved"), bool):
            facts.diag(_rank_line(text, str(key)), f"rank entry {str(key)[:40]!r} is not a rank's progress: ignored")
            continue
        entries[rank] = entry
    rounds, seconds = data.get("rounds"), data.get("seconds")
    # The window as collect states it (`3 rounds over 20.0 s`), for the diagnostics and the stuck signal.
    window = {"rounds": rounds, "span_s": seconds} if isinstance(rounds, int) and _number(seconds) else {}
    span = f"{rounds} rounds over {seconds} s" if window else "its rounds"
    if data["schema"] == SCHEMA_V1:
        _judge_v1(facts, entries, span, window, m.Evidence(display, 1, text.splitlines()[0] if text else ""))
    else:
        _judge(facts, data, entries, span, window, text, display)
    return facts


def _judge_v1(facts: Facts, entries: dict, span: str, window: dict, evidence: m.Evidence) -> None:
    still = [r for r, e in entries.items() if not e["moved"]]
    moved = [r for r, e in entries.items() if e["moved"]]
    fr_still = [r for r in still if entries[r].get("flight_recorder_changed") is False]
    if still:
        facts.stuck.append(stuck_signal("no_progress", "collect_v1", evidence, still=tuple(still),
                                        moved=tuple(moved), fr=fr_still == still, **window))
    elif moved:
        facts.diag(1, f"every rank ({compact(moved)}) moved in {span}: {MAKING_PROGRESS}", "info")


def _judge(facts: Facts, data: dict, entries: dict, span: str, rounds: dict, text: str, display: str) -> None:
    """Ranks that kept their place in a communication call through the
    window wait on the ranks that are elsewhere: stuck past the threshold,
    not a hang yet below it."""
    window = _number(data.get("seconds")) or 0.0
    threshold, source = _threshold(data)
    moved = sorted(r for r, e in entries.items() if e["moved"])
    waiting = sorted(r for r, e in entries.items() if not e["moved"] and _text(e.get("waiting_in")))
    busy = sorted(r for r, e in entries.items() if r not in waiting and _text(e.get("busy_in")))
    for line in _activity_lines(entries, data, span):
        facts.diag(1, line, "info")
    if not waiting:
        if moved and len(moved) == len(entries):
            facts.diag(1, f"every rank ({compact(moved)}) moved in {span}: {MAKING_PROGRESS}", "info")
        elif moved:
            facts.diag(1, f"rank {compact(moved)} moved in {span}; no rank kept its place in a communication "
                          f"call through the window", "info")
        return
    call = _call(entries, waiting)
    suspects = [r for r in busy if r not in moved] or busy
    where = "; ".join(f"rank {r} {'stayed idle' if entries[r].get('idle') is True else 'kept busy'} in "
                      f"{_text(entries[r]['busy_in'])}" for r in suspects)
    cited = suspects[0] if suspects else waiting[0]
    evidence = _evidence(text, display, cited, "busy_in" if suspects else "waiting_in")
    seconds = f"{window:g} s"
    if window >= threshold:
        busy = tuple((r, entries[r].get("idle") is True, _text(entries[r]["busy_in"])) for r in suspects)
        written_by = _text(data.get("written_by"))
        by = written_by if written_by in ("forensics collect", "forensics watch") else "forensics collect"
        facts.stuck.append(stuck_signal(
            "no_progress", "collect_busy" if busy else "collect_still", evidence, suspects=busy,
            waiting=tuple(waiting), call=call, seconds=window, threshold=threshold, source=source, by=by,
            **rounds))
        return
    again = math.ceil(threshold - window)
    interval = math.ceil(threshold / 2)
    suspect = f": {where}" if suspects else ""
    facts.diag(evidence.line, f"{NOT_A_HANG_YET}: rank {_ranks(waiting)} waited in {call} for {seconds} without "
                              f"moving{suspect}; stuck only past {threshold:g} s ({source}): look again in "
                              f"{again} s, or collect over a longer window (--snapshots 3 --interval {interval})",
               "info")


def _ranks(ranks: list[int]) -> str:
    """`0, 2, 3` as people write a few ranks; ranges past eight."""
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else compact(ranks)


def threshold_for_analyze(timeout_s: float | None = None) -> tuple[float, str]:
    """The threshold analyze judges a window it finds itself against (several
    snapshot files): its --stuck-after, else half the job's collective
    timeout where the snapshots state one (as forensics collect takes it),
    else the default."""
    if _override:
        return _override[-1], "analyze --stuck-after"
    if timeout_s:
        return round(timeout_s * 0.5, 1), f"half the collective timeout of {timeout_s:g} s"
    return DEFAULT_STUCK_AFTER_S, "the default"


def _threshold(data: dict) -> tuple[float, str]:
    if _override:
        return _override[-1], "analyze --stuck-after"
    recorded = _number(data.get("stuck_after_s"))
    if recorded is not None and recorded >= 0:
        return recorded, _text(data.get("stuck_after_from")) or "recorded by forensics collect"
    return DEFAULT_STUCK_AFTER_S, "the default"


def _call(entries: dict, waiting: list[int]) -> str:
    """The call the waiting ranks are in, with its sequence number where a
    Flight Recorder dump gives one: `all_reduce #418`."""
    ops = sorted({_text(entries[r].get("waiting_in")) for r in waiting})
    seqs = set()
    for r in waiting:
        dumps = entries[r].get("flight_recorder")
        newest = dumps[-1].get("newest") if isinstance(dumps, list) and dumps and isinstance(dumps[-1], dict) \
            else None
        if isinstance(newest, dict) and isinstance(newest.get("seq"), int):
            seqs.add(newest["seq"])
    call = " / ".join(ops)
    return f"{call} #{seqs.pop()}" if len(seqs) == 1 else call


def _activity_lines(entries: dict, data: dict, span: str) -> list[str]:
    """CPU time and wakeups, and the GPUs' utilisation and power: shown as
    activity, never as progress."""
    shown = []
    for rank, entry in sorted(entries.items()):
        activity = entry.get("activity")
        if isinstance(activity, dict) and _number(activity.get("cpu_s")) is not None:
            shown.append(f"{rank}: {activity['cpu_s']:g} s CPU, "
                         f"{int(_number(activity.get('main_thread_wakeups')) or 0)} wakeups")
    lines = [f"activity in {span} (not progress): " + "; ".join(shown)] if shown else []
    gpus = data.get("gpus")
    if isinstance(gpus, dict) and _text(gpus.get("missing")):
        lines.append(f"GPUs: {_text(gpus['missing'])}")
    elif isinstance(gpus, dict) and isinstance(gpus.get("rounds"), list):
        lines += _gpu_lines(gpus["rounds"])
        unread = [_text(line) for line in gpus.get("unread", []) if _text(line)] \
            if isinstance(gpus.get("unread"), list) else []
        if unread:
            lines.append("GPUs: nvidia-smi said what was not read: " + "; ".join(unread[:8]))
    return lines


def _gpu_lines(rounds: list) -> list[str]:
    per_gpu: dict[int, list[tuple]] = {}
    for round_ in rounds:
        for gpu in round_ if isinstance(round_, list) else []:
            if isinstance(gpu, dict) and isinstance(gpu.get("index"), int):
                per_gpu.setdefault(gpu["index"], []).append(
                    (_number(gpu.get("utilization_pct")), _number(gpu.get("power_w")),
                     _number(gpu.get("power_limit_w"))))
    lines = []
    for index, seen in sorted(per_gpu.items()):
        shown = ", ".join(f"{_g(u, '%')} at {_g(p, ' W')}" for u, p, _ in seen)
        limit = next((lim for _, _, lim in seen if lim), None)
        line = f"GPU {index}: utilisation and power per round: {shown}" + (f" (limit {limit:g} W)" if limit else "")
        spinning = [u for u, p, lim in seen if u is not None and u >= 95 and p is not None and lim
                    and p < 0.3 * lim]
        if spinning and len(spinning) == len(seen):
            line += ": full utilisation at idle power in every round, the signature of a kernel spinning " \
                    "(an NCCL kernel waiting for a peer), not of work"
        lines.append(line)
    return lines


def _g(value, unit: str) -> str:
    return "?" if value is None else f"{value:g}{unit}"


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _text(value) -> str:
    return value[:300] if isinstance(value, str) else ""


def _rank_line(text: str, key: str) -> int:
    """The line of a rank's entry (collect writes one key a line)."""
    needle = f'"{key}": {{'
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == needle:
            return number
    return 1


def _evidence(text: str, display: str, rank: int, field: str) -> m.Evidence:
    """The rank's `field` line inside its entry, else the entry's first line."""
    lines = text.splitlines()
    start = _rank_line(text, str(rank))
    for number in range(start, min(len(lines), start + 40) + 1):
        if lines[number - 1].strip().startswith(f'"{field}"'):
            return m.Evidence(display, number, lines[number - 1].strip())
    return m.Evidence(display, start, lines[start - 1].strip() if lines else "")


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)},
    lambda path, head: KIND if sniff(path, head) else None)
