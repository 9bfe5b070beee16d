"""Where a pipeline's report goes: `<cache>/reports/<run>/<stem>.{html,png}` and Prefect artifacts on the run; and the
night's page, `<cache>/reports/<night>/index.html` (flows/reports/night_report.py), at the nightly's end."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from flows.engine.driver import Run
from flows.engine.replay import in_flow_run, run_logger
from flows.engine.run_artifacts import publish_file_link
from flows.reports.night_report import write_night
from flows.reports.plots import html_page
from storage.runs import find_run


def publish(
    run: Run,
    *,
    stem: str,
    title: str,
    sections: Sequence[tuple[str, str | bytes | pa.Table]],
    markdown: str,
    table: pa.Table | None = None,
    pngs: Mapping[str, bytes] | None = None,
) -> dict[str, str]:
    """Write the self-contained HTML page (and PNGs), then publish markdown, table and link artifacts.
    Returns the paths written, keyed ``<stem>_html`` / ``<stem>_<png name>``."""
    out = run.root / "reports" / run.run_id
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    # a plot's name may hold a user's name (a test set's, e.g. "test2016+UpperCase"): its file name keeps [A-Za-z0-9_.-]
    files = {name: out / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png" for name in pngs or {}}
    for name, png in (pngs or {}).items():
        files[name].write_bytes(png)
        written[f"{name}_png"] = str(files[name])
    page = out / f"{stem}.html"
    page.write_text(html_page(title, sections), encoding="utf-8")
    written[f"{stem}_html"] = str(page)
    key = stem.replace("_", "-")
    if not in_flow_run():  # a replayed run (flows/engine/replay.py): no Prefect run to attach artifacts to
        return written
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    try:
        create_markdown_artifact(markdown + f"\nReport: `{page}`\n", key=f"{key}-report", description=title)
        if table is not None:
            create_table_artifact(table.to_pylist(), key=f"{key}-table", description=title)
        # over HTTP while `augdag server` serves the reports (browsers refuse file:// links), else the path
        publish_file_link(run.root, page, text=f"{title} (HTML)", key=f"{key}-html")
        for name in pngs or {}:  # every plot of the page, as its own link; a key is lower-case letters, digits, dashes
            slug = re.sub(r"[^a-z0-9-]+", "-", f"{key}-{name}".lower())
            publish_file_link(run.root, files[name], text=f"{title}: {name} (PNG)", key=slug)
    except Exception as e:  # noqa: BLE001 — a report artifact must not fail a finished run
        run_logger().warning("could not publish the Prefect artifacts of the %s report: %s", stem, e)
    return written


def publish_night(run: Run, children: Sequence[Mapping[str, Any]], *, profile: str, status: str) -> dict[str, str]:
    """The night's page at the nightly's end, before it records its summary (flows/engine/nightly.py), and a link to
    it on the nightly's flow run.

    Args:
        run: The nightly's run (its row not finished yet).
        children: Its pipelines' summaries, each with its ``seconds``.
        profile: The profile the night ran.
        status: What the night will record: ``completed``, or ``failed`` when a pipeline did not complete.

    Returns:
        What joins the night's summary: ``night_page``, the page's path, and ``night_page_url``, its http:// address,
        while `augdag server` serves this cache's reports; nothing when the page could not be written (logged as a
        warning: a report never fails a night whose data is committed).
    """
    from flows.ops.server import report_url

    try:
        row = find_run(run.catalog, run.run_id) or {}
        night = {"run_id": run.run_id, "profile": profile, "status": status, **{k: row.get(k) for k in ("started_at", "config")}}
        path = write_night(run.catalog, night, children)
    except Exception as e:  # noqa: BLE001 — see Returns
        run_logger().warning("could not write the night's page: %s: %s", type(e).__name__, e)
        return {}
    if in_flow_run():  # a replayed night (flows/engine/replay.py) has no Prefect run to link it on
        try:
            publish_file_link(run.root, path, text="the night's page (HTML)", key="nightly-page")
        except Exception as e:  # noqa: BLE001 — as a pipeline's report artifacts (``publish``)
            run_logger().warning("could not publish the link to the night's page: %s", e)
    url = report_url(run.root, path)
    return {"night_page": str(path), **({"night_page_url": url} if url else {})}
