"""Where the benchmarks keep what they measured, for the docs.

Each `bench_*.py` run ends with `record(...)`: the command as typed, the
machine it ran on, and its figures go to `benchmarks/results/<script>.json`
(one entry per distinct command; a rerun of the same command replaces its
entry). `docs/gen_pages.py` renders `docs/benchmarks.md` from these files
only, so every figure on that page carries the command that produced it and
the machine it ran on.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
SCHEMA = "forensics.bench/1"


def machine() -> dict:
    """The CPU model, cores, memory and Python of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    memory = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            kib = next(int(line.split()[1]) for line in handle if line.startswith("MemTotal:"))
        memory = round(kib / (1 << 20), 1)
    except (OSError, StopIteration, ValueError):
        pass
    out = {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory,
           "python": f"{platform.python_implementation()} {platform.python_version()}",
           "os": f"{platform.system()} {platform.release()}"}
    try:  # how busy the machine was as the run ended: other work slows every figure
        out["load_average_1m"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    return out


def command(argv: list[str] | None = None) -> str:
    """The command that ran this benchmark, as typed from the repository root."""
    argv = sys.argv if argv is None else argv
    script = os.path.relpath(os.path.abspath(argv[0]), os.path.dirname(HERE))
    return shlex.join(["python", script.replace(os.sep, "/"), *argv[1:]])


def record(name: str, columns: list[str], rows: list[list], notes: list[str] | None = None,
           argv: list[str] | None = None, folder: str = RESULTS) -> str:
    """Keep one run's table: `columns` name the cells of each row (strings
    or numbers as they should read). Returns the results file's path."""
    path = os.path.join(folder, f"{name}.json")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        data = {"schema": SCHEMA, "benchmark": name, "runs": []}
    run = {"command": command(argv), "machine": machine(), "columns": list(columns),
           "rows": [list(row) for row in rows], "notes": list(notes or [])}
    data["runs"] = [r for r in data["runs"] if r.get("command") != run["command"]] + [run]
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, ensure_ascii=False)
        handle.write("\n")
    print(f"results: {os.path.relpath(path)}", file=sys.stderr)
    return path


def load(folder: str = RESULTS) -> dict[str, dict]:
    """Every results file, by benchmark name."""
    out = {}
    if not os.path.isdir(folder):
        return out
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                data = json.load(handle)
            out[data.get("benchmark", name[:-5])] = data
    return out
