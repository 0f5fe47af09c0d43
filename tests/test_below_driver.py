"""gdb stacks below the driver: a thread is where its whole stack says it is.

The fixtures in tests/fixtures/gdb_driver/ are hand-written gdb dumps in
gdb's own format (formats.md §5): frame names from PyTorch 2.3 and a recent
source build (ProcessGroupNCCL.cpp's WorkNCCL::wait / synchronizeInternal /
isCompleted, Ops.cpp, engine.cpp), NCCL 2.20, CUDA 12 and CPython 3.11.
"""

from pathlib import Path

import pytest

from forensics import model as m
from forensics.ingest import gdb, stacks
from forensics.model import Evidence, Frame, ProcessDump, ThreadStack

FIXTURES = Path(__file__).parent / "fixtures" / "gdb_driver"
CUDART = "/opt/venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"
C10D_PY = "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOADER_PY = "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"


def dump(name):
    facts = gdb.parse(str(FIXTURES / name), name)
    assert facts.diagnostics == []
    assert len(facts.processes) == 1, facts.processes
    return facts.processes[0]


def line_of(name, text, start=1):
    """The number of the first line at or after `start` that contains `text`."""
    lines = (FIXTURES / name).read_text().split("\n")
    return next(n for n, line in enumerate(lines, 1) if n >= start and text in line)


def thread(process, name):
    return next(t for t in process.threads if t.name == name)


# ---------------------------------------------------------------- a device wait under a collective


def test_device_sync_under_a_work_wait_is_the_collective_the_python_frame_names():
    process = dump("barrier_stream_sync_v23.txt")
    c = stacks.classify(process)
    assert (c.activity, c.op, c.group, c.guess) == (m.BLOCKED, "barrier", None, False)  # no locals: group unknown
    header = line_of("barrier_stream_sync_v23.txt", "(LWP 31200)")
    assert c.evidence.line == line_of("barrier_stream_sync_v23.txt", 'line 3703, in barrier', header)
    assert c.why == (f"cudaStreamSynchronize (libcudart.so.12) ← barrier ({C10D_PY}:3703) "
                     "← evaluate (/srv/job/train.py:291)")
    main = stacks.main_thread(process)
    # libcuda addresses innermost; the frame that names the op 33 frames in.
    assert [f.function for f in main.frames[:5]] == ["??"] * 5
    assert [f.function for f in main.frames].index("barrier") == 33


def test_the_watchdog_polling_the_device_is_not_inside_a_collective():
    """WorkNCCL::isCompleted is the watchdog's too: only a wait further out
    makes it a communication call (else every rank would have a second
    thread 'inside a collective')."""
    watchdog = thread(dump("barrier_stream_sync_v23.txt"), "pt_nccl_watchdg")
    c = stacks.classify_thread(watchdog, "gdb")
    assert c.activity == m.DEVICE_WAIT and c.op == "" and c.guess
    assert c.why.startswith("cudaEventQuery (")


def test_bt_alone_a_host_sync_under_a_nccl_work_wait_is_a_barrier():
    """Only a barrier's NCCL work blocks the host on the device in its wait
    (barrierTensor_ / isBarrierOp_ in ProcessGroupNCCL.cpp): without py-bt,
    that names the op."""
    bt = dump("barrier_stream_sync_newest_bt.txt")
    main = stacks.main_thread(bt)
    inlined = [f for f in main.frames if f.function in ("c10::cuda::stream_synchronize",
                                                         "c10::cuda::CUDAStream::synchronize")]
    assert [(f.file, f.line, f.at) for f in inlined] == [("/opt/pytorch/c10/cuda/CUDAFunctions.h", 93, 7),
                                                         ("/opt/pytorch/c10/cuda/CUDAStream.h", 136, 8)]
    lines = (FIXTURES / "barrier_stream_sync_newest_bt.txt").read_text().split("\n")
    assert lines[main.evidence.line + 6].startswith("#6  c10::cuda::stream_synchronize (")  # inlined: no "0x… in"
    c = stacks.classify(bt)
    assert (c.activity, c.op) == (m.BLOCKED, "barrier")
    assert c.evidence.line == line_of("barrier_stream_sync_newest_bt.txt", "WorkNCCL::wait (this=")
    assert c.why == "cudaStreamSynchronize (libcudart.so.12) ← c10d::ProcessGroupNCCL::WorkNCCL::wait (ProcessGroupNCCL.cpp:701)"
    py = stacks.classify(dump("barrier_stream_sync_newest_pybt.txt"))
    assert (py.activity, py.op) == (m.BLOCKED, "barrier")
    judged = [(c, bt), (py, dump("barrier_stream_sync_newest_pybt.txt"))]
    assert stacks.moving(judged) is None
    for order in (judged, judged[::-1]):
        best = stacks.combine([x for x, _ in order])
        assert (best.op, best.evidence.path) == ("barrier", "barrier_stream_sync_newest_pybt.txt")


def test_a_nccl_work_wait_without_a_host_sync_names_no_op():
    """A blocking wait polls isCompleted (cudaEventQuery) and sleeps between
    polls, whatever the collective: bt alone cannot tell which."""
    process = dump("allreduce_blocking_wait_poll.txt")
    main = stacks.main_thread(process)
    bt_only = ThreadStack(main.tid, main.name, frames=tuple(f for f in main.frames if f.native),
                          evidence=main.evidence)
    c = stacks.classify_thread(bt_only, "gdb")
    assert (c.activity, c.op) == (m.BLOCKED, "comm")
    assert c.why == "cudaEventQuery (libcudart.so.12) ← c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal (libtorch_cuda.so)"
    sleeping = judge(native("__GI___clock_nanosleep", "libc.so.6"), native("__GI___nanosleep", "libc.so.6"),
                     native("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal(std::chrono::duration<long, std::ratio<1l, 1000l> >)"),
                     native("c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)"))
    assert (sleeping.activity, sleeping.op) == (m.BLOCKED, "comm")


def test_the_c10d_frame_names_the_op_of_a_launch_blocked_in_the_driver():
    process = dump("allreduce_launch_blocked_bt.txt")
    main = stacks.main_thread(process)
    assert any(f.function == "??" and not f.library for f in main.frames)  # a frame without `from`
    naming = [i for i, f in enumerate(main.frames) if f.function.startswith("c10d::ProcessGroup::allreduce(")]
    assert naming == [27]
    c = stacks.classify(process)
    assert (c.activity, c.op) == (m.BLOCKED, "all_reduce")
    assert c.evidence.line == line_of("allreduce_launch_blocked_bt.txt", "ncclLaunchKernel(")
    assert c.why == "cuLaunchKernelEx (libcuda.so.1) ← ncclLaunchKernel (libnccl.so.2)"


def test_a_blocking_wait_polling_the_driver_is_the_all_reduce():
    c = stacks.classify(dump("allreduce_blocking_wait_poll.txt"))
    assert (c.activity, c.op) == (m.BLOCKED, "all_reduce")
    assert c.why == (f"cudaEventQuery (libcudart.so.12) ← all_reduce ({C10D_PY}:2195) "
                     "← sync_gradients (/srv/job/train.py:206)")


def test_a_device_sync_deep_inside_broadcast_object_list_is_that_call():
    process = dump("broadcast_object_list_item_deep.txt")
    main = stacks.main_thread(process)
    assert [f.function for f in main.frames].index("broadcast_object_list") >= 30
    c = stacks.classify(process)
    assert (c.activity, c.op) == (m.BLOCKED, "broadcast_object_list")
    assert c.why.startswith("cudaStreamSynchronize (libcudart.so.12) ← broadcast_object_list (")


# ---------------------------------------------------------------- a device wait outside any collective


ITEM_WHY = ("cudaStreamSynchronize (libcudart.so.12) ← at::native::_local_scalar_dense_cuda (libtorch_cuda.so) "
            "← log_loss (/srv/job/train.py:133)")


def test_item_outside_any_collective_is_a_device_wait():
    c = stacks.classify(dump("item_device_sync.txt"))
    assert (c.activity, c.op, c.guess) == (m.DEVICE_WAIT, "", False)
    assert c.evidence.line == line_of("item_device_sync.txt", "in cudaStreamSynchronize ()")
    assert c.why == ITEM_WHY


def test_bt_then_py_bt_of_one_process_in_one_file_is_one_dump():
    name = "item_device_sync_two_passes.txt"
    process = dump(name)
    assert process.pid == 31200 and [t.tid for t in process.threads] == ["31215", "31200"]
    main = stacks.main_thread(process)
    assert main.evidence.line == line_of(name, "(LWP 31200)")
    log_loss = next(f for f in main.frames if f.function == "log_loss")
    assert main.cite(log_loss).line == line_of(name, 'line 133, in log_loss')
    c = stacks.classify(process)
    assert (c.activity, c.why) == (m.DEVICE_WAIT, ITEM_WHY)
    assert process.evidence.text == "[Inferior 1 (process 31200) detached]"


def test_a_gdb_guess_does_not_contradict_a_gdb_reading():
    """bt and py-bt from two gdb runs: py-bt ends in log_loss (the C call it
    makes is invisible to it), bt has no Python. That is not a rank moving."""
    main = stacks.main_thread(dump("item_device_sync.txt"))
    native = [f for f in main.frames if f.native]
    python = [f for f in main.frames if not f.native]

    def as_dump(frames, source):
        stack = ThreadStack("31200", "python3", frames=tuple(frames), evidence=main.evidence)
        return ProcessDump(source, f"rank1.{source}.txt", pid=31200, threads=(stack,))

    bt, py_bt = as_dump(native, "gdb"), as_dump(python, "gdb")
    judged = [(stacks.classify(d), d) for d in (bt, py_bt)]
    assert [(c.activity, c.guess) for c, _ in judged] == [(m.DEVICE_WAIT, False), (m.COMPUTING, True)]
    assert stacks.moving(judged) is None
    assert stacks.combine([c for c, _ in judged[::-1]]).activity == m.DEVICE_WAIT
    # py-spy knows whether a thread runs: its dumps still move a rank.
    spy = as_dump(python, "py-spy")
    assert stacks.moving(judged[:1] + [(stacks.classify(spy), spy)]).activity == m.COMPUTING


# ---------------------------------------------------------------- locks: data loading or nothing recognizable


def test_a_python_lock_under_a_dataloader_queue_get_is_data_loading():
    name = "dataloader_pin_memory_queue.txt"
    c = stacks.classify(dump(name))
    assert c.activity == m.DATA_LOADING and not c.guess
    assert c.evidence.line == line_of(name, "line 1133, in _try_get_data", line_of(name, "(LWP 31200)"))
    assert c.why == (f"PyThread_acquire_lock_timed (thread_pthread.h:478) ← _try_get_data ({LOADER_PY}:1133) "
                     "← train (/srv/job/train.py:342)")


def test_a_dataloader_poll_read_from_two_files():
    bt, py_bt = dump("dataloader_mp_queue_bt.txt"), dump("dataloader_mp_queue_pybt.txt")
    alone = stacks.classify(bt)
    assert (alone.activity, alone.why) == (m.LOCK_WAIT, "select_poll_poll (selectmodule.c.h:247)")
    judged = [(alone, bt), (stacks.classify(py_bt), py_bt)]
    assert judged[1][0].activity == m.DATA_LOADING
    assert stacks.moving(judged) is None
    for order in (judged, judged[::-1]):
        assert stacks.combine([c for c, _ in order]).activity == m.DATA_LOADING


def test_a_lock_under_nothing_recognizable_stays_a_lock_wait():
    process = dump("lock_unrecognized.txt")
    c = stacks.classify(process)
    assert (c.activity, c.guess) == (m.LOCK_WAIT, False)
    assert c.why == ("PyThread_acquire_lock_timed (thread_pthread.h:478) ← wait (/usr/lib/python3.11/threading.py:331) "
                     "← _wait_for_reply (/srv/job/rpc_client.py:88)")
    helper = next(t for t in process.threads if t.tid == "7702")
    c = stacks.classify_thread(helper, "gdb")
    assert (c.activity, c.why) == (m.LOCK_WAIT, "std::condition_variable::wait (libstdc++.so.6)")


# ---------------------------------------------------------------- backward(): the autograd engine's threads


def test_backward_is_where_its_autograd_thread_is():
    name = "backward_ddp_hook_launch_blocked.txt"
    c = stacks.classify(dump(name))
    assert (c.activity, c.op) == (m.BLOCKED, "all_reduce")
    worker = line_of(name, '"pt_autograd_0"')
    assert worker < c.evidence.line < line_of(name, '"pt_nccl_heartbt"')
    assert c.why.endswith("(autograd thread pt_autograd_0, which the main thread waits for in backward)")


def test_backward_with_its_autograd_threads_at_work_is_computing():
    name = "backward_workers_running.txt"
    c = stacks.classify(dump(name))
    assert c.activity == m.COMPUTING and not c.guess
    assert c.evidence.line == line_of(name, "THPEngine_run_backward(")
    assert c.why.endswith("← train_step (/srv/job/train.py:301)")


# ---------------------------------------------------------------- the vocabulary, frame by frame


def native(function, library="libtorch_cuda.so"):
    return Frame(function, library=library, native=True)


def py(function, file, line=1):
    return Frame(function, file, line)


def judge(*frames):
    stack = ThreadStack("1", "python3", frames=tuple(Frame(f.function, f.file, f.line, f.library, f.native, at=i + 1)
                                                  for i, f in enumerate(frames)),
                        evidence=Evidence("rank0.gdb.txt", 10, "Thread 1"))
    return stacks.classify_thread(stack, "gdb")


COND = native("pthread_cond_wait@@GLIBC_2.3.2", "/lib64/libpthread.so.0")
LIBCUDA = native("??", "/lib/x86_64-linux-gnu/libcuda.so.1")


@pytest.mark.parametrize("function, op", [
    ("c10d::ProcessGroupNCCL::allreduce(std::vector<at::Tensor, std::allocator<at::Tensor> >&, c10d::AllreduceOptions const&)", "all_reduce"),
    ("c10d::ProcessGroupNCCL::allreduce_coalesced(std::vector<at::Tensor, std::allocator<at::Tensor> >&, c10d::AllreduceCoalescedOptions const&)", "all_reduce"),
    ("c10d::ProcessGroupNCCL::_allgather_base(at::Tensor&, at::Tensor&, c10d::AllgatherOptions const&)", "all_gather_into_tensor"),
    ("c10d::ProcessGroupNCCL::_reduce_scatter_base(at::Tensor&, at::Tensor&, c10d::ReduceScatterOptions const&)", "reduce_scatter_tensor"),
    ("c10d::ProcessGroupNCCL::alltoall_base(at::Tensor&, at::Tensor&, std::vector<long, std::allocator<long> >&, std::vector<long, std::allocator<long> >&, c10d::AllToAllOptions const&)", "all_to_all_single"),
    ("c10d::ProcessGroupNCCL::_broadcast_oop(at::Tensor&, at::Tensor&, c10d::BroadcastOptions const&)", "broadcast"),
    ("c10d::ops::(anonymous namespace)::reduce_scatter_CUDA(c10::ArrayRef<at::Tensor> const&)", "reduce_scatter"),
    ("c10d::ops::(anonymous namespace)::barrierCPU(at::Tensor, c10::intrusive_ptr<c10d::ProcessGroup> const&)", "barrier"),
    ("c10d::ops::(anonymous namespace)::recv_any_source_CPU(c10::ArrayRef<at::Tensor>, long)", "recv"),
    ("c10d::ProcessGroupGloo::AsyncAllreduceCUDAWork::run()", "all_reduce"),
    ("c10d::ProcessGroupGloo::AsyncReduceScatterWork::run()", "reduce_scatter"),
    ("c10d::ProcessGroupGloo::AsyncAllgatherCoalescedWork::run()", "all_gather"),
    ("pncclReduceScatter", "reduce_scatter"),
    ("ncclReduce", "reduce"),
])
def test_c10d_and_nccl_frames_name_the_op_under_a_device_wait(function, op):
    c = judge(LIBCUDA, native("cudaStreamSynchronize", "libcudart.so.12"), native(function))
    assert (c.activity, c.op) == (m.BLOCKED, op)


@pytest.mark.parametrize("function, alone", [
    ("c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)", "comm"),
    ("c10d::ProcessGroupNCCL::CoalescedWorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)", "comm"),
    ("c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)", "comm"),
    ("c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)", "barrier"),
    ("c10d::ProcessGroupNCCL::WorkNCCL::synchronize()", "barrier"),
    ("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal(std::chrono::duration<long, std::ratio<1l, 1000l> >)", "barrier"),
    ("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeStream()", "barrier"),
])
def test_a_work_wait_over_a_device_sync_is_in_the_collective_the_python_frame_names(function, alone):
    device = (LIBCUDA, native("cuStreamSynchronize", "/lib/x86_64-linux-gnu/libcuda.so.1"))
    c = judge(*device, native(function))
    assert (c.activity, c.op) == (m.BLOCKED, alone)
    named = judge(*device, native(function), native("_PyEval_EvalFrameDefault", "libpython3.11.so.1.0"),
                  py("all_reduce", C10D_PY, 2195), py("sync_gradients", "/srv/job/train.py", 206))
    assert (named.activity, named.op) == (m.BLOCKED, "all_reduce")
    assert named.why == f"cuStreamSynchronize (libcuda.so.1) ← all_reduce ({C10D_PY}:2195) ← sync_gradients (/srv/job/train.py:206)"


@pytest.mark.parametrize("function", [
    "cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "cuStreamSynchronize",
    "cuEventSynchronize", "cuCtxSynchronize", "hipStreamSynchronize", "cudaMemcpy", "cuMemcpyDtoH_v2",
    "cudart::cudaApiStreamSynchronize(CUstream_st*)", "c10::cuda::CUDAStream::synchronize() const",
    "at::cuda::CUDAEvent::synchronize() const", "c10::cuda::device_synchronize()",
    "at::native::_local_scalar_dense_cuda(at::Tensor const&)", "THCPModule_cudaSynchronize(_object*, _object*)",
])
def test_device_syncs(function):
    c = judge(native("sched_yield", "/lib/x86_64-linux-gnu/libc.so.6"), LIBCUDA, native(function),
              py("log_loss", "/srv/job/train.py", 133))
    assert (c.activity, c.guess) == (m.DEVICE_WAIT, False)


@pytest.mark.parametrize("function, library", [
    ("cudaMemcpyAsync", "libcudart.so.12"), ("cuLaunchKernel", "libcuda.so.1"), ("cudaEventQuery", "libcudart.so.12"),
    ("??", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05"), ("??", "libamdhip64.so.6"),
])
def test_a_driver_frame_without_a_sync_is_a_weaker_device_wait(function, library):
    c = judge(native(function, library), py("step", "/srv/job/train.py", 90))
    assert (c.activity, c.guess) == (m.DEVICE_WAIT, True)


@pytest.mark.parametrize("frames", [
    [native("cudnnConvolutionForward", "libcudnn_cnn_infer.so.8")],
    [native("cublasSgemm_v2", "libcublas.so.12")],
    [native("c10d::ProcessGroupNCCL::WorkNCCL::isCompleted()"), native("c10d::ProcessGroupNCCL::watchdogHandler()")],
    [native("sched_yield", "libc.so.6"), native("ncclProxyProgress(ncclProxyState*)", "libnccl.so.2"),
     native("ncclProxyService(void*)", "libnccl.so.2")],
    [native("c10d::ProcessGroupNCCL::broadcastUniqueNCCLID(ncclUniqueId*, bool, std::string const&, int)")],
])
def test_frames_that_are_not_a_communication_call(frames):
    assert judge(*frames).activity != m.BLOCKED


@pytest.mark.parametrize("frames, activity", [
    ([native("take_gil", "libpython3.11.so.1.0"), native("PyEval_RestoreThread", "libpython3.11.so.1.0")], m.LOCK_WAIT),
    ([Frame("Waiting for the GIL", native=True)], m.LOCK_WAIT),
    ([native("__new_sem_wait_slow64.constprop.0", "libc.so.6"), native("_multiprocessing_SemLock_acquire_impl")], m.LOCK_WAIT),
    ([native("PyThread_acquire_lock_timed", "libpython3.11.so.1.0"), native("_queue_SimpleQueue_get_impl")], m.LOCK_WAIT),
    # `_queue.SimpleQueue.get` as py-bt shows a C call, under the DataLoader's fetch.
    ([native("PyThread_acquire_lock_timed", "libpython3.11.so.1.0"),
      Frame("<built-in method get>", native=True), py("_get_data", LOADER_PY, 1294),
      py("_next_data", LOADER_PY, 1328)], m.DATA_LOADING),
    ([native("__GI___poll", "libc.so.6"), py("poll", "/usr/lib/python3.11/multiprocessing/connection.py", 257),
      py("get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
      py("_try_get_data", LOADER_PY, 1133)], m.DATA_LOADING),
    ([native("__GI___clock_nanosleep", "libc.so.6"), Frame("<built-in function sleep>", native=True),
      py("heartbeat", "/srv/job/train.py", 50)], m.IDLE),
])
def test_cpython_waits(frames, activity):
    assert judge(*frames).activity == activity


@pytest.mark.parametrize("name, short", [
    ("c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)", "c10d::Work::wait"),
    ("c10d::ops::(anonymous namespace)::allreduce_CUDA(c10::ArrayRef<at::Tensor>)",
     "c10d::ops::(anonymous namespace)::allreduce_CUDA"),
    ("at::native::_local_scalar_dense_cuda(at::Tensor const&)::{lambda()#1}::operator()() const",
     "at::native::_local_scalar_dense_cuda(at::Tensor const&)::{lambda()#1}::operator()() const"),
    ("std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector<int, std::allocator<int> >::push_back"),
    ("cudaStreamSynchronize", "cudaStreamSynchronize"),
])
def test_short_names_drop_the_parameter_list(name, short):
    assert stacks._short(name) == short


def test_two_bt_passes_of_one_process_stay_two_dumps(tmp_path):
    """Two snapshots with `bt` each are two moments, not two halves of one."""
    lines = (FIXTURES / "barrier_stream_sync_newest_bt.txt").read_text().split("\n")
    body = [line for line in lines if not line.startswith(("[Inferior", "Attaching"))]
    path = tmp_path / "twice.txt"
    path.write_text("\n".join(body + [""] + body))
    processes = gdb.parse(str(path), "twice.txt").processes
    assert [p.pid for p in processes] == [41877, 41877]
    assert [len(stacks.main_thread(p).frames) for p in processes] == [len(stacks.main_thread(dump(
        "barrier_stream_sync_newest_bt.txt")).frames)] * 2
