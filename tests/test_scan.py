"""What a file is, decided from all of it (forensics/ingest/scan.py).

A reader is asked about a text file's head, its tail and the lines of its
middle around the markers readers declare; a console interleaving processes
under launcher prefixes becomes one artifact per process for the stack-dump
formats. A new format is one module: its sniff, its parse, its markers.
"""

from __future__ import annotations

from forensics.hookspecs import hookimpl
from forensics.ingest import discover
from forensics.ingest.facts import Facts
from forensics.plugins import Plugins

OUTPUT = b"".join(b"epoch 3 step %d loss 2.%04d lr 3e-4\n" % (i, i % 9973) for i in range(9000))  # ~330 KB


class AcmeReader:
    """A team's format: one line, `ACME-STALL rank N`, anywhere in a console."""

    def __init__(self, markers: tuple = (b"ACME-STALL",)):
        self.markers = markers

    @hookimpl
    def forensics_sniff(self, path, head):
        return "acme" if b"ACME-STALL" in head else None

    @hookimpl
    def forensics_sniff_markers(self):
        return self.markers

    @hookimpl
    def forensics_parse(self, artifact):
        return Facts("acme", artifact.display) if artifact.kind == "acme" else None


def _kinds(folder, reader) -> dict[str, list[str]]:
    artifacts, _ = discover([str(folder)], Plugins(autoload=False, extra=(reader,)))
    found: dict[str, list[str]] = {}
    for artifact in artifacts:
        found.setdefault(artifact.display, []).append(artifact.kind)
    return found


def test_a_line_in_the_middle_of_a_console_is_found_by_its_readers_markers(tmp_path):
    (tmp_path / "rank3.console.log").write_bytes(OUTPUT + b"ACME-STALL rank 3\n" + OUTPUT)
    assert "acme" in _kinds(tmp_path, AcmeReader())["rank3.console.log"]
    # without a marker, the middle of the file is not looked at: the line is never shown to the reader
    assert "acme" not in _kinds(tmp_path, AcmeReader(markers=())).get("rank3.console.log", [])


def test_lines_after_hours_of_output_are_found_in_the_tail(tmp_path):
    (tmp_path / "rank3.console.log").write_bytes(OUTPUT * 3 + b"ACME-STALL rank 3\n")
    assert "acme" in _kinds(tmp_path, AcmeReader(markers=()))["rank3.console.log"]


DUMP = (b"Process %d: python train.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
        b'Thread %d (active): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2501)\n'
        b"    train_step (train.py:88)\n")


def test_a_console_interleaving_two_ranks_dumps_is_one_artifact_per_rank(tmp_path):
    first = [b"[rank0]:" + line for line in (DUMP % (100, 100)).splitlines(keepends=True)]
    second = [b"[rank1]:" + line for line in (DUMP % (200, 200)).splitlines(keepends=True)]
    (tmp_path / "tee.log").write_bytes(b"".join(a + b for a, b in zip(first, second)))
    found = _kinds(tmp_path, AcmeReader())
    assert found.get("tee.log[rank0]") == ["py-spy"] and found.get("tee.log[rank1]") == ["py-spy"]
    assert "py-spy" not in found.get("tee.log", [])  # not read whole as well: its lines interleave


GDB = (b"[New LWP 9366]\n[New LWP 9369]\n[Thread debugging using libthread_db enabled]\n"
       b'Thread 1 (Thread 0x7f5e2b7fe740 (LWP 9353) "python3"):\n'
       b"#0  0x00007f5e2b8e1f16 in __futex_abstimed_wait_common64 () from /lib/x86_64-linux-gnu/libc.so.6\n")


def test_a_dump_after_gdb_output_that_starts_with_a_bracket_is_found(tmp_path):
    # gdb's output starts with "[New LWP ...]": text, not a JSON list, so the py-spy dump after it is read
    (tmp_path / "rank0.console.log").write_bytes(GDB + DUMP % (100, 100))
    assert {"gdb", "py-spy"} <= set(_kinds(tmp_path, AcmeReader())["rank0.console.log"])
    # and beyond the head of a big file too: its middle and tail are looked at, as for any text
    (tmp_path / "rank0.console.log").write_bytes(GDB + OUTPUT + DUMP % (100, 100) + OUTPUT)
    assert {"gdb", "py-spy"} <= set(_kinds(tmp_path, AcmeReader())["rank0.console.log"])


def test_a_json_list_of_objects_is_still_a_document(tmp_path):
    (tmp_path / "rank0.pyspy.json").write_bytes(
        b'[{"pid": 1, "thread_id": 2, "os_thread_id": 3, "owns_gil": false, "frames": []}]')
    assert _kinds(tmp_path, AcmeReader())["rank0.pyspy.json"] == ["py-spy-json"]


def test_only_the_processes_that_printed_a_dump_are_split_out_for_it(tmp_path):
    dump = [b"[rank1]:" + line for line in (DUMP % (200, 200)).splitlines(keepends=True)]
    chatter = [b"[rank0]:step %d loss 2.5\n" % i for i in range(len(dump))]
    (tmp_path / "tee.log").write_bytes(b"".join(a + b for a, b in zip(chatter, dump)))
    found = _kinds(tmp_path, AcmeReader())
    assert found.get("tee.log[rank1]") == ["py-spy"] and "tee.log[rank0]" not in found
