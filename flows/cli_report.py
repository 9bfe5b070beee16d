"""`augdag report RUN [--compare OTHER]`: a run, or two runs side by side, as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from conf.errors import AugdagError
from flows.cli_app import CacheOpt, app, catalog_at, fail, out


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="a run id (see `augdag runs`); a nightly run covers its pipelines")],
    compare: Annotated[str | None, typer.Option("--compare", help="another run id: a page of what changed "
                                                   "(counts, distributions, evaluation scores), older run first")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="the HTML file (default: "
                                                   "<cache>/reports/RUN/run.html or compare-A-vs-B.html)")] = None,
    cache: CacheOpt = None,
) -> None:
    """Write a run's report (stages, failures, scores, every plot) as one HTML page that needs no network."""
    from flows.run_report import write_report

    try:
        path = write_report(catalog_at(cache), run_id, compare=compare, output=output)
    except AugdagError as e:
        fail(e)
    out.print(f"wrote {path}", highlight=False, soft_wrap=True)
