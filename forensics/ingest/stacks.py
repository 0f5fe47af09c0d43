"""Where is each rank blocked? Classify stack dumps into rank states.

The main thread decides a rank's state; background threads (c10d watchdog
and heartbeat, Gloo run loops, NCCL proxies, pin-memory, tqdm, a job's own
helpers) never do, except that a main thread waiting for the autograd
engine is wherever its autograd threads are.

A thread is judged on every frame, not its top one. gdb shows the innermost
frames as libc futexes, CPython's lock or unsymbolized `libcuda.so`
addresses; what they wait *for* is named further out (a c10d Work's wait, a
DataLoader's queue get, `.item()`), ten to forty frames in. Each frame gets
a kind (`_kind`), and the strongest context anywhere in the stack decides:

1. a communication call (the torch.distributed Python API, a c10d call, a
   Work's wait, a transport wait) is BLOCKED in that call, whatever it waits
   on below (a condition variable, the device, a socket). The Python API
   frame names the op; else the outermost c10d frame that does; else "comm";
2. a store call is BLOCKED in the store;
3. the device (a CUDA sync, `.item()`; a frame inside the driver is weaker)
   is DEVICE_WAIT;
4. the autograd engine is COMPUTING (backward);
5. a DataLoader, checkpoint or torch.nn/optim/autograd Python frame,
   innermost first (torch.nn only with no wait below it);
6. a generic wait (a lock, condition, queue, futex, the GIL) is LOCK_WAIT,
   a sleep IDLE, unless the job's own function above names data or I/O;
7. else the job's innermost own frame.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from .. import model as m
from .. import lazy
from ..model import CommOp, Evidence, Frame, ProcessDump, ThreadStack
from .textio import int_text

# ------------------------------------------------------------------ vocabularies

# torch.distributed Python entry points → normalized op.
_PY_COMM = {
    "send": "send", "recv": "recv", "isend": "send", "irecv": "recv",
    "all_reduce": "all_reduce", "broadcast": "broadcast", "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather_into_tensor", "_all_gather_base": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor", "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all_single", "barrier": "barrier",
    "monitored_barrier": "monitored_barrier", "reduce": "reduce", "gather": "gather",
    "scatter": "scatter", "all_gather_object": "all_gather_object",
    "broadcast_object_list": "broadcast_object_list", "gather_object": "gather",
    "scatter_object_list": "scatter", "batch_isend_irecv": "send",
    "all_reduce_coalesced": "all_reduce", "all_gather_coalesced": "all_gather",
}
# Frameworks' own helpers around a collective, read from their sources: a
# stack whose innermost telling frame is one of them waits in that collective
# (or in the device sync right after it, which waits for it). (path fragment,
# function names, op); a fragment's wrappers named like torch's take torch's op.
_FRAMEWORK_COMM = (
    # DistributedDataParallel's own collectives (torch/nn/parallel/distributed.py, 1.x-2.13): the buffer and
    # parameter broadcast of forward's _sync_buffers / the constructor (_distributed_broadcast_coalesced →
    # dist._broadcast_coalesced), the join-mode flag all-reduce, the parameter shape check at construction
    ("torch/nn/parallel/distributed.py", {"_distributed_broadcast_coalesced", "_sync_params_and_buffers",
                                          "_sync_buffers", "_sync_module_buffers", "_default_broadcast_coalesced",
                                          "_sync_params"}, "broadcast"),
    ("torch/nn/parallel/distributed.py", {"_check_global_requires_backward_grad_sync",
                                          "_match_all_reduce_for_bwd_pass"}, "all_reduce"),
    ("deepspeed/comm/", None, None),                      # deepspeed.comm: all_reduce, broadcast, ... as torch
    ("mmengine/dist/", None, None),                       # mmengine.dist: the same names
    ("deepspeed/runtime/zero/partition_parameters.py", {"wait"}, "all_gather"),  # ZeRO-3 gather handles
    ("deepspeed/runtime/zero/stage_1_and_2.py", {"has_overflow"}, "all_reduce"),
    ("deepspeed/runtime/zero/stage3.py", {"has_overflow"}, "all_reduce"),
    ("deepspeed/runtime/zero/stage2.py", {"has_overflow"}, "all_reduce"),  # before 0.5: stage_1_and_2.py
    ("deepspeed/runtime/zero/partitioned_param_coordinator.py", {"fetch_sub_module"}, "all_gather"),
    ("deepspeed/runtime/engine.py", {"_checkpoint_tag_validation"}, "all_reduce"),  # the tag's min and max
    ("fairseq/distributed/utils.py", {"all_reduce_dict", "_all_reduce_dict", "all_reduce"}, "all_reduce"),
    ("fairseq/distributed/utils.py", {"all_gather_list"}, "all_gather"),
    ("pytorch_lightning/utilities/distributed.py", {"gather_all_tensors"}, "all_gather"),
    ("pytorch_lightning/utilities/distributed.py", {"sync_ddp", "_sync_ddp"}, "all_reduce"),
    ("lightning_fabric/utilities/distributed.py", {"_gather_all_tensors"}, "all_gather"),
    ("lightning_fabric/utilities/distributed.py", {"_sync_ddp"}, "all_reduce"),
    ("torchmetrics/utilities/distributed.py", {"gather_all_tensors", "_simple_gather_all_tensors"}, "all_gather"),
    ("accelerate/utils/operations.py", {"_gpu_gather", "gather"}, "all_gather"),
    ("accelerate/utils/operations.py", {"_gpu_broadcast", "broadcast"}, "broadcast"),
    ("accelerate/state.py", {"wait_for_everyone"}, "barrier"),
    ("accelerate/utils/other.py", {"wait_for_everyone"}, "barrier"),
    ("mmcv/runner/dist_utils.py", {"allreduce_grads", "_allreduce_coalesced", "allreduce_params"}, "all_reduce"),
    ("mmdet/apis/train.py", {"parse_losses"}, "all_reduce"),
    ("mmdet/models/detectors/base.py", {"_parse_losses"}, "all_reduce"),
    # vLLM (0.4-0.11) and SGLang (0.3-0.5, which carries a copy of vLLM's distributed package under
    # sglang/srt/distributed/): the model's tensor-parallel helpers (communication_op.py), the
    # GroupCoordinator's methods and the torch custom ops behind them (parallel_state.py), and the device
    # communicators that run a collective without torch.distributed below them (the custom all-reduce's
    # kernels through _custom_ops.py, PyNccl's ctypes calls). Point-to-point helpers are left out: their
    # peers are ranks of the group, not global ranks.
    ("distributed/communication_op.py", {"tensor_model_parallel_all_reduce"}, "all_reduce"),
    ("distributed/communication_op.py", {"tensor_model_parallel_all_gather", "tensor_model_parallel_all_gatherv",
                                         "tensor_model_parallel_custom_all_gather"}, "all_gather"),
    ("distributed/communication_op.py", {"tensor_model_parallel_reduce_scatter"}, "reduce_scatter"),
    ("distributed/communication_op.py", {"tensor_model_parallel_gather"}, "gather"),
    ("distributed/communication_op.py", {"broadcast_tensor_dict"}, "broadcast"),
    ("distributed/parallel_state.py", {"all_reduce", "_all_reduce_out_place", "_all_reduce_in_place",
                                       "all_reduce_in_place", "inplace_all_reduce", "outplace_all_reduce",
                                       "fused_allreduce_rmsnorm"}, "all_reduce"),
    ("distributed/parallel_state.py", {"all_gather", "_all_gather_out_place", "all_gatherv", "custom_all_gather"},
     "all_gather"),
    ("distributed/parallel_state.py", {"all_gather_into_tensor", "_all_gather_into_tensor",
                                       "reg_all_gather_into_tensor"}, "all_gather_into_tensor"),
    ("distributed/parallel_state.py", {"reduce_scatter", "_reduce_scatter_out_place", "reduce_scatterv",
                                       "reduce_scatter_tensor", "reg_reduce_scatter_tensor"}, "reduce_scatter"),
    ("distributed/parallel_state.py", {"gather"}, "gather"),
    ("distributed/parallel_state.py", {"broadcast", "broadcast_object", "broadcast_object_list",
                                       "broadcast_tensor_dict"}, "broadcast"),
    ("distributed/parallel_state.py", {"barrier"}, "barrier"),
    ("distributed/device_communicators/custom_all_reduce.py", {"all_reduce", "custom_all_reduce",
                                                               "all_reduce_reg", "all_reduce_unreg"}, "all_reduce"),
    ("distributed/device_communicators/quick_all_reduce.py", {"all_reduce", "quick_all_reduce"}, "all_reduce"),
    ("distributed/device_communicators/pymscclpp.py", {"all_reduce"}, "all_reduce"),
    ("vllm/_custom_ops.py", {"all_reduce", "all_reduce_reg", "all_reduce_unreg", "qr_all_reduce"}, "all_reduce"),
    ("distributed/device_communicators/pynccl.py", {"all_reduce"}, "all_reduce"),
    ("distributed/device_communicators/pynccl.py", {"all_gather", "all_gatherv"}, "all_gather"),
    ("distributed/device_communicators/pynccl.py", {"reduce_scatter", "reduce_scatterv"}, "reduce_scatter"),
    ("distributed/device_communicators/pynccl.py", {"broadcast"}, "broadcast"),
    # SGLang's object broadcast of each scheduler iteration's requests over the TP group's CPU group
    # (sglang/srt/utils.py before 0.4.7, sglang/srt/utils/common.py after).
    ("sglang/srt/utils", {"broadcast_pyobj"}, "broadcast"),
)


def _framework_op(file: str, bare: str) -> str | None:
    for fragment, names, op in _FRAMEWORK_COMM:
        if fragment in file:
            if names is None:
                if bare in _PY_COMM:
                    return _PY_COMM[bare]
            elif bare in names:
                return op
    return None


_PY_INIT = {"init_process_group", "new_group", "new_subgroups", "_new_group_with_tag",
            "_store_based_barrier", "rendezvous", "destroy_process_group"}
_PY_WAIT_FILES = ("threading.py", "queue.py", "queues.py", "synchronize.py", "connection.py", "selectors.py")

# c10d calls that name the op, by the method names of ProcessGroup and its
# backends (ProcessGroup.hpp, ProcessGroupNCCL/Gloo/Wrapper.cpp) and of the
# dispatcher ops in Ops.cpp (`c10d::ops::(anonymous namespace)::allreduce_CUDA`).
# The outermost one wins: ProcessGroupWrapper::allreduce runs a
# monitoredBarrier to check the call before doing it.
_C10D_OPS = {
    "allreduce": "all_reduce", "allreduce_impl": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allreduce_sparse": "all_reduce", "broadcast": "broadcast", "_broadcast_oop": "broadcast",
    "reduce": "reduce", "_reduce_oop": "reduce", "allgather": "all_gather",
    "allgather_coalesced": "all_gather", "_allgather_base": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all_single", "barrier": "barrier",
    "monitoredBarrier": "monitored_barrier", "monitored_barrier": "monitored_barrier",
    "send": "send", "recv": "recv", "recvAnysource": "recv", "recv_any_source": "recv",
    "gather": "gather", "scatter": "scatter",
}
_C10D_NAMES = "|".join(sorted(_C10D_OPS, key=len, reverse=True))
_DISPATCH = lazy.regex(
    rf"c10d::ProcessGroup(?:Wrapper|Gloo|NCCL|MPI|UCC)?::({_C10D_NAMES})\b(?!::)"
    rf"|c10d::ops::(?:\(anonymous namespace\)::)?({_C10D_NAMES})_?(?:CUDA|CPU|PrivateUse1|Meta)\b")
# Gloo runs each collective as an Async…Work (plain or CUDA); gloo's own
# algorithms wait in UnboundBuffer::waitRecv, so these name the op there.
_GLOO_WORK = lazy.regex(
    r"\bAsync(SparseAllreduce|AllreduceCoalesced|Allreduce|Broadcast|ReduceScatter|Reduce|"
    r"AllgatherCoalesced|Allgather|Gather|Scatter|Alltoall|Barrier)(?:CUDA)?Work\b")
_GLOO_OPS = {"SparseAllreduce": "all_reduce", "AllreduceCoalesced": "all_reduce", "Allreduce": "all_reduce",
             "Broadcast": "broadcast", "ReduceScatter": "reduce_scatter", "Reduce": "reduce",
             "AllgatherCoalesced": "all_gather", "Allgather": "all_gather", "Gather": "gather",
             "Scatter": "scatter", "Alltoall": "all_to_all", "Barrier": "barrier"}
_NATIVE_COLLECTIVE = (("gloo::AllreduceRing", "all_reduce"), ("gloo::allreduce", "all_reduce"))
# Transport-level calls: they name an op only when nothing further out says
# which collective they serve. Longer names first (ncclReduceScatter before ncclReduce).
_NATIVE_COMM = (
    ("ProcessGroupGloo::SendWork::wait", "send"), ("ProcessGroupGloo::RecvWork::wait", "recv"),
    ("UnboundBuffer::waitSend", "send"), ("UnboundBuffer::waitRecv", "recv"),
    ("gloo::broadcast", "broadcast"), ("gloo::allgather", "all_gather"), ("gloo::barrier", "barrier"),
    ("gloo::reduce_scatter", "reduce_scatter"), ("gloo::alltoall", "all_to_all"), ("gloo::gather", "gather"),
    ("gloo::scatter", "scatter"),
    ("ncclAllReduce", "all_reduce"), ("ncclBroadcast", "broadcast"), ("ncclBcast", "broadcast"),
    ("ncclAllGather", "all_gather"), ("ncclReduceScatter", "reduce_scatter"), ("ncclReduce", "reduce"),
    ("ncclSend", "send"), ("ncclRecv", "recv"),
    ("ncclKernel_AllReduce", "all_reduce"), ("ncclDevKernel_AllReduce", "all_reduce"),
)
# Inside a communication call, op unknown: a c10d Work's wait or synchronize
# (Work::wait, WorkNCCL::wait/synchronize/synchronizeInternal/synchronizeStream,
# CoalescedWorkNCCL::wait, ProcessGroupGloo::AsyncWork::wait), a functional
# collective's wait_tensor, NCCL's group end, enqueue and communicator set-up.
# Not WorkNCCL::isCompleted (the watchdog calls it too; under a blocking wait
# the wait frame further out says so), nor NCCL's proxy and RAS threads'
# calls: those threads must not read as a second thread inside a collective.
_COMM_UNKNOWN = lazy.regex(
    r"\bc10d::(?:\w+::)*\w*Work\w*::(?:wait|synchronize\w*)\b|\bc10d\b.*\bwait_tensor\b|ProcessGroupWrapper"
    r"|\bp?nccl(?:GroupEnd|EnqueueCheck|LaunchKernel|LaunchPrepare|CommInitRank|CommSplit|CommFinalize)\w*"
    r"|\bncclKernel_|\bncclDevKernel_")
# The only NCCL work whose wait blocks the host on the device is a barrier's
# (ProcessGroupNCCL.cpp: cudaDeviceSynchronize for barrierTensors_ up to 2.2,
# cudaStreamSynchronize for barrierTensor_ in 2.3-2.4, CUDAStream::synchronize
# for isBarrierOp_ since): other works only make the current stream wait on
# an event, or poll it (TORCH_NCCL_BLOCKING_WAIT). So a host sync under a
# WorkNCCL wait names the op when no Python frame does.
_NCCL_WORK_WAIT = lazy.regex(r"ProcessGroupNCCL::WorkNCCL::(?:wait|synchronize\w*)\b")
_NATIVE_STORE = ("c10d::TCPStore", "c10d::detail::TCPClient", "c10d::PrefixStore")

# The host waits for the device: a CUDA/HIP synchronize, a blocking copy,
# `.item()` (at::native::_local_scalar_dense_cuda → at::cuda::memcpy_and_sync),
# c10's stream/event/device synchronize, torch.cuda.synchronize's binding.
_DEVICE_SYNC = lazy.regex(
    r"\b(?:cuda|cu|hip|cudaApi)(?:Stream|Event|Device|Ctx|Thread)Synchronize\b|\b(?:cuda|hip)Memcpy(?:2D|3D|Peer)?\b"
    r"|\bcuMemcpy(?:DtoH|HtoD|DtoD|Peer)?(?:_v2)?\b|native::_local_scalar_dense|\bmemcpy_and_sync\b"
    r"|\bCUDAStream::synchronize\b|\b(?:stream|device)_synchronize\b|\bCUDAEvent::synchronize\b"
    r"|\bTHCPModule_cudaSynchronize\b")
# Inside the driver or runtime with no sync named: a launch, an event query or
# record, a stream wait, or unsymbolized driver code. A thread stuck there waits
# on the device (a full launch queue, the context lock), but a busy rank is
# often caught there too: a weaker reading than a sync.
_DRIVER_LIBRARY = lazy.regex(r"lib(?:cuda|cudart|amdhip64|hsa-runtime64)\.so")
_DRIVER_CALL = lazy.regex(r"(?:cuda|cu|hip)[A-Z]\w*$|cudart::")
# The autograd engine (torch/csrc/autograd/engine.cpp, python_engine.cpp): a
# thread in backward() waits for its ready queue while device threads run.
_ENGINE = lazy.regex(r"torch::autograd::(?:python::Python)?Engine::(?:execute\w*|thread_main|thread_init)\b"
                     r"|torch::autograd::ReadyQueue::pop\b|\bTHPEngine_run_backward\b")
_AUTOGRAD_THREAD = lazy.regex(r"^pt_autograd")

# CPython's lock, queue and GIL waits, and libc's (Python/thread_pthread.h,
# Modules/_threadmodule.c, _queuemodule.c, _multiprocessing/semaphore.c, ceval_gil.c).
_NATIVE_GIL = lazy.regex(r"\b(?:take_gil|drop_gil|PyEval_RestoreThread|PyEval_AcquireThread|PyGILState_Ensure)\b"
                         r"|^Waiting for the GIL$")
_NATIVE_WAIT = lazy.regex(
    r"\bPyThread_acquire_lock(?:_timed)?\b|\b_queue_SimpleQueue_get\w*|\b_multiprocessing_SemLock_acquire\w*|\bsemlock_acquire\b"
    r"|pthread_cond_(?:timed|clock)?wait|futex|sem_(?:timed|clock)?wait|__lll_lock_wait"
    r"|pthread_mutex_(?:timed|clock)?lock|condition_variable::wait|std::thread::join|pthread_join"
    r"|epoll_wait|\b(?:__GI___|__)?p?poll\b|\bselect_poll_poll\w*|\bp?select\b|\bsyscall\b|\bsched_yield\b")
_SLEEP = lazy.regex(r"(^|\.)sleep$|time_sleep|clock_nanosleep|nanosleep|\busleep\b|sleep_for\b")
# py-bt shows C calls as `<built-in method NAME of TYPE object at …>`.
_BUILTIN = lazy.regex(r"<built-in (?:method|function) (\w+)")
_BUILTIN_WAITS = {"acquire", "get", "put", "wait", "join", "poll", "select", "_wait_for_tstate_lock"}

_DATA_WORDS = lazy.regex(r"load|batch|data|loader|prefetch|shard|sample|fetch|collate|tokeni", re.I)
_IO_WORDS = lazy.regex(r"checkpoint|ckpt|save|serialize|write|upload|flush|persist|dump_state", re.I)

_BACKGROUND_NAMES = lazy.regex(
    r"pt_nccl|pt_gloo|gloo_tcp|pt_autograd|pin_memory|tqdm|NCCL|pt_elastic|heartbeat|watchdog|"
    r"QueueFeederThread|Thread-\d+ \(_monitor\)", re.I)

# Confidence of a classification, to merge several dumps of one rank.
_CONFIDENCE = {"py-spy": 3, "py-spy-json": 3, "gdb": 1}


@dataclass(frozen=True, slots=True)
class Classification:
    activity: str
    op: str = ""
    peers: tuple[int, ...] = ()
    any_source: bool = False
    evidence: Evidence | None = None
    why: str = ""
    confidence: int = 0
    source: str = ""
    # "" the default group; "?0x…" a group known only by its address; None
    # when the dump does not show which (no --locals, or locals cut short).
    group: str | None = None
    # Read from a function's name or from where the job's own code is, not
    # from a frame that says what the thread does: a gdb dump (no thread
    # status) that only guesses does not contradict another that knows.
    guess: bool = False


# ------------------------------------------------------------------ main thread

def main_thread(dump: ProcessDump) -> ThreadStack | None:
    """The thread whose position decides the rank's state."""
    threads = dump.threads
    if not threads:
        return None
    pid = str(dump.pid) if dump.pid is not None else None
    for thread in threads:
        if thread.name == "MainThread":
            return thread
    if pid is not None:
        for thread in threads:
            if thread.tid == pid:
                return thread
    for thread in threads:
        if thread.frames and thread.frames[-1].function == "<module>":
            return thread
    candidates = [t for t in threads if not _BACKGROUND_NAMES.search(t.name or "")]
    return (candidates or list(threads))[0]


def is_python(frame: Frame) -> bool:
    return not frame.native and frame.file.endswith(".py")


def _library_file(path: str) -> bool:
    return ("site-packages" in path or "dist-packages" in path or path.startswith("torch/")
            or "/torch/" in path or "/lib/python" in path or path.startswith("<frozen")
            or "/" not in path and path in _STDLIB_FILES)


_STDLIB_FILES = {"threading.py", "queue.py", "selectors.py", "socket.py", "subprocess.py",
                 "multiprocessing.py", "connection.py", "synchronize.py", "queues.py", "pickle.py",
                 "shutil.py", "tempfile.py", "runpy.py", "os.py", "signal.py", "asyncio.py",
                 "events.py", "base_events.py", "contextlib.py", "functools.py", "weakref.py", "copy.py"}


def _bare(function: str) -> str:
    """`_exception_logger.<locals>.wrapper` → `wrapper`; `Queue.get` → `get`."""
    return function.rsplit(".", 1)[-1]


def _user_frame(frames, start: int) -> Frame | None:
    """The first frame of the job's own code at or above `start`."""
    for frame in frames[start:]:
        if is_python(frame) and not _library_file(frame.file):
            return frame
    return None


def _label(frame: Frame) -> str:
    if frame.file:
        return f"{frame.function} ({frame.file}:{frame.line})" if frame.line else f"{frame.function} ({frame.file})"
    return f"{frame.function} ({frame.library})" if frame.library else frame.function


def _brief(frame: Frame) -> str:
    """A native frame as a narrative names it: no parameter list, the library's file name."""
    name = _short(frame.function)
    if frame.library:
        return f"{name} ({frame.library.rsplit('/', 1)[-1]})"
    if frame.file:
        return f"{name} ({frame.file.rsplit('/', 1)[-1]}:{frame.line})" if frame.line else f"{name} ({frame.file})"
    return name


_OPENERS = {"<": ">", "(": ")", "{": "}", "[": "]"}


def _short(name: str) -> str:
    """`c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)` → `c10d::Work::wait`:
    a demangled signature's parameters, cut at the first `(` outside every bracket."""
    if "operator" in name:
        return name
    name = name.replace("(anonymous namespace)", "{anonymous}")
    stack: list[str] = []
    for at, char in enumerate(name):
        if char == "(" and not stack and at:
            return name[:at].replace("{anonymous}", "(anonymous namespace)")
        if char in _OPENERS:
            stack.append(_OPENERS[char])
        elif stack and char == stack[-1]:
            stack.pop()
    return name.replace("{anonymous}", "(anonymous namespace)")


def _locals_int(frame: Frame, *names) -> tuple[bool, int | None]:
    for name in names:
        for key, value in frame.locals:
            if key == name:
                value = value.strip()
                if value == "None":
                    return True, None
                number = int_text(value)
                if number is not None:
                    return True, number
    return False, None


# ------------------------------------------------------------------ frame kinds

_PY_API, _PY_SETUP = "api", "setup"        # torch.distributed Python calls (op / "init")
_C10D, _TRANSPORT = "c10d", "transport"    # c10d call naming the op; a wait inside comm ("" = op unknown)
_STORE = "store"
_SYNC, _DRIVER = "sync", "driver"          # the host waits for the device; inside the driver
_AUTOGRAD = "autograd"
_DATA, _IO, _COMPUTE = "data", "io", "compute"
_WAIT, _GIL, _NAP = "wait", "gil", "sleep"
_GENERIC = (_WAIT, _GIL, _NAP)


@functools.lru_cache(maxsize=1 << 16)
def _kind(frame: Frame) -> tuple[str, str] | None:
    """(kind, op) of one frame, or None when it says nothing. Frames repeat
    across ranks and dumps, so this is cached."""
    if is_python(frame):
        return _python_kind(frame)
    if not frame.native:
        return None  # py-bt's "(frame information optimized out)"
    return _native_kind(frame.function, frame.library)


def _python_kind(frame: Frame) -> tuple[str, str] | None:
    file, bare = frame.file, _bare(frame.function)
    if "torch/distributed" in file:
        if bare in _PY_INIT:
            return _PY_SETUP, "init"
        if bare in _PY_COMM:
            return _PY_API, _PY_COMM[bare]
    op = _framework_op(file, bare)
    if op is not None:
        return _PY_API, op
    if "torch/utils/data" in file:
        return _DATA, ""
    if file.endswith("torch/serialization.py") or "torch/distributed/checkpoint" in file:
        return _IO, ""
    if bare == "synchronize" and "torch/cuda/" in file:
        return _SYNC, ""
    if bare == "_maybe_opt_step" and file.endswith("grad_scaler.py") and "torch/" in file:
        return _SYNC, ""  # GradScaler's inf check: .item() on found_inf, a wait for the device
    if _SLEEP.search(frame.function):
        return _NAP, ""
    if file.endswith(_PY_WAIT_FILES):
        return _WAIT, ""
    if "torch/nn/" in file or "torch/autograd" in file or "torch/optim" in file:
        return _COMPUTE, ""
    return None


@functools.lru_cache(maxsize=1 << 16)
def _native_kind(name: str, library: str) -> tuple[str, str] | None:
    builtin = _BUILTIN.match(name)
    if builtin:
        method = builtin.group(1)
        if method in ("sleep",):
            return _NAP, ""
        if method in _BUILTIN_WAITS:
            return _WAIT, ""
        if method in ("synchronize", "_cuda_synchronize"):
            return _SYNC, ""
        return None
    found = _DISPATCH.search(name)
    if found:
        return _C10D, _C10D_OPS[found.group(1) or found.group(2)]
    found = _GLOO_WORK.search(name)
    if found:
        return _C10D, _GLOO_OPS[found.group(1)]
    for needle, op in _NATIVE_COLLECTIVE:
        if needle in name:
            return _C10D, op
    for needle, op in _NATIVE_COMM:
        if needle in name:
            return _TRANSPORT, op
    if _COMM_UNKNOWN.search(name):
        return _TRANSPORT, ""
    if any(needle in name for needle in _NATIVE_STORE):
        return _STORE, ""
    if _DEVICE_SYNC.search(name):
        return _SYNC, ""
    if _DRIVER_LIBRARY.search(library) or _DRIVER_CALL.match(_short(name)):
        return _DRIVER, ""
    if _ENGINE.search(name):
        return _AUTOGRAD, ""
    if _NATIVE_GIL.search(name):
        return _GIL, ""
    if _SLEEP.search(name):
        return _NAP, ""
    if _NATIVE_WAIT.search(name):
        return _WAIT, ""
    return None


# ------------------------------------------------------------------ one thread

def classify_thread(thread: ThreadStack, source: str = "") -> Classification:
    frames = thread.frames
    base = _CONFIDENCE.get(source, 1)
    kinds = [_kind(frame) for frame in frames]

    def first(*wanted):
        return next((i for i, kind in enumerate(kinds) if kind and kind[0] in wanted), None)

    def result(activity, index, op="", peers=(), any_source=False, group=None, extra=0, also=(), guess=False):
        """Cites `frames[index]`; `also`: native frames that say how it waits
        (the device, a lock), which a Python-level reading does not show.
        `why` runs innermost first, then the job's own frame above them."""
        chain = sorted({index} | {i for i in also if i is not None})
        parts = [_brief(frames[i]) if frames[i].native else _label(frames[i]) for i in chain]
        user = _user_frame(frames, chain[-1] + 1)
        if user is not None:
            parts.append(_label(user))
        return Classification(activity, op, tuple(peers), any_source, thread.cite(frames[index]),
                              " ← ".join(parts), base + extra, source, group, guess)

    device, synced = _device(frames, kinds)
    native_device = device if device is not None and frames[device].native else None
    transport = first(_TRANSPORT)

    # 1. A communication call anywhere in the stack.
    api = first(_PY_API, _PY_SETUP)
    if api is not None:
        below = (native_device,) if native_device is not None and native_device < api else ()
        if kinds[api][0] == _PY_SETUP:
            return result(m.BLOCKED, api, op="init", extra=1, also=below)
        op = kinds[api][1]
        peers, any_source = _peers(frames[api], op)
        return result(m.BLOCKED, api, op=op, peers=peers, any_source=any_source,
                      group=_group(frames, api), extra=2 if frames[api].locals else 1, also=below)
    named = [i for i, kind in enumerate(kinds) if kind and kind[0] == _C10D]
    if named or transport is not None:
        where = transport if transport is not None else named[0]
        below = (native_device,) if native_device is not None and native_device < where else ()
        if named:
            op = kinds[named[-1]][1]
        elif below and synced and _NCCL_WORK_WAIT.search(frames[where].function):
            op = "barrier"
        else:
            op = kinds[transport][1] or "comm"
        return result(m.BLOCKED, where, op=op, also=below)

    # 2. A store call.
    store = first(_STORE)
    if store is not None:
        return result(m.BLOCKED, store, op="store")

    # 3. The device.
    if device is not None:
        return result(m.DEVICE_WAIT, device, also=(_chain_end(frames, kinds, device, (_SYNC, _DRIVER)),),
                      guess=not synced)

    wait = first(*_GENERIC)
    how = _chain_end(frames, kinds, wait, _GENERIC) if wait is not None and frames[wait].native else None

    # 4. The autograd engine: cited where backward() entered it.
    engine = first(_AUTOGRAD)
    if engine is not None:
        return result(m.COMPUTING, _chain_end(frames, kinds, engine, (_AUTOGRAD,)))

    # 5. A DataLoader, checkpoint or compute frame of torch's, innermost first.
    for index, kind in enumerate(kinds):
        if kind is None:
            continue
        if kind[0] == _DATA:
            return result(m.DATA_LOADING, index, also=(how,))
        if kind[0] == _IO:
            return result(m.IO, index, also=(how,))
        if kind[0] == _COMPUTE and (wait is None or wait > index):
            return result(m.COMPUTING, index)

    # 6. A generic wait, named by the job's own code above it.
    if wait is not None:
        activity = m.IDLE if kinds[wait][0] == _NAP else m.LOCK_WAIT
        context = _user_frame(frames, wait)
        guess = False
        if context is not None:
            if _DATA_WORDS.search(context.function):
                activity, guess = m.DATA_LOADING, True
            elif _IO_WORDS.search(context.function):
                activity, guess = m.IO, True
        python_wait = next((i for i in range(wait, len(frames)) if kinds[i] and kinds[i][0] in _GENERIC
                            and not frames[i].native), None)
        if python_wait is not None:
            return result(activity, python_wait, also=(how,), guess=guess)
        return result(activity, how if how is not None else wait, guess=guess)

    # 7. Where the job's own code is.
    user = _user_frame(frames, 0)
    if user is not None:
        index = frames.index(user)
        if _DATA_WORDS.search(user.function):
            return result(m.DATA_LOADING, index, guess=True)
        if _IO_WORDS.search(user.function):
            return result(m.IO, index, guess=True)
        return result(m.COMPUTING, index, guess=True)
    if frames:
        return result(m.COMPUTING if thread.active else m.UNKNOWN, 0)
    return Classification(m.UNKNOWN, evidence=thread.evidence, why="thread has no frames",
                          source=source)


def _device(frames, kinds) -> tuple[int | None, bool]:
    """The frame that shows the thread waiting for the device, and whether it
    is a sync (rather than only a frame inside the driver): the innermost
    sync, else the innermost driver frame with a name, else the innermost one."""
    driver = None
    for index, kind in enumerate(kinds):
        if kind is None:
            continue
        if kind[0] == _SYNC:
            return index, True
        if kind[0] == _DRIVER and (driver is None or frames[driver].function == "??"):
            if driver is None or frames[index].function != "??":
                driver = index
    return driver, False


def _chain_end(frames, kinds, index: int, chain: tuple[str, ...]) -> int:
    """The outermost native frame of the run of `chain` kinds that starts at
    `index`, across frames that say nothing (`cudaStreamSynchronize` → … →
    `at::native::_local_scalar_dense_cuda`; a futex → … →
    `PyThread_acquire_lock_timed`): what the thread waits in, as the
    program calls it."""
    last = index
    for i in range(index + 1, len(kinds)):
        if not frames[i].native:
            break
        if kinds[i] is None:
            continue
        if kinds[i][0] not in chain:
            break
        last = i
    return last


_GROUP_OBJECT = lazy.regex(r"ProcessGroup\w* (?:object )?at (0x[0-9a-f]+)")


def _group(frames, index: int) -> str:
    """Which process group the call at `frames[index]` runs on.

    The API frame's own `group` local is useless: c10d replaces None with
    the default group object before it blocks. What the caller passed shows
    in the c10d_logger wrapper's `args`/`kwargs`: no ProcessGroup there,
    both shown whole, means the default group (""). A group passed
    explicitly is known only by its address, so it is `?<name>` when an
    outer frame holds it in a variable or dict (`groups: {"ckpt":
    <ProcessGroup at 0x…>}` → `?ckpt`), else `?<address>`: not the default
    group, members unknown. None when the dump cannot tell: no locals, or
    py-spy cut the arguments short (`{"op": <…>, ...}` hides the rest).
    """
    for frame in frames[index + 1:index + 3]:
        if not frame.file.endswith("c10d_logger.py"):
            continue
        address, cut, shown = None, False, False
        for key, value in frame.locals:
            if key in ("args", "kwargs"):
                shown = True
                found = _GROUP_OBJECT.search(value)
                if found:
                    address = found.group(1)
                    break
                cut = cut or _CUT_SHORT.search(value) is not None
        if address is None:
            if shown and not cut:
                return ""
            # Cut short: the group the call runs on is the API frame's own
            # `group`; if the job's code holds that very object under a name,
            # it passed the group explicitly (the default group is passed as None).
            own = next((found.group(1) for key, value in frames[index].locals
                        if key == "group" and (found := _GROUP_OBJECT.search(value))), None)
            name = _group_name(frames[index + 3:], own) if own else None
            return m.UNIDENTIFIED_GROUP + name if name else None
        return m.UNIDENTIFIED_GROUP + (_group_name(frames[index + 1:], address) or address)
    return None


# py-spy's repr of a container it does not show whole ends its items with "...".
_CUT_SHORT = lazy.regex(r"(?:^|[,(\[{]\s*)\.\.\.\s*[)\]}]?\s*$")


def _group_name(frames, address: str) -> str | None:
    """The name the job's code gives the group object at `address`: a
    variable holding it, a dict key (`{"ckpt": <ProcessGroup at …>}`) or a
    (name, group) pair (`[("halo_01", <ProcessGroup at …>), …]`)."""
    keyed = re.compile(r'"([\w.-]+)"(?::|,) <[^<>]*ProcessGroup\w* (?:object )?at ' + re.escape(address) + ">")
    for frame in frames:
        for key, value in frame.locals:
            if key in ("args", "kwargs", "group", "self"):
                continue
            if _GROUP_OBJECT.search(value) and value.strip().startswith("<") and address in value:
                return key
            found = keyed.search(value)
            if found:
                return found.group(1)
    return None


def _peers(frame: Frame, op: str) -> tuple[tuple[int, ...], bool]:
    if op == "send":
        found, value = _locals_int(frame, "dst")
        if not found or value is None:
            found, value = _locals_int(frame, "group_dst")
        return ((value,) if value is not None else ()), False
    if op == "recv":
        found, value = _locals_int(frame, "src")
        if found and value is None:
            found2, group_src = _locals_int(frame, "group_src")
            if group_src is not None:
                return (group_src,), False
            return (), True  # dist.recv(src=None): any source
        if value is None:
            found, value = _locals_int(frame, "group_src")
        return ((value,) if value is not None else ()), False
    return (), False


def classify(dump: ProcessDump) -> Classification:
    thread = main_thread(dump)
    if thread is None:
        return Classification(m.UNKNOWN, evidence=dump.evidence, why="dump has no threads",
                              source=dump.source)
    verdict = classify_thread(thread, dump.source)
    if verdict.activity == m.COMPUTING and any(_kind(f) and _kind(f)[0] == _AUTOGRAD for f in thread.frames):
        return _autograd_worker(dump, thread, verdict) or verdict
    return verdict


def _autograd_worker(dump: ProcessDump, main: ThreadStack, verdict: Classification) -> Classification | None:
    """A main thread in backward() waits for the engine's device threads
    (`pt_autograd_N`), which run the backward kernels and hooks (DDP's and
    FSDP's reductions among them): one of them blocked in a communication
    call or on the device is where the rank is."""
    found = []
    for thread in dump.threads:
        if thread is main or not (_AUTOGRAD_THREAD.match(thread.name or "")
                                  or any(_kind(f) and _kind(f)[0] == _AUTOGRAD for f in thread.frames)):
            continue
        worker = classify_thread(thread, dump.source)
        if worker.activity in (m.BLOCKED, m.DEVICE_WAIT) and not worker.guess:
            found.append((worker.activity != m.BLOCKED, thread, worker))
    if not found:
        return None
    _, thread, worker = min(found, key=lambda item: item[0])
    return replace(worker, why=f"{worker.why} (autograd thread {thread.name or thread.tid}, "
                               f"which the main thread waits for in backward)")


def combine(classifications: list[Classification]) -> Classification:
    """Several dumps of one rank: the most specific, most confident wins;
    peers found by any dump of the same op are kept. A reading from a frame
    that says what the thread does beats a guess, and a guess beats a bare
    lock wait (gdb's `bt` sees the lock, its `py-bt` the DataLoader above it)."""
    if not classifications:
        return Classification(m.UNKNOWN)

    def rank_key(c: Classification):
        specific = 2 if c.op not in ("", "comm") else (1 if c.op == "comm" else 0)
        return (c.activity == m.BLOCKED, specific, _informative(c), c.confidence, bool(c.peers))

    best = max(classifications, key=rank_key)
    if best.activity == m.BLOCKED and not best.peers:
        for other in classifications:
            if other.op == best.op and other.peers:
                return replace(best, peers=other.peers, any_source=other.any_source)
    return best


def _informative(c: Classification) -> int:
    if c.activity in (m.UNKNOWN, m.LOCK_WAIT):
        return 0
    return 1 if c.guess else 2


def _position(c: Classification):
    return (c.activity, c.op if c.op not in ("", "comm") else None)


def moving(judged: list[tuple[Classification, ProcessDump]]) -> Classification | None:
    """Dumps of one rank taken moments apart that disagree on where its main
    thread is: the rank is making progress, whatever a single dump says.
    (In a hang every dump of a rank agrees.) None when they agree."""
    # A native-level lock wait or an unnamed comm wait fits any position (a
    # thread blocked in a collective also sits in pthread_cond_wait). A gdb
    # dump that only guesses (its `py-bt` ends in the job's code, which sits
    # in a C call py-bt does not show; its `bt` has no Python) has no
    # position to disagree with: gdb gives no thread status.
    seen = [(c, d) for c, d in judged if c.activity not in (m.UNKNOWN, m.LOCK_WAIT)
            and not (c.guess and d.source == "gdb")]
    positions = {}
    for c, d in seen:
        positions.setdefault(_position(c), (c, d))
    specific = {p for p in positions if p[1] is not None or p[0] != m.BLOCKED}
    if len(specific) < 2:
        return None
    shown = "; ".join(f"{d.path} shows {c.activity}{' in ' + c.op if c.op else ''} at {c.why}"
                      for c, d in (positions[p] for p in sorted(specific, key=str)))
    first = positions[sorted(specific, key=str)[0]][0]
    return Classification(m.COMPUTING, evidence=first.evidence,
                          why=f"moving between dumps: {shown}", confidence=first.confidence,
                          source=first.source)


def python_stack(dump: ProcessDump) -> tuple[str, ...]:
    """The main thread, outermost first, as `func (file:line)` labels."""
    thread = main_thread(dump)
    if thread is None:
        return ()
    frames = [f for f in thread.frames if is_python(f)] or list(thread.frames)
    return tuple(_label(f) for f in reversed(frames))


def comm_op(c: Classification) -> CommOp | None:
    if c.activity != m.BLOCKED:
        return None
    return CommOp(op=c.op, group=c.group or "", peers=c.peers, any_source=c.any_source, evidence=c.evidence,
                  group_known=c.group is not None)
