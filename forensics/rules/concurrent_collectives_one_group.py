"""concurrent-collectives-one-group: two threads of one rank inside
collectives on the same process group at once.

A communicator runs its collectives in the order they were issued, on every
rank. Two threads issuing collectives on one group (a metrics reporter
beside the training loop) issue them in whatever order the threads happen
to run, which differs between ranks: NCCL then pairs different collectives
and hangs, Gloo aborts on a size mismatch or, with equal sizes, silently
mixes the data. A stack dump shows the hazard directly: two threads of the
same process blocked in c10d calls on one group.
"""

from __future__ import annotations

from collections import defaultdict

from ..hookspecs import hookimpl
from ..ingest.stacks import classify_thread
from ..model import BLOCKED, DEFAULT_GROUP, Finding
from ..ruledocs import RuleDoc

ID = "concurrent-collectives-one-group"
KIND = "concurrent_collectives"
HINT = ("Issue every collective of a process group from one thread, or give the second thread its own group "
        "(dist.new_group(...) created in the same order on every rank); a metrics or logging thread can also "
        "hand its tensors to the training loop to reduce between steps.")
HINT_ZH = ("同一进程组的集合通信只从一个线程发起，或给第二个线程单独的组（在所有 Rank 上以相同顺序调用 "
           "dist.new_group(...) 创建）；指标或日志线程也可以把张量交给训练循环，在两步之间统一归约。")


@hookimpl
def forensics_findings(incident):
    findings = []
    # frames → (activity, op, group): ten thousand ranks show the same few
    # stacks, each rank's own copy of them (a frame tuple hashes in a tenth
    # of the time a classification takes).
    judged: dict[tuple, tuple] = {}
    for rank, state in sorted(incident.ranks.items()):
        if len(state.threads) < 2:
            continue
        by_group: dict[str, list] = defaultdict(list)
        for thread in state.threads:
            key = thread.frames
            if key not in judged:
                verdict = classify_thread(thread)
                judged[key] = (verdict.activity, verdict.op, verdict.group)
            activity, op, group = judged[key]
            if activity == BLOCKED and op and op != "init":
                by_group[group or DEFAULT_GROUP].append((thread, classify_thread(thread)))
        for group, calls in sorted(by_group.items()):
            if len(calls) < 2:
                continue
            described = [f"{thread.name or thread.tid} in {c.op} ({c.why})" for thread, c in calls]
            label = group[1:] if group.startswith("?") else group
            findings.append(Finding(
                ID, KIND, "warning", (rank,),
                f"Rank {rank} has {len(calls)} threads inside collectives on group {label} at once: "
                + "; ".join(described) + ". One communicator runs its collectives in the order they were "
                "issued; threads issue them in an order that can differ between ranks, which pairs different "
                "collectives (a hang on NCCL, an abort or mixed data on Gloo).",
                tuple(c.evidence for _, c in calls if c.evidence is not None), HINT,
                f"Rank {rank} 有 {len(calls)} 个线程同时处于 group {label} 的集合通信中：" + "；".join(described)
                + "。同一通信器按发起顺序执行集合通信；多个线程发起的顺序在各 Rank 之间可能不同，会把不同的集合通信"
                "配成一对（NCCL 上挂起，Gloo 上中止或数据错乱）。", HINT_ZH))
    return findings


RULES = (RuleDoc(
    ID, "Two threads in collectives on one process group", "两个线程同时在同一进程组上做集合通信", "warning",
    "A stack dump shows two threads of one rank blocked in collectives on the same process group. A "
    "communicator runs collectives in issue order; threads issue them in an order that can differ between "
    "ranks, so different collectives get paired: NCCL hangs, Gloo aborts on a size mismatch or mixes data.",
    "调用栈显示同一 Rank 的两个线程同时阻塞在同一进程组的集合通信中。通信器按发起顺序执行集合通信；"
    "多个线程的发起顺序在各 Rank 之间可能不同，从而把不同的集合通信配成一对：NCCL 挂起，Gloo 因大小不符而"
    "中止或数据错乱。",
    HINT, HINT_ZH, kinds=(KIND,), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
