"""Discover artifacts, parse each through the parser hooks, merge into one Incident."""

from __future__ import annotations

import errno
import os
from dataclasses import replace

from .. import limits
from .. import model as m
from ..model import Artifact, Diagnostic, Evidence, Incident, ProcessGroup, StuckSignal
from . import stacks, workers
from .attribution import PidMap, World, attribute, outside_world, rank_from_path
from .facts import Facts
from .records import groups_from_comms, infer_members, state_from_records
from .textio import (HEAD_BYTES, LAUNCHER_PREFIX, InputError, NothingReadable, file_size, has_nul, launcher_prefixes,
                     lines_of_copy, looks_binary, not_regular, read_ends, read_head, stamped, stamped_somewhere, take_notes,
                     unprefixed, unstamp, unstamped_copy)

__all__ = ["InputError", "NothingReadable", "discover", "load_incident", "merge", "rank_from_path"]

_SKIP_DIRS = {".git", "__pycache__", ".hg", ".svn"}


def discover(paths, plugins, full: bool = False, jobs: int = 1, follow_symlinks: bool = False,
             exclude: frozenset = frozenset(), prefix: str = "") -> tuple[list[Artifact], list[Diagnostic]]:
    """Find the artifacts under `paths` and ask the parsers which kind each is.

    Only regular files are read: a FIFO (PyTorch keeps its Flight Recorder
    pipes in /tmp), a socket or a device is listed as skipped, never opened
    in a way that blocks. Symlinks are followed as `grep -r` and ripgrep do:
    one whose target lies inside the given paths is read, one that leaves
    them is listed and skipped unless `follow_symlinks`.

    A path that does not exist, or a file named explicitly that no parser
    claims, is unusable input (InputError). Files found while walking a
    folder that nobody claims become info diagnostics: listed, not lost.
    Files whose path relative to their folder is in `exclude` are not
    artifacts at all (a replayed incident's expected.yaml and SOURCE.md).
    `prefix` goes before the display path of every file found in a folder
    (a node's folder name, for `forensics parse`).
    """
    artifacts: list[Artifact] = []
    diagnostics: list[Diagnostic] = []
    roots = [os.path.realpath(p) for p in paths]
    for root in paths:
        if not os.path.lexists(root):
            raise InputError(root, "no such file or directory")
        if os.path.isdir(root):
            found = []
            for path, display, skipped in _walk(root, roots, follow_symlinks, prefix):
                if display in exclude:
                    continue
                if skipped:
                    diagnostics.append(Diagnostic(display, 0, skipped, "info"))
                else:
                    found.append((path, display))
            for (path, display), (kinds, note, stamps) in zip(found, _sniff_all([p for p, _ in found], plugins,
                                                                                  jobs)):
                if not kinds or stamps:
                    diagnostics.append(Diagnostic(display, 0, note, "info"))
                artifacts.extend(_artifacts(kinds, path, display, full, stamps))
        else:
            display = root
            skipped = _unreadable(root)
            if skipped:
                diagnostics.append(Diagnostic(display, 0, skipped, "info"))
                continue
            kinds, note, stamps = _sniff(root, display, plugins)
            if not kinds:
                raise InputError(display, note)
            if stamps:
                diagnostics.append(Diagnostic(display, 0, note, "info"))
            artifacts.extend(_artifacts(kinds, root, display, full, stamps))
    return artifacts, diagnostics


def _artifacts(kinds: list[str], path: str, display: str, full: bool, stamps: bool):
    """One Artifact per kind; a `kind@[rankN]:` kind (`_split_by_process`) is the lines
    under that prefix, shown as `display[rankN]` (which names its rank)."""
    for kind in kinds:
        kind, _, prefix = kind.partition(SPLIT)
        shown = f"{display}{prefix[:-1]}" if prefix else display
        yield Artifact(kind, path, shown, rank_from_path(shown), full, stamps, prefix)


def _walk(root: str, roots: list[str], follow: bool, prefix: str = ""):
    """(path, display, why skipped or "") for every file under `root`, in
    sorted order; symlinked folders inside the given paths are read where
    they really are, ones outside only with `follow` (each real folder once:
    a symlink loop ends)."""
    seen_dirs = {os.path.realpath(root)}
    stack = [(root, prefix)]
    while stack:
        folder, prefix = stack.pop()
        try:
            entries, over = _first_entries(folder, limits.current().files_per_folder)
        except OSError as exc:
            yield folder, prefix or folder, f"folder not readable: {exc.strerror or exc}: skipped"
            continue
        if over:
            cap = limits.current().files_per_folder
            yield folder, prefix or folder, (f"{over:,} entries beyond the first {cap:,} (by name) of this folder "
                                             f"were not read: the files-per-folder limit "
                                             f"(--limit files-per-folder=N)")
        subfolders = []
        for entry in entries:
            display = prefix + entry.name
            path = entry.path
            if entry.is_symlink():
                why = _symlink_skip(path, roots, follow)
                if why:
                    yield path, display, why
                    continue
                if os.path.isdir(path):
                    real = os.path.realpath(path)
                    if real in seen_dirs or not follow:  # inside: read where it really is
                        if not follow:
                            yield path, display, "symlink to a folder inside the given paths: its files are read there"
                        continue
                    seen_dirs.add(real)
                    subfolders.append((path, display + os.sep))
                    continue
            elif entry.is_dir(follow_symlinks=False):
                if entry.name in _SKIP_DIRS:
                    continue
                seen_dirs.add(os.path.realpath(path))
                subfolders.append((path, display + os.sep))
                continue
            why = _unreadable(path)
            yield path, display, why
        stack.extend(reversed(subfolders))


def _first_entries(folder: str, cap: int) -> tuple[list, int]:
    """The first `cap` entries of `folder` by name, and how many more there
    are: a folder of millions of files is never held in memory whole."""
    import heapq

    count = 0

    def counted(it):
        nonlocal count
        for entry in it:
            count += 1
            yield entry

    with os.scandir(folder) as it:
        first = heapq.nsmallest(cap, counted(it), key=lambda e: e.name)
    return first, count - len(first)


def _symlink_skip(path: str, roots: list[str], follow: bool) -> str:
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop: skipped"
        return f"broken symlink ({exc.strerror or exc}): skipped"
    if follow:
        return ""
    real = os.path.realpath(path)
    if any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
        return ""
    return "symlink leading outside the given paths: skipped (use -L/--follow-symlinks to read it)"


def _unreadable(path: str) -> str:
    """Why a path is not read ("" when it is a regular file)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop: skipped"
        return f"cannot read: {exc.strerror or exc}: skipped"
    kind = not_regular(mode)
    return f"{kind}, not a regular file: skipped" if kind else ""


def _sniff_all(paths: list[str], plugins, jobs: int) -> list[tuple[list[str], str, bool]]:
    """Sniff many files in worker processes: every reader looks at every
    head, so for 20,000 dumps this is seconds of CPU worth sharing."""
    def sniff(some: list[str]) -> list[tuple[list[str], str, bool]]:
        return [_sniff(path, path, plugins) for path in some]

    if jobs <= 1 or len(paths) < SNIFF_PARALLEL_MIN:
        return sniff(paths)
    chunks = [paths[i:i + 4 * CHUNK] for i in range(0, len(paths), 4 * CHUNK)]
    out: list = [None] * len(chunks)
    if workers.available():
        def store(index, answers):
            out[index] = answers

        def died(index, how):  # sniffing reads 64 KiB: a worker dying is not the file's doing
            return sniff(chunks[index])

        workers.run(chunks, [len(c) for c in chunks], sniff, jobs, store, died)
    else:
        spec = plugins.clone_spec()
        if spec is None:
            return sniff(paths)
        with _pool(jobs, spec) as pool:
            out = list(pool.map(_sniff_chunk, chunks))
    return [answer for answers in out for answer in answers]


def _sniff_chunk(paths):
    return [_sniff(path, path, _WORKER_PLUGINS) for path in paths]


def _pool(jobs: int, spec):
    """A spawned process pool, where fork is not available."""
    import concurrent.futures
    import multiprocessing

    return concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_worker_init, initargs=(spec,))


STAMPED = ("every line starts with a log collector's timestamp (kubectl or docker logs --timestamps, "
           "GitHub Actions): read without them")


def _sniff(path: str, display: str, plugins) -> tuple[list[str], str, bool]:
    """(kinds, why none, stamped): the kinds of every parser that claims the
    file (a console log can hold c10d and NCCL lines both), or none and why;
    and whether its lines start with a log collector's timestamps
    (`textio.stamped`), which neither the sniffers nor the parsers then see
    (`_parse_one` parses a copy without them)."""
    try:
        head = read_head(path)
    except InputError as exc:
        return [], exc.message, False
    if not head:
        return [], "empty file", False
    stamps = stamped(head)
    if stamps:
        head = unstamp(head)
    kinds = plugins.each("forensics_sniff", path=path, head=head)
    if len(head) >= HEAD_BYTES and _plain_text(head):
        more, stamped_later = _sniff_beyond_head(path, plugins)
        kinds += [kind for kind in more if kind not in kinds]
        stamps = stamps or stamped_later
    if b"]:" in head or len(head) >= HEAD_BYTES:
        split = _split_by_process(path, head, plugins, stamps)
        if split:  # a format read per process is not read whole too: its lines interleave with others'
            whole = {kind.partition(SPLIT)[0] for kind in split}
            kinds = [kind for kind in kinds if kind not in whole] + split
    if not kinds and not has_nul(head) and not looks_binary(head):  # a rank's console nothing else reads
        from . import console
        kinds = [kind for kind in (console.sniff(path, head),) if kind]
    if kinds:
        return kinds, STAMPED if stamps else "", stamps
    if looks_binary(head):
        return [], "binary file, not a recognized artifact: skipped", False
    return [], "not a recognized artifact: skipped", False


def _plain_text(head: bytes) -> bool:
    """Text that is not a structured document (JSON: snapshots, facts, maps), which is known by its head."""
    if has_nul(head) or looks_binary(head):
        return False
    return not head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith((b"{", b"["))


def _sniff_beyond_head(path: str, plugins) -> tuple[list[str], bool]:
    """The kinds the rest of a text file shows: its tail (where a console log
    ends in watchdog timeouts and tracebacks after hours of training output)
    and the windows of its middle around lines some reader may claim; and
    whether the tail's lines carry a collector's timestamps (a job's output
    stamped from some point on: the stamps are taken off line by line)."""
    try:
        _, middle, tail = read_ends(path)
    except InputError:
        return [], False
    kinds: list[str] = []
    stamps = False
    for sample in (tail, middle):
        if not sample:
            continue
        if stamped_somewhere(sample):
            stamps = True
        if stamps:
            sample = unstamp(sample)
        kinds += [k for k in plugins.each("forensics_sniff", path=path, head=sample) if k not in kinds]
    return kinds, stamps


# Formats whose lines make sense only in sequence, one process's: a console
# interleaving processes under launcher prefixes is read per process for them.
# (The line readers, c10d, NCCL and the catalogue, take the prefix line by line;
# the c10d reader also reads the Python tracebacks under each prefix.)
BLOCK_KINDS = frozenset({"py-spy", "gdb", "pystack", "faulthandler"})
SPLIT = "@"  # "py-spy@[rank3]:": the kind, read from the lines under that prefix only


def _split_by_process(path: str, head: bytes, plugins, stamps: bool) -> list[str]:
    """`kind@prefix` for every block format the file's prefixed lines hold,
    once per launcher prefix (`[rank3]:`): two ranks' py-spy dumps or
    tracebacks interleaved line by line are two dumps."""
    sample = unstamp(head) if stamps else head
    if not LAUNCHER_PREFIX.search(sample):
        try:
            _, middle, tail = read_ends(path)
        except InputError:
            return []
        sample = unstamp(tail + middle) if stamps else tail + middle
        if not LAUNCHER_PREFIX.search(sample):
            return []
    found = [k for k in plugins.each("forensics_sniff", path=path, head=unprefixed(sample)) if k in BLOCK_KINDS]
    if not found:
        return []
    prefixes = launcher_prefixes(path)
    return [f"{kind}{SPLIT}{prefix.decode('ascii')}" for kind in found for prefix in prefixes]


PARALLEL_BYTES = 4 << 20  # below this much input (and PARALLEL_MIN files), one process is quicker
PARALLEL_MIN = 64  # this many files are worth workers even when small
SNIFF_PARALLEL_MIN = 512  # sniffing reads 64 KiB a file: workers pay off later than for parsing
CHUNK = 32


def _parse_one(artifact, plugins):
    if artifact.stamped or artifact.lines_of:
        return _parse_unstamped(artifact, plugins)
    take_notes()  # what earlier reads left (sniffing) is not this parse's
    try:
        parsed = plugins.first("forensics_parse", artifact=artifact)
    except InputError as exc:
        return ("error", exc.path, exc.message, exc.line)
    if parsed is None:
        return ("error", artifact.display, f"no parser for artifact kind {artifact.kind!r}", 0)
    for path, message in take_notes():  # the file grew, shrank or decompressed past the limit while read
        parsed.diagnostics.append(Diagnostic(artifact.display if path == artifact.path else path, 0, message))
    return parsed


def _parse_unstamped(artifact, plugins):
    """A file whose lines start with a collector's timestamp, or the lines of
    one process in a console that interleaves several, parsed as a copy
    without the stamps and the other processes' lines (`textio.filtered_copy`):
    the same lines, at the same numbers, in the format the parsers know."""
    import shutil
    import tempfile

    try:
        folder = tempfile.mkdtemp(prefix="forensics-unstamped-")
    except OSError as exc:
        return ("error", artifact.display, f"no temporary folder for {_copy_of(artifact)} "
                                           f"({exc.strerror or exc}): file not read", 0)
    try:
        take_notes()
        where = None
        try:
            if artifact.lines_of:
                copy, where = lines_of_copy(artifact.path, folder, artifact.lines_of.encode("ascii"),
                                            artifact.stamped)
            else:
                copy = unstamped_copy(artifact.path, folder)
        except InputError as exc:
            return ("error", artifact.display, exc.message, exc.line)
        notes = take_notes()  # the file grew or decompressed past the limit while copied
        parsed = _parse_one(replace(artifact, path=copy, stamped=False, lines_of=""), plugins)
        if isinstance(parsed, tuple):
            kind, at, message, line = parsed
            return (kind, artifact.display if at == copy else at, message, _original_line(line, where))
        if where is not None:
            parsed = _renumbered(parsed, where)
        for _, message in notes:
            parsed.diagnostics.append(Diagnostic(artifact.display, 0, message))
        return parsed
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _copy_of(artifact) -> str:
    return f"a copy of its {artifact.lines_of} lines" if artifact.lines_of else "a copy without its timestamps"


def _original_line(line: int, where: list[int] | None) -> int:
    """A line of a process's copy (`lines_of_copy`) as its number in the file
    (negative: counted from the copy's end)."""
    if where is None or not line:
        return line
    index = line - 1 if line > 0 else len(where) + line
    return where[index] if 0 <= index < len(where) else line


def _renumbered(value, where: list[int]):
    """`value` (Facts and the model objects in it) with every Evidence and
    Diagnostic line of the copy put back at its number in the file."""
    import dataclasses

    if isinstance(value, (Evidence, Diagnostic)):
        line = _original_line(value.line, where)
        return value if line == value.line else replace(value, line=line)
    if isinstance(value, list):
        return [_renumbered(v, where) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_renumbered(v, where) for v in value)
    if isinstance(value, dict):
        return {k: _renumbered(v, where) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _renumbered(old, where)
            if new is not old:
                changes[f.name] = new
        return replace(value, **changes) if changes else value
    return value


def _not_read(artifact, how: str, who: str = "the worker process parsing this file"):
    """The error result of a file whose parse did not end (see workers)."""
    return ("error", artifact.display, f"{who} {how}: file not read", 0)


_WORKER_PLUGINS = None


def _worker_init(spec):
    global _WORKER_PLUGINS
    from ..plugins import Plugins
    autoload, builtins = spec
    _WORKER_PLUGINS = Plugins(autoload=autoload, builtins=builtins)


def _parse_chunk(chunk):
    import gc
    gc.disable()  # see forensics.gc_paused; a worker's heap is its parse caches
    try:
        return [_parse_one(artifact, _WORKER_PLUGINS) for artifact in chunk], _WORKER_PLUGINS.diagnostics[:]
    finally:
        gc.enable()


def _parse_all(artifacts, plugins, jobs: int, progress=None, meanwhile=None):
    """Parse every artifact; `progress(files_done, files_total, bytes_done,
    bytes_total)`, when given, is called before the first file and after
    each file is parsed. `meanwhile()`, when given, runs while workers
    parse (before a spawned pool; after the files are read when one
    process reads them all, so a progress bar shows reading alone)."""
    sizes = [file_size(a.path) for a in artifacts]
    counter = _Progress(progress, len(artifacts), sum(sizes))
    parallel = jobs > 1 and len(artifacts) > 1 and (len(artifacts) >= PARALLEL_MIN or sum(sizes) >= PARALLEL_BYTES)

    def alongside():
        _ready_to_merge()
        if meanwhile is not None:
            meanwhile()

    if parallel and workers.available():
        return _parse_forked(artifacts, sizes, plugins, jobs, counter, alongside)
    spec = plugins.clone_spec()
    if parallel and spec is not None:
        alongside()
        return _parse_pooled(artifacts, sizes, plugins, jobs, counter, spec)
    results: list = [None] * len(artifacts)

    def store(index, result):
        results[index] = result
        counter.add(1, sizes[index])

    # In this process, within the run's limits (a parse past its time is stopped).
    workers.run_inline(artifacts, lambda artifact: _parse_one(artifact, plugins), store,
                       lambda index, how: _not_read(artifacts[index], how, "parsing this file"))
    if meanwhile is not None:
        meanwhile()
    return results


def _ready_to_merge() -> None:
    """What `merge` loads on first use, loaded while worker processes
    parse instead of after them: the post-mortem's module (with
    `statistics`) and the message catalogue, most of a 64-dump merge."""
    from .. import postmortem  # noqa: F401
    from ..messages import catalogue

    catalogue()


def _parse_forked(artifacts, sizes, plugins, jobs, counter, meanwhile):
    results: list = [None] * len(artifacts)

    def work(artifact):
        known = len(plugins.diagnostics)
        return _parse_one(artifact, plugins), plugins.diagnostics[known:]

    def store(index, answer):
        results[index], diagnostics = answer
        plugins.diagnostics.extend(d for d in diagnostics if d not in plugins.diagnostics)
        counter.add(1, sizes[index])

    def died(index, how):
        return _not_read(artifacts[index], how), []

    workers.run(artifacts, sizes, work, jobs, store, died, meanwhile)
    return results


def _parse_pooled(artifacts, sizes, plugins, jobs, counter, spec):
    """Where fork is missing: a spawned pool. Big files go one per task so
    two workers share them evenly; the many small ones travel in chunks to
    keep the pickling overhead low."""
    chunks, current = [], []
    for artifact, size in zip(artifacts, sizes):
        if size >= BIG_FILE:
            chunks.append([artifact])
            continue
        current.append(artifact)
        if len(current) == CHUNK:
            chunks.append(current)
            current = []
    if current:
        chunks.append(current)
    order = {id(a): i for i, a in enumerate(artifacts)}
    results: list = [None] * len(artifacts)
    with _pool(jobs, spec) as pool:
        for chunk, (parsed, worker_diagnostics) in zip(chunks, pool.map(_parse_chunk, chunks)):
            for artifact, result in zip(chunk, parsed):
                results[order[id(artifact)]] = result
            counter.add(len(chunk), sum(sizes[order[id(a)]] for a in chunk))
            plugins.diagnostics.extend(d for d in worker_diagnostics if d not in plugins.diagnostics)
    return results


BIG_FILE = 64 << 20  # a file this big is worth a task of its own


class _Progress:
    """Counts files and bytes parsed for an optional progress callback."""

    def __init__(self, callback, files: int, size: int):
        self.callback, self.files, self.size = callback, files, size
        self.files_done = self.bytes_done = 0
        if callback is not None:
            callback(0, files, 0, size)

    def add(self, files: int, size: int) -> None:
        self.files_done += files
        self.bytes_done += size
        if self.callback is not None:
            self.callback(self.files_done, self.files, self.bytes_done, self.size)


def load_incident(paths, plugins, hung: bool = False, jobs: int | None = None,
                  full: bool = False, progress=None, meanwhile=None,
                  follow_symlinks: bool = False, exclude: frozenset = frozenset(),
                  scheduler: str | None = None) -> Incident:
    """Discover, parse (in parallel for many files) and merge. `progress`,
    if given, is called as `progress(files_done, files_total, bytes_done,
    bytes_total)` while the artifacts are parsed (a CLI progress bar).
    `meanwhile()`, if given, runs while worker processes parse: start-up
    work of the caller's that can share the CPUs with parsing. With
    `scheduler` (a Dask scheduler's address), the cluster's workers sniff
    and parse (forensics.ingest.cluster); merging stays here."""
    artifacts, diagnostics, parsed = read_artifacts(paths, plugins, jobs, full, progress, meanwhile,
                                                    follow_symlinks, exclude, scheduler=scheduler)
    facts: list[Facts] = []
    errors: list[InputError] = []
    for result in parsed:
        if isinstance(result, tuple):
            _, path, message, line = result
            errors.append(InputError(path, message, line))
            diagnostic = Diagnostic(path, line, message, "error")
            if diagnostic not in diagnostics:  # one file two readers claimed, unreadable for both
                diagnostics.append(diagnostic)
            continue
        facts.append(result)
    if not facts:
        if errors:
            raise errors[0]
        where = ", ".join(map(str, paths))
        raise NothingReadable(where, f"no recognizable artifacts ({len(diagnostics)} file(s) skipped)")
    incident = merge(facts, tuple(artifacts), diagnostics + plugins.diagnostics)
    if _describes_no_process_of_a_job(incident):
        where = ", ".join(map(str, paths))
        skipped = sum(1 for d in incident.diagnostics if d.line == 0 and d.severity == "info")
        raise NothingReadable(where, f"nothing here describes a process of a distributed job ({len(facts)} file(s) "
                                f"read: no rank, communicator, catalogued message or stack dump in them; "
                                f"{skipped} file(s) skipped)")
    if hung:
        incident = replace(incident, stuck=incident.stuck + (
            StuckSignal("cli_hung", "the user says the job is hung (--hung)",
                        detail_zh="用户指明作业已挂起（--hung）"),))
    return incident


def _describes_no_process_of_a_job(incident: Incident) -> bool:
    """Nothing read describes a process: no rank, group, catalogued message,
    stuck signal, event, communicator or stack dump, and no line a reader
    recognized (files a reader claimed whose lines then held nothing). Such
    input is as unusable as a folder of nothing: exit 2, one line, not an
    empty report. Consoles' last lines (forensics.ingest.console) tell
    about ranks something else shows; alone, training output is no job's state."""
    return not (any(not _known_by_last_words(state) for state in incident.ranks.values())
                or incident.groups or incident.messages or incident.stuck or incident.events
                or incident.comm_views or incident.unattributed
                or any(stats.lines > stats.unrecognized for stats in incident.read if stats.kind != "console"))


def _known_by_last_words(state: m.RankState) -> bool:
    """A rank known only from what its console printed last (`_keep_last_words`)."""
    return state.evidence is not None and state.evidence in state.last_words and state.why.startswith(LAST_PRINTED)


def read_artifacts(paths, plugins, jobs: int | None = None, full: bool = False, progress=None, meanwhile=None,
                   follow_symlinks: bool = False, exclude: frozenset = frozenset(), prefix: str = "",
                   scheduler: str | None = None) -> tuple[list[Artifact], list[Diagnostic], list]:
    """(artifacts, diagnostics, one result per artifact: its Facts or an
    error tuple), with the facts files among them opened up: their
    artifacts and results take their place, their skipped files join the
    diagnostics."""
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if scheduler:
        from .cluster import read_on_cluster
        artifacts, diagnostics, parsed = read_on_cluster(scheduler, paths, plugins, full, follow_symlinks,
                                                         exclude, prefix, progress, meanwhile)
    else:
        artifacts, diagnostics = discover(paths, plugins, full, jobs, follow_symlinks, exclude, prefix)
        parsed = _parse_all(artifacts, plugins, jobs, progress, meanwhile)
    from .factsfile import Bundle
    if not any(isinstance(result, Bundle) for result in parsed):
        return artifacts, diagnostics, parsed
    opened_artifacts: list[Artifact] = []
    opened: list = []
    for artifact, result in zip(artifacts, parsed):
        if isinstance(result, Bundle):
            opened_artifacts += result.artifacts
            opened += result.results
            # its skipped files where the facts file's own files would have been listed
            if result.diagnostics:
                first = result.diagnostics[0].path
                at = next((i for i, d in enumerate(diagnostics) if d.path > first), len(diagnostics))
                diagnostics[at:at] = result.diagnostics
            plugins.diagnostics.extend(d for d in result.plugin_diagnostics if d not in plugins.diagnostics)
        else:
            opened_artifacts.append(artifact)
            opened.append(result)
    return opened_artifacts, diagnostics, opened


def merge(facts: list[Facts], artifacts: tuple = (), diagnostics=()) -> Incident:
    """Combine per-artifact facts into one state per rank.

    Observations are ordered by the time the artifact says it was taken (then
    by discovery order); the latest says where a rank is, earlier ones fill
    in what it does not say. Two snapshots in which no rank moved are
    evidence that the job is stuck.
    """
    diagnostics = list(diagnostics)
    stuck: list[StuckSignal] = []
    order = sorted(range(len(facts)),
                   key=lambda i: (facts[i].observed_at is None, facts[i].observed_at or 0.0, i))
    ranks: dict[int, m.RankState] = {}
    groups: dict[str, ProcessGroup] = {}
    previous_snapshot: Facts | None = None
    dumps: list[m.ProcessDump] = []
    records: list[m.ProcessRecord] = []
    comm_members: list = []
    rings: list = []
    stated = PidMap()
    listed: dict[int, tuple[str, int, Evidence]] = {}  # rank → where an artifact says it exists
    messages: dict[tuple, m.MessageHit] = {}  # one hit per (entry, file, line), whichever reader saw it
    last_words: dict[int, m.RankState] = {}  # rank → its consoles' last lines (forensics.ingest.console)
    world = _world_size(facts, diagnostics)
    for index in order:
        item = facts[index]
        diagnostics.extend(item.diagnostics)
        stuck.extend(item.stuck)
        dumps.extend(item.processes)
        records.extend(item.records)
        comm_members.extend(item.comm_members)
        rings.extend(item.rings)
        for hit in item.messages:
            key = (hit.id, hit.evidence.path, hit.evidence.line)
            known = messages.get(key)
            if known is None or _richer(hit, known):
                messages[key] = hit
        for host, pid, rank, evidence in item.pid_ranks:
            if outside_world(world, rank, evidence.path, evidence.line,
                             f"the entry for {host}:{pid}" if host else f"the entry for pid {pid}", diagnostics):
                continue
            stated.add(host, pid, rank, evidence.cite())
            listed.setdefault(rank, (host, pid, evidence))
        for state in item.ranks:
            where = state.evidence
            if outside_world(world, state.rank, where.path if where else item.path, where.line if where else 0,
                             f"this {item.kind}", diagnostics):
                continue
            if state.last_words or state.last_progress is not None:
                _add_last_words(last_words, state)
                if _only_last_words(state):
                    continue
            ranks[state.rank] = _combine(ranks.get(state.rank), state)
        for group in item.groups:
            known = groups.get(group.id)
            if known is None or not known.ranks:
                groups[group.id] = group
            elif (group.ranks and group.ranks is not known.ranks  # shared by every dump: no walk of 16,384 ranks
                  and group.ranks != known.ranks and set(group.ranks) != set(known.ranks)):
                diagnostics.append(Diagnostic(item.path, 0,
                                              f"group {group.id!r} has ranks {list(group.ranks)} here but "
                                              f"{list(known.ranks)} elsewhere: the first is used"))
        if item.kind == "snapshot":
            if previous_snapshot is not None:
                signal = _no_progress(previous_snapshot, item)
                if signal is not None:
                    stuck.append(signal)
            previous_snapshot = item
    placed, unattributed, learned = attribute(dumps, stated, diagnostics, world=world)
    for rank, rank_dumps in placed.items():
        ranks[rank] = _combine(ranks.get(rank), _state_from_dumps(rank, rank_dumps))
    if records or comm_members:
        _merge_records(records, comm_members, stated, learned, ranks, groups, diagnostics, world)
    if rings:
        _attach_rings(rings, groups)
    _keep_last_words(ranks, last_words, listed)
    _add_silent_ranks(ranks, groups, listed, world)
    if world is not None:
        messages = _messages_inside(messages, world, diagnostics)
    _check_references(ranks, groups, diagnostics)
    read = tuple(m.ReadStats(f.path, f.kind, f.lines_read, f.unrecognized) for f in facts)
    stuck.extend(_stated_stuck(messages.values()))
    incident = Incident(ranks=dict(sorted(ranks.items())), groups=groups, artifacts=tuple(artifacts),
                        diagnostics=tuple(diagnostics), stuck=_distinct_signals(stuck),
                        unattributed=tuple(unattributed), read=read,
                        messages=_attribute_messages(messages.values(), stated, ranks),
                        comm_views=tuple(view for f in facts for view in f.comm_views))
    from ..postmortem import settle

    return settle(incident)


MAX_STATED_STUCK = 200
MAX_IMPLIED = 8  # ranks below the highest known one filled in as silent, at least (else as many as are known)
IMPLIED = "it exists"  # what the `why` of a rank known only from rank numbering says


def _stated_stuck(hits) -> list[StuckSignal]:
    """Catalogued lines that prove their printer was stuck in a
    communication call (a watchdog timeout, a monitored barrier failing):
    evidence that the job hangs, whichever reader found the line."""
    from ..messages import catalogue

    cat = catalogue()
    out = []
    for hit in hits:
        entry = cat.get(hit.id)
        if entry is not None and entry.stuck:
            out.append(StuckSignal("stated_stuck", f"{entry.en} ({entry.id})", hit.evidence,
                                   f"{entry.zh}（{entry.id}）"))
            if len(out) >= MAX_STATED_STUCK:
                break
    return out


def _richer(hit: m.MessageHit, other: m.MessageHit) -> bool:
    """Of two readers' hits on one line, the one that says more: a
    structured reader may add facts from the lines around it (the Flight
    Recorder analyzer's report block) and the process that printed it."""
    return (len(hit.facts), hit.rank is not None, bool(hit.host)) > (len(other.facts), other.rank is not None,
                                                                      bool(other.host))


def _distinct_signals(stuck: list[StuckSignal]) -> tuple[StuckSignal, ...]:
    """One stuck signal per line of evidence: the first reader's (a c10d
    log's watchdog line is read by the torch-log reader and by the
    catalogue's both)."""
    seen: set = set()
    out = []
    for signal in stuck:
        key = (signal.evidence.path, signal.evidence.line) if signal.evidence and signal.evidence.line else id(signal)
        if key not in seen:
            seen.add(key)
            out.append(signal)
    return tuple(out)


def _attribute_messages(hits, stated: PidMap, ranks: dict) -> tuple[m.MessageHit, ...]:
    """Each hit with the global rank of the process that printed it, where
    its host:pid is in a pid map or is a rank's own; the rest keep None."""
    by_process = {(s.host, s.pid): r for r, s in ranks.items() if s.pid is not None}
    by_pid: dict[int, set[int]] = {}
    for r, s in ranks.items():
        if s.pid is not None:
            by_pid.setdefault(s.pid, set()).add(r)
    out = []
    for hit in hits:
        if hit.rank is None and hit.pid is not None:
            found = stated.lookup(hit.host, hit.pid)
            rank = found[0] if found else by_process.get((hit.host, hit.pid))
            if rank is None and len(by_pid.get(hit.pid, ())) == 1:
                rank = next(iter(by_pid[hit.pid]))
            if rank is not None:
                hit = replace(hit, rank=rank)
        out.append(hit)
    return tuple(sorted(out, key=lambda h: (h.evidence.path, h.evidence.line < 0, h.evidence.line)))


def _merge_records(records, comm_members, stated, learned, ranks, groups, diagnostics, world=None) -> None:
    placed, _, learned = attribute(records, stated, diagnostics, learned, world)

    def pid_rank(host, pid):
        found = stated.lookup(host, pid) or learned.lookup(host, pid)
        return found[0] if found else None

    comm_groups, notes = groups_from_comms(comm_members, pid_rank)
    diagnostics.extend(notes)
    for gid, group in comm_groups.items():
        groups.setdefault(gid, group)
    diagnostics.extend(infer_members(placed, groups, world.size if world is not None else None,
                                     set(ranks) | set(placed)))
    for rank in sorted(placed):
        ranks[rank] = state_from_records(rank, placed[rank], ranks.get(rank), groups)


def _world_size(facts: list[Facts], diagnostics: list) -> World | None:
    """The job's world size where an artifact states it: the members of
    the default group (a Flight Recorder dump's pg_config, a snapshot, the
    launcher's `global_world_sizes` or a `WORLD_SIZE` the c10d log reader
    found) or the largest NCCL communicator (NCCL's world, as the NCCL
    reader takes it for its pid map). Sources that disagree: the largest
    is used (a smaller one may be a subgroup's) and a diagnostic says so."""
    stated: list[tuple[int, str]] = []
    highest: dict[int, int] = {}  # by id: 16,384 dumps share one member tuple of 16,384 ranks
    for item in facts:
        for group in item.groups:
            if group.id == m.DEFAULT_GROUP and group.ranks:
                top = highest.get(id(group.ranks))
                if top is None:
                    top = highest[id(group.ranks)] = max(group.ranks)
                stated.append((top + 1, f"the default group's members in {item.path}"))
        sizes = [(size, evidence) for _, _, size, _, _, evidence in item.comm_members]
        if sizes:
            size, evidence = max(sizes, key=lambda pair: pair[0])
            stated.append((size, f"NCCL communicator of {size} ranks, {evidence.cite()}"))
    if not stated:
        return None
    size, source = max(stated, key=lambda pair: pair[0])
    smaller = sorted({s for s, _ in stated if s < size})
    if smaller:
        diagnostics.append(Diagnostic("", 0, f"world size {size} ({source}); smaller sizes stated elsewhere "
                                             f"({', '.join(map(str, smaller))}) are taken to be subgroups'", "info"))
    return World(size, source)


def _messages_inside(messages: dict, world: World, diagnostics: list) -> dict:
    """Catalogued lines whose prefix names a rank beyond the world keep no
    rank (one diagnostic per file)."""
    told: set[str] = set()
    out = {}
    for key, hit in messages.items():
        if hit.rank is not None and world.excludes(hit.rank):
            path = hit.evidence.path
            if path not in told:
                told.add(path)
                outside_world(world, hit.rank, path, hit.evidence.line, "this line's prefix", diagnostics)
            hit = replace(hit, rank=None)
        out[key] = hit
    return out


def _add_silent_ranks(ranks: dict, groups: dict, listed: dict, world: World | None = None) -> None:
    """Ranks an artifact says exist (a pid map, a launcher's summary, NCCL
    init lines, a group's member list) but nothing describes: the rank
    everyone may be waiting for sent nothing at all. Each gets a state with
    no call and no activity, citing what lists it, so the waits of its
    group reach it and the report names it.

    Global ranks run from 0: a rank K that an artifact describes proves
    ranks 0 to K exist, the lower ones too (one rank's timeout pasted from
    a merged log shows it waited for ranks that printed nothing). Only a few
    such gaps are filled: many would mean the numbers are not ranks. No
    rank at or beyond a known world size is added."""
    members = {r for group in groups.values() for r in group.ranks}
    if world is not None:
        members = {r for r in members if not world.excludes(r)}
    known = set(listed) | members | set(ranks)
    top = max(known) if known else -1
    # How many ranks below the highest are missing, counted without listing
    # them: the highest may be a number no job has (a corrupt file).
    gaps = top + 1 - sum(1 for r in known if 0 <= r <= top) if top >= 0 else 0
    implied = (set(range(top + 1)) - known
               if 0 < gaps <= max(MAX_IMPLIED, len(known)) and m.plausible_rank(top) else set())
    for rank in sorted((set(listed) | members | implied) - set(ranks)):
        if not m.plausible_rank(rank):
            continue
        host, pid, evidence = listed.get(rank, ("", None, None))
        if evidence:
            where = f"; {evidence.cite()} lists it"
        elif rank in members:
            where = "; a process group lists it as a member"
        else:
            where = f"; {IMPLIED} because rank {max(known)} does (global ranks run from 0)"
        ranks[rank] = m.RankState(rank=rank, host=host, pid=pid, evidence=evidence,
                                  why="no artifact describes this rank (no stack dump, log or dump of its own)"
                                      + where + (f" as pid {pid}" if pid is not None else ""))


LAST_PRINTED = "last printed"  # the `why` of a rank known only from its console's last lines
MAX_LAST_WORDS = 10  # a rank's last lines kept over all its consoles


def _add_last_words(found: dict, state: m.RankState) -> None:
    """A console's last lines and progress line for its rank, joined with
    those of the rank's other consoles: the lines kept in file order, the
    progress line whose time is latest (else the one read last)."""
    known = found.get(state.rank)
    if known is None:
        found[state.rank] = m.RankState(rank=state.rank, last_words=state.last_words,
                                        last_progress=state.last_progress)
        return
    progress = known.last_progress
    if state.last_progress is not None and (progress is None or _later(state.last_progress, progress)):
        progress = state.last_progress
    found[state.rank] = replace(known, last_words=(known.last_words + state.last_words)[-MAX_LAST_WORDS:],
                                last_progress=progress)


def _later(one: Evidence, other: Evidence) -> bool:
    from ..clock import stamp

    a, b = stamp(one.text), stamp(other.text)
    return a is None or b is None or a[1] != b[1] or a[0] >= b[0]


def _only_last_words(state: m.RankState) -> bool:
    return replace(state, last_words=(), last_progress=None) == m.RankState(rank=state.rank)


def _keep_last_words(ranks: dict, found: dict, listed: dict) -> None:
    """Each rank's consoles' last lines onto its state. A rank nothing else
    describes is known by them: it printed this last, and is no longer a
    rank no artifact describes."""
    for rank, said in found.items():
        state = ranks.get(rank)
        if state is not None:
            ranks[rank] = replace(state, last_words=said.last_words, last_progress=said.last_progress)
            continue
        last = said.last_words[-1] if said.last_words else said.last_progress
        host, pid, _ = listed.get(rank, ("", None, None))
        text = last.text if len(last.text) <= 100 else last.text[:99] + "…"
        ranks[rank] = m.RankState(rank=rank, host=host, pid=pid, evidence=last, why=f"{LAST_PRINTED} {text!r}",
                                  last_words=said.last_words, last_progress=said.last_progress)


def _attach_rings(rings, groups) -> None:
    """NCCL rings (communicator ranks) onto their groups, in global ranks,
    one per channel; only for groups whose every member is known."""
    by_group: dict[str, dict[int, m.Ring]] = {}
    for gid, channel, order, evidence in rings:
        group = groups.get(gid)
        if group is None or sorted(order) != list(range(len(group.ranks))) or len(order) < 2:
            continue
        by_group.setdefault(gid, {}).setdefault(
            channel, m.Ring(channel, tuple(group.ranks[r] for r in order), evidence))
    for gid, channels in by_group.items():
        groups[gid] = replace(groups[gid], rings=tuple(channels[c] for c in sorted(channels)))


def _state_from_dumps(rank: int, dumps: list[m.ProcessDump]) -> m.RankState:
    """One rank's state from all its stack dumps (py-spy, gdb, ...). Dumps
    of a process that ended with them (a traceback, faulthandler on a
    fatal signal, a core) say where it was when it ended: the rank has
    exited, and its ending keeps that position for telling whether its
    death caused the hang or followed it."""
    live = [d for d in dumps if not d.exited] or dumps
    judged = [(stacks.classify(d), d) for d in live]
    best = stacks.moving(judged) or stacks.combine([c for c, _ in judged])
    primary = next(d for c, d in judged if c is best) if any(c is best for c, _ in judged) else live[0]
    python_dump = dumps[0] if len(dumps) == 1 else max(
        dumps, key=lambda d: (d.source.startswith(("py-spy", "pystack")),
                              sum(1 for t in d.threads for f in t.frames if stacks.is_python(f))))
    pid = next((d.pid for d in dumps if d.pid is not None), None)
    host = next((d.host for d in dumps if d.host), "")
    state = m.RankState(
        rank=rank, host=host, pid=pid, alive=True, activity=best.activity,
        current_op=stacks.comm_op(best), threads=primary.threads,
        stack=stacks.python_stack(python_dump), evidence=best.evidence or primary.evidence,
        why=best.why)
    ended = [d for d in dumps if d.exited]
    if not ended:
        return state
    last = ended[-1]
    ending = m.Ending(None, last.signal, last.evidence or state.evidence, state.activity, state.current_op,
                      state.why)
    return replace(state, alive=False, activity=m.EXITED, current_op=None, ending=ending,
                   why=f"ended{' by ' + last.signal if last.signal else ''} in {state.why or state.activity}")


def _combine(old: m.RankState | None, new: m.RankState) -> m.RankState:
    if old is None:
        return new
    updates = {}
    for name in ("host", "pid", "alive", "threads", "stack", "streams", "events", "evidence", "last_words",
                 "last_progress"):
        if not getattr(new, name) and getattr(old, name):
            updates[name] = getattr(old, name)
    if new.activity == m.UNKNOWN:
        updates.update(activity=old.activity, current_op=old.current_op,
                       declared_waits=old.declared_waits)
    if old.progress or new.progress:
        updates["progress"] = {**old.progress, **new.progress}
    updates["log_events"] = old.log_events + new.log_events
    return replace(new, **updates)


def _position(state: m.RankState):
    op = state.current_op
    return (state.activity, state.alive,
            None if op is None else (op.op, op.group, op.seq, op.state, op.peers))


def _no_progress(before: Facts, after: Facts) -> StuckSignal | None:
    old = {s.rank: s for s in before.ranks}
    common = [s for s in after.ranks if s.rank in old]
    if not common or not any(s.is_blocked for s in common):
        return None
    if any(_position(s) != _position(old[s.rank]) for s in common):
        return None
    return StuckSignal(
        "no_progress_between_snapshots",
        f"no rank moved between {before.path} and {after.path} ({len(common)} ranks compared)",
        common[0].evidence,
        f"{before.path} 与 {after.path} 之间没有任何 Rank 推进（比较了 {len(common)} 个 Rank）")


def _check_references(ranks, groups, diagnostics) -> None:
    for rank, state in ranks.items():
        for awaited in state.declared_waits or ():
            if awaited not in ranks:
                where = state.evidence
                diagnostics.append(Diagnostic(
                    where.path if where else "", where.line if where else 0,
                    f"rank {rank} waits for rank {awaited}, which no artifact describes"))
