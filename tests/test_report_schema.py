"""The JSON report's schema (forensics/report/schema.json): strict, printed by
`forensics schema report`, and met by the report of every corpus incident in
both languages. (tests/conftest.py also validates every JSON report any other
test produces.)"""

import copy
import json

import jsonschema
import pytest

import forensics
from forensics.ingest.textio import InputError, NothingReadable
from forensics.plugins import Plugins
from forensics.replay import METADATA, find_incidents, load_expected
from forensics.report import json_report

from conftest import CORPUS, REPORT_SCHEMA, REPORT_TAP, corpus_report, schema_problems, tapped_report_problems

INCIDENTS = sorted(find_incidents(str(CORPUS)))


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(json.loads(REPORT_SCHEMA.read_text(encoding="utf-8")))


def test_forensics_schema_report_prints_the_shipped_schema(run_cli):
    result = run_cli("schema", "report")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(REPORT_SCHEMA.read_text(encoding="utf-8"))
    assert json.loads(result.stdout) == json.loads(json_report.schema_text())
    rules = run_cli("schema", "rules")
    assert rules.returncode == 0 and json.loads(rules.stdout)["title"] == "forensics YAML rule file"


def test_schema_with_an_unknown_name_is_a_usage_error(run_cli):
    result = run_cli("schema", "snapshots")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "invalid choice" in result.stderr


@pytest.mark.parametrize("folder", INCIDENTS, ids=lambda f: f.rsplit("/", 1)[-1])
def test_every_corpus_report_meets_the_schema(folder):
    expected = load_expected(f"{folder}/expected.yaml")
    report = corpus_report(folder.rsplit("/", 1)[-1])
    if isinstance(report, InputError):  # an incident the tool cannot read yet: a known miss, which the replay reports
        assert expected.get("xfail") and isinstance(report, NothingReadable), report
        pytest.xfail(f"unreadable, a known miss: {expected['xfail']}")
    for lang in ("en", "zh"):
        data = json.loads(json_report.render(report, lang))
        assert schema_problems(data) == [], lang
        assert data["verdict"] == report.verdict


@pytest.fixture(scope="module")
def deadlock_report():
    report = forensics.analyze(CORPUS / "real_p2p_cycle_2", jobs=1, plugins=Plugins(autoload=False), exclude=METADATA)
    return json.loads(json_report.render(report))


def _broken(data, change):
    copy_ = copy.deepcopy(data)
    change(copy_)
    return schema_problems(copy_)


@pytest.mark.parametrize("what, change, where", [
    ("an unknown verdict", lambda d: d.update(verdict="stuck"), "verdict"),
    ("a field the contract does not have", lambda d: d.update(extra=1), "(top)"),
    ("a required field missing", lambda d: d.pop("cycles"), "(top)"),
    ("another schema version", lambda d: d.update(schema="forensics.report/2"), "schema"),
    ("a confidence level outside high/medium/low", lambda d: d.update(confidence={"level": "certain", "reason": "x"}),
     "confidence"),
    ("a culprit that names nobody", lambda d: d["culprits"].append({}), "culprits/"),
    ("a rank key that is not a number", lambda d: d["ranks"].update(x=d["ranks"]["0"]), "ranks"),
    ("a rank state outside the activities", lambda d: d["ranks"]["0"].update(state="sleeping"), "ranks/0/state"),
    ("a finding severity outside error/warning/info", lambda d: d["findings"][0].update(severity="fatal"),
     "findings/0/severity"),
    ("an unknown field in a finding", lambda d: d["findings"][0].update(note="x"), "findings/0"),
    ("evidence without a line", lambda d: d["findings"][0]["evidence"][0].pop("line"), "findings/0/evidence/0"),
    ("a negative rank", lambda d: d.update(culprit_ranks=[-1]), "culprit_ranks/0"),
    ("a dated event with no clock", lambda d: d["events"].append(
        {"time": 1.0, "clock": "", "kind": "exit", "role": "cause", "evidence": {"path": "a", "line": 1, "text": ""}}),
     "events/"),
])
def test_the_schema_rejects(deadlock_report, what, change, where):
    assert schema_problems(deadlock_report) == []
    problems = _broken(deadlock_report, change)
    assert problems and any(p.startswith(where) for p in problems), (what, problems)


def test_every_json_report_a_test_produces_is_validated(run_cli):
    tapped_report_problems()
    result = run_cli("analyze", CORPUS / "seed_p2p_deadlock", "-f", "json")
    assert result.returncode == 1
    kept = list(REPORT_TAP.glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text(encoding="utf-8")) == json.loads(result.stdout)
    bad = json.loads(result.stdout)
    bad["verdict"] = "stuck"
    kept[0].write_text(json.dumps(bad), encoding="utf-8")
    assert any(p.startswith("verdict") for p in tapped_report_problems())
    assert list(REPORT_TAP.glob("*.json")) == []
