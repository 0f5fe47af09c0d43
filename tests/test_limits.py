"""Resource ceilings (forensics.limits, docs/reliability.md): a gzip or
zstd bomb, a folder of too many files and lines of tens of megabytes each
cost only what crosses the limit, named in a diagnostic with the limit,
and the rest of the folder gives the verdict it supports."""

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import zstandard

from forensics import limits
from forensics.ingest.textio import read_bytes, take_notes

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus", "real_p2p_cycle_2")
PIPELINE = ["rank0.pyspy.txt", "rank1.pyspy.txt"]


def _incident(folder):
    folder.mkdir(parents=True, exist_ok=True)
    for name in PIPELINE:
        shutil.copy(os.path.join(CORPUS, name), folder / name)
    return folder


def _analyze(*args, timeout=300):
    return _measured(*args, timeout=timeout)[0]


# Runs the CLI in a process that, at its end, writes its own peak resident
# memory and its children's to the file $FORENSICS_TEST_PEAK. ru_maxrss of the process the test
# forks would not do: a child forked from a big pytest process starts with
# the parent's pages resident, and ru_maxrss keeps that peak across exec;
# VmHWM is the peak of the memory map the exec'd program built itself.
_PEAK = """
import os, resource, sys
from forensics import cli
try:
    code = cli.main(sys.argv[1:])
finally:
    sys.stdout.flush()
    hwm = next((int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")), 0)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(os.environ["FORENSICS_TEST_PEAK"], "w") as handle:
        handle.write(str(max(hwm, kids)))
sys.exit(code)
"""


def _measured(*args, timeout=300):
    """(report, peak resident KiB of the analyzing process and its workers)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(suffix=".peak") as peak:
        proc = subprocess.Popen([sys.executable, "-c", _PEAK, "analyze", *map(str, args), "-f", "json",
                                 "--no-plugins", "-q"], stdout=out, stderr=err,
                                env={**os.environ, "FORENSICS_TEST_PEAK": peak.name})
        try:
            proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        out.seek(0)
        err.seek(0)
        assert proc.returncode in (0, 1), err.read()
        return json.loads(out.read()), int(open(peak.name).read())


def _messages(report, name):
    return [d["message"] for d in report["diagnostics"] if os.path.basename(d["path"]) == name]


def _pyspy_bomb(pack, size):
    """Rank 0's py-spy dump followed by `size` bytes of blank lines, packed."""
    dump = open(os.path.join(CORPUS, "rank0.pyspy.txt"), "rb").read()
    body = dump + b"\n" * size
    return gzip.compress(body, 9) if pack == "gzip" else zstandard.ZstdCompressor(level=19).compress(body)


@pytest.mark.parametrize("pack", ["gzip", "zstd"])
def test_a_decompression_bomb_is_read_up_to_the_limit(tmp_path, pack):
    folder = _incident(tmp_path / "incident")
    os.remove(folder / "rank0.pyspy.txt")  # rank 0's dump, then 256 MiB of blank lines, out of under 1 MiB
    bomb = folder / "rank0.pyspy.txt.gz"
    bomb.write_bytes(_pyspy_bomb(pack, 256 << 20))
    assert bomb.stat().st_size < 1 << 20
    report, peak = _measured(folder, "--limit", "decompressed=8M")
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]
    notes = _messages(report, bomb.name)
    assert any("decompresses to more than 8 MiB (the limit on decompressed bytes per file)" in n
               for n in notes), report["diagnostics"]
    assert peak < 1 << 20  # KiB: under 1 GiB; without the limit this file took 9.7 GB and 88 s


def test_the_decompression_limit_holds_in_textio(tmp_path):
    path = tmp_path / "big.gz"
    path.write_bytes(gzip.compress(b"y" * (3 << 20)))
    take_notes()
    with limits.applied(limits.Limits(decompressed_bytes=1 << 20)):
        data = read_bytes(str(path))
    assert data == b"y" * (1 << 20)
    [(where, message)] = take_notes()
    assert where == str(path) and "more than 1 MiB" in message
    assert read_bytes(str(path)) == b"y" * (3 << 20) and take_notes() == []  # the default is far above


def test_a_folder_of_too_many_files_is_read_up_to_the_limit(tmp_path):
    root = tmp_path / "incident"
    _incident(root / "a_ranks")
    flood = root / "z_flood"
    flood.mkdir()
    for index in range(40):
        (flood / f"f{index:03d}.log").write_bytes(b"noise\n")
    report = _analyze(root, "--limit", "files-per-folder=10")
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]
    [message] = [d["message"] for d in report["diagnostics"] if d["path"].rstrip("/").endswith("z_flood")]
    assert "30 entries beyond the first 10 (by name)" in message and "files-per-folder" in message
    read = {os.path.basename(d["path"]) for d in report["diagnostics"]}
    assert "f009.log" in read and "f010.log" not in read  # the first ten by name were looked at


@pytest.mark.parametrize("head", [
    b"Process 4242: python train.py\nPython v3.11.7 (/usr/bin/python3.11)\n\nThread 4242 (idle): \"MainThread\"\n",
    b"host1:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n",
    b"[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: ",
    b"Thread 1 (Thread 0x7f (LWP 4242)):\n#0  0x00007f in ",
], ids=["py-spy", "nccl", "c10d", "gdb"])
def test_a_line_of_64_megabytes_costs_that_line_only(tmp_path, head):
    folder = _incident(tmp_path / "incident")
    (folder / "one_long_line.log").write_bytes(head + b"A" * (64 << 20) + b"\n" + head)
    report, peak = _measured(folder, timeout=600)
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]
    assert peak < 2 << 20  # KiB: under 2 GiB


@pytest.mark.parametrize("value", ["decompressed=0", "files-per-folder=ten", "swap=1G", "memory"])
def test_a_bad_limit_is_a_usage_error(value):
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", CORPUS, "--limit", value],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage error" in proc.stderr


def test_the_limits_are_documented():
    doc = open(os.path.join(HERE, "..", "docs", "reliability.md"), encoding="utf-8").read()
    for name in ("--timeout", "--file-timeout", "decompressed=", "files-per-folder=", "memory=",
                 "64 KiB", "512 MiB"):
        assert name in doc, name
    assert f"{limits.CLI_TIMEOUT:g} s" in doc and f"{limits.CLI_FILE_TIMEOUT:g} s" in doc


@pytest.mark.parametrize("json_form", [False, True])
def test_a_flight_recorder_dump_is_read_up_to_its_entry_limit(tmp_path, json_form):
    """The newest entries are last: past the limit the oldest are dropped,
    and the stuck call at the end is still found."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import gen_fr_dumps
    from forensics.ingest import flightrecorder

    paths = gen_fr_dumps.write(str(tmp_path), "missing", 2, entries=300, culprit=1, json_form=json_form)
    whole = flightrecorder.parse(paths[0], "rank0")
    with limits.applied(limits.Limits(fr_entries=40)):
        capped = flightrecorder.parse(paths[0], "rank0")
    notes = [d.message for d in capped.diagnostics if "fr-entries" in d.message]
    assert len(notes) == 1 and "the last 40 were read" in notes[0]
    (record,), (full,) = capped.records, whole.records
    assert record.last_op.seq == full.last_op.seq and record.last_op.state == full.last_op.state
    assert not [d for d in whole.diagnostics if "fr-entries" in d.message]


def _bounded_analyze(folder, address_space=3 << 30):
    """`forensics analyze` in a child whose address space is capped: an
    input that made it allocate per rank number fails here (MemoryError,
    exit 2) instead of taking the machine's memory."""
    import resource

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(folder), "-f", "json", "--no-plugins",
                           "-q", "--hung"], capture_output=True, text=True, preexec_fn=cap, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def test_a_communicator_of_a_trillion_ranks_is_not_believed(tmp_path):
    """An NCCL init line is the only statement of a communicator's size; a
    corrupt one must not become a member list of that length."""
    (tmp_path / "rank0.nccl.log").write_text(
        "node1:4101:4101 [0] NCCL INFO comm 0x55d0c0a0 rank 0 nranks 999999999999 cudaDev 0 nvmlDev 0 "
        "busId 1000 commId 0x1234abcd - Init START\n"
        "node1:4101:4101 [0] NCCL INFO comm 0x55d0c0a0 rank 0 nranks 999999999999 cudaDev 0 busId 1000 "
        "commId 0x1234abcd - Init COMPLETE\n")
    report = _bounded_analyze(tmp_path)
    notes = _messages(report, "rank0.nccl.log")
    assert any("999999999999 ranks is not believed" in n and "262,144" in n for n in notes), notes
    assert [d["line"] for d in report["diagnostics"] if "not believed" in d["message"]][0] in (1, 2)


def test_a_rank_number_of_48_digits_in_a_rank_map_is_named_not_filled_in(tmp_path):
    """The rank map the fuzzer found: ranks below the highest known are
    filled in as silent, which for a 48-digit rank meant counting to it."""
    (tmp_path / "ranks.json").write_text('{\n "ranks": {\n  "777777777777777777777777777777777777777777777770": '
                                         '{\n   "pid": 286  }}\n}\n')
    (tmp_path / "ranks.yaml").write_text("2:\n  pid: 4102\n  host: node1\n")
    report = _bounded_analyze(tmp_path)
    notes = _messages(report, "ranks.json")
    assert any("is not a rank number" in n for n in notes), notes
    assert [d["line"] for d in report["diagnostics"] if "is not a rank number" in d["message"]] == [3]
    assert sorted(map(int, report["ranks"])) == [0, 1, 2]  # rank 2's map still implies 0 and 1


def test_a_world_size_beyond_the_ceiling_is_not_taken(tmp_path):
    (tmp_path / "launcher.log").write_text(
        "[rank0]: WORLD_SIZE=9999999\n"
        "[rank0]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600001 milliseconds before timing out.\n")
    report = _bounded_analyze(tmp_path)
    assert any("world size of 9999999" in n for n in _messages(report, "launcher.log")), report["diagnostics"]


def _laughs(last_line: str) -> str:
    """Nine levels of nine aliases: 9⁹ strings once walked, 1 KiB as text."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines + [last_line]) + "\n"


@pytest.mark.parametrize("name, last_line, what", [
    ("ranks.yaml", '"3": {pid: 1234, host: *a9}', "a rank map"),
    ("snapshot.yaml", "ranks: {0: {current_op: allreduce, waiting_for_ranks: *a9}}", "a snapshot"),
])
def test_a_yaml_bomb_is_refused_before_it_is_built(tmp_path, name, last_line, what):
    (tmp_path / name).write_text(_laughs(last_line))
    _incident(tmp_path / "dumps")
    report = _bounded_analyze(tmp_path, address_space=1 << 30)
    notes = [d for d in report["diagnostics"] if os.path.basename(d["path"]) == name]
    assert [(d["line"], d["message"]) for d in notes] == [
        (1, f"YAML anchors and aliases are not read (anchor &a0): {what} never needs them, "
            f"and they can make a small file expand without bound")], notes
    assert report["verdict"] == "deadlock"  # the rest of the folder still decides
