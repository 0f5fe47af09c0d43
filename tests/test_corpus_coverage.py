"""Every rule that reports findings has a corpus incident that needs it and
one that must not trigger it; the corpus replays clean, with valid JUnit."""

import xml.etree.ElementTree as ET

import yaml

from conftest import CORPUS
from forensics.plugins import Plugins
from forensics.replay import find_incidents, load_expected
from forensics.ruledocs import catalogue


def _listed():
    needed, forbidden = {}, {}
    for folder in find_incidents(str(CORPUS)):
        expected = load_expected(f"{folder}/expected.yaml")
        for rule in expected.get("findings") or []:
            needed.setdefault(rule, []).append(folder)
        for rule in expected.get("absent_findings") or []:
            forbidden.setdefault(rule, []).append(folder)
    return needed, forbidden


def test_every_finding_rule_has_a_positive_and_a_negative_incident():
    rules = [doc.id for doc in catalogue(Plugins(autoload=False)).values() if "findings" in doc.emits]
    needed, forbidden = _listed()
    assert "network-fault" in rules and "outstanding-async-ops" in rules
    no_positive = [r for r in rules if r not in needed]
    no_negative = [r for r in rules if r not in forbidden]
    assert not no_positive, f"no corpus incident lists these under findings: {no_positive}"
    assert not no_negative, f"no corpus incident lists these under absent_findings: {no_negative}"


def test_corpus_names_only_rules_that_exist():
    known = set(catalogue(Plugins(autoload=False)))
    needed, forbidden = _listed()
    assert not (set(needed) | set(forbidden)) - known


def test_replay_of_the_corpus_passes_and_writes_valid_junit(run_cli, tmp_path):
    junit = tmp_path / "out.xml"
    result = run_cli("replay", CORPUS, "--junit", junit)
    assert result.returncode == 0, result.stdout + result.stderr
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("failures") == "0" and suite.get("errors") == "0"
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) == len(find_incidents(str(CORPUS)))
    assert {c.get("name") for c in cases} >= {"synthetic_network_fault_nccl", "synthetic_outstanding_async_ops"}


def test_junit_of_a_regression_is_valid_xml_with_the_problem(run_cli, tmp_path):
    case = tmp_path / "corpus" / "bad & <odd> \"name\""
    case.mkdir(parents=True)
    (case / "s.json").write_text('{"0": {"current_op": "send", "waiting_for_ranks": [1]},'
                                 ' "1": {"current_op": "send", "waiting_for_ranks": [0]}}')
    (case / "expected.yaml").write_text(yaml.safe_dump({"verdict": "healthy", "findings": ["network-fault"]}))
    junit = tmp_path / "j.xml"
    result = run_cli("replay", tmp_path / "corpus", "--junit", junit)
    assert result.returncode == 1
    suite = ET.parse(junit).getroot()
    (case_xml,) = suite.findall("testcase")
    failure = case_xml.find("failure")
    assert case_xml.get("name") == 'bad & <odd> "name"' and failure is not None
    assert "finding 'network-fault' missing" in failure.text
