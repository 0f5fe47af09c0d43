"""The py-spy dump reader: real captures, hand-made odd forms, garbage, and the cache."""

import gzip
import json
import random
import re
import tempfile
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS, SAMPLES
from forensics.ingest import pyspy
from forensics.ingest.textio import InputError, read_head
from forensics.model import Artifact
from forensics.plugins import Plugins

FIXTURES = Path(__file__).parent / "fixtures" / "pyspy"
P2P = SAMPLES / "p2p_cycle_2"
needs_samples = pytest.mark.skipif(not P2P.is_dir(), reason="real captures in ../shared/samples not present")

TEXT_SUFFIXES = (".pyspy.txt", ".native.txt", ".locals.txt")


def real_dumps(suffixes):
    """Every real capture of these kinds, from the shared samples and the corpus."""
    found = []
    for root in (SAMPLES, CORPUS):
        if root.is_dir():
            found += sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    return found


def read(path, display=None):
    """Sniff, then parse with the reader the sniffer chose (as ingest does)."""
    path = str(path)
    kind = pyspy.sniff(path, read_head(path))
    assert kind in (pyspy.KIND, pyspy.KIND_JSON), f"{path} not claimed"
    reader = pyspy.parse if kind == pyspy.KIND else pyspy.parse_json
    return reader(path, display or Path(path).name)


def only_process(facts):
    assert len(facts.processes) == 1
    return facts.processes[0]


def thread(process, name):
    return next(t for t in process.threads if t.name == name)


def frame_text(frame):
    """A frame as py-spy prints it: what the cited line must say."""
    if frame.file:
        where = f"{frame.file}:{frame.line}" if frame.line else frame.file
    else:
        where = frame.library
    return f"{frame.function} ({where})"


def assert_cites_own_lines(path, facts):
    """Every thread's evidence is its header line; every frame's `at` lands on
    its own line; every local is printed under its frame."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines = re.sub(r"\x1b\[[0-9;]*m", "", text).split("\n")
    for process in facts.processes:
        if process.evidence is not None and process.pid is not None:
            assert lines[process.evidence.line - 1].startswith(f"Process {process.pid}: ")
        for t in process.threads:
            assert lines[t.evidence.line - 1].strip() == t.evidence.text
            if t.tid:
                assert t.evidence.text.startswith(f"Thread {t.tid}")
            ats = [f.at for f in t.frames]
            assert ats == sorted(ats) and (not ats or ats[0] >= 1)
            for index, f in enumerate(t.frames):
                cited = t.cite(f)
                assert cited.line == t.evidence.line + f.at
                assert lines[cited.line - 1] == "    " + frame_text(f)
                end = t.frames[index + 1].at if index + 1 < len(t.frames) else len(lines)
                under = lines[cited.line:t.evidence.line + end - 1]
                for name, value in f.locals:
                    assert f"            {name}: {value}" in under


# ------------------------------------------------------------------ sniffing

def test_sniff_claims_every_real_dump_and_nothing_else_there():
    files = [p for root in (SAMPLES, CORPUS) if root.is_dir() for p in root.rglob("*") if p.is_file()]
    if not any(p.name.endswith(TEXT_SUFFIXES) for p in files):
        pytest.skip("no real captures present")
    for path in files:
        named_dump = path.suffix == ".txt" and ("pyspy" in path.name or path.parent.name == "pyspy")
        expected = (pyspy.KIND if path.name.endswith(TEXT_SUFFIXES) or named_dump
                    else pyspy.KIND_JSON if path.name.endswith(".pyspy.json") else None)
        got = pyspy.sniff(str(path), read_head(str(path)))
        if expected is None and got == pyspy.KIND:
            # a console that holds a dump a program printed into it (SGLang's watchdog): claimed for that dump
            assert _EMBEDDED_DUMP.search(path.read_bytes()), path
            continue
        assert got == expected, path


# py-spy's dump header: `Process N: cmdline`, then `Python vX.Y` on the next line
_EMBEDDED_DUMP = re.compile(rb"^Process \d+: [^\n]*\nPython v\d", re.M)


@pytest.mark.parametrize("content, kind", [
    (b"\n\nProcess 12: python x.py\nPython v3.11.7 (/usr/bin/python3)\n", pyspy.KIND),
    (b"Process \x1b[33m\x1b[1m12\x1b[0m: python\nPython v\x1b[1m3.9.1\x1b[0m (/x)\n", pyspy.KIND),
    (b'Thread 7 (idle): "MainThread"\n    f (a.py:1)\n', pyspy.KIND),
    (b"Thread 0x7F3A2B4C5700 (active+gil)\n", pyspy.KIND),
    (b'[\n  {\n    "pid": 1,\n    "thread_id": 2,\n    "os_thread_id": 3,\n    "frames": []\n  }\n]\n',
     pyspy.KIND_JSON),
    # gdb, Flight Recorder, our snapshot, an FR entries list, nonsense: not ours
    (b"\nThread 2 (Thread 0x7f1c2dfff640 (LWP 1234) \"pt_nccl_watchdg\"):\n#0  0x00007f in poll ()\n", None),
    (b'{"version": "2.10", "pg_config": {}, "entries": [{"thread_id": 1, "frames": []}]}', None),
    (b'{"0": {"current_op": "send", "waiting_for_ranks": [1]}}', None),
    (b'[{"record_id": 0, "thread_id": 5, "frames": [{"name": "f", "filename": "a.py", "line": 1}]}]', None),
    (b"Process 12: python x.py\nsomething else\n", None),
    (b"Thread 7: nope\n", None),
    (b"", None),
    (bytes(range(256)) * 4, None),
])
def test_sniff_by_content(content, kind):
    assert pyspy.sniff("whatever.log", content) == kind


# ------------------------------------------------------------------ real text dumps

@needs_samples
def test_plain_dump_process_threads_and_frames():
    process = only_process(read(P2P / "rank0.pyspy.txt"))
    assert (process.source, process.path, process.pid) == ("py-spy", "rank0.pyspy.txt", 19682)
    assert process.command == "/opt/trainenv/bin/python -u /srv/job/train.py --config cfg07"
    assert process.python == "3.11.7"
    assert (process.evidence.line, process.evidence.text.split(":")[0]) == (1, "Process 19682")
    assert [(t.tid, t.name, t.status, t.active) for t in process.threads] == [
        ("19682", "MainThread", "idle", False), ("19690", "debug_dump_hook", "idle", False)]
    main = thread(process, "MainThread")
    assert frame_text(main.frames[0]) == "send (torch/distributed/distributed_c10d.py:2753)"
    assert (main.frames[0].at, main.frames[0].native, main.frames[0].library) == (1, False, "")
    assert main.frames[1].function == "_exception_logger.<locals>.wrapper"
    assert frame_text(main.frames[-1]) == "<module> (train.py:426)"
    assert main.evidence.line == 4 and main.cite(main.frames[0]).cite() == "rank0.pyspy.txt:5"
    assert process.rank_hint is None and not process.truncated


@needs_samples
def test_locals_are_attached_to_their_frame_arguments_first():
    process = only_process(read(P2P / "rank0.locals.txt"))
    main = thread(process, "MainThread")
    send = main.frames[0]
    assert send.function == "send" and send.at == 1
    assert dict(send.locals)["dst"] == "1"
    assert [name for name, _ in send.locals] == ["tensor", "dst", "group", "tag", "group_dst",
                                                 "relevant_args", "work"]
    assert dict(send.locals)["tensor"] == "<Tensor at 0x7fae52967e30>"   # addresses kept, not masked
    assert dict(send.locals)["relevant_args"] == "(<Tensor at 0x7fae52967e30>)"
    wrapper = main.frames[1]
    assert wrapper.at == 11 and dict(wrapper.locals) == {
        "args": "(<Tensor at 0x7fae52967e30>)", "kwargs": '{"dst": 1}'}
    assert dict(main.frames[6].locals)["sub"] == '"progress"'
    assert main.frames[-1].function == "<module>" and main.frames[-1].locals == ()
    hook = thread(process, "debug_dump_hook")
    assert dict(hook.frames[0].locals) == {"dump_on_idle": "True", "idle_s": "4.487004518508911",
                                           "requested": "False"}


@needs_samples
def test_native_frames_carry_their_library():
    process = only_process(read(P2P / "rank0.native.txt"))
    main = thread(process, "MainThread")
    first = main.frames[0]
    assert (first.function, first.library, first.native, first.file, first.line) == (
        "0x7fae6bea3f16", "libc.so.6", True, "", 0)
    assert [(f.function, f.library) for f in main.frames[1:4]] == [
        ("pthread_cond_timedwait", "libc.so.6"),
        ("gloo::transport::tcp::UnboundBuffer::waitSend", "libtorch_cpu.so"),
        ("c10d::ProcessGroupGloo::SendWork::wait", "libtorch_cpu.so")]
    pybind = main.frames[4]
    assert pybind.function.startswith("pybind11::cpp_function::initialize<pybind11::cpp_function::")
    assert pybind.function.endswith("::{lambda(pybind11::detail::function_call&)#1}::_FUN")
    assert (pybind.library, pybind.native) == ("libtorch_python.so", True)
    send = main.frames[6]
    assert (frame_text(send), send.native, send.at) == (
        "send (torch/distributed/distributed_c10d.py:2753)", False, 7)
    assert (main.frames[-1].function, main.frames[-1].library) == ("0x7fae6be4524a", "libc.so.6")
    hook = thread(process, "debug_dump_hook")
    assert [f.native for f in hook.frames] == [True, True, False, False, False, False, True, True, True]
    assert hook.frames[1].library == "libpython3.11.so.1.0"


@pytest.mark.parametrize("path", real_dumps(TEXT_SUFFIXES) or [pytest.param(None, marks=pytest.mark.skip)],
                         ids=lambda p: f"{p.parent.name}/{p.name}" if p else "none")
def test_real_text_dump_reads_clean_and_cites_its_lines(path):
    facts = read(path)
    assert facts.diagnostics == []
    process = only_process(facts)
    assert process.pid is not None and process.python and process.threads
    assert any(t.name == "MainThread" for t in process.threads)
    assert_cites_own_lines(path, facts)


@pytest.mark.parametrize("path", sorted(p for p in FIXTURES.glob("*.txt")), ids=lambda p: p.name)
def test_fixture_frames_cite_their_lines(path):
    assert_cites_own_lines(path, read(path))


def test_rank_hint_comes_from_a_rank_local():
    dumps = [p for p in real_dumps((".locals.txt",)) if p.parent.name.startswith("real_")]
    if not dumps:
        pytest.skip("no corpus captures with locals yet")
    for path in dumps:
        process = only_process(read(path))
        expected = int(re.search(r"rank(\d+)", path.name).group(1))
        assert process.rank_hint == expected, path


def test_rank_hint_prefers_the_main_threads_outermost_frame(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text(
        'Process 9: python t.py\nPython v3.11.7 (/usr/bin/python3)\n\n'
        'Thread 12 (idle): "helper"\n    f (h.py:1)\n        Locals:\n            rank: 7\n'
        'Thread 9 (idle): "MainThread"\n'
        '    g (t.py:2)\n        Arguments:\n            global_rank: 5\n'
        '    main (t.py:3)\n        Locals:\n            RANK: "4"\n            rank: None\n')
    assert only_process(pyspy.parse(str(path), "d.txt")).rank_hint == 4
    path.write_text('Thread 12 (idle): "helper"\n    f (h.py:1)\n        Locals:\n            rank: 7\n'
                    'Thread 9 (idle): "MainThread"\n    g (t.py:2)\n')
    assert only_process(pyspy.parse(str(path), "d.txt")).rank_hint == 7


# ------------------------------------------------------------------ JSON

@needs_samples
def test_json_dump_matches_the_text_dump_and_cites_object_lines():
    process = only_process(read(P2P / "rank0.pyspy.json"))
    text = only_process(read(P2P / "rank0.pyspy.txt"))
    assert (process.source, process.pid, process.python) == ("py-spy-json", 19682, "")
    as_text = {t.tid: [(f.function, f.file, f.line) for f in t.frames] for t in text.threads}
    as_json = {t.tid: [(f.function, f.file, f.line) for f in t.frames] for t in process.threads}
    assert as_json == as_text
    assert {(t.tid, t.name, t.status, t.active) for t in process.threads} == {
        (t.tid, t.name, t.status, t.active) for t in text.threads}
    lines = (P2P / "rank0.pyspy.json").read_text().split("\n")
    for t in process.threads:
        assert lines[t.evidence.line - 1] == "  {"
        assert lines[t.evidence.line] == f'    "pid": {process.pid},'
        for f in t.frames:
            line = t.evidence.line + f.at
            assert lines[line - 1] == "      {" and lines[line] == f'        "name": "{f.function}",'


def test_older_json_without_newer_keys():
    facts = read(FIXTURES / "old.json")
    assert [p.pid for p in facts.processes] == [812, 813]
    first, second = facts.processes
    pool, main = first.threads
    assert (pool.tid, pool.name, pool.status, pool.active) == ("0x7F36A283E700", "", "active", True)
    assert (main.tid, main.name, main.status) == ("812", "MainThread", "idle")
    gather = main.frames[0]
    assert frame_text(gather) == "all_gather (torch/distributed/distributed_c10d.py:2060)"
    assert gather.locals == (("tensor_list", "[<Tensor at 0x7f00aa>, <Tensor at 0x7f00bb>]"),
                             ("group", "None"), ("work", "?"))
    assert main.frames[2].file == "/srv/app/train.py"        # no short_filename: the full one
    assert first.rank_hint == 3 and second.rank_hint is None
    lone = second.threads[0]
    assert (lone.tid, lone.status, lone.active, lone.frames) == ("813", "", None, ())
    assert facts.diagnostics == []


def test_native_json_frames():
    process = only_process(read(FIXTURES / "native.json"))
    assert process.command == "/opt/trainenv/bin/python -u /srv/job/train.py"
    frames = process.threads[0].frames
    assert [(f.function, f.file, f.line, f.library, f.native) for f in frames] == [
        ("0x7fae6bea3f16", "", 0, "libc.so.6", True),
        ("pthread_cond_timedwait", "", 0, "libc.so.6", True),
        ("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal",
         "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", 612, "libtorch_cuda.so", True),
        ("0x7fae6be4524a", "", 0, "?", True),
        ("send", "torch/distributed/distributed_c10d.py", 2753, "", False)]


def test_compact_and_concatenated_json(tmp_path):
    thread = {"pid": 5, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 5, "active": True,
              "owns_gil": True, "frames": [{"name": "f", "filename": "/a/b.py", "short_filename": "b.py",
                                            "line": 3, "locals": None}]}
    other = dict(thread, pid=6, os_thread_id=6)
    path = tmp_path / "c.json"
    path.write_text(json.dumps([thread]) + "\n" + json.dumps([other, 42]) + "\n")
    facts = pyspy.parse_json(str(path), "c.json")
    assert [(p.pid, p.threads[0].status, p.threads[0].evidence.line) for p in facts.processes] == [
        (5, "active+gil", 1), (6, "active+gil", 2)]
    assert [(d.line, "not a py-spy thread object" in d.message) for d in facts.diagnostics] == [(2, True)]


@pytest.mark.parametrize("content, line, message", [
    ('[\n  {\n    "pid": 1,\n    "thread_id": oops\n', 4, "invalid JSON"),
    ('[\n  {\n    "pid": 1,\n', 4, "invalid JSON"),
    ('\n{"pid": 1}', 2, "not a py-spy --json dump"),
    ('[1, 2]\n{"pid": 1}', 2, "invalid JSON"),
    ("[" * 100_000, 0, "invalid JSON"),
    ("   \n\n", 0, "empty file"),
])
def test_unreadable_json_is_an_input_error(tmp_path, content, line, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError) as caught:
        pyspy.parse_json(str(path), "bad.json")
    assert (caught.value.path, caught.value.line) == ("bad.json", line)
    assert caught.value.message.startswith(message)


# ------------------------------------------------------------------ odd text forms

def test_unnamed_hex_and_frameless_threads():
    process = only_process(read(FIXTURES / "unnamed_threads.txt"))
    assert (process.pid, process.python) == (4242, "3.8.10")
    assert [(t.tid, t.name, t.status, t.active, len(t.frames)) for t in process.threads] == [
        ("0x7F3A2B4C5700", "", "active", True, 4),
        ("0x7F3A2B4C6800", "", "idle", False, 0),
        ("4250", "Thread-1 (_read_thread)", "active+gil", True, 3),
        ("4242", "MainThread", "idle", False, 4)]
    lambda_frame, compiled = process.threads[2].frames[1:]
    assert (lambda_frame.function, lambda_frame.file, lambda_frame.line, lambda_frame.native) == (
        "<lambda>", "<string>", 0, False)
    assert (compiled.file, compiled.line, compiled.native) == ("generated_module", 0, False)


def test_subprocesses_make_one_process_each():
    facts = read(FIXTURES / "subprocesses.txt")
    assert facts.diagnostics == []
    assert [(p.pid, p.command, p.evidence.line, [t.tid for t in p.threads]) for p in facts.processes] == [
        (7001, "/usr/bin/python3 launcher.py", 1, ["7001"]),
        (7010, "/usr/bin/python3 -u worker.py --rank 0", 10, ["7010", "7015"]),
        (7011, "/usr/bin/python3 -u worker.py --rank 1", 22, ["7011"])]
    assert facts.processes[1].threads[0].frames[0].function == "all_reduce"


@needs_samples
def test_concatenated_dumps_keep_their_own_lines(tmp_path):
    first = (P2P / "rank0.pyspy.txt").read_text()
    second = (P2P / "rank1.native.txt").read_text()
    path = tmp_path / "both.txt"
    path.write_text(first + "\n" + second)
    facts = pyspy.parse(str(path), "both.txt")
    assert facts.diagnostics == []
    assert [p.pid for p in facts.processes] == [19682, only_process(read(P2P / "rank1.native.txt")).pid]
    offset = first.count("\n") + 1
    assert facts.processes[1].evidence.line == offset + 1
    assert_cites_own_lines(path, facts)


def test_truncated_dump_keeps_what_it_has():
    facts = read(FIXTURES / "truncated.txt")
    process = only_process(facts)
    assert process.truncated
    main, hook = process.threads
    assert [f.function for f in main.frames] == ["send", "_exception_logger.<locals>.wrapper",
                                                 "send_activations"]
    assert [f.function for f in hook.frames] == ["debug_dump_hook"]
    assert [(d.line, d.message) for d in facts.diagnostics] == [
        (10, "unrecognized line: 'Thread.run (thread'")]


@needs_samples
def test_ansi_colours_change_nothing(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("\n".join((P2P / "rank0.locals.txt").read_text().split("\n")[:20]) + "\n")
    coloured = read(FIXTURES / "ansi_locals.txt", "x.txt")
    expected = pyspy.parse(str(plain), "x.txt")
    assert coloured.diagnostics == expected.diagnostics == []
    assert coloured.processes == expected.processes


def test_dump_without_process_header():
    facts = read(FIXTURES / "headerless.txt")
    process = only_process(facts)
    assert (process.pid, process.command, process.evidence.line) == (None, "", 1)
    assert [(t.tid, t.name, t.status) for t in process.threads] == [
        ("31337", "MainThread", "active"), ("31340", "pin_memory", "idle")]
    assert [(d.line, d.severity) for d in facts.diagnostics] == [(1, "info")]


def test_junk_lines_are_diagnostics_at_their_own_lines():
    facts = read(FIXTURES / "junk.txt")
    assert [(d.line, d.message.split(":")[0]) for d in facts.diagnostics] == [
        (6, "unrecognized line"), (8, "unrecognized line"), (11, "unrecognized line"),
        (12, "unrecognized line"), (14, "unrecognized line")]
    process = only_process(facts)
    main, broken, third = process.threads
    assert [(f.function, f.at) for f in main.frames] == [("barrier", 1), ("train", 3)]
    assert (broken.tid, broken.evidence.line, [f.function for f in broken.frames]) == ("", 8, ["wait"])
    assert [(f.function, f.at) for f in third.frames] == [("run", 3)]


def test_cpp_names_keep_their_parentheses():
    frames = only_process(read(FIXTURES / "native_cpp.txt")).threads[0].frames
    assert [(f.function, f.file, f.line, f.library, f.native) for f in frames] == [
        ("__GI___poll", "", 0, "libc.so.6", True),
        ("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal",
         "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", 612, "", True),
        ("std::_Function_handler<void (), c10d::(anonymous namespace)::runLoop()::{lambda()#1}>::_M_invoke",
         "", 0, "libtorch_cuda.so", True),
        ("operator()", "", 0, "libtorch_cpu.so", True),
        ("at::native::(anonymous namespace)::copy_kernel<std::ratio<1l, 1000l> >::{lambda(long, long)#1}"
         "::operator() const", "", 0, "libtorch_cpu.so", True),
        ("0x7f0c1a2b3c4d", "", 0, "?", True),
        ("wait", "torch/distributed/distributed_c10d.py", 4193, "", False),
        ("step", "/home/me/proj (copy)/train.py", 3, "", False),
        ("time_sleep", "", 0, "python3.12", True),
        ("0x7f0c1a2b9e10", "", 0, "libc.so.6", True)]


def test_overlong_line_is_skipped_and_later_lines_keep_their_place(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text('Process 1: p\nPython v3.11.7 (/p)\n\nThread 1 (idle): "MainThread"\n'
                    "    f (a.py:1)\n" + "    g (" + "x" * 10_000_000 + ".py:2)\n" + "    h (a.py:3)\n")
    facts = pyspy.parse(str(path), "long.txt")
    assert [(d.line, "skipped" in d.message) for d in facts.diagnostics] == [(6, True)]
    main = only_process(facts).threads[0]
    assert [(f.function, f.at) for f in main.frames] == [("f", 1), ("h", 3)]


def test_absurd_numbers_are_not_ids_or_line_numbers(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text(f"Process {'9' * 5000}: p\n"
                    f'Thread 4 (idle): "MainThread"\n    f (a.py:{"9" * 5000})\n    g (b.py:{"1" * 12})\n')
    process = only_process(pyspy.parse(str(path), "d.txt"))
    assert process.pid is None
    assert [(f.function, f.file, f.line) for f in process.threads[0].frames] == [
        ("f", "a.py:" + "9" * 5000, 0), ("g", "b.py:" + "1" * 12, 0)]


def test_the_same_process_dumped_twice_is_two_dumps(tmp_path):
    thread = {"pid": 5, "thread_id": 1, "os_thread_id": 5, "active": False, "owns_gil": False, "frames": []}
    path = tmp_path / "twice.json"
    path.write_text(json.dumps([thread], indent=2) + "\n" + json.dumps([thread], indent=2) + "\n")
    assert [(p.pid, p.threads[0].evidence.line) for p in pyspy.parse_json(str(path), "t").processes] == [
        (5, 2), (5, 12)]
    text = tmp_path / "twice.txt"
    text.write_text('Process 5: p\nPython v3.11.7 (/p)\n\nThread 5 (idle): "MainThread"\n    f (a.py:1)\n' * 2)
    assert [(p.pid, p.evidence.line) for p in pyspy.parse(str(text), "t").processes] == [(5, 1), (5, 6)]


def test_crlf_bom_and_gzip(tmp_path):
    text = 'Process 3: p\r\nPython v3.12.1 (/p)\r\n\r\nThread 3 (active): "MainThread"\r\n    f (a.py:1)\r\n'
    path = tmp_path / "d.txt.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + text.encode()))
    process = only_process(read(path))
    assert (process.pid, process.python, process.threads[0].frames[0].line) == (3, "3.12.1", 1)


def test_empty_file_is_an_input_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n  \n")
    with pytest.raises(InputError, match="empty file"):
        pyspy.parse(str(path), "empty.txt")


def test_binary_junk_gives_bounded_diagnostics(tmp_path):
    path = tmp_path / "junk.bin"
    path.write_bytes(bytes(random.Random(1).randrange(256) for _ in range(300_000)))
    facts = pyspy.parse(str(path), "junk.bin")
    assert facts.processes == [] or all(not p.threads for p in facts.processes)
    assert len(facts.diagnostics) <= pyspy.MAX_LINE_DIAGNOSTICS + 2


# ------------------------------------------------------------------ the cache

def perturb(text, seed):
    """The same stacks as another rank would print them: new pid, tids, addresses."""
    rnd = random.Random(seed)
    ids = {}

    def new_id(match):
        return ids.setdefault(match.group(0), str(rnd.randrange(100, 4_000_000)))

    text = re.sub(r"(?<=Process )\d+|(?<=Thread )\d+", new_id, text)
    return re.sub(r"0x[0-9a-f]+", lambda m: ids.setdefault(m.group(0), hex(rnd.randrange(1 << 47))), text)


@pytest.mark.parametrize("name", ["rank0.native.txt", "rank0.locals.txt", "rank0.pyspy.txt"])
@needs_samples
def test_cached_blocks_give_each_dump_its_own_values(tmp_path, name):
    original = (P2P / name).read_text()
    paths = []
    for seed in range(3):
        path = tmp_path / f"{seed}.txt"
        path.write_text(perturb(original, seed))
        paths.append(path)
    warm = [pyspy.parse(str(p), "d.txt") for p in paths]      # blocks parsed once, reused twice
    cold = []
    for p in paths:
        pyspy.clear_caches()
        cold.append(pyspy.parse(str(p), "d.txt"))
    assert [f.processes for f in warm] == [f.processes for f in cold]
    for path, facts in zip(paths, warm):
        text = path.read_text()
        for t in only_process(facts).threads:
            assert f"Thread {t.tid} " in text
            for f in t.frames:
                if f.function.startswith("0x"):
                    assert f"    {f.function} ({f.library})" in text
                for _, value in f.locals:
                    for address in re.findall(r"0x[0-9a-f]+", value):
                        assert address in text
    assert len({only_process(f).pid for f in warm}) == 3


def test_masked_values_in_junk_lines_do_not_shift_later_frames(tmp_path):
    path = tmp_path / "d.txt"
    for address in ("0x1111", "0x2222"):
        path.write_text('Thread 5 (idle): "MainThread"\n    0xaaaa (libc.so.6)\n'
                        f"junk with {address} in it\n    {address}0 (libc.so.6)\n"
                        "        Locals:\n            obj: <X at 0xbeef>\n")
        frames = only_process(pyspy.parse(str(path), "d.txt")).threads[0].frames
        assert [f.function for f in frames] == ["0xaaaa", f"{address}0"]
        assert frames[1].locals == (("obj", "<X at 0xbeef>"),)


def test_nothing_from_lark_escapes(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text((FIXTURES / "junk.txt").read_text() + (FIXTURES / "native_cpp.txt").read_text())
    seen = []

    def walk(value):
        if isinstance(value, str):
            assert type(value) is str, type(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif is_dataclass(value):
            seen.append(value)
            for field in fields(value):
                walk(getattr(value, field.name))
        else:
            assert value is None or type(value) in (int, bool, float), type(value)

    facts = pyspy.parse(str(path), "d.txt")
    walk(facts.processes)
    walk(facts.diagnostics)
    assert len(seen) > 20


# ------------------------------------------------------------------ hooks

def test_hooks_claim_and_parse_only_py_spy(tmp_path):
    plugins = Plugins(autoload=False, builtins=("forensics.ingest.pyspy",))
    path = FIXTURES / "headerless.txt"
    kinds = plugins.hook.forensics_sniff(path=str(path), head=read_head(str(path)))
    assert kinds == [pyspy.KIND]
    kind = kinds[0]
    facts = plugins.hook.forensics_parse(artifact=Artifact(kind, str(path), "headerless.txt"))
    assert facts.kind == pyspy.KIND and facts.processes[0].threads
    facts = plugins.hook.forensics_parse(
        artifact=Artifact(pyspy.KIND_JSON, str(FIXTURES / "old.json"), "old.json"))
    assert facts.kind == pyspy.KIND_JSON and facts.processes[0].source == "py-spy-json"
    assert plugins.hook.forensics_parse(artifact=Artifact("gdb", str(path), "x")) is None


# ------------------------------------------------------------------ garbage in, no crash out

def _seeds():
    found = real_dumps(TEXT_SUFFIXES + (".pyspy.json",))[:12]
    found += sorted(FIXTURES.iterdir())
    return [p.read_bytes() if not p.name.endswith(".gz") else gzip.decompress(p.read_bytes()) for p in found]


SEEDS = _seeds()


@st.composite
def mangled(draw):
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 8))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["cut", "insert", "delete", "flip", "duplicate"]))
        if action == "cut":
            del data[at:]
        elif action == "insert":
            data[at:at] = draw(st.one_of(
                st.binary(max_size=40),
                st.sampled_from([b"\n", b"    ", b"        Locals:\n", b"Thread ", b"Process 1: x\n",
                                 b"\x00", b"\x01", b"0x", b"(", b")", b"\x1b[1m", b"\xff\xfe", b'"',
                                 b"{", b"]", b"\r", b"9" * 5000, b":" + b"7" * 20 + b")\n"])))
        elif action == "delete":
            del data[at:at + draw(st.integers(1, 50))]
        elif action == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif action == "duplicate":
            data[at:at] = data[max(0, at - 200):at]
    return bytes(data)


def _parse_both(data: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".dump") as handle:
        handle.write(data)
        handle.flush()
        pyspy.sniff(handle.name, data[:65536])
        for reader in (pyspy.parse, pyspy.parse_json):
            try:
                facts = reader(handle.name, "fuzz")
            except InputError:
                continue
            for process in facts.processes:
                for t in process.threads:
                    assert all(f.at >= 0 for f in t.frames)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(mangled())
def test_mangled_real_dumps_never_crash(data):
    _parse_both(data)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=5000))
def test_random_bytes_never_crash(data):
    _parse_both(data)


def test_ten_megabyte_line_never_crashes():
    _parse_both(b"Process 1: x\nPython v3.11.7 (/p)\n\n" + b"Thread 9 (idle)" + b"A" * 10_000_000 + b"\n")
    _parse_both(b"[" + b" " * 10_000_000 + b"]")
