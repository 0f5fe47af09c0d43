import functools
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Never autoload third-party plugins under the test suite (pytest's own habit).
os.environ["FORENSICS_DISABLE_PLUGIN_AUTOLOAD"] = "1"

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
SHARED = ROOT.parent / "shared"
SAMPLES = SHARED / "samples"
REPORT_SCHEMA = ROOT / "forensics" / "report" / "schema.json"

# Every JSON report a test renders, in this process or in any Python process
# it starts, is kept (tests/report_tap/sitecustomize.py) and validated
# against the report's JSON Schema after the test: a report that breaks the
# contract fails the test that produced it. Installed before any test module
# imports forensics.
_TAP_CODE = Path(__file__).resolve().parent / "report_tap"
REPORT_TAP = Path(tempfile.mkdtemp(prefix="forensics-test-reports-"))
os.environ["FORENSICS_TEST_REPORT_TAP"] = str(REPORT_TAP)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(_TAP_CODE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(_TAP_CODE)])
_tap_spec = importlib.util.spec_from_file_location("forensics_test_report_tap", _TAP_CODE / "sitecustomize.py")
report_tap = importlib.util.module_from_spec(_tap_spec)
_tap_spec.loader.exec_module(report_tap)
report_tap.install()
_validated = [0]


@functools.lru_cache(maxsize=1)
def report_validator():
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(REPORT_SCHEMA.read_text(encoding="utf-8")))


def schema_problems(data, limit: int = 5) -> list[str]:
    """What makes `data` (a parsed JSON report) break the report schema."""
    errors = sorted(report_validator().iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in errors[:limit]]


def tapped_report_problems() -> list[str]:
    """Validate (and remove) the JSON reports kept since the last call."""
    problems = []
    for path in sorted(REPORT_TAP.glob("*.json")):
        try:
            data = json.loads(path.read_bytes())
        except ValueError as exc:
            problems.append(f"not JSON: {exc}")
        else:
            problems += schema_problems(data)
        _validated[0] += 1
        path.unlink()
    return problems


@pytest.fixture(autouse=True)
def _json_reports_follow_the_schema():
    earlier = [f"{p} (written after an earlier test ended)" for p in tapped_report_problems()]
    yield
    problems = earlier + tapped_report_problems()
    if problems:
        pytest.fail("a JSON report this test produced breaks forensics/report/schema.json:\n  "
                    + "\n  ".join(problems), pytrace=False)


_CORPUS_REPORTS: dict = {}


def corpus_report(incident: str):
    """The report of a corpus incident as `forensics replay` makes it (its
    expected.yaml's args, SOURCE.md and expected.yaml left out), analyzed once
    per test session and shared by the corpus-wide tests; the InputError
    instead where nothing in it can be read."""
    if incident not in _CORPUS_REPORTS:
        import yaml

        import forensics
        from forensics.ingest.textio import InputError
        from forensics.plugins import Plugins
        from forensics.replay import METADATA

        expected = yaml.safe_load((CORPUS / incident / "expected.yaml").read_text(encoding="utf-8"))
        try:
            _CORPUS_REPORTS[incident] = forensics.analyze(
                CORPUS / incident, jobs=1, plugins=Plugins(autoload=False), exclude=METADATA,
                hung=bool((expected.get("args") or {}).get("hung")))
        except InputError as exc:
            _CORPUS_REPORTS[incident] = exc
    return _CORPUS_REPORTS[incident]


# What a test needs, as markers (pyproject.toml lists them): `-m "not slow"` is the quick loop, and CI
# runs every test. A test that starts a torch job, a browser or a live component is slow by nature.
_NEEDS = {"job_factory": ("needs_torch", "live"), "redis_server": ("live",), "browser": ("browser",)}
_LIVE_MODULES = {"test_cluster", "test_watch", "test_collect", "test_progress_position", "test_spawn"}


# Modules whose every test is minutes of work in all (property and fuzz runs, timeouts that must pass,
# decompression bombs, the docs site build, PyTorch's own analyzer, replays of the whole corpus).
_SLOW_MODULES = {"test_properties", "test_watchdog", "test_limits", "test_docs", "test_fr_conformance",
                 "test_corpus_coverage", "test_progress", "test_collect_planted", "test_cli", "test_usercache",
                 "test_factsfile", "test_hostile_text"}
# Tests that run `python -m forensics` in a subprocess (a second of start-up each) or build big inputs.
_SLOW_FIXTURES = {"run_cli"}
_SLOW_TESTS = {"test_memory_stays_flat", "test_a_folder_holding_any_one_catalogued_line_never_exits_2",
               "test_big_file_tail_mode"}
_INCIDENTS = None


def _corpus_case(item) -> bool:
    """A test run once per corpus incident (each a full analysis)."""
    global _INCIDENTS
    if _INCIDENTS is None:
        _INCIDENTS = {p.name for p in CORPUS.iterdir() if (p / "expected.yaml").is_file()}
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(isinstance(v, str) and os.path.basename(v) in _INCIDENTS for v in params.values())


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set()
        if (item.module.__name__ in _SLOW_MODULES or "fuzz" in item.name or _corpus_case(item)
                or item.originalname in _SLOW_TESTS or _SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))):
            names.add("slow")
        for fixture in getattr(item, "fixturenames", ()):
            names.update(_NEEDS.get(fixture, ()))
        if any(mark.name == "skipif" and "torch" in str(mark.kwargs.get("reason", "")).lower()
               for mark in item.iter_markers()):
            names.add("needs_torch")
        if item.module.__name__ in _LIVE_MODULES:
            names.add("live")
        if names:
            names.add("slow")
        for name in sorted(names):
            item.add_marker(getattr(pytest.mark, name))


_SYSTEM_PACKAGES = ("chromium", "slurm", "munge", "redis-server")


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"{_validated[0]} JSON report(s) validated against forensics/report/schema.json")
    skipped = terminalreporter.stats.get("skipped", [])
    for_packages = [r for r in skipped if any(p in str(r.longrepr).lower() for p in _SYSTEM_PACKAGES)]
    if for_packages:
        terminalreporter.write_line(f"{len(for_packages)} test(s) skipped for want of a system package (chromium, "
                                    f"slurm-wlm, munge, redis-server): `sudo .ci/system-packages` installs them")


def pytest_unconfigure(config):
    shutil.rmtree(REPORT_TAP, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    """A headless chromium driven over the DevTools protocol (tests/browser/cdp.py),
    one per test module."""
    from browser.cdp import Browser, find_browser

    binary = find_browser()
    if binary is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium); browser checks skipped")
    instance = Browser(binary)
    yield instance
    instance.close()


@pytest.fixture
def run_cli(tmp_path):
    """Run `python -m forensics ...` in a subprocess, as a user would."""
    import subprocess

    def run(*args, env=None, cwd=None):
        full_env = dict(os.environ)
        full_env.update(env or {})
        return subprocess.run([sys.executable, "-m", "forensics", *map(str, args)],
                              capture_output=True, text=True, env=full_env,
                              cwd=cwd or tmp_path, timeout=120)
    return run


def write_json(path, data):
    import json
    path.write_text(json.dumps(data, indent=1))
    return path
