"""The text PyTorch's Flight Recorder analyzer prints (`python -m
torch.distributed.flight_recorder.fr_trace DIR -p PREFIX`, `torchfrtrace`),
as people save it or paste it into issues.

The analyzer matches every rank's dump against the others and prints one
block per collective it could not match (2.7-2.13 wording;
components/types.py `EntryState.log`):

    Not all ranks joining collective, sequence number: 13
    internal record id: 12
    group info: 0:default_pg                  # "<pg name>:<desc>", or the name alone
    collective: gloo:all_reduce
    missing ranks: {1}
    input sizes: [[128, 64]]
    output sizes: [[128, 64]]
    world size: 2
    expected ranks: {0, 1}
    collective state: scheduled
    error msg: Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH, …   # error blocks
    collective stack trace:
     all_reduce at /…/torch/distributed/distributed_c10d.py:3245
    sync_grads at /srv/train/train.py:58

Older analyzers (tools/flight_recorder, 2.4-2.6) print the same facts in
other words: "Not all ranks joining collective 5 at entry 4" and "expected
ranks: 2" (a count), or one line per problem ("… for group 0:default_pg
collective nccl:all_reduce Missing ranks are {1}"). `-j` prints a table of
each rank's entries, `-v` the tables of the database it built (Groups,
Memberships, Collectives, NCCLCalls); when it fails it prints a Python
traceback ending in the exception.

What each line means is the message catalogue's business
(rules/messages/pytorch_fr_analyzer.yaml, ids `fr-analyzer-*`); this reader
finds the blocks and the lines around them, and gives the engine:

- one `MessageHit` per reported problem: the block's header entry with the
  block's own lines added as facts (`seq`, `group`, `group_desc`, `op`,
  `transport`, `state`, `world_size`, `sizes`, and `ranks`: the missing ranks
  of a "not all ranks" block, the culprits of an error block); one hit per
  culprit of an error line (`rank`, `error`, the op or sizes or state it was
  found with); and the analyzer's other verdicts and failures;
- process groups with their members, from a block's `group info` and
  `expected ranks {…}` and from the `-v` tables. A group the analyzer names
  by its guid (its name followed by `hash(frozenset(ranks))`, builder.py) is
  named back by its name when its members are known;
- no stuck signal: nothing the analyzer prints carries a time, so a block
  says that dumps disagree, never that the job stopped;
- a diagnostic when the analyzer itself failed (its traceback), and for
  blocks that name no members (world size 0: the analyzer could not read
  the group's membership, as with torch 2.13's Gloo dumps, whose pg_config
  is keyed by an empty name): those say nothing about which rank is missing
  and give no hit.

No lark grammar: every line is `key: value`, a table row, or a message the
catalogue already describes with a pattern; a grammar would restate the
same prefixes. Tables are cut by the column spans of tabulate's dash rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..messages import fact_items
from .. import lazy
from ..model import Evidence, MessageHit, ProcessGroup, normalize_op
from .facts import Facts
from .reader import markers_hook, reader_hooks
from .textio import head_shows, int_text, read_document, uncoloured

KIND = "fr-analyzer-report"
PREFIX = "fr-analyzer-"
MAX_LINE = 64 * 1024
MAX_LINE_DIAGNOSTICS = 200
EVIDENCE_CHARS = 2000
MAX_BYTES = 256 * 1024 * 1024

# ------------------------------------------------------------------ sniffing

_SNIFF = lazy.regex(
    rb"^[ \t>]*(?:Not all ranks joining collective"
    rb"|Collective sequence number: \d+ has errors"
    rb"|Collective \d+ at entry \d+ errors"
    rb"|Collective (?:\d+ )?errors for group "
    rb"|Input/output mismatch in the collective"
    rb"|We cannot decide what's wrong with this collective entry"
    rb"|No errors found for this collective entry"
    rb"|Too many mismatches for process_group "
    rb"|built groups, memberships"
    rb"|\$ ?(?:\S*/)?(?:python[\d.]* -m torch\.distributed\.flight_recorder\.fr_trace|torchfrtrace|python[\d.]* \S*fr_trace\.py)\b"
    rb"|\w+\((?:s=-?\d+ d=-?\d+, )?input_sizes=\[.*, state=\w+\))", re.M)
# Each alternative of the two patterns holds one of these: C scans decline
# most files before the line-anchored search.
_SNIFF_LITERALS = (b"Collective ", b"Not all ranks joining collective", b"Input/output mismatch",
                   b"We cannot decide", b"No errors found for this", b"Too many mismatches",
                   b"built groups, memberships", b"fr_trace", b"torchfrtrace", b"input_sizes=[",
                   b"/flight_recorder/")
_SNIFF_CRASH = lazy.regex(rb'File "[^"\n]*(?:torch/distributed|tools)/flight_recorder/[^"\n]*\.py", line \d+')


def sniff(path: str, head: bytes) -> str | None:
    """The analyzer's own lines (block headers, verdicts, its `-v` chatter,
    a `-j` table cell), its command line, or its traceback."""
    return KIND if head_shows(head, _SNIFF_LITERALS, _SNIFF, _SNIFF_CRASH) else None


# ------------------------------------------------------------------ lines

_BLOCK_IDS = ("fr-analyzer-not-all-ranks-joined", "fr-analyzer-collective-errors",
              "fr-analyzer-alltoall-numel-mismatch")
_FIELD = lazy.regex(r"(?P<key>internal record id|group info|collective|missing ranks|total input numel"
                    r"|total output numel|input sizes|output sizes|world size|expected ranks|collective state"
                    r"|error msg|error message|Found errors|collective stack trace|Collective stack traces)"
                    r":[ \t]?(?P<value>.*)")
_STACK_FRAME = lazy.regex(r"(?P<name>\S.*?) at (?P<file>.+):(?P<line>\d+)")
_CULPRIT_SPLIT = lazy.regex(r"(?=(?:Culprit|Error) rank \d+[;,] )")
_RANK_SET = lazy.regex(r"\{[\d, ]*\}|set\(\)")
_NUMBER = lazy.regex(r"\d+")
_DASHES = lazy.regex(r"-+(?: +-+)*")
_TITLES = {"Groups", "Memberships", "Collectives", "NCCLCalls", "Match", "MISMATCH"}
_CHATTER = lazy.regex(
    r"loaded \d+ files in \S+s|built groups, memberships|built collectives, nccl_calls"
    r"|appending a non-matching collective|tabulate is not installed\. Proceeding without it\."
    r"|Inferred common prefix \S*|Rank \d+ trace does not start at time 0 \(first record is \d+\.?"
    r"|# exit code -?\d+|```\w*")
_COMMAND = lazy.regex(r"\$ ?.*(?:fr_trace|torchfrtrace).*")
_TRACEBACK = "Traceback (most recent call last):"
# What starts the analyzer's own lines: never a table row.
_NOT_ROWS = (_TRACEBACK, "Not all ranks joining", "Collective ", "Input/output mismatch", "We cannot decide",
             "No errors found", "Too many mismatches", "group info:", "internal record id:")
_TB_FRAME = lazy.regex(r'File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<function>.+)')
_CHAIN = ("The above exception was the direct cause of the following exception:",
          "During handling of the above exception, another exception occurred:")


@dataclass
class _Block:
    """One reported collective: its header line and the lines under it."""

    entry_id: str
    facts: dict
    evidence: Evidence
    fields: dict = field(default_factory=dict)
    culprits: list = field(default_factory=list)   # (entry id, facts, evidence)
    stack: bool = False


class _Reader:
    def __init__(self, display: str):
        self.display = display
        self.facts = Facts(KIND, display)
        self.block: _Block | None = None
        self.blocks: list[_Block] = []
        self.hits: list[MessageHit] = []
        self.groups: dict[str, tuple[str, tuple[int, ...], int]] = {}  # uid → (desc, members, line)
        self.guids: dict[str, tuple[str, tuple[int, ...], int]] = {}   # guid → (desc, members, line)
        self.unrecognized = 0
        self.last_bad = 0
        self.memberless: list[int] = []
        self.traceback: dict | None = None
        self.entries_only = False  # a `-j` table: each rank's entries, no analysis

    # -- the file

    def read(self, text: str) -> Facts:
        text = uncoloured(text)
        lines = [line.rstrip("\r") for line in text.split("\n")]
        self.facts.lines_read = len(lines)
        table_lines = self._tables(lines)
        from .. import messages
        self.catalogue = messages.catalogue_or_empty(self.facts)
        for number, raw in enumerate(lines, 1):
            if len(raw) > MAX_LINE:
                self.facts.diag(number, f"line of {len(raw):,} characters skipped")
                continue
            if number in table_lines:
                self._close_stack()
                continue
            self._line(number, raw)
        self._end_block()
        self._end_traceback(len(lines))
        return self._finish()

    def _line(self, number: int, raw: str) -> None:
        line = raw.strip()
        if self.traceback is not None and self._traceback_line(number, raw, line):
            return
        if not line:
            self._close_stack()
            return
        if line.startswith(_TRACEBACK):
            self._end_block()
            self.traceback = {"line": number, "frames": [], "hint": False}
            return
        found = self._match(line)
        block_entry = next(((e, f) for e, f in found if e.id in _BLOCK_IDS), None)
        if block_entry is not None:
            self._end_block()
            entry, facts = block_entry
            self.block = _Block(entry.id, dict(facts), self._evidence(number, line))
            return
        if self.block is not None and self._field(number, line):
            return
        if self.block is not None and self.block.stack and _STACK_FRAME.fullmatch(line):
            return
        if found:
            self._end_block()
            for entry, facts in found:
                self.hits.append(self._hit(entry.id, facts, number, line))
            return
        if _CHATTER.fullmatch(line) or _COMMAND.fullmatch(line) or line in _TITLES:
            self._close_stack()
            return
        self._unrecognized(number, raw)

    def _match(self, line: str) -> list:
        return [(e, f) for e, f in self.catalogue.match(line) if e.id.startswith(PREFIX)]

    # -- blocks

    def _field(self, number: int, line: str) -> bool:
        found = _FIELD.fullmatch(line)
        if found is None:
            return False
        key, value = found["key"], found["value"].strip()
        block = self.block
        if key in ("collective stack trace", "Collective stack traces"):
            block.stack = True
            if value and not _STACK_FRAME.fullmatch(value):
                self._unrecognized(number, line)
            return True
        block.stack = False
        if key in ("error msg", "error message", "Found errors"):
            evidence = self._evidence(number, line)
            for segment in _CULPRIT_SPLIT.split(value):
                for entry, facts in self._match(segment):
                    block.culprits.append((entry.id, dict(facts), evidence))
            return True
        block.fields[key] = (value, number)
        return True

    def _close_stack(self) -> None:
        if self.block is not None:
            self.block.stack = False

    def _end_block(self) -> None:
        block, self.block = self.block, None
        if block is None:
            return
        fields = {key: value for key, (value, _) in block.fields.items()}
        facts = dict(block.facts)
        group, desc = _group_info(fields.get("group info"))
        if group is not None:
            facts.setdefault("group", group)
            if desc:
                facts.setdefault("group_desc", desc)
        profiling = fields.get("collective", "")
        if profiling:
            facts.setdefault("op", normalize_op(profiling))
            if ":" in profiling:
                facts.setdefault("transport", profiling.split(":", 1)[0])
        if fields.get("collective state"):
            facts["state"] = fields["collective state"]
        if fields.get("input sizes"):
            facts["sizes"] = fields["input sizes"]
        expected = fields.get("expected ranks")
        members = _ranks(expected) if expected is not None and _RANK_SET.fullmatch(expected) else None
        world = fields.get("world size")
        # the world size, else (2.5-2.6) "expected ranks: <count>"
        sizes = [n for n in (int_text(world or ""), int_text(expected or "")) if n is not None and n >= 0]
        if sizes:
            facts["world_size"] = sizes[0]
        if members is not None and group is not None:
            self._group(group, desc, members, block.evidence.line)
        if block.entry_id == "fr-analyzer-not-all-ranks-joined":
            if "missing ranks" in fields:
                facts["ranks"] = _ranks(fields["missing ranks"])
            if (members == () or facts.get("world_size") == 0) and not facts.get("ranks"):
                self.memberless.append(block.evidence.line)
                return
        if block.culprits:
            facts["ranks"] = tuple(sorted({f["rank"] for _, f, _ in block.culprits if "rank" in f}))
        self.hits.append(MessageHit(block.entry_id, fact_items(facts), block.evidence))
        context = {k: facts[k] for k in ("seq", "group", "group_desc", "op", "transport") if k in facts}
        for entry_id, culprit, evidence in block.culprits:
            self.hits.append(MessageHit(entry_id, fact_items({**context, **culprit}), evidence))

    # -- the analyzer's own traceback

    def _traceback_line(self, number: int, raw: str, line: str) -> bool:
        """True when the line belongs to the traceback being read."""
        tb = self.traceback
        if not line:
            return True
        if raw[:1] in (" ", "\t"):
            frame = _TB_FRAME.fullmatch(line)
            if frame is not None:
                tb["frames"].append((frame["file"], int(frame["line"]), frame["function"]))
            elif "_pg_guids[" in line:
                tb["hint"] = True
            return True
        if line.startswith(_TRACEBACK) or line in _CHAIN:
            return True
        self._end_traceback(number, line)
        return True

    def _end_traceback(self, number: int, line: str = "") -> None:
        tb, self.traceback = self.traceback, None
        if tb is None:
            return
        if not line:
            self.facts.diag(tb["line"], "a traceback with no exception line (the text is cut short)")
            return
        where = ""
        if tb["frames"]:
            file, at, function = tb["frames"][-1]
            where = f" (at {file.rsplit('/', 1)[-1]}:{at} in {function})"
        ours = any("flight_recorder" in f for f, _, _ in tb["frames"])
        what = "PyTorch's Flight Recorder analyzer failed" if ours else "a Python traceback"
        message = f"{what}: {line[:300]}{where}"
        if tb["hint"] and line.startswith("KeyError"):
            message += ("; its group table has no entry for the group the dump entries name (torch 2.13's "
                        "Gloo dumps key pg_config by an empty name): read the dumps themselves")
        self.facts.diag(number, message)
        for entry, facts in self._match(line):
            self.hits.append(self._hit(entry.id, facts, number, line))

    # -- tables

    def _tables(self, lines: list[str]) -> set[int]:
        """Line numbers (1-based) of tabulate tables: a dash rule, the header
        above it, the rows under it. The -v tables feed the groups."""
        taken: set[int] = set()
        index = 0
        while index < len(lines):
            line = lines[index]
            if not line.strip() or not _DASHES.fullmatch(line.strip()) or len(line) > MAX_LINE:
                index += 1
                continue
            spans = [m.span() for m in re.finditer(r"-+", line)]
            header = index - 1 if index > 0 and lines[index - 1].strip() \
                and lines[index - 1].strip() not in _TITLES and not _DASHES.fullmatch(lines[index - 1].strip()) \
                else None
            title = lines[header - 1].strip() if header is not None and header > 0 else ""
            rows = []
            end = index + 1
            while end < len(lines) and lines[end].strip() and lines[end].strip() not in _TITLES \
                    and len(lines[end]) <= MAX_LINE:
                if _DASHES.fullmatch(lines[end].strip()):
                    if [m.span() for m in re.finditer(r"-+", lines[end])] == spans:
                        end += 1  # the closing rule of a table without headers
                    elif rows:  # the last row is the header of the next table
                        rows.pop()
                        end -= 1
                    break
                if not _fits(lines[end], spans):
                    break
                rows.append((end + 1, lines[end]))
                end += 1
            if header is None and not rows and len(spans) == 1:
                index += 1  # a lone rule of dashes, not a table
                continue
            taken.update(range(header + 1 if header is not None else index + 1, end + 1))
            if header is not None and lines[header].strip().startswith("Rank "):
                self.entries_only = True
            if header is not None and title in ("Groups", "Memberships", "Collectives"):
                names = re.split(r"\s{2,}", lines[header].strip())
                if len(names) == len(spans):
                    self._table(title, names, spans, rows)
            index = end
        return taken

    def _table(self, title: str, names: list[str], spans, rows) -> None:
        for number, row in rows:
            cells = {}
            for i, (name, (start, end)) in enumerate(zip(names, spans)):
                stop = None if i == len(spans) - 1 else spans[i + 1][0]
                cells[name] = row[start:stop].strip()
            if title == "Groups" and cells.get("id"):
                desc, members, _ = self.guids.get(cells["id"], ("", (), number))
                self.guids[cells["id"]] = (cells.get("desc", ""), members, number)
            elif (title == "Memberships" and cells.get("group_id")
                  and (member := int_text(cells.get("global_rank", ""))) is not None and member >= 0):
                desc, members, line = self.guids.get(cells["group_id"], ("", (), number))
                self.guids[cells["group_id"]] = (desc, tuple(sorted(set(members) | {member})), line)
            elif title == "Collectives" and cells.get("group_id") is not None:
                expected = cells.get("expected_ranks", "")
                if _RANK_SET.fullmatch(expected):
                    group, desc = _group_info(cells.get("pg_desc", cells["group_id"]))
                    self._group(cells["group_id"], desc or "", _ranks(expected), number)

    # -- output

    def _group(self, uid: str, desc: str, members: tuple[int, ...], line: int) -> None:
        if not uid or not members:
            return
        known = self.groups.get(uid)
        if known is None:
            self.groups[uid] = (desc, members, line)
        elif known[1] != members:
            self.facts.diag(line, f"group {uid!r} has members {list(members)} here but {list(known[1])} "
                                  f"at line {known[2]}: the first is used")

    def _hit(self, entry_id: str, facts: dict, number: int, line: str) -> MessageHit:
        facts = dict(facts)
        if entry_id == "fr-analyzer-too-many-mismatches" and "group" in facts:
            facts["group"] = self._uid(facts["group"])
        return MessageHit(entry_id, fact_items(facts), self._evidence(number, line))

    def _uid(self, guid: str) -> str:
        """A group guid (`<name><hash(frozenset(ranks))>`) back to its name,
        when some group's members make that hash."""
        candidates = [(uid, members) for uid, (_, members, _) in self.groups.items()]
        candidates += [(guid_, members) for guid_, (_, members, _) in self.guids.items()]
        for uid, members in candidates:
            suffix = str(hash(frozenset(members)))
            if guid.endswith(suffix) and len(guid) > len(suffix):
                return guid[:-len(suffix)]
        return guid

    def _finish(self) -> Facts:
        facts = self.facts
        for guid, (desc, members, line) in self.guids.items():
            if not members:
                continue
            suffix = str(hash(frozenset(members)))
            uid = guid[:-len(suffix)] if guid.endswith(suffix) and len(guid) > len(suffix) else guid
            self._group(uid, desc if desc != "undefined" else "", members, line)
        facts.groups.extend(ProcessGroup(uid, desc if desc != "undefined" else "", members)
                            for uid, (desc, members, _) in self.groups.items())
        facts.messages.extend(self.hits)
        if self.memberless:
            facts.diag(self.memberless[0], f"{len(self.memberless)} block(s) name no member of their group "
                                           "(world size 0: the analyzer could not read the group's membership, "
                                           "as with torch 2.13's Gloo dumps): they do not say which rank is missing")
        facts.unrecognized = self.unrecognized
        if self.unrecognized > MAX_LINE_DIAGNOSTICS:
            facts.diag(self.last_bad, f"{self.unrecognized - MAX_LINE_DIAGNOSTICS:,} more unrecognized lines "
                                      "not listed")
        if not facts.messages and not facts.groups and not any(d.severity != "info" for d in facts.diagnostics):
            facts.diag(1, "the analyzer only printed each rank's entries (-j): it judged nothing" if self.entries_only
                       else "the analyzer reported nothing wrong", "info")
        return facts

    def _evidence(self, number: int, line: str) -> Evidence:
        return Evidence(self.display, number, line.strip()[:EVIDENCE_CHARS])

    def _unrecognized(self, number: int, line: str) -> None:
        self.unrecognized += 1
        self.last_bad = number
        if self.unrecognized <= MAX_LINE_DIAGNOSTICS:
            shown = line.strip()
            self.facts.diag(number, f"unrecognized line: {shown if len(shown) <= 120 else shown[:117] + '...'!r}")


def _fits(row: str, spans) -> bool:
    """A row of the table whose dash rule has these column spans: blank
    between the columns, and not one of the analyzer's own lines."""
    if any(row[end:start].strip() for (_, end), (start, _) in zip(spans, spans[1:])):
        return False
    text = row.strip()
    return not (_CHATTER.fullmatch(text) or _COMMAND.fullmatch(text) or text.startswith(_NOT_ROWS))


def _group_info(text: str | None) -> tuple[str | None, str]:
    """`0:default_pg` → ("0", "default_pg"); `1` → ("1", "") (desc "undefined" is not printed)."""
    if text is None:
        return None, ""
    uid, _, desc = text.partition(":")
    return uid.strip(), desc.strip()


def _ranks(text: str) -> tuple[int, ...]:
    return tuple(sorted({int(n) for n in _NUMBER.findall(text)}))




def parse(path: str, display: str) -> Facts:
    return _Reader(display).read(read_document(path, display, MAX_BYTES).replace("\x00", ""))


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)}, sniff)
forensics_sniff_markers = markers_hook(_SNIFF_LITERALS)
