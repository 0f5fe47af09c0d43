"""Language at the edges: readers state a stuck signal as a message key and
its facts; forensics/words.py says it in English and Chinese, and the
renderers pick a language in that one place."""

import re

import pytest

from forensics.ingest import load_incident
from forensics.plugins import Plugins
from forensics.replay import METADATA
from forensics.words import STUCK, localized, say_stuck, stuck_signal

from conftest import CORPUS, ROOT

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_every_stuck_message_key_is_said_in_both_languages():
    assert set(STUCK["en"]) == set(STUCK["zh"])
    assert not [text for text in STUCK["en"].values() if CJK.search(text)]


@pytest.mark.parametrize("incident, keys", [
    # c10d watchdog lines (torchlog), each said of the file it came from
    ("pm_desync_report_rank3_never_joined", {"tl_past_timeout", "cli_hung"}),
    # forensics collect's window (progress.json)
    ("real_collect_missing_rank_snapshots", {"collect_v1", "cli_hung"}),
])
def test_stuck_signals_of_real_artifacts_are_keyed_facts_said_in_both_languages(incident, keys):
    found = load_incident([str(CORPUS / incident)], Plugins(autoload=False), hung=True, jobs=1,
                          exclude=METADATA)
    keyed = [s for s in found.stuck if s.key]
    assert {s.key for s in keyed} == keys
    for signal in keyed:
        facts = dict(signal.params)
        hash(signal)  # facts stay hashable: signals are deduplicated and pickled to the parent
        assert signal.detail == say_stuck(signal.key, facts, "en") == localized(signal, "detail", "en")
        assert signal.detail_zh == say_stuck(signal.key, facts, "zh") == localized(signal, "detail", "zh")
        assert not CJK.search(signal.detail) and CJK.search(signal.detail_zh)
        assert not any(CJK.search(str(value)) for value in facts.values())


def test_a_timed_out_c10d_call_is_said_of_its_process_in_each_language():
    signal = stuck_signal("watchdog_timeout", "tl_past_timeout", None, who=("local_rank", 1),
                          op="all_reduce #612", elapsed_ms=1800301, timeout="1800000")
    assert signal.detail == "local rank 1: all_reduce #612 ran 1800301 ms past its 1800000 ms timeout"
    assert signal.detail_zh == "本地 rank 1：all_reduce #612 已运行 1800301 毫秒，超过 1800000 毫秒的超时"


def test_a_collect_window_names_its_threshold_source_in_chinese():
    facts = dict(suspects=((2, True, "load_next_batch (train.py:190)"),), waiting=(0, 1, 3), call="all_reduce #418",
                 seconds=20.0, threshold=10.0, source="half the collective timeout of 20 s", rounds=3, span_s=20.0)
    assert say_stuck("collect_busy", facts, "en") == (
        "rank 2 stayed idle in load_next_batch (train.py:190) for 20 s while 0, 1, 3 waited in all_reduce #418 "
        "(forensics collect, 3 rounds over 20.0 s; stuck after 10 s: half the collective timeout of 20 s)")
    assert say_stuck("collect_busy", facts, "zh") == (
        "Rank 2 一直空闲于 load_next_batch (train.py:190) 长达 20 s，而 Rank 0, 1, 3 一直在 all_reduce #418 中等待"
        "（forensics collect，3 轮，共 20 秒；超过 10 秒即视为卡住：集合通信超时（20 秒）的一半）")


# Readers that still write Chinese sentences themselves; remove a name once it states keys.
STILL_WORDED: set = set()


def test_no_chinese_sentence_is_written_in_ingest_or_the_model():
    files = [*sorted((ROOT / "forensics" / "ingest").glob("*.py")), ROOT / "forensics" / "model.py"]
    worded = {path.name for path in files if CJK.search(path.read_text(encoding="utf-8"))}
    assert worded == STILL_WORDED


def test_no_renderer_picks_a_language_inline():
    inline = re.compile(r"""lang\s*==\s*["']zh["']|_zh\b""")
    found = [f"{path.name}:{number}" for path in sorted((ROOT / "forensics" / "report").glob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if inline.search(line)]
    assert found == []


def test_a_window_watch_wrote_is_said_to_be_watchs():
    facts = {"waiting": (0, 2), "call": "all_reduce", "seconds": 5.04, "threshold": 4.0, "source": "--stuck-after",
             "rounds": 3, "span_s": 5.0, "suspects": ((1, False, "_decode_record (train_stalls.py:60)"),)}
    assert "(forensics collect, 3 rounds over 5.0 s" in say_stuck("collect_busy", facts, "en")
    watched = say_stuck("collect_busy", {**facts, "by": "forensics watch"}, "en")
    assert watched.endswith("(forensics watch, 3 rounds over 5.0 s; stuck after 4 s: --stuck-after)")
    assert "（forensics watch，3 轮" in say_stuck("collect_busy", {**facts, "by": "forensics watch"}, "zh")
