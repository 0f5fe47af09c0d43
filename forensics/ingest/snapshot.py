"""Watchdog snapshots: JSON or YAML mapping rank → state, the seed's shape.

    {"0": {"current_op": "send", "waiting_for_ranks": [1], "op_seq": 105}, ...}

Optional per-rank fields: group, group_ranks, peers, state, alive, stack,
streams, events, wait ("any"), timeout_ms, elapsed_ms, host, pid, dtype,
sizes, progress. The whole mapping may also sit under a wrapper that carries
snapshot-wide facts:

    {"schema": "forensics.snapshot/1", "taken_at": "2026-11-29T10:00:00Z",
     "hung": true, "groups": {"tp0": [0, 1]}, "ranks": {...}}

Snapshots are recognized by content (rank keys holding those fields), not by
file name. Every rank cites the line of its key.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from json.decoder import JSONDecodeError

from .. import lazy
from .. import model as m
from ..model import Evidence
from ..words import stuck_signal
from . import jsonwalk
from .facts import Facts
from .textio import InputError, has_nul, int_text, looks_binary, read_text

KIND = "snapshot"
SCHEMA = "forensics.snapshot/1"

_STATE_FIELDS = ("current_op", "waiting_for_ranks", "op_seq")
_WRAPPER_FIELDS = {"schema", "taken_at", "hung", "groups", "ranks", "job", "note"}
_RANK_FIELDS = {
    "current_op", "waiting_for_ranks", "op_seq", "group", "group_ranks", "peers",
    "state", "alive", "stack", "streams", "events", "wait", "any_source",
    "timeout_ms", "elapsed_ms", "host", "pid", "dtype", "sizes", "progress", "exit_code",
}
_RANK_KEY = re.compile(r"^(?:rank[_-]?)?(\d{1,7})$", re.IGNORECASE)
_SNIFF_FIELD = re.compile(rb"[\"']?(current_op|waiting_for_ranks|op_seq)[\"']?\s*:")
_SNIFF_SCHEMA = re.compile(rb"forensics\.snapshot/")

_ACTIVITY_WORDS = {
    "compute": m.COMPUTING, "computing": m.COMPUTING, "forward": m.COMPUTING,
    "backward": m.COMPUTING, "optimizer": m.COMPUTING, "optimizer_step": m.COMPUTING,
    "data_loading": m.DATA_LOADING, "dataloader": m.DATA_LOADING, "load_data": m.DATA_LOADING,
    "loading_data": m.DATA_LOADING, "checkpoint": m.IO, "save_checkpoint": m.IO,
    "load_checkpoint": m.IO, "io": m.IO, "device_sync": m.DEVICE_WAIT,
    "cuda_sync": m.DEVICE_WAIT, "synchronize": m.DEVICE_WAIT, "idle": m.IDLE, "": m.IDLE,
    "none": m.IDLE, "exited": m.EXITED, "dead": m.EXITED, "crashed": m.EXITED,
}
_OP_STATES = {"scheduled", "started", "completed"}


_SNIFF_LITERALS = (b"current_op", b"waiting_for_ranks", b"op_seq", b"forensics.snapshot/")


def sniff(path: str, head: bytes) -> bool:
    if has_nul(head):  # binary: declined before any search of 64 KiB
        return False
    if not any(literal in head for literal in _SNIFF_LITERALS) or looks_binary(head):
        return False
    stripped = head.lstrip()
    if not stripped:
        return False
    if _SNIFF_SCHEMA.search(head):
        return True
    return bool(_SNIFF_FIELD.search(head)) and not stripped.startswith(b"[")


def parse(path: str, display: str) -> Facts:
    text = read_text(path)
    facts = Facts(KIND, display)
    if not text.strip():
        raise InputError(display, "empty file")
    if text.lstrip().startswith("{"):
        try:
            top, lines = _json_members(text)
        except JSONDecodeError as exc:
            raise InputError(display, f"invalid JSON: {exc.msg}", exc.lineno) from None
        except RecursionError:
            raise InputError(display, "invalid JSON: nested too deeply") from None
    else:
        top, lines = _yaml_members(text, display)
    lines_text = text.splitlines()
    _read_snapshot(top, lines, lines_text, facts)
    return facts


def states_from_mapping(mapping: dict, source: str = "<rank_states>") -> Facts:
    """Build facts from an in-memory snapshot (the seed API and tests)."""
    facts = Facts(KIND, source)
    lines = {key: 0 for key in mapping}
    _read_snapshot(dict(mapping), {"": lines}, [], facts)
    return facts


# ---------------------------------------------------------------- JSON with lines

def _json_members(text: str) -> tuple[dict, dict]:
    """Parse a JSON object, recording the line of each top-level key (and of
    each key under a top-level "ranks" object). Values are decoded by the C
    scanner; only the two levels we cite are walked by hand."""
    line_of = jsonwalk.LineCounter(text)
    nested = {}

    def ranks_object(text, pos):
        if text[pos:pos + 1] != "{":
            return jsonwalk.decode_at(text, pos)
        values, offsets, end = jsonwalk.walk_object(text, pos)
        nested["ranks"] = _lines(offsets, line_of)
        return values, end

    start = jsonwalk.skip_ws(text, 0)
    top, offsets, end = jsonwalk.walk_object(text, start, {"ranks": ranks_object})
    end = jsonwalk.skip_ws(text, end)
    if end != len(text):
        raise JSONDecodeError("extra data after the snapshot", text, end)
    return top, {"": _lines(offsets, line_of), **nested}


def _lines(offsets, line_of) -> dict:
    lines: dict = {}
    for key, offset in offsets:
        line = line_of(offset)
        if key in lines:
            lines.setdefault("__duplicates__", []).append((key, line))
        lines[key] = line
    return lines


# ---------------------------------------------------------------- YAML with lines

def _yaml_members(text: str, display: str) -> tuple[dict, dict]:
    loader_cls = lazy.yaml_safe_loader()
    try:
        found = lazy.yaml_anchor(text)
        if found is not None:
            raise InputError(display, f"YAML anchors and aliases are not read ({found[2]}): a snapshot never needs "
                                      f"them, and they can make a small file expand without bound", found[0])
        node = lazy.yaml.compose(text, Loader=loader_cls)
        value = lazy.yaml.load(text, Loader=loader_cls)
    except lazy.yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise InputError(display, f"invalid YAML: {exc.problem or exc.context}", line) from None
    except lazy.yaml.YAMLError as exc:
        raise InputError(display, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise InputError(display, "invalid YAML: nested too deeply") from None
    except ValueError as exc:  # a value the loader cannot build: an integer of over 4,300 digits
        raise InputError(display, f"invalid YAML: {exc}") from None
    if not isinstance(value, dict) or not isinstance(node, lazy.yaml.MappingNode):
        raise InputError(display, "a snapshot must be a mapping of rank to state", 1)
    lines = {"": {}}
    for key_node, value_node in node.value:
        key = _yaml_key(key_node)
        lines[""][key] = key_node.start_mark.line + 1
        if isinstance(value_node, lazy.yaml.MappingNode):
            lines[""][key] = _op_line(value_node) or lines[""][key]
        if key == "ranks" and isinstance(value_node, lazy.yaml.MappingNode):
            lines["ranks"] = {_yaml_key(k): _op_line(v) or k.start_mark.line + 1
                              for k, v in value_node.value}
    return {_plain_key(k): v for k, v in value.items()}, lines


def _op_line(node) -> int:
    """The line of a rank's `current_op`, the most telling line to cite."""
    if isinstance(node, lazy.yaml.MappingNode):
        for key, _ in node.value:
            if isinstance(key, lazy.yaml.ScalarNode) and key.value == "current_op":
                return key.start_mark.line + 1
    return 0


def _yaml_key(node) -> str:
    return str(node.value) if isinstance(node, lazy.yaml.ScalarNode) else repr(node.value)


def _plain_key(key) -> str:
    return str(key)


# ---------------------------------------------------------------- interpretation

def _read_snapshot(top: dict, lines: dict, text_lines: list[str], facts: Facts) -> None:
    top = {_plain_key(k): v for k, v in top.items()}
    wrapped = isinstance(top.get("ranks"), dict)
    for level in lines.values():
        for key, line in level.get("__duplicates__", []):
            facts.diag(line, f"duplicate key {key!r}: the last one is used")
    if wrapped:
        ranks = {_plain_key(k): v for k, v in top["ranks"].items()}
        rank_lines = lines.get("ranks", {})
        _read_wrapper(top, lines.get("", {}), text_lines, facts)
    else:
        ranks = top
        rank_lines = lines.get("", {})
    seen_any = False
    for key, value in ranks.items():
        line = rank_lines.get(key, 0)
        match = _RANK_KEY.match(key)
        if not match:
            facts.diag(line, f"key {key!r} is not a rank number: ignored")
            continue
        if not isinstance(value, dict):
            facts.diag(line, f"rank {key}: state must be a mapping, got {type(value).__name__}: ignored")
            continue
        seen_any = True
        evidence = Evidence(facts.path, line, _line_text(text_lines, line) or f"rank {key}")
        state = _rank_state(int(match.group(1)), value, evidence, facts)
        facts.ranks.append(state)
        if state.current_op is not None and state.current_op.past_timeout:
            op = state.current_op
            facts.stuck.append(stuck_signal("op_past_timeout", "snap_past_timeout", evidence, rank=state.rank,
                                            op=op.op, elapsed_ms=op.elapsed_ms, timeout=op.timeout_ms))
    if not seen_any:
        raise InputError(facts.path, "no rank states found in the snapshot", 1)
    facts.ranks.sort(key=lambda s: s.rank)


def _read_wrapper(top: dict, lines: dict, text_lines: list[str], facts: Facts) -> None:
    for key in top:
        if key not in _WRAPPER_FIELDS:
            facts.diag(lines.get(key, 0), f"unknown snapshot field {key!r}: ignored", "info")
    schema = top.get("schema")
    if schema is not None and schema != SCHEMA:
        facts.diag(lines.get("schema", 0),
                   f"schema {schema!r} is not {SCHEMA!r}: read as best effort")
    if "taken_at" in top:
        facts.observed_at = _timestamp(top["taken_at"])
        if facts.observed_at is None:
            facts.diag(lines.get("taken_at", 0), f"taken_at {top['taken_at']!r} is not a time: ignored")
    if top.get("hung") is True:
        line = lines.get("hung", 0)
        facts.stuck.append(stuck_signal("declared_hung", "snap_declared_hung",
                                        Evidence(facts.path, line, _line_text(text_lines, line) or "hung: true")))
    groups = top.get("groups") or {}
    if not isinstance(groups, dict):
        facts.diag(lines.get("groups", 0), "groups must map a group id to its ranks: ignored")
        return
    for gid, spec in groups.items():
        ranks = spec.get("ranks") if isinstance(spec, dict) else spec
        name = spec.get("name", "") if isinstance(spec, dict) else ""
        members = _int_list(ranks)
        if members is None:
            facts.diag(lines.get("groups", 0), f"group {gid!r}: ranks must be a list of integers: ignored")
            continue
        facts.groups.append(m.ProcessGroup(str(gid), str(name or ""), tuple(members)))


def _rank_state(rank: int, raw: dict, evidence: Evidence, facts: Facts) -> m.RankState:
    where = evidence.line

    def warn(message: str) -> None:
        facts.diag(where, f"rank {rank}: {message}")

    if not raw.keys() <= _RANK_FIELDS:
        unknown = sorted(set(raw) - _RANK_FIELDS, key=str)  # YAML keys may be ints
        facts.diag(where, f"rank {rank}: unknown field(s) {', '.join(map(repr, unknown))}: ignored", "info")
    get = raw.get

    op_name = get("current_op")
    if op_name is not None and not isinstance(op_name, str):
        warn(f"current_op must be a string, got {op_name!r}")
        op_name = str(op_name)
    op = m.normalize_op(op_name)

    declared = None
    if "waiting_for_ranks" in raw:
        declared = _int_list(raw["waiting_for_ranks"])
        if declared is None:
            warn(f"waiting_for_ranks must be a list of rank numbers, got {raw['waiting_for_ranks']!r}: ignored")
        else:
            declared = tuple(declared)

    seq = _int_or_none(get("op_seq"), "op_seq", warn)
    alive = get("alive")
    if alive is not None and not isinstance(alive, bool):
        warn(f"alive must be true or false, got {alive!r}: ignored")
        alive = None
    if get("exit_code") is not None and alive is None:
        alive = False

    current = None
    if m.is_collective(op) or m.is_p2p(op):
        group = get("group")
        peers = _int_list(get("peers"))
        if peers is None:
            warn("peers must be a list of rank numbers: ignored")
            peers = []
        state_word = get("state") or "started"
        if not isinstance(state_word, str):
            warn(f"state must be one word, got a {type(state_word).__name__}: read as started")
            state_word = "started"
        if state_word not in _OP_STATES:
            state_word = str(state_word).lower()
        if state_word not in _OP_STATES:
            warn(f"state {state_word!r} is not scheduled/started/completed: read as started")
            state_word = "started"
        current = m.CommOp(
            op=op, group="" if group is None else str(group), seq=seq, state=state_word,
            peers=tuple(peers),
            any_source=get("any_source") is True or ("wait" in raw and str(raw["wait"]).lower() == "any"),
            sizes=_sizes(get("sizes")) if "sizes" in raw else (), dtype=str(get("dtype") or ""),
            timeout_ms=_int_or_none(get("timeout_ms"), "timeout_ms", warn),
            elapsed_ms=_int_or_none(get("elapsed_ms"), "elapsed_ms", warn),
            evidence=evidence)
        activity = m.BLOCKED if state_word != "completed" else m.COMPUTING
    else:
        activity = _ACTIVITY_WORDS.get(op, m.COMPUTING)
    if alive is False:
        activity = m.EXITED

    stack = get("stack") or ()
    if not isinstance(stack, (list, tuple)):
        warn("stack must be a list of frames: ignored")
        stack = ()
    streams, events = _streams(rank, raw, evidence, warn) if ("streams" in raw or "events" in raw) else ((), ())
    progress = _progress(get("progress"), evidence, warn) if "progress" in raw else {}
    return m.RankState(
        rank=rank, host=str(get("host") or ""), pid=_int_or_none(get("pid"), "pid", warn), alive=alive,
        activity=activity, current_op=current, declared_waits=declared,
        stack=tuple(stack) if all(type(f) is str for f in stack) else tuple(map(str, stack)),
        streams=streams, events=events,
        progress=progress, evidence=evidence)


def _streams(rank, raw, evidence, warn):
    streams = []
    raw_streams = raw.get("streams") or {}
    if not isinstance(raw_streams, dict):
        warn("streams must map a stream name to its state: ignored")
        raw_streams = {}
    for name, spec in raw_streams.items():
        if not isinstance(spec, dict):
            warn(f"stream {name!r}: state must be a mapping: ignored")
            continue
        waits = spec.get("waits_event")
        streams.append(m.StreamState(str(name), None if waits is None else str(waits),
                                     m.normalize_op(spec.get("op")), evidence))
    events = []
    raw_events = raw.get("events") or {}
    if not isinstance(raw_events, dict):
        warn("events must map an event id to where it is recorded: ignored")
        raw_events = {}
    for name, spec in raw_events.items():
        if not isinstance(spec, dict) or "recorded_on" not in spec:
            warn(f"event {name!r}: needs recorded_on: ignored")
            continue
        owner = spec.get("rank")
        if owner is not None and not _is_int(owner):
            warn(f"event {name!r}: rank must be an integer: ignored")
            owner = None
        events.append(m.EventRecord(str(name), str(spec["recorded_on"]),
                                    int(owner) if owner is not None else None, evidence))
    return tuple(streams), tuple(events)


def _progress(raw, evidence, warn):
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        warn("progress must map a group to its counters: ignored")
        return {}
    out = {}
    for gid, spec in raw.items():
        if not isinstance(spec, dict):
            continue
        out[str(gid)] = m.GroupProgress(
            enqueued=_int_or_none(spec.get("enqueued"), "progress.enqueued", warn),
            started=_int_or_none(spec.get("started"), "progress.started", warn),
            completed=_int_or_none(spec.get("completed"), "progress.completed", warn),
            evidence=evidence)
    return out


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_list(value):
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        return None
    if all(type(item) is int for item in value):
        return list(value)
    out = []
    for item in value:
        if _is_int(item):
            out.append(item)
        elif isinstance(item, str) and (number := int_text(item)) is not None:
            out.append(number)
        else:
            return None
    return out


def _int_or_none(value, name, warn):
    if value is None or type(value) is int:
        return value
    if _is_int(value):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and (number := int_text(value)) is not None:
        return number
    warn(f"{name} must be an integer, got {value!r}: ignored")
    return None


def _sizes(value):
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if isinstance(item, list) and all(_is_int(x) for x in item):
            out.append(tuple(item))
        elif _is_int(item):
            out.append((item,))
    return tuple(out)


def _timestamp(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _line_text(text_lines: list[str], line: int) -> str:
    if 0 < line <= len(text_lines):
        return text_lines[line - 1].strip()[:200]
    return ""
