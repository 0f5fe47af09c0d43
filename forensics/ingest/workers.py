"""Parsing in forked worker processes.

A worker forked from the parent already holds every module and plugin the
parent loaded, so it starts at once: no interpreter start, no imports, no
second plugin manager (a process pool's initializer cost about 0.1 s of
CPU per worker before it read one file, as much as parsing 10 Flight
Recorder dumps). It leaves with `os._exit`: its copy of the parent's heap
is never torn down object by object.

The workers pull their tasks from one pipe, costliest (largest file)
first, each as soon as it is free. A fixed share per worker, balanced by
file size, still left one worker idle for up to a tenth of a 64-dump run:
the same bytes do not take the same time, and the parent's own start-up
work competes with one of the workers more than with the other. Pulling
balances what sizes cannot predict. A task index is 4 bytes, written and
read whole (a pipe read or write of at most PIPE_BUF bytes is atomic), so
two workers never take the same task.

Each worker says which task it starts before it works on it and sends its
result as soon as it has it. While the workers parse, the parent runs
`meanwhile` (the CLI imports the graph library and loads the shipped rules
there), so that start-up work and parsing share the CPUs instead of taking
turns.

A worker that dies (a signal, the OOM killer) costs only the task it had
started: that task gets an error naming the file and the signal, the other
workers go on taking tasks, and whatever no worker took is parsed in the
parent. Results travel as pickles between two copies of this program; no
input is ever unpickled here.

A tuple that a worker's results share goes to the parent once: every
Flight Recorder dump of an 8,192-rank group names the same 8,192 members,
and pickled into each result they were 8,192 copies of 8,192 ints in the
parent (a peak of 2.8 GB) before merging kept one. A reader marks such a
tuple as a `SharedTuple`; a worker sends it whole the first time and as
(run, worker, number) after, and the parent hands out the one copy it has.
"""

from __future__ import annotations

import io
import itertools
import os
import pickle
import select
import selectors
import signal
import sys
import threading

try:
    import fcntl
except ImportError:  # no fork there either: `available()` is False
    fcntl = None

_TASK = 4          # bytes of a task index in the task pipe, little-endian
_HEADER = 12       # each frame from a worker: task index (4) and result size (8)
_STARTED = 0       # a frame of this size: the worker started the task (a result is never empty)
# Writes of at most PIPE_BUF bytes are atomic, blocking or not: whole task
# records always (POSIX guarantees 512; Linux has 4096).
_PIPE_WRITE = max(_TASK, (getattr(select, "PIPE_BUF", 512) // _TASK) * _TASK)


class SharedTuple(tuple):
    """A tuple that many results hold (a group's members, the same in every
    rank's dump): a worker sends it to the parent once and then only its
    number. Equal to, and used as, a plain tuple."""

    __slots__ = ()


_SHARED: dict[tuple, SharedTuple] = {}  # in the parent: (run, worker, number) → the tuple
_RUNS = itertools.count()  # one number per call of `run` in this process


def _shared_new(key: tuple, items: tuple) -> SharedTuple:
    value = _SHARED[key] = SharedTuple(items)
    return value


def _shared_again(key: tuple) -> SharedTuple:
    return _SHARED[key]


class _Sender:
    """Pickles a worker's results. Only SharedTuple goes through Python
    code here (the pickler's dispatch table); everything else is the C
    pickler's own, as fast as `pickle.dumps`."""

    def __init__(self, worker: tuple[int, int]):
        self.worker = worker  # (run, worker): unique in the parent, whatever pids the system reuses
        self.buffer = io.BytesIO()
        self.pickler = pickle.Pickler(self.buffer, protocol=pickle.HIGHEST_PROTOCOL)
        self.pickler.dispatch_table = {SharedTuple: self.reduce}
        self.numbers: dict[int, tuple[int, SharedTuple]] = {}  # id → (number, the tuple, kept so ids stay unique)

    def reduce(self, value: SharedTuple):
        known = self.numbers.get(id(value))
        if known is not None:
            return _shared_again, ((*self.worker, known[0]),)
        number = len(self.numbers)
        self.numbers[id(value)] = (number, value)
        return _shared_new, ((*self.worker, number), tuple(value))

    def blob(self, result) -> bytes:
        """`result` pickled on its own (the memo is cleared each time)."""
        self.buffer.seek(0)
        self.buffer.truncate()
        self.pickler.clear_memo()
        self.pickler.dump(result)
        return self.buffer.getvalue()


def available() -> bool:
    """Fork exists (POSIX). Elsewhere the callers use a spawned pool."""
    return hasattr(os, "fork") and sys.platform != "win32"


def order(costs: list[int]) -> list[int]:
    """The order tasks are handed out: costliest first (a big file started
    last would keep one worker busy while the others idle), ties in task
    order."""
    return sorted(range(len(costs)), key=lambda i: -costs[i])


def run(tasks: list, costs: list[int], work, jobs: int, on_result, on_died, meanwhile=None) -> None:
    """`work(task)` for every task in up to `jobs` forked workers;
    `on_result(index, result)` in the parent as each result arrives. For a
    task whose worker died on it, `on_died(index, how)` gives the result;
    tasks no worker took run here. `meanwhile()` runs in the parent while
    the workers parse."""
    queue = order(costs)
    records = b"".join(index.to_bytes(_TASK, "little") for index in queue)
    task_read, task_write = os.pipe()
    _fit(task_write, len(records))
    os.set_blocking(task_write, False)
    written = _write_some(task_write, records)
    children: dict[int, int] = {}  # result read fd -> worker pid
    run_number = next(_RUNS)
    feeder = None
    try:
        for slot in range(min(jobs, len(tasks))):
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                os.close(read_fd)
                os.close(task_write)
                for other in children:
                    os.close(other)
                _child(task_read, write_fd, tasks, work, (run_number, slot))
            os.close(write_fd)
            children[read_fd] = pid
        os.close(task_read)
        task_read = -1
        if written < len(records):  # more tasks than the pipe holds: a thread hands out the rest
            feeder = threading.Thread(target=_feed, args=(task_write, records, written), daemon=True)
            feeder.start()
        else:
            os.close(task_write)
        task_write = -1
        if meanwhile is not None:
            meanwhile()
        answered, died = _collect(children, on_result)
        for index, how in died:
            answered.add(index)
            on_result(index, on_died(index, how))
        for index in queue:  # left in the pipe when every worker had died
            if index not in answered:
                on_result(index, work(tasks[index]))
    finally:
        for key in [key for key in _SHARED if key[0] == run_number]:  # the results keep what they use
            del _SHARED[key]
        for read_fd, pid in children.items():  # interrupted: end our own workers
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
            _reap(pid)
            os.close(read_fd)
        for fd in (task_read, task_write):
            if fd >= 0:
                os.close(fd)
        if feeder is not None:
            feeder.join()


def _fit(fd: int, size: int) -> None:
    """Grow the task pipe to hold every task where Linux allows it (up to
    /proc/sys/fs/pipe-max-size, 1 MiB by default: 262,144 tasks)."""
    setter = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if setter is None or size <= 1 << 16:
        return
    try:
        fcntl.fcntl(fd, setter, min(size, 1 << 20))
    except OSError:
        pass


def _write_some(fd: int, data: bytes) -> int:
    """Write what fits now, in atomic pieces of whole records; how many
    bytes went in."""
    done = 0
    while done < len(data):
        try:
            done += os.write(fd, data[done:done + _PIPE_WRITE])
        except BlockingIOError:
            break
    return done


def _feed(fd: int, data: bytes, done: int) -> None:
    """The rest of the task records, as the workers make room; stops when
    no worker is left to read them (the parent then runs what is left)."""
    os.set_blocking(fd, True)
    try:
        while done < len(data):
            done += os.write(fd, data[done:done + _PIPE_WRITE])
    except OSError:  # EPIPE: every worker is gone
        pass
    finally:
        os.close(fd)


def _child(task_fd: int, write_fd: int, tasks: list, work, worker: tuple[int, int]) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent reports it and ends us
        sender = _Sender(worker)
        with os.fdopen(write_fd, "wb", buffering=1 << 16) as out:
            while True:
                record = os.read(task_fd, _TASK)
                if not record:
                    break
                index = int.from_bytes(record, "little")
                # The previous result leaves in the same write as this notice.
                out.write(index.to_bytes(4, "little") + _STARTED.to_bytes(8, "little"))
                out.flush()
                blob = sender.blob(work(tasks[index]))
                out.write(index.to_bytes(4, "little") + len(blob).to_bytes(8, "little"))
                out.write(blob)
    except BaseException:  # noqa: BLE001 - the parent sees the task started and unanswered, and says so
        code = 1
    finally:
        os._exit(code)


def _collect(children: dict[int, int], on_result) -> tuple[set[int], list[tuple[int, str]]]:
    """Results as they come, until every worker has ended. Returns the tasks
    answered and, for each worker that ended inside a task, (task, how)."""
    answered: set[int] = set()
    died: list[tuple[int, str]] = []
    buffers = {fd: bytearray() for fd in children}
    current: dict[int, int | None] = dict.fromkeys(children)
    with selectors.DefaultSelector() as selector:
        for fd in children:
            selector.register(fd, selectors.EVENT_READ)
        while current:
            for key, _ in selector.select():
                fd = key.fd
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    selector.unregister(fd)
                    os.close(fd)
                    how = _reap(children.pop(fd))
                    index = current.pop(fd)
                    if index is not None:
                        died.append((index, how))
                    continue
                buffer = buffers[fd]
                buffer += chunk
                start = 0
                while len(buffer) - start >= _HEADER:
                    index = int.from_bytes(buffer[start:start + 4], "little")
                    size = int.from_bytes(buffer[start + 4:start + _HEADER], "little")
                    if size == _STARTED:
                        current[fd] = index
                        start += _HEADER
                        continue
                    if len(buffer) - start < _HEADER + size:
                        break
                    result = pickle.loads(buffer[start + _HEADER:start + _HEADER + size])
                    start += _HEADER + size
                    current[fd] = None
                    answered.add(index)
                    on_result(index, result)
                del buffer[:start]
    return answered, died


def _reap(pid: int) -> str:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "ended"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"was killed by {name}"
    return f"exited with status {os.WEXITSTATUS(status)}"
