"""Facts files: one node's artifacts, parsed where they lie
(`forensics parse DIR --out FILE`), read by `analyze` beside raw artifacts.

A facts file holds what parsing the node's files produced — the artifacts
found, each one's facts or the error that stopped it, and the files
skipped and why — in the encoding of forensics.ingest.wire. `analyze`
merges those facts as if it had parsed the files itself: the report cites
the original files (their paths as `parse` saw them, under `--prefix`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import limits
from .. import model as m
from . import wire
from .facts import Facts
from .reader import reader_hooks
from .textio import InputError, read_bytes

KIND = "forensics-facts"


@dataclass(slots=True)
class Bundle:
    """What one facts file (or one Dask task) holds: artifacts, and per
    artifact its Facts or an error tuple ("error", path, message, line), in
    the order discovery found them; `diagnostics` are the files skipped."""

    artifacts: list = field(default_factory=list)
    results: list = field(default_factory=list)
    diagnostics: list = field(default_factory=list)
    plugin_diagnostics: list = field(default_factory=list)

    def body(self) -> tuple:
        return (self.artifacts, self.results, self.diagnostics, self.plugin_diagnostics)


def body_spec() -> tuple:
    error = ("fixed", (("str",), ("str",), ("str",), ("int",)))
    diag = ("list", ("class", m.Diagnostic))
    return ("fixed", (("list", ("class", m.Artifact)), ("list", ("union", (("class", Facts), error))), diag, diag))


def to_bytes(bundle: Bundle, **header) -> bytes:
    return wire.dumps(header, bundle.body())


def from_bytes(data: bytes, display: str) -> tuple[dict, Bundle]:
    header, body = wire.loads(data, display, body_spec(), limits.current().decompressed_bytes)
    artifacts, results, diagnostics, plugin_diagnostics = body
    if len(artifacts) != len(results):
        raise InputError(display, f"facts file holds {len(artifacts)} artifacts but {len(results)} results", 3)
    return header, Bundle(list(artifacts), list(results), list(diagnostics), list(plugin_diagnostics))


def sniff(path: str, head: bytes) -> bool:
    return head.startswith(wire.MAGIC)


def parse(path: str, display: str) -> Bundle:
    cap = limits.current().decompressed_bytes
    data = read_bytes(path, cap + 1)
    if len(data) > cap:
        raise InputError(display, f"larger than the decompressed-bytes limit ({cap >> 20} MiB): not read")
    _, bundle = from_bytes(data, display)
    return bundle


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)},
    lambda path, head: KIND if sniff(path, head) else None)

