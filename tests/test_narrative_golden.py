"""The root-cause narrative of every corpus incident, English and Chinese,
against a golden file: the words are deterministic, and a change to them is
a reviewed diff, not an accident.

    FORENSICS_UPDATE_GOLDEN=1 python -m pytest tests/test_narrative_golden.py

rewrites the files (then read the diff before committing it).
"""

import os

import pytest
import yaml

import forensics
from forensics.ingest.textio import InputError, NothingReadable
from forensics.plugins import Plugins
from forensics.replay import METADATA

from conftest import CORPUS, ROOT, corpus_report

GOLDEN = ROOT / "tests" / "golden"
INCIDENTS = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.yaml").is_file())


@pytest.mark.parametrize("incident", INCIDENTS)
def test_narrative_matches_golden(incident):
    expected = yaml.safe_load((CORPUS / incident / "expected.yaml").read_text())
    args = expected.get("args") or {}
    first = corpus_report(incident)
    if isinstance(first, InputError):
        exc = first
        # A known miss the tool cannot read yet: no narrative to keep, and the replay lists it.
        assert expected.get("xfail") and isinstance(exc, NothingReadable), exc
        pytest.xfail(f"unreadable, a known miss: {expected['xfail']}")
    again = forensics.analyze(CORPUS / incident, hung=bool(args.get("hung")), jobs=1,
                              plugins=Plugins(autoload=False), exclude=METADATA)
    for lang in ("en", "zh"):
        text = first.root_cause.narrative[lang] + "\n"
        assert text == again.root_cause.narrative[lang] + "\n"  # deterministic
        golden = GOLDEN / f"{incident}.{lang}.txt"
        if os.environ.get("FORENSICS_UPDATE_GOLDEN"):
            golden.write_text(text, encoding="utf-8")
        assert golden.is_file(), f"no golden file {golden.name}: run with FORENSICS_UPDATE_GOLDEN=1"
        assert text == golden.read_text(encoding="utf-8"), f"{golden.name} differs"
