"""The two parser hooks every reader module exposes, built from its own
sniff and parse functions, so each reader states only what is its own."""

from __future__ import annotations

from typing import Callable

from ..hookspecs import hookimpl


def markers_hook(markers: tuple[bytes, ...]):
    """A module's `forensics_sniff_markers`: the byte strings that mark its lines."""
    @hookimpl
    def forensics_sniff_markers():
        return markers

    return forensics_sniff_markers


def reader_hooks(parsers: dict[str, Callable], sniff: Callable[[str, bytes], str | None]):
    """(forensics_sniff, forensics_parse) for a module to bind at top level.

    `parsers` maps each kind the module reads to a function of the Artifact;
    `sniff(path, head)` returns the kind the file is, or None.
    """
    @hookimpl
    def forensics_sniff(path, head):
        return sniff(path, head)

    @hookimpl
    def forensics_parse(artifact):
        parse = parsers.get(artifact.kind)
        return parse(artifact) if parse is not None else None

    return forensics_sniff, forensics_parse
