"""Discover artifacts (`scan` says what each file is), parse each through the parser hooks in
worker processes, `merge` them into one Incident."""

from __future__ import annotations

import errno
import os
from dataclasses import replace

from .. import limits
from .. import model as m
from ..model import Artifact, Diagnostic, Evidence, Incident
from ..words import stuck_signal
from . import wholedump, workers
from .attribution import rank_from_path
from .facts import Facts
from .merge import LAST_PRINTED, merge
from .scan import artifacts_of, sniff
from .textio import (InputError, NothingReadable, file_size, lines_of_copy, not_regular, take_notes,
                     unstamped_copy)

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
                artifacts.extend(artifacts_of(kinds, path, display, full, stamps))
        else:
            display = root
            skipped = _unreadable(root)
            if skipped:
                diagnostics.append(Diagnostic(display, 0, skipped, "info"))
                continue
            kinds, note, stamps = sniff(root, display, plugins)
            if not kinds:
                raise InputError(display, note)
            if stamps:
                diagnostics.append(Diagnostic(display, 0, note, "info"))
            artifacts.extend(artifacts_of(kinds, root, display, full, stamps))
    return artifacts, diagnostics


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
    fast = wholedump.applies(plugins)

    def sniff_some(some: list[str]) -> list[tuple[list[str], str, bool]]:
        return [_sniff_one(path, plugins, fast) for path in some]

    if jobs <= 1 or len(paths) < SNIFF_PARALLEL_MIN:
        return sniff_some(paths)
    chunks = [paths[i:i + 4 * CHUNK] for i in range(0, len(paths), 4 * CHUNK)]
    out: list = [None] * len(chunks)
    if workers.available():
        def store(index, answers):
            out[index] = answers

        def died(index, how):  # sniffing reads 64 KiB: a worker dying is not the file's doing
            return sniff_some(chunks[index])

        workers.run(chunks, [len(c) for c in chunks], sniff_some, jobs, store, died)
    else:
        spec = plugins.clone_spec()
        if spec is None:
            return sniff_some(paths)
        with _pool(jobs, spec) as pool:
            out = list(pool.map(_sniff_chunk, chunks))
    return [answer for answers in out for answer in answers]


def _sniff_one(path: str, plugins, fast: bool) -> tuple[list[str], str, bool]:
    """A file that is one whole stack dump is known by its shape (`wholedump`); any other gets the full look."""
    kind = wholedump.kind_of(path) if fast else None
    return ([kind], "", False) if kind else sniff(path, path, plugins)


def _sniff_chunk(paths):
    fast = wholedump.applies(_WORKER_PLUGINS)
    return [_sniff_one(path, _WORKER_PLUGINS, fast) for path in paths]


def _pool(jobs: int, spec):
    """A spawned process pool, where fork is not available."""
    import concurrent.futures
    import multiprocessing

    return concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_worker_init, initargs=(spec,))


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
    without the stamps (`textio.unstamped_copy`) or the other processes' lines (`textio.lines_of_copy`):
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
        incident = replace(incident, stuck=incident.stuck + (stuck_signal("cli_hung", "cli_hung"),))
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
