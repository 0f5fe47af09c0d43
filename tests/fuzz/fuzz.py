"""Coverage-guided fuzzing of one reader with atheris (libFuzzer for Python).

    python tests/fuzz/fuzz.py TARGET [libFuzzer flags] [CORPUS_DIR ...]
    python tests/fuzz/fuzz.py --list

With no CORPUS_DIR it fuzzes in a fresh folder seeded from the real
artifacts of the target's kind (tests/fuzz/targets.py `seeds`). The
ordinary libFuzzer flags apply: -max_total_time=SECONDS, -runs=N,
-timeout=SECONDS (an input slower than this is a crash: a hang),
-rss_limit_mb=MB, -max_len=BYTES. A crash leaves crash-* / timeout-* /
oom-* files in the current folder (or -artifact_prefix=); copy each to
tests/fuzz/regressions/TARGET/ to keep it as a test. docs/reliability.md
has the commands and the figures of the long runs.
"""

from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import atheris  # noqa: E402  (the optional extra `fuzz`)

import targets  # noqa: E402

DEFAULT_FLAGS = ["-max_len=16384", "-timeout=20", "-rss_limit_mb=3072", "-print_final_stats=1"]


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(2)
    if argv[1] == "--list":
        for target in targets.TARGETS.values():
            print(f"{target.name:12} {target.about}")
        return
    name = argv[1]
    if name not in targets.TARGETS:
        sys.exit(f"fuzz.py: unknown target {name!r} (--list shows them)")
    with atheris.instrument_imports(include=["forensics"]):
        import importlib

        for module in targets.MODULES:
            importlib.import_module(module)
        import forensics.lazy
        forensics.lazy.yaml.safe_load  # the lazy modules are not instrumented; load them now
        forensics.lazy.lark.Lark
    flags = [a for a in argv[2:] if a.startswith("-")]
    dirs = [a for a in argv[2:] if not a.startswith("-")]
    if not dirs:
        corpus = tempfile.mkdtemp(prefix=f"fuzz-{name}-")
        for index, data in enumerate(targets.seeds(name)):
            with open(os.path.join(corpus, f"seed{index:04d}"), "wb") as handle:
                handle.write(data)
        dirs = [corpus]
    given = {f.split("=", 1)[0] for f in flags}
    flags = [f for f in DEFAULT_FLAGS if f.split("=", 1)[0] not in given] + flags

    def one_input(data: bytes) -> None:
        targets.run_input(name, data)

    atheris.Setup([argv[0], *flags, *dirs], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
