"""HTML pieces of the leaderboard site: escaping, sortable tables, SVG drawings, the page.

Every page is one document with its style and sorting script inlined and a Content-Security-
Policy that lets it load nothing but files of its own folder (``site`` builds the pages).
Tables sort on a click of a header (numbers by ``data-sort``, text naturally; empty cells last;
a second click reverses). Scores' 95% intervals are drawn on a shared log axis, learning curves
as dots with their running mean.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CSP", "curve_svg", "document", "esc", "fmt", "interval_svg", "num", "sort_key",
           "table", "Axis"]  # fmt: skip

CSP = (
    "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)
"""Every page's Content-Security-Policy: nothing loads from outside the site's folder."""



def esc(value: Any) -> str:
    """``value`` as text safe in HTML content and quoted attributes."""
    return html.escape(str(value), quote=True)


def num(x: Any) -> float:
    """``x`` as a float (NaN when it is not a number)."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def fmt(x: Any, spec: str = ".3f") -> str:
    """A number formatted with ``spec``; "—" when it is missing or not finite."""
    v = num(x)
    return format(v, spec) if math.isfinite(v) else "—"


def sort_key(x: Any) -> str:
    """A cell's ``data-sort`` value: the number, or empty (sorted last) when there is none."""
    v = num(x)
    return repr(v) if math.isfinite(v) else ""


# --- drawing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """A shared log axis for ratio intervals (1 is always on it)."""

    lo: float
    hi: float
    width: int = 200

    @classmethod
    def of(cls, scores: Sequence[Any]) -> Axis:
        """An axis holding every value and interval end of ``scores`` (``Score``), and 1."""
        vals = [1.0]
        for s in scores:
            vals += [v for v in (s.value, s.low, s.high) if math.isfinite(v) and v > 0]
        lo, hi = min(vals), max(vals)
        span = max(math.log(hi / lo), 0.02)
        pad = 0.06 * span
        return cls(math.exp(math.log(lo) - pad), math.exp(math.log(lo) + span + pad))

    def x(self, v: float) -> float:
        """The horizontal position of ratio ``v``."""
        return round(4 + (self.width - 8) * math.log(v / self.lo) / math.log(self.hi / self.lo), 1)


def interval_svg(score: Any, axis: Axis, group: str) -> str:
    """A score's value and 95% interval on ``axis`` (dashed line: 1, the reference)."""
    if not score.n or not math.isfinite(score.value) or score.value <= 0:
        return ""
    one = axis.x(1.0)
    parts = [
        f'<svg class="ci {group}" width="{axis.width}" height="18" '
        f'viewBox="0 0 {axis.width} 18" role="img" aria-label="{esc(score.text())}">',
        f"<title>{esc(score.text())}</title>",
        f'<line class="one" x1="{one}" x2="{one}" y1="1" y2="17"/>',
    ]
    if math.isfinite(score.low) and math.isfinite(score.high):
        lo, hi = axis.x(score.low), axis.x(score.high)
        parts.append(f'<line class="bar" x1="{lo}" x2="{hi}" y1="9" y2="9"/>')
        parts += [f'<line class="bar" x1="{v}" x2="{v}" y1="5" y2="13"/>' for v in (lo, hi)]
    parts.append(f'<circle cx="{axis.x(score.value)}" cy="9" r="3.5"/>')
    return "".join(parts) + "</svg>"


def curve_svg(points: Sequence[tuple[float, float]], title: str, ylabel: str) -> str:
    """A learning curve: every episode as a dot and their running mean as a line."""
    pts = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return ""
    w, h, left, right, top, bottom = 600, 220, 62, 12, 24, 36
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1

    def sx(x: float) -> float:
        return round(left + (w - left - right) * (x - x0) / (x1 - x0), 1)

    def sy(y: float) -> float:
        return round(top + (h - top - bottom) * (1 - (y - y0) / (y1 - y0)), 1)

    window = max(1, len(pts) // 20)
    mean, run = [], 0.0
    for k, (_, y) in enumerate(pts):
        run += y - (pts[k - window][1] if k >= window else 0.0)
        mean.append(run / min(k + 1, window))
    step = max(1, len(pts) // 600)
    dots = "".join(
        f'<circle cx="{sx(x)}" cy="{sy(y)}" r="1.6"/>' for x, y in pts[::step]
    )
    line = " ".join(f"{sx(x)},{sy(m)}" for (x, _), m in zip(pts, mean, strict=True))
    ticks = "".join(
        f'<text x="{left - 6}" y="{sy(v) + 4}" class="ytick">{v:.3g}</text>' for v in (y0, y1)
    ) + "".join(
        f'<text x="{sx(v)}" y="{h - bottom + 16}" class="xtick {end}">{v:,.0f}</text>'
        for v, end in ((x0, "start"), (x1, "end"))
    )
    return (
        f'<svg class="curve" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{esc(title)}"><title>{esc(title)}</title>'
        f'<text x="{left}" y="15" class="ctitle">{esc(title)}</text>'
        f'<rect class="frame" x="{left}" y="{top}" width="{w - left - right}" '
        f'height="{h - top - bottom}"/>'
        f'<g class="dots">{dots}</g><polyline class="mean" points="{line}"/>{ticks}'
        f'<text x="{(w + left) / 2}" y="{h - 4}" class="xlabel">environment steps</text>'
        f'<text x="12" y="{(h + top - bottom) / 2}" class="ylabel" '
        f'transform="rotate(-90 12 {(h + top - bottom) / 2})">{esc(ylabel)}</text></svg>'
    )


# --- tables ---------------------------------------------------------------------------------


def table(head: Sequence[str], rows: Sequence[Sequence[Any]], *, ident: str, cls: str = "") -> str:
    """A sortable table. A cell is HTML text, or ``(html, sort_key)`` to sort by a number."""
    ths = "".join(f'<th scope="col">{h}</th>' for h in head)
    body = []
    for row in rows:
        tds = []
        for cell in row:
            if isinstance(cell, tuple):
                tds.append(f'<td data-sort="{esc(cell[1])}">{cell[0]}</td>')
            else:
                tds.append(f"<td>{cell}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (
        f'<table id="{esc(ident)}" class="sortable {cls}">\n<thead><tr>{ths}</tr></thead>\n'
        "<tbody>\n" + "\n".join(body) + "\n</tbody>\n</table>"
    )


_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fff}
header{background:#24344d;padding:.5em 1em}header a{color:#fff;margin-right:1em}
main{padding:1em 2em;max-width:1400px}footer{padding:1em 2em;color:#666;font-size:13px}
table{border-collapse:collapse;margin:.6em 0 1.2em}th,td{border:1px solid #d6d6d6;
padding:3px 7px;vertical-align:middle}th{background:#f1f3f6;text-align:left}
table.sortable th{cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
td[data-sort]{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.wide{font-size:13px}p.what{color:#555;margin:.2em 0}.warn{color:#a00;font-weight:bold}
svg.ci line.one{stroke:#777;stroke-dasharray:2 2}svg.ci line.bar{stroke:#333;stroke-width:1.5}
svg.ci.agent circle{fill:#1f77b4}svg.ci.reference circle{fill:#ff7f0e}
svg.ci.oracle circle,svg.ci.failed circle{fill:#888}
svg.curve .frame{fill:none;stroke:#999}svg.curve .dots circle{fill:#1f77b4;opacity:.35}
svg.curve .mean{fill:none;stroke:#d62728;stroke-width:1.6}svg.curve text{font-size:11px}
svg.curve .ytick,svg.curve .xtick.end{text-anchor:end}svg.curve .xlabel{text-anchor:middle}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:13px;color:#555}pre{background:#f6f8fa;padding:.6em;overflow:auto}
code{background:#f3f3f3;padding:0 2px}.external{color:#6a4c00}.refused-link{color:#a00}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 1em}dt{font-weight:bold}
.readme{border-top:1px solid #ddd}td.right,th.right{text-align:right}
"""

_SCRIPT = """
(function () {
  "use strict";
  function key(cell) {
    var raw = cell.getAttribute("data-sort");
    if (raw === null) { raw = cell.textContent.trim(); }
    if (raw === "" || raw === "\\u2014") { return null; }
    var num = Number(raw);
    return isFinite(num) ? num : raw;
  }
  function compare(a, b) {
    if (typeof a === "number" && typeof b === "number") { return a - b; }
    if (typeof a === "number") { return -1; }
    if (typeof b === "number") { return 1; }
    return a.localeCompare(b, undefined, {numeric: true, sensitivity: "base"});
  }
  function sortBy(table, col, th) {
    var asc = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      h.removeAttribute("aria-sort");
    });
    var body = table.tBodies[0];
    var rows = Array.prototype.map.call(body.rows, function (row, i) {
      return {key: key(row.cells[col]), i: i, row: row};
    });
    rows.sort(function (x, y) {
      if (x.key === null || y.key === null) {
        return x.key === y.key ? x.i - y.i : (x.key === null ? 1 : -1);
      }
      var c = compare(x.key, y.key);
      return c === 0 ? x.i - y.i : (asc ? c : -c);
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.tabIndex = 0;
      th.title = "sort by this column";
      th.addEventListener("click", function () { sortBy(table, col, th); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(table, col, th); }
      });
    });
  });
})();
"""


def document(title: str, body: str, nav: Sequence[tuple[str, str]], footer: str) -> str:
    """A whole HTML page: ``body`` (HTML) under a navigation bar of ``(file, label)`` links."""
    links = "".join(f'<a href="{esc(f)}">{esc(t)}</a>' for f, t in nav)
    return (
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<header><nav>{links}</nav></header>\n<main>\n{body}\n</main>\n"
        f"<footer>{footer}</footer>\n<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )
