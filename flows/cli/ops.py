"""`augdag nightly | retry | server | serve | deploy | schedules`: running the product every night.

The commands register on the one `augdag` app (flows/cli/app.py) when flows/cli/commands.py imports this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from conf.cache_path import resolve_cache
from conf.errors import AugdagError, CatalogError, ConfError
from flows.cli.app import QUIET, CacheOpt, ConfigOpt, SetOpt, app, err, existing_catalog_at, fail, out, verbosity
from flows.cli.run import prepare, print_summary, run_nightly, run_pipeline
from flows.ops.lifecycle import supervise_in_own_group
from storage.catalog import Catalog

REPO = Path(__file__).resolve().parents[2]


@app.command()
def nightly(config: ConfigOpt = "nightly", set_: SetOpt = [], cache: CacheOpt = None) -> None:  # noqa: B006 — typer's default, never mutated
    """Run every pipeline of a profile now, as the nightly deployment does (one flow run, subflows per pipeline)."""
    from conf.loader import load_profile  # here: the readers (`augdag sql`, ...) start without the profile's models

    try:
        run_nightly(load_profile(config, set_, cache=cache), config)
    except AugdagError as e:  # a failed pipeline: its summary is printed first, then exit 1
        fail(e)


@app.command()
def retry(
    run_id: Annotated[str, typer.Argument(help="a run id from `augdag runs` (a pipeline or a nightly run)")],
    stage: Annotated[
        str | None, typer.Option("--stage", help="recompute this stage (S or S[dataset]) although its output exists")
    ] = None,
    start: Annotated[
        str | None,
        typer.Option(
            "--from", help="recompute this stage (S or S[dataset]) and what descends from it in the lineage, nothing else"
        ),
    ] = None,
    set_: SetOpt = [],  # noqa: B006 — typer's default, never mutated
    cache: CacheOpt = None,
) -> None:
    """Run a recorded run again: only failed or missing shards are computed (finished ones show as Cached).
    The new run records which run it retried (`augdag runs` shows the chain)."""
    from conf.loader import load_profile, load_recorded  # here: see nightly
    from flows.engine.retry import forced_artifacts, forcing
    from storage.runs import load_run

    catalog, new_run = existing_catalog_at(cache), None  # no catalog, no run to retry: exit 2, nothing created
    try:
        run = load_run(catalog, run_id)
        config = run["config"] or {}
        if config and set(config) <= {"profile", "overrides", "cache", "run_id"}:
            # it failed before its profile loaded (flows.engine.nightly records its parameters): load it anew
            conf = load_profile(config["profile"], [*(config.get("overrides") or []), *set_], cache=catalog.root)
        else:
            conf = load_recorded(config, set_, run_id=run_id, cache=catalog.root)
        forced = forced_artifacts(catalog, run, stage=stage, start=start)
        if forced and verbosity() > QUIET:
            err.print(f"recomputing: {', '.join(forced.values())}", highlight=False)
        with forcing(list(forced)):  # no Prefect import before here: _run_* configure it first
            if run["pipeline"] == "nightly":
                new_run = run_nightly(conf, run["profile"], run_id=run_id)["run_id"]
            else:
                summary = run_pipeline(run["pipeline"], conf, run["profile"])
                new_run = summary["run_id"]
                print_summary(summary)
    except AugdagError as e:
        new_run = getattr(e, "run_id", None) or (getattr(e, "summary", None) or {}).get("run_id")
        _record_retry(catalog, new_run, run_id)
        fail(e)
    _record_retry(catalog, new_run, run_id)


def _record_retry(catalog: Catalog, new_run: str | None, retry_of: str) -> None:
    """The retry chain: the new run (finished or failed) names the run it retried."""
    if new_run is not None and new_run != retry_of:
        from flows.engine.driver import record_retry

        record_retry(catalog.root, new_run, retry_of)


@app.command()
def server(
    host: Annotated[str, typer.Option(help="address to listen on (0.0.0.0 exposes the UI to the network)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port of the API and UI")] = 4200,
    reports_port: Annotated[
        int | None, typer.Option(help="port of <cache>/reports over HTTP, on 127.0.0.1 (default: --port + 1)")
    ] = None,
    allow_host: Annotated[
        list[str], typer.Option(help="another name a request's Host may hold (a DNS name, a proxy's); repeatable")
    ] = [],  # noqa: B006 — typer's default, never mutated
    cache: CacheOpt = None,
) -> None:
    """Start the Prefect server and UI for this cache (SQLite under <cache>/server), and serve its reports
    read-only over HTTP for the UI's links; Ctrl-C, SIGTERM or SIGHUP stops both. The API answers only its own
    UI (Host, Origin, CSRF); PREFECT_API_AUTH_STRING=user:password in the environment makes it ask for that too."""
    from flows.ops.server import run_server, state_dir

    root = resolve_cache(None, cache).absolute()
    auth = os.environ.get("PREFECT_SERVER_API_AUTH_STRING") or os.environ.get("PREFECT_API_AUTH_STRING")
    if host not in ("127.0.0.1", "localhost", "::1") and not auth:
        err.print(
            f"[yellow]warning:[/] listening on {host}: the UI and API have no authentication "
            "(set PREFECT_API_AUTH_STRING=user:password)",
            highlight=False,
        )

    def ready(url: str, reports: str) -> None:
        out.print(
            f"Prefect server and UI: {url.removesuffix('/api')}  (database {state_dir(root) / 'prefect.db'})\n"
            f"reports: {reports}/  (read-only, {root / 'reports'})\n"
            f"augdag commands with --cache {root} report to it; other clients: export PREFECT_API_URL={url}",
            highlight=False,
        )

    try:
        code = run_server(root, host=host, port=port, reports_port=reports_port, on_ready=ready, allow_hosts=allow_host)
    except AugdagError as e:
        fail(e)
    if code:
        fail(AugdagError(f"the Prefect server exited with code {code}; its log: {state_dir(root) / 'server.log'}"))


@app.command()
def serve(
    config: ConfigOpt = "nightly",
    set_: SetOpt = [],  # noqa: B006 — typer's default, never mutated
    cache: CacheOpt = None,
    name: Annotated[str, typer.Option(help="deployment name")] = "nightly",
    cron: Annotated[str | None, typer.Option(help="cron schedule (default: the profile's nightly.cron)")] = None,
    paused: Annotated[bool, typer.Option(help="register the schedule paused")] = False,
) -> None:
    """Serve the nightly flow on its cron schedule from this long-lived process (needs a Prefect server).

    The deployment records the profile, the overrides and the cache as absolute paths, and its
    description the data directories they resolve to: its runs do not depend on a working directory."""
    from conf.loader import load_profile  # here: the readers (`augdag sql`, ...) start without the profile's models

    try:
        supervise_in_own_group()  # Ctrl-C, SIGTERM and SIGHUP stop it and its flow-run processes (flows/ops/lifecycle.py)
        conf = load_profile(config, set_, cache=cache)
        prepare(conf)
        url = os.environ.get("PREFECT_API_URL")
        if not url:
            raise ConfError("serve needs a Prefect server: start `augdag server` (same --cache) or set PREFECT_API_URL")
        from flows.engine.schedules import deployment_parameters, describe, serve_nightly

        parameters = deployment_parameters(conf, profile=config, overrides=set_)
        out.print(
            f"serving nightly/{name}: {describe(conf, parameters)}\n"
            f"schedule {cron or conf.nightly.cron} ({conf.nightly.timezone}){' paused' if paused else ''}; "
            f"Ctrl-C stops serving. Run it now:\n"
            f"  PREFECT_API_URL={url} {Path(sys.executable).parent / 'prefect'} deployment run nightly/{name}",
            highlight=False,
            soft_wrap=True,
        )
        serve_nightly(conf, parameters=parameters, name=name, cron=cron, paused=paused)
    except AugdagError as e:
        fail(e)


@app.command()
def deploy(
    pool: Annotated[str, typer.Option(help="the work pool whose workers run the deployments")] = "augdag",
    prefect_file: Annotated[Path, typer.Option(help="deployment definitions")] = REPO / "prefect.yaml",
    config: Annotated[
        str | None,
        typer.Option("--config", "-c", help="record this profile (resolved here) instead of prefect.yaml's parameters"),
    ] = None,
    set_: SetOpt = [],  # noqa: B006 — typer's default, never mutated
    cache: CacheOpt = None,
) -> None:
    """Register the deployments of prefect.yaml (the nightly run, its cron schedule) with the Prefect API.

    Without --config/--set/--cache the deployment keeps prefect.yaml's parameters (the cache is then
    resolved on the worker); with any of them it records the profile and the cache resolved here, as
    absolute paths, and the data directories in its description."""
    from conf.loader import load_profile  # here: the readers (`augdag sql`, ...) start without the profile's models

    if not os.environ.get("PREFECT_API_URL"):
        fail(ConfError("deploy needs PREFECT_API_URL (a Prefect server; `augdag server` starts one)"))
    cmd = [
        str(Path(sys.executable).parent / "prefect"),
        "--no-prompt",
        "deploy",
        "--all",
        "--prefect-file",
        str(prefect_file),
        "--pool",
        pool,
    ]
    if config is not None or set_ or cache is not None:
        from flows.engine.schedules import deployment_parameters, describe

        try:
            conf = load_profile(config or "nightly", set_, cache=cache)
        except AugdagError as e:
            fail(e)
        parameters = deployment_parameters(conf, profile=config or "nightly", overrides=set_)
        cmd += ["--params", json.dumps(parameters), "--description", describe(conf, parameters)]
    raise typer.Exit(subprocess.run(cmd, cwd=prefect_file.parent).returncode)


@app.command()
def schedules(
    pause: Annotated[str | None, typer.Option(help="pause the schedules of this deployment")] = None,
    resume: Annotated[str | None, typer.Option(help="resume the schedules of this deployment")] = None,
    cache: CacheOpt = None,
) -> None:
    """List deployments with their schedules (cron, time zone, state, next scheduled run, concurrency),
    or pause/resume one."""
    from flows.ops.server import connect

    try:
        server = connect(resolve_cache(None, cache))  # a server that asks for an auth string we lack: one line
    except AugdagError as e:
        fail(e)
    if not server:
        fail(ConfError("no Prefect server: start `augdag server` (same --cache) or set PREFECT_API_URL"))
    from flows.engine.schedules import list_schedules, set_active

    try:
        if pause or resume:
            set_active(pause or resume, active=bool(resume))
        rows = list_schedules()
    except AugdagError as e:
        fail(e)
    if not rows:
        out.print("no deployments")
        return
    table = [("deployment", "cron", "timezone", "state", "next run", "concurrency")]
    table += [
        (
            r["deployment"],
            r["cron"] or "-",
            r["timezone"] or "-",
            "active" if r["active"] else "paused",
            _when(r["next_run"], r["timezone"]),
            r["concurrency"],
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        out.print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1], highlight=False)


def _when(at: datetime | None, timezone: str | None) -> str:
    """A run's expected start in the schedule's time zone, to the minute; '-' for none."""
    if at is None:
        return "-"
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    with contextlib.suppress(ZoneInfoNotFoundError):
        at = at.astimezone(ZoneInfo(timezone or "UTC"))
    return at.strftime("%Y-%m-%d %H:%M %Z")


@app.command()
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would be removed, remove nothing")] = False,
    cache: CacheOpt = None,
) -> None:
    """Remove what crashed writers left: artifacts without a manifest (in the cache and on its object store), models on
    the store without theirs, temporary files of dead processes. Complete artifacts stay (they are the cache). Refused
    while a run is running on the cache."""
    from conf.sections.storage import StorageConf, artifacts_store
    from flows.ops.gc import collect, unfinished
    from flows.ops.liveness import reap_for_listing
    from storage.cache_root import store_prefixes

    catalog = existing_catalog_at(cache)
    reap_for_listing(catalog)  # a run whose process is gone is crashed, not running
    running = catalog.query("SELECT run_id, host, pid FROM runs WHERE status = 'running' ORDER BY run_id").to_pylist()
    if running:
        r = running[0]
        fail(
            CatalogError(
                f"gc: run {r['run_id']} is running on {catalog.root} (pid {r['pid']} on {r['host']}): its parts have no "
                "manifest yet and gc would remove them. Run `augdag gc` when `augdag runs` shows no run running"
            )
        )
    paths = catalog.query("SELECT DISTINCT path FROM artifacts WHERE contains(path, '://')")["path"].to_pylist()
    try:
        named = artifacts_store(StorageConf())  # $AUGDAG_ARTIFACTS: a store no finished artifact names yet
    except ValueError as e:
        fail(ConfError(str(e)))
    stores = {p.rstrip("/") for p in store_prefixes(paths)} | ({named} if named else set())
    garbage = unfinished(catalog.root, stores)
    if not dry_run:
        collect(garbage)
    verb = "would remove" if dry_run else "removed"
    for g in garbage:
        out.print(f"{verb} {g.what} {g.location} ({g.files} file(s), {g.bytes:,} bytes)", highlight=False, soft_wrap=True)
    total = sum(g.bytes for g in garbage)
    out.print(f"gc: {verb} {len(garbage)} item(s), {total:,} bytes; complete artifacts kept", highlight=False, soft_wrap=True)
