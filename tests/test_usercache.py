"""Nothing the tool loads can be planted by another user of the node.

Run as root (as CI does): each cache file is planted owned by `nobody`, and
owned by us but writable by group or others; the cache folder likewise. None
is loaded, each is named on stderr, and the verdict is the one without it.
A properly owned copy of the same planted file *is* loaded and changes the
verdict: that is what makes the other assertions able to fail.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
import pwd
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INCIDENT = os.path.join(REPO, "corpus", "pm_desync_report_rank3_never_joined")  # c10d logs: torch_log grammar + catalogue
TRUTH = ("missing_rank", [3], "missing-rank")  # verdict, culprits, the rule that decided

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting files owned by another uid needs root")


def _nobody() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return 65534


def _run(cache_home: str, tmpdir: str | None = None, incident: str = INCIDENT) -> tuple[tuple, str]:
    env = dict(os.environ, XDG_CACHE_HOME=cache_home)
    env.pop("FORENSICS_NO_CACHE", None)
    if tmpdir:
        env["TMPDIR"] = tmpdir
    done = subprocess.run([sys.executable, "-m", "forensics", "analyze", incident, "-f", "json", "-q"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    return (report["verdict"], report["culprit_ranks"], report["root_cause"]["rule"]), done.stderr


@pytest.fixture()
def warm(tmp_path):
    """A cache home the tool filled itself, and the names of what it wrote."""
    home = str(tmp_path / "cache")
    assert _run(home)[0] == TRUTH
    folder = os.path.join(home, "forensics")
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
    names = {os.path.basename(p).split("-")[0] + ("-" + os.path.basename(p).split("-")[1]
                                                   if p.split(os.sep)[-1].startswith("lark") else ""): p
             for p in glob.glob(os.path.join(folder, "*.json"))}
    assert {"messages", "lark-torch_log"} <= set(names), names
    return home, folder, names


def _plant_empty_catalogue(path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("[]")  # a catalogue that knows no message: the desync report would go unread


def test_a_planted_catalogue_we_own_is_loaded_so_the_checks_below_can_fail(warm):
    home, _, names = warm
    _plant_empty_catalogue(names["messages"])
    os.chmod(names["messages"], 0o600)
    assert _run(home)[0] != TRUTH


@pytest.mark.parametrize("how", ["owned by nobody", "group-writable", "world-writable", "a symlink"])
def test_a_planted_catalogue_is_not_loaded_and_is_named(warm, tmp_path, how):
    home, _, names = warm
    target = names["messages"]
    if how == "a symlink":
        elsewhere = str(tmp_path / "elsewhere.json")
        _plant_empty_catalogue(elsewhere)
        os.unlink(target)
        os.symlink(elsewhere, target)
    else:
        _plant_empty_catalogue(target)
        if how == "owned by nobody":
            os.chown(target, _nobody(), -1)
            os.chmod(target, 0o644)
        else:
            os.chmod(target, 0o620 if how == "group-writable" else 0o606)
    verdict, stderr = _run(home)
    assert verdict == TRUTH
    assert target in stderr and "cache not used" in stderr
    assert stderr.count(target) == 1  # said once, not by every worker


def _plant_wrong_tables(names) -> None:
    """The torch_log grammar's tables replaced by another grammar's: parsed
    with them, no c10d line would be read."""
    shutil.copyfile(names["lark-pytrace"], names["lark-torch_log"])


def test_planted_parser_tables_we_own_are_loaded_so_the_check_below_can_fail(warm):
    home, _, names = warm
    _plant_wrong_tables(names)
    assert _run(home)[0] != TRUTH


@pytest.mark.parametrize("how", ["owned by nobody", "world-writable"])
def test_planted_parser_tables_are_not_loaded_and_are_named(warm, how):
    home, _, names = warm
    _plant_wrong_tables(names)
    target = names["lark-torch_log"]
    if how == "owned by nobody":
        os.chown(target, _nobody(), -1)
    else:
        os.chmod(target, 0o666)
    verdict, stderr = _run(home)
    assert verdict == TRUTH
    assert target in stderr


@pytest.mark.parametrize("how", ["owned by nobody", "world-writable", "a symlink"])
def test_a_cache_folder_another_user_could_write_is_not_used(warm, tmp_path, how):
    home, folder, names = warm
    _plant_empty_catalogue(names["messages"])
    os.chmod(names["messages"], 0o600)
    if how == "owned by nobody":
        os.chown(folder, _nobody(), -1)
    elif how == "world-writable":
        os.chmod(folder, 0o777)
    else:
        moved = str(tmp_path / "moved")
        os.rename(folder, moved)
        os.symlink(moved, folder)
    verdict, stderr = _run(home)
    assert verdict == TRUTH
    assert f"cache not used: {folder}:" in stderr


def test_nothing_in_the_cache_depends_on_where_the_package_lies(warm):
    _, _, names = warm
    for path in names.values():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        assert REPO not in text, path
        value = json.loads(text)  # plain JSON, never a pickle
        if os.path.basename(path).startswith("messages"):
            assert value and all(os.sep not in entry["path"] for entry in value)  # a file name, not where it lay


class _Plant:
    """A pickle that leaves a marker file when unpickled (what lark's own cache would run)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_planted_where_lark_keeps_its_cache_does_not_run(tmp_path):
    """Lark's `cache=True` names its pickle in $TMPDIR after the user, a hash
    of the grammar and options, and the Python version: anyone can plant it.
    Lark itself writes the names the old code used; each is replaced by a
    pickle that would leave a marker, and the analysis must not unpickle any."""
    planted = tmp_path / "shared-tmp"
    planted.mkdir()
    marker = tmp_path / "ran"
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "from forensics.ingest import grammar\n"
        "from forensics import lazy\n"
        "for name in ('torch_log', 'pytrace', 'nccl', 'pyspy', 'gdb', 'pystack'):\n"
        "    for transformer in (None, lazy.lark.Transformer()):\n"
        "        options = dict(parser='lalr', lexer='contextual', start='start', transformer=transformer,\n"
        "                       propagate_positions=False, maybe_placeholders=False)\n"
        "        lazy.lark.Lark(grammar.grammar_text(name), cache=True, **options)  # the call as the old code made it\n"
    ) % REPO
    env = dict(os.environ, TMPDIR=str(planted))
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=120)
    names = glob.glob(str(planted / ".lark_cache_*"))
    assert names
    for name in names:
        with open(name, "rb") as handle:
            first_line = handle.readline()  # lark's hash of the grammar, checked before it unpickles
        with open(name, "wb") as handle:
            handle.write(first_line)
            pickle.dump(_Plant(marker), handle)
    verdict, _ = _run(str(tmp_path / "cache"), tmpdir=str(planted))
    assert verdict == TRUTH
    assert not marker.exists()
