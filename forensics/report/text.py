"""Plain-text report for a terminal or a ticket."""

from __future__ import annotations

import re
from collections import defaultdict

from .. import stackclasses
from ..model import node_label, path_label
from ..ranges import compact

PER_RANK_LIMIT = 32
DIAGNOSTICS_SHOWN = 10
WAITS_SHOWN = 64
_FROM_END = re.compile(r"\S:-\d")  # a citation `path:-N` (tail mode)


def render(report, lang: str = "en") -> str:
    zh = lang == "zh"
    out = []
    culprits = compact(report.culprit_ranks) if report.culprit_ranks else "-"
    title = "结论" if zh else "verdict"
    out.append(f"forensics {title}: {report.verdict.upper()}   culprit ranks: {culprits}")
    for cycle in report.cycles[:5]:
        out.append(("环路: " if zh else "cycle: ") + path_label(cycle))
    out.append("")
    out.append(report.root_cause.narrative.get(lang) or report.root_cause.narrative.get("en", ""))
    out.append("")
    out.extend(_ranks_section(report, zh))
    tree = stackclasses.build(report.incident)
    if tree.ranks:
        n = stackclasses.classes(tree)
        out.append("")
        out.append(f"调用栈归类（主线程，{len(tree.ranks)} 个 Rank，{n} 类）:" if zh
                   else f"Stack classes (main thread, {len(tree.ranks)} ranks, {n} classes):")
        out.extend("  " + line for line in stackclasses.render(tree))
    if report.incident.unattributed:
        out.append("")
        out.append(("无法归属 Rank 的栈转储" if zh else "Dumps not attributed to a rank")
                   + f" ({len(report.incident.unattributed)}):")
        for group in stackclasses.group_dumps(report.incident.unattributed)[:DIAGNOSTICS_SHOWN]:
            judged, dumps = group
            where = ", ".join(f"{d.path} (pid {d.pid})" for d in dumps[:4])
            more = f" and {len(dumps) - 4} more" if len(dumps) > 4 else ""
            out.append(f"  {len(dumps)} dump(s) {where}{more}: {judged.activity}"
                       + (f" {judged.op}" if judged.op else "") + (f" — {judged.why}" if judged.why else ""))
    if report.findings:
        out.append("")
        out.append("发现:" if zh else "Findings:")
        for finding in report.findings:
            message = finding.message_zh if zh and finding.message_zh else finding.message
            doc = report.rules.get(finding.rule)
            title = f" ({doc.text('zh' if zh else 'en')[0]})" if doc else ""
            if finding.detail_of:
                out.append(f"    ↳ [{finding.severity}] {finding.rule}{title}, "
                           + (f"说明 {finding.detail_of} 的原因: " if zh else f"why, for {finding.detail_of}: ")
                           + message)
            elif finding.symptom_of:
                out.append(f"    ↳ [{finding.severity}] {finding.rule}{title}, "
                           + (f"由 {finding.symptom_of} 引起: " if zh else f"a consequence of {finding.symptom_of}: ")
                           + message)
            else:
                out.append(f"  [{finding.severity}] {finding.rule}{title}: {message}")
    unread = [r for r in report.incident.read if r.unrecognized]
    if unread:
        out.append("")
        out.append(("未能识别的行: " if zh else "Lines not understood: ")
                   + ", ".join(f"{r.path} {r.unrecognized} of {r.lines}" for r in unread[:8])
                   + (" …" if len(unread) > 8 else ""))
    skipped = [d for d in report.diagnostics if d.severity == "info" and d.line == 0]
    problems = [d for d in report.diagnostics if d not in skipped]
    if skipped:
        names = ", ".join(d.path for d in skipped[:5]) + (" …" if len(skipped) > 5 else "")
        out.append("")
        out.append((f"未识别的文件 {len(skipped)} 个: " if zh else f"Not read ({len(skipped)} file(s)): ") + names)
    if problems:
        out.append("")
        out.append(("诊断信息" if zh else "Diagnostics") + f" ({len(problems)}):")
        for diag in problems[:DIAGNOSTICS_SHOWN]:
            where = f"{diag.path}:{diag.line}" if diag.line else diag.path
            out.append(f"  {where}: {diag.message}")
        if len(problems) > DIAGNOSTICS_SHOWN:
            out.append(f"  … {len(problems) - DIAGNOSTICS_SHOWN} more (--format json lists all)")
    text = "\n".join(out) + "\n"
    if _FROM_END.search(text):
        text += ("\n行号为负数表示从文件末尾倒数（-1 是最后一行，`tail -n N 文件 | head -n 1` 显示第 -N 行）："
                 "大日志只读取开头和结尾，中间部分不计行数。\n" if zh else
                 "\nNegative line numbers count back from the end of the file (-1 is the last line; "
                 "`tail -n N FILE | head -n 1` shows line -N): big logs are read from the tail, and the "
                 "lines of the middle are not counted.\n")
    return text


def _describe(report, rank, state):
    op = state.current_op
    waits, total = report.analysis.waits_of(rank, WAITS_SHOWN)
    shown = ",".join(node_label(w) for w in waits if not isinstance(w, int))
    ranks = compact(w for w in waits if isinstance(w, int)) if any(isinstance(w, int) for w in waits) else ""
    text = ",".join(part for part in (ranks, shown) if part) or "-"
    if total > len(waits):
        text += f" … ({total} in all)"
    return (state.activity, op.op if op else "-", (op.group or "0") if op else "-",
            "-" if op is None or op.seq is None else str(op.seq), text)


def _ranks_section(report, zh):
    ranks = report.incident.ranks
    header = ("rank", "state", "op", "group", "seq", "waits for")
    if len(ranks) <= PER_RANK_LIMIT:
        rows = [(str(r),) + _describe(report, r, s) for r, s in ranks.items()]
        title = f"各 Rank 状态 ({len(ranks)}):" if zh else f"Ranks ({len(ranks)}):"
    else:
        classes = defaultdict(list)
        for rank, state in ranks.items():
            classes[_describe(report, rank, state)].append(rank)
        ordered = sorted(classes.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
        rows = [(compact(members),) + key for key, members in ordered[:20]]
        if len(ordered) > 20:
            rows.append((f"… {len(ordered) - 20} more classes", "", "", "", "", ""))
        header = ("ranks",) + header[1:]
        title = (f"各 Rank 状态（{len(ranks)} 个，按状态归类）:" if zh
                 else f"Ranks ({len(ranks)}, grouped by state):")
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    lines = [title, "  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    for row in rows:
        lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    if len(ranks) <= PER_RANK_LIMIT and any(s.why for s in ranks.values()):
        lines.append("")
        lines.append("判定依据:" if zh else "Why:")
        for rank, state in ranks.items():
            if state.why:
                where = f"  [{state.evidence.cite()}]" if state.evidence else ""
                lines.append(f"  rank {rank}: {state.why}{where}")
    return lines
