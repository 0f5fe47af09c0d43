"""The pystack reader: real `pystack remote` / `pystack core` captures of a hung
Gloo job, pystack's own documented outputs, odd forms from its formatter, garbage."""

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import mutate_lines, parse_bytes
from forensics import model as m
from forensics.ingest import gdb, pyspy, pystack, stacks
from forensics.ingest.textio import InputError, read_head
from forensics.model import Artifact
from forensics.plugins import Plugins

FIXTURES = Path(__file__).parent / "fixtures" / "pystack"
STALL = FIXTURES / "gloo_all_reduce_stall"
REAL = sorted(STALL.iterdir())


def read(path, display=None):
    path = str(path)
    assert pystack.sniff(path, read_head(path)) == pystack.KIND, f"{path} not claimed"
    return pystack.parse(path, display or Path(path).name)


def only(facts):
    assert len(facts.processes) == 1, facts.processes
    return facts.processes[0]


def write(tmp_path, text, name="dump.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def frame_line_says(line, frame):
    """What the cited line of the dump must hold for `frame`."""
    if frame.native:
        return frame.function in line and (frame.library in line) and line.lstrip().startswith("(C) File")
    return line.startswith(f'    (Python) File "{frame.file}", line {frame.line}, in {frame.function}')


# ------------------------------------------------------------------ real captures

@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_real_output_is_claimed_and_cites_its_own_lines(path):
    facts = read(path)
    assert facts.processes and facts.unrecognized == 0
    assert all(d.severity == "info" for d in facts.diagnostics), facts.diagnostics
    lines = path.read_text().split("\n")
    for process in facts.processes:
        for thread in process.threads:
            header = lines[thread.evidence.line - 1]
            assert header.startswith(f"Traceback for thread {thread.tid}") and header.strip() == thread.evidence.text
            for frame in thread.frames:
                assert frame_line_says(lines[thread.cite(frame).line - 1], frame)


def test_plain_remote_dump_innermost_first_with_the_pid_of_its_main_thread():
    process = only(read(STALL / "rank0.pystack.txt"))
    (thread,) = process.threads
    assert (thread.tid, thread.name, thread.status, thread.active) == ("13829", "python3.11", "", None)
    assert [(f.function, Path(f.file).name, f.line) for f in thread.frames] == [
        ("all_reduce", "distributed_c10d.py", 3252), ("wrapper", "c10d_logger.py", 83),
        ("sync_grads", "train.py", 58), ("train_step", "train.py", 75), ("main", "train.py", 99),
        ("wrapper", "__init__.py", 367), ("<module>", "train.py", 108)]
    assert not any(f.native for f in thread.frames)
    # pystack remote prints no pid: the thread running <module> is the main thread, its tid the pid
    assert process.pid == 13829 and process.source == "pystack"
    assert (process.exited, process.signal, process.rank_hint, process.truncated) == (False, "", None, False)


def test_locals_become_frame_locals_arguments_first_with_their_addresses():
    process = only(read(STALL / "rank0.pystack-locals.txt"))
    frames = {f.function: f for f in process.threads[0].frames}
    assert frames["sync_grads"].locals == (("group", "None"), ("model", "<Sequential at 0x7f02055cab90>"),
                                           ("p", "<Parameter at 0x7f02056d9540>"))
    assert dict(frames["main"].locals)["outdir"] == '"/srv/train/stall/out"'
    assert dict(frames["all_reduce"].locals)["group"] == "<torch._C._distributed_c10d.ProcessGroup at 0x7f0204feeeb0>"
    logger = next(f for f in process.threads[0].frames if f.file.endswith("c10d_logger.py"))
    assert dict(logger.locals)["kwargs"] == '{"group": None}'
    assert process.rank_hint == 0  # main()'s `rank: 0`
    assert only(read(STALL / "rank1.pystack-locals.txt")).rank_hint == 1


def test_native_frames_between_python_frames():
    process = only(read(STALL / "rank0.pystack-native.txt"))
    frames = process.threads[0].frames
    assert frames[0] == m.Frame("__futex_abstimed_wait_common64", "./nptl/futex-internal.c", 57, "libc.so.6",
                                True, frames[0].at)  # "(inlined)" is not part of the name
    names = [f.function for f in frames]
    wait = names.index("c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)")
    assert frames[wait].library == "libtorch_cpu.so" and (frames[wait].file, frames[wait].line) == ("", 0)
    assert names[wait + 3] == "all_reduce" and not frames[wait + 3].native
    assert frames[-1] == m.Frame("_start", "", 0, "python3.11", True, 1)
    assert names.index("all_reduce") < names.index("<module>") < names.index("Py_RunMain")
    assert frames[names.index("pthread_cond_wait@@GLIBC_2.3.2")].file == "./nptl/pthread_cond_wait.c"


def test_native_all_adds_the_threads_python_does_not_know():
    process = only(read(STALL / "rank0.pystack-native-all.txt"))
    names = [t.name for t in process.threads]
    assert names[0] == "python3.11" and names.count("pt_gloo_runloop") == 2 and "gloo_tcp_loop" in names
    waiting = [t for t in process.threads
               if any("UnboundBuffer::waitRecv" in f.function for f in t.frames)]
    assert len(waiting) == 1 and waiting[0].name == "pt_gloo_runloop"
    assert stacks.main_thread(process).tid == "13829" == str(process.pid)


def test_core_of_a_live_process_is_a_snapshot():
    facts = read(STALL / "rank0.gcore.pystack-core-native-locals.txt")
    process = only(facts)
    assert process.pid == 13829 and process.command == "/opt/venv-capture/bin/python3.11"
    assert (process.exited, process.signal) == (False, "")
    assert process.evidence.text == "pid: 13829 ppid: 13825 sid: 13829"
    assert [d.message for d in facts.diagnostics] == [
        "a core of a live process (SIGSTOP: gcore or a ptrace stop), not of its death"]
    assert process.rank_hint == 0


def test_core_of_a_process_killed_by_a_signal_ended_with_it():
    process = only(read(STALL / "rank1.sigabrt.pystack-core-native-all.txt"))
    assert (process.exited, process.signal, process.pid) == (True, "SIGABRT", 13830)
    assert process.command == "/opt/venv-capture/bin/python3.11 -u /srv/train/train.py --scenario stall"
    assert [t.name for t in process.threads] == ["", "", "", ""]  # a core keeps no thread names
    main = stacks.main_thread(process)
    assert main.tid == "13830" and main.frames[0].function == "__pthread_kill_implementation"


@pytest.mark.parametrize("suffix", ["pystack.txt", "pystack-native.txt", "pystack-locals.txt",
                                    "pystack-native-all.txt", "pystack-native-all-locals.txt",
                                    "gcore.pystack-core.txt", "gcore.pystack-core-native-locals.txt",
                                    "gcore.pystack-core-native-all.txt"])
def test_rank0_is_blocked_in_all_reduce_in_every_mode(suffix):
    found = stacks.classify(only(read(STALL / f"rank0.{suffix}")))
    assert (found.activity, found.op) == (m.BLOCKED, "all_reduce")
    assert found.why.startswith("all_reduce (/opt/venv-capture/") and "← sync_grads (/srv/train/train.py:58)" in found.why


@pytest.mark.parametrize("suffix", ["pystack.txt", "pystack-native.txt", "pystack-locals.txt",
                                    "pystack-native-all-locals.txt", "sigabrt.pystack-core.txt"])
def test_rank1_is_loading_data_in_every_mode(suffix):
    found = stacks.classify(only(read(STALL / f"rank1.{suffix}")))
    assert found.activity == m.DATA_LOADING and "load_next_batch (/srv/train/train.py:49)" in found.why


def test_analyze_finds_rank1_missing_from_the_all_reduce(run_cli, tmp_path):
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.pystack.txt").write_bytes((STALL / f"rank{rank}.pystack.txt").read_bytes())
    result = run_cli("analyze", tmp_path, "--hung", "--format", "json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["ranks"]["0"]["state"] == "blocked" and report["ranks"]["0"]["op"] == "all_reduce"
    assert report["ranks"]["1"]["state"] == "data_loading"
    assert (report["verdict"], report["culprit_ranks"]) == ("missing_rank", [1])
    assert {"path": "rank1.pystack.txt", "line": 8,
            "text": "load_next_batch (/srv/train/train.py:49)"} in report["findings"][0]["evidence"]


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_analyze_of_one_file_never_exits_2(run_cli, tmp_path, path):
    (tmp_path / path.name).write_bytes(path.read_bytes())
    result = run_cli("analyze", tmp_path)
    assert result.returncode in (0, 1), result.stderr


def test_old_blank_line_after_every_thread_and_gil_status(tmp_path):
    # pystack 1.0 (`format_thread` ended every thread with `yield ""`)
    text = ('Traceback for thread 7 (python3) [Has the GIL,Garbage collecting] (most recent call last):\n'
            '    (Python) File "/job/a.py", line 3, in <module>\n\n'
            'Traceback for thread 8 (python3) [Waiting for the GIL] (most recent call last):\n'
            '    (Python) File "/usr/lib/python3.8/threading.py", line 890, in _bootstrap\n\n')
    process = only(read(write(tmp_path, text)))
    assert [(t.tid, t.status, t.active) for t in process.threads] == [
        ("7", "Has the GIL,Garbage collecting", True), ("8", "Waiting for the GIL", None)]
    assert process.pid == 7


def test_unmergeable_native_stack_empty_stack_and_pystack_messages(tmp_path):
    text = ("WARNING(process_remote): The interpreter is shutting itself down so it is possible that no "
            "Python stack trace is available for inspection.\n"
            "\U0001F480 Could not gather enough information to extract the Python frame information \U0001F480\n\n"
            "The frame stack for thread 41 is empty\n"
            "Traceback for thread 40 (python3.11) [] (most recent call last):\n"
            "* - Unable to merge native stack due to insufficient native information - *\n"
            '    (Python) File "/job/a.py", line 3, in <module>\n')
    facts = read(write(tmp_path, text))
    process = only(facts)
    assert [(t.tid, len(t.frames)) for t in process.threads] == [("41", 0), ("40", 1)]
    assert [(d.line, d.severity) for d in facts.diagnostics] == [(1, "info"), (2, "warning")]
    assert "Could not gather" in facts.diagnostics[1].message


def test_segfault_and_on_demand_cores(tmp_path):
    core = ("Core file information:\nstate: R zombie: True niceness: 0\npid: 12 ppid: 1 sid: 12\n"
            "uid: 0 gid: 0 pgrp: 12\nexecutable: python3 arguments: python3 x.py\n\n{}\n"
            'Traceback for thread 12 [] (most recent call last):\n    (Python) File "/x.py", line 1, in <module>\n')
    crashed = only(read(write(tmp_path, core.format(
        "The process died due a segmentation fault accessing address: 0x10"), "a.txt")))
    assert (crashed.exited, crashed.signal, crashed.command) == (True, "SIGSEGV", "python3 x.py")
    alive = only(read(write(tmp_path, core.format(
        "The core file seems to have been generated on demand (the process did not crash)"), "b.txt")))
    assert (alive.exited, alive.signal) == (False, "")
    killed = only(read(write(tmp_path, core.format(
        "The process died due receiving signal SIGKILL sent by pid 99"), "c.txt")))
    assert (killed.exited, killed.signal) == (True, "SIGKILL")


def test_two_cores_in_one_file_are_two_processes(tmp_path):
    one = (STALL / "rank0.gcore.pystack-core.txt").read_text()
    two = (STALL / "rank1.sigabrt.pystack-core.txt").read_text()
    facts = read(write(tmp_path, one + two))
    assert [(p.pid, p.exited) for p in facts.processes] == [(13829, False), (13830, True)]
    assert [len(p.threads) for p in facts.processes] == [1, 1]


def test_colours_are_stripped(tmp_path):
    # traceback_formatter.colored() on a terminal: green (Python), yellow names, faint sections
    text = ('Traceback for thread 5 (python3) [] (most recent call last):\n'
            '    \x1b[32m(Python)\x1b[0m File "/job/a.py", line 9, in \x1b[33mrun\x1b[0m\n'
            '      \x1b[2mLocals:\x1b[0m\n        rank: 3\n')
    process = only(read(write(tmp_path, text)))
    assert process.threads[0].frames[0].function == "run" and process.rank_hint == 3


def test_a_local_string_with_a_newline_stays_in_its_frame(tmp_path):
    # pytypes.cpp prints a str as '"' + text + '"', and format_frame prints Locals as is
    text = ('Traceback for thread 5 (python3) [] (most recent call last):\n'
            '    (Python) File "/job/a.py", line 3, in <module>\n'
            '    (Python) File "/job/a.py", line 9, in run\n'
            '      Locals:\n'
            '        msg: "first line\n'
            'second line: not a pystack line"\n'
            '        rank: 2\n')
    facts = read(write(tmp_path, text))
    (thread,) = only(facts).threads
    assert facts.diagnostics == [] and [f.function for f in thread.frames] == ["run", "<module>"]
    assert thread.frames[0].locals == (("msg", '"first line\\nsecond line: not a pystack line"'), ("rank", "2"))
    assert only(facts).rank_hint == 2


def test_a_bad_line_costs_one_diagnostic_and_the_block_goes_on(tmp_path):
    lines = (STALL / "rank0.pystack-native.txt").read_text().split("\n")
    lines.insert(20, "    (C) garbage that pystack never prints")
    path = write(tmp_path, "\n".join(lines))
    facts = read(path)
    assert [(d.line, d.message) for d in facts.diagnostics] == [
        (21, "unrecognized line: '(C) garbage that pystack never prints'")]
    good = only(read(STALL / "rank0.pystack-native.txt")).threads[0].frames
    frames = only(facts).threads[0].frames
    assert [f.function for f in frames] == [f.function for f in good]
    assert facts.unrecognized == 1


def test_cut_in_the_middle_of_a_frame_line_is_truncated(tmp_path):
    text = (STALL / "rank0.pystack-native.txt").read_text()
    cut = text[:text.index("line 3252") + 4]
    facts = read(write(tmp_path, cut))
    process = only(facts)
    assert process.truncated and facts.unrecognized == 1
    assert process.threads[0].frames[0].function == "wrapper"  # the innermost whole frame


def test_identical_stacks_of_many_ranks_keep_their_own_values(tmp_path):
    text = (STALL / "rank0.pystack-locals.txt").read_text()
    other = text.replace("13829", "24001").replace("0x7f02056d9540", "0x7f0000000001")
    first, second = read(write(tmp_path, text, "a.txt")), read(write(tmp_path, other, "b.txt"))
    a, b = only(first).threads[0], only(second).threads[0]
    assert (a.tid, b.tid) == ("13829", "24001")
    assert dict(a.frames[2].locals)["p"] == "<Parameter at 0x7f02056d9540>"
    assert dict(b.frames[2].locals)["p"] == "<Parameter at 0x7f0000000001>"


def test_sniffers_keep_to_their_own_formats(tmp_path):
    python_tb = write(tmp_path, 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n', "tb.txt")
    py_bt = write(tmp_path, "Thread 1 (Thread 0x7f (LWP 5)):\nTraceback (most recent call first):\n", "bt.txt")
    for path in (python_tb, py_bt):
        assert pystack.sniff(str(path), path.read_bytes()) is None
    for path in REAL:
        head = read_head(str(path))
        assert pyspy.sniff(str(path), head) is None and not gdb.sniff(str(path), head)
    assert pystack.sniff("x", b"\x00" + (STALL / "rank0.pystack.txt").read_bytes()) is None


def test_hooks_claim_and_parse(tmp_path):
    plugins = Plugins(autoload=False, builtins=("forensics.ingest.pystack",))
    path = STALL / "rank1.pystack.txt"
    assert plugins.hook.forensics_sniff(path=str(path), head=read_head(str(path))) == [pystack.KIND]
    facts = plugins.hook.forensics_parse(artifact=Artifact(pystack.KIND, str(path), "rank1.pystack.txt"))
    assert facts.kind == pystack.KIND and facts.processes[0].pid == 13830
    assert plugins.hook.forensics_parse(artifact=Artifact("gdb", str(path), "x")) is None


def test_empty_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError):
        pystack.parse(str(write(tmp_path, "\n \n")), "empty.txt")


# ------------------------------------------------------------------ garbage in, no crash out

def _plain(value):
    if isinstance(value, (m.ProcessDump, m.ThreadStack, m.Frame, m.Evidence, m.Diagnostic)):
        return all(_plain(getattr(value, name)) for name in value.__slots__)
    if isinstance(value, tuple):
        return all(_plain(item) for item in value)
    return value is None or type(value) in (str, int, bool)


_SOURCES = {p: p.read_bytes().split(b"\n") for p in REAL}
_MUTATION = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate"), st.integers(0, 10_000)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.integers(0, 200)),
    st.tuples(st.just("bytes"), st.integers(0, 10_000), st.binary(min_size=1, max_size=200)),
    st.tuples(st.just("glue"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("prefix"), st.integers(0, 10_000),
              st.sampled_from([b"    ", b"      ", b"        ", b"* - ", b"\x1b[33m", b"\t"])),
    st.tuples(st.sampled_from(["huge", "latin1", "utf16", "header", "section"]), st.integers(0, 10_000)),
)
_INSERTS = {"huge": b'    (C) File "???", line 0, in ' + b"f" * 10_000_000 + b" (libc.so.6)",
            "latin1": "    (Python) File \"/données/entraîné.py\", line 4, in é".encode("latin-1"),
            "utf16": "Traceback for thread 9 [] (most recent call last):".encode("utf-16"),
            "header": b"Traceback for thread 0x12 (x) [ (most recent call last):",
            "section": b"      Locals:"}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 10_000), mutations=st.lists(_MUTATION, min_size=1, max_size=8),
       cut=st.none() | st.integers(0, 20_000))
def test_fuzzed_real_dumps_never_crash(which, mutations, cut):
    path = REAL[which % len(REAL)]
    data = b"\n".join(mutate_lines(_SOURCES[path], mutations, _INSERTS))
    if cut is not None:
        data = data[:cut]
    _parse_checked(data)


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=5000))
def test_random_bytes_never_crash(data):
    _parse_checked(data)


def _parse_checked(data: bytes) -> None:
    facts = parse_bytes(pystack, data, "fuzz.txt")
    if facts is None:
        return
    total = data.count(b"\n") + 1
    for process in facts.processes:
        assert _plain(process)
        for thread in process.threads:
            assert 1 <= thread.evidence.line <= total
            for frame in thread.frames:
                assert frame.at >= 0 and 1 <= thread.cite(frame).line <= total
    assert all(_plain(d) and 0 <= d.line <= total for d in facts.diagnostics)


def test_binary_garbage_and_a_huge_line_are_diagnosed(tmp_path):
    path = tmp_path / "huge.txt"
    path.write_bytes(b"Traceback for thread 1 [] (most recent call last):\n    (Python) File \"/a.py\", line 1, in "
                     + b"f" * 200_000 + b"\n" + bytes(range(256)) * 3 + b"\n")
    facts = pystack.parse(str(path), "huge.txt")
    assert any("200,0" in d.message and d.line == 2 for d in facts.diagnostics)
    assert facts.processes and facts.processes[0].threads[0].frames == ()
    assert re.search(r"unrecognized", " ".join(d.message for d in facts.diagnostics))
