"""Build incidents in memory, the way the snapshot reader would."""

import os
import tempfile

from forensics import analyze_incident
from forensics.ingest.textio import InputError
from forensics.ingest import merge
from forensics.ingest.snapshot import states_from_mapping
from forensics.model import StuckSignal
from forensics.plugins import Plugins
from dataclasses import replace


def incident_of(states, groups=None, hung=False):
    facts = states_from_mapping(states, "snap.json")
    if groups:
        from forensics.model import ProcessGroup
        facts.groups.extend(ProcessGroup(str(g), "", tuple(r)) for g, r in groups.items())
    incident = merge([facts])
    if hung:
        incident = replace(incident, stuck=incident.stuck + (StuckSignal("cli_hung", "test"),))
    return incident


def report_of(states, groups=None, hung=False, plugins=None):
    return analyze_incident(incident_of(states, groups, hung), plugins or Plugins(autoload=False))


def mutate_lines(lines, mutations, inserts):
    """A copy of `lines` (bytes) after fuzz `mutations`, each `(kind, where,
    *arg)`: delete, duplicate, truncate to arg bytes, insert arg bytes, glue
    another line on, prefix arg; any other kind inserts `inserts[kind]`.
    Never empty."""
    lines = list(lines)
    for kind, where, *rest in mutations:
        i = where % len(lines)
        if kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "truncate":
            lines[i] = lines[i][:rest[0]]
        elif kind == "bytes":
            lines.insert(i, rest[0])
        elif kind == "glue":
            lines[i] = lines[i] + lines[rest[0] % len(lines)]
        elif kind == "prefix":
            lines[i] = rest[0] + lines[i]
        else:
            lines.insert(i, inserts[kind])
        if not lines:
            lines = [b""]
    return lines


def parse_bytes(reader, data: bytes, name: str):
    """What `reader` (a reader module) makes of `data` written to a file
    called `name`: its sniff is asked first, as discovery would; the Facts,
    or None where the reader refuses the file with an InputError."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, name)
        with open(path, "wb") as handle:
            handle.write(data)
        reader.sniff(path, data[:65536])
        try:
            return reader.parse(path, name)
        except InputError:
            return None


def cli_report(folder, out, *args) -> dict:
    """`forensics analyze FOLDER -f json -o OUT` as a user runs it (no plugins, one process), the report read back."""
    import json

    from forensics.cli import main

    main(["analyze", str(folder), "-f", "json", "-o", str(out), "--no-plugins", "-q", "-j", "1", *args])
    return json.loads(out.read_text(encoding="utf-8"))


def finding_rules(report: dict) -> set[str]:
    """The rules a JSON report's findings come from."""
    return {f["rule"] for f in report["findings"]}
