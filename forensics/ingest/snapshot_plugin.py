"""Registers the snapshot reader through the public parser hooks."""

from __future__ import annotations

from ..hookspecs import hookimpl
from . import snapshot


@hookimpl
def forensics_sniff(path, head):
    return snapshot.KIND if snapshot.sniff(path, head) else None


@hookimpl
def forensics_parse(artifact):
    if artifact.kind != snapshot.KIND:
        return None
    return snapshot.parse(artifact.path, artifact.display)
