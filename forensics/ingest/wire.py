"""Facts on the wire: what a file's parse produced, in a compact, versioned,
safe encoding — for facts files (`forensics parse DIR --out FILE`) and for
the results Dask workers send back to `analyze --scheduler`.

Safe: the encoding is JSON (zlib-compressed), and decoding builds only the
model's own dataclasses and named tuples, field by field, checking every
value against the field's declared type (and rank numbers against
model.MAX_RANKS). No code named by the input runs, and a value of the wrong
shape is an InputError naming the file, never an object a rule trips over
later. Nothing read from input is ever pickled or unpickled.

Compact: each value is a JSON value; a list is ["L", …], a tuple ["T", …],
a dict ["D", k, v, …], a dataclass [class number, field values…], and an
object that appears again (a group's members, shared by ten thousand ranks'
dumps; one Evidence cited twice) ["R", n]: the n-th composite completed so
far. Composites (but the empty tuple) are numbered as they are completed
(children first), on both sides.

Versioned: the header names the format version and a fingerprint of the
classes and fields it encodes. A file from another layout is refused with a
message that says what to do (parse the artifacts again with this version).
"""

from __future__ import annotations

import dataclasses
import json
import typing
import zlib
from collections.abc import Mapping

from .. import __version__
from .. import model as m
from .facts import Facts
from .textio import InputError

FORMAT = "forensics-facts"
VERSION = 1
MAGIC = b"FORENSICS-FACTS\n"
MAX_DEPTH = 64

# Integer fields that hold global ranks (or a rank-sized count): checked
# against model.MAX_RANKS as the readers check them. Not the hints (a
# number in a file's name, a `rank` local, a launcher's local rank): the
# readers keep those as found and attribution judges them.
_RANK_FIELDS = frozenset({"rank", "ranks", "peers", "peers_in_errors", "order", "declared_waits"})
# Facts' tuples by position: (host, pid, rank, evidence); (group, comm rank, comm size, host, pid, evidence).
_TUPLE_RANKS = {("Facts", "pid_ranks"): {2}, ("Facts", "comm_members"): {1, 2}}


def _roots() -> list[type]:
    from .nccl import CommView
    return [Facts, m.Artifact, m.Diagnostic, CommView]


# ------------------------------------------------------------------ the classes and their field types

class _Schema:
    """Every class the encoding knows, numbered, with a checker per field."""

    def __init__(self):
        self.classes: list[type] = []
        self.number: dict[type, int] = {}
        self.fields: list[tuple[str, ...]] = []
        self.specs: list[tuple] = []
        pending = list(_roots())
        while pending:
            cls = pending.pop(0)
            if cls in self.number:
                continue
            self.number[cls] = len(self.classes)
            self.classes.append(cls)
            hints = typing.get_type_hints(cls, vars(__import__(cls.__module__, fromlist=["_"])))
            names = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) \
                else tuple(cls._fields)
            self.fields.append(names)
            specs = []
            for name in names:
                spec = self._spec(hints.get(name, object), pending)
                if name in _RANK_FIELDS:
                    spec = _ranked(spec)
                positions = _TUPLE_RANKS.get((cls.__name__, name))
                if positions:
                    spec = _ranked_positions(spec, positions)
                if cls is Facts and name == "comm_views":
                    from .nccl import CommView
                    spec = ("list", ("class", CommView))
                specs.append(spec)
            self.specs.append(tuple(specs))
        layout = ";".join(f"{c.__module__}.{c.__qualname__}({','.join(f)})" for c, f in zip(self.classes, self.fields))
        import hashlib  # here, not at import: loading OpenSSL would weigh on every run's start-up

        self.fingerprint = hashlib.sha256(layout.encode()).hexdigest()[:16]

    def _spec(self, hint, pending: list) -> tuple:
        if hint is type(None):
            return ("none",)
        if hint in (int, str, float, bool):
            return (hint.__name__,)
        if hint is object or hint is typing.Any:
            return ("any",)
        if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or _is_named_tuple(hint)):
            pending.append(hint)
            return ("class", hint)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            return ("union", tuple(self._spec(a, pending) for a in args))
        if hint is tuple:  # a bare `tuple` annotation: any items
            return ("tuple", ("any",))
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return ("tuple", self._spec(args[0], pending))
            if not args:
                return ("tuple", ("any",))
            return ("fixed", tuple(self._spec(a, pending) for a in args))
        if origin is list or hint is list:
            return ("list", self._spec(args[0], pending) if args else ("any",))
        if origin in (dict, Mapping) or hint in (dict, Mapping):
            return ("dict", *(self._spec(a, pending) for a in args)) if args else ("dict", ("any",), ("any",))
        raise TypeError(f"forensics.ingest.wire: no encoding for the type {hint!r}")


def _is_named_tuple(cls) -> bool:
    return issubclass(cls, tuple) and hasattr(cls, "_fields")


def _ranked(spec: tuple) -> tuple:
    """The same spec with every int a rank."""
    kind = spec[0]
    if kind == "int":
        return ("rank",)
    if kind in ("tuple", "list", "opt"):
        return (kind, _ranked(spec[1]))
    if kind in ("union", "fixed"):
        return (kind, tuple(_ranked(s) for s in spec[1]))
    return spec


def _ranked_positions(spec: tuple, positions: set[int]) -> tuple:
    if spec[0] == "list":
        return ("list", _ranked_positions(spec[1], positions))
    if spec[0] == "fixed":
        return ("fixed", tuple(_ranked(s) if i in positions else s for i, s in enumerate(spec[1])))
    return spec


_SCHEMA: _Schema | None = None


def schema() -> _Schema:
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = _Schema()
    return _SCHEMA


# ------------------------------------------------------------------ encoding

def encode_value(value) -> object:
    """`value` (facts, artifacts, diagnostics, lists and tuples of them) as
    one JSON-able value."""
    numbers = schema().number
    memo: dict[int, int] = {}
    keep: list = []  # what memo's ids point to stays alive while encoding

    def enc(v):
        if v is None or isinstance(v, (bool, str, float, int)):
            return v
        if v == () and isinstance(v, tuple) and numbers.get(type(v)) is None:
            return ["T"]  # not numbered, on either side: ["T"] is shorter than a reference
        key = id(v)
        if key in memo:
            return ["R", memo[key]]
        cls = type(v)
        if cls is not tuple and isinstance(v, tuple) and numbers.get(cls) is None:
            cls = tuple  # a tuple subclass no schema names (a frames tuple shared by dumps) is a tuple on the wire
        number = numbers.get(cls)
        if number is not None:
            if dataclasses.is_dataclass(v):
                out = [number, *(enc(getattr(v, f)) for f in schema().fields[number])]
            else:
                out = [number, *(enc(x) for x in v)]
        elif isinstance(v, tuple):
            out = ["T", *(enc(x) for x in v)]
        elif isinstance(v, list):
            return ["L", *(enc(x) for x in v)]
        elif isinstance(v, Mapping):
            out = ["D"]
            for k, x in v.items():
                out.append(enc(k))
                out.append(enc(x))
            return out
        else:
            raise TypeError(f"forensics.ingest.wire: cannot encode a {cls.__name__}")
        memo[key] = len(memo)
        keep.append(v)
        return out

    return enc(value)


def dumps(header: dict, body) -> bytes:
    """A facts file: MAGIC, one JSON header line, then the zlib-compressed JSON body."""
    head = {"format": FORMAT, "version": VERSION, "layout": schema().fingerprint, "forensics": __version__,
            **header}
    text = json.dumps(encode_value(body), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n" + zlib.compress(text.encode(), 3)


# ------------------------------------------------------------------ decoding

class _Bad(Exception):
    pass


def decode_value(data, spec: tuple) -> object:
    """The value `data` encodes, checked against `spec`; _Bad when it does not fit."""
    return _decoder(spec)(data, _Memo())


class _Memo:
    """The composites decoded so far (what ["R", n] points to), and which
    of them were already checked against which spec where referenced again."""

    __slots__ = ("items", "checked")

    def __init__(self):
        self.items: list = []
        self.checked: set = set()


_DECODERS: dict = {}


def _decoder(spec: tuple):
    """A function (value, memo) -> decoded value for `spec`, built once per spec.
    The model has no recursive types, so the specs bound the nesting; only
    `object` fields (plain values) count their depth."""
    found = _DECODERS.get(spec)
    if found is None:
        found = _DECODERS[spec] = _build(spec)
    return found


def _ref(v, memo: _Memo, spec: tuple):
    if len(v) != 2 or type(v[1]) is not int or not 0 <= v[1] < len(memo.items):
        raise _Bad("a reference to nothing")
    key = (v[1], spec)
    found = memo.items[v[1]]
    if key not in memo.checked:
        _check(found, spec)
        memo.checked.add(key)
    return found


def _build(spec: tuple):
    kind = spec[0]
    if kind == "int" or kind == "rank":
        ranked = kind == "rank"
        low, high = (0, m.MAX_RANKS) if ranked else (-(1 << 63), 1 << 63)

        def dec_int(v, memo):
            if type(v) is int and low <= v < high:
                return v
            if type(v) is int:
                raise _Bad(f"rank {v} is beyond {m.MAX_RANKS:,}" if ranked and v >= 0 else
                           f"{v} where {'a rank' if ranked else 'an integer'} belongs" if ranked
                           else "an integer beyond 64 bits")
            raise _Bad(f"{_what(v)} where an integer belongs")
        return dec_int
    if kind in ("str", "bool", "none", "float"):
        types = {"str": (str,), "bool": (bool,), "none": (type(None),), "float": (float, int)}[kind]

        def dec_plain_type(v, memo):
            if type(v) in types:
                return v
            raise _Bad(f"{_what(v)} where {_name(spec)} belongs")
        return dec_plain_type
    if kind == "any":
        return lambda v, memo: _plain(v, memo, 0)
    if kind == "union":
        options = [(option, _decoder(option)) for option in spec[1]]
        others = [(option, decode) for option, decode in options if option[0] != "none"]
        if len(others) == 1 and len(options) == 2:  # X | None: most fields
            decode_other = others[0][1]

            def dec_optional(v, memo):
                return None if v is None else decode_other(v, memo)
            return dec_optional

        def dec_union(v, memo):
            said = []
            for option, decode in options:
                try:
                    return decode(v, memo)
                except _Bad as exc:
                    said.append(str(exc))
            # the option of the value's own kind says what is wrong inside it
            for (option, _), why in zip(options, said):
                if _same_kind(v, option):
                    raise _Bad(why)
            raise _Bad(f"{_what(v)} where one of {', '.join(_name(o) for o, _ in options)} belongs")
        return dec_union
    if kind == "list":
        item = _decoder(spec[1])

        def dec_list(v, memo):
            if type(v) is not list or not v or v[0] != "L":
                raise _Bad(f"{_what(v)} where a list belongs")
            return [item(x, memo) for x in v[1:]]
        return dec_list
    if kind == "dict":
        key, value = _decoder(spec[1]), _decoder(spec[2])

        def dec_dict(v, memo):
            if type(v) is not list or not v or v[0] != "D" or len(v) % 2 != 1:
                raise _Bad(f"{_what(v)} where a mapping belongs")
            return {_hashable(key(v[i], memo)): value(v[i + 1], memo) for i in range(1, len(v), 2)}
        return dec_dict
    if kind == "tuple":
        item = _decoder(spec[1])

        def dec_tuple(v, memo):
            if type(v) is list and v:
                tag = v[0]
                if tag == "T":
                    if len(v) == 1:
                        return ()
                    out = tuple([item(x, memo) for x in v[1:]])
                    memo.items.append(out)
                    return out
                if tag == "R":
                    return _ref(v, memo, spec)
            raise _Bad(f"{_what(v)} where a tuple belongs")
        return dec_tuple
    if kind == "fixed":
        items = [_decoder(s) for s in spec[1]]
        size = len(items)

        def dec_fixed(v, memo):
            if type(v) is list and v:
                tag = v[0]
                if tag == "T" and len(v) - 1 == size:
                    out = tuple([decode(x, memo) for decode, x in zip(items, v[1:])])
                    if size:
                        memo.items.append(out)
                    return out
                if tag == "R":
                    return _ref(v, memo, spec)
            raise _Bad(f"{_what(v)} where a tuple of {size} belongs")
        return dec_fixed
    if kind == "class":
        cls = spec[1]
        sch = schema()
        number = sch.number[cls]
        names = sch.fields[number]
        fields = list(zip([_decoder(s) for s in sch.specs[number]], names))
        size = len(names)
        if dataclasses.is_dataclass(cls):
            setters = [getattr(cls, name).__set__ for name in names]  # the slots themselves (frozen or not)
            new = object.__new__

            def make(values):
                out = new(cls)
                for setter, value in zip(setters, values):
                    setter(out, value)
                return out
        else:
            make = cls._make

        def dec_class(v, memo):
            if type(v) is list and v:
                tag = v[0]
                if tag == number and len(v) - 1 == size:
                    out = make([decode(x, memo) for (decode, _), x in zip(fields, v[1:])])
                    memo.items.append(out)
                    return out
                if tag == "R":
                    return _ref(v, memo, spec)
                if tag == number:
                    raise _Bad(f"a {cls.__name__} of {len(v) - 1} fields; it has {size}")
            raise _Bad(f"{_what(v)} where a {cls.__name__} belongs")
        return dec_class
    raise _Bad(f"no decoding for {_name(spec)}")


def _plain(v, memo: _Memo, depth: int):
    """An `object` field (a message's facts): plain values and tuples of them."""
    if depth > MAX_DEPTH:
        raise _Bad("nested too deeply")
    if v is None or type(v) in (bool, str, float):
        return v
    if type(v) is int:
        if not -(1 << 63) <= v < 1 << 63:
            raise _Bad("an integer beyond 64 bits")
        return v
    if type(v) is list and v and v[0] == "T":
        if len(v) == 1:
            return ()
        out = tuple(_plain(x, memo, depth + 1) for x in v[1:])
        memo.items.append(out)
        return out
    if type(v) is list and v and v[0] == "R":
        return _ref(v, memo, ("any",))
    raise _Bad(f"{_what(v)} where a plain value belongs")


def _check(found, spec: tuple, depth: int = 0) -> None:
    """An object referenced again fits where it is referenced this time."""
    if depth > MAX_DEPTH:
        raise _Bad("nested too deeply")
    kind = spec[0]
    sch = schema()
    if kind == "class":
        if type(found) is not spec[1]:
            raise _Bad(f"a reference to a {type(found).__name__} where a {spec[1].__name__} belongs")
    elif kind == "union":
        for option in spec[1]:
            try:
                return _check(found, option, depth)
            except _Bad:
                continue
        raise _Bad(f"a reference to a {type(found).__name__} where one of "
                   f"{', '.join(_name(o) for o in spec[1])} belongs")
    elif kind in ("tuple", "fixed"):
        if type(found) is not tuple:
            raise _Bad(f"a reference to a {type(found).__name__} where a tuple belongs")
        if kind == "fixed" and len(found) != len(spec[1]):
            raise _Bad(f"a reference to a tuple of {len(found)} where one of {len(spec[1])} belongs")
        for i, x in enumerate(found):
            item = spec[1] if kind == "tuple" else spec[1][i]
            if type(x) is tuple or type(x) in sch.number:
                _check(x, item, depth + 1)
            else:
                _decoder(item)(x, _Memo())  # a plain value: checked as it would be decoded
    elif kind == "any":
        if type(found) is not tuple:
            raise _Bad(f"a reference to a {type(found).__name__} where a plain value belongs")
        for x in found:
            if type(x) is tuple:
                _check(x, spec, depth + 1)
    else:
        raise _Bad(f"a reference where {_name(spec)} belongs")


def _same_kind(v, spec: tuple) -> bool:
    kind = spec[0]
    if isinstance(v, list):
        tag = v[0] if v else None
        return ((kind == "class" and tag == schema().number.get(spec[1])) or (kind in ("tuple", "fixed") and tag == "T")
                or (kind == "list" and tag == "L") or (kind == "dict" and tag == "D"))
    return (kind in ("int", "rank") and type(v) is int) or (kind == "str" and type(v) is str)


def _hashable(key):
    try:
        hash(key)
    except TypeError:
        raise _Bad("a mapping key that is not a plain value") from None
    return key


def _what(v) -> str:
    if isinstance(v, list):
        return f"[{v[0]!r}, …]" if v else "[]"
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _name(spec: tuple) -> str:
    kind = spec[0]
    if kind == "class":
        return f"a {spec[1].__name__}"
    return {"int": "an integer", "rank": "a rank", "str": "a string", "float": "a number", "bool": "true or false",
            "none": "null", "list": "a list", "dict": "a mapping", "tuple": "a tuple", "fixed": "a tuple",
            "any": "a plain value", "union": "one of several"}.get(kind, kind)


def loads(data: bytes, display: str, body_spec: tuple, max_bytes: int) -> tuple[dict, object]:
    """(header, body) of a facts file; InputError for anything else."""
    if not data.startswith(MAGIC):
        raise InputError(display, "not a forensics facts file (no FORENSICS-FACTS line)", 1)
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise InputError(display, "facts file cut short: no header", 2)
    try:
        header = json.loads(data[len(MAGIC):end])
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InputError(display, "facts file header is not JSON naming the forensics-facts format", 2)
    version, layout = header.get("version"), header.get("layout")
    if version != VERSION or layout != schema().fingerprint:
        made_by = str(header.get("forensics", "an unknown version"))[:40]
        raise InputError(display, f"facts file of format version {str(version)[:20]} (layout {str(layout)[:20]}), "
                                  f"written by forensics {made_by}; this forensics {__version__} reads version "
                                  f"{VERSION} (layout {schema().fingerprint}): parse the artifacts again with "
                                  f"this version (`forensics parse DIR --out FILE`)", 2)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data[end + 1:], max_bytes + 1)
    except zlib.error as exc:
        raise InputError(display, f"facts file body is not zlib data: {exc}", 3) from None
    if len(raw) > max_bytes or inflater.unconsumed_tail:
        raise InputError(display, f"facts file body decompresses past {max_bytes >> 20} MiB (the "
                                  f"decompressed-bytes limit, --limit decompressed-bytes=N)", 3)
    if not inflater.eof:
        raise InputError(display, "facts file body cut short", 3)
    try:
        value = json.loads(raw)
    except RecursionError:
        raise InputError(display, "facts file body nested too deeply", 3) from None
    except ValueError as exc:
        raise InputError(display, f"facts file body is not JSON: {exc}", 3) from None
    try:
        return header, decode_value(value, body_spec)
    except _Bad as exc:
        raise InputError(display, f"facts file body does not hold what this version writes: {exc}", 3) from None
    except RecursionError:
        raise InputError(display, "facts file body nested too deeply", 3) from None


def spec_of(hint) -> tuple:
    """The checker spec of a type (e.g. list[Facts]) for decode_value."""
    return schema()._spec(hint, [])
