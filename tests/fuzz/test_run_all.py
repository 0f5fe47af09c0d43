"""run_all.py's crash report: what a CI log shows of a crash must be enough
to reproduce it (the traceback, and the input itself)."""

import base64
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_all  # noqa: E402  (tests/fuzz/run_all.py)

LOG = """INFO: Running with entropic power schedule (0xFF, 100).
#4096	pulse  cov: 1035 ft: 3751 corp: 132/40Kb exec/s: 601 rss: 210Mb

 === Uncaught Python exception: ===
TypeError: '<' not supported between instances of 'NoneType' and 'int'
Traceback (most recent call last):
  File "tests/fuzz/targets.py", line 111, in _nccl
    merge([nccl.parse(path, "fuzz/nccl.log", full=bool(len(data) & 1))])
TypeError: '<' not supported between instances of 'NoneType' and 'int'

==1234== ERROR: libFuzzer: fuzz target exited
MS: 2 ChangeByte-CopyPart-; base unit: 0
artifact_prefix='/tmp/x/'; Test unit written to /tmp/x/crash-abc
"""


def test_a_crash_report_holds_the_traceback_and_the_input(tmp_path):
    data = bytes(range(256)) * 3 + b"gpu-box-02:30172:30244 [1] NCCL INFO Channel 00/0 : 1[1b000] -> 0[1a000]\n"
    crash = tmp_path / "crash-abc"
    crash.write_bytes(data)
    report = run_all.crash_report(LOG, [str(crash)])
    lines = [line.strip() for line in report.splitlines()]
    assert lines[0] == "=== Uncaught Python exception: ==="
    assert "in _nccl" in report and "libFuzzer: fuzz target exited" not in report
    assert lines[-2] == "input crash-abc, base64:"
    assert base64.b64decode(lines[-1]) == data


def test_a_long_input_is_cut_and_says_so(tmp_path):
    crash = tmp_path / "crash-long"
    crash.write_bytes(b"x" * 10000)
    lines = run_all.crash_report("no traceback here", [str(crash)], limit=100).splitlines()
    assert lines[0].strip() == "input crash-long, base64 (first 100 of 10000 bytes):"
    assert base64.b64decode(lines[1].strip()) == b"x" * 100
