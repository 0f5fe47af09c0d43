"""Processes known by framework names: SGLang's and vLLM's tensor-parallel ranks, and their collectives.

The stacks are written as `py-spy dump` prints them (`Process N: <title>`, one frame a line, the
function names and files of vLLM 0.5-0.6 and SGLang 0.4-0.5); the log lines as SGLang's
`configure_logger` formats them (`[%(asctime)s{prefix}] %(message)s`, the prefix ` DP<d> PP<p> TP<t>
EP<e>` holding only the parts whose size exceeds 1) and its scheduler watchdog prints a dump of its
own process (`Pyspy dump for PID <pid>:`, in later versions `Pyspy dump for PID <pid> (py-spy dump
--native --pid <pid>):`).
"""

import pytest

from forensics import analyze, messages
from forensics import model as m
from forensics.ingest import attribution, load_incident, pyspy, stacks
from forensics.ingest.attribution import GROUP_LOCAL, process_identity
from forensics.model import Evidence
from forensics.plugins import Plugins

TAIL = ("    event_loop_normal (sglang/srt/managers/scheduler.py:1041)\n"
        "    run_scheduler_process (sglang/srt/managers/scheduler.py:3311)\n"
        "    run (multiprocessing/process.py:108)\n"
        "    _bootstrap (multiprocessing/process.py:314)\n")


def main_thread_op(tmp_path, frames: str, title: str = "sglang::scheduler_TP1"):
    """Parse one py-spy dump and classify its main thread: (activity, op)."""
    path = tmp_path / "dump.txt"
    path.write_text(f"Process 4242: {title}\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
                    f"Thread 4242 (active): \"MainThread\"\n{frames}{TAIL}")
    facts = pyspy.parse(str(path), "dump.txt")
    c = stacks.classify(facts.processes[0])
    op = stacks.comm_op(c)
    return c.activity, op.op if op is not None else None


# ------------------------------------------------------------------ class 2: framework collectives

@pytest.mark.parametrize("frames, op", [
    # vLLM's custom all-reduce kernel: nothing of torch.distributed below it (vllm#8410's stack)
    ("    all_reduce_unreg (vllm/_custom_ops.py:827)\n"
     "    all_reduce_unreg (vllm/distributed/device_communicators/custom_all_reduce.py:274)\n"
     "    custom_all_reduce (vllm/distributed/device_communicators/custom_all_reduce.py:299)\n"
     "    all_reduce (vllm/distributed/parallel_state.py:314)\n"
     "    tensor_model_parallel_all_reduce (vllm/distributed/communication_op.py:11)\n"
     "    forward (vllm/model_executor/layers/linear.py:1052)\n", "all_reduce"),
    # PyNccl through ctypes, under the GroupCoordinator's out-of-place all-reduce
    ("    __call__ (ctypes/__init__.py:391)\n"
     "    ncclAllReduce (vllm/distributed/device_communicators/pynccl_wrapper.py:290)\n"
     "    all_reduce (vllm/distributed/device_communicators/pynccl.py:134)\n"
     "    _all_reduce_out_place (vllm/distributed/parallel_state.py:392)\n"
     "    all_reduce (vllm/distributed/parallel_state.py:108)\n", "all_reduce"),
    # the driver's broadcast of the step's inputs (vLLM 0.4-0.6 workers)
    ("    synchronize (torch/cuda/__init__.py:892)\n"
     "    broadcast_tensor_dict (vllm/distributed/parallel_state.py:511)\n"
     "    broadcast_tensor_dict (vllm/distributed/communication_op.py:32)\n"
     "    execute_model (vllm/worker/worker_base.py:271)\n", "broadcast"),
    # SGLang's copy of the same package: the logits all-gather
    ("    all_gather (sglang/srt/distributed/parallel_state.py:712)\n"
     "    tensor_model_parallel_all_gather (sglang/srt/distributed/communication_op.py:21)\n"
     "    _get_logits (sglang/srt/layers/logits_processor.py:561)\n", "all_gather"),
    # SGLang's request broadcast, with the object's size read back as a Python int (an .item() sync)
    ("    item (torch/_tensor.py:1)\n"
     "    broadcast_pyobj (sglang/srt/utils/common.py:1287)\n"
     "    _broadcast_reqs_across_ranks (sglang/srt/managers/scheduler.py:1363)\n"
     "    recv_requests (sglang/srt/managers/scheduler.py:1331)\n", "broadcast"),
    ("    broadcast_pyobj (sglang/srt/utils.py:802)\n"
     "    recv_requests (sglang/srt/managers/scheduler.py:566)\n", "broadcast"),
])
def test_vllm_and_sglang_collective_helpers_are_waits_in_that_collective(tmp_path, frames, op):
    assert main_thread_op(tmp_path, frames) == (m.BLOCKED, op)


def test_a_torch_collective_below_the_helper_still_names_the_op(tmp_path):
    frames = ("    all_gather_into_tensor (torch/distributed/distributed_c10d.py:4095)\n"
              "    wrapper (torch/distributed/c10d_logger.py:81)\n"
              "    _all_gather_into_tensor (sglang/srt/distributed/parallel_state.py:651)\n"
              "    all_gather (sglang/srt/distributed/parallel_state.py:712)\n")
    assert main_thread_op(tmp_path, frames) == (m.BLOCKED, "all_gather_into_tensor")


@pytest.mark.parametrize("frames", [
    # the same names in other files say nothing of a collective
    "    all_reduce (myproject/metrics.py:40)\n",
    "    broadcast (numpy/lib/stride_tricks.py:480)\n",
    # a point-to-point helper names its peer in the group's numbering: not taken
    "    recv_object (vllm/distributed/parallel_state.py:640)\n",
])
def test_names_outside_the_frameworks_collectives_are_not_collectives(tmp_path, frames):
    activity, _ = main_thread_op(tmp_path, frames + "    step (train.py:10)\n")
    assert activity != m.BLOCKED


# ------------------------------------------------------------------ class 1: SGLang's TP ranks in its own log

@pytest.mark.parametrize("line, rank, whole, said", [
    ("[2026-07-10 03:17:42 TP0] Scheduler debug info:", 0, True, "TP0"),
    ("[2026-07-10 03:17:42 TP3 EP3] Decode batch, #running-req: 26", 3, True, "TP3 EP3"),
    ("[07-10 03:17:42 DP1 TP3] Prefill batch, #new-seq: 1", 3, False, "DP1 TP3"),       # 0.5's shorter date
    ("[2025-06-01 10:00:01 PP1 TP2] Init torch distributed begin.", 2, False, "PP1 TP2"),
    ("[2026-07-10 03:17:42 PP1 ATTN_CP0 TP0] Pyspy dump for PID 142:", 0, False, "PP1 ATTN_CP0 TP0"),
    ("[2026-07-10 03:17:42 ATTN_CP1 MOE_DP0 TP5] Decode batch", 5, True, "ATTN_CP1 MOE_DP0 TP5"),
])
def test_sglang_log_prefix_names_a_rank_of_the_tensor_parallel_group(line, rank, whole, said):
    identity, rest = attribution.log_prefix_identity(line)
    assert (identity.rank, identity.scope, identity.whole_world, identity.said) == (rank, GROUP_LOCAL, whole, said)
    assert rest == line[line.index("] ") + 2:]


@pytest.mark.parametrize("line", [
    "[2026-07-10 03:17:42] The server is fired up and ready to roll!",  # the server's main process
    "[2026-07-10 03:17:42 DP0] Load weight end.",                      # a TP size of 1: no TP part
    "[rank0]:[E612 04:18:55.254092117 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 0] x",
    "[2024-03-02 09:10:11,201] [INFO] [runner.py:571:main] cmd = ...",
])
def test_other_prefixes_name_no_tp_rank(line):
    assert attribution.log_prefix_identity(line) is None


@pytest.mark.parametrize("title, rank, whole", [
    ("sglang::scheduler_PP1_ATTN_CP0_MOE_DP0_TP0", 0, False),
    ("sglang::scheduler_MOE_DP1_TP3_EP3", 3, True),   # MoE data parallelism is within the TP group, not DP
    ("sglang::scheduler_DP0_TP1_EP1", 1, False),
])
def test_sglang_05_title_parts_within_the_tp_group_are_not_data_parallel_replicas(title, rank, whole):
    identity = process_identity(title)
    assert (identity.rank, identity.scope, identity.whole_world) == (rank, GROUP_LOCAL, whole)


@pytest.mark.parametrize("line, pid", [
    ("[2026-07-10 03:17:42 TP1] Pyspy dump for PID 81912:", 81912),
    ("[07-10 03:17:42 TP1] Pyspy dump for PID 81912 (py-spy dump --native --pid 81912):", 81912),
    ("[2026-07-10 03:17:42] Pyspy dump for PID 81912:", None),   # the main process dumping every scheduler
    ("[2026-07-10 03:17:42 TP1] Pyspy failed to dump PID 81912. Error: x", None),
])
def test_a_scheduler_announces_the_dump_of_its_own_process(line, pid):
    found = attribution.announced_dump(line)
    assert (found[0] if found else None) == pid
    if found:
        assert found[1].rank == 1


@pytest.mark.parametrize("line", [
    "[2026-07-10 03:17:42 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    "[2025-03-02 11:05:17 TP3] Watchdog timeout (self.watchdog_timeout=300)",
    "[2026-07-10 03:17:42 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300.0, self.soft=True)",
])
def test_sglang_watchdog_timeout_states_the_server_is_stuck(line):
    hits = messages.line_hits(line, Evidence("server.log", 9, line))
    assert [(h.id, h.fact("timeout_ms")) for h in hits] == [("sglang-scheduler-watchdog-timeout", 300000)]
    assert messages.catalogue().get("sglang-scheduler-watchdog-timeout").stuck


ALL_REDUCE = ("    all_reduce (torch/distributed/distributed_c10d.py:3075)\n"
              "    wrapper (torch/distributed/c10d_logger.py:83)\n"
              "    _all_reduce_attn_groups (sglang/srt/mem_cache/hiradix_cache.py:196)\n"
              "    check_prefetch_progress (sglang/srt/mem_cache/hiradix_cache.py:1373)\n")
BROADCAST = ("    broadcast (torch/distributed/distributed_c10d.py:2974)\n"
             "    wrapper (torch/distributed/c10d_logger.py:83)\n"
             "    broadcast_pyobj (sglang/srt/utils/common.py:1437)\n"
             "    recv_requests (sglang/srt/managers/scheduler.py:1331)\n")


def server_log(stacks, args="tp_size=3, pp_size=1, dp_size=1", prefix="TP{n}", title="sglang::scheduler_TP{n}"):
    """An SGLang server's log: its arguments, then for each scheduler what its watchdog prints when it
    fires (debug info, the announced dump of its own process, the timeout), as 0.5 prints them."""
    out = [f"[2026-07-09 18:40:12] server_args=ServerArgs(model_path='/models/m', {args}, watchdog_timeout=300.0)"]
    for n, frames in enumerate(stacks):
        pid, at = 81911 + n, f"[2026-07-10 03:17:42 {prefix.format(n=n)}]"
        out += [f"{at} Scheduler debug info:", "scheduler.waiting_queue.size()=9",
                f"{at} Pyspy dump for PID {pid}:", f"Process {pid}: {title.format(n=n)}",
                "Python v3.12.3 (/usr/bin/python3.12)", "", f"Thread {pid} (idle): \"MainThread\"",
                frames.rstrip("\n"), TAIL.rstrip("\n"), "",
                f"{at} Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", ""]
    out.append("[2026-07-10 03:17:47] Received sigquit from a child process. It usually means the child failed.")
    return "\n".join(out) + "\n"


def write(tmp_path, text):
    folder = tmp_path / "server"
    folder.mkdir()
    (folder / "server.log").write_text(text)
    return folder


def test_dumps_sglang_prints_into_its_log_are_its_tp_ranks_and_the_log_says_it_is_stuck(tmp_path):
    folder = write(tmp_path, server_log([ALL_REDUCE, BROADCAST, BROADCAST]))
    inc = load_incident([str(folder)], Plugins(autoload=False), jobs=1)
    assert {r: s.pid for r, s in inc.ranks.items()} == {0: 81911, 1: 81912, 2: 81913}
    assert any("rank 2 from its process title sglang::scheduler_TP2: tensor-parallel rank 2 of a job whose "
               "tensor-parallel group is the whole world (a tensor-parallel size of 3 and no other, server.log:1)"
               in d.message for d in inc.diagnostics)
    assert [s.evidence.line for s in inc.stuck if s.kind == "stated_stuck"] == [18, 36, 54]
    report = analyze(str(folder), plugins=Plugins(autoload=False))
    assert (report.verdict, report.culprit_ranks) == ("collective_mismatch", [0])


def test_dumps_of_a_server_with_data_parallel_replicas_stay_group_local(tmp_path):
    text = server_log([ALL_REDUCE, BROADCAST], args="tp_size=2, pp_size=1, dp_size=2",
                      prefix="DP0 TP{n}", title="sglang::scheduler_DP0_TP{n}")
    inc = load_incident([str(write(tmp_path, text))], Plugins(autoload=False), jobs=1)
    assert not inc.ranks and len(inc.unattributed) == 2
    assert any("(sglang::scheduler_DP0_TP1) says rank 1 of its tensor-parallel group; nothing says that group is "
               "the whole job" in d.message for d in inc.diagnostics)


def test_an_announcement_the_title_does_not_bear_out_is_said(tmp_path):
    text = server_log([BROADCAST], title="/usr/bin/python3 -c from multiprocessing.spawn import spawn_main")
    inc = load_incident([str(write(tmp_path, text))], Plugins(autoload=False), jobs=1)
    assert any(d.path == "server.log" and d.line == 5 and "line 4 announces this dump as the process of "
               "tensor-parallel rank 0 (TP0), but its title" in d.message for d in inc.diagnostics)
