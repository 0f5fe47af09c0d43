"""transport-size-mismatch: the transport itself caught two ranks in
different collectives.

Gloo pairs the messages of a communicator by the order its collectives were
issued. When two ranks disagree on that order (a second thread issuing
collectives on the same group, a rank-dependent call), a message of one
collective arrives where another was expected, and Gloo aborts with
"op.preamble.length <= op.nbytes. A vs B. Received data size doesn't match
expected size. Is there a distributed collective mismatch in your code?".
That rank dies of SIGABRT; its peers then see "Connection reset by peer".
The finding is a collective mismatch among the rank that caught it and the
ranks whose connection broke; the resets are the echo, not a network fault.
"""

from __future__ import annotations

import re

from ..hookspecs import hookimpl
from ..model import Finding
from ..ranges import compact
from ..ruledocs import RuleDoc

ID = "transport-size-mismatch"
KIND = "collective_mismatch"
_SIZE = re.compile(r"op\.preamble\.length <= op\.nbytes\.?\s*(\d+) vs (\d+)\.?\s*Received data size doesn't "
                   r"match expected size")
_BROKEN = re.compile(r"Connection reset by peer|Connection closed by peer|Broken pipe", re.I)
HINT = ("The ranks issued different collectives at the same point of one communicator. Look for a second "
        "thread issuing collectives on the same process group (a metrics, logging or checkpoint thread "
        "beside the training loop: give it its own group with dist.new_group, or issue every collective "
        "from one thread) and for rank-dependent collectives. TORCH_DISTRIBUTED_DEBUG=DETAIL names each "
        "rank's op.")
HINT_ZH = ("各 Rank 在同一通信器的同一位置发起了不同的集合通信。检查是否有第二个线程在同一进程组上发起集合通信"
           "（训练循环旁的指标、日志或 Checkpoint 线程：用 dist.new_group 给它单独的组，或让所有集合通信都由一个"
           "线程发起），以及依赖 rank 的集合通信。TORCH_DISTRIBUTED_DEBUG=DETAIL 会给出每个 Rank 的算子。")


@hookimpl
def forensics_findings(incident):
    caught = []  # (rank, evidence, got, expected)
    for rank, state in sorted(incident.ranks.items()):
        for event in state.log_events:
            match = _SIZE.search(event.text)
            if match:
                caught.append((rank, event, int(match.group(1)), int(match.group(2))))
                break
    if not caught:
        return []
    seen = {rank for rank, *_ in caught}
    broken = []
    for rank, state in sorted(incident.ranks.items()):
        if rank not in seen:
            event = next((e for e in state.log_events if _BROKEN.search(e.text)), None)
            if event is not None:
                broken.append((rank, event))
    ranks = tuple(sorted(seen | {rank for rank, _ in broken}))
    parts, parts_zh = [], []
    for rank, event, got, expected in caught:
        parts.append(f"rank {rank}'s Gloo transport received a {got:,}-byte message where its collective "
                     f"expected {expected:,} bytes and aborted [{event.cite()}]")
        parts_zh.append(f"Rank {rank} 的 Gloo 传输层收到了 {got:,} 字节的消息，而它的集合通信只期望 {expected:,} 字节，"
                        f"随即中止 [{event.cite()}]")
    message = "; ".join(parts) + ": the ranks were not in the same collective at that point of the communicator."
    message_zh = "；".join(parts_zh) + "：在该通信器的这个位置，各 Rank 并不处于同一个集合通信中。"
    if broken:
        message += (f" Rank {compact(r for r, _ in broken)} then lost the connection to it "
                    f"({'; '.join(e.cite() for _, e in broken[:3])}): the other side of the mismatch, "
                    "not a network fault.")
        message_zh += (f" 随后 Rank {compact(r for r, _ in broken)} 与它的连接断开"
                       f"（{'；'.join(e.cite() for _, e in broken[:3])}）：这是失配的另一方，不是网络故障。")
    evidence = tuple(e for _, e, *_ in caught) + tuple(e for _, e in broken[:7])
    return [Finding(ID, KIND, "error", ranks, message, evidence, HINT, message_zh, HINT_ZH)]


RULES = (RuleDoc(
    ID, "The transport caught ranks in different collectives", "传输层发现各 Rank 处于不同的集合通信", "error",
    "Gloo pairs a communicator's messages by the order collectives were issued; a message of one collective "
    "arriving where another was expected makes it abort ('Received data size doesn't match expected size. "
    "Is there a distributed collective mismatch in your code?'). That is a collective mismatch — typically "
    "two threads issuing collectives on one process group in an order that differs between ranks — and "
    "the peers' 'Connection reset by peer' errors that follow are its echo, not a network fault.",
    "Gloo 按集合通信的发起顺序配对同一通信器上的消息；某个集合通信的消息到达了另一个集合通信期望的位置时，"
    "它会中止（“Received data size doesn't match expected size. Is there a distributed collective mismatch”）。"
    "这是集合通信失配——通常是两个线程在同一进程组上以不同顺序发起集合通信——随后对端的"
    "“Connection reset by peer”只是它的回声，而不是网络故障。",
    HINT, HINT_ZH, kinds=(KIND,), source=__name__),)


@hookimpl
def forensics_rules():
    return RULES
