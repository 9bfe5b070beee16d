"""Running a pipeline or the nightly from the CLI, and printing what it did (summaries, progress bars).

What is printed follows ``verbosity()`` (flows/cli/app.py): by default a progress line on a terminal (transient);
a run of one pipeline prints its stage table (less the stages that another pipeline made, cached here), its totals
line, its summary lines and report paths; a nightly prints a line per pipeline as it finishes, its totals in one
line, its failures, the verdict table and its report page (flows/cli/screen.py). With ``-q`` each run's totals line
and its summary lines, the nightly's totals and its failures; ``-v`` prints every stage table, summary line and the
nightly's table of pipelines besides, and the log (flows/engine/run_log.py). Counts are rows
(flows/engine/recording.py): a stage's rows in, kept and dropped, cached or not; a run's total is the rows of the views
its stages filled, per view, each artifact once (``view_rows``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from flows.cli.app import NORMAL, QUIET, VERBOSE, err, out, verbosity
from flows.cli.screen import announcing, hidden_stages, pipeline_line, print_verdicts
from flows.engine import registry
from flows.engine.counts import view_rows
from flows.engine.run_log import disk_full_as_error
from flows.ops.ephemeral import start_ephemeral_server
from tasks.runtime.progress import reporting

if TYPE_CHECKING:
    from conf.schema import AugdagConf


class DrainNotice(logging.Filter):
    """Drops Prefect's "Still processing items: N items remaining..." (a WARNING of ``EventsWorker``, and of
    ``APILogWorker`` alike): at interpreter exit Prefect drains these queue services
    (prefect/_internal/concurrency/services.py), which still send every item; the notice only says that it waits,
    and showed on stderr after about half the default-mode runs (issue 26)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for Prefect's "Still processing items" notice, True for every other record."""
        return not str(record.msg).startswith("Still processing items")


def quiet_prefect_exit() -> None:
    """Without ``-v``, the terminal is spared Prefect's notice that it drains its events and log workers at exit."""
    for name in ("EventsWorker", "APILogWorker"):  # the names Prefect's queue services log under: their classes'
        worker = logging.getLogger(name)
        if verbosity() < VERBOSE and not any(isinstance(f, DrainNotice) for f in worker.filters):
            worker.addFilter(DrainNotice())


def prepare(conf: AugdagConf) -> str | None:
    """Before Prefect is imported: results beside the artifacts, and the cache's server if one runs (its URL)."""
    from flows.ops.server import connect
    from storage.cache_root import keep_private

    keep_private(Path(conf.cache))  # what the run creates is no more readable than the cache directory
    quiet_prefect_exit()
    # Prefect's persisted task results live beside the artifacts they describe
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(Path(conf.cache).absolute() / "prefect-results"))
    if (url := connect(Path(conf.cache))) and verbosity() > QUIET:
        err.print(f"[dim]reporting to the Prefect server at {url}[/]", highlight=False)
    return url


def replayed(call: Callable[[], dict[str, Any]], conf: AugdagConf, server: str | None) -> dict[str, Any] | None:
    """A run whose every stage is cached, replayed without starting Prefect (flows/engine/replay.py); None when a
    stage would compute, or when the cache's server runs (the run then shows in its UI, at no start-up cost)."""
    from flows.engine.replay import replay

    if server or os.environ.get("AUGDAG_REPLAY", "1") == "0":
        return None
    return replay(call, Path(conf.cache))


@disk_full_as_error()  # a full disk: one line, exit 1
def run_pipeline(pipeline: str, conf: AugdagConf, profile: str) -> dict[str, Any]:
    """Run ``pipeline`` over ``conf`` under progress bars (replayed without Prefect when every stage is cached);
    returns its run summary. A missing input file is one line (exit 2) before Prefect starts."""
    from conf.loader import check_inputs, dump_conf  # here: the readers start without the profile's models

    check_inputs(conf)  # a missing input file: one line, exit 2, before Prefect starts
    server = prepare(conf)
    from flows.engine.runners import run_flow

    flow = registry.get(pipeline).load_flow()
    with progress_bars():
        if summary := replayed(lambda: flow.fn(conf, profile=profile, config=dump_conf(conf)), conf, server):
            return summary
        start_ephemeral_server()  # none configured: Prefect's temporary one, out of reach of a terminal's Ctrl-C
        return run_flow(flow, conf, profile=profile, config=dump_conf(conf))


@disk_full_as_error()  # a full disk: one line, exit 1
def run_nightly(conf: AugdagConf, profile: str, *, run_id: str | None = None) -> dict[str, Any]:
    """The nightly flow over ``conf`` (recorded by ``run_id`` when it is a retry); prints a line per pipeline as it
    finishes and the run's end (``print_nightly``), failed or not. The demo profile's data is written first when
    missing, and a missing input file is one line (exit 2) before the flow starts."""
    from conf.loader import check_inputs, dump_conf  # here: the readers start without the profile's models

    server = prepare(conf)
    from flows.engine import nightly
    from flows.engine.nightly import NightlyFailed, demo_data, import_if_side_by_side, nightly_body

    data = demo_data(profile, conf)
    if data is not None and verbosity() > QUIET:
        out.print(f"demo data {'written to' if data[1] else 'in'} {data[0]}", highlight=False)
    check_inputs(conf)
    end = {"conf": conf, "demo": data is not None}
    try:
        with progress_bars(), announcing() as said:
            call = lambda: nightly_body(profile=profile, cache=str(conf.cache), config=dump_conf(conf))  # noqa: E731
            summary = run_id is None and replayed(call, conf, server)
            if not summary:
                # as in run_pipeline; the model stack imported meanwhile when two pipelines will run at once
                start_ephemeral_server(meanwhile=lambda: import_if_side_by_side(conf))
                summary = nightly.nightly_flow(profile=profile, cache=str(conf.cache), config=dump_conf(conf), run_id=run_id)
    except NightlyFailed as e:
        print_nightly(e.summary, announced=said, **end)
        raise
    print_nightly(summary, announced=said, **end)
    return summary


def print_nightly(
    summary: dict[str, Any], conf: AugdagConf | None = None, *, announced: set[str] | None = None, demo: bool = False
) -> None:
    """A nightly run's end; only one line when it was skipped. By default: the line of each pipeline not
    ``announced`` as it finished (one skipped never runs), the warnings of each, one line of totals, the failed
    shards, then the verdict table and the report page (``print_verdicts``: what the size means for the ``demo``
    and its ``conf``). With ``-v`` every pipeline's summary (``print_summary``) and the table of pipelines before
    the totals line; with ``-q`` each pipeline's totals and summary lines, the title and the totals line."""

    if summary["status"] == "skipped":
        out.print(f"[yellow]nightly run skipped:[/] {summary['error']}", highlight=False)
        return
    title = f"nightly run {summary['run_id']} ({summary['profile']}): {summary['status']}"
    t = summary["totals"]
    if verbosity() == NORMAL:
        for child in summary["pipelines"]:
            if child["pipeline"] not in (announced or set()):
                out.print(escape(pipeline_line(child)), highlight=False, soft_wrap=True)
            warn(child)
        shards = f"shards: {t['shards_computed']:,} computed, {t['shards_cached']:,} cached of {t['shards']:,}"
        line = f"{title} in {t['seconds']:.1f} s; {shards}; rejects {t['rejects']:,}; dropped {t.get('dropped', 0):,}"
        out.print(escape(line), highlight=False, soft_wrap=True)
    else:
        for child in summary["pipelines"]:
            if child.get("stages"):
                print_summary(child)
        out.print(title, highlight=False) if verbosity() == QUIET else out.print(pipelines_table(summary, title))
        views = view_rows([s for c in summary["pipelines"] for s in c.get("stages", [])])
        out.print(f"{totals_line(t, views)}; {t['seconds']:.1f} s", highlight=False)
    for f in t["failed_shards"]:
        what = f"{f['stage']}[{f['dataset']}] shard(s) {f['shards']}: {f['error']}"
        out.print(f"[red]failed:[/] {escape(what)}", highlight=False)  # [dataset] is no markup tag
    if verbosity() > QUIET:
        print_verdicts(summary, conf, demo=demo)


def pipelines_table(summary: dict[str, Any], title: str) -> Table:
    """``-v``: a nightly's pipelines as a table: run, status, stages computed/cached/failed, shards computed, rows in
    the views each filled, seconds."""
    from flows.engine.nightly import totals

    table = Table(title=title, title_justify="left")
    for col in (
        "pipeline",
        "run",
        "status",
        "stages computed/cached/failed",
        "shards computed",
        "rows in the views it filled",
        "seconds",
    ):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for c in summary["pipelines"]:
        t = totals([c], c["seconds"])  # the run's totals, for one pipeline
        by = t["stages"]
        table.add_row(
            c["pipeline"],
            c["run_id"] or "-",
            c["status"],
            f"{by.get('computed', 0)}/{by.get('cached', 0)}/{by.get('failed', 0)}",
            f"{t['shards_computed']}/{t['shards']}",
            filled(view_rows(c.get("stages", []))),
            f"{c['seconds']:.1f}",
        )
    return table


def totals_line(t: dict[str, Any], views: dict[str, int]) -> str:
    """Shards computed and cached, rejects and dropped rows of ``flows.engine.nightly.totals`` (each artifact once), and
    the rows of the views the run filled (``view_rows``: each view's rows from this run, not the stages' outputs
    added up, which counts a row once per stage it passed), in one line."""
    return (
        f"shards: {t['shards_computed']:,} computed, {t['shards_cached']:,} cached of {t['shards']:,}; "
        f"rows in the views it filled: {filled(views)}; rejects {t['rejects']:,}; dropped {t.get('dropped', 0):,}"
    )


def filled(views: dict[str, int]) -> str:
    """``view_rows`` in words: ``bitext 3, mono 5``."""
    return ", ".join(f"{v} {n:,}" for v, n in views.items()) or "none"


@contextmanager
def progress_bars() -> Iterator[None]:
    """Shards done per stage as rich progress bars, when stdout is a terminal (none with ``-q``). By default they are
    a progress line: a stage's bar goes when its shards are done, and the last ones when the run ends (transient);
    ``-v`` keeps every bar on the screen."""
    if not out.is_terminal or verbosity() == QUIET:
        yield
        return
    keep = verbosity() == VERBOSE
    with Progress(
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
        transient=not keep,
    ) as bars:
        ids: dict[str, TaskID] = {}

        def show(label: str, done: int, total: int | None) -> None:
            if label not in ids:
                ids[label] = bars.add_task(escape(label), total=total)
            bars.update(ids[label], completed=done, total=total, visible=keep or total is None or done < total)

        with reporting(show):
            yield


def print_summary(summary: dict[str, Any]) -> None:
    """A pipeline run: its stage table (not with ``-q``; by default without the stages another pipeline made, cached
    here: ``hidden_stages``), its line of totals, its pipeline's summary lines (its registry entry) and, unless
    ``-q``, the paths of its reports."""
    from flows.engine.nightly import totals

    if verbosity() > QUIET:
        hidden = hidden_stages(summary) if verbosity() == NORMAL else {}
        out.print(stage_table(summary, hide=set(hidden)))
        if hidden:
            makers = ", ".join(sorted(set(hidden.values())))
            out.print(f"(and {len(hidden)} stage(s) cached from {makers}: -v lists them)", highlight=False)
    line = totals_line(totals([summary], 0), view_rows(summary["stages"]))
    out.print(f"run {summary['run_id']} {summary['status']}: {line}", highlight=False)
    for line in registry.summary_lines(summary):  # soft_wrap: a verdict line stays one line when piped (160 columns)
        out.print(line, highlight=False, soft_wrap=True)
    warn(summary)
    if verbosity() > QUIET:
        for name, path in summary.get("reports", {}).items():
            out.print(f"report {name}: {path}", highlight=False)


def warn(summary: dict[str, Any]) -> None:
    """A run's warnings on stderr, e.g. a filter that dropped most of its input (flows/engine/drop_warnings.py)."""
    for line in summary.get("warnings", []):
        err.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)


def stage_table(summary: dict[str, Any], *, hide: set[str] | frozenset[str] = frozenset()) -> Table:
    """A run's stages as a table: dataset, status, shards computed, rows in, kept, rejected, dropped and seconds; none
    whose fingerprint is in ``hide``."""
    table = Table(title=f"run {summary['run_id']}", title_justify="left")
    for col in ("stage", "dataset", "status", "shards", "rows in", "kept", "rejected", "dropped", "seconds"):
        table.add_column(col, justify="right" if col not in ("stage", "dataset", "status") else "left")
    for s in (
        s for s in summary["stages"] if s["fingerprint"] not in hide
    ):  # rows of the stage's input (recording.StageReport), a failed one's as written
        rows = s["rows_out"]
        kept, dropped = (rows.get("part", 0), rows.get("dropped", 0)) if s.get("kept") is None else (s["kept"], s["dropped"])
        table.add_row(
            escape(s["stage"]),
            escape(s["dataset"] or ""),
            s["status"],
            f"{s['shards_computed']}/{s['shards']} computed",
            f"{s['rows_in']:,}",
            f"{kept:,}",
            f"{rows.get('rejects', 0):,}",
            f"{dropped:,}",
            f"{s['seconds']:.2f}",
        )
    return table
