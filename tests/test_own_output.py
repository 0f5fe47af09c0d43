"""What forensics writes beside the evidence is not evidence: a report
written into the incident folder (`-o incident/report.json`), its HTML
report, watch's verdict summary. Analyzed again, the folder gives the same
verdict, and each of those files is named as skipped."""

from __future__ import annotations

import json
import shutil

from conftest import CORPUS
from helpers import cli_report


def test_the_tools_own_reports_are_skipped_and_change_nothing(tmp_path):
    folder = tmp_path / "incident"
    folder.mkdir()
    for name in ("snapshot_1.json", "snapshot_2.json"):
        shutil.copy(CORPUS / "snapshot_missing_rank" / name, folder)
    first = cli_report(folder, folder / "report.json")
    from forensics.cli import main

    main(["analyze", str(folder), "-f", "html", "-o", str(folder / "report.html"), "--no-plugins", "-q", "-j", "1"])
    (folder / "verdict.json").write_text(json.dumps({"schema": "forensics.watch-verdict/1", "verdict": "missing_rank",
                                                     "culprit_ranks": [2]}), encoding="utf-8")
    again = cli_report(folder, tmp_path / "again.json")
    assert (again["verdict"], again["culprit_ranks"]) == (first["verdict"], first["culprit_ranks"]) == ("missing_rank", [2])
    skipped = {d["path"] for d in again["diagnostics"] if "a report this tool wrote" in d["message"]}
    assert skipped == {"report.json", "report.html", "verdict.json"}
    assert not [d for d in again["diagnostics"] if d["path"] in skipped and "skipped" not in d["message"]]
