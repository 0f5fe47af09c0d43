"""Ranks from what a process says about itself: its command line, its title,
Lightning's own `GLOBAL_RANK: N, MEMBER: M/W` lines.

The dumps are written as py-spy 0.3/0.4 print them (`Process N: <cmdline>`,
`Python vX.Y.Z (...)`, `Thread N (state): "name"`, one frame a line).
"""

import pytest

from forensics import analyze, messages
from forensics.ingest import load_incident
from forensics.ingest.attribution import (GLOBAL, GROUP_LOCAL, LOCAL, NAMED, PidMap, attribute, job_shape,
                                          process_identity)
from forensics.model import Evidence, ProcessDump
from forensics.plugins import Plugins

WORKER = "/usr/bin/python3 -u train.py {args}"
ALL_REDUCE = ("    all_reduce (torch/distributed/distributed_c10d.py:2050)\n"
              "    wrapper (torch/distributed/c10d_logger.py:83)\n"
              "    reduce_loss (train.py:77)\n"
              "    main (train.py:120)\n"
              "    <module> (train.py:140)\n")
EVALUATING = ("    forward (model.py:51)\n"
              "    evaluate (train.py:96)\n"
              "    main (train.py:118)\n"
              "    <module> (train.py:140)\n")
IN_INIT = ("    _env_rendezvous_handler (torch/distributed/rendezvous.py:172)\n"
           "    init_process_group (torch/distributed/distributed_c10d.py:422)\n"
           "    setup (train.py:30)\n"
           "    <module> (train.py:140)\n")


def pyspy(pid: int, command: str, frames: str, state: str = "active+gil") -> str:
    return (f"Process {pid}: {command}\nPython v3.10.12 (/usr/bin/python3.10)\n\n"
            f"Thread {pid} ({state}): \"MainThread\"\n{frames}"
            f"Thread {pid + 180} (idle): \"Thread-2\"\n"
            "    wait (threading.py:324)\n    run (tqdm/_monitor.py:60)\n")


def launcher_log(nnodes: int, hosts: str = "'localhost': [0, 1, 2, 3]", world: int = 4) -> str:
    return (
        "[2024-03-02 09:10:11,201] [INFO] [runner.py:571:main] cmd = /usr/bin/python3 -u -m "
        "deepspeed.launcher.launch --world_info=e30= --master_addr=127.0.0.1 --master_port=29500 train.py\n"
        f"[2024-03-02 09:10:13,002] [INFO] [launch.py:138:main] WORLD INFO DICT: {{{hosts}}}\n"
        f"[2024-03-02 09:10:13,002] [INFO] [launch.py:144:main] nnodes={nnodes}, num_local_procs=4, node_rank=0\n"
        f"[2024-03-02 09:10:13,002] [INFO] [launch.py:163:main] dist_world_size={world}\n"
        "[2024-03-02 09:10:13,002] [INFO] [launch.py:165:main] Setting CUDA_VISIBLE_DEVICES=0,1,2,3\n")


def write_workers(folder, with_launcher: str | None):
    """Four workers named by pid, their ranks only in their command lines:
    local rank 0 evaluates alone, the others wait in an all-reduce."""
    folder.mkdir(exist_ok=True)
    for local in range(4):
        pid = 5120 + local
        frames = EVALUATING if local == 0 else ALL_REDUCE
        (folder / f"pyspy_{pid}.txt").write_text(
            pyspy(pid, WORKER.format(args=f"--local_rank={local} --deepspeed --zero_stage 2"), frames))
    if with_launcher is not None:
        (folder / "launch.log").write_text(with_launcher)
    return folder


def incident(folder):
    return load_incident([str(folder)], Plugins(autoload=False), jobs=1)


def said(inc, needle):
    return [d for d in inc.diagnostics if needle in d.message]


# ------------------------------------------------------------------ the words


@pytest.mark.parametrize("command, rank, scope", [
    ("/usr/bin/python3 -u main.py --local_rank=1 --data_output_path /data", 1, LOCAL),
    ("python train.py --local-rank 2 --lr 3e-4", 2, LOCAL),
    ("python train.py --local-rank=3", 3, LOCAL),
    ("python train.py --rank 5 --world-size 8", 5, GLOBAL),
    ("python main.py --dist-url tcp://10.1.1.20:23456 --dist-backend nccl --world-size 4 --rank=0", 0, GLOBAL),
    ("python train.py --node_rank=1 --nproc_per_node=4 --local_rank=2", 6, GLOBAL),
    ("python train.py --node-rank 2 --nproc-per-node 8 --local-rank 7", 23, GLOBAL),
    ("python train.py --node_rank=1 --local_rank=2", 2, LOCAL),  # no devices per node: still a local rank
    ("sglang::scheduler_TP1", 1, GROUP_LOCAL),
    ("sglang::scheduler_DP0_TP1", 1, GROUP_LOCAL),
    ("sglang::scheduler_DP0_PP1_TP2_EP0", 2, GROUP_LOCAL),
    ("sglang::scheduler_TP3_EP3_PP1", 3, GROUP_LOCAL),
    ("VLLM::Worker_TP1", 1, GROUP_LOCAL),
    ("VLLM::Worker_PP1_TP0", 0, GROUP_LOCAL),
    ("ray::RayTrainWorker._RayTrainWorker__execute.get_next", None, NAMED),
    ("sglang::scheduler", None, NAMED),
    ("VLLM::Worker", None, NAMED),
])
def test_a_process_states_its_rank_in_its_command_line_or_title(command, rank, scope):
    found = process_identity(command)
    assert (found.rank, found.scope) == (rank, scope)


@pytest.mark.parametrize("command", [
    "python train.py --max_rank=3",
    "python train.py --ranking 3",
    "python train.py --local_rank_offset=3",
    "python train.py --lora_rank 8",
    "python finetune.py --rank 16 --alpha 32",  # a LoRA rank: no other word of a distributed launch
    "python train.py --rank_of_lora=8",
    "/usr/bin/python3 -m torch.distributed.run --nnodes 1 --nproc_per_node 4 train.py",
    "",
])
def test_other_words_state_no_rank(command):
    assert process_identity(command) is None


@pytest.mark.parametrize("title, whole", [
    ("sglang::scheduler_TP1", True),          # no PP, no DP: SGLang adds them when those sizes exceed 1
    ("VLLM::Worker_TP0", True),
    ("sglang::scheduler_DP1_TP0", False),     # a data-parallel replica: its TP rank is not the job's rank
    ("sglang::scheduler_TP0_PP1", False),     # a pipeline stage: the world is TP x PP
    ("VLLM::Worker_PP1_TP1", False),
])
def test_a_tp_rank_is_global_only_where_the_title_says_tp_is_the_whole_job(title, whole):
    assert process_identity(title).whole_world is whole


# ------------------------------------------------------------------ local ranks and one node


def test_local_ranks_are_global_on_a_job_the_launcher_says_is_one_node(tmp_path):
    inc = incident(write_workers(tmp_path / "job", launcher_log(nnodes=1)))
    assert sorted(inc.ranks) == [0, 1, 2, 3]
    assert not inc.unattributed
    assert {inc.ranks[r].pid for r in range(4)} == {5120, 5121, 5122, 5123}
    assert inc.ranks[2].pid == 5122
    note = said(inc, "rank 1 from its command line --local_rank=1, on a one-node job")
    assert len(note) == 1 and note[0].path == "pyspy_5121.txt" and note[0].line == 1
    assert "launch.log:" in note[0].message
    # the file name's number is the pid: not offered as a rank, not argued with
    assert not said(inc, "ending the file name")


def test_the_one_node_job_reaches_a_verdict_on_the_rank_elsewhere(tmp_path):
    report = analyze(write_workers(tmp_path / "job", launcher_log(nnodes=1)), hung=True,
                     plugins=Plugins(autoload=False))
    assert report.verdict == "missing_rank"
    assert report.culprit_ranks == [0]


def test_without_word_of_one_node_a_local_rank_stays_local_and_is_said(tmp_path):
    inc = incident(write_workers(tmp_path / "job", None))
    assert not inc.ranks
    assert len(inc.unattributed) == 4
    note = said(inc, "its command line says local rank 1 (--local_rank=1)")
    assert len(note) == 1 and note[0].path == "pyspy_5121.txt"
    assert "nothing says the job is one node" in note[0].message


def test_a_launcher_of_two_nodes_does_not_make_local_ranks_global(tmp_path):
    log = launcher_log(nnodes=2, hosts="'node-a': [0, 1, 2, 3], 'node-b': [0, 1, 2, 3]", world=8)
    inc = incident(write_workers(tmp_path / "job", log))
    assert not inc.ranks and len(inc.unattributed) == 4
    assert said(inc, "nothing says the job is one node")


def test_a_dumped_torchrun_standalone_says_the_job_is_one_node(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "pyspy_5100.txt").write_text(pyspy(
        5100, "/usr/bin/python3 /usr/local/bin/torchrun --standalone --nproc-per-node 2 train.py",
        "    _poll (torch/distributed/elastic/multiprocessing/api.py:520)\n"
        "    run (torch/distributed/launcher/api.py:260)\n    main (torch/distributed/run.py:812)\n", "idle"))
    for local in range(2):
        (folder / f"pyspy_{5120 + local}.txt").write_text(
            pyspy(5120 + local, WORKER.format(args=f"--local-rank {local}"), ALL_REDUCE))
    inc = incident(folder)
    assert sorted(inc.ranks) == [0, 1]
    assert said(inc, "rank 1 from its command line --local-rank 1, on a one-node job "
                     "(the launcher was started with --standalone")


def test_one_node_from_distinct_local_ranks_on_one_host():
    dumps = [ProcessDump("py-spy", f"node-a/{pid}.txt", pid=pid, host="node-a",
                         command=WORKER.format(args=f"--local_rank={pid - 100}"),
                         evidence=Evidence(f"node-a/{pid}.txt", 1, "Process")) for pid in (100, 101, 102)]
    shape = job_shape([], dumps)
    assert "node-a" in shape.one_node
    placed, unattributed, _ = attribute(dumps, PidMap(), [], shape=shape)
    assert sorted(placed) == [0, 1, 2] and not unattributed
    # the same local rank twice on the host, or a second host: not one node
    twice = dumps + [ProcessDump("py-spy", "node-a/103.txt", pid=103, host="node-a",
                                 command=WORKER.format(args="--local_rank=0"))]
    assert not job_shape([], twice).one_node
    other = dumps[:2] + [ProcessDump("py-spy", "node-b/9.txt", pid=9, host="node-b",
                                     command=WORKER.format(args="--local_rank=2"))]
    assert not job_shape([], other).one_node


def test_a_rank_in_the_path_beats_the_command_line_and_the_disagreement_is_said(tmp_path):
    folder = write_workers(tmp_path / "job", launcher_log(nnodes=1))
    (folder / "pyspy_5123.txt").rename(folder / "rank2.pyspy.txt")
    (folder / "pyspy_5122.txt").unlink()
    inc = incident(folder)
    assert inc.ranks[2].pid == 5123
    assert said(inc, "the file name says rank 2 but its command line --local_rank=3, on a one-node job")


# ------------------------------------------------------------------ framework titles


SGLANG_TP2 = "python3 -m sglang.launch_server --model-path /models/m --tp 2 --port 30000"


def sglang_folder(tmp_path, titles, launch=SGLANG_TP2):
    folder = tmp_path / "server"
    folder.mkdir()
    if launch:
        (folder / "server.log").write_text(f"{launch}\n[2025-06-01 10:00:01 TP0] Init torch distributed begin.\n")
    for index, title in enumerate(titles):
        (folder / f"dump-{4800 + index}.txt").write_text(pyspy(4800 + index, title, ALL_REDUCE))
    return folder


def test_sglang_tp_ranks_are_global_when_the_server_says_tp_is_the_whole_job(tmp_path):
    inc = incident(sglang_folder(tmp_path, ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]))
    assert {r: s.pid for r, s in inc.ranks.items()} == {0: 4800, 1: 4801}
    note = said(inc, "rank 1 from its process title sglang::scheduler_TP1: tensor-parallel rank 1 of a job whose "
                     "tensor-parallel group is the whole world "
                     "(a tensor-parallel size of 2 and no other, server.log:1)")
    assert len(note) == 1


@pytest.mark.parametrize("launch", [
    "",                                                                         # nothing says the job's shape
    "python3 -m sglang.launch_server --model-path /models/m --tp 2 --pp-size 2",  # pipeline stages: world is TP x PP
    "python3 -m sglang.launch_server --model-path /models/m --dp 2 --tp 2",       # two replicas, two worlds
])
def test_sglang_tp_ranks_stay_group_local_unless_the_server_says_tp_is_the_whole_job(tmp_path, launch):
    inc = incident(sglang_folder(tmp_path, ["sglang::scheduler_TP0", "sglang::scheduler_TP1"], launch))
    assert not inc.ranks and len(inc.unattributed) == 2
    assert said(inc, "(sglang::scheduler_TP1) says rank 1 of its tensor-parallel group; nothing says that group "
                     "is the whole job")


@pytest.mark.parametrize("line, size", [
    ("command=python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp-size 4 --port 30000", 4),
    ("python3 -m sglang.launch_server --model-path m --tensor-parallel-size=8 --dp-size 1", 8),
    ("[2025-02-16 12:57:33] server_args=ServerArgs(model_path='m', tp_size=16, dp_size=1, nnodes=2)", 16),
    ("python3 -m sglang.launch_server --model-path m --tp 4 --pp 12", None),
    ("server_args=ServerArgs(model_path='m', tp_size=8, pp_size=2, dp_size=1)", None),
    ("server_args=ServerArgs(model_path='m', tp_size=8, pp_size=1, dp_size=32)", None),
])
def test_sglang_states_its_world_only_when_tp_is_all_of_it(line, size):
    hits = [h for h in messages.line_hits(line, Evidence("server.log", 1, line)) if h.id.startswith("sglang-")]
    assert [h.fact("world_size") for h in hits] == ([size] if size else [])


def test_sglang_tp_ranks_of_data_parallel_replicas_stay_group_local(tmp_path):
    inc = incident(sglang_folder(tmp_path, ["sglang::scheduler_DP0_TP1", "sglang::scheduler_DP1_TP1"], ""))
    assert not inc.ranks and len(inc.unattributed) == 2
    assert len(said(inc, "(sglang::scheduler_DP1_TP1) says rank 1 of its tensor-parallel group")) == 1


def test_a_ray_actor_title_names_no_rank_and_the_diagnostic_says_so(tmp_path):
    inc = incident(sglang_folder(tmp_path, ["ray::RayTrainWorker._RayTrainWorker__execute"], ""))
    assert not inc.ranks
    assert said(inc, "its process title (ray::RayTrainWorker._RayTrainWorker__execute) names no rank")


# ------------------------------------------------------------------ Lightning's own lines


@pytest.mark.parametrize("line, rank, member, world", [
    ("initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8", 1, 2, 8),
    ("initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1", 0, 1, 1),
    ("Initializing distributed: GLOBAL_RANK: 15, MEMBER: 16/16", 15, 16, 16),
    ("[rank: 3] Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/4", 3, 4, 4),
])
def test_lightning_states_each_process_rank_and_the_world(line, rank, member, world):
    hits = messages.line_hits(line, Evidence("train.log", 7, line))
    assert len(hits) == 1
    assert (hits[0].fact("rank"), hits[0].fact("count"), hits[0].fact("world_size")) == (rank, member, world)


@pytest.mark.parametrize("line, world", [
    ("All DDP processes registered. Starting ddp with 2 processes", 2),
    ("All distributed processes registered. Starting with 16 processes", 16),
])
def test_lightning_states_that_every_process_joined(line, world):
    hits = messages.line_hits(line, Evidence("train.log", 9, line))
    assert [(h.id, h.fact("world_size")) for h in hits] == [("lightning-processes-registered", world)]


def lightning_console(claims, world, registered=False):
    lines = ["GPU available: True (cuda), used: True", "TPU available: False, using: 0 TPU cores"]
    for rank in claims:
        lines += [f"LOCAL_RANK: {rank % 4} - CUDA_VISIBLE_DEVICES: [0,1,2,3]",
                  f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/{world}"]
    if registered:
        lines += ["-" * 100, "distributed_backend=nccl",
                  f"All distributed processes registered. Starting with {world} processes", "-" * 100]
    return "\n".join(lines) + "\n"


def test_ranks_claimed_twice_and_ranks_nobody_claims(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "slurm-90211.out").write_text(lightning_console([0, 1, 2, 3, 1, 0, 3, 2], 8))
    inc = incident(folder)
    assert sorted(inc.ranks) == list(range(8))
    warning = said(inc, "rank 0-3 are each claimed by more than one process")
    assert len(warning) == 1 and warning[0].severity == "warning"
    assert "rank 4-7 by none" in warning[0].message and "wrong rank setup" in warning[0].message
    for rank in range(4, 8):
        assert inc.ranks[rank].why.startswith("no process claims this rank (the world has 8 ranks")
        assert "rank 0-3 are each claimed twice" in inc.ranks[rank].why
    assert inc.ranks[0].why.startswith("known only from its own line as it entered init_process_group "
                                       "(slurm-90211.out:")
    assert inc.ranks[0].evidence.path == "slurm-90211.out"


def test_a_complete_world_adds_no_rank_and_warns_of_nothing(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.log").write_text(lightning_console([0, 1, 2, 3], 4))
    inc = incident(folder)
    assert not inc.ranks and not said(inc, "claimed")


def test_a_registered_world_has_no_missing_ranks(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.log").write_text(lightning_console([0, 1], 4, registered=True))
    inc = incident(folder)
    assert not inc.ranks


def test_the_stated_world_is_known_to_merge(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.log").write_text(lightning_console([0], 4))
    (folder / "rank6.pyspy.txt").write_text(pyspy(700, "python train.py", IN_INIT, "idle"))
    inc = incident(folder)
    assert 6 not in inc.ranks
    assert said(inc, "says rank 6, but the world has 4 ranks (train.log:4 states a world of 4)")


def test_ranks_that_wait_in_init_leave_the_unclaimed_ones_missing(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.log").write_text(lightning_console([0], 4))
    (folder / "rank0.pyspy.txt").write_text(pyspy(700, "python train.py", IN_INIT, "idle"))
    inc = incident(folder)
    assert sorted(inc.ranks) == [0, 1, 2, 3]
    assert inc.ranks[0].pid == 700
    assert "rank 0 waits in init_process_group" in inc.ranks[3].why


def test_a_rank_seen_past_init_means_no_rank_is_declared_missing(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.log").write_text(lightning_console([0], 4))
    (folder / "rank0.pyspy.txt").write_text(pyspy(700, "python train.py", ALL_REDUCE))
    inc = incident(folder)
    assert sorted(inc.ranks) == [0]
