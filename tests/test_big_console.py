"""A big console read from both ends: NCCL INFO lines for hours, c10d's timeouts at the end.

Each rank's console holds its NCCL INFO,COLL lines and, on every rank but
the one stuck elsewhere, the watchdog's timeout as its last lines. Above
the c10d reader's big-file size the middle is not read; the verdict must
still come from the logs alone (no --hung), and the tail must grow past
NCCL lines printed after the timeout.
"""

from __future__ import annotations

import os
import sys

from forensics import analyze
from forensics.ingest import torchlog
from forensics.plugins import Plugins

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from gen_nccl_logs import generate  # noqa: E402


def test_timeouts_at_the_end_of_big_consoles_decide_without_hung(tmp_path):
    made = generate(str(tmp_path), ranks=4, size=torchlog.BIG_FILE + (2 << 20), per_node=2, stop_rank=2,
                    console=True)
    # Rank 0 went on printing NCCL lines after its timeout (the network's, not calls): the tail's first
    # window holds no c10d line.
    network = next(line for line in open(made["paths"][0], encoding="utf-8") if "NCCL INFO Using network" in line)
    filler = [network] * 12000
    with open(made["paths"][0], "a", encoding="utf-8") as out:
        out.writelines(filler)
    assert sum(map(len, filler)) > torchlog.BIG_TAIL
    report = analyze(str(tmp_path), jobs=1, plugins=Plugins(autoload=False))
    assert (report.verdict, report.culprit_ranks) == ("missing_rank", [2])
    stuck = [s for s in report.decided_by if s.evidence is not None]
    assert stuck and all(s.evidence.line < 0 for s in stuck if "Watchdog" in s.evidence.text)
    assert any(s.evidence.path == "rank0.console.log" for s in stuck)
    notes = [d for d in report.incident.diagnostics if "not read by the c10d reader" in d.message]
    # the consoles the c10d reader read: those with c10d lines (rank 2's holds NCCL lines only)
    assert {d.path for d in notes} == {f"rank{r}.console.log" for r in (0, 1, 3)}
