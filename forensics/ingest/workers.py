"""Parsing in forked worker processes.

A worker forked from the parent already holds every module and plugin the
parent loaded, so it starts at once: no interpreter start, no imports, no
second plugin manager (a process pool's initializer cost about 0.1 s of
CPU per worker before it read one file, as much as parsing 10 Flight
Recorder dumps). Each worker gets a fixed share of the tasks, balanced by
their cost (file size), sends back one result per task as soon as it has
it, and leaves with `os._exit`: its copy of the parent's heap is never torn
down object by object.

While the workers parse, the parent runs `meanwhile` (the CLI imports the
graph library and loads the shipped rules there), so that start-up work
and parsing share the CPUs instead of taking turns.

A worker that dies (a signal, the OOM killer) costs only the task it was
on: that task gets an error naming the file and the signal, the rest of
its share is parsed in the parent. Results travel as pickles between two
copies of this program; no input is ever unpickled here.
"""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import sys

_HEADER = 8  # little-endian length of each frame


def available() -> bool:
    """Fork exists (POSIX). Elsewhere the callers use a spawned pool."""
    return hasattr(os, "fork") and sys.platform != "win32"


def shares(costs: list[int], jobs: int) -> list[list[int]]:
    """Task indices per worker: costliest first, each to the least loaded
    worker (longest-processing-time first), then each share in task order
    so a worker reads files in the order they were found."""
    loads = [0] * jobs
    out: list[list[int]] = [[] for _ in range(jobs)]
    for index in sorted(range(len(costs)), key=lambda i: -costs[i]):
        worker = min(range(jobs), key=loads.__getitem__)
        out[worker].append(index)
        loads[worker] += costs[index] + 1
    return [sorted(share) for share in out if share]


def run(tasks: list, costs: list[int], work, jobs: int, on_result, on_died, meanwhile=None) -> None:
    """`work(task)` for every task in `jobs` forked workers; `on_result(index,
    result)` in the parent as each result arrives. For a task whose worker
    died on it, `on_died(index, how)` gives the result; the rest of that
    worker's share runs here. `meanwhile()` runs in the parent while the
    workers parse."""
    children: dict[int, tuple[int, list[int]]] = {}  # read fd -> (pid, share)
    try:
        for share in shares(costs, jobs):
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                os.close(read_fd)
                _child(write_fd, tasks, share, work)
            os.close(write_fd)
            children[read_fd] = (pid, share)
        if meanwhile is not None:
            meanwhile()
        answered = _collect(list(children), on_result)
        while children:
            read_fd, (pid, share) = children.popitem()
            os.close(read_fd)
            how = _reap(pid)
            missing = [i for i in share if i not in answered]
            if missing:
                on_result(missing[0], on_died(missing[0], how))
                for index in missing[1:]:
                    on_result(index, work(tasks[index]))
    finally:
        for read_fd, (pid, _) in children.items():  # interrupted: end our own workers
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
            _reap(pid)
            os.close(read_fd)


def _child(write_fd: int, tasks: list, share: list[int], work) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent reports it and ends us
        with os.fdopen(write_fd, "wb", buffering=1 << 16) as out:
            for index in share:
                blob = pickle.dumps((index, work(tasks[index])), protocol=pickle.HIGHEST_PROTOCOL)
                out.write(len(blob).to_bytes(_HEADER, "little"))
                out.write(blob)
                out.flush()
    except BaseException:  # noqa: BLE001 - the parent sees the missing answers and says so
        code = 1
    finally:
        os._exit(code)


def _collect(fds: list[int], on_result) -> set[int]:
    answered: set[int] = set()
    buffers = {fd: bytearray() for fd in fds}
    with selectors.DefaultSelector() as selector:
        for fd in fds:
            selector.register(fd, selectors.EVENT_READ)
        remaining = len(fds)
        while remaining:
            for key, _ in selector.select():
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    selector.unregister(key.fd)
                    remaining -= 1
                    continue
                buffer = buffers[key.fd]
                buffer += chunk
                while len(buffer) >= _HEADER:
                    size = int.from_bytes(buffer[:_HEADER], "little")
                    if len(buffer) < _HEADER + size:
                        break
                    index, result = pickle.loads(buffer[_HEADER:_HEADER + size])
                    del buffer[:_HEADER + size]
                    answered.add(index)
                    on_result(index, result)
    return answered


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
