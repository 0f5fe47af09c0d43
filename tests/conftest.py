import os
import sys
from pathlib import Path

import pytest

# Never autoload third-party plugins under the test suite (pytest's own habit).
os.environ["FORENSICS_DISABLE_PLUGIN_AUTOLOAD"] = "1"

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
SHARED = ROOT.parent / "shared"
SAMPLES = SHARED / "samples"


@pytest.fixture
def run_cli(tmp_path):
    """Run `python -m forensics ...` in a subprocess, as a user would."""
    import subprocess

    def run(*args, env=None, cwd=None):
        full_env = dict(os.environ)
        full_env.update(env or {})
        return subprocess.run([sys.executable, "-m", "forensics", *map(str, args)],
                              capture_output=True, text=True, env=full_env,
                              cwd=cwd or tmp_path, timeout=120)
    return run


def write_json(path, data):
    import json
    path.write_text(json.dumps(data, indent=1))
    return path
