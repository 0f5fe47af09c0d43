"""The per-user cache: plain JSON in a folder only its owner can write.

Users share login nodes and GPU hosts, so nothing is read from a place
another user could have written: the folder (`$XDG_CACHE_HOME/forensics`,
else `~/.cache/forensics`) is created with mode 0700, and it and every file
in it are checked before each use (owned by this user, a real folder or
regular file, not writable by group or others; the folder's parent not
writable by others unless sticky). What fails a check is not used, and one
warning on stderr names it and says why. Nothing cached is code or a pickle,
and nothing in it depends on where the package is installed.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import sys

DISABLE_ENV = "FORENSICS_NO_CACHE"
_reported: set[str] = set()


def warn(path: str, why: str) -> None:
    """One line on stderr per unsafe place and process (a forked worker
    inherits what its parent already said)."""
    if path in _reported:
        return
    _reported.add(path)
    print(f"forensics: warning: cache not used: {path}: {why}", file=sys.stderr)


def _unsafe(st: os.stat_result, want_dir: bool) -> str:
    """Why a cache folder or file with this lstat may not be trusted ("" when it may)."""
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return "not a folder (a symlink or another kind of file)"
    if not want_dir and not stat.S_ISREG(st.st_mode):
        return "not a regular file (a symlink, FIFO or another kind of file)"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def _parent_unsafe(folder: str) -> str:
    parent = os.path.dirname(os.path.abspath(folder))
    try:
        st = os.stat(parent)
    except OSError as exc:
        return f"its parent {parent} cannot be read: {exc.strerror or exc}"
    shared = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if shared and not st.st_mode & stat.S_ISVTX and st.st_uid != os.geteuid():
        return f"its parent {parent} is writable by other users and not sticky: the folder could be swapped"
    return ""


def location() -> str:
    """Where the cache folder is (whether or not it exists or may be used)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "forensics")


@functools.lru_cache(maxsize=1)
def folder() -> str | None:
    """The checked cache folder, created if missing; None when caching is off
    or the folder fails a check (then said once on stderr)."""
    if os.environ.get(DISABLE_ENV):
        return None
    where = location()
    try:
        os.makedirs(os.path.dirname(where), mode=0o700, exist_ok=True)
        os.mkdir(where, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None  # no home, a read-only one: run without a cache, nothing to warn about
    try:
        st = os.lstat(where)
    except OSError:
        return None
    why = _unsafe(st, want_dir=True) or _parent_unsafe(where)
    if why:
        warn(where, why)
        return None
    return where


def _path(name: str) -> str | None:
    where = folder()
    if where is None or os.sep in name or name.startswith("."):
        return None
    return os.path.join(where, name)


def read_json(name: str):
    """The JSON value cached under `name`, or None (absent, unsafe, unreadable)."""
    path = _path(name)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        warn(path, exc.strerror or str(exc))
        return None
    with os.fdopen(fd, "rb") as handle:
        why = _unsafe(os.fstat(handle.fileno()), want_dir=False)
        if why:
            warn(path, why)
            return None
        try:
            return json.loads(handle.read())
        except (OSError, ValueError):
            return None  # cut short or corrupt: rebuilt and rewritten


def write_json(name: str, value) -> None:
    """Cache `value` under `name` (atomically, mode 0600; any failure only means no cache)."""
    from . import atomic

    path = _path(name)
    if path is None:
        return
    try:
        atomic.write(path, json.dumps(value, separators=(",", ":")), mode=0o600)
    except (OSError, TypeError, ValueError):
        pass


def check() -> list[tuple[str, str]]:
    """Every place in the cache that would not be used, and why (the folder
    itself, or each of its files): run once by the CLI before the workers
    fork, so each is said once."""
    where = folder()
    if where is None:
        loc = location()
        return [(loc, "not used")] if loc in _reported else []
    found = []
    try:
        names = sorted(os.listdir(where))
    except OSError:
        return []
    for name in names:
        if name.startswith("."):
            continue
        path = os.path.join(where, name)
        try:
            why = _unsafe(os.lstat(path), want_dir=False)
        except OSError:
            continue
        if why:
            warn(path, why)
            found.append((path, why))
    return found
