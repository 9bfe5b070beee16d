"""The night's page (issue 50) in headless Chromium, as a user opens it: from the file the nightly wrote and over HTTP
as `augdag server` serves the reports (flows/ops/report_http.py); every link on it opens a page, by either way."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest

from flows.ops.report_http import serve_reports
from tests.e2e.test_server import ARTIFACTS, chromium, headless
from tests.reports.test_night_page import Page, night_of

pytestmark = [pytest.mark.slow, pytest.mark.tiny_demo_run]
TITLE = re.compile(r"<title>([^<]*)</title>")


def opened(browser: str, tmp_path: Path, url: str, *extra: str) -> str:
    """The DOM Chromium built from ``url``; a load that failed (a link that leads nowhere: Chromium exits 0, prints
    ``Page load failed: net::ERR_FILE_NOT_FOUND`` and no DOM) fails the test."""
    done = headless(browser, tmp_path, "--dump-dom", *extra, url)
    assert done.returncode == 0 and "Page load failed" not in done.stderr, (url, done.stderr[-2000:])
    assert TITLE.search(done.stdout), (url, done.stdout[-2000:])
    return done.stdout


def test_the_night_page_and_every_page_it_links_open_in_headless_chromium(tiny_demo_run, tmp_path):
    assert tiny_demo_run.returncode == 0, (tiny_demo_run.stdout + tiny_demo_run.stderr)[-3000:]
    browser = chromium()
    summary = night_of(tiny_demo_run.cache)
    page = tiny_demo_run.cache / "reports" / summary["run_id"] / "index.html"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "night-page.png"
    shot.unlink(missing_ok=True)
    dom = opened(browser, tmp_path, page.as_uri(), f"--screenshot={shot}")
    assert TITLE.findall(dom) == [f"night {summary['run_id']}"]
    parsed = Page(dom)  # the page as the browser built it: its examples tables and its links
    assert len([c for c in parsed.tables if c.startswith("examples ")]) == 8 and len(parsed.links) == len(summary["pipelines"])
    assert shot.stat().st_size > 10_000
    titles = {}
    for href in parsed.links:
        target = urllib.parse.urljoin(page.as_uri(), href)
        titles[href] = TITLE.findall(opened(browser, tmp_path, target))
    assert all(len(t) == 1 and t[0] for t in titles.values()), titles
    # over HTTP, as `augdag server` serves <cache>/reports: the page and a link from it, relative as written
    httpd = serve_reports(tiny_demo_run.cache / "reports", 0)
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}/{summary['run_id']}/index.html"
        served = Page(opened(browser, tmp_path, base))
        assert served.links == parsed.links
        linked = opened(browser, tmp_path, urllib.parse.urljoin(base, parsed.links[0]))
        assert TITLE.findall(linked) == titles[parsed.links[0]]
    finally:
        httpd.shutdown()
        httpd.server_close()
    print(f"screenshot: {shot}")
