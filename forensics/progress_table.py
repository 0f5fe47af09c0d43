"""Who stopped where, per process group: the sequence number each rank
reached in each group, ranks that reached the same place on one row, as
PyTorch's Flight Recorder analyzer and STAT show it. A laggard and the
ranks waiting for it are one glance apart.

Computed once into the Report (forensics/analysis.py); every renderer only
formats it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Incident, RankState, is_collective

# A call's state, furthest along last: the state shown for a seq is the
# furthest any artifact of the rank states for it.
_ORDER = {"scheduled": 0, "enqueued": 0, "started": 1, "completed": 2}


@dataclass(frozen=True, slots=True)
class SeqRow:
    """Ranks whose furthest collective in the group is `seq`, in `state`."""

    seq: int
    op: str           # "" when only a counter says the rank got there
    state: str        # scheduled | started | completed
    ranks: tuple[int, ...]

    def to_json(self) -> dict:
        return {"seq": self.seq, "op": self.op or None, "state": self.state, "ranks": list(self.ranks)}


@dataclass(frozen=True, slots=True)
class GroupRows:
    """One process group: its rows, lowest seq first (who is behind comes
    first), and its known members no artifact places in it."""

    group: str
    name: str
    rows: tuple[SeqRow, ...]
    no_record: tuple[int, ...] = ()

    def to_json(self) -> dict:
        out = {"group": self.group}
        if self.name:
            out["name"] = self.name
        out["rows"] = [row.to_json() for row in self.rows]
        if self.no_record:
            out["no_record"] = list(self.no_record)
        return out


def build(incident: Incident) -> list[GroupRows]:
    """Every group some rank has a numbered collective in, ordered by group id."""
    reached: dict[str, dict[int, tuple[int, str, str]]] = {}
    for rank, state in incident.ranks.items():
        for group, place in _furthest(state).items():
            reached.setdefault(group, {})[rank] = place
    tables = []
    for group in sorted(reached, key=_group_key):
        rows: dict[tuple[int, str, str], list[int]] = {}
        for rank, place in sorted(reached[group].items()):
            rows.setdefault(place, []).append(rank)
        pg = incident.groups.get(group)
        members = pg.ranks if pg is not None else ()
        missing = tuple(r for r in members if r not in reached[group])
        ordered = sorted(rows.items(), key=lambda kv: (kv[0][0], -_ORDER.get(kv[0][2], 0), kv[0][1]))
        tables.append(GroupRows(group, pg.name if pg is not None else "",
                                tuple(SeqRow(seq, op, st, tuple(ranks)) for (seq, op, st), ranks in ordered),
                                missing))
    return tables


def to_json(tables: list[GroupRows]) -> list[dict]:
    return [table.to_json() for table in tables]


def _furthest(state: RankState) -> dict[str, tuple[int, str, str]]:
    """group → (seq, op, state) of the furthest numbered collective the
    rank's artifacts show in that group: its calls (history, current call)
    and its group counters (c10d's / Flight Recorder's pg_status)."""
    best: dict[str, tuple[int, str, str]] = {}

    def see(group: str, seq, op: str, how: str) -> None:
        if seq is None or seq < 0:
            return
        known = best.get(group)
        if known is None or seq > known[0]:
            best[group] = (seq, op, how)
        elif seq == known[0]:
            best[group] = (seq, known[1] or op,
                           how if _ORDER.get(how, 0) > _ORDER.get(known[2], 0) else known[2])

    calls = list(state.history)
    if state.position is not None:
        calls.append(state.position)
    for op in calls:
        if op.seq is not None and op.group_known and is_collective(op.op):
            see(op.group or "0", op.seq, op.op, op.state)
    for group, counters in state.progress.items():
        group = group or "0"
        see(group, counters.enqueued, "", "scheduled")
        see(group, counters.started, "", "started")
        see(group, counters.completed, "", "completed")
    return best


def _group_key(group: str):
    return (0, int(group), "") if group.isdigit() else (1, 0, group)
