"""One fuzz target per reader: bytes in, the reader run as `forensics
analyze` runs it, and only `InputError` (or a rule file's `RuleFileErrors`)
allowed out. Any other exception, a hang (libFuzzer's -timeout) or a run
out of memory (-rss_limit_mb) is a crash.

Shared by the atheris harness (tests/fuzz/fuzz.py) and the regression
tests (tests/fuzz/test_regressions.py): a crash the fuzzer finds is kept
under tests/fuzz/regressions/TARGET/ and replayed through the same
function by pytest, with or without atheris installed.

Each input is written to a file (in /dev/shm where there is one) because
the readers read paths: sniffing, gzip/zstd detection, tail reads and the
size checks are part of what is fuzzed. The file name is the one the
reader expects (a rank map is only claimed as `ranks.json`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REGRESSIONS = os.path.join(HERE, "regressions")
# Every module the targets reach: imported (and so instrumented) up front,
# since the harness instruments only what is imported inside its block.
MODULES = (
    "forensics.ingest", "forensics.ingest.textio", "forensics.ingest.pyspy", "forensics.ingest.gdb",
    "forensics.ingest.pystack", "forensics.ingest.elastic_error", "forensics.ingest.pytrace", "forensics.ingest.nccl",
    "forensics.ingest.torchlog", "forensics.ingest.flightrecorder", "forensics.ingest.fr_report",
    "forensics.ingest.ncclras",
    "forensics.ingest.safepickle", "forensics.ingest.jsonwalk", "forensics.ingest.snapshot",
    "forensics.ingest.manifest", "forensics.ingest.statements", "forensics.ingest.stacks",
    "forensics.ingest.attribution", "forensics.ingest.records", "forensics.ingest.grammar",
    "forensics.ingest.wire", "forensics.ingest.factsfile",
    "forensics.messages", "forensics.messages_match", "forensics.yamlrules", "forensics.model",
)


@dataclass(frozen=True)
class Target:
    name: str
    kinds: tuple[str, ...]     # artifact kinds whose real files seed it (as discovery names them)
    file_name: str             # what the input file is called
    run: Callable[[str, bytes], None]
    seed_filter: Callable[[bytes], bool] = lambda data: True
    about: str = ""


_DIR: list[str] = []


def scratch() -> str:
    """A private folder for the input files, in RAM where possible."""
    if not _DIR:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        _DIR.append(tempfile.mkdtemp(prefix="forensics-fuzz-", dir=base))
    return _DIR[0]


def _write(name: str, data: bytes) -> str:
    path = os.path.join(scratch(), name)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def _reader(module_name: str, *parsers: str):
    """sniff(path, head) then each parse function, then merge of what parsed."""
    def run(path: str, data: bytes) -> None:
        import importlib

        from forensics.ingest import merge
        from forensics.ingest.textio import InputError, read_head

        module = importlib.import_module(module_name)
        try:
            head = read_head(path)
        except InputError:
            head = data[:65536]
        module.sniff(path, head)
        for name in parsers:
            try:
                facts = getattr(module, name)(path, "fuzz/" + os.path.basename(path))
            except InputError:
                continue
            merge([facts])
    return run


def _statements(path: str, data: bytes) -> None:
    from forensics.ingest import merge, statements
    from forensics.ingest.textio import InputError
    from forensics.model import Artifact

    statements.sniff(path, data[:65536])
    try:
        facts = statements.parse(Artifact(statements.KIND, path, "fuzz/stated.log", None, False))
    except InputError:
        return
    merge([facts])


def _nccl(path: str, data: bytes) -> None:
    from forensics.ingest import merge, nccl
    from forensics.ingest.textio import InputError

    nccl.sniff(path, data[:65536])
    try:  # tail mode and --full (every line) both, by the input's length: one parse per input
        merge([nccl.parse(path, "fuzz/nccl.log", full=bool(len(data) & 1))])
    except InputError:
        pass


def _yaml_rules(path: str, data: bytes) -> None:
    from forensics.ingest.textio import InputError
    from forensics.yamlrules import RuleFileErrors, load_file

    try:
        load_file(path, "fuzz/rules.yaml")
    except (RuleFileErrors, InputError):
        pass


def _facts(path: str, data: bytes) -> None:
    """A facts file as written (it starts with the magic line), or, for any
    other input, the input as the body of a file with a valid header: so
    the mutations reach the decoder's checks, not only zlib's."""
    import zlib

    from forensics.ingest import factsfile, merge, wire
    from forensics.ingest.textio import InputError

    if not data.startswith(wire.MAGIC):
        header = b'{"format":"forensics-facts","layout":"%s","version":%d}' % (
            wire.schema().fingerprint.encode(), wire.VERSION)
        with open(path, "wb") as handle:
            handle.write(wire.MAGIC + header + b"\n" + zlib.compress(data, 1))
    factsfile.sniff(path, data[:65536])
    try:
        bundle = factsfile.parse(path, "fuzz/node.facts")
    except InputError:
        return
    merge([r for r in bundle.results if not isinstance(r, tuple)], tuple(bundle.artifacts), bundle.diagnostics)


def _facts_seeds() -> list[bytes]:
    """The JSON bodies of facts files of small corpus incidents, and one whole file."""
    import json
    import zlib

    from forensics.ingest import factsfile, read_artifacts, wire
    from forensics.plugins import Plugins

    out = []
    plugins = Plugins(autoload=False)
    for incident in ("real_p2p_cycle_2", "seed_p2p_deadlock", "real_missing_rank_early_exit_fr",
                     "real_collect_missing_rank_snapshots", "pm_gloo_sigkill_peer_closed_two_hosts"):
        folder = os.path.join(REPO, "corpus", incident)
        if not os.path.isdir(folder):
            continue
        artifacts, diagnostics, results = read_artifacts([folder], plugins, jobs=1)
        data = factsfile.to_bytes(factsfile.Bundle(artifacts, results, diagnostics, []))
        end = data.index(b"\n", len(wire.MAGIC))
        body = zlib.decompress(data[end + 1:])
        if len(body) <= SEED_BYTES:
            out.append(body)
        elif not any(d.startswith(wire.MAGIC) for d in out):
            out.append(data)
        json.loads(body)
    return out


_STAMPED_PLUGINS: list = []


def _stamped(path: str, data: bytes) -> None:
    """A log as a collector stamps it, through the whole ingest path: the
    sniff (which takes the stamps off the head), the unstamped copy and
    every reader that claims it, then merge."""
    from forensics.ingest import _parse_one, merge
    from forensics.ingest.scan import sniff
    from forensics.model import Artifact
    from forensics.plugins import Plugins

    if not _STAMPED_PLUGINS:
        _STAMPED_PLUGINS.append(Plugins(autoload=False))
    plugins = _STAMPED_PLUGINS[0]
    kinds, _, stamps = sniff(path, "fuzz/pod.log", plugins)
    parsed = [_parse_one(Artifact(kind, path, "fuzz/pod.log", None, bool(len(data) & 1), stamps), plugins)
              for kind in kinds]
    merge([facts for facts in parsed if not isinstance(facts, tuple)])


def stamp(data: bytes) -> bytes:
    """Every line after a collector's timestamp, as `kubectl logs --timestamps` prints it."""
    return b"".join(b"2026-12-02T04:05:06.%09dZ " % (i * 1234567 % 10**9) + line
                    for i, line in enumerate(data.splitlines(keepends=True)))


def _is_pickle(data: bytes) -> bool:
    return data[:1] == b"\x80"


TARGETS = {t.name: t for t in (
    Target("pyspy", ("py-spy",), "rank0.pyspy.txt", _reader("forensics.ingest.pyspy", "parse", "parse_json"),
           about="py-spy dump text (and the JSON reader on the same bytes)"),
    Target("pyspy_json", ("py-spy-json",), "rank0.pyspy.json",
           _reader("forensics.ingest.pyspy", "parse_json", "parse"), about="py-spy dump --json"),
    Target("gdb", ("gdb",), "rank0.gdb.txt", _reader("forensics.ingest.gdb", "parse"),
           about="gdb thread apply all bt (+ py-bt)"),
    Target("pystack", ("pystack",), "rank0.pystack.txt", _reader("forensics.ingest.pystack", "parse"),
           about="pystack remote/core output"),
    Target("elastic_error", ("elastic-error",), "error.json", _reader("forensics.ingest.elastic_error", "parse"),
           about="torchelastic error.json with its Python traceback"),
    Target("pytrace", ("traceback", "faulthandler"), "rank0.stderr.log", _reader("forensics.ingest.pytrace", "parse"),
           about="Python tracebacks and faulthandler dumps in any log"),
    Target("nccl", ("nccl",), "rank0.nccl.log", _nccl, about="NCCL_DEBUG=INFO logs, tail and --full"),
    Target("c10d", ("torch-log",), "rank0.log", _reader("forensics.ingest.torchlog", "parse"),
           about="c10d / ProcessGroupNCCL watchdog and launcher logs"),
    Target("fr_pickle", ("flight-recorder",), "nccl_trace_rank_0",
           _reader("forensics.ingest.flightrecorder", "parse"), seed_filter=_is_pickle,
           about="Flight Recorder pickles (restricted unpickler)"),
    Target("fr_json", ("flight-recorder",), "nccl_trace_rank_0.json",
           _reader("forensics.ingest.flightrecorder", "parse"), seed_filter=lambda d: not _is_pickle(d),
           about="Flight Recorder JSON dumps"),
    Target("fr_report", ("fr-analyzer-report",), "fr_trace.txt", _reader("forensics.ingest.fr_report", "parse"),
           about="the Flight Recorder analyzer's printed report"),
    Target("ncclras", ("nccl-ras-report",), "ncclras.txt", _reader("forensics.ingest.ncclras", "parse"),
           about="NCCL's RAS status report (ncclras)"),
    Target("snapshot", ("snapshot",), "snapshot.json", _reader("forensics.ingest.snapshot", "parse"),
           about="watchdog snapshots, JSON and YAML"),
    Target("rank_map", ("rank-map",), "ranks.json", _reader("forensics.ingest.manifest", "parse"),
           about="pid/rank maps and collect manifests, JSON and YAML"),
    Target("progress", ("collect-progress",), "progress.json", _reader("forensics.ingest.progress", "parse"),
           about="forensics collect's progress between snapshot rounds"),
    Target("messages", ("messages",), "stated.log", _statements,
           about="any text file searched for catalogued messages"),
    Target("yaml_rules", ("yaml-rules",), "rules.yaml", _yaml_rules, about="user YAML rule files"),
    Target("stamped", ("torch-log", "nccl", "traceback", "py-spy"), "pod.log", _stamped,
           about="logs whose every line starts with a collector's timestamp (kubectl, docker, GitHub Actions)"),
    Target("facts", ("forensics-facts",), "node.facts", _facts,
           about="facts files (forensics parse) and Dask workers' answers: header, zlib, checked decoding"),
)}


def run_input(name: str, data: bytes) -> None:
    """Feed one input to a target (what the fuzzer and the regression tests call)."""
    target = TARGETS[name]
    target.run(_write(target.file_name, data), data)


_FOUND: list = []


def _artifacts() -> list[tuple[str, str]]:
    """(kind, path) of every artifact in corpus/ and tests/fixtures/, found once."""
    if not _FOUND:
        from forensics.ingest import discover
        from forensics.plugins import Plugins

        artifacts, _ = discover([os.path.join(REPO, "corpus"), os.path.join(REPO, "tests", "fixtures")],
                                Plugins(autoload=False), jobs=1)
        _FOUND.extend((a.kind, a.path) for a in artifacts)
    return _FOUND


SEED_BYTES = 16 << 10  # a longer seed is cut: small inputs run many times faster, and the mutator grows them


def seeds(name: str) -> list[bytes]:
    """Real files of the target's kind from corpus/ and tests/fixtures/
    (as discovery classifies them), each cut to SEED_BYTES; YAML rules
    from rules/. Compressed files are seeded decompressed."""
    target = TARGETS[name]
    if name == "facts":
        return _facts_seeds()
    if name == "yaml_rules":
        folder = os.path.join(REPO, "rules")
        found = [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".yaml")]
    else:
        found = sorted({path for kind, path in _artifacts() if kind in target.kinds})
    from forensics.ingest.textio import InputError, read_bytes

    out = []
    for path in found:
        try:
            data = read_bytes(path, SEED_BYTES)
        except InputError:
            continue
        if target.seed_filter(data):
            out.append(stamp(data) if name == "stamped" else data)
    return out
