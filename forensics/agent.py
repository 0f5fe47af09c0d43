"""The in-job agent: each rank reports the communication call it is in.

    import forensics.agent; forensics.agent.install()          # in a training script
    torchrun ... -m forensics.agent train.py ARGS               # or no code change
    torchrun ... -m forensics.agent --watch train.py ARGS       # and the watcher in rank 0

`install()` wraps the public calls of `torch.distributed`: collectives
(also `*_coalesced`, `all_to_all*`, the object collectives,
`monitored_barrier`), `send`/`recv`, `isend`/`irecv`, `batch_isend_irecv`,
and `Work.wait`. On entry a blocking call writes a few fields into the
calling thread's slot, made once per thread: op, process group (name and
members), the group's sequence number, the peer; on return it clears one
field. No I/O, no lock, no new container. An asynchronous call
(`async_op=True`, `isend`, `batch_isend_irecv`) leaves a small record
keyed by its `Work`; `Work.wait()` on it fills the slot the same way,
marked as waiting on async work.

A background thread publishes this rank's state only when a call has been
in progress longer than the threshold (default 50 ms), and once more when
it has ended: a healthy job publishes almost nothing. It wakes when the
oldest call in progress reaches the threshold (about 20 times a second in
a busy loop), and every 10 ms only while a published call lasts. The call
site comes from the thread's Python stack, read by that thread at publish
time, not on the hot path.

The coordinator (forensics/live/stores.py) is the job's own TCPStore by
default (torchrun's, at MASTER_ADDR:MASTER_PORT), or FORENSICS_STORE:
`tcpstore://HOST:PORT` or `redis://HOST:PORT/PREFIX`. Not seen: calls
through names imported from `torch.distributed` before `install()` (the
`-m forensics.agent` form installs first, so there are none), calls made
through `torch.distributed.distributed_c10d` directly, and work completed
through its future (`get_future().wait()`) rather than `Work.wait()`.
"""

from __future__ import annotations

import atexit
import inspect
import json
import os
import socket
import sys
import threading
import time
import weakref

THRESHOLD_MS = 50
INTERVAL_MS = 10
MAX_PENDING = 4096     # async records kept for works not yet waited on (oldest dropped first)
MAX_GROUPS_SHOWN = 64  # groups whose progress a state carries
MAX_FRAMES = 12

# The API's name → the op the engine knows (forensics.model.COLLECTIVE_OPS / P2P_OPS).
COLLECTIVES = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce", "broadcast": "broadcast",
    "reduce": "reduce", "all_gather": "all_gather", "all_gather_into_tensor": "all_gather_into_tensor",
    "all_gather_coalesced": "all_gather", "all_gather_single": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor", "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all_single", "gather": "gather", "scatter": "scatter", "barrier": "barrier",
    "monitored_barrier": "monitored_barrier", "all_gather_object": "all_gather_object",
    "broadcast_object_list": "broadcast_object_list", "gather_object": "gather",
    "scatter_object_list": "scatter",
}
# P2P API → (op, the peer's parameter, the group-rank form of it)
P2P = {
    "send": ("send", "dst", "group_dst"), "recv": ("recv", "src", "group_src"),
    "isend": ("send", "dst", "group_dst"), "irecv": ("recv", "src", "group_src"),
    "send_object_list": ("send", "dst", "group_dst"), "recv_object_list": ("recv", "src", "group_src"),
}
ALWAYS_ASYNC = {"isend", "irecv"}


class _Group:
    """One process group as the agent knows it; its counters are per group
    name, so `group=None` and `group=dist.group.WORLD` share them."""

    __slots__ = ("name", "desc", "members", "seq", "done")

    def __init__(self, name: str, desc: str, members: tuple[int, ...]):
        self.name, self.desc, self.members = name, desc, members
        self.seq = 0    # collectives entered on this group
        self.done = 0   # the highest of them that returned


class _Slot:
    """What one thread is in. `started` (monotonic ns) is written last on
    entry and zeroed on return; the publisher reads it before and after
    the other fields and keeps what it read only if it did not move.
    `call` is a tuple made once per wrapper: (op, is P2P, waits on async
    work), so a collective writes four fields and no more."""

    __slots__ = ("call", "group", "seq", "peer", "started", "thread", "__weakref__")

    def __init__(self):
        self.call, self.group, self.seq, self.peer = ("", False, False), None, 0, -1
        self.started = 0
        self.thread = threading.get_ident()


class _Pending:
    """An asynchronous call whose Work has not been waited on yet."""

    __slots__ = ("work", "call", "group", "seq", "peer")

    def __init__(self, work, call, group, seq, peer):
        self.work = weakref.ref(work)
        self.call, self.group, self.seq, self.peer = call, group, seq, peer


_local = threading.local()
_slot_refs: list = []                # weak references to every thread's slot (appending is atomic)
_groups: dict[int, _Group] = {}      # id(group object) → _Group
_by_name: dict[str, _Group] = {}
_pending: dict[int, _Pending] = {}   # id(Work) → record
_installed: dict = {}                # API name → the original
_clock = time.monotonic_ns
_state = {"publisher": None, "watcher": None, "crashed": ""}


def _new_slot() -> _Slot:
    slot = _local.slot = _Slot()
    _slot_refs.append(weakref.ref(slot))
    return slot


def _learn_group(dist, group) -> _Group | None:
    """The _Group of a process-group argument (None: the default group),
    learnt once per object. None when torch cannot say (not initialized):
    the call goes through unrecorded and torch reports its own error."""
    try:
        pg = group if group is not None else dist.group.WORLD
        if pg is None:
            return None
        name = str(dist.distributed_c10d._get_process_group_name(pg))
        members = tuple(int(r) for r in dist.get_process_group_ranks(pg))
        desc = str(getattr(pg, "group_desc", "") or "")
    except Exception:  # noqa: BLE001 - a rank not in the group, a torch without these helpers
        return None
    known = _by_name.get(name)
    if known is None or known.members != members:
        known = _by_name[name] = _Group(name, desc, members)
    _groups[id(group)] = known
    return known


def _positions(fn, *names):
    params = list(inspect.signature(fn).parameters)
    return [params.index(n) if n in params else -1 for n in names]


_WAITED = {}  # (op, is P2P) → the call tuple of its Work being waited on


def _calls(op: str, p2p: bool) -> tuple[tuple, tuple]:
    """The call tuples of a blocking call and of its async work waited on."""
    waited = _WAITED.setdefault((op, p2p), (op, p2p, True))
    return (op, p2p, False), waited


def _wrap(dist, api: str, fn):
    """The recording wrapper of one torch.distributed function."""
    if api in P2P:
        return _wrap_p2p(dist, api, fn)
    group_at, async_at = _positions(fn, "group", "async_op")
    blocking, waited = _calls(COLLECTIVES[api], False)
    groups, local, clock, learn = _groups, _local, _clock, _learn_group

    def call(*args, **kwargs):
        if kwargs:
            group = kwargs.get("group", args[group_at] if len(args) > group_at >= 0 else None)
            is_async = kwargs.get("async_op", len(args) > async_at >= 0 and args[async_at])
        else:
            group = args[group_at] if len(args) > group_at >= 0 else None
            is_async = len(args) > async_at >= 0 and args[async_at]
        g = groups.get(id(group))
        if g is None:
            g = learn(dist, group)
            if g is None:
                return fn(*args, **kwargs)
        g.seq += 1
        seq = g.seq
        if is_async:
            work = fn(*args, **kwargs)
            if work is not None:
                _track(work, waited, g, seq, -1)
            return work
        try:
            slot = local.slot
        except AttributeError:
            slot = _new_slot()
        if slot.started:  # inside another recorded call (a torch helper calling back): the outer one stands
            return fn(*args, **kwargs)
        slot.call = blocking
        slot.group = g
        slot.seq = seq
        slot.started = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            slot.started = 0
            g.done = seq

    return _named(call, fn, api)


def _wrap_p2p(dist, api: str, fn):
    op, peer_name, group_peer_name = P2P[api]
    group_at, async_at, peer_at, group_peer_at = _positions(fn, "group", "async_op", peer_name, group_peer_name)
    blocking, waited = _calls(op, True)
    always_async = api in ALWAYS_ASYNC
    groups, local, clock, learn = _groups, _local, _clock, _learn_group

    def argument(args, kwargs, name, at, default=None):
        if name in kwargs:
            return kwargs[name]
        return args[at] if len(args) > at >= 0 else default

    def call(*args, **kwargs):
        group = argument(args, kwargs, "group", group_at)
        g = groups.get(id(group))
        if g is None:
            g = learn(dist, group)
            if g is None:
                return fn(*args, **kwargs)
        peer = argument(args, kwargs, peer_name, peer_at)
        if peer is None:
            local_peer = argument(args, kwargs, group_peer_name, group_peer_at)
            members = g.members
            peer = members[local_peer] if type(local_peer) is int and 0 <= local_peer < len(members) else -1
        if always_async or argument(args, kwargs, "async_op", async_at, False):
            work = fn(*args, **kwargs)
            if work is not None:
                _track(work, waited, g, g.seq, peer)
            return work
        try:
            slot = local.slot
        except AttributeError:
            slot = _new_slot()
        if slot.started:
            return fn(*args, **kwargs)
        slot.call = blocking
        slot.group = g
        slot.seq = g.seq  # P2P calls carry the group's position, they do not advance it
        slot.peer = peer
        slot.started = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            slot.started = 0

    return _named(call, fn, api)


def _named(call, fn, api):
    call.__wrapped__ = fn
    call.__name__ = getattr(fn, "__name__", api)
    call.__qualname__ = getattr(fn, "__qualname__", api)
    call.__doc__ = fn.__doc__
    call.__module__ = getattr(fn, "__module__", "torch.distributed")
    return call


class _P2PWrapper:
    """isend/irecv wrapped, still equal to torch's own: `P2POp` checks
    `op in [isend, irecv]` (equality, which this answers), and
    `batch_isend_irecv` tells them apart with `is`, so its wrapper hands
    torch the originals."""

    def __init__(self, call, original):
        self.call, self.original = call, original
        self.__wrapped__ = original
        self.__name__ = getattr(original, "__name__", "")
        self.__qualname__ = getattr(original, "__qualname__", "")
        self.__doc__ = original.__doc__
        self.__module__ = getattr(original, "__module__", "torch.distributed")

    def __call__(self, *args, **kwargs):
        if "group_src" in kwargs and self.__name__ == "isend":
            # a batch_isend_irecv imported before install() took this isend for irecv (`is`):
            # the peer it passes is the destination
            kwargs["group_dst"] = kwargs.pop("group_src")
        return self.call(*args, **kwargs)

    def __eq__(self, other):
        return other is self or other is self.original

    def __hash__(self):
        return hash(self.original)

    def __repr__(self):
        return repr(self.original)


def _track(work, call, group, seq, peer) -> None:
    try:
        _pending[id(work)] = _Pending(work, call, group, seq, peer)
    except TypeError:  # an object that takes no weak reference: not followed
        return
    if len(_pending) > MAX_PENDING:
        del _pending[next(iter(_pending))]


def _wrap_batch(dist, fn):
    isend = _installed.get("isend", getattr(dist, "isend", None))

    def batch_isend_irecv(p2p_op_list):
        ops = list(p2p_op_list) if isinstance(p2p_op_list, list) else None
        if ops:
            for p2p_op in ops:
                original = getattr(p2p_op.op, "original", None)
                if original is not None:
                    p2p_op.op = original  # torch compares with `is`
        works = fn(p2p_op_list)
        if ops and works:
            try:
                group = ops[0].group
                g = _groups.get(id(group)) or _learn_group(dist, group)
                if g is not None:
                    described = [("send" if p.op is isend else "recv", int(p.peer)) for p in ops]
                    if len(works) == len(described):
                        for work, (op, peer) in zip(works, described):
                            _track(work, _calls(op, True)[1], g, g.seq, peer)
                    else:  # one work for the whole batch (coalescing back-ends): it waits for every peer
                        for work in works:
                            _track(work, _calls(described[0][0], True)[1], g, g.seq, -2)
            except Exception:  # noqa: BLE001 - recording must never break the call
                pass
        return works

    batch_isend_irecv.__wrapped__ = fn
    batch_isend_irecv.__doc__ = fn.__doc__
    return batch_isend_irecv


def _wrap_wait(original):
    pending, local, clock = _pending, _local, _clock

    def wait(self, timeout=None):
        if not pending:
            return original(self) if timeout is None else original(self, timeout)
        record = pending.pop(id(self), None)
        if record is None or record.work() is not self:
            return original(self) if timeout is None else original(self, timeout)
        try:
            slot = local.slot
        except AttributeError:
            slot = _new_slot()
        if slot.started:
            return original(self) if timeout is None else original(self, timeout)
        g = record.group
        slot.call = record.call
        slot.group = g
        slot.seq = record.seq
        slot.peer = record.peer
        slot.started = clock()
        try:
            return original(self) if timeout is None else original(self, timeout)
        finally:
            slot.started = 0
            if not record.call[1] and record.seq > g.done:
                g.done = record.seq

    wait.__wrapped__ = original
    wait.__name__ = "wait"
    wait.__doc__ = getattr(original, "__doc__", None)
    return wait


def _wrap_destroy(fn):
    def destroy_process_group(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            _groups.clear()  # a later init may reuse the objects' addresses
            _by_name.clear()

    destroy_process_group.__wrapped__ = fn
    destroy_process_group.__doc__ = fn.__doc__
    return destroy_process_group


# ---------------------------------------------------------------- publishing

def _frames(thread: int) -> list[str]:
    """The thread's Python stack, outermost first, without the agent's frames."""
    frame = sys._current_frames().get(thread)
    out = []
    here = os.path.abspath(__file__)
    while frame is not None and len(out) < 4 * MAX_FRAMES:
        code = frame.f_code
        if os.path.abspath(code.co_filename) != here and not code.co_filename.startswith("<frozen"):
            out.append(f"{code.co_name} ({_short_path(code.co_filename)}:{frame.f_lineno})")
        frame = frame.f_back
    return list(reversed(out[:MAX_FRAMES]))


def _short_path(path: str) -> str:
    marker = "site-packages/"
    at = path.rfind(marker)
    return path[at + len(marker):] if at >= 0 else os.path.basename(path)


def _members_json(members: tuple[int, ...]) -> dict:
    """A group's members, as a span when they are evenly spaced (a world
    group of 10,000 is three numbers, not 10,000)."""
    n = len(members)
    if n > 8:
        step = members[1] - members[0]
        if step > 0 and all(members[i + 1] - members[i] == step for i in range(n - 1)):
            return {"group_span": [members[0], members[-1] + step, step]}
    return {"group_ranks": list(members)}


def current_state(threshold_ns: int) -> dict:
    """This rank's state: the longest call in progress past the threshold,
    or compute."""
    now = _clock()
    best = None
    for ref in list(_slot_refs):
        slot = ref()
        if slot is None:  # its thread ended
            try:
                _slot_refs.remove(ref)
            except ValueError:
                pass
            continue
        started = slot.started
        if not started or now - started < threshold_ns or (best is not None and started >= best[0]):
            continue
        fields = (started, slot.call, slot.group, slot.seq, slot.peer, slot.thread)
        if slot.started == started:  # not replaced while read
            best = fields
    if best is None:
        return {"current_op": "compute"}
    started, (op, p2p, waits_work), group, seq, peer, thread = best
    peer = peer if p2p else -1
    any_source = p2p and op == "recv" and peer == -1
    elapsed_ns = now - started
    state = {"current_op": op, "group": group.name, "op_seq": seq, "state": "started",
             "elapsed_ms": elapsed_ns // 1_000_000, "entered_at": time.time() - elapsed_ns / 1e9,
             "async": waits_work, **_members_json(group.members)}
    if group.desc:
        state["group_desc"] = group.desc
    if peer is not None and peer >= 0:
        state["peers"] = [int(peer)]
    if any_source:
        state["any_source"] = True
    try:
        state["stack"] = _frames(thread)
    except Exception:  # noqa: BLE001 - a stack we cannot read is left out
        pass
    return state


def next_due(threshold_ns: int) -> int | None:
    """Nanoseconds until the oldest call in progress has been in progress
    for the threshold (0 if it already has); None when no call is."""
    oldest = 0
    for ref in list(_slot_refs):
        slot = ref()
        started = slot.started if slot is not None else 0
        if started and (not oldest or started < oldest):
            oldest = started
    if not oldest:
        return None
    return max(0, oldest + threshold_ns - _clock())


def progress() -> tuple[dict, int]:
    """Per group: the last collective entered and the last that returned;
    and the total that returned (what the watcher calls progress)."""
    groups = list(_by_name.values())
    shown = sorted(groups, key=lambda g: -g.seq)[:MAX_GROUPS_SHOWN]
    return ({g.name: {"started": g.seq, "completed": g.done} for g in shown},
            sum(g.done for g in groups))


class _Publisher(threading.Thread):
    def __init__(self, url: str, rank: int, threshold_ms: float, interval_ms: float):
        super().__init__(name="forensics-agent", daemon=True)
        self.url, self.rank = url, rank
        self.threshold_ns = int(threshold_ms * 1e6)
        self.interval = interval_ms / 1000
        self.store = None
        self.published = None       # what was last sent: (op, group, seq, peer, async)
        self.sent_at = 0.0
        self.final = None           # set by the exit hook: the state to send last
        self.finished = threading.Event()
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.complained = False

    def _connect(self) -> bool:
        from .live.stores import StoreDown, open_store

        try:
            self.store = open_store(self.url, timeout=5.0)
            return True
        except (StoreDown, ValueError) as exc:
            if not self.complained:
                print(f"forensics.agent: rank {self.rank}: {self.url} does not answer ({exc}); "
                      "the job goes on, the agent keeps trying", file=sys.stderr, flush=True)
                self.complained = True
            return False

    def publish(self, state: dict, changed: bool) -> bool:
        from .live.stores import StoreDown

        per_group, done = progress()
        state.update(progress=per_group, done=done, pid=self.pid, host=self.host, time=time.time())
        try:
            self.store.publish(self.rank, json.dumps(state), changed)
        except StoreDown:
            return False
        self.sent_at = time.monotonic()
        return True

    def run(self):
        while self.store is None:
            if self.final is not None:
                self.finished.set()
                return
            if not self._connect():
                time.sleep(2)
        delay = self.interval
        while True:
            if self.final is not None:
                self.publish(dict(self.final), True)
                self.finished.set()
                return
            time.sleep(delay)
            delay = self.tick()

    def tick(self) -> float:
        """Publish if the state changed; return how long to sleep. While a
        published call is in progress, every interval (to say soon that it
        ended); otherwise until the oldest call in progress reaches the
        threshold, or a whole threshold when none is: a call that starts
        later cannot reach it sooner. A healthy job's publisher so wakes
        about once per threshold, not once per interval."""
        state = current_state(self.threshold_ns)
        key = (state["current_op"], state.get("group"), state.get("op_seq"), state.get("peers"),
               state.get("async"))
        ttl = self.store.ttl
        refresh = ttl is not None and time.monotonic() - self.sent_at > ttl / 3
        if key != self.published or refresh:
            if self.publish(state, key != self.published):
                self.published = key
            else:
                self.published = None  # the store went away: send again once it answers
                return 1.0
        if key[0] != "compute":
            return self.interval
        due = next_due(self.threshold_ns)
        wait = self.threshold_ns if due is None else due
        return min(max(wait / 1e9, 0.001), self.threshold_ns / 1e9)

    def finish(self, state: dict, wait: float = 1.0) -> None:
        self.final = state
        self.finished.wait(wait)


def _exit_state() -> dict:
    if _state["crashed"]:
        return {"current_op": "exited", "alive": False, "exit": _state["crashed"]}
    return {"current_op": "idle", "exit": "finished"}


def _on_exit():
    """Stop the agent's threads before the interpreter goes: a daemon thread
    still inside a TCPStore call when Python finalizes is unwound through
    C++ and aborts the process (SIGABRT, "terminate called without an
    active exception")."""
    watcher, stop = _state["watcher"], _state.get("stop")
    if watcher is not None and stop is not None:
        stop.set()
        watcher.join(5)
    publisher = _state["publisher"]
    if publisher is not None and publisher.is_alive():
        publisher.finish(_exit_state(), wait=5)


def _excepthook(previous):
    def hook(kind, value, tb):
        _state["crashed"] = f"{getattr(kind, '__name__', 'exception')}: {str(value)[:200]}"
        previous(kind, value, tb)
    return hook


def default_store() -> str:
    """FORENSICS_STORE, else the job's own TCPStore (MASTER_ADDR:MASTER_PORT), else ''."""
    url = os.environ.get("FORENSICS_STORE", "")
    if url:
        return url
    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    return f"tcpstore://{host}:{port}" if host and port.isdigit() else ""


def install(store: str | None = None, threshold_ms: float = THRESHOLD_MS, interval_ms: float = INTERVAL_MS,
            watch: bool = False, **watch_options) -> bool:
    """Wrap torch.distributed's calls and start publishing this rank's
    state. `store` defaults to FORENSICS_STORE, then the job's own TCPStore.
    With `watch=True` rank 0 also runs the watcher in a thread (options as
    for forensics.live.watch.WatchOptions: out, stuck_after, on_hang, ...).
    Returns False, changing nothing, when there is no coordinator."""
    import torch.distributed as dist

    url = store or default_store()
    if _installed:
        return True
    if not url:
        return False
    from .live.stores import parse_store

    parse_store(url)  # a malformed URL fails here, in the caller's hands
    for api in (*COLLECTIVES, *P2P):
        fn = getattr(dist, api, None)
        if fn is None or api in _installed:
            continue
        call = _wrap(dist, api, fn)
        setattr(dist, api, _P2PWrapper(call, fn) if api in ALWAYS_ASYNC else call)
        _installed[api] = fn
    if getattr(dist, "batch_isend_irecv", None) is not None:
        _installed["batch_isend_irecv"] = dist.batch_isend_irecv
        dist.batch_isend_irecv = _wrap_batch(dist, dist.batch_isend_irecv)
    if getattr(dist, "destroy_process_group", None) is not None:
        _installed["destroy_process_group"] = dist.destroy_process_group
        dist.destroy_process_group = _wrap_destroy(dist.destroy_process_group)
    work = getattr(dist, "Work", None)
    if work is not None:
        _installed["Work.wait"] = work.wait
        work.wait = _wrap_wait(work.wait)
    rank = int(os.environ.get("RANK", "0") or 0)
    publisher = _state["publisher"] = _Publisher(url, rank, threshold_ms, interval_ms)
    publisher.start()
    atexit.register(_on_exit)
    sys.excepthook = _excepthook(sys.excepthook)
    if watch and rank == 0:
        _state["watcher"] = _start_watcher(url, watch_options)
    return True


def _start_watcher(url: str, options: dict):
    """The watcher as a daemon thread of rank 0: it reports and runs the
    hook, and keeps watching; the job is never stopped by it."""
    from .live.watch import WatchOptions, watch

    def say(line):
        print(f"forensics watch (rank 0): {line}", file=sys.stderr, flush=True)

    settings = {"out": os.environ.get("FORENSICS_WATCH_OUT", "forensics-watch"),
                "on_hang": os.environ.get("FORENSICS_ON_HANG", ""),
                "stuck_after": float(os.environ.get("FORENSICS_STUCK_AFTER", "60") or 60),
                "keep_watching": True, "echo": say, **options}
    world = settings.pop("world_size", None) or int(os.environ.get("WORLD_SIZE", "1") or 1)
    settings.setdefault("stop", threading.Event())
    _state["stop"] = settings["stop"]

    def run():
        try:
            watch(WatchOptions(url, world, **settings))
        except Exception as exc:  # noqa: BLE001 - the watcher must never take the job down
            say(f"stopped: {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=run, name="forensics-watch", daemon=True)
    thread.start()
    return thread


def uninstall() -> None:
    """Put torch.distributed back as it was (tests, notebooks). The
    publisher stops with the process."""
    import torch.distributed as dist

    for api, fn in list(_installed.items()):
        if api == "Work.wait":
            dist.Work.wait = fn
        else:
            setattr(dist, api, fn)
    _installed.clear()


def main(argv=None) -> int:
    """`python -m forensics.agent [--watch] SCRIPT ARGS`: install, then run SCRIPT as __main__."""
    import runpy

    argv = sys.argv[1:] if argv is None else list(argv)
    watch = bool(argv) and argv[0] == "--watch"
    if watch:
        argv = argv[1:]
    if not argv or argv[0].startswith("-"):
        print("usage: python -m forensics.agent [--watch] SCRIPT [ARGS ...]\n"
              "  publishes to FORENSICS_STORE (tcpstore://HOST:PORT or redis://HOST:PORT/PREFIX),\n"
              "  else to the job's own TCPStore (MASTER_ADDR:MASTER_PORT)", file=sys.stderr)
        return 2
    try:
        install(watch=watch or os.environ.get("FORENSICS_WATCH", "") == "1")
    except ValueError as exc:
        print(f"forensics.agent: {exc}", file=sys.stderr)
        return 2
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    # `-m forensics.agent` runs this file as __main__: install through the
    # importable module, so the script and its threads see the same state.
    from forensics.agent import main as _main

    raise SystemExit(_main())
