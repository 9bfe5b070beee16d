"""The `augdag` command line: parse, load a profile, call one flow, print.

Exit codes: 0 ok, 1 a run failed, 2 bad usage, configuration or input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from conf.errors import AugdagError, CatalogError, ConfError
from conf.loader import load_profile
from conf.schema import resolve_cache
from flows import registry
from flows.cli_app import (
    CacheOpt,
    ConfigOpt,
    SetOpt,
    app,
    catalog_at,
    choice,
    err,
    fail,
    out,
    print_table,
    write_result,
)
from flows.cli_run import print_summary, run_nightly, run_pipeline
from flows.liveness import reap_for_listing
from storage.catalog import Catalog, check_read_only


@app.command()
def run(
    pipeline: Annotated[str, typer.Argument(help=f"one of: {', '.join(registry.names())}")],
    config: ConfigOpt = "ingest",
    set_: SetOpt = [],
    cache: CacheOpt = None,
) -> None:
    """Run one pipeline over the datasets of a profile."""
    choice("pipeline", pipeline, registry.names())
    try:
        conf = load_profile(config, set_, cache=cache)
        summary = run_pipeline(pipeline, conf, config)
    except AugdagError as e:
        fail(e)
    print_summary(summary)


@app.command()
def demo(
    cache: CacheOpt = None,
    set_: SetOpt = [],
    bitext_rows: Annotated[int | None, typer.Option(help="size of the demo bitext (default: the profile's)")] = None,
) -> None:
    """Generate the demo corpus, run the demo profile end to end, and show what to query."""
    try:
        sets = [*set_, *([f"demo.bitext_rows={bitext_rows}"] if bitext_rows is not None else [])]
        conf = load_profile("demo", sets, cache=resolve_cache(None, cache))  # data: <cache>/demo-data
        run_nightly(conf, "demo")  # writes the demo data first where it is missing
    except AugdagError as e:
        fail(e)
    c = f" --cache {cache}" if cache else ""
    out.print(f"\nartifacts: {Path(conf.cache).absolute() / 'artifacts'}\ncatalog:   {Catalog(conf.cache).path}\n")
    out.print("Try:")
    for q in ("SELECT source, count(*) AS pairs FROM bitext GROUP BY source",
              "SELECT source, reason, count(*) AS n FROM rejects GROUP BY ALL ORDER BY n DESC",
              "SELECT label, count(*) AS n FROM labeled GROUP BY label ORDER BY n DESC",
              "SELECT src, round(H, 3) AS H, links FROM word_uncertainty ORDER BY H DESC LIMIT 10",
              "SELECT text, round(uncertainty, 3) AS u FROM sampled_mono ORDER BY uncertainty DESC LIMIT 10",
              "SELECT src, tgt, round(prob, 3) AS p FROM inactive ORDER BY prob LIMIT 10",
              "SELECT origin, count(*) AS n, round(avg(coalesce(rejuvenated_prob, prob)), 3) AS p FROM rejuvenated GROUP BY origin",
              "SELECT src, tgt, model FROM synthetic LIMIT 10",
              "SELECT level, count(*) AS n, round(avg(sim), 3) AS sim, round(avg(CASE WHEN sampler = 'bottom_k' THEN 1 ELSE 0 END), 2) AS bottom_k FROM curriculum GROUP BY level ORDER BY level",
              "SELECT c.level, o.text AS original, c.text AS paraphrase FROM curriculum c JOIN curriculum o ON o.uid = c.parent_uid AND o.level = 0 WHERE c.level = 5 LIMIT 10",
              "SELECT * FROM paraphrase_diversity",
              "SELECT parent_cluster, rank, delex, array_to_string(tokens, ' ') AS utterance, med_train FROM c2c_generated ORDER BY med_train DESC LIMIT 10",
              "SELECT * FROM c2c_diversity",
              "SELECT run_id, model_name, testset, metric, round(score, 4) AS score, signature FROM evaluations ORDER BY created_at"):
        out.print(f"  augdag sql{c} \"{q}\"", highlight=False, soft_wrap=True)  # one line: copy-pastable


@app.command()
def sql(
    query: Annotated[str | None, typer.Argument(help="a read-only SQL query over the catalog's tables and views "
                                                   "(none with --shell)")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | csv | json | parquet")] = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write the result to this file "
                                                   "(csv, json or parquet) instead of the terminal")] = None,
    shell: Annotated[bool, typer.Option("--shell", help="an interactive read-only loop: statements end with ;, "
                                        ".views, .schema NAME, .help, .quit")] = False,
    cache: CacheOpt = None,
) -> None:
    """Query the catalog (read-only: DDL, DML, ATTACH, COPY, INSTALL/LOAD and SET are refused, exit 2).

    With --shell, read statements from the terminal (or stdin) until .quit: a refused or failing one prints
    its error and the loop goes on."""
    choice("--format", fmt, ("table", "csv", "json", "parquet"))
    if fmt == "parquet" and output is None:
        fail(ConfError("--format parquet needs --output FILE (Parquet is not written to a terminal)"))
    if fmt == "table" and output is not None:
        fail(ConfError("--output writes csv, json or parquet: add --format csv|json|parquet"))
    if shell:
        if query is not None or output is not None:
            fail(ConfError("--shell reads its statements from the terminal: give no QUERY and no --output"))
        from flows.shell import sql_shell

        sql_shell(catalog_at(cache), show=lambda result: print_table(result, fmt),
                  error=lambda msg: err.print(f"[bold red]error:[/] {escape(msg)}", soft_wrap=True))
        return
    if query is None:
        fail(ConfError("augdag sql: give a QUERY, or --shell for an interactive loop"))
    try:
        check_read_only(query)
        result = catalog_at(cache).query(query, sandbox=True)
    except AugdagError as e:
        fail(e)
    except Exception as e:  # a DuckDB error in the user's query is bad usage, not a failed run
        fail(CatalogError(f"query failed: {e}"))
    if output is None:
        print_table(result, fmt)
        return
    write_result(result, fmt, output)
    err.print(f"wrote {result.num_rows:,} row(s) to {output}", highlight=False)


@app.command()
def views(
    name: Annotated[str | None, typer.Argument(help="a table or view: show its columns")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json (json: one line per column, of NAME "
                                     "or of every table and view)")] = "table",
    cache: CacheOpt = None,
) -> None:
    """The catalog's tables and views with what they hold and their row counts; with NAME, its columns."""
    from storage.views_doc import catalog_columns, catalog_objects

    choice("--format", fmt, ("table", "json"))
    catalog = catalog_at(cache)
    try:
        if fmt == "json":
            result = catalog_columns(catalog, registry.view_docs(), name)
        elif name is None:
            result = catalog_objects(catalog, registry.view_docs())
        else:
            result = catalog_columns(catalog, registry.view_docs(), name).select(["column", "type", "description"])
    except AugdagError as e:
        fail(e)
    print_table(result, fmt)


@app.command()
def runs(limit: Annotated[int, typer.Option(help="how many recent runs")] = 10, cache: CacheOpt = None) -> None:
    """Recent runs: status, the run each retried, the error's last line, and per stage (and dataset, per
    fingerprint) its shards written (computed or cached) and failed of all it has."""
    catalog = catalog_at(cache)
    reap_for_listing(catalog)  # a running run whose process is gone becomes crashed (flows/liveness.py)
    recent = catalog.query(
        "SELECT run_id, pipeline, profile, status, started_at, finished_at, summary FROM runs "
        "ORDER BY started_at DESC LIMIT $n", {"n": limit}).to_pylist()
    if not recent:
        out.print(f"no runs in {catalog.path}")
        return
    stages = catalog.query(
        "SELECT run_id, stage, dataset, fingerprint, count(DISTINCT shard) AS shards,"
        " count(*) FILTER (status = 'computed') AS computed, count(*) FILTER (status = 'cached') AS cached,"
        " count(*) FILTER (status = 'failed') AS failed, sum(rows_out) AS rows_out, round(sum(seconds), 2) AS seconds "
        "FROM stage_runs WHERE run_id IN (SELECT run_id FROM runs ORDER BY started_at DESC LIMIT $n) "
        "GROUP BY run_id, stage, dataset, fingerprint ORDER BY run_id, min(rowid)", {"n": limit}).to_pylist()
    retried_by: dict[str, list[str]] = {}
    for row in catalog.query("SELECT run_id, json_extract_string(summary, '$.retry_of') AS retry_of FROM runs "
                             "WHERE json_extract_string(summary, '$.retry_of') IS NOT NULL ORDER BY started_at").to_pylist():
        retried_by.setdefault(row["retry_of"], []).append(row["run_id"])
    for r in recent:
        summary = json.loads(r["summary"]) if r["summary"] else {}
        chain = "".join([f"  retry of {summary['retry_of']}" if summary.get("retry_of") else "",
                         *(f"  retried by {x}" for x in retried_by.get(r["run_id"], []))])
        out.print(f"[bold]{r['run_id']}[/]  {r['pipeline']}  profile={escape(r['profile'] or '')}  "
                  f"[{'green' if r['status'] == 'completed' else 'red'}]{r['status']}[/]"
                  f"  {r['started_at']} -> {r['finished_at'] or '…'}{chain}", highlight=False, soft_wrap=True)
        if r["status"] != "completed" and summary.get("error"):
            last = [line for line in str(summary["error"]).splitlines() if line.strip()][-1]
            out.print(f"    [red]error:[/] {escape(last)}", highlight=False, soft_wrap=True)
        reported = {s["fingerprint"]: s for s in summary.get("stages") or []}
        for s in (s for s in stages if s["run_id"] == r["run_id"]):
            rep = reported.get(s["fingerprint"], {})
            n = rep.get("shards", s["shards"])
            of = str(n) if rep.get("shards_known", True) else f"at least {n}"
            written, failed = s["computed"] + s["cached"], f", {s['failed']} failed" if s["failed"] else ""
            out.print(f"    {escape(s['stage']):<12} {escape(s['dataset'] or ''):<16} {s['fingerprint'][:12]}  "
                      f"shards {written} of {of} written ({s['computed']} computed, {s['cached']} cached){failed}"
                      f"  rows out {s['rows_out'] or 0:,}  {s['seconds'] or 0:.2f} s", highlight=False, soft_wrap=True)


@app.command()
def export(
    view: Annotated[str, typer.Argument(help="a catalog view: bitext, mono, labeled, slots, ...")],
    output: Annotated[Path, typer.Option("--output", "-o", help="output file (text: a prefix, one file per column)")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="parquet | jsonl | text")] = "parquet",
    where: Annotated[str | None, typer.Option(help="an SQL condition on the view's rows")] = None,
    cache: CacheOpt = None,
) -> None:
    """Export a view to Parquet, JSONL or line-aligned text files."""
    from storage.export import export_view

    choice("--format", fmt, ("parquet", "jsonl", "text"))
    try:
        files = export_view(catalog_at(cache), view, output, fmt=fmt, where=where)  # type: ignore[arg-type]
    except AugdagError as e:
        fail(e)
    for f in files:
        out.print(f"wrote {f}")


# the operations and report commands live in their own modules and register on `app` when imported
from flows import cli_ops, cli_report  # noqa: F401
import flows.cli_why  # noqa: F401 — registers augdag why


def main() -> None:
    app()


if __name__ == "__main__":
    main()
