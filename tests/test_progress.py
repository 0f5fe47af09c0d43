"""The ingest progress bar and the styled text: only on a terminal (tested
through a pseudo-terminal), never when piped, never with --quiet."""

import os
import re
import select
import subprocess
import sys
import time

import pytest

from forensics.ingest import load_incident
from forensics.plugins import Plugins

from conftest import CORPUS

pty = pytest.importorskip("pty")

DUMP = (CORPUS / "real_p2p_cycle_2" / "rank0.pyspy.txt").read_text()
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


NCCL = (CORPUS / "synthetic_network_fault_nccl" / "rank0.nccl.log").read_text().splitlines()
COLL = ("gpu-a:4101:4101 [0] NCCL INFO AllReduce: opCount %x sendbuff 0x7f7a00000000 recvbuff 0x7f7a00000000 "
        "count 18816 datatype 7 op 0 root 0 comm 0x55d000a2b3c40 [nranks=4] stream 0x55d000a2a2f00")
SLOW_FILES = 12


@pytest.fixture(scope="module")
def many_dumps(tmp_path_factory):
    folder = tmp_path_factory.mktemp("many_dumps")
    for rank in range(400):
        (folder / f"rank{rank}.pyspy.txt").write_text(DUMP.replace("6681", str(7000 + rank)))
    return folder


@pytest.fixture(scope="module")
def slow_incident(tmp_path_factory):
    """NCCL logs (about 45 MB) that take a visible moment to read and are
    quick to analyze."""
    folder = tmp_path_factory.mktemp("big_logs")
    head = [line for line in NCCL if "opCount" not in line][:20]
    for part in range(SLOW_FILES):
        calls = (COLL % n for n in range(part * 20000, (part + 1) * 20000))
        (folder / f"rank0.part{part}.nccl.log").write_text("\n".join([*head, *calls]) + "\n")
    return folder


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")}
    env.update({"TERM": "xterm-256color", "COLUMNS": "100", "LINES": "40", **extra})
    return env


def run_with_terminal(args, tmp_path, stdout_on_terminal=False, env=None, timeout=120):
    """Run the CLI with stderr (and optionally stdout) on a pseudo-terminal;
    returns (exit code, what the terminal got, stdout if it was a file)."""
    master, slave = pty.openpty()
    out_path = tmp_path / "stdout.txt"
    with open(out_path, "w") as out_file:
        proc = subprocess.Popen([sys.executable, "-m", "forensics", *map(str, args)],
                                stdin=subprocess.DEVNULL, stdout=slave if stdout_on_terminal else out_file,
                                stderr=slave, env=env or _env(), cwd=tmp_path)
        os.close(slave)
        seen = bytearray()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=30)
    os.close(master)
    return code, seen.decode("utf-8", "replace").replace("\r\n", "\n"), out_path.read_text()


def test_progress_callback_counts_files_and_bytes(many_dumps):
    calls = []
    load_incident([str(many_dumps)], Plugins(autoload=False), jobs=1,
                  progress=lambda *counts: calls.append(counts))
    size = sum(p.stat().st_size for p in many_dumps.iterdir())
    assert calls[0] == (0, 400, 0, size)
    assert calls[-1] == (400, 400, size, size)
    assert all(a[0] <= b[0] and a[2] <= b[2] for a, b in zip(calls, calls[1:]))


def test_progress_callback_in_parallel(many_dumps):
    calls = []
    load_incident([str(many_dumps)], Plugins(autoload=False), jobs=2,
                  progress=lambda *counts: calls.append(counts))
    assert calls[-1][0] == calls[-1][1] == 400 and len(calls) >= 3


# How long ingest takes depends on the machine; FORENSICS_PROGRESS_DELAY=0
# makes the bar appear at once, so the tests below do not race the clock.
# The default delay is tested by the quick run, which must print nothing.
NOW = {"FORENSICS_PROGRESS_DELAY": "0"}


def test_progress_bar_on_a_terminal(slow_incident, tmp_path):
    code, terminal, stdout = run_with_terminal(["analyze", slow_incident, "-j", "1"], tmp_path, env=_env(**NOW))
    assert code in (0, 1)
    assert "reading artifacts" in terminal
    assert re.search(rf"\d+/{SLOW_FILES} files", terminal)
    assert re.search(r"[\d.]+/[\d.]+ [kM]B", terminal)
    assert stdout.startswith("forensics verdict:") and "\x1b" not in stdout  # stdout is a file: plain


def test_quiet_silences_the_progress_bar(slow_incident, tmp_path):
    code, terminal, stdout = run_with_terminal(["analyze", slow_incident, "-j", "1", "--quiet"], tmp_path,
                                               env=_env(**NOW))
    assert code in (0, 1)
    assert terminal == ""
    assert stdout.startswith("forensics verdict:")


def test_quick_runs_show_no_progress(tmp_path):
    code, terminal, _ = run_with_terminal(["analyze", CORPUS / "seed_p2p_deadlock"], tmp_path)
    assert code == 1
    assert terminal == ""


def test_piped_output_has_no_progress_and_no_colour(slow_incident, run_cli):
    result = run_cli("analyze", slow_incident, "-j", "1", env={"TERM": "xterm-256color", **NOW})
    assert result.stderr == ""
    assert "\x1b" not in result.stdout
    assert result.stdout.startswith("forensics verdict:")


def test_text_on_a_terminal_is_coloured_and_wrapped(tmp_path):
    incident = CORPUS / "real_p2p_cycle_2"
    code, terminal, _ = run_with_terminal(["analyze", incident], tmp_path, stdout_on_terminal=True,
                                          env=_env(COLUMNS="60"))
    assert code == 1
    assert ANSI.search(terminal)
    bare = ANSI.sub("", terminal)
    assert bare.startswith("forensics verdict: DEADLOCK")
    assert max(len(line) for line in bare.splitlines()) <= 60
    piped = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(incident)],
                           capture_output=True, text=True, env=_env()).stdout
    # Wrapping may fold a word longer than the width: compare what is printed, not where lines break.
    assert "".join(bare.split()) == "".join(piped.split())


def test_no_color_on_a_terminal(tmp_path):
    code, terminal, _ = run_with_terminal(["analyze", CORPUS / "real_p2p_cycle_2"], tmp_path,
                                          stdout_on_terminal=True, env=_env(NO_COLOR="1"))
    assert code == 1
    assert "\x1b" not in terminal
    assert terminal.startswith("forensics verdict: DEADLOCK")


def test_the_bar_is_not_drawn_once_every_file_is_read():
    """When the delay runs out after the last file (the analysis is being
    prepared, not files read), a bar would only flash: none is drawn."""
    from forensics.cli import ProgressBar

    done = ProgressBar(delay=3600)
    done(18, 18, 5000, 5000)
    done._show()
    assert done._bar is None
    done.close()
    reading = ProgressBar(delay=3600)
    reading(3, 18, 800, 5000)
    reading._show()
    assert reading._bar is not None
    reading.close()
