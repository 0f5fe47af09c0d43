"""The status report of NCCL's RAS subsystem (NCCL 2.24 and later), as the
`ncclras` client prints it about a running job and people save or paste it
(src/ras/client_support.cc):

    Job summary
    ===========
      Nodes  Processes         GPUs  Processes     GPUs
    (total)   per node  per process    (total)  (total)
          4          8            1         32       32
    ...
    Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
        #  in group  per comm  per node  per comm  in group
        0         1         4         8        32        32   RUNNING  MISMATCH
    ...
    #0-0 (5c27e0b91fa4d368) MISMATCH
      Communicator ranks have different AllGather operation counts
      30 ranks have launched up to operation 640
      2 ranks have launched up to operation 641
      Rank 12 -- GPU 4 managed by process 417251 on node 10.12.3.41
      Rank 13 -- GPU 5 managed by process 417252 on node 10.12.3.41

What each line means is the message catalogue's business
(rules/messages/nccl_ras.yaml, ids `nccl-ras-*`); this reader follows the
blocks and gives the engine:

- for a communicator whose ranks launched different numbers of one
  collective, one `nccl-ras-op-count-mismatch` hit naming the ranks behind
  (below the highest count: the others wait for them in the next
  operation). RAS lists only the minority by rank; a count group it does
  not list is the rest of the communicator, when its size is known (the
  communicators table, or the counts, which add up to it). The ranks are
  the communicator's; they are global ranks, and named, only for a
  communicator of every GPU of the job (its size equals the job summary's
  GPU total); otherwise the hit names none;
- one `nccl-ras-process-dead` hit per process RAS considers dead (node and
  pid: the process whose node went silent);
- the other blocks (status mismatch, missing data, NCCL errors) as hits
  that bear no verdict;
- (node, pid, rank) of every rank line of a communicator of the whole job,
  so the report names the process behind a rank.

Nothing here carries a time, and a snapshot of a job that runs can show
counts apart for a moment: no stuck signal (`--hung` says the job is).

No lark grammar: every line is one of a dozen fixed printf formats, read
with one pattern each, as the Flight Recorder analyzer's report is
(fr_report.py); a grammar would restate the same formats.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import lazy
from ..messages import fact_items
from ..model import MAX_RANKS, Evidence, MessageHit, normalize_op
from .facts import Facts
from .reader import markers_hook, reader_hooks
from .textio import head_shows, int_text, read_document, uncoloured

KIND = "nccl-ras-report"
PREFIX = "nccl-ras-"
MAX_LINE = 64 * 1024
MAX_BYTES = 256 * 1024 * 1024
EVIDENCE_CHARS = 2000

_SNIFF = lazy.regex(
    rb"^(?:Job summary\r?\n=+\r?$"
    rb"|#\d{1,9}-\d{1,9} \([0-9a-f]{1,16}\) (?:MISMATCH|INCOMPLETE|ERROR)\r?$"
    rb"|  Communicator ranks have different (?:\w+ operation counts|status)\r?$"
    rb"|Gathering data about the NCCL communicators \(timeout )", re.M)

_SNIFF_LITERALS = (b"Job summary", b") MISMATCH", b") INCOMPLETE", b") ERROR",
                   b"Communicator ranks have different ", b"Gathering data about the NCCL communicators")
_COMM = lazy.regex(r"#(?P<group>\d{1,9})-(?P<index>\d{1,9}) \((?P<hash>[0-9a-f]{1,16})\) (?P<what>[A-Z,]+)")
_SECTION = lazy.regex(r"(?P<what>Errors|Warnings|INCOMPLETE|DEAD|TIMEOUT|Job summary|Communicators(?:\.\.\..*)?)")
_OPS = lazy.regex(r"Communicator ranks have different (?P<func>\w{1,32}) operation counts")
_COUNT = lazy.regex(r"(?P<count>\d{1,9}) ranks have (?:launched up to operation (?P<value>\d{1,19})"
                    r"|(?P<none>not launched any operations))")
_RANK = lazy.regex(r"Rank (?P<rank>\d{1,9})(?: has launched up to operation (?P<value>\d{1,19})"
                   r"| has (?P<none>not) launched any operations| has status \w+| reported [^\n]{1,200}?)?"
                   r" -- (?:GPU (?P<gpu>\S{1,64}) managed by process (?P<pid>\d{1,10}) on node (?P<node>\S{1,255})"
                   r"|\[process information not found\])")
_PROCESS = lazy.regex(r"Process (?P<pid>\d{1,10}) on node (?P<node>\S{1,255}) managing GPUs? \S{1,64}")
_JOB_HEAD = lazy.regex(r"\(total\)\s+per node\s+per process\s+\(total\)\s+\(total\)")
_JOB_ROW = lazy.regex(r"\s*(\d{1,9})\s+(\d{1,9})\s+(\d{1,9})\s+(\d{1,9})\s+(\d{1,9})\s*")
_TABLE_HEAD = lazy.regex(r"\s*#\s+in group\s+per comm\s+per node\s+per comm\s+in group\s*")
_TABLE_ROW = lazy.regex(r"\s*(?P<group>\d{1,9})\s+\d{1,9}\s+\d{1,9}\s+[\d-]{1,20}\s+(?P<size>\d{1,9})\s+\d{1,9}"
                        r"\s+[A-Z]{1,16}\s+[A-Z,]{1,40}\s*")


@dataclass
class _Count:
    """One count of a collective and the ranks RAS listed at it."""

    value: int
    count: int
    ranks: list[int] = field(default_factory=list)


@dataclass
class _Ops:
    """One 'different ... operation counts' block of a communicator."""

    op: str
    group: int
    evidence: Evidence
    counts: list[_Count] = field(default_factory=list)


class _Reader:
    def __init__(self, display: str):
        self.display = display
        self.facts = Facts(KIND, display)
        self.gpus: int | None = None              # the job's GPUs (ranks of a whole-job communicator)
        self.sizes: dict[int, int] = {}           # communicator group # → ranks per communicator
        self.group: int | None = None             # the communicator block being read
        self.ops: _Ops | None = None
        self.blocks: list[_Ops] = []
        self.dead = False                         # inside the DEAD section
        self.rank_lines: list[tuple[int, int, str, int, Evidence]] = []  # (group, rank, node, pid, evidence)
        self.job_head = self.table_head = False

    def read(self, text: str) -> Facts:
        text = uncoloured(text)
        from .. import messages
        self.catalogue = messages.catalogue_or_empty(self.facts)
        lines = text.split("\n")
        self.facts.lines_read = len(lines)
        for number, raw in enumerate(lines, 1):
            if len(raw) > MAX_LINE:
                self.facts.diag(number, f"line of {len(raw):,} characters skipped")
                continue
            self._line(number, raw.rstrip("\r"))
        self._end_ops()
        return self._finish()

    # -- lines

    def _line(self, number: int, raw: str) -> None:
        line = raw.strip()
        if not line:
            self._end_ops()
            return
        if self.job_head:
            self.job_head = False
            row = _JOB_ROW.fullmatch(raw)
            if row:
                self.gpus = int(row[5])
                return
        if _JOB_HEAD.fullmatch(line):
            self.job_head = True
            return
        if _TABLE_HEAD.fullmatch(raw):
            self.table_head = True
            return
        if self.table_head:
            row = _TABLE_ROW.fullmatch(raw)
            if row:
                self.sizes[int(row["group"])] = int(row["size"])
                return
            self.table_head = False
        comm = _COMM.fullmatch(line)
        if comm:
            self._end_ops()
            self.group, self.dead = int(comm["group"]), False
            return
        if not raw.startswith(" "):
            section = _SECTION.fullmatch(line)
            if section:
                self._end_ops()
                self.group, self.dead = None, section["what"] == "DEAD"
                return
        ops = _OPS.fullmatch(line)
        if ops:
            self._end_ops()
            op = "" if ops["func"] == "collective" else normalize_op(ops["func"]) or ""  # 2.24-2.25: one count
            group = self.group if self.group is not None else -1
            self.ops = _Ops(op, group, self._evidence(number, line))
            return
        count = _COUNT.fullmatch(line)
        if count and self.ops is not None:
            self.ops.counts.append(_Count(0 if count["none"] else int(count["value"]), int(count["count"])))
            return
        rank = _RANK.fullmatch(line)
        if rank:
            self._rank(number, line, rank)
            return
        process = _PROCESS.fullmatch(line)
        if process and self.dead:
            self._hit(number, line, "nccl-ras-process-dead",
                      {"peer_host": process["node"], "peer_pid": int(process["pid"])})
            return
        for entry, facts in self._match(line):
            if entry.id != "nccl-ras-op-count-mismatch":
                self._hit(number, line, entry.id, dict(facts))

    def _rank(self, number: int, line: str, found: re.Match) -> None:
        rank = int_text(found["rank"])
        if rank is None or rank >= MAX_RANKS:
            self.facts.diag(number, f"rank {found['rank']} is not a rank: line not read")
            return
        evidence = self._evidence(number, line)
        if found["pid"] is not None and self.group is not None:
            self.rank_lines.append((self.group, rank, found["node"], int(found["pid"]), evidence))
        if self.ops is None:
            return
        if found["value"] is not None or found["none"] is not None:  # a count held by this rank alone
            self.ops.counts.append(_Count(int(found["value"] or 0), 1, [rank]))
        elif self.ops.counts:
            self.ops.counts[-1].ranks.append(rank)

    def _end_ops(self) -> None:
        if self.ops is not None:
            self.blocks.append(self.ops)
            self.ops = None

    # -- what the blocks say

    def _finish(self) -> Facts:
        for block in self.blocks:
            self._op_counts(block)
        whole = {group for group, size in self.sizes.items() if self.gpus is not None and size == self.gpus}
        for group, rank, node, pid, evidence in self.rank_lines:
            if group in whole:
                self.facts.pid_ranks.append((node, pid, rank, evidence))
        return self.facts

    def _op_counts(self, block: _Ops) -> None:
        """The ranks behind in one collective's counts, as global ranks, or
        none where they cannot be told."""
        facts: dict = {"op": block.op} if block.op else {}
        counts = block.counts
        size = self.sizes.get(block.group)
        if size is None and counts:
            size = sum(c.count for c in counts)
        behind = self._behind(counts, size)
        if counts:
            facts["count"] = max(c.value for c in counts)
        if behind and self.gpus is not None and size == self.gpus:
            facts["ranks"] = behind
        elif behind is None and counts:
            self.facts.diag(block.evidence.line, "the counts of this block do not add up to its communicator's "
                                                 "ranks: which ranks are behind is not read", "info")
        elif behind:
            self.facts.diag(block.evidence.line, f"ranks {list(behind)[:8]} are behind in a communicator of "
                                                 f"{size} ranks, not of the whole job: communicator ranks, not "
                                                 "global ranks, so none is named", "info")
        self.facts.messages.append(MessageHit("nccl-ras-op-count-mismatch", fact_items(facts), block.evidence))

    @staticmethod
    def _behind(counts: list[_Count], size: int | None) -> tuple[int, ...] | None:
        if len(counts) < 2 or size is None or size > MAX_RANKS:
            return None
        listed = {r for c in counts for r in c.ranks}
        if any(r >= size for r in listed) or len(listed) != sum(len(c.ranks) for c in counts):
            return None
        if sum(c.count for c in counts) != size:
            return None
        unlisted = [c for c in counts if len(c.ranks) != c.count]
        if len(unlisted) > 1 or any(c.ranks for c in unlisted):
            return None
        if unlisted:  # the count RAS does not list is every rank it lists nowhere
            unlisted[0].ranks = [r for r in range(size) if r not in listed]
            if len(unlisted[0].ranks) != unlisted[0].count:
                return None
        top = max(c.value for c in counts)
        return tuple(sorted(r for c in counts if c.value < top for r in c.ranks))

    # -- output

    def _match(self, line: str) -> list:
        return [(e, f) for e, f in self.catalogue.match(line) if e.id.startswith(PREFIX)]

    def _hit(self, number: int, line: str, entry_id: str, facts: dict) -> None:
        self.facts.messages.append(MessageHit(entry_id, fact_items(facts), self._evidence(number, line)))

    def _evidence(self, number: int, line: str) -> Evidence:
        return Evidence(self.display, number, line.strip()[:EVIDENCE_CHARS])


def sniff(path: str, head: bytes) -> str | None:
    """The report's own headings and block lines."""
    return KIND if head_shows(head, _SNIFF_LITERALS, _SNIFF) else None


def parse(path: str, display: str) -> Facts:
    return _Reader(display).read(read_document(path, display, MAX_BYTES).replace("\x00", ""))


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)}, sniff)
forensics_sniff_markers = markers_hook(_SNIFF_LITERALS)
