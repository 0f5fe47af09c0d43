"""JSON with positions: the C decoder for values, a short walk by hand for
the one or two levels whose file lines we cite (snapshot ranks, py-spy
thread objects and frames). The standard library gives no positions."""

from __future__ import annotations

import json
import re
from json.decoder import JSONDecodeError, scanstring

WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def skip_ws(text: str, pos: int) -> int:
    return WS.match(text, pos).end()


def decode_at(text: str, pos: int):
    """(value, end) of the JSON value at `pos`, by the C scanner."""
    try:
        return _DECODER.raw_decode(text, pos)
    except JSONDecodeError:
        raise
    except ValueError as exc:  # e.g. an integer too long to convert
        raise JSONDecodeError(str(exc), text, pos) from None


def walk_object(text: str, pos: int, special=None):
    """The object at `pos`: (values, [(key, offset of the key)], end).

    `special` maps a key to a function (text, pos) -> (value, end) used for
    that key's value instead of the C decoder (to walk one level deeper).
    Duplicate keys keep the last value and appear twice in the offsets.
    """
    if text[pos:pos + 1] != "{":
        raise JSONDecodeError("expected an object", text, pos)
    values: dict = {}
    offsets: list = []
    pos = skip_ws(text, pos + 1)
    if text[pos:pos + 1] == "}":
        return values, offsets, pos + 1
    while True:
        if text[pos:pos + 1] != '"':
            raise JSONDecodeError("expected a quoted key", text, pos)
        key_pos = pos
        key, pos = scanstring(text, pos + 1)
        pos = skip_ws(text, pos)
        if text[pos:pos + 1] != ":":
            raise JSONDecodeError("expected ':'", text, pos)
        pos = skip_ws(text, pos + 1)
        walker = special.get(key) if special else None
        value, pos = walker(text, pos) if walker is not None else decode_at(text, pos)
        values[key] = value
        offsets.append((key, key_pos))
        pos = skip_ws(text, pos)
        sep = text[pos:pos + 1]
        if sep == ",":
            pos = skip_ws(text, pos + 1)
            continue
        if sep == "}":
            return values, offsets, pos + 1
        raise JSONDecodeError("expected ',' or '}'", text, pos)


def walk_array(text: str, pos: int, item=None):
    """The array at `pos`: (items, [offset of each item], end). `item` is a
    function (text, pos) -> (value, end) for each element, default the C decoder."""
    if text[pos:pos + 1] != "[":
        raise JSONDecodeError("expected a list", text, pos)
    items, starts = [], []
    pos = skip_ws(text, pos + 1)
    if text[pos:pos + 1] == "]":
        return items, starts, pos + 1
    while True:
        starts.append(pos)
        value, pos = (item or decode_at)(text, pos)
        items.append(value)
        pos = skip_ws(text, pos)
        sep = text[pos:pos + 1]
        if sep == ",":
            pos = skip_ws(text, pos + 1)
            continue
        if sep == "]":
            return items, starts, pos + 1
        raise JSONDecodeError("expected ',' or ']'", text, pos)


class LineCounter:
    """Offset → 1-based line, cheap for increasing offsets (one pass overall)."""

    def __init__(self, text: str):
        self.text = text
        self.offset = 0
        self.line = 1

    def __call__(self, pos: int) -> int:
        if pos < self.offset:
            return self.text.count("\n", 0, pos) + 1
        self.line += self.text.count("\n", self.offset, pos)
        self.offset = pos
        return self.line
