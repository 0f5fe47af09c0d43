"""Reading artifacts that come from broken machines.

Files may be gzip-compressed, binary, non-UTF-8 or huge. Everything here
returns text or raises `InputError` with a reason a person can act on.
"""

from __future__ import annotations

import gzip
import os

HEAD_BYTES = 64 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


class InputError(Exception):
    """Unreadable input: the CLI turns it into exit code 2 and a one-line reason."""

    def __init__(self, path: str, message: str, line: int = 0):
        self.path = path
        self.line = line
        self.message = message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


def is_gzip(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == _GZIP_MAGIC
    except OSError:
        return False


def read_head(path: str, size: int = HEAD_BYTES) -> bytes:
    """The first `size` bytes, decompressed if the file is gzip."""
    try:
        if is_gzip(path):
            with gzip.open(path, "rb") as handle:
                return handle.read(size)
        with open(path, "rb") as handle:
            return handle.read(size)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(path, f"cannot read: {_reason(exc)}") from None


def read_bytes(path: str, limit: int | None = None) -> bytes:
    try:
        if is_gzip(path):
            with gzip.open(path, "rb") as handle:
                return handle.read(limit if limit is not None else -1)
        with open(path, "rb") as handle:
            return handle.read(limit if limit is not None else -1)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(path, f"cannot read: {_reason(exc)}") from None


def read_text(path: str, limit: int | None = None) -> str:
    """Decode as UTF-8, replacing what is not: a stray byte must not lose a file."""
    return read_bytes(path, limit).decode("utf-8", errors="replace")


def looks_binary(head: bytes) -> bool:
    if not head:
        return False
    if b"\x00" in head[:8192]:
        return True
    sample = head[:8192]
    text_like = sum(1 for b in sample if b >= 32 or b in (9, 10, 13, 27))
    return text_like / len(sample) < 0.85


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or exc.__class__.__name__
