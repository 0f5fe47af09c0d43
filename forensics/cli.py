"""`forensics` command line. Exit codes: 0 nothing wrong (also inconclusive,
with a note on stderr), 1 a hang or finding reported, 2 usage or unreadable
input (one line on stderr, never a traceback)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from . import __version__

EXIT_OK, EXIT_FOUND, EXIT_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        self.exit(EXIT_INPUT, f"forensics: usage error: {message} (see --help)\n")


class _PluginSet:
    """The one plugin manager of a command, built when first needed (the
    --format choices or the analysis), so `--version` stays instant."""

    def __init__(self, given=None, autoload: bool | None = None):
        self.plugins, self.autoload = given, autoload

    def __call__(self):
        if self.plugins is None:
            from .plugins import Plugins
            self.plugins = Plugins(autoload=self.autoload, defer_rules=True)
        return self.plugins


class _FormatChoices:
    """argparse choices read from the format plugins on first use."""

    def __init__(self, plugin_set):
        self.plugin_set, self._names = plugin_set, None

    def _get(self) -> list[str]:
        if self._names is None:
            from .report import formats
            self._names = sorted(formats(self.plugin_set()))
        return self._names

    def __contains__(self, name) -> bool:
        return name in self._get()

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def build_parser(plugin_set=None) -> argparse.ArgumentParser:
    plugin_set = plugin_set or _PluginSet()
    parser = _Parser(prog="forensics", description="Find out why a distributed training job hangs.")
    parser.add_argument("--version", action="version", version=f"forensics {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    analyze = sub.add_parser("analyze", help="diagnose a folder of collected artifacts")
    analyze.add_argument("paths", nargs="+", metavar="PATH",
                         help="folders of artifacts (walked recursively) or single files")
    analyze.add_argument("--format", "-f", choices=_FormatChoices(plugin_set), default="text", metavar="FORMAT",
                         help="output format, one of: %(choices)s (default text; plugins can add more)")
    analyze.add_argument("--lang", choices=("en", "zh"), default="en",
                         help="language of the narrative (default en)")
    analyze.add_argument("--hung", action="store_true",
                         help="the job is known to be stuck: ranks waiting on a rank that is "
                              "still computing become a missing-rank finding")
    analyze.add_argument("--stuck-after", type=_seconds, default=None, metavar="SECONDS",
                         help="ranks that kept their place in a communication call through collect's snapshot "
                              "rounds are stuck once the rounds span this long (default: what collect "
                              "recorded: half the job's collective timeout where known, else 60)")
    analyze.add_argument("--output", "-o", metavar="FILE", help="write the report here instead of stdout")
    analyze.add_argument("--no-plugins", action="store_true",
                         help="do not load third-party plugins from the 'forensics' entry points")
    analyze.add_argument("--follow-symlinks", "-L", action="store_true",
                         help="also read symlinks whose target lies outside the given paths "
                              "(by default they are listed and skipped, as grep -r does)")
    analyze.add_argument("--full", action="store_true",
                         help="read every line of big logs (timelines) instead of their tail and init lines")
    analyze.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                         help="parse files in N processes (default: one per CPU)")
    analyze.add_argument("--rules", action="append", default=[], metavar="DIR",
                         help="also load the YAML rules in DIR (a folder or one file; repeatable); "
                              "the shipped rules always load")
    analyze.add_argument("--quiet", "-q", action="store_true",
                         help="no progress bar and no notes on stderr (errors still print)")
    analyze.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                         help="bound the whole run (default 900; 0: none): files not read in time are "
                              "listed and the rest is reported, exit code as for what was read")
    analyze.add_argument("--file-timeout", type=_seconds, default=None, metavar="SECONDS",
                         help="stop parsing one file after this long (default 300; 0: none)")
    analyze.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE", type=_limit,
                         help="change a resource ceiling: decompressed=16G (bytes out of one gzip/zstd file), "
                              "files-per-folder=1000000, fr-entries=1000000 (entries read per Flight "
                              "Recorder dump), memory=12G (all processes; default 80%% of RAM); "
                              "see docs/reliability.md")

    analyze.add_argument("--scheduler", metavar="ADDRESS", default=os.environ.get("DASK_SCHEDULER_ADDRESS"),
                         help="parse on a Dask cluster (tcp://HOST:8786; default $DASK_SCHEDULER_ADDRESS): its "
                              "workers read the files where they lie; needs pip install 'forensics[dask]'")

    parse = sub.add_parser("parse", help="parse one node's artifacts into a facts file for `analyze` elsewhere")
    parse.add_argument("paths", nargs="+", metavar="PATH", help="folders of artifacts or single files")
    parse.add_argument("--out", "-o", required=True, metavar="FILE", help="the facts file to write")
    parse.add_argument("--prefix", metavar="TEXT", default=None,
                       help="put this before every file's path in the facts (default: the folder's own name "
                            "and /, so `analyze` cites node7/rank0.log as it would under OUT/node7)")
    parse.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                       help="parse files in N processes (default: one per CPU)")
    parse.add_argument("--full", action="store_true", help="read every line of big logs, as analyze --full")
    parse.add_argument("--follow-symlinks", "-L", action="store_true", help="as analyze -L")
    parse.add_argument("--no-plugins", action="store_true", help="do not load third-party reader plugins")
    parse.add_argument("--quiet", "-q", action="store_true", help="no summary line on stderr")
    parse.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                       help="bound the whole run (default 900; 0: none), as analyze --timeout")
    parse.add_argument("--file-timeout", type=_seconds, default=None, metavar="SECONDS",
                       help="stop parsing one file after this long (default 300; 0: none)")
    parse.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE", type=_limit,
                       help="a resource ceiling, as analyze --limit")

    coll = sub.add_parser("collect", help="capture the ranks of a live job on this node (py-spy, /proc, "
                                          "Flight Recorder, logs) into a folder to analyze")
    coll.add_argument("--out", metavar="DIR", default=None,
                      help="where to write (default forensics-collect-HOST-TIME; a node's own subfolder "
                           "when many nodes collect into one shared folder: use OUT/$(hostname))")
    coll.add_argument("--pid", type=int, action="append", default=[], metavar="PID",
                      help="capture these rank processes (repeatable) instead of every rank found")
    coll.add_argument("--job", default="", metavar="TEXT",
                      help="when several jobs run here: the one whose description contains TEXT "
                           "(e.g. its MASTER_PORT)")
    coll.add_argument("--locals", action="store_true", help="also py-spy dump --locals (peers, groups)")
    coll.add_argument("--gdb", action="store_true",
                      help="also gdb 'thread apply all bt' (stops each rank for seconds while it runs)")
    coll.add_argument("--snapshots", type=int, default=1, metavar="N",
                      help="N rounds of dumps; what moved between them tells a hang from slow progress "
                           "without --hung (default 1)")
    coll.add_argument("--interval", type=_seconds, default=5.0, metavar="SECONDS",
                      help="seconds between rounds (default 5)")
    coll.add_argument("--stuck-after", type=_seconds, default=None, metavar="SECONDS",
                      help="with --snapshots: ranks that kept their place in a communication call are stuck "
                           "once the rounds span this long; below it the report says it is not a hang yet "
                           "(default: half the job's collective timeout where a dump states it, else 60)")
    coll.add_argument("--tool-timeout", type=_seconds, default=20.0, metavar="SECONDS",
                      help="give up on one dump of one rank after this long (default 20)")
    coll.add_argument("--per-host", action="store_true",
                      help="write into OUT/<this host's name>/ (what each node does under --slurm)")
    coll.add_argument("--slurm", metavar="JOBID", default="",
                      help="collect on every node of this Slurm job: runs `srun --overlap --jobid=JOBID "
                           "--ntasks-per-node=1 forensics collect --per-host ...` into OUT/<host>/")
    coll.add_argument("--analyze", action="store_true", help="print the report right after the capture")
    coll.add_argument("--format", "-f", default="text", metavar="FORMAT", help="report format with --analyze")
    coll.add_argument("--lang", choices=("en", "zh"), default="en")
    coll.add_argument("--hung", action="store_true", help="with --analyze: the job is known to be stuck")
    coll.add_argument("--output", "-o", metavar="FILE", help="with --analyze: write the report here")
    coll.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")

    wat = sub.add_parser("watch", help="read what the in-job agents publish (forensics.agent) and report a "
                                       "hang as soon as the waits prove one")
    wat.add_argument("--store", required=True, metavar="URL",
                     help="tcpstore://HOST:PORT (the job's own store: torchrun's MASTER_ADDR:MASTER_PORT) or "
                          "redis://HOST:PORT/PREFIX (one prefix per job)")
    wat.add_argument("--serve", action="store_true",
                     help="host the TCPStore at URL instead of joining the job's (the agents then need "
                          "FORENSICS_STORE=URL)")
    wat.add_argument("--world-size", type=int, required=True, metavar="N")
    wat.add_argument("--out", default="forensics-watch", metavar="DIR",
                     help="where each verdict's snapshots, report.json, report.html and verdict.json go "
                          "(DIR/hang-N/); default forensics-watch")
    wat.add_argument("--stuck-after", type=_seconds, default=60.0, metavar="SECONDS",
                     help="a rank others wait for that is elsewhere or silent is reported once nothing changed "
                          "for this long (default 60); a cycle needs no wait")
    wat.add_argument("--on-hang", default="", metavar="CMD",
                     help="shell command run on each verdict, with FORENSICS_VERDICT, FORENSICS_CULPRITS, "
                          "FORENSICS_ROOT_RANK/HOST/PID, FORENSICS_CULPRIT_PROCESSES and the report paths in "
                          "its environment")
    wat.add_argument("--hook-timeout", type=_seconds, default=600.0, metavar="SECONDS",
                     help="end --on-hang's command after this long (default 600)")
    wat.add_argument("--keep-watching", action="store_true",
                     help="after a verdict go on watching (each new verdict is reported once); exit 1 at the "
                          "end if there was one")
    wat.add_argument("--timeout", type=_seconds, default=0.0, metavar="SECONDS",
                     help="stop watching after this long (default: never)")
    wat.add_argument("--format", "-f", default="text", metavar="FORMAT", help="how each verdict is printed")
    wat.add_argument("--lang", choices=("en", "zh"), default="en")
    wat.add_argument("--quiet", "-q", action="store_true")

    replay = sub.add_parser("replay", help="re-diagnose a corpus of past incidents and compare "
                                           "with each one's expected.yaml")
    replay.add_argument("corpus", metavar="DIR")
    replay.add_argument("--junit", metavar="FILE", help="also write JUnit XML here")
    replay.add_argument("--no-plugins", action="store_true")

    rules = sub.add_parser("rules", help="list, show, check and test rules (built-in and YAML)")
    rules_sub = rules.add_subparsers(dest="rules_command", metavar="ACTION", parser_class=_Parser)
    listing = rules_sub.add_parser("list", help="every rule: id, severity, title, source")
    listing.add_argument("--rules", action="append", default=[], metavar="DIR")
    listing.add_argument("--format", "-f", choices=("text", "json"), default="text")
    listing.add_argument("--no-plugins", action="store_true")
    show = rules_sub.add_parser("show", help="one rule's full documentation")
    show.add_argument("rule_id", metavar="ID")
    show.add_argument("--lang", choices=("en", "zh"), default="en")
    show.add_argument("--rules", action="append", default=[], metavar="DIR")
    show.add_argument("--no-plugins", action="store_true")
    check = rules_sub.add_parser("check", help="validate YAML rule files (exit 0 valid, 2 not)")
    check.add_argument("files", nargs="+", metavar="FILE")
    test = rules_sub.add_parser("test", help="run the inline tests of YAML rules (default: the shipped ones)")
    test.add_argument("files", nargs="*", metavar="FILE")

    msgs = sub.add_parser("messages", help="the catalogue of PyTorch, NCCL and Gloo messages that state a cause")
    msgs_sub = msgs.add_subparsers(dest="messages_command", metavar="ACTION", parser_class=_Parser)
    msg_list = msgs_sub.add_parser("list", help="every message: id, project, cause, versions, source")
    msg_list.add_argument("--format", "-f", choices=("text", "json"), default="text")
    msg_list.add_argument("--project", choices=("pytorch", "nccl", "gloo", "linux", "nvidia", "openmpi"))
    msg_list.add_argument("--cause", metavar="CAUSE", help="only messages of this cause class")
    msg_show = msgs_sub.add_parser("show", help="one message: wordings, example, what it proves")
    msg_show.add_argument("message_id", metavar="ID")
    msg_show.add_argument("--lang", choices=("en", "zh"), default="en")
    msg_check = msgs_sub.add_parser("check", help="check catalogue files: every example yields its facts "
                                                  "(exit 0 valid, 1 not)")
    msg_check.add_argument("files", nargs="*", metavar="FILE")

    schema = sub.add_parser("schema", help="print a JSON Schema: of the JSON report, or of YAML rule files")
    schema.add_argument("which", choices=("report", "rules"),
                        help="report: what --format json prints; rules: what --rules files hold")
    return parser


def _seconds(text: str) -> float:
    """SECONDS, or with a unit: 60s, 500ms, 2m."""
    scale = 1.0
    for unit, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if text.endswith(unit) and text[:-len(unit)].strip():
            text, scale = text[:-len(unit)], factor
            break
    try:
        value = float(text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return value


_LIMIT_NAMES = {"decompressed": "decompressed_bytes", "files-per-folder": "files_per_folder",
                "memory": "memory_bytes", "fr-entries": "fr_entries"}


def _limit(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if name not in _LIMIT_NAMES:
        raise argparse.ArgumentTypeError(f"unknown limit {name!r} (known: {', '.join(_LIMIT_NAMES)})")
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    number, unit = value.rstrip("KMGTkmgtiIbB"), value[len(value.rstrip("KMGTkmgtiIbB")):].upper()
    unit = unit.replace("IB", "").replace("B", "")
    try:
        amount = int(float(number) * units[unit])
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"--limit {name}: not a number: {value!r}") from None
    if amount <= 0:
        raise argparse.ArgumentTypeError(f"--limit {name}: must be positive")
    return _LIMIT_NAMES[name], amount


def main(argv: list[str] | None = None, plugins=None) -> int:
    """Run the command line; `plugins` (a forensics.plugins.Plugins) replaces
    the default plugin set of `analyze`, for embedding and tests."""
    try:
        return _main(argv, plugins)
    except KeyboardInterrupt:
        print("forensics: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:  # last line of defence: one line, never a traceback
        print(f"forensics: internal error: {exc.__class__.__name__}: {exc} "
              f"(set FORENSICS_DEBUG=1 for a traceback)", file=sys.stderr)
        if os.environ.get("FORENSICS_DEBUG"):
            raise
        return EXIT_INPUT


def run() -> None:
    """The `forensics` command (and `python -m forensics`): `main()`, then
    leave without tearing the interpreter down.

    A normal exit clears every module and runs a last full collection over
    the heap (networkx alone is ~300 modules): a measurable share of a short
    run (docs/performance.md), for memory the OS takes back anyway. So once the output is flushed and the atexit handlers ran, the
    process ends with `os._exit`; with another thread still running it exits
    normally (that thread may still have work to finish)."""
    code = main()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a closed pipe: what was lost is lost either way
        pass
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    import atexit
    import threading

    if threading.active_count() > 1 or not hasattr(atexit, "_run_exitfuncs"):
        sys.exit(code)
    atexit._run_exitfuncs()
    os._exit(code)


def _main(argv, plugins=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    plugin_set = _PluginSet(plugins, autoload=False if "--no-plugins" in argv else None)
    parser = build_parser(plugin_set)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_INPUT
    from . import usercache

    usercache.check()  # before any worker forks: each cache file that is not safe to load is named once
    if args.command == "analyze":
        return _analyze(args, plugin_set)
    if args.command == "collect":
        return _collect(args, parser, plugin_set)
    if args.command == "parse":
        return _parse_to_facts(args, plugin_set)
    if args.command == "watch":
        return _watch(args, parser, plugin_set)
    if args.command == "replay":
        return _replay(args)
    if args.command == "rules":
        if args.rules_command is None:
            parser.parse_args(["rules", "--help"])
        return _rules(args)
    if args.command == "messages":
        if args.messages_command is None:
            parser.parse_args(["messages", "--help"])
        return _messages(args)
    if args.command == "schema":
        return _schema(args)
    return EXIT_INPUT  # pragma: no cover - argparse rejects unknown commands


def _collect(args, parser, plugin_set) -> int:
    import socket
    import time

    from .live.collect import CollectError, Options, collect

    out = args.out or f"forensics-collect-{socket.gethostname()}-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.slurm:
        return _collect_slurm(args, out, parser, plugin_set)
    if args.per_host:
        out = os.path.join(out, socket.gethostname())
    echo = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    options = Options(out=out, pids=tuple(args.pid), job=args.job, locals=args.locals, gdb=args.gdb,
                      snapshots=max(1, args.snapshots), interval=args.interval, timeout=args.tool_timeout,
                      echo=echo, stuck_after=args.stuck_after)
    try:
        manifest = collect(options)
    except CollectError as exc:
        print(f"forensics collect: {exc}", file=sys.stderr)
        return EXIT_INPUT
    failed = [f"rank {r}: {e}" for r, v in manifest["ranks"].items() for e in v["errors"]]
    for line in failed:
        print(f"forensics collect: {line}", file=sys.stderr)
    if not args.analyze:
        print(out)
        return 0
    return _analyze_after(parser, plugin_set, out, args, args.hung, jobs=1)


def _watch(args, parser, plugin_set) -> int:
    from .live.watch import WatchOptions, watch

    echo = None if args.quiet else (lambda line: print(f"forensics watch: {line}", file=sys.stderr, flush=True))
    codes = []

    def show(verdict):  # the report of what was judged, with the stacks the watcher captured for it
        from .report import formats

        codes.append(_emit(verdict.report, formats(plugin_set())[args.format], args))

    if args.format not in _FormatChoices(plugin_set):
        print(f"forensics watch: --format {args.format}: not a format (one of: "
              f"{', '.join(_FormatChoices(plugin_set))})", file=sys.stderr)
        return EXIT_INPUT
    options = WatchOptions(args.store, args.world_size, args.out, args.stuck_after, timeout=args.timeout,
                           echo=echo, serve=args.serve, on_hang=args.on_hang, hook_timeout=args.hook_timeout,
                           keep_watching=args.keep_watching, plugins=plugin_set(), on_verdict=show)
    try:
        verdicts = watch(options)
    except ValueError as exc:
        print(f"forensics watch: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        verdicts = None
    if not codes:
        return 130 if verdicts is None else 0
    return max(codes)


def slurm_command(args, out: str) -> list[str]:
    """The srun line that runs `collect` once on every node of a Slurm job."""
    cmd = ["srun", "--overlap", f"--jobid={args.slurm}", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
           sys.executable, "-m", "forensics", "collect", "--out", os.path.abspath(out), "--per-host",
           "--snapshots", str(max(1, args.snapshots)), "--interval", str(args.interval),
           "--tool-timeout", str(args.tool_timeout), "--quiet"]
    cmd += ["--locals"] if args.locals else []
    cmd += ["--gdb"] if args.gdb else []
    cmd += ["--stuck-after", str(args.stuck_after)] if getattr(args, "stuck_after", None) is not None else []
    # each node's collect takes this Slurm job's ranks, whatever else runs on the node
    cmd += ["--job", args.job or f"slurm job {args.slurm}"]
    return cmd


def _collect_slurm(args, out, parser, plugin_set) -> int:
    import subprocess

    cmd = slurm_command(args, out)
    if not args.quiet:
        print("forensics collect: " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        done = subprocess.run(cmd, stdout=sys.stderr)  # the nodes' own lines; stdout is for the report
    except FileNotFoundError:
        print("forensics collect: --slurm needs srun on this host (run it from a node of the cluster)",
              file=sys.stderr)
        return EXIT_INPUT
    nodes = sorted(d for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "manifest.json"))) \
        if os.path.isdir(out) else []
    if done.returncode != 0:
        print(f"forensics collect: srun exited {done.returncode}; collected from {len(nodes)} node(s): "
              f"{', '.join(nodes) or 'none'}", file=sys.stderr)
    if not nodes:
        return EXIT_INPUT
    if not args.analyze:
        print(out)
        return 0
    return _analyze_after(parser, plugin_set, out, args, args.hung)


def _analyze_after(parser, plugin_set, path: str, args, hung: bool, jobs: int | None = None) -> int:
    """`analyze` of what `collect` or `watch` just wrote, with their report options."""
    argv = ["analyze", path, "--format", args.format, "--lang", getattr(args, "lang", "en")]
    argv += ["--jobs", str(jobs)] if jobs else []
    argv += ["--hung"] if hung else []
    argv += ["--output", args.output] if getattr(args, "output", None) else []
    argv += ["--quiet"] if args.quiet else []
    return _analyze(parser.parse_args(argv), plugin_set)


def _analyze(args, plugin_set) -> int:
    from . import gc_paused

    # Through the rendering too: with the collector on again, every batch of
    # objects the report's rendering allocates made it walk the whole
    # incident (millions of objects at 16,384 ranks: seconds).
    with gc_paused():
        return _analyze_paused(args, plugin_set)


def _analyze_paused(args, plugin_set) -> int:
    from .ingest import load_incident
    from .ingest.textio import InputError
    from .report import formats

    # The rules, the graph library and the analysis are imported while the
    # worker processes parse (`meanwhile`), not before they are forked.
    plugins = plugin_set()
    if args.rules:
        from .yamlrules import RuleFileErrors

        try:
            plugins = _with_rules(plugins, args.rules)
        except RuleFileErrors as exc:
            print(f"forensics: {exc}", file=sys.stderr)
            return EXIT_INPUT
    fmt = formats(plugins)[args.format]
    from . import limits as run_limits
    from .report.safe_text import neutralize

    limits = _limits_of(args)
    progress = None if args.quiet or not _is_terminal(sys.stderr) else ProgressBar()
    saved = run_limits.set_memory_limit(limits.parent_memory())
    from .ingest.progress import stuck_after
    try:
        with run_limits.applied(limits), stuck_after(args.stuck_after):
            try:
                incident = load_incident([str(p) for p in args.paths], plugins, hung=args.hung,
                                         jobs=args.jobs, full=args.full, progress=progress,
                                         meanwhile=lambda: _prepare(plugins),
                                         follow_symlinks=args.follow_symlinks, scheduler=args.scheduler)
            finally:
                if progress is not None:
                    progress.close()
            from .analysis import analyze_incident

            with _alarm_at(limits.run_deadline()):
                report = analyze_incident(incident, plugins)
    except InputError as exc:
        print(f"forensics: {neutralize(exc)}", file=sys.stderr)
        return EXIT_INPUT
    except _OutOfTime:
        print(f"forensics: --timeout of {limits.timeout:g} s ran out during the analysis: no report "
              f"(the files were read; give it more time with --timeout)", file=sys.stderr)
        return EXIT_INPUT
    finally:
        run_limits.restore_memory_limit(saved)
    late = sum(1 for d in incident.diagnostics if d.severity == "error" and "--timeout" in d.message)
    if late and not args.quiet:
        print(f"forensics: --timeout of {limits.timeout:g} s: {late} file(s) not read in time "
              f"(listed in the report's diagnostics); the report covers the rest", file=sys.stderr)
    return _emit(report, fmt, args)


def _emit(report, fmt, args) -> int:
    """Render `report` in `fmt` to --output or stdout, as `analyze` does; the exit code."""
    from .report import FormatUnavailable
    from .report.safe_text import neutralize

    output = getattr(args, "output", None)
    terminal = fmt.render_terminal is not None and not output and _is_terminal(sys.stdout)
    try:
        if terminal:
            text = fmt.render_terminal(report, args.lang, width=_terminal_width(), color=_colour_wanted())
        else:
            text = fmt.render(report, args.lang)
    except FormatUnavailable as exc:
        print(f"forensics: --format {args.format}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except Exception as exc:  # a format plugin's bug: one line, like any other failure
        if os.environ.get("FORENSICS_DEBUG"):
            raise
        print(f"forensics: --format {args.format} failed: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if output:
        try:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            print(f"forensics: {output}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_INPUT
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    if report.verdict == "inconclusive" and not args.quiet:
        print("forensics: inconclusive: " + neutralize(report.root_cause.narrative.get("en", ""), keep="\n"),
              file=sys.stderr)
    return report.exit_code


def _parse_to_facts(args, plugin_set) -> int:
    """`forensics parse`: a node's artifacts into one facts file."""
    import socket

    from . import limits as run_limits
    from .ingest import read_artifacts
    from .ingest.factsfile import Bundle, to_bytes
    from .ingest.textio import InputError
    from .report.safe_text import neutralize

    plugins = plugin_set()
    limits = _limits_of(args)
    if args.prefix is not None:
        prefix = args.prefix
    else:
        folders = [p for p in args.paths if os.path.isdir(p)]
        prefix = os.path.basename(os.path.abspath(folders[0])) + "/" if len(folders) == 1 else ""
    saved = run_limits.set_memory_limit(limits.parent_memory())
    try:
        with run_limits.applied(limits):
            artifacts, diagnostics, results = read_artifacts(
                [str(p) for p in args.paths], plugins, jobs=args.jobs, full=args.full,
                follow_symlinks=args.follow_symlinks, prefix=prefix)
    except InputError as exc:
        print(f"forensics: {neutralize(exc)}", file=sys.stderr)
        return EXIT_INPUT
    finally:
        run_limits.restore_memory_limit(saved)
    data = to_bytes(Bundle(artifacts, results, diagnostics, list(plugins.diagnostics)),
                    host=socket.gethostname(), prefix=prefix)
    from . import atomic

    try:
        atomic.write(args.out, data)
    except OSError as exc:
        print(f"forensics: {args.out}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INPUT
    if not args.quiet:
        failed = sum(1 for r in results if isinstance(r, tuple))
        print(f"forensics parse: {len(artifacts)} artifact(s) ({failed} not read), {len(diagnostics)} file(s) "
              f"skipped -> {args.out} ({len(data):,} bytes)", file=sys.stderr)
    return EXIT_OK


def _limits_of(args):
    """The run's limits from --timeout, --file-timeout and --limit (analyze and parse)."""
    from . import limits as run_limits

    return run_limits.cli_limits(
        run_limits.CLI_TIMEOUT if args.timeout is None else args.timeout,
        run_limits.CLI_FILE_TIMEOUT if args.file_timeout is None else args.file_timeout, **dict(args.limit))


class _OutOfTime(BaseException):
    """The run's --timeout ran out after the files were read."""


@contextlib.contextmanager
def _alarm_at(deadline):
    """SIGALRM at `deadline` (time.monotonic) raises _OutOfTime, in the main
    thread of a POSIX process; elsewhere nothing is bounded."""
    import signal
    import threading
    import time

    if deadline is None or not hasattr(signal, "setitimer") \
            or threading.current_thread() is not threading.main_thread():
        yield
        return

    def ring(signum, frame):
        raise _OutOfTime()

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, deadline - time.monotonic()))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _prepare(plugins) -> None:
    from .analysis import prepare

    prepare(plugins)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _terminal_width() -> int:
    import shutil
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def _colour_wanted() -> bool:
    """Colour on a terminal unless NO_COLOR is set (no-color.org) or TERM=dumb."""
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class ProgressBar:
    """A rich progress bar on stderr for the ingest: files and bytes read.

    It appears only once ingest has run for `DELAY` seconds (a quick run
    prints nothing; FORENSICS_PROGRESS_DELAY overrides it, e.g. 0 to
    always show it) and is erased when done. The caller decides whether
    stderr is a terminal; this class only draws. Called from the ingest
    thread; shown from a timer thread, hence the lock.
    """

    DELAY = 0.5

    def __init__(self, delay: float | None = None):
        import threading

        import rich.progress  # noqa: F401  imported now, so the bar is on time when due

        if delay is None:
            try:
                delay = max(0.0, float(os.environ.get("FORENSICS_PROGRESS_DELAY", self.DELAY)))
            except ValueError:
                delay = self.DELAY

        self._lock = threading.Lock()
        self._counts = (0, 0, 0, 0)
        self._bar = self._task = None
        self._closed = False
        self._timer = threading.Timer(delay, self._show)
        self._timer.daemon = True
        self._timer.start()

    def __call__(self, files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
        with self._lock:
            self._counts = (files_done, files_total, bytes_done, bytes_total)
            if self._bar is not None:
                self._update()

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        with self._lock:
            files_done, files_total = self._counts[:2]
            if self._closed or (files_total and files_done == files_total):  # nothing left to read
                return
            self._bar = Progress(TextColumn("reading artifacts"), BarColumn(),
                                 TextColumn("{task.fields[files]}"), DownloadColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
            self._task = self._bar.add_task("ingest", total=None, files="")
            self._update()
            self._bar.start()

    def _update(self) -> None:
        files_done, files_total, bytes_done, bytes_total = self._counts
        self._bar.update(self._task, completed=bytes_done, total=bytes_total or None,
                         files=f"{files_done}/{files_total} files" if files_total else "finding files")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._timer.cancel()
            if self._bar is not None:
                self._bar.stop()


def _replay(args) -> int:
    from .plugins import Plugins
    from .replay import failed, find_incidents, junit, replay, table

    if not os.path.isdir(args.corpus):
        print(f"forensics: {args.corpus}: not a folder", file=sys.stderr)
        return EXIT_INPUT
    if not find_incidents(args.corpus):
        print(f"forensics: {args.corpus}: no incident folders (none holds expected.yaml)", file=sys.stderr)
        return EXIT_INPUT
    results = replay(args.corpus, lambda: Plugins(autoload=False if args.no_plugins else None))
    sys.stdout.write(table(results))
    if args.junit:
        try:
            with open(args.junit, "w", encoding="utf-8") as handle:
                handle.write(junit(results))
        except OSError as exc:
            print(f"forensics: {args.junit}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_INPUT
    return EXIT_FOUND if failed(results) else EXIT_OK


# ------------------------------------------------------------------ rules

def _with_rules(plugins, dirs):
    """Register the YAML rules of `dirs` (RuleFileErrors when any is bad).
    Registered after construction, so parse workers are still used: the
    rules run on the merged incident in this process only."""
    if not dirs:
        return plugins
    from .ruledocs import catalogue
    from .yamlrules import RuleSet, load_paths

    reserved = {doc.id: doc.source for doc in catalogue(plugins).values()}
    rules = load_paths(dirs, reserved)
    _USER_RULES.update((rule.id, rule) for rule in rules)
    plugins.register(RuleSet(rules, "user"), name="yaml-rules:" + ",".join(dirs))
    return plugins


def _rules(args) -> int:
    from .yamlrules import RuleFileErrors

    try:
        if args.rules_command == "check":
            return _rules_check(args.files)
        if args.rules_command == "test":
            return _rules_test(args.files)
        from .plugins import Plugins
        plugins = _with_rules(Plugins(autoload=False if args.no_plugins else None), args.rules)
    except RuleFileErrors as exc:
        print(f"forensics: {exc}", file=sys.stderr)
        return EXIT_INPUT
    from .ruledocs import catalogue
    docs = catalogue(plugins)
    for diagnostic in plugins.diagnostics:
        print(f"forensics: {diagnostic.path}: {diagnostic.message}", file=sys.stderr)
    if args.rules_command == "list":
        if args.format == "json":
            import json
            sys.stdout.write(json.dumps([doc.to_json() for doc in docs.values()], ensure_ascii=False,
                                        indent=2) + "\n")
            return EXIT_OK
        width = max((len(rid) for rid in docs), default=2)
        lines = [f"{'id':<{width}}  {'severity':<8}  {'emits':<15}  title  [source]"]
        lines += [f"{doc.id:<{width}}  {doc.severity:<8}  {'+'.join(doc.emits):<15}  {doc.title}  [{doc.source}]"
                  for doc in docs.values()]
        sys.stdout.write("\n".join(lines) + f"\n{len(docs)} rule(s)\n")
        return EXIT_OK
    doc = docs.get(args.rule_id)
    if doc is None:
        print(f"forensics: no rule {args.rule_id!r} (see 'forensics rules list')", file=sys.stderr)
        return EXIT_INPUT
    sys.stdout.write(_rule_page(doc, args.lang))
    return EXIT_OK


def _messages(args) -> int:
    from . import messages

    if args.messages_command == "check":
        return messages.main(["check", *args.files])
    entries = messages.catalogue().entries
    if args.messages_command == "list":
        chosen = [e for e in entries if (args.project is None or e.project == args.project)
                  and (args.cause is None or e.cause == args.cause)]
        if args.format == "json":
            import json
            sys.stdout.write(json.dumps([e.to_json() for e in chosen], ensure_ascii=False, indent=2) + "\n")
            return EXIT_OK
        width = max((len(e.id) for e in chosen), default=2)
        lines = [f"{'id':<{width}}  {'project':<7}  {'cause':<19}  {'versions':<11}  source"]
        lines += [f"{e.id:<{width}}  {e.project:<7}  {e.cause:<19}  {e.versions:<11}  {e.source}" for e in chosen]
        sys.stdout.write("\n".join(lines) + f"\n{len(chosen)} message(s)\n")
        return EXIT_OK
    entry = messages.catalogue().get(args.message_id)
    if entry is None:
        print(f"forensics: no message {args.message_id!r} (see 'forensics messages list')", file=sys.stderr)
        return EXIT_INPUT
    sys.stdout.write(messages.page(entry, args.lang))
    return EXIT_OK


def _schema(args) -> int:
    if args.which == "report":
        from .report.json_report import schema_text
        text = schema_text()
    else:
        from . import shipped

        text = shipped.rules_folder().joinpath("schema.json").read_text("utf-8")
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def _rule_page(doc, lang: str) -> str:
    from .yamlrules import shipped_rules

    title, explanation, hint = doc.text(lang)
    heads = (("严重程度", "来源", "输出", "类型", "说明", "修复建议", "定义")
             if lang == "zh" else ("Severity", "Source", "Emits", "Kinds", "What it detects", "Fix hint",
                                   "Definition"))
    out = [f"{doc.id}: {title}", "",
           f"{heads[0]}: {doc.severity}", f"{heads[1]}: {doc.source}",
           f"{heads[2]}: {', '.join(doc.emits)}", f"{heads[3]}: {', '.join(doc.kinds) or '-'}", "",
           f"{heads[4]}:", f"  {explanation}", ""]
    if hint:
        out += [f"{heads[5]}:", f"  {hint}", ""]
    rule = next((r for r in shipped_rules() if r.id == doc.id), None) or _USER_RULES.get(doc.id)
    if rule is not None and rule.text:
        out += [f"{heads[6]}:"] + ["  " + line for line in rule.text.splitlines()] + [""]
    return "\n".join(out)


_USER_RULES: dict = {}


def _rules_check(paths) -> int:
    from .yamlrules import RuleFileErrors, load_file, rule_files

    bad = False
    seen: dict[str, str] = {}
    for path in paths:
        files = rule_files(path) if os.path.exists(path) else [path]
        if not files:
            print(f"forensics: {path}: folder holds no .yaml/.yml rule files", file=sys.stderr)
            bad = True
        for file in files:
            try:
                rules = load_file(file)
            except RuleFileErrors as exc:
                for error in exc.errors:
                    print(str(error), file=sys.stderr)
                bad = True
                continue
            duplicates = [r for r in rules if r.id in seen]
            for rule in duplicates:
                print(f"{file}:{rule.line}:1: rule id {rule.id!r} is already defined by {seen[rule.id]}",
                      file=sys.stderr)
                bad = True
            seen.update({r.id: r.doc.source for r in rules})
            if not duplicates:
                print(f"{file}: ok ({len(rules)} rule(s): {', '.join(r.id for r in rules)})")
    return EXIT_INPUT if bad else EXIT_OK


def _rules_test(paths) -> int:
    from .yamlrules import load_paths, run_rule_tests, shipped_dir

    rules = load_paths(paths or [shipped_dir()])
    failed = total = 0
    for rule in rules:
        if not rule.tests:
            print(f"WARN {rule.id}: no inline tests")
        for outcome in run_rule_tests(rule):
            total += 1
            failed += not outcome.passed
            detail = "" if outcome.passed else f": {outcome.problem}"
            print(f"{'PASS' if outcome.passed else 'FAIL'} {rule.id}: {outcome.name}{detail}")
    print(f"{total - failed} passed, {failed} failed ({len(rules)} rule(s))")
    return EXIT_FOUND if failed else EXIT_OK
