"""The leaderboard site in a real browser: headless Debian ``chromium`` driven by Playwright.

Marked ``browser`` (the default run skips it; CI installs ``chromium`` and the ``[browser]``
extra and runs ``pytest -m browser``). Every page of the built site must load with no request
leaving its folder, no JavaScript error, rendered tables, working sorting and no dead link; the
same checker run on a deliberately broken copy must report every break (the negative control).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from llmsched_gym.leaderboard.cli import leaderboards_root
from llmsched_gym.leaderboard.site import write_site
from llmsched_gym.leaderboard.site_timeline import timeline_pages
from llmsched_gym.leaderboard.suite import load_suite
from tests.leaderboard.site_browser import CHROMIUM, check_site

pytestmark = pytest.mark.browser


def _need_browser() -> None:
    """Skip without Playwright or chromium, except in CI, where their absence is a failure."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("Playwright (pip install -e '.[browser]')")
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"{CHROMIUM} (apt-get install -y chromium)")
    if missing:
        why = "the browser test needs " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    _need_browser()
    out = tmp_path_factory.mktemp("browser") / "site"
    extra = [timeline_pages()]
    return write_site(leaderboards_root(), load_suite("llmsched-v2"), out, extra)


def test_every_page_passes_in_chromium(site):
    problems = check_site(site)
    assert problems == [], "\n".join(problems[:50])


def _break(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path.name, old)
    path.write_text(text.replace(old, new, 1))


def test_checker_reports_each_break_of_a_broken_copy(site, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(site, broken)
    # a dead link
    _break(broken / "index.html", "<main>", '<main><a href="no-such-page.html">dead</a>')
    # a page that fetches a script from outside (the CSP blocks it; the request is still made)
    _break(broken / "task-priority.html", "</body>",
           '<script src="https://example.com/x.js"></script></body>')  # fmt: skip
    # a broken sort: every comparison of numbers says "equal"
    _break(broken / "task-select.html", "return a - b;", "return 0;")
    # a script error and an image that is not there
    _break(broken / "task-route.html", "</body>", "<script>noSuchFunction();</script></body>")
    _break(broken / "paper-proserve.html", 'src="img/', 'src="img/missing-')
    pages = ["index.html", "task-priority.html", "task-select.html", "task-route.html",
             "paper-proserve.html", "task-knob.html"]  # fmt: skip
    problems = check_site(broken, pages)
    text = "\n".join(problems)

    def reported(page: str, words: str) -> bool:
        return any(p.startswith(f"{page}: ") and words in p for p in problems)

    assert reported("index.html", "link 'no-such-page.html': no such file"), text
    assert reported("task-priority.html", "request outside file://: https://example.com/x.js")
    assert reported("task-priority.html", "blocked by CSP: https://example.com/x.js"), text
    assert reported("task-select.html", "after a click: not descending"), text
    assert reported("task-route.html", "noSuchFunction"), text
    assert reported("paper-proserve.html", "missing file: file://"), text
    assert reported("paper-proserve.html", "image not loaded: img/missing-"), text
    assert not any(p.startswith("task-knob.html: ") for p in problems), text  # untouched
