"""What one artifact contributes, before ranks from many artifacts are merged."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Diagnostic, Evidence, MessageHit, ProcessDump, ProcessGroup, ProcessRecord, RankState, StuckSignal


@dataclass(slots=True)
class Facts:
    kind: str
    path: str
    ranks: list[RankState] = field(default_factory=list)
    groups: list[ProcessGroup] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    stuck: list[StuckSignal] = field(default_factory=list)
    # Stack dumps (py-spy, gdb): attributed to ranks and classified in ingest.
    processes: list[ProcessDump] = field(default_factory=list)
    # (host, pid, rank, evidence) pairs this artifact states: a collector's
    # pid map, a launcher's failure summary, NCCL init lines.
    pid_ranks: list[tuple[str, int, int, Evidence]] = field(default_factory=list)
    # Log-derived facts per process (NCCL, c10d, launcher logs).
    records: list[ProcessRecord] = field(default_factory=list)
    # NCCL communicator members as init lines state them:
    # (group id, rank in that communicator, communicator size, host, pid, evidence).
    # The world communicator (size == world) maps host:pid to global rank.
    comm_members: list[tuple[str, int, int, str, int, Evidence]] = field(default_factory=list)
    # NCCL rings: (group id, channel, ranks in ring order as communicator
    # ranks, evidence of the line that states it).
    rings: list[tuple[str, int, tuple[int, ...], Evidence]] = field(default_factory=list)
    # Lines that looked like this kind's lines but could not be read, and all
    # lines read, per file: the report shows the counts, nothing is dropped silently.
    # NCCL: each process's view of each communicator it called on (what its
    # COLL lines show under one pointer), for telling which pointers of
    # several processes are one communicator (forensics.ingest.nccl.CommView).
    comm_views: list = field(default_factory=list)
    # Lines the message catalogue (rules/messages/) recognizes: what PyTorch,
    # NCCL and Gloo state outright about a timeout, a dead peer, a mismatch.
    messages: list[MessageHit] = field(default_factory=list)
    unrecognized: int = 0
    lines_read: int = 0
    # When the artifact was taken (epoch seconds), for ordering snapshots of
    # the same ranks; None when the artifact does not say.
    observed_at: float | None = None

    def diag(self, line: int, message: str, severity: str = "warning") -> None:
        self.diagnostics.append(Diagnostic(self.path, line, message, severity))
