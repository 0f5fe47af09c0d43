"""The message catalogue: what PyTorch, NCCL and Gloo already say.

Most hangs and crashes are stated outright somewhere: a monitored barrier
names the rank that did not arrive, Gloo names the peer that closed its
socket, NCCL names the peer an InfiniBand request failed for. The catalogue
(`rules/messages/*.yaml`, data in one place) lists every such message: where
it comes from, which versions print it and in which wording, one example
line, and what it proves. Readers run lines through `Catalogue.match`; rules
read the resulting `MessageHit`s; `forensics messages` and the docs print it;
`python -m forensics.messages check FILE…` checks entries (every example must
yield exactly its stated facts).

An entry:

    - id: nccl-ib-completion-error     # unique; prefix by area (nccl-, gloo-, c10d-, elastic-, …)
      project: nccl                    # nccl | pytorch | gloo
      source: src/transport/net_ib.cc  # the file of that project that prints it
      versions: "2.19-2.28"
      level: WARN
      match: "NET/IB : Got completion from peer"   # literal(s) every matching line holds
      patterns: ['… (?P<peer_addr>\\S+) with error (?P<error>\\d+) …']  # one per wording
      variants: ["2.19-2.23: …"]       # which version printed which wording
      example: "node-a:2741:2790 [3] NCCL WARN NET/IB : Got completion from peer …"
      facts: {peer_addr: "10.1.0.12<48212>", error: 12}
      proves: {cause: network_fault, stuck: false, blames: peer, knock_on: false}
      en: "…"
      zh: "…"

Named groups are normalized (see FIELD_KINDS): ranks and counters become
ints, `op` the canonical op name, `ranks` a tuple of ints, `op_count_hex`
the int `op_count`, seconds become `*_ms`, signals their `SIGXXX` names.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import sys
import time
from dataclasses import dataclass

from .ingest.textio import int_text
from .model import Evidence, MessageHit, normalize_op

CAUSES = ("hang", "timeout", "network_fault", "peer_died", "collective_mismatch", "missing_rank",
          "crash", "oom", "config", "init_failure", "abort", "info")
BLAMES = ("self", "peer", "ranks", "host", "none")
PROJECTS = ("pytorch", "nccl", "gloo", "linux", "nvidia", "openmpi", "horovod", "deepspeed", "lightning", "sglang", "ray")

_INT_FIELDS = ("rank", "peer_rank", "seq", "pid", "peer_pid", "local_rank", "nranks", "world_size",
               "timeout_ms", "elapsed_ms", "exit_code", "last_enqueued", "last_started", "last_completed",
               "device", "vendor_err", "channel", "numel", "count", "root", "op_count")
_STR_FIELDS = ("group", "group_desc", "host", "peer_host", "peer_addr", "addr", "bus_id", "comm_id", "error_text",
               "exception", "dtype", "sizes", "state", "store_key", "interface", "transport", "function")
# name → how its text becomes a value
FIELD_KINDS = {**dict.fromkeys(_INT_FIELDS, "int"), **dict.fromkeys(_STR_FIELDS, "str"),
               "error": "int_or_str", "op": "op", "ranks": "ranks", "signal": "signal",
               "op_count_hex": "hex", "timeout_s": "seconds", "elapsed_s": "seconds",
               "rank_listing": "rank_listing", "ready_listing": "ready_listing", "missing_listing": "missing_listing"}
_RENAMED = {"op_count_hex": "op_count", "timeout_s": "timeout_ms", "elapsed_s": "elapsed_ms",
            "rank_listing": "ranks", "ready_listing": "ranks", "missing_listing": "ranks"}
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
            9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}
_REQUIRED = ("id", "project", "source", "versions", "level", "match", "patterns", "example", "facts",
             "proves", "en", "zh")
_OPTIONAL = ("variants", "notes")
_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
SLOW_MS = 50.0  # a pattern taking longer than this on a hostile 64 KiB line is a defect


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
    line: int = 0

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
                "en": self.en, "zh": self.zh}


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
    if not seen:
        return None
    most = max(len(ready) for ready in lists)
    missing = {rank for ready in lists if len(ready) == most for rank in range(max(seen) + 1) if rank not in ready}
    return tuple(sorted(missing)) or None


def _hex(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


def _signal(text: str) -> str:
    name = text.strip().upper().rsplit(".", 1)[-1]
    number = int_text(name, 12)
    if number is not None:
        return _SIGNALS.get(abs(number), f"signal {abs(number)}")
    return name if name.startswith("SIG") else "SIG" + name


# ---------------------------------------------------------------- the catalogue


_MASK_DIGITS = str.maketrans("123456789", "000000000")
_HAS_DIGIT = re.compile(r"\d")
_SHAPES_KEPT = 4096  # line shapes whose candidate entries are kept


class Catalogue:
    """Every entry, and a matcher that tries only entries whose literals a line holds."""

    def __init__(self, entries: list[Entry]):
        self.entries = entries
        self.by_id = {e.id: e for e in entries}
        self._order = {e.id: i for i, e in enumerate(entries)}
        by_literal: dict[str, list[Entry]] = {}
        for entry in entries:
            for literal in entry.match:
                by_literal.setdefault(literal, []).append(entry)
        self._by_literal = by_literal
        self._digit_literals = [(literal, es) for literal, es in by_literal.items() if _HAS_DIGIT.search(literal)]
        self._shapes: dict[str, tuple] = {}
        self._any_pattern = None
        self._anchor_patterns: list[re.Pattern] | None = None

    @property
    def _any(self) -> re.Pattern | None:
        """One search for every entry's literals, compiled on first use.
        It says where a line holds one (the leftmost), not which: the
        literals go into a trie, so at each position the engine follows one
        branch per character instead of trying four hundred alternatives
        in turn (a flat alternation cost 5 ms a 64 KiB stack dump's head)."""
        if self._any_pattern is None and self._by_literal:
            self._any_pattern = re.compile(_trie_pattern(self._by_literal))
        return self._any_pattern

    def get(self, entry_id: str) -> Entry | None:
        return self.by_id.get(entry_id)

    def __len__(self) -> int:
        return len(self.entries)

    def mentions(self, text: str) -> bool:
        """Whether any entry's literal occurs in `text`. Most texts hold
        none (every stack dump of a big collection): the anchors decline
        them at a quarter of the cost of the search for every literal."""
        if self._any is None or not any(p.search(text) for p in self._anchors()):
            return False
        return self._any.search(text) is not None

    def _anchors(self) -> list[re.Pattern]:
        """Searches that every text holding a literal matches: each
        literal's tail from its first uncommon character on (`_anchor`), in
        one trie per first character. A search whose pattern starts with
        one character skips to that character's occurrences at C speed,
        where the trie of all literals stops at every space and letter that
        begins one (0.12 against 0.44 ms for a 10 KB py-spy dump)."""
        if self._anchor_patterns is None:
            tails: dict[str, list[str]] = {}
            for literal in self._by_literal:
                tail = _anchor(literal)
                tails.setdefault(tail[0], []).append(tail)
            self._anchor_patterns = [re.compile(_trie_pattern(group)) for _, group in sorted(tails.items())]
        return self._anchor_patterns

    def candidates(self, line: str) -> list[Entry]:
        """Entries one of whose literals the line holds, in catalogue order.

        A log repeats a few line shapes with other numbers: which digit-free
        literals a line holds depends only on its shape (digits masked), so
        that answer is kept per shape; the few literals with digits are
        looked for in every line."""
        shape = line.translate(_MASK_DIGITS)
        plain = self._shapes.get(shape)
        if plain is None:
            if len(self._shapes) >= _SHAPES_KEPT:
                self._shapes.clear()
            plain = self._shapes[shape] = (
                () if self._any is None or self._any.search(line) is None
                else tuple({id(e): e for literal, es in self._by_literal.items()
                            if literal in line and not _HAS_DIGIT.search(literal) for e in es}.values()))
        found = {id(e): e for e in plain}
        found.update((id(e), e) for literal, es in self._digit_literals if literal in line for e in es)
        return sorted(found.values(), key=lambda e: self._order[e.id])

    def literals_with_digits(self) -> list[tuple[str, list[Entry]]]:
        """The few literals holding a digit (no line shape tells whether a
        line holds them), with their entries."""
        return list(self._digit_literals)

    def match(self, line: str, skip=frozenset()) -> list[tuple[Entry, dict]]:
        """(entry, facts) of every entry whose patterns match the line; the
        ids in `skip` (entries a reader has kept enough of) are not tried."""
        out = []
        for entry in self.candidates(line):
            if entry.id in skip:
                continue
            facts = entry.extract(line)
            if facts is not None:
                out.append((entry, facts))
        return out

    def lines_with_literals(self, text: str, ends: bool = False):
        """(1-based line number, line) of each line of `text` holding any
        entry's literal: one C-speed search over the text, not a loop over lines.
        With `ends`, (number, line, where the line ends in `text`)."""
        if self._any is None:
            return
        number, position, last_start = 1, 0, -1
        for found in self._any.finditer(text):
            start = text.rfind("\n", 0, found.start()) + 1
            if start == last_start:
                continue
            number += text.count("\n", position, start)
            position = start
            end = text.find("\n", found.end())
            last_start = start
            line = text[start:] if end < 0 else text[start:end]
            yield (number, line, len(text) if end < 0 else end) if ends else (number, line)


# Characters that fill log and stack text: a tail starting with one of them
# would stop the search at many places. Of the rest, capitals and most
# punctuation are rarer than lower case. (A frequency table ranking each
# letter did worse: py-spy text is not English.)
_COMMON = frozenset(" etaoinsrhldcumfpgwybvk.,:/_()0123456789\n")
_ANCHOR_MIN = 4  # characters an anchor keeps at least (a shorter literal is its own anchor)


def _anchor(literal: str) -> str:
    """The literal's tail from its first character outside `_COMMON` (else
    its first that is not lower case, else its start), keeping at least
    _ANCHOR_MIN characters."""
    if len(literal) <= _ANCHOR_MIN:
        return literal
    start = min(range(len(literal) - _ANCHOR_MIN + 1),
                key=lambda i: (literal[i] in _COMMON, literal[i].islower(), i))
    return literal[start:]


def _trie_pattern(words) -> str:
    """A regex matching where any of `words` starts. A word that another
    begins with ends the branch: the longer one adds no new place to match."""
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        if "" in node:
            return ""
        branches = [re.escape(ch) + build(node[ch]) for ch in sorted(node)]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return build(trie)


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


def page(entry: Entry, lang: str = "en") -> str:
    """One entry as `forensics messages show` prints it."""
    zh = lang == "zh"
    labels = (("来源", "版本", "级别", "原因类别", "证明卡住", "指向", "连锁反应", "示例", "提取的事实", "措辞")
              if zh else ("source", "versions", "level", "cause", "proves stuck", "blames", "knock-on",
                          "example", "facts", "wordings"))
    facts = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in entry.facts.items()) or "-"
    lines = [entry.id, "", entry.zh if zh else entry.en, "",
             f"{labels[0]}: {entry.project} {entry.source}", f"{labels[1]}: {entry.versions}",
             f"{labels[2]}: {entry.level}", f"{labels[3]}: {entry.cause}",
             f"{labels[4]}: {'yes' if entry.stuck else 'no'}", f"{labels[5]}: {entry.blames}",
             f"{labels[6]}: {'yes' if entry.knock_on else 'no'}", "", f"{labels[7]}:", f"  {entry.example}",
             f"{labels[8]}: {facts}", "", f"{labels[9]}:"]
    lines += [f"  {p}" for p in entry.patterns]
    lines += [f"  - {v}" for v in entry.variants]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- loading

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
        entries, problems = load(paths, check_examples=False)  # the test suite checks them
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


_CACHE_VERSION = 3


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
    for name in ("match", "patterns", "variants"):
        out[name] = tuple(out[name])
    out["facts"] = {k: tuple(v) if isinstance(v, list) else v for k, v in out["facts"].items()}
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


_ID_LINE = re.compile(r"^\s*-\s+id:\s*['\"]?([\w.-]+)", re.M)


def _id_lines(text: str) -> dict[str, int]:
    """The line each entry's `- id:` stands on (the first, for a repeated id)."""
    out: dict[str, int] = {}
    for found in _ID_LINE.finditer(text):
        out.setdefault(found.group(1), text.count("\n", 0, found.start()) + 1)
    return out


def load(paths: list[str], check_examples: bool = True) -> tuple[list[Entry], list[tuple[str, int, str]]]:
    """Entries of catalogue files, and every problem found (path, line, message)."""
    from . import lazy

    entries: list[Entry] = []
    problems: list[tuple[str, int, str]] = []
    seen: dict[str, tuple[str, int]] = {}
    loader = lazy.yaml_safe_loader()
    for path in paths:
        display = _display(path)
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            data = lazy.yaml.load(text, Loader=loader)
        except lazy.yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            problems.append((display, mark.line + 1 if mark else 0, f"invalid YAML: {exc.problem}"))
            continue
        except (OSError, UnicodeDecodeError, lazy.yaml.YAMLError) as exc:
            problems.append((display, 0, f"cannot read: {exc}"))
            continue
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            problems.append((display, 1, "a catalogue file is a mapping with a 'messages' list"))
            continue
        lines = _id_lines(text)
        for raw in data["messages"]:
            entry, found = _entry(raw, display, check_examples,
                                  lines.get(str(raw.get("id"))) if isinstance(raw, dict) else 0)
            problems.extend(found)
            if entry is None:
                continue
            if entry.id in seen:
                where = seen[entry.id]
                problems.append((display, entry.line, f"{entry.id}: id already used at {where[0]}:{where[1]}"))
                continue
            seen[entry.id] = (display, entry.line)
            entries.append(entry)
    return entries, problems


def _display(path: str) -> str:
    parts = path.replace(os.sep, "/").split("/")
    return "/".join(parts[-3:]) if len(parts) > 3 else path


def _entry(raw, path: str, check_examples: bool, line: int | None = 0):
    if not isinstance(raw, dict):
        return None, [(path, 0, "each message is a mapping")]
    line = line or 0
    name = raw.get("id", "?")
    problems = []

    def bad(message: str):
        problems.append((path, line, f"{name}: {message}"))

    for key in _REQUIRED:
        if key not in raw:
            bad(f"missing '{key}'")
    unknown = set(raw) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        bad(f"unknown key(s): {', '.join(sorted(unknown))}")
    if problems:
        return None, problems
    if not isinstance(name, str) or not _ID.fullmatch(name):
        bad("id must be kebab-case (a-z, 0-9, '-')")
    for key in ("source", "level", "example", "en", "zh"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            bad(f"'{key}' must be a non-empty string")
    if not isinstance(raw["versions"], (str, int, float)):
        bad("'versions' must be a string such as '2.19-2.28'")
    if raw["project"] not in PROJECTS:
        bad(f"project must be one of {', '.join(PROJECTS)}")
    literals = raw["match"] if isinstance(raw["match"], list) else [raw["match"]]
    if not literals or not all(isinstance(x, str) and x for x in literals):
        bad("'match' must be a literal string or a list of them")
    texts = raw["patterns"] if isinstance(raw["patterns"], list) else [raw["patterns"]]
    patterns = []
    for text in texts:
        if not isinstance(text, str):
            bad("each pattern must be a string")
            continue
        if check_examples:  # a check compiles now; a shipped catalogue, when a line first needs it
            try:
                pattern = re.compile(text)
            except re.error as exc:
                bad(f"pattern {text!r} does not compile: {exc}")
                continue
            unknown_groups = set(pattern.groupindex) - set(FIELD_KINDS)
            if unknown_groups:
                bad(f"unknown named group(s) {', '.join(sorted(unknown_groups))} "
                    "(see forensics.messages.FIELD_KINDS)")
        patterns.append(text)
    proves = raw["proves"]
    if not isinstance(proves, dict):
        bad("'proves' must be a mapping")
        proves = {}
    if set(proves) != {"cause", "stuck", "blames", "knock_on"}:
        bad("'proves' needs exactly cause, stuck, blames, knock_on")
    if proves.get("cause") not in CAUSES:
        bad(f"proves.cause must be one of {', '.join(CAUSES)}")
    if proves.get("blames") not in BLAMES:
        bad(f"proves.blames must be one of {', '.join(BLAMES)}")
    for flag in ("stuck", "knock_on"):
        if not isinstance(proves.get(flag), bool):
            bad(f"proves.{flag} must be true or false")
    facts = raw["facts"]
    if not isinstance(facts, dict):
        bad("'facts' must be a mapping (may be empty: {})")
        facts = {}
    facts = {k: tuple(v) if isinstance(v, list) else v for k, v in facts.items()}
    variants = raw.get("variants") or []
    if not isinstance(variants, list) or not all(isinstance(v, str) for v in variants):
        bad("'variants' must be a list of strings")
        variants = []
    if problems:
        return None, problems
    entry = Entry(id=name, project=raw["project"], source=raw["source"], versions=str(raw["versions"]),
                  level=raw["level"], match=tuple(literals), patterns=tuple(patterns), example=raw["example"],
                  facts=facts, cause=proves["cause"], stuck=proves["stuck"], blames=proves["blames"],
                  knock_on=proves["knock_on"], en=raw["en"].strip(), zh=raw["zh"].strip(),
                  variants=tuple(variants), path=path, line=line)
    if check_examples:
        problems.extend(_check_example(entry))
    return entry, problems


def _check_example(entry: Entry) -> list[tuple[str, int, str]]:
    problems = []
    where = (entry.path, entry.line)
    if "\n" in entry.example:
        problems.append((*where, f"{entry.id}: the example must be one line"))
    if not any(literal in entry.example for literal in entry.match):
        problems.append((*where, f"{entry.id}: the example holds none of the 'match' literals"))
        return problems
    got = entry.extract(entry.example)
    if got is None:
        problems.append((*where, f"{entry.id}: no pattern matches the example"))
    elif got != entry.facts:
        problems.append((*where, f"{entry.id}: the example yields {_jsonable(got)}, "
                                 f"the entry states {_jsonable(entry.facts)}"))
    return problems


_HOSTILE_SIZES = (8, 12, 16, 20, 24, 32, 64, 256, 1024, 4096, 16384, 65536)


def _hostile_lines(entry: Entry, size: int) -> tuple[str, ...]:
    """Lines of about `size` characters built from the entry's own example
    and literal, each ending where a greedy pattern must backtrack."""
    literal = entry.match[0]
    body = (entry.example * (size // max(len(entry.example), 1) + 1))[:size]
    return (entry.example + " " + "9" * size + "!", literal + " " + "a" * size + "!",
            literal + " " + body + "\x00", literal + " " + "[" * size, literal + " " + ("1, " * size)[:size] + "x")


def _slow_patterns(entry: Entry) -> list[tuple[str, int, str]]:
    """Patterns that take more than SLOW_MS on hostile lines. The lines
    grow from 8 characters to 64 KiB and the check stops at the first size
    that is too slow, so an exponential pattern is caught at a size where
    it still ends, instead of hanging the check."""
    problems = []
    for pattern in entry.regexes:
        for size in _HOSTILE_SIZES:
            lines = _hostile_lines(entry, size)
            spent = math.inf
            for _ in range(3):  # the best of three: a busy machine slows a run, never speeds one up
                started = time.perf_counter()
                for line in lines:
                    pattern.search(line)
                spent = min(spent, (time.perf_counter() - started) * 1000)
                if spent <= SLOW_MS:
                    break
            if spent > SLOW_MS:
                problems.append((entry.path, entry.line, f"{entry.id}: pattern {pattern.pattern!r} took "
                                                         f"{spent:.0f} ms on hostile lines of {size} characters "
                                                         f"(limit {SLOW_MS:.0f} ms up to 64 KiB)"))
                break
    return problems


def check(paths: list[str]) -> list[tuple[str, int, str]]:
    """Every problem of the catalogue files `paths`; the other shipped files
    are loaded beside them, so ids must be unique across all."""
    wanted = {_display(p) for p in paths}
    others = [p for p in shipped_files() if _display(p) not in wanted]
    entries, problems = load(others + list(paths))
    for entry in entries:
        if entry.path in wanted:
            problems.extend(_slow_patterns(entry))
    return [p for p in problems if p[0] in wanted]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "check":
        print("usage: python -m forensics.messages check [FILE ...]", file=sys.stderr)
        return 2
    paths = argv[1:] or shipped_files()
    problems = check(paths)
    for path, line, message in problems:
        print(f"{path}:{line}: {message}")
    if not problems:
        entries, _ = load(paths, check_examples=False)
        print(f"{len(entries)} message(s) in {len(paths)} file(s): all examples yield their facts")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
