"""forensics.lazy: regular expressions compiled the first time they are used."""

import copy
import os
import pickle
import re
import subprocess
import sys
import types

from forensics import lazy

from conftest import CORPUS, ROOT as REPO


def test_a_lazy_pattern_compiles_on_first_use_and_takes_its_place():
    module = types.ModuleType("probe")
    exec("from forensics import lazy\n"
         "WORD = lazy.regex(r'(\\w+)-(\\d+)', 0)\n"
         "KEPT = (WORD,)\n"
         "def find(text):\n"
         "    return WORD.search(text).groups()\n", module.__dict__)
    held = module.WORD
    assert isinstance(held, lazy.regex)  # not compiled yet
    assert module.find("x ab-12") == ("ab", "12")
    # The module's own global is now the compiled pattern ...
    assert isinstance(module.WORD, re.Pattern) and module.WORD.pattern == r"(\w+)-(\d+)"
    # ... and what others hold still works, as the pattern would.
    assert module.KEPT[0] is held and held.sub("z", "ab-12 cd-3") == "z z" and held.groups == 2
    assert pickle.loads(pickle.dumps(held)) == module.WORD == copy.deepcopy(held)


def test_flags_are_kept():
    pattern = lazy.regex(r"nccl (warn|info)", re.I)
    assert pattern.fullmatch("NCCL WARN").group(1) == "WARN" and pattern.flags & re.I


def test_a_flight_recorder_run_compiles_no_log_pattern_before_its_workers_fork():
    """Before the fork, a folder of dumps is sniffed by every reader; the
    patterns the log and stack readers parse with stay uncompiled (they
    were a quarter of the work done before the workers started)."""
    probe = (
        "import sys\n"
        "from forensics import lazy\n"
        "from forensics.plugins import Plugins\n"
        "from forensics.ingest import discover\n"
        "plugins = Plugins(autoload=False, defer_rules=True)\n"
        f"discover([{str(CORPUS / 'real_collective_mismatch' / 'fr')!r}], plugins)\n"
        "names = ('torchlog', 'pystack', 'gdb', 'pytrace', 'fr_report', 'nccl')\n"
        "print(min(sum(isinstance(v, lazy.regex) for v in vars(sys.modules['forensics.ingest.' + n]).values())\n"
        "          for n in names))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "FORENSICS_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert int(out.stdout) >= 5
