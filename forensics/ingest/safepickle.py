"""Loading pickles from other people's machines as plain data, and nothing else.

Flight Recorder dumps are pickles, and a pickle is a program: GLOBAL and
REDUCE call any function the file names (`os.system`, `eval`, ...). A dump
from a broken job is still someone else's file. It is read in two ways:

The fast path, tried first: CPython's C `pickle.Unpickler` with
`find_class` and `persistent_load` refusing everything. Only those two ever
produce a callable (GLOBAL, STACK_GLOBAL, INST, OBJ and EXT1/2/4 go through
`find_class`; PERSID and BINPERSID through `persistent_load`), so REDUCE,
BUILD, NEWOBJ and NEWOBJ_EX find a str, int or container where a callable
or class should be and fail without calling anything; NEXT_BUFFER and
READONLY_BUFFER fail for want of out-of-band buffers. What the C loader does
not stop is memory: LONG_BINPUT 2**31 makes it allocate and clear a memo of
2**32 slots (32 GiB), BINBYTES8 and BYTEARRAY8 allocate the size they
declare before reading it. So the load runs under a temporary soft
RLIMIT_AS of what the process uses plus a budget proportional to the file
(restored afterwards, in `finally`): such a file ends in MemoryError, not in
the kernel's OOM killer. The opcodes reach the loader as one protocol-4
frame from an object with only `read`/`readline`, so it reads the file in
one call (and never takes the `readinto` path, which leaks a buffer export
on truncated BINBYTES8).

The detailed path, taken whenever the fast one fails for any reason: a
pure-Python scan of the opcodes, before anything is built, that names the
first offending opcode and its byte offset: every opcode that imports or
calls, out-of-band buffers, a string or bytes opcode that declares more
bytes than the file holds, a memo slot beyond the ones in use, an integer
longer than 32 bytes, more than `max_items` opcodes, more than `max_depth`
open MARKs. A file the scan accepts is then built by the same loader, now
without a memory cap (the scan bounded it). So a refusal always names the
file and, where it is an opcode, the opcode and its position; a dump that
only ran out of budget (a legitimately huge one) is still read.

Both paths end with `check_shape` over the result: nesting deeper than
`max_depth` (a cycle, a list that holds itself, is infinitely deep), more
than `max_items` objects counting every shared reference again (memo
"billion laughs": ten lists of ten references to the list before are 10**10
items to whoever walks them), and integers beyond 256 bits. It walks level
by level in C (`gc.get_referents`), and uses reference counts to tell the
containers held once (almost all of them) from the shared ones, which alone
need counting. After it, callers may walk the value without limits; the
Flight Recorder reader still only reaches into it by key and bounded slices.

Real Flight Recorder dumps hold only dicts, lists, tuples, str, int, float,
bool and None (torch's C++ pickler writes PROTO 2, BINUNICODE, BININT*,
LONG1, BINPUT/BINGET), so nothing of theirs is refused. Every refusal is an
`InputError(display, "unsafe pickle: ...")` or a "truncated pickle"/"not a
pickle"/"unreadable pickle" reason; nothing in the file runs.
"""

from __future__ import annotations

import gc
import functools
import io
import os
import pickle
import threading
from collections import Counter
from itertools import compress, repeat
from operator import is_, not_
from sys import getrefcount

try:
    import resource
except ImportError:  # not a Unix: no address-space cap, so no fast path
    resource = None

from .. import gc_paused
from .textio import InputError, read_bytes

MAX_BYTES = 512 << 20
MAX_DEPTH = 100
MAX_ITEMS = 50_000_000
MAX_INT_BYTES = 32  # 256-bit integers; Flight Recorder's largest are 64-bit nanoseconds
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

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

class _Tables:
    """The scanner's view of each opcode byte, from pickletools."""

    __slots__ = ("names", "step", "count_size", "signed", "binput", "long_binput", "number_lines")


@functools.lru_cache(maxsize=None)
def _tables() -> _Tables:
    """Built on the first scan: importing pickletools costs more than the
    fast load of a whole dump, and only the detailed path needs it."""
    import pickletools

    names: dict[int, str] = {}
    kinds = [_UNKNOWN] * 256
    count_size = [0] * 256  # bytes of the length prefix of counted opcodes
    for op in pickletools.opcodes:
        code = op.code.encode("latin-1")[0]
        names[code] = op.name
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
        kinds[code] = kind
        if arg is not None and arg.n < 0 and arg.n != pickletools.UP_TO_NEWLINE:
            # TAKEN_FROM_ARGUMENT1/4/4U/8U: a 1-, 4- or 8-byte length prefix
            count_size[code] = {pickletools.TAKEN_FROM_ARGUMENT1: 1,
                                pickletools.TAKEN_FROM_ARGUMENT4: 4,
                                pickletools.TAKEN_FROM_ARGUMENT4U: 4,
                                pickletools.TAKEN_FROM_ARGUMENT8U: 8}[arg.n]
    codes = {name: code for code, name in names.items()}
    tables = _Tables()
    tables.names = names
    # A plain opcode's whole length (> 0), else its special kind.
    tables.step = [kind + 1 if kind >= 0 else kind for kind in kinds]
    tables.count_size = count_size
    tables.signed = frozenset({codes["BINSTRING"], codes["LONG4"]})
    tables.binput, tables.long_binput = codes["BINPUT"], codes["LONG_BINPUT"]
    tables.number_lines = frozenset({codes["INT"], codes["LONG"], codes["GET"]})
    return tables


class _PlainData(pickle.Unpickler):
    """The C loader with every class and persistent-id lookup refused: the
    only ways a pickle can name a callable, so nothing can be called."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"class {module}.{name} refused")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent id refused")


def _source(data: bytes):
    """What the loader reads from. The C loader asks a file for each opcode
    of an unframed pickle (protocols 0-3, which is what torch writes), five
    times slower than `pickle.loads`, unless the file can `peek`: then it
    takes what a peek returns at once. A buffered reader over the bytes
    peeks up to its buffer, and no copy of the pickle is made (framing it
    as protocol 4 cost a copy, 0.4 ms for a 2,000-entry dump)."""
    return io.BufferedReader(io.BytesIO(data), _PEEK)


_PEEK = 1 << 20


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
    return _load(data, display, max_bytes, max_depth, max_items, require_header, walk=True)


def loads_unchecked(data: bytes, display: str, *, max_bytes: int = MAX_BYTES):
    """Like `loads`, without the walk over the result: nothing in `data` ran
    and building it stayed within the memory budget, but the value may nest
    deeply, share references or hold itself. Only for callers that reach
    into it by key and bounded slices and never walk or hash what they did
    not check (the Flight Recorder reader); the walk costs as much as the
    load itself."""
    return _load(data, display, max_bytes, MAX_DEPTH, MAX_ITEMS, True, walk=False)


def _load(data: bytes, display: str, max_bytes: int, max_depth: int, max_items: int, require_header: bool,
          walk: bool):
    if len(data) > max_bytes:
        raise InputError(display, f"pickle larger than {_size(max_bytes)}: not read")
    if require_header and not (len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= pickle.HIGHEST_PROTOCOL):
        raise InputError(display, "not a pickle: no protocol 2-5 header")
    nesting = _tuple_nesting_bound(data)
    # Building a dump makes ~10**5 containers and none of them cyclic:
    # collections in the middle only cost time (a cyclic hostile file is
    # collected after).
    with gc_paused():
        value, built = fast_load(data, nesting)
        refused = None
        if built:
            if not walk:
                return value
            try:
                check_shape(value, display, max_depth=max_depth, max_items=max_items)
                return value
            except InputError as exc:
                refused = exc
        value = None
        # The detailed path: the first unsafe or malformed opcode, by name and offset.
        end = scan(data, display, max_depth=max_depth, max_items=max_items)
        if refused is not None:
            raise refused  # built from the same opcodes: a shape the scan cannot see
        try:
            value = _build(data[:end], nesting, None)
        except _TooDeep as exc:
            raise InputError(display, f"unsafe pickle: {exc}") from None
        except RecursionError:
            raise InputError(display, f"unsafe pickle: nested deeper than {max_depth} levels") from None
        except MemoryError:
            raise InputError(display, "unsafe pickle: more data than memory allows") from None
        except Exception as exc:  # the loader's own complaint about malformed data
            raise InputError(display, f"unreadable pickle: {_reason(exc)}") from None
        if walk:
            check_shape(value, display, max_depth=max_depth, max_items=max_items)
        return value


# Address space the fast path may add: a fixed allowance plus this many
# bytes per byte of pickle. A real dump builds about 12 bytes of objects per
# byte of file; the worst plain data (empty dicts, `}a`) about 50.
BUDGET_BASE = 64 << 20
BUDGET_PER_BYTE = 64


def fast_load(data: bytes, nesting: int | None = None) -> tuple[object, bool]:
    """(value, True) when the C loader builds `data` within the memory
    budget with nothing refused; (None, False) on any failure at all, which
    `loads` then explains with the scanner. No shape check here."""
    if nesting is None:
        nesting = _tuple_nesting_bound(data)
    try:
        return _build(data, nesting, BUDGET_BASE + BUDGET_PER_BYTE * len(data)), True
    except Exception:  # MemoryError, UnpicklingError, a refused class, REDUCE on a str, no cap, ...
        return None, False


# Hashing a tuple hashes its items first, in C, with no recursion limit: a
# dict key or set item that is a tuple nested 140,000 deep (two bytes a
# level: EMPTY_TUPLE, then TUPLE1 after TUPLE1) overflows an 8 MiB stack
# while the loader is still running. Every level is one TUPLE, TUPLE1,
# TUPLE2 or TUPLE3 opcode, so the count of those bytes bounds the nesting;
# the loader runs where that much nesting fits in the stack.
_TUPLE_OPCODES = b"t\x85\x86\x87"  # TUPLE, TUPLE1, TUPLE2, TUPLE3
_STACK_PER_LEVEL = 128         # bytes of C stack per level of tuple hashing (measured: ~60)
_INLINE_NESTING = 30_000       # fits any thread stack of 4 MiB or more
_MAX_NESTING = 1_000_000       # beyond: not read (a real dump has one TUPLE2 per entry)


class _TooDeep(Exception):
    pass


def _tuple_nesting_bound(data: bytes) -> int:
    return len(data) - len(data.translate(None, _TUPLE_OPCODES))


def _build(body: bytes, nesting: int, budget: int | None):
    """The C loader over `body`, under a memory budget (None: none), in this
    thread or, when tuples in it could nest deeper than its stack holds, in
    a thread with a stack deep enough."""
    if nesting <= _INLINE_NESTING:
        return _run(body, budget)
    if nesting > _MAX_NESTING:
        raise _TooDeep(f"{nesting} tuple opcodes: tuples could nest deeper than the loader can hash "
                       f"(only plain data is accepted)")
    stack = nesting * _STACK_PER_LEVEL + (8 << 20)
    outcome: list = []

    def target():
        try:
            outcome.append((True, _run(body, budget)))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    previous = threading.stack_size(stack)
    try:
        worker = threading.Thread(target=target, name="safepickle-load", daemon=True)
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _run(body: bytes, budget: int | None):
    if budget is None:
        return _PlainData(_source(body)).load()
    # The cap is taken here, after any thread stack was mapped, so the
    # stack does not eat the budget.
    with _address_space(budget) as capped:
        if not capped:
            raise MemoryError("no address-space cap available")
        return _PlainData(_source(body)).load()


class _address_space:
    """A temporary soft RLIMIT_AS of what the process maps now plus `extra`
    bytes (never above a limit already in force), restored on exit. Enters
    as False where that cannot be measured or set (not Linux): the caller
    must then not build anything unscanned. The limit is process-wide:
    another thread allocating meanwhile shares the budget."""

    __slots__ = ("extra", "saved")

    def __init__(self, extra: int):
        self.extra = extra
        self.saved = None

    def __enter__(self) -> bool:
        if resource is None:
            return False
        try:
            with open("/proc/self/statm", "rb") as handle:
                mapped = int(handle.read().split()[0]) * _PAGE
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        except (OSError, ValueError, IndexError):
            return False
        cap = mapped + self.extra
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        if soft != resource.RLIM_INFINITY:
            cap = min(cap, soft)
        if cap <= mapped:
            return False
        if cap != soft:
            try:
                resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
            except (OSError, ValueError):
                return False
            self.saved = (soft, hard)
        return True

    def __exit__(self, *exc) -> None:
        if self.saved is not None:
            resource.setrlimit(resource.RLIMIT_AS, self.saved)
            self.saved = None


def scan(data: bytes, display: str, *, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> int:
    """Walk the opcodes up to STOP without building anything; returns the
    offset after STOP. Raises InputError for anything unsafe or malformed.
    (A plain loop rather than pickletools.genops: it is the cost of every
    dump read, and this is several times faster.)"""
    tables = _tables()
    names, steps, count_size, signed_codes = tables.names, tables.step, tables.count_size, tables.signed
    binput, long_binput, number_lines = tables.binput, tables.long_binput, tables.number_lines
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
                if code == binput:
                    index, after = data[pos + 1], pos + 2
                elif code == long_binput:
                    index, after = from_bytes(data[pos + 1:pos + 5], "little"), pos + 5
                else:
                    index, after = _text_put(data, pos, display)
                if index > memo:
                    if after > size:
                        raise IndexError
                    raise InputError(display, f"unsafe pickle: {names[code]} at byte {pos} puts memo slot "
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
                    raise InputError(display, f"unsafe pickle: {names[code]} at byte {pos} has a negative length")
                if start + length > size:
                    raise _truncated(display, code, pos, length, size - start)
                if kind == _LONG and length > MAX_INT_BYTES:
                    raise InputError(display, f"unsafe pickle: {names[code]} at byte {pos} holds a {length}-byte "
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
                if newline - pos > 4096 and code in number_lines:
                    raise InputError(display, f"unsafe pickle: {names[code]} at byte {pos} holds a "
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
                raise InputError(display, f"unsafe pickle: {names[code]} at byte {pos} "
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
    return InputError(display, f"truncated pickle: {_tables().names[code]} at byte {pos} declares {wanted} bytes "
                               f"but {max(left, 0)} remain")


_CONTAINERS = frozenset({list, dict, tuple, set, frozenset})
_IS_CONTAINER = _CONTAINERS.__contains__
_INT_LIMIT = 1 << (8 * MAX_INT_BYTES - 1)  # what a 32-byte LONG1/LONG4 can hold


def _children(parents: list) -> tuple[list, list, list, list]:
    """(every object `parents` reference, their types, the containers among
    them, those containers' reference counts)."""
    refs = gc.get_referents(*parents)
    types = list(map(type, refs))
    kids = list(compress(refs, map(_IS_CONTAINER, types)))
    return refs, types, kids, list(map(getrefcount, kids))


def _held_once() -> int:
    """The reference count `_children` sees for a container that exactly one
    other object holds (the temporaries of `_children` included)."""
    inner: list = []
    outer = [inner]
    del inner
    return _children([outer])[3][0]


_HELD_ONCE = _held_once()


def check_shape(value, display: str, *, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> int:
    """Reject nesting deeper than `max_depth` (a reference cycle is infinitely
    deep), more than `max_items` objects counted as a tree (a reference
    shared n times counts n times) and integers beyond 256 bits. Returns
    that count.

    Walks level by level with `gc.get_referents`, so the work per level is in
    C. A level is its distinct containers grouped by how many tree paths
    reach them. A container whose reference count says one object holds it
    (nearly all of them) inherits its parent's count as is; only the others
    (shared frame dicts, memo tricks, cycles) are counted by identity.
    (Strings used as dict keys are not counted: CPython does not traverse
    them.)"""
    if type(value) not in _CONTAINERS:
        if type(value) is int and not -_INT_LIMIT <= value < _INT_LIMIT:
            raise _big_int(display, value)
        return 1
    total, depth = 1, 1
    level: dict[int, list] = {1: [value]}  # tree paths reaching each → the containers
    while level:
        if depth > max_depth:
            raise InputError(display, f"unsafe pickle: nested deeper than {max_depth} levels "
                                      f"(or a container holds itself)")
        following: dict[int, list] = {}
        shared: dict[int, int] = {}  # id → tree paths, for containers held more than once
        objects: dict[int, object] = {}
        for paths, parents in level.items():
            refs, types, kids, counts = _children(parents)
            total += paths * len(refs)
            if total > max_items:
                raise InputError(display, f"unsafe pickle: more than {max_items} items once shared "
                                          f"references are expanded")
            if int in types:
                ints = list(compress(refs, map(is_, types, repeat(int))))
                if max(ints) >= _INT_LIMIT or min(ints) < -_INT_LIMIT:
                    raise _big_int(display, max(ints, key=abs))
            if not kids:
                continue
            if max(counts) <= _HELD_ONCE:
                following.setdefault(paths, []).extend(kids)
                continue
            once = list(map(_HELD_ONCE.__ge__, counts))
            following.setdefault(paths, []).extend(compress(kids, once))
            many = list(compress(kids, map(not_, once)))
            objects.update(zip(map(id, many), many))
            for key, times in Counter(map(id, many)).items():
                shared[key] = shared.get(key, 0) + times * paths
        for key, paths in shared.items():
            following.setdefault(paths, []).append(objects[key])
        level = following
        depth += 1 if level else 0
    return total


def _big_int(display: str, value: int) -> InputError:
    return InputError(display, f"unsafe pickle: holds a {(value.bit_length() + 8) // 8}-byte integer "
                               f"(only plain data is accepted)")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or exc.__class__.__name__
    return text[:200]
