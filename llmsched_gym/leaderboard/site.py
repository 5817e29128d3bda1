"""``llmsched-gym leaderboard site``: the committed leaderboards as a static, self-contained site.

One page per task (the board with agents, whole schedulers and oracles in separate sortable
tables, each score's 95% interval drawn as inline SVG on a shared log axis, per-level and
per-workload drill-downs, the committed plot and headroom), one per submission (its
``submission.yaml``, scores, every workload's row, its learning curve where the training left
one, its README), one per paper reproduction (the headline table that ``leaderboard reproduce
--from-results`` computes, every committed plot, the README), the counterfactual and headroom
analyses, and an index. The numbers are the ones ``leaderboard show`` prints: both read the
boards through ``validate.task_boards`` and format them with ``tables``.

Self-contained: CSS and the sorting script are inlined, images are copied under ``img/``, and
every page carries a Content-Security-Policy that lets it load nothing but its own folder's
files. READMEs are rendered by ``site_markdown`` (untrusted text: escaped, no raw HTML, external
links shown as text, ``javascript:`` links refused). More pages (e.g. a timeline viewer) plug in
through ``build_site(extra=...)``: functions that receive the ``Site`` and return pages.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.site_html import (
    Axis,
    curve_svg,
    document,
    esc,
    fmt,
    interval_svg,
    num,
    sort_key,
    table,
)
from llmsched_gym.leaderboard.site_markdown import render_markdown
from llmsched_gym.leaderboard.suite import LEVELS

__all__ = [
    "ASSETS",
    "Page",
    "PageSource",
    "Site",
    "build_site",
    "is_site_entry",
    "write_site",
]

ASSETS = "img"
"""The site's image folder (copies of the committed PNGs)."""

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif")
"""Images the site copies (no SVG: an SVG file can carry scripts and external references)."""

def is_site_entry(name: str) -> bool:
    """Whether a top-level entry of an output folder is one the site writes (pages, images)."""
    return name.endswith(".html") or name in (ASSETS, "traces")


@dataclass(frozen=True)
class Page:
    """One page: its file name (top level of the site), title and the HTML of its main part."""

    file: str
    title: str
    body: str
    section: str = "more"
    """Where the index lists it: ``task``, ``submission``, ``paper``, ``analysis`` or ``more``."""
    summary: str = ""
    """One line for the index (plain text)."""


PageSource = Callable[["Site"], Sequence[Page]]
"""A function that adds pages to a site (``build_site(extra=[...])``)."""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "x"


@dataclass
class Site:
    """A site under construction in ``dest``: pages by file name, copied images by source."""

    root: Path
    """The ``leaderboards/`` folder."""
    suite: Any
    dest: Path
    pages: dict[str, Page] = field(default_factory=dict)
    images: dict[Path, str] = field(default_factory=dict)
    folders: dict[Path, str] = field(default_factory=dict)
    """Repository folders that have a page (a submission, a task, a paper) -> the page's file."""

    @property
    def repo(self) -> Path:
        """The repository holding ``leaderboards/`` (and ``baselines/``)."""
        return self.root.resolve().parent

    def shown(self, path: Path) -> str:
        """``path`` as a caption: relative to ``leaderboards/`` where it lies under it."""
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return path.name

    def add(self, page: Page) -> None:
        """Adds ``page``; a second page with the same file name is an error."""
        if page.file in self.pages or not re.fullmatch(r"[a-z0-9][a-z0-9.-]*\.html", page.file):
            raise ConfigError(f"site: page file {page.file!r} is taken or not a plain .html name")
        self.pages[page.file] = page

    def unique(self, stem: str) -> str:
        """A page file name from ``stem`` that no page has yet."""
        name, k = f"{stem}.html", 2
        while name in self.pages or name in self.folders.values():
            name, k = f"{stem}-{k}.html", k + 1
        return name

    def image(self, src: Path) -> str:
        """Copies image ``src`` under ``img/`` (once) and returns its href."""
        src = src.resolve()
        if src not in self.images:
            try:
                rel = src.relative_to(self.repo)
            except ValueError:
                rel = Path(src.name)
            stem = _slug(str(rel.with_suffix("")))
            name, k = f"{stem}{src.suffix.lower()}", 2
            while name in {Path(h).name for h in self.images.values()}:
                name, k = f"{stem}-{k}{src.suffix.lower()}", k + 1
            (self.dest / ASSETS).mkdir(exist_ok=True)
            shutil.copyfile(src, self.dest / ASSETS / name)
            self.images[src] = f"{ASSETS}/{name}"
        return self.images[src]

    def resolver(self, base: Path) -> Callable[[str], str | None]:
        """A README's link resolver: a relative target under ``base`` -> a page or an image."""
        repo = self.repo

        def resolve(target: str) -> str | None:
            path_part = target.split("#", 1)[0].split("?", 1)[0]
            if not path_part:
                return None
            path = (base / path_part).resolve()
            if repo != path and repo not in path.parents:
                return None
            if path.name.lower() == "readme.md":
                path = path.parent
            if path in self.folders:
                return self.folders[path]
            if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
                return self.image(path)
            return None

        return resolve

    def markdown(self, text: str, base: Path) -> str:
        """Markdown ``text`` (a README in folder ``base``) as safe HTML."""
        return render_markdown(text, self.resolver(base))

    def figure(self, src: Path, caption: str) -> str:
        """An image of the repository as a figure with its caption."""
        href = self.image(src)
        return (
            f'<figure><img src="{esc(href)}" alt="{esc(caption)}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>"
        )


def _rank_sort(label: str) -> str:
    digits = label.lstrip("R")
    return digits if digits.isdigit() else ""


GROUPS = (
    ("agent", "Agents", "act only through the task's decision; ranked 1, 2, ..."),
    ("reference", "Whole schedulers (reference kind)", "replace the engine's scheduler; ranked "
     "apart as R1, R2, ..."),
    ("oracle", "Oracles", "the harness saw them read hidden truth; not ranked"),
    ("failed", "Failed", "failed on some workload; not ranked"),
)  # fmt: skip
"""The task page's tables: (group, heading, what its rows are)."""


def row_group(r: Mapping[str, Any]) -> str:
    """The table a board row goes to: ``oracle``, ``failed``, or its kind."""
    if r["oracle"]:
        return "oracle"
    if r["num_failed"]:
        return "failed"
    return str(r["kind"])


# --- pages ----------------------------------------------------------------------------------


def _task_file(name: str) -> str:
    return f"task-{_slug(name)}.html"


def _levels(task: Any) -> list[str]:
    return [lvl for lvl in LEVELS if any(sc.level == lvl for sc in task.scenarios)]


def _board_table(site: Site, tb: Any, rows: Sequence[tuple[str, dict]], group: str) -> str:
    from llmsched_gym.leaderboard.tables import row_notes

    task, levels = tb.task, _levels(tb.task)
    axis = Axis.of([r["score"] for r in tb.board])
    folder_of = {sub.method: sub.folder.resolve() for sub in tb.submissions}
    out = []
    for label, r in rows:
        page = site.folders.get(folder_of[r["method"]])
        method = esc(r["method"])
        out.append(
            [
                (esc(label), _rank_sort(label)),
                f'<a href="{esc(page)}">{method}</a>' if page else method,
                esc(r["kind"]),
                (esc(r["score"].text()), sort_key(r["score"].value)),
                (interval_svg(r["score"], axis, group), sort_key(r["score"].value)),
                *(
                    (fmt(r["levels"][lvl].value) if r["levels"][lvl].n else "—",
                     sort_key(r["levels"][lvl].value))
                    for lvl in levels
                ),
                (fmt(r["tail"].value) if r["tail"].n else "—", sort_key(r["tail"].value)),
                (str(r["num_workloads"]), r["num_workloads"]),
                esc("; ".join(row_notes(r, task.reference))),
            ]
        )
    head = ["rank", "method", "kind", "score [95% CI]", "interval", *levels, "tail",
            "workloads", "notes"]  # fmt: skip
    return table(head, out, ident=f"board-{group}", cls="board")


def _per_workload(tb: Any, methods: Sequence[str]) -> str:
    """Every test workload: the reference's metric value and each method's ratio."""
    task = tb.task
    by = {m: {r["workload"]: r for r in tb.methods[m]} for m in methods}
    order = list(dict.fromkeys(r["workload"] for m in methods for r in tb.methods[m]))
    ref = by.get(next((s.method for s in tb.submissions if s.policy == task.reference), ""), {})
    rows = []
    for w in order:
        first = next(by[m][w] for m in methods if w in by[m])
        r0 = ref.get(w)
        ref_value = r0["value"] if r0 and r0["status"] == "ok" else math.nan
        cells: list[Any] = [esc(w), esc(first["level"]), (fmt(ref_value, ".4g"),
                                                           sort_key(ref_value))]
        for m in methods:
            r = by[m].get(w)
            if r is None:
                cells.append(("", ""))
            elif r["status"] != "ok":
                cells.append(("failed", ""))
            else:
                cells.append((fmt(r.get("ratio")), sort_key(r.get("ratio"))))
        rows.append(cells)
    head = ["workload", "level", f"{esc(task.reference)} {esc(first_metric(tb))}",
            *(esc(m) for m in methods)]  # fmt: skip
    return table(head, rows, ident="per-workload", cls="wide")


def first_metric(tb: Any) -> str:
    """The metric of the task's rows (a task may name it per scenario; the first row's)."""
    for rows in tb.methods.values():
        for r in rows:
            return str(r.get("metric") or tb.task.metric)
    return str(tb.task.metric)


def _per_level(tb: Any, rows: Sequence[dict], ident: str) -> str:
    """Per load level: each method's score with its interval (the levels' drill-down)."""
    parts = []
    for lvl in _levels(tb.task):
        scores = [r["levels"][lvl] for r in rows]
        axis = Axis.of(scores)
        body = [
            [
                esc(r["method"]),
                esc(r["kind"] if not r["oracle"] else "oracle"),
                (esc(r["levels"][lvl].text()), sort_key(r["levels"][lvl].value)),
                (interval_svg(r["levels"][lvl], axis, row_group(r)),
                 sort_key(r["levels"][lvl].value)),
                (str(r["levels"][lvl].n), r["levels"][lvl].n),
            ]
            for r in rows
            if r["levels"][lvl].n
        ]
        if body:
            parts.append(f"<h3>{esc(lvl)}</h3>")
            parts.append(
                table(["method", "kind", "score [95% CI]", "interval", "workloads"], body,
                      ident=f"{ident}-{lvl}")
            )
    return "\n".join(parts)


def task_page(site: Site, tb: Any, headroom: Sequence[Mapping[str, Any]]) -> Page:
    """A task's page: the board in groups, intervals, levels, workloads, plot and headroom."""
    from llmsched_gym.leaderboard.headroom import task_headroom
    from llmsched_gym.leaderboard.tables import markdown_table, rank_labels

    task, suite = tb.task, site.suite
    intro = markdown_table(suite, task, tb.board).split("\n| rank |", 1)[0]
    intro = intro.split("\n", 1)[1] if intro.startswith("### ") else intro  # the h1 says it
    parts = [f"<h1>{esc(task.name)}</h1>", render_markdown(intro, heading_offset=0)]
    labelled = list(zip(rank_labels(tb.board), tb.board, strict=True))
    for group, heading, what in GROUPS:
        rows = [(label, r) for label, r in labelled if row_group(r) == group]
        if rows:
            parts.append(f'<h2 id="{group}">{esc(heading)} ({len(rows)})</h2>')
            parts.append(f'<p class="what">{esc(what)}</p>')
            parts.append(_board_table(site, tb, rows, group))
    parts.append('<h2 id="levels">Per load level</h2>')
    parts.append(_per_level(tb, tb.board, "level"))
    parts.append('<h2 id="workloads">Per workload</h2>')
    parts.append(
        f"<p>The ratio of {esc(task.reference)}'s metric to each method's on every held-out "
        "test workload (above 1: better than the reference).</p>"
    )
    parts.append(_per_workload(tb, [r["method"] for r in tb.board]))
    png = site.root / task.name.lower() / "leaderboard.png"
    if png.is_file():
        parts.append('<h2 id="plot">Plot</h2>')
        parts.append(site.figure(png, f"leaderboards/{task.name.lower()}/leaderboard.png"))
    text = task_headroom(headroom, suite.version, task.name) if headroom else ""
    if text:
        parts.append('<h2 id="headroom">Headroom</h2>')
        parts.append(render_markdown(text, heading_offset=-1))
    return Page(_task_file(task.name), f"{task.name} leaderboard", "\n".join(parts), "task",
                task.decision)


def learning_curves(site: Site, folder: Path) -> str:
    """A learned submission's learning curve (``train.json``'s recipe and seed), else ""."""
    path = folder / "train.json"
    if not path.is_file():
        return ""
    try:
        info = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(info, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(info).__name__}")
    recipe, seed = info.get("recipe"), info.get("seed")
    parts = []
    if isinstance(recipe, str) and re.fullmatch(r"\w[\w.-]*", recipe):
        base = site.repo / "baselines" / "results" / recipe
        seed_dir = base / f"seed{seed}"
        runs = [seed_dir]
        if isinstance(info.get("chosen_restart"), int):
            runs.insert(0, seed_dir / f"restart{info['chosen_restart']}")
        for run in runs:
            csv_path = run / "learning_curve.csv"
            if csv_path.is_file():
                parts.append(_curve_from_csv(csv_path, f"{recipe}, {run.relative_to(base)}"))
                break
        for png, caption in ((base / "curves.png", "every seed"),
                             (seed_dir / "learning_curve.png", f"seed {seed}")):  # fmt: skip
            if png.is_file():
                parts.append(site.figure(png, f"baselines/results/{recipe}: {caption}"))
    checkpoints = info.get("checkpoints") or info.get("restarts")
    if isinstance(checkpoints, list) and checkpoints and all(isinstance(c, dict) for c in
                                                             checkpoints):
        keys = [k for k in ("checkpoint", "seed", "timesteps", "validation_score")
                if k in checkpoints[0]]  # fmt: skip
        rows = [[(esc(c.get(k, "")), sort_key(c.get(k))) for k in keys] for c in checkpoints]
        parts.append("<h3>Validation during training</h3>")
        parts.append(table(keys, rows, ident="checkpoints"))
    return "\n".join(parts)


def _curve_from_csv(path: Path, title: str) -> str:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for column, label in (("return", "episode return"), ("vs_reference", "reference / agent")):
        pts = [(num(r.get("timesteps")), num(r.get(column))) for r in rows]
        if any(math.isfinite(y) for _, y in pts):
            out.append(curve_svg(pts, f"Learning curve: {title}", label))
    return "\n".join(out)


def submission_page(site: Site, tb: Any, sub: Any, label: str, r: Mapping[str, Any]) -> Page:
    """A submission's page: facts, scores, every workload's row, learning curve, README."""
    task = tb.task
    facts = [
        ("task", f'<a href="{_task_file(task.name)}">{esc(task.name)}</a>'),
        ("suite", esc(sub.suite)),
        ("policy", f"<code>{esc(sub.policy)}</code>"),
        ("kind", esc(r["kind"]) + ("" if r["kind"] == sub.kind else
                                    f" (declared {esc(sub.kind)})")),
        ("oracle", ("yes" if r["oracle"] else "no")
         + (" (declared)" if sub.oracle else "")),
        ("rank", esc(label)),
        ("paper", esc(sub.paper or "—")),
        ("training", esc(sub.training or "—")),
    ]  # fmt: skip
    parts = [
        f"<h1>{esc(task.name)}: {esc(sub.method)}</h1>",
        '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>",
        '<h2 id="score">Score</h2>',
        _per_level_summary(tb, r),
        '<h2 id="workloads">Per workload</h2>',
        _submission_rows(tb, r["method"]),
    ]
    curves = learning_curves(site, sub.folder)
    if curves:
        parts += ['<h2 id="learning-curve">Learning curve</h2>', curves]
    readme = sub.folder / "README.md"
    if readme.is_file():
        parts += ['<h2 id="readme">README</h2>', '<div class="readme">',
                  site.markdown(readme.read_text(errors="replace"), sub.folder), "</div>"]
    return Page(site.folders[sub.folder.resolve()], f"{task.name}: {sub.method}",
                "\n".join(parts), "submission", f"{task.name} / {sub.method}")


def _per_level_summary(tb: Any, r: Mapping[str, Any]) -> str:
    levels = [r["levels"][lvl] for lvl in _levels(tb.task)]
    axis = Axis.of([r["score"], r["tail"], *levels])
    group = row_group(r)
    rows = [["all", (esc(r["score"].text()), sort_key(r["score"].value)),
             (interval_svg(r["score"], axis, group), sort_key(r["score"].value)),
             (str(r["score"].n), r["score"].n)]]  # fmt: skip
    for lvl in _levels(tb.task):
        s = r["levels"][lvl]
        if s.n:
            rows.append([esc(lvl), (esc(s.text()), sort_key(s.value)),
                         (interval_svg(s, axis, group), sort_key(s.value)), (str(s.n), s.n)])
    rows.append([f"tail ({esc(tb.task.tail_metric)})",
                 (esc(r["tail"].text()), sort_key(r["tail"].value)),
                 (interval_svg(r["tail"], axis, group), sort_key(r["tail"].value)),
                 (str(r["tail"].n), r["tail"].n)])  # fmt: skip
    return table(["workloads", "score [95% CI]", "interval", "n"], rows, ident="score")


def _submission_rows(tb: Any, method: str) -> str:
    rows = []
    for r in tb.methods[method]:
        note = r.get("error") or r.get("oracle_reason") or ""
        rows.append(
            [
                esc(r["workload"]),
                esc(r["level"]),
                esc(r["status"]),
                (fmt(r.get("value"), ".4g"), sort_key(r.get("value"))),
                (fmt(r.get("reference_value"), ".4g"), sort_key(r.get("reference_value"))),
                (fmt(r.get("ratio")), sort_key(r.get("ratio"))),
                (fmt(r.get("tail_ratio")), sort_key(r.get("tail_ratio"))),
                esc(note),
            ]
        )
    head = ["workload", "level", "status", "value", "reference value", "ratio", "tail ratio",
            "note"]  # fmt: skip
    return table(head, rows, ident="rows", cls="wide")


def paper_page(site: Site, path: Path) -> Page:
    """A paper reproduction's page: headline table (committed results), plots, README."""
    from llmsched_gym.leaderboard import experiments as E

    paper = E.load(path)
    rows = E.evaluate(paper, paper.results)
    cols = ("figure", "finding", "paper", "ours", "rule", "verdict")
    body = [[esc(row[c]) for c in cols] for row in rows]
    parts = [
        f"<h1>{esc(paper.title)}</h1>",
        f"<p>The reproduction's headline findings from its committed results "
        f"(<code>llmsched-gym leaderboard reproduce {esc(paper.id)} --from-results</code>): "
        f"{len(rows)} findings, each with the paper's value, ours, the acceptance rule and the "
        "verdict.</p>",
        '<h2 id="headlines">Headline table</h2>',
        table(list(cols), body, ident="headlines", cls="wide"),
    ]
    plots = sorted(p for p in paper.results.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if plots:
        parts.append('<h2 id="plots">Plots</h2>')
        parts += [site.figure(p, site.shown(p)) for p in plots]
    readme = path.parent / "README.md"
    if readme.is_file():
        parts += ['<h2 id="readme">README</h2>', '<div class="readme">',
                  site.markdown(readme.read_text(errors="replace"), path.parent), "</div>"]
    summary = f"{len(rows)} headline findings against the paper's numbers"
    return Page(site.folders[path.parent.resolve()], paper.title, "\n".join(parts), "paper",
                summary)


def document_page(site: Site, file: str, title: str, docs: Sequence[Path], summary: str) -> Page:
    """An analysis page: Markdown files rendered in order, each with the images beside it."""
    parts = [f"<h1>{esc(title)}</h1>"]
    for doc in docs:
        parts.append(f'<h2 class="source">{esc(site.shown(doc))}</h2>')
        parts.append(site.markdown(doc.read_text(errors="replace"), doc.parent))
        for png in sorted(p for p in doc.parent.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
            if png.resolve() not in site.images:
                parts.append(site.figure(png, site.shown(png)))
    return Page(file, title, "\n".join(parts), "analysis", summary)


def analysis_pages(site: Site) -> list[Page]:
    """The counterfactual analyses and the headroom table with its declared decisions."""
    pages = []
    cf = site.root / "counterfactual"
    if (cf / "README.md").is_file():
        docs = [cf / "README.md"] + sorted(
            p / name for p in sorted(cf.iterdir()) if p.is_dir()
            for name in ("README.md", "summary.md") if (p / name).is_file()
        )  # fmt: skip
        pages.append(document_page(site, "counterfactual.html", "Counterfactual analyses", docs,
                                   "regret of single decisions; the lookahead oracle"))
    docs = [site.root / n for n in ("headroom.md", "headroom-decisions.md")]
    docs = [d for d in docs if d.is_file()]
    if docs:
        pages.append(document_page(site, "headroom.html", "Headroom per task", docs,
                                   "how far each task's reference is from its upper references"))
    return pages


def index_page(site: Site, boards: Mapping[str, Any]) -> Page:
    """The front page: every task with its best agent and whole scheduler, then the rest."""
    from llmsched_gym.leaderboard.tables import rank_labels

    suite = site.suite
    rows = []
    for name, tb in boards.items():
        labelled = list(zip(rank_labels(tb.board), tb.board, strict=True))
        agent = next((r for lab, r in labelled if lab.isdigit()), None)
        whole = next((r for lab, r in labelled if lab.startswith("R")), None)

        def best(r: Mapping[str, Any] | None) -> tuple[str, str]:
            if r is None:
                return "—", ""
            return f"{esc(r['method'])} {esc(r['score'].text())}", sort_key(r["score"].value)

        rows.append(
            [
                f'<a href="{_task_file(name)}">{esc(name)}</a>',
                esc(tb.task.decision),
                esc(tb.task.metric),
                esc(tb.task.reference),
                "scored" if tb.task.scored else "unscored",
                (str(len(tb.submissions)), len(tb.submissions)),
                best(agent),
                best(whole),
            ]
        )
    head = ["task", "decision", "metric", "reference", "status", "submissions",
            "best agent: score [95% CI]", "best whole scheduler"]  # fmt: skip
    parts = [
        f"<h1>llmsched-gym leaderboards ({esc(suite.version)})</h1>",
        f"<p>{esc(suite.description)}</p>",
    ]
    if suite.superseded:
        parts.append(f'<p class="warn">SUPERSEDED: {esc(suite.superseded)}</p>')
    parts += [
        "<p>Scores: geometric mean over the held-out test workloads of the reference's metric "
        "over the method's (above 1: better than the reference), with a paired 95% interval. "
        "Each task's page ranks agents, whole schedulers and oracles apart.</p>",
        '<h2 id="tasks">Tasks</h2>',
        table(head, rows, ident="tasks", cls="wide"),
    ]
    for section, heading in (("paper", "Paper reproductions"), ("analysis", "Analyses"),
                             ("more", "More")):  # fmt: skip
        listed = [p for p in site.pages.values() if p.section == section]
        if listed:
            parts.append(f'<h2 id="{section}">{heading}</h2><ul>')
            parts += [
                f'<li><a href="{esc(p.file)}">{esc(p.title)}</a>'
                + (f": {esc(p.summary)}" if p.summary else "")
                + "</li>"
                for p in listed
            ]
            parts.append("</ul>")
    return Page("index.html", f"llmsched-gym leaderboards ({suite.version})", "\n".join(parts),
                "index")


# --- writing --------------------------------------------------------------------------------

def render_page(site: Site, page: Page, nav: Sequence[tuple[str, str]]) -> str:
    """The whole HTML document of ``page`` (inlined style and script, the CSP, navigation)."""
    footer = (
        "Generated by <code>llmsched-gym leaderboard site</code> from the committed results of "
        f"{esc(site.suite.version)}."
    )
    return document(page.title, page.body, nav, footer)


def build_site(
    root: Path, suite: Any, dest: Path, extra: Sequence[PageSource] = ()
) -> dict[str, Page]:
    """Write the site of ``suite``'s committed leaderboards under ``root`` into ``dest``.

    ``dest`` must exist (empty); ``extra`` adds pages (listed on the index under "More").
    Returns the pages by file name.
    """
    from llmsched_gym.leaderboard.headroom import read_headroom
    from llmsched_gym.leaderboard.validate import task_boards

    site = Site(root, suite, dest)
    boards = task_boards(root, suite)
    papers = sorted(root.glob("*/experiments.yaml"))
    for name in boards:
        site.folders[(root / name.lower()).resolve()] = _task_file(name)
    for tb in boards.values():
        for sub in tb.submissions:
            stem = f"sub-{_slug(tb.task.name)}-{_slug(sub.method)}"
            site.folders[sub.folder.resolve()] = site.unique(stem)
    for path in papers:
        site.folders[path.parent.resolve()] = site.unique(f"paper-{_slug(path.parent.name)}")
    committed = root / "headroom.csv"
    headroom = read_headroom(committed) if committed.is_file() else []
    for tb in boards.values():
        site.add(task_page(site, tb, headroom))
        labels = _labels(tb.board)
        for sub in tb.submissions:
            row = next(r for r in tb.board if r["method"] == sub.method)
            site.add(submission_page(site, tb, sub, labels[sub.method], row))
    for path in papers:
        site.add(paper_page(site, path))
    for page in analysis_pages(site):
        site.add(page)
    for source in extra:
        for page in source(site):
            site.add(page)
    site.add(index_page(site, boards))
    nav = [("index.html", "Leaderboards")] + [(_task_file(n), n) for n in boards] + [
        (p.file, p.title.split(" (")[0].split(":")[0]) for p in site.pages.values()
        if p.section in ("paper", "analysis", "more")
    ]  # fmt: skip
    for page in site.pages.values():
        (dest / page.file).write_text(render_page(site, page, nav), encoding="utf-8")
    return site.pages


def _labels(board: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    from llmsched_gym.leaderboard.tables import rank_labels

    return {r["method"]: label for label, r in zip(rank_labels(board), board, strict=True)}


def write_site(root: Path, suite: Any, out: str | Path, extra: Sequence[PageSource] = ()) -> Path:
    """Build the site into the output folder ``out``, written as one set (``OutputSet``).

    An existing ``out`` that holds anything the site did not write there is refused, never
    replaced.
    """
    from llmsched_gym.metrics._outputset import OutputSet

    output = OutputSet(out, names=is_site_entry).prepare()
    try:
        pages = build_site(root, suite, output.path(""), extra)
        if not pages:
            raise ConfigError("site: no pages")
        return output.commit(f"llmsched-gym leaderboard site --out {out}")
    finally:
        output.discard()
