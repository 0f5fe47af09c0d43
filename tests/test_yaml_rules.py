"""YAML rules: the schema and semantic checks name file:line:col, hostile
files are refused in one line, the shipped rules pass their inline tests,
and a team's rule folder changes what `analyze` reports."""

import json
import re
import textwrap

import pytest

import forensics
from forensics import yamlrules
from forensics.plugins import Plugins
from forensics.ruledocs import catalogue
from forensics.yamlrules import RuleFileErrors, RuleSet, compile_pattern, load_file, render

from conftest import CORPUS

GOOD_RULE = """\
rules:
  - id: team-prefetch-stall
    title: Prefetch thread stuck reading a shard
    title_zh: 预取线程卡在分片读取
    severity: warning
    explanation: A loader thread is stuck in read_shard_record.
    explanation_zh: 加载线程卡在 read_shard_record。
    hint: Check the shard's storage mount.
    hint_zh: 检查分片所在的存储挂载。
    match:
      frame: {function: '^ShardedLoader\\.read_shard_record$', thread: background}
    finding:
      message: "Rank {rank}: {thread} thread in {frame} ({frame_at})"
      message_zh: "Rank {rank}：{thread} 线程在 {frame}（{frame_at}）"
"""


def write(tmp_path, text, name="team.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def errors_of(path):
    with pytest.raises(RuleFileErrors) as info:
        load_file(str(path))
    return [str(e) for e in info.value.errors]


# ------------------------------------------------------------------ schema errors with marks

def test_unknown_key_is_reported_at_the_key(tmp_path):
    path = write(tmp_path, GOOD_RULE.replace("    severity: warning\n",
                                             "    severity: warning\n    sevrity: error\n"))
    allowed = ", ".join(sorted(yamlrules.schema()["$defs"]["rule"]["properties"]))
    assert errors_of(path) == [f"{path}:6:5: rules/0: unknown key 'sevrity' (allowed: {allowed})"]


def test_bad_enum_value_is_reported_at_the_value(tmp_path):
    path = write(tmp_path, GOOD_RULE.replace("severity: warning", "severity: fatal"))
    (error,) = errors_of(path)
    assert error.startswith(f"{path}:5:15: rules/0/severity: 'fatal' is not one of")


def test_missing_required_field_names_the_rule(tmp_path):
    path = write(tmp_path, GOOD_RULE.replace("    severity: warning\n", ""))
    assert errors_of(path) == [f"{path}:2:5: rules/0: 'severity' is required"]


def test_a_text_missing_in_both_languages_names_both_keys(tmp_path):
    path = write(tmp_path, GOOD_RULE.replace("    title_zh: 预取线程卡在分片读取\n", "")
                 .replace("    title: Prefetch thread stuck reading a shard\n", ""))
    assert errors_of(path) == [f"{path}:2:5: rules/0: needs 'title' or 'title_zh' (one language is enough)"]
    path = write(tmp_path, GOOD_RULE.split("    finding:")[0] + "    finding: {}\n")
    assert errors_of(path) == [f"{path}:12:14: rules/0/finding: needs 'message' or 'message_zh' "
                               f"(one language is enough)"]


def test_wrong_type_deep_inside_match(tmp_path):
    text = GOOD_RULE.replace("thread: background", "thread: 3")
    path = write(tmp_path, text)
    column = text.splitlines()[10].index("3}") + 1
    (error,) = errors_of(path)
    assert error.startswith(f"{path}:11:{column}: rules/0/match/frame/thread: 3 is not one of ['main', 'any', 'background']")


# ------------------------------------------------------------------ semantic errors

def test_bad_regex_is_reported_at_its_scalar(tmp_path):
    path = write(tmp_path, GOOD_RULE.replace("'^ShardedLoader\\.read_shard_record$'", "'read_(shard'"))
    assert errors_of(path) == [f"{path}:11:25: invalid regex: missing ), unterminated subpattern at position 5"]


@pytest.mark.parametrize("pattern", ["(a+)+$", "(\\w*)*x", "(?:x|(ab)+)*", "((a|b)*c)+"])
def test_nested_unbounded_quantifiers_are_refused(pattern):
    with pytest.raises(ValueError, match="nests unbounded quantifiers"):
        compile_pattern(pattern)


@pytest.mark.parametrize("pattern", ["a+b+", "(ab){2,5}", "(a|b)+c", "[0-9][0-9, ]*", "(save|write)\\w*ckpt"])
def test_ordinary_regexes_are_accepted(pattern):
    assert compile_pattern(pattern).pattern == pattern


def test_huge_regex_is_refused_before_compiling(tmp_path):
    huge = "a" * 600
    with pytest.raises(ValueError, match="over the 512 limit"):
        compile_pattern(huge)
    path = write(tmp_path, GOOD_RULE.replace("'^ShardedLoader\\.read_shard_record$'", f"'{huge}'"))
    (error,) = errors_of(path)
    assert error.startswith(f"{path}:11:25: rules/0/match/frame/function: 'aaaa") and error.endswith("is too long")


def test_duplicate_ids_name_the_first_definition(tmp_path):
    body = GOOD_RULE.split("rules:\n", 1)[1]
    path = write(tmp_path, "rules:\n" + body + body)
    assert errors_of(path) == [f"{path}:15:9: duplicate rule id 'team-prefetch-stall' (first defined at line 2)"]


def test_unknown_placeholder_and_attribute_access_are_errors(tmp_path):
    path = write(tmp_path, GOOD_RULE.replace("Rank {rank}:", "Rank {rank.__class__} {op!r}:"))
    (first, second) = errors_of(path)
    assert first.startswith(f"{path}:13:16: unknown placeholder {{rank.__class__}}")
    assert second.startswith(f"{path}:13:16: unknown placeholder {{op!r}}")


def test_render_substitutes_names_only():
    assert render("{rank} {{rank}} {missing} {x.y}", {"rank": "3"}) == "3 {rank}  "


def test_error_findings_need_hints(tmp_path):
    path = write(tmp_path, GOOD_RULE.replace("    hint_zh: 检查分片所在的存储挂载。\n", "")
                 .replace("    hint: Check the shard's storage mount.\n", ""))
    assert errors_of(path) == [f"{path}:2:5: rule 'team-prefetch-stall': a warning finding needs a fix hint "
                               f"('hint' or 'hint_zh')"]


# ------------------------------------------------------------------ hostile files

BOMB = """\
a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
rules: [*g, *g, *g, *g, *g, *g, *g, *g, *g]
"""


@pytest.mark.parametrize("text, expected", [
    (BOMB, ":1:4: YAML anchors and aliases are not allowed in rule files (anchor &a)"),
    ("rules:\n  - &r {id: x}\n", ":2:5: YAML anchors and aliases are not allowed in rule files (anchor &r)"),
    ("- just\n- a list\n", ":1:1: ['just', 'a list'] is not of type 'object'"),
    ("", ":1:1: empty rule file"),
    ("rules: [\n", (":2:1: invalid YAML: while parsing a flow node, expected the node content, but found '<stream end>'",
                    ":2:1: invalid YAML: while parsing a flow node, did not find expected node content")),  # libyaml
    ("rules: []\n---\nrules: []\n", ":2:1: invalid YAML: expected a single document in the stream, but found another document"),
    ("rules: !!python/object:os.system {}\n", ":1:8: invalid YAML: could not determine a constructor"),
    ("rules: []\n", ":1:8: rules: [] should be non-empty"),
    ("rules:\n" + "  " * 1 + "[" * 2000 + "]" * 2000 + "\n", (":1:1: invalid YAML: nested too deeply",
                                                              ":2:1002: invalid YAML: while increasing flow level, "
                                                              "exceeded maximum nesting depth")),  # libyaml
])
def test_hostile_rule_files_are_one_line_errors(tmp_path, run_cli, text, expected):
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    result = run_cli("rules", "check", path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stdout == ""
    first = result.stderr.splitlines()[0]
    # PyYAML's own parser and libyaml (used when PyYAML was built with it) word some errors differently.
    accepted = expected if isinstance(expected, tuple) else (expected,)
    assert any(first.startswith(str(path) + one) for one in accepted), result.stderr


def test_binary_rule_file_is_refused(tmp_path, run_cli):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"rules:\n  - \xff\xfe\x00garbage\n")
    result = run_cli("rules", "check", path)
    assert result.returncode == 2 and result.stderr == f"{path}:2:1: not UTF-8 text\n"


def test_bad_rules_dir_in_analyze_is_one_line_exit_2(tmp_path, run_cli):
    write(tmp_path / "", GOOD_RULE.replace("severity: warning", "severity: loud"), "bad.yaml")
    result = run_cli("analyze", CORPUS / "seed_p2p_deadlock", "--rules", tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"forensics: {tmp_path / 'bad.yaml'}:5:15: rules/0/severity: 'loud'")
    assert len(result.stderr.splitlines()) == 1


def test_user_rule_cannot_take_a_builtin_id(tmp_path, run_cli):
    write(tmp_path, GOOD_RULE.replace("team-prefetch-stall", "missing-rank"))
    result = run_cli("analyze", CORPUS / "seed_p2p_deadlock", "--rules", tmp_path)
    assert result.returncode == 2
    assert "rule id 'missing-rank' is already defined by forensics.rules.missing_rank" in result.stderr


# ------------------------------------------------------------------ shipped rules

SHIPPED_IDS = {"checkpoint-io-while-others-wait", "data-loading-stall-others-wait", "dataloader-worker-killed",
               "device-sync-stall", "barrier-on-other-group"}


def test_shipped_rules_are_documented_and_loaded_by_default():
    docs = catalogue(Plugins(autoload=False))
    assert SHIPPED_IDS <= set(docs)
    for rule_id in SHIPPED_IDS:
        doc = docs[rule_id]
        assert doc.source.startswith("forensics.rules_data/") and doc.source.split(":")[-1].isdigit()
        assert doc.hint and doc.hint_zh and any("\u4e00" <= c <= "\u9fff" for c in doc.explanation_zh)


def test_shipped_rules_pass_their_inline_tests(run_cli):
    result = run_cli("rules", "test")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout
    rules_tested = {line.split()[1].rstrip(":") for line in result.stdout.splitlines() if line.startswith("PASS")}
    assert rules_tested == SHIPPED_IDS
    # every shipped rule has at least one test that triggers and one that must not
    for rule in yamlrules.shipped_rules():
        assert any(t.triggers_on for t in rule.tests) and any(t.triggers_on is None for t in rule.tests), rule.id


def test_failing_inline_test_exits_1(tmp_path, run_cli):
    write(tmp_path, GOOD_RULE + """\
    tests:
      - name: wrong expectation
        snapshot: {"0": {current_op: all_reduce}, "1": {current_op: compute}}
        triggers_on: [1]
      - name: right expectation
        snapshot: {"0": {current_op: all_reduce}, "1": {current_op: compute}}
        no_trigger: true
""")
    result = run_cli("rules", "test", tmp_path)
    assert result.returncode == 1
    assert "FAIL team-prefetch-stall: wrong expectation (line 16): expected to trigger on ranks [1], " \
           "triggered on none" in result.stdout
    assert "PASS team-prefetch-stall: right expectation (line 19)" in result.stdout
    assert result.stdout.rstrip().endswith("1 passed, 1 failed (1 rule(s))")


def test_shipped_rule_fires_on_the_real_checkpoint_capture():
    report = forensics.analyze(CORPUS / "real_checkpoint_io_stall", hung=True, jobs=1, plugins=Plugins(autoload=False))
    (finding,) = [f for f in report.findings if f.rule == "checkpoint-io-while-others-wait"]
    assert finding.ranks == (0,)
    assert finding.message.startswith("Rank 0 is writing a checkpoint (save_periodic_checkpoint (train.py:305), "
                                      "at rank0.locals.txt:")
    assert "3 rank(s) (1-3)" in finding.message and "all_reduce on group 0" in finding.message
    # evidence is what matched: rank 0's frame in its dump, and the others' collective
    assert finding.evidence[0].path == "rank0.locals.txt"
    assert finding.evidence[0].text == "save_periodic_checkpoint (train.py:305)"
    assert {e.path for e in finding.evidence[1:]} <= {"rank1.locals.txt", "rank2.locals.txt", "rank3.locals.txt"}
    assert "Rank 0 正在写 Checkpoint" in finding.message_zh
    # without --hung the same dumps are ordinary progress
    calm = forensics.analyze(CORPUS / "real_checkpoint_io_stall", jobs=1, plugins=Plugins(autoload=False))
    assert not [f for f in calm.findings if f.rule == "checkpoint-io-while-others-wait"]


# ------------------------------------------------------------------ --rules DIR

def test_user_rule_folder_changes_findings_of_a_real_incident(tmp_path, run_cli):
    incident = CORPUS / "real_missing_rank_dataloader"
    before = json.loads(run_cli("analyze", incident, "--hung", "-f", "json", "-j", "1").stdout)
    assert "team-prefetch-stall" not in {f["rule"] for f in before["findings"]}
    write(tmp_path, GOOD_RULE)
    result = run_cli("analyze", incident, "--hung", "-f", "json", "-j", "1", "--rules", tmp_path)
    after = json.loads(result.stdout)
    (finding,) = [f for f in after["findings"] if f["rule"] == "team-prefetch-stall"]
    assert finding["ranks"] == [2]
    assert finding["message"].startswith("Rank 2: batch_prefetch thread in ShardedLoader.read_shard_record "
                                         "(train.py:176) (")
    cited = finding["evidence"][0]
    assert cited["text"] == "ShardedLoader.read_shard_record (train.py:176)"
    path = incident / cited["path"]
    assert "ShardedLoader.read_shard_record (train.py:176)" in path.read_text().splitlines()[cited["line"] - 1]
    assert after["verdict"] == before["verdict"] == "missing_rank"


EDGE_RULE = """\
rules:
  - id: team-host-barrier
    title: Our host-side barrier waits for rank 0
    title_zh: 我们的主机端 barrier 等待 rank 0
    severity: info
    explanation: A rank computing in our_barrier really waits for rank 0.
    explanation_zh: 在 our_barrier 中的 Rank 实际上在等待 rank 0。
    match: {ranks: [0]}
    others:
      match: {activity: computing}
      min: 1
    edges:
      direction: others_wait_for_rank
      reason: "{others} wait for rank {rank} in our host barrier"
    tests:
      - name: rank 2 waits for rank 0
        snapshot: {"0": {current_op: recv, waiting_for_ranks: [1]}, "1": {current_op: recv, waiting_for_ranks: [2]}, "2": {current_op: compute}}
        triggers_on: [0]
        edges: [[2, 0]]
"""


def test_user_edge_rule_turns_a_chain_into_a_deadlock(tmp_path, run_cli):
    write(tmp_path, EDGE_RULE)
    chain = CORPUS / "seed_healthy_chain"
    assert json.loads(run_cli("analyze", chain, "-f", "json").stdout)["verdict"] == "healthy"
    result = run_cli("analyze", chain, "-f", "json", "--rules", tmp_path / "team.yaml")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["verdict"] == "deadlock" and report["cycles"] == [[0, 1, 2, 0]]
    assert run_cli("rules", "test", tmp_path).returncode == 0


# ------------------------------------------------------------------ list / show / check

def test_rules_list_shows_builtin_and_yaml_rules(tmp_path, run_cli):
    write(tmp_path, GOOD_RULE)
    text = run_cli("rules", "list", "--rules", tmp_path).stdout
    lines = {line.split()[0]: line for line in text.splitlines()[1:-1]}
    assert "[forensics.rules.missing_rank]" in lines["missing-rank"]
    assert lines["device-sync-stall"].split()[1] == "warning"
    assert "[forensics.rules_data/device_sync.yaml:4]" in lines["device-sync-stall"]
    assert f"[{tmp_path / 'team.yaml'}:2]" in lines["team-prefetch-stall"]
    data = json.loads(run_cli("rules", "list", "-f", "json").stdout)
    by_id = {d["id"]: d for d in data}
    assert SHIPPED_IDS <= set(by_id) and by_id["barrier-on-other-group"]["kinds"] == ["barrier_other_group"]


def test_rules_show_prints_doc_and_definition(run_cli):
    en = run_cli("rules", "show", "dataloader-worker-killed")
    assert en.returncode == 0
    assert en.stdout.startswith("dataloader-worker-killed: A DataLoader worker process died\n")
    assert "Severity: error" in en.stdout and "Fix hint:" in en.stdout
    assert "log: 'DataLoader worker" in en.stdout  # the YAML definition
    zh = run_cli("rules", "show", "dataloader-worker-killed", "--lang", "zh")
    assert zh.stdout.startswith("dataloader-worker-killed: DataLoader worker 进程已退出\n") and "修复建议" in zh.stdout
    missing = run_cli("rules", "show", "no-such-rule")
    assert missing.returncode == 2 and "no rule 'no-such-rule'" in missing.stderr


def test_rules_check_good_and_bad(tmp_path, run_cli):
    good = write(tmp_path, GOOD_RULE)
    ok = run_cli("rules", "check", good, yamlrules.shipped_dir())
    assert ok.returncode == 0
    assert ok.stdout.splitlines()[0] == f"{good}: ok (1 rule(s): team-prefetch-stall)"
    bad = write(tmp_path, GOOD_RULE.replace("'^ShardedLoader", "'(?P<x"), "bad.yaml")
    result = run_cli("rules", "check", good, bad)
    assert result.returncode == 2
    assert result.stderr.startswith(f"{bad}:11:25: invalid regex")


def test_rule_set_is_a_plain_plugin():
    rules = load_file(str(CORPUS.parent / "rules" / "process_groups.yaml"))
    plugins = Plugins(autoload=False, builtins=tuple(b for b in Plugins(autoload=False).builtins
                                                      if b != "forensics.yamlrules"),
                      extra=(RuleSet(rules),))
    report = forensics.analyze(CORPUS / "real_missing_rank_early_exit", hung=True, jobs=1, plugins=plugins)
    (finding,) = [f for f in report.findings if f.rule == "barrier-on-other-group"]
    # the stack knows the group as `groups["ckpt"]`, Flight Recorder as group 1
    assert finding.ranks == (3,) and "group 1" in finding.message and "(0-2)" in finding.message


# ------------------------------------------------------------------ one language, several ranks, the docs' example

def _one_language(rule: str, keep: str) -> str:
    """GOOD_RULE with only the English (`keep="en"`) or Chinese texts."""
    lines = rule.splitlines(keepends=True)
    if keep == "en":
        return "".join(line for line in lines if not re.match(r"\s+\w+_zh:", line))
    kept = [line for line in lines if not re.match(r"\s+(title|explanation|hint|message):", line)]
    return "".join(kept)


def test_a_rule_in_english_only_is_accepted_and_chinese_shows_it_missing(tmp_path, run_cli):
    write(tmp_path, _one_language(GOOD_RULE, "en"))
    assert "_zh" not in (tmp_path / "team.yaml").read_text()
    assert run_cli("rules", "check", tmp_path).returncode == 0
    incident = CORPUS / "real_missing_rank_dataloader"
    zh = run_cli("analyze", incident, "--hung", "-j", "1", "--lang", "zh", "--rules", tmp_path)
    # the Chinese report falls back to the English message, and titles the rule as missing in Chinese
    (line,) = [x for x in zh.stdout.splitlines() if "team-prefetch-stall" in x]
    assert "（缺少中文）Prefetch thread stuck reading a shard" in line
    assert "Rank 2: batch_prefetch thread in ShardedLoader.read_shard_record (train.py:176)" in zh.stdout
    data = json.loads(run_cli("analyze", incident, "--hung", "-j", "1", "-f", "json", "--rules", tmp_path).stdout)
    (finding,) = [f for f in data["findings"] if f["rule"] == "team-prefetch-stall"]
    assert finding["hint"] == "Check the shard's storage mount."
    shown = run_cli("rules", "show", "team-prefetch-stall", "--rules", tmp_path, "--lang", "zh").stdout
    assert shown.startswith("team-prefetch-stall: （缺少中文）Prefetch thread stuck reading a shard\n")
    assert "  （缺少中文）A loader thread is stuck in read_shard_record." in shown
    assert "  （缺少中文）Check the shard's storage mount." in shown
    english = run_cli("rules", "show", "team-prefetch-stall", "--rules", tmp_path).stdout
    assert "缺少中文" not in english and english.startswith("team-prefetch-stall: Prefetch thread stuck")


def test_a_rule_in_chinese_only_is_accepted_and_english_shows_it_missing(tmp_path, run_cli):
    write(tmp_path, _one_language(GOOD_RULE, "zh"))
    text = (tmp_path / "team.yaml").read_text()
    assert "title:" not in text and "message:" not in text and "message_zh:" in text
    (rule,) = load_file(str(tmp_path / "team.yaml"))
    assert rule.doc.title == "(no English text) 预取线程卡在分片读取" and rule.doc.title_zh == "预取线程卡在分片读取"
    incident = CORPUS / "real_missing_rank_dataloader"
    data = json.loads(run_cli("analyze", incident, "--hung", "-j", "1", "-f", "json", "--rules", tmp_path).stdout)
    (finding,) = [f for f in data["findings"] if f["rule"] == "team-prefetch-stall"]
    assert finding["message"].startswith("Rank 2：batch_prefetch 线程在 ShardedLoader.read_shard_record (train.py:176)")
    assert finding["hint"] == "检查分片所在的存储挂载。"
    listed = run_cli("rules", "list", "--rules", tmp_path).stdout
    assert "(no English text) 预取线程卡在分片读取" in listed
    shown = run_cli("rules", "show", "team-prefetch-stall", "--rules", tmp_path).stdout
    assert "  (no English text) 加载线程卡在 read_shard_record。" in shown
    assert "no English text" not in run_cli("rules", "show", "team-prefetch-stall", "--rules", tmp_path,
                                            "--lang", "zh").stdout


SEVERAL = """\
rules:
  - id: team-shard-read
    title: Reading a shard
    title_zh: 正在读取分片
    severity: info
    explanation: Ranks inside read_shard.
    explanation_zh: 在 read_shard 中的 Rank。
    match:
      frame: {function: 'read_shard'}
    finding:
      message: "Rank {rank} ({count}, {ranks}) in {frame} at {frame_at}, {activity}"
      message_zh: "Rank {rank}（{count}）在 {frame}，位于 {frame_at}"
"""


def test_a_finding_over_several_ranks_names_every_rank_and_each_ones_values(tmp_path):
    folder = tmp_path / "incident"
    folder.mkdir()
    frames = {0: 12, 1: 12, 3: 19, 4: 21, 5: 23}
    snapshot = {str(r): {"current_op": "compute", "stack": ["train (train.py:40)", f"read_shard (data.py:{line})"]}
                for r, line in frames.items()}
    snapshot["2"] = {"current_op": "all_reduce", "op_seq": 7}
    (folder / "snapshot.json").write_text(json.dumps(snapshot, indent=None).replace("}, ", "},\n"))
    rules = load_file(str(write(tmp_path, SEVERAL)))
    plugins = Plugins(autoload=False, extra=(RuleSet(rules),))
    report = forensics.analyze(folder, jobs=1, plugins=plugins)
    (finding,) = [f for f in report.findings if f.rule == "team-shard-read"]
    assert finding.ranks == (0, 1, 3, 4, 5)
    lines = {r: i + 1 for i, r in enumerate([0, 1, 3, 4, 5, 2])}
    assert finding.message == (
        "Rank 0,1,3-5 (5, 0,1,3-5) in ranks 0,1: read_shard (data.py:12); rank 3: read_shard (data.py:19); "
        "rank 4: read_shard (data.py:21); and 1 more at "
        f"rank 0: snapshot.json:{lines[0]}; rank 1: snapshot.json:{lines[1]}; rank 3: snapshot.json:{lines[3]}; "
        "and 2 more, computing")
    assert finding.message_zh.startswith("Rank 0,1,3-5（5）在 Rank 0,1：read_shard (data.py:12)；Rank 3：")
    assert finding.message_zh.endswith("；另有 2 项")
    # one rank: the plain values, as before
    (alone,) = [f for f in forensics.analyze(folder, jobs=1, plugins=Plugins(
        autoload=False, extra=(RuleSet(load_file(str(write(tmp_path, SEVERAL.replace(
            "frame: {function: 'read_shard'}", "frame: {function: 'read_shard'}\n      ranks: [3]"))))),)))
        .findings if f.rule == "team-shard-read"]
    assert alone.message == f"Rank 3 (1, 3) in read_shard (data.py:19) at snapshot.json:{lines[3]}, computing"


def _docs_rule_file() -> str:
    page = (CORPUS.parent / "docs" / "rules.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", page, re.S)
    (whole,) = [b for b in blocks if b.startswith("version: 1\n")]
    return whole


def test_the_docs_minimal_rule_file_loads_and_passes_its_tests(tmp_path, run_cli):
    folder = tmp_path / "my_rules"
    folder.mkdir()
    (folder / "shard_read.yaml").write_text(_docs_rule_file(), encoding="utf-8")
    checked = run_cli("rules", "check", folder)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.endswith("ok (1 rule(s): shard-read-while-others-wait)\n")
    tested = run_cli("rules", "test", folder)
    assert tested.returncode == 0, tested.stdout
    assert tested.stdout.splitlines()[-1] == "2 passed, 0 failed (1 rule(s))"
    # every placeholder the docs' table names is one the templates know, and every known one is in the table
    page = (CORPUS.parent / "docs" / "rules.md").read_text(encoding="utf-8")
    table = page.split("### Template placeholders", 1)[1].split("\n\n")[2]
    assert set(re.findall(r"`\{(\w+)\}`", table)) == yamlrules.PLACEHOLDERS
