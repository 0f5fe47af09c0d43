"""Processes known by framework names: SGLang's and vLLM's tensor-parallel ranks, and their collectives.

The stacks are written as `py-spy dump` prints them (`Process N: <title>`, one frame a line, the
function names and files of vLLM 0.5-0.6 and SGLang 0.4-0.5); the log lines as SGLang's
`configure_logger` formats them (`[%(asctime)s{prefix}] %(message)s`, the prefix ` DP<d> PP<p> TP<t>
EP<e>` holding only the parts whose size exceeds 1) and its scheduler watchdog prints a dump of its
own process (`Pyspy dump for PID <pid>:` before 0.5.5, `Pyspy dump for PID <pid> (py-spy dump
--native --pid <pid>):` after).
"""

import pytest

from forensics import model as m
from forensics.ingest import load_incident, pyspy, stacks
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
