"""Per-rank logs shown together the way people paste them: `tail -n 40
logs/rank*.log` prints `==> logs/rank3.log <==` before each file, so the
lines under that header are rank 3's, tracebacks included. And the lines
such a console holds without any prefix: a c10d error that states its own
rank and the peer it waited for is that rank's."""

from __future__ import annotations

from helpers import cli_report

_BIND = ("[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500 "
         "(errno: 98 - Address already in use).")
_TRACE_HEAD = ["Traceback (most recent call last):",
               '  File "train.py", line 118, in <module>',
               "    main()"]
_SITE = "/opt/conda/lib/python3.10/site-packages/torch/distributed"


def _rank0_bind_failure() -> list[str]:
    return [_BIND, "[E socket.cpp:472] [c10d] The server socket has failed to listen on any local network address.",
            *_TRACE_HEAD,
            '  File "train.py", line 97, in main',
            '    dist.init_process_group(backend="nccl", init_method="tcp://127.0.0.1:29500",',
            f'  File "{_SITE}/distributed_c10d.py", line 1141, in init_process_group',
            "    store, rank, world_size = next(rendezvous_iterator)",
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
            "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)."]


def _unique_id_timeout(rank: int) -> list[str]:
    return [*_TRACE_HEAD,
            '  File "train.py", line 103, in main',
            "    dist.barrier()",
            f'  File "{_SITE}/distributed_c10d.py", line 3696, in barrier',
            "    work = default_pg.barrier(opts=opts)",
            f"torch.distributed.DistBackendError: [{rank}] is setting up NCCL communicator and retrieving ncclUniqueId "
            f"from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer"]


def _tail(sections: dict[int, list[str]]) -> str:
    out = ["$ tail -n 40 logs/rank*.log"]
    for rank, lines in sections.items():
        out += [f"==> logs/rank{rank}.log <==", *lines, ""]
    return "\n".join(out) + "\n"


def _analyze(tmp_path, text: str, *args) -> dict:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "console.txt").write_text(text, encoding="utf-8")
    return cli_report(folder, tmp_path / "out.json", *args)


def test_a_section_of_tail_output_is_that_ranks_and_its_own_setup_error_ended_it(tmp_path):
    """Rank 0 could not open the store's port and died; ranks 1-3 failed
    fetching the NCCL id from it: rank 0 is the dead rank, the others' ends
    follow from it."""
    sections = {0: _rank0_bind_failure(), **{r: _unique_id_timeout(r) for r in (1, 2, 3)}}
    report = _analyze(tmp_path, _tail(sections), "--hung")
    assert report["verdict"] == "dead_rank"
    assert report["culprit_ranks"] == [0]
    assert report["ranks"]["0"]["ended"]["role"] == "cause"
    assert all(report["ranks"][str(r)]["ended"]["role"] == "knock_on" for r in (1, 2, 3))


def test_without_the_headers_the_traceback_has_no_rank(tmp_path):
    """The same lines pasted without `tail`'s headers: rank 0's traceback is
    nobody's, so it cannot be the dead rank."""
    text = "\n".join(_rank0_bind_failure() + _unique_id_timeout(1)) + "\n"
    report = _analyze(tmp_path, text, "--hung")
    assert report["verdict"] != "dead_rank"


def test_unprefixed_unique_id_timeouts_are_their_printers_and_name_the_missing_root(tmp_path):
    """Ranks 1, 3, 6 each state they waited for rank 0's NCCL id and then
    exited (torchrun's summary says exit code 1): their ends are knock-ons, and
    rank 0 (still busy, as nothing shows it ended) is the one waited for."""
    lines = ["Map (num_proc=8):  62%|######    | 31000/50000 [27:41<16:58, 18.66 examples/s]"]
    for rank in (3, 1, 6):
        lines += _unique_id_timeout(rank)
    lines.append("[2024-04-10 15:41:23,811] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
                 "(exitcode: 1) local_rank: 1 (pid: 51201) of binary: /opt/conda/bin/python")
    lines += ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 52, "dpo.py FAILED",
              "-" * 52, "Failures:"]
    for index, rank in enumerate((3, 6), 1):
        lines += [f"[{index}]:", "  time      : 2024-04-10_15:41:22", "  host      : dgx-a100-12",
                  f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : 1 (pid: {51200 + rank})",
                  "  error_file: <N/A>", "  traceback : To enable traceback see: "
                  "https://pytorch.org/docs/stable/elastic/errors.html"]
    lines += ["-" * 52, "Root Cause (first observed failure):", "[0]:", "  time      : 2024-04-10_15:41:22",
              "  host      : dgx-a100-12", "  rank      : 1 (local_rank: 1)", "  exitcode  : 1 (pid: 51201)",
              "  error_file: <N/A>", "  traceback : To enable traceback see: "
              "https://pytorch.org/docs/stable/elastic/errors.html", "=" * 52]
    report = _analyze(tmp_path, "\n".join(lines) + "\n")
    assert report["verdict"] == "missing_rank"
    assert report["culprit_ranks"] == [0]
