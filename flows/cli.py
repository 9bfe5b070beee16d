"""The `augdag` command line: parse, load a profile, call one flow, print.

Exit codes: 0 ok, 1 a run failed, 2 bad usage, configuration or input.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.table import Table

import flows  # noqa: F401 — switches the stack offline before Prefect is imported
from conf.errors import AugdagError, CatalogError, ConfError
from conf.loader import check_inputs, dump_conf, load_profile
from conf.schema import AugdagConf, resolve_cache
from flows.run_log import configure_console, log_path
from flows.liveness import reap_for_listing
from storage.catalog import Catalog, check_read_only
from tasks.progress import reporting

# typer 0.29's rich help prints a flag's Python type (`--shell <bool>`, `--help <bool>`); its plain help
# does not. A flag takes no value, so it shows none.
_option_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _option_type(self, ctx)

app = typer.Typer(add_completion=False, no_args_is_help=True, help="augdag: offline data augmentation as a Prefect DAG")
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

CacheOpt = Annotated[Optional[Path], typer.Option("--cache", help="cache root (default: $AUGDAG_CACHE or ./.augdag)")]
SetOpt = Annotated[list[str], typer.Option("--set", help="override a profile key: a.b=value (repeatable)")]
PIPELINES = ("ingest", "self_training", "rejuvenation", "train_nmt", "paraphrase", "train_classifier")


@app.callback()
def _options(verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="show Prefect's log and tracebacks on the terminal (a run's log file, "
                                "<cache>/logs/<run id>.log, always has them)")] = False) -> None:
    configure_console(verbose)  # before Prefect is imported: see flows/run_log.py


def _fail(e: AugdagError) -> None:
    """The last line the user sees: the error and, for a run that failed, the command that resumes it and
    where its log is (its run id and cache ride on the error: the driver's StageError, NightlyFailed)."""
    err.print(f"[bold red]error:[/] {escape(str(e))}{escape(_resume(e))}", highlight=False, soft_wrap=True)
    raise typer.Exit(e.exit_code)


def _resume(e: AugdagError) -> str:
    run_id, cache = getattr(e, "run_id", None), getattr(e, "cache", None)
    if run_id is None and isinstance(summary := getattr(e, "summary", None), dict):
        run_id, cache = summary.get("run_id"), summary.get("cache")
    if not run_id or not cache:
        return ""
    cache = Path(cache).absolute()
    opt = "" if cache == resolve_cache(None, None).absolute() else f" --cache {shlex.quote(str(cache))}"
    return f" Resume: augdag retry {run_id}{opt}  (log: {log_path(cache, run_id)}; -v shows it here)"


def _choice(what: str, value: str, choices: tuple[str, ...]) -> None:
    """Bad usage (exit 2) unless ``value`` is one of ``choices``."""
    if value not in choices:
        err.print(f"[bold red]error:[/] {what} {value!r}: expected one of {', '.join(choices)}")
        raise typer.Exit(2)


def _catalog(cache: Path | None) -> Catalog:
    return Catalog(resolve_cache(None, cache))


def _prepare(conf: AugdagConf) -> None:
    """Before Prefect is imported: results beside the artifacts, and the cache's server if one runs."""
    from flows.server import connect

    # Prefect's persisted task results live beside the artifacts they describe
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(Path(conf.cache).absolute() / "prefect-results"))
    if url := connect(Path(conf.cache)):
        err.print(f"[dim]reporting to the Prefect server at {url}[/]", highlight=False)


def _run_pipeline(pipeline: str, conf: AugdagConf, profile: str) -> dict[str, Any]:
    check_inputs(conf)  # a missing input file: one line, exit 2, before Prefect starts
    _prepare(conf)
    from flows.nightly import pipeline_flow
    from flows.runners import run_flow

    with _progress_bars():
        return run_flow(pipeline_flow(pipeline), conf, profile=profile, config=dump_conf(conf))


def _run_nightly(conf: AugdagConf, profile: str, *, run_id: str | None = None) -> dict[str, Any]:
    """The nightly flow over ``conf`` (recorded by ``run_id`` when it is a retry); prints every pipeline's
    summary and the run's, failed or not. The demo profile's data is written first when missing, and a
    missing input file is one line (exit 2) before the flow starts."""
    _prepare(conf)
    from flows.nightly import NightlyFailed, demo_data, nightly_flow

    if (data := demo_data(profile, conf)) is not None:
        out.print(f"demo data {'written to' if data[1] else 'in'} {data[0]}", highlight=False)
    check_inputs(conf)
    try:
        with _progress_bars():
            summary = nightly_flow(profile=profile, cache=str(conf.cache), config=dump_conf(conf), run_id=run_id)
    except NightlyFailed as e:
        print_nightly(e.summary)
        raise
    print_nightly(summary)
    return summary


def print_nightly(summary: dict[str, Any]) -> None:
    from flows.nightly import totals

    if summary["status"] == "skipped":
        out.print(f"[yellow]nightly run skipped:[/] {summary['error']}", highlight=False)
        return
    for child in summary["pipelines"]:
        if child.get("stages"):
            print_summary(child)
    table = Table(title=f"nightly run {summary['run_id']} ({summary['profile']}): {summary['status']}",
                  title_justify="left")
    for col in ("pipeline", "run", "status", "stages computed/cached/failed", "shards computed", "rows out", "seconds"):
        table.add_column(col, justify="right" if col in ("rows out", "seconds") else "left")
    for c in summary["pipelines"]:
        t = totals([c], c["seconds"])  # the run's totals, for one pipeline
        by = t["stages"]
        table.add_row(c["pipeline"], c["run_id"] or "-", c["status"],
                      f"{by.get('computed', 0)}/{by.get('cached', 0)}/{by.get('failed', 0)}",
                      f"{t['shards_computed']}/{t['shards']}", f"{t['rows_out']:,}", f"{c['seconds']:.1f}")
    out.print(table)
    t = summary["totals"]
    out.print(f"shards: {t['shards_computed']:,} computed, {t['shards_cached']:,} cached of {t['shards']:,}; "
              f"rows out {t['rows_out']:,}; rejects {t['rejects']:,}; {t['seconds']:.1f} s", highlight=False)
    for f in t["failed_shards"]:
        what = f"{f['stage']}[{f['dataset']}] shard(s) {f['shards']}: {f['error']}"
        out.print(f"[red]failed:[/] {escape(what)}", highlight=False)  # [dataset] is no markup tag


@contextmanager
def _progress_bars() -> Iterator[None]:
    """Shards done per stage as rich progress bars, when stdout is a terminal."""
    if not out.is_terminal:
        yield
        return
    with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=out, transient=False) as bars:
        ids: dict[str, TaskID] = {}

        def show(label: str, done: int, total: int | None) -> None:
            if label not in ids:
                ids[label] = bars.add_task(escape(label), total=total)
            bars.update(ids[label], completed=done, total=total)

        with reporting(show):
            yield


def print_summary(summary: dict[str, Any]) -> None:
    table = Table(title=f"run {summary['run_id']}", title_justify="left")
    for col in ("stage", "dataset", "status", "shards", "rows in", "kept", "rejected", "dropped", "seconds"):
        table.add_column(col, justify="right" if col not in ("stage", "dataset", "status") else "left")
    for s in summary["stages"]:
        rows = s["rows_out"]
        table.add_row(s["stage"], s["dataset"] or "", s["status"], f"{s['shards_computed']}/{s['shards']} computed",
                      f"{s['rows_in']:,}", f"{rows.get('part', 0):,}", f"{rows.get('rejects', 0):,}",
                      f"{rows.get('dropped', 0):,}", f"{s['seconds']:.2f}")
    out.print(table)
    if "u_max" in summary:
        out.print(f"U_max = {summary['u_max']:.6f}")
    if "synthetic" in summary:
        out.print("synthetic pairs: " + ", ".join(f"{k} {v:,}" for k, v in summary["synthetic"].items()))
    if rj := summary.get("rejuvenation"):
        out.print(f"rejuvenation: {rj['active']:,} active, {rj['inactive']:,} inactive, {rj['rejuvenated']:,} rows in "
                  f"`rejuvenated`; {rj['unscored']['count']:,} pair(s) could not be scored (kept active)"
                  + (f": {', '.join(rj['unscored']['uids'])}" if rj["unscored"]["count"] else ""))
    if tn := summary.get("train_nmt"):
        for s in tn["evaluation"]:
            out.print(f"{s['metric']} = {s['score']:.2f} on {tn['testset']}  {s['signature']}", highlight=False)
    if pp := summary.get("paraphrase"):
        short = pp["shortfall"]
        out.print(f"paraphrase: {pp['candidates']:,} candidates, {pp['dropped']:,} dropped by Eq. 3, {pp['curriculum']:,} "
                  f"curriculum rows; {short['count']:,} sentence(s) short of the bag size"
                  + (f": {', '.join(short['rows'])}" if short["count"] else ""), highlight=False)
        for role, what in pp["ran"].items():
            out.print(f"  {role}: {what}", highlight=False)
    if tc := summary.get("train_classifier"):
        for s in tc["evaluation"]:
            out.print(f"{s['metric']} = {s['score']:.4f} on {tc['testset']} (schedule {tc['schedule']})  "
                      f"{s['signature']}", highlight=False)
    for name, path in summary.get("reports", {}).items():
        out.print(f"report {name}: {path}", highlight=False)


def _print_table(result, fmt: str) -> None:
    if fmt == "csv":
        import pyarrow.csv as pacsv

        sys.stdout.flush()
        pacsv.write_csv(result, sys.stdout.buffer)
    elif fmt == "json":
        for row in result.to_pylist():
            sys.stdout.write(json.dumps(row, default=str, ensure_ascii=False) + "\n")
    else:
        table = Table(show_lines=False)
        for name in result.column_names:
            table.add_column(name, overflow="fold")
        for row in result.to_pylist():
            table.add_row(*("" if v is None else str(v) for v in row.values()))
        out.print(table)
        out.print(f"[dim]{result.num_rows} row(s)[/]")


@app.command()
def run(
    pipeline: Annotated[str, typer.Argument(help=f"one of: {', '.join(PIPELINES)}")],
    config: Annotated[str, typer.Option("--config", "-c", help="a profile: a YAML path or a packaged name")] = "ingest",
    set_: SetOpt = [],
    cache: CacheOpt = None,
) -> None:
    """Run one pipeline over the datasets of a profile."""
    _choice("pipeline", pipeline, PIPELINES)
    try:
        conf = load_profile(config, set_, cache=cache)
        summary = _run_pipeline(pipeline, conf, config)
    except AugdagError as e:
        _fail(e)
    print_summary(summary)


@app.command()
def demo(
    cache: CacheOpt = None,
    set_: SetOpt = [],
    bitext_rows: Annotated[Optional[int], typer.Option(help="size of the demo bitext (default: the profile's)")] = None,
) -> None:
    """Generate the demo corpus, run the demo profile end to end, and show what to query."""
    try:
        sets = [*set_, *([f"demo.bitext_rows={bitext_rows}"] if bitext_rows is not None else [])]
        conf = load_profile("demo", sets, cache=resolve_cache(None, cache))  # data: <cache>/demo-data
        _run_nightly(conf, "demo")  # writes the demo data first where it is missing
    except AugdagError as e:
        _fail(e)
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
              "SELECT run_id, model_name, testset, metric, round(score, 4) AS score, signature FROM evaluations ORDER BY created_at"):
        out.print(f"  augdag sql{c} \"{q}\"", highlight=False, soft_wrap=True)  # one line: copy-pastable


@app.command()
def sql(
    query: Annotated[Optional[str], typer.Argument(help="a read-only SQL query over the catalog's tables and views "
                                                   "(none with --shell)")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | csv | json | parquet")] = "table",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="write the result to this file "
                                                   "(csv, json or parquet) instead of the terminal")] = None,
    shell: Annotated[bool, typer.Option("--shell", help="an interactive read-only loop: statements end with ;, "
                                        ".views, .schema NAME, .help, .quit")] = False,
    cache: CacheOpt = None,
) -> None:
    """Query the catalog (read-only: DDL, DML, ATTACH, COPY, INSTALL/LOAD and SET are refused, exit 2).

    With --shell, read statements from the terminal (or stdin) until .quit: a refused or failing one prints
    its error and the loop goes on."""
    _choice("--format", fmt, ("table", "csv", "json", "parquet"))
    if fmt == "parquet" and output is None:
        _fail(ConfError("--format parquet needs --output FILE (Parquet is not written to a terminal)"))
    if fmt == "table" and output is not None:
        _fail(ConfError("--output writes csv, json or parquet: add --format csv|json|parquet"))
    if shell:
        if query is not None or output is not None:
            _fail(ConfError("--shell reads its statements from the terminal: give no QUERY and no --output"))
        from flows.shell import sql_shell

        sql_shell(_catalog(cache), show=lambda result: _print_table(result, fmt),
                  error=lambda msg: err.print(f"[bold red]error:[/] {escape(msg)}", soft_wrap=True))
        return
    if query is None:
        _fail(ConfError("augdag sql: give a QUERY, or --shell for an interactive loop"))
    try:
        check_read_only(query)
        result = _catalog(cache).query(query, sandbox=True)
    except AugdagError as e:
        _fail(e)
    except Exception as e:  # a DuckDB error in the user's query is bad usage, not a failed run
        _fail(CatalogError(f"query failed: {e}"))
    if output is None:
        _print_table(result, fmt)
        return
    _write_result(result, fmt, output)
    err.print(f"wrote {result.num_rows:,} row(s) to {output}", highlight=False)


@app.command()
def views(
    name: Annotated[Optional[str], typer.Argument(help="a table or view: show its columns")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | json (json: one line per column, of NAME "
                                     "or of every table and view)")] = "table",
    cache: CacheOpt = None,
) -> None:
    """The catalog's tables and views with what they hold and their row counts; with NAME, its columns."""
    from storage.views_doc import catalog_columns, catalog_objects

    _choice("--format", fmt, ("table", "json"))
    catalog = _catalog(cache)
    try:
        if fmt == "json":
            result = catalog_columns(catalog, name)
        elif name is None:
            result = catalog_objects(catalog)
        else:
            result = catalog_columns(catalog, name).select(["column", "type", "description"])
    except AugdagError as e:
        _fail(e)
    _print_table(result, fmt)


def _write_result(result, fmt: str, output: Path) -> None:
    """The result as a file, written to a temporary name and renamed: an interrupted write leaves no half file."""
    import pyarrow.parquet as pq

    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        if fmt == "parquet":
            pq.write_table(result, tmp)
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            pacsv.write_csv(result, tmp)
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for row in result.to_pylist():
                    f.write(json.dumps(row, default=str, ensure_ascii=False) + "\n")
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)


@app.command()
def runs(limit: Annotated[int, typer.Option(help="how many recent runs")] = 10, cache: CacheOpt = None) -> None:
    """Recent runs: status, the run each retried, the error's last line, and per stage (and dataset, per
    fingerprint) its shards written (computed or cached) and failed of all it has."""
    catalog = _catalog(cache)
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
    where: Annotated[Optional[str], typer.Option(help="an SQL condition on the view's rows")] = None,
    cache: CacheOpt = None,
) -> None:
    """Export a view to Parquet, JSONL or line-aligned text files."""
    from storage.export import export_view

    _choice("--format", fmt, ("parquet", "jsonl", "text"))
    try:
        files = export_view(_catalog(cache), view, output, fmt=fmt, where=where)  # type: ignore[arg-type]
    except AugdagError as e:
        _fail(e)
    for f in files:
        out.print(f"wrote {f}")


# the operations commands live in their own modules and register on `app` when imported
from flows import cli_ops, cli_report  # noqa: E402,F401


def main() -> None:
    app()


if __name__ == "__main__":  # `python -m flows.cli`: the commands registered on the imported module's app
    from flows.cli import main as registered_main

    registered_main()
