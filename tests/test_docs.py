"""The README and the docs site: a short README whose commands are the ones
CI runs, generated reference pages that match the code (one per rule and per
catalogued message), `mkdocs build --strict`, and built pages that render in
headless chromium."""

import functools
import http.server
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ROOT
from forensics import messages
from forensics.plugins import Plugins
from forensics.ruledocs import catalogue

DOCS = ROOT / "docs"
ARTIFACTS = Path(os.environ.get("FORENSICS_ARTIFACTS") or ROOT / "tests" / "artifacts")
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"


def _gen_pages():
    spec = importlib.util.spec_from_file_location("forensics_docs_gen_pages", DOCS / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=1)
def _fresh_pages() -> dict:
    return _gen_pages().generate()


def _committed() -> dict:
    gen = _gen_pages()
    return {path: (DOCS / path).read_text(encoding="utf-8") for path in gen.owned_files(str(DOCS))}


# ------------------------------------------------------------------ README and CI

def _shell_blocks(text: str) -> list[str]:
    return [line.strip() for block in re.findall(r"```sh\n(.*?)```", text, re.S) for line in block.splitlines()
            if line.strip()]


def test_readme_is_short_and_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    commands = _shell_blocks(text)
    assert "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/forensics analyze corpus/real_p2p_cycle_2" \
        in commands
    assert (ROOT / "corpus" / "real_p2p_cycle_2" / "expected.yaml").is_file()


def test_ci_runs_exactly_the_readme_test_command():
    readme_tests = [c for c in _shell_blocks(README.read_text(encoding="utf-8")) if "pytest" in c]
    ci_tests = [line.strip() for line in CI.read_text(encoding="utf-8").splitlines()
                if "-m pytest" in line and not line.lstrip().startswith(("#", "echo"))]
    assert len(readme_tests) == 1 and ci_tests == readme_tests
    extras = re.search(r"-e '\.\[([a-z,]+)\]'", readme_tests[0]).group(1).split(",")
    assert {"test", "docs"} <= set(extras)


def test_the_docs_extra_brings_mkdocs_material():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert any(dep.startswith("mkdocs-material") for dep in project["optional-dependencies"]["docs"])


def test_the_readme_report_is_what_the_first_command_prints(run_cli):
    block = re.search(r"```\n\$ forensics analyze corpus/real_p2p_cycle_2\n(.*?)\n…\n```",
                      README.read_text(encoding="utf-8"), re.S)
    assert block, "the README shows the report of its first command"
    result = run_cli("analyze", ROOT / "corpus" / "real_p2p_cycle_2")
    assert result.returncode == 1
    shown = block.group(1).splitlines()
    assert result.stdout.splitlines()[:len(shown)] == shown


def test_readme_and_docs_links_land_on_files():
    broken = []
    for page in [README, *DOCS.rglob("*.md")]:
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"(?ms)^(`{3,}).*?^\1", "", page.read_text(encoding="utf-8")))
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose):
            if re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} → {target}")
    assert broken == []


_HISTORY = re.compile(r"\b(session|last wave|we fixed|we found|since that table|an earlier version|"
                      r"issue #?\d+|was found by this benchmark)\b", re.I)


def test_no_commit_ids_or_history_of_the_work_in_user_facing_text():
    commits = subprocess.run(["git", "rev-list", "--all"], cwd=ROOT, capture_output=True, text=True)
    if commits.returncode != 0:
        pytest.skip("not a git checkout: commit ids cannot be listed")
    prefixes = {c[:7] for c in commits.stdout.split()}
    pages = [README, *DOCS.rglob("*.md")]
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        found += [f"{page.relative_to(ROOT)}: {w}" for w in re.findall(r"\b[0-9a-f]{7,40}\b", text)
                  if w[:7] in prefixes]
        found += [f"{page.relative_to(ROOT)}: {m.group(0)!r}" for m in _HISTORY.finditer(text)]
    assert found == []


# ------------------------------------------------------------------ generated pages

def test_every_rule_and_message_has_a_generated_page():
    rules = set(catalogue(Plugins(autoload=False)))
    entries = {entry.id for entry in messages.catalogue().entries}
    assert len(rules) > 20 and len(entries) > 150
    wanted = {f"reference/rules/{r}.md" for r in rules} | {f"reference/messages/{m}.md" for m in entries}
    committed = _committed()
    assert sorted(wanted - set(_fresh_pages())) == []
    assert sorted(wanted - set(committed)) == [], "pages missing: run python docs/gen_pages.py"
    for rule in rules:
        page = committed[f"reference/rules/{rule}.md"]
        assert page.startswith("<!-- Generated by docs/gen_pages.py") and f"# {rule}\n" in page


def test_generated_pages_are_current():
    """Committed generated pages against fresh output: a page removed, added
    by hand, or differing from what the code says fails here."""
    fresh, committed = _fresh_pages(), _committed()
    assert sorted(set(fresh) - set(committed)) == [], "missing: run python docs/gen_pages.py"
    assert sorted(set(committed) - set(fresh)) == [], "left over: run python docs/gen_pages.py"
    stale = sorted(path for path in fresh if committed[path] != fresh[path])
    assert stale == [], "stale: run python docs/gen_pages.py"


def test_the_check_mode_of_the_generator_sees_a_removed_page(tmp_path):
    gen = _gen_pages()
    copy = tmp_path / "docs"
    for path, text in _committed().items():
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_text(text, encoding="utf-8")
    assert gen.differences(str(copy), _fresh_pages()) == {"missing": [], "stale": [], "extra": []}
    (copy / "reference/rules/p2p-circular-wait.md").unlink()
    (copy / "reference/messages/index.md").write_text("edited by hand\n", encoding="utf-8")
    (copy / "reference/rules/no-such-rule.md").write_text("# no-such-rule\n", encoding="utf-8")
    assert gen.differences(str(copy), _fresh_pages()) == {
        "missing": ["reference/rules/p2p-circular-wait.md"], "stale": ["reference/messages/index.md"],
        "extra": ["reference/rules/no-such-rule.md"]}


def test_a_rule_page_says_what_rules_show_says_in_both_languages(run_cli):
    page = _fresh_pages()["reference/rules/p2p-circular-wait.md"]
    doc = catalogue(Plugins(autoload=False))["p2p-circular-wait"]
    shown = run_cli("rules", "show", "p2p-circular-wait").stdout
    assert doc.title in shown and doc.title in page
    assert doc.title_zh in page and "修复建议" in page and "## 中文" in page
    assert doc.hint.split(" (")[0][:40] in page
    assert "`corpus/real_p2p_cycle_2`" in page, "its corpus incidents are its examples"
    yaml_page = _fresh_pages()["reference/rules/checkpoint-io-while-others-wait.md"]
    assert "expects a finding on rank(s) 0" in yaml_page and "## Definition" in yaml_page


def test_a_message_page_says_what_messages_show_says():
    entry = messages.catalogue().get("nccl-ib-completion-error")
    page = _fresh_pages()[f"reference/messages/{entry.id}.md"]
    assert entry.example in page and entry.source in page and entry.versions in page
    assert f"`{entry.cause}`" in page and "## 中文" in page


def test_the_published_schema_is_the_shipped_one():
    fresh = _fresh_pages()
    assert json.loads(fresh["reference/report.schema.json"]) == \
        json.loads((ROOT / "forensics" / "report" / "schema.json").read_text(encoding="utf-8"))


def test_the_benchmarks_page_gives_each_figure_its_command_and_machine():
    page = _fresh_pages()["benchmarks.md"]
    recorded = sorted((ROOT / "benchmarks" / "results").glob("bench_*.json"))
    assert recorded, "no benchmark results recorded"
    for path in recorded:
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["schema"] == "forensics.bench/1" and data["runs"]
        for run in data["runs"]:
            assert shlex.split(run["command"])[:2] == ["python", f"benchmarks/{path.stem}.py"]
            assert f"```sh\n{run['command']}\n```" in page
            machine = run["machine"]
            assert machine["cpu"] and machine["cores"] and machine["python"]
            assert f"{machine['cpu']}, {machine['cores']} cores" in page
            assert run["rows"] and all(len(row) == len(run["columns"]) for row in run["rows"])


# ------------------------------------------------------------------ the site

@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs-material is not installed (pip install -e '.[docs]'; the README's test command does)")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "FORENSICS_DOCS_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1", "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


def test_mkdocs_build_strict_passes_and_every_reference_page_is_built(site):
    for page in ("index.html", "getting-started.html", "launchers.html", "inputs.html", "reports.html",
                 "rules.html", "plugins.html", "replay.html", "design.html", "benchmarks.html",
                 "reference/report-example.html", "reference/report.schema.json", "reference/html-report.html"):
        assert (site / page).is_file(), page
    for rule in catalogue(Plugins(autoload=False)):
        assert (site / "reference" / "rules" / f"{rule}.html").is_file(), rule
    for entry in messages.catalogue().entries:
        assert (site / "reference" / "messages" / f"{entry.id}.html").is_file(), entry.id
    assert not (site / "gen_pages.py").exists() and not (site / "hooks.py").exists()


@pytest.fixture(scope="module")
def served(site):
    """The built site over HTTP on 127.0.0.1, as a reader gets it."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


_PAGE = """(() => ({
  title: document.title,
  h1: ((document.querySelector('article h1') || {}).textContent || '').replace('\u00b6', '').trim(),
  text: (document.querySelector('article') || document.body).innerText,
  nav: document.querySelector('nav.md-nav') ? document.querySelector('nav.md-nav').innerText : '',
  css: getComputedStyle(document.body).fontFamily,
  links: [...document.querySelectorAll('article a[href]')].map(a => a.href),
}))()"""

_FRAME = """(async () => {
  const frame = document.querySelector('iframe.forensics-report');
  for (let i = 0; i < 100 && !(frame.contentDocument && frame.contentDocument.querySelector('.badge')); i++)
    await new Promise(r => setTimeout(r, 50));
  const doc = frame.contentDocument;
  return {badge: doc.querySelector('.badge').textContent, svg: !!doc.querySelector('svg.waitgraph'),
          height: frame.getBoundingClientRect().height};
})()"""


def _open(browser, url):
    page = browser.page()
    page.open(url)
    return page


def test_the_site_renders_in_chromium(browser, served):
    checks = {}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name, path in (("index", "index.html"), ("rule", "reference/rules/p2p-circular-wait.html"),
                       ("message", "reference/messages/nccl-ib-completion-error.html"),
                       ("html-report", "reference/html-report.html")):
        page = _open(browser, f"{served}/{path}")
        try:
            checks[name] = page.evaluate(_PAGE)
            if name == "html-report":
                checks["frame"] = page.evaluate(_FRAME)
            page.screenshot(str(ARTIFACTS / f"docs_{name}.png"))
            errors, requests = page.console_errors(), page.requests()
        finally:
            page.close()
        assert errors == [], (name, errors)
        assert all(r.startswith(served) or r.startswith("data:") for r in requests), (name, requests)
    assert checks["index"]["h1"].strip() == "forensics" and "forensics analyze" in checks["index"]["text"]
    assert "Getting started" in checks["index"]["nav"]
    rule = catalogue(Plugins(autoload=False))["p2p-circular-wait"]
    assert checks["rule"]["h1"].strip().startswith("p2p-circular-wait")
    assert rule.title_zh in checks["rule"]["text"] and rule.title in checks["rule"]["text"]
    assert "corpus/real_p2p_cycle_2" in checks["rule"]["text"]
    entry = messages.catalogue().get("nccl-ib-completion-error")
    assert entry.example in checks["message"]["text"]
    assert checks["frame"] == {"badge": "MISSING_RANK", "svg": True, "height": 1400}
