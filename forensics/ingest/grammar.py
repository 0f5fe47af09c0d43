"""Lark parsers for the grammars in `grammars/`, built lazily and cached.

Grammars ship as package data (`forensics.grammars`); from a source checkout
they are read from the top-level `grammars/` folder. Parsers are LALR with
the contextual lexer; lark's own cache keeps the built tables outside the
package (in the temp dir), so start-up does not pay for them twice.
"""

from __future__ import annotations

import functools
import os
from importlib import resources

import lark

_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT = os.path.normpath(os.path.join(_HERE, "..", "..", "grammars"))


def grammar_text(name: str) -> str:
    filename = name if name.endswith(".lark") else f"{name}.lark"
    try:
        return resources.files("forensics.grammars").joinpath(filename).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        with open(os.path.join(_CHECKOUT, filename), encoding="utf-8") as handle:
            return handle.read()


@functools.lru_cache(maxsize=None)
def parser(name: str, start: str = "start", transformer_factory=None) -> lark.Lark:
    """A cached LALR parser for grammars/<name>.lark.

    `transformer_factory` (a class or function returning a lark.Transformer)
    makes lark apply it inline while parsing: no tree is ever built, and
    no lark Tree or Token escapes the ingest layer.
    """
    transformer = transformer_factory() if transformer_factory is not None else None
    return lark.Lark(grammar_text(name), parser="lalr", lexer="contextual", start=start,
                     transformer=transformer, propagate_positions=False,
                     maybe_placeholders=False, cache=transformer is None)
