"""A worker whose result is bigger than a default pipe (64 KiB) goes on to
its next task while the parent is still busy with `meanwhile`, instead of
waiting, idle, for the parent to read it."""

import time

import pytest

from forensics.ingest import workers

pytestmark = pytest.mark.skipif(not workers.available(), reason="no fork on this platform")


@pytest.mark.skipif(getattr(workers.fcntl, "F_SETPIPE_SZ", None) is None,
                    reason="pipes cannot be grown on this platform (Linux only)")
def test_a_big_result_does_not_hold_the_worker_while_the_parent_is_busy(tmp_path):
    marker = tmp_path / "second task started"
    big = 300_000  # bytes of result: more than a default pipe holds, less than the grown one

    def work(task):
        if task == "second":
            marker.write_text("started")
            return "second done"
        return "x" * big

    seen_during_meanwhile = []

    def meanwhile():
        # One worker, two tasks: it can start the second only once its first
        # result is in the pipe, which the parent reads only after this returns.
        for _ in range(1000):  # up to 10 s: a liveness bound, not a timing assert
            if marker.exists():
                break
            time.sleep(0.01)
        seen_during_meanwhile.append(marker.exists())

    results = {}
    workers.run(["first", "second"], [2, 1], work, 1, results.__setitem__,
                lambda index, how: f"died: {how}", meanwhile)
    assert results == {0: "x" * big, 1: "second done"}
    assert seen_during_meanwhile == [True]


def test_the_result_pipes_together_stay_within_their_share():
    assert workers._result_pipe_size(2) == workers.RESULT_PIPE_BYTES
    many = workers._result_pipe_size(256)
    assert 1 << 16 <= many < workers.RESULT_PIPE_BYTES
    assert many * 256 <= workers.RESULT_PIPES_BYTES
