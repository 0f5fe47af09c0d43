"""Which global rank did each stack dump or log record come from?

Users name files every way there is (`rank3.pyspy.txt`, `rank_3/`,
`node07-rank3-gdb.log`, `host1/rank-12/py-spy.txt`) and some not at all.
Sources, strongest first: what an item says of itself (a log line's
`[rank3]:` prefix, a c10d line naming its rank in the default group); a pid
map the collector wrote (pid_map.json, ranks.yaml, manifest.json) or another
artifact states (launcher summaries, NCCL init lines); a `rank` word in the
path; a `rank`/`RANK` local in the dump itself; what the process says of
itself in its command line or title (`process_identity`: a local rank only
on a job the evidence says is one node, a tensor-parallel rank only where
that group is the whole job); the pid of an item already attributed; and
last, weakest, the number a file name ends with.
Disagreements are diagnostics; an item nobody can place is kept and shown,
never dropped.

Numbers in paths are mostly not ranks. A number after a `rank` word is
(`rank3`, `rank_3`, `RANK-12`, `global_rank3`), unless the word is a
group's or a node's (`local_rank3`, `node_rank1`, `tp_rank0`, `dp_rank2`).
Job ids, array task ids, pids, ports, dates and counters never are:
`slurm-34446.out`, `slurm-34446_3.out`, PBS/SGE `train.o12345`/`.e12345`,
`job_12345.log`, `core.4242`, `pid4242`, `port29500`, `2025-04-21.log`,
`train_0001.log` (zero-padded: a counter). What is left is the file name's
trailing number when nothing else in the name is numeric (`dump.3.txt`,
`fr_dump.3`, `llmd-prefill-2.log`): a *weak* rank. It is used only when
nothing else places the item (no line prefix, pid map, c10d line, rank
variable or learned pid), never for an item that carries a launcher's
local rank, never when the file holds several processes (several ranks,
local ranks or pids among its items), never when it equals the item's own
pid, and never at or beyond a known world size. When stronger evidence
disagrees with it, one info diagnostic per file says so.

A rank at or beyond the known world size (NCCL's world communicator,
the default group's members, the launcher's `global_world_sizes`,
`WORLD_SIZE`) is a diagnostic naming the file and line, not a new rank.
"""

from __future__ import annotations

import functools
import os
import re
from collections import defaultdict
from typing import NamedTuple

from .. import lazy, messages
from ..ranges import compact
from ..model import Diagnostic, Evidence, MessageHit

STRONG, WEAK = "strong", "weak"

_RANK_IN_PATH = lazy.regex(r"rank[_\-.]?(\d{1,7})(?!\d)", re.IGNORECASE)
# A rank word qualified by a group or a node names no global rank.
_QUALIFIED = lazy.regex(r"(?:local|node|group|role|dp|tp|pp|ep|cp|sp|mp)[_\-.]?$", re.IGNORECASE)
_TRAILING_NUMBER = lazy.regex(r"[._\-](\d{1,7})(?:\.[a-z]+)*$", re.IGNORECASE)
_NOT_A_RANK = lazy.regex(r"""
    ^slurm-\d                                   # Slurm's default output: slurm-<job>[_<task>].out
  | \.p?[oe]\d+$                                # PBS / SGE: <name>.o<job>, .e<job>, .po<job>
  | (?:^|[^a-z])(?:job|jobid|array|pid|port|core|step|iter|epoch|attempt|restart|run)[_\-.]?\d
    """, re.IGNORECASE | re.VERBOSE)


class PathRank(NamedTuple):
    rank: int
    strength: str  # STRONG: after a `rank` word; WEAK: the file name's trailing number


def path_rank(display: str) -> PathRank | None:
    """The rank a path names, and how strongly (see the module docstring).
    The file's own name wins over its folders'; only a `rank` word counts
    in a folder's name."""
    parts = display.replace(os.sep, "/").split("/")
    for part in reversed(parts):
        found = [m for m in _RANK_IN_PATH.finditer(part)
                 if (m.start() == 0 or not part[m.start() - 1].isalpha())
                 and not _QUALIFIED.search(part, 0, m.start())]
        if found:
            return PathRank(int(found[-1].group(1)), STRONG)
    name = parts[-1]
    if _NOT_A_RANK.search(name):
        return None
    match = _TRAILING_NUMBER.search(name)
    if match is None or re.search(r"\d", name[:match.start()]):
        return None
    digits = match.group(1)
    if len(digits) > 1 and digits.startswith("0"):  # train_0001.log: a counter
        return None
    return PathRank(int(digits), WEAK)


_SECTION = re.compile(r"==> (\S(?:.{0,400}\S)?) <==\s*")


def section_header(line: str) -> tuple[bool, int | None]:
    """(True, rank) for the header `tail`/`head` print before each file they
    show (`==> logs/rank3.log <==`), with the rank its path names by a rank
    word (None when it names none); (False, None) for any other line. The
    lines under such a header are that file's."""
    found = _SECTION.fullmatch(line) if line.startswith("==> ") else None
    if found is None:
        return False, None
    named = path_rank(found.group(1))
    return True, (named.rank if named is not None and named.strength == STRONG else None)


def rank_from_path(display: str) -> int | None:
    """`rank3.pyspy.txt`, `rank_3/x`, `node07-rank3-gdb.log`, `nccl_trace_rank_3` → 3;
    `dump.3.txt`, `fr_dump.3` → 3 (weak: see `path_rank`); `slurm-34446.out` → None."""
    found = path_rank(display)
    return found.rank if found is not None else None


class World(NamedTuple):
    """How many global ranks the job has, and which artifact says so."""

    size: int
    source: str

    def excludes(self, rank: int) -> bool:
        return rank >= self.size

    def describe(self) -> str:
        return f"the world has {self.size} ranks ({self.source})"


def outside_world(world: World | None, rank: int | None, path: str, line: int, what: str,
                  diagnostics: list[Diagnostic]) -> bool:
    """Whether `rank` is beyond the known world size; if so a diagnostic
    naming the file and line says the evidence is not attributed."""
    if world is None or rank is None or not world.excludes(rank):
        return False
    diagnostics.append(Diagnostic(path, line, f"{what} says rank {rank}, but {world.describe()}: "
                                              f"not attributed to any rank"))
    return True


class PidMap:
    def __init__(self):
        self.by_host_pid: dict[tuple[str, int], tuple[int, str]] = {}
        self.by_pid: dict[int, set[int]] = defaultdict(set)
        self.where: dict[int, str] = {}

    def add(self, host: str, pid: int, rank: int, where: str) -> None:
        self.by_host_pid.setdefault((host or "", pid), (rank, where))
        self.by_pid[pid].add(rank)
        self.where.setdefault(pid, where)

    def lookup(self, host: str, pid: int | None) -> tuple[int, str] | None:
        if pid is None:
            return None
        if host and (host, pid) in self.by_host_pid:
            return self.by_host_pid[(host, pid)]
        ranks = self.by_pid.get(pid)
        if ranks and len(ranks) == 1:  # a pid alone is ambiguous across hosts
            return next(iter(ranks)), self.where[pid]
        return None


def _several_processes(items) -> set[str]:
    """Paths whose items are more than one process (distinct ranks, local
    ranks or pids): such a file's trailing number cannot be all their ranks."""
    seen: dict[str, set] = defaultdict(set)
    for item in items:
        who = (getattr(item, "rank", None), getattr(item, "local_rank", None), item.pid)
        if who != (None, None, None):
            seen[item.path].add(who)
    return {path for path, who in seen.items() if len(who) > 1}


def _weak_rank(item, found: PathRank | None, several: set[str]) -> int | None:
    if found is None or found.strength != WEAK:
        return None
    if item.path in several or getattr(item, "local_rank", None) is not None or item.pid == found.rank:
        return None
    own = process_identity(getattr(item, "command", ""))
    if own is not None and own.scope in (LOCAL, GROUP_LOCAL):  # a number of a node's or a group's
        return None
    return found.rank


def attribute(items, stated: PidMap, diagnostics: list[Diagnostic], learned: PidMap | None = None,
              world: World | None = None, shape: JobShape | None = None):
    """Place stack dumps or log records on global ranks.

    Returns ({rank: [items]}, [unattributed items], learned pid map). What an
    item says of itself (a log's `[rank3]:` prefix) comes first, then a pid
    map, a `rank` word in the path, a rank variable in a dump, what the
    process's command line or title says (`process_identity`; a local rank
    only on a one-node job, `shape`), the pids learned from items already
    placed (pass `learned` on to place the next kind), and last a weak
    trailing number of the file name. A rank beyond `world` is a diagnostic
    and is not used; a rank from a process's identity is said in one.
    """
    placed: dict[int, list] = defaultdict(list)
    pending: list = []
    learned = learned if learned is not None else PidMap()
    several = _several_processes(items)
    overruled: set[str] = set()
    for item in items:
        line = item.evidence.line if item.evidence else 0
        candidates = []
        own = getattr(item, "rank", None)
        if own is not None:
            candidates.append((own, "the log line itself"))
        from_map = stated.lookup(item.host, item.pid)
        if from_map is not None:
            candidates.append((from_map[0], f"pid {item.pid} in {from_map[1]}"))
        found = path_rank(item.path)
        if found is not None and found.strength == STRONG and own is None:
            candidates.append((found.rank, "the file name"))
        hint = getattr(item, "rank_hint", None)
        if hint is not None:
            candidates.append((hint, "a rank variable in the dump"))
        itself, why_not = identity_rank(item, shape)
        if itself is not None:
            candidates.append((itself, why_not))
        candidates = [(r, s) for r, s in candidates if not outside_world(world, r, item.path, line, s, diagnostics)]
        weak = _weak_rank(item, found, several)
        if not candidates:
            pending.append((item, weak, why_not))
            continue
        rank, source = candidates[0]
        if itself is not None and source == why_not:
            diagnostics.append(Diagnostic(item.path, line, f"rank {rank} from {why_not}", "info"))
        for other, other_source in candidates[1:]:
            if other != rank:
                diagnostics.append(Diagnostic(
                    item.path, line, f"{source} says rank {rank} but {other_source} says rank {other}: "
                                     f"using rank {rank}"))
        if (found is not None and found.strength == WEAK and found.rank != rank and found.rank != item.pid
                and item.path not in overruled):
            overruled.add(item.path)
            diagnostics.append(Diagnostic(item.path, line, f"the number {found.rank} ending the file name is not "
                                                           f"taken as a rank: {source} says rank {rank}", "info"))
        placed[rank].append(item)
        if item.pid is not None:
            learned.add(item.host, item.pid, rank, item.path)
    unattributed = []
    for item, weak, why_not in pending:
        line = item.evidence.line if item.evidence else 0
        found = learned.lookup(item.host, item.pid)
        if found is not None:
            placed[found[0]].append(item)
        elif weak is not None and not outside_world(world, weak, item.path, line, "the number ending the file name",
                                                    diagnostics):
            placed[weak].append(item)
        else:
            unattributed.append(item)
            who = f"pid {item.pid} is" if item.pid is not None else "printed these lines"
            because = f"; {why_not}" if why_not else ""
            diagnostics.append(Diagnostic(
                item.path, line,
                f"cannot tell which rank {who} (no rank in the path, the artifact or a pid map{because}): "
                f"shown as unattributed", "warning"))
    return placed, unattributed, learned


# --------------------------------------------------------------------------
# What a process says about itself: its command line and its title
#
# py-spy prints `Process N: <cmdline>`, which is the title where a framework
# sets one (setproctitle rewrites the command line). A launcher passes
# `--local_rank=N` (torch.distributed.launch, DeepSpeed) or `--local-rank N`
# (torch.distributed.launch since 2.0); some scripts take `--rank N`. A
# LOCAL rank is a rank among one node's processes: it is the global rank only
# where the job is one node. Frameworks' titles (SGLang's
# `sglang::scheduler_DP0_TP1_EP1_PP0`, vLLM's `VLLM::Worker_PP1_TP0`) name a
# rank of the tensor-parallel group; each adds a `_PP`/`_DP` part only when
# that size exceeds 1, so a title with TP and neither of them is a process
# of a job whose one tensor-parallel group is its whole torch world. Ray's
# `ray::Class.method` names the actor and no rank.

GLOBAL, LOCAL, GROUP_LOCAL, NAMED = "global", "local", "tp", "named"

_LOCAL_RANK = lazy.regex(r"(?:^|\s)--local[_-]rank(?:=|\s+)(\d{1,7})(?!\S)")
_RANK_ARG = lazy.regex(r"(?:^|\s)--rank(?:=|\s+)(\d{1,7})(?!\S)")
_NODE_RANK = lazy.regex(r"(?:^|\s)--node[_-]rank(?:=|\s+)(\d{1,7})(?!\S)")
_NPROC = lazy.regex(r"(?:^|\s)--nproc[_-]per[_-]node(?:=|\s+)(\d{1,7})(?!\S)")
# `--rank N` is a process's rank only beside the other words of a distributed launch (PyTorch's ImageNet
# example: `--dist-url tcp://... --world-size 4 --rank 0`); alone it is as often a LoRA rank.
_DISTRIBUTED_ARGS = lazy.regex(r"(?:^|\s)--(?:world[_-]size|dist[_-]url|init[_-]method|master[_-]addr|nnodes)(?:=|\s)")
# SGLang: sglang::scheduler_TP1, _DP0_TP1, _DP0_PP1_TP2_EP0, _TP1_EP1_PP0 (the order moved between versions),
# _PP1_ATTN_CP0_MOE_DP0_TP0 (0.5: attention context-parallel and MoE data-parallel ranks within the TP group).
_SGLANG = lazy.regex(r"^sglang::scheduler((?:_(?:ATTN_CP|MOE_DP|DP|TP|PP|EP|NP)\d{1,5})*)\s*$")
# vLLM: VLLM::Worker, VLLM::Worker_TP1, VLLM::Worker_DP0_PP1_TP0 (VLLM_PROCESS_NAME_PREFIX may replace VLLM).
_VLLM = lazy.regex(r"^(\w+)::Worker((?:_(?:DP|TP|PP|EP)\d{1,5})*)\s*$")
_PARTS = lazy.regex(r"_(ATTN_CP|MOE_DP|DP|TP|PP|EP|NP)(\d{1,5})")
_RAY = lazy.regex(r"^(ray::[\w.]+)")


class Identity(NamedTuple):
    """A rank a process states about itself, as it states it."""

    rank: int | None  # None: a named process (Ray's actors) that states no rank
    scope: str        # GLOBAL, LOCAL (one node's), GROUP_LOCAL (the TP group's), NAMED
    said: str         # the words: "--local_rank=1", "sglang::scheduler_TP1"
    where: str        # "its command line" | "its process title"
    whole_world: bool = False  # a TP rank whose title says the TP group is the whole world


def process_identity(command: str) -> Identity | None:
    """What `command` (py-spy's `Process N: ...` text) says of the
    process's rank; None when it says nothing."""
    text = (command or "").strip()
    if not text:
        return None
    title = _SGLANG.match(text) or _VLLM.match(text)
    if title is not None:
        parts = dict(_PARTS.findall(title.group(title.lastindex)))
        if "TP" not in parts:
            return Identity(None, NAMED, text, "its process title")
        return Identity(int(parts["TP"]), GROUP_LOCAL, text, "its process title",
                        whole_world=not ({"PP", "DP"} & set(parts)))
    ray = _RAY.match(text)
    if ray is not None:
        return Identity(None, NAMED, ray.group(1), "its process title")
    local = _LOCAL_RANK.search(text)
    node, nproc = _NODE_RANK.search(text), _NPROC.search(text)
    if local is not None and node is not None and nproc is not None:
        rank = int(node.group(1)) * int(nproc.group(1)) + int(local.group(1))
        said = " ".join(match.group(0).strip() for match in (node, nproc, local))
        return Identity(rank, GLOBAL, said, "its command line")
    if local is not None:
        return Identity(int(local.group(1)), LOCAL, local.group(0).strip(), "its command line")
    found = _RANK_ARG.search(text)
    if found is not None and _DISTRIBUTED_ARGS.search(text):
        return Identity(int(found.group(1)), GLOBAL, found.group(0).strip(), "its command line")
    return None


# SGLang's log prefix (python/sglang/srt/utils: configure_logger's `[%(asctime)s{prefix}] %(message)s`, the
# date `%Y-%m-%d %H:%M:%S`, in later versions `%m-%d %H:%M:%S`), its prefix built in run_scheduler_process
# from the same parts as the scheduler's title, each only where that size exceeds 1: ` DP0 PP1 TP2 EP2`,
# ` PP1 ATTN_CP0 TP0`. A line without any part is the server's main process, not a scheduler.
_SGLANG_PREFIX = lazy.regex(
    r"^\[(?:\d{4}-)?\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d{3})?((?: (?:ATTN_CP|MOE_DP|DP|PP|TP|EP)\d{1,5})+)\] ")
_PREFIX_PARTS = lazy.regex(r"(ATTN_CP|MOE_DP|DP|PP|TP|EP)(\d{1,5})")
# The scheduler watchdog's dump of its own process (pyspy_dump_schedulers, python/sglang/srt/utils/common.py;
# later versions, in a module of its own, add the command): `Pyspy dump for PID 81911:` then py-spy's output,
# or `Pyspy dump for PID 81911 (py-spy dump --native --pid 81911):`. Called with scheduler_only (by
# the server's main process, which has no part in its prefix) it dumps every scheduler of the node instead.
_SGLANG_DUMP = lazy.regex(r"Pyspy dump for PID (\d{1,9})(?: \(py-spy dump [^()]*\))?:\s*$")


def log_prefix_identity(line: str) -> tuple[Identity, str] | None:
    """The TP rank SGLang's log prefix names (`[2026-07-10 03:17:42 TP0] ...`,
    `[07-10 03:17:42 DP1 TP3] ...`) as a rank of the tensor-parallel group,
    with the line's text after the prefix; None for any other line and for
    a prefix naming no TP rank (the server's main process, a TP size of 1)."""
    found = _SGLANG_PREFIX.match(line) if line.startswith("[") else None
    if found is None:
        return None
    parts = dict(_PREFIX_PARTS.findall(found.group(1)))
    if "TP" not in parts:
        return None
    whole = not ({"PP", "DP"} & set(parts))
    return Identity(int(parts["TP"]), GROUP_LOCAL, found.group(1).strip(), "its log prefix", whole), line[found.end():]


def announced_dump(line: str) -> tuple[int, Identity] | None:
    """(pid, identity) where `line` is an SGLang scheduler announcing the
    py-spy dump of its own process under its log prefix: the dump that
    follows, of that pid, is that TP rank's process."""
    prefixed = log_prefix_identity(line) if "Pyspy dump for PID " in line else None
    if prefixed is None:
        return None
    found = _SGLANG_DUMP.match(prefixed[1])
    return (int(found.group(1)), prefixed[0]) if found is not None else None


class JobShape(NamedTuple):
    """What the evidence says of the job's shape, each with where it stands:
    one node (a local rank is then global), one tensor-parallel group that
    is the whole world (a TP rank is then global). Empty: not said."""

    one_node: str = ""
    one_group: str = ""


# Lines by which a launcher or a server states the job's shape.
ONE_NODE_MESSAGES = frozenset({"deepspeed-launch-nnodes", "deepspeed-launch-world-info"})
ONE_GROUP_MESSAGES = frozenset({"sglang-launch-command", "sglang-server-args"})
SHAPE_MESSAGES = ONE_NODE_MESSAGES | ONE_GROUP_MESSAGES
# What the console around a framework's own stack dumps says of them: the job's shape (what the dumps'
# titles mean) and the watchdog that printed them (that the processes were stuck).
DUMP_CONSOLE_MESSAGES = SHAPE_MESSAGES | {"sglang-scheduler-watchdog-timeout"}


def dump_console_statements(line: str, evidence: Evidence) -> list[MessageHit]:
    """The catalogue's hits on `line`, a line around stack dumps pasted into
    a console (SGLang's watchdog prints them into the server's log), of the
    entries in DUMP_CONSOLE_MESSAGES: no line reader reads a file that holds
    dumps (`statements.LEFT_TO_THEIR_READERS`), yet the console's launch
    command and server arguments say what the dumps' titles mean."""
    for literal in _console_literals():
        if literal in line:
            return [hit for hit in messages.line_hits(line, evidence) if hit.id in DUMP_CONSOLE_MESSAGES]
    return []


@functools.lru_cache(maxsize=1)
def _console_literals() -> tuple[str, ...]:
    """The literals of DUMP_CONSOLE_MESSAGES: most console lines hold none,
    and a server's log has hundreds of thousands (a few substring searches
    a line cost less than one regex alternation)."""
    cat = messages.catalogue()
    return tuple(sorted({literal for entry_id in DUMP_CONSOLE_MESSAGES if (entry := cat.get(entry_id)) is not None
                         for literal in entry.match}))


_TORCHRUN = lazy.regex(r"(?:^|[\s/])(?:torchrun|torch\.distributed\.(?:run|launch))(?:\s|$)")
_STANDALONE = lazy.regex(r"(?:^|\s)--standalone(?!\S)")
_ONE_NNODES = lazy.regex(r"(?:^|\s)--nnodes(?:=|\s+)1(?::1)?(?!\S)")


def job_shape(hits, dumps) -> JobShape:
    """Where the evidence says the job is one node: DeepSpeed's launcher
    (`nnodes=1, num_local_procs=4, node_rank=0`, or a `WORLD INFO DICT`
    of one host), a dumped torchrun / torch.distributed.launch process
    started with `--standalone` or `--nnodes 1`, or every dump with a
    local rank on one named host with distinct local ranks. And where it
    says the tensor-parallel group is the whole world: SGLang's launch
    command or server arguments without a pipeline or data-parallel size
    above 1 (`sglang.yaml`)."""
    node = group = ""
    for hit in hits:
        if not node and hit.id == "deepspeed-launch-nnodes" and hit.fact("count") == 1:
            node = f"nnodes=1 in DeepSpeed's launcher log, {hit.evidence.cite()}"
        elif not node and hit.id == "deepspeed-launch-world-info" and hit.fact("host"):
            node = f"DeepSpeed's launcher lists one host, {hit.evidence.cite()}"
        elif not group and hit.id in ONE_GROUP_MESSAGES:
            group = f"a tensor-parallel size of {hit.fact('world_size')} and no other, {hit.evidence.cite()}"
    for dump in dumps:
        if node:
            break
        command = dump.command or ""
        flag = _STANDALONE.search(command) or _ONE_NNODES.search(command)
        if _TORCHRUN.search(command) and flag:
            where = dump.evidence.cite() if dump.evidence else dump.path
            node = f"the launcher was started with {flag.group(0).strip()}, {where}"
    if not node:
        hosts, locals_seen = set(), []
        for dump in dumps:
            hosts.add(dump.host)
            found = process_identity(dump.command)
            if found is not None and found.scope == LOCAL:
                locals_seen.append(found.rank)
        if (len(locals_seen) > 1 and len(hosts) == 1 and "" not in hosts
                and len(set(locals_seen)) == len(locals_seen)):
            node = f"every dump is of host {next(iter(hosts))}, with distinct local ranks"
    return JobShape(node, group)


def identity_rank(item, shape: JobShape | None) -> tuple[int | None, str]:
    """The global rank `item`'s own identity gives, with the words a
    diagnostic cites; (None, why not) when it gives none."""
    found = process_identity(getattr(item, "command", ""))
    if found is None:
        return None, ""
    if found.scope == NAMED:
        return None, f"{found.where} ({found.said}) names no rank"
    if found.scope == GLOBAL:
        return found.rank, f"{found.where} {found.said}"
    shape = shape or JobShape()
    if found.scope == LOCAL:
        if shape.one_node:
            return found.rank, f"{found.where} {found.said}, on a one-node job ({shape.one_node})"
        return None, (f"{found.where} says local rank {found.rank} ({found.said}), and nothing says the job is "
                      f"one node, so its global rank is unknown")
    if found.whole_world and shape.one_group:
        return found.rank, (f"{found.where} {found.said}: tensor-parallel rank {found.rank} of a job whose "
                            f"tensor-parallel group is the whole world ({shape.one_group})")
    return None, (f"{found.where} ({found.said}) says rank {found.rank} of its tensor-parallel group; nothing says "
                  f"that group is the whole job, so its global rank is unknown")


# --------------------------------------------------------------------------
# Processes that state their global rank and the world's size

# Entries whose `world_size` is the job's, stated by a process or its launcher (a store
# barrier's `world_size` is a group's being created, so it is not among them).
WORLD_STATEMENTS = frozenset({"lightning-init-ddp", "lightning-init-distributed", "lightning-processes-registered",
                              "deepspeed-launch-world-size", "sglang-launch-command", "sglang-server-args"})
# Entries by which a process states its own global rank as it enters init_process_group.
RANK_CLAIMS = frozenset({"lightning-init-ddp", "lightning-init-distributed"})


def stated_worlds(hits) -> list[tuple[int, str]]:
    """(world size, where it is stated) for each statement of the job's world."""
    return [(size, f"{hit.evidence.cite()} states a world of {size}") for hit in hits
            if hit.id in WORLD_STATEMENTS and isinstance(size := hit.fact("world_size"), int) and size > 0]


def rank_claims(hits, world: World | None, ranks: dict, diagnostics: list[Diagnostic]) -> dict:
    """Ranks to add to a stated world, as {rank: (why, evidence)}.

    Each process states its global rank as it enters init_process_group
    (`RANK_CLAIMS`). Two processes claiming one rank (its line printed twice
    and some rank of the world by none) were launched with a wrong rank
    setup: a warning names both. The ranks nobody claims are missing only
    where the evidence says they never came: every rank seen is in its
    init or rendezvous wait (its stack is in init_process_group, or its
    claim is all that is known of it) and nothing says the rendezvous
    completed. A rank known only from its claim is then added too, citing
    its line."""
    claims: dict[int, list] = defaultdict(list)
    for hit in hits:
        if hit.id in RANK_CLAIMS and isinstance(rank := hit.fact("rank"), int):
            claims[rank].append(hit)
    if not claims or world is None or any(hit.id == "lightning-processes-registered" for hit in hits):
        return {}
    claims = {r: h for r, h in claims.items() if not world.excludes(r)}
    unclaimed = [r for r in range(world.size) if r not in claims and r not in ranks]
    if not claims or not unclaimed or not plausible_world(world):
        return {}
    twice = {r: h for r, h in claims.items() if len(h) > 1}
    if twice:
        first = min(twice)
        cited = ", ".join(h.evidence.cite() for h in twice[first][:2])
        diagnostics.append(Diagnostic(
            twice[first][0].evidence.path, twice[first][0].evidence.line,
            f"rank {compact(sorted(twice))} {'is' if len(twice) == 1 else 'are each'} claimed by more than one "
            f"process (rank {first}: {cited}) and rank {compact(unclaimed)} by none ({world.describe()}): "
            f"the processes were launched with a wrong rank setup (node rank, number of nodes or devices per "
            f"node), so init_process_group waits for ranks nobody takes", "warning"))
    seen = set(ranks) | set(claims)
    if any(r in ranks and not _in_init(ranks[r]) for r in seen):
        return {}
    doing = (f"rank {compact(sorted(twice))} {'is' if len(twice) == 1 else 'are each'} claimed twice"
             if twice else f"rank {compact(sorted(seen))} {'waits' if len(seen) == 1 else 'wait'} in "
                           f"init_process_group")
    out = {r: (f"no process claims this rank ({world.describe()}; {doing}) and nothing shows it ever started",
               None) for r in unclaimed}
    for r, said in claims.items():
        if r not in ranks:
            out[r] = (f"known only from its own line as it entered init_process_group ({said[-1].evidence.cite()}"
                      f"{f', and {len(said) - 1} more claiming rank {r}' if len(said) > 1 else ''})",
                      said[-1].evidence)
    return out


def plausible_world(world: World) -> bool:
    return 0 < world.size <= 16384


def _in_init(state) -> bool:
    op = state.current_op
    return op is not None and op.op == "init" and op.state != "completed"
