"""Python tracebacks and faulthandler dumps: real captures (tests/fixtures/pytrace/README.md
says how each was made), every launcher prefix, interleaved ranks, and garbage."""

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics import cli
from forensics.ingest import pytrace, scan, stacks
from forensics.ingest.textio import HEAD_BYTES, InputError, read_head
from forensics.model import (BLOCKED, DATA_LOADING, Artifact, Diagnostic, Evidence, Frame, MessageHit,
                             ProcessDump, ProcessRecord, ThreadStack)
from forensics.plugins import Plugins
from helpers import mutate_lines, parse_bytes

FIXTURES = Path(__file__).parent / "fixtures" / "pytrace"
GDB_PYBT = Path(__file__).parent / "fixtures" / "gdb" / "pybt.txt"
PYSPY = Path(__file__).parent / "fixtures" / "pyspy"


def read(path, display=None):
    """Sniff, then parse as ingest does."""
    path = str(path)
    kind = pytrace.sniff(path, read_head(path))
    assert kind in (pytrace.KIND_TRACEBACK, pytrace.KIND_FAULTHANDLER), f"{path} not claimed"
    return pytrace.parse(path, display or Path(path).name, kind)


def file_lines(path):
    return Path(path).read_bytes().decode("utf-8", "replace").split("\n")


def dumps(facts, source):
    return [p for p in facts.processes if p.source == source]


def frame_line_of(thread, frame, lines):
    """The text of the dump line a frame cites."""
    return lines[thread.cite(frame).line - 1]


def assert_frames_cite_their_lines(path, process):
    """Every frame's cited line is the `File "…", line N … FUNC` line it was read from."""
    lines = file_lines(path)
    for thread in process.threads:
        assert lines[thread.evidence.line - 1].rstrip().endswith(thread.evidence.text.split("] ")[-1].strip()[-40:])
        for frame in thread.frames:
            text = frame_line_of(thread, frame, lines)
            assert f'File "{frame.file}", line {frame.line}' in text and text.rstrip().endswith(frame.function), \
                (frame, text)


# ---------------------------------------------------------------- sniffing

def test_sniff_claims_tracebacks_and_dumps_by_content():
    claimed = {}
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.parent.name != "capture" and path.suffix != ".md":
            claimed[path.relative_to(FIXTURES).as_posix()] = pytrace.sniff(str(path), read_head(str(path)))
    assert None not in claimed.values(), claimed
    assert claimed["python/chained.py311.txt"] == "traceback"
    assert claimed["python/later_repeat.py311.txt"] == "faulthandler"
    assert claimed["dataloader/rank0.stderr.log"] == "faulthandler"  # the dump comes before the traceback
    assert claimed["recv_cycle/torchrun.log"] == "traceback"


def test_sniff_declines_gdb_py_bt_py_spy_and_binary():
    assert pytrace.sniff(str(GDB_PYBT), read_head(str(GDB_PYBT))) is None  # `Traceback (most recent call first):`
    for path in sorted(PYSPY.iterdir()):
        assert pytrace.sniff(str(path), read_head(str(path))) is None, path
    assert pytrace.sniff("x", b"\x00\x01Traceback (most recent call last):\n") is None
    script = b'print("Traceback (most recent call last):")\n'
    assert pytrace.sniff("capture.py", script) is None and pytrace.sniff("capture.log", script) == "traceback"
    assert pytrace.sniff("x", b"") is None


def test_a_traceback_at_the_end_of_a_big_log_is_found(tmp_path):
    path = tmp_path / "rank3.stderr.log"
    noise = b"[I1201 17:01:50.000000000 socket.cpp:785] [c10d - debug] connecting\n" * 4000
    tail = (FIXTURES / "recv_cycle" / "rank1.stderr.log").read_bytes()
    path.write_bytes(noise + tail)
    assert len(noise) > HEAD_BYTES
    assert pytrace.sniff(str(path), read_head(str(path))) is None  # the head alone shows none ...
    assert "traceback" in scan.sniff(str(path), path.name, Plugins())[0]  # ... the scan sees the tail
    facts = pytrace.parse(str(path), path.name)
    (dump,) = dumps(facts, "traceback")
    assert dump.evidence.line == 4000 + 15 and "Timed out waiting 5000ms" in dump.evidence.text
    assert facts.lines_read == 4015


def test_a_big_file_is_read_at_its_head_and_its_tail(tmp_path, monkeypatch):
    from forensics.ingest import statements
    monkeypatch.setattr(statements, "HEAD_WINDOW", 4096)
    monkeypatch.setattr(statements, "TAIL_WINDOW", 16384)
    path = tmp_path / "rank1.stderr.log"
    noise = b"[I1201 17:01:50.000000000 socket.cpp:785] [c10d - debug] connecting\n" * 2000
    tail = (FIXTURES / "recv_cycle" / "rank1.stderr.log").read_bytes()
    path.write_bytes(noise + tail)
    facts = pytrace.parse(str(path), path.name)
    (dump,) = facts.processes
    assert dump.evidence.line == -1  # numbered back from the end: `tail -n 1`
    assert file_lines(path)[-2] == dump.evidence.text
    (thread,) = dump.threads
    assert thread.evidence.line == -13 and file_lines(path)[-14] == thread.evidence.text
    assert all(f.at >= 0 for f in thread.frames)
    assert any("not searched" in d.message and d.severity == "info" for d in facts.diagnostics)


# ---------------------------------------------------------------- tracebacks

def test_chained_traceback_keeps_both_exceptions_and_the_final_stack():
    path = FIXTURES / "python" / "chained.py311.txt"
    facts = read(path)
    (dump,) = facts.processes
    assert dump.source == "traceback" and dump.exited and not dump.truncated
    (thread,) = dump.threads
    assert thread.name == "MainThread"
    # the last traceback of the chain, innermost first
    assert [(f.function, f.line) for f in thread.frames] == [("main", 74), ("<module>", 104)]
    assert all(f.file == "/srv/job/pyerrors.py" and not f.native for f in thread.frames)
    assert thread.evidence.line == 10  # its own `Traceback (most recent call last):`
    assert_frames_cite_their_lines(path, dump)
    assert dump.evidence == Evidence("chained.py311.txt", 15, "RuntimeError: train_step 3 failed")
    (record,) = facts.records
    assert [e.text for e in record.errors] == ["ValueError: loss is nan at step 3", "RuntimeError: train_step 3 failed"]
    assert record.alive is False and record.source == "traceback"
    assert facts.diagnostics == [] and facts.unrecognized == 0


@pytest.mark.parametrize("name", ["chained.py38.txt", "chained.py313.txt", "chained_colors.py313.txt"])
def test_chained_tracebacks_of_other_versions_read_alike(name):
    facts = read(FIXTURES / "python" / name)
    (dump,) = facts.processes
    assert [(f.function, f.line) for f in dump.threads[0].frames] == [("main", 74), ("<module>", 104)]
    assert [e.text.split(": ", 1)[-1] for e in facts.records[0].errors][-1].endswith("train_step 3 failed")
    assert len(facts.records[0].errors) == 2 and facts.unrecognized == 0


def test_during_handling_chain():
    facts = read(FIXTURES / "python" / "during_handling.py311.txt")
    (dump,) = facts.processes
    assert [f.function for f in dump.threads[0].frames] == ["load_shard", "main", "<module>"]
    assert [e.text for e in facts.records[0].errors] == ["KeyError: 7",
                                                          "RuntimeError: shard 7 is missing from the manifest"]


@pytest.mark.parametrize("name", ["exception_group.py311.txt", "exception_group.py313.txt"])
def test_exception_group_frames_and_every_sub_exception(name):
    path = FIXTURES / "python" / name
    facts = read(path)
    (dump,) = facts.processes
    assert [f.function for f in dump.threads[0].frames] == ["run_workers", "main", "<module>"]
    assert_frames_cite_their_lines(path, dump)
    texts = [e.text.strip(" |") for e in facts.records[0].errors]
    assert texts == ["ExceptionGroup: 2 workers failed (3 sub-exceptions)", "ValueError: loss is nan at step 3",
                     "ValueError: loss is nan at step 3", "TimeoutError: rank 1 did not join the barrier"]
    assert facts.unrecognized == 0


def test_recursion_error_keeps_every_printed_frame():
    facts = read(FIXTURES / "python" / "recursion.py311.txt")
    frames = facts.processes[0].threads[0].frames
    assert [f.function for f in frames] == ["broadcast_params"] * 3 + ["main", "<module>"]
    assert facts.records[0].errors[-1].text == "RecursionError: maximum recursion depth exceeded"


def test_notes_follow_the_exception_line():
    facts = read(FIXTURES / "python" / "notes.py313.txt")
    assert facts.records[0].errors[0].text == "ValueError: loss is nan at step 3"
    assert facts.processes[0].exited


def test_thread_exception_did_not_end_the_process():
    facts = read(FIXTURES / "python" / "thread_exception.py311.txt")
    (dump,) = facts.processes
    assert not dump.exited and dump.threads[0].name == "ckpt-uploader"
    assert [f.function for f in dump.threads[0].frames] == ["upload_checkpoint", "run", "_bootstrap_inner"]
    assert facts.records[0].alive is None


def test_keyboard_interrupt_is_sigint():
    (dump,) = read(FIXTURES / "python" / "sigint.py311.txt").processes
    assert dump.exited and dump.signal == "SIGINT"


def test_an_earlier_traceback_of_the_same_process_did_not_end_it(tmp_path):
    handled = (FIXTURES / "python" / "during_handling.py311.txt").read_text()
    final = (FIXTURES / "python" / "sigint.py311.txt").read_text()
    path = tmp_path / "rank2.stderr.log"
    path.write_text(handled + "retrying the shard\n" + final)
    first, second = read(path).processes
    assert (first.exited, second.exited) == (False, True)
    later = tmp_path / "rank2.late.log"  # a live faulthandler dump after it: the process went on
    later.write_text(final + (FIXTURES / "python" / "later_repeat.py311.txt").read_text())
    assert [p.exited for p in read(later).processes] == [False, False, False, False]


def test_torchruns_own_traceback_is_not_a_rank():
    facts = read(FIXTURES / "recv_cycle" / "torchrun.log")
    assert [p.rank_hint for p in facts.processes] == [1, 0]
    assert not any("ChildFailedError" in p.evidence.text for p in facts.processes)
    assert any("traceback of torchrun itself" in d.message and d.severity == "info" for d in facts.diagnostics)


def test_the_flight_recorder_analyzers_crash_is_not_a_rank(tmp_path):
    path = tmp_path / "fr_analyzer.txt"
    path.write_text("$ python -m torch.distributed.flight_recorder.fr_trace fr -p nccl_trace_rank_\n"
                    + (FIXTURES / "python" / "chained.py311.txt").read_text().replace(
                        'File "/srv/job/pyerrors.py", line 104, in <module>',
                        'File "/opt/trainenv/lib/python3.11/site-packages/torch/distributed/flight_recorder/'
                        'fr_trace.py", line 69, in <module>'))
    facts = read(path)
    assert facts.processes == [] and facts.records == []
    assert [d.message.split(":")[0] for d in facts.diagnostics] == ["the traceback of fr_trace itself"]


# ---------------------------------------------------------------- prefixes and streams

def test_rank_prefix_of_the_excepthook():
    path = FIXTURES / "recv_cycle" / "rank1.stderr.log"
    facts = read(path)
    (dump,) = facts.processes
    assert dump.rank_hint == 1 and dump.exited
    assert [f.function for f in dump.threads[0].frames] == ["recv", "wrapper", "exchange_activations", "main",
                                                           "<module>"]
    assert dump.threads[0].frames[0].file.endswith("torch/distributed/distributed_c10d.py")
    assert_frames_cite_their_lines(path, dump)
    (record,) = facts.records
    assert (record.rank, record.local_rank, record.alive) == (1, None, False)
    assert "Timed out waiting 5000ms for recv operation to complete" in record.errors[0].text


def test_torchrun_console_local_ranks_are_never_global_ranks():
    path = FIXTURES / "dataloader" / "torchrun.log"
    facts = read(path)
    traceback, = dumps(facts, "traceback")
    assert traceback.rank_hint == 0
    assert [f.function for f in traceback.threads[0].frames] == ["train_step", "main", "<module>"]
    assert_frames_cite_their_lines(path, traceback)
    (record,) = facts.records
    assert (record.rank, record.local_rank) == (0, 0)
    rank0_dump, rank1_dump = dumps(facts, "faulthandler")
    # `[default0]:` is rank 0 because `[default0]:[rank0]:` lines say so, `[default1]:` rank 1
    # because torchrun's summary says `rank : 1 (local_rank: 1)`
    assert (rank0_dump.rank_hint, rank1_dump.rank_hint) == (0, 1)
    assert rank0_dump.evidence.text == "[default0]:Timeout (0:00:04)!"
    for dump in (rank0_dump, rank1_dump):
        assert_frames_cite_their_lines(path, dump)


def test_a_local_rank_alone_names_no_rank(tmp_path):
    lines = file_lines(FIXTURES / "dataloader" / "torchrun.log")
    dumps_only = tmp_path / "console.log"  # the two dumps, before any line that ties local to global ranks
    dumps_only.write_text("\n".join(lines[:60]))
    assert [p.rank_hint for p in read(dumps_only).processes] == [None, None]
    two_agents = tmp_path / "two_nodes.log"  # a second agent's summary: local 0 is rank 2 there
    summary = [line.replace("rank      : 0 (", "rank      : 2 (").replace("rank      : 1 (", "rank      : 3 (")
               for line in lines if "(local_rank: " in line]
    two_agents.write_text("\n".join(lines + summary))
    assert [p.rank_hint for p in dumps(read(two_agents), "faulthandler")] == [None, None]


def test_interleaved_ranks_come_apart():
    path = FIXTURES / "assembled" / "interleaved_ranks.log"
    facts = read(path)
    by_rank = {p.rank_hint: p for p in facts.processes}
    assert sorted(by_rank) == [0, 1]
    for rank in (0, 1):
        alone = read(FIXTURES / "recv_cycle" / f"rank{rank}.stderr.log").processes[0]
        mixed = by_rank[rank]
        assert [(f.function, f.file, f.line) for f in mixed.threads[0].frames] == \
            [(f.function, f.file, f.line) for f in alone.threads[0].frames]
        assert mixed.evidence.text == alone.evidence.text and mixed.exited
        assert_frames_cite_their_lines(path, mixed)


def test_slurm_labels_separate_tasks_without_naming_ranks():
    path = FIXTURES / "assembled" / "slurm_label.out"
    facts = read(path)
    (dump,) = dumps(facts, "faulthandler")
    assert dump.rank_hint is None  # a task id is not a rank
    assert [len(t.frames) for t in dump.threads] == [5, 6, 11]
    traces = dumps(facts, "traceback")
    assert [p.rank_hint for p in traces] == [0, 1]
    assert [p.evidence.text[:12] for p in traces] == [" 3: [rank0]:", "12: [rank1]:"]
    for process in facts.processes:
        assert_frames_cite_their_lines(path, process)


def test_ray_prefix_gives_pid_and_host():
    path = FIXTURES / "assembled" / "ray.log"
    facts = read(path)
    (fault,) = dumps(facts, "faulthandler")
    (trace,) = dumps(facts, "traceback")
    assert (fault.pid, fault.host, fault.rank_hint, fault.exited) == (41023, "10.0.3.7", None, False)
    assert (trace.pid, trace.host, trace.rank_hint) == (41024, "10.0.3.8", 1)
    assert [r.pid for r in facts.records] == [41024]
    for process in facts.processes:
        assert_frames_cite_their_lines(path, process)


def test_a_prefix_repeated_on_every_line_is_learned():
    pdsh = read(FIXTURES / "assembled" / "pdsh.log")  # `node-3: [rank0]: …`: pdsh's label, then PyTorch's
    assert [(p.rank_hint, p.threads[0].frames[0].function) for p in pdsh.processes] == [(0, "recv"), (1, "recv")]
    path = FIXTURES / "assembled" / "logger_prefix.log"
    facts = read(path)
    (dump,) = facts.processes
    assert dump.pid == 309 and [f.function for f in dump.threads[0].frames] == ["main", "<module>"]
    assert_frames_cite_their_lines(path, dump)
    assert [e.text.rsplit("] ", 1)[-1] for e in facts.records[0].errors] == [
        "ValueError: loss is nan at step 3", "RuntimeError: train_step 3 failed"]


def test_text_glued_before_a_header_is_not_a_prefix(tmp_path):
    text = (FIXTURES / "python" / "sigint.py311.txt").read_text()
    path = tmp_path / "rank0.stderr.log"
    path.write_text("Epoch 3: 100%|##########| 10/10 [00:01<00:00]" + text)
    (dump,) = read(path).processes
    assert [f.function for f in dump.threads[0].frames] == ["wait_for_batch", "main", "<module>"]
    assert dump.evidence.text == "KeyboardInterrupt" and dump.threads[0].evidence.line == 1


@pytest.mark.parametrize("name,original", [("timestamps_python.log", "dataloader/rank0.stderr.log"),
                                           ("timestamps_k8s.log", "recv_cycle/rank1.stderr.log")])
def test_timestamps_are_prefixes(name, original):
    stamped, plain = read(FIXTURES / "assembled" / name), read(FIXTURES / original)

    def shape(facts):
        return [(p.source, p.rank_hint, p.exited, [[(f.function, f.line, f.at) for f in t.frames]
                                                     for t in p.threads]) for p in facts.processes]
    assert shape(stamped) == shape(plain) and stamped.processes


# ---------------------------------------------------------------- faulthandler

def test_all_threads_dump_marks_the_current_thread():
    path = FIXTURES / "python" / "dump_now.py311.txt"
    facts = read(path)
    (dump,) = facts.processes
    assert dump.source == "faulthandler" and not dump.exited and dump.signal == ""
    worker, main = dump.threads
    assert (worker.tid, worker.active) == ("0x00007f625dee26c0", None)
    assert (main.tid, main.active) == ("0x00007f625e1a12c0", True)
    assert [f.function for f in main.frames] == ["report_progress", "main", "<module>"]  # innermost first
    assert_frames_cite_their_lines(path, dump)
    assert facts.records == []  # a live dump states no error


def test_sigabrt_dump_after_a_sigusr1_dump():
    path = FIXTURES / "abort" / "rank0.stderr.log"
    facts = read(path)
    live, fatal = facts.processes
    assert (live.exited, fatal.exited, fatal.signal) == (False, True, "SIGABRT")
    assert fatal.evidence.text == "Fatal Python error: Aborted"
    assert len(live.threads) == len(fatal.threads) == 3
    for dump in (live, fatal):
        main = stacks.main_thread(dump)
        assert main.active is True and main.frames[0].function == "all_reduce"
        assert_frames_cite_their_lines(path, dump)
    (record,) = facts.records
    assert (record.alive, record.signal, record.errors) == (False, "SIGABRT", (fatal.evidence,))
    assert facts.unrecognized == 0 and facts.diagnostics == []  # `Extension modules: …` is read


def test_dumps_back_to_back_are_told_apart(tmp_path):
    """Threads of one dump are separated by a blank line; the next dump's
    first thread follows the last frame directly."""
    path = tmp_path / "rank0.stderr.log"
    path.write_text((FIXTURES / "python" / "dump_now.py311.txt").read_text()
                    + (FIXTURES / "python" / "dump_now.py312.txt").read_text())
    first, second = read(path).processes
    assert [t.tid for t in first.threads] == ["0x00007f625dee26c0", "0x00007f625e1a12c0"]
    assert [t.tid for t in second.threads] == ["0x00007f8e53dfc6c0", "0x00007f8e5496bb80"]


def test_dump_traceback_later_repeat_is_one_dump_each_time():
    facts = read(FIXTURES / "python" / "later_repeat.py311.txt")
    assert [(p.evidence.line, p.exited, len(p.threads)) for p in facts.processes] == \
        [(1, False, 1), (6, False, 1), (11, False, 1)]
    assert all(p.threads[0].active is None for p in facts.processes)  # the watchdog thread has no Python state


def test_segmentation_fault_of_python_312():
    facts = read(FIXTURES / "python" / "segfault.py312.txt")
    (dump,) = facts.processes
    assert (dump.exited, dump.signal, len(dump.threads)) == (True, "SIGSEGV", 2)
    assert facts.records[0].signal == "SIGSEGV"


def test_garbage_collecting_note():
    facts = read(FIXTURES / "python" / "gc_dump.py311.txt")
    assert [len(p.threads[0].frames) for p in facts.processes] == [3, 1]
    assert facts.diagnostics == []


def test_forms_no_capture_here_shows(tmp_path):
    """Typed from Python/traceback.c and Modules/faulthandler.c: shapes this
    machine could not be made to print."""
    path = tmp_path / "rank5.stderr.log"
    path.write_text(
        "Fatal Python error from unexpected signum: 7\n\n"
        "Thread 0x00007f0000000002 (most recent call first):\n  <no Python frame>\n\n"
        "Current thread 0x00007f0000000001 (most recent call first):\n"
        '  File "/srv/job/train.py", line 44 in all_reduce_grads\n  ...\n\n'
        "Current thread's C stack trace (most recent call first):\n"
        '  Binary file "/usr/bin/python3.14", at _Py_DumpStack+0x31 [0x55d0c0a1b2c3]\n'
        "  <truncated rest of calls>\n"
        "Windows fatal exception: code 0xe06d7363\n\n"
        "Stack (most recent call first):\n"
        '  File ???, line ??? in ???\n')
    facts = read(path)
    bus, windows = facts.processes
    assert (bus.signal, bus.exited, bus.truncated) == ("SIGBUS", True, True)  # `  ...`: frames cut at 100
    assert [len(t.frames) for t in bus.threads] == [0, 1]
    assert (windows.exited, windows.threads[0].tid, windows.threads[0].active) == (False, "", True)
    assert windows.threads[0].frames == (Frame("?", "", 0, at=1),)
    assert facts.diagnostics == []


# ---------------------------------------------------------------- where the rank is

def test_classified_like_py_spy_threads():
    blocked = read(FIXTURES / "hung" / "rank0.stderr.log").processes[0]
    verdict = stacks.classify(blocked)
    assert (verdict.activity, verdict.op) == (BLOCKED, "all_reduce")
    assert verdict.evidence.text.startswith("all_reduce (/opt/trainenv/")
    loading = read(FIXTURES / "dataloader" / "rank1.stderr.log").processes[0]
    assert stacks.classify(loading).activity == DATA_LOADING


def test_analyze_finds_the_rank_blocked_in_all_reduce(tmp_path, capsys):
    folder = tmp_path / "incident"
    folder.mkdir()
    (folder / "rank0.stderr.log").write_bytes((FIXTURES / "hung" / "rank0.stderr.log").read_bytes())
    code = cli.main(["analyze", str(folder), "--format", "json", "-j", "1"], plugins=Plugins(autoload=False))
    report = json.loads(capsys.readouterr().out)
    assert code in (0, 1)
    rank = report["ranks"]["0"]
    assert (rank["state"], rank["op"]) == ("blocked", "all_reduce")
    assert rank["evidence"]["path"] == "rank0.stderr.log" and rank["evidence"]["line"] == 20


FRAGMENTS = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.parent.name != "capture"
                   and p.suffix != ".md")


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_analyze_on_one_fragment_never_fails(fragment, tmp_path, capsys):
    folder = tmp_path / "incident"
    folder.mkdir()
    (folder / fragment.name).write_bytes(fragment.read_bytes())
    code = cli.main(["analyze", str(folder), "-j", "1", "-q"], plugins=Plugins(autoload=False))
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    assert "Traceback (most recent call last)" not in out.err


# ---------------------------------------------------------------- the catalogue

def test_exception_lines_go_to_the_catalogue(monkeypatch):
    calls = []

    def hits(lines, display, first_line=1, rank=None, host="", pid=None, local_rank=None):
        calls.append((list(lines), display, first_line, rank, local_rank))
        return [MessageHit("fake", (), Evidence(display, first_line, lines[0]), rank, host, pid, local_rank)]

    monkeypatch.setattr(pytrace.messages, "hits", hits)
    facts = read(FIXTURES / "dataloader" / "torchrun.log")
    firsts = [call[0][0] for call in calls]
    assert "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out" in firsts[0]
    assert firsts[0].startswith("RuntimeError: ") and firsts[1] == "RuntimeError: train_step 3 failed on rank 0"
    assert [(c[2], c[3], c[4]) for c in calls] == [(72, 0, 0), (83, 0, 0)]
    assert [h.evidence.line for h in facts.messages] == [72, 83]


def test_a_failing_catalogue_is_a_diagnostic(monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("bad entry")

    monkeypatch.setattr(pytrace.messages, "hits", broken)
    facts = read(FIXTURES / "recv_cycle" / "rank0.stderr.log")
    assert facts.processes and any(d.severity == "error" and "catalogue" in d.message for d in facts.diagnostics)


# ---------------------------------------------------------------- hooks, files

def test_hooks_claim_and_parse():
    plugins = Plugins(autoload=False, builtins=("forensics.ingest.pytrace",))
    path = str(FIXTURES / "hung" / "rank0.stderr.log")
    assert plugins.hook.forensics_sniff(path=path, head=read_head(path)) == ["faulthandler"]
    facts = plugins.hook.forensics_parse(artifact=Artifact("faulthandler", path, "rank0.stderr.log", 0))
    assert facts.kind == "faulthandler" and facts.processes[0].source == "faulthandler"
    assert plugins.hook.forensics_parse(artifact=Artifact("gdb", path, "x")) is None


def test_gzip_reads_like_plain(tmp_path):
    plain = FIXTURES / "dataloader" / "torchrun.log"
    packed = tmp_path / "torchrun.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert pytrace.parse(str(packed), "torchrun.log").processes == pytrace.parse(str(plain), "torchrun.log").processes


def test_crlf_and_a_file_cut_inside_the_frames(tmp_path):
    text = (FIXTURES / "recv_cycle" / "rank0.stderr.log").read_text()
    crlf = tmp_path / "rank0.crlf.log"
    crlf.write_bytes(text.replace("\n", "\r\n").encode())
    assert [f.function for f in read(crlf).processes[0].threads[0].frames][0] == "recv"
    cut = tmp_path / "rank0.cut.log"
    cut.write_text(text[:text.index("dist.recv(")])
    (dump,) = read(cut).processes
    assert dump.truncated and [f.function for f in dump.threads[0].frames] == ["exchange_activations", "main",
                                                                                "<module>"]


def test_empty_and_unreadable_input(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(InputError):
        pytrace.parse(str(empty), "empty.log")
    with pytest.raises(InputError):
        pytrace.parse(str(tmp_path / "missing.log"), "missing.log")
    nothing = tmp_path / "nothing.log"
    nothing.write_text("Thread 0x1 (most recent call first) is not a header\n")
    facts = pytrace.parse(str(nothing), "nothing.log")
    assert not facts.processes and facts.diagnostics[0].message.startswith("no Python traceback")


def test_thread_headers_share_one_parse():
    pytrace._PARSED.clear()
    ids = ["0x00007f0000000001", "0x00007fdb966442c0", "0xABC"]
    assert [pytrace._parse_line(f"Thread {i} (most recent call first):") for i in ids] == \
        [("thread", i, False) for i in ids]
    assert len(pytrace._PARSED) == 1
    assert pytrace._parse_line("Thread 0xZZ (most recent call first):") == ("unreadable",)


def test_bad_line_inside_a_dump_is_one_diagnostic(tmp_path):
    lines = file_lines(FIXTURES / "hung" / "rank0.stderr.log")
    lines.insert(20, "  Fil \u00e9 garbled")
    path = tmp_path / "rank0.stderr.log"
    path.write_text("\n".join(lines))
    facts = read(path)
    assert facts.unrecognized == 1 and [d.line for d in facts.diagnostics] == [21]
    assert stacks.classify(facts.processes[0]).op == "all_reduce"


# ---------------------------------------------------------------- garbage in, no crash out

def _plain(value):
    """Only model objects and builtins: no lark Tree or Token."""
    if isinstance(value, (ProcessDump, ThreadStack, Frame, Evidence, Diagnostic, ProcessRecord, MessageHit)):
        return all(_plain(getattr(value, name)) for name in value.__slots__)
    if isinstance(value, (tuple, list)):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    return value is None or type(value) in (str, int, bool)


SEEDS = [p.read_bytes().split(b"\n") for p in FRAGMENTS]
_MUTATION = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate"), st.integers(0, 10_000)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.integers(0, 120)),
    st.tuples(st.just("bytes"), st.integers(0, 10_000), st.binary(min_size=1, max_size=200)),
    st.tuples(st.just("glue"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("prefix"), st.integers(0, 10_000),
              st.sampled_from([b"[rank3]: ", b"[default1]:", b"  | ", b"  + ", b"\xff\xfe", b"\x1b[31m", b" 7: ",
                               b"(pid=12) ", b"[2025-04-21 04:13:43,123] ", b"\r", b"Traceback (most recent call last):"])),
    st.tuples(st.sampled_from(["huge", "latin1", "header", "fatal"]), st.integers(0, 10_000)),
)
_INSERTS = {"huge": b"  File \"" + b"x" * 200_000 + b"\", line 1, in f",
            "latin1": "  File \"/srv/job/d\u00e9j\u00e0.py\", line 3, in \u00e9tape".encode("latin-1"),
            "header": b"Thread 0x00007f0000000001 (most recent call first):",
            "fatal": b"Fatal Python error: Aborted"}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 10_000), mutations=st.lists(_MUTATION, min_size=1, max_size=8),
       cut=st.none() | st.integers(0, 8_000))
def test_fuzzed_captures_never_crash(which, mutations, cut):
    data = b"\n".join(mutate_lines(SEEDS[which % len(SEEDS)], mutations, _INSERTS))
    if cut is not None:
        data = data[:cut]
    facts = parse_bytes(pytrace, data, "rank1.stderr.log")
    if facts is None:
        return
    total = data.count(b"\n") + 1
    assert _plain(facts.processes) and _plain(facts.records) and _plain(facts.diagnostics)
    for process in facts.processes:
        for thread in process.threads:
            assert 1 <= thread.evidence.line <= total
            for frame in thread.frames:
                assert frame.at >= 0 and 1 <= thread.cite(frame).line <= total
    assert all(0 <= d.line <= total for d in facts.diagnostics)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=4000))
def test_random_bytes_never_crash(data):
    parse_bytes(pytrace, b"Traceback (most recent call last):\n" + data, "x.log")


def test_a_ten_megabyte_line_is_skipped_not_fatal(tmp_path):
    path = tmp_path / "rank0.stderr.log"
    path.write_bytes(b"Traceback (most recent call last):\n  File \"" + b"a" * 10_000_000
                     + b"\", line 1, in f\nRuntimeError: boom\n")
    facts = pytrace.parse(str(path), path.name)
    assert any("longer than" in d.message for d in facts.diagnostics)
    assert facts.records[0].errors[0].text == "RuntimeError: boom"
