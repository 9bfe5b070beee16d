"""`augdag report`: one run, or two runs side by side (flows.reports.compare_report), as one self-contained HTML page.

A run page shows the run (a nightly run: each of its pipeline runs), its stages (status, shards, rows in
and rows out per role, seconds), its failures with their error, its evaluation scores, and every plot of
the run: the pipelines' own report pages under ``<cache>/reports/<run>/`` and every PNG there, each
image once.

Pure functions over the catalog (no Prefect). A page loads nothing from outside itself: no script,
stylesheet, font or link; every plot is a ``data:`` URI.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flows.engine.counts import once_per_artifact, view_rows
from flows.reports.compare_report import GENERATOR, compare_page
from flows.reports.html import document, esc, heading, image, paragraph, preformatted, table
from storage.catalog import Catalog
from storage.output import replacing
from storage.runs import (
    duration,
    evaluations,
    load_run,
    older_first,
    pipeline_runs,
    roles,
    run_ids,
)


def run_page(catalog: Catalog, run_id: str) -> str:
    """The page of one run: header, stages, failures, evaluation scores, every plot (a nightly: per pipeline)."""
    run = load_run(catalog, run_id)
    pipes = pipeline_runs(catalog, run)
    nightly = run["pipeline"] == "nightly"
    body = [heading(1, f"{run['pipeline']} run {run_id}"), _header(run, pipes)]
    if run["summary"].get("error"):
        body += [heading(2, "Run error"), preformatted(run["summary"]["error"], cls="failed")]
    if nightly:
        body += [
            heading(2, "Pipelines"),
            table(
                ["pipeline", "run", "status", "seconds", "error"],
                [[p["pipeline"], p["run_id"], p["status"], p["seconds"], p["error"]] for p in pipes],
                cls="pipelines",
            ),
        ]
        body.append(_plots(catalog.root / "reports" / run_id, level=2))
    for p in pipes:
        if nightly and not p["run_id"]:
            continue
        body += _pipeline_sections(catalog, p, level=3 if nightly else 2, title=nightly)
    return document(f"{run['pipeline']} run {run_id}", body, generator=GENERATOR)


def _header(run: Mapping[str, Any], pipes: Sequence[Mapping[str, Any]]) -> str:
    stages = [s for p in pipes for s in p["stages"]]
    count = {k: sum(s["status"] == k for s in stages) for k in ("computed", "cached", "failed")}
    done = [s for s in stages if s["status"] != "failed"]
    rows = [
        ["run id", run["run_id"]],
        ["pipeline", run["pipeline"]],
        ["profile", run["profile"]],
        ["status", run["status"]],
        ["started", run["started_at"]],
        ["finished", run["finished_at"]],
        ["duration (s)", duration(run)],
        ["stages", f"{count['computed']} computed, {count['cached']} cached, {count['failed']} failed"],
        ["shards computed", f"{sum(s['shards_computed'] for s in done):,} of {sum(s['shards'] for s in done):,}"],
        ["rows in the views it filled", ", ".join(f"{v} {n:,}" for v, n in view_rows(done).items()) or "none"],
        [
            "rejects, dropped",
            ", ".join(f"{sum(s['rows_out'].get(r, 0) for s in once_per_artifact(done)):,}" for r in ("rejects", "dropped")),
        ],
    ]
    if cache := run["summary"].get("cache"):
        rows.append(["cache", cache])
    return table(["", ""], rows, cls="run", header=False)


def _pipeline_sections(catalog: Catalog, p: Mapping[str, Any], *, level: int, title: bool) -> list[str]:
    out = [heading(level - 1, f"{p['pipeline']} — {p['run_id']} ({p['status']})")] if title else []
    out += [heading(level, "Stages"), stage_table(p["stages"])]
    failures = [
        paragraph(f"{s['stage']}[{s['dataset'] or ''}] shard(s) {s.get('failed_shards') or ''}", cls="failed")
        + preformatted(s["error"], cls="failed")
        for s in p["stages"]
        if s["status"] == "failed"
    ]
    if p["error"] and title:  # a lone pipeline run's own error is the page's "Run error"
        failures.append(preformatted(p["error"], cls="failed"))
    if failures:
        out += [heading(level, "Failures"), *failures]
    warnings = ((p.get("row") or {}).get("summary") or {}).get("warnings") or []  # flows/engine/drop_warnings.py
    if warnings:
        out += [heading(level, "Warnings"), *(paragraph(w, cls="warning") for w in warnings)]
    scores = evaluations(catalog, run_ids([p]))
    if scores:
        out += [
            heading(level, "Evaluation scores"),
            table(
                ["model", "test set", "metric", "score", "sentences", "signature", "model fingerprint"],
                [
                    [
                        e["model_name"],
                        e["testset"],
                        e["metric"],
                        e["score"],
                        e["sentences"],
                        e["signature"],
                        (e["model"] or "")[:12],
                    ]
                    for e in scores
                ],
                cls="evaluations",
            ),
        ]
    if p["run_id"]:
        out.append(_plots(catalog.root / "reports" / p["run_id"], level=level))
    return out


def stage_table(stages: Sequence[Mapping[str, Any]]) -> str:
    """One row per stage: status, shards computed of all, rows in, of them kept and dropped (rows, cached or not:
    flows/engine/recording.py; none for a run recorded before they were), the artifact's rows per role, seconds,
    fingerprint."""
    shown = roles(s["rows_out"] for s in stages) or ["part"]
    head = [
        "stage",
        "dataset",
        "status",
        "shards",
        "shards computed",
        "rows in",
        "kept",
        "dropped",
        *(f"rows out: {r}" for r in shown),
        "seconds",
        "fingerprint",
    ]
    rows = [
        [
            s["stage"],
            s["dataset"] or "",
            s["status"],
            s["shards"],
            s["shards_computed"],
            s["rows_in"],
            s.get("kept"),
            s.get("dropped"),
            *(s["rows_out"].get(r) if s["status"] != "failed" else None for r in shown),
            s["seconds"],
            s["fingerprint"][:12],
        ]
        for s in stages
    ]
    return table(head, rows, cls="stages", failed=[s["status"] == "failed" for s in stages])


# every plot once: the report pages first (their images in context), then the PNGs not shown in a page
_IMG = re.compile(r"<img\b[^>]*>", re.IGNORECASE)
_SRC = re.compile(r"""\bsrc\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
_BODY = re.compile(r"<body[^>]*>(.*)</body\s*>", re.IGNORECASE | re.DOTALL)
_DROP = re.compile(r"<script\b.*?</script\s*>|<(?:link|script|iframe|object|embed)\b[^>]*>", re.IGNORECASE | re.DOTALL)


def _plots(folder: Path, *, level: int) -> str:
    if not folder.is_dir():
        return ""
    shown: set[str] = set()

    def once(m: re.Match[str]) -> str:
        src = _SRC.search(m.group(0))
        if not src or not src.group(1).startswith("data:image/"):
            return paragraph("(an image that is not inlined was left out)", cls="note")
        payload = src.group(1).partition("base64,")[2]
        if payload in shown:
            return paragraph("(the same plot as above)", cls="note")
        shown.add(payload)
        return m.group(0)

    parts = []
    for page in sorted(folder.glob("*.html")):
        text = page.read_text(encoding="utf-8", errors="replace")
        if f'content="{GENERATOR}"' in text:
            continue
        found = _BODY.search(text)
        body = _IMG.sub(once, _DROP.sub("", found.group(1) if found else text))
        body = re.sub(r"<(/?)h([1-6])\b", lambda m: f"<{m[1]}h{min(6, int(m[2]) + level)}", body)
        parts.append(f"<section class='page'>{paragraph(f'report page {page.name}', cls='note')}{body}</section>")
    rest = []
    for png in sorted(folder.glob("*.png")):
        data = png.read_bytes()
        if base64.b64encode(data).decode() not in shown:
            rest.append(f"<figure>{image(data, png.stem)}<figcaption>{esc(png.name)}</figcaption></figure>")
    if not parts and not rest:
        return ""
    return heading(level, "Plots") + "".join(parts) + "".join(rest)


def write_report(
    catalog: Catalog, run_id: str, *, compare: str | None = None, output: Path | None = None, force: bool = False
) -> Path:
    """Write the run page (or, with ``compare``, the comparison page) and return its path.

    Default: ``<cache>/reports/<run_id>/run.html`` or ``.../compare-<A>-vs-<B>.html`` (A the older run).
    Written as storage/output.py writes a user's file: to a new temporary file renamed onto a regular file
    or a new name only (a link there only with ``force``; a FIFO or device is written into, never replaced); an
    interrupted write leaves no half page.
    """
    if compare is None:
        page, name = run_page(catalog, run_id), "run.html"
    else:
        a, b = older_first(catalog, run_id, compare)
        page, name = compare_page(catalog, a["run_id"], b["run_id"]), f"compare-{a['run_id']}-vs-{b['run_id']}.html"
    path = Path(output) if output is not None else catalog.root / "reports" / run_id / name
    with replacing([path], force=force) as (f,):
        f.write(page.encode("utf-8"))
    return path
