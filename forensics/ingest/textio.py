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


_TEXT_BYTES = bytes(range(32, 256)) + b"\t\n\r\x1b\x0c\x08"


def looks_binary(head: bytes) -> bool:
    """NUL bytes, or more than 15 % control bytes in the first 8 KiB.
    (bytes.translate keeps this in C: discovery calls it for every file.)"""
    sample = head[:8192]
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    return len(sample.translate(None, _TEXT_BYTES)) / len(sample) > 0.15


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or exc.__class__.__name__
