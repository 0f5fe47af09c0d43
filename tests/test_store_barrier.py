"""The store-based barrier of process-group creation timed out: "only COUNT of
WORLD_SIZE arrived" states a missing rank without naming it. The rank names
follow only where the processes that arrived are all known."""

from forensics import analyze

KEY = "store_based_barrier_key:1"


def _timeout(rank: int, world: int, count: int, key: str = KEY) -> str:
    return (f"torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on rank "
            f"{rank}, for key: {key} (world_size={world}, num_workers_joined={count}, timeout=0:30:00)\n")


def _waiting(rank: int, world: int, count: int, key: str = KEY) -> str:
    return (f"INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize process group for "
            f"rank: {rank}, key: {key} (world_size={world}, num_workers_joined={count}, timeout=0:30:00)\n")


def _run(tmp_path, files: dict):
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return analyze(str(tmp_path), jobs=1)


def _stated(report):
    return [f for f in report.findings if f.rule == "stated-missing-rank"]


def test_a_count_alone_is_a_missing_rank_that_names_nobody(tmp_path):
    report = _run(tmp_path, {"host0.log": _waiting(0, 32, 20) + _timeout(0, 32, 27)})
    assert report.verdict == "missing_rank" and report.culprit_ranks == []
    assert report.confidence.level == "medium"
    (finding,) = _stated(report)
    assert "only 27 of 32" in finding.message and "5 never arrived" in finding.message
    assert finding.evidence[0].line == 2
    # The line that bears the verdict is not listed again as a mere observation.
    assert not any("torch-store-barrier-timeout" in f.message for f in report.findings
                   if f.rule == "stated-observation")


def test_the_ranks_that_printed_their_wait_leave_the_absent_named(tmp_path):
    files = {f"rank{r}.stderr.log": _waiting(r, 4, 2) + _timeout(r, 4, 3) for r in (0, 1, 3)}
    report = _run(tmp_path, files)
    assert report.verdict == "missing_rank" and report.culprit_ranks == [2]
    (finding,) = _stated(report)
    assert finding.ranks == (2,) and "so rank 2 never arrived" in finding.message
    assert report.confidence.level == "medium" and "whole job" in report.confidence.reason


def test_no_rank_is_named_when_the_arrivals_are_not_all_known(tmp_path):
    # Three of eight arrived by the count, two of them printed: which third arrived is unknown.
    files = {f"rank{r}.stderr.log": _timeout(r, 8, 3) for r in (0, 1)}
    report = _run(tmp_path, files)
    assert report.verdict == "missing_rank" and report.culprit_ranks == []
    assert "5 never arrived" in _stated(report)[0].message


def test_no_rank_is_named_when_the_barrier_is_a_subgroup(tmp_path):
    # A new_group of 4 whose members include rank 6: its members are not ranks 0-3.
    files = {f"rank{r}.stderr.log": _timeout(r, 4, 3, key="store_based_barrier_key:2") for r in (2, 4, 6)}
    report = _run(tmp_path, files)
    (finding,) = _stated(report)
    assert finding.ranks == () and "1 never arrived" in finding.message


def test_a_barrier_every_process_reached_states_nothing_missing(tmp_path):
    report = _run(tmp_path, {"rank0.log": _waiting(0, 4, 4)})
    assert not _stated(report) and report.verdict != "missing_rank"


def test_a_world_beyond_any_job_names_nobody_and_costs_nothing(tmp_path):
    # A hostile or garbled count: naming "everyone but rank 0" of a billion would never end.
    report = _run(tmp_path, {"rank0.log": _timeout(0, 999_999_999, 1)})
    assert not _stated(report) and report.culprit_ranks == []
