"""Where is each rank blocked? Classify stack dumps into rank states.

The main thread decides a rank's state; background threads (c10d watchdog
and heartbeat, Gloo run loops, NCCL proxies, pin-memory, tqdm, a job's own
helpers) never do. A dump is read innermost frame first: the first frame
that says something definite wins (a torch.distributed call, a CUDA sync, a
DataLoader, a checkpoint write); generic waits (a condition variable, a
queue, a futex) take their meaning from the first frame of the job's own
code above them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import model as m
from ..model import CommOp, Evidence, Frame, ProcessDump, ThreadStack

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
_PY_INIT = {"init_process_group", "new_group", "new_subgroups", "_new_group_with_tag",
            "_store_based_barrier", "rendezvous", "destroy_process_group"}

# Native frames, matched as substrings of the demangled name, in order.
# Collective implementations first: gloo's allreduce itself waits in
# UnboundBuffer::waitRecv, so a transport-level send/recv frame names the op
# only when nothing further out says which collective it serves.
_NATIVE_COLLECTIVE = (
    ("AsyncAllreduceWork", "all_reduce"), ("AsyncBroadcastWork", "broadcast"),
    ("AsyncBarrierWork", "barrier"), ("AsyncAllgatherWork", "all_gather"),
    ("AsyncReduceScatterWork", "reduce_scatter"), ("AsyncAlltoallWork", "all_to_all"),
    ("AsyncGatherWork", "gather"), ("AsyncScatterWork", "scatter"), ("AsyncReduceWork", "reduce"),
    ("gloo::AllreduceRing", "all_reduce"), ("gloo::allreduce", "all_reduce"),
)
_NATIVE_COMM = (
    ("ProcessGroupGloo::SendWork::wait", "send"), ("ProcessGroupGloo::RecvWork::wait", "recv"),
    ("UnboundBuffer::waitSend", "send"), ("UnboundBuffer::waitRecv", "recv"),
    ("gloo::broadcast", "broadcast"), ("gloo::allgather", "all_gather"), ("gloo::barrier", "barrier"), ("gloo::reduce_scatter", "reduce_scatter"),
    ("gloo::alltoall", "all_to_all"), ("gloo::gather", "gather"), ("gloo::scatter", "scatter"),
    ("ncclAllReduce", "all_reduce"), ("ncclBroadcast", "broadcast"), ("ncclAllGather", "all_gather"),
    ("ncclReduceScatter", "reduce_scatter"), ("ncclSend", "send"), ("ncclRecv", "recv"),
    ("ncclKernel_AllReduce", "all_reduce"), ("ncclDevKernel_AllReduce", "all_reduce"),
)
# c10d's dispatch layer names the call: ProcessGroup::allreduce,
# ProcessGroupWrapper::allreduce (DETAIL mode), ProcessGroupGloo::monitoredBarrier.
_DISPATCH = re.compile(r"c10d::ProcessGroup(?:Wrapper|Gloo|NCCL|MPI|UCC)?::"
                       r"(allreduce|broadcast|allgather|_allgather_base|allgather_into_tensor_coalesced|"
                       r"reduce_scatter|_reduce_scatter_base|alltoall|alltoall_base|barrier|"
                       r"monitoredBarrier|send|recv|recvAnysource|gather|scatter|reduce)\b")
_NATIVE_COMM_UNKNOWN = ("ProcessGroupNCCL::WorkNCCL::wait", "ProcessGroupNCCL::WorkNCCL::synchronize",
                        "ProcessGroupGloo::AsyncWork::wait", "c10d::Work::wait", "ncclGroupEnd",
                        "ncclCommInitRank", "ProcessGroupWrapper", "ncclKernel", "ncclDevKernel")
_NATIVE_STORE = ("c10d::TCPStore", "c10d::detail::TCPClient", "c10d::PrefixStore")
_NATIVE_DEVICE = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize",
                  "cudaMemcpy", "_local_scalar_dense", "CUDAStream::synchronize", "cuStreamSynchronize",
                  "cuEventSynchronize", "cuCtxSynchronize")
_NATIVE_GIL = ("take_gil", "PyEval_RestoreThread", "PyGILState_Ensure", "drop_gil")
_NATIVE_WAIT = ("pthread_cond_wait", "pthread_cond_timedwait", "futex", "sem_wait", "__lll_lock_wait",
                "condition_variable::wait", "std::thread::join", "pthread_join", "epoll_wait", "poll",
                "select", "nanosleep", "clock_nanosleep", "__GI___poll", "syscall")

_DATA_WORDS = re.compile(r"load|batch|data|loader|prefetch|shard|sample|fetch|collate|tokeni", re.I)
_IO_WORDS = re.compile(r"checkpoint|ckpt|save|serialize|write|upload|flush|persist|dump_state", re.I)
_SLEEP = re.compile(r"(^|\.)sleep$|time_sleep|clock_nanosleep|nanosleep")

_BACKGROUND_NAMES = re.compile(
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
    group: str = ""  # "" default group; "?0x…" a group known only by its address


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


def _locals_int(frame: Frame, *names) -> tuple[bool, int | None]:
    for name in names:
        for key, value in frame.locals:
            if key == name:
                value = value.strip()
                if value == "None":
                    return True, None
                if value.lstrip("-").isdigit():
                    return True, int(value)
    return False, None


def classify_thread(thread: ThreadStack, source: str = "") -> Classification:
    frames = thread.frames
    base = _CONFIDENCE.get(source, 1)

    def result(activity, index, op="", peers=(), any_source=False, group="", extra=0):
        frame = frames[index]
        user = _user_frame(frames, index + 1) if index + 1 < len(frames) else None
        why = _label(frame)
        if user is not None and user is not frame:
            why += f" ← {_label(user)}"
        return Classification(activity, op, tuple(peers), any_source, thread.cite(frame), why,
                              base + extra, source, group)

    generic_wait = None
    transport = None  # (index, op) of the innermost transport-level wait (gloo, NCCL)
    dispatch = None   # (index, op) of the outermost c10d call that names the op
    for index, frame in enumerate(frames):
        name = frame.function
        if is_python(frame):
            bare = _bare(name)
            if "torch/distributed" in frame.file and (bare in _PY_COMM or bare in _PY_INIT):
                if bare in _PY_INIT:
                    return result(m.BLOCKED, index, op="init", extra=1)
                # The Python call names the op; the native frame below only
                # says how it waits.
                op = _PY_COMM[bare]
                peers, any_source = _peers(frame, op)
                return result(m.BLOCKED, index, op=op, peers=peers, any_source=any_source,
                              group=_group(frames, index), extra=2 if frame.locals else 1)
            if "torch/utils/data" in frame.file:
                return result(m.DATA_LOADING, index)
            if frame.file.endswith(("torch/serialization.py",)) or "torch/distributed/checkpoint" in frame.file:
                return result(m.IO, index)
            if _SLEEP.search(name) and generic_wait is None:
                generic_wait = (index, m.IDLE)
            if frame.file.endswith(("threading.py", "queue.py", "queues.py", "synchronize.py",
                                    "connection.py", "selectors.py")) and generic_wait is None:
                generic_wait = (index, m.LOCK_WAIT)
            if "torch/nn/" in frame.file or "torch/autograd" in frame.file or "torch/optim" in frame.file:
                if generic_wait is None:
                    return result(m.COMPUTING, index)
            continue
        # native frame
        dispatched = _DISPATCH.search(name)
        if dispatched:
            dispatch = (index, m.normalize_op(dispatched.group(1)))  # keep the outermost
        else:
            for needle, op in _NATIVE_COLLECTIVE:
                if needle in name:
                    dispatch = (index, op)
                    break
        if transport is None:
            for needle, op in _NATIVE_COMM:
                if needle in name:
                    transport = (index, op)
                    break
            else:
                if any(needle in name for needle in _NATIVE_COMM_UNKNOWN):
                    transport = (index, "comm")
        if transport is not None or dispatch is not None:
            continue
        if any(needle in name for needle in _NATIVE_STORE):
            return result(m.BLOCKED, index, op="store")
        if any(needle in name for needle in _NATIVE_DEVICE) or "libcuda.so" in frame.library:
            return result(m.DEVICE_WAIT, index)
        if generic_wait is None:
            if any(needle in name for needle in _NATIVE_GIL):
                generic_wait = (index, m.LOCK_WAIT)
            elif _SLEEP.search(name):
                generic_wait = (index, m.IDLE)
            elif any(needle in name for needle in _NATIVE_WAIT):
                generic_wait = (index, m.LOCK_WAIT)

    if dispatch is not None or transport is not None:
        where = transport[0] if transport is not None else dispatch[0]
        op = dispatch[1] if dispatch is not None else transport[1]
        return result(m.BLOCKED, where, op=op)
    user = _user_frame(frames, 0)
    if generic_wait is not None:
        index, activity = generic_wait
        context = _user_frame(frames, index)
        if context is not None:
            if _DATA_WORDS.search(context.function):
                activity = m.DATA_LOADING
            elif _IO_WORDS.search(context.function):
                activity = m.IO
        return result(activity, index)
    if user is not None:
        if _DATA_WORDS.search(user.function):
            return result(m.DATA_LOADING, frames.index(user))
        if _IO_WORDS.search(user.function):
            return result(m.IO, frames.index(user))
        return result(m.COMPUTING, frames.index(user))
    if frames:
        return result(m.COMPUTING if thread.active else m.UNKNOWN, 0)
    return Classification(m.UNKNOWN, evidence=thread.evidence, why="thread has no frames",
                          source=source)


_GROUP_OBJECT = re.compile(r"ProcessGroup\w* (?:object )?at (0x[0-9a-f]+)")


def _group(frames, index: int) -> str:
    """Which process group the call at `frames[index]` runs on.

    The API frame's own `group` local is useless: c10d replaces None with
    the default group object before it blocks. What the caller passed shows
    in the c10d_logger wrapper's `args`/`kwargs`: no ProcessGroup there
    means the default group (""). A group passed explicitly is known only by
    its address, so it is `?<name>` when an outer frame holds it in a
    variable or dict (`groups: {"ckpt": <ProcessGroup at 0x…>}` → `?ckpt`),
    else `?<address>`: not the default group, members unknown.
    """
    for frame in frames[index + 1:index + 3]:
        if not frame.file.endswith("c10d_logger.py"):
            continue
        address = None
        for key, value in frame.locals:
            if key in ("args", "kwargs"):
                found = _GROUP_OBJECT.search(value)
                if found:
                    address = found.group(1)
                    break
        if address is None:
            return ""
        return m.UNIDENTIFIED_GROUP + (_group_name(frames[index + 1:], address) or address)
    return ""


def _group_name(frames, address: str) -> str | None:
    keyed = re.compile(r'"([\w.-]+)": <[^<>]*ProcessGroup\w* (?:object )?at ' + re.escape(address) + ">")
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
    return classify_thread(thread, dump.source)


def combine(classifications: list[Classification]) -> Classification:
    """Several dumps of one rank: the most specific, most confident wins;
    peers found by any dump of the same op are kept."""
    if not classifications:
        return Classification(m.UNKNOWN)

    def rank_key(c: Classification):
        specific = 2 if c.op not in ("", "comm") else (1 if c.op == "comm" else 0)
        return (c.activity == m.BLOCKED, specific, c.confidence, bool(c.peers))

    best = max(classifications, key=rank_key)
    if best.activity == m.BLOCKED and not best.peers:
        for other in classifications:
            if other.op == best.op and other.peers:
                return Classification(best.activity, best.op, other.peers, other.any_source,
                                      best.evidence, best.why, best.confidence, best.source, best.group)
    return best


def _position(c: Classification):
    return (c.activity, c.op if c.op not in ("", "comm") else None)


def moving(judged: list[tuple[Classification, ProcessDump]]) -> Classification | None:
    """Dumps of one rank taken moments apart that disagree on where its main
    thread is: the rank is making progress, whatever a single dump says.
    (In a hang every dump of a rank agrees.) None when they agree."""
    # A native-level lock wait or an unnamed comm wait fits any position (a
    # thread blocked in a collective also sits in pthread_cond_wait).
    seen = [(c, d) for c, d in judged if c.activity not in (m.UNKNOWN, m.LOCK_WAIT)]
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
    return CommOp(op=c.op, group=c.group, peers=c.peers, any_source=c.any_source, evidence=c.evidence)
