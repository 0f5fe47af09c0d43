"""The parser hooks every reader module exposes, built from its own
sniff and parse functions, so each reader states only what is its own.

Which reader claims a file is the order pluggy calls `forensics_sniff` in,
never one reader asking another's sniffer: every plain sniffer answers for
its own format (a `tryfirst` one first); a reader that takes only what
others leave (`yielding_sniff`) is a wrapper that sees their answers."""

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


def yielding_sniff(sniff: Callable[[str, bytes], str | None], yields_to: frozenset[str], innermost: bool = False):
    """A module's `forensics_sniff` for a reader that claims a file only
    when no reader of the kinds `yields_to` claimed it.

    It is a pluggy wrapper: its `yield` returns the kinds the plain
    sniffers answered for this sample, and its claim goes first in that
    list. `innermost` (pluggy's `trylast`) makes it the first wrapper to
    see them, so an ordinary wrapper that yields to its kind sees its
    claim in turn. (Bound to any name: a module may have a plain sniffer too.)"""
    @hookimpl(wrapper=True, trylast=innermost, specname="forensics_sniff")
    def forensics_sniff(path, head):
        kinds = yield
        if not yields_to.intersection(kinds):
            kind = sniff(path, head)
            if kind:
                kinds.insert(0, kind)
        return kinds

    return forensics_sniff
