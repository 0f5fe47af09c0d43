"""Modules imported, and regular expressions compiled, on first use.

`lazy.yaml` and `lazy.lark` are modules whose code runs the first time one
of their attributes is read (the standard library's `LazyLoader`). A run
that never reads a YAML file or a log line lark has to parse does not pay
for importing them, a share of the start-up that decides how soon a
Flight Recorder-only run can hand its files to the workers (figures in
docs/performance.md).

`lazy.regex(...)` is `re.compile(...)` done the first time the pattern is
used: the readers' module-level patterns were a quarter of the work done
before the workers are forked, and a run uses few of them.
"""

from __future__ import annotations

import importlib.util
import re
import sys


def module(name: str):
    """The module `name`, imported on first attribute access (or now, if
    it is imported already or cannot be found lazily)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return importlib.import_module(name)  # raises the usual ImportError
    spec.loader = importlib.util.LazyLoader(spec.loader)
    lazy = importlib.util.module_from_spec(spec)
    sys.modules[name] = lazy
    spec.loader.exec_module(lazy)
    return lazy


# Used as `lazy.yaml.X` and `lazy.lark.X`: a plugin module must not hold a
# lazy module as an attribute of its own, since registering the plugin
# inspects every attribute (and so would import it).
yaml = module("yaml")
lark = module("lark")


def yaml_safe_loader():
    """libyaml's safe loader when PyYAML was built with it (the same YAML,
    parsed in C), else PyYAML's own. Reading it imports PyYAML."""
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_anchor(text: str):
    """The first anchor or alias in a YAML text, as (line, column, "alias
    *x" or "anchor &x"), else None. Only the event stream is scanned
    (nothing is built): aliases are how a small YAML file expands to
    gigabytes once walked, and no input of ours needs them."""
    for event in yaml.parse(text, Loader=yaml_safe_loader()):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            what = f"alias *{event.anchor}" if isinstance(event, yaml.AliasEvent) else f"anchor &{event.anchor}"
            return event.start_mark.line + 1, event.start_mark.column + 1, what
    return None


_PATTERN_METHODS = ("match", "search", "fullmatch", "finditer", "findall", "sub", "subn", "split")


class regex:  # noqa: N801 - used as `lazy.regex(...)`, like `re.compile(...)`
    """`re.compile(pattern, flags)` done the first time the pattern is used.

    Then the compiled pattern takes this object's place among the globals
    of the module that made it (`_PREFIX = lazy.regex(...)` becomes
    `_PREFIX = re.compile(...)`), so that module's functions use the
    pattern itself, at no cost; anything else holding this object (another
    module's import of it, a tuple) gets the pattern's methods through it."""

    __slots__ = ("_source", "_home", "_compiled", *_PATTERN_METHODS)

    def __init__(self, pattern, flags: int = 0):
        self._source = (pattern, flags)
        self._home = sys._getframe(1).f_globals  # the defining module's globals

    def __getattr__(self, name):  # only for what is not set yet: before the first use, and `pattern` etc.
        try:
            compiled = object.__getattribute__(self, "_compiled")
        except AttributeError:
            compiled = re.compile(*object.__getattribute__(self, "_source"))
            for method in _PATTERN_METHODS:
                object.__setattr__(self, method, getattr(compiled, method))
            object.__setattr__(self, "_compiled", compiled)
            home = object.__getattribute__(self, "_home")
            for key, value in list(home.items()):
                if value is self:
                    home[key] = compiled
        return getattr(compiled, name)

    def __reduce__(self):  # copied or pickled: the pattern itself
        return re.compile, self._source

    def __repr__(self) -> str:
        return f"lazy.regex({self._source[0]!r}, {self._source[1]!r})"
