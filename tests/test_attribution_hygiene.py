"""Attribution hygiene: which numbers are ranks, and how merged logs split per rank.

Numbers in paths that are job ids, array task ids, pids, ports, dates or
counters are never ranks; a trailing number without a `rank` word is weak
and yields to what the file itself says; a rank beyond a known world size
is a diagnostic, not a new rank; merged outputs (`[rankN]:`, torchrun
`--tee`'s `[defaultN]:` with the agent's rendezvous result, `srun --label`,
old `[Rank N]` c10d lines) come apart per rank.
"""

import pytest

from conftest import CORPUS
from forensics import postmortem
from forensics.ingest import load_incident, merge, torchlog
from forensics.ingest.attribution import STRONG, WEAK, PidMap, World, attribute, path_rank, rank_from_path
from forensics.ingest.facts import Facts
from forensics.ingest.statements import _prefixes
from forensics.model import Evidence, MessageHit, ProcessDump, ProcessGroup, ProcessRecord, RankState
from forensics.plugins import Plugins


def parse(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return torchlog.parse(str(path), name)


def own(facts):
    return {r.rank: r for r in facts.records if r.source == "torch"}


def incident(folder):
    """The incident as the rules see it: merged, then settled by the post-mortem stage."""
    return postmortem.settle(load_incident([str(folder)], Plugins(autoload=False), jobs=1))


# ------------------------------------------------------------------ numbers in paths

@pytest.mark.parametrize("path", [
    "slurm-34446.out",            # Slurm's default output: the job id
    "slurm-34446_3.out",          # an array job: job id and array task id
    "logs/train.o12345",          # PBS / SGE stdout: the job id
    "logs/train.e12345",          # ... and stderr
    "train.po4242",
    "job_12345.log",
    "jobid-778.txt",
    "core.4242",                  # a core dump: the pid
    "pid4242.txt",
    "port_29500.log",
    "2025-04-21.log",             # a date
    "20250421-1.log",
    "train_0001.log",             # a zero-padded counter
    "step_300.txt",
    "attempt_2.log",
    "local_rank3.log",            # a local rank is not a global rank
    "node_rank1/py-spy.txt",      # nor is a node's rank
    "tp_rank0.gdb.txt",           # nor a tensor-parallel rank
    "node07/gdb.txt",
])
def test_numbers_that_are_never_ranks(path):
    assert path_rank(path) is None
    assert rank_from_path(path) is None


@pytest.mark.parametrize("path, rank, strength", [
    ("rank3.pyspy.txt", 3, STRONG),
    ("slurm-34446_rank7.out", 7, STRONG),   # a rank word beats the job id around it
    ("global_rank12.log", 12, STRONG),
    ("host1/rank-12/py-spy.txt", 12, STRONG),
    ("dump.3.txt", 3, WEAK),
    ("fr_dump.3", 3, WEAK),
    ("llmd-prefill-2.log", 2, WEAK),      # a pod index, as like as not
    ("pytorchjob-llama-worker-1.log", 1, WEAK),
])
def test_rank_words_are_strong_trailing_numbers_weak(path, rank, strength):
    assert path_rank(path) == (rank, strength)


# ------------------------------------------------------------------ weak path ranks yield

def _record(path, pid=None, rank=None, local_rank=None, line=1):
    return ProcessRecord("torch", path, pid=pid, rank=rank, local_rank=local_rank,
                         evidence=Evidence(path, line, "x"))


def _dump(path, pid, hint=None):
    return ProcessDump("py-spy", path, pid=pid, rank_hint=hint, evidence=Evidence(path, 1, f"Process {pid}:"))


def test_a_weak_file_number_is_used_only_when_nothing_else_places_the_item():
    diagnostics = []
    placed, unattributed, _ = attribute([_dump("stacks/worker-2.txt", 77)], PidMap(), diagnostics)
    assert list(placed) == [2] and not unattributed and not diagnostics


def test_a_pid_map_beats_a_weak_file_number_with_one_info_note_per_file():
    stated = PidMap()
    stated.add("host", 309, 0, "llmd-prefill-2.log:5")
    stated.add("host", 311, 1, "llmd-prefill-2.log:6")
    items = [_record("llmd-prefill-2.log", pid=309), _record("llmd-prefill-2.log", pid=311, line=9),
             _record("llmd-prefill-2.log", pid=309, line=12)]
    diagnostics = []
    placed, _, _ = attribute(items, stated, diagnostics)
    assert sorted(placed) == [0, 1]
    assert [(d.severity, d.line) for d in diagnostics] == [("info", 1)]
    assert "the number 2 ending the file name is not taken as a rank" in diagnostics[0].message


def test_the_log_line_beats_a_weak_file_number_but_a_rank_word_disagreeing_warns():
    diagnostics = []
    placed, _, _ = attribute([_dump("dump.3.txt", 10, hint=5)], PidMap(), diagnostics)
    assert list(placed) == [5] and diagnostics[0].severity == "info"
    diagnostics = []
    placed, _, _ = attribute([_dump("rank3.txt", 10, hint=5)], PidMap(), diagnostics)
    assert list(placed) == [3] and diagnostics[0].severity == "warning"


def test_no_weak_file_number_for_a_local_rank_a_file_of_several_processes_or_the_pid_itself():
    for items in ([_record("node-1.log", local_rank=0)],
                  [_record("node-1.log", pid=5), _record("node-1.log", pid=6)],
                  [_dump("py-spy-4242.txt", 4242)]):
        diagnostics = []
        placed, unattributed, _ = attribute(items, PidMap(), diagnostics)
        assert not placed and unattributed == items


def test_a_rank_beyond_the_world_is_a_diagnostic_naming_file_and_line():
    diagnostics = []
    world = World(8, "NCCL communicator of 8 ranks, x.log:3")
    placed, unattributed, _ = attribute([_record("a.log", rank=12, line=40), _dump("dump.9.txt", 1)],
                                        PidMap(), diagnostics, world=world)
    assert not placed and len(unattributed) == 2
    beyond = [d for d in diagnostics if "not attributed to any rank" in d.message]
    assert [(d.path, d.line) for d in beyond] == [("a.log", 40), ("dump.9.txt", 1)]
    assert "says rank 12, but the world has 8 ranks (NCCL communicator of 8 ranks, x.log:3)" in beyond[0].message


# ------------------------------------------------------------------ the world size in merge

def test_merge_drops_ranks_beyond_the_default_groups_size_and_adds_no_silent_ones(tmp_path):
    fr = Facts("flight-recorder", "fr/nccl_trace_rank_0")
    fr.groups.append(ProcessGroup("0", "default_pg", (0, 1, 2, 3)))
    fr.groups.append(ProcessGroup("7", "", (2, 3, 9)))  # a member beyond the world: no silent rank 9
    fr.ranks.append(RankState(rank=0, evidence=Evidence("fr/nccl_trace_rank_0", 1, "x")))
    snap = Facts("snapshot", "snap.json")
    snap.ranks.append(RankState(rank=34446, evidence=Evidence("snap.json", 7, '"34446": {')))
    snap.pid_ranks.append(("h", 99, 40, Evidence("snap.json", 9, "pid 99")))
    merged = merge([fr, snap])
    assert sorted(merged.ranks) == [0, 1, 2, 3]
    beyond = sorted((d.path, d.line) for d in merged.diagnostics if "not attributed to any rank" in d.message)
    assert beyond == [("snap.json", 7), ("snap.json", 9)]


def test_a_catalogued_line_naming_a_rank_beyond_the_world_keeps_no_rank():
    fr = Facts("flight-recorder", "fr/nccl_trace_rank_0")
    fr.groups.append(ProcessGroup("0", "default_pg", tuple(range(8))))
    log = Facts("messages", "pasted.txt")
    log.messages.append(MessageHit("c10d-nccl-watchdog-timeout", (), Evidence("pasted.txt", 4, "[rank12]:..."), 12))
    merged = merge([fr, log])
    assert [h.rank for h in merged.messages] == [None]
    assert [(d.path, d.line) for d in merged.diagnostics if "not attributed" in d.message] == [("pasted.txt", 4)]


@pytest.mark.parametrize("text, world", [
    ("I20241209 23:39:42.495619 138559 ProcessGroupNCCL.cpp:905] [PG ID 0 PG GUID 0 Rank 1] ProcessGroupNCCL "
     "initialization options: size: 2, global rank: 1, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, "
     "SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 0\n", (0, 1)),
    ("I20241209 23:39:42.495619 138559 ProcessGroupNCCL.cpp:905] [PG ID 1 PG GUID 1 Rank 0] ProcessGroupNCCL "
     "initialization options: size: 2, global rank: 5, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, "
     "SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 1\n", None),  # a subgroup's size is not the world's
    ("".join(f"[2024-03-12 08:22:45,549] torch.distributed.launcher.api: [INFO]   {k} : {v}\n"
             for k, v in (("min_nodes", 2), ("max_nodes", 2), ("nproc_per_node", 4))), tuple(range(8))),
    ("".join(f"[2024-03-12 08:22:45,549] torch.distributed.launcher.api: [INFO]   {k} : {v}\n"
             for k, v in (("min_nodes", 1), ("max_nodes", 4), ("nproc_per_node", 4))), None),  # elastic: unknown
    ("export LOCAL_WORLD_SIZE=4 WORLD_SIZE=16\n[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are "
     "taking the entire process down.\n", tuple(range(16))),
])
def test_world_sizes_a_log_states(tmp_path, text, world):
    facts = parse(tmp_path, "launch.log", text)
    assert next((g.ranks for g in facts.groups if g.id == "0" and g.ranks), None) == world


def test_without_a_known_world_a_large_rank_stays(tmp_path):
    snap = Facts("snapshot", "snap.json")
    snap.ranks.append(RankState(rank=40, evidence=Evidence("snap.json", 7, "x")))
    assert 40 in merge([snap]).ranks


# ------------------------------------------------------------------ job ids and pod indexes end to end

def test_a_slurm_job_id_never_becomes_a_rank(tmp_path):
    folder = tmp_path / "collected"
    folder.mkdir()
    # Python output no prefix attributes, beside an NCCL WARN of a pid nothing maps.
    (folder / "slurm-34446.out").write_text(
        "[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous "
        "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n"
        "node02:201878:201990 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.1<52874> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n")
    found = incident(folder)
    assert 34446 not in found.ranks
    assert not any("34446" in d.message and "rank 34446" in d.message for d in found.diagnostics)


def test_a_pod_index_is_not_a_rank_when_nccl_init_lines_place_the_processes():
    found = incident(CORPUS / "public_n_llmd_rdma_port_flap_tp_crash")
    assert sorted(found.ranks) == [0, 1]
    assert not any("the file name says rank 2" in d.message for d in found.diagnostics)


# ------------------------------------------------------------------ old `[Rank N]` lines

OLD = ("[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, "
       "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 180000{r} milliseconds before timing "
       "out.\n")
TEARDOWN = "[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.\n"


def test_old_rank_lines_of_several_processes_split_per_rank(tmp_path):
    facts = parse(tmp_path, "train.log", OLD.format(r=1) + OLD.format(r=2) + TEARDOWN)
    records = own(facts)
    assert sorted(r for r in records if r is not None) == [1, 2]
    assert records[1].last_op.evidence.line == 1 and records[2].last_op.evidence.line == 2
    assert [h.rank for h in facts.messages if h.id == "c10d-nccl-watchdog-timeout"] == [1, 2]


def test_old_rank_lines_stay_unsplit_when_the_file_shows_another_group(tmp_path):
    other = ("[rank9]:[E1003 18:37:01.833575187 ProcessGroupNCCL.cpp:1664] [PG ID 2 PG GUID 3 Rank 1] "
             "Exception (either an error or timeout) detected by watchdog at work: 7, last enqueued NCCL work: 7, "
             "last completed NCCL work: 6.\n")
    facts = parse(tmp_path, "train.log", OLD.format(r=1) + OLD.format(r=2) + other)
    assert sorted(r for r in own(facts) if r is not None) == [9]  # group-local `[Rank N]`: not global


def test_a_terminate_block_goes_to_the_rank_its_what_line_names(tmp_path):
    block = ("terminate called after throwing an instance of 'c10::DistBackendError'\n"
             "  what():  [PG 0 (default_pg) Rank {r}] Process group watchdog thread terminated with exception: "
             "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
             "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 60000{r} milliseconds before timing out.\n")
    facts = parse(tmp_path, "slurm-77.out", block.format(r=3) + block.format(r=6))
    records = own(facts)
    assert sorted(records) == [3, 6]
    assert not any("the default group calls this process" in d.message for d in facts.diagnostics)


# ------------------------------------------------------------------ torchrun --tee and the rendezvous result

def _agent(group_rank, ranks, style):
    fields = ["restart_count=0", "master_addr=node-a", "master_port=29500", f"group_rank={group_rank}",
              "group_world_size=2", "local_ranks=[0, 1]", f"role_ranks={ranks}", f"global_ranks={ranks}",
              "role_world_sizes=[4, 4]", "global_world_sizes=[4, 4]"]
    if style == "1.x":  # basicConfig: the message's later lines carry no prefix
        return ("INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:\n"
                + "".join(f"  {f}\n" for f in fields))
    if style == "2.1":
        pre = "[2024-03-12 08:22:58,131] torch.distributed.elastic.agent.server.api: [INFO] "
    else:  # 2.4+: glog style, every line prefixed
        pre = "I0312 08:22:58.131000 52 torch/distributed/elastic/agent/server/api.py:525] "
    return pre + "[default] Rendezvous complete for workers. Result:\n" + "".join(f"{pre}  {f}\n" for f in fields)


def _tee(local, rank):
    return OLD.format(r=rank).replace("[E ", f"[default{local}]:[E ", 1)


@pytest.mark.parametrize("style", ["1.x", "2.1", "2.4"])
def test_tee_local_ranks_become_the_global_ranks_the_agent_assigned(tmp_path, style):
    facts = parse(tmp_path, "worker-0.log", _agent(1, [2, 3], style) + _tee(0, 2) + _tee(1, 3))
    records = own(facts)
    assert sorted(records) == [2, 3]
    assert records[2].local_rank == 0 and records[3].local_rank == 1
    assert [g.ranks for g in facts.groups if g.id == "0"] == [(0, 1, 2, 3)]  # the world the launcher states
    assert sorted(h.rank for h in facts.messages if h.id == "c10d-nccl-watchdog-timeout") == [2, 3]


def test_without_the_result_the_group_rank_and_local_world_size_give_the_global_rank(tmp_path):
    pre = "[2024-03-12 08:22:45,549] torch.distributed."
    text = (f"{pre}launcher.api: [INFO]   nproc_per_node   : 2\n"
            f"{pre}elastic.rendezvous.dynamic_rendezvous: [INFO] The node 'worker-0_52_0' has joined round 0 of the "
            f"rendezvous 'llama' as rank 1 in a world of size 2.\n" + _tee(0, 2) + _tee(1, 3))
    assert sorted(own(parse(tmp_path, "worker-0.log", text))) == [2, 3]
    other = text.replace("worker-0_52_0", "worker-1_49_0").replace("as rank 1", "as rank 0")
    both = text.split("\n", 2)[0] + "\n" + other.split("\n", 2)[1] + "\n" + text  # two agents, one stream
    records = [r for r in parse(tmp_path, "both.log", both).records if r.source == "torch"]
    assert [(r.rank, r.local_rank) for r in records] == [(None, 0), (None, 1)]


def test_two_agents_results_in_one_unlabelled_stream_map_nothing(tmp_path):
    text = _agent(0, [0, 1], "2.1") + _agent(1, [2, 3], "2.1") + _tee(0, 0)
    facts = parse(tmp_path, "both.log", text)
    assert [r.rank for r in own(facts).values()] == [None]
    assert any("rendezvous results of 2 launcher agents" in d.message for d in facts.diagnostics)


def test_tee_without_a_rendezvous_result_keeps_the_local_rank_only(tmp_path):
    facts = parse(tmp_path, "node-1.log", _tee(0, 2))
    (record,) = own(facts).values()
    assert (record.rank, record.local_rank) == (None, 0)


def test_two_node_tee_corpus_names_the_rank_only_the_world_size_reveals():
    found = incident(CORPUS / "synthetic_attr_tee_two_nodes_rendezvous")
    assert sorted(found.ranks) == [0, 1, 2, 3]
    assert found.ranks[2].evidence.path == "pytorchjob-llama-worker-0.log"
    assert "no artifact describes this rank" in found.ranks[3].why


# ------------------------------------------------------------------ srun --label

def _labelled(rank, text):
    return "".join(f"{rank}: {line}\n" for line in text.splitlines())


def test_srun_labels_are_global_ranks_when_every_line_carries_one(tmp_path):
    text = ("Running job 812345\n"  # the batch script's own line, before srun
            + _labelled(0, "rank 0 of 2 ready") + _labelled(1, "rank 1 of 2 ready")
            + _labelled(0, TEARDOWN) + _labelled(1, OLD.format(r=1)) + _labelled(0, OLD.format(r=0))
            + "srun: error: node02: task 1: Aborted (core dumped)\n")
    facts = parse(tmp_path, "train-812345.out", text)
    records = own(facts)
    assert sorted(records) == [0, 1]
    assert [e.line for e in records[0].errors] == [4, 6]  # the unranked teardown line too, by its label


def test_a_few_labelled_looking_lines_do_not_make_a_labelled_file(tmp_path):
    text = "0: hello\n1: world\nplain output\n" + OLD.format(r=1) + OLD.format(r=2)
    assert not torchlog.labelled([line.encode() for line in text.splitlines()])
    facts = parse(tmp_path, "x.log", text)
    assert sorted(r for r in own(facts) if r is not None) == [1, 2]  # split by `[Rank N]` instead


def test_labels_of_torchrun_agents_are_nodes_not_ranks(tmp_path):
    # srun starts one torchrun per node; its label is the node's task id.
    text = (_labelled(0, _agent(1, [2, 3], "2.1")) + _labelled(1, _agent(0, [0, 1], "2.1"))
            + _labelled(0, _tee(0, 2)) + _labelled(1, _tee(0, 0)) + _labelled(0, _tee(1, 3)))
    facts = parse(tmp_path, "slurm-9.out", text)
    assert sorted(own(facts)) == [0, 2, 3]


def test_srun_label_corpus():
    found = incident(CORPUS / "synthetic_attr_srun_label")
    assert sorted(found.ranks) == list(range(8))
    assert all(found.ranks[r].current_op.seq == 3622 for r in (0, 1, 2, 3, 4, 5, 7))
    assert 812345 not in found.ranks


def test_the_catalogue_reader_takes_srun_labels_as_ranks_only_when_told():
    line = "3: RuntimeError: NCCL communicator was aborted on rank 3."
    assert _prefixes(line, True)[:2] == (3, None)
    assert _prefixes(line)[:2] == (None, None)
    assert _prefixes("3: [default1]:RuntimeError: x", True)[:2] == (None, 1)
