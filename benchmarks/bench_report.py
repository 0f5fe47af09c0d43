"""Report benchmark: is rendering ever the slow part, and does the HTML stay small?

    python benchmarks/bench_report.py [--sizes 1000,10000] [--scenarios missing,p2p_cycle] [--no-browser]

For each scenario and size, on one generated snapshot (gen_snapshots.py):
  analyze   load + rules + wait-for graph + verdict (what every format pays)
  text/json/html   rendering the same Report in each format, beside each other
  html MB   the size of the self-contained page (budget: under 2 MB at 10,000 ranks)
  open s    Chromium (headless, file:// URL) from navigation to the load event,
            best of three (budget: under a second); skipped without chromium
Rendering should stay a fraction of `analyze`; the last column says which.

Targets: a 10,000-rank HTML page under 2 MB that opens in under a second; rendering
never slower than the analysis.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from gen_snapshots import snapshot  # noqa: E402
from results import record  # noqa: E402

os.environ.setdefault("FORENSICS_DISABLE_PLUGIN_AUTOLOAD", "1")


def timed(fn, *args, repeat: int = 3):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--scenarios", default="missing,p2p_cycle")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args(argv)

    from forensics import analyze
    from forensics.plugins import Plugins
    from forensics.report import html, json_report, text

    browser = None
    if not args.no_browser:
        from browser.cdp import Browser, find_browser
        binary = find_browser()
        browser = Browser(binary) if binary else None
        if browser is None:
            print("(no chromium on PATH: the open column is skipped)")
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for scenario in args.scenarios.split(","):
                for size in map(int, args.sizes.split(",")):
                    path = os.path.join(tmp, f"{scenario}_{size}.json")
                    with open(path, "w") as handle:
                        json.dump(snapshot(scenario, size), handle, separators=(",", ":"))
                    plugins = Plugins(autoload=False)
                    t_analyze, report = timed(lambda: analyze(path, plugins=plugins, hung=True, jobs=1), repeat=1)
                    t_text, _ = timed(text.render, report)
                    t_json, _ = timed(json_report.render, report)
                    t_html, page = timed(html.render, report)
                    page_path = os.path.join(tmp, f"{scenario}_{size}.html")
                    with open(page_path, "w", encoding="utf-8") as handle:
                        handle.write(page)
                    t_open = None
                    if browser is not None:
                        t_open = float("inf")
                        for _ in range(3):
                            tab = browser.page()
                            try:
                                t_open = min(t_open, tab.open("file://" + page_path))
                            finally:
                                tab.close()
                    rows.append((scenario, size, report.verdict, t_analyze, t_text, t_json, t_html,
                                 len(page.encode()) / 1e6, t_open))
    finally:
        if browser is not None:
            browser.close()
    header = ("scenario", "ranks", "verdict", "analyze s", "text s", "json s", "html s", "html MB", "open s",
              "html/analyze")
    print(("{:<10} {:>6} {:<14} " + "{:>9} " * 7).format(*header))
    for scenario, size, verdict, a, t, j, h, mb, o in rows:
        print(("{:<10} {:>6} {:<14} " + "{:>9.3f} " * 5 + "{:>9} {:>9.2f}").format(
            scenario, size, verdict, a, t, j, h, mb, "-" if o is None else f"{o:.3f}", h / a))
    record("bench_report", ["scenario", "ranks", "verdict", "analyze s", "text s", "json s", "html s", "HTML MB",
                            "Chromium open s (best of 3)", "html / analyze"],
           [[scenario, size, verdict, round(a, 3), round(t, 3), round(j, 3), round(h, 3), round(mb, 2),
             "-" if o is None else round(o, 3), round(h / a, 2)]
            for scenario, size, verdict, a, t, j, h, mb, o in rows], argv=[sys.argv[0], *(argv or sys.argv[1:])])
    return 0


if __name__ == "__main__":
    sys.exit(main())
