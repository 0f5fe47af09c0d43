"""Lark parsers for the grammars in `grammars/`, built lazily.

Grammars ship as package data (`forensics.grammars`); from a source checkout
they are read from the top-level `grammars/` folder. Parsers are LALR with
the contextual lexer. Building the tables of the NCCL and c10d grammars costs
about 0.1 s each, so the built tables are kept in the per-user cache
(`forensics.usercache`) as plain JSON, never as lark's own pickle cache: a
pickle in a shared temp dir is code another user can plant.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys

from .. import lazy, usercache

_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT = os.path.normpath(os.path.join(_HERE, "..", "..", "grammars"))
_TABLES_VERSION = 1


def grammar_text(name: str) -> str:
    from importlib import resources  # here: imports a run without lark input skips

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
    lark = lazy.lark
    text = grammar_text(name)
    options = dict(parser="lalr", lexer="contextual", start=start, propagate_positions=False,
                   maybe_placeholders=False)
    key = _tables_name(name, text, options)
    tables = usercache.read_json(key)
    if tables is not None:
        try:
            return lark.Lark._load_from_dict(_decode(tables["data"]), _decode(tables["memo"]),
                                             transformer=transformer)
        except Exception:  # tables of a form this lark does not read: built again below
            pass
    built = lark.Lark(text, transformer=transformer, **options)
    try:
        data, memo = built.memo_serialize([lark.lark.TerminalDef, lark.lark.Rule])
        # as lark's own cache does: options given again on load are not kept (the transformer is code)
        data["options"] = {k: v for k, v in data["options"].items() if k not in lark.lark._LOAD_ALLOWED_OPTIONS}
        usercache.write_json(key, {"data": _encode(data), "memo": _encode(memo)})
    except (TypeError, AttributeError, KeyError):
        pass  # a lark whose tables are not plain data: no cache
    return built


def _tables_name(name: str, text: str, options: dict) -> str:
    """The cache file of one grammar's tables: named by everything they depend on
    (grammar text, options, lark and Python versions), not by where we are installed."""
    digest = hashlib.sha256(repr((_TABLES_VERSION, text, sorted(options.items()), lazy.lark.__version__,
                                  sys.version_info[:2])).encode()).hexdigest()[:24]
    return f"lark-{name}-{digest}.json"


def _encode(value):
    """lark's serialized tables as JSON: mappings with keys other than strings
    become {"__items__": [[key, value], ...]}."""
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and "__items__" not in value:
            return {k: _encode(v) for k, v in value.items()}
        return {"__items__": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"not plain data: {type(value).__name__}")


def _decode(value):
    if isinstance(value, dict):
        if len(value) == 1 and "__items__" in value:
            return {_key(k): _decode(v) for k, v in value["__items__"]}
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _key(value):
    return tuple(_decode(value)) if isinstance(value, list) else _decode(value)


@functools.lru_cache(maxsize=None)
def _transformer(callbacks: type, inline: bool) -> type:
    """A `lark.Transformer` subclass with the methods of `callbacks` as its own."""
    namespace = {key: value for key, value in vars(callbacks).items() if key not in ("__dict__", "__weakref__")}
    made = type(callbacks.__name__, (lazy.lark.Transformer,), namespace)
    return lazy.lark.v_args(inline=True)(made) if inline else made
