"""The in-job agent: each rank reports the communication call it is in.

    import forensics.agent; forensics.agent.install()          # in a training script
    torchrun ... -m forensics.agent train.py ARGS               # or no code change

The public blocking calls of `torch.distributed` (collectives, send/recv,
barrier, monitored_barrier) are wrapped: on entry a few fields go into a
slot of the calling thread (op, group name and members, the group's
sequence number, the peer), on return the slot is cleared — no I/O, no
lock. A background thread publishes this rank's state to the coordinator
only when a call has been in progress longer than the threshold (default
50 ms), and once more when it ends, so a healthy job sends almost nothing.

The coordinator is a TCPStore (`FORENSICS_STORE=tcpstore://HOST:PORT`,
served by `forensics watch`) or Redis (`redis://HOST:PORT/PREFIX`, one
prefix per job; a rank's state expires unless republished, so a dead rank
shows as silent): the state under `PREFIX/rank/<R>`, and a counter
`PREFIX/changes` the watcher polls. Calls made through names
imported before `install()` (`from torch.distributed import all_reduce`)
and asynchronous work waited on later are not seen.
"""

from __future__ import annotations

import inspect
import json
import os
import socket
import threading
import time

PREFIX = "forensics"
BLOCKING = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
            "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier",
            "monitored_barrier", "send", "recv", "all_gather_object", "broadcast_object_list")
P2P = {"send": "dst", "recv": "src"}

_local = threading.local()
_slots: list[list] = []          # every thread's slot: [op, group, members, seq, peer, started_ns]
_seq: dict[str, int] = {}
_groups: dict[int, tuple[str, tuple[int, ...]]] = {}
_installed: dict = {}


def _slot() -> list:
    slot = getattr(_local, "slot", None)
    if slot is None:
        slot = _local.slot = [None, "", (), 0, -1, 0]
        _slots.append(slot)
    return slot


def _group_of(dist, group) -> tuple[str, tuple[int, ...]]:
    key = id(group)
    known = _groups.get(key)
    if known is None:
        pg = group if group is not None else dist.group.WORLD
        try:
            name = dist.distributed_c10d._get_process_group_name(pg)
        except Exception:  # noqa: BLE001 - a torch without it: the object's position is the name
            name = str(len(_groups))
        try:
            members = tuple(dist.get_process_group_ranks(pg))
        except Exception:  # noqa: BLE001
            members = ()
        known = _groups[key] = (name, members)
    return known


def _wrap(dist, name: str, fn):
    params = list(inspect.signature(fn).parameters)
    group_at = params.index("group") if "group" in params else None
    peer_name = P2P.get(name)
    peer_at = params.index(peer_name) if peer_name in params else None
    async_at = params.index("async_op") if "async_op" in params else None

    def call(*args, **kwargs):
        if kwargs.get("async_op") or (async_at is not None and len(args) > async_at and args[async_at]):
            return fn(*args, **kwargs)
        group = kwargs.get("group", args[group_at] if group_at is not None and len(args) > group_at else None)
        gname, members = _group_of(dist, group)
        seq = _seq[gname] = _seq.get(gname, 0) + (0 if peer_name else 1)
        peer = kwargs.get(peer_name, args[peer_at] if peer_at is not None and len(args) > peer_at else -1) \
            if peer_name else -1
        slot = _slot()
        slot[0], slot[1], slot[2], slot[3], slot[4] = name, gname, members, seq, -1 if peer is None else peer
        slot[5] = time.monotonic_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            slot[5] = 0

    call.__wrapped__ = fn
    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


class _Publisher(threading.Thread):
    def __init__(self, store, prefix: str, rank: int, threshold_ms: float, interval_ms: float):
        super().__init__(name="forensics-agent", daemon=True)
        self.store, self.prefix, self.rank = store, prefix, rank
        self.ttl = RANK_TTL_S if isinstance(store, RedisStore) else None
        self.sent_at = 0.0
        self.threshold_ns = int(threshold_ms * 1e6)
        self.interval = interval_ms / 1000
        self.published = None
        self.host, self.pid = socket.gethostname(), os.getpid()

    def state(self) -> dict:
        now = time.monotonic_ns()
        busy = [s for s in _slots if s[5] and now - s[5] >= self.threshold_ns]
        if not busy:
            return {"current_op": "compute"}
        op, group, members, seq, peer, started = min(busy, key=lambda s: s[5])
        state = {"current_op": op, "group": group, "op_seq": seq, "state": "started",
                 "elapsed_ms": (now - started) // 1_000_000, "group_ranks": list(members)}
        if peer is not None and peer >= 0:
            state["peers"] = [peer]
        return state

    def run(self):
        while True:
            time.sleep(self.interval)
            state = self.state()
            key = (state["current_op"], state.get("group"), state.get("op_seq"))
            refresh = self.ttl is not None and key != ("compute", None, None) and \
                time.monotonic() - self.sent_at > self.ttl / 3
            if key == self.published and not refresh:
                continue
            self.published = key
            state.update(pid=self.pid, host=self.host, time=time.time())
            try:
                name = f"{self.prefix}/rank/{self.rank}"
                if self.ttl is None:
                    self.store.set(name, json.dumps(state))
                else:
                    self.store.set(name, json.dumps(state), self.ttl)
                if not refresh:
                    self.store.add(f"{self.prefix}/changes", 1)
                self.sent_at = time.monotonic()
            except Exception:  # noqa: BLE001 - the coordinator went away: the job goes on, and retries
                self.published = None


SCHEMES = ("tcpstore", "redis")
RANK_TTL_S = 30  # Redis: a rank's state expires unless republished, so a dead rank shows as silent


def parse_store(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, prefix) of tcpstore://HOST:PORT or redis://HOST:PORT[/PREFIX]."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(f"{url!r}: expected tcpstore://HOST:PORT or redis://HOST:PORT[/PREFIX]")
    address, _, prefix = rest.partition("/")
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"{url!r}: no port")
    return scheme, host or "127.0.0.1", int(port), prefix or PREFIX


class RedisStore:
    """The few TCPStore calls the agent and the watcher use, on Redis; keys
    live under the job's prefix, so jobs can share one Redis."""

    def __init__(self, host: str, port: int):
        import redis

        self.client = redis.Redis(host=host, port=port, socket_timeout=5)

    def set(self, key: str, value: str, ttl: int | None = None) -> None:
        self.client.set(key, value, ex=ttl)

    def get(self, key: str) -> bytes:
        value = self.client.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def add(self, key: str, amount: int) -> int:
        return int(self.client.incrby(key, amount))

    def check(self, keys: list[str]) -> bool:
        return self.client.exists(*keys) == len(keys)


def connect(url: str, serve: bool = False):
    """(store, prefix): a TCPStore client, or its server for the watcher
    (`serve`), or a Redis connection."""
    scheme, host, port, prefix = parse_store(url)
    if scheme == "redis":
        return RedisStore(host, port), prefix
    from torch.distributed import TCPStore

    return TCPStore(host, port, is_master=serve, wait_for_workers=False), prefix


def install(store: str | None = None, threshold_ms: float = 50, interval_ms: float = 10) -> bool:
    """Wrap torch.distributed's blocking calls and start publishing. Returns
    False (and changes nothing) when no coordinator is configured."""
    import torch.distributed as dist

    url = store or os.environ.get("FORENSICS_STORE", "")
    if not url or _installed:
        return bool(_installed)
    client, prefix = connect(url)
    rank = int(os.environ.get("RANK", "0"))
    for name in BLOCKING:
        fn = getattr(dist, name, None)
        if fn is not None and name not in _installed:
            setattr(dist, name, _wrap(dist, name, fn))
            _installed[name] = fn
    _Publisher(client, prefix, rank, threshold_ms, interval_ms).start()
    return True


def main(argv=None) -> int:
    """`python -m forensics.agent SCRIPT ARGS`: install, then run SCRIPT as __main__."""
    import runpy
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m forensics.agent SCRIPT [ARGS ...]  (FORENSICS_STORE=tcpstore://HOST:PORT)",
              file=sys.stderr)
        return 2
    install()
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
