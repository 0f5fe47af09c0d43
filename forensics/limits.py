"""The ceilings of one run: time, bytes, files and memory.

Artifacts are whatever a broken cluster left behind, and a run must end
with a report whatever they hold. Each ceiling below is a number a person
can read in `docs/reliability.md`; crossing one costs the file (or the
rest of the folder) concerned, named in a diagnostic with the limit, never
the run:

- `timeout`: seconds for the whole run (`--timeout`). Discovery and
  parsing stop when `INGEST_SHARE` of it is spent; files not finished by
  then are listed as not read, and the rest is analyzed and reported.
- `file_timeout`: seconds for one file's parse (`--file-timeout`). A
  worker process past it is killed; in-process parsing is interrupted by
  SIGALRM (main thread only).
- `decompressed_bytes`: bytes read out of one gzip or zstd file.
- `files_per_folder`: regular files taken from one folder.
- `memory_bytes`: address space, in all, of this process and its parse
  workers (RLIMIT_AS: half for this process, the other half shared by the
  workers, none below MEMORY_FLOOR); a file that needs more ends in
  MemoryError, reported, not in swap or the OOM killer.

Line length is each reader's own ceiling (64 KiB for log lines; a longer
line is skipped with a diagnostic); entries per Flight Recorder dump are
bounded by its reader's byte and object ceilings (safepickle).

The CLI applies its limits around one analysis (`applied`); library
callers get `DEFAULT`, which sets no clock and no memory limit (neither
signals nor rlimits of their process are touched) but keeps the size
ceilings.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field, replace

GiB = 1 << 30
INGEST_SHARE = 0.8  # of `timeout`: the rest is kept for the analysis and the report


@dataclass(frozen=True)
class Limits:
    timeout: float | None = None
    file_timeout: float | None = None
    decompressed_bytes: int = 1 * GiB
    files_per_folder: int = 1_000_000
    fr_entries: int = 1_000_000  # entries read per Flight Recorder dump (torch's buffer default is 2,000)
    memory_bytes: int | None = None
    started: float = field(default_factory=time.monotonic)

    def ingest_deadline(self) -> float | None:
        """When discovery and parsing must stop (time.monotonic), or None."""
        return None if self.timeout is None else self.started + self.timeout * INGEST_SHARE

    def ingest_over(self) -> bool:
        deadline = self.ingest_deadline()
        return deadline is not None and time.monotonic() >= deadline

    def run_deadline(self) -> float | None:
        return None if self.timeout is None else self.started + self.timeout

    def parent_memory(self) -> int | None:
        """The main process's address space (RLIMIT_AS): half of `memory_bytes`."""
        return None if self.memory_bytes is None else max(MEMORY_FLOOR, self.memory_bytes // 2)

    def worker_memory(self, workers: int) -> int | None:
        """Each parse worker's: the other half, shared out."""
        if self.memory_bytes is None:
            return None
        return max(MEMORY_FLOOR, self.memory_bytes // 2 // max(1, workers))


CLI_TIMEOUT = 900.0        # --timeout default: a quarter of an hour for the whole run
CLI_FILE_TIMEOUT = 300.0   # --file-timeout default
MEMORY_FLOOR = 1 << 30     # no process is held below this address space
MEMORY_SHARE = 0.8         # of physical memory, the CLI's default `memory_bytes`

DEFAULT = Limits()
_current: list[Limits] = [DEFAULT]


def current() -> Limits:
    return _current[-1]


@contextlib.contextmanager
def applied(limits: Limits):
    """`limits` in force for what runs inside (one analysis)."""
    _current.append(limits)
    try:
        yield limits
    finally:
        _current.pop()


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cli_limits(timeout: float | None = CLI_TIMEOUT, file_timeout: float | None = CLI_FILE_TIMEOUT,
               memory_bytes: int | None = None, **sizes) -> Limits:
    """The CLI's limits: a clock, and memory shared out of MEMORY_SHARE of
    this machine's RAM unless given. A timeout of 0 means none."""
    if memory_bytes is None:
        total = physical_memory()
        memory_bytes = int(total * MEMORY_SHARE) if total else None
    return replace(Limits(), timeout=timeout or None, file_timeout=file_timeout or None,
                   memory_bytes=memory_bytes or None, **sizes)


def set_memory_limit(nbytes: int | None):
    """Lower this process's soft RLIMIT_AS to `nbytes` (never raise it);
    returns what to restore, or None when nothing was changed."""
    if nbytes is None:
        return None
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = nbytes if hard == resource.RLIM_INFINITY else min(nbytes, hard)
        if soft != resource.RLIM_INFINITY and soft <= cap:
            return None
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        return (soft, hard)
    except (ImportError, OSError, ValueError):
        return None


def restore_memory_limit(saved) -> None:
    if saved is None:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, saved)
    except (ImportError, OSError, ValueError):
        pass


def describe_bytes(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0 or n >= 10 * size:
            return f"{n / size:g} {unit}" if n % size == 0 else f"{n / size:.1f} {unit}"
    return f"{n} bytes"
