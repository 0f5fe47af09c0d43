"""Nothing readable gives one answer, whatever the folder held: exit 2 and one line.

An empty folder, a folder of unrelated files (source, images, notes, data),
or files a reader claims whose lines then describe no process (a script
quoting the messages it looks for) are the same situation for the user:
the tool has nothing to judge. An empty INCONCLUSIVE report with exit 0 would
read as "looked, found nothing wrong".
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PLAIN_TRACEBACK = ('Traceback (most recent call last):\n  File "tool.py", line 3, in <module>\n    main()\n'
                   '  File "tool.py", line 2, in main\n    raise ValueError("bad input")\nValueError: bad input\n')

FOLDERS = {  # nothing in these describes a process
    "empty": {},
    "unrelated files": {"plot.py": "import matplotlib\nprint('hi')\n", "loss.png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
                        "notes.txt": "meeting at 10\n", "config.json": '{"lr": 0.1}\n', "sweep.yaml": "lr: 0.1\n",
                        "train.log": "epoch 1 step 10 loss 2.31\nepoch 1 step 20 loss 2.17\n"},
    "source that quotes the messages": {
        "launch.py": 'raise RuntimeError("torch.distributed.elastic.multiprocessing.errors.ChildFailedError")\n'
                     'print("[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective operation timeout")\n',
        "notes.md": "# notes\n"},
}


def _analyze(folder) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forensics", "analyze", str(folder)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_nothing_readable_is_exit_2_with_one_line(tmp_path, name):
    for filename, content in FOLDERS[name].items():
        mode = "wb" if isinstance(content, bytes) else "w"
        with open(tmp_path / filename, mode) as handle:
            handle.write(content)
    done = _analyze(tmp_path)
    assert done.returncode == 2, done.stdout[-2000:]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"forensics: {tmp_path}"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_lone_traceback_is_read_even_without_a_rank(tmp_path):
    """One process's traceback, of whatever code, is a process's last words: shown, not refused."""
    (tmp_path / "err.txt").write_text(PLAIN_TRACEBACK)
    done = _analyze(tmp_path)
    assert done.returncode in (0, 1), done.stderr
    assert "tool.py" in done.stdout


def test_a_traceback_through_torch_distributed_is_read_even_without_a_rank(tmp_path):
    (tmp_path / "err.txt").write_text(
        'Traceback (most recent call last):\n  File "train.py", line 40, in <module>\n    step()\n'
        '  File "train.py", line 31, in step\n    dist.all_reduce(grad)\n'
        '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce\n'
        '    work.wait()\nRuntimeError: Connection closed by peer [10.0.0.2]:4321\n')
    done = _analyze(tmp_path)
    assert done.returncode in (0, 1), done.stderr
    assert "forensics verdict:" in done.stdout
