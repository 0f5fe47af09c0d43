"""The plugin manager: built-ins and third-party plugins through one door."""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import inspect
import os
import re
import sys
import types
from typing import Callable

import pluggy

from . import hookspecs
from .ingest.textio import InputError
from .model import Diagnostic

READER_PLUGINS = (
    "forensics.ingest.factsfile",
    "forensics.ingest.snapshot_plugin",
    "forensics.ingest.manifest",
    "forensics.ingest.progress",
    "forensics.ingest.pyspy",
    "forensics.ingest.gdb",
    "forensics.ingest.pystack",
    "forensics.ingest.elastic_error",
    "forensics.ingest.nccl",
    "forensics.ingest.torchlog",
    "forensics.ingest.pytrace",
    "forensics.ingest.flightrecorder",
    "forensics.ingest.fr_report",
    "forensics.ingest.ncclras",
    "forensics.ingest.procstate",
    "forensics.ingest.statements",
    "forensics.ingest.console",
)
RULE_PLUGINS = (
    "forensics.rules.declared_waits",
    "forensics.rules.comm_waits",
    "forensics.rules.stream_waits",
    "forensics.rules.collective_mismatch",
    "forensics.rules.call_site_mismatch",
    "forensics.rules.elsewhere_while_device_waits",
    "forensics.rules.wait_for_cycle",
    "forensics.rules.dead_rank",
    "forensics.rules.missing_rank",
    "forensics.rules.network_fault",
    "forensics.rules.outstanding_async_ops",
    "forensics.rules.transport_size_mismatch",
    "forensics.rules.concurrent_collectives_one_group",
    "forensics.rules.nccl_opcount_mismatch",
    "forensics.rules.stated_cause",
    "forensics.yamlrules",  # the shipped YAML rules (top-level rules/, package forensics.rules_data)
)
BUILTIN_PLUGINS = READER_PLUGINS + RULE_PLUGINS + (
    "forensics.report",  # the built-in output formats (text, json, markdown, html, …)
)
# What finding and reading files and choosing the output format call. A
# set built with `defer_rules` answers these before its rule plugins are
# imported; any other hook called through `call`, `each`, `first` or
# `Plugins.hook` registers them first. No rule plugin implements one of
# these (tests/test_plugins.py).
EARLY_HOOKS = frozenset({"forensics_sniff", "forensics_sniff_markers", "forensics_parse", "forensics_report_formats"})
AUTOLOAD_OFF = "FORENSICS_DISABLE_PLUGIN_AUTOLOAD"


class Plugins:
    """A pluggy manager plus the diagnostics of plugins that failed to load."""

    def __init__(self, autoload: bool | None = None, extra: tuple = (),
                 builtins: tuple[str, ...] = BUILTIN_PLUGINS, defer_rules: bool = False):
        """`defer_rules`: import and register the built-in rule plugins
        (RULE_PLUGINS) only when a hook outside EARLY_HOOKS is first called,
        or before anything else is registered, so that every hook's
        implementations come in the same order as without it. The CLI
        defers them: its analysis then imports them while the worker
        processes parse, not before it forks them."""
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.diagnostics: list[Diagnostic] = []
        self.prepared = False  # forensics_prepare has run (forensics.analysis.prepare)
        self.extra = tuple(extra)
        self.builtins = tuple(builtins)
        self._pending = [name for name in builtins if name in RULE_PLUGINS] if defer_rules else []
        self._given: dict[str, object] = {}  # each plugin as given, by name (pluggy holds its guarded view)
        for name in builtins:
            if name not in self._pending:
                self._add(importlib.import_module(name), name)
        if autoload is None:
            autoload = not os.environ.get(AUTOLOAD_OFF)
        self.autoload = autoload
        if autoload:
            self._load_entry_points()
        for plugin in extra:
            self.register(plugin)

    @property
    def hook(self):
        self.complete()
        return self.pm.hook

    @property
    def pending(self) -> tuple[str, ...]:
        """The deferred built-in plugins not registered yet."""
        return tuple(self._pending)

    def complete(self) -> None:
        """Register the deferred built-in plugins now, in BUILTIN_PLUGINS order."""
        pending, self._pending = self._pending, []
        for name in pending:
            self._add(importlib.import_module(name), name)
        if pending:
            self.prepared = False

    def register(self, plugin, name: str | None = None) -> None:
        self.complete()  # the built-ins first, as when nothing is deferred
        self.prepared = False
        if plugin is None:
            return
        try:
            self._add(plugin, name)
        except Exception as exc:  # a broken plugin is a diagnostic, not a crash
            self.diagnostics.append(Diagnostic(
                f"<plugin {name or getattr(plugin, '__name__', plugin)!s}>", 0,
                f"plugin not registered: {exc}", "error"))

    def _add(self, plugin, name: str | None) -> None:
        name = name or self.pm.get_canonical_name(plugin)
        if any(plugin is given for given in self._given.values()):
            raise ValueError(f"already registered as {next(n for n, g in self._given.items() if g is plugin)}")
        self.pm.register(guarded(self.pm, plugin, name, self._failed), name=name)
        self._given[name] = plugin

    def _failed(self, plugin_name: str, hook_name: str, exc: BaseException) -> None:
        self.diagnostics.append(Diagnostic(
            f"<plugin {plugin_name}>", 0, f"{hook_name} raised {exc.__class__.__name__}: {exc}", "error"))

    def _load_entry_points(self) -> None:
        if not may_declare_entry_points(hookspecs.PROJECT):
            return
        self.complete()  # the built-ins before any entry point, as when nothing is deferred
        from importlib.metadata import entry_points

        for ep in entry_points(group=hookspecs.PROJECT):
            try:
                plugin = ep.load()
            except Exception as exc:
                self.diagnostics.append(Diagnostic(
                    f"<plugin {ep.name}>", 0, f"plugin failed to load: {exc}", "error"))
                continue
            self.register(plugin, name=f"entrypoint:{ep.name}")

    def call(self, hook_name: str, **kwargs) -> list:
        """A collecting hook's answers joined into one list, oldest
        registration first (pluggy's call order reversed)."""
        joined = []
        for answer in reversed(self._caller(hook_name)(**kwargs)):
            joined.extend(answer)
        return joined

    def each(self, hook_name: str, **kwargs) -> list:
        """Every implementation's answer in pluggy's call order (newest
        registration first, `tryfirst` before, `trylast` after), each once."""
        answers = []
        for answer in self._caller(hook_name)(**kwargs):
            if answer not in answers:
                answers.append(answer)
        return answers

    def first(self, hook_name: str, **kwargs):
        """A firstresult hook's answer (of another hook, its first answer)."""
        caller = self._caller(hook_name)
        answer = caller(**kwargs)
        if caller.spec is not None and caller.spec.opts.get("firstresult"):
            return answer
        return answer[0] if answer else None

    def _caller(self, hook_name: str):
        if self._pending and hook_name not in EARLY_HOOKS:
            self.complete()
        return getattr(self.pm.hook, hook_name)

    def clone_spec(self):
        """What a worker process needs to build the same plugin set, or None
        when it cannot (plugin objects given in-process do not travel)."""
        if self.extra:
            return None
        return (self.autoload, self.builtins)


# Hooks whose answers `call` joins into one list. An implementation's answer
# is made a list inside its guard, so one that returns something that is not
# a collection, or a generator that raises half-way, is named like one that
# raises at once.
COLLECTING = frozenset({"forensics_sniff_markers", "forensics_wait_edges", "forensics_findings",
                        "forensics_graph_findings", "forensics_rules"})
# What an implementation raises that is the input's fault, not the plugin's:
# it leaves the hook call (the file is unreadable, or past the run's memory limit).
NOT_THE_PLUGINS = {"forensics_parse": (InputError, MemoryError)}


class _Guarded:
    """A plugin as pluggy sees it: each hook implementation of the plugin, with
    the same options, behind a guard (`guarded`)."""

    def __init__(self, plugin):
        self._plugin = plugin

    def __repr__(self) -> str:
        return f"<guarded {self._plugin!r}>"


def guarded(pm: pluggy.PluginManager, plugin, plugin_name: str, failed: Callable) -> _Guarded:
    """`plugin` with every hook implementation guarded, for `pm.register`.

    pluggy's own call runs every hook (`pm.hook.NAME(...)`): its order,
    `tryfirst`/`trylast`, `firstresult`, `wrapper=True` and `hookwrapper=True`.
    What pluggy does not do is go on past an implementation that raises, so
    each implementation is registered behind a guard that hands the
    exception to `failed(plugin_name, hook_name, exc)` and answers None (a
    wrapper's guard passes the others' results through unchanged)."""
    view = _Guarded(plugin)
    marker = f"{pm.project_name}_impl"
    for attr in _hookable_names(plugin, marker):
        opts = pm.parse_hookimpl_opts(plugin, attr)
        if opts is None:
            continue
        function = getattr(plugin, attr)  # a function or method: pluggy found it without running code
        hook_name = opts.get("specname") or attr
        if (opts.get("wrapper") or opts.get("hookwrapper")) and not inspect.isgeneratorfunction(function):
            raise pluggy.PluginValidationError(plugin, f"{hook_name} is declared a wrapper but does not yield")
        guard = _wrapper_guard if opts.get("wrapper") else \
            _old_wrapper_guard if opts.get("hookwrapper") else _plain_guard
        fenced = functools.wraps(function)(guard(function, hook_name, lambda exc, hook=hook_name:
                                                 failed(plugin_name, hook, exc)))
        setattr(fenced, marker, dict(opts))
        setattr(view, attr, fenced)
    return view


# What pluggy takes a hook implementation from (pluggy._manager._static_hook_attr).
_HOOKABLE = (types.FunctionType, types.MethodType, staticmethod, classmethod)


def _hookable_names(plugin, marker: str) -> list[str]:
    """The names `pm.parse_hookimpl_opts` may answer for: of a module, those
    whose value in its namespace may be a hook implementation (`_may_be_hook`),
    plus any name not plainly there (dunders, what `dir` adds), which pluggy
    asks about as usual; of anything else, every name. A reader module has
    some 200 names, a handful of them hooks: asking pluggy about each (it
    reads each without running code, `inspect.getattr_static`) was ~3,000
    lookups a start, a tenth of the plugin set's construction."""
    names = dir(plugin)
    if not isinstance(plugin, types.ModuleType):
        return names
    namespace = vars(plugin)
    return [name for name in names if name.startswith("__") or name not in namespace
            or _may_be_hook(namespace[name], marker)]


def _may_be_hook(value, marker: str) -> bool:
    """A plain function is one only with pluggy's mark in its own attributes
    (where pluggy reads it); the other kinds pluggy takes are left to it."""
    if isinstance(value, types.FunctionType):
        return marker in value.__dict__
    return isinstance(value, _HOOKABLE)


def _plain_guard(function, hook_name: str, failed: Callable) -> Callable:
    collecting = hook_name in COLLECTING
    passes = NOT_THE_PLUGINS.get(hook_name, ())

    def guard(*args, **kwargs):
        try:
            answer = function(*args, **kwargs)
            return list(answer) if collecting and answer is not None else answer
        except passes:
            raise
        except Exception as exc:
            failed(exc)
            return None

    return guard


def _set_up(function, args, kwargs, passes, failed: Callable):
    """A wrapper's generator run to its yield, or None when it failed before."""
    try:
        teardown = function(*args, **kwargs)
        next(teardown)
    except passes:
        raise
    except Exception as exc:  # StopIteration included: it did not yield
        failed(exc)
        return None
    return teardown


def _wrapper_guard(function, hook_name: str, failed: Callable) -> Callable:
    """A `wrapper=True` implementation: what it raises before or after its
    yield is its own failure, and the call goes on as if it were absent
    (an exception of the inner call that it does not handle passes on)."""
    passes = NOT_THE_PLUGINS.get(hook_name, ())
    collecting = hook_name in COLLECTING

    def guard(*args, **kwargs):
        teardown = _set_up(function, args, kwargs, passes, failed)
        if teardown is None:
            return (yield)
        try:
            result = yield
        except BaseException as inner:  # what the inner call raised: the wrapper may handle it
            try:
                teardown.throw(inner)
            except StopIteration as stop:
                return stop.value
            except passes:
                raise
            except Exception as exc:
                if exc is not inner:
                    failed(exc)
            else:
                failed(RuntimeError("the wrapper yielded a second time"))
                teardown.close()
            raise inner
        try:
            teardown.send(result)
        except StopIteration as stop:
            try:  # a collecting hook's wrapper hands on one collection (or None) per implementation
                return [list(answer) for answer in stop.value if answer is not None] if collecting else stop.value
            except Exception as exc:
                failed(exc)
                return result
        except passes:
            raise
        except Exception as exc:
            failed(exc)
            return result
        failed(RuntimeError("the wrapper yielded a second time"))
        teardown.close()
        return result

    return guard


def _old_wrapper_guard(function, hook_name: str, failed: Callable) -> Callable:
    """A `hookwrapper=True` implementation: it receives pluggy's `Result`
    and may replace it (`force_result`); what it raises is its own failure."""
    passes = NOT_THE_PLUGINS.get(hook_name, ())

    def guard(*args, **kwargs):
        teardown = _set_up(function, args, kwargs, passes, failed)
        if teardown is None:
            yield
            return
        outcome = yield
        try:
            teardown.send(outcome)
        except StopIteration:
            return
        except passes:
            raise
        except Exception as exc:
            failed(exc)
            return
        failed(RuntimeError("the wrapper yielded a second time"))
        teardown.close()

    return guard


def may_declare_entry_points(group: str) -> bool:
    """False only when no installed distribution can declare `group`.

    `importlib.metadata` (and the email parser under it) costs 17-48 ms to
    import and scan (3-8 % of a 64-dump run), and most installs have no third-party
    plugin. So first a look at what it would look at: each directory on
    `sys.path`, its `*.dist-info` / `*.egg-info` folders and their
    `entry_points.txt`. Anything this look cannot see through (a zip or
    an egg on the path, a finder of its own that lists distributions)
    answers True, and `importlib.metadata` decides."""
    for finder in sys.meta_path:
        if finder is not importlib.machinery.PathFinder and hasattr(finder, "find_distributions"):
            return True
    header = re.compile(rf"^[ \t]*\[[ \t]*{re.escape(group)}[ \t]*\]", re.MULTILINE)
    for entry in sys.path:
        folder = entry or "."
        try:
            names = os.listdir(folder)
        except NotADirectoryError:
            return True
        except OSError:
            continue
        for name in names:
            lower = name.lower()
            if lower.endswith(".egg"):
                return True
            if not lower.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(folder, name, "entry_points.txt"), encoding="utf-8",
                          errors="replace") as handle:
                    text = handle.read()
            except OSError:  # none, or an egg-info that is a file
                continue
            if header.search(text):
                return True
    return False
