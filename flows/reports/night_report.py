"""One page per night: ``<cache>/reports/<night>/index.html``.

What a night did, in the order a reader asks it: which pipelines ran, each with the rows of its own views and a
relative link to its report page (to its run page of stages, run_report.py, when it wrote none); the verdict table
the terminal prints (flows/reports/effect_table.py: per augmentation its effect on the downstream model that reads
it, with the p and what limits the reading) and what the night's size lets it mean; per augmentation a few generated
rows beside their originals (flows/reports/examples.py: a seeded random sample of the night's own artifacts); and
the rows dropped per stage and reason and refused per dataset and reason, each with one example.

The nightly writes it at its end (`flows.reports.reporting.publish_night`), before it records its summary, from the
pipeline summaries it holds; `augdag report NIGHT` writes it again from the catalog. Every value is escaped
(flows/reports/html.py); the page loads nothing from outside itself.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from conf.errors import AugdagError
from flows.engine import registry
from flows.engine.counts import view_rows
from flows.reports.compare_report import GENERATOR
from flows.reports.effect_table import effect_rows, size_note
from flows.reports.examples import AUGMENTATIONS, SEED, K, examples
from flows.reports.html import Markup, document, heading, link, paragraph, table
from flows.reports.run_report import write_report
from storage import objects
from storage.cache_root import resolve
from storage.catalog import Catalog
from storage.catalog_io import rejects
from storage.engines import scratch_duckdb
from storage.integrity import check_files
from storage.output import replacing
from storage.parts import parquet_list
from storage.runs import load_run, pipeline_runs, run_ids, view_parts

PAGE = "index.html"
EXAMPLE_CHARS = 160  # a drop's or reject's example, shortened


def night_path(root: Path, run_id: str) -> Path:
    """Where a night's page goes: ``<cache>/reports/<night>/index.html``."""
    return Path(root).absolute() / "reports" / run_id / PAGE


def write_night_report(catalog: Catalog, run_id: str, *, output: Path | None = None, force: bool = False) -> Path:
    """`augdag report NIGHT`: the night's page from the catalog (``output``, default ``night_path``); returns its path."""
    night = load_run(catalog, run_id)
    pipes = [{**((p["row"] or {}).get("summary") or {}), **_brief(p)} for p in pipeline_runs(catalog, night)]
    return _write(catalog, night, pipes, output=output, force=force)


def write_night(catalog: Catalog, night: Mapping[str, Any], children: Sequence[Mapping[str, Any]]) -> Path:
    """The nightly's end: its page from the pipeline summaries it holds (``children``: each pipeline's own summary
    with its ``seconds``), the night's row not finished yet (``night``: run_id, profile, started_at, status)."""
    return _write(catalog, night, children, output=None, force=False)


def _write(
    catalog: Catalog, night: Mapping[str, Any], pipes: Sequence[Mapping[str, Any]], *, output: Path | None, force: bool
) -> Path:
    """The page at ``output`` (default ``night_path``), after the run page (run_report.py) of each pipeline run that
    wrote no page of its own, which it links instead."""
    path = Path(output) if output is not None else night_path(catalog.root, night["run_id"])
    for p in pipes:
        if p.get("run_id") and not _own_pages(p):
            with contextlib.suppress(AugdagError):  # a run the catalog lacks: the page shows it without a link
                write_report(catalog, p["run_id"])
    page = night_page(catalog, night, pipes, folder=path.absolute().parent)
    with replacing([path], force=force) as (f,):
        f.write(page.encode("utf-8"))
    return path


def night_page(catalog: Catalog, night: Mapping[str, Any], pipes: Sequence[Mapping[str, Any]], *, folder: Path) -> str:
    """The page (see the module docstring) of the pipeline summaries ``pipes``; links are relative to ``folder``,
    where the page is written."""
    started = night.get("started_at")
    with scratch_duckdb(memory_limit="256MB", name="night-page") as con:
        samples, drops = _examples(con, catalog, pipes), _drops(con, catalog, pipes)
    body = [
        heading(1, f"night {night['run_id']} ({night.get('profile') or ''}): {night['status']}"),
        paragraph(
            f"started {started.isoformat(sep=' ', timespec='seconds') if isinstance(started, datetime) else started or '–'}; "
            f"cache {catalog.root}; {sum(p['status'] == 'completed' for p in pipes)} of {len(pipes)} pipelines completed",
            cls="note",
        ),
        heading(2, "Pipelines"),
        _pipelines(catalog.root, night, pipes, folder),
        heading(2, "Effects on the downstream models"),
        *_effects(night, pipes),
        heading(2, "Generated rows beside their originals"),
        *samples,
        heading(2, "Dropped rows, per stage and reason"),
        *drops,
        heading(2, "Rejected input rows, per dataset and reason"),
        _rejects(catalog, pipes),
    ]
    return document(f"night {night['run_id']}", body, generator=GENERATOR)


def _brief(p: Mapping[str, Any]) -> dict[str, Any]:
    return {k: p[k] for k in ("pipeline", "run_id", "status", "error", "seconds", "stages")}


def _own_pages(p: Mapping[str, Any]) -> list[str]:
    """The file names of the HTML pages a pipeline run wrote (its summary's ``reports``)."""
    return [Path(v).name for k, v in (p.get("reports") or {}).items() if k.endswith("_html")]


def _href(target: Path, folder: Path) -> str:
    return Path(os.path.relpath(target, folder)).as_posix()


def _pipelines(root: Path, night: Mapping[str, Any], pipes: Sequence[Mapping[str, Any]], folder: Path) -> str:
    """One row per pipeline: status, seconds, the rows of its own views (a cached view of another pipeline is that
    one's), links to its pages (else to its run page); above, a link to the night's run page of every stage when
    `augdag report` wrote it."""
    reports = Path(root).absolute() / "reports"
    rows = []
    for p in pipes:
        links = []
        if p.get("run_id"):
            here = reports / p["run_id"]
            names = _own_pages(p) or ["run.html"]
            links = [link(_href(here / name, folder), name) for name in names if (here / name).is_file()]
        own = _own_views(p["pipeline"])
        made = ", ".join(f"{v} {n:,}" for v, n in view_rows(p.get("stages") or []).items() if v in own) or "none"
        seconds = f"{p['seconds']:.1f}" if p.get("seconds") is not None else None
        rows.append([p["pipeline"], p.get("run_id"), p["status"], seconds, made, Markup(" · ".join(links)), p.get("error")])
    head = ["pipeline", "run", "status", "seconds", "rows it made (its views)", "pages", "error"]
    out = table(head, rows, cls="pipelines", failed=[p["status"] != "completed" for p in pipes])
    every = reports / night["run_id"] / "run.html"
    if every.is_file():
        out = f"<p>{link(_href(every, folder), 'every stage of every pipeline (run.html)')}</p>" + out
    return out


def _own_views(pipeline: str) -> set[str]:
    """The views a registered pipeline fills (flows/engine/registry.py); none for one no longer registered."""
    try:
        return set(registry.get(pipeline).views)
    except AugdagError:
        return set()


def _effects(night: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The night's verdict table, as the terminal prints it (flows/reports/effect_table.py), and what its size means."""
    rows = effect_rows(summaries)
    if not rows:
        return [paragraph("No augmentation completed this night: no effect to show.")]
    head = ["augmentation", "rows it made", "downstream model and arm", "effect (p)", "what limits the reading"]
    out = [table(head, [[r.augmentation, r.made, r.model, r.effect, r.caveat] for r in rows], cls="effects")]
    if note := size_note(summaries, demo=night.get("profile") == "demo", models=_students(night.get("config") or {})):
        out.append(paragraph(note, cls="note"))
    out.append(paragraph("Scores per arm and seed: each training pipeline's page, linked above.", cls="note"))
    return out


def _students(config: Mapping[str, Any]) -> str:
    """The NMT students' size from the night's recorded configuration, as the terminal says it
    (``2+2-layer, 64-dim students of 300 updates``); nothing when the configuration has no student."""
    t = ((config.get("train_nmt") or {}).get("student") or {}).get("train") or {}
    if not all(k in t for k in ("encoder_layers", "decoder_layers", "embed_dim", "max_update")):
        return ""
    return f"{t['encoder_layers']}+{t['decoder_layers']}-layer, {t['embed_dim']}-dim students of {t['max_update']:,} updates"


def _examples(con: duckdb.DuckDBPyConnection, catalog: Catalog, pipes: Sequence[Mapping[str, Any]]) -> list[str]:
    status = {p["pipeline"]: p["status"] for p in pipes}
    parts = view_parts(catalog, run_ids([p for p in pipes if p["status"] == "completed"]))
    out = []
    for aug in AUGMENTATIONS:
        if aug.pipeline not in status:
            continue
        out.append(heading(3, f"{aug.pipeline}: {aug.title}"))
        if status[aug.pipeline] != "completed":
            out.append(paragraph(f"{aug.pipeline} {status[aug.pipeline]}: no rows to show", cls="failed"))
            continue
        try:
            ex = examples(con, parts, aug, root=catalog.root)
        except AugdagError as e:  # a part that fails its check: said here, the rest of the page stands
            out.append(paragraph(f"`{aug.view}` could not be read: {e}", cls="failed"))
            continue
        if ex.missing:
            out.append(paragraph(f"the night filled no `{ex.missing}` view: nothing to show", cls="note"))
            continue
        shown = f"{len(ex.rows)} drawn at random (seed {SEED})" if ex.generated > K else "all of them"
        out.append(paragraph(f"{ex.generated:,} generated rows in `{aug.view}` this night; {shown}", cls="note"))
        out.append(table(ex.head, ex.rows, cls=f"examples {aug.view}"))
    return out


def _drops(con: duckdb.DuckDBPyConnection, catalog: Catalog, pipes: Sequence[Mapping[str, Any]]) -> list[str]:
    owner: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for p in pipes:
        for s in p.get("stages") or []:
            if s["status"] != "failed" and s["rows_out"].get("dropped"):
                owner.setdefault(s["fingerprint"], (p["pipeline"], s))
    if not owner:
        return [paragraph("No stage dropped a row this night.")]
    found = catalog.query(
        "SELECT fingerprint, path, manifest FROM artifacts WHERE list_contains($fps, fingerprint)", {"fps": list(owner)}
    ).to_pylist()
    manifests = {r["fingerprint"]: r for r in found}
    rows, errors = [], []
    for fp, (pipeline, s) in owner.items():
        r = manifests.get(fp)
        if r is None:
            continue
        files = [
            objects.join(resolve(catalog.root, r["path"]), f["file"])
            for f in json.loads(r["manifest"])["files"]
            if f["role"] == "dropped" and f["rows"]
        ]
        try:
            check_files(files, root=catalog.root)
            counts = _reasons(con, files)
        except AugdagError as e:
            errors.append(paragraph(f"{s['stage']}[{s['dataset'] or ''}]: its dropped rows could not be read: {e}", cls="failed"))
            continue
        rows += [[pipeline, s["stage"], s["dataset"], reason, n, example] for reason, n, example in counts]
    head = ["pipeline", "stage", "dataset", "reason", "rows", f"an example (seed {SEED})"]
    return [table(head, rows, cls="dropped"), *errors]


def _reasons(con: duckdb.DuckDBPyConnection, files: Sequence[Any]) -> list[tuple[str, int, str]]:
    """(reason, rows, one example drawn by ``md5(seed || uid || line)``) of one artifact's dropped parts."""
    src = f"read_parquet({parquet_list(files)}, union_by_name = true)"
    names = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
    what = (
        "CAST(text AS VARCHAR)"
        if "text" in names
        else "src || ' ⟶ ' || tgt"
        if {"src", "tgt"} <= names
        else "array_to_string(tokens, ' ')"
        if "tokens" in names
        else "NULL"
    )
    if "detail" in names:
        what = f"concat_ws(' — ', {what}, CAST(detail AS VARCHAR))"
    key = " || ".join(f"coalesce(CAST({c} AS VARCHAR), '')" for c in ("uid", "line") if c in names) or "''"
    sql = (
        f"SELECT reason, count(*), arg_min({what}, md5(CAST($seed AS VARCHAR) || {key})) FROM {src} "
        "GROUP BY reason ORDER BY count(*) DESC, reason"
    )
    return [(reason, n, _short(example)) for reason, n, example in con.execute(sql, {"seed": SEED}).fetchall()]


def _rejects(catalog: Catalog, pipes: Sequence[Mapping[str, Any]]) -> str:
    fps = sorted({s["fingerprint"] for p in pipes for s in p.get("stages") or [] if s["status"] != "failed"})
    found = catalog.query(
        "SELECT fingerprint, path, manifest FROM artifacts WHERE list_contains($fps, fingerprint)", {"fps": fps}
    ).to_pylist()
    # the night's own reads from their parts, current or not (`rejects` shows the current ones: storage/catalog_io/)
    select, files = rejects.parts_select(catalog.root, found, rejects.legacy_fingerprints(catalog.query))
    src = select or "SELECT * FROM rejects WHERE false"
    try:
        check_files(files, root=catalog.root)
        rows = catalog.query(
            "SELECT source, reason, count(*) AS n, "
            "arg_min(file || ':' || line || ': ' || coalesce(detail, '') || ' — ' || coalesce(content, ''), "
            f"md5(CAST($seed AS VARCHAR) || file || ':' || line)) AS example FROM ({src}) "
            "GROUP BY ALL ORDER BY source, n DESC, reason",
            {"seed": SEED},
        ).to_pylist()
    except (AugdagError, duckdb.Error) as e:
        return paragraph(f"The rejected rows could not be read: {e}", cls="failed")
    if not rows:
        return paragraph("No input row was refused this night.")
    head = ["dataset", "reason", "rows", f"an example (seed {SEED})"]
    return table(head, [[r["source"], r["reason"], r["n"], _short(r["example"])] for r in rows], cls="rejects")


def _short(text: str | None) -> str | None:
    if text == "":  # a row dropped for being empty (c2c_select's `empty`)
        return "(empty)"
    if text is None or len(text) <= EXAMPLE_CHARS:
        return text
    return text[: EXAMPLE_CHARS - 1] + "…"
