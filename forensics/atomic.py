"""Write a file whole or not at all, through a temporary file nobody else can have planted.

A fixed temporary name beside the target (`out.tmp`) can be created first by
another user of a shared folder, as a symlink to a file of ours that the
write would then overwrite; `mkstemp` makes a new file with a random name,
exclusively and with mode 0600, in the target's folder, so the final rename
stays on one file system.
"""

from __future__ import annotations

import os
import tempfile


def write(path: str, data: bytes | str, mode: int | None = None) -> None:
    """Replace `path` with `data` (str is written as UTF-8). `mode`: the new
    file's permission bits (default: 0666 less the umask, as `open` gives).
    Raises OSError; the temporary file never outlives a failure."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            if mode is None:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask
            os.fchmod(handle.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
