"""The README's two commands, in order, on this machine, each in a fresh clone and venv.

A newcomer runs the first (install, diagnose a bundled incident), then the
second (install with the test extras, run the tests). Whatever the first
leaves behind (caches, temp files) must not break the second. The commands
are taken from the README itself, so the page and the test cannot drift.
The second command's pytest run is narrowed (through PYTEST_ADDOPTS, which
the command itself does not set) to the tests that read what the first run
could have left: the docs pages and the seed's asserts; the whole suite is
what `.ci/run` runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow


def readme_commands() -> list[str]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_the_readme_names_exactly_two_commands():
    commands = readme_commands()
    assert len(commands) == 2, commands
    assert "forensics analyze corpus/" in commands[0]
    assert "pytest" in commands[1]


def _clone(where: str) -> str:
    if not os.path.isdir(os.path.join(ROOT, ".git")) or shutil.which("git") is None:
        pytest.skip("not a git checkout: nothing to clone")
    subprocess.run(["git", "clone", "--quiet", ROOT, where], check=True, timeout=300)
    return where


def _bash(command: str, cwd: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_readme_commands_pass_in_order_in_fresh_clones(tmp_path):
    run_command, test_command = readme_commands()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYTEST", "FORENSICS_", "VIRTUAL_ENV"))}
    ours = os.path.dirname(sys.executable)  # this venv's bin/: the README's `python3` is the machine's
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours)
    env.pop("PYTHONPATH", None)

    first = _clone(str(tmp_path / "first"))
    ran = _bash(run_command, first, env, timeout=900)
    assert ran.returncode == 1, ran.stdout[-2000:] + ran.stderr[-2000:]  # 1: a hang was found
    assert "DEADLOCK" in ran.stdout and "0 → 1 → 0" in ran.stdout
    _docs_build_changes_nothing(first, env, "pip install '.[docs]'")  # the docs from a plain install

    second = _clone(str(tmp_path / "second"))
    narrowed = dict(env, PYTEST_ADDOPTS="tests/test_docs.py tests/test_seed.py")
    tested = _bash(test_command, second, narrowed, timeout=1800)
    tail = tested.stdout[-3000:] + tested.stderr[-3000:]
    assert tested.returncode == 0, tail
    assert re.search(r"\d+ passed", tested.stdout), tail
    assert " failed" not in tested.stdout and " error" not in tested.stdout, tail
    _docs_build_changes_nothing(second, env, None)  # and from the editable one the test command made


def _docs_build_changes_nothing(clone: str, env: dict, install: str | None) -> None:
    """`mkdocs build --strict` (docs/layout.md) builds, rewrites no committed page and says nothing of
    generating one: a current tree has nothing to generate."""
    if install:
        done = _bash(f".venv/bin/{install} -q", clone, env, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
    built = _bash(".venv/bin/mkdocs build --strict --site-dir ../site-" + os.path.basename(clone), clone, env,
                  timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "generated" not in built.stderr, built.stderr[-3000:]
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True)
    assert changed.stdout == "", changed.stdout[:2000]
