"""Write synthetic Flight Recorder dumps, one file per rank, for the benchmark.

Each dump has the shape torch writes (dump version "2.10": `comm_lib_version`,
`pg_config` with `ranks` as a string, `pg_status`, entries with `frames`,
`thread_id`/`thread_name`) and `nccl:` profiling names, so PyTorch's own
analyzer (`torch.distributed.flight_recorder.fr_trace`) loads it. Files are
`nccl_trace_rank_<R>` or, with `--json`, `rank<R>.fr.json` in the
`_dump_*_json` shape (string counters, 0 for unset times, no frames).

The pickles are written the way torch's C++ pickler writes them (protocol 2;
strings memoized by value with BINPUT and repeated with BINGET; the shared
frame dicts memoized; lists as EMPTY_LIST MARK ... APPENDS, dicts as
EMPTY_DICT MARK ... SETITEMS, no memo for other containers) rather than by
Python's pickler, which memoizes every container and so writes about twice
the opcodes of a real dump.

Scenarios (every rank holds `--entries` records, 2,000 by default):

- healthy:  every rank completed the same all_reduces on group "0";
- missing:  rank `--culprit` stopped one collective early: the others are
            stuck in all_reduce #N of group "0", it never issued #N;
- mismatch: rank `--culprit` issued a broadcast as #N while the others
            issued an all_reduce; all are stuck in #N;
- cycle:    two groups "0" and "1" of all ranks, alternating; at the end rank
            `--culprit` entered group 1's next collective while every other
            rank entered group 0's: each side waits for the other (a
            cross-group cycle).

More scenarios, not in the benchmark's default set (`EXTRA_SCENARIOS`):

- state:      the others completed all_reduce #N-1 and wait in #N; rank
              `--culprit` is still inside #N-1 (started, not completed): a
              state mismatch at #N-1 and a missing rank at #N;
- coalesced:  everyone is stuck in a coalesced group at #N; rank `--culprit`'s
              holds two all_reduces, the others' three;
- early_exit: rank `--culprit` completed #N-1 on group "0", left the loop and
              waits in barrier #1 on group "2" ("ckpt", all ranks), which the
              others never entered; they wait for it in all_reduce #N (a
              cross-group wait whose cause is the rank that moved on).

Ranks in the same role get byte-identical files (a dump does not say which
rank wrote it), so writing 8,192 ranks costs one pickling per role.

    python benchmarks/gen_fr_dumps.py OUT --ranks 1024 --scenario missing
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys

VERSION = "2.10"
COMM_LIB = "2.21.5"
TIMEOUT_MS = 600_000
SIZE = [4096, 1024]
T0 = 1_795_945_835_000_000_000
SCENARIOS = ("healthy", "missing", "mismatch", "cycle")
EXTRA_SCENARIOS = ("state", "coalesced", "early_exit")
ALL_SCENARIOS = SCENARIOS + EXTRA_SCENARIOS

_FRAMES = [
    {"name": "all_reduce", "filename": "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py",
     "line": 3245},
    {"name": "wrapper", "filename": "/usr/lib/python3/site-packages/torch/distributed/c10d_logger.py", "line": 83},
    {"name": "sync_gradients", "filename": "/srv/job/train.py", "line": 267},
    {"name": "train_step", "filename": "/srv/job/train.py", "line": 366},
    {"name": "<module>", "filename": "/srv/job/train.py", "line": 426},
]
_PG = {"0": ("0", "default_pg"), "1": ("1", "dp_replicate"), "2": ("2", "ckpt")}


def entry(record_id: int, pg: str, seq: int, op: str, done: bool, *, json_form: bool = False,
          state: str | None = None) -> dict:
    """One Flight Recorder entry as `getCollectiveTrace` (or `dump_json`) writes it; `state`
    overrides the one `done` implies ("scheduled" for a coalesced group's members)."""
    started = T0 + record_id * 1_000_000 + 10_000
    item = {
        "record_id": record_id,
        "pg_id": int(pg),
        "process_group": list(_PG[pg]) if json_form else _PG[pg],
        "thread_name": "pt_main_thread",
        "thread_id": "140387119213440",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": f"nccl:{op}",
        "time_created_ns": T0 + record_id * 1_000_000,
        "input_sizes": [SIZE],
        "input_dtypes": ["Float"],
        "output_sizes": [SIZE],
        "output_dtypes": ["Float"],
        "state": state or ("completed" if done else "started"),
        "time_discovered_started_ns": started,
        "time_discovered_completed_ns": started + 500_000 if done else (0 if json_form else None),
        "retired": done,
        "timeout_ms": TIMEOUT_MS,
        "is_p2p": False,
    }
    if done:
        item["duration_ms"] = 0.5
    if not json_form:
        item["frames"] = _FRAMES
    return item


def ranks_text(world: int) -> str:
    return "[" + ", ".join(map(str, range(world))) + "]"


def roles(scenario: str, world: int, entries: int, culprit: int) -> dict[str, tuple[list, dict, list[int]]]:
    """{role: (entries, pg_status, ranks in that role)}."""
    everyone = [r for r in range(world) if r != culprit]
    last = entries  # the seq of the final collective on group 0

    def status(*pairs):
        return {pg: {"last_enqueued_collective": e, "last_started_collective": s,
                     "last_completed_collective": c} for pg, (e, s, c) in pairs}

    if scenario == "healthy":
        items = [entry(i, "0", i + 1, "all_reduce", True) for i in range(entries)]
        return {"all": (items, status(("0", (last, last, last))), list(range(world)))}
    if scenario == "missing":
        stuck = [entry(i, "0", i + 1, "all_reduce", i + 1 < last) for i in range(entries)]
        early = [entry(i, "0", i + 1, "all_reduce", True) for i in range(entries - 1)]
        return {"waiting": (stuck, status(("0", (last, last, last - 1))), everyone),
                "culprit": (early, status(("0", (last - 1, last - 1, last - 1))), [culprit])}
    if scenario == "mismatch":
        same = [entry(i, "0", i + 1, "all_reduce", i + 1 < last) for i in range(entries)]
        odd = same[:-1] + [entry(entries - 1, "0", last, "broadcast", False)]
        pg = status(("0", (last, last, last - 1)))
        return {"majority": (same, pg, everyone), "culprit": (odd, pg, [culprit])}
    if scenario == "cycle":
        steps = entries // 2  # one all_reduce on group 0 and one on group 1 per step
        common = []
        for step in range(1, steps):
            common.append(entry(len(common), "0", step, "all_reduce", True))
            common.append(entry(len(common), "1", step, "all_reduce", True))
        others = common + [entry(len(common), "0", steps, "all_reduce", False)]
        odd = common + [entry(len(common), "1", steps, "all_reduce", False)]
        done = steps - 1
        return {"group0": (others, status(("0", (steps, steps, done)), ("1", (done, done, done))), everyone),
                "group1": (odd, status(("0", (done, done, done)), ("1", (steps, steps, done))), [culprit])}
    if scenario == "state":
        ahead = [entry(i, "0", i + 1, "all_reduce", i + 1 < last) for i in range(entries)]
        behind = [entry(i, "0", i + 1, "all_reduce", i + 2 < last) for i in range(entries - 1)]
        return {"ahead": (ahead, status(("0", (last, last, last - 1))), everyone),
                "behind": (behind, status(("0", (last - 1, last - 1, last - 2))), [culprit])}
    if scenario == "coalesced":
        def stuck(members: int) -> list:
            items = [entry(i, "0", i + 1, "all_reduce", True) for i in range(entries - members - 1)]
            items += [entry(len(items) + k, "0", last, "all_reduce", False, state="scheduled")
                      for k in range(members)]
            return items + [entry(len(items) + members, "0", last, "coalesced", False)]
        pg = status(("0", (last, last, last - 1)))
        return {"three": (stuck(3), pg, everyone), "two": (stuck(2), pg, [culprit])}
    if scenario == "early_exit":
        stuck = [entry(i, "0", i + 1, "all_reduce", i + 1 < last) for i in range(entries)]
        left = [entry(i, "0", i + 1, "all_reduce", True) for i in range(entries - 1)]
        left.append(entry(entries - 1, "2", 1, "barrier", False))
        return {"waiting": (stuck, status(("0", (last, last, last - 1))), everyone),
                "culprit": (left, status(("0", (last - 1, last - 1, last - 1)), ("2", (1, 1, 0))), [culprit])}
    raise ValueError(f"unknown scenario {scenario!r}")


class TorchStylePickler:
    """Protocol 2 as torch/csrc/jit/serialization/pickler.cpp writes plain data."""

    def __init__(self, shared: set[int]):
        self.out = bytearray(b"\x80\x02")
        self.memo: dict = {}
        self.shared = shared  # ids of dicts written once and referenced after

    def dumps(self, value) -> bytes:
        self.write(value)
        self.out += b"."
        return bytes(self.out)

    def _put(self, key) -> None:
        index = self.memo[key] = len(self.memo)
        self.out += b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index)

    def _get(self, index: int) -> None:
        self.out += b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)

    def write(self, value) -> None:
        out = self.out
        if value is None:
            out += b"N"
        elif value is True:
            out += b"\x88"
        elif value is False:
            out += b"\x89"
        elif type(value) is int:
            if 0 <= value < 256:
                out += b"K" + bytes([value])
            elif 0 <= value < 65536:
                out += b"M" + struct.pack("<H", value)
            elif -(1 << 31) <= value < (1 << 31):
                out += b"J" + struct.pack("<i", value)
            else:
                raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
                out += b"\x8a" + bytes([len(raw)]) + raw
        elif type(value) is float:
            out += b"G" + struct.pack(">d", value)
        elif type(value) is str:
            key = ("s", value)
            if key in self.memo:
                self._get(self.memo[key])
            else:
                raw = value.encode()
                out += b"X" + struct.pack("<I", len(raw)) + raw
                self._put(key)
        elif type(value) is tuple and len(value) == 2:
            self.write(value[0])
            self.write(value[1])
            out += b"\x86"
        elif type(value) in (list, tuple):
            out += b"](" if type(value) is list else b"("
            for item in value:
                self.write(item)
            out += b"e" if type(value) is list else b"t"
        elif type(value) is dict:
            key = ("d", id(value))
            if key in self.memo:
                self._get(self.memo[key])
                return
            out += b"}("
            for k, v in value.items():
                self.write(k)
                self.write(v)
            out += b"u"
            if id(value) in self.shared:
                self._put(key)
        else:
            raise TypeError(f"not plain data: {type(value).__name__}")


def dump(items: list, pg_status: dict, world: int, groups: tuple[str, ...], json_form: bool) -> bytes:
    config = {pg: {"name": pg, "desc": _PG[pg][1], "ranks": ranks_text(world)} for pg in groups}
    top = {"version": VERSION, "comm_lib_version": COMM_LIB, "pg_config": config}
    if json_form:
        top["pg_status"] = {pg: {k: str(v) for k, v in counters.items()} for pg, counters in pg_status.items()}
        if items:
            top["entries"] = [_as_json(e) for e in items]
        top["nccl_comm_state"] = {}
        return json.dumps(top, sort_keys=True, separators=(",", ":")).encode()
    top["pg_status"] = pg_status
    top["entries"] = items
    return TorchStylePickler({id(frame) for frame in _FRAMES}).dumps(top)


def _as_json(item: dict) -> dict:
    out = dict(item)
    out.pop("frames", None)
    out["process_group"] = list(out["process_group"])
    for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
        if out[key] is None:
            out[key] = 0
    return out


def write(out: str, scenario: str, world: int, entries: int = 2000, culprit: int = 1,
          json_form: bool = False, names=None) -> dict[int, str]:
    """Write the dumps; returns {rank: path}. `names(rank)` overrides file names."""
    if world < 2 or not 0 <= culprit < world:
        raise ValueError("need at least 2 ranks and a culprit among them")
    os.makedirs(out, exist_ok=True)
    groups = {"cycle": ("0", "1"), "early_exit": ("0", "2")}.get(scenario, ("0",))
    paths = {}
    for _, (items, pg_status, members) in roles(scenario, world, entries, culprit).items():
        if json_form:
            items = [_as_json(e) for e in items]
        data = dump(items, pg_status, world, groups, json_form)
        for rank in members:
            name = names(rank) if names else (f"rank{rank}.fr.json" if json_form else f"nccl_trace_rank_{rank}")
            path = os.path.join(out, name)
            with open(path, "wb") as handle:
                handle.write(data)
            paths[rank] = path
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write (created; emptied first with --clean)")
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--scenario", choices=ALL_SCENARIOS, default="missing")
    parser.add_argument("--culprit", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="write _dump_*_json shaped files instead")
    parser.add_argument("--clean", action="store_true", help="remove OUT first")
    args = parser.parse_args(argv)
    if args.clean and os.path.isdir(args.out):
        shutil.rmtree(args.out)
    paths = write(args.out, args.scenario, args.ranks, args.entries, args.culprit, args.json)
    print(f"wrote {len(paths)} dumps ({args.scenario}, {args.entries} entries each) to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
