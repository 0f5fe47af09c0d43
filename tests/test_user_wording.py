"""User-facing text speaks to users: no wording from how the tool was made
("the original brief's scenario 1:", "the issue", "this session") in the
docs pages, the generated rule pages, the rules' and the message
catalogue's texts (the generated pages include what they quote of the
corpus), or the package's own help. The getting-started page installs what the README
installs."""

import re

import yaml

import forensics
from forensics import messages
from forensics.plugins import Plugins
from forensics.ruledocs import catalogue

from conftest import ROOT

INTERNAL = re.compile(
    r"\b(?:(?:the|original|our)\s+brief\b|brief's|scenario\s+\d+\b|the\s+issue\b|issue\s+#?\d+|"
    r"this\s+session|helper\s+session|lead\s+engineer|other\s+engineers?)", re.I)


def internal(texts):
    """(where, the phrase) of every internal phrase in (where, text) pairs."""
    return [(where, found.group(0)) for where, text in texts for found in INTERNAL.finditer(text or "")]


def test_the_pattern_catches_what_users_were_shown():
    assert internal([("p2p-circular-wait.md", "| `deadlock` | The original brief's scenario 1: |"),
                     ("scale.md", "the incident of the issue — for every rank"),
                     ("x", "The brief's third cause"), ("y", "written in this session")]) == [
        ("p2p-circular-wait.md", "original brief"), ("p2p-circular-wait.md", "scenario 1"),
        ("scale.md", "the issue"), ("x", "The brief"), ("y", "this session")]
    assert internal([("ok", "A brief stall of rank 3, in a scenario where two ranks wait")]) == []


def test_docs_pages_and_generated_reference_pages():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert any("reference/rules" in str(p) for p in pages)
    assert internal((str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in pages) == []


def test_rule_docs_of_every_rule():
    texts = []
    for doc in catalogue(Plugins(autoload=False)).values():
        texts += [(doc.id, t) for t in (doc.title, doc.title_zh, doc.explanation, doc.explanation_zh,
                                        doc.hint, doc.hint_zh)]
    assert len(texts) > 100 and internal(texts) == []


# What a catalogue entry quotes of the programs it knows (their own words, "to help you debug the issue"):
# not this project's wording.
QUOTED = {"match", "patterns", "variants", "example", "examples", "ok", "facts"}


def _own_words(node, where: str):
    """(where, text) of every string of a catalogue file but the program lines its entries quote."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in QUOTED:
                yield from _own_words(value, where)
    elif isinstance(node, list):
        for value in node:
            yield from _own_words(value, where)
    elif isinstance(node, str):
        yield where, node


def test_rule_files_and_message_catalogue_texts():
    rules = sorted((ROOT / "rules").glob("*.yaml"))
    assert internal((str(f.relative_to(ROOT)), f.read_text(encoding="utf-8")) for f in rules) == []
    catalogue_files = sorted((ROOT / "rules" / "messages").glob("*.yaml"))
    texts = [text for f in catalogue_files
             for text in _own_words(yaml.safe_load(f.read_text(encoding="utf-8")), str(f.relative_to(ROOT)))]
    assert len(texts) > 1000 and internal(texts) == []
    entries = messages.catalogue().entries
    assert internal((e.id, f"{e.en} {e.zh} {e.source}") for e in entries) == []


def test_the_package_help():
    assert internal([("forensics.__doc__", forensics.__doc__)]) == []


def _install_commands(text: str) -> list[str]:
    return [line.strip() for block in re.findall(r"```sh\n(.*?)```", text, re.S) for line in block.splitlines()
            if "pip install" in line and "pytest" in line]


def test_getting_started_installs_what_the_readme_installs():
    readme = _install_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    started = _install_commands((ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8"))
    assert len(readme) == 1 and started == readme
    extras = re.search(r"\[([a-z,]+)\]", readme[0]).group(1).split(",")
    assert "dask" in extras
    table = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8").split("Optional extras:", 1)[1]
    assert all(f"| `{extra}` |" in table for extra in extras)
