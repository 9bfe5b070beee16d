"""The `augdag` commands that run a pipeline or read the catalog (`run`, `demo`, `sql`, `export`, `views`, `runs`,
...), and ``main``: parse, load a profile, call one flow, print.

Exit codes: 0 ok, 1 a run failed, 2 bad usage, configuration or input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from conf.cache_path import resolve_cache
from conf.errors import AugdagError, CatalogError, ConfError
from flows.cli.app import (
    CacheOpt,
    ConfigOpt,
    SetOpt,
    app,
    choice,
    err,
    existing_catalog_at,
    fail,
    out,
    print_table,
    shown,
)
from flows.cli.run import print_summary, run_nightly, run_pipeline
from flows.cli.screen import print_queries
from flows.engine import registry
from flows.ops.liveness import reap_for_listing
from storage.catalog import check_read_only
from storage.integrity import missing_part
from storage.output import MISSING_DIRS, check_target, descriptor, output_format, write_table


@app.command()
def run(
    pipeline: Annotated[str, typer.Argument(help=f"one of: {', '.join(registry.names())}")],
    config: ConfigOpt = "ingest",
    set_: SetOpt = [],  # noqa: B006 — typer's default, never mutated
    cache: CacheOpt = None,
) -> None:
    """Run one pipeline over the datasets of a profile."""
    from conf.loader import load_profile  # here: `augdag sql` and the other readers start without the profile's models

    choice("pipeline", pipeline, registry.names())
    try:
        conf = load_profile(config, set_, cache=cache, pipeline=pipeline)
        summary = run_pipeline(pipeline, conf, config)
    except AugdagError as e:
        fail(e)
    print_summary(summary)


@app.command()
def demo(
    cache: CacheOpt = None,
    set_: SetOpt = [],  # noqa: B006 — typer's default, never mutated
    bitext_rows: Annotated[int | None, typer.Option(help="size of the demo bitext (default: the profile's)")] = None,
) -> None:
    """Generate the demo corpus, run the demo profile end to end, and show what helped and what to query."""
    from conf.loader import load_profile

    try:
        sets = [*set_, *([f"demo.bitext_rows={bitext_rows}"] if bitext_rows is not None else [])]
        conf = load_profile("demo", sets, cache=resolve_cache(None, cache))  # data: <cache>/demo-data
        run_nightly(conf, "demo")  # writes the demo data first where it is missing
    except AugdagError as e:
        fail(e)
    print_queries(str(cache) if cache else None)  # after the night's verdicts and report page (flows/cli/screen.py)


SQL_FORMATS = ("table", "csv", "tsv", "json", "parquet")
FILE_HELP = (
    f"its format from its extension (.csv .tsv .json .jsonl .parquet) unless --format; {MISSING_DIRS}; "
    "an existing regular file is replaced, a FIFO or character device (/dev/null) written into, never replaced; "
    "- is standard output; a link is replaced only with --force; a directory, and any path inside the cache, never"
)
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="replace a symbolic link at --output (the link itself, never the file it points to; a link to a "
        "device or FIFO is refused)",
    ),
]
HEADER_HELP = "csv and tsv: a first line of column names (tsv: fields raw, never quoted; a tab or line break is refused)"


def warn_empty(why: str) -> None:
    """A result of 0 rows is said, on stderr: an empty file or table looks too much like success."""
    err.print(f"[yellow]warning:[/] 0 rows: {escape(why)}", highlight=False, soft_wrap=True)


TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        help="stop a query that runs longer than this many seconds (exit 1); default: $AUGDAG_QUERY_TIMEOUT, else none",
    ),
]


def check_timeout(timeout: float | None) -> None:
    """--timeout is a number of seconds > 0 (exit 2 otherwise)."""
    if timeout is not None and not 0 < timeout < float("inf"):
        fail(ConfError(f"--timeout: expected a number of seconds > 0, got {timeout:g}"))


def interrupted() -> None:
    """Ctrl-C stopped the query: one line, exit 130 (128 + SIGINT), as a shell reports it."""
    err.print("error: interrupted (Ctrl-C): the query was stopped", highlight=False, soft_wrap=True)
    raise typer.Exit(130)


@app.command(context_settings={"ignore_unknown_options": True})  # a QUERY that starts with a `--` comment
def sql(
    query: Annotated[
        str | None,
        typer.Argument(
            help="read-only SQL over the catalog's tables and views, one statement or several (each result is "
            "printed); it may start with a -- comment (none with --shell)"
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", "-f", help="table | csv | tsv | json | parquet (default: table, or with --output the file's extension)"
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help=f"write the result to this file instead of the terminal: {FILE_HELP}")
    ] = None,
    force: ForceOpt = False,
    header: Annotated[bool | None, typer.Option("--header/--no-header", help=f"{HEADER_HELP} [default: --header]")] = None,
    shell: Annotated[
        bool,
        typer.Option(
            "--shell",
            help="an interactive read-only loop: statements end with ;, .views, .schema NAME, .help, .quit "
            "(piped input: exit 1 when a statement failed)",
        ),
    ] = False,
    timeout: TimeoutOpt = None,
    cache: CacheOpt = None,
) -> None:
    """Query the catalog (read-only: DDL, DML, ATTACH, COPY, INSTALL/LOAD and SET are refused, exit 2).

    The query reads a snapshot of the catalog, so a run never waits for it; Ctrl-C stops it (exit 130), and so
    does --timeout (exit 1). With --shell, read statements from the terminal (or stdin) until .quit: a refused
    or failing one prints its error and the loop goes on. A query that selects no row says so on stderr (exit 0)."""
    if query is not None and query.startswith("-") and not any(c.isspace() for c in query):
        fail(ConfError(f"no such option: {query} (see `augdag sql --help`)"))  # a mistyped option, not a -- comment
    if fmt is not None:
        choice("--format", fmt, SQL_FORMATS)
    check_timeout(timeout)
    if shell:
        if query is not None or output is not None:
            fail(ConfError("--shell reads its statements from the terminal: give no QUERY and no --output"))
        from flows.cli.shell import sql_shell

        catalog = existing_catalog_at(cache)
        catalog.query_timeout_s = timeout
        failed = sql_shell(
            catalog,
            show=lambda result: print_table(result, fmt or "table"),
            error=lambda msg: err.print(f"[bold red]error:[/] {escape(shown(msg, lines=True))}", highlight=False, soft_wrap=True),
        )
        if failed and not sys.stdin.isatty():  # a script: its caller must see that it did not all run
            err.print(f"error: {failed} statement(s) failed", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        return
    if query is None:
        fail(ConfError("augdag sql: give a QUERY, or --shell for an interactive loop"))
    if output is None and fmt == "parquet":
        fail(ConfError("--format parquet needs --output FILE (Parquet is not written to a terminal)"))
    if output is not None and fmt == "table":
        fail(ConfError("--format table is for the terminal: --output writes csv, tsv, json or parquet"))
    try:
        fmt = (fmt or "table") if output is None else output_format(output, fmt, SQL_FORMATS[1:])
    except AugdagError as e:
        fail(e)
    if header is not None and fmt not in ("csv", "tsv"):
        fail(ConfError(f"--{'' if header else 'no-'}header is for csv and tsv, not {fmt}"))
    catalog = existing_catalog_at(cache)
    catalog.query_timeout_s = timeout
    try:
        if output is not None:
            check_target(output, force=force, cache=catalog.root)  # before the query: nothing is computed in vain
        statements = check_read_only(query)
        if output is not None and len(statements) > 1:
            raise ConfError(f"--output writes one result, and QUERY holds {len(statements)} statements")
        for statement in statements:
            result = catalog.query(statement, sandbox=True)
            if output is None:
                print_table(result, fmt, header=header is not False)
                if result.num_rows == 0:
                    warn_empty("the query selected nothing")
    except KeyboardInterrupt:
        interrupted()
    except AugdagError as e:
        fail(e)
    except Exception as e:  # a DuckDB error in the user's query is bad usage, not a failed run
        fail(missing_part(e) or CatalogError(f"query failed: {e}"))
    if output is None:
        return
    try:
        write_table(result, output, fmt, force=force, cache=catalog.root, header=header is not False)
    except AugdagError as e:
        fail(e)
    err.print(f"wrote {result.num_rows:,} row(s) to {escape(shown(str(output)))}", highlight=False, soft_wrap=True)
    if result.num_rows == 0:
        warn_empty("the query selected nothing")


@app.command()
def views(
    name: Annotated[str | None, typer.Argument(help="a table or view: show its columns")] = None,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="table | json (json: one line per column, of NAME or of every table and view)")
    ] = "table",
    cache: CacheOpt = None,
) -> None:
    """The catalog's tables and views with what they hold and their row counts; with NAME, its columns."""
    from storage.views.docs import catalog_columns, catalog_objects

    choice("--format", fmt, ("table", "json"))
    catalog = existing_catalog_at(cache)
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
def runs(
    limit: Annotated[int, typer.Option(help="how many recent runs")] = 10,
    stages: Annotated[
        bool,
        typer.Option(
            "--stages",
            help="each run's stages too: per stage (and dataset, per "
            "fingerprint) its shards written (computed or cached) and failed, rows out, "
            "seconds",
        ),
    ] = False,
    cache: CacheOpt = None,
) -> None:
    """Recent runs, one line each: run id, pipeline, profile, status, start, duration, stages done and failed,
    the run it retried or that retried it, and a failed run's last error line. --stages adds every stage."""
    from flows.cli.runs_listing import run_lines, stage_lines

    catalog = existing_catalog_at(cache)
    reap_for_listing(catalog)  # a running run whose process is gone becomes crashed (flows/ops/liveness.py)
    recent = catalog.query(
        "SELECT run_id, pipeline, profile, status, started_at, finished_at, summary FROM runs ORDER BY started_at DESC LIMIT $n",
        {"n": limit},
    ).to_pylist()
    if not recent:
        out.print(f"no runs in {escape(str(catalog.path))}", highlight=False, soft_wrap=True)
        return
    shards = catalog.query(
        "SELECT run_id, stage, dataset, fingerprint, count(DISTINCT shard) AS shards,"
        " count(*) FILTER (status = 'computed') AS computed, count(*) FILTER (status = 'cached') AS cached,"
        " count(*) FILTER (status = 'failed') AS failed, sum(rows_out) AS rows_out, round(sum(seconds), 2) AS seconds "
        "FROM stage_runs WHERE run_id IN (SELECT run_id FROM runs ORDER BY started_at DESC LIMIT $n) "
        "GROUP BY run_id, stage, dataset, fingerprint ORDER BY run_id, min(rowid)",
        {"n": limit},
    ).to_pylist()
    retried_by: dict[str, list[str]] = {}
    for row in catalog.query(
        "SELECT run_id, json_extract_string(summary, '$.retry_of') AS retry_of FROM runs "
        "WHERE json_extract_string(summary, '$.retry_of') IS NOT NULL ORDER BY started_at"
    ).to_pylist():
        retried_by.setdefault(row["retry_of"], []).append(row["run_id"])
    for line in (stage_lines if stages else run_lines)(recent, shards, retried_by):
        out.print(line, highlight=False, soft_wrap=True)  # plain text: no value is read as markup


@app.command()
def export(
    view: Annotated[str, typer.Argument(help="a catalog view: bitext, mono, labeled, slots, ...")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help=f"output file (text: a prefix, one file per column): {FILE_HELP}")
    ],
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-f", help="parquet | jsonl | csv | tsv | text (default: the --output file's extension)"),
    ] = None,
    where: Annotated[str | None, typer.Option(help="an SQL condition on the view's rows")] = None,
    force: ForceOpt = False,
    header: Annotated[
        bool | None,
        typer.Option(
            "--header/--no-header",
            help=f"{HEADER_HELP} [default: csv --header; tsv --no-header: the raw src<TAB>tgt lines Marian, "
            "OpusTrainer, fairseq and Moses read]",
        ),
    ] = None,
    timeout: TimeoutOpt = None,
    cache: CacheOpt = None,
) -> None:
    """Export a view to Parquet, JSON Lines, CSV/TSV (lists and structs as JSON) or line-aligned text files.

    TSV is what MT trainers read: raw src<TAB>tgt lines, no quoting, no header unless --header, NULL as an empty
    field; a value holding a tab or line break is refused with its row and column (exit 2). CSV is RFC 4180.
    The view and the condition are checked before any file or directory is made; the row count is printed
    (on stderr with -o -), and an export of no row says so on stderr (exit 0)."""
    from storage.export import EXPORT_FORMATS, export_view

    if fmt is not None:
        choice("--format", fmt, EXPORT_FORMATS)
    check_timeout(timeout)
    catalog = existing_catalog_at(cache)
    catalog.query_timeout_s = timeout
    try:
        done = export_view(catalog, view, output, fmt=fmt, where=where, force=force, header=header)
    except KeyboardInterrupt:
        interrupted()  # the file is not written: storage/output.py renames a finished temporary file only
    except AugdagError as e:
        fail(e)
    for f in done.files:  # beside the data on stdout (-o -) this line goes to stderr
        (err if descriptor(f) is not None else out).print(
            f"wrote {done.rows:,} row(s) to {escape(shown(str(f)))}", highlight=False, soft_wrap=True
        )
    if done.rows == 0:
        warn_empty("the query selected nothing (check the --where condition)" if where else f"the view {view} is empty")


# the operations and report commands live in their own modules and register on `app` when imported
import flows.cli.handoff  # noqa: E402, F401 — registers export-arm and import
import flows.cli.ops  # noqa: E402, F401 — registers nightly, retry, server, serve, deploy, schedules on `app`
import flows.cli.report  # noqa: E402, F401 — registers report and logs
import flows.cli.verify  # noqa: E402, F401 — registers verify
import flows.cli.why  # noqa: E402, F401 — registers why


def main() -> None:
    """`augdag`: click's usage errors (a missing argument, an unknown option) are one line and exit 2 like
    every other user mistake, not a framed panel."""
    from typer.exceptions import TyperException  # typer's own click: its UsageError derives from this

    try:
        code = app(standalone_mode=False, prog_name="augdag")
    except typer.Abort:  # Ctrl-C at a prompt
        raise SystemExit(130) from None
    except TyperException as e:
        ctx = getattr(e, "ctx", None)
        where = f" (see `{ctx.command_path} --help`)" if ctx else ""
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        err.print(f"error: {escape(shown(message))}{escape(shown(where))}", highlight=False, soft_wrap=True)
        raise SystemExit(getattr(e, "exit_code", 2)) from None
    except Exception as e:  # a part DuckDB finds deleted under a view (`views`, `why`, `export`): one line
        if (missing := missing_part(e)) is None:
            raise
        err.print(f"error: {escape(shown(str(missing), lines=True))}", highlight=False, soft_wrap=True)
        raise SystemExit(missing.exit_code) from None
    raise SystemExit(code if isinstance(code, int) else 0)
