"""The one HTML builder of every report page: escaping, table cells, tables, headings, paragraphs, inlined
PNG images and the document shell with its style.

A page built here loads nothing from outside itself: no script, stylesheet, font or link; an image is a
``data:`` URI; a ``link`` (a relative anchor to another page of the reports) loads nothing until followed.
Pure functions over strings (no Arrow, no Prefect): `flows.reports.plots.html_page` (a pipeline's report) and the
run, comparison and night pages of `augdag report` (flows.reports.run_report, flows.reports.compare_report,
flows.reports.night_report) build their markup with them.
"""

from __future__ import annotations

import base64
import html
import urllib.parse
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.n{text-align:right}"
    ".failed{color:#b00}pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em}.note{color:#666}"
    "section.page{border-left:3px solid #ddd;padding-left:1em;margin:1em 0}"
)


def esc(v: Any) -> str:
    """``str(v)`` with ``&``, ``<``, ``>`` and both quotes escaped."""
    return html.escape(str(v))


class Markup(str):
    """Markup built here (a ``link``): a table cell shows it as it is, not escaped."""


def link(href: str, text: str) -> Markup:
    """An anchor to ``href`` (a relative path, percent-encoded here) showing ``text``, both escaped."""
    return Markup(f'<a href="{esc(urllib.parse.quote(href))}">{esc(text)}</a>')


def cell(v: Any) -> tuple[str, bool]:
    """(text, is a number) of a table cell: None as –, integers with thousands separators, other numbers to
    4 decimals, a datetime to the second, anything else as ``str``."""
    if v is None:
        return "–", False
    if isinstance(v, Markup):
        return v, False
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        if isinstance(v, datetime):
            return v.isoformat(sep=" ", timespec="seconds"), False
        return str(v), False
    if isinstance(v, int):
        return f"{v:,}", True
    return f"{float(v):,.4f}", True


def table(
    head: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    cls: str | None = None,
    header: bool = True,
    failed: Sequence[bool] = (),
) -> str:
    """A table: ``head`` as its header row (left out with ``header=False``), then ``rows`` formatted by `cell`
    (numbers right-aligned); a row whose ``failed`` flag is set is shown as failed."""

    def tr(row: Sequence[Any], bad: bool) -> str:
        cells = [cell(v) for v in row]
        return (
            f"<tr{' class=failed' if bad else ''}>"
            + "".join(f"<td{' class=n' if num else ''}>{t if isinstance(t, Markup) else esc(t)}</td>" for t, num in cells)
            + "</tr>"
        )

    top = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>" if header else ""
    bad = list(failed) + [False] * (len(rows) - len(failed))
    return f"<table{_class(cls)}>{top}{''.join(tr(r, b) for r, b in zip(rows, bad))}</table>"


def heading(level: int, text: str) -> str:
    """An ``<h{level}>`` heading of ``text``, escaped."""
    return f"<h{level}>{esc(text)}</h{level}>"


def paragraph(text: str, *, cls: str | None = None) -> str:
    """A ``<p>`` of ``text``, escaped, with class ``cls`` when given."""
    return f"<p{_class(cls)}>{esc(text)}</p>"


def preformatted(text: str, *, cls: str | None = None) -> str:
    """A ``<pre>`` block of ``text``, escaped, with class ``cls`` when given."""
    return f"<pre{_class(cls)}>{esc(text)}</pre>"


def image(png: bytes, alt: str) -> str:
    """A PNG inlined as a ``data:`` URI."""
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def document(title: str, body: Sequence[str], *, generator: str | None = None) -> str:
    """The whole page: ``body`` (markup) under a head with ``title``, `STYLE` and, if given, a ``generator`` meta
    tag (the run pages mark themselves so that a later report never inlines them as a pipeline's)."""
    meta = f'<meta name="generator" content="{esc(generator)}">' if generator is not None else ""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>{esc(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )


def _class(cls: str | None) -> str:
    return f" class='{esc(cls)}'" if cls is not None else ""
