"""Rank maps a collector writes beside the dumps: pid_map.json, ranks.yaml,
manifest.json. They say which pid (on which host) is which global rank.

Accepted shapes (JSON or YAML):
    {"ranks": {"3": {"pid": 1234, "host": "node07"}}}
    {"3": {"pid": 1234, "host": "node07"}}
    {"3": 1234}
"""

from __future__ import annotations

import json
import os

from .. import lazy
from .reader import reader_hooks
from ..model import MAX_RANKS, Evidence, plausible_rank
from .facts import Facts
from .textio import InputError, int_text, read_text

KIND = "rank-map"
NAMES = {"pid_map.json", "pid_map.yaml", "ranks.yaml", "ranks.yml", "ranks.json",
         "manifest.json", "manifest.yaml", "manifest.yml", "rank_map.json", "rank_map.yaml"}


def sniff(path: str, head: bytes) -> bool:
    return os.path.basename(path).lower() in NAMES and b"pid" in head


def parse(path: str, display: str) -> Facts:
    text = read_text(path)
    facts = Facts(KIND, display)
    try:
        if text.lstrip().startswith("{"):
            data = json.loads(text)
        else:
            _refuse_anchors(text, display)
            data = lazy.yaml.load(text, Loader=lazy.yaml_safe_loader())
    except json.JSONDecodeError as exc:
        raise InputError(display, f"invalid JSON: {exc.msg}", exc.lineno) from None
    except lazy.yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise InputError(display, f"invalid YAML: {exc.problem}", mark.line + 1 if mark else 0) from None
    except lazy.yaml.YAMLError as exc:
        raise InputError(display, f"invalid YAML: {exc}") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4,300 digits; nesting
        raise InputError(display, f"invalid {'JSON' if text.lstrip().startswith('{') else 'YAML'}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(display, "a rank map must map ranks to pids", 1)
    ranks = data.get("ranks", data)
    if not isinstance(ranks, dict):
        raise InputError(display, "'ranks' must map ranks to pids", 1)
    lines = text.splitlines()
    for key, value in ranks.items():
        key_text = str(key)
        if not (key_text.isascii() and key_text.lstrip("-").isdigit()):
            continue  # not a rank's entry ("launcher_pids", ...)
        number = int_text(key_text, 40)
        if number is None or number < 0 or not plausible_rank(number):
            facts.diag(_line_of(lines, key_text), f"rank {key_text[:40]}{'…' if len(key_text) > 40 else ''} "
                                                  f"is not a rank number (0 to {MAX_RANKS - 1:,}); its entry is not used")
            continue
        pid, host = (value.get("pid"), str(value.get("host") or "")) if isinstance(value, dict) else (value, "")
        if not isinstance(pid, int) or isinstance(pid, bool):
            facts.diag(_line_of(lines, key_text), f"rank {key_text}: pid must be an integer, got {pid!r}")
            continue
        line = _line_of(lines, key_text)
        facts.pid_ranks.append((host, pid, number,
                                Evidence(display, line, lines[line - 1].strip() if line else key_text)))
    return facts


def _refuse_anchors(text: str, display: str) -> None:
    found = lazy.yaml_anchor(text)
    if found is not None:
        raise InputError(display, f"YAML anchors and aliases are not read ({found[2]}): a rank map never needs "
                                  f"them, and they can make a small file expand without bound", found[0])


def _line_of(lines: list[str], key: str) -> int:
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith((f'"{key}"', f"'{key}'", f"{key}:")):
            return number
    return 0


forensics_sniff, forensics_parse = reader_hooks(
    {KIND: lambda artifact: parse(artifact.path, artifact.display)},
    lambda path, head: KIND if sniff(path, head) else None)
