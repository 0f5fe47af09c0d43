"""A catalogue entry as `forensics messages show` prints it, in English or Chinese."""

from __future__ import annotations

from .messages import Entry


def page(entry: Entry, lang: str = "en") -> str:
    """One entry as `forensics messages show` prints it."""
    zh = lang == "zh"
    labels = (("来源", "版本", "级别", "原因类别", "证明卡住", "指向", "连锁反应", "示例", "提取的事实", "措辞",
               "不属于此消息的相似行")
              if zh else ("source", "versions", "level", "cause", "proves stuck", "blames", "knock-on",
                          "example", "facts", "wordings", "similar lines that are not this message"))
    facts = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in entry.facts.items()) or "-"
    lines = [entry.id, "", entry.zh if zh else entry.en, "",
             f"{labels[0]}: {entry.project} {entry.source}", f"{labels[1]}: {entry.versions}",
             f"{labels[2]}: {entry.level}", f"{labels[3]}: {entry.cause}",
             f"{labels[4]}: {'yes' if entry.stuck else 'no'}", f"{labels[5]}: {entry.blames}",
             f"{labels[6]}: {'yes' if entry.knock_on else 'no'}", "", f"{labels[7]}:", f"  {entry.example}",
             f"{labels[8]}: {facts}", "", f"{labels[9]}:"]
    lines += [f"  {p}" for p in entry.patterns]
    lines += [f"  - {v}" for v in entry.variants]
    if entry.ok:
        lines += ["", f"{labels[10]}:"] + [f"  {line}" for line in entry.ok]
    return "\n".join(lines) + "\n"
