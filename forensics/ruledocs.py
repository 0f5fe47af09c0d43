"""What each rule is, for people: id, title, severity, explanation, hint.

Every rule — built-in module, a team's Python plugin, or a YAML rule —
describes itself through the `forensics_rules` hook with `RuleDoc`s; the
report shows the doc beside each finding, and `forensics rules list|show`
print them. A finding names its rule by `Finding.rule` (the doc's id).
"""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, slots=True)
class RuleDoc:
    id: str
    title: str
    title_zh: str
    severity: str                 # the severity of its strongest finding
    explanation: str
    explanation_zh: str
    hint: str = ""
    hint_zh: str = ""
    kinds: tuple[str, ...] = ()   # the finding kinds it emits
    emits: tuple[str, ...] = ("findings",)  # "findings" and/or "edges"
    source: str = ""              # where it is defined: a module, or file:line of a YAML rule

    def text(self, lang: str = "en") -> tuple[str, str, str]:
        """(title, explanation, hint) in `lang`, English where a text is missing."""
        if lang == "zh":
            return (self.title_zh or self.title, self.explanation_zh or self.explanation,
                    self.hint_zh or self.hint)
        return self.title, self.explanation, self.hint

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "title_zh": self.title_zh, "severity": self.severity,
                "explanation": self.explanation, "explanation_zh": self.explanation_zh,
                "hint": self.hint, "hint_zh": self.hint_zh, "kinds": list(self.kinds),
                "emits": list(self.emits), "source": self.source}


def catalogue(plugins) -> dict[str, RuleDoc]:
    """Every rule the plugins describe, by id (a later registration of the
    same id, e.g. a team's override, wins)."""
    docs: dict[str, RuleDoc] = {}
    for doc in plugins.call("forensics_rules"):
        if isinstance(doc, RuleDoc):
            docs[doc.id] = doc
    return dict(sorted(docs.items()))
