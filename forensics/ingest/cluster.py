"""Parsing on a Dask cluster: `forensics analyze --scheduler tcp://HOST:8786`.

This process walks the given folders (a listing, no file is opened here)
and sends the files in batches to the cluster's workers, which read them
where they lie (shared storage), ask the readers which kind each file is
and parse it, exactly as a local worker process does (the same
`scan.sniff` and `_parse_one`). A batch comes back as bytes in the facts
encoding (forensics.ingest.wire: versioned, checked field by field on
decoding, nothing from the input pickled); merging, rules, graph and
report run here. The result is the one a local run gives: the same
artifacts in the same order, the same diagnostics.

Batches are cut by bytes (TASK_BYTES) and files (TASK_FILES), so a task
costs a ~100 ms or more of parsing and the scheduler's per-task overhead
(about a millisecond) stays small. A batch whose task fails (a worker
killed, forensics missing on the workers) costs its files only: each is
listed as not read, with the reason. The run's --timeout bounds the wait.
"""

from __future__ import annotations

import os
import socket

from .. import limits
from ..model import Artifact, Diagnostic
from .attribution import rank_from_path
from .factsfile import Bundle, from_bytes, to_bytes
from .textio import InputError, file_size

TASK_BYTES = 16 << 20  # a batch: this many bytes of files ...
TASK_FILES = 256       # ... or this many files, whichever comes first
INSTALL_HINT = "pip install 'forensics[dask]'"


def read_on_cluster(address: str, paths, plugins, full: bool, follow_symlinks: bool, exclude: frozenset,
                    prefix: str = "", progress=None, meanwhile=None):
    """(artifacts, diagnostics, results) as `discover` + `_parse_all` give them."""
    from . import _unreadable, _walk  # the local engine's own steps

    try:
        from distributed import Client
    except ImportError:
        raise InputError(address, f"--scheduler needs Dask's distributed package: {INSTALL_HINT}") from None
    spec = plugins.clone_spec()
    if spec is None:
        raise InputError(address, "plugins given in-process cannot be sent to Dask workers: "
                                  "install them as entry-point plugins, or parse locally")
    roots = [os.path.realpath(p) for p in paths]
    # What discovery would do, root by root: a list of entries in order.
    plan: list[tuple] = []   # ("skip", Diagnostic) | ("file", index, root is a folder)
    files: list[tuple[str, str]] = []
    for root in paths:
        if not os.path.lexists(root):
            raise InputError(root, "no such file or directory")
        if os.path.isdir(root):
            skipped, found = [], []
            for path, display, why in _walk(root, roots, follow_symlinks, prefix):
                if display in exclude:
                    continue
                if why:
                    skipped.append(("skip", Diagnostic(display, 0, why, "info")))
                else:
                    found.append(("file", len(files), True))
                    files.append((path, display))
            plan += skipped + found
        else:
            why = _unreadable(root)
            if why:
                plan.append(("skip", Diagnostic(root, 0, why, "info")))
                continue
            plan.append(("file", len(files), False))
            files.append((root, root))
    batches = _batches(files)
    run = limits.current()
    try:
        client = Client(address, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise InputError(address, f"cannot reach the Dask scheduler: {exc}") from None
    per_file: list = [None] * len(files)
    failures: dict[int, str] = {}
    try:
        futures = [client.submit(parse_batch, [files[i] for i in batch], spec, full,
                                 (run.decompressed_bytes, run.files_per_folder, run.fr_entries),
                                 pure=False, key=f"forensics-parse-{n}-{os.getpid()}-{id(batch)}")
                   for n, batch in enumerate(batches)]
        if meanwhile is not None:
            meanwhile()
        deadline = run.ingest_deadline()
        done_files = done_bytes = 0
        total_bytes = sum(file_size(p) for p, _ in files)
        if progress is not None:
            progress(0, len(files), 0, total_bytes)
        from distributed import as_completed
        from distributed import wait as dask_wait
        if deadline is not None:
            import time
            try:
                dask_wait(futures, timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:  # what has not finished is listed below as not read in time
                pass
        index_of = {f.key: n for n, f in enumerate(futures)}
        for future in as_completed([f for f in futures if deadline is None or f.done()]):
            n = index_of[future.key]
            batch = batches[n]
            try:
                blob = future.result()
                header, bundle = from_bytes(blob, f"the Dask task for {files[batch[0]][1]}")
                _spread(header, bundle, [files[i] for i in batch], batch, per_file)
            except InputError as exc:
                for i in batch:
                    failures[i] = exc.message
            except Exception as exc:  # the task's own failure, as Dask reports it
                for i in batch:
                    failures[i] = f"the Dask task parsing it failed: {type(exc).__name__}: {str(exc)[:300]}"
            done_files += len(batch)
            done_bytes += sum(file_size(files[i][0]) for i in batch)
            if progress is not None:
                progress(done_files, len(files), done_bytes, total_bytes)
        for n, future in enumerate(futures):
            if not future.done():
                future.cancel()
                for i in batches[n]:
                    failures[i] = (f"not read within the --timeout of {run.timeout:g} s "
                                   f"(its Dask task had not finished)")
    finally:
        client.close()
    artifacts: list[Artifact] = []
    diagnostics: list[Diagnostic] = []
    results: list = []
    plugin_diagnostics: list[Diagnostic] = []
    for entry in plan:
        if entry[0] == "skip":
            diagnostics.append(entry[1])
            continue
        _, i, in_folder = entry
        path, display = files[i]
        if i in failures:
            artifacts.append(Artifact("unread", path, display, rank_from_path(display), full))
            results.append(("error", display, failures[i], 0))
            continue
        file_artifacts, file_results, file_diagnostics, extra = per_file[i]
        if not file_artifacts and not in_folder and file_diagnostics:
            raise InputError(display, file_diagnostics[0].message)  # as discover: a file named that nobody reads
        artifacts += file_artifacts
        results += file_results
        diagnostics += file_diagnostics
        plugin_diagnostics += [d for d in extra if d not in plugin_diagnostics]
    plugins.diagnostics.extend(d for d in plugin_diagnostics if d not in plugins.diagnostics)
    return artifacts, diagnostics, results


def _batches(files: list[tuple[str, str]]) -> list[list[int]]:
    batches, current, size = [], [], 0
    for i, (path, _) in enumerate(files):
        current.append(i)
        size += file_size(path)
        if size >= TASK_BYTES or len(current) >= TASK_FILES:
            batches.append(current)
            current, size = [], 0
    if current:
        batches.append(current)
    return batches


def _spread(header: dict, bundle: Bundle, batch_files: list[tuple[str, str]], batch: list[int],
            per_file: list) -> None:
    """Give each file of a batch its artifacts, results and diagnostics, by
    the counts per file the worker's header states (a facts file among them
    stands for many artifacts)."""
    counts = header.get("counts")
    if (not isinstance(counts, list) or len(counts) != len(batch)
            or not all(isinstance(c, list) and len(c) == 2 and all(type(x) is int and x >= 0 for x in c)
                       for c in counts)
            or sum(c[0] for c in counts) != len(bundle.artifacts)
            or sum(c[1] for c in counts) != len(bundle.diagnostics)):
        raise InputError(batch_files[0][1], "the Dask worker's answer does not match the files it was sent")
    a = d = 0
    for (i, (arts, diags)) in zip(batch, counts):
        per_file[i] = (bundle.artifacts[a:a + arts], bundle.results[a:a + arts], bundle.diagnostics[d:d + diags],
                       bundle.plugin_diagnostics if i == batch[0] else [])
        a += arts
        d += diags


# ------------------------------------------------------------------ on the worker

_PLUGINS: dict = {}


def parse_batch(batch: list[tuple[str, str]], spec, full: bool, ceilings: tuple) -> bytes:
    """A Dask task: sniff and parse each (path, display) as a local worker
    would; the answer in the facts encoding."""
    from . import _parse_one
    from .scan import artifacts_of, sniff
    from ..plugins import Plugins

    plugins = _PLUGINS.get(spec)
    if plugins is None:
        autoload, builtins = spec
        plugins = _PLUGINS[spec] = Plugins(autoload=autoload, builtins=builtins)
    known = len(plugins.diagnostics)
    decompressed, per_folder, fr_entries = ceilings
    own = limits.Limits(decompressed_bytes=decompressed, files_per_folder=per_folder, fr_entries=fr_entries)
    bundle = Bundle()
    counts = []
    with limits.applied(own):
        for path, display in batch:
            arts, diags = len(bundle.artifacts), len(bundle.diagnostics)
            kinds, note, stamps = sniff(path, display, plugins)
            if not kinds or stamps:
                bundle.diagnostics.append(Diagnostic(display, 0, note, "info"))
            for artifact in artifacts_of(kinds, path, display, full, stamps):
                result = _parse_one(artifact, plugins)
                if isinstance(result, Bundle):  # a facts file: what it holds takes its place
                    bundle.artifacts += result.artifacts
                    bundle.results += result.results
                    bundle.diagnostics += result.diagnostics
                    plugins.diagnostics.extend(d for d in result.plugin_diagnostics if d not in plugins.diagnostics)
                else:
                    bundle.artifacts.append(artifact)
                    bundle.results.append(result)
            counts.append([len(bundle.artifacts) - arts, len(bundle.diagnostics) - diags])
    bundle.plugin_diagnostics = plugins.diagnostics[known:]
    return to_bytes(bundle, host=socket.gethostname(), counts=counts)
