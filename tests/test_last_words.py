"""A rank's last words: the console of a rank whose lines no reader
recognizes is still that rank's artifact. Its last lines and its last
progress line (with the time that line states) are shown with the rank in
the text, JSON and HTML reports, and the YAML rules' `log:` test sees them.

The watchdog lines are written in the format of
corpus/pm_desync_report_rank3_never_joined/rank1.stderr.log; the training
output is generated here.
"""

from __future__ import annotations

import gzip
import json
import textwrap

import pytest

from forensics.ingest import console

LAST = "loading shard 17 from /mnt/data/shard-17.parquet"
WATCHDOG = (
    "2026-02-03 12:20:04 | rank {r} | epoch 1 starting (train shard 01, 305 steps)\n"
    "[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=612, "
    "OpType=ALLREDUCE, NumelIn=124634112, NumelOut=124634112, Timeout(ms)=1800000) ran for 1800318 milliseconds "
    "before timing out.\n"
    "[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
    "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n"
    "[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.\n")


def training_output(size: int) -> tuple[str, str]:
    """About `size` bytes of step/loss lines, then two lines that are not
    progress and the last one: (the text, its last progress line)."""
    lines, total, step = [], 0, 0
    while total < size:
        second = step % 86400
        line = (f"2026-02-03 {second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d},123 INFO trainer: "
                f"step {step} loss {3.5 - step * 1e-5:.4f} lr 3.0e-04 tokens/s 41233")
        lines.append(line)
        total += len(line) + 1
        step += 1
    progress = lines[-1]
    lines += ["saving nothing this step", "switching to shard list /mnt/data/epoch1.txt", LAST]
    return "\n".join(lines) + "\n", progress


def incident(folder, console_name="rank3.stdout.log", compress=False, size=2_000_000) -> str:
    """Ranks 0-2 time out in all_reduce #612; rank 3's console is training output ending in LAST."""
    for rank in range(3):
        (folder / f"rank{rank}.stderr.log").write_text(WATCHDOG.format(r=rank))
    text, progress = training_output(size)
    if compress:
        with gzip.open(folder / (console_name + ".gz"), "wt") as handle:
            handle.write(text)
    else:
        (folder / console_name).write_text(text)
    return progress


def analyze(run_cli, folder, *args):
    done = run_cli("analyze", folder, "-j", "1", *args)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def test_the_rank_that_went_elsewhere_is_shown_with_what_it_printed_last(tmp_path, run_cli):
    progress = incident(tmp_path)
    text = analyze(run_cli, tmp_path)
    assert "MISSING_RANK" in text and "culprit ranks: 3" in text
    assert "no artifact describes this rank" not in text
    assert "no artifact of its own" not in text and "no artifact of their own" not in text  # its console is one
    assert f"rank 3: '{LAST}'  [rank3.stdout.log:-1]" in text
    assert f"last progress (02-03 {progress[11:23].replace(',', '.')}): '{progress}'  [rank3.stdout.log:-4]" in text
    assert "Not read" not in text

    data = json.loads(analyze(run_cli, tmp_path, "-f", "json"))
    three = data["ranks"]["3"]
    assert data["culprit_ranks"] == [3]
    assert three["last_line"] == {"path": "rank3.stdout.log", "line": -1, "text": LAST}
    assert three["last_progress"] == {"path": "rank3.stdout.log", "line": -4, "text": progress}
    assert three["last_progress_at"] == "02-03 " + progress[11:23].replace(",", ".")
    assert [e["line"] for e in three["last_words"]] == [-5, -4, -3, -2, -1]
    # the numbers count back from the end: line -N is `tail -n N | head -n 1`
    lines = (tmp_path / "rank3.stdout.log").read_text().splitlines()
    assert all(lines[e["line"]] == e["text"] for e in three["last_words"])
    assert {r["kind"] for r in data["read"] if r["path"] == "rank3.stdout.log"} == {"console"}

    html = analyze(run_cli, tmp_path, "-f", "html")
    assert LAST in html and progress in html


def test_a_gzipped_console_gives_the_same_last_words(tmp_path, run_cli):
    progress = incident(tmp_path, compress=True)
    data = json.loads(analyze(run_cli, tmp_path, "-f", "json"))
    three = data["ranks"]["3"]
    assert data["culprit_ranks"] == [3]
    assert three["last_line"] == {"path": "rank3.stdout.log.gz", "line": -1, "text": LAST}
    assert three["last_progress"]["text"] == progress and three["last_progress"]["line"] == -4


def test_a_small_console_is_numbered_from_its_start(tmp_path, run_cli):
    incident(tmp_path, size=2_000)
    data = json.loads(analyze(run_cli, tmp_path, "-f", "json"))
    lines = (tmp_path / "rank3.stdout.log").read_text().splitlines()
    assert data["ranks"]["3"]["last_line"] == {"path": "rank3.stdout.log", "line": len(lines), "text": LAST}


def test_a_console_without_a_rank_stays_not_read(tmp_path, run_cli):
    incident(tmp_path, console_name="console.txt", size=50_000)
    text = analyze(run_cli, tmp_path)
    assert "Not read (1 file): console.txt" in text
    assert LAST not in text
    assert "INCONCLUSIVE" in text  # nothing says rank 3 exists


def test_a_console_of_prefixed_ranks_gives_each_rank_its_own_last_words(tmp_path, run_cli):
    for rank in range(2):
        (tmp_path / f"rank{rank}.stderr.log").write_text(WATCHDOG.format(r=rank))
    lines = []
    for step in range(100):
        lines += [f"[rank2]:step {step} loss {2.0 - step / 100:.2f}", f"[rank3]:step {step} loss {2.1 - step / 100:.2f}"]
    lines += ["[rank3]:" + LAST, "[rank2]:waiting for the others at the all_reduce"]
    (tmp_path / "job.log").write_text("\n".join(lines) + "\n")
    data = json.loads(analyze(run_cli, tmp_path, "-f", "json"))
    assert data["ranks"]["3"]["last_line"] == {"path": "job.log", "line": len(lines) - 1, "text": LAST}
    assert data["ranks"]["3"]["last_progress"]["text"] == "step 99 loss 1.11"
    assert data["ranks"]["2"]["last_line"]["text"] == "waiting for the others at the all_reduce"
    assert data["ranks"]["2"]["last_progress"]["text"] == "step 99 loss 1.01"


LOG_RULE = """\
rules:
  - id: team-shard-loading
    title: A rank was loading a data shard
    title_zh: 某个 Rank 正在加载数据分片
    severity: warning
    explanation: The rank's console ends while it loads a data shard.
    explanation_zh: 该 Rank 的控制台输出停在加载数据分片处。
    hint: Check the storage the shard is read from.
    hint_zh: 检查分片所在的存储。
    match:
      log: 'loading shard \\d+ from '
    finding:
      message: "Rank {rank} last printed {log} ({log_at})"
      message_zh: "Rank {rank} 最后输出 {log}（{log_at}）"
"""


def test_a_yaml_log_rule_sees_the_last_words(tmp_path, run_cli):
    job = tmp_path / "job"
    job.mkdir()
    incident(job, size=200_000)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "team.yaml").write_text(textwrap.dedent(LOG_RULE), encoding="utf-8")
    data = json.loads(analyze(run_cli, job, "-f", "json", "--rules", rules))
    (finding,) = [f for f in data["findings"] if f["rule"] == "team-shard-loading"]
    assert finding["ranks"] == [3]
    assert finding["message"] == f"Rank 3 last printed {LAST} (rank3.stdout.log:-1)"
    assert finding["evidence"][0] == {"path": "rank3.stdout.log", "line": -1, "text": LAST}


@pytest.mark.parametrize("line", [
    "Train Epoch: 3 [1200/60000 (2%)]\tLoss: 0.123456",                                   # PyTorch examples
    "step 1200: train loss 2.3456, val loss 2.4567",                                      # nanoGPT
    "iter 1200: loss 2.3456, time 512.30ms, mfu 41.20%",
    "{'loss': 2.3456, 'grad_norm': 1.2, 'learning_rate': 4.5e-05, 'epoch': 0.12}",        # HF Trainer
    " 12%|█▏        | 1200/10000 [01:02<07:40,  1.91it/s]",                                # tqdm
    "Epoch 3:  45%|████▌     | 450/1000 [02:13<02:43,  3.37it/s, v_num=0, train_loss=0.123]",  # Lightning
    " iteration     1200/  500000 | consumed samples:       153600 | elapsed time per iteration (ms): 1234.5 | "
    "lm loss: 2.345678E+00 |",                                                            # Megatron-LM
    "[2024-01-01 12:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=1200, skipped=0, lr=[0.0001]",
    "steps: 1200 loss: 2.3456 iter time (s): 0.500 samples/sec: 64.000",                  # DeepSpeed
    "step: 1200  loss:  2.3456  memory: 30.12GiB(38.10%)  tps: 3,456  mfu: 41.2%",        # torchtitan
])
def test_progress_lines_of_the_usual_trainers(line):
    assert console.PROGRESS.search(line)


@pytest.mark.parametrize("line", [LAST, "epoch 1 starting", "Loading checkpoint shards from /ckpt/step_1200",
                                  "NCCL version 2.18.1+cuda12.1", "saving nothing this step"])
def test_lines_that_are_not_progress(line):
    assert not console.PROGRESS.search(line)


def test_consoles_alone_are_nothing_readable(tmp_path, run_cli):
    """Last words tell about ranks something else shows; training output alone is no job's state."""
    for rank in range(2):
        (tmp_path / f"rank{rank}.stdout.log").write_text(training_output(20_000)[0])
    done = run_cli("analyze", tmp_path, "-j", "1")
    assert done.returncode == 2 and done.stdout == ""
    assert "nothing here describes a process of a distributed job" in done.stderr
