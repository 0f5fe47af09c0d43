"""The text report: plain when piped or written to a file, styled and
wrapped by rich on a terminal. Both are drawn from the same styled lines
(`blocks`), so they show the same facts in the same order."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from .. import explain, stackclasses
from ..model import node_label, path_label
from ..ranges import compact
from ..once import Said
from ..words import lang_of, localized
from .safe_text import neutralize

PER_RANK_LIMIT = 32
DECISIVE = 12  # timeline entries shown
DIAGNOSTICS_SHOWN = 10
WAITS_SHOWN = 64
GROUPS_SHOWN = 16  # groups in the progress table; JSON lists all
ROWS_SHOWN = 12    # sequence numbers shown per group
THREADS_SHOWN = 16  # threads of a dumped stack shown; the file holds every one
FRAMES_SHOWN = 24   # frames shown per thread
_FROM_END = re.compile(r"\S:-\d")  # a citation `path:-N` (tail mode)

# The report's own words, by language; everything else comes from the Report.
WORDS = {
    "en": {
        "verdict": "forensics verdict: {verdict}   culprit ranks: {culprits}", "cycle": "cycle: ",
        "processes": "culprit processes: ", "confidence": "confidence: ",
        "timeline": "Timeline (decisive events, one clock{skew}):", "skew": "; hosts' clocks agree within {s} s",
        "first": "  ◀ first failure", "timeline_header": ("time", "who", "role", "what", "evidence"),
        "ranks": "Ranks ({n}):", "ranks_grouped": "Ranks ({n}, grouped by state):",
        "more_classes": "… {more} more", "why": "Why:",
        "group_progress": "Progress by group (the furthest collective each rank reached):",
        "group_progress_header": ("group", "seq", "op", "state", "ranks"), "no_record": "no record",
        "more_rows": "… {n} more (--format json lists all)",
        "captured": "Stacks dumped when the hang was found (py-spy dump):",
        "captured_root": "rank {rank} (the root-cause rank), pid {pid}", "captured_waiting":
        "rank {rank} (waits for rank {root}), pid {pid}", "not_dumped": "not dumped: {why}",
        "more_frames": "… {n} more frames", "more_threads": "… {n} more threads (the file holds every one)",
        "last_printed": "Last printed (each rank's own console):", "progress": "last progress",
        "this_line": "its last progress line",
        "stacks": "Stack classes (main thread, {ranks}, {classes}):",
        "unattributed": "Dumps not attributed to a rank ({n}):", "dumps": "{dumps} {where}{more}: {what}",
        "and_more": " and {n} more",
        "findings": "Findings:", "see_above": "see above", "see_above_ranks": "see above (rank {ranks})", "times": " ×{n}",
        "detail_of": "why, for {x}: ", "symptom_of": "a consequence of {x}: ",
        "not_understood": "Lines not understood: ", "of": "{path} {bad} of {lines}",
        "not_read": "Not read ({files}): ", "diagnostics": "Diagnostics ({n}):",
        "more_diagnostics": "  … {n} more (--format json lists all)",
        "negative": "Negative line numbers count back from the end of the file (-1 is the last line; "
                    "`tail -n N FILE | head -n 1` shows line -N): big logs are read from the tail, and the "
                    "lines of the middle are not counted.",
    },
    "zh": {
        "verdict": "forensics 结论: {verdict}   罪魁 Rank: {culprits}", "cycle": "环路: ",
        "processes": "罪魁进程: ", "confidence": "可信度: ",
        "timeline": "时间线（关键事件，同一时钟{skew}）:", "skew": "，主机间时钟误差 ≤ {s} 秒",
        "first": "  ◀ 最早的故障", "timeline_header": ("时间", "对象", "角色", "事件", "证据"),
        "ranks": "各 Rank 状态 ({n}):", "ranks_grouped": "各 Rank 状态（{n} 个，按状态归类）:",
        "more_classes": "… 另有 {more}", "why": "判定依据:",
        "group_progress": "各通信组进度（每个 Rank 到达的最远集合通信）:",
        "group_progress_header": ("通信组", "序号", "操作", "状态", "Rank"), "no_record": "无记录",
        "more_rows": "… 另有 {n} 行（--format json 列出全部）",
        "captured": "发现卡死时抓取的调用栈（py-spy dump）:",
        "captured_root": "Rank {rank}（根因 Rank），pid {pid}", "captured_waiting":
        "Rank {rank}（等待 Rank {root}），pid {pid}", "not_dumped": "未抓取：{why}",
        "more_frames": "… 另有 {n} 帧", "more_threads": "… 另有 {n} 个线程（文件中有全部线程）",
        "last_printed": "最后输出（各 Rank 自己的控制台）:", "progress": "最近进展",
        "this_line": "即其最近一条进展行",
        "stacks": "调用栈归类（主线程，{ranks}，{classes}）:",
        "unattributed": "无法归属 Rank 的栈转储 ({n}):", "dumps": "{dumps} {where}{more}: {what}",
        "and_more": " 等另 {n} 个",
        "findings": "发现:", "see_above": "见上文", "see_above_ranks": "见上文（Rank {ranks}）", "times": " ×{n}",
        "detail_of": "说明 {x} 的原因: ", "symptom_of": "由 {x} 引起: ",
        "not_understood": "未能识别的行: ", "of": "{path} {bad}/{lines}",
        "not_read": "未识别的文件（{files}）: ", "diagnostics": "诊断信息 ({n}):",
        "more_diagnostics": "  … 另有 {n} 条（--format json 列出全部）",
        "negative": "行号为负数表示从文件末尾倒数（-1 是最后一行，`tail -n N 文件 | head -n 1` 显示第 -N 行）："
                    "大日志只读取开头和结尾，中间部分不计行数。",
    },
}
# Why a stack `forensics watch` meant to dump is not in the report (StackCapture.problem → words).
STACK_PROBLEMS = {
    "en": {
        "no_state": "it published no state, so its process is not known",
        "exited": "it exited: there is no process to dump",
        "no_pid": "it published no pid",
        "other_host": "it runs on host {host}, not on this one ({here}): run `py-spy dump --pid {pid}` there",
        "no_pyspy": "py-spy is not installed here (neither on PATH nor beside this Python; pip install py-spy)",
        "cannot_start": "py-spy could not start: {said}",
        "timeout": "py-spy dump --pid {pid} took over {seconds} s: ended",
        "left_stopped": "py-spy dump --pid {pid} took over {seconds} s and was ended; pid {pid} is left "
                        "{state} (stopped), which it was not before: check it (`cat /proc/{pid}/status`) and "
                        "resume it with `kill -CONT {pid}` if it stays so",
        "not_permitted": "py-spy may not attach to pid {pid} (ptrace not permitted: run watch as the job's user or "
                         "as root; kernel.yama.ptrace_scope 1 lets only a parent attach, 0 or CAP_SYS_PTRACE lifts "
                         "it); py-spy said: {said}",
        "failed": "py-spy dump --pid {pid} exited {code}; it said: {said}",
        "unreadable": "the dump was written but could not be read: {said}",
        "no_thread": "the dump shows no thread",
    },
    "zh": {
        "no_state": "它没有发布状态，无从得知它的进程",
        "exited": "它已退出：没有可抓取的进程",
        "no_pid": "它没有发布 pid",
        "other_host": "它运行在主机 {host} 上，不在本机（{here}）：请在那台主机上运行 `py-spy dump --pid {pid}`",
        "no_pyspy": "本机没有安装 py-spy（PATH 中和当前 Python 旁都没有；pip install py-spy）",
        "cannot_start": "py-spy 无法启动：{said}",
        "timeout": "py-spy dump --pid {pid} 超过 {seconds} 秒未完成：已终止",
        "left_stopped": "py-spy dump --pid {pid} 超过 {seconds} 秒未完成，已终止；pid {pid} 现处于 {state}（停止）状态，"
                        "之前并非如此：请检查（`cat /proc/{pid}/status`），若一直停止，用 `kill -CONT {pid}` 恢复",
        "not_permitted": "py-spy 无权附加到 pid {pid}（ptrace 不被允许：请以作业的用户或 root 运行 watch；"
                         "kernel.yama.ptrace_scope 为 1 时只有父进程可以附加，设为 0 或授予 CAP_SYS_PTRACE 即可）；"
                         "py-spy 的输出：{said}",
        "failed": "py-spy dump --pid {pid} 以 {code} 退出；它的输出：{said}",
        "unreadable": "转储已写出，但无法读取：{said}",
        "no_thread": "转储中没有任何线程",
    },
}


def stack_problem(capture, lang: str = "en") -> str:
    """Why a captured stack is missing, in `lang`."""
    table = STACK_PROBLEMS[lang_of(lang)]
    return table.get(capture.problem, capture.problem).format(pid=capture.pid, **capture.detail)


def capture_title(capture, lang: str = "en") -> str:
    """`rank 2 (the root-cause rank), pid 7798`: whose stack a captured dump is."""
    words = WORDS[lang_of(lang)]
    return words["captured_root" if capture.role == "root_cause" else "captured_waiting"].format(
        rank=capture.rank, root=capture.waits_for, pid=capture.pid if capture.pid is not None else "-")


def frame_label(frame) -> str:
    return f"{frame.function} ({frame.file}:{frame.line})" if frame.file else frame.function


def thread_label(thread) -> str:
    """`Thread 7798 (idle): "MainThread"`, as py-spy prints it."""
    return f"Thread {thread.tid}" + (f" ({thread.status})" if thread.status else "") + \
        (f': "{thread.name}"' if thread.name else "")


# Counted nouns: (singular, plural) in English; Chinese counts with a measure word.
NOUNS = {
    "en": {"rank": ("rank", "ranks"), "class": ("class", "classes"), "file": ("file", "files"),
           "dump": ("dump", "dumps")},
    "zh": {"rank": ("个 Rank",) * 2, "class": ("类",) * 2, "file": ("个",) * 2, "dump": ("个转储",) * 2},
}


def count(n: int, noun: str, lang: str = "en") -> str:
    """`1 class`, `3 classes`; `3 类`."""
    one, many = NOUNS[lang_of(lang)][noun]
    return f"{n:,} {one if n == 1 else many}"


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
    culprit_rows: list[bool]  # rows to pick out: culprits, the first failure
    kind: str = "ranks"  # "ranks" or "timeline"

    def plain(self) -> list[str]:
        widths = [max(len(str(row[i])) for row in self.rows + [self.header]) for i in range(len(self.header))]
        if self.kind == "timeline":  # what happened and its citation run on: a long event does not pad the others
            widths[-2:] = [0, 0]
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
    lines: list = []
    for item in blocks(report, lang):  # a timeline's rows stay one event a line, wrapped like text
        if isinstance(item, Table) and item.kind == "timeline":
            title, header, *rows = item.plain()
            lines += [Line(title, "heading"), Line(header, "heading")]
            lines += [Line(row, "culprit" if first else "dim") for row, first in zip(rows, item.culprit_rows)]
        else:
            lines.append(item)
    for item in lines:
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
    """The report as styled lines and Tables, in the order every renderer
    shows them: verdict, cycles, narrative, timeline, ranks, why, progress
    by group, stack classes, stacks a watcher dumped, unattributed dumps, findings, unread lines, skipped files,
    diagnostics. Each fact once: what the narrative tells, later sections
    point back to instead of repeating."""
    lang = lang_of(lang)
    words = WORDS[lang]
    out: list = []
    said = Said()
    for section in (_verdict_section, _narrative_section, _timeline_section, _ranks_section, _progress_section,
                    _stacks_section, _captured_section, _unattributed_section, _findings_section,
                    _unread_section):
        found = section(report, lang, words, said) if section is _findings_section else section(report, lang, words)
        for item in found:
            if not isinstance(item, Table) and item.style != "stack" and section is not _findings_section:
                said.add(item)
        out.extend(found)
    cells = (cell for item in out if isinstance(item, Table) for row in item.rows for cell in row)
    if any(_FROM_END.search(item) for item in out if not isinstance(item, Table)) \
            or any(_FROM_END.search(str(cell)) for cell in cells):
        out.append(Line())
        out.append(Line(words["negative"], "dim"))
    return [_inert(item) for item in out]


def _verdict_section(report, lang, words) -> list:
    culprits = compact(report.culprit_ranks) if report.culprit_ranks else "-"
    out = [Line(words["verdict"].format(verdict=report.verdict.upper(), culprits=culprits),
                "verdict.problem" if report.exit_code else "verdict.ok")]
    out += [Line(words["cycle"] + path_label(cycle), "cycle") for cycle in report.cycles[:5]]
    named = report.named_processes
    if named:
        out.append(Line(words["processes"] + "; ".join(c.label() for c in named[:8])
                        + (" …" if len(named) > 8 else ""), "narrative"))
    if report.confidence is not None:
        sure = report.confidence
        out.append(Line(words["confidence"] + f"{sure.level} — " + localized(sure, "reason", lang), "dim"))
    return out + [Line()]


def _narrative_section(report, lang, words) -> list:
    narrative = report.root_cause.narrative.get(lang) or report.root_cause.narrative.get("en", "")
    return [Line(line, "headline" if index == 0 else "narrative")
            for index, line in enumerate(narrative.split("\n"))] + [Line()]


def _progress_section(report, lang, words) -> list:
    """Who stopped where: per group, one row per sequence number the ranks
    reached (report.group_progress), the laggards first."""
    tables = report.group_progress
    if not tables:
        return []
    culprits = set(report.culprit_ranks)
    rows, marked = [], []
    for table in tables[:GROUPS_SHOWN]:
        label = f"{table.group} ({table.name})" if table.name else table.group
        for row in table.rows[:ROWS_SHOWN]:
            rows.append((label, str(row.seq), row.op or "-", row.state, compact(row.ranks)))
            marked.append(bool(culprits.intersection(row.ranks)))
            label = ""
        if len(table.rows) > ROWS_SHOWN:
            rows.append((label, words["more_rows"].format(n=len(table.rows) - ROWS_SHOWN), "", "", ""))
            marked.append(False)
            label = ""
        if table.no_record:
            rows.append((label, "-", "-", words["no_record"], compact(table.no_record)))
            marked.append(bool(culprits.intersection(table.no_record)))
    if len(tables) > GROUPS_SHOWN:
        rows.append((words["more_rows"].format(n=len(tables) - GROUPS_SHOWN), "", "", "", ""))
        marked.append(False)
    return [Line(), Table(words["group_progress"], words["group_progress_header"], rows, marked, "progress")]


def _stacks_section(report, lang, words) -> list:
    tree = report.stack_tree
    if tree is None or not tree.ranks:
        return []
    n = stackclasses.classes(tree)
    return [Line(), Line(words["stacks"].format(ranks=count(len(tree.ranks), "rank", lang),
                                                classes=count(n, "class", lang)), "heading"),
            *(Line("  " + line, "stack") for line in stackclasses.render(tree))]


def _captured_section(report, lang, words) -> list:
    """The stacks `forensics watch` dumped on its verdict: every thread,
    innermost frame first as py-spy prints them, each citing the file."""
    if not report.captured_stacks:
        return []
    out = [Line(), Line(words["captured"], "heading")]
    for capture in report.captured_stacks:
        who = capture_title(capture, lang)
        if capture.problem:
            out.append(Line(f"  {who}: " + words["not_dumped"].format(why=stack_problem(capture, lang)),
                            "diagnostic"))
            continue
        out.append(Line(f"  {who}: {capture.file}", "why"))
        for thread in capture.threads[:THREADS_SHOWN]:
            cite = f"  [{thread.evidence.cite()}]" if thread.evidence is not None else ""
            out.append(Line(f"    {thread_label(thread)}{cite}", "stack"))
            out += [Line(f"      {frame_label(frame)}", "stack") for frame in thread.frames[:FRAMES_SHOWN]]
            if len(thread.frames) > FRAMES_SHOWN:
                out.append(Line("      " + words["more_frames"].format(n=len(thread.frames) - FRAMES_SHOWN), "stack"))
        if len(capture.threads) > THREADS_SHOWN:
            out.append(Line("    " + words["more_threads"].format(n=len(capture.threads) - THREADS_SHOWN), "stack"))
    return out


def _unattributed_section(report, lang, words) -> list:
    dumps_seen = report.incident.unattributed
    if not dumps_seen:
        return []
    out = [Line(), Line(words["unattributed"].format(n=len(dumps_seen)), "heading")]
    for judged, dumps in report.dump_groups[:DIAGNOSTICS_SHOWN]:
        where = ", ".join(f"{d.path} (pid {d.pid})" for d in dumps[:4])
        more = words["and_more"].format(n=len(dumps) - 4) if len(dumps) > 4 else ""
        what = judged.activity + (f" {judged.op}" if judged.op else "") + (f" — {judged.why}" if judged.why else "")
        out.append(Line("  " + words["dumps"].format(dumps=count(len(dumps), "dump", lang), where=where,
                                                     more=more, what=what)))
    return out


def _findings_section(report, lang, words, said: Said) -> list:
    """Every finding; one the narrative tells is named and pointed back to,
    and sentences printed above are left out of the others."""
    if not report.findings:
        return []
    told = explain.told(report)
    described = _described(report)
    lines: list[Line] = []
    for finding in report.findings:
        ranks = compact(finding.ranks)
        if id(finding) in told:
            message = words["see_above_ranks"].format(ranks=ranks) if ranks else words["see_above"]
        else:
            message = said.unsaid(explain.without_described(localized(finding, "message", lang), report.incident,
                                                            described), words["see_above"])
        line = _finding_line(report, finding, lang, words, message)
        said.add(line)
        lines.append(line)
    # Findings the narrative told alike (two observations behind one cause) are one line.
    repeats = Counter(lines)
    out = [Line(), Line(words["findings"], "heading")]
    for line in dict.fromkeys(lines):
        out.append(Line(line + words["times"].format(n=repeats[line]), line.style) if repeats[line] > 1 else line)
    return out


def _described(report) -> set[int]:
    """The ranks whose place and why the report has given before its findings:
    in the narrative, or in the Why lines."""
    if len(report.incident.ranks) <= PER_RANK_LIMIT:
        return {rank for rank, state in report.incident.ranks.items() if state.why}
    return set(explain.described_ranks(report)) if report.root_cause.finding is not None else set()


def _unread_section(report, lang, words) -> list:
    out = []
    unread = [r for r in report.incident.read if r.unrecognized]
    if unread:
        out.append(Line())
        out.append(Line(words["not_understood"]
                        + ", ".join(words["of"].format(path=r.path, bad=r.unrecognized, lines=r.lines)
                                    for r in unread[:8]) + (" …" if len(unread) > 8 else ""), "dim"))
    skipped = [d for d in report.diagnostics if d.severity == "info" and d.line == 0]
    # One line per diagnostic, however many readers or plugins reported it.
    problems = list({(d.path, d.line, d.message): d for d in report.diagnostics if d not in skipped}.values())
    if skipped:
        names = ", ".join(d.path for d in skipped[:5]) + (" …" if len(skipped) > 5 else "")
        out.append(Line())
        out.append(Line(words["not_read"].format(files=count(len(skipped), "file", lang)) + names, "dim"))
    if problems:
        out.append(Line())
        out.append(Line(words["diagnostics"].format(n=len(problems)), "heading"))
        for diag in problems[:DIAGNOSTICS_SHOWN]:
            where = f"{diag.path}:{diag.line}" if diag.line else diag.path
            out.append(Line(f"  {where}: {diag.message}", "diagnostic"))
        if len(problems) > DIAGNOSTICS_SHOWN:
            out.append(Line(words["more_diagnostics"].format(n=len(problems) - DIAGNOSTICS_SHOWN), "dim"))
    return out


def _inert(item):
    """A line or table with every control and bidi character from the
    artifacts shown as an escape (safe_text): one report line stays one
    line, and nothing in it drives the terminal, piped or not."""
    if isinstance(item, Table):
        return Table(neutralize(item.title), tuple(map(neutralize, item.header)),
                     [tuple(neutralize(cell) for cell in row) for row in item.rows], item.culprit_rows, item.kind)
    return Line(neutralize(item), item.style)


def _timeline_section(report, lang, words) -> list:
    """The decisive events on one clock, oldest first, the first failure marked:
    a table, so every renderer keeps its columns."""
    from ..postmortem import when

    chosen = report.decisive(DECISIVE)
    if not any(entry.event.time is not None or entry.event.kind == "exit" for entry in chosen):
        return []
    skew = report.incident.skew_s
    title = words["timeline"].format(skew=words["skew"].format(s=f"{skew:g}") if skew is not None else "")
    rows = [(when(entry.event), who(entry.event) or "-", entry.event.role, entry.what[:120],
             f"[{entry.cites}]" + (words["first"] if entry.first else "")) for entry in chosen]
    return [Table(title, words["timeline_header"], rows, [entry.first for entry in chosen], "timeline"), Line()]


def who(event) -> str:
    """`rank 3 node-7`: who an event is about, as far as it says."""
    return " ".join(part for part in (f"rank {event.rank}" if event.rank is not None else "", event.host) if part)


def _finding_line(report, finding, lang, words, message: str) -> Line:
    doc = report.rules.get(finding.rule)
    title = f" ({doc.text(lang)[0]})" if doc else ""
    style = f"finding.{finding.severity}"
    if finding.detail_of:
        return Line(f"    ↳ [{finding.severity}] {finding.rule}{title}, "
                    + words["detail_of"].format(x=finding.detail_of) + message, style)
    if finding.symptom_of:
        return Line(f"    ↳ [{finding.severity}] {finding.rule}{title}, "
                    + words["symptom_of"].format(x=finding.symptom_of) + message, style)
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


def _ranks_section(report, lang, words) -> list:
    ranks = report.incident.ranks
    culprits = set(report.culprit_ranks)
    header = ("rank", "state", "op", "group", "seq", "waits for")
    if len(ranks) <= PER_RANK_LIMIT:
        rows = [(str(r),) + _describe(report, r, s) for r, s in ranks.items()]
        marked = [r in culprits for r in ranks]
        title = words["ranks"].format(n=len(ranks))
    else:
        classes = defaultdict(list)
        for rank, state in ranks.items():
            classes[_describe(report, rank, state)].append(rank)
        ordered = sorted(classes.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        rows = [(compact(members),) + key for key, members in ordered[:20]]
        marked = [any(r in culprits for r in members) for _, members in ordered[:20]]
        if len(ordered) > 20:
            more = count(len(ordered) - 20, "class", lang)
            rows.append((words["more_classes"].format(more=more), "", "", "", "", ""))
            marked.append(False)
        header = ("ranks",) + header[1:]
        title = words["ranks_grouped"].format(n=len(ranks))
    lines: list = [Table(title, header, rows, marked)]
    # The narrative gives the culprits' whys already, each with its citation.
    told = set(explain.described_ranks(report)) if report.root_cause.finding is not None else set()
    printed = [(rank, state) for rank, state in ranks.items() if state.last_words or state.last_progress]
    # A rank known only by its console's last lines is told under Last printed.
    why = [(rank, state) for rank, state in ranks.items() if state.why and rank not in told
           and not (state.last_words and state.evidence in state.last_words)]
    if len(ranks) <= PER_RANK_LIMIT and why:
        lines.append(Line())
        lines.append(Line(words["why"], "heading"))
        for rank, state in why:
            where = f"  [{state.evidence.cite()}]" if state.evidence and state.evidence.cite() not in state.why else ""
            lines.append(Line(f"  rank {rank}: {state.why}{where}", "why"))
    if printed:
        lines.append(Line())
        lines.append(Line(words["last_printed"], "heading"))
        for rank, state in printed[:PER_RANK_LIMIT]:
            lines.extend(_last_printed(rank, state, report.notes.get(rank), words))
        if len(printed) > PER_RANK_LIMIT:
            lines.append(Line("  " + words["more_classes"].format(more=len(printed) - PER_RANK_LIMIT), "dim"))
    return lines


def _last_printed(rank: int, state, note, words) -> list:
    """`rank 3: 'loading shard 17 …'  [rank3.stdout.log:-1]` and its last
    progress line with the time it states."""
    from ..model import Event
    from ..postmortem import when

    out = []
    label = f"  rank {rank}: "
    line = state.last_progress
    at = note.last_progress if note is not None and line is not None else None
    stamp = f" ({when(Event(at, 'wall', '', '', line))})" if at is not None else ""
    if state.last_words:
        last = state.last_words[-1]
        # the last line is the last progress line: said on that line, not as a sentence of its own
        same = f" — {words['this_line']}{stamp}" if line is not None and line == last else ""
        out.append(Line(f"{label}{_quoted(last.text)}  [{last.cite()}]{same}", "why"))
        label = " " * len(label)
        if same:
            return out
    if line is not None:
        out.append(Line(f"{label}{words['progress']}{stamp}: {_quoted(line.text)}  [{line.cite()}]", "why"))
    return out


def _quoted(text: str, most: int = 160) -> str:
    text = text.strip()
    return repr(text if len(text) <= most else text[:most - 1] + "…")
