"""`augdag report`: one run, or two runs side by side, as one self-contained HTML page.

A run page shows the run (a nightly run: each of its pipeline runs), its stages (status, shards, rows in
and rows out per role, seconds), its failures with their error, its evaluation scores, and every plot of
the run: the pipelines' own report pages under ``<cache>/reports/<run>/`` and every PNG there, each
image once. A comparison page shows what changed from an older run A to a newer run B: rows out per
stage and role, the distribution of every numeric column (and the token lengths of the text fields) of
each view both runs produced, and the evaluation scores.

Pure functions over the catalog (no Prefect). A page loads nothing from outside itself: no script,
stylesheet, font or link; every plot is a ``data:`` URI.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from conf.errors import CatalogError
from storage.artifacts import commit_file, temp_path
from storage.catalog import Catalog
from storage.schemas import TEXT_FIELDS
from storage.scratch import parquet_list, scratch_duckdb

GENERATOR = "augdag report"  # marks this module's pages: a later report never inlines them as a pipeline's
RECENT = 5  # run ids an unknown-id error lists
SAMPLE_ROWS = 5_000  # rows per run and view behind a box plot (a seeded reservoir sample)
MAIN_COLUMNS = 3  # measures per box plot figure
NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
           "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL")
STATS = ("count", "min", "q1", "median", "q3", "mean", "max")
STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:.5em 0}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.n{text-align:right}"
         ".failed{color:#b00}pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em}.note{color:#666}"
         "section.page{border-left:3px solid #ddd;padding-left:1em;margin:1em 0}")


# -- the catalog's view of a run ---------------------------------------------------------------------

def load_run(catalog: Catalog, run_id: str) -> dict[str, Any]:
    """The `runs` row of ``run_id``, its summary parsed; an unknown id raises CatalogError naming recent ones."""
    if (row := find_run(catalog, run_id)) is not None:
        return row
    recent = catalog.query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT $n", {"n": RECENT})
    listed = ", ".join(recent["run_id"].to_pylist()) or "none (the catalog has no runs)"
    raise CatalogError(f"{catalog.path}: no run {run_id!r}; the most recent runs: {listed}. "
                       "Hint: `augdag runs` lists them")


def find_run(catalog: Catalog, run_id: str) -> dict[str, Any] | None:
    """The `runs` row of ``run_id`` with its config and summary parsed, or None."""
    rows = catalog.query("SELECT run_id, pipeline, profile, status, started_at, finished_at, config, summary FROM runs "
                         "WHERE run_id = $r", {"r": run_id}).to_pylist()
    if not rows:
        return None
    row = rows[0]
    return {**row, "config": json.loads(row["config"]) if row["config"] else {},
            "summary": json.loads(row["summary"]) if row["summary"] else {}}


def pipeline_runs(catalog: Catalog, run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pipeline runs a report covers: a nightly run's pipelines in its order, else the run itself.

    Each has pipeline, run_id (None for a skipped pipeline), status, error, seconds, stages (the summary's
    stage reports; from `stage_runs` when the run recorded no summary) and row (its `runs` row or None).
    """
    if run["pipeline"] != "nightly":
        children = [{**run["summary"], "pipeline": run["pipeline"], "run_id": run["run_id"], "status": run["status"]}]
    else:
        children = run["summary"].get("pipelines", [])
    out = []
    for child in children:
        row = run if child.get("run_id") == run["run_id"] else (
            find_run(catalog, child["run_id"]) if child.get("run_id") else None)
        stages = child.get("stages") or (row and row["summary"].get("stages")) or (
            _stages_from_stage_runs(catalog, child["run_id"]) if child.get("run_id") else [])
        seconds = child.get("seconds", _duration(row))
        out.append({"pipeline": child["pipeline"], "run_id": child.get("run_id"), "status": child["status"],
                    "error": child.get("error"), "seconds": seconds, "stages": stages, "row": row})
    return out


def _stages_from_stage_runs(catalog: Catalog, run_id: str) -> list[dict[str, Any]]:
    """Stage reports rebuilt from the shard rows of a run that has no summary (still running, or killed)."""
    rows = catalog.query(
        "SELECT stage, dataset, fingerprint, count(*) AS shards, count(*) FILTER (status = 'computed') AS computed,"
        " count(*) FILTER (status = 'failed') AS failed, sum(rows_in) AS rows_in, sum(rows_out) AS rows_out,"
        " sum(seconds) AS seconds, max(error) AS error FROM stage_runs WHERE run_id = $r GROUP BY ALL"
        " ORDER BY min(started_at) NULLS LAST, stage, dataset", {"r": run_id}).to_pylist()
    return [{"stage": r["stage"], "dataset": r["dataset"], "fingerprint": r["fingerprint"],
             "status": "failed" if r["failed"] else "computed" if r["computed"] else "cached",
             "shards": r["shards"], "shards_computed": r["computed"], "rows_in": r["rows_in"] or 0,
             "rows_out": {} if r["failed"] else {"part": r["rows_out"] or 0}, "seconds": r["seconds"] or 0.0,
             "error": r["error"]} for r in rows]


def evaluations(catalog: Catalog, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The evaluation scores the runs recorded, oldest first."""
    return catalog.query(
        "SELECT run_id, model_name, testset, metric, score, sentences, signature, model FROM evaluations"
        " WHERE list_contains($ids, run_id) ORDER BY created_at, model_name, testset, metric",
        {"ids": list(run_ids)}).to_pylist()


def _run_ids(pipes: Sequence[Mapping[str, Any]]) -> list[str]:
    return [p["run_id"] for p in pipes if p["run_id"]]


def _duration(row: Mapping[str, Any] | None) -> float | None:
    if not row or not row["finished_at"] or not row["started_at"]:
        return None
    return (row["finished_at"] - row["started_at"]).total_seconds()


def _roles(rows_out: Iterable[Mapping[str, int]]) -> list[str]:
    """Roles in a fixed order: the main part, rejects, dropped, then any other by name."""
    seen = {r for ro in rows_out for r in ro}
    return [r for r in ("part", "rejects", "dropped") if r in seen] + sorted(seen - {"part", "rejects", "dropped"})


# -- the run page ------------------------------------------------------------------------------------

def run_page(catalog: Catalog, run_id: str) -> str:
    """The page of one run: header, stages, failures, evaluation scores, every plot (a nightly: per pipeline)."""
    run = load_run(catalog, run_id)
    pipes = pipeline_runs(catalog, run)
    nightly = run["pipeline"] == "nightly"
    body = [_h(1, f"{run['pipeline']} run {run_id}"), _header(run, pipes)]
    if run["summary"].get("error"):
        body += [_h(2, "Run error"), f"<pre class='failed'>{_esc(run['summary']['error'])}</pre>"]
    if nightly:
        body += [_h(2, "Pipelines"), _table("pipelines", ["pipeline", "run", "status", "seconds", "error"],
                                            [[p["pipeline"], p["run_id"], p["status"], p["seconds"], p["error"]]
                                             for p in pipes])]
        body.append(_plots(catalog.root / "reports" / run_id, level=2))
    for p in pipes:
        if nightly and not p["run_id"]:
            continue
        body += _pipeline_sections(catalog, p, level=3 if nightly else 2, title=nightly)
    return _document(f"{run['pipeline']} run {run_id}", body)


def _header(run: Mapping[str, Any], pipes: Sequence[Mapping[str, Any]]) -> str:
    stages = [s for p in pipes for s in p["stages"]]
    count = {k: sum(s["status"] == k for s in stages) for k in ("computed", "cached", "failed")}
    done = [s for s in stages if s["status"] != "failed"]
    rows = [["run id", run["run_id"]], ["pipeline", run["pipeline"]], ["profile", run["profile"]],
            ["status", run["status"]], ["started", run["started_at"]], ["finished", run["finished_at"]],
            ["duration (s)", _duration(run)],
            ["stages", f"{count['computed']} computed, {count['cached']} cached, {count['failed']} failed"],
            ["shards computed", f"{sum(s['shards_computed'] for s in done):,} of {sum(s['shards'] for s in done):,}"],
            ["rows out (main parts)", sum(s["rows_out"].get("part", 0) for s in done)]]
    if cache := run["summary"].get("cache"):
        rows.append(["cache", cache])
    return _table("run", ["", ""], rows, header=False)


def _pipeline_sections(catalog: Catalog, p: Mapping[str, Any], *, level: int, title: bool) -> list[str]:
    out = [_h(level - 1, f"{p['pipeline']} — {p['run_id']} ({p['status']})")] if title else []
    out += [_h(level, "Stages"), stage_table(p["stages"])]
    failures = [f"<p class='failed'>{_esc(s['stage'])}[{_esc(s['dataset'] or '')}] shard(s) "
                f"{_esc(s.get('failed_shards') or '')}</p><pre class='failed'>{_esc(s['error'])}</pre>"
                for s in p["stages"] if s["status"] == "failed"]
    if p["error"] and title:  # a lone pipeline run's own error is the page's "Run error"
        failures.append(f"<pre class='failed'>{_esc(p['error'])}</pre>")
    if failures:
        out += [_h(level, "Failures"), *failures]
    scores = evaluations(catalog, _run_ids([p]))
    if scores:
        out += [_h(level, "Evaluation scores"), _table(
            "evaluations", ["model", "test set", "metric", "score", "sentences", "signature", "model fingerprint"],
            [[e["model_name"], e["testset"], e["metric"], e["score"], e["sentences"], e["signature"],
              (e["model"] or "")[:12]] for e in scores])]
    if p["run_id"]:
        out.append(_plots(catalog.root / "reports" / p["run_id"], level=level))
    return out


def stage_table(stages: Sequence[Mapping[str, Any]]) -> str:
    """One row per stage: status, shards computed of all, rows in, rows out per role, seconds, fingerprint."""
    roles = _roles(s["rows_out"] for s in stages) or ["part"]
    head = ["stage", "dataset", "status", "shards", "shards computed", "rows in",
            *(f"rows out: {r}" for r in roles), "seconds", "fingerprint"]
    rows = [[s["stage"], s["dataset"] or "", s["status"], s["shards"], s["shards_computed"], s["rows_in"],
             *(s["rows_out"].get(r) if s["status"] != "failed" else None for r in roles), s["seconds"],
             s["fingerprint"][:12]] for s in stages]
    return _table("stages", head, rows, failed=[s["status"] == "failed" for s in stages])


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
            return "<p class='note'>(an image that is not inlined was left out)</p>"
        payload = src.group(1).partition("base64,")[2]
        if payload in shown:
            return "<p class='note'>(the same plot as above)</p>"
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
        parts.append(f"<section class='page'><p class='note'>report page {_esc(page.name)}</p>{body}</section>")
    rest = []
    for png in sorted(folder.glob("*.png")):
        data = png.read_bytes()
        if base64.b64encode(data).decode() not in shown:
            rest.append(f"<figure>{_img(data, png.stem)}<figcaption>{_esc(png.name)}</figcaption></figure>")
    if not parts and not rest:
        return ""
    return _h(level, "Plots") + "".join(parts) + "".join(rest)


# -- the comparison page -----------------------------------------------------------------------------

def compare_page(catalog: Catalog, run_a: str, run_b: str) -> str:
    """What changed from the older run A to the newer run B: counts, distributions, evaluation scores."""
    a, b = older_first(catalog, run_a, run_b)
    pa_, pb = pipeline_runs(catalog, a), pipeline_runs(catalog, b)
    title = f"run {a['run_id']} (A) vs run {b['run_id']} (B)"
    rows_out = [sum(s["rows_out"].get("part", 0) for p in pipes for s in p["stages"] if s["status"] != "failed")
                for pipes in (pa_, pb)]
    body = [_h(1, title), _table("runs", ["", "A", "B"], [
        *([label, a[k], b[k]] for label, k in (("run id", "run_id"), ("pipeline", "pipeline"), ("profile", "profile"),
                                               ("status", "status"), ("started", "started_at"),
                                               ("finished", "finished_at"))),
        ["duration (s)", _duration(a), _duration(b)], ["rows out (main parts)", *rows_out]])]
    body += [_h(2, "Counts"), _table("counts", ["pipeline", "stage", "dataset", "role", "status A", "status B",
                                                "rows A", "rows B", "change", "output"],
                                     [list(r.values()) for r in count_changes(pa_, pb)])]
    body += [_h(2, "Distributions"), *_distributions(catalog, _run_ids(pa_), _run_ids(pb))]
    scores = score_changes(evaluations(catalog, _run_ids(pa_)), evaluations(catalog, _run_ids(pb)))
    body += [_h(2, "Evaluation scores"), _table("scores", ["model", "test set", "metric", "A", "B", "change"],
                                                [list(r.values()) for r in scores])
             if scores else "<p class='note'>neither run recorded an evaluation</p>"]
    return _document(title, body)


def older_first(catalog: Catalog, run_a: str, run_b: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two runs' rows, the one that started first first."""
    a, b = load_run(catalog, run_a), load_run(catalog, run_b)
    return (a, b) if (a["started_at"], a["run_id"]) <= (b["started_at"], b["run_id"]) else (b, a)


def count_changes(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (pipeline, stage, dataset, role): status and rows out in A and B, the change B − A, and whether
    the output (fingerprint) is the same; a stage only in one run has no change."""
    def index(pipes: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], Mapping[str, Any]]:
        return {(p["pipeline"], s["stage"], s["dataset"] or ""): s for p in pipes for s in p["stages"]}

    ia, ib = index(a), index(b)
    rows = []
    for key in dict.fromkeys([*ia, *ib]):
        sa, sb = ia.get(key), ib.get(key)
        both = [s for s in (sa, sb) if s]
        same = "same" if sa and sb and sa["fingerprint"] == sb["fingerprint"] else "changed" if sa and sb else "–"
        for role in _roles(s["rows_out"] for s in both) or ["–"]:
            na, nb = (s["rows_out"].get(role, 0) if s and s["status"] != "failed" and role != "–" else None
                      for s in (sa, sb))
            rows.append({"pipeline": key[0], "stage": key[1], "dataset": key[2], "role": role,
                         "status_a": sa["status"] if sa else "–", "status_b": sb["status"] if sb else "–",
                         "rows_a": na, "rows_b": nb, "change": f"{nb - na:+,}" if na is not None and nb is not None
                         else "–", "output": same})
    return rows


def score_changes(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, test set, metric), the latest score in A and in B and the change B − A."""
    la = {(e["model_name"], e["testset"], e["metric"]): e["score"] for e in a}
    lb = {(e["model_name"], e["testset"], e["metric"]): e["score"] for e in b}
    return [{"model": k[0], "testset": k[1], "metric": k[2], "a": la.get(k), "b": lb.get(k),
             "change": f"{lb[k] - la[k]:+.4f}" if k in la and k in lb else "only in A" if k in la else "only in B"}
            for k in dict.fromkeys([*la, *lb])]


def view_parts(catalog: Catalog, run_ids: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """The main Parquet parts of the artifacts the runs used, by view and fingerprint (parts on disk only)."""
    rows = catalog.query(
        "SELECT view, fingerprint, path, manifest FROM artifacts WHERE view IS NOT NULL AND fingerprint IN "
        "(SELECT fingerprint FROM stage_runs WHERE list_contains($ids, run_id) AND status <> 'failed') "
        "ORDER BY view, fingerprint", {"ids": list(run_ids)}).to_pylist()
    out: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        files = [Path(r["path"]) / f["file"] for f in json.loads(r["manifest"])["files"] if f["role"] == "part"]
        out.setdefault(r["view"], {})[r["fingerprint"]] = [str(f) for f in files if f.exists()]
    return out


def measures(view: str, types: Mapping[str, str]) -> dict[str, str]:
    """What a distribution covers, as {label: SQL}: the token counts of the view's text fields (whitespace
    tokens, as the `clean` stage counts them; a list field counts its elements), then every numeric column."""
    out = {}
    for field in TEXT_FIELDS.get(view) or ("src", "tgt", "text", "tokens"):
        col, typ = _quote(field), types.get(field, "")
        if typ == "VARCHAR":
            out[f"tokens({field})"] = (f"CASE WHEN trim({col}) = '' THEN 0 "
                                       f"ELSE len(string_split_regex(trim({col}), '\\s+')) END")
        elif typ.endswith("[]"):
            out[f"tokens({field})"] = f"len({col})"
    out.update({name: _quote(name) for name, typ in types.items() if typ.startswith(NUMERIC)})
    return out


def main_measures(labels: Iterable[str]) -> list[str]:
    """The measures a box plot shows: the token counts if any, else the numeric columns but `line`, else `line`."""
    labels = list(labels)
    tokens = [m for m in labels if m.startswith("tokens(")]
    return (tokens or [m for m in labels if m != "line"] or labels)[:MAIN_COLUMNS]


def column_types(files: Sequence[str]) -> dict[str, str]:
    """{column: DuckDB type} of the parts (their union by name); empty without parts."""
    if not files:
        return {}
    with scratch_duckdb(memory_limit="256MB", name="report") as con:
        return _types(con, f"read_parquet({parquet_list(files)}, union_by_name = true)")


def _types(con: Any, src: str) -> dict[str, str]:
    return {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}


def distribution(files: Sequence[str], view: str, *, plotted: Sequence[str] = ()) -> tuple[
        dict[str, dict[str, Any]], dict[str, list[float]]]:
    """count, min, quartiles, mean and max of every measure over the parts (in DuckDB), and a seeded sample
    of at most ``SAMPLE_ROWS`` rows of the ``plotted`` ones."""
    if not files:
        return {}, {}
    with scratch_duckdb(memory_limit="256MB", name="report") as con:
        src = f"read_parquet({parquet_list(files)}, union_by_name = true)"
        m = measures(view, _types(con, src))
        if not m:
            return {}, {}
        select = ", ".join(f"count({e}), min({e}), quantile_cont({e}, [0.25, 0.5, 0.75]), avg({e}), max({e})"
                           for e in m.values())
        row = con.execute(f"SELECT {select} FROM {src}").fetchone()
        stats = {}
        for i, label in enumerate(m):
            n, lo, q, mean, hi = row[5 * i:5 * i + 5]
            q = q or [None] * 3
            stats[label] = dict(zip(STATS, (n, _plain(lo), *(_plain(x) for x in q), _plain(mean), _plain(hi))))
        shown = [p for p in plotted if p in m]
        sample: dict[str, list[float]] = {p: [] for p in shown}
        if shown:
            for values in con.execute(f"SELECT {', '.join(m[p] for p in shown)} FROM {src} "
                                      f"USING SAMPLE {SAMPLE_ROWS} ROWS (reservoir, 0)").fetchall():
                for p, v in zip(shown, values):
                    if v is not None:
                        sample[p].append(float(v))
    return stats, sample


def _distributions(catalog: Catalog, ids_a: Sequence[str], ids_b: Sequence[str]) -> list[str]:
    from tasks.report import box_figure

    va, vb = view_parts(catalog, ids_a), view_parts(catalog, ids_b)
    both = sorted(set(va) & set(vb))
    out = []
    if only := [f"{v} (only in {w})" for v, w in sorted([*((v, "A") for v in set(va) - set(vb)),
                                                       *((v, "B") for v in set(vb) - set(va))])]:
        out.append(f"<p class='note'>not compared: {_esc(', '.join(only))}</p>")
    if not both:
        out.append("<p class='note'>the runs produced no view in common</p>")
    for view in both:
        files = {run: [f for fs in parts[view].values() for f in fs] for run, parts in (("A", va), ("B", vb))}
        same = set(va[view]) == set(vb[view])
        out += [_h(3, view), f"<p class='note'>artifacts: A {len(va[view])}, B {len(vb[view])}"
                f"{' (the same in both runs)' if same else ''}; parts on disk: A {len(files['A'])}, "
                f"B {len(files['B'])}</p>"]
        plotted = main_measures(dict.fromkeys(m for fs in files.values() for m in measures(view, column_types(fs))))
        dist = {run: distribution(fs, view, plotted=plotted) for run, fs in files.items()}
        rows = [[label, run, *(dist[run][0][label][k] for k in STATS)]
                for label in dict.fromkeys([*dist["A"][0], *dist["B"][0]]) for run in ("A", "B") if label in dist[run][0]]
        out.append(_table("stats", ["measure", "run", *STATS], rows) if rows else
                   "<p class='note'>no numeric column and no text field</p>")
        groups = {f"{p} · {run}": dist[run][1][p] for p in plotted for run in ("A", "B") if dist[run][1].get(p)}
        if groups:
            png = box_figure(groups, ylabel="tokens" if all(p.startswith("tokens(") for p in plotted) else "value",
                             title=f"{view}: A vs B (a seeded sample of ≤ {SAMPLE_ROWS:,} rows per run)")
            out.append(_img(png, f"{view}: A vs B"))
    return out


# -- writing -----------------------------------------------------------------------------------------

def write_report(catalog: Catalog, run_id: str, *, compare: str | None = None, output: Path | None = None) -> Path:
    """Write the run page (or, with ``compare``, the comparison page) and return its path.

    Default: ``<cache>/reports/<run_id>/run.html`` or ``.../compare-<A>-vs-<B>.html`` (A the older run).
    Written to a temporary name and renamed: an interrupted write leaves no half page.
    """
    if compare is None:
        page, name = run_page(catalog, run_id), "run.html"
    else:
        a, b = older_first(catalog, run_id, compare)
        page, name = compare_page(catalog, a["run_id"], b["run_id"]), f"compare-{a['run_id']}-vs-{b['run_id']}.html"
    path = Path(output) if output is not None else catalog.root / "reports" / run_id / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        tmp.write_text(page, encoding="utf-8")
        commit_file(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


# -- HTML --------------------------------------------------------------------------------------------

def _esc(v: Any) -> str:
    return html.escape(str(v))


def _plain(v: Any) -> Any:
    return float(v) if isinstance(v, Decimal) else v


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _cell(v: Any) -> tuple[str, bool]:
    """(text, is a number): None as –, integers with thousands separators, floats to 4 decimals."""
    if v is None:
        return "–", False
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        if isinstance(v, datetime):
            return v.isoformat(sep=" ", timespec="seconds"), False
        return str(v), False
    if isinstance(v, int):
        return f"{v:,}", True
    return f"{float(v):,.4f}", True


def _table(cls: str, head: Sequence[str], rows: Sequence[Sequence[Any]], *, header: bool = True,
           failed: Sequence[bool] = ()) -> str:
    def tr(row: Sequence[Any], bad: bool) -> str:
        cells = [_cell(v) for v in row]
        return (f"<tr{' class=failed' if bad else ''}>"
                + "".join(f"<td{' class=n' if num else ''}>{_esc(t)}</td>" for t, num in cells) + "</tr>")

    top = "<tr>" + "".join(f"<th>{_esc(h)}</th>" for h in head) + "</tr>" if header else ""
    bad = list(failed) + [False] * (len(rows) - len(failed))
    return f"<table class='{cls}'>{top}{''.join(tr(r, b) for r, b in zip(rows, bad))}</table>"


def _h(level: int, text: str) -> str:
    return f"<h{level}>{_esc(text)}</h{level}>"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _document(title: str, body: Sequence[str]) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><meta name=\"generator\" content=\"{GENERATOR}\">"
            f"<title>{_esc(title)}</title><style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")
