"""`augdag report RUN --compare OTHER`: what changed from an older run A to a newer run B, as one
self-contained HTML page.

Rows out per stage and role, the distribution of every numeric column (and the token lengths of the text
fields) of each view both runs produced, summarised in DuckDB with a box plot of a seeded sample, and the
evaluation scores. Pure functions over the catalog and the runs' Parquet parts (no Prefect).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from flows.reports.html import document, heading, image, paragraph, table
from storage.catalog import Catalog
from storage.engines import scratch_duckdb
from storage.parts import parquet_list
from storage.runs import (
    duration,
    evaluations,
    older_first,
    pipeline_runs,
    roles,
    run_ids,
    view_parts,
)
from storage.schemas import TEXT_FIELDS

GENERATOR = "augdag report"  # marks the run and comparison pages: a later report never inlines them as a pipeline's
SAMPLE_ROWS = 5_000  # rows per run and view behind a box plot (a seeded reservoir sample)
MAIN_COLUMNS = 3  # measures per box plot figure
NUMERIC = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
    "FLOAT",
    "DOUBLE",
    "DECIMAL",
)
STATS = ("count", "min", "q1", "median", "q3", "mean", "max")


def compare_page(catalog: Catalog, run_a: str, run_b: str) -> str:
    """What changed from the older run A to the newer run B: counts, distributions, evaluation scores."""
    a, b = older_first(catalog, run_a, run_b)
    pa_, pb = pipeline_runs(catalog, a), pipeline_runs(catalog, b)
    title = f"run {a['run_id']} (A) vs run {b['run_id']} (B)"
    rows_out = [
        sum(s["rows_out"].get("part", 0) for p in pipes for s in p["stages"] if s["status"] != "failed") for pipes in (pa_, pb)
    ]
    body = [
        heading(1, title),
        table(
            ["", "A", "B"],
            [
                *(
                    [label, a[k], b[k]]
                    for label, k in (
                        ("run id", "run_id"),
                        ("pipeline", "pipeline"),
                        ("profile", "profile"),
                        ("status", "status"),
                        ("started", "started_at"),
                        ("finished", "finished_at"),
                    )
                ),
                ["duration (s)", duration(a), duration(b)],
                ["rows out (main parts)", *rows_out],
            ],
            cls="runs",
        ),
    ]
    body += [
        heading(2, "Counts"),
        table(
            ["pipeline", "stage", "dataset", "role", "status A", "status B", "rows A", "rows B", "change", "output"],
            [list(r.values()) for r in count_changes(pa_, pb)],
            cls="counts",
        ),
    ]
    body += [heading(2, "Distributions"), *_distributions(catalog, run_ids(pa_), run_ids(pb))]
    scores = score_changes(evaluations(catalog, run_ids(pa_)), evaluations(catalog, run_ids(pb)))
    body += [
        heading(2, "Evaluation scores"),
        table(["model", "test set", "metric", "A", "B", "change"], [list(r.values()) for r in scores], cls="scores")
        if scores
        else paragraph("neither run recorded an evaluation", cls="note"),
    ]
    return document(title, body, generator=GENERATOR)


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
        for role in roles(s["rows_out"] for s in both) or ["–"]:
            na, nb = (s["rows_out"].get(role, 0) if s and s["status"] != "failed" and role != "–" else None for s in (sa, sb))
            rows.append(
                {
                    "pipeline": key[0],
                    "stage": key[1],
                    "dataset": key[2],
                    "role": role,
                    "status_a": sa["status"] if sa else "–",
                    "status_b": sb["status"] if sb else "–",
                    "rows_a": na,
                    "rows_b": nb,
                    "change": f"{nb - na:+,}" if na is not None and nb is not None else "–",
                    "output": same,
                }
            )
    return rows


def score_changes(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, test set, metric), the latest score in A and in B and the change B − A."""
    la = {(e["model_name"], e["testset"], e["metric"]): e["score"] for e in a}
    lb = {(e["model_name"], e["testset"], e["metric"]): e["score"] for e in b}
    return [
        {
            "model": k[0],
            "testset": k[1],
            "metric": k[2],
            "a": la.get(k),
            "b": lb.get(k),
            "change": f"{lb[k] - la[k]:+.4f}" if k in la and k in lb else "only in A" if k in la else "only in B",
        }
        for k in dict.fromkeys([*la, *lb])
    ]


# -- distributions -----------------------------------------------------------------------------------


def measures(view: str, types: Mapping[str, str]) -> dict[str, str]:
    """What a distribution covers, as {label: SQL}: the token counts of the view's text fields (whitespace
    tokens, as the `clean` stage counts them; a list field counts its elements), then every numeric column."""
    out = {}
    for field in TEXT_FIELDS.get(view) or ("src", "tgt", "text", "tokens"):
        col, typ = _quote(field), types.get(field, "")
        if typ == "VARCHAR":
            out[f"tokens({field})"] = f"CASE WHEN trim({col}) = '' THEN 0 ELSE len(string_split_regex(trim({col}), '\\s+')) END"
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


def distribution(
    files: Sequence[str], view: str, *, plotted: Sequence[str] = ()
) -> tuple[dict[str, dict[str, Any]], dict[str, list[float]]]:
    """count, min, quartiles, mean and max of every measure over the parts (in DuckDB), and a seeded sample
    of at most ``SAMPLE_ROWS`` rows of the ``plotted`` ones."""
    if not files:
        return {}, {}
    with scratch_duckdb(memory_limit="256MB", name="report") as con:
        src = f"read_parquet({parquet_list(files)}, union_by_name = true)"
        m = measures(view, _types(con, src))
        if not m:
            return {}, {}
        select = ", ".join(f"count({e}), min({e}), quantile_cont({e}, [0.25, 0.5, 0.75]), avg({e}), max({e})" for e in m.values())
        row = con.execute(f"SELECT {select} FROM {src}").fetchone()
        stats = {}
        for i, label in enumerate(m):
            n, lo, q, mean, hi = row[5 * i : 5 * i + 5]
            q = q or [None] * 3
            stats[label] = dict(zip(STATS, (n, _plain(lo), *(_plain(x) for x in q), _plain(mean), _plain(hi))))
        shown = [p for p in plotted if p in m]
        sample: dict[str, list[float]] = {p: [] for p in shown}
        if shown:
            for values in con.execute(
                f"SELECT {', '.join(m[p] for p in shown)} FROM {src} USING SAMPLE {SAMPLE_ROWS} ROWS (reservoir, 0)"
            ).fetchall():
                for p, v in zip(shown, values):
                    if v is not None:
                        sample[p].append(float(v))
    return stats, sample


def _distributions(catalog: Catalog, ids_a: Sequence[str], ids_b: Sequence[str]) -> list[str]:
    from flows.reports.plots import box_figure

    va, vb = view_parts(catalog, ids_a), view_parts(catalog, ids_b)
    both = sorted(set(va) & set(vb))
    out = []
    if only := [
        f"{v} (only in {w})" for v, w in sorted([*((v, "A") for v in set(va) - set(vb)), *((v, "B") for v in set(vb) - set(va))])
    ]:
        out.append(paragraph(f"not compared: {', '.join(only)}", cls="note"))
    if not both:
        out.append(paragraph("the runs produced no view in common", cls="note"))
    for view in both:
        files = {run: [f for fs in parts[view].values() for f in fs] for run, parts in (("A", va), ("B", vb))}
        same = set(va[view]) == set(vb[view])
        out += [
            heading(3, view),
            paragraph(
                f"artifacts: A {len(va[view])}, B {len(vb[view])}"
                f"{' (the same in both runs)' if same else ''}; parts on disk: "
                f"A {len(files['A'])}, B {len(files['B'])}",
                cls="note",
            ),
        ]
        plotted = main_measures(dict.fromkeys(m for fs in files.values() for m in measures(view, column_types(fs))))
        dist = {run: distribution(fs, view, plotted=plotted) for run, fs in files.items()}
        rows = [
            [label, run, *(dist[run][0][label][k] for k in STATS)]
            for label in dict.fromkeys([*dist["A"][0], *dist["B"][0]])
            for run in ("A", "B")
            if label in dist[run][0]
        ]
        out.append(
            table(["measure", "run", *STATS], rows, cls="stats")
            if rows
            else paragraph("no numeric column and no text field", cls="note")
        )
        groups = {f"{p} · {run}": dist[run][1][p] for p in plotted for run in ("A", "B") if dist[run][1].get(p)}
        if groups:
            png = box_figure(
                groups,
                ylabel="tokens" if all(p.startswith("tokens(") for p in plotted) else "value",
                title=f"{view}: A vs B (a seeded sample of ≤ {SAMPLE_ROWS:,} rows per run)",
            )
            out.append(image(png, f"{view}: A vs B"))
    return out


def _types(con: Any, src: str) -> dict[str, str]:
    return {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}


def _plain(v: Any) -> Any:
    return float(v) if isinstance(v, Decimal) else v


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
