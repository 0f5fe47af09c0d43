"""The command line, run as a user runs it: a subprocess, exit codes, stdout/stderr."""

import json

import pytest

from conftest import CORPUS, write_json


def test_json_report_contract(run_cli):
    result = run_cli("analyze", CORPUS / "seed_p2p_deadlock", "--format", "json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "forensics.report/1"
    assert report["verdict"] == "deadlock"
    assert report["culprit_ranks"] == [0, 1]
    assert report["cycles"] == [[0, 1, 0]]
    assert report["root_cause"]["kind"] == "p2p_circular_wait"
    assert "0 → 1 → 0" in report["root_cause"]["narrative"]
    finding = report["findings"][0]
    assert finding["rule"] == "p2p-circular-wait" and finding["severity"] == "error"
    assert {"path": "snapshot.json", "line": 2} == {k: finding["evidence"][0][k] for k in ("path", "line")}
    assert report["ranks"]["0"] == {
        "state": "blocked", "op": "send", "group": "0", "seq": 105, "waiting_for": [1],
        "can_progress": False, "evidence": finding["evidence"][0]}
    assert report["ranks"]["2"]["can_progress"] is True
    assert [d["path"] for d in report["diagnostics"]] == ["expected.yaml"]


def test_text_report_and_languages(run_cli):
    en = run_cli("analyze", CORPUS / "snapshot_missing_rank")
    assert en.returncode == 1
    assert "MISSING_RANK" in en.stdout and "culprit ranks: 2" in en.stdout
    assert "Judged stuck because: no rank moved between snapshot_1.json and snapshot_2.json" in en.stdout
    zh = run_cli("analyze", CORPUS / "snapshot_missing_rank", "--lang", "zh")
    assert "成员缺失" in zh.stdout and "判定为卡住的依据" in zh.stdout


def test_healthy_exit_zero_and_hung_flag(run_cli):
    healthy = run_cli("analyze", CORPUS / "seed_healthy_chain")
    assert healthy.returncode == 0 and "HEALTHY" in healthy.stdout
    hung = run_cli("analyze", CORPUS / "seed_healthy_chain", "--hung", "-f", "json")
    assert hung.returncode == 1
    report = json.loads(hung.stdout)
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [2]
    assert report["decided_by"][0]["kind"] == "cli_hung"


def test_console_script_and_module_agree(run_cli, tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    exe = Path(sys.executable).parent / "forensics"
    if not exe.exists():
        pytest.skip("console script not installed next to this python (pip install .)")
    direct = subprocess.run([exe, "analyze", str(CORPUS / "seed_p2p_deadlock"), "-f", "json"],
                            capture_output=True, text=True)
    module = run_cli("analyze", CORPUS / "seed_p2p_deadlock", "-f", "json")
    assert direct.returncode == module.returncode == 1
    assert json.loads(direct.stdout) == json.loads(module.stdout)


def test_output_file(run_cli, tmp_path):
    out = tmp_path / "r.json"
    result = run_cli("analyze", CORPUS / "snapshot_dead_rank", "-f", "json", "-o", out)
    assert result.returncode == 1 and result.stdout == ""
    assert json.loads(out.read_text())["verdict"] == "dead_rank"
    bad = run_cli("analyze", CORPUS / "snapshot_dead_rank", "-o", tmp_path / "no" / "such" / "dir.txt")
    assert bad.returncode == 2 and "cannot write" in bad.stderr


@pytest.mark.parametrize("name, content, message", ids=["empty", "binary", "text"], argvalues=[
    ("empty.json", b"", "empty file"),
    ("binary.bin", bytes(range(256)) * 40, "binary file"),
    ("notes.txt", b"just some notes\n", "not a recognized artifact"),
])
def test_unrecognized_single_file_is_exit_2(run_cli, tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    result = run_cli("analyze", path)
    assert result.returncode == 2
    assert message in result.stderr and name in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name, content, where", ids=["json", "yaml", "trailing", "norank"], argvalues=[
    ("bad.json", '{\n "0": {"current_op": "send",\n  "waiting_for_ranks": [1,]}\n}\n', "bad.json:3: invalid JSON"),
    ("bad.yaml", '0:\n  current_op: send\n  waiting_for_ranks: [1\n1: {}\n', "bad.yaml:4: invalid YAML"),
    ("list.json", '{"0": {"current_op": "send"}} trailing', "list.json:1: invalid JSON"),
    ("norank.json", '{"current_op": {"waiting_for_ranks": 1}}', "no rank states"),
])
def test_invalid_snapshot_names_file_and_line(run_cli, tmp_path, name, content, where):
    path = tmp_path / name
    path.write_text(content)
    result = run_cli("analyze", path)
    assert result.returncode == 2, result.stdout
    assert where in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_bad_file_in_folder_is_a_diagnostic_not_a_failure(run_cli, tmp_path):
    write_json(tmp_path / "good.json", {"0": {"current_op": "send", "waiting_for_ranks": [1]},
                                        "1": {"current_op": "send", "waiting_for_ranks": [0]}})
    (tmp_path / "broken.json").write_text('{"0": {"current_op": "send", "waiting_for_ranks": [1]')
    (tmp_path / "core.bin").write_bytes(b"\x00\x01\x02" * 100)
    result = run_cli("analyze", tmp_path, "-f", "json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["verdict"] == "deadlock"
    diags = {d["path"]: d for d in report["diagnostics"]}
    assert diags["broken.json"]["severity"] == "error" and "invalid JSON" in diags["broken.json"]["message"]
    assert "binary" in diags["core.bin"]["message"]


def test_unknown_rank_in_waiting_list_is_a_diagnostic(run_cli, tmp_path):
    write_json(tmp_path / "s.json", {"0": {"current_op": "send", "waiting_for_ranks": [7]},
                                     "1": {"current_op": "compute", "waiting_for_ranks": ["x"]}})
    result = run_cli("analyze", tmp_path / "s.json", "-f", "json")
    assert result.returncode == 0
    messages = [d["message"] for d in json.loads(result.stdout)["diagnostics"]]
    assert any("waits for rank 7, which no artifact describes" in m for m in messages)
    assert any("waiting_for_ranks must be a list of rank numbers" in m for m in messages)


def test_usage_errors(run_cli, tmp_path):
    missing = run_cli("analyze", tmp_path / "nope")
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    bad_flag = run_cli("analyze", tmp_path, "--format", "pdf")
    assert bad_flag.returncode == 2 and "usage error" in bad_flag.stderr
    nothing = run_cli()
    assert nothing.returncode == 2
    empty_dir = run_cli("analyze", tmp_path)
    assert empty_dir.returncode == 2 and "no recognizable artifacts" in empty_dir.stderr


def test_snapshot_recognized_by_content_not_name(run_cli, tmp_path):
    (tmp_path / "watchdog-dump.log").write_text(
        "# from the cluster watchdog\n0:\n  current_op: send\n  waiting_for_ranks: [1]\n"
        "1:\n  current_op: send\n  waiting_for_ranks: [0]\n")
    result = run_cli("analyze", tmp_path, "-f", "json")
    report = json.loads(result.stdout)
    assert report["verdict"] == "deadlock"
    assert report["findings"][0]["evidence"][0] == {
        "path": "watchdog-dump.log", "line": 3, "text": "current_op: send"}


def test_replay_corpus(run_cli, tmp_path):
    junit = tmp_path / "replay.xml"
    result = run_cli("replay", CORPUS, "--junit", junit)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 failed" in result.stdout
    xml = junit.read_text()
    assert 'failures="0"' in xml and "seed_p2p_deadlock" in xml


def test_replay_reports_a_regression(run_cli, tmp_path):
    case = tmp_path / "case"
    case.mkdir()
    write_json(case / "s.json", {"0": {"current_op": "send", "waiting_for_ranks": [1]},
                                 "1": {"current_op": "send", "waiting_for_ranks": [0]}})
    (case / "expected.yaml").write_text("verdict: healthy\nculprit_ranks: []\n")
    result = run_cli("replay", tmp_path, "--junit", tmp_path / "j.xml")
    assert result.returncode == 1
    assert "verdict 'deadlock', expected 'healthy'" in result.stdout
    assert 'failures="1"' in (tmp_path / "j.xml").read_text()
