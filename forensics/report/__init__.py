"""Reporters: each renders the same Report object; none sees artifacts or rules."""

from __future__ import annotations

from . import json_report, text

FORMATS = {
    "text": text.render,
    "json": json_report.render,
}


def render(report, fmt: str = "text", lang: str = "en") -> str:
    return FORMATS[fmt](report, lang)
