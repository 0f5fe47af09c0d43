"""The HTML report: one self-contained page, checked as markup and in a real
headless Chromium (skipped, with the reason, where no Chromium is installed).

Screenshots of every browser case go to $FORENSICS_ARTIFACTS (default
tests/artifacts/, ignored by git) for a person to look at.
"""

import importlib.util
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

import forensics
from forensics.model import Evidence
from forensics.plugins import Plugins
from forensics.report import graphview, html, json_report

from conftest import CORPUS, ROOT
from helpers import report_of

spec = importlib.util.spec_from_file_location("gen_snapshots", ROOT / "benchmarks" / "gen_snapshots.py")
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)

ARTIFACTS = Path(os.environ.get("FORENSICS_ARTIFACTS") or ROOT / "tests" / "artifacts")


def analyze(path, **kw):
    return forensics.analyze(path, jobs=1, plugins=Plugins(autoload=False), **kw)


def expand(ranks: str) -> set[int]:
    """`0-3,5` → {0, 1, 2, 3, 5} (the inverse of ranges.compact)."""
    out = set()
    for part in filter(None, ranks.split(",")):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


class Page(HTMLParser):
    """What the tests read from the markup: ids, links, resources, SVG parts."""

    def __init__(self, text):
        super().__init__()
        self.ids, self.hrefs, self.resources, self.nodes, self.edges = set(), [], [], [], []
        self.open_details = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            assert attrs["id"] not in self.ids, f"duplicate id {attrs['id']}"
            self.ids.add(attrs["id"])
        if "href" in attrs:
            self.hrefs.append(attrs["href"])
        if tag in ("link", "img", "iframe", "object", "embed", "script") and (attrs.get("src") or attrs.get("href")):
            self.resources.append((tag, attrs.get("src") or attrs.get("href")))
        cls = (attrs.get("class") or "").split()
        if tag == "g" and "node" in cls:
            self.nodes.append(attrs | {"classes": cls})
        if tag == "g" and "edge" in cls:
            self.edges.append(attrs | {"classes": cls})


def expected_cycle_edges(report, nodes) -> set[tuple[str, str]]:
    """The JSON report's cycles, as pairs of the drawing's node ids."""
    node_of = {rank: n["id"].removeprefix("wg-") for n in nodes for rank in expand(n["data-ranks"])}
    cycles = json_report.to_dict(report)["cycles"]
    return {(node_of[a], node_of[b]) for cycle in cycles for a, b in zip(cycle, cycle[1:])}


@pytest.fixture(scope="module")
def deadlock():
    return analyze(CORPUS / "real_p2p_cycle_2")


@pytest.fixture(scope="module")
def missing():
    return analyze(CORPUS / "real_missing_rank_dataloader", hung=True)


@pytest.fixture(scope="module")
def ring_1000(tmp_path_factory):
    path = tmp_path_factory.mktemp("ring") / "ring1000.json"
    path.write_text(json.dumps(gen.snapshot("p2p_cycle", 1000)))
    return analyze(path, hung=True)


# --------------------------------------------------------------------------
# The markup


def test_a_deadlock_page_is_self_contained_and_every_link_lands(deadlock):
    text = html.render(deadlock)
    page = Page(text)
    assert text.startswith("<!DOCTYPE html>") and "DEADLOCK" in text
    assert page.resources == [], "the page must load nothing"
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", text)
    local = [h for h in page.hrefs if h.startswith("#")]
    assert local and all(h[1:] in page.ids for h in local), [h for h in local if h[1:] not in page.ids]
    assert all(h.startswith("#") for h in page.hrefs)
    culprits = [n for n in page.nodes if "culprit" in n["classes"]]
    assert sorted(expand(n["data-ranks"]) for n in culprits) == [{0}, {1}]
    cycle = {(e["data-src"], e["data-dst"]) for e in page.edges if "cycle" in e["classes"]}
    assert cycle == expected_cycle_edges(deadlock, page.nodes) == {("rank0", "rank1"), ("rank1", "rank0")}


def test_a_citation_opens_the_artifact_lines_around_it(deadlock):
    text = html.render(deadlock)
    anchor = re.search(r'<a href="#(ev-\d+)">rank0\.locals\.txt:5</a>', text).group(1)
    excerpt = re.search(rf'<details class="excerpt" id="{anchor}">(.*?)</details>', text, re.S).group(1)
    lines = (CORPUS / "real_p2p_cycle_2" / "rank0.locals.txt").read_text().splitlines()
    hit = re.search(r'<span class="ln hit"><i>5</i>(.*?)</span>', excerpt).group(1)
    assert hit == html.escape(lines[4])
    assert f"<i>2</i>{html.escape(lines[1])}" in excerpt and f"<i>8</i>{html.escape(lines[7])}" in excerpt


def test_lines_counted_from_the_end_and_unreadable_files(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {n}\n" for n in range(1, 101)))
    window = html._read_lines(str(log), {-1, 50})
    assert window[-1][-1] == (-1, "line 100") and (-4, "line 97") in window[-1]
    assert (50, "line 50") in window[50] and (47, "line 47") in window[50] and (54, "line 54") not in window[50]
    assert html._read_lines(str(tmp_path / "gone.log"), {3}) == {}
    binary = tmp_path / "dump.pkl"
    binary.write_bytes(b"\x80\x04\x00\x00garbage")
    assert html._read_lines(str(binary), {1}) == {}


def test_a_missing_file_shows_the_text_the_evidence_carries():
    report = report_of({"0": {"current_op": "send", "peers": [1]}, "1": {"current_op": "send", "peers": [0]}})
    excerpts = html._Excerpts(report)
    excerpts.add(Evidence("nowhere.json", 7, "the cited words"))
    section = excerpts.render(html._L["en"])
    assert "file not readable here" in section and '<i>7</i>the cited words' in section


def test_artifact_text_is_escaped_never_markup():
    hostile = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    report = report_of({"0": {"current_op": "send", "peers": [1], "stack": [hostile, "send (c10d.py:1)"]},
                        "1": {"current_op": "send", "peers": [0], "stack": [hostile, "send (c10d.py:1)"]}})
    text = html.render(report)
    assert "<script>alert" not in text and "<img" not in text
    assert html.escape(hostile) in text


def test_missing_rank_page_in_chinese(missing):
    text = html.render(missing, "zh")
    page = Page(text)
    assert '<html lang="zh-CN">' in text and "成员缺失" in text and "罪魁" in text
    (culprit,) = [n for n in page.nodes if "culprit" in n["classes"]]
    assert expand(culprit["data-ranks"]) == {2} and culprit["data-state"] == "data_loading"
    into = {e["data-src"] for e in page.edges if e["data-dst"] == "rank2"}
    assert into == {"rank0", "rank1", "rank3"} and not any("cycle" in e["classes"] for e in page.edges)
    assert all(h[1:] in page.ids for h in page.hrefs if h.startswith("#"))


def test_the_findings_carry_their_rule_docs_and_hints(missing):
    text = html.render(missing)
    for finding in missing.findings:
        title, explanation, _ = missing.rules[finding.rule].text("en")
        assert html.escape(explanation) in text and html.escape(finding.hint) in text
    assert text.index('id="verdict"') < text.index('id="graph"') < text.index('id="ranks"') \
        < text.index('id="stacks"') < text.index('id="findings"') < text.index('id="diagnostics"')


def test_ten_thousand_ranks_stay_under_two_megabytes(tmp_path):
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(gen.snapshot("p2p_cycle", 10000)))
    report = analyze(path, hung=True)
    text = html.render(report)
    assert len(text.encode()) < 2_000_000
    page = Page(text)
    assert len(page.nodes) == len(graphview.build(report).nodes) <= graphview.MAX_PINNED + 3
    assert {f"rank-{r}" for r in range(10000)} <= page.ids  # every rank still has its row
    assert all(h[1:] in page.ids for h in page.hrefs if h.startswith("#"))


# --------------------------------------------------------------------------
# In a real browser


_READ_PAGE = """(() => {
  const svg = document.querySelector('svg.waitgraph');
  const box = svg ? svg.getBoundingClientRect() : null;
  const nodes = [...document.querySelectorAll('svg.waitgraph g.node')].map(g => ({
      id: g.id, ranks: g.dataset.ranks, culprit: g.classList.contains('culprit'), text: g.textContent}));
  const edges = [...document.querySelectorAll('svg.waitgraph g.edge')].map(g => ({
      src: g.dataset.src, dst: g.dataset.dst, cycle: g.classList.contains('cycle')}));
  const dangling = [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))
      .filter(h => !h.startsWith('#') || !document.getElementById(decodeURIComponent(h.slice(1))));
  return {svg: box && [box.width, box.height], nodes, edges, dangling,
          verdict: document.querySelector('.badge').textContent};
})()"""

_FOLLOW = """(async () => {
  const link = document.querySelector('a[href^="#ev-"]');
  const id = link.getAttribute('href').slice(1);
  const before = document.getElementById(id).open;
  link.click();
  await new Promise(r => setTimeout(r, 50));
  const target = document.getElementById(id), hit = target.querySelector('.ln.hit');
  return {before, open: target.open, visible: hit.getBoundingClientRect().height > 0, hit: hit.textContent,
          cite: link.textContent};
})()"""


def _in_browser(browser, report, name, tmp_path):
    path = tmp_path / f"{name}.html"
    path.write_text(html.render(report), encoding="utf-8")
    page = browser.page()
    try:
        seconds = page.open(path.as_uri())
        seen = page.evaluate(_READ_PAGE)
        followed = page.evaluate(_FOLLOW)
        page.evaluate("window.scrollTo(0, 0); history.replaceState(null, '', location.pathname)")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(str(ARTIFACTS / f"{name}.png"))
        page.screenshot(str(ARTIFACTS / f"{name}.full.png"), full_page=True)
        errors, requests = page.console_errors(), page.requests()
    finally:
        page.close()
    assert errors == []
    assert requests == [path.as_uri()], "the page fetched something besides itself"
    assert seen["svg"] and seen["svg"][0] > 200 and seen["svg"][1] > 40
    assert seen["dangling"] == []
    assert seen["verdict"] == report.verdict.upper()
    culprits = set()
    for node in seen["nodes"]:
        if node["culprit"]:
            culprits |= expand(node["ranks"])
            if len(expand(node["ranks"])) == 1:
                assert f"rank {node['ranks']}" in node["text"]
    assert culprits == set(report.culprit_ranks)
    nodes = [{"id": n["id"], "data-ranks": n["ranks"]} for n in seen["nodes"]]
    assert {(e["src"], e["dst"]) for e in seen["edges"] if e["cycle"]} == expected_cycle_edges(report, nodes)
    assert not followed["before"] and followed["open"] and followed["visible"]
    return seconds, followed


def test_deadlock_in_chromium(browser, deadlock, tmp_path):
    _, followed = _in_browser(browser, deadlock, "deadlock_real_p2p_cycle_2", tmp_path)
    assert followed["cite"] in {"rank0.locals.txt:5", "rank1.locals.txt:5"}
    assert "send (torch/distributed/distributed_c10d.py:2753)" in followed["hit"]


def test_missing_rank_in_chromium(browser, missing, tmp_path):
    _, followed = _in_browser(browser, missing, "missing_rank_real_dataloader", tmp_path)
    assert followed["cite"] == "rank2.locals.txt:5" and "Condition.wait" in followed["hit"]


def test_thousand_rank_ring_in_chromium(browser, ring_1000, tmp_path):
    assert ring_1000.verdict == "deadlock" and len(ring_1000.culprit_ranks) == 1000
    _in_browser(browser, ring_1000, "deadlock_ring_1000", tmp_path)


def test_ten_thousand_ranks_open_quickly_in_chromium(browser, tmp_path):
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(gen.snapshot("missing", 10000)))
    report = analyze(path, hung=True)
    _in_browser(browser, report, "missing_rank_10000", tmp_path)  # its time: benchmarks/bench_report.py


# --------------------------------------------------------------------------
# Ready for a ticket: who wrote it, a timeline that reads, a tree that folds


def watchdog_incident(path, ranks: int, killed: int):
    """A snapshot of `ranks` ranks waiting in one all_reduce for rank `killed`,
    and a log where every other rank's watchdog times out at the same
    millisecond after `killed`'s DataLoader worker died ten minutes earlier."""
    path.mkdir()
    snapshot = {str(r): {"current_op": "all_reduce", "op_seq": 7, "group": "0", "waiting_for_ranks": [killed],
                         "stack": ["train (train.py:10)", "all_reduce (distributed_c10d.py:2950)"]}
                for r in range(ranks)}
    snapshot[str(killed)] = {"current_op": "data_loading", "stack": ["train (train.py:10)", "next_batch (data.py:5)"]}
    (path / "snapshot.json").write_text(json.dumps(snapshot, indent=0))
    lines = [f"[rank{killed}]:[E1129 10:38:09.853000 train.py:88] RuntimeError: DataLoader worker (pid 8123) "
             "is killed by signal: Killed."]
    lines += [f"[rank{r}]:[E1129 10:48:09.853000 ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
              "Timeout(ms)=600000) ran for 600010 milliseconds before timing out." for r in range(ranks) if r != killed]
    (path / "train.log").write_text("\n".join(lines) + "\n")
    return analyze(path)


@pytest.fixture(scope="module")
def ranks_64(tmp_path_factory):
    return watchdog_incident(tmp_path_factory.mktemp("wide") / "job64", 64, 37)


def lane_names(text):
    return re.findall(r'<span class="lane-name">([^<]*)</span>', text)


def test_the_header_and_title_say_which_run_wrote_the_page(deadlock, monkeypatch):
    text = html.render(deadlock)
    made = deadlock.provenance
    assert made.inputs == (str(CORPUS / "real_p2p_cycle_2"),) and made.host and made.version == forensics.__version__
    meta = re.search(r'<p class="meta">(.*?)</p>', text).group(1)
    assert f"forensics {forensics.__version__}" in meta and html.escape(made.inputs[0]) in meta
    assert re.search(r"generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", meta) and html.escape(made.host) in meta
    title = re.search(r"<title>(.*?)</title>", text).group(1)
    assert title.startswith("DEADLOCK · culprit ranks 0,1 · ") and html.escape(made.inputs[0]) in title
    assert "罪魁 Rank 0,1" in re.search(r"<title>(.*?)</title>", html.render(deadlock, "zh")).group(1)
    # A reproducible page: SOURCE_DATE_EPOCH fixes the time and leaves the host out.
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764547200")
    first, again = (html.render(analyze(CORPUS / "real_p2p_cycle_2")) for _ in range(2))
    assert first == again and "generated 2025-12-01 00:00:00 UTC" in first and "host:" not in first


def test_the_narrative_is_paragraphs_with_its_labels_set_apart(missing):
    text = html.render(missing)
    narrative = re.search(r'<div class="narrative">(.*?)</div></section>', text, re.S).group(1)
    assert narrative.startswith("<p>") and "<ul><li>" in narrative and "\n" not in narrative
    assert "<b>Judged stuck because:</b>" in narrative and "<b>Next:</b>" in narrative


def test_the_rank_table_gives_each_rank_its_last_log_line_and_progress(deadlock, ranks_64):
    text = html.render(deadlock)
    head = re.search(r'<table class="ranks"><tr>(.*?)</tr>', text).group(1)
    assert "<th>last log line</th><th>last progress</th>" in head
    row = re.search(r'<tr id="rank-0"[^>]*>(.*?)(?=<tr|</table>)', text).group(1)
    last = deadlock.notes[0].last_line
    assert html.escape(last.text.strip()[:40]) in row and f">{last.cite()}</a>" in row
    # its last progress: the last step its own console printed (rank0.stdout.log), with no time of its own
    progress = deadlock.notes[0].progress_line
    assert progress.path == "rank0.stdout.log" and f">{progress.cite()}</a>" in row
    wide = html.render(ranks_64)
    row = re.search(r'<tr id="rank-5"[^>]*>(.*?)(?=<tr|</table>)', wide).group(1)
    assert "Watchdog caught collective operation timeout" in row


def test_lanes_are_named_by_rank_host_or_file_never_launcher(tmp_path):
    report = watchdog_incident(tmp_path / "job4", 4, 2)
    lanes = lane_names(html.render(report))
    # The killed rank first (first failure, culprit), then the waiting ranks by number, then the
    # file whose stuck line names no rank; nothing in this incident is a launcher's log.
    assert lanes == ["rank 2", "rank 0", "rank 1", "rank 3", "train.log"]


# In a real browser: what a person sees.

_LANES = """(() => {
  const lanes = [...document.querySelectorAll('.lane')].map(l => {
    const track = l.querySelector('.lane-track').getBoundingClientRect();
    return {name: l.querySelector('.lane-name').textContent, width: track.width,
            xs: [...l.querySelectorAll('.mark')].map(m => m.getBoundingClientRect().left - track.left)};
  });
  const visible = el => el && el.getBoundingClientRect().height > 0;
  return {lanes, more: [...document.querySelectorAll('.lanes-more')].filter(visible).map(p => p.textContent),
          spread: visible(document.querySelector('.spread')) ? document.querySelector('.spread').textContent : null,
          meta: document.querySelector('.meta').textContent, title: document.title};
})()"""

_FOLD = """(async () => {
  const node = document.querySelector('.stacktree details');
  const leaf = node.querySelector('.leaf');
  const before = leaf.checkVisibility();
  node.querySelector('summary').click();
  await new Promise(r => setTimeout(r, 50));
  return {before, after: leaf.checkVisibility(), open: node.open,
          leaves: document.querySelectorAll('.stacktree .leaf').length};
})()"""


def test_sixty_four_ranks_in_chromium(browser, ranks_64, tmp_path):
    assert ranks_64.verdict == "dead_rank" and ranks_64.culprit_ranks == [37]
    path = tmp_path / "ranks64.html"
    path.write_text(html.render(ranks_64), encoding="utf-8")
    page = browser.page()
    try:
        page.open(path.as_uri())
        seen = page.evaluate(_LANES)
        folded = page.evaluate(_FOLD)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(str(ARTIFACTS / "ranks_64.full.png"), full_page=True)
        errors = page.console_errors()
    finally:
        page.close()
    assert errors == []
    names = [lane["name"] for lane in seen["lanes"]]
    # At most LANES_SHOWN lanes, by relevance: the culprit, then the waiting ranks by number.
    assert names == ["rank 37"] + [f"rank {r}" for r in range(html.LANES_SHOWN - 1)]
    assert "launcher" not in " ".join(names)
    assert seen["more"] == ["… 48 more ranks, not drawn (every event is in the list below)",
                            "… 1 more lane, not drawn (every event is in the list below)"]
    # 63 timeouts at one millisecond: spread in their order across the track, and the page says so.
    xs = [x for lane in seen["lanes"] for x in lane["xs"]]
    width = seen["lanes"][0]["width"]
    assert len(xs) == html.LANES_SHOWN and len({round(x) for x in xs}) == len(xs)
    assert max(xs) - min(xs) > 0.9 * width
    assert seen["spread"] and "in their order" in seen["spread"]
    assert "MISSING" not in seen["title"] and seen["title"].startswith("DEAD_RANK · culprit ranks 37 · ")
    assert f"forensics {forensics.__version__}" in seen["meta"] and "job64" in seen["meta"]
    # The stack classes fold like STAT's tree.
    assert folded == {"before": True, "after": False, "open": False, "leaves": 2}
