"""The original brief's exercise, verbatim, through the public API."""

from forensics import detect_comm_deadlock


def test_seed_scenarios_verbatim():
    # 测试场景 1：Rank 0 正在 send 等待 Rank 1，Rank 1 正在 send 等待 Rank 0（经典双向循环死锁）
    deadlock_snapshot = {
        0: {"current_op": "send", "waiting_for_ranks": [1], "op_seq": 105},
        1: {"current_op": "send", "waiting_for_ranks": [0], "op_seq": 105},
        2: {"current_op": "all_reduce", "waiting_for_ranks": [], "op_seq": 105},
    }

    res1 = detect_comm_deadlock(deadlock_snapshot)
    print("测试 1 诊断结果:", res1)
    assert res1["is_deadlocked"] == True  # noqa: E712 (verbatim)
    assert (res1["cycle_ranks"] == [0, 1, 0] or res1["cycle_ranks"] == [1, 0, 1])
    assert "循环等待" in res1["root_cause"] or "死锁" in res1["root_cause"]

    # 测试场景 2：健康依赖链（Rank 0 -> Rank 1 -> Rank 2，无环路）
    healthy_snapshot = {
        0: {"current_op": "recv", "waiting_for_ranks": [1], "op_seq": 201},
        1: {"current_op": "recv", "waiting_for_ranks": [2], "op_seq": 201},
        2: {"current_op": "compute", "waiting_for_ranks": [], "op_seq": 201},
    }
    res2 = detect_comm_deadlock(healthy_snapshot)
    print("测试 2 诊断结果:", res2)
    assert res2["is_deadlocked"] == False  # noqa: E712 (verbatim)
    assert res2["cycle_ranks"] == []


def test_seed_contract_is_explicit_edges_exactly():
    # Rank 2 says it waits for nobody although it sits in an all_reduce: the
    # seed contract takes that literally, so no edge, no extra cycle.
    res = detect_comm_deadlock({
        0: {"current_op": "all_reduce", "waiting_for_ranks": [1], "op_seq": 7},
        1: {"current_op": "all_reduce", "waiting_for_ranks": [0], "op_seq": 7},
    })
    # Under the seed's contract these explicit edges are a cycle, even though
    # the CLI's refined semantics would say both already arrived.
    assert res["is_deadlocked"] is True
    assert res["cycle_ranks"] == [0, 1, 0]


def test_seed_three_cycle_starts_at_smallest_rank():
    res = detect_comm_deadlock({
        5: {"current_op": "recv", "waiting_for_ranks": [3], "op_seq": 1},
        3: {"current_op": "recv", "waiting_for_ranks": [9], "op_seq": 1},
        9: {"current_op": "recv", "waiting_for_ranks": [5], "op_seq": 1},
    })
    assert res["cycle_ranks"] == [3, 9, 5, 3]
    assert "死锁" in res["root_cause"]


def test_seed_empty_and_unknown_ranks():
    empty = detect_comm_deadlock({})
    assert empty["is_deadlocked"] is False and empty["cycle_ranks"] == []
    # A wait on a rank that reported nothing is not a cycle.
    res = detect_comm_deadlock({0: {"current_op": "send", "waiting_for_ranks": [7], "op_seq": 1}})
    assert res["is_deadlocked"] is False and res["cycle_ranks"] == []
