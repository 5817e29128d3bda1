"""Checks a built leaderboard site in headless Chromium (Playwright driving the system browser).

``check_site(folder)`` opens every page from ``file://`` and returns one line per problem:

* a request that leaves the site folder (any scheme but ``file:``, or a file outside it), a
  request blocked by the pages' Content-Security-Policy, a local file that fails to load;
* a JavaScript error (console error or uncaught exception);
* a page without an ``<h1>``, a sortable table without rows, a row whose cell count differs
  from its header's, an image that did not load;
* a link that leaves the site or names a missing file or a missing ``#id``;
* a sortable table whose first numeric column does not sort ascending on the first click of
  its header and descending on the second (the header is clicked in the page, and the column's
  values are read back after each click).

Playwright is pointed at Debian's ``chromium`` (``LLMSCHED_CHROMIUM``, default
``/usr/bin/chromium``) and never downloads a browser of its own.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

CHROMIUM = os.environ.get("LLMSCHED_CHROMIUM", "/usr/bin/chromium")

_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.blockedURI + " (" + e.violatedDirective + ")");
});
"""

_TABLES = """
() => Array.from(document.querySelectorAll("table")).map((t, i) => ({
  index: i,
  id: t.id,
  sortable: t.classList.contains("sortable"),
  head: t.tHead ? t.tHead.rows[0].cells.length : 0,
  rows: Array.from(t.tBodies[0] ? t.tBodies[0].rows : []).map(r => r.cells.length),
  numeric: t.tHead ? Array.from(t.tHead.rows[0].cells).map((th, c) =>
    Array.from(t.tBodies[0].rows).some(r => r.cells[c] && r.cells[c].hasAttribute("data-sort")
      && r.cells[c].getAttribute("data-sort") !== "")) : [],
}))
"""

_CLICK_AND_READ = """
([i, c]) => {
  const table = document.querySelectorAll("table")[i];
  table.tHead.rows[0].cells[c].click();
  return Array.from(table.tBodies[0].rows).map(r => r.cells[c].getAttribute("data-sort"));
}
"""


def _column_problem(keys: list[str | None], ascending: bool) -> str | None:
    """Why a column read back after a click is not sorted (None: it is)."""
    values = [float(k) if k not in (None, "") else math.nan for k in keys]
    finite = [v for v in values if math.isfinite(v)]
    tail = values[len(finite) :]
    if any(math.isfinite(v) for v in tail):
        return "rows without a value are not last"
    pairs = zip(finite, finite[1:], strict=False)
    if any((b < a) if ascending else (b > a) for a, b in pairs):
        order = "ascending" if ascending else "descending"
        return f"not {order}: {finite[:6]}"
    return None


def _link_problem(folder: Path, page: Path, href: str, ids: dict[Path, set[str]]) -> str | None:
    parsed = urlparse(href)
    if parsed.scheme or parsed.netloc:
        return f"link {href!r} leaves the site"
    target = (page.parent / unquote(parsed.path)).resolve() if parsed.path else page
    if folder not in target.parents:
        return f"link {href!r} leaves the site folder"
    if not target.is_file():
        return f"link {href!r}: no such file"
    if parsed.fragment:
        if target not in ids:
            ids[target] = set(re.findall(r'\bid="([^"]+)"', target.read_text(errors="replace")))
        if parsed.fragment not in ids[target]:
            return f"link {href!r}: no element with id {parsed.fragment!r}"
    return None


def check_site(
    folder: str | Path, pages: list[str] | None = None, *, executable: str = CHROMIUM
) -> list[str]:
    """Problems of the site in ``folder`` (of ``pages`` only, if given; empty: all passed)."""
    from playwright.sync_api import sync_playwright

    folder = Path(folder).resolve()
    pages = [folder / p for p in pages] if pages else sorted(folder.glob("*.html"))
    if not pages:
        return [f"{folder}: no pages"]
    problems: list[str] = []
    ids: dict[Path, set[str]] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True)
        context = browser.new_context()
        context.add_init_script(_VIOLATIONS)
        # Nothing may leave the machine even if a page tries: requests outside file: are
        # recorded by the listener below and aborted here.
        context.route(lambda url: not url.startswith("file:"), lambda route: route.abort())
        # One tab for every page (a new tab per page costs more than the checks): the
        # listeners append to the list of the page being checked.
        page = context.new_page()
        current: list[list[str]] = [[]]

        def on_request(request):
            url = request.url
            local = Path(unquote(urlparse(url).path)).resolve()
            if not url.startswith("file:"):
                current[0].append(f"request outside file://: {url}")
            elif local != folder and folder not in local.parents:
                current[0].append(f"request outside the site folder: {url}")

        def on_failed(request):
            if request.url.startswith("file:"):
                current[0].append(f"missing file: {request.url}")

        def on_console(msg):
            if msg.type == "error" and "net::ERR_FAILED" not in msg.text:
                current[0].append(f"console error: {msg.text[:200]}")

        page.on("request", on_request)
        page.on("requestfailed", on_failed)
        page.on("console", on_console)
        page.on("pageerror", lambda exc: current[0].append(f"JS error: {exc}"))
        for path in pages:
            name = path.name
            found: list[str] = []
            current[0] = found
            page.goto(path.as_uri(), wait_until="load")
            found += [f"blocked by CSP: {v}" for v in page.evaluate("window.__cspViolations")]
            if page.locator("h1").count() == 0:
                found.append("no <h1>")
            broken = page.evaluate(
                "Array.from(document.images).filter(i => !i.complete || !i.naturalWidth)"
                ".map(i => i.getAttribute('src'))"
            )
            found += [f"image not loaded: {src}" for src in broken]
            for href in page.evaluate(
                "Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))"
            ):
                if (why := _link_problem(folder, path, href, ids)) is not None:
                    found.append(why)
            for t in page.evaluate(_TABLES):
                label = f"table {t['id'] or t['index']}"
                if t["sortable"] and not t["rows"]:
                    found.append(f"{label}: no rows")
                if any(n != t["head"] for n in t["rows"]):
                    found.append(f"{label}: a row's cells differ from the header's {t['head']}")
                if not t["sortable"] or len(t["rows"]) < 2 or True not in t["numeric"]:
                    continue
                col = t["numeric"].index(True)
                for ascending in (True, False):
                    keys = page.evaluate(_CLICK_AND_READ, [t["index"], col])
                    if (why := _column_problem(keys, ascending)) is not None:
                        found.append(f"{label}: column {col} after a click: {why}")
                        break
            page.goto("about:blank")  # late events of this page still land in ``found``
            problems += [f"{name}: {line}" for line in found]
        browser.close()
    return problems
