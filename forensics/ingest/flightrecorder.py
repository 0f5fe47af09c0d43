"""PyTorch Flight Recorder dumps (`nccl_trace_rank_<R>`), pickle or JSON.

A dump is one process's ring buffer of communication calls plus per-group
counters. Its schema changed over the releases and every shape is read:

- unversioned (~2.2): a bare list of entries with `seq_id`, `pg_id`, no groups;
- "2.3" / "2.4": a dict with `entries`, `pg_config`, `pg_status`, `version`;
- "2.7": adds `nccl_version`; "2.10": `comm_lib_version`, `thread_id/_name`;
- JSON (`_dump_*_json`): `pg_status` values are strings, unset times are 0,
  no `frames`, and `entries` is missing when the buffer is empty;
- torch 2.13 with Gloo: `pg_config` keyed by an empty name, `ranks` "[]",
  and nothing for the other groups: no member list is claimed from it.

No lark grammar here: a pickle is binary opcodes, read as plain data only by
`safepickle` (nothing in the file can run, and building it is capped in
memory), and JSON goes through the C decoder with `jsonwalk` for the line
of each entry. `ranks` strings like "[0, 1, 2, 3]" are parsed by a regular
expression, never evaluated.

The loaded value is never walked as a whole (that costs as much as loading
it, and a hostile one may nest without end, share references a billion
times or hold itself): it is reached into by key and by bounded slices, and
nothing is hashed or compared before its type is checked. The fields every
decision needs are read from all entries at once, a column at a time in C;
the few entries that reach the record are the only ones read in full.

What a dump says becomes one `ProcessRecord` for the rank in its file name
(the dump itself never says which rank wrote it):

- groups are named by their uid (`process_group[0]`, the PG GUID c10d logs
  print); an entry with an empty uid is named by its `pg_id`, and
  `pg_config`'s empty key is the default group "0". `pg_status` is keyed by
  `pg_id`, mapped to uids through the entries; counters that disagree with
  the group's newest entry belong to another group and are not used;
- for NCCL (and other backends with device events) an entry is done when its
  state is `completed`. Gloo never marks entries started or completed, only
  retires them: there `pg_status`'s last completed collective decides, else
  `retired`. Retired without being done means the watchdog timed it out;
- `last_op` is where the rank is stuck: per group the first entry not done
  (a coalesced group as one `coalesced` op), and of those the latest issued;
  a rank with nothing unfinished keeps its latest call, completed;
- send/recv peers in profiling names (`send 0->1`, `recv 1<-0`) are
  group-local indices: mapped to global ranks through the group's members;
  `recv 1<-?` and Gloo's `recvAnySource` wait on any peer;
- the backend prefix (`nccl:`, `ncclx:`, `gloo:`, `xccl:`, `nccl2:`, …) is
  whatever precedes the last colon; op names Flight Recorder spells its own
  way (`_reduce_oop`, `all_gather_single`, `all_reduce_barrier`) become the
  collective they launch (model.normalize_op), and calls whose counts differ
  per rank by design (`all_gather_v`, `reduce_scatter_v`) keep no sizes to
  compare;
- a call's input dtypes are its `dtype`, its output dtypes `out_dtype`
  ("" for a gather's non-root, which lists no output);
- the stuck entry's stack (`frames`, pickles only) is cited by its innermost
  frames of the job's own code (torch's are skipped), as FR prints them:
  `#2 train_step from /job/train.py:15`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import re
import reprlib
from dataclasses import dataclass
from itertools import compress
from json.decoder import JSONDecodeError
from operator import itemgetter, not_

from .. import lazy, limits
from .reader import reader_hooks
from ..model import (DEFAULT_GROUP, P2P_OPS, CommOp, Evidence, GroupProgress, ProcessGroup,
                     ProcessRecord, normalize_op)
from ..words import stuck_signal
from . import jsonwalk, safepickle
from .attribution import rank_from_path
from .facts import Facts
from .stacks import _library_file
from .textio import InputError, int_text, read_bytes
from .workers import SharedTuple

KIND = "flight-recorder"
SOURCE = "flight-recorder"
RECENT = 8        # entries kept per group in recent_ops
MAX_FRAMES = 32   # stack frames of the stuck entry looked at
USER_FRAMES = 3   # of those, the innermost of the job's own code kept as evidence
MAX_TENSORS = 64  # input_sizes kept per entry
MAX_DIMS = 16
_MAX_NAME = 200   # group names, descriptions, versions: longer is not a real dump
_MAX_PROBE = 64   # leading items looked at to tell a list of entries from anything else

_STATES = ("scheduled", "started", "completed")
# Backends whose entries carry CUDA/XPU events: their state is the truth. The
# others (Gloo, and names we do not know) may never leave `scheduled`, so
# pg_status and `retired` say when they are done.
_EVENT_BACKENDS = frozenset({"nccl", "ncclx", "xccl"})


def _pickled_keys(*keys: str) -> re.Pattern:
    """The keys as a pickler writes them (BINUNICODE, SHORT_BINUNICODE,
    SHORT_BINSTRING with their exact lengths): "version" inside other text,
    or `protocol_version` in an old torch.save file, is no match."""
    forms = []
    for key in keys:
        raw, n = key.encode(), len(key)
        forms += [re.escape(b"X" + n.to_bytes(4, "little") + raw), re.escape(b"\x8c" + bytes([n]) + raw),
                  re.escape(b"U" + bytes([n]) + raw)]
    return re.compile(b"|".join(forms))


_PICKLED_KEY = _pickled_keys("entries", "pg_config", "version", "profiling_name")
_JSON_KEYS = lazy.regex(rb'"(pg_status|pg_config|entries|version|profiling_name|collective_seq_id)"\s*:')

_RANKS_TEXT = lazy.regex(r"\s*\[\s*((?:\d{1,9}\s*,\s*)*\d{1,9})?\s*,?\s*\]\s*")
_SEND = lazy.regex(r"\bsend\s+(\d{1,9})\s*->\s*(\d{1,9})")
_RECV = lazy.regex(r"\brecv\s+(\d{1,9})\s*<-\s*(\d{1,9})")
_TRAILING_RANK = lazy.regex(r"(\d{1,7})$")
_SUFFIXES = (".gz", ".json", ".pkl", ".pickle", ".fr", ".bin", ".dump", ".trace")

_SHORT = reprlib.Repr()
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = 4
_SHORT.maxlevel = 2


def sniff(path: str, head: bytes) -> bool:
    """A pickle (protocol 2-5) that names Flight Recorder keys, or a JSON
    object with them; never a py-spy JSON list or a snapshot."""
    if head[:1] == b"\x80":
        if len(head) < 2 or not 2 <= head[1] <= 5:
            return False
        # Any of them will do: the unversioned format is a bare list of
        # entries, so only `profiling_name` tells it.
        return _PICKLED_KEY.search(head) is not None
    text = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    text = text.lstrip()
    if not text.startswith(b"{") or b"forensics.snapshot/" in text:
        return False
    keys = set(_JSON_KEYS.findall(text[:65536]))
    if b"pg_status" in keys:
        return bool(keys & {b"pg_config", b"entries", b"version"})
    # nlohmann's JSON sorts keys, so a long `entries` list pushes pg_status past the head.
    return {b"entries", b"profiling_name", b"collective_seq_id"} <= keys


def parse(path: str, display: str) -> Facts:
    with _collector_paused():
        dump = read_dump(path, display)
        facts = Facts(KIND, display)
        _Reader(facts, display, dump).read()
        return facts


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while one dump is decoded and
    read. Decoding 2,000 entries makes some 100,000 containers, and every
    700 of them started a collection, now and then a full one over every
    object the process holds (a forked worker holds all its parent loaded):
    a large share of a dump's time went there.
    What the dump's objects hold is freed by reference counts as before; a
    cycle a hostile pickle builds is collected once the collector is back."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)},
    lambda path, head: KIND if sniff(path, head) else None)


# ---------------------------------------------------------------- reading the file

@dataclass(slots=True)
class Dump:
    """The decoded top level and, for JSON, where things are in the file."""

    form: str                   # "pickle" | "json"
    top: object
    entry_lines: list[int] | None = None
    key_lines: dict[str, int] | None = None

    def entry_line(self, index: int) -> int:
        lines = self.entry_lines
        return lines[index] if lines is not None and index < len(lines) else 0

    def key_line(self, key: str) -> int:
        return (self.key_lines or {}).get(key, 0)


def read_dump(path: str, display: str) -> Dump:
    data = read_bytes(path, safepickle.MAX_BYTES + 1)
    if len(data) > safepickle.MAX_BYTES:
        raise InputError(display, f"larger than {safepickle.MAX_BYTES >> 20} MiB: not read")
    if not data.strip():
        raise InputError(display, "empty file")
    if data[:1] == b"\x80":
        # No walk over the result: this reader only reaches into it by key
        # and bounded slices (and tells a list of non-entries apart).
        return Dump("pickle", safepickle.loads_unchecked(data, display))
    text = data.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    start = jsonwalk.skip_ws(text, 0)
    if text[start:start + 1] not in ("{", "["):
        raise InputError(display, "not a Flight Recorder dump: neither a pickle nor JSON")
    try:
        return _read_json(text, start)
    except JSONDecodeError as exc:
        raise InputError(display, f"invalid JSON: {exc.msg}", exc.lineno) from None
    except RecursionError:
        raise InputError(display, "invalid JSON: nested too deeply") from None


def _read_json(text: str, start: int) -> Dump:
    starts: list[int] = []

    def entries(text: str, pos: int):
        items, item_starts, end = jsonwalk.walk_array(text, pos)
        starts.extend(item_starts)
        return items, end

    if text[start] == "[":
        top, starts, end = jsonwalk.walk_array(text, start)
        key_offsets = []
    else:
        top, key_offsets, end = jsonwalk.walk_object(text, start, special={"entries": entries})
    if jsonwalk.skip_ws(text, end) != len(text):
        raise JSONDecodeError("extra data after the dump", text, jsonwalk.skip_ws(text, end))
    counter = jsonwalk.LineCounter(text)
    marks = sorted([(pos, "entry", i) for i, pos in enumerate(starts)]
                   + [(pos, "key", key) for key, pos in key_offsets])
    entry_lines = [0] * len(starts)
    key_lines: dict[str, int] = {}
    for pos, what, which in marks:
        if what == "entry":
            entry_lines[which] = counter(pos)
        else:
            key_lines.setdefault(which, counter(pos))
    if isinstance(top, dict) and "entries" in top and not isinstance(top["entries"], list):
        entry_lines = []
    return Dump("json", top, entry_lines, key_lines)


# ---------------------------------------------------------------- entries

class _BadEntry(Exception):
    pass


_INT_MIN, _INT_MAX = -(1 << 63), 1 << 64  # what a dump's int64/uint64 fields can hold
_FIELDS = itemgetter("record_id", "profiling_name", "process_group", "pg_id", "is_p2p", "collective_seq_id",
                     "p2p_seq_id", "state", "retired")
_NONE = type(None)
_STATE_SET = frozenset(_STATES)


def _fits(value) -> bool:
    return type(value) is int and _INT_MIN <= value < _INT_MAX


def _int(value) -> int | None:
    """An int as a dump stores it: ints (not bools) and, in JSON, digit strings."""
    if type(value) is int:
        return value if _INT_MIN <= value < _INT_MAX else None
    if type(value) is str:
        number = int_text(value)
        return number if number is not None and _INT_MIN <= number < _INT_MAX else None
    return None


def _ints(column: list, none: bool = False) -> bool:
    """Every value an int of 64 bits (or None, when `none`)."""
    kinds = set(map(type, column))
    if none and _NONE in kinds:
        kinds.discard(_NONE)
        column = [value for value in column if value is not None]
    return kinds <= {int} and (not column or (min(column) >= _INT_MIN and max(column) < _INT_MAX))


def _short(value) -> str:
    try:
        return _SHORT.repr(value)
    except Exception:  # e.g. an int too long to print
        return f"<{type(value).__name__}>"


def _sizes(value) -> tuple:
    """input_sizes as tuples of ints; () when malformed."""
    if type(value) not in (list, tuple):
        return ()
    out = []
    for tensor in value[:MAX_TENSORS]:
        if type(tensor) not in (list, tuple):
            return ()
        dims = tuple(tensor[:MAX_DIMS])
        if not all(_fits(d) for d in dims):
            return ()
        out.append(dims)
    return tuple(out)


# Calls whose tensors differ from rank to rank by design (each rank brings its
# own count): their sizes say nothing another rank's could be compared to.
_UNEVEN = frozenset({"all_gather_v", "reduce_scatter_v"})


@functools.lru_cache(maxsize=4096)
def _call(name: str) -> tuple[str, str, bool, str]:
    """`nccl:send 0->1` → ("nccl", "send", False, "send"); `nccl:coalesced`,
    `gloo:allreduce_coalesced` → (…, "coalesced", True, …); the last item
    is the recorded op name, lower-cased. The backend is whatever precedes
    the last colon (`nccl`, `ncclx`, `gloo`, `xccl`, `nccl2`, …): op names
    hold none."""
    backend, _, call = name.rpartition(":")
    token = call.strip().split(" ", 1)[0].lower()
    if token.endswith("coalesced"):
        return backend.strip().lower(), "coalesced", True, token
    return backend.strip().lower(), normalize_op(call[:200]), False, token


def _group_of(group, pg_id) -> tuple[str, str]:
    """(group id, description) of an entry's `process_group` and `pg_id`."""
    pg_name, desc = (group[0][:_MAX_NAME], group[1][:_MAX_NAME]) if group is not None else (None, "")
    return pg_name or (str(pg_id) if pg_id is not None else DEFAULT_GROUP), desc


class _Table:
    """A dump's valid entries in record order, one list per field.

    A dump holds thousands of entries and a record needs a dozen of them, so
    the fields every decision needs are columns (read from all entries at
    once with one `itemgetter`, in C: `_bulk`), and the rest (sizes, dtypes,
    frames, timeout) is read from the raw entry of the few that reach the
    record."""

    __slots__ = ("raw", "index", "rid", "gid", "pg_id", "desc", "name", "calls", "closes", "is_p2p", "seq",
                 "coll", "p2p", "state", "retired", "groups", "end", "members", "done", "timed_out", "timed")
    groups: dict[str, list[int]]  # positions of each group's entries, in record order

    def __init__(self, raw: list, rows):
        """`rows`: the columns (index, record_id, group id, pg_id, desc,
        profiling name, is_p2p, seq, collective seq, p2p seq, state,
        retired), each a list in record order."""
        self.raw = raw
        (self.index, self.rid, self.gid, self.pg_id, self.desc, self.name, self.is_p2p, self.seq, self.coll,
         self.p2p, self.state, self.retired) = rows
        self.calls = {name: _call(name[:_MAX_NAME]) for name in set(self.name)}
        self.closes = any(call[2] for call in self.calls.values())
        self.groups = _by_group(self)
        self.end: dict[int, int] = {}                    # coalesced member → its closing entry
        self.members: dict[int, tuple[int, ...]] = {}    # closing entry → its members
        self.done: list[bool] = []
        self.timed_out: list[int] = []
        self.timed: frozenset = frozenset()

    def __len__(self) -> int:
        return len(self.rid)

    def get(self, pos: int, key: str):
        return self.raw[self.index[pos]].get(key)

    def backend(self, pos: int) -> str:
        return self.calls[self.name[pos]][0]

    def op(self, pos: int) -> str:
        return self.calls[self.name[pos]][1]

    def recorded(self, pos: int) -> str:
        """The op name as the dump spells it (`_reduce_oop`, `all_gather_v`)."""
        return self.calls[self.name[pos]][3]

    def closing(self, pos: int) -> bool:
        """A coalesced group's closing entry (`nccl:coalesced`, `*_coalesced`)."""
        return self.calls[self.name[pos]][2]

    def column(self, values: list, positions: list[int]) -> list:
        return values if len(positions) == len(values) else list(map(values.__getitem__, positions))


def _bulk(raw: list):
    """The columns of a dump whose every entry is well formed, or None (then
    each entry is read on its own and the bad ones become diagnostics)."""
    n = len(raw)
    if not n or set(map(type, raw)) != {dict}:
        return None
    try:  # one pass over the entries (each is visited once, while in cache), then columns
        rid, names, groups, pg_ids, is_p2p, coll, p2p, states, retired = zip(*map(_FIELDS, raw))
    except KeyError:  # a field missing: an older version, or a broken entry
        return None
    # Types first, values after: nothing is compared or hashed before its
    # type is known (a hostile tuple nested deep enough crashes hash()).
    if (set(map(type, rid)) != {int} or not _ints(coll) or not _ints(p2p) or not _ints(pg_ids, none=True)
            or set(map(type, names)) != {str} or not all(names)
            or set(map(type, is_p2p)) != {bool} or set(map(type, retired)) != {bool}
            or set(map(type, states)) != {str} or not set(states) <= _STATE_SET):
        return None
    kinds = set(map(type, groups))
    if kinds != {tuple} and kinds != {list}:  # pickles have tuples, JSON lists
        return None
    # Every group a pair: the lengths add up to 2n, and zip makes exactly
    # two columns only when none is shorter than two (it stops at the shortest).
    if sum(map(len, groups)) != 2 * n:
        return None
    try:
        pg_names, descs = zip(*groups)
    except ValueError:
        return None
    if set(map(type, pg_names)) != {str} or set(map(type, descs)) != {str}:
        return None
    if len(set(pg_names)) == 1 and len(set(descs)) == 1 and len(set(pg_ids)) == 1:
        gid, desc = _group_of(groups[0], pg_ids[0])  # one group: the common case, and cheap
        gid, desc = [gid] * n, [desc] * n
    else:
        pairs = list(zip(pg_names, descs, pg_ids))
        named = {pair: _group_of(pair[:2], pair[2]) for pair in dict.fromkeys(pairs)}
        gid, desc = map(list, zip(*map(named.__getitem__, pairs)))
    seq = [p if flag else c for flag, p, c in zip(is_p2p, p2p, coll)] if any(is_p2p) else coll
    columns = [range(n), rid, gid, pg_ids, desc, names, is_p2p, seq, coll, p2p, states, retired]
    if list(rid) == sorted(rid):  # in record order, as a dump always is (a sort of sorted ints is one pass)
        return columns if rid[0] >= _INT_MIN and rid[-1] < _INT_MAX else None
    if not _ints(rid):
        return None
    order = sorted(range(n), key=rid.__getitem__)
    return [list(map(values.__getitem__, order)) for values in columns]


def parse_ranks(value) -> tuple[int, ...] | None:
    """`"[0, 1, 2, 3]"` (what `ranks_str()` writes) or a list of ints → ranks;
    None when it is neither. Never evaluated."""
    if isinstance(value, (list, tuple)):
        if all(type(r) is int and r >= 0 for r in value):
            return tuple(value)
        return None
    if not isinstance(value, str) or len(value) > 16 * 1024 * 1024:
        return None
    match = _RANKS_TEXT.fullmatch(value)
    if match is None:
        return None
    body = match.group(1)
    return tuple(int(r) for r in body.split(",")) if body else ()


def _members(value) -> tuple[int, ...] | None:
    """A group's members, sorted (the order peers index into), or None."""
    if isinstance(value, str):
        return _members_of_text(value)
    ranks = parse_ranks(value)
    return None if ranks is None else tuple(sorted(set(ranks)))


@functools.lru_cache(maxsize=64)
def _members_of_text(text: str) -> tuple[int, ...] | None:
    """Cached by the text: every rank's dump repeats the same membership
    strings, and one shared tuple per worker (sent to the parent once, see
    workers.SharedTuple) keeps 8,192 dumps of an 8,192-rank group from
    costing 8,192**2 ints."""
    ranks = parse_ranks(text)
    return None if ranks is None else SharedTuple(sorted(set(ranks)))


def rank_of(display: str) -> int | None:
    """The global rank in a dump's path. The file name first: what
    `rank_from_path` finds there, else the number it ends with (torch writes
    `<prefix><rank>`, so `trace_node02_5` is rank 5 despite the 02); then the
    folders (`rank3/dump`)."""
    name = display.replace(os.sep, "/").rsplit("/", 1)[-1]
    rank = rank_from_path(name)
    if rank is None:
        rank = _trailing_rank(name.lower())
    return rank if rank is not None else rank_from_path(display)


def _trailing_rank(name: str) -> int | None:
    stripped = True
    while stripped:
        stripped = False
        for suffix in _SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name, stripped = name[:-len(suffix)], True
    match = _TRAILING_RANK.search(name)
    if match and (match.start() == 0 or not name[match.start() - 1].isdigit()):
        return int(match.group(1))
    return None


# ---------------------------------------------------------------- the reader

class _Reader:
    def __init__(self, facts: Facts, display: str, dump: Dump):
        self.facts = facts
        self.display = display
        self.dump = dump
        self.members_of: dict[str, tuple[int, ...]] = {}
        self.ops: dict[int, CommOp] = {}
        self.table: _Table | None = None
        self.told: set[int] = set()

    def diag(self, message: str, line: int = 0, severity: str = "warning") -> None:
        self.facts.diag(line, message, severity)

    def read(self) -> None:
        top = self.dump.top
        if isinstance(top, list):
            version, raw_entries, config, status, lib = "unversioned", top, None, None, ""
        elif isinstance(top, dict):
            if not any(key in top for key in ("entries", "pg_config", "pg_status", "version")):
                raise InputError(self.display, "not a Flight Recorder dump: it has none of the keys "
                                               "entries, pg_config, pg_status, version")
            version = top.get("version")
            version = version[:_MAX_NAME] if isinstance(version, str) and version else "unknown-version"
            raw_entries = top.get("entries", [])
            config, status = top.get("pg_config"), top.get("pg_status")
            lib = top.get("comm_lib_version", top.get("nccl_version", ""))
            lib = lib[:_MAX_NAME] if isinstance(lib, str) else ""
        else:
            raise InputError(self.display, f"not a Flight Recorder dump: the top level is a {type(top).__name__}")
        if not isinstance(raw_entries, list):
            self.diag(f"entries is a {type(raw_entries).__name__}, not a list: no entries read")
            raw_entries = []
        cap = limits.current().fr_entries
        if len(raw_entries) > cap:  # the newest are last: a hang is at the end of the buffer
            self.diag(f"{len(raw_entries):,} entries, more than the limit of {cap:,} per dump "
                      f"(--limit fr-entries=N): the last {cap:,} were read")
            raw_entries = raw_entries[-cap:]

        if raw_entries and not any(type(raw) is dict for raw in raw_entries[:_MAX_PROBE]):
            # Entries are mappings: a list of anything else is not a dump (nor
            # is it walked: it may nest without end or hold itself).
            where = "the top level" if raw_entries is top else "entries"
            raise InputError(self.display, f"not a Flight Recorder dump: {where} is a list of "
                                           f"{type(raw_entries[0]).__name__}, not of entries")
        configs = self.pg_config(config)
        table = self.table = self.entries(raw_entries)
        uid_of = self.uids(table)
        progress = self.pg_status(status, uid_of, configs, table)
        self.members_of = self.members(configs, table)
        self.resolve(table, progress)
        self.record(version, lib, len(raw_entries), table, progress, configs)

    # ---- pg_config / pg_status

    def pg_config(self, config) -> dict[str, tuple[str, tuple[int, ...] | None]]:
        """{group id: (desc, ranks or None)}. The empty key torch 2.13 writes
        is the default group; an explicit "0" entry wins over it. Torch 2.13
        with Gloo writes only that empty key, with ranks "[]": no member list
        for any group, so none is claimed (the others' dumps or the world
        tell the members)."""
        out: dict[str, tuple[str, tuple[int, ...] | None]] = {}
        line = self.dump.key_line("pg_config")
        if config is None:
            return out
        if not isinstance(config, dict):
            self.diag(f"pg_config is a {type(config).__name__}, not a mapping: ignored", line)
            return out
        for key, value in config.items():
            if not isinstance(key, str) or not isinstance(value, dict):
                self.diag(f"pg_config entry {_short(key)} is not a group description: ignored", line)
                continue
            name = (key or (value.get("name") if isinstance(value.get("name"), str) else "")
                    or DEFAULT_GROUP)[:_MAX_NAME]
            desc = value.get("desc")[:_MAX_NAME] if isinstance(value.get("desc"), str) else ""
            ranks = _members(value.get("ranks"))
            if ranks is None:
                self.diag(f"pg_config[{_short(key)}]: ranks {_short(value.get('ranks'))} is not a list of ranks: "
                          f"ignored", line)
            if key == "" and name in out:
                continue
            out[name] = (desc, ranks)
        return out

    def pg_status(self, status, uid_of: dict[int, str], configs, table: _Table) -> dict[str, GroupProgress]:
        out: dict[str, GroupProgress] = {}
        last_seq: dict[str, int] = {}
        for gid, positions in table.groups.items():
            flags = table.column(table.is_p2p, positions)
            seqs = table.column(table.coll, positions)
            if any(flags):
                seqs = list(compress(seqs, map(not_, flags)))
            if seqs:
                last_seq[gid] = max(seqs)
        if status is None:
            return out
        line = self.dump.key_line("pg_status")
        if not isinstance(status, dict):
            self.diag(f"pg_status is a {type(status).__name__}, not a mapping: ignored", line)
            return out
        for key, counters in status.items():
            pg_id = _int(key)
            if pg_id is None or not isinstance(counters, dict):
                self.diag(f"pg_status entry {_short(key)} is not a group's counters: ignored", line)
                continue
            gid = uid_of.get(pg_id)
            if gid is None:
                gid = str(pg_id)
                if gid not in configs:
                    self.diag(f"pg_status[{key!r}]: no entry of this dump names the group with pg_id {pg_id}; "
                              f"taken as group {gid!r}", line, "info")
            values = {}
            for field, short in (("last_enqueued_collective", "enqueued"), ("last_started_collective", "started"),
                                 ("last_completed_collective", "completed")):
                raw = counters.get(field)
                values[short] = _int(raw)
                if raw is not None and values[short] is None:
                    self.diag(f"pg_status[{key!r}].{field} = {_short(raw)} is not a number: ignored", line)
            text = (f"pg_status[{key}] group {gid}: last enqueued {values['enqueued']}, "
                    f"started {values['started']}, completed {values['completed']}")
            newest = last_seq.get(gid)
            if newest is not None and values["enqueued"] is not None and values["enqueued"] != newest:
                # The newest collective of a group is always in the ring, so
                # these counters belong to another group with the same pg_id
                # (seen with TORCH_DISTRIBUTED_DEBUG=DETAIL's helper groups).
                self.diag(f"{text}, but the newest collective of that group in the entries is #{newest}: "
                          f"these counters are not this group's and are not used", line)
                continue
            out[gid] = GroupProgress(evidence=Evidence(self.display, line, text), **values)
        return out

    # ---- entries

    def entries(self, raw_entries: list) -> _Table:
        """The valid entries. Well-formed dumps are read a column at a time;
        otherwise entry by entry, each bad one a diagnostic."""
        self.facts.lines_read = len(raw_entries)
        columns = _bulk(raw_entries)
        if columns is not None:
            return _Table(raw_entries, columns)
        rows = []
        for index, raw in enumerate(raw_entries):
            try:
                rows.append(self.entry(index, raw))
            except _BadEntry as exc:
                self.facts.unrecognized += 1
                self.diag(f"entry {index}: {exc}", self.dump.entry_line(index))
        rows.sort(key=itemgetter(1))
        columns = [list(values) for values in zip(*rows)] if rows else [[] for _ in range(12)]
        return _Table(raw_entries, columns)

    def entry(self, index: int, raw) -> tuple:
        """One entry's row (see `_Table`), or _BadEntry saying what is wrong."""
        if type(raw) is not dict:
            raise _BadEntry(f"a {type(raw).__name__}, not an entry")
        get = raw.get
        record_id = get("record_id")
        if not _fits(record_id):
            raise _BadEntry(_missing(raw, "record_id"))
        name = get("profiling_name")
        if type(name) is not str or not name:
            raise _BadEntry(_missing(raw, "profiling_name"))
        op = _call(name[:_MAX_NAME])[1]
        group = get("process_group")
        if type(group) in (tuple, list) and len(group) == 2 and type(group[0]) is str and type(group[1]) is str:
            group = tuple(group)
        elif group is not None:
            raise _BadEntry(f"process_group {_short(group)} is not (name, description)")
        pg_id = get("pg_id")
        if not _fits(pg_id):
            pg_id = None
            if group is None:
                raise _BadEntry("missing process_group and pg_id")
        gid, desc = _group_of(group, pg_id)
        is_p2p = get("is_p2p")
        if type(is_p2p) is not bool:
            is_p2p = op in P2P_OPS
        coll_seq, p2p_seq = get("collective_seq_id"), get("p2p_seq_id")
        if coll_seq is None and "seq_id" in raw:  # the unversioned format
            coll_seq, field = get("seq_id"), "seq_id"
        else:
            field = "p2p_seq_id" if is_p2p else "collective_seq_id"
        coll_seq = coll_seq if _fits(coll_seq) else None
        p2p_seq = p2p_seq if _fits(p2p_seq) else None
        seq = p2p_seq if is_p2p and field == "p2p_seq_id" else coll_seq
        if seq is None:
            raise _BadEntry(_missing(raw, field))
        state = get("state")
        if state not in _STATES:
            raise _BadEntry(_missing(raw, "state") if state is None else f"unknown state {_short(state)}")
        retired = get("retired", False)
        if type(retired) is not bool:
            raise _BadEntry(f"retired is {_short(retired)}, not true/false")
        return index, record_id, gid, pg_id, desc, name, is_p2p, seq, coll_seq, p2p_seq, state, retired

    def uids(self, table: _Table) -> dict[int, str]:
        """pg_id (what pg_status is keyed by) → group id, from the entries:
        the first group an id names wins, and a second one is a diagnostic."""
        firsts = []  # (first position, pg_id, group) of each pg_id of each group
        for gid, positions in table.groups.items():
            ids = table.column(table.pg_id, positions)
            firsts += [(positions[ids.index(pg_id)], pg_id, gid) for pg_id in dict.fromkeys(ids)
                       if pg_id is not None]
        out: dict[int, str] = {}
        for pos, pg_id, gid in sorted(firsts):
            known = out.setdefault(pg_id, gid)
            if known != gid and pg_id not in self.told:
                self.told.add(pg_id)
                index = table.index[pos]
                self.diag(f"entry {index}: pg_id {pg_id} is group {gid!r} here but {known!r} in earlier "
                          f"entries; pg_status[{pg_id}] is read as group {known!r}", self.dump.entry_line(index))
        return out

    def members(self, configs, table: _Table) -> dict[str, tuple[int, ...]]:
        out = {gid: ranks for gid, (_, ranks) in configs.items() if ranks}
        unmapped = []
        for gid, positions in sorted(table.groups.items()):
            flags = table.column(table.is_p2p, positions)
            if gid not in out and any(flags) and not all(
                    _is_default(gid, desc) for desc in set(compress(table.column(table.desc, positions), flags))):
                unmapped.append(gid)
        for gid in unmapped:
            self.diag(f"group {gid!r}: its ranks are not in pg_config, so the peers of its send/recv "
                      f"(group-local indices) cannot be mapped to global ranks", 0, "info")
        return out

    # ---- what each entry means

    def resolve(self, table: _Table, progress) -> None:
        """Which entries are done, which timed out, and which coalesced ops
        close which groups, a group at a time."""
        done = table.done = [state == "completed" for state in table.state]
        timed: list[int] = []
        end = table.end
        for gid, positions in table.groups.items():
            self.coalesce(gid, positions, table)
            status = progress.get(gid)
            completed = status.completed if status is not None else None
            if end:
                pending = positions
            else:  # without coalesced ops a completed entry is done as it stands
                pending = list(compress(positions, map(not_, table.column(done, positions))))
            for pos in pending:
                anchor = end.get(pos, pos)
                done[pos] = finished = _done(table, anchor, completed)
                if anchor == pos and table.retired[pos] and not finished:
                    timed.append(pos)
        table.timed_out = sorted(timed)
        table.timed = frozenset(timed)

    def coalesce(self, gid: str, positions: list[int], table: _Table) -> None:
        """Link a coalesced group's members to its closing entry: the
        consecutive entries before a `*coalesced` one with the same seq."""
        seqs = table.column(table.seq, positions)
        if not (table.closes and any(map(table.closing, positions))) and (
                len(set(seqs)) == len(seqs) or not any(map(int.__eq__, seqs, seqs[1:]))):
            return  # the common case: no coalesced op, no two neighbours with one seq (no two at all: quicker)
        for at, pos in enumerate(positions):
            if not table.closing(pos):
                continue
            found = []
            back = at - 1
            while back >= 0:
                member = positions[back]
                if table.closing(member) or member in table.end or not _same_seq(table, member, pos):
                    break
                found.append(member)
                back -= 1
            for member in found:
                table.end[member] = pos
            table.members[pos] = tuple(reversed(found))
        loose: list[int] = []
        for pos in positions + [None]:
            if (pos is not None and not table.closing(pos) and pos not in table.end and loose
                    and table.is_p2p[pos] == table.is_p2p[loose[-1]] and table.seq[pos] == table.seq[loose[-1]]):
                loose.append(pos)
                continue
            if len(loose) > 1:
                first = loose[0]
                self.diag(f"group {gid!r}: entries record_id {table.rid[first]}-{table.rid[loose[-1]]} share "
                          f"{'p2p' if table.is_p2p[first] else 'collective'} seq {table.seq[first]} without a "
                          f"coalesced end: read one by one", self.line(first), "info")
            loose = [pos] if pos is not None and not table.closing(pos) and pos not in table.end else []

    def line(self, pos: int) -> int:
        return self.dump.entry_line(self.table.index[pos])

    def comm_op(self, pos: int) -> CommOp:
        known = self.ops.get(pos)
        if known is not None:
            return known
        table = self.table
        members = table.members.get(pos, ())
        peers = _peers(table, pos, self.members_of) if table.is_p2p[pos] or members else ()
        sizes, out_sizes = _sizes(table.get(pos, "input_sizes")), _sizes(table.get(pos, "output_sizes"))
        if members:
            sizes = tuple(s for m in members for s in _sizes(table.get(m, "input_sizes")))[:MAX_TENSORS] or sizes
            out_sizes = tuple(s for m in members
                              for s in _sizes(table.get(m, "output_sizes")))[:MAX_TENSORS] or out_sizes
        if table.recorded(pos) in _UNEVEN:
            sizes = out_sizes = ()
        dtype, out_dtype = _dtypes(table, members or (pos,))
        any_source = table.op(pos) == "recv" and not peers and _any_source(table.name[pos])
        timeout = table.get(pos, "timeout_ms")
        timeout = timeout if _fits(timeout) and timeout >= 0 else None
        done, timed_out = table.done[pos], pos in table.timed
        gid, seq, name = table.gid[pos], table.seq[pos], table.name[pos][:200]
        text = f"entry record_id={table.rid[pos]} pg={gid} seq={seq} {name} {table.state[pos]}"
        if table.retired[pos]:
            text += ", retired" + ("" if done else " without completing (timed out)")
        if members:
            text += f" ({len(members)} coalesced ops)"
        op = self.ops[pos] = CommOp(
            op=table.op(pos), group=gid, seq=seq, state="completed" if done else table.state[pos], peers=peers,
            any_source=any_source,
            sizes=sizes, dtype=dtype, timeout_ms=timeout, elapsed_ms=timeout if timed_out else None,
            out_sizes=out_sizes, out_dtype=out_dtype, record_id=table.rid[pos],
            evidence=Evidence(self.display, self.line(pos), text))
        return op

    # ---- the record

    def record(self, version: str, lib: str, count: int, table: _Table, progress, configs) -> None:
        facts, display = self.facts, self.display
        op_of = self.comm_op
        done = table.done
        stuck: list[int] = []
        for positions in table.groups.values():
            flags = table.column(done, positions)
            if not all(flags):
                first = positions[flags.index(False)]
                stuck.append(table.end.get(first, first))
        running = [pos for pos in stuck if table.state[pos] == "started"]
        if running:
            # A call the device runs: the latest launched of those started and
            # not done. A call launched after it and only `scheduled` is queued
            # behind it (rules/_semantics.py: queued_behind), not where it is.
            last = max(running, key=table.rid.__getitem__)
        elif stuck:
            last = max(stuck, key=table.rid.__getitem__)
        else:
            last = len(table) - 1 if len(table) else None
        last_op = op_of(last) if last is not None else None

        recent = sorted(pos for positions in table.groups.values() for pos in positions[-RECENT:])
        timed_out = table.timed_out
        errors = [op_of(pos).evidence for pos in timed_out[:RECENT]]
        if last is not None and not done[last]:
            errors.extend(self.frames(last))
        if timed_out:
            first = timed_out[0]
            facts.stuck.append(stuck_signal(
                "watchdog_timeout", "fr_retired", op_of(first).evidence, op=table.op(first), seq=table.seq[first],
                group=table.gid[first], timeout_ms=op_of(first).timeout_ms, others=len(timed_out) - 1))

        descs = {gid: next(filter(None, table.column(table.desc, positions)), "")
                 for gid, positions in table.groups.items()}
        for gid, (desc, ranks) in configs.items():
            if ranks:
                facts.groups.append(ProcessGroup(gid, desc or descs.get(gid, ""), ranks))
        listed = {gid for gid, (_, ranks) in configs.items() if ranks}
        for gid, desc in sorted(descs.items()):
            if gid not in listed and desc and desc != "undefined" and not _is_default(gid, desc):
                facts.groups.append(ProcessGroup(gid, desc, ()))  # its name; members from elsewhere

        rank = rank_of(display)
        if rank is None:
            self.diag("cannot tell which rank wrote this Flight Recorder dump: its file name holds no rank "
                      "(torch names them <prefix><rank>, e.g. nccl_trace_rank_3)")
        form = "" if self.dump.form == "pickle" else " JSON"
        summary = f"{version}{form} dump, {count} entries" + (f"; comm lib {lib}" if lib else "")
        facts.records.append(ProcessRecord(
            SOURCE, display, rank=rank, last_op=last_op,
            recent_ops=tuple(op_of(pos) for pos in recent), progress=progress,
            errors=tuple(errors), timed_out=bool(timed_out),
            evidence=Evidence(display, 0, summary), named_groups=tuple(sorted(table.groups)),
            whole_history=bool(len(table)) and min(table.rid) == 0,
            # torch's Gloo backend records its collectives, never a send or recv
            # (every Gloo dump of a job hung in send/recv holds only collectives)
            unrecorded=("send", "recv") if len(table) and all(n.startswith("gloo:") for n in table.name) else ()))

    def frames(self, pos: int) -> list[Evidence]:
        """Where the stuck call was made: the innermost frames of the job's
        own code in the entry's stack (torch and other libraries skipped),
        as FR prints them (`#2 train_step from train.py:15`); the innermost
        frames when none is the job's."""
        table = self.table
        frames = table.get(pos, "frames")
        members = table.members.get(pos, ())
        if not frames and members:
            frames = table.get(members[0], "frames")
        if not isinstance(frames, (list, tuple)):
            return []
        found = []
        for number, frame in enumerate(frames[:MAX_FRAMES]):
            if not isinstance(frame, dict):
                continue
            name, filename, line = frame.get("name"), frame.get("filename"), frame.get("line")
            if not isinstance(name, str):
                continue
            filename = filename[:300] if isinstance(filename, str) else ""
            where = f"{filename}:{line if _fits(line) else '?'}" if filename else "?"
            found.append((bool(filename) and not _library_file(filename),
                          Evidence(self.display, self.line(pos), f"#{number} {name[:200]} from {where}")))
        own = [evidence for is_own, evidence in found if is_own]
        return (own or [evidence for _, evidence in found])[:USER_FRAMES]


def _by_group(table: _Table) -> dict[str, list[int]]:
    gids = table.gid
    if not gids:
        return {}
    if len(set(gids)) == 1:
        return {gids[0]: list(range(len(gids)))}
    out: dict[str, list[int]] = {}
    for pos, gid in enumerate(gids):
        out.setdefault(gid, []).append(pos)
    return out


def _dtypes(table: _Table, positions) -> tuple[str, str | None]:
    """(input dtypes, output dtypes) of a call (of every member of a
    coalesced group), each comma-joined; the outputs are None when the dump
    lists none at all, "" when it lists an empty list (a gather's non-root).
    Entries whose dtypes are not lists of names claim nothing: ("", None)."""
    inputs, outputs, listed = {}, {}, False
    for pos in positions:
        names_in = _dtype_names(table.get(pos, "input_dtypes"))
        raw = table.get(pos, "output_dtypes")
        names_out = _dtype_names(raw)
        if names_in is None or names_out is None:
            return "", None
        listed = listed or raw is not None
        inputs.update(dict.fromkeys(names_in))
        outputs.update(dict.fromkeys(names_out))
    return ",".join(inputs), (",".join(outputs) if listed else None)


def _dtype_names(value) -> list[str] | None:
    """A dump's dtype list (`["Float", "Float"]`) as its names; a bare
    string is one name, an empty list or string none. Anything else (a
    list of non-names): None."""
    if type(value) is str:
        return [value[:40]] if value else []
    if value is None:
        return []
    if type(value) not in (list, tuple):
        return None
    names = value[:MAX_TENSORS]
    if not all(type(name) is str for name in names):
        return None
    return [name[:40] for name in names if name]


def _any_source(name: str) -> bool:
    """`gloo:recvAnySource`, or a recv whose source is `?` (`recv 1<-?`)."""
    call = name.rpartition(":")[2].strip().lower()
    return call.startswith("recvanysource") or bool(re.match(r"recv\s+\d+\s*<-\s*\?", call))


def _missing(raw: dict, field: str) -> str:
    if field in raw:
        return f"{field} is {_short(raw[field])}, not a number" if field != "profiling_name" \
            else f"profiling_name is {_short(raw[field])}"
    record = _int(raw.get("record_id"))
    return f"missing {field}" + (f" (record_id {record})" if record is not None and field != "record_id" else "")


def _same_seq(table: _Table, member: int, end: int) -> bool:
    if table.is_p2p[member] and table.p2p[member] is not None:
        return table.p2p[member] == table.p2p[end]
    return table.coll[member] is not None and table.coll[member] == table.coll[end]


def _done(table: _Table, pos: int, completed: int | None) -> bool:
    """Whether the call finished. NCCL's own events decide for NCCL (its
    pg_status can move past a hung collective when a later send completes);
    for Gloo, pg_status's last completed collective, else `retired`."""
    if table.state[pos] == "completed":
        return True
    if table.backend(pos) in _EVENT_BACKENDS:
        return False
    if not table.is_p2p[pos] and completed is not None and table.coll[pos] is not None:
        return table.coll[pos] <= completed
    return table.retired[pos]


def _is_default(gid: str, desc: str) -> bool:
    return gid == DEFAULT_GROUP or desc == "default_pg"


def _peers(table: _Table, pos: int, members: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Global ranks of the other side of a send/recv (or of every member of
    a coalesced group). Indices in names are group-local."""
    local: list[int] = []
    for item in table.members.get(pos) or (pos,):
        name = table.name[item][:200]
        match = _SEND.search(name)
        if match is not None:
            local.append(int(match.group(2)))
            continue
        match = _RECV.search(name)
        if match is not None:
            local.append(int(match.group(2)))
    if not local:
        return ()
    gid = table.gid[pos]
    ranks = members.get(gid)
    if ranks is None:
        if not _is_default(gid, table.desc[pos]):
            return ()
        return tuple(sorted(set(local)))
    if any(i >= len(ranks) for i in local):
        return ()
    return tuple(sorted({ranks[i] for i in local}))
