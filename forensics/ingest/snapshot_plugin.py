"""Registers the snapshot reader through the public parser hooks."""

from __future__ import annotations

from . import snapshot
from .reader import reader_hooks

forensics_sniff, forensics_parse = reader_hooks(
    {snapshot.KIND: lambda artifact: snapshot.parse(artifact.path, artifact.display)},
    lambda path, head: snapshot.KIND if snapshot.sniff(path, head) else None)
