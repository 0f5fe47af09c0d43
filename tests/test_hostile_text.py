"""Control characters from artifacts never reach a reader of the report raw.

A snapshot whose group names and stack frames carry ESC sequences (an OSC
title change, a colour, a BEL), a C1 CSI, bidi overrides and isolates, NUL
and DEL, and a file whose very name holds an ESC, go through the CLI in
every format, piped and on a terminal: each shows them as visible escapes
(`\\x1b`), JSON keeps the exact values as \\u escapes, and the verdict is
the one the artifacts support.
"""

import base64
import hashlib
import json
import os
import pty
import re
import select
import subprocess
import sys

import pytest

from forensics.report import html as html_report
from forensics.report.safe_text import json_dumps, neutralize

HOSTILE = "pg\x1b]0;pwned\x07\x1b[31mRED\x9b2J\u202eevil\u2066iso\u2069\x00nul\x7fdel\u2028sep"
FRAME = "step\x1b[2J (train\u202e.py:12)"
# What may never appear raw: C0 but tab and newline, DEL, C1, bidi, line/paragraph separators.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
SGR = re.compile("\x1b\\[[0-9;]*m")  # the colours our own terminal renderer adds
FORMATS = ("text", "markdown", "sarif", "junit", "dot", "mermaid", "html", "json")


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    snapshot = {str(r): {"current_op": "send", "waiting_for_ranks": [1 - r], "group": HOSTILE, "peers": [1 - r],
                         "op_seq": 7, "stack": [FRAME, "send (distributed_c10d.py:1)"]} for r in (0, 1)}
    (folder / "snap\x1b[31mshot.json").write_text(json.dumps(snapshot), encoding="utf-8")
    (folder / "junk\x1b]0;title\x07.bin").write_bytes(b"\x00\x01\x02 not an artifact")
    return folder


def _cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "forensics", *map(str, args)], capture_output=True,
                          timeout=120, **kwargs)


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_format_passes_a_control_character_through(incident, fmt):
    proc = _cli("analyze", incident, "-f", fmt, "--no-plugins")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout.decode("utf-8")
    assert not RAW.search(out), (fmt, RAW.findall(out)[:5])
    if fmt == "json":
        report = json.loads(out)
        assert report["verdict"] == "deadlock" and report["culprit_ranks"] == [0, 1]
        assert report["ranks"]["0"]["group"] == HOSTILE  # the value itself, exactly
        assert "\\u202e" in out and "\\u009b" in out
    elif fmt not in ("dot", "mermaid"):
        assert "deadlock" in out.lower()
    if fmt in ("text", "markdown", "sarif", "junit"):
        shown = re.sub(r"\\([\\`*\[\]<>|~_#])", r"\1", out) if fmt == "markdown" else out  # Markdown's own escapes
        shown = shown.replace("\\\\", "\\") if fmt == "sarif" else shown  # JSON's
        assert "\\x1b]0;pwned" in shown  # shown, not lost
    if fmt in ("dot", "mermaid"):
        assert "x1b" in out or "pwned" not in out


def test_the_file_name_in_a_diagnostic_is_inert_too(incident):
    proc = _cli("analyze", incident, "--no-plugins")
    out = proc.stdout.decode("utf-8")
    assert "snap\\x1b[31mshot.json" in out or "junk\\x1b]0;title\\x07.bin" in out
    assert not RAW.search(out)


def test_a_terminal_gets_only_our_own_colours(incident):
    """On a pseudo-terminal the text report is styled by rich: the only ESC
    sequences left are its SGR colours; the artifacts' are escaped."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "forensics", "analyze", str(incident), "--no-plugins", "-q"],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    seen = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 1
    out = seen.decode("utf-8")
    assert SGR.search(out), "a terminal gets colour"
    bare = SGR.sub("", out).replace("\r\n", "\n")
    assert not RAW.search(bare), RAW.findall(bare)[:5]
    assert "pwned" in bare and "\\x1b" in bare


def test_stderr_notes_are_inert(tmp_path):
    name = tmp_path / "bad\x1b]0;x\x07.json"
    name.write_text('{"0": {"current_op": "send", "waiting_for_ranks": [', encoding="utf-8")
    proc = _cli("analyze", name)
    assert proc.returncode == 2
    err = proc.stderr.decode("utf-8")
    assert "bad\\x1b]0;x\\x07.json" in err and not RAW.search(err.replace("\n", ""))


def test_neutralize_keeps_what_a_format_breaks_lines_with():
    assert neutralize("a\nb\tc\x1bd") == "a\\x0ab\\x09c\\x1bd"
    assert neutralize("a\nb\x85", keep="\n") == "a\nb\\x85"
    assert neutralize("plain 中文 text") == "plain 中文 text"
    assert json.loads(json_dumps(HOSTILE)) == HOSTILE
    assert not RAW.search(json_dumps(HOSTILE))


# ---------------------------------------------------------------- HTML's CSP

def _csp(page: str) -> str:
    return re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)


def test_html_allows_its_one_script_by_hash_not_unsafe_inline(incident):
    page = _cli("analyze", incident, "-f", "html", "--no-plugins").stdout.decode("utf-8")
    policy = _csp(page)
    script_src = re.search(r"script-src ([^;]*)", policy).group(1).split()
    assert "'unsafe-inline'" not in script_src
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(scripts) == 1 and "<script" not in page.replace("<script>" + scripts[0], "", 1)
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode("utf-8")).digest()).decode()
    assert script_src == [f"'sha256-{digest}'"]
    assert not re.search(r"\son[a-z]+\s*=", page)  # no inline event handler the hash would not cover
    assert "\\x1b]0;pwned" in page and not RAW.search(page)


def test_a_browser_runs_the_script_and_refuses_any_other(incident, tmp_path):
    """In Chromium: the page's script runs under its CSP; the same page with
    the script changed by one character is refused (so the check can fail)."""
    sys.path.insert(0, os.path.dirname(__file__))
    from browser.cdp import Browser, find_browser

    binary = find_browser()
    if binary is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium); browser check skipped")
    page = _cli("analyze", incident, "-f", "html", "--no-plugins").stdout.decode("utf-8")
    marker = "window.__forensicsScriptRan=true;"
    # The marker goes into both copies; only the first gets a CSP for the changed script.
    good = page.replace(html_report._JS, html_report._JS + marker)
    good = good.replace(html_report.SCRIPT_HASH, "sha256-" + base64.b64encode(
        hashlib.sha256((html_report._JS + marker).encode()).digest()).decode())
    bad = page.replace(html_report._JS, html_report._JS + marker)  # hash of the original: refused
    (tmp_path / "good.html").write_text(good, encoding="utf-8")
    (tmp_path / "bad.html").write_text(bad, encoding="utf-8")
    browser = Browser(binary)
    try:
        for name, ran in (("good.html", True), ("bad.html", None)):
            tab = browser.page()
            tab.open((tmp_path / name).as_uri())
            assert tab.evaluate("window.__forensicsScriptRan") == ran, name
            tab.close()
    finally:
        browser.close()
