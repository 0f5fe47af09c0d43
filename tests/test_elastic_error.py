"""The torchelastic error.json reader: real files torchrun's workers wrote, the
string-message shape, broken files, garbage."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import mutate_lines, parse_bytes
from forensics import model as m
from forensics.ingest import elastic_error, flightrecorder, pyspy, snapshot_plugin, stacks
from forensics.ingest.textio import InputError, read_head
from forensics.model import Artifact
from forensics.plugins import Plugins

FIXTURES = Path(__file__).parent / "fixtures" / "elastic_error"
TIMEOUT = FIXTURES / "timeout/logs/none_lqgypdqt/attempt_0/0/error.json"
CLOSED = FIXTURES / "stall/logs/none_111rraae/attempt_0/0/error.json"
CRASH_RANK1 = FIXTURES / "crash/logs/none_2lipqy71/attempt_0/1/error.json"
AGENT = FIXTURES / "crash/agent_error.json"
CHAINED = FIXTURES / "chained/logs/none_5wn__o1a/attempt_0/0/error.json"
STRING = FIXTURES / "hand_made/rank1/error.json"
INDENTED = FIXTURES / "hand_made/indented/rank0/error.json"
ALL = sorted(FIXTURES.rglob("*.json"))


def display(path):
    return str(path.relative_to(FIXTURES))


def read(path):
    assert elastic_error.sniff(str(path), read_head(str(path))) == elastic_error.KIND, path
    return elastic_error.parse(str(path), display(path))


def only_record(facts):
    assert len(facts.records) == 1
    return facts.records[0]


def test_every_fixture_is_claimed_and_read():
    for path in ALL:
        facts = read(path)
        record = only_record(facts)
        assert record.source == "elastic-error" and record.alive is False
        assert record.errors == (record.evidence,) and record.evidence.line >= 1


def test_timeout_worker_file():
    facts = read(TIMEOUT)
    record = only_record(facts)
    assert record.evidence == m.Evidence(display(TIMEOUT), 1, (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 15000ms for recv operation to complete"))
    # torchrun's folder is the local rank: kept as such, the global rank stays unknown
    assert (record.rank, record.local_rank, record.exit_code) == (None, 0, None)
    assert any("local rank 0" in d.message and d.severity == "info" for d in facts.diagnostics)
    assert facts.observed_at == 1796144717.0
    (dump,) = facts.processes
    assert (dump.source, dump.exited, dump.pid) == ("traceback", True, None)
    (thread,) = dump.threads
    assert [(f.function, Path(f.file).name, f.line) for f in thread.frames] == [
        ("all_reduce", "distributed_c10d.py", 3252), ("wrapper", "c10d_logger.py", 83),
        ("sync_grads", "train.py", 58), ("train_step", "train.py", 75), ("main", "train.py", 99),
        ("wrapper", "__init__.py", 367)]
    assert thread.cite(thread.frames[0]) == m.Evidence(
        display(TIMEOUT), 1, "all_reduce (/opt/venv-capture/lib/python3.11/site-packages/torch/distributed/"
                             "distributed_c10d.py:3252)")
    found = stacks.classify(dump)
    assert (found.activity, found.op) == (m.BLOCKED, "all_reduce")


def test_exception_line_goes_through_the_catalogue():
    facts = read(TIMEOUT)
    from forensics import messages
    expected = messages.hits([only_record(facts).evidence.text], display(TIMEOUT), 1, local_rank=0)
    assert facts.messages == expected
    if any(messages.catalogue().get(h.id).cause == "timeout" for h in expected):
        assert only_record(facts).timed_out


def test_values_cite_their_own_lines_in_an_indented_file():
    facts = read(INDENTED)
    record = only_record(facts)
    lines = INDENTED.read_text().split("\n")
    assert record.evidence.line == 3 and lines[2].startswith('    "message": "RuntimeError: ')
    (dump,) = facts.processes
    assert dump.threads[0].evidence.line == 5 and lines[4].lstrip().startswith('"py_callstack"')
    assert record.rank == 0  # rank0/ in the path is a global rank


def test_agent_copy_carries_the_exit_code():
    record = only_record(read(AGENT))
    assert record.exit_code == 1 and record.evidence.text == (
        "ValueError: corrupt record in shard-00003.bin at offset 81920")
    assert record.local_rank is None


def test_crashed_worker_stack_ends_where_it_raised():
    facts = read(CRASH_RANK1)
    assert only_record(facts).local_rank == 1
    frames = facts.processes[0].threads[0].frames
    assert [(f.function, f.line) for f in frames] == [("load_next_batch", 51), ("main", 98), ("wrapper", 367)]


def test_chained_tracebacks_are_one_stack_and_the_root_cause_is_read():
    facts = read(CHAINED)
    record = only_record(facts)
    assert record.evidence.text == "RuntimeError: gradient sync failed at step 3"
    frames = facts.processes[0].threads[0].frames
    # train_step (line 77) caught the timeout and raised its own error (line 79): the stack
    # reaches down to the all_reduce where the first error happened
    assert [(f.function, f.line) for f in frames] == [
        ("all_reduce", 3252), ("wrapper", 83), ("sync_grads", 59), ("train_step", 77), ("main", 105),
        ("wrapper", 367)]
    texts = [hit.evidence.text for hit in facts.messages]
    assert all(t == record.evidence.text or "Timed out waiting 10000ms" in t for t in texts)


def test_string_message_shape():
    facts = read(STRING)
    record = only_record(facts)
    assert record.evidence == m.Evidence(display(STRING), 1, "Signal 6 (SIGABRT) received by PID 13830")
    assert (record.rank, facts.processes, facts.observed_at) == (1, [], 1796144579.0)


def test_tracebacks_chained_while_handling_and_unrelated():
    text = ('Traceback (most recent call last):\n  File "/a.py", line 3, in f\n    g()\nKeyError: 1\n\n'
            'During handling of the above exception, another exception occurred:\n\n'
            'Traceback (most recent call last):\n  File "/b.py", line 9, in <module>\n    h()\n'
            '  File "/b.py", line 5, in h\n    raise ValueError\nValueError: x\n')
    blocks = elastic_error._tracebacks(text)
    assert [([f.function for f in frames], exc) for frames, exc in blocks] == [
        (["f"], ["KeyError: 1"]), (["<module>", "h"], ["ValueError: x"])]
    # h did not call f: the last traceback alone
    assert [f.function for f in elastic_error._frames(blocks)] == ["h", "<module>"]


def test_a_file_cut_short_keeps_its_message(tmp_path):
    data = TIMEOUT.read_text()
    path = tmp_path / "error.json"
    path.write_text(data[:data.index("py_callstack") + 40])
    facts = elastic_error.parse(str(path), "error.json")
    assert only_record(facts).evidence.text.endswith("Timed out waiting 15000ms for recv operation to complete")
    assert [d.line for d in facts.diagnostics if "invalid JSON" in d.message] == [1]
    path.write_text('{"message": {"mess')
    with pytest.raises(InputError) as caught:
        elastic_error.parse(str(path), "error.json")
    assert caught.value.line == 1 and "invalid JSON" in caught.value.message


def test_not_an_error_file(tmp_path):
    path = tmp_path / "error.json"
    for text in ('{"message": {"extraInfo": {}}}', '{"message": 3, "timestamp": "1"}', "  "):
        path.write_text(text)
        with pytest.raises(InputError):
            elastic_error.parse(str(path), "error.json")


def test_sniffed_by_content_only():
    renamed = TIMEOUT.read_bytes()
    assert elastic_error.sniff("/x/anything.txt", renamed) == elastic_error.KIND
    assert elastic_error.sniff("/x/notes.json", STRING.read_bytes()) is None  # the bare shape needs the name
    for other in ('{"0": {"current_op": "send"}}', '{"version": "2.10", "entries": []}',
                  '[{"thread_id": 1, "frames": []}]', '{"message": "hello"}'):
        assert elastic_error.sniff("/x/error.json", other.encode()) is None
    for path in ALL:  # and the other JSON readers leave it alone
        head = read_head(str(path))
        assert pyspy.sniff(str(path), head) is None
        assert snapshot_plugin.forensics_sniff(path=str(path), head=head) is None
        assert flightrecorder.forensics_sniff(path=str(path), head=head) is None


def test_hooks_claim_and_parse():
    plugins = Plugins(autoload=False, builtins=("forensics.ingest.elastic_error",))
    assert plugins.hook.forensics_sniff(path=str(AGENT), head=read_head(str(AGENT))) == [elastic_error.KIND]
    facts = plugins.hook.forensics_parse(artifact=Artifact(elastic_error.KIND, str(AGENT), "agent_error.json"))
    assert facts.records[0].exit_code == 1


def test_analyze_reads_the_worker_that_died(run_cli, tmp_path):
    folder = tmp_path / "rank1"
    folder.mkdir()
    (folder / "error.json").write_bytes(CRASH_RANK1.read_bytes())
    result = run_cli("analyze", tmp_path, "--format", "json")
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert "1" in report["ranks"]
    assert not any("elastic" in d["message"] or "error.json" in d["message"] for d in report["diagnostics"]
                   if d["severity"] == "error")


@pytest.mark.parametrize("path", ALL, ids=display)
def test_analyze_of_one_file_never_exits_2(run_cli, tmp_path, path):
    (tmp_path / "error.json").write_bytes(path.read_bytes())
    result = run_cli("analyze", tmp_path)
    assert result.returncode in (0, 1), result.stderr


# ------------------------------------------------------------------ garbage in, no crash out

_SOURCES = {p: p.read_bytes().split(b"\n") if b"\n  " in p.read_bytes()
            else p.read_bytes().replace(b", ", b",\n").split(b"\n") for p in ALL}
_MUTATION = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 100)),
    st.tuples(st.just("duplicate"), st.integers(0, 100)),
    st.tuples(st.just("truncate"), st.integers(0, 100), st.integers(0, 400)),
    st.tuples(st.just("bytes"), st.integers(0, 100), st.binary(min_size=1, max_size=100)),
    st.tuples(st.just("glue"), st.integers(0, 100), st.integers(0, 100)),
    st.tuples(st.sampled_from(["huge", "latin1", "utf16", "nested", "number"]), st.integers(0, 100)),
)
_INSERTS = {"huge": b'"message": "' + b"x" * 5_000_000 + b'",',
            "latin1": '"message": "Fehler: Datei über",'.encode("latin-1"),
            "utf16": '{"message": "x"}'.encode("utf-16"),
            "nested": b"[" * 100_000,
            "number": b'"errorCode": 1' + b"9" * 5000 + b","}


def _parse_checked(data: bytes) -> None:
    facts = parse_bytes(elastic_error, data, "error.json")
    if facts is None:
        return
    total = data.count(b"\n") + 1
    for record in facts.records:
        assert 1 <= record.evidence.line <= total and isinstance(record.evidence.text, str)
    for dump in facts.processes:
        assert all(f.at == 0 and isinstance(f.line, int) for t in dump.threads for f in t.frames)
    assert all(0 <= d.line <= total for d in facts.diagnostics)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 100), mutations=st.lists(_MUTATION, min_size=1, max_size=6),
       cut=st.none() | st.integers(0, 4000))
def test_fuzzed_real_files_never_crash(which, mutations, cut):
    path = ALL[which % len(ALL)]
    data = b"\n".join(mutate_lines(_SOURCES[path], mutations, _INSERTS))
    _parse_checked(data if cut is None else data[:cut])


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=3000))
def test_random_bytes_never_crash(data):
    _parse_checked(b'{"message": {"message": ' + data)
    _parse_checked(data)
