"""Loading pickles from other people's machines as plain data, and nothing else.

Flight Recorder dumps are pickles, and a pickle is a program: GLOBAL and
REDUCE call any function the file names (`os.system`, `eval`, ...). A dump
from a broken job is still someone else's file, so it is read in three steps:

1. A scan of the opcodes, before anything is built, rejects every opcode that
   imports or calls (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ,
   NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID) and out-of-band buffers
   (NEXT_BUFFER, READONLY_BUFFER), and the tricks that cost memory before the
   loader notices anything wrong: a string or bytes opcode that declares more
   bytes than the file holds (the C loader allocates the declared size first),
   a memo slot beyond the ones in use (the memo is an array sized by the
   largest index: slot 2**32-1 is 32 GiB), an integer longer than 32 bytes,
   more than `max_items` opcodes, more than `max_depth` open MARKs.
2. `pickle.Unpickler` builds the data, with `find_class` and
   `persistent_load` refusing everything: plain containers and scalars need
   no class. Real Flight Recorder dumps hold only dicts, lists, tuples, str,
   int, float, bool and None (torch's C++ pickler writes them with PROTO 2,
   BINUNICODE, BININT*, LONG1, BINPUT/BINGET), so nothing is lost. The
   scanned opcodes reach it as one protocol-4 frame, read in one call rather
   than one call per opcode.
3. A walk over the result rejects nesting deeper than `max_depth` (a cycle,
   a list that holds itself, is infinitely deep) and more than `max_items`
   objects counting every shared reference again (memo "billion laughs": ten
   lists of ten references to the list before are 10**10 items to whoever
   walks them).

Every rejection is an `InputError(display, "unsafe pickle: ...")` or a
"truncated pickle"/"not a pickle" reason; nothing in the file runs.
"""

from __future__ import annotations

import gc
import io
import pickle
import pickletools
from collections import Counter
from itertools import compress

from .textio import InputError, read_bytes

MAX_BYTES = 512 << 20
MAX_DEPTH = 100
MAX_ITEMS = 50_000_000
MAX_INT_BYTES = 32  # 256-bit integers; Flight Recorder's largest are 64-bit nanoseconds

_FORBIDDEN = frozenset({
    "GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX",
    "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID", "NEXT_BUFFER", "READONLY_BUFFER",
})
_TO_MARK = frozenset({"APPENDS", "LIST", "TUPLE", "DICT", "SETITEMS", "ADDITEMS", "FROZENSET", "POP_MARK"})
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_LONGS = frozenset({"LONG1", "LONG4"})
_LINE_ARGS = frozenset({"INT", "LONG", "FLOAT", "STRING", "UNICODE", "GET"})

# How the scanner treats each opcode byte: a fixed argument length (>= 0), or
# one of the special cases below.
_MARK, _TOMARK, _COUNTED, _LINE, _PUT, _UNSAFE, _STOP, _PROTO, _FRAME, _LONG, _MEMOIZE = range(-1, -12, -1)
_UNKNOWN = -100

_NAMES: dict[int, str] = {}
_KIND = [_UNKNOWN] * 256
_COUNT_SIZE = [0] * 256  # bytes of the length prefix of counted opcodes


def _build_tables() -> None:
    for op in pickletools.opcodes:
        code = op.code.encode("latin-1")[0]
        _NAMES[code] = op.name
        arg = op.arg
        if op.name in _FORBIDDEN:
            kind = _UNSAFE
        elif op.name == "MARK":
            kind = _MARK
        elif op.name in _TO_MARK:
            kind = _TOMARK
        elif op.name == "STOP":
            kind = _STOP
        elif op.name == "PROTO":
            kind = _PROTO
        elif op.name == "FRAME":
            kind = _FRAME
        elif op.name == "MEMOIZE":
            kind = _MEMOIZE
        elif op.name in _PUTS:
            kind = _PUT
        elif op.name in _LONGS:
            kind = _LONG
        elif op.name in _LINE_ARGS:
            kind = _LINE
        elif arg is None:
            kind = 0
        elif arg.n >= 0:
            kind = arg.n
        else:  # counted: the argument is a length prefix, then that many bytes
            kind = _COUNTED
        _KIND[code] = kind
        if arg is not None and arg.n < 0 and arg.n != pickletools.UP_TO_NEWLINE:
            # TAKEN_FROM_ARGUMENT1/4/4U/8U: a 1-, 4- or 8-byte length prefix
            _COUNT_SIZE[code] = {pickletools.TAKEN_FROM_ARGUMENT1: 1,
                                 pickletools.TAKEN_FROM_ARGUMENT4: 4,
                                 pickletools.TAKEN_FROM_ARGUMENT4U: 4,
                                 pickletools.TAKEN_FROM_ARGUMENT8U: 8}[arg.n]


_build_tables()
# The scan's table: a plain opcode's whole length (> 0), else its special kind.
_STEP = [kind + 1 if kind >= 0 else kind for kind in _KIND]
_CODES = {name: code for code, name in _NAMES.items()}
_SIGNED = frozenset({_CODES["BINSTRING"], _CODES["LONG4"]})
_BINPUT, _LONG_BINPUT = _CODES["BINPUT"], _CODES["LONG_BINPUT"]
_NUMBER_LINES = frozenset({_CODES["INT"], _CODES["LONG"], _CODES["GET"]})


class _PlainData(pickle.Unpickler):
    """The standard loader with every class lookup refused (the scan already
    rejected the opcodes that would ask; this is the second lock)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"class {module}.{name} refused")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent id refused")


def load_path(path: str, display: str, **limits):
    """The plain data in the pickle at `path` (gzip is undone first)."""
    max_bytes = limits.get("max_bytes", MAX_BYTES)
    data = read_bytes(path, max_bytes + 1)
    if len(data) > max_bytes:
        raise InputError(display, f"pickle larger than {_size(max_bytes)}: not read")
    return loads(data, display, **limits)


def loads(data: bytes, display: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
          max_items: int = MAX_ITEMS, require_header: bool = True):
    """The plain data in `data`; InputError for anything else (see the module doc).

    `require_header`: accept only pickles that open with a PROTO opcode
    (protocol 2 and later, which is what every Flight Recorder writes), so
    that text or other binary files read as "not a pickle" rather than as a
    stream of odd opcodes."""
    if len(data) > max_bytes:
        raise InputError(display, f"pickle larger than {_size(max_bytes)}: not read")
    if require_header and not (len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= pickle.HIGHEST_PROTOCOL):
        raise InputError(display, "not a pickle: no protocol 2-5 header")
    end = scan(data, display, max_depth=max_depth, max_items=max_items)
    try:
        value = _PlainData(io.BytesIO(_framed(data, end))).load()
    except RecursionError:
        raise InputError(display, f"unsafe pickle: nested deeper than {max_depth} levels") from None
    except MemoryError:
        raise InputError(display, "unsafe pickle: more data than memory allows") from None
    except Exception as exc:  # the loader's own complaint about malformed data
        raise InputError(display, f"unreadable pickle: {_reason(exc)}") from None
    check_shape(value, display, max_depth=max_depth, max_items=max_items)
    return value


def _framed(data: bytes, end: int) -> bytes:
    """The pickle as one protocol-4 frame. An Unpickler reading a file calls
    its read() for every opcode of an unframed pickle (protocols 0-3, which
    is what torch writes), five times slower than `pickle.loads`; inside a
    frame it reads the frame once. The opcodes are the same ones scanned."""
    if data[0] == 0x80 and data[1] >= 4:
        return data[:end]
    body = data[2:end] if data[0] == 0x80 else data[:end]
    return b"\x80\x04\x95" + len(body).to_bytes(8, "little") + body


def scan(data: bytes, display: str, *, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> int:
    """Walk the opcodes up to STOP without building anything; returns the
    offset after STOP. Raises InputError for anything unsafe or malformed.
    (A plain loop rather than pickletools.genops: it is the cost of every
    dump read, and this is several times faster.)"""
    steps, count_size, signed_codes = _STEP, _COUNT_SIZE, _SIGNED
    from_bytes = int.from_bytes
    size = len(data)
    pos = ops = marks = memo = 0
    try:
        while True:
            code = data[pos]
            kind = steps[code]
            ops += 1
            if kind > 0:
                pos += kind
            elif kind == _PUT:
                if code == _BINPUT:
                    index, after = data[pos + 1], pos + 2
                elif code == _LONG_BINPUT:
                    index, after = from_bytes(data[pos + 1:pos + 5], "little"), pos + 5
                else:
                    index, after = _text_put(data, pos, display)
                if index > memo:
                    if after > size:
                        raise IndexError
                    raise InputError(display, f"unsafe pickle: {_NAMES[code]} at byte {pos} puts memo slot "
                                              f"{index} while only {memo} are in use (only plain data is accepted)")
                if index == memo:
                    memo += 1
                pos = after
            elif kind == _COUNTED or kind == _LONG:
                width = count_size[code]
                start = pos + 1 + width
                if start > size:
                    raise _truncated(display, code, pos, width, size - pos - 1)
                length = from_bytes(data[pos + 1:start], "little", signed=code in signed_codes)
                if length < 0:
                    raise InputError(display, f"unsafe pickle: {_NAMES[code]} at byte {pos} has a negative length")
                if start + length > size:
                    raise _truncated(display, code, pos, length, size - start)
                if kind == _LONG and length > MAX_INT_BYTES:
                    raise InputError(display, f"unsafe pickle: {_NAMES[code]} at byte {pos} holds a {length}-byte "
                                              f"integer (only plain data is accepted)")
                pos = start + length
            elif kind == _MARK:
                marks += 1
                if marks > max_depth:
                    raise InputError(display, f"unsafe pickle: MARK at byte {pos} opens more than {max_depth} "
                                              f"nested levels (only plain data is accepted)")
                pos += 1
            elif kind == _TOMARK:
                marks -= 1
                pos += 1
            elif kind == _MEMOIZE:
                memo += 1
                pos += 1
            elif kind == _LINE:
                newline = data.find(b"\n", pos + 1)
                if newline < 0:
                    raise _truncated(display, code, pos, 0, 0)
                if newline - pos > 4096 and code in _NUMBER_LINES:
                    raise InputError(display, f"unsafe pickle: {_NAMES[code]} at byte {pos} holds a "
                                              f"{newline - pos}-digit number (only plain data is accepted)")
                pos = newline + 1
            elif kind == _STOP:
                if ops > max_items:  # the loader's memory grows with the opcodes, not the bytes
                    raise InputError(display, f"unsafe pickle: more than {max_items} opcodes")
                return pos + 1
            elif kind == _PROTO:
                if pos + 1 >= size:
                    raise _truncated(display, code, pos, 1, 0)
                if data[pos + 1] > pickle.HIGHEST_PROTOCOL:
                    raise InputError(display, f"not a pickle: protocol {data[pos + 1]} at byte {pos}")
                pos += 2
            elif kind == _FRAME:
                if pos + 9 > size:
                    raise _truncated(display, code, pos, 8, size - pos - 1)
                length = from_bytes(data[pos + 1:pos + 9], "little")
                if pos + 9 + length > size:
                    raise _truncated(display, code, pos, length, size - pos - 9)
                pos += 9
            elif kind == _UNSAFE:
                raise InputError(display, f"unsafe pickle: {_NAMES[code]} at byte {pos} "
                                          f"(only plain data is accepted)")
            else:
                raise InputError(display, f"not a pickle: unknown opcode 0x{code:02x} at byte {pos}")
    except IndexError:
        raise InputError(display, "truncated pickle: it ends before its STOP opcode") from None


def _text_put(data: bytes, pos: int, display: str) -> tuple[int, int]:
    newline = data.find(b"\n", pos + 1)
    text = data[pos + 1:newline] if newline >= 0 else b""
    if newline < 0 or not text.isdigit() or len(text) > 12:
        raise InputError(display, f"not a pickle: malformed PUT at byte {pos}")
    return int(text), newline + 1


def _truncated(display: str, code: int, pos: int, wanted: int, left: int) -> InputError:
    return InputError(display, f"truncated pickle: {_NAMES[code]} at byte {pos} declares {wanted} bytes "
                               f"but {max(left, 0)} remain")


_CONTAINERS = frozenset({list, dict, tuple, set, frozenset})
_IS_CONTAINER = _CONTAINERS.__contains__


def check_shape(value, display: str, *, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> int:
    """Reject nesting deeper than `max_depth` (a reference cycle is infinitely
    deep) and more than `max_items` objects counted as a tree: a reference
    shared n times counts n times. Returns that count.

    Walks level by level with `gc.get_referents`, so the work per level is in
    C; a container referenced from many places is visited once per level with
    its multiplicity. Most containers are referenced once: a level is its
    distinct containers, one common multiplicity `base` and the exceptions in
    `extra`. (Strings used as dict keys are not counted: CPython does not
    traverse them.)"""
    if type(value) not in _CONTAINERS:
        return 1
    total, depth = 1, 1
    level: list = [value]
    base, extra = 1, {}
    while level:
        if depth > max_depth:
            raise InputError(display, f"unsafe pickle: nested deeper than {max_depth} levels "
                                      f"(or a container holds itself)")
        common = [obj for obj in level if id(obj) not in extra] if extra else level
        refs = gc.get_referents(*common)
        total += base * len(refs)
        kids = list(compress(refs, map(_IS_CONTAINER, map(type, refs))))
        unique = dict(zip(map(id, kids), kids))
        weights: dict[int, int] = {}
        if len(unique) != len(kids):
            for key, n in Counter(map(id, kids)).most_common():
                if n == 1:
                    break
                weights[key] = n * base
        by_weight: dict[int, list] = {}
        for obj in level if extra else ():
            times = extra.get(id(obj))
            if times is not None:
                by_weight.setdefault(times, []).append(obj)
        for times, objs in by_weight.items():
            refs = gc.get_referents(*objs)
            total += times * len(refs)
            for kid in compress(refs, map(_IS_CONTAINER, map(type, refs))):
                key = id(kid)
                if key not in weights:
                    weights[key] = base if key in unique else 0
                weights[key] += times
                unique[key] = kid
        if total > max_items:
            raise InputError(display, f"unsafe pickle: more than {max_items} items once shared "
                                      f"references are expanded")
        level, extra = list(unique.values()), {k: w for k, w in weights.items() if w != base}
        depth += 1 if level else 0
    return total


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or exc.__class__.__name__
    return text[:200]
