"""The plugin manager: built-ins and third-party plugins through one door."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import sys

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
    "forensics.rules.wait_cycle",
    "forensics.rules.dead_rank",
    "forensics.rules.missing_rank",
    "forensics.rules.network_fault",
    "forensics.rules.async_ops",
    "forensics.rules.transport_mismatch",
    "forensics.rules.shared_communicator",
    "forensics.rules.nccl_same_comm",
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
        for name in builtins:
            if name not in self._pending:
                self.pm.register(importlib.import_module(name), name=name)
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
            self.pm.register(importlib.import_module(name), name=name)
        if pending:
            self.prepared = False

    def register(self, plugin, name: str | None = None) -> None:
        self.complete()  # the built-ins first, as when nothing is deferred
        self.prepared = False
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:  # a broken plugin is a diagnostic, not a crash
            self.diagnostics.append(Diagnostic(
                f"<plugin {name or getattr(plugin, '__name__', plugin)!s}>", 0,
                f"plugin not registered: {exc}", "error"))

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
        """Call a collecting hook one implementation at a time, so one plugin's
        exception costs only its own contribution."""
        results = []
        caller = self._caller(hook_name)
        for impl in caller.get_hookimpls():
            try:
                out = impl.function(**{k: kwargs[k] for k in impl.argnames})
                if out is not None:
                    results.extend(out)
            except Exception as exc:
                self.diagnostics.append(Diagnostic(
                    f"<plugin {impl.plugin_name}>", 0,
                    f"{hook_name} raised {exc.__class__.__name__}: {exc}", "error"))
        return results

    def each(self, hook_name: str, **kwargs) -> list:
        """Every implementation's non-None answer, newest registration first."""
        answers = []
        caller = self._caller(hook_name)
        for impl in reversed(caller.get_hookimpls()):
            try:
                out = impl.function(**{k: kwargs[k] for k in impl.argnames})
            except Exception as exc:
                self.diagnostics.append(Diagnostic(
                    f"<plugin {impl.plugin_name}>", 0,
                    f"{hook_name} raised {exc.__class__.__name__}: {exc}", "error"))
                continue
            if out is not None and out not in answers:
                answers.append(out)
        return answers

    def first(self, hook_name: str, **kwargs):
        """Call a firstresult hook, newest registration first, isolating failures."""
        caller = self._caller(hook_name)
        for impl in reversed(caller.get_hookimpls()):
            try:
                out = impl.function(**{k: kwargs[k] for k in impl.argnames})
            except (InputError, MemoryError):
                raise  # the file is bad, or past the run's memory limit (reported per file): not the plugin
            except Exception as exc:
                self.diagnostics.append(Diagnostic(
                    f"<plugin {impl.plugin_name}>", 0,
                    f"{hook_name} raised {exc.__class__.__name__}: {exc}", "error"))
                continue
            if out is not None:
                return out
        return None

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
