"""What `forensics collect --snapshots N` saw move between its rounds
(progress.json): per rank, whether its stacks and its Flight Recorder
sequence numbers changed, and the CPU time its threads used. Ranks whose stacks did not move are stuck, the way `--hung`
says it; a round in which every rank moved is a job making progress."""

from __future__ import annotations

import json
import os

from .. import model as m
from ..ranges import compact
from .facts import Facts
from .reader import reader_hooks
from .textio import InputError, int_text, read_text

KIND = "collect-progress"
SCHEMA = "forensics.progress/1"


def sniff(path: str, head: bytes) -> bool:
    return os.path.basename(path) == "progress.json" and SCHEMA.encode() in head


def parse(path: str, display: str) -> Facts:
    text = read_text(path)
    facts = Facts(KIND, display)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(display, f"invalid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("ranks"), dict):
        raise InputError(display, f"not a {SCHEMA} file", 1)
    rounds, seconds = data.get("rounds"), data.get("seconds")
    still, moved, fr_still = [], [], []
    for key, entry in data["ranks"].items():
        rank = int_text(str(key), 12)
        if rank is None or rank < 0 or not isinstance(entry, dict) or not isinstance(entry.get("moved"), bool):
            facts.diag(1, f"rank entry {str(key)[:40]!r} is not a rank's progress: ignored")
            continue
        (moved if entry["moved"] else still).append(rank)
        if not entry["moved"] and entry.get("flight_recorder_changed") is False:
            fr_still.append(rank)
    span = f"{rounds} rounds over {seconds} s" if isinstance(rounds, int) and isinstance(seconds, (int, float)) \
        else "its rounds"
    evidence = m.Evidence(display, 1, text.splitlines()[0] if text else "")
    if still:
        facts.stuck.append(m.StuckSignal(
            "no_progress", f"forensics collect saw rank {compact(still)} not move in {span} (same stacks"
            + (", same Flight Recorder sequence numbers" if fr_still == still else "") + ")"
            + (f"; rank {compact(moved)} moved" if moved else ""), evidence,
            f"forensics collect 在 {span} 中看到 Rank {compact(still)} 没有任何进展（调用栈不变"
            + ("，Flight Recorder 序号不变" if fr_still == still else "") + "）"))
    elif moved:
        facts.diag(1, f"every rank ({compact(moved)}) moved in {span}: the job is making progress", "info")
    return facts


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)},
    lambda path, head: KIND if sniff(path, head) else None)
