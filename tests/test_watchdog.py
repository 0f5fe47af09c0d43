"""Our own watchdog: a file whose parse never ends, a worker that dies or
runs out of memory, and the run's --timeout each cost the files concerned
(named in a diagnostic with the limit), never the report; every worker
process is ended; a file that grows while read gives a prefix and a note.

The misbehaving parses come from a reader plugin (`Stubborn`, below) that
claims files starting with `STUBBORN <how>`: sleep, spin, die, hog, grow.
The CLI runs in its own process, with this plugin, beside a real py-spy
deadlock (corpus/real_p2p_cycle_2) whose verdict must survive.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from forensics import hookimpl
from forensics.ingest.facts import Facts
from forensics.ingest.textio import open_binary, read_at_most, read_bytes, read_head, take_notes

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus", "real_p2p_cycle_2")
PIPELINE = ["rank0.pyspy.txt", "rank1.pyspy.txt"]


class Stubborn:
    """A reader that misbehaves as its file says."""

    @hookimpl
    def forensics_sniff(self, path, head):
        return "stubborn" if head.startswith(b"STUBBORN ") else None

    @hookimpl
    def forensics_parse(self, artifact):
        if artifact.kind != "stubborn":
            return None
        how = read_head(artifact.path).split()[1].decode()
        if how == "sleep":
            time.sleep(3600)
        elif how == "spin":
            while True:
                pass
        elif how == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        elif how == "hog":  # 3 GiB at most, in 128 MiB steps: far past a 1 GiB share
            kept = [bytearray(128 << 20) for _ in range(24)]
            del kept
        elif how == "grow":
            with open_binary(artifact.path) as handle, open(artifact.path, "ab") as writer:
                writer.write(b"appended while being read\n" * 100)
                writer.flush()
                read_at_most(handle, 1 << 20)
        return Facts("stubborn", artifact.display)

    @hookimpl
    def forensics_findings(self, incident):
        """A rule that never ends, when the folder holds a file named so."""
        if any("slow_rule" in a.display for a in incident.artifacts):
            time.sleep(3600)
        return None


def main(argv):
    """What the subprocess runs: the CLI with the Stubborn reader."""
    from forensics.cli import main as cli_main
    from forensics.plugins import Plugins

    return cli_main(argv, plugins=Plugins(autoload=False, extra=(Stubborn(),)))


def _folder(tmp_path, hows, fast=0):
    folder = tmp_path / "incident"
    folder.mkdir()
    for name in PIPELINE:
        shutil.copy(os.path.join(CORPUS, name), folder / ("a_" + name))  # parsed first in name order
    for index, how in enumerate(hows):
        (folder / f"m_{index}_{how}.txt").write_bytes(f"STUBBORN {how}\n".encode())
    for index in range(fast):
        (folder / f"z_fast_{index:03d}.txt").write_bytes(b"STUBBORN fast\n")
    return folder


def _run(tmp_path, folder, *args, timeout=120):
    """(exit code, report, stderr, seconds); afterwards no process of this
    run is left (the token in its command line finds its workers too)."""
    token = f"watchdog-{os.getpid()}-{time.monotonic_ns()}"
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import test_watchdog; "
            f"sys.exit(test_watchdog.main(sys.argv[1:]))  # {token}")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, "analyze", str(folder), "-f", "json", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    seconds = time.monotonic() - started
    time.sleep(0.2)
    assert not _processes_with(token), "a worker process outlived the run"
    report = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, report, proc.stderr, seconds


def _processes_with(token: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if token.encode() in handle.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _errors(report) -> dict:
    return {os.path.basename(d["path"]): d["message"] for d in report["diagnostics"] if d["severity"] == "error"}


def _deadlock_survives(report):
    assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]


# ---------------------------------------------------------------- one file too slow

@pytest.mark.parametrize("jobs,fast", [(1, 0), (2, 70)], ids=["in-process", "forked-workers"])
def test_a_parse_that_never_ends_costs_that_file_only(tmp_path, jobs, fast):
    folder = _folder(tmp_path, ["sleep", "spin"], fast)
    code, report, stderr, seconds = _run(tmp_path, folder, "-j", jobs, "--file-timeout", 2)
    assert code == 1, stderr
    _deadlock_survives(report)
    errors = _errors(report)
    for name in ("m_0_sleep.txt", "m_1_spin.txt"):
        assert "per-file limit of 2 s (--file-timeout)" in errors[name], errors
    assert not [n for n in errors if n.startswith("z_fast")]  # a new worker took over: nothing else lost
    assert seconds < 40


def test_a_worker_that_dies_costs_its_file_only(tmp_path):
    folder = _folder(tmp_path, ["die"], fast=70)
    code, report, stderr, _ = _run(tmp_path, folder, "-j", 2)
    assert code == 1, stderr
    _deadlock_survives(report)
    assert "was killed by SIGKILL" in _errors(report)["m_0_die.txt"]


@pytest.mark.parametrize("jobs,fast", [(1, 0), (2, 70)], ids=["in-process", "forked-workers"])
def test_a_parse_past_its_memory_share_costs_that_file_only(tmp_path, jobs, fast):
    folder = _folder(tmp_path, ["hog"], fast)
    # 4 GiB in all: 2 for the main process, 2 shared by the workers (1 GiB each, the floor).
    code, report, stderr, _ = _run(tmp_path, folder, "-j", jobs, "--limit", "memory=4G")
    assert code == 1, stderr
    _deadlock_survives(report)
    assert "ran out of memory" in _errors(report)["m_0_hog.txt"]


# ---------------------------------------------------------------- the run's --timeout

@pytest.mark.parametrize("jobs,fast", [(1, 0), (2, 70)], ids=["in-process", "forked-workers"])
def test_the_run_timeout_gives_a_partial_report_naming_what_was_not_read(tmp_path, jobs, fast):
    folder = _folder(tmp_path, ["sleep", "sleep", "sleep"], fast)
    code, report, stderr, seconds = _run(tmp_path, folder, "-j", jobs, "--timeout", 5, "--file-timeout", 0)
    assert code == 1, stderr  # as for the findings so far: the deadlock was read in time
    _deadlock_survives(report)
    errors = _errors(report)
    late = sorted(n for n, message in errors.items() if "--timeout of 5 s ran out" in message)
    assert {"m_0_sleep.txt", "m_1_sleep.txt", "m_2_sleep.txt"} <= set(late), errors
    assert set(late) == set(errors)  # every file not read says why, and only those
    # Two workers both stuck in a sleep: the files no worker started are named too.
    assert any("never started" in errors[n] for n in late)
    assert f"--timeout of 5 s: {len(late)} file(s) not read in time" in stderr
    assert 3.5 < seconds < 30


def test_nothing_read_in_time_is_an_input_error(tmp_path):
    folder = tmp_path / "only_slow"
    folder.mkdir()
    (folder / "slow.txt").write_bytes(b"STUBBORN sleep\n")
    code, report, stderr, seconds = _run(tmp_path, folder, "--timeout", 2, "--file-timeout", 0)
    assert code == 2 and report is None
    assert "--timeout of 2 s ran out" in stderr and seconds < 30


def test_an_analysis_past_the_timeout_ends_the_run_with_a_reason(tmp_path):
    folder = _folder(tmp_path, ["fast"])
    (folder / "slow_rule.txt").write_bytes(b"STUBBORN fast\n")
    code, report, stderr, seconds = _run(tmp_path, folder, "--timeout", 4)
    assert code == 2 and report is None
    assert "--timeout of 4 s ran out during the analysis" in stderr
    assert seconds < 30


def test_bad_timeouts_are_usage_errors(tmp_path):
    for args in (["--timeout", "soon"], ["--file-timeout", "-1"], ["--timeout", "inf"]):
        proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", CORPUS, *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "usage error" in proc.stderr, args


# ---------------------------------------------------------------- files that change while read

def test_a_file_that_grows_while_read_gives_the_prefix_it_had(tmp_path):
    path = tmp_path / "rank0.log"
    path.write_bytes(b"line 1\nline 2\n")
    take_notes()
    with open_binary(str(path)) as handle, open(path, "ab") as writer:
        writer.write(b"line 3, written after the open\n")
        writer.flush()
        data = read_at_most(handle, 1 << 20)
    assert data == b"line 1\nline 2\n"
    [(where, message)] = take_notes()
    assert where == str(path) and "grew while it was read" in message and "14 bytes" in message


def test_a_file_truncated_while_read_gives_what_was_left(tmp_path):
    path = tmp_path / "rank0.log"
    path.write_bytes(b"x" * 10_000 + b"\n")
    take_notes()
    with open_binary(str(path)) as handle:
        os.truncate(path, 4_000)
        data = read_at_most(handle, 1 << 20)
    assert data == b"x" * 4_000
    [(_, message)] = take_notes()
    assert "shrank while it was read" in message and "10,001" in message


def test_a_whole_file_read_names_its_growth_too(tmp_path):
    path = tmp_path / "still_writing.log"
    path.write_bytes(b"a\n" * 1000)
    take_notes()
    assert read_bytes(str(path)) == b"a\n" * 1000
    assert take_notes() == []  # a file that holds still leaves no note


def test_growth_while_read_is_a_diagnostic_on_that_file(tmp_path):
    folder = _folder(tmp_path, ["grow"])
    code, report, stderr, _ = _run(tmp_path, folder, "-j", 1)
    assert code == 1, stderr
    _deadlock_survives(report)
    notes = [d for d in report["diagnostics"] if d["path"].endswith("m_0_grow.txt")]
    assert notes and "grew while it was read" in notes[0]["message"], report["diagnostics"]
