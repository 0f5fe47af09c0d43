"""Which links a stalled rank sits on: NCCL ring neighbours from init logs.

A ring collective on a communicator moves data around each channel's ring,
every rank receiving from the one before it and sending to the one after.
When a rank stops (stuck elsewhere, dead, or its link failed), every ring
collective on that communicator stalls at the links into and out of it:
that is what the on-call engineer checks first (cables, NICs, the next
hop's host). Channels whose rings give a rank the same neighbours are
reported together.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Evidence, Incident
from .ranges import compact

MAX_GROUPS = 3


@dataclass(frozen=True, slots=True)
class RingLink:
    group: str
    size: int
    rank: int
    prev: int          # the rank it receives from
    next: int          # the rank it sends to
    channels: tuple[int, ...]
    evidence: Evidence | None

    def to_json(self) -> dict:
        return {"group": self.group, "ranks": self.size, "channels": list(self.channels),
                "receives_from": self.prev, "sends_to": self.next,
                "evidence": self.evidence.to_json() if self.evidence else None}


def ring_links(incident: Incident, rank: int) -> list[RingLink]:
    """The ring neighbours of `rank` on every communicator with known rings,
    largest communicator first."""
    links = []
    for group in sorted(incident.groups.values(), key=lambda g: (-len(g.ranks), g.id)):
        pairs: dict[tuple[int, int], list] = {}
        for ring in group.rings:
            neighbours = ring.neighbours(rank)
            if neighbours is not None:
                pairs.setdefault(neighbours, []).append(ring)
        for (prev, nxt), rings in pairs.items():
            links.append(RingLink(group.id, len(group.ranks), rank, prev, nxt,
                                  tuple(r.channel for r in rings), rings[0].evidence))
    return links


def describe(link: RingLink, zh: bool) -> str:
    channels = compact(link.channels)
    where = f"; {link.evidence.cite()}" if link.evidence else ""
    if zh:
        return (f"Rank {link.rank} 在 {link.group}（{link.size} 个 Rank，通道 {channels}{where}）的环上从 "
                f"{link.prev} 接收、向 {link.next} 发送：该通信器上的环形集合通信都经过 "
                f"{link.prev} → {link.rank} → {link.next}，会在这两条链路上停住。")
    return (f"On {link.group}'s ring ({link.size} ranks, channel(s) {channels}{where}) rank {link.rank} "
            f"receives from {link.prev} and sends to {link.next}: every ring collective on that communicator "
            f"passes {link.prev} → {link.rank} → {link.next} and stalls on those two links.")
