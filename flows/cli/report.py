"""`augdag report RUN [--compare OTHER]` and `augdag logs RUN [--stage S]`: what a run did, as one
self-contained HTML page (or two runs side by side), or as its log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from conf.errors import AugdagError, CatalogError
from flows.cli.app import CacheOpt, app, existing_catalog_at, fail, out, shown
from flows.engine.run_log import log_path, log_records, record_stages, stage_records


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="a run id (see `augdag runs`); a nightly run covers its pipelines")],
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare", help="another run id: a page of what changed (counts, distributions, evaluation scores), older run first"
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="the HTML file (default: <cache>/reports/RUN/run.html or compare-A-vs-B.html)"),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="replace a symbolic link at --output (the link itself, never the file it points to)"),
    ] = False,
    cache: CacheOpt = None,
) -> None:
    """Write a run's report (stages, failures, scores, every plot) as one HTML page that needs no network; for a
    nightly run also the night's page, <cache>/reports/RUN/index.html (pipelines, effects, examples, drops)."""
    from flows.reports.night_report import write_night_report
    from flows.reports.run_report import write_report
    from storage.runs import load_run

    catalog = existing_catalog_at(cache)
    try:
        path = write_report(catalog, run_id, compare=compare, output=output, force=force)
        night = (
            write_night_report(catalog, run_id)
            if compare is None and load_run(catalog, run_id)["pipeline"] == "nightly"
            else None
        )
    except AugdagError as e:
        fail(e)
    out.print(f"wrote {path}", highlight=False, soft_wrap=True)
    if night is not None:
        out.print(f"wrote {night} (the night's page)", highlight=False, soft_wrap=True)


@app.command()
def logs(
    run_id: Annotated[str, typer.Argument(help="a run id (see `augdag runs`); a nightly run's log has its pipelines'")],
    stage: Annotated[
        str | None,
        typer.Option(
            "--stage", help="only the lines of this stage or model (its shards, e.g. clean-00003, or a training: --stage student)"
        ),
    ] = None,
    cache: CacheOpt = None,
) -> None:
    """Print a run's log (<cache>/logs/RUN.log): Prefect's records, fairseq's training output and tracebacks,
    which the terminal shows only with -v."""
    from storage.runs import load_run

    catalog = existing_catalog_at(cache)
    path = log_path(catalog.root, run_id)
    try:
        if not path.is_file():
            load_run(catalog, run_id)  # an unknown run: exit 2, naming the recent ones
            raise CatalogError(f"{path}: no log for run {run_id!r}: it is written by the process that ran it")
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        records = list(log_records(lines) if stage is None else stage_records(lines, stage))
        if stage is not None and not records:
            named = sorted({s for r in log_records(lines) for s in record_stages(r[0])})
            raise CatalogError(f"{path}: no line of stage {stage!r}; the stages in it: {', '.join(named) or 'none'}")
    except AugdagError as e:
        fail(e)
    terminal = sys.stdout.isatty()  # a line of a user's corpus may hold ESC sequences: shown escaped, piped as it is
    sys.stdout.writelines((shown(line) if terminal else line) + "\n" for record in records for line in record)
