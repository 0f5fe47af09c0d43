"""Files that are one stack dump and nothing else are known by their shape
(forensics/ingest/wholedump.py), and that shortcut must decide exactly what
the full look (scan.sniff) decides, on every file it takes."""

from __future__ import annotations

import os

import pytest

from forensics.hookspecs import hookimpl
from forensics.ingest import discover, wholedump
from forensics.ingest.scan import sniff
from forensics.plugins import Plugins

ROOT = os.path.join(os.path.dirname(__file__), "..")
PYSPY = os.path.join(ROOT, "corpus", "real_missing_rank_dataloader", "rank0.pyspy.txt")
GDB = os.path.join(ROOT, "corpus", "real_missing_rank_dataloader", "rank0.gdb.txt")


def _files(*folders):
    for folder in folders:
        for path, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in sorted(names):
                full = os.path.join(path, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    yield full


def test_every_file_the_shortcut_takes_gets_the_kinds_the_full_look_gives():
    plugins = Plugins(autoload=False)
    taken: dict[str, int] = {}
    for path in _files("corpus", "tests/fixtures"):
        kind = wholedump.kind_of(path)
        if kind is None:
            continue
        taken[kind] = taken.get(kind, 0) + 1
        assert sniff(path, path, plugins) == ([kind], "", False), path
    # the corpus's plain py-spy and gdb dumps and its pickled Flight Recorder dumps: the check compared something
    assert taken.get("py-spy", 0) >= 50 and taken.get("gdb", 0) >= 20 and taken.get("flight-recorder", 0) >= 20


@pytest.mark.parametrize("template, kind", [(PYSPY, "py-spy"), (GDB, "gdb")])
def test_a_whole_dump_is_taken(template, kind):
    assert wholedump.kind_of(template) == kind


@pytest.mark.parametrize("template", [PYSPY, GDB])
@pytest.mark.parametrize("foreign", [
    b"[rank0]:[E1206 10:00:00.123456 ProcessGroupNCCL.cpp:1412] [PG 0 Rank 0] Watchdog caught collective "
    b"operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n",
    b"node1:4242:4300 [0] NCCL INFO comm 0x55d0 rank 0 nranks 8 cudaDev 0 busId 1000 - Init COMPLETE\n",
    b"Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n",
    b"step 120 loss 2.31\n",
])
def test_a_dump_with_any_other_line_gets_the_full_look(tmp_path, template, foreign):
    with open(template, "rb") as handle:
        dump = handle.read()
    path = tmp_path / os.path.basename(template)
    path.write_bytes(dump + foreign)
    assert wholedump.kind_of(str(path)) is None
    path.write_bytes(foreign + dump)
    assert wholedump.kind_of(str(path)) is None


def test_a_dump_with_a_quoted_frame_argument_gets_the_full_look(tmp_path):
    with open(GDB, "rb") as handle:
        dump = handle.read()
    quoted = dump.replace(b"#0  ", b'#0  0x1 in c10::detail::torchCheckFail (msg="what went wrong") at c10.cpp:1\n#9  ', 1)
    path = tmp_path / "rank0.gdb.txt"
    path.write_bytes(quoted)
    assert wholedump.kind_of(str(path)) is None


def test_a_pickle_the_flight_recorder_reader_does_not_claim_gets_the_full_look(tmp_path):
    import pickle  # writing one here; nothing in forensics unpickles

    path = tmp_path / "rank0.bin"
    path.write_bytes(pickle.dumps({"weights": [0.5] * 100}, protocol=2))
    assert wholedump.kind_of(str(path)) is None
    fr = next(p for p in _files("corpus") if os.path.basename(p).startswith("nccl_trace_rank_"))
    assert wholedump.kind_of(fr) == "flight-recorder"


class OwnSniffer:
    """A plugin that claims stack dumps too: the shortcut would hide them from it."""

    @hookimpl
    def forensics_sniff(self, path, head):
        return "team-dump" if b"Thread " in head else None

    @hookimpl
    def forensics_parse(self, artifact):
        return None


def test_a_plugins_sniffer_turns_the_shortcut_off(tmp_path):
    assert wholedump.applies(Plugins(autoload=False))
    plugins = Plugins(autoload=False, extra=(OwnSniffer(),))
    assert not wholedump.applies(plugins)
    with open(PYSPY, "rb") as handle:
        dump = handle.read()
    for rank in range(3):
        (tmp_path / f"rank{rank}.pyspy.txt").write_bytes(dump)
    artifacts, _ = discover([str(tmp_path)], plugins)
    assert sorted({a.kind for a in artifacts}) == ["py-spy", "team-dump"]


def test_discovery_gives_the_same_artifacts_with_and_without_the_shortcut(tmp_path, monkeypatch):
    for rank, template in enumerate([PYSPY, GDB, PYSPY, GDB]):
        with open(template, "rb") as handle:
            (tmp_path / f"rank{rank}.{os.path.basename(template).split('.', 1)[1]}").write_bytes(handle.read())
    (tmp_path / "rank4.pyspy.txt").write_bytes(open(PYSPY, "rb").read() + b"step 120 loss 2.31\n")
    plugins = Plugins(autoload=False)
    fast = discover([str(tmp_path)], plugins)
    monkeypatch.setattr(wholedump, "applies", lambda plugins: False)
    full = discover([str(tmp_path)], plugins)
    assert fast == full
    assert len(fast[0]) == 5
