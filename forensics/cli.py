"""`forensics` command line. Exit codes: 0 nothing wrong (also inconclusive,
with a note on stderr), 1 a hang or finding reported, 2 usage or unreadable
input (one line on stderr, never a traceback)."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__

EXIT_OK, EXIT_FOUND, EXIT_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        self.exit(EXIT_INPUT, f"forensics: usage error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="forensics", description="Find out why a distributed training job hangs.")
    parser.add_argument("--version", action="version", version=f"forensics {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    analyze = sub.add_parser("analyze", help="diagnose a folder of collected artifacts")
    analyze.add_argument("paths", nargs="+", metavar="PATH",
                         help="folders of artifacts (walked recursively) or single files")
    from .report import FORMATS
    analyze.add_argument("--format", "-f", choices=sorted(FORMATS), default="text")
    analyze.add_argument("--lang", choices=("en", "zh"), default="en",
                         help="language of the narrative (default en)")
    analyze.add_argument("--hung", action="store_true",
                         help="the job is known to be stuck: ranks waiting on a rank that is "
                              "still computing become a missing-rank finding")
    analyze.add_argument("--output", "-o", metavar="FILE", help="write the report here instead of stdout")
    analyze.add_argument("--no-plugins", action="store_true",
                         help="do not load third-party plugins from the 'forensics' entry points")
    analyze.add_argument("--full", action="store_true",
                         help="read every line of big logs (timelines) instead of their tail and init lines")
    analyze.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                         help="parse files in N processes (default: one per CPU)")

    replay = sub.add_parser("replay", help="re-diagnose a corpus of past incidents and compare "
                                           "with each one's expected.yaml")
    replay.add_argument("corpus", metavar="DIR")
    replay.add_argument("--junit", metavar="FILE", help="also write JUnit XML here")
    replay.add_argument("--no-plugins", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
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


def _main(argv) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_INPUT
    if args.command == "analyze":
        return _analyze(args)
    if args.command == "replay":
        return _replay(args)
    return EXIT_INPUT  # pragma: no cover - argparse rejects unknown commands


def _analyze(args) -> int:
    from . import analyze
    from .ingest.textio import InputError
    from .plugins import Plugins
    from .report import render

    try:
        report = analyze(args.paths, hung=args.hung, jobs=args.jobs, full=args.full,
                         plugins=Plugins(autoload=False if args.no_plugins else None))
    except InputError as exc:
        print(f"forensics: {exc}", file=sys.stderr)
        return EXIT_INPUT
    text = render(report, args.format, args.lang)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            print(f"forensics: {args.output}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_INPUT
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    if report.verdict == "inconclusive":
        print("forensics: inconclusive: " + report.root_cause.narrative.get("en", ""), file=sys.stderr)
    return report.exit_code


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
