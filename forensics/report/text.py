"""The text report: plain when piped or written to a file, styled and
wrapped by rich on a terminal. Both are drawn from the same styled lines
(`blocks`), so they show the same facts in the same order."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from .. import stackclasses
from ..model import node_label, path_label
from ..ranges import compact
from .safe_text import neutralize

PER_RANK_LIMIT = 32
DIAGNOSTICS_SHOWN = 10
WAITS_SHOWN = 64
_FROM_END = re.compile(r"\S:-\d")  # a citation `path:-N` (tail mode)

NEGATIVE_LINES_NOTE = {
    "zh": "行号为负数表示从文件末尾倒数（-1 是最后一行，`tail -n N 文件 | head -n 1` 显示第 -N 行）："
          "大日志只读取开头和结尾，中间部分不计行数。",
    "en": "Negative line numbers count back from the end of the file (-1 is the last line; "
          "`tail -n N FILE | head -n 1` shows line -N): big logs are read from the tail, and the "
          "lines of the middle are not counted.",
}


# How a terminal shows each line style (rich style strings).
STYLES = {
    "verdict.problem": "bold red",
    "verdict.ok": "bold green",
    "cycle": "bold red",
    "headline": "bold",
    "heading": "bold",
    "culprit": "bold red",
    "finding.error": "",
    "finding.warning": "",
    "finding.info": "",
    "diagnostic": "yellow",
    "dim": "dim",
}
# Words within lines worth picking out, whatever the line's style.
HIGHLIGHTS = (
    (r"\[error\]", "bold red"),
    (r"\[warning\]", "bold yellow"),
    (r"\[info\]", "cyan"),
    (r"◀ odd one out", "bold magenta"),
    (r"\[[^\[\]\s]+:-?\d+\]", "cyan"),  # a citation [file:line]
)


class Line(str):
    """One line of the report; as a str it is exactly what the plain report
    prints, and `style` names how a terminal shows it."""

    style: str

    def __new__(cls, text: str = "", style: str = ""):
        line = super().__new__(cls, text)
        line.style = style
        return line


@dataclass
class Table:
    """The per-rank table: padded columns in plain text, a rich Table on a terminal."""

    title: str
    header: tuple[str, ...]
    rows: list[tuple[str, ...]]
    culprit_rows: list[bool]

    def plain(self) -> list[str]:
        widths = [max(len(str(row[i])) for row in self.rows + [self.header]) for i in range(len(self.header))]
        lines = [self.title, "  " + "  ".join(h.ljust(w) for h, w in zip(self.header, widths)).rstrip()]
        for row in self.rows:
            lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        return lines


def render(report, lang: str = "en") -> str:
    """Plain text, no colour, no wrapping: what a pipe, a file or a ticket gets."""
    out: list[str] = []
    for item in blocks(report, lang):
        out.extend(item.plain() if isinstance(item, Table) else [item])
    return "\n".join(out) + "\n"


def render_terminal(report, lang: str = "en", width: int | None = None, color: bool = True) -> str:
    """The same lines styled by rich and wrapped to `width`; without
    `color` (not a terminal, NO_COLOR, TERM=dumb) no ANSI code at all."""
    import io

    from rich.console import Console
    from rich.padding import Padding
    from rich.table import Table as RichTable
    from rich.text import Text

    buffer = io.StringIO()
    console = Console(file=buffer, width=width or 100, force_terminal=color, no_color=not color,
                      color_system="standard" if color else None, highlight=False, markup=False,
                      emoji=False, soft_wrap=False, legacy_windows=False)
    for item in blocks(report, lang):
        if isinstance(item, Table):
            console.print(Text(item.title, style=STYLES["heading"]))
            table = RichTable(box=None, padding=(0, 2, 0, 0), pad_edge=False, show_edge=False,
                              header_style=STYLES["heading"], collapse_padding=True)
            for name in item.header:
                table.add_column(name, overflow="fold")
            for row, culprit in zip(item.rows, item.culprit_rows):
                table.add_row(*map(str, row), style=STYLES["culprit"] if culprit else None)
            console.print(Padding(table, (0, 0, 0, 2), expand=False))
            continue
        body = item.lstrip(" ")
        indent = len(item) - len(body)  # wrapped lines keep the line's indent
        text = Text(body, style=STYLES.get(item.style, ""), overflow="fold")
        for pattern, style in HIGHLIGHTS:
            text.highlight_regex(pattern, style)
        for wrapped in text.wrap(console, max(20, console.width - indent), overflow="fold"):
            wrapped.rstrip()
            console.print(Text(" " * indent) + wrapped, soft_wrap=True)
    return buffer.getvalue()


def blocks(report, lang: str = "en") -> list:
    """The report as styled lines and one Table, in the order every renderer
    shows them: verdict, cycles, narrative, ranks, why, stack classes,
    unattributed dumps, findings, unread lines, skipped files, diagnostics."""
    zh = lang == "zh"
    out: list = []
    culprits = compact(report.culprit_ranks) if report.culprit_ranks else "-"
    title = "结论" if zh else "verdict"
    out.append(Line(f"forensics {title}: {report.verdict.upper()}   culprit ranks: {culprits}",
                    "verdict.problem" if report.exit_code else "verdict.ok"))
    for cycle in report.cycles[:5]:
        out.append(Line(("环路: " if zh else "cycle: ") + path_label(cycle), "cycle"))
    named = report.named_processes
    if named:
        out.append(Line(("罪魁进程: " if zh else "culprit processes: ")
                        + "; ".join(c.label() for c in named[:8]) + (" …" if len(named) > 8 else ""), "narrative"))
    if report.confidence is not None:
        sure = report.confidence
        out.append(Line(("可信度: " if zh else "confidence: ") + f"{sure.level} — "
                        + (sure.reason_zh if zh and sure.reason_zh else sure.reason), "dim"))
    out.append(Line())
    narrative = report.root_cause.narrative.get(lang) or report.root_cause.narrative.get("en", "")
    out.extend(Line(line, "headline" if index == 0 else "narrative")
               for index, line in enumerate(narrative.split("\n")))
    out.append(Line())
    out.extend(_timeline_section(report, zh))
    out.extend(_ranks_section(report, zh))
    tree = stackclasses.build(report.incident)
    if tree.ranks:
        n = stackclasses.classes(tree)
        out.append(Line())
        out.append(Line(f"调用栈归类（主线程，{len(tree.ranks)} 个 Rank，{n} 类）:" if zh
                        else f"Stack classes (main thread, {len(tree.ranks)} ranks, {n} classes):", "heading"))
        out.extend(Line("  " + line, "stack") for line in stackclasses.render(tree))
    if report.incident.unattributed:
        out.append(Line())
        out.append(Line(("无法归属 Rank 的栈转储" if zh else "Dumps not attributed to a rank")
                        + f" ({len(report.incident.unattributed)}):", "heading"))
        for judged, dumps in stackclasses.group_dumps(report.incident.unattributed)[:DIAGNOSTICS_SHOWN]:
            where = ", ".join(f"{d.path} (pid {d.pid})" for d in dumps[:4])
            more = f" and {len(dumps) - 4} more" if len(dumps) > 4 else ""
            out.append(Line(f"  {len(dumps)} dump(s) {where}{more}: {judged.activity}"
                            + (f" {judged.op}" if judged.op else "")
                            + (f" — {judged.why}" if judged.why else "")))
    if report.findings:
        out.append(Line())
        out.append(Line("发现:" if zh else "Findings:", "heading"))
        out.extend(_finding_line(report, finding, zh) for finding in report.findings)
    unread = [r for r in report.incident.read if r.unrecognized]
    if unread:
        out.append(Line())
        out.append(Line(("未能识别的行: " if zh else "Lines not understood: ")
                        + ", ".join(f"{r.path} {r.unrecognized} of {r.lines}" for r in unread[:8])
                        + (" …" if len(unread) > 8 else ""), "dim"))
    skipped = [d for d in report.diagnostics if d.severity == "info" and d.line == 0]
    problems = [d for d in report.diagnostics if d not in skipped]
    if skipped:
        names = ", ".join(d.path for d in skipped[:5]) + (" …" if len(skipped) > 5 else "")
        out.append(Line())
        out.append(Line((f"未识别的文件 {len(skipped)} 个: " if zh else f"Not read ({len(skipped)} file(s)): ")
                        + names, "dim"))
    if problems:
        out.append(Line())
        out.append(Line(("诊断信息" if zh else "Diagnostics") + f" ({len(problems)}):", "heading"))
        for diag in problems[:DIAGNOSTICS_SHOWN]:
            where = f"{diag.path}:{diag.line}" if diag.line else diag.path
            out.append(Line(f"  {where}: {diag.message}", "diagnostic"))
        if len(problems) > DIAGNOSTICS_SHOWN:
            out.append(Line(f"  … {len(problems) - DIAGNOSTICS_SHOWN} more (--format json lists all)", "dim"))
    cells = (cell for item in out if isinstance(item, Table) for row in item.rows for cell in row)
    if any(_FROM_END.search(item) for item in out if not isinstance(item, Table)) \
            or any(_FROM_END.search(str(cell)) for cell in cells):
        out.append(Line())
        out.append(Line(NEGATIVE_LINES_NOTE["zh" if zh else "en"], "dim"))
    return [_inert(item) for item in out]


def _inert(item):
    """A line or table with every control and bidi character from the
    artifacts shown as an escape (safe_text): one report line stays one
    line, and nothing in it drives the terminal, piped or not."""
    if isinstance(item, Table):
        return Table(neutralize(item.title), tuple(map(neutralize, item.header)),
                     [tuple(neutralize(cell) for cell in row) for row in item.rows], item.culprit_rows)
    return Line(neutralize(item), item.style)


def _timeline_section(report, zh: bool) -> list:
    """The decisive events on one clock, oldest first, the first failure marked."""
    from ..postmortem import decisive, when

    chosen = decisive(report.incident)
    if not any(event.time is not None or event.kind == "exit" for event, _ in chosen):
        return []
    skew = report.incident.skew_s
    head = ("时间线（关键事件，同一时钟" if zh else "Timeline (decisive events, one clock") + (
        f"，主机间时钟误差 ≤ {skew:g} 秒）:" if zh else f"; hosts' clocks agree within {skew:g} s):") \
        if skew is not None else ("）:" if zh else "):")
    lines = [Line(head, "heading")]
    for event, first in chosen:
        who = " ".join(part for part in (f"rank {event.rank}" if event.rank is not None else "", event.host) if part)
        mark = ("  ◀ 最早的故障" if zh else "  ◀ first failure") if first else ""
        text = event.detail if event.kind == "exit" else f"{event.kind} ({event.detail})"
        lines.append(Line(f"  {when(event):>20}  {who or '-':<20}  {event.role:<8}  {text[:120]} "
                          f"[{event.evidence.cite()}]{mark}", "finding.error" if first else "dim"))
    return lines + [Line()]


def _finding_line(report, finding, zh: bool) -> Line:
    message = finding.message_zh if zh and finding.message_zh else finding.message
    doc = report.rules.get(finding.rule)
    title = f" ({doc.text('zh' if zh else 'en')[0]})" if doc else ""
    style = f"finding.{finding.severity}"
    if finding.detail_of:
        return Line(f"    ↳ [{finding.severity}] {finding.rule}{title}, "
                    + (f"说明 {finding.detail_of} 的原因: " if zh else f"why, for {finding.detail_of}: ")
                    + message, style)
    if finding.symptom_of:
        return Line(f"    ↳ [{finding.severity}] {finding.rule}{title}, "
                    + (f"由 {finding.symptom_of} 引起: " if zh else f"a consequence of {finding.symptom_of}: ")
                    + message, style)
    return Line(f"  [{finding.severity}] {finding.rule}{title}: {message}", style)


def _describe(report, rank, state):
    op = state.position
    waits, total = report.analysis.waits_of(rank, WAITS_SHOWN)
    shown = ",".join(node_label(w) for w in waits if not isinstance(w, int))
    ranks = compact(w for w in waits if isinstance(w, int)) if any(isinstance(w, int) for w in waits) else ""
    text = ",".join(part for part in (ranks, shown) if part) or "-"
    if total > len(waits):
        text += f" … ({total} in all)"
    group = "-" if op is None else (op.group or "0") if op.group_known else "?"
    return (state.activity, op.op if op else "-", group,
            "-" if op is None or op.seq is None else str(op.seq), text)


def _ranks_section(report, zh) -> list:
    ranks = report.incident.ranks
    culprits = set(report.culprit_ranks)
    header = ("rank", "state", "op", "group", "seq", "waits for")
    if len(ranks) <= PER_RANK_LIMIT:
        rows = [(str(r),) + _describe(report, r, s) for r, s in ranks.items()]
        marked = [r in culprits for r in ranks]
        title = f"各 Rank 状态 ({len(ranks)}):" if zh else f"Ranks ({len(ranks)}):"
    else:
        classes = defaultdict(list)
        for rank, state in ranks.items():
            classes[_describe(report, rank, state)].append(rank)
        ordered = sorted(classes.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        rows = [(compact(members),) + key for key, members in ordered[:20]]
        marked = [any(r in culprits for r in members) for _, members in ordered[:20]]
        if len(ordered) > 20:
            rows.append((f"… {len(ordered) - 20} more classes", "", "", "", "", ""))
            marked.append(False)
        header = ("ranks",) + header[1:]
        title = (f"各 Rank 状态（{len(ranks)} 个，按状态归类）:" if zh
                 else f"Ranks ({len(ranks)}, grouped by state):")
    lines: list = [Table(title, header, rows, marked)]
    if len(ranks) <= PER_RANK_LIMIT and any(s.why for s in ranks.values()):
        lines.append(Line())
        lines.append(Line("判定依据:" if zh else "Why:", "heading"))
        for rank, state in ranks.items():
            if state.why:
                where = f"  [{state.evidence.cite()}]" if state.evidence else ""
                lines.append(Line(f"  rank {rank}: {state.why}{where}", "why"))
    return lines
