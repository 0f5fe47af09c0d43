"""Which forensics a benchmark runs, and from which folder.

`python -m forensics` puts its working folder first on sys.path, so run
from the checkout it runs the checkout's source, whatever is installed;
that source cannot find the package data an install maps
(`forensics.rules_data`) unless the install is an editable one of that
checkout. An installed copy (`pip install .` into a plain venv: what users
run, without the editable import hook that costs 15-20 ms a start) is run
from a folder outside the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import site
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def editable_installs() -> list[str]:
    """The .pth files of an editable install of forensics in this
    interpreter's site-packages: they run at every start of `python`."""
    found = []
    for folder in site.getsitepackages() + [site.getusersitepackages()]:
        if os.path.isdir(folder):
            found += sorted(name for name in os.listdir(folder)
                            if name.endswith(".pth") and "editable" in name and "forensics" in name)
    return found


def installed_copy() -> str:
    """The folder of the forensics package installed in this interpreter
    (not an editable install), or "" when there is none. Asked before the
    checkout is put on sys.path."""
    if editable_installs():
        return ""
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != REPO]
    try:
        spec = importlib.util.find_spec("forensics")
    finally:
        sys.path[:] = saved
    origin = spec.origin if spec is not None and spec.origin else ""
    return os.path.dirname(origin) if origin and not origin.startswith(REPO + os.sep) else ""


def run_folder(outside: str) -> tuple[str, str]:
    """(the folder to run `python -m forensics` from, what runs): `outside`
    (a folder outside the checkout) when a copy is installed, else the checkout."""
    copy = installed_copy()
    if copy:
        return outside, f"the installed copy {copy}"
    note = " (an editable install: 15-20 ms more per start than an installed copy)" if editable_installs() else ""
    return REPO, f"the checkout {REPO}{note}"


def kind_of_run() -> str:
    """What `run_folder` runs, in words for a results file (no path of this machine)."""
    if installed_copy():
        return "a plain install (pip install .)"
    return "the checkout, an editable install" if editable_installs() else "the checkout"


def bytecode_env(env: dict, folder: str | None = None) -> dict:
    """`env` for running forensics with its bytecode cached (PYTHONPYCACHEPREFIX,
    under the temp dir unless `folder`), as an installed package has it:
    with PYTHONDONTWRITEBYTECODE set and an editable install, every module
    changed since the checkout's .pyc files were written is compiled from
    source on every run (~0.1 s a start here). One untimed run fills the
    cache before anything is timed."""
    env = dict(env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = folder or os.path.join(tempfile.gettempdir(), "forensics-bench-pycache")
    return env
