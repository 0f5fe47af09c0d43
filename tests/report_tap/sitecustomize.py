"""Keeps a copy of every JSON report rendered in a test's Python process.

tests/conftest.py puts this folder first on PYTHONPATH, so every Python
process a test starts (`python -m forensics ...`, `forensics collect
--analyze`, `forensics watch`) imports it at start-up, and conftest installs
it in the test process itself. When `forensics.report.json_report` is first
imported, its `render` is wrapped: each report it returns is also written to
$FORENSICS_TEST_REPORT_TAP, and conftest validates the files against the
report's JSON Schema after each test. Nothing of forensics is imported here
(several tests check what a run imports); without the variable it does
nothing. Python looks for exactly one `sitecustomize`, so the one this
shadows, if any, is run afterwards.
"""

import importlib.machinery
import itertools
import os
import sys

TAP_VARIABLE = "FORENSICS_TEST_REPORT_TAP"
MODULE = "forensics.report.json_report"
_HERE = os.path.dirname(os.path.abspath(__file__))
_numbers = itertools.count()
_CHUNK = 1 << 20


def _keep(text) -> None:
    folder = os.environ.get(TAP_VARIABLE)
    if not folder or not isinstance(text, str):
        return
    name = os.path.join(folder, f"{os.getpid()}-{next(_numbers)}.json")
    try:
        with open(name + ".part", "wb") as handle:
            for start in range(0, len(text), _CHUNK):  # no second whole copy in the process under test
                handle.write(text[start:start + _CHUNK].encode("utf-8", "surrogatepass"))
        os.replace(name + ".part", name)
    except OSError:
        pass  # a full disk must not change what the process under test does


def _wrap(module) -> None:
    render = module.render
    if getattr(render, "_tapped", False):
        return

    def tapped(report, lang: str = "en") -> str:
        text = render(report, lang)
        _keep(text)
        return text

    tapped._tapped = True
    tapped.__doc__ = render.__doc__
    module.render = tapped


class _Finder:
    """A meta-path finder that only ever answers for MODULE, and only to
    wrap the loader the regular path finder found."""

    def find_spec(self, name, path=None, target=None):
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _wrap(module)

        loader.exec_module = exec_module
        return spec


def install() -> None:
    if not os.environ.get(TAP_VARIABLE):
        return
    module = sys.modules.get(MODULE)
    if module is not None:
        _wrap(module)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def _run_shadowed() -> None:
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        from importlib.util import module_from_spec

        module = module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception:  # as site.py treats a failing sitecustomize: not fatal
            pass


if __name__ == "sitecustomize":
    install()
    _run_shadowed()
