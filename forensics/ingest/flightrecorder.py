"""PyTorch Flight Recorder dumps (`nccl_trace_rank_<R>`), pickle or JSON.

A dump is one process's ring buffer of communication calls plus per-group
counters. Its schema changed over the releases and every shape is read:

- unversioned (~2.2): a bare list of entries with `seq_id`, `pg_id`, no groups;
- "2.3" / "2.4": a dict with `entries`, `pg_config`, `pg_status`, `version`;
- "2.7": adds `nccl_version`; "2.10": `comm_lib_version`, `thread_id/_name`;
- JSON (`_dump_*_json`): `pg_status` values are strings, unset times are 0,
  no `frames`, and `entries` is missing when the buffer is empty;
- torch 2.13 with Gloo: `pg_config` keyed by an empty name, `ranks` "[]".

No lark grammar here: a pickle is binary opcodes, read as plain data only by
`safepickle` (nothing in the file can run), and JSON goes through the C
decoder with `jsonwalk` for the line of each entry. `ranks` strings like
"[0, 1, 2, 3]" are parsed by a regular expression, never evaluated.

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
  group-local indices: mapped to global ranks through the group's members.
"""

from __future__ import annotations

import functools
import os
import re
import reprlib
from dataclasses import dataclass
from json.decoder import JSONDecodeError

from .reader import reader_hooks
from ..model import (DEFAULT_GROUP, P2P_OPS, CommOp, Evidence, GroupProgress, ProcessGroup,
                     ProcessRecord, StuckSignal, normalize_op)
from . import jsonwalk, safepickle
from .attribution import rank_from_path
from .facts import Facts
from .textio import InputError, read_bytes

KIND = "flight-recorder"
SOURCE = "flight-recorder"
RECENT = 8        # entries kept per group in recent_ops
MAX_FRAMES = 32   # stack frames of the stuck entry kept as evidence
MAX_TENSORS = 64  # input_sizes kept per entry
MAX_DIMS = 16
_MAX_NAME = 200   # group names, descriptions, versions: longer is not a real dump

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
_JSON_KEYS = re.compile(rb'"(pg_status|pg_config|entries|version|profiling_name|collective_seq_id)"\s*:')

_RANKS_TEXT = re.compile(r"\s*\[\s*((?:\d{1,9}\s*,\s*)*\d{1,9})?\s*,?\s*\]\s*")
_SEND = re.compile(r"\bsend\s+(\d{1,9})\s*->\s*(\d{1,9})")
_RECV = re.compile(r"\brecv\s+(\d{1,9})\s*<-\s*(\d{1,9})")
_TRAILING_RANK = re.compile(r"(\d{1,7})$")
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
    dump = read_dump(path, display)
    facts = Facts(KIND, display)
    _Reader(facts, display, dump).read()
    return facts


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
        return Dump("pickle", safepickle.loads(data, display))
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

@dataclass(slots=True)
class _Entry:
    index: int
    record_id: int
    gid: str
    pg_id: int | None
    desc: str
    name: str
    op: str
    backend: str
    is_p2p: bool
    seq: int
    coll_seq: int | None
    p2p_seq: int | None
    state: str
    retired: bool
    timeout_ms: int | None
    sizes: tuple
    dtype: str
    frames: object
    line: int
    coalesced_end: bool
    end: "_Entry | None" = None      # a coalesced member's closing entry
    members: tuple = ()              # a closing entry's members
    done: bool = False
    timed_out: bool = False


class _BadEntry(Exception):
    pass


def _int(value) -> int | None:
    """An int as a dump stores it: ints (not bools) and, in JSON, digit strings."""
    if type(value) is int:
        return value
    if type(value) is str and 0 < len(value) <= 20:
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
    return None


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
        if not all(type(d) is int for d in dims):
            return ()
        out.append(dims)
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _call(name: str) -> tuple[str, str, bool]:
    """`nccl:send 0->1` → ("nccl", "send", False); `nccl:coalesced`,
    `gloo:allreduce_coalesced` → (…, "coalesced", True)."""
    backend, _, call = name.partition(":") if ":" in name else ("", "", name)
    token = call.strip().split(" ", 1)[0].lower()
    if token.endswith("coalesced"):
        return backend.strip().lower(), "coalesced", True
    return backend.strip().lower(), normalize_op(name[:200]), False


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
    strings, and one shared tuple per worker (pickled once per batch of
    results) keeps 8,192 dumps of an 8,192-rank group from costing 8,192**2 ints."""
    ranks = parse_ranks(text)
    return None if ranks is None else tuple(sorted(set(ranks)))


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
        self.peers: dict[int, tuple[int, ...]] = {}
        self.ops: dict[int, CommOp] = {}

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

        configs = self.pg_config(config)
        entries = self.entries(raw_entries)
        uid_of = self.uids(entries)
        progress = self.pg_status(status, uid_of, configs, entries)
        members = self.members(configs, entries)
        by_group = self.resolve(entries, progress, members)
        self.record(version, lib, len(raw_entries), entries, by_group, progress, configs)

    # ---- pg_config / pg_status

    def pg_config(self, config) -> dict[str, tuple[str, tuple[int, ...] | None]]:
        """{group id: (desc, ranks or None)}. The empty key torch 2.13 writes
        is the default group; an explicit "0" entry wins over it."""
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

    def pg_status(self, status, uid_of: dict[int, str], configs,
                  entries: list[_Entry]) -> dict[str, GroupProgress]:
        out: dict[str, GroupProgress] = {}
        last_seq: dict[str, int] = {}
        for entry in entries:
            if not entry.is_p2p and entry.coll_seq is not None:
                last_seq[entry.gid] = max(last_seq.get(entry.gid, entry.coll_seq), entry.coll_seq)
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

    def entries(self, raw_entries: list) -> list[_Entry]:
        out = []
        self.facts.lines_read = len(raw_entries)
        for index, raw in enumerate(raw_entries):
            try:
                out.append(self.entry(index, raw))
            except _BadEntry as exc:
                self.facts.unrecognized += 1
                self.diag(f"entry {index}: {exc}", self.dump.entry_line(index))
        out.sort(key=lambda e: e.record_id)
        return out

    def entry(self, index: int, raw) -> _Entry:
        if type(raw) is not dict:
            raise _BadEntry(f"a {type(raw).__name__}, not an entry")
        get = raw.get
        record_id = get("record_id")
        if type(record_id) is not int:
            raise _BadEntry(_missing(raw, "record_id"))
        name = get("profiling_name")
        if type(name) is not str or not name:
            raise _BadEntry(_missing(raw, "profiling_name"))
        backend, op, coalesced_end = _call(name)
        group = get("process_group")
        if type(group) in (tuple, list) and len(group) == 2 and type(group[0]) is str and type(group[1]) is str:
            pg_name, desc = group[0][:_MAX_NAME], group[1][:_MAX_NAME]
        elif group is None:
            pg_name, desc = None, ""
        else:
            raise _BadEntry(f"process_group {_short(group)} is not (name, description)")
        pg_id = get("pg_id")
        if type(pg_id) is not int:
            pg_id = None
            if pg_name is None:
                raise _BadEntry("missing process_group and pg_id")
        gid = pg_name or (str(pg_id) if pg_id is not None else DEFAULT_GROUP)
        is_p2p = get("is_p2p")
        if type(is_p2p) is not bool:
            is_p2p = op in P2P_OPS
        coll_seq, p2p_seq = get("collective_seq_id"), get("p2p_seq_id")
        if coll_seq is None and "seq_id" in raw:  # the unversioned format
            coll_seq, field = get("seq_id"), "seq_id"
        else:
            field = "p2p_seq_id" if is_p2p else "collective_seq_id"
        coll_seq = coll_seq if type(coll_seq) is int else None
        p2p_seq = p2p_seq if type(p2p_seq) is int else None
        seq = p2p_seq if is_p2p and field == "p2p_seq_id" else coll_seq
        if seq is None:
            raise _BadEntry(_missing(raw, field))
        state = get("state")
        if state not in _STATES:
            raise _BadEntry(_missing(raw, "state") if state is None else f"unknown state {_short(state)}")
        retired = get("retired", False)
        if type(retired) is not bool:
            raise _BadEntry(f"retired is {_short(retired)}, not true/false")
        timeout = get("timeout_ms")
        if type(timeout) is not int or timeout < 0:
            timeout = None
        dtypes = get("input_dtypes")
        dtype = dtypes[0][:40] if type(dtypes) in (list, tuple) and dtypes and type(dtypes[0]) is str else ""
        return _Entry(index, record_id, gid, pg_id, desc, name[:200], op, backend, is_p2p, seq, coll_seq,
                      p2p_seq, state, retired, timeout, _sizes(get("input_sizes")), dtype, get("frames"),
                      self.dump.entry_line(index), coalesced_end)

    def uids(self, entries: list[_Entry]) -> dict[int, str]:
        """pg_id (what pg_status is keyed by) → group id, from the entries."""
        out: dict[int, str] = {}
        told: set[int] = set()
        for entry in entries:
            if entry.pg_id is None:
                continue
            known = out.setdefault(entry.pg_id, entry.gid)
            if known != entry.gid and entry.pg_id not in told:
                told.add(entry.pg_id)
                self.diag(f"entry {entry.index}: pg_id {entry.pg_id} is group {entry.gid!r} here but "
                          f"{known!r} in earlier entries; pg_status[{entry.pg_id}] is read as group {known!r}",
                          entry.line)
        return out

    def members(self, configs, entries: list[_Entry]) -> dict[str, tuple[int, ...]]:
        out = {gid: ranks for gid, (_, ranks) in configs.items() if ranks}
        unmapped = sorted({e.gid for e in entries if e.is_p2p and e.gid not in out
                           and not _is_default(e.gid, e.desc)})
        for gid in unmapped:
            self.diag(f"group {gid!r}: its ranks are not in pg_config, so the peers of its send/recv "
                      f"(group-local indices) cannot be mapped to global ranks", 0, "info")
        return out

    # ---- what each entry means

    def resolve(self, entries: list[_Entry], progress, members) -> dict[str, list[_Entry]]:
        by_group: dict[str, list[_Entry]] = {}
        for entry in entries:
            by_group.setdefault(entry.gid, []).append(entry)
        for gid, group in by_group.items():
            self.coalesce(gid, group)
            status = progress.get(gid)
            completed = status.completed if status is not None else None
            for entry in group:
                anchor = entry.end or entry
                entry.done = _done(anchor, completed)
                entry.timed_out = entry is anchor and entry.retired and not entry.done
        self.peers = {id(e): _peers(e, members) for e in entries if e.is_p2p or e.members}
        return by_group

    def coalesce(self, gid: str, group: list[_Entry]) -> None:
        """Link a coalesced group's members to its closing entry: the
        consecutive entries before a `*coalesced` one with the same seq."""
        for at, entry in enumerate(group):
            if not entry.coalesced_end:
                continue
            found = []
            back = at - 1
            while back >= 0:
                member = group[back]
                if member.coalesced_end or member.end is not None or not _same_seq(member, entry):
                    break
                found.append(member)
                back -= 1
            for member in found:
                member.end = entry
            entry.members = tuple(reversed(found))
        loose: list[_Entry] = []
        for entry in group + [None]:
            if (entry is not None and not entry.coalesced_end and entry.end is None and loose
                    and entry.is_p2p == loose[-1].is_p2p and entry.seq == loose[-1].seq):
                loose.append(entry)
                continue
            if len(loose) > 1:
                self.diag(f"group {gid!r}: entries record_id {loose[0].record_id}-{loose[-1].record_id} share "
                          f"{'p2p' if loose[0].is_p2p else 'collective'} seq {loose[0].seq} without a coalesced "
                          f"end: read one by one", loose[0].line, "info")
            loose = [entry] if entry is not None and not entry.coalesced_end and entry.end is None else []

    def comm_op(self, entry: _Entry) -> CommOp:
        known = self.ops.get(id(entry))
        if known is not None:
            return known
        peers = self.peers.get(id(entry), ())
        sizes, dtype = entry.sizes, entry.dtype
        if entry.members:
            sizes = tuple(s for m in entry.members for s in m.sizes)[:MAX_TENSORS] or sizes
            dtype = next((m.dtype for m in entry.members if m.dtype), dtype)
        state = "completed" if entry.done else entry.state
        text = f"entry record_id={entry.record_id} pg={entry.gid} seq={entry.seq} {entry.name} {entry.state}"
        if entry.retired:
            text += ", retired" + ("" if entry.done else " without completing (timed out)")
        if entry.members:
            text += f" ({len(entry.members)} coalesced ops)"
        op = self.ops[id(entry)] = CommOp(
            op=entry.op, group=entry.gid, seq=entry.seq, state=state, peers=peers, sizes=sizes, dtype=dtype,
            timeout_ms=entry.timeout_ms, elapsed_ms=entry.timeout_ms if entry.timed_out else None,
            evidence=Evidence(self.display, entry.line, text))
        return op

    # ---- the record

    def record(self, version: str, lib: str, count: int, entries: list[_Entry], by_group, progress,
               configs) -> None:
        facts, display = self.facts, self.display
        op_of = self.comm_op
        stuck: list[_Entry] = []
        for group in by_group.values():
            first = next((e for e in group if not e.done), None)
            if first is not None:
                stuck.append(first.end or first)
        if stuck:
            last = max(stuck, key=lambda e: e.record_id)
        else:
            last = entries[-1] if entries else None
        last_op = op_of(last) if last is not None else None

        recent = sorted((e for group in by_group.values() for e in group[-RECENT:]), key=lambda e: e.record_id)
        timed_out = [e for e in entries if e.timed_out]
        errors = [op_of(e).evidence for e in timed_out[:RECENT]]
        if last is not None and not last.done:
            errors.extend(self.frames(last))
        if timed_out:
            first = timed_out[0]
            what = f"{first.op} #{first.seq} on group {first.gid}"
            limit = f" after {first.timeout_ms} ms" if first.timeout_ms is not None else ""
            more = f" ({len(timed_out) - 1} more calls timed out)" if len(timed_out) > 1 else ""
            facts.stuck.append(StuckSignal(
                "watchdog_timeout", f"{what} was retired without completing: timed out{limit}{more}",
                op_of(first).evidence, detail_zh=f"{what} 未完成即被回收：已超时{limit}"))

        descs: dict[str, str] = {}
        for entry in entries:
            if entry.desc:
                descs.setdefault(entry.gid, entry.desc)
        for gid, (desc, ranks) in configs.items():
            if ranks:
                facts.groups.append(ProcessGroup(gid, desc or descs.get(gid, ""), ranks))

        rank = rank_of(display)
        if rank is None:
            self.diag("cannot tell which rank wrote this Flight Recorder dump: its file name holds no rank "
                      "(torch names them <prefix><rank>, e.g. nccl_trace_rank_3)")
        form = "" if self.dump.form == "pickle" else " JSON"
        summary = f"{version}{form} dump, {count} entries" + (f"; comm lib {lib}" if lib else "")
        facts.records.append(ProcessRecord(
            SOURCE, display, rank=rank, last_op=last_op,
            recent_ops=tuple(op_of(e) for e in recent), progress=progress,
            errors=tuple(errors), timed_out=bool(timed_out),
            evidence=Evidence(display, 0, summary)))

    def frames(self, entry: _Entry) -> list[Evidence]:
        """The stuck entry's stack, as FR prints it (`#0 all_reduce from file:line`)."""
        frames = entry.frames
        if not frames and entry.members:
            frames = entry.members[0].frames
        if not isinstance(frames, (list, tuple)):
            return []
        out = []
        for number, frame in enumerate(frames[:MAX_FRAMES]):
            if not isinstance(frame, dict):
                continue
            name, filename, line = frame.get("name"), frame.get("filename"), frame.get("line")
            if not isinstance(name, str):
                continue
            where = f"{filename[:300]}:{line if type(line) is int else '?'}" if isinstance(filename, str) else "?"
            out.append(Evidence(self.display, entry.line, f"#{number} {name[:200]} from {where}"))
        return out


def _missing(raw: dict, field: str) -> str:
    if field in raw:
        return f"{field} is {_short(raw[field])}, not a number" if field != "profiling_name" \
            else f"profiling_name is {_short(raw[field])}"
    record = _int(raw.get("record_id"))
    return f"missing {field}" + (f" (record_id {record})" if record is not None and field != "record_id" else "")


def _same_seq(member: _Entry, end: _Entry) -> bool:
    if member.is_p2p and member.p2p_seq is not None:
        return member.p2p_seq == end.p2p_seq
    return member.coll_seq is not None and member.coll_seq == end.coll_seq


def _done(entry: _Entry, completed: int | None) -> bool:
    """Whether the call finished. NCCL's own events decide for NCCL (its
    pg_status can move past a hung collective when a later send completes);
    for Gloo, pg_status's last completed collective, else `retired`."""
    if entry.state == "completed":
        return True
    if entry.backend in _EVENT_BACKENDS:
        return False
    if not entry.is_p2p and completed is not None and entry.coll_seq is not None:
        return entry.coll_seq <= completed
    return entry.retired


def _is_default(gid: str, desc: str) -> bool:
    return gid == DEFAULT_GROUP or desc == "default_pg"


def _peers(entry: _Entry, members: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Global ranks of the other side of a send/recv (or of every member of
    a coalesced group). Indices in names are group-local."""
    local: list[int] = []
    for item in entry.members or (entry,):
        match = _SEND.search(item.name)
        if match is not None:
            local.append(int(match.group(2)))
            continue
        match = _RECV.search(item.name)
        if match is not None:
            local.append(int(match.group(2)))
    if not local:
        return ()
    ranks = members.get(entry.gid)
    if ranks is None:
        if not _is_default(entry.gid, entry.desc):
            return ()
        return tuple(sorted(set(local)))
    if any(i >= len(ranks) for i in local):
        return ()
    return tuple(sorted({ranks[i] for i in local}))
