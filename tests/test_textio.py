"""Reading files: the byte cap holds for plain, gzip and zstd files alike."""

import gzip
import os

import pytest

from forensics.ingest.textio import read_bytes


@pytest.mark.parametrize("packing", ["plain", "gzip", "zstd"])
def test_read_bytes_returns_exactly_the_first_limit_bytes(tmp_path, packing):
    data = os.urandom(3 << 20) + b"tail"  # past one 1 MiB step and not a multiple of it
    path = tmp_path / f"blob.{packing}"
    if packing == "gzip":
        path.write_bytes(gzip.compress(data, compresslevel=1))
    elif packing == "zstd":
        zstandard = pytest.importorskip("zstandard")
        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        path.write_bytes(data)
    assert read_bytes(str(path)) == data
    for limit in (0, 1, 4096, (1 << 20) + 1, len(data) - 1, len(data), len(data) + 1, 64 << 20):
        assert read_bytes(str(path), limit) == data[:limit], limit


def test_read_bytes_of_an_empty_file(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert read_bytes(str(path), 100) == b""
