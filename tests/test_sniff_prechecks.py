"""The literal pre-checks in front of the sniffers' patterns only make
declining a file quicker: for every file of the corpus and the fixtures, and
for a line of every alternative of each pattern, a sniffer answers what its
patterns alone answer."""

from __future__ import annotations

import os

import pytest

from forensics.ingest import fr_report, gdb, ncclras, pystack, torchlog
from forensics.ingest.textio import ANSI_COLOUR, InputError, has_nul, looks_binary, read_head

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plain(head: bytes) -> bytes:
    return ANSI_COLOUR.sub(b"", head) if b"\x1b" in head else head


# Each sniffer with its patterns alone, no pre-check.
def _gdb(head: bytes) -> bool:
    head = _plain(head)
    return not looks_binary(head) and bool(gdb._SNIFF_HEADER.search(head) or gdb._SNIFF_FRAME.search(head))


def _fr_report(head: bytes) -> bool:
    if not head or has_nul(head):
        return False
    head = _plain(head)
    return bool(fr_report._SNIFF.search(head) or fr_report._SNIFF_CRASH.search(head))


def _pattern_only(module):
    def sniff(head: bytes) -> bool:
        return bool(head) and not has_nul(head) and module._SNIFF.search(_plain(head)) is not None
    return sniff


def _torchlog(head: bytes) -> bool:
    if has_nul(head):
        return False
    if torchlog._crash_report(head):
        return not looks_binary(head)
    if looks_binary(head):
        return False
    return torchlog._SNIFF.search(torchlog._ANSI_BYTES.sub(b"", head)) is not None


SNIFFERS = {
    "gdb": (lambda head: gdb.sniff("x", head), _gdb),
    "fr_report": (lambda head: fr_report.sniff("x", head) is not None, _fr_report),
    "pystack": (lambda head: pystack.sniff("x", head) is not None, _pattern_only(pystack)),
    "ncclras": (lambda head: ncclras.sniff("x", head) is not None, _pattern_only(ncclras)),
    "torchlog": (lambda head: torchlog.sniff("x", head), _torchlog),
}

# A line of each alternative of each pattern (the forms the readers' own tests
# hold, written out here so that none depends on the corpus having it).
LINES = [
    b"Thread 3 (Thread 0x7f2a5c1ff640 (LWP 4242) \"python\"):\n",
    b"Thread 1 (LWP 77):\n",
    b"Thread 2 (process 88):\n",
    b"#0  0x00007f2a6d2e4d7e in __futex_abstimed_wait_common () from /lib/libc.so.6\n",
    b"Not all ranks joining collective 5 at entry 1000\n",
    b"Collective sequence number: 12 has errors\n",
    b"Collective 3 at entry 7 errors\n",
    b"Collective errors for group 0:default_pg\n",
    b"Input/output mismatch in the collective sequence number 4\n",
    b"We cannot decide what's wrong with this collective entry because we missed FR dumps\n",
    b"No errors found for this collective entry\n",
    b"Too many mismatches for process_group 0\n",
    b"built groups, memberships\n",
    b"$ python -m torch.distributed.flight_recorder.fr_trace dumps -p rank_\n",
    b"$ torchfrtrace dumps\n",
    b"all_reduce(s=1 d=2, input_sizes=[[4]], state=scheduled)\n",
    b'  File "/usr/lib/python3/site-packages/torch/distributed/flight_recorder/fr_trace.py", line 12, in main\n',
    b"Traceback for thread 4242 (python) [] (most recent call last):\n",
    b"The frame stack for thread 4242 is empty\n",
    b"Using executable found in the core file: /usr/bin/python3\n",
    b"Core file information:\nstate: t zombie: True niceness: 0\n",
    b"Job summary\n===========\n",
    b"#0-1 (f3a2b1c0d9e8f7a6) MISMATCH\n",
    b"  Communicator ranks have different AllReduce operation counts\n",
    b"Gathering data about the NCCL communicators (timeout 5 s)\n",
    b"[I1201 10:00:00.123456 ProcessGroupNCCL.cpp:1234] [PG 0 Rank 0] started\n",
    b"[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout\n",
    b"I1201 10:00:00.123456 4242 torch/distributed/elastic/agent/server/api.py:123] rendezvous done\n",
    b"[2026-12-01 10:00:00,123] torch.distributed.elastic.agent.server.api: [WARNING] Received Signals.SIGTERM\n",
    b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n",
    b"Root Cause (first observed failure):\n",
    b"RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective\n",
    b"RuntimeError: Rank 1 failed to pass monitoredBarrier in 30000 ms\n",
    b"RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting 1800000ms for "
    b"recv operation to complete\n",
]
STACK_TEXT = (b"Process 4242: python -u train.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
              b"Thread 4242 (idle): \"MainThread\"\n"
              b"    all_reduce (torch/distributed/distributed_c10d.py:3252)\n"
              b"    wrapper (torch/distributed/c10d_logger.py:83)\n")


def _files():
    for root in ("corpus", os.path.join("tests", "fixtures")):
        for folder, _, names in os.walk(os.path.join(REPO, root)):
            for name in sorted(names):
                yield os.path.join(folder, name)


@pytest.mark.parametrize("name", sorted(SNIFFERS))
def test_every_file_of_the_corpus_gets_the_answer_of_the_patterns_alone(name):
    sniff, reference = SNIFFERS[name]
    claimed = 0
    for path in _files():
        try:
            head = read_head(path)
        except InputError:
            continue
        expected = reference(head)
        assert sniff(head) == expected, path
        claimed += expected
    assert claimed  # the corpus holds files of every one of these kinds


@pytest.mark.parametrize("line", LINES, ids=lambda line: line[:40].decode())
def test_a_line_of_every_alternative_gets_the_answer_of_the_patterns_alone(line):
    claims = 0
    for text in (line, STACK_TEXT + line, STACK_TEXT + b"\x1b[31m" + line + b"\x1b[0m"):
        for name, (sniff, reference) in SNIFFERS.items():
            assert sniff(text) == reference(text), name
            claims += reference(text)
    assert claims  # the line is one a pattern claims


def test_a_py_spy_dump_naming_torch_distributed_is_declined_by_all_five():
    for name, (sniff, _) in SNIFFERS.items():
        assert not sniff(STACK_TEXT * 100), name
