"""The message catalogue: what PyTorch, NCCL and Gloo already say.

Most hangs and crashes are stated outright somewhere: a monitored barrier
names the rank that did not arrive, Gloo names the peer that closed its
socket, NCCL names the peer an InfiniBand request failed for. The catalogue
(`rules/messages/*.yaml`, data in one place; an entry's shape is
`rules/messages.schema.json`) lists every such message: where it comes from,
which versions print it and in which wording, an example line per wording
(`example`, `examples`), lines of the same program it must not take (`ok`),
and what it proves.

This module is what the readers need: the entries, the shipped catalogue
(parsed once per user and kept in the per-user cache), and the hits of a
line. Around it, each in its own module: which entries a line may be
(`messages_match`), reading a file against the schema (`messages_schema`),
what a schema cannot check (`messages_check`), an entry as a page
(`messages_pages`), and `python -m forensics.messages check` (`messages_cli`).

Named groups are normalized (see FIELD_KINDS): ranks and counters become
ints, `op` the canonical op name, `ranks` a tuple of ints, `op_count_hex`
the int `op_count`, seconds become `*_ms`, signals their `SIGXXX` names.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
from dataclasses import dataclass

from .messages_match import Catalogue
from .model import Evidence, MessageHit, normalize_op

_INT_FIELDS = ("rank", "peer_rank", "seq", "pid", "peer_pid", "local_rank", "nranks", "world_size",
               "timeout_ms", "elapsed_ms", "exit_code", "last_enqueued", "last_started", "last_completed",
               "device", "vendor_err", "channel", "numel", "count", "root", "op_count")
_STR_FIELDS = ("group", "group_desc", "host", "peer_host", "peer_addr", "addr", "bus_id", "comm_id", "error_text",
               "exception", "dtype", "sizes", "state", "store_key", "interface", "transport", "function")
# name → how its text becomes a value
FIELD_KINDS = {**dict.fromkeys(_INT_FIELDS, "int"), **dict.fromkeys(_STR_FIELDS, "str"),
               "error": "int_or_str", "op": "op", "ranks": "ranks", "signal": "signal",
               "op_count_hex": "hex", "timeout_s": "seconds", "elapsed_s": "seconds",
               "rank_listing": "rank_listing", "ready_listing": "ready_listing", "missing_listing": "missing_listing",
               "ready_differ": "ready_differ"}
_RENAMED = {"op_count_hex": "op_count", "timeout_s": "timeout_ms", "elapsed_s": "elapsed_ms",
            "rank_listing": "ranks", "ready_listing": "ranks", "missing_listing": "ranks", "ready_differ": "ranks"}
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
            9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}


class CatalogueError(Exception):
    """Problems in catalogue files: `problems` are (path, line, message)."""

    def __init__(self, problems: list[tuple[str, int, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{p}:{n}: {m}" for p, n, m in problems[:5]))


@dataclass(frozen=True, slots=True)
class Entry:
    id: str
    project: str
    source: str
    versions: str
    level: str
    match: tuple[str, ...]
    patterns: tuple[str, ...]  # regular expressions, compiled on first use (`regexes`)
    example: str
    facts: dict
    cause: str
    stuck: bool
    blames: str
    knock_on: bool
    en: str
    zh: str
    variants: tuple[str, ...] = ()
    path: str = ""
    ok: tuple[str, ...] = ()  # lines of the same program that mean something else
    line: int = 0
    examples: tuple[tuple[str, dict], ...] = ()  # further (line, facts), one per wording `example` is not

    @property
    def all_examples(self) -> tuple[tuple[str, dict], ...]:
        """`example` with its facts, then each of `examples`."""
        return ((self.example, self.facts),) + self.examples

    def extract(self, line: str) -> dict | None:
        """The normalized facts of `line`, or None when no wording matches."""
        if not any(literal in line for literal in self.match):
            return None
        for pattern in self.regexes:
            found = pattern.search(line)
            if found is not None:
                return normalize(found.groupdict())
        return None

    @property
    def regexes(self) -> tuple[re.Pattern, ...]:
        return _compiled(self.patterns)

    def to_json(self) -> dict:
        return {"id": self.id, "project": self.project, "source": self.source, "versions": self.versions,
                "level": self.level, "match": list(self.match), "patterns": list(self.patterns),
                "variants": list(self.variants), "example": self.example, "facts": _jsonable(self.facts),
                "proves": {"cause": self.cause, "stuck": self.stuck, "blames": self.blames,
                           "knock_on": self.knock_on},
                "examples": [{"line": line, "facts": _jsonable(facts)} for line, facts in self.examples],
                "ok": list(self.ok), "en": self.en, "zh": self.zh}


@functools.lru_cache(maxsize=None)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern, ...]:
    """An entry's patterns, compiled when a line first holds its literal: a
    run that meets a handful of catalogued lines compiles a handful."""
    return tuple(map(re.compile, patterns))


def _jsonable(facts: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in facts.items()}


def normalize(groups: dict) -> dict:
    """Named groups of a match → facts (groups that did not take part are left out)."""
    out: dict = {}
    for name, text in groups.items():
        if text is None:
            continue
        value = _value(FIELD_KINDS.get(name, "str"), text.strip())
        if value is None:
            continue
        out[_RENAMED.get(name, name)] = value
    return out


_INT = re.compile(r"[+-]?\d+")
_RANK_LIST = re.compile(r"\d+")


def _value(kind: str, text: str):
    if kind == "str":
        return text
    if kind == "int":
        if text.lower().startswith("0x"):
            return _hex(text[2:])
        return int(text) if _INT.fullmatch(text) else None
    if kind == "int_or_str":
        return int(text) if _INT.fullmatch(text) else text
    if kind == "hex":
        return _hex(text[2:] if text.lower().startswith("0x") else text)
    if kind == "seconds":
        try:
            return round(float(text) * 1000)
        except ValueError:
            return None
    if kind == "op":
        return normalize_op(text)
    if kind == "ranks":
        return tuple(sorted({int(n) for n in _RANK_LIST.findall(text)}))
    if kind == "signal":
        return _signal(text)
    if kind == "rank_listing":  # `0: [a, b] 3!: [c]`: the ranks each listing line starts with
        return tuple(sorted({int(n) for n in _LISTED_RANK.findall(text)})) or None
    if kind == "ready_listing":
        return _not_ready(text)
    if kind == "ready_differ":
        return _ready_differ(text)
    if kind == "missing_listing":  # `NAME [missing ranks: 0, 3], NAME [missing ranks: 0]`
        return tuple(sorted({int(n) for found in _MISSING.findall(text) for n in _RANK_LIST.findall(found)})) or None
    return text


_LISTED_RANK = re.compile(r"(?:^|\]|\s)\s*(\d{1,7})!?: \[")
_READY = re.compile(r"\[ready ranks:([\d, ]*)\]")
_MISSING = re.compile(r"\[missing ranks:([\d, ]*)\]")


def _not_ready(text: str) -> tuple[int, ...] | None:
    """`NAME [ready ranks: 0, 1, 3], NAME [ready ranks: ...]` (Horovod's oldest stall
    warning): the ranks missing from the ready list of the op most ranks are ready
    for (of several such ops, from any), below the highest rank any list names.
    MPI numbers ranks 0..size-1 without gaps, so a gap is a rank that has not
    submitted the op; a missing rank above every listed one cannot be told."""
    lists = [{int(n) for n in _RANK_LIST.findall(found)} for found in _READY.findall(text)]
    seen = set().union(*lists) if lists else set()
    if not seen or not _chained(lists):
        return None  # ranks ready for different ops: _ready_differ's reading, not a missing rank
    most = max(len(ready) for ready in lists)
    missing = {rank for ready in lists if len(ready) == most for rank in range(max(seen) + 1) if rank not in ready}
    return tuple(sorted(missing)) or None


def _chained(lists: list[set[int]]) -> bool:
    """Whether every ready list holds every smaller one: the ranks that are
    behind are behind on every op (a missing rank), not ready for other ops."""
    ordered = sorted(lists, key=len)
    return all(a <= b for a, b in zip(ordered, ordered[1:]))


def _ready_differ(text: str) -> tuple[int, ...] | None:
    """`NAME [ready ranks: 1], OTHER [ready ranks: 0]`: ranks each ready for a
    stalled op another rank is not ready for (the lists do not nest) submitted
    different tensors: every rank that is ready for one op and not for
    another. None when the lists nest (then a rank is simply behind)."""
    lists = [{int(n) for n in _RANK_LIST.findall(found)} for found in _READY.findall(text)]
    if len(lists) < 2 or _chained(lists):
        return None
    seen = set().union(*lists)
    return tuple(sorted(rank for rank in seen if any(rank not in ready for ready in lists))) or None


def _hex(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


_ASCII_INT = re.compile(r"[+-]?[0-9]+")  # not \d: "١٢" is no signal number


def _signal(text: str) -> str:
    name = text.strip().upper().rsplit(".", 1)[-1]
    if len(name) <= 12 and _ASCII_INT.fullmatch(name):
        number = abs(int(name))
        return _SIGNALS.get(number, f"signal {number}")
    return name if name.startswith("SIG") else "SIG" + name


def hits(lines, display: str, first_line: int = 1, rank: int | None = None, host: str = "",
         pid: int | None = None, local_rank: int | None = None) -> list[MessageHit]:
    """MessageHits for `lines` (an iterable of str), numbered from `first_line`."""
    return [hit for number, line in enumerate(lines, first_line)
            for hit in line_hits(line, Evidence(display, number, line.strip()[:2000]), rank, host, pid, local_rank)]


def line_hits(line: str, evidence: Evidence, rank: int | None = None, host: str = "", pid: int | None = None,
              local_rank: int | None = None, skip=frozenset()) -> list[MessageHit]:
    """The catalogue's hits on one line (its text without the prefixes a
    reader took off), each citing `evidence` (the line as printed); entries
    in `skip` are not tried."""
    return [MessageHit(entry.id, fact_items(facts), evidence, rank, host, pid, local_rank)
            for entry, facts in catalogue().match(line, skip)]


class Kept:
    """How many hits of each entry a reader kept: at most `limit` (the first)
    per entry, so that a flood of one message never crowds out another."""

    def __init__(self, limit: int):
        self.limit = limit
        self.counts: dict[str, int] = {}
        self.full: set[str] = set()

    def take(self, hit: MessageHit) -> bool:
        """Whether to keep `hit` (counted when kept)."""
        count = self.counts.get(hit.id, 0)
        if count >= self.limit:
            return False
        self.counts[hit.id] = count + 1
        if count + 1 >= self.limit:
            self.full.add(hit.id)
        return True


def fact_items(facts: dict) -> tuple:
    """Facts as MessageHit keeps them: (name, value) pairs, sorted."""
    return tuple(sorted(facts.items()))


# ---------------------------------------------------------------- the shipped catalogue

MESSAGES_DIR = "messages"


def shipped_files() -> list[str]:
    """The catalogue files shipped with the package (rules/messages/*.yaml)."""
    from . import shipped

    folder = shipped.rules_folder() / MESSAGES_DIR
    try:
        names = sorted(p.name for p in folder.iterdir() if p.name.endswith((".yaml", ".yml")))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [str(folder / name) for name in names]


@functools.lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    """The shipped catalogue (loaded once per process). A broken shipped file
    is a bug of ours: it raises."""
    paths = shipped_files()
    entries = _cached(paths)
    if entries is None:
        entries, problems = load(paths, check_examples=False, validate=False)  # the test suite checks them
        if problems:
            raise CatalogueError(problems)
        entries = [dataclasses.replace(e, path=_shipped_display(e.path)) for e in entries]
        _store(paths, entries)
    return Catalogue(entries)


def catalogue_or_empty(facts) -> Catalogue:
    """The shipped catalogue for a reader that also reads a file's structure:
    where it cannot be loaded, an empty one, and an error diagnostic on `facts`."""
    try:
        return catalogue()
    except CatalogueError as exc:
        facts.diag(0, f"the message catalogue could not be loaded: {exc}", "error")
        return Catalogue([])


_CACHE_VERSION = 5  # 4: entries keep their `ok` lines; 5: and their further `examples`


def _cache_name(paths: list[str]) -> str | None:
    """The parsed catalogue's name in the per-user cache: a hash of the files'
    names and bytes (a changed file is a new name), not of where they lie."""
    import hashlib

    digest = hashlib.sha256(str(_CACHE_VERSION).encode())
    try:
        for path in paths:
            digest.update(os.path.basename(path).encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(handle.read())
    except OSError:
        return None
    return f"messages-{digest.hexdigest()[:24]}.json"


def _cached(paths: list[str]) -> list[Entry] | None:
    """The entries, if this exact catalogue was parsed before (PyYAML costs a
    tenth of a second per run). The cache holds plain data and each entry's
    file name only: the folder is the one the entries are loaded from now."""
    from . import usercache

    name = _cache_name(paths)
    raws = usercache.read_json(name) if name else None
    if not isinstance(raws, list):
        return None
    names = {os.path.basename(p) for p in paths}
    try:
        return [Entry(**_entry_fields(raw, names)) for raw in raws]
    except (TypeError, KeyError, ValueError, AttributeError):
        return None  # a cache of another layout: parsed again


def _shipped_display(path: str) -> str:
    """A shipped entry's file as the source tree names it, wherever the package is installed."""
    return f"rules/{MESSAGES_DIR}/{os.path.basename(path)}"


def _entry_fields(raw: dict, names: set[str]) -> dict:
    out = dict(raw)
    for name in ("match", "patterns", "variants", "ok"):
        out[name] = tuple(out[name])
    out["facts"] = _facts(out["facts"])
    out["examples"] = tuple((line, _facts(facts)) for line, facts in out["examples"])
    if out["path"] not in names:
        raise ValueError(f"no catalogue file {out['path']!r}")
    out["path"] = _shipped_display(out["path"])
    return out


def _store(paths: list[str], entries: list[Entry]) -> None:
    from . import usercache

    name = _cache_name(paths)
    if name is None:
        return
    rows = []
    for entry in entries:
        row = {f.name: getattr(entry, f.name) for f in dataclasses.fields(Entry)}
        row["path"] = os.path.basename(entry.path)
        rows.append(row)
    usercache.write_json(name, rows)

def load(paths: list[str], check_examples: bool = True,
         validate: bool = True) -> tuple[list[Entry], list[tuple[str, int, str]]]:
    """Entries of catalogue files, and every problem found (path, line, message).
    Each file is read against the schema (unless not `validate`); with
    `check_examples`, each entry is also checked for what a schema cannot
    say (`messages_check`)."""
    from . import messages_schema

    entries: list[Entry] = []
    problems: list[tuple[str, int, str]] = []
    seen: dict[str, tuple[str, int]] = {}
    for path in paths:
        display = _display(path)
        raws, found = messages_schema.read(path, display, validate)
        problems.extend(found)
        for raw, line in raws:
            try:
                entry = _entry(raw, display, line)
            except (KeyError, TypeError, AttributeError, ValueError):  # only without `validate`
                name = raw.get("id") if isinstance(raw, dict) else None
                problems.append((display, line, f"{name if isinstance(name, str) else '?'}: not a catalogue entry "
                                                 "('forensics messages check FILE' says what is wrong)"))
                continue
            if entry.id in seen:
                where = seen[entry.id]
                problems.append((display, line, f"{entry.id}: id already used at {where[0]}:{where[1]}"))
                continue
            seen[entry.id] = (display, line)
            entries.append(entry)
    if check_examples:
        from . import messages_check

        for entry in entries:
            problems.extend(messages_check.entry_problems(entry))
    return entries, problems


def _display(path: str) -> str:
    parts = path.replace(os.sep, "/").split("/")
    return "/".join(parts[-3:]) if len(parts) > 3 else path


def _listed(value) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, list) else (value,)


def _entry(raw: dict, path: str, line: int) -> Entry:
    """An entry from a mapping the schema accepted."""
    proves = raw["proves"]
    return Entry(id=raw["id"], project=raw["project"], source=raw["source"], versions=str(raw["versions"]),
                 level=raw["level"], match=_listed(raw["match"]), patterns=_listed(raw["patterns"]),
                 example=raw["example"], facts=_facts(raw["facts"]),
                 cause=proves["cause"], stuck=proves["stuck"], blames=proves["blames"],
                 knock_on=proves["knock_on"], en=raw["en"].strip(), zh=raw["zh"].strip(),
                 variants=tuple(raw.get("variants") or ()), ok=tuple(raw.get("ok") or ()), path=path, line=line,
                 examples=tuple((item["line"], _facts(item["facts"])) for item in raw.get("examples") or ()))


def _facts(raw: dict) -> dict:
    """Facts as read from YAML or the cache: lists of ranks become tuples."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}


# Kept here for the callers that name them as `messages.X`; each lives in the
# module that does that one thing, imported when first named.
_ELSEWHERE = {"check": "messages_check", "page": "messages_pages",
              "main": "messages_cli"}


def __getattr__(name: str):
    module = _ELSEWHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


if __name__ == "__main__":
    from .messages_cli import main

    sys.exit(main())
