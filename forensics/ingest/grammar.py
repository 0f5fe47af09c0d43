"""Lark parsers for the grammars in `grammars/`, built lazily and cached.

Grammars ship as package data (`forensics.grammars`); from a source checkout
they are read from the top-level `grammars/` folder. Parsers are LALR with
the contextual lexer; lark's own cache keeps the built tables outside the
package (in the temp dir), so start-up does not pay for them twice.
"""

from __future__ import annotations

import functools
import os

from .. import lazy

_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT = os.path.normpath(os.path.join(_HERE, "..", "..", "grammars"))


def grammar_text(name: str) -> str:
    from importlib import resources  # here: 5-7 ms of imports a run without lark input skips

    filename = name if name.endswith(".lark") else f"{name}.lark"
    try:
        return resources.files("forensics.grammars").joinpath(filename).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        with open(os.path.join(_CHECKOUT, filename), encoding="utf-8") as handle:
            return handle.read()


@functools.lru_cache(maxsize=None)
def parser(name: str, start: str = "start", callbacks: type | None = None, inline: bool = False):
    """A cached LALR parser for grammars/<name>.lark.

    `callbacks`: a plain class whose methods are named after grammar rules;
    lark applies them while parsing (as a `lark.Transformer` made from
    them, with `v_args(inline=True)` when `inline`), so no tree is ever
    built and no lark Tree or Token escapes the ingest layer. A plain
    class rather than a Transformer subclass, so that importing a reader
    does not import lark.
    """
    transformer = _transformer(callbacks, inline)() if callbacks is not None else None
    options = dict(parser="lalr", lexer="contextual", start=start, transformer=transformer,
                   propagate_positions=False, maybe_placeholders=False)
    try:  # lark keeps the analysed tables in the temp dir; the transformer is given again on load
        return lazy.lark.Lark(grammar_text(name), cache=True, **options)
    except lazy.lark.exceptions.ConfigurationError:  # an older lark: no cache beside a transformer
        return lazy.lark.Lark(grammar_text(name), **options)


@functools.lru_cache(maxsize=None)
def _transformer(callbacks: type, inline: bool) -> type:
    """A `lark.Transformer` subclass with the methods of `callbacks` as its own."""
    namespace = {key: value for key, value in vars(callbacks).items() if key not in ("__dict__", "__weakref__")}
    made = type(callbacks.__name__, (lazy.lark.Transformer,), namespace)
    return lazy.lark.v_args(inline=True)(made) if inline else made
