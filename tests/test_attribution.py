"""Which rank a dump belongs to: paths, pid maps, locals, and learned pids."""

import pytest

from forensics.ingest.attribution import PidMap, attribute, rank_from_path
from forensics.model import Evidence, ProcessDump


@pytest.mark.parametrize("path, rank", [
    ("rank3.pyspy.txt", 3),
    ("rank_3/py-spy.txt", 3),
    ("node07-rank3-gdb.log", 3),
    ("dump.3.txt", 3),
    ("host1/rank-12/py-spy.txt", 12),
    ("nccl_trace_rank_5", 5),
    ("host07_nccl_trace_rank_3", 3),
    ("fr_dump.3", 3),
    ("rank3/rank3.gdb_pybt.txt", 3),
    ("node07/gdb.txt", None),
    ("gpu07.txt", None),
    ("train.py", None),
])
def test_rank_from_path(path, rank):
    assert rank_from_path(path) == rank


def _dump(path, pid, hint=None, host=""):
    return ProcessDump("py-spy", path, pid=pid, host=host, rank_hint=hint,
                       evidence=Evidence(path, 1, f"Process {pid}: python train.py"))


def test_pid_map_beats_path_and_disagreement_is_a_diagnostic():
    stated = PidMap()
    stated.add("", 4242, 5, "pid_map.json:3")
    diagnostics = []
    placed, unattributed, _ = attribute([_dump("rank3.pyspy.txt", 4242)], stated, diagnostics)
    assert list(placed) == [5] and not unattributed
    assert "pid 4242 in pid_map.json:3 says rank 5 but the file name says rank 3" in diagnostics[0].message


def test_unnamed_dump_attributed_through_a_pid_learned_from_another_dump():
    diagnostics = []
    dumps = [_dump("rank2.gdb.txt", 777), _dump("stacks/after-5min.txt", 777), _dump("mystery.txt", 999)]
    placed, unattributed, _ = attribute(dumps, PidMap(), diagnostics)
    assert [d.path for d in placed[2]] == ["rank2.gdb.txt", "stacks/after-5min.txt"]
    assert [d.path for d in unattributed] == ["mystery.txt"]
    assert "cannot tell which rank pid 999 is" in diagnostics[0].message


def test_rank_local_in_the_dump():
    placed, _, _ = attribute([_dump("stacks/a.txt", 1, hint=6)], PidMap(), [])
    assert list(placed) == [6]


def test_same_pid_on_two_hosts_is_not_guessed():
    stated = PidMap()
    stated.add("node1", 100, 0, "m:1")
    stated.add("node2", 100, 8, "m:2")
    assert stated.lookup("node2", 100) == (8, "m:2")
    assert stated.lookup("", 100) is None
