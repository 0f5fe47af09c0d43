"""Which global rank did each stack dump or log record come from?

Users name files every way there is (`rank3.pyspy.txt`, `rank_3/`,
`node07-rank3-gdb.log`, `host1/rank-12/py-spy.txt`) and some not at all.
Sources, strongest first: what an item says of itself (a log line's
`[rank3]:` prefix, a c10d line naming its rank in the default group); a pid
map the collector wrote (pid_map.json, ranks.yaml, manifest.json) or another
artifact states (launcher summaries, NCCL init lines); a `rank` word in the
path; a `rank`/`RANK` local in the dump itself; the pid of an item already
attributed; and last, weakest, the number a file name ends with.
Disagreements are diagnostics; an item nobody can place is kept and shown,
never dropped.

Numbers in paths are mostly not ranks. A number after a `rank` word is
(`rank3`, `rank_3`, `RANK-12`, `global_rank3`), unless the word is a
group's or a node's (`local_rank3`, `node_rank1`, `tp_rank0`, `dp_rank2`).
Job ids, array task ids, pids, ports, dates and counters never are:
`slurm-34446.out`, `slurm-34446_3.out`, PBS/SGE `train.o12345`/`.e12345`,
`job_12345.log`, `core.4242`, `pid4242`, `port29500`, `2025-04-21.log`,
`train_0001.log` (zero-padded: a counter). What is left is the file name's
trailing number when nothing else in the name is numeric (`dump.3.txt`,
`fr_dump.3`, `llmd-prefill-2.log`): a *weak* rank. It is used only when
nothing else places the item (no line prefix, pid map, c10d line, rank
variable or learned pid), never for an item that carries a launcher's
local rank, never when the file holds several processes (several ranks,
local ranks or pids among its items), never when it equals the item's own
pid, and never at or beyond a known world size. When stronger evidence
disagrees with it, one info diagnostic per file says so.

A rank at or beyond the known world size (NCCL's world communicator,
the default group's members, the launcher's `global_world_sizes`,
`WORLD_SIZE`) is a diagnostic naming the file and line, not a new rank.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import NamedTuple

from .. import lazy
from ..model import Diagnostic

STRONG, WEAK = "strong", "weak"

_RANK_IN_PATH = lazy.regex(r"rank[_\-.]?(\d{1,7})(?!\d)", re.IGNORECASE)
# A rank word qualified by a group or a node names no global rank.
_QUALIFIED = lazy.regex(r"(?:local|node|group|role|dp|tp|pp|ep|cp|sp|mp)[_\-.]?$", re.IGNORECASE)
_TRAILING_NUMBER = lazy.regex(r"[._\-](\d{1,7})(?:\.[a-z]+)*$", re.IGNORECASE)
_NOT_A_RANK = lazy.regex(r"""
    ^slurm-\d                                   # Slurm's default output: slurm-<job>[_<task>].out
  | \.p?[oe]\d+$                                # PBS / SGE: <name>.o<job>, .e<job>, .po<job>
  | (?:^|[^a-z])(?:job|jobid|array|pid|port|core|step|iter|epoch|attempt|restart|run)[_\-.]?\d
    """, re.IGNORECASE | re.VERBOSE)


class PathRank(NamedTuple):
    rank: int
    strength: str  # STRONG: after a `rank` word; WEAK: the file name's trailing number


def path_rank(display: str) -> PathRank | None:
    """The rank a path names, and how strongly (see the module docstring).
    The file's own name wins over its folders'; only a `rank` word counts
    in a folder's name."""
    parts = display.replace(os.sep, "/").split("/")
    for part in reversed(parts):
        found = [m for m in _RANK_IN_PATH.finditer(part)
                 if (m.start() == 0 or not part[m.start() - 1].isalpha())
                 and not _QUALIFIED.search(part, 0, m.start())]
        if found:
            return PathRank(int(found[-1].group(1)), STRONG)
    name = parts[-1]
    if _NOT_A_RANK.search(name):
        return None
    match = _TRAILING_NUMBER.search(name)
    if match is None or re.search(r"\d", name[:match.start()]):
        return None
    digits = match.group(1)
    if len(digits) > 1 and digits.startswith("0"):  # train_0001.log: a counter
        return None
    return PathRank(int(digits), WEAK)


def rank_from_path(display: str) -> int | None:
    """`rank3.pyspy.txt`, `rank_3/x`, `node07-rank3-gdb.log`, `nccl_trace_rank_3` → 3;
    `dump.3.txt`, `fr_dump.3` → 3 (weak: see `path_rank`); `slurm-34446.out` → None."""
    found = path_rank(display)
    return found.rank if found is not None else None


class World(NamedTuple):
    """How many global ranks the job has, and which artifact says so."""

    size: int
    source: str

    def excludes(self, rank: int) -> bool:
        return rank >= self.size

    def describe(self) -> str:
        return f"the world has {self.size} ranks ({self.source})"


def outside_world(world: World | None, rank: int | None, path: str, line: int, what: str,
                  diagnostics: list[Diagnostic]) -> bool:
    """Whether `rank` is beyond the known world size; if so a diagnostic
    naming the file and line says the evidence is not attributed."""
    if world is None or rank is None or not world.excludes(rank):
        return False
    diagnostics.append(Diagnostic(path, line, f"{what} says rank {rank}, but {world.describe()}: "
                                              f"not attributed to any rank"))
    return True


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


def _several_processes(items) -> set[str]:
    """Paths whose items are more than one process (distinct ranks, local
    ranks or pids): such a file's trailing number cannot be all their ranks."""
    seen: dict[str, set] = defaultdict(set)
    for item in items:
        who = (getattr(item, "rank", None), getattr(item, "local_rank", None), item.pid)
        if who != (None, None, None):
            seen[item.path].add(who)
    return {path for path, who in seen.items() if len(who) > 1}


def _weak_rank(item, found: PathRank | None, several: set[str]) -> int | None:
    if found is None or found.strength != WEAK:
        return None
    if item.path in several or getattr(item, "local_rank", None) is not None or item.pid == found.rank:
        return None
    return found.rank


def attribute(items, stated: PidMap, diagnostics: list[Diagnostic], learned: PidMap | None = None,
              world: World | None = None):
    """Place stack dumps or log records on global ranks.

    Returns ({rank: [items]}, [unattributed items], learned pid map). What an
    item says of itself (a log's `[rank3]:` prefix) comes first, then a pid
    map, a `rank` word in the path, a rank variable in a dump, the pids
    learned from items already placed (pass `learned` on to place the next
    kind), and last a weak trailing number of the file name. A rank beyond
    `world` is a diagnostic and is not used.
    """
    placed: dict[int, list] = defaultdict(list)
    pending: list = []
    learned = learned if learned is not None else PidMap()
    several = _several_processes(items)
    overruled: set[str] = set()
    for item in items:
        line = item.evidence.line if item.evidence else 0
        candidates = []
        own = getattr(item, "rank", None)
        if own is not None:
            candidates.append((own, "the log line itself"))
        from_map = stated.lookup(item.host, item.pid)
        if from_map is not None:
            candidates.append((from_map[0], f"pid {item.pid} in {from_map[1]}"))
        found = path_rank(item.path)
        if found is not None and found.strength == STRONG and own is None:
            candidates.append((found.rank, "the file name"))
        hint = getattr(item, "rank_hint", None)
        if hint is not None:
            candidates.append((hint, "a rank variable in the dump"))
        candidates = [(r, s) for r, s in candidates if not outside_world(world, r, item.path, line, s, diagnostics)]
        weak = _weak_rank(item, found, several)
        if not candidates:
            pending.append((item, weak))
            continue
        rank, source = candidates[0]
        for other, other_source in candidates[1:]:
            if other != rank:
                diagnostics.append(Diagnostic(
                    item.path, line, f"{source} says rank {rank} but {other_source} says rank {other}: "
                                     f"using rank {rank}"))
        if found is not None and found.strength == WEAK and found.rank != rank and item.path not in overruled:
            overruled.add(item.path)
            diagnostics.append(Diagnostic(item.path, line, f"the number {found.rank} ending the file name is not "
                                                           f"taken as a rank: {source} says rank {rank}", "info"))
        placed[rank].append(item)
        if item.pid is not None:
            learned.add(item.host, item.pid, rank, item.path)
    unattributed = []
    for item, weak in pending:
        line = item.evidence.line if item.evidence else 0
        found = learned.lookup(item.host, item.pid)
        if found is not None:
            placed[found[0]].append(item)
        elif weak is not None and not outside_world(world, weak, item.path, line, "the number ending the file name",
                                                    diagnostics):
            placed[weak].append(item)
        else:
            unattributed.append(item)
            who = f"pid {item.pid} is" if item.pid is not None else "printed these lines"
            diagnostics.append(Diagnostic(
                item.path, line,
                f"cannot tell which rank {who} (no rank in the path, the artifact or a pid map): "
                f"shown as unattributed", "warning"))
    return placed, unattributed, learned
