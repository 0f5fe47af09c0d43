"""A rank's console that a reader claims for some of its lines still has last words.

With NCCL_DEBUG=INFO a rank's console starts with NCCL's init lines, which
the NCCL reader reads; the rank that went elsewhere then printed what it was
doing ("loading shard 17 from …"), which no reader recognizes. Those last
lines are shown with the rank and a YAML rule's `log:` test sees them, as
for a console no reader claims at all (tests/test_last_words.py). A console
that ends in lines a reader reads, or in a traceback or stack dump, gets no
last words from them.

The watchdog lines are those of tests/test_last_words.py (the format of
corpus/pm_desync_report_rank3_never_joined); the NCCL lines follow
corpus/pm_nccl_info_rank1_never_entered.
"""

from __future__ import annotations

import json
import textwrap

from forensics.ingest import scan
from forensics.plugins import Plugins

from test_last_words import LAST, LOG_RULE, WATCHDOG, analyze, training_output

NCCL_HEAD = (
    "gpu-a:41003:41003 [3] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    "gpu-a:41003:41003 [3] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation\n"
    "gpu-a:41003:41050 [3] NCCL INFO comm 0x55d1a0c3e000 rank 3 nranks 4 cudaDev 3 busId 18000 "
    "commId 0x9c2e5f01d77a4b13 - Init COMPLETE\n")


def incident(folder, console: str) -> None:
    """Ranks 0-2 time out in all_reduce #612; rank 3's console is `console`."""
    for rank in range(3):
        (folder / f"rank{rank}.stderr.log").write_text(WATCHDOG.format(r=rank))
    (folder / "rank3.stdout.log").write_text(console)


def rules_folder(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "team.yaml").write_text(textwrap.dedent(LOG_RULE), encoding="utf-8")
    return rules


def test_a_yaml_log_rule_sees_the_last_words_of_a_console_the_nccl_reader_reads(tmp_path, run_cli):
    job = tmp_path / "job"
    job.mkdir()
    text, progress = training_output(20_000)
    incident(job, NCCL_HEAD + text)
    kinds, _, _ = scan.sniff(str(job / "rank3.stdout.log"), "rank3.stdout.log", Plugins(autoload=False))
    assert kinds == ["nccl", "console"]
    data = json.loads(analyze(run_cli, job, "-f", "json", "--rules", rules_folder(tmp_path)))
    (finding,) = [f for f in data["findings"] if f["rule"] == "team-shard-loading"]
    lines = (NCCL_HEAD + text).splitlines()
    assert finding["ranks"] == [3]
    assert finding["message"] == f"Rank 3 last printed {LAST} ({'rank3.stdout.log'}:{len(lines)})"
    assert data["ranks"]["3"]["last_line"] == {"path": "rank3.stdout.log", "line": len(lines), "text": LAST}
    assert data["ranks"]["3"]["last_progress"]["text"] == progress
    assert (data["verdict"], data["culprit_ranks"]) == ("missing_rank", [3])


def test_a_console_that_ends_in_what_a_reader_reads_has_no_last_words_from_it(tmp_path):
    plugins = Plugins(autoload=False)
    text, _ = training_output(20_000)
    endings = {
        "watchdog": WATCHDOG.format(r=3),
        "traceback": ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
                      "    main()\n  File \"train.py\", line 80, in main\n    batch = next(loader)\n"
                      "ValueError: shard 17 is empty\n"),
        "native frames": "".join(f"frame #{i}: <unknown function> + 0x1268{i}0 (0x7f15985268{i}0 in "
                                 "/lib/x86_64-linux-gnu/libc.so.6)\n" for i in range(6)),
    }
    for name, ending in endings.items():
        path = tmp_path / f"rank3.{name.replace(' ', '_')}.log"
        path.write_text(NCCL_HEAD + text + ending)
        kinds, _, _ = scan.sniff(str(path), path.name, plugins)
        assert "console" not in kinds, name
    # the same output without a rank in the file's name or on its lines: nobody's last words
    path = tmp_path / "node-a.log"
    path.write_text(NCCL_HEAD + text)
    assert scan.sniff(str(path), path.name, plugins)[0] == ["nccl"]
