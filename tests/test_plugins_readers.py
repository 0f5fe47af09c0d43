"""Which reader claims a file is the order pluggy calls `forensics_sniff` in: a
team's format is one module (the one docs/plugins.md shows), a `tryfirst`
sniffer is asked before the built-in ones, and the message catalogue's reader
is a wrapper that sees what the others claimed."""

import importlib.util
import re
from pathlib import Path

import pytest

from forensics import analyze, hookimpl
from forensics.ingest import NothingReadable, nccl, procstate, statements
from forensics.ingest.scan import sniff
from forensics.plugins import Plugins

DOCS = Path(__file__).resolve().parent.parent / "docs" / "plugins.md"
NCCL_LINE = "gpu-a1:4242:4300 [0] NCCL INFO comm 0x55d2c8a0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n"
SUMMARY = "hang-summary rank=0 op=send peer=1\nhang-summary rank=1 op=send peer=0\n"


def _docs_module(tmp_path):
    """The reader module docs/plugins.md shows, imported from a file as a team would ship it."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## A new artifact format is one module"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    path = tmp_path / "hangsummary.py"
    path.write_text(code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("hangsummary_from_docs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LateClaim:
    """A plain sniffer registered after the team's module: newer, so without
    `tryfirst` the team's sniffer would be asked after it."""

    @hookimpl
    def forensics_sniff(self, path, head):
        return "late-claim" if b"hang-summary" in head else None


class PlainTeam:
    def __init__(self, module):
        self.forensics_sniff = hookimpl(_unmarked(module.forensics_sniff))


def _unmarked(function):
    """`function` without its hookimpl options (a copy: the module's own stays tryfirst)."""
    return lambda path, head: function(path, head)


def test_the_documented_reader_module_is_a_new_format(tmp_path):
    module = _docs_module(tmp_path)
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "summary.txt").write_text("our launcher's hang summary\n" + SUMMARY, encoding="utf-8")
    report = analyze(folder, jobs=1, plugins=Plugins(autoload=False, extra=(module,)))
    assert report.verdict == "deadlock" and report.culprit_ranks == [0, 1]
    assert [e.cite() for e in report.findings[0].evidence][:2] == ["summary.txt:2", "summary.txt:3"]
    assert [(r.kind, r.lines) for r in report.incident.read] == [(module.KIND, 3)]
    with pytest.raises(NothingReadable):  # without it, nothing reads the file
        analyze(folder, jobs=1, plugins=Plugins(autoload=False))


def test_a_tryfirst_sniffer_claims_a_file_before_the_builtin_readers(tmp_path):
    module = _docs_module(tmp_path)
    console = tmp_path / "console.log"
    console.write_text(NCCL_LINE + SUMMARY, encoding="utf-8")
    kinds, _, _ = sniff(str(console), "console.log", Plugins(autoload=False, extra=(module, LateClaim())))
    assert kinds == [module.KIND, "late-claim", nccl.KIND]  # tryfirst, then newest to oldest
    plain = PlainTeam(module)  # the same sniffer without tryfirst: the newer registration goes first
    kinds, _, _ = sniff(str(console), "console.log", Plugins(autoload=False, extra=(plain, LateClaim())))
    assert kinds == ["late-claim", module.KIND, nccl.KIND]
    report = analyze(tmp_path, jobs=1, plugins=Plugins(autoload=False, extra=(module,)))
    assert sorted(r.kind for r in report.incident.read if r.path == "console.log") == sorted([module.KIND, nccl.KIND])
    assert report.verdict == "deadlock"


class DropsTheCatalogueReader:
    """A team wrapper that knows its pastes hold nothing the catalogue should read."""

    @hookimpl(wrapper=True, tryfirst=True)
    def forensics_sniff(self, path, head):
        kinds = yield
        return [kind for kind in kinds if kind != statements.KIND] if path.endswith(".notes") else kinds


def test_the_catalogue_reader_claims_what_the_log_readers_leave_and_sees_their_claims(tmp_path):
    warn = ("gpu-a1:4242:4300 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
            "10.0.0.2<53290> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 "
            "remoteGid ::ffff:10.0.0.2 hca mlx5_0\n")
    oom = "Out of memory: Killed process 28818 (python3) total-vm:41237654kB, anon-rss:19844102kB\n"
    plugins = Plugins(autoload=False)
    assert plugins.each("forensics_sniff", path="pasted.txt", head=oom.encode()) == [statements.KIND]
    assert plugins.each("forensics_sniff", path="pasted.txt", head=warn.encode()) == [nccl.KIND]
    assert plugins.each("forensics_sniff", path="paste.py", head=oom.encode()) == []  # a script quoting it
    (impl,) = [i for i in plugins.pm.hook.forensics_sniff.get_hookimpls() if i.plugin_name == statements.__name__]
    assert impl.wrapper and impl.trylast
    # the kernel-log reader's wrapper is outside it: it sees the catalogue reader's claim and yields to it
    assert plugins.each("forensics_sniff", path="dmesg.txt", head=b"[13160.250000] " + oom.encode()) == [statements.KIND]
    assert plugins.each("forensics_sniff", path="dmesg.txt", head=b"[13160.250000] audit: ok\n") == [procstate.KERNEL_LOG]
    team = Plugins(autoload=False, extra=(DropsTheCatalogueReader(),))
    assert team.each("forensics_sniff", path="ours.notes", head=oom.encode()) == []
    assert team.each("forensics_sniff", path="ours.txt", head=oom.encode()) == [statements.KIND]
    assert team.diagnostics == [] and plugins.diagnostics == []
