"""Statements that name ranks are evidence, read through the shipped catalogue: a process's own
`[Rank N]`, and processes that each say they waited for one named peer in vain."""

from helpers import cli_report

UNIQUE_ID = ("RuntimeError: [{rank}] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d "
             "key-value store by key '0', but store->get('0') got error: Socket Timeout\n")
TRACEBACK = ('Traceback (most recent call last):\n  File "/srv/app/train.py", line 40, in <module>\n'
             "    torch.distributed.barrier()\n")
OLD_TIMEOUT = ("[E ProcessGroupNCCL.cpp:474] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, "
               "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800790 milliseconds before "
               "timing out.\n")


def analyze(tmp_path, files: dict[str, str]) -> dict:
    folder = tmp_path / "logs"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return cli_report(folder, tmp_path / "report.json", "--hung")


def test_ranks_that_each_waited_for_rank_0s_unique_id_make_rank_0_the_missing_one(tmp_path):
    text = "".join(TRACEBACK + UNIQUE_ID.format(rank=r) for r in (3, 6, 1))
    report = analyze(tmp_path, {"train.log": "tokenizing: 100%|##########| 52000/52000\n" + text})
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [0]
    assert report["confidence"]["level"] == "medium"


def test_a_peer_shown_killed_is_not_called_missing_by_those_who_waited_for_it(tmp_path):
    text = "".join(TRACEBACK + UNIQUE_ID.format(rank=r) for r in (3, 6, 1))
    launcher = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 "
                "(pid: 4100) of binary: /usr/bin/python3\n")
    report = analyze(tmp_path, {"train.log": text, "torchrun.log": launcher})
    assert report["verdict"] == "dead_rank"


def test_one_ranks_old_watchdog_line_alone_names_its_rank(tmp_path):
    report = analyze(tmp_path, {"train.log": "epoch 0: 96%|#########6| 1927287/2000000\n" + OLD_TIMEOUT})
    assert report["verdict"] == "missing_rank" and report["culprit_ranks"] == [0]
    assert any("[Rank 1]" in d["message"] and "taken as the global rank" in d["message"]
               for d in report["diagnostics"])


ABORTED = ('Traceback (most recent call last):\n  File "/srv/app/train.py", line 88, in evaluate\n'
           "    dist.all_gather(out, tensor)\n"
           '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2450, in all_gather\n'
           "    work.wait()\n"
           "RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure was: [Rank 3] Watchdog "
           "caught collective operation timeout: WorkNCCL(SeqNum=266392, OpType=ALLGATHER, Timeout(ms)=1800000) ran "
           "for 1803169 milliseconds before timing out.\n")


def test_an_abort_after_the_ranks_own_timeout_in_its_own_file_is_a_knock_on(tmp_path):
    # the file's name is the rank of its lines without a prefix: its abort quotes its own watchdog timeout
    timeout = ("[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL("
               "SeqNum=266392, OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1803169 milliseconds before timing out.\n")
    report = analyze(tmp_path, {"rank3.err": timeout + ABORTED})
    assert report["verdict"] == "missing_rank" and 3 not in report["culprit_ranks"]


def test_deepspeeds_rank_disagreement_is_a_mismatch_and_the_exit_after_it_no_crash(tmp_path):
    text = ('[rank6]: Traceback (most recent call last):\n'
            '[rank6]:   File "/opt/ds/deepspeed/runtime/zero/utils.py", line 85, in assert_ints_same_as_other_ranks\n'
            '[rank6]:     raise RuntimeError(f"disagreement between rank0 and rank{dist.get_rank()}: "\n'
            "[rank6]: RuntimeError: disagreement between rank0 and rank6: rank0: [0, 1, 2, 22], rank6: [0, 1, 2, 41]\n"
            "E0624 10:36:01.226430 140318742316864 torch/distributed/elastic/multiprocessing/api.py:826] failed "
            "(exitcode: 1) local_rank: 6 (pid: 3183) of binary: /usr/bin/python3\n")
    report = analyze(tmp_path, {"train.log": text})
    assert report["verdict"] == "collective_mismatch" and report["culprit_ranks"] == [0, 6]


FINGERPRINT = ("RuntimeError: Detected mismatch between collectives on ranks. Rank {rank} is running inconsistent "
               "collective: CollectiveFingerPrint(OpType={op}, TensorShape=[4], TensorDtypes=Float, "
               "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda:{rank}, layout=Strided (default), "
               "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt)))\n")


def test_the_older_detail_check_names_the_rank_whose_op_is_the_minoritys(tmp_path):
    lines = "".join(f"[rank{r}]:" + FINGERPRINT.format(rank=r, op="BROADCAST" if r == 0 else "ALLREDUCE")
                    for r in range(4))
    report = analyze(tmp_path, {"train.log": lines})
    assert report["verdict"] == "collective_mismatch" and report["culprit_ranks"] == [0]


def test_the_older_detail_check_of_one_rank_alone_is_a_mismatch_without_a_side(tmp_path):
    report = analyze(tmp_path, {"train.log": FINGERPRINT.format(rank=0, op="BROADCAST")})
    assert report["verdict"] == "collective_mismatch" and report["confidence"]["level"] == "low"


def test_a_peer_that_reports_its_own_connect_failing_is_not_dead(tmp_path):
    # gpu101 cannot reach gpu100 (no route) and closes its side; gpu100 then sees gpu101 close: a network fault
    connect = ("gpu101:{pid}:{tid} [{dev}] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
               "172.17.8.100<{port}> failed : No route to host\n")
    closed = "gpu100:{pid}:{tid} [{dev}] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer gpu101<{port}>\n"
    lines = "".join(connect.format(pid=18877 + d, tid=19057 + d, dev=d, port=34836 + d) for d in range(2))
    lines += "".join(closed.format(pid=30412 + d, tid=30593 + d, dev=d, port=50417 + d) for d in range(2))
    report = analyze(tmp_path, {"console.log": lines})
    assert report["verdict"] == "network_fault"
    # without the connect failures, the same closed connections say the peer went away
    gone = analyze(tmp_path / "gone", {"console.log": "".join(closed.format(pid=30412 + d, tid=30593 + d, dev=d,
                                                                             port=50417 + d) for d in range(2))})
    assert gone["verdict"] == "dead_rank"


RAY_WORKER_DIED = ("(raylet, ip=10.1.59.27) A worker died or was killed while executing a task by an unexpected "
                   "system error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: ffff "
                   "Worker ID: 8e3f Node ID: 5bd1 Worker IP address: 10.1.59.27 Worker port: 10231 Worker PID: 1184 "
                   "Worker exit type: SYSTEM_ERROR\n")


def test_a_catalogued_line_beside_c10d_lines_is_read_by_the_reader_that_claims_the_file(tmp_path):
    # a Ray driver log: the c10d reader claims it for its watchdog lines, and reads Ray's worker death too
    watchdog = ("(ActorModelRayActor pid=744, ip=10.1.59.27) [rank9]:[E416 13:21:26.967375581 ProcessGroupNCCL.cpp:616] "
                "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=876319, OpType=BROADCAST, "
                "NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600089 milliseconds before timing out.\n")
    report = analyze(tmp_path, {"driver.log": RAY_WORKER_DIED + watchdog})
    assert report["verdict"] == "dead_rank"
    assert any(c.get("pid") == 1184 for c in report["culprits"])


def test_a_process_whose_death_follows_its_own_timeout_is_not_the_crash(tmp_path):
    watchdog = ("(ActorModelRayActor pid=1184, ip=10.1.59.27) [E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught "
                "collective operation timeout: WorkNCCL(SeqNum=3856, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                "Timeout(ms)=1800000) ran for 1800503 milliseconds before timing out.\n")
    report = analyze(tmp_path, {"driver.log": watchdog + RAY_WORKER_DIED})
    assert not any(c.get("pid") == 1184 for c in report["culprits"])
    assert report["verdict"] != "dead_rank"


def test_the_launchers_row_for_the_first_rank_to_exit_after_the_timeouts_is_no_crash(tmp_path):
    # torch 1.10: ranks 1-3 time out in a broadcast, their timeouts raise (exit code 1), torchrun reports the
    # first of them and stops the rest; rank 0, in its evaluation, is the one they waited for
    timeouts = "".join(f"[E ProcessGroupNCCL.cpp:587] [Rank {r}] Watchdog caught collective operation timeout: "
                       "WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1802157 milliseconds before timing "
                       "out.\n" for r in (1, 2, 3))
    launcher = ("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 30511 closing signal SIGTERM\n"
                "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 1 (pid: 30512) "
                "of binary: /opt/conda/envs/train/bin/python\n")
    report = analyze(tmp_path, {"train.log": timeouts + launcher})
    assert report["verdict"] != "dead_rank"
    # an error of a worker's own before the row is a crash: the row is its exit
    crash = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    report = analyze(tmp_path / "crash", {"train.log": crash + timeouts + launcher})
    assert report["verdict"] == "dead_rank"


def test_gloo_failing_to_connect_its_full_mesh_is_a_network_fault(tmp_path):
    lines = "".join(f"[rank{r}]:[W216 12:57:50.473634172 ProcessGroupGloo.cpp:715] Warning: Unable to resolve "
                    "hostname to a (local) address. Using the loopback address as fallback. Manually set the network "
                    "interface to bind to with GLOO_SOCKET_IFNAME. (function operator())\n" for r in range(2))
    lines += ("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
              "no error\n")
    assert analyze(tmp_path, {"node1_server.log": lines})["verdict"] == "network_fault"


def test_the_launchers_row_after_a_transport_failure_is_no_crash_of_its_own(tmp_path):
    warn = ("node-a:118:190 [0] NCCL WARN NET/IB : Got completion from peer 10.1.0.12<48212> with error 12, opcode 0, "
            "len 0, vendor err 129 (Recv)\n")
    row = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 118) of "
           "binary: /usr/bin/python\n")
    report = analyze(tmp_path, {"node-a.log": warn + row})
    assert report["verdict"] == "network_fault"
