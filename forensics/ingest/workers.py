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

The run's limits (forensics.limits) are kept here: a worker whose file
takes longer than `file_timeout` is killed (that file gets an error, a new
worker takes its place), at the ingest deadline of `timeout` every worker
is ended and the files not finished get errors, and each worker's address
space is its share of `memory_bytes` (a MemoryError costs its file). Where
files are parsed in this process (`run_inline`), SIGALRM interrupts a
parse past its time in the main thread.

A tuple that a worker's results share goes to the parent once: every
Flight Recorder dump of an 8,192-rank group names the same 8,192 members,
and pickled into each result they were 8,192 copies of 8,192 ints in the
parent (a peak of 2.8 GB) before merging kept one. A reader marks such a
tuple as a `SharedTuple`; a worker sends it whole the first time and as
(run, worker, number) after, and the parent hands out the one copy it has.
"""

from __future__ import annotations

import gc
import io
import itertools
import os
import pickle
import select
import selectors
import signal
import sys
import threading
import time

from .. import limits as _limits

try:
    import fcntl
except ImportError:  # no fork there either: `available()` is False
    fcntl = None

_TASK = 4          # bytes of a task index in the task pipe, little-endian
_HEADER = 12       # each frame from a worker: task index (4) and result size (8)
_STARTED = 0       # a frame of this size: the worker started the task (a result is never empty)
_OUT_OF_MEMORY = 3  # a worker's exit status after a MemoryError
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
    task whose worker died on it, was stopped past the limits, or that no
    worker started before the ingest deadline, `on_died(index, how)` gives
    the result; tasks left when every worker has died run here
    (`run_inline`). `meanwhile()` runs in the parent while the workers
    parse."""
    limits = _limits.current()
    queue = order(costs)
    records = b"".join(index.to_bytes(_TASK, "little") for index in queue)
    task_read, task_write = os.pipe()
    _fit(task_write, len(records))
    os.set_blocking(task_write, False)
    written = _write_some(task_write, records)
    children: dict[int, int] = {}  # result read fd -> worker pid
    run_number = next(_RUNS)
    feeder = None
    feeding = _Feeding()  # the task pipe's write end while a thread writes to it
    memory = limits.worker_memory(min(jobs, len(tasks)))
    slots = itertools.count()

    result_pipe = _result_pipe_size(min(jobs, len(tasks)))

    def spawn() -> int:
        read_fd, write_fd = os.pipe()
        _fit(write_fd, result_pipe)
        slot = next(slots)
        with feeding.lock:  # the feeder does not close its end while we fork
            pid = os.fork()
        if pid == 0:  # the worker: never returns
            os.close(read_fd)
            for fd in (task_write, feeding.fd):
                if fd >= 0:
                    os.close(fd)
            for other in children:
                os.close(other)
            _limits.set_memory_limit(memory)
            _child(task_read, write_fd, tasks, work, (run_number, slot))
        os.close(write_fd)
        children[read_fd] = pid
        return read_fd

    try:
        for _ in range(min(jobs, len(tasks))):
            spawn()
        if written < len(records):  # more tasks than the pipe holds: a thread hands out the rest
            feeding.fd = task_write
            feeder = threading.Thread(target=_feed, args=(feeding, records, written), daemon=True)
            feeder.start()
        else:
            os.close(task_write)
        task_write = -1
        if limits.file_timeout is None:  # no worker is ever replaced: the parent needs no read end
            os.close(task_read)
            task_read = -1
        if meanwhile is not None:
            meanwhile()
        answered, died, late = _collect(children, on_result, limits, spawn if task_read >= 0 else None)
        if task_read >= 0:
            os.close(task_read)  # a feeder still writing now gets EPIPE
            task_read = -1
        for index, how in died:
            answered.add(index)
            on_result(index, on_died(index, how))
        left = [index for index in queue if index not in answered]  # in the pipe when every worker had died
        if late:
            for index in left:
                on_result(index, on_died(index, _never_started(limits)))
        elif left:
            run_inline([tasks[i] for i in left], work, lambda i, r: on_result(left[i], r),
                       lambda i, how: on_died(left[i], how))
    finally:
        for key in [key for key in _SHARED if key[0] == run_number]:  # the results keep what they use
            del _SHARED[key]
        for read_fd, pid in children.items():  # interrupted: end our own workers
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            _reap(pid)
            os.close(read_fd)
        for fd in (task_read, task_write):
            if fd >= 0:
                os.close(fd)
        if feeder is not None:
            feeder.join()


class _Overtime(BaseException):
    """Raised by SIGALRM inside a parse past its time. A BaseException, so
    a reader's `except Exception` does not swallow it."""


def _file_limit(limits) -> str:
    return f"took longer than the per-file limit of {limits.file_timeout:g} s (--file-timeout) and was stopped"


def _deadline_hit(limits) -> str:
    return (f"had not finished when the run's --timeout of {limits.timeout:g} s ran out "
            f"(reading gets {_limits.INGEST_SHARE:.0%} of it): stopped")


def _never_started(limits) -> str:
    return f"never started: the run's --timeout of {limits.timeout:g} s ran out first"


def _out_of_memory(limits, workers: int) -> str:
    share = limits.worker_memory(workers) if workers else limits.parent_memory()
    if share is None:
        return "ran out of memory"
    return f"ran out of memory (its share of the memory limit: {_limits.describe_bytes(share)})"


def run_inline(tasks: list, work, on_result, on_died) -> None:
    """`work(task)` for every task in this process, in order, within the
    limits: a task past `file_timeout` is interrupted by SIGALRM (in the
    main thread of a POSIX process; elsewhere it runs to its end), no task
    starts after the ingest deadline, and a MemoryError costs its task
    only. `on_died(index, how)` gives the result of such a task."""
    limits = _limits.current()
    alarm = (limits.file_timeout is not None or limits.timeout is not None) and _can_alarm()
    previous = signal.signal(signal.SIGALRM, _ring) if alarm else None
    try:
        for index, task in enumerate(tasks):
            if limits.ingest_over():
                on_result(index, on_died(index, _never_started(limits)))
                continue
            seconds, why = _budget(limits)
            if alarm and seconds is not None:
                signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
            try:
                result = work(task)
            except _Overtime:
                result = on_died(index, why)
            except MemoryError:
                result = on_died(index, _out_of_memory(limits, 0))
            finally:
                if alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            on_result(index, result)
    finally:
        if alarm:
            signal.signal(signal.SIGALRM, previous)


def _budget(limits) -> tuple[float | None, str]:
    """Seconds the next task may take, and what it is told when it takes them."""
    deadline = limits.ingest_deadline()
    left = None if deadline is None else deadline - time.monotonic()
    if limits.file_timeout is not None and (left is None or limits.file_timeout <= left):
        return limits.file_timeout, _file_limit(limits)
    if left is not None:
        return left, _deadline_hit(limits)
    return None, ""


def _can_alarm() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _ring(signum, frame):
    raise _Overtime()


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


RESULT_PIPE_BYTES = 1 << 20     # a worker's result pipe holds this much unread (where Linux allows it) ...
RESULT_PIPES_BYTES = 16 << 20   # ... and all of a run's result pipes at most this much together


def _result_pipe_size(workers: int) -> int:
    """How much a worker's result pipe should hold unread. While the parent
    runs `meanwhile` it reads no result: a worker whose result does not fit
    the pipe (64 KiB by default; one rank's 256 MB console parses to 66 KB)
    waits there, idle, until the parent is done. Linux counts pipe memory
    per user (/proc/sys/fs/pipe-user-pages-soft, 64 MiB by default), so many
    workers share RESULT_PIPES_BYTES."""
    return max(1 << 16, min(RESULT_PIPE_BYTES, RESULT_PIPES_BYTES // max(1, workers)))


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


class _Feeding:
    """The task pipe's write end while the feeder thread owns it: a worker
    forked meanwhile must close it too, or the pipe never ends."""

    def __init__(self):
        self.lock = threading.Lock()
        self.fd = -1


def _feed(feeding: _Feeding, data: bytes, done: int) -> None:
    """The rest of the task records, as the workers make room; stops when
    no worker is left to read them (the parent then runs what is left)."""
    fd = feeding.fd
    os.set_blocking(fd, True)
    try:
        while done < len(data):
            done += os.write(fd, data[done:done + _PIPE_WRITE])
    except OSError:  # EPIPE: every worker is gone
        pass
    finally:
        with feeding.lock:
            feeding.fd = -1
            os.close(fd)


def _child(task_fd: int, write_fd: int, tasks: list, work, worker: tuple[int, int]) -> None:
    code = 0
    # What the parent held at the fork is never freed here: out of the
    # collector's reach, a full collection no longer walks all of it (and no
    # longer writes to every page it shares with the parent).
    gc.freeze()
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
    except MemoryError:  # past its share of the memory limit: the parent names the file
        code = _OUT_OF_MEMORY
    except BaseException:  # noqa: BLE001 - the parent sees the task started and unanswered, and says so
        code = 1
    finally:
        os._exit(code)


def _collect(children: dict[int, int], on_result, limits=None, spawn=None):
    """Results as they come, until every worker has ended. Returns the tasks
    answered; for each worker that ended inside a task, (task, how); and
    whether the ingest deadline ended the workers. A worker past the
    per-file limit is killed and, with `spawn`, replaced."""
    limits = limits or _limits.current()
    answered: set[int] = set()
    died: list[tuple[int, str]] = []
    buffers = {fd: bytearray() for fd in children}
    current: dict[int, int | None] = dict.fromkeys(children)
    since: dict[int, float] = {}  # fd -> when its current task started
    stopped: dict[int, tuple] = {}  # fd -> (the task it was in, why we killed it)
    deadline = limits.ingest_deadline()
    late = False
    processes = len(children)
    with selectors.DefaultSelector() as selector:
        for fd in children:
            selector.register(fd, selectors.EVENT_READ)
        while current:
            now = time.monotonic()
            if deadline is not None and now >= deadline and not late:
                late = True
                for fd, index in current.items():
                    stopped.setdefault(fd, (index, _deadline_hit(limits)))
                    _kill(children[fd])
            if limits.file_timeout is not None:
                for fd, began in list(since.items()):
                    if current.get(fd) is not None and now - began >= limits.file_timeout and fd not in stopped:
                        stopped[fd] = (current[fd], _file_limit(limits))
                        _kill(children[fd])
            for key, _ in selector.select(_wait(now, deadline if not late else None, since, limits)):
                fd = key.fd
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    selector.unregister(fd)
                    os.close(fd)
                    how = _reap(children.pop(fd))
                    if how == f"exited with status {_OUT_OF_MEMORY}":
                        how = _out_of_memory(limits, processes)
                    index = current.pop(fd)
                    since.pop(fd, None)
                    stop = stopped.pop(fd, None)
                    why = stop[1] if stop is not None else None
                    if index is not None and (stop is None or stop[0] == index):
                        died.append((index, why or how))
                    # else: it had finished that task and begun another, which we
                    # leave unanswered: it is run again (`run` runs what is left).
                    if why is not None and not late and spawn is not None:  # a slow file: a new worker goes on
                        new_fd = spawn()
                        buffers[new_fd] = bytearray()
                        current[new_fd] = None
                        selector.register(new_fd, selectors.EVENT_READ)
                    continue
                buffer = buffers[fd]
                buffer += chunk
                start = 0
                while len(buffer) - start >= _HEADER:
                    index = int.from_bytes(buffer[start:start + 4], "little")
                    size = int.from_bytes(buffer[start + 4:start + _HEADER], "little")
                    if size == _STARTED:
                        current[fd] = index
                        since[fd] = time.monotonic()
                        start += _HEADER
                        continue
                    if len(buffer) - start < _HEADER + size:
                        break
                    result = pickle.loads(buffer[start + _HEADER:start + _HEADER + size])
                    start += _HEADER + size
                    current[fd] = None
                    since.pop(fd, None)
                    answered.add(index)
                    on_result(index, result)
                del buffer[:start]
    return answered, died, late


def _wait(now: float, deadline, since: dict, limits) -> float | None:
    """How long the selector may wait before a limit needs checking."""
    due = [] if deadline is None else [deadline]
    if limits.file_timeout is not None:
        due += [began + limits.file_timeout for began in since.values()]
    return max(0.0, min(due) - now) + 0.01 if due else None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


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
