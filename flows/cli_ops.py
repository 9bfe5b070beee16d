"""`augdag nightly | retry | server | serve | deploy | schedules`: running the product every night.

The commands register on the one `augdag` app (imported at the end of flows/cli.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from conf.errors import AugdagError, ConfError
from conf.loader import load_profile, load_recorded
from conf.schema import resolve_cache
from flows.cli import CacheOpt, SetOpt, _catalog, _fail, _prepare, _run_nightly, _run_pipeline, app, err, out, print_summary

REPO = Path(__file__).resolve().parents[1]
ConfigOpt = Annotated[str, typer.Option("--config", "-c", help="a profile: a YAML path or a packaged name")]


@app.command()
def nightly(config: ConfigOpt = "nightly", set_: SetOpt = [], cache: CacheOpt = None) -> None:
    """Run every pipeline of a profile now, as the nightly deployment does (one flow run, subflows per pipeline)."""
    try:
        _run_nightly(load_profile(config, set_, cache=cache), config)
    except AugdagError as e:  # a failed pipeline: its summary is printed first, then exit 1
        _fail(e)


@app.command()
def retry(
    run_id: Annotated[str, typer.Argument(help="a run id from `augdag runs` (a pipeline or a nightly run)")],
    stage: Annotated[Optional[str], typer.Option("--stage", help="recompute this stage although its output exists")] = None,
    start: Annotated[Optional[str], typer.Option("--from", help="recompute this stage and everything downstream")] = None,
    set_: SetOpt = [],
    cache: CacheOpt = None,
) -> None:
    """Run a recorded run again: only failed or missing shards are computed (finished ones show as Cached)."""
    from flows.driver import forcing
    from flows.retry import forced_stages
    from flows.run_report import load_run

    try:
        catalog = _catalog(cache)
        run = load_run(catalog, run_id)
        conf = load_recorded(run["config"], set_, run_id=run_id, cache=catalog.root)
        forced = forced_stages(catalog, run, stage=stage, start=start)
        if forced:
            err.print(f"recomputing: {', '.join(forced)}", highlight=False)
        _prepare(conf)
        with forcing(forced):
            if run["pipeline"] == "nightly":
                _run_nightly(conf, run["profile"])
            else:
                print_summary(_run_pipeline(run["pipeline"], conf, run["profile"]))
    except AugdagError as e:
        _fail(e)


@app.command()
def server(
    host: Annotated[str, typer.Option(help="address to listen on (0.0.0.0 exposes the UI to the network)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port of the API and UI")] = 4200,
    cache: CacheOpt = None,
) -> None:
    """Start the Prefect server and UI for this cache (SQLite under <cache>/server); Ctrl-C stops it."""
    from flows.server import forget, start_server, state_dir

    root = resolve_cache(None, cache).absolute()
    if host not in ("127.0.0.1", "localhost", "::1"):
        err.print(f"[yellow]warning:[/] listening on {host}: the UI and API have no authentication", highlight=False)
    try:
        proc, url = start_server(root, host=host, port=port, log=state_dir(root) / "server.log")
    except AugdagError as e:
        _fail(e)
    out.print(f"Prefect server and UI: {url.removesuffix('/api')}  (database {state_dir(root) / 'prefect.db'})\n"
              f"augdag commands with --cache {root} report to it; other clients: export PREFECT_API_URL={url}",
              highlight=False)
    try:
        proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait(timeout=30)
    finally:
        forget(root)


@app.command()
def serve(
    config: ConfigOpt = "nightly",
    set_: SetOpt = [],
    cache: CacheOpt = None,
    name: Annotated[str, typer.Option(help="deployment name")] = "nightly",
    cron: Annotated[Optional[str], typer.Option(help="cron schedule (default: the profile's nightly.cron)")] = None,
    paused: Annotated[bool, typer.Option(help="register the schedule paused")] = False,
) -> None:
    """Serve the nightly flow on its cron schedule from this long-lived process (needs a Prefect server)."""
    try:
        conf = load_profile(config, set_, cache=cache)
        _prepare(conf)
        if not os.environ.get("PREFECT_API_URL"):
            raise ConfError("serve needs a Prefect server: start `augdag server` (same --cache) or set PREFECT_API_URL")
        from flows.schedules import serve_nightly

        serve_nightly(conf, profile=config, overrides=set_, name=name, cron=cron, paused=paused)
    except AugdagError as e:
        _fail(e)


@app.command()
def deploy(
    pool: Annotated[str, typer.Option(help="the work pool whose workers run the deployments")] = "augdag",
    prefect_file: Annotated[Path, typer.Option(help="deployment definitions")] = REPO / "prefect.yaml",
) -> None:
    """Register the deployments of prefect.yaml (the nightly run, its cron schedule) with the Prefect API."""
    if not os.environ.get("PREFECT_API_URL"):
        _fail(ConfError("deploy needs PREFECT_API_URL (a Prefect server; `augdag server` starts one)"))
    cmd = [str(Path(sys.executable).parent / "prefect"), "--no-prompt", "deploy", "--all",
           "--prefect-file", str(prefect_file), "--pool", pool]
    raise typer.Exit(subprocess.run(cmd, cwd=prefect_file.parent).returncode)


@app.command()
def schedules(
    pause: Annotated[Optional[str], typer.Option(help="pause the schedules of this deployment")] = None,
    resume: Annotated[Optional[str], typer.Option(help="resume the schedules of this deployment")] = None,
    cache: CacheOpt = None,
) -> None:
    """List deployments with their schedules (cron, time zone, active), or pause/resume one."""
    from flows.server import connect

    if not connect(resolve_cache(None, cache)):
        _fail(ConfError("no Prefect server: start `augdag server` (same --cache) or set PREFECT_API_URL"))
    from flows.schedules import list_schedules, set_active

    try:
        if pause or resume:
            set_active(pause or resume, active=bool(resume))
        rows = list_schedules()
    except AugdagError as e:
        _fail(e)
    if not rows:
        out.print("no deployments")
    for r in rows:
        out.print(f"{r['deployment']:<28} {r['cron'] or '-':<16} {r['timezone'] or '':<16} "
                  f"{'active' if r['active'] else 'paused'}  concurrency {r['concurrency']}", highlight=False)
