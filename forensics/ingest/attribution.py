"""Which global rank did each stack dump come from?

Users name files every way there is (`rank3.pyspy.txt`, `rank_3/`,
`node07-rank3-gdb.log`, `host1/rank-12/py-spy.txt`) and some not at all.
Sources, strongest first: a pid map the collector wrote (pid_map.json,
ranks.yaml, manifest.json) or another artifact states (launcher summaries,
NCCL init lines); the path; a `rank`/`RANK` local in the dump itself; and
finally the pid of a dump already attributed. Disagreements are
diagnostics; a dump nobody can place is kept and shown, never dropped.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict

from ..model import Diagnostic

_RANK_IN_PATH = re.compile(r"(?:^|[^a-z])rank[_\-.]?(\d{1,7})(?!\d)", re.IGNORECASE)
_TRAILING_NUMBER = re.compile(r"[._\-](\d{1,7})(?:\.[a-z]+)*$", re.IGNORECASE)


def rank_from_path(display: str) -> int | None:
    """`rank3.pyspy.txt`, `rank_3/x`, `node07-rank3-gdb.log`, `nccl_trace_rank_3` → 3;
    `dump.3.txt`, `fr_dump.3` → 3. The file's own name wins over its folders'."""
    parts = display.replace(os.sep, "/").split("/")
    for part in reversed(parts):
        found = _RANK_IN_PATH.findall(part)
        if found:
            return int(found[-1])
    match = _TRAILING_NUMBER.search(parts[-1])
    if match and not re.search(r"\d", parts[-1][:match.start()]):
        return int(match.group(1))
    return None


class PidMap:
    def __init__(self):
        self.by_host_pid: dict[tuple[str, int], tuple[int, str]] = {}
        self.by_pid: dict[int, set[int]] = defaultdict(set)
        self.where: dict[int, str] = {}

    def add(self, host: str, pid: int, rank: int, where: str) -> None:
        self.by_host_pid.setdefault((host or "", pid), (rank, where))
        self.by_pid[pid].add(rank)
        self.where.setdefault(pid, where)

    def lookup(self, host: str, pid: int | None) -> tuple[int, str] | None:
        if pid is None:
            return None
        if host and (host, pid) in self.by_host_pid:
            return self.by_host_pid[(host, pid)]
        ranks = self.by_pid.get(pid)
        if ranks and len(ranks) == 1:  # a pid alone is ambiguous across hosts
            return next(iter(ranks)), self.where[pid]
        return None


def attribute(items, stated: PidMap, diagnostics: list[Diagnostic], learned: PidMap | None = None):
    """Place stack dumps or log records on global ranks.

    Returns ({rank: [items]}, [unattributed items], learned pid map). What an
    item says of itself (a log's `[rank3]:` prefix) comes first, then a pid
    map, the path, a rank variable in a dump, and last the pids learned from
    items already placed (pass `learned` on to place the next kind).
    """
    placed: dict[int, list] = defaultdict(list)
    pending: list = []
    learned = learned if learned is not None else PidMap()
    for item in items:
        candidates = []
        own = getattr(item, "rank", None)
        if own is not None:
            candidates.append((own, "the log line itself"))
        from_map = stated.lookup(item.host, item.pid)
        if from_map is not None:
            candidates.append((from_map[0], f"pid {item.pid} in {from_map[1]}"))
        from_path = rank_from_path(item.path)
        if from_path is not None and own is None:
            candidates.append((from_path, "the file name"))
        hint = getattr(item, "rank_hint", None)
        if hint is not None:
            candidates.append((hint, "a rank variable in the dump"))
        if not candidates:
            pending.append(item)
            continue
        rank, source = candidates[0]
        for other, other_source in candidates[1:]:
            if other != rank:
                diagnostics.append(Diagnostic(
                    item.path, item.evidence.line if item.evidence else 0,
                    f"{source} says rank {rank} but {other_source} says rank {other}: using rank {rank}"))
        placed[rank].append(item)
        if item.pid is not None:
            learned.add(item.host, item.pid, rank, item.path)
    unattributed = []
    for item in pending:
        found = learned.lookup(item.host, item.pid)
        if found is None:
            unattributed.append(item)
            diagnostics.append(Diagnostic(
                item.path, item.evidence.line if item.evidence else 0,
                f"cannot tell which rank pid {item.pid} is (no rank in the path, the artifact or a pid map): "
                f"shown as unattributed", "warning"))
        else:
            placed[found[0]].append(item)
    return placed, unattributed, learned
