"""Progress is a change of position, not activity: `forensics collect
--snapshots` records where each rank's main thread is in every round (its
frames, the call it is in, the Flight Recorder's sequence numbers) and
judges "hung or slow" from that, on real Gloo jobs this test starts
(tests/jobs/train_stalls.py): a rank spinning in a Python loop or sleeping
while the others wait in all_reduce is named past --stuck-after and "not a
hang yet" below it; a long computation that ends inside the window and a
job that progresses slowly are healthy. CPU time alone never makes a rank
"moved". GPU utilisation and power come from nvidia-smi where it exists (a
fake one this test writes), and its absence is said.

The same four through `forensics watch` with the in-job agent
(`torchrun -m forensics.agent`, the job's own TCPStore): the spinning and
the sleeping rank are named past --stuck-after with their place, by the
same reader and in the same words as collect's; the long computation and
the slow job raise no alarm. `forensics analyze` of a verdict's folder
(snapshot, window and stack dumps) judges it again the same way, with
--stuck-after meaning what it means for a collected folder."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time

import pytest

from forensics.ingest import progress as reader
from forensics.live import collect as live

from conftest import CORPUS
from test_collect import Job, _alive_and_running, _port, needs_job
from test_watch import Watcher

JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")
SCRIPT = os.path.join(JOBS, "train_stalls.py")


# ------------------------------------------------------------------ positions, without a job

def _frames(*labels):
    """`fn:line` labels, outermost first, as collect records them."""
    return [[label.split(":")[0], "train.py" if label.split(":")[0] != "all_reduce"
             else "torch/distributed/distributed_c10d.py", int(label.split(":")[1])] for label in labels]


def _place(activity, *labels, op=""):
    return {"activity": activity, "op": op, "why": "", "frames": _frames(*labels)}


def test_a_stack_moving_inside_one_loop_is_the_same_position():
    spin = [_place("computing", "main:90", "decode_batch:62", "_decode_record:55"),
            _place("computing", "main:90", "decode_batch:63"),
            _place("computing", "main:90", "decode_batch:62", "_decode_record:54")]
    judged = live.judge_positions(spin)
    assert judged["stack_moved"] is False
    assert judged["loop"] == "decode_batch (train.py:62)" and judged["busy_in"] == "decode_batch (train.py:62)"
    assert not judged["waiting_in"]


def test_a_stack_that_leaves_the_loop_has_moved():
    steps = [_place("computing", "main:90", "decode_batch:62"),
             _place("blocked", "main:92", "sync_gradients:80", "all_reduce:2950", op="all_reduce")]
    assert live.judge_positions(steps)["stack_moved"] is True  # it issued a call
    # main's loop, by the stack alone: the call issued is what moved
    assert live.same_place(steps[0]["frames"], steps[1]["frames"]) is True
    loader = [_place("computing", "main:90", "decode_batch:62"), _place("computing", "main:95", "save:12")]
    assert live.judge_positions(loader)["stack_moved"] is False
    other = [_place("computing", "main:90", "decode_batch:62"), _place("computing", "evaluate:95", "save:12")]
    assert live.judge_positions(other)["stack_moved"] is True and live.same_place(*(p["frames"] for p in other)) \
        is False


def test_the_same_call_at_the_same_place_in_every_round_is_waiting():
    wait = _place("blocked", "main:92", "sync_gradients:80", "all_reduce:2950", op="all_reduce")
    judged = live.judge_positions([wait, None, wait, wait])
    assert judged["waiting_in"] == "all_reduce" and not judged["stack_moved"] and not judged["busy_in"]
    other_call = _place("blocked", "main:92", "sync_gradients:81", "all_reduce:2950", op="all_reduce")
    assert not live.judge_positions([wait, other_call])["waiting_in"]  # same loop, but another all_reduce


def _progress_file(tmp_path, window, stuck_after=None, fr_seq=418, gpus=None):
    rounds = []
    for i, t in enumerate((0.0, window / 2, window)):
        rd = {"time": t, "ranks": {}}
        for rank in range(4):
            busy = rank == 1
            rd["ranks"][rank] = {
                "threads": {"1": 100 * i if busy else 1}, "stack": "s%d" % (i if busy else 0),
                "switches": 3, "output": 10,
                "fr": None if busy else {"record_id": 9, "state": "started", "groups": {"0": [fr_seq, -1]},
                                         "newest": {"pg": "0", "seq": fr_seq, "op": "gloo:all_reduce"},
                                         "timeout_ms": 600000},
                "position": (_place("computing", "main:90", "decode_batch:%d" % (240 + i % 2)) if busy else
                             _place("blocked", "main:92", "sync_gradients:80", "all_reduce:2950", op="all_reduce"))}
        if gpus is not None:
            rd["gpus"] = gpus
        rounds.append(rd)
    ranks = [live.Rank(r, live.Proc(4000 + r, 1, "S", 0, "python train.py", {"RANK": str(r)}), r) for r in range(4)]
    live._write_progress(str(tmp_path), ranks, rounds, window / 2, stuck_after)
    return tmp_path / "progress.json"


def test_waiting_past_the_threshold_is_stuck_and_names_the_busy_rank(tmp_path):
    path = _progress_file(tmp_path, 62.0)
    data = json.loads(path.read_text())
    assert data["schema"] == "forensics.progress/2"
    assert data["stuck_after_s"] == 300.0 and data["collective_timeout_s"] == 600.0  # half the dump's timeout
    assert data["ranks"]["1"]["activity"]["cpu_s"] > 0 and data["ranks"]["1"]["moved"] is False
    with reader.stuck_after(60):
        facts = reader.parse(str(path), "progress.json")
    [signal] = facts.stuck
    assert signal.kind == "no_progress"
    assert signal.detail.startswith("rank 1 kept busy in decode_batch (train.py:240) for 62 s while 0, 2, 3 "
                                    "waited in all_reduce #418"), signal.detail
    assert "Rank 1 一直忙于 decode_batch (train.py:240)" in signal.detail_zh
    lines = path.read_text().splitlines()
    assert lines[signal.evidence.line - 1].strip().startswith('"busy_in": "decode_batch')
    # without the override: 62 s is below half the 600 s timeout
    facts = reader.parse(str(path), "progress.json")
    assert not facts.stuck
    [note] = [d for d in facts.diagnostics if d.message.startswith("not a hang yet")]
    assert "rank 1 kept busy in decode_batch (train.py:240)" in note.message
    assert "half the collective timeout of 600 s" in note.message and "look again in 238 s" in note.message


def test_collects_own_threshold_is_recorded_and_read(tmp_path):
    path = _progress_file(tmp_path, 3.0, stuck_after=2.0)
    assert json.loads(path.read_text())["stuck_after_from"] == "--stuck-after"
    assert [s.kind for s in reader.parse(str(path), "progress.json").stuck] == ["no_progress"]


def test_the_first_schema_still_reads():
    path = CORPUS / "real_collect_missing_rank_snapshots" / "progress.json"
    facts = reader.parse(str(path), "progress.json")
    assert [s.kind for s in facts.stuck] == ["no_progress"]
    assert facts.stuck[0].detail.startswith("forensics collect saw rank 0-3 not move in 3 rounds over 7.44 s")


def _fake_nvidia_smi(folder, lines: str, exit_code: int = 0):
    """A real program named nvidia-smi that answers the query collect sends."""
    folder.mkdir(exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text("#!/bin/sh\n"
                    "case \"$*\" in *--query-gpu=index,utilization.gpu,power.draw,power.limit*) ;; "
                    "*) echo \"unexpected arguments: $*\" >&2; exit 9;; esac\n"
                    f"printf '{lines}'\nexit {exit_code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


def test_gpu_utilisation_and_power_from_nvidia_smi(tmp_path, monkeypatch):
    bin_dir = _fake_nvidia_smi(tmp_path / "bin",
                               "0, 100, 61.52, 400.00\\n1, 37, 250.10, 400.00\\n2, [N/A], [N/A], [N/A]\\n"
                               "No devices were found in slot 3\\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    seen = live.gpu_round()
    assert seen["gpus"] == [
        {"index": 0, "utilization_pct": 100, "power_w": 61.52, "power_limit_w": 400},
        {"index": 1, "utilization_pct": 37, "power_w": 250.1, "power_limit_w": 400},
        {"index": 2, "utilization_pct": None, "power_w": None, "power_limit_w": None}]
    assert seen["unread"] == ["No devices were found in slot 3"]  # shown, not dropped
    path = _progress_file(tmp_path, 6.0, gpus=seen)
    notes = [d.message for d in reader.parse(str(path), "progress.json").diagnostics]
    gpu0 = next(n for n in notes if n.startswith("GPU 0:"))
    assert "100% at 61.52 W" in gpu0 and "full utilisation at idle power in every round" in gpu0
    assert "spinning" not in next(n for n in notes if n.startswith("GPU 1:"))
    assert next(n for n in notes if n.startswith("GPU 2:")).endswith("? at ?, ? at ?, ? at ?")  # unknown, not 0
    assert "GPUs: nvidia-smi said what was not read: No devices were found in slot 3" in notes


def test_no_nvidia_smi_is_said_not_guessed(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert live.gpu_round() == {"missing": "nvidia-smi is not on PATH: no GPU utilisation or power recorded"}
    failing = _fake_nvidia_smi(tmp_path / "bin", "NVIDIA-SMI has failed because it could not communicate "
                                                 "with the NVIDIA driver.\\n", 9)
    monkeypatch.setenv("PATH", str(failing))
    assert live.gpu_round()["missing"].startswith("nvidia-smi exit 9: NVIDIA-SMI has failed")
    path = _progress_file(tmp_path, 6.0, gpus=live.gpu_round())
    assert any(d.message.startswith("GPUs: nvidia-smi exit 9") for d in reader.parse(str(path), "p").diagnostics)


# ------------------------------------------------------------------ real Gloo jobs

def _fr_env(tmp_path) -> dict:
    return {"TORCH_FR_DEBUG_INFO_PIPE_FILE": str(tmp_path / "fr_pipe_"),
            "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr_dump_")}


@pytest.fixture
def stall_job(tmp_path):
    jobs = []

    def start(nproc, *extra, **options):  # options: Job's (agent=[] and port= for the in-job agent)
        job = Job(tmp_path, "", nproc, *extra, env=_fr_env(tmp_path), script=SCRIPT, **options)
        jobs.append(job)
        return job
    yield start
    for job in jobs:
        job.end()


def _cli(*args, env=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "forensics", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _narrative(report) -> str:
    return report["root_cause"]["narrative"]


def _line(script_function: str) -> int:
    """The line of train_stalls.py where a function's loop is."""
    text = open(SCRIPT).read().splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith(f"def {script_function}("))
    return start + 1


@needs_job
def test_a_spinning_rank_is_not_a_hang_yet_then_named_past_stuck_after(stall_job, tmp_path):
    job = stall_job(3, "--stall", "spin")
    ranks = job.wait_for("warm-up done")
    smi = _fake_nvidia_smi(tmp_path / "bin", "0, 100, 58.00, 400.00\\n")
    out = tmp_path / "out"
    proc = _cli("collect", "--out", out, "--job", job.port, "--snapshots", "3", "--interval", "1", "--analyze",
                "-f", "json", env={"PATH": f"{smi}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # below the threshold (half the job's 600 s collective timeout): not a hang yet, the suspect named
    assert report["verdict"] == "healthy", report["verdict"]
    note = next(d["message"] for d in report["diagnostics"] if d["message"].startswith("not a hang yet"))
    assert re.search(r"rank 0, 2 waited in all_reduce #\d+ for [\d.]+ s without moving: rank 1 kept busy in "
                     r"(decode_batch|_decode_record) \(train_stalls.py:\d+\)", note), note
    assert "half the collective timeout of 600 s" in note and "look again in" in note
    progress = json.loads((out / "progress.json").read_text())
    spinner = progress["ranks"]["1"]
    assert spinner["activity"]["cpu_s"] > 0.5 and spinner["moved"] is False  # CPU time is not progress
    assert spinner["positions"][0]["frames"][-2:][0][0] in ("decode_batch", "main")
    assert all(progress["ranks"][r]["waiting_in"] == "all_reduce" for r in ("0", "2"))
    assert progress["gpus"]["rounds"] == [[{"index": 0, "utilization_pct": 100, "power_w": 58,
                                            "power_limit_w": 400}]] * 3
    assert any(d["message"].startswith("GPU 0: utilisation and power per round: 100% at 58 W")
               and "spinning" in d["message"] for d in report["diagnostics"])
    # the same folder judged with a threshold the window passes
    proc = _cli("analyze", out, "--stuck-after", "2", "-f", "json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [1], report["verdict"]
    [signal] = [s for s in report["decided_by"] if s["kind"] == "no_progress"]
    assert re.match(r"rank 1 kept busy in (decode_batch|_decode_record) \(train_stalls.py:\d+\) for [\d.]+ s "
                    r"while 0, 2 waited in all_reduce #\d+", signal["detail"]), signal
    zh = json.loads(_cli("analyze", out, "--stuck-after", "2", "-f", "json", "--lang", "zh").stdout)
    assert "Rank 1 一直忙于" in json.dumps(zh, ensure_ascii=False)
    _alive_and_running(ranks.values())


@needs_job
def test_a_sleeping_rank_is_named_past_stuck_after(stall_job, tmp_path):
    job = stall_job(3, "--stall", "sleep")
    ranks = job.wait_for("warm-up done")
    proc = _cli("collect", "--out", tmp_path / "out", "--job", job.port, "--snapshots", "3", "--interval", "1",
                "--stuck-after", "2", "--analyze", "-f", "json", env={"PATH": os.path.dirname(sys.executable)
                                                                     + os.pathsep + "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [1], report
    [signal] = [s for s in report["decided_by"] if s["kind"] == "no_progress"]
    assert re.match(rf"rank 1 stayed idle in fetch_remote_shard \(train_stalls.py:{_line('fetch_remote_shard') + 2}\)"
                    r" for [\d.]+ s while 0, 2 waited in all_reduce #\d+", signal["detail"]), signal
    assert "(forensics collect, 3 rounds over" in signal["detail"] and "stuck after 2 s: --stuck-after" in \
        signal["detail"]
    assert any(d["message"] == "GPUs: nvidia-smi is not on PATH: no GPU utilisation or power recorded"
               for d in report["diagnostics"])
    _alive_and_running(ranks.values())


def _collect_in_process(out, job, rounds, interval, on_round=None, stuck_after=2.0) -> dict:
    def echo(line):
        found = re.match(r"collect: round (\d+):", line)
        if found and on_round is not None:
            on_round(int(found.group(1)))
    live.collect(live.Options(out=str(out), job=str(job.port), snapshots=rounds, interval=interval, echo=echo,
                              stuck_after=stuck_after))
    return json.loads((out / "progress.json").read_text())


@needs_job
def test_a_long_computation_that_ends_inside_the_window_is_progress(stall_job, tmp_path):
    release = tmp_path / "release"
    job = stall_job(3, "--stall", "long_eval", "--eval-s", "600", "--release-file", str(release))
    job.wait_for("warm-up done")

    def after(round_no):  # the evaluation ends between the first and the second round
        if round_no == 1:
            release.write_text("go")
    progress = _collect_in_process(tmp_path / "out", job, 3, 1.5, after)
    first = progress["ranks"]["1"]["positions"][0]
    assert any(f[0] == "compute_eval_metrics" for f in first["frames"]), first
    assert progress["ranks"]["0"]["positions"][0]["op"] == "all_reduce"
    assert all(v["moved"] for v in progress["ranks"].values()), progress["ranks"]
    assert all(v["flight_recorder_changed"] is True for v in progress["ranks"].values())
    proc = _cli("analyze", tmp_path / "out", "-f", "json")
    report = json.loads(proc.stdout)
    assert report["verdict"] == "healthy" and not report["decided_by"], report["verdict"]
    assert any(d["message"].startswith("every rank (0-2) moved in 3 rounds") for d in report["diagnostics"])


@needs_job
def test_a_job_that_progresses_slowly_is_healthy(stall_job, tmp_path):
    job = stall_job(3, "--stall", "none", "--step-s", "0.8")
    job.wait_for("step 2 ")
    progress = _collect_in_process(tmp_path / "out", job, 3, 1.0)
    assert all(v["moved"] for v in progress["ranks"].values()), progress["ranks"]
    # moved by position: their calls' sequence numbers, not only their output
    assert all(v["flight_recorder_changed"] is True for v in progress["ranks"].values()), progress["ranks"]
    proc = _cli("analyze", tmp_path / "out", "-f", "json", "--stuck-after", "1")
    report = json.loads(proc.stdout)
    assert report["verdict"] == "healthy" and not report["decided_by"], report["verdict"]


def test_a_damaged_progress_file_is_read_as_far_as_it_goes(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(json.dumps({
        "schema": "forensics.progress/2", "rounds": "3", "seconds": True, "stuck_after_s": "soon",
        "gpus": {"rounds": [None, [{"index": "0"}, {"index": 1, "power_w": "hot"}]], "unread": [7]},
        "ranks": {"0": {"moved": False, "waiting_in": ["all_reduce"], "flight_recorder": "x", "activity": []},
                  "1": {"moved": False, "waiting_in": "all_reduce", "flight_recorder": [{"newest": 5}]},
                  "2": {"moved": "no"}, "x": {"moved": True}}}, indent=1))
    facts = reader.parse(str(path), "progress.json")
    messages = [d.message for d in facts.diagnostics]
    assert "rank entry '2' is not a rank's progress: ignored" in messages
    assert "rank entry 'x' is not a rank's progress: ignored" in messages
    assert any(m.startswith("not a hang yet: rank 1 waited in all_reduce for 0 s") for m in messages), messages
    assert "GPU 1: utilisation and power per round: ? at ?" in messages
    path.write_text('{"schema": "forensics.progress/3", "ranks": {}}')
    with pytest.raises(reader.InputError, match="not a forensics.progress/2"):
        reader.parse(str(path), "progress.json")


# ------------------------------------------------------------------ the same jobs through `forensics watch`

def _watched(stall_job, tmp_path, *extra, stuck_after, watch_args=()):
    """A 3-rank stall job with the agent publishing to its own TCPStore, past
    its warm-up, and `forensics watch` on that store."""
    port = _port()
    job = stall_job(3, *extra, agent=[], port=port)
    ranks = job.wait_for("warm-up done")
    watcher = Watcher(tmp_path, f"tcpstore://127.0.0.1:{port}", 3, "--stuck-after", str(stuck_after), *watch_args)
    return job, ranks, watcher


def _judged(watcher) -> dict | None:
    """The states the watcher judged last (current/snapshot.json), once written."""
    try:
        return json.loads((watcher.out / "current" / "snapshot.json").read_text())["ranks"]
    except (OSError, ValueError):
        return None


def _no_progress(report) -> str:
    [signal] = [s for s in report["decided_by"] if s["kind"] == "no_progress"]
    return signal["detail"]


def _judged_again(folder, detail, busy):
    """`forensics analyze` of a verdict's folder reads its snapshot, window and
    stack dumps together and judges as the watcher did; below a threshold the
    window does not pass, it is not a hang yet, as for a collected folder."""
    proc = _cli("analyze", folder, "-f", "json")
    again = json.loads(proc.stdout)
    assert proc.returncode == 1 and (again["verdict"], again["culprit_ranks"]) == ("missing_rank", [1]), proc.stderr
    assert _no_progress(again) == detail
    assert {"snapshot", "collect-progress", "py-spy"} <= {r["kind"] for r in again["read"]}, again["read"]
    assert again["ranks"]["1"]["evidence"]["path"] == "stacks/rank1.pyspy.txt", again["ranks"]["1"]  # its dump
    proc = _cli("analyze", folder, "--stuck-after", "600", "-f", "json")
    below = json.loads(proc.stdout)
    assert proc.returncode == 0 and below["verdict"] == "healthy" and not below["decided_by"], below["verdict"]
    note = next(d["message"] for d in below["diagnostics"] if d["message"].startswith("not a hang yet"))
    assert re.match(rf"not a hang yet: rank 0, 2 waited in all_reduce for [\d.]+ s without moving: rank 1 {busy}; "
                    r"stuck only past 600 s \(analyze --stuck-after\): look again in \d+ s", note), note


@needs_job
def test_watch_names_a_spinning_rank_past_stuck_after_with_its_place(stall_job, tmp_path):
    job, ranks, watcher = _watched(stall_job, tmp_path, "--stall", "spin", stuck_after=4)
    code, out, err = watcher.finish(120)
    report = json.loads(out)
    assert code == 1 and (report["verdict"], report["culprit_ranks"]) == ("missing_rank", [1]), err[-2000:]
    busy = r"kept busy in (decode_batch|_decode_record) \(train_stalls.py:\d+\)"
    detail = _no_progress(report)
    assert re.match(rf"rank 1 {busy} for [\d.]+ s while 0, 2 waited in all_reduce \(", detail), detail
    assert "stuck after 4 s: --stuck-after" in detail
    folder = watcher.out / "hang-1"
    window = json.loads((folder / "snapshots" / "progress.json").read_text())
    assert window["seconds"] >= 4 and window["stuck_after_s"] == 4
    spinner = window["ranks"]["1"]
    assert spinner["activity"]["cpu_s"] > 0 and spinner["moved"] is False  # CPU time is not progress
    assert [window["ranks"][r]["waiting_in"] for r in ("0", "2")] == ["all_reduce", "all_reduce"]
    assert window["ranks"]["0"]["activity"] == {}  # placed by its agent's state: its CPU time is not read
    assert window["written_by"] == "forensics watch"
    verdict = watcher.verdict()
    assert verdict["judged_stuck"] is True and verdict["root_cause_rank"] == 1
    assert re.search(rf"; it {busy} through the [\d.]+ s window$", verdict["root_cause_progress"]), verdict
    _judged_again(folder, detail, busy)
    _alive_and_running(ranks.values())


@needs_job
def test_watch_names_a_sleeping_rank_past_stuck_after_with_its_place(stall_job, tmp_path):
    job, ranks, watcher = _watched(stall_job, tmp_path, "--stall", "sleep", stuck_after=4)
    code, out, err = watcher.finish(120)
    report = json.loads(out)
    assert code == 1 and (report["verdict"], report["culprit_ranks"]) == ("missing_rank", [1]), err[-2000:]
    busy = rf"stayed idle in fetch_remote_shard \(train_stalls.py:{_line('fetch_remote_shard') + 2}\)"
    detail = _no_progress(report)
    assert re.match(rf"rank 1 {busy} for [\d.]+ s while 0, 2 waited in all_reduce \(", detail), detail
    window = json.loads((watcher.out / "hang-1" / "snapshots" / "progress.json").read_text())
    assert window["ranks"]["1"]["idle"] is True and window["ranks"]["1"]["moved"] is False
    _judged_again(watcher.out / "hang-1", detail, busy)
    _alive_and_running(ranks.values())


@needs_job
def test_watch_raises_no_alarm_for_a_long_computation_that_ends_inside_the_window(stall_job, tmp_path):
    release = tmp_path / "release"
    job, ranks, watcher = _watched(stall_job, tmp_path, "--stall", "long_eval", "--eval-s", "600",
                                   "--release-file", str(release), stuck_after=12, watch_args=("--timeout", "30"))
    deadline = time.time() + 60
    while not ((_judged(watcher) or {}).get("0", {}).get("current_op") == "all_reduce"
               and _judged(watcher).get("2", {}).get("current_op") == "all_reduce"):
        assert time.time() < deadline and watcher.proc.poll() is None, "the watcher never saw ranks 0, 2 wait"
        time.sleep(0.2)
    seen = _judged(watcher)
    assert seen["1"]["current_op"] == "compute", seen  # rank 1 evaluates while the others wait for it
    waiting_since = time.time()
    while time.time() < waiting_since + 5:  # the evaluation goes on well into the 12 s window
        assert job.proc.poll() is None and watcher.proc.poll() is None
        time.sleep(0.2)
    release.write_text("go")
    job.wait_for("step 3 ")
    code, out, err = watcher.finish(60)
    assert code == 0 and out == "" and not list(watcher.out.glob("hang-*")), (out, err[-2000:])
    assert not (watcher.out / "current" / "progress.json").exists()  # never judged stuck


@needs_job
def test_watch_raises_no_alarm_for_a_job_that_progresses_slowly(stall_job, tmp_path):
    job, ranks, watcher = _watched(stall_job, tmp_path, "--stall", "none", "--step-s", "0.8", stuck_after=3,
                                   watch_args=("--timeout", "20"))
    seqs = set()
    deadline = time.time() + 60
    while len(seqs) < 3:  # the waits published and judged, each at a later call: progress by position
        assert time.time() < deadline and watcher.proc.poll() is None, seqs
        state = (_judged(watcher) or {}).get("0", {})
        if state.get("current_op") == "all_reduce":
            seqs.add(state["op_seq"])
        time.sleep(0.1)
    code, out, err = watcher.finish(60)
    assert code == 0 and out == "" and not list(watcher.out.glob("hang-*")), (out, err[-2000:])
    assert not (watcher.out / "current" / "progress.json").exists()
    assert job.proc.poll() is None


def test_several_snapshot_files_are_judged_as_a_window_against_stuck_after():
    """Two snapshots 300 s apart in which ranks 0, 1, 3 kept their place in
    all_reduce #812 while rank 2 loaded data: below a 600 s threshold that is
    'not a hang yet', as it is for a window collect or watch wrote."""
    import forensics

    folder = CORPUS / "snapshot_missing_rank"
    with reader.stuck_after(600):
        report = forensics.analyze([folder / "snapshot_1.json", folder / "snapshot_2.json"], jobs=1)
    assert report.verdict == "healthy", [s.detail for s in report.incident.stuck]
    assert any("not a hang yet" in d.message for d in report.incident.diagnostics)
    with reader.stuck_after(120):  # 300 s without a move is past 120 s: stuck, the same verdict as the folder's
        report = forensics.analyze([folder / "snapshot_1.json", folder / "snapshot_2.json"], jobs=1)
    assert (report.verdict, report.culprit_ranks) == ("missing_rank", [2])


def test_several_snapshot_files_take_half_the_collective_timeout_they_state(tmp_path):
    """Without --stuck-after, snapshots whose calls state a 400 s timeout are
    judged against 200 s, as forensics collect takes the job's own timeout:
    300 s without a move is stuck; with a 1,000 s timeout it is not yet."""
    import json

    import forensics

    for timeout, verdict in ((400_000, "missing_rank"), (1_000_000, "healthy")):
        folder = tmp_path / str(timeout)
        folder.mkdir()
        for name in ("snapshot_1.json", "snapshot_2.json"):
            data = json.loads((CORPUS / "snapshot_missing_rank" / name).read_text())
            for state in data["ranks"].values():
                if state.get("current_op") == "all_reduce":
                    state["timeout_ms"] = timeout
            (folder / name).write_text(json.dumps(data))
        report = forensics.analyze(folder, jobs=1)
        assert report.verdict == verdict, [d.message for d in report.incident.diagnostics]
        if verdict == "healthy":
            assert any("half the collective timeout of 1000 s" in d.message for d in report.incident.diagnostics)
