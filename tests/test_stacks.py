"""Classifying where a rank's main thread is, on synthetic stacks of each kind."""

from forensics import model as m
from forensics.ingest import stacks
from forensics.model import Evidence, Frame, ProcessDump, ThreadStack


def py(function, file, line=1, **locals_):
    return Frame(function, file, line, locals=tuple((k, str(v)) for k, v in locals_.items()))


def native(function, library="libtorch_cpu.so"):
    return Frame(function, library=library, native=True)


def dump(main_frames, others=(), source="py-spy", pid=100):
    threads = [ThreadStack(str(pid), "MainThread", False, tuple(f if isinstance(f, Frame) else f for f in
                                                               _with_at(main_frames)),
                           Evidence("rank0.pyspy.txt", 4, f'Thread {pid} (idle): "MainThread"'))]
    for i, frames in enumerate(others):
        threads.insert(0, ThreadStack(str(pid + 1 + i), "pt_nccl_watchdg", True, tuple(_with_at(frames)),
                                      Evidence("rank0.pyspy.txt", 40 + i * 5, "Thread")))
    return ProcessDump(source, "rank0.pyspy.txt", pid=pid, threads=tuple(threads))


def _with_at(frames):
    return [Frame(f.function, f.file, f.line, f.library, f.native, at=i + 1, locals=f.locals)
            for i, f in enumerate(frames)]


TRAIN = [py("train_step", "train.py", 358), py("main", "train.py", 413), py("<module>", "train.py", 426)]


def test_send_with_locals_gives_peer_and_evidence_line():
    d = dump([py("send", "torch/distributed/distributed_c10d.py", 2753, dst=1, group=None),
              py("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
              py("send_activations", "train.py", 277)] + TRAIN)
    c = stacks.classify(d)
    # the wrapper's args and kwargs are not shown: which group is not known
    assert (c.activity, c.op, c.peers, c.group) == (m.BLOCKED, "send", (1,), None)
    assert c.evidence.cite() == "rank0.pyspy.txt:5"
    assert c.why == ("send (torch/distributed/distributed_c10d.py:2753) ← send_activations (train.py:277)")


PG = "<torch._C._distributed_c10d.ProcessGroup at 0x7fc78127c330>"


def test_group_comes_from_what_the_caller_passed():
    # c10d resolves group=None to the default group object before blocking,
    # so the API frame's own `group` local says nothing; the wrapper's kwargs do.
    default = dump([py("all_reduce", "torch/distributed/distributed_c10d.py", 3252, group=PG),
                    py("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83,
                       args="(<Tensor at 0x7eff02361270>)", kwargs="{}"),
                    py("sync_gradients", "train.py", 206)] + TRAIN)
    assert stacks.classify(default).group == ""
    # py-spy cuts a dict of more than a few items short: the group may be among the hidden ones
    cut = dump([py("all_reduce", "torch/distributed/distributed_c10d.py", 3252, group=PG),
                py("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83,
                   args="(<Tensor at 0x7eff02361270>)",
                   kwargs='{"op": <torch._C._distributed_c10d.RedOpType at 0x7f60328672f0>, ...}'),
                py("reduce_boundary_gradients", "train.py", 339, group=PG)] + TRAIN)
    assert stacks.classify(cut).group is None
    op = stacks.comm_op(stacks.classify(cut))
    assert (op.group, op.group_known) == ("", False)
    assert stacks.comm_op(stacks.classify(default)).group_known
    named = dump([py("barrier", "torch/distributed/distributed_c10d.py", 5356, group=PG),
                  py("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83,
                     args="()", kwargs='{"group": ' + PG + "}"),
                  py("save_checkpoint", "train.py", 287, groups='{"ckpt": ' + PG + "}")] + TRAIN)
    c = stacks.classify(named)
    assert c.op == "barrier" and c.group == "?ckpt"
    anonymous = dump([py("barrier", "torch/distributed/distributed_c10d.py", 5356),
                      py("wrapper", "torch/distributed/c10d_logger.py", 83, args="(" + PG + ",)")] + TRAIN)
    assert stacks.classify(anonymous).group == "?0x7fc78127c330"


def test_recv_from_any_source():
    c = stacks.classify(dump([py("recv", "torch/distributed/distributed_c10d.py", 2800, src=None)] + TRAIN))
    assert c.op == "recv" and c.any_source


def test_data_loading_through_queue_wait():
    c = stacks.classify(dump([py("Condition.wait", "threading.py", 327), py("Queue.get", "queue.py", 171),
                              py("load_next_batch", "train.py", 190)] + TRAIN))
    assert c.activity == m.DATA_LOADING
    assert c.why == "Condition.wait (threading.py:327) ← load_next_batch (train.py:190)"


def test_dataloader_and_checkpoint_and_compute():
    loader = dump([py("_next_data", "torch/utils/data/dataloader.py", 700)] + TRAIN)
    assert stacks.classify(loader).activity == m.DATA_LOADING
    ckpt = dump([py("save", "torch/serialization.py", 900), py("save_checkpoint", "train.py", 280)] + TRAIN)
    assert stacks.classify(ckpt).activity == m.IO
    compute = dump([py("forward", "torch/nn/modules/linear.py", 125)] + TRAIN)
    assert stacks.classify(compute).activity == m.COMPUTING


def test_device_wait_native():
    d = dump([native("cudaStreamSynchronize", "libcudart.so.12"),
              native("at::native::_local_scalar_dense_cuda"),
              py("item_loss", "train.py", 99)] + TRAIN)
    assert stacks.classify(d).activity == m.DEVICE_WAIT


def test_gloo_native_frames_name_the_op():
    d = dump([native("pthread_cond_timedwait", "libc.so.6"),
              native("gloo::transport::tcp::UnboundBuffer::waitRecv"),
              native("c10d::ProcessGroupGloo::RecvWork::wait")], source="gdb")
    c = stacks.classify(d)
    assert (c.activity, c.op) == (m.BLOCKED, "recv")


def test_background_threads_do_not_decide():
    d = dump(TRAIN[:1] + [py("forward", "torch/nn/modules/linear.py", 125)],
             others=[[native("c10d::ProcessGroupNCCL::WorkNCCL::isCompleted"), native("cudaEventQuery")]])
    assert stacks.main_thread(d).name == "MainThread"
    assert stacks.classify(d).activity == m.COMPUTING


def test_combine_keeps_peers_from_the_locals_dump():
    plain = stacks.classify(dump([py("send", "torch/distributed/distributed_c10d.py", 2753)] + TRAIN))
    gdb = stacks.classify(dump([native("gloo::transport::tcp::UnboundBuffer::waitSend")], source="gdb"))
    rich = stacks.classify(dump([py("send", "torch/distributed/distributed_c10d.py", 2753, dst=0)] + TRAIN))
    best = stacks.combine([gdb, plain, rich])
    assert best.op == "send" and best.peers == (0,)


def test_python_stack_is_outermost_first():
    d = dump([py("all_reduce", "torch/distributed/distributed_c10d.py", 2950)] + TRAIN)
    assert stacks.python_stack(d)[0] == "<module> (train.py:426)"
    assert stacks.python_stack(d)[-1] == "all_reduce (torch/distributed/distributed_c10d.py:2950)"


def test_transport_wait_inside_a_collective_is_that_collective():
    # DETAIL mode: allreduce → ProcessGroupWrapper checks → monitoredBarrier → RecvWork::wait.
    d = dump([native("pthread_cond_timedwait", "libc.so.6"),
              native("gloo::transport::tcp::UnboundBuffer::waitRecv"),
              native("c10d::ProcessGroupGloo::RecvWork::wait"),
              native("c10d::ProcessGroupGloo::monitoredBarrier"),
              native("c10d::ProcessGroupWrapper::runCollectiveChecks"),
              native("c10d::ProcessGroupWrapper::allreduce"),
              native("c10d::ProcessGroup::allreduce")], source="gdb")
    c = stacks.classify(d)
    assert (c.activity, c.op) == (m.BLOCKED, "all_reduce")
    assert c.why.startswith("gloo::transport::tcp::UnboundBuffer::waitRecv")


def test_dumps_that_disagree_mean_the_rank_is_moving():
    in_reduce = dump([py("all_reduce", "torch/distributed/distributed_c10d.py", 3245),
                      py("sync_gradients", "train.py", 267)] + TRAIN)
    computing = dump([py("TinyModel.forward_backward", "train.py", 149)] + TRAIN)
    lock = dump([native("pthread_cond_wait", "libc.so.6")], source="gdb")
    judged = [(stacks.classify(d), d) for d in (in_reduce, computing, lock)]
    moved = stacks.moving(judged)
    assert moved is not None and moved.activity == m.COMPUTING and "moving between dumps" in moved.why
    # A native lock wait fits a blocked collective: no disagreement.
    assert stacks.moving([judged[0], judged[2]]) is None


def test_frameworks_own_collective_helpers_are_waits_in_that_collective():
    cases = [
        ("wait", "deepspeed/runtime/zero/partition_parameters.py", "all_gather"),
        ("has_overflow", "deepspeed/runtime/zero/stage_1_and_2.py", "all_reduce"),
        ("all_reduce", "deepspeed/comm/comm.py", "all_reduce"),
        ("_all_reduce_dict", "fairseq/distributed/utils.py", "all_reduce"),
        ("gather_all_tensors", "pytorch_lightning/utilities/distributed.py", "all_gather"),
        ("wait_for_everyone", "accelerate/state.py", "barrier"),
        ("parse_losses", "/workspace/mmdetection/mmdet/apis/train.py", "all_reduce"),
    ]
    for function, file, op in cases:
        c = stacks.classify(dump([py(function, file, 100)] + TRAIN))
        assert c.activity == m.BLOCKED and stacks.comm_op(c).op == op, (function, file)
    # the same names elsewhere say nothing of a collective
    other = stacks.classify(dump([py("wait", "deepspeed/runtime/pipe/engine.py", 100)] + TRAIN))
    assert other.activity != m.BLOCKED


def test_zero3_fetch_and_the_checkpoint_tag_check_are_collectives_and_gradscaler_waits_for_the_device():
    fetch = dump([py("synchronize", "torch/cuda/streams.py", 224),
                  py("fetch_sub_module", "deepspeed/runtime/zero/partitioned_param_coordinator.py", 331)] + TRAIN)
    assert stacks.comm_op(stacks.classify(fetch)).op == "all_gather"
    tag = dump([py("_checkpoint_tag_validation", "/home/u/DeepSpeed/deepspeed/runtime/engine.py", 1456),
                py("save_checkpoint", "deepspeed/runtime/engine.py", 1520)] + TRAIN)
    assert stacks.comm_op(stacks.classify(tag)).op == "all_reduce"
    scaler = dump([py("_maybe_opt_step", "torch/cuda/amp/grad_scaler.py", 350),
                   py("step", "torch/cuda/amp/grad_scaler.py", 416)] + TRAIN)
    assert stacks.classify(scaler).activity == m.DEVICE_WAIT
