"""The gdb reader: `thread apply all bt` / `py-bt` dumps, real and hand-made."""

import gzip
import json
import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.ingest import gdb
from forensics.ingest.textio import InputError, read_head
from forensics.model import Artifact, Diagnostic, Evidence, Frame, ProcessDump, ThreadStack

from conftest import CORPUS, SAMPLES
from helpers import mutate_lines

FIXTURES = Path(__file__).parent / "fixtures" / "gdb"
P2P = SAMPLES / "p2p_cycle_2" / "rank0.gdb.txt"
HEALTHY = SAMPLES / "healthy_then_mismatch_at_exit"
LIBTORCH_CPU = "/opt/trainenv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"

REAL_DUMPS = sorted(SAMPLES.glob("*/rank*.gdb*.txt")) + sorted(CORPUS.glob("real_*/rank*.gdb*.txt"))

needs_samples = pytest.mark.skipif(not P2P.exists(), reason="shared samples not available")


def parse(path, display=None):
    return gdb.parse(str(path), display or Path(path).name)


def only_process(facts):
    assert len(facts.processes) == 1, facts.processes
    return facts.processes[0]


def thread(process, tid):
    return next(t for t in process.threads if t.tid == tid)


def file_line(path, number):
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace").split("\n")[number - 1]


# ---------------------------------------------------------------- sniffing


@needs_samples
def test_sniff_claims_gdb_dumps_only():
    for path in sorted(SAMPLES.glob("*/*")) + sorted(CORPUS.glob("real_*/*")):
        if path.is_file():
            expected = ".gdb" in path.name and path.name.endswith(".txt")
            assert gdb.sniff(str(path), read_head(str(path))) is expected, path


def test_sniff_hand_made_forms():
    for name in ("old_gdb.txt", "single_process.txt", "multi_inferior.txt", "wrapped_ansi.txt",
                 "session.txt", "pybt.txt", "headerless_bt.txt", "truncated.txt"):
        path = FIXTURES / name
        assert gdb.sniff(str(path), path.read_bytes()), name
    assert not gdb.sniff("x", b'Thread 0x7F3A (idle): "MainThread"\n    wait (threading.py:320)\n')
    assert not gdb.sniff("x", b"#0 all_reduce from pytorch/torch/distributed/distributed_c10d.py:2696\n")
    assert not gdb.sniff("x", b"\x00\x01\x02" * 100)
    coloured = b"Thread 1 (Thread \x1b[34m0x7f1c\x1b[m (LWP 1200) \"python\"):\n"
    assert gdb.sniff("x", coloured)


def test_hooks(tmp_path):
    path = FIXTURES / "single_process.txt"
    assert gdb.forensics_sniff(path=str(path), head=path.read_bytes()) == "gdb"
    assert gdb.forensics_sniff(path="x", head=b'{"0": {"current_op": "send"}}') is None
    facts = gdb.forensics_parse(artifact=Artifact("gdb", str(path), "dumps/r0.txt"))
    assert facts.kind == "gdb" and facts.path == "dumps/r0.txt"
    assert facts.processes[0].path == "dumps/r0.txt"
    assert facts.processes[0].threads[0].evidence == Evidence("dumps/r0.txt", 1, "Thread 1 (process 4242):")
    assert gdb.forensics_parse(artifact=Artifact("snapshot", str(path), "r0.txt")) is None


# ---------------------------------------------------------------- the real samples


@needs_samples
def test_p2p_sample_processes_and_threads():
    facts = parse(P2P)
    assert facts.kind == "gdb" and facts.diagnostics == []
    process = only_process(facts)
    assert (process.source, process.path, process.pid, process.truncated) == (
        "gdb", "rank0.gdb.txt", 19682, False)
    assert process.evidence == Evidence("rank0.gdb.txt", 104, "[Inferior 1 (process 19682) detached]")
    assert [(t.tid, t.name, t.evidence.line, len(t.frames)) for t in process.threads] == [
        ("19695", "pt_gloo_runloop", 18, 10), ("19694", "pt_gloo_runloop", 30, 10),
        ("19691", "gloo_tcp_loop", 42, 5), ("19690", "python", 49, 16), ("19682", "python", 67, 36)]
    assert process.threads[0].evidence.text == 'Thread 5 (Thread 0x7fae46ffd6c0 (LWP 19695) "pt_gloo_runloop"):'


@needs_samples
def test_p2p_sample_main_thread_frames():
    main = thread(only_process(parse(P2P)), "19682")
    wait_send = main.frames[5]
    assert wait_send == Frame(
        "gloo::transport::tcp::UnboundBuffer::waitSend(int*, std::chrono::duration<long, std::ratio<1l, 1000l> >)",
        library=LIBTORCH_CPU, native=True, at=6)
    assert main.frames[6].function == (
        "c10d::ProcessGroupGloo::SendWork::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)")
    assert main.frames[7].function.endswith(
        "::{lambda(pybind11::detail::function_call&)#1}::_FUN(pybind11::detail::function_call&)")
    assert main.frames[7].library.endswith("libtorch_python.so")
    first = main.frames[0]
    assert (first.function, first.file, first.line, first.library) == (
        "__futex_abstimed_wait_common64", "./nptl/futex-internal.c", 57, "")
    assert first.locals[:3] == (("private", "0"), ("cancel", "true"), ("abstime", "0x…"))
    assert main.frames[4].locals == (("cond", "0x…"), ("mutex", "0x…"), ("abstime", "0x…"))
    assert main.frames[1].locals[0] == ("futex_word", "0x…")  # `futex_word@entry=` folded
    assert main.frames[-1] == Frame("_start", native=True, at=36)
    assert main.cite(wait_send) == Evidence("rank0.gdb.txt", 73, wait_send.function)


@needs_samples
def test_gloo_worker_stack():
    runloop = only_process(parse(P2P)).threads[0]
    assert [f.function for f in runloop.frames[5:]] == [
        "std::condition_variable::wait(std::unique_lock<std::mutex>&)",
        "c10d::ProcessGroupGloo::runLoop(int)", "??", "start_thread", "clone3"]
    assert runloop.frames[7].library == "/lib/x86_64-linux-gnu/libstdc++.so.6"
    assert runloop.frames[8].locals == (("arg", "<optimized out>"),)


@needs_samples
def test_pybt_sample():
    process = only_process(parse(HEALTHY / "rank1.gdb_pybt.txt"))
    assert process.pid == 21167 and not process.truncated
    assert [len(t.frames) for t in process.threads] == [0, 0, 0, 0, 0, 0, 4, 8]
    main = thread(process, "21167")
    assert main.frames[0] == Frame("<built-in method allreduce>", native=True, at=2)
    assert main.frames[1] == Frame(
        "all_reduce", "/opt/trainenv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
        3245, at=3)
    assert [f.function for f in main.frames[2:]] == [
        "wrapper", "sync_gradients", "train_step", "train", "main", "<module>"]
    assert main.frames[-1] == Frame("<module>", "/srv/job/train.py", 0, at=15)
    hook = thread(process, "21184")
    assert [(f.function, f.line) for f in hook.frames] == [
        ("debug_dump_hook", 125), ("run", 982), ("_bootstrap_inner", 1045), ("_bootstrap", 1002)]


@needs_samples
def test_pybt_sample_with_import_stack():
    process = only_process(parse(HEALTHY / "rank0.gdb_pybt.txt"))
    hook = thread(process, "21182")
    assert len(hook.frames) == 46
    assert hook.frames[3] == Frame("<built-in method exec>", native=True, at=8)
    assert hook.frames[4] == Frame("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241, at=9)
    assert thread(process, "21166").frames == ()


@pytest.mark.skipif(not REAL_DUMPS, reason="no real dumps")
@pytest.mark.parametrize("path", REAL_DUMPS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_dumps_parse_cleanly_and_frames_cite_their_lines(path):
    facts = parse(path)
    assert facts.diagnostics == []
    process = only_process(facts)
    assert not process.truncated and process.threads
    pid_map = path.parent / "pid_map.json"
    if pid_map.exists():
        rank = path.name[4:path.name.index(".")]
        assert process.pid == json.loads(pid_map.read_text())["ranks"][rank]["pid"]
    lines = path.read_text(errors="replace").split("\n")
    for stack in process.threads:
        assert lines[stack.evidence.line - 1] == stack.evidence.text
        assert stack.tid in stack.evidence.text
        for level, frame in enumerate(stack.frames):
            line = lines[stack.cite(frame).line - 1]
            if frame.file and not frame.native:
                assert line.startswith(f'  File "{frame.file}", line ')
            elif frame.function.startswith("<built-in"):
                assert line.startswith("  " + frame.function[:-1])
            elif frame.function in ("Waiting for the GIL", "Garbage-collecting") or frame.function.startswith("("):
                assert line.strip() == frame.function  # py-bt's markers among Python frames
            else:
                assert line.startswith(f"#{level} ") and frame.function in line


@needs_samples
def test_identical_stacks_share_one_parsed_tuple():
    """Masked addresses make equal stacks equal: parsed once, shared by every thread and file."""
    first = only_process(parse(P2P))
    second = only_process(parse(SAMPLES / "p2p_cycle_2" / "rank1.gdb.txt"))
    assert first.threads[0].frames is first.threads[1].frames
    assert first.threads[2].frames is second.threads[2].frames


# ---------------------------------------------------------------- hand-made forms


def test_old_gdb_without_names():
    facts = parse(FIXTURES / "old_gdb.txt")
    assert facts.diagnostics == []
    process = only_process(facts)
    assert process.pid == 14210  # no attach or detach line: the LWP of thread 1
    assert not process.truncated  # `Backtrace stopped:` is a normal end
    assert [(t.tid, t.name, t.evidence.line) for t in process.threads] == [
        ("14215", "", 9), ("14212", "", 17), ("14210", "", 23)]
    waiter, crashed, main = process.threads
    assert [f.function for f in waiter.frames] == [
        "pthread_cond_wait@@GLIBC_2.3.2",
        "std::condition_variable::wait(std::unique_lock<std::mutex>&)",
        "std::condition_variable::wait<rocksdb::WriteThread::BlockingAwaitState("
        "rocksdb::WriteThread::Writer*, uint8_t)::__lambda4>",
        "rocksdb::WriteThread::BlockingAwaitState", "start_thread", "clone"]
    inlined = waiter.frames[3]
    assert (inlined.file, inlined.line, inlined.at) == ("db/write_thread.cc", 45, 4)
    assert inlined.locals == (("this", "0x…"), ("w", "0x…"), ("goal_mask", "30 '\\036'"))
    assert waiter.frames[2].locals == (("__p", "..."), ("__lock", "..."), ("this", "0x…"))
    assert crashed.frames == (Frame("raise", library="/lib64/libc.so.6", native=True, at=1),
                              Frame("<signal handler called>", native=True, at=2),
                              Frame("??", native=True, at=3))
    assert main.frames[0].locals == (("sig", "6"),)


def test_single_threaded_process_target():
    process = only_process(parse(FIXTURES / "single_process.txt"))
    assert process.pid == 4242
    assert [(t.tid, t.name) for t in process.threads] == [("1", "")]
    assert process.evidence == Evidence("single_process.txt", 1, "Thread 1 (process 4242):")
    assert [(f.function, f.file, f.line) for f in process.threads[0].frames] == [
        ("__GI___poll", "../sysdeps/unix/sysv/linux/poll.c", 29), ("main", "server.c", 40)]


def test_crlf_file_reads_like_lf():
    crlf, lf = parse(FIXTURES / "crlf.txt", "x"), parse(FIXTURES / "single_process.txt", "x")
    assert crlf.processes == lf.processes and crlf.diagnostics == []


def test_several_inferiors_are_several_processes():
    facts = parse(FIXTURES / "multi_inferior.txt")
    assert facts.diagnostics == []
    assert [(p.pid, [t.tid for t in p.threads], p.evidence.line) for p in facts.processes] == [
        (5000, ["5002", "5000"], 13), (4000, ["4002", "4000"], 12)]
    assert facts.processes[0].threads[0].evidence.text.startswith("Thread 2.2 (")


def test_wrapped_lines_templates_operators_and_colours():
    facts = parse(FIXTURES / "wrapped_ansi.txt")
    assert facts.diagnostics == []
    watchdog, heartbeat, main = only_process(facts).threads
    assert (watchdog.tid, watchdog.name, heartbeat.name) == ("1234", "pt_nccl_watchdg", "pt_nccl_heartbt")
    wrapped = watchdog.frames[2]
    assert wrapped == Frame("c10d::ProcessGroupNCCL::WorkNCCL::handleNCCLGuard()",
                            library="/opt/venv/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so",
                            native=True, at=4)
    assert watchdog.frames[1].library == "/lib/x86_64-linux-gnu/libc.so.6"
    assert [f.at for f in watchdog.frames] == [1, 2, 4, 6, 8, 9, 10, 11]
    assert watchdog.frames[4].function == (
        "std::_Function_handler<void (), c10d::ProcessGroupNCCL::Watchdog::run()::{lambda()#1}>"
        "::_M_invoke(std::_Any_data const&)")
    assert watchdog.frames[5].function == "(anonymous namespace)::execute_native_thread_routine"
    assert [f.function for f in heartbeat.frames[1:]] == [
        "c10d::ProcessGroupNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        "std::ratio<1l, 1000l> > >) [clone .cold.1]",
        "foo::Bar::operator()",
        "std::operator<< <std::char_traits<char> >",
        "pybind11::cpp_function::initialize<bool>(bool (*)(int))::"
        "{lambda(pybind11::detail::function_call&)#1}::_FUN(pybind11::detail::function_call&)"]
    operator = heartbeat.frames[2]
    assert (operator.file, operator.line, operator.at) == ("bar.cc", 120, 3)
    assert operator.locals == (("this", "0x…"), ("timeout", "..."))
    assert heartbeat.frames[3].locals == (("__out", "..."), ("__s", '0x… "x("'))
    assert main.frames[0] == Frame("__futex_abstimed_wait_common",
                                   library="/lib/x86_64-linux-gnu/libc.so.6", native=True, at=1)
    assert "\x1b" not in main.evidence.text


def test_a_session_typed_by_a_person_holds_three_processes():
    facts = parse(FIXTURES / "session.txt")
    assert facts.diagnostics == []
    first, second, third = facts.processes
    assert (first.pid, first.evidence) == (3001, Evidence("session.txt", 16, "Attaching to process 3001"))
    assert [t.tid for t in first.threads] == ["3005", "3001"]
    assert first.threads[1].frames[1].function.startswith("gloo::transport::tcp::UnboundBuffer::waitRecv(")
    assert (second.pid, second.command, second.evidence.line) == (3002, "/usr/bin/python3.11", 37)
    assert [(t.tid, t.name) for t in second.threads] == [("3006", ""), ("3002", "")]
    # No banner, no attach: the numbering starting again at 2 after thread 1 is a new dump.
    assert third.pid == 4001 and [t.tid for t in third.threads] == ["4010", "4001"]
    assert [t.evidence.line for t in third.threads] == [54, 57]
    assert not any(p.truncated for p in facts.processes)


def test_ascending_dump_is_one_process():
    process = only_process(parse(FIXTURES / "ascending.txt"))
    assert [t.tid for t in process.threads] == ["3001", "3005", "3006"] and process.pid == 3001


def test_pybt_markers_and_gdb_errors():
    facts = parse(FIXTURES / "pybt.txt")
    assert [(d.line, d.severity, d.message.split(" <")[0]) for d in facts.diagnostics] == [
        (23, "info", "gdb: Python Exception"),
        (24, "info", "gdb: Error occurred in Python: Cannot access memory at address 0x7f002a527000")]
    process = only_process(facts)
    assert process.pid == 21167
    runloop, hook, collector, main = process.threads
    assert runloop.frames == ()
    assert hook.frames == (
        Frame("Waiting for the GIL", native=True, at=2),
        Frame("debug_dump_hook", "/srv/job/train.py", 125, at=3),
        Frame("(frame information optimized out)", at=5),
        Frame("run", "/usr/lib/python3.11/threading.py", 982, at=6))
    assert collector.frames == (
        Frame("Garbage-collecting", native=True, at=2),
        Frame("<built-in function sleep>", native=True, at=3),
        Frame("(unable to read python frame information)", at=4))
    assert main.frames[0] == Frame("<built-in method allreduce>", native=True, at=2)
    assert main.frames[-1] == Frame("<module>", "/srv/job/train.py", 0, at=5)


def test_junk_lines_are_diagnostics_at_their_lines():
    facts = parse(FIXTURES / "junk.txt")
    assert [(d.line, d.message) for d in facts.diagnostics] == [
        (3, "unbalanced argument list: #1  this is not a frame ("),
        (4, "unrecognized line: hello from a stray print"),
        (9, "unrecognized line: $1 = 42")]
    loop, main = only_process(facts).threads
    # The frame after the junk still cites its own line.
    assert [(f.function, loop.cite(f).line) for f in loop.frames] == [
        ("epoll_wait", 2), ("this is not a frame", 3), ("start_thread", 5)]
    assert [f.function for f in main.frames] == ["select"]


def test_bt_full_locals_are_not_junk():
    facts = parse(FIXTURES / "bt_full.txt")
    assert facts.diagnostics == []
    frames = only_process(facts).threads[0].frames
    assert [(f.function, f.at) for f in frames] == [
        ("__GI___clock_nanosleep", 1), ("__GI___nanosleep", 5), ("main", 7)]


def test_frames_without_a_thread_header():
    process = only_process(parse(FIXTURES / "headerless_bt.txt"))
    assert process.pid is None
    stack = process.threads[0]
    assert (stack.tid, stack.evidence.line) == ("", 1)
    assert [(f.function, stack.cite(f).line) for f in stack.frames] == [("__GI___poll", 1), ("main", 2)]


# ---------------------------------------------------------------- truncation


def test_truncated_fixture():
    facts = parse(FIXTURES / "truncated.txt")
    process = only_process(facts)
    assert process.truncated and process.pid is None
    assert [len(t.frames) for t in process.threads] == [2, 2]
    assert [d.line for d in facts.diagnostics] == [11]


@needs_samples
def test_truncation_rules(tmp_path):
    text = P2P.read_text()
    lines = text.split("\n")

    def parse_text(body):
        path = tmp_path / "cut.txt"
        path.write_text(body)
        return only_process(parse(path))

    assert not parse_text(text).truncated
    at_line = parse_text("\n".join(lines[:35]) + "\n")  # stops inside thread 4 (of 5)
    assert at_line.truncated and [t.tid for t in at_line.threads] == ["19695", "19694"]
    mid_line = parse_text(text[:text.index("#20 ") + 30])  # stops inside thread 1
    assert mid_line.truncated and len(mid_line.threads) == 5
    header_only = parse_text("\n".join(lines[:48]) + "\n\nThread 2 (Thread 0x7fae4cf296c0 (LWP 19690) \"python\"):\n")
    assert header_only.truncated
    no_detach = parse_text("\n".join(lines[:103]) + "\n")  # reached thread 1, no detach line
    assert not no_detach.truncated and no_detach.pid == 19682


# ---------------------------------------------------------------- hostile input


def test_empty_file_is_an_input_error(tmp_path):
    for content in (b"", b"\n \n\t\n"):
        path = tmp_path / "empty.txt"
        path.write_bytes(content)
        with pytest.raises(InputError) as err:
            gdb.parse(str(path), "empty.txt")
        assert err.value.message == "empty file" and err.value.path == "empty.txt"


def test_file_without_backtraces(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("ptrace: Operation not permitted.\n")
    facts = gdb.parse(str(path), "x.txt")
    assert facts.processes == []
    assert [(d.line, d.message) for d in facts.diagnostics] == [
        (1, "gdb: ptrace: Operation not permitted."), (0, "no thread backtraces found")]


@needs_samples
def test_a_ten_megabyte_line_is_skipped(tmp_path):
    lines = P2P.read_text().split("\n")
    lines.insert(20, "#3  " + "x" * 10_000_000)
    path = tmp_path / "long.txt"
    path.write_text("\n".join(lines))
    facts = gdb.parse(str(path), "long.txt")
    assert [(d.line, d.message) for d in facts.diagnostics] == [(21, "line longer than 64 KiB: skipped")]
    process = only_process(facts)
    assert [t.evidence.line for t in process.threads] == [18, 31, 43, 50, 68]
    first = process.threads[0]
    assert [first.cite(f).line for f in first.frames] == [19, 20, 22, 23, 24, 25, 26, 27, 28, 29]


@needs_samples
def test_binary_junk_and_bad_utf8(tmp_path):
    data = P2P.read_bytes().replace(b'"gloo_tcp_loop"', b'"gloo\xff\xfe_loop"')
    junk = bytes(random.Random(7).randrange(256) for _ in range(3000))
    path = tmp_path / "junk.txt"
    path.write_bytes(data[:5000] + b"\n" + junk + b"\n" + data[5000:])
    facts = gdb.parse(str(path), "junk.txt")
    assert facts.diagnostics  # the junk is reported, not silently dropped
    names = [t.name for p in facts.processes for t in p.threads]
    assert "gloo\ufffd\ufffd_loop" in names
    assert any(t.tid == "19682" and len(t.frames) == 36 for p in facts.processes for t in p.threads)


@needs_samples
def test_gzip_dump(tmp_path):
    path = tmp_path / "rank0.gdb.txt.gz"
    path.write_bytes(gzip.compress(P2P.read_bytes()))
    assert parse(path, "rank0.gdb.txt").processes == parse(P2P).processes


def _plain(value):
    """Every value in a result is a model object or a builtin: no lark Tree or Token."""
    if isinstance(value, (ProcessDump, ThreadStack, Frame, Evidence, Diagnostic)):
        return all(_plain(getattr(value, name)) for name in value.__slots__)
    if isinstance(value, tuple):
        return all(_plain(item) for item in value)
    return value is None or type(value) in (str, int, bool)


_SOURCE_LINES = {}


def _source_lines(path):
    if path not in _SOURCE_LINES:
        _SOURCE_LINES[path] = path.read_bytes().split(b"\n")
    return _SOURCE_LINES[path]


_MUTATION = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate"), st.integers(0, 10_000)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.integers(0, 200)),
    st.tuples(st.just("bytes"), st.integers(0, 10_000), st.binary(min_size=1, max_size=200)),
    st.tuples(st.just("huge"), st.integers(0, 10_000)),
)
_INSERTS = {"huge": b"#1  0x00 in " + b"f" * 10_000_000}


@pytest.mark.skipif(not REAL_DUMPS, reason="no real dumps")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 10_000), mutations=st.lists(_MUTATION, min_size=1, max_size=8),
       cut=st.none() | st.integers(0, 20_000))
def test_fuzzed_real_dumps_never_crash(which, mutations, cut):
    path = REAL_DUMPS[which % len(REAL_DUMPS)]
    lines = mutate_lines(_source_lines(path), mutations, _INSERTS)
    data = b"\n".join(lines)
    if cut is not None:
        data = data[:cut]
    with tempfile.TemporaryDirectory() as folder:
        target = os.path.join(folder, "fuzz.txt")
        with open(target, "wb") as handle:
            handle.write(data)
        try:
            facts = gdb.parse(target, "fuzz.txt")
        except InputError:
            return
    total = data.count(b"\n") + 1
    for process in facts.processes:
        assert _plain(process)
        for stack in process.threads:
            assert 1 <= stack.evidence.line <= total
            for frame in stack.frames:
                assert frame.at >= 0 and 1 <= stack.cite(frame).line <= total
    assert all(_plain(d) and 0 <= d.line <= total for d in facts.diagnostics)


def test_masked_text_is_read_back_from_the_line(tmp_path):
    path = tmp_path / "names.txt"
    path.write_text('Attaching to process 11\nptrace: Operation not permitted.\n'
                    'Attaching to program: /opt/process 0x1/python, process 12\n\n'
                    'Thread 1 (Thread 0x7f00 (LWP 12) "worker-0x1f"):\n'
                    '#0  0x00007f5b1c6d6f36 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6\n')
    process = only_process(gdb.parse(str(path), "names.txt"))
    assert (process.pid, process.command) == (12, "/opt/process 0x1/python")
    assert process.threads[0].name == "worker-0x1f"


def test_caches_are_bounded():
    cache = gdb._Cache(6400)
    cache.put("x" * 101, 1)
    assert not cache  # larger than budget/64: not kept
    for i in range(100):
        cache.put(f"{i:0100d}", i)
    assert len(cache) <= 64 and cache.used <= 6400


def test_banner_and_prompt_start_new_dumps(tmp_path):
    frame = "#0  0x00007f5b1c6d6f36 in epoll_wait () from /lib/x86_64-linux-gnu/libc.so.6\n"
    path = tmp_path / "three.txt"
    path.write_text(f"Thread 3 (LWP 12):\n{frame}GNU gdb (GDB) 13.1\n\nThread 2 (LWP 21):\n{frame}"
                    f"(gdb) thread apply all bt\n\nThread 1 (LWP 30):\n{frame}(gdb) info threads\n")
    facts = gdb.parse(str(path), "three.txt")
    assert facts.diagnostics == []
    assert [([t.tid for t in p.threads], p.pid) for p in facts.processes] == [
        (["12"], None), (["21"], None), (["30"], 30)]
