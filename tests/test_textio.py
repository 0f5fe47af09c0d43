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


@pytest.mark.parametrize("packing", ["gzip", "zstd"])
def test_a_corrupt_compressed_file_is_an_input_error_naming_it(tmp_path, packing):
    from forensics.ingest.textio import InputError

    data = os.urandom(1 << 20)
    if packing == "zstd":
        zstandard = pytest.importorskip("zstandard")
        packed = zstandard.ZstdCompressor().compress(data)
    else:
        packed = gzip.compress(data)
    path = tmp_path / f"rank3.log.{packing}"
    path.write_bytes(packed[:len(packed) // 2])  # cut short, as when its machine died while writing it
    with pytest.raises(InputError) as caught:
        read_bytes(str(path))
    assert caught.value.path == str(path) and caught.value.message.startswith("cannot read: ")


def test_zstd_frames_are_walked_to_find_a_cut_whatever_the_frame_header_holds(tmp_path):
    """zstd_cut_short reads only headers: every frame-header shape and every
    cut near a block or frame boundary must be told from a whole file."""
    import io

    zstandard = pytest.importorskip("zstandard")
    from forensics.ingest.textio import zstd_cut_short

    data = os.urandom(300_000) + b"NCCL INFO comm 0x1 rank 3 nranks 8\n" * 20_000
    Z = zstandard.ZstdCompressor
    stream = io.BytesIO()
    with Z().stream_writer(stream, closefd=False) as writer:  # two frames, no content size
        writer.write(data)
        writer.flush(zstandard.FLUSH_FRAME)
        writer.write(b"second frame")
    variants = {
        "plain": Z().compress(data),
        "checksum": Z(write_checksum=True).compress(data),
        "no size": Z(write_content_size=False).compress(data),
        "two frames": stream.getvalue(),
        "skippable frame after": Z().compress(data) + (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little")
        + b"abc",
        "empty": Z().compress(b""),
    }
    path = tmp_path / "log.zst"
    for name, blob in variants.items():
        path.write_bytes(blob)
        with open(path, "rb") as raw:
            assert zstd_cut_short(raw) is None, name
        assert read_bytes(str(path)) == (data + b"second frame" if name == "two frames" else
                                         b"" if name == "empty" else data), name
        for cut in sorted({4, 5, 9, len(blob) // 2, len(blob) - 4, len(blob) - 1}):
            if 4 <= cut < len(blob):
                path.write_bytes(blob[:cut])
                with open(path, "rb") as raw:
                    assert zstd_cut_short(raw) is not None, (name, cut)
