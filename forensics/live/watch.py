"""`forensics watch`: serve the coordinator the in-job agents publish to
(forensics/agent.py) and judge the latest state of every rank whenever it
changes. A cycle of waits among blocked ranks is a deadlock at once; a
missing rank once the waiting ranks made no progress for `stuck_after`."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from ..agent import connect


@dataclass
class WatchOptions:
    store: str
    world_size: int
    out: str = "forensics-watch"
    stuck_after: float = 60.0
    poll: float = 0.01
    timeout: float = 0.0          # stop watching after this long (0: never)
    echo: object = None


def snapshot(states: dict[int, dict]) -> dict:
    """The agents' states as a watchdog snapshot (ingest/snapshot.py reads it)."""
    ranks, groups = {}, {}
    for rank, state in sorted(states.items()):
        entry = {k: state[k] for k in ("current_op", "op_seq", "group", "peers", "state", "pid", "host")
                 if k in state}
        ranks[str(rank)] = entry
        if state.get("group") and state.get("group_ranks"):
            groups[str(state["group"])] = list(state["group_ranks"])
    return {"schema": "forensics.snapshot/1", "groups": groups, "ranks": ranks}


_FIELDS = {"current_op": str, "op_seq": int, "group": str, "peers": list, "state": str, "pid": int,
           "host": str, "group_ranks": list, "elapsed_ms": int, "time": (int, float)}


def _state(value) -> dict:
    """A published state with only fields of the expected types (a rank that
    publishes garbage is ignored field by field, never trusted)."""
    if not isinstance(value, dict):
        raise TypeError("not a mapping")
    out = {k: v for k, v in value.items() if k in _FIELDS and isinstance(v, _FIELDS[k]) and not isinstance(v, bool)}
    if "peers" in out:
        out["peers"] = [p for p in out["peers"] if isinstance(p, int) and not isinstance(p, bool)]
    if "group_ranks" in out:
        out["group_ranks"] = [p for p in out["group_ranks"] if isinstance(p, int) and not isinstance(p, bool)]
    if "current_op" not in out:
        raise TypeError("no current_op")
    return out


def watch(options: WatchOptions):
    """Watch until a verdict (returns the report) or the timeout (returns None)."""
    from .. import analyze

    say = options.echo or (lambda line: None)
    store, prefix = connect(options.store, serve=True)
    os.makedirs(options.out, exist_ok=True)
    say(f"watch: serving {options.store} for {options.world_size} rank(s)")
    seen, states, changed_at, started = -1, {}, time.monotonic(), time.monotonic()
    path = os.path.join(options.out, "snapshot.json")
    while not options.timeout or time.monotonic() - started < options.timeout:
        try:
            count = store.add(f"{prefix}/changes", 0)
        except Exception as exc:  # noqa: BLE001 - the coordinator is away: say so, keep trying
            say(f"watch: {options.store} does not answer ({type(exc).__name__}): retrying")
            time.sleep(1)
            continue
        stale = time.monotonic() - changed_at
        if count == seen and not (states and stale >= options.stuck_after):
            time.sleep(options.poll)
            continue
        if count != seen:
            seen, changed_at = count, time.monotonic()
            for rank in range(options.world_size):
                key = f"{prefix}/rank/{rank}"
                try:
                    if not store.check([key]):
                        states.pop(rank, None)  # expired (Redis): silent
                        continue
                    states[rank] = _state(json.loads(store.get(key)))
                except (ValueError, KeyError, TypeError):
                    say(f"watch: rank {rank} published something that is not a state: ignored")
            stale = 0.0
        blocked = [r for r, s in states.items() if s.get("current_op") not in (None, "compute")]
        if not blocked:
            continue
        with open(path, "w") as handle:
            json.dump(snapshot(states), handle)
        report = analyze(path, hung=stale >= options.stuck_after, jobs=1)
        if report.verdict not in ("healthy", "inconclusive"):
            say(f"watch: {report.verdict}, culprit ranks {report.culprit_ranks}")
            return report
        if stale >= options.stuck_after:
            changed_at = time.monotonic()  # judged stuck and undecided: look again after another period
    return None
