"""The coordinator the in-job agents publish to and `forensics watch` reads.

Two back-ends with one key layout, under a prefix (one per job):

    PREFIX/rank/<R>      the rank's latest state (JSON, written by its agent)
    PREFIX/changes       a counter every agent bumps when its state changed
    PREFIX/changes/<B>   the same, per bucket of ranks (B = R mod 1024)

The watcher polls `changes` alone; when it moved, it reads the bucket
counters and then only the ranks of the buckets that moved. Nothing grows
with the job's length: a state overwrites the last one.

- `tcpstore://HOST:PORT`: a `torch.distributed.TCPStore`, by default the
  job's own (torchrun's, at MASTER_ADDR:MASTER_PORT); `forensics watch
  --serve` can host a dedicated one instead. Keys never expire there.
- `redis://HOST:PORT/PREFIX`: Redis. A state expires unless its agent
  republishes it (every third of the expiry, even when idle), so a rank
  that died or froze ages out and shows as silent.

Store errors become `StoreDown`; callers retry.
"""

from __future__ import annotations

import socket
import warnings
from datetime import timedelta

PREFIX = "forensics"
BUCKETS = 1024
RANK_TTL_S = 30        # Redis: a state lives this long unless republished
CHUNK = 1000           # keys per multi-get (TCPStore's grows slower than linearly beyond that)
SCHEMES = ("tcpstore", "redis")


class StoreDown(Exception):
    """The coordinator did not answer (not started yet, gone, restarting)."""


def parse_store(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, prefix) of tcpstore://HOST:PORT[/PREFIX] or redis://HOST:PORT[/PREFIX]."""
    scheme, sep, rest = str(url).partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(f"{url!r}: expected tcpstore://HOST:PORT or redis://HOST:PORT[/PREFIX]")
    address, _, prefix = rest.partition("/")
    host, _, port = address.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{url!r}: no port (HOST:PORT)")
    prefix = prefix.strip("/") or PREFIX
    if any(c.isspace() for c in prefix):
        raise ValueError(f"{url!r}: the prefix may not contain spaces")
    return scheme, host.strip("[]") or "127.0.0.1", int(port), prefix


def bucket_of(rank: int) -> int:
    return rank % BUCKETS


class Coordinator:
    """What the agent and the watcher do with a store, whatever it is."""

    ttl: int | None = None

    def __init__(self, url: str):
        self.url = url
        self.scheme, self.host, self.port, self.prefix = parse_store(url)

    def rank_key(self, rank: int) -> str:
        return f"{self.prefix}/rank/{rank}"

    @property
    def changes_key(self) -> str:
        return f"{self.prefix}/changes"

    def bucket_key(self, bucket: int) -> str:
        return f"{self.prefix}/changes/{bucket}"

    # Implemented by each back-end; every one raises StoreDown when the store does not answer.
    def publish(self, rank: int, payload: str, changed: bool) -> None:
        raise NotImplementedError

    def changes(self) -> int:
        raise NotImplementedError

    def buckets(self, count: int) -> list[int]:
        raise NotImplementedError

    def read(self, ranks) -> dict[int, bytes]:
        """The stored state of each of `ranks` that has one."""
        raise NotImplementedError

    def forget_known(self) -> None:
        """After a reconnect: assume nothing about which keys exist."""

    def close(self) -> None:
        pass


TORCH_MISSING = ("tcpstore:// needs PyTorch's TCPStore, and torch {why}: pip install torch (the job's own "
                 "version), or publish to Redis instead (redis://HOST:PORT, pip install 'forensics[redis]')")


def tcpstore_class():
    """torch.distributed.TCPStore, or ValueError saying what to install:
    the watcher may run on a host that has no PyTorch."""
    with warnings.catch_warnings():  # torch's import speaks of NumPy, which a store does not use
        warnings.filterwarnings("ignore", message=".*NumPy.*")
        try:
            from torch.distributed import TCPStore
        except ImportError as exc:
            missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torch"
            why = "is not installed here" if missing else f"cannot be imported here ({_why(exc)})"
            raise ValueError(TORCH_MISSING.format(why=why)) from None
    return TCPStore


class TCPStoreCoordinator(Coordinator):
    def __init__(self, url: str, serve: bool = False, timeout: float = 5.0):
        super().__init__(url)
        self.serve, self.timeout = serve, timeout
        self.store = None
        self.known: set[int] = set()       # ranks whose key exists (keys never go away in a TCPStore)
        self.made_buckets = 0              # bucket counters known to exist
        self.connect()

    def connect(self) -> None:
        TCPStore = tcpstore_class()
        self.store = None
        self.forget_known()
        if not self.serve:
            # Knock first: a TCPStore client that finds nobody logs a C++ stack trace per attempt.
            try:
                socket.create_connection((self.host, self.port), timeout=min(self.timeout, 2.0)).close()
            except OSError as exc:
                raise StoreDown(f"{self.host}:{self.port}: {exc.strerror or exc}") from None
        try:
            self.store = TCPStore(self.host, self.port, is_master=self.serve, wait_for_workers=False,
                                  timeout=timedelta(seconds=self.timeout))
        except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError/DistNetworkError/TimeoutError
            raise StoreDown(_why(exc)) from None

    def forget_known(self) -> None:
        self.known = set()
        self.made_buckets = 0

    def _call(self, method, *args):
        if self.store is None:
            self.connect()
        try:
            return getattr(self.store, method)(*args)
        except Exception as exc:  # noqa: BLE001
            raise StoreDown(_why(exc)) from None

    def publish(self, rank: int, payload: str, changed: bool) -> None:
        self._call("set", self.rank_key(rank), payload)
        if changed:
            self._call("add", self.bucket_key(bucket_of(rank)), 1)
            self._call("add", self.changes_key, 1)

    def changes(self) -> int:
        return int(self._call("add", self.changes_key, 0))

    def buckets(self, count: int) -> list[int]:
        count = min(count, BUCKETS)
        # A multi-get waits for keys that do not exist: create the counters first (adding 0 keeps a value).
        for bucket in range(self.made_buckets, count):
            self._call("add", self.bucket_key(bucket), 0)
        self.made_buckets = max(self.made_buckets, count)
        out: list[int] = []
        for start in range(0, count, CHUNK):
            keys = [self.bucket_key(b) for b in range(start, min(count, start + CHUNK))]
            out += [_int(v) for v in self._call("multi_get", keys)]
        return out

    def read(self, ranks) -> dict[int, bytes]:
        ranks = list(ranks)
        for rank in ranks:
            if rank not in self.known and self._call("check", [self.rank_key(rank)]):
                self.known.add(rank)
        present = [r for r in ranks if r in self.known]
        out: dict[int, bytes] = {}
        for start in range(0, len(present), CHUNK):
            part = present[start:start + CHUNK]
            out.update(zip(part, self._call("multi_get", [self.rank_key(r) for r in part])))
        return out


class RedisCoordinator(Coordinator):
    ttl = RANK_TTL_S

    def __init__(self, url: str, timeout: float = 5.0):
        super().__init__(url)
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise ValueError("redis:// needs the redis client: pip install 'forensics[redis]'") from None
        self.errors = (redis.RedisError, OSError)
        # One retry (a pooled connection the server dropped), no backoff: an
        # outage is said at once and the callers retry in their own time.
        self.client = redis.Redis(host=self.host, port=self.port, socket_timeout=timeout,
                                  socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 1))

    def _run(self, fn):
        try:
            return fn()
        except self.errors as exc:
            raise StoreDown(_why(exc)) from None

    def publish(self, rank: int, payload: str, changed: bool) -> None:
        def send():
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self.rank_key(rank), payload, ex=self.ttl)
            if changed:
                pipe.incr(self.bucket_key(bucket_of(rank)))
                pipe.incr(self.changes_key)
            pipe.execute()
        self._run(send)

    def changes(self) -> int:
        return _int(self._run(lambda: self.client.get(self.changes_key)))

    def buckets(self, count: int) -> list[int]:
        count = min(count, BUCKETS)
        values = self._run(lambda: self.client.mget([self.bucket_key(b) for b in range(count)]))
        return [_int(v) for v in values]

    def read(self, ranks) -> dict[int, bytes]:
        ranks = list(ranks)
        out: dict[int, bytes] = {}
        for start in range(0, len(ranks), CHUNK):
            part = ranks[start:start + CHUNK]
            values = self._run(lambda: self.client.mget([self.rank_key(r) for r in part]))
            out.update((r, v) for r, v in zip(part, values) if v is not None)
        return out

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing a connection that is already gone
            pass


def open_store(url: str, serve: bool = False, timeout: float = 5.0) -> Coordinator:
    """A coordinator for `url`; ValueError for a malformed URL or a missing
    client library (torch, redis), StoreDown
    when a TCPStore does not answer (a Redis client connects on first use)."""
    scheme = parse_store(url)[0]
    if scheme == "redis":
        if serve:
            raise ValueError("--serve hosts a TCPStore; start redis-server yourself for redis://")
        return RedisCoordinator(url, timeout)
    return TCPStoreCoordinator(url, serve=serve, timeout=timeout)


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__
