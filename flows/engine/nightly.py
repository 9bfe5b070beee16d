"""The nightly run: every pipeline a profile enables, over every dataset in it, as one Prefect flow.

The pipelines run as subflows in dependency order (each one's ``reads`` in flows/engine/registry.py), independent
ones side by side (``nightly.parallel``): ingest first; self_training, rejuvenation and paraphrase read its views (and
share one teacher training, which the driver trains once); train_nmt reads the synthetic and
rejuvenated pairs, train_classifier the curriculum. A pipeline whose upstream failed is skipped; the
others go on, and the run fails at the end with every failure named.

The whole run holds ``<cache>/nightly.lock``. A run that starts while the previous one still holds it
is skipped or waits for it (``nightly.overlap``): two nights never write one cache at once. (Two
writers would not corrupt it, since every file is committed by rename and the catalog is locked, but
they would compute the same shards twice.)

The run is recorded in the catalog as pipeline ``nightly``; its summary holds every pipeline's own
summary (stages, rows, cached vs computed shards, models, failures) and the totals.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import itertools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from conf.errors import AugdagError, ConfError, StageError
from conf.loader import (
    check_inputs,
    dump_conf,
    is_packaged,
    load_profile,
    load_recorded,
    profile_path,
)
from conf.schema import CACHE_ENV, AugdagConf
from demo import write_demo
from flows.engine import registry
from flows.engine.driver import Run
from flows.engine.imports import import_ahead
from flows.engine.replay import REPLAY, NotCached, run_logger
from flows.engine.runners import PipelineFlow, run_flow
from flows.engine.runners.parameters import parameters_at_rest

# the night's page (flows/reports/reporting.py), imported by name when a night ends: the reports are a layer above the
# engine (pyproject's import contracts), as the pipelines' flows are, which the registry imports by name too
NIGHT_PAGE = "flows.reports.reporting:publish_night"


class NightlyFailed(StageError):
    """One or more pipelines of a nightly run failed; ``summary`` is the recorded run summary."""

    def __init__(self, message: str, summary: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


def pipeline_flow(name: str) -> PipelineFlow:
    """The flow of a registered pipeline, imported when asked for (each pulls in its own model stack): a
    ``PipelineFlow``, or a plug-in's own Prefect flow (``run_flow`` runs either)."""
    return registry.get(name).load_flow()


def totals(children: Sequence[Mapping[str, Any]], seconds: float) -> dict[str, Any]:
    """The run-level counts: pipelines by status; stages (artifacts and models) by status, their shards
    computed vs cached, rows in and out, rejects. Each artifact and model counts once, however many
    pipelines used it: a pipeline that reads another's output again finds it cached, and counting that
    too would count its rows twice (``once``)."""
    stages = once([s for c in children for s in c.get("stages", [])])
    done = [s for s in stages if s["status"] != "failed"]

    def count(items, key):
        return {k: sum(i[key] == k for i in items) for k in sorted({i[key] for i in items})}

    return {
        "pipelines": count(children, "status"),
        "stages": count(stages, "status"),
        "shards": sum(s["shards"] for s in done),
        "shards_computed": sum(s["shards_computed"] for s in done),
        "shards_cached": sum(s["shards"] - s["shards_computed"] for s in done),
        "rows_in": sum(s["rows_in"] for s in done),
        "rows_out": sum(s["rows_out"].get("part", 0) for s in done),
        "rejects": sum(s["rows_out"].get("rejects", 0) for s in done),
        "dropped": sum(s["rows_out"].get("dropped", 0) for s in done),
        "failed_shards": [
            {"stage": s["stage"], "dataset": s["dataset"], "shards": s["failed_shards"], "error": s["error"]}
            for s in stages
            if s["status"] == "failed"
        ],
        "seconds": round(seconds, 3),
    }


def once(stages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One stage report per fingerprint, in order of first use: where it was computed (or failed) if it
    was, else its first cached use."""
    rank = {"computed": 0, "failed": 1}
    best: dict[str, Mapping[str, Any]] = {}
    for s in stages:
        if s["fingerprint"] not in best or rank.get(s["status"], 2) < rank.get(best[s["fingerprint"]]["status"], 2):
            best[s["fingerprint"]] = s
    return list(best.values())


def import_stack() -> None:
    """``import_ahead`` (flows/engine/imports.py), timed in the run log."""
    t = time.perf_counter()
    missing = import_ahead()
    run_logger().info(
        "imported the model stack in %.1f s before running pipelines side by side%s",
        time.perf_counter() - t,
        f" (not installed: {', '.join(missing)})" if missing else "",
    )


def _failed_child(run: Run, name: str, since: datetime, error: BaseException) -> dict[str, Any]:
    """What a failed pipeline recorded before it raised (its run finishes itself as failed)."""
    rows = run.catalog.query(
        "SELECT run_id, summary FROM runs WHERE pipeline = $p AND started_at >= $t ORDER BY started_at DESC LIMIT 1",
        {"p": name, "t": since.replace(tzinfo=None)},
    ).to_pylist()
    recorded = json.loads(rows[0]["summary"]) if rows and rows[0]["summary"] else {}
    return {
        "run_id": rows[0]["run_id"] if rows else None,
        "stages": [],
        **recorded,
        "status": "failed",
        "error": f"{type(error).__name__}: {error}",
    }


def side_by_side(conf: AugdagConf) -> bool:
    """Whether a nightly over ``conf`` runs two pipelines at once at some point (``run_pipelines`` then calls its
    ``prepare`` first): ``nightly.parallel`` above 1 and two enabled pipelines neither of which waits for the other."""
    if conf.nightly.parallel < 2:
        return False
    enabled = list(dict.fromkeys(conf.pipelines))
    deps = registry.depends(enabled, conf)
    up = {p: registry.upstream(p, deps) for p in enabled}
    return any(q not in up[p] and p not in up[q] for p, q in itertools.combinations(enabled, 2))


def import_if_side_by_side(conf: AugdagConf) -> None:
    """``import_ahead`` now when a nightly over ``conf`` will need it (``side_by_side``): the CLI calls it while
    Prefect's temporary server starts (flows/ops/ephemeral.py), and ``import_stack`` then finds it done. When a
    pipeline of the night trains models in forks (its registry entry's ``forks``), the warm process they fork from
    (models/nmt/fairseq_zygote.py) starts first: its own import of fairseq overlaps with both."""
    if side_by_side(conf):
        if any(registry.REGISTRY[p].forks for p in conf.pipelines if p in registry.REGISTRY):
            from models.nmt.fairseq_train import warm_up

            warm_up()
        import_ahead()


def run_pipelines(
    pipelines: Sequence[str],
    parallel: int,
    run_one: Callable[[str], dict[str, Any]],
    prepare: Callable[[], object] | None = None,
    conf: AugdagConf | None = None,
) -> list[dict[str, Any]]:
    """Every pipeline once, each after those of ``pipelines`` it depends on, ``parallel`` at once.
    Returns their summaries in the given order (``status`` skipped when an upstream did not complete).
    A free slot goes to the first ready pipeline in the profile's order, decided when the slot frees: a pipeline
    that becomes ready late (train_nmt, after the pipelines it reads) is not queued behind every one that was
    ready before it (the pool's own queue is first come, first served: the demo's train_nmt, its longest, waited
    for epida there). ``prepare`` is called once, in this thread, before two pipelines first run at once (not at
    all when none ever do): the nightly imports the stage code's model stack there (flows/engine/imports.py).
    With the profile ``conf``, a pipeline also waits for those that fill the views its SQL reads (``depends``)."""
    enabled = list(dict.fromkeys(pipelines))
    deps = registry.depends(enabled, conf)
    results: dict[str, dict[str, Any]] = {}
    running: dict[Future, str] = {}
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="nightly") as pool:
        while len(results) < len(enabled):
            ready = []
            for p in enabled:
                if p in results or p in running.values():
                    continue
                blocked = [d for d in deps[p] if d in results and results[d]["status"] != "completed"]
                if blocked:
                    results[p] = {
                        "pipeline": p,
                        "run_id": None,
                        "status": "skipped",
                        "seconds": 0.0,
                        "stages": [],
                        "error": f"upstream pipeline(s) {', '.join(blocked)} did not complete",
                    }
                elif all(d in results for d in deps[p]):
                    ready.append(p)
            ready = ready[: max(0, parallel - len(running))]
            if prepare is not None and parallel > 1 and len(running) + len(ready) > 1:
                prepare()
                prepare = None
            for p in ready:  # a copy of this thread's context: the pipeline runs as a subflow of the nightly flow run
                running[pool.submit(contextvars.copy_context().run, run_one, p)] = p
            if not running:
                continue
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                results[running.pop(future)] = future.result()
    return [results[p] for p in enabled]


def nightly(conf: AugdagConf, *, profile: str, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The body of the nightly flow (see the module docstring). Raises ``NightlyFailed`` after recording
    the summary when a pipeline failed."""
    logger = run_logger()
    lock_path = Path(conf.cache).absolute() / "nightly.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path)
    wait_s = 0 if conf.nightly.overlap == "skip" else conf.nightly.wait_timeout_s
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if conf.nightly.overlap != "wait":
                raise
            logger.info(
                "waiting up to %.0f s for the previous nightly run to release %s (nightly.overlap: wait)", wait_s, lock_path
            )
            lock.acquire(timeout=wait_s)
    except Timeout:
        if conf.nightly.overlap == "skip":
            logger.warning("skipped: the previous nightly run still holds %s (nightly.overlap: skip)", lock_path)
            return {
                "run_id": None,
                "pipeline": "nightly",
                "profile": profile,
                "status": "skipped",
                "error": f"the previous run still holds {lock_path}",
                "pipelines": [],
                "stages": [],
            }
        raise StageError(
            f"nightly: waited {wait_s:.0f} s for the previous run to release {lock_path} "
            "(nightly.wait_timeout_s); nothing was run"
        ) from None
    try:
        t0 = time.perf_counter()
        config = dict(config or dump_conf(conf))
        with Run.started(conf, pipeline="nightly", profile=profile, config=config) as run:

            def run_one(name: str) -> dict[str, Any]:
                since, t = datetime.now(UTC), time.perf_counter()
                try:
                    child = run_flow(pipeline_flow(name), conf, profile=profile, config=config)
                except NotCached:  # a replayed night (flows/engine/replay.py) goes to Prefect
                    raise
                except Exception as e:  # noqa: BLE001 — recorded, and the nightly fails at the end
                    logger.error("pipeline %s failed: %s", name, e)
                    child = _failed_child(run, name, since, e)
                models = [
                    {"name": s["stage"], "fingerprint": s["fingerprint"], "status": s["status"]}
                    for s in child.get("stages", [])
                    if s.get("kind") == "model"
                ]
                done = {**child, "pipeline": name, "seconds": round(time.perf_counter() - t, 3), "models": models}
                registry.finished(done)  # the CLI prints its line now (flows/cli/screen.py)
                return done

            for name in conf.pipelines:  # imported here, one after another: two threads importing modules that
                pipeline_flow(name)  # import each other can see one half-initialised (ImportError)
            children = run_pipelines(
                conf.pipelines,
                conf.nightly.parallel,
                run_one,
                prepare=None if REPLAY.get() is not None else import_stack,
                conf=conf,
            )
        failed = [c for c in children if c["status"] != "completed"]
        error = None
        if failed:
            error = StageError("; ".join(f"{c['pipeline']} {c['status']}: {c['error']}" for c in failed))
        module, _, name = NIGHT_PAGE.partition(":")
        page = getattr(importlib.import_module(module), name)(
            run, children, profile=profile, status="failed" if failed else "completed"
        )
        extra = {"profile": profile, "pipelines": children, "totals": totals(children, time.perf_counter() - t0)}
        summary = run.finish(error=error, extra={**extra, **page})  # night_page (and its URL while served)
    finally:
        lock.release()
    if error is not None:
        raise NightlyFailed(f"nightly run {summary['run_id']}: {error}", summary)
    return summary


def demo_data(profile: str, conf: AugdagConf) -> tuple[Path, bool] | None:
    """For the packaged demo profile: its data directory (``<cache>/demo-data`` unless ``AUGDAG_DEMO_DATA``
    says otherwise), written with the profile's seeded ``demo:`` sizes when a file is missing or they
    changed (``demo.json`` beside the data records them). Returns (directory, written), or None for any
    other profile, or when the datasets were pointed at more than one directory."""
    try:
        path = profile_path(profile)
    except ConfError:  # a retried run's profile file may be gone: its recorded configuration is what runs
        return None
    if not (is_packaged(path) and path.name == "demo.yaml"):
        return None
    dirs = {p.parent if isinstance(p, Path) else None for ds in conf.datasets.values() for p in ds.files()}
    if len(dirs) != 1 or None in dirs:
        return None
    root = dirs.pop()
    settings, marker = conf.demo.model_dump(), root / "demo.json"
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(root.with_name(root.name + ".lock")):  # two runs at once: one writes, the other finds it
        present = all(p.is_file() for ds in conf.datasets.values() for p in ds.files())
        if present and (not marker.is_file() or json.loads(marker.read_text(encoding="utf-8")) == settings):
            return root, False
        write_demo(root, **settings)  # deterministic: the same settings write the same bytes
        marker.write_text(json.dumps(settings), encoding="utf-8")
    return root, True


def _record_load_failure(error: AugdagError, cache: Path, *, profile: str, parameters: dict) -> None:
    """A run that failed before it started (bad profile, missing input) as a failed nightly run in the
    catalog; its recorded configuration is the flow's parameters (there is no valid one)."""
    try:
        run = Run.start(AugdagConf(cache=cache), pipeline="nightly", profile=profile, config=parameters)
        run.finish(error=error, extra={"profile": profile, "pipelines": [], "totals": totals([], 0.0)})
    except Exception as e:  # noqa: BLE001 — the error to report is the one that stopped the run
        run_logger().warning("could not record the failed run in %s: %s", cache, e)


def nightly_body(
    profile: str = "nightly",
    overrides: list[str] | None = None,
    cache: str | None = None,
    config: dict | None = None,
    run_id: str | None = None,
) -> dict:
    """Every pipeline of ``profile`` (a packaged name or a YAML path) with ``overrides`` ("a.b=value"),
    over ``cache``; or, when ``config`` is given, over that configuration (a run's recorded one, for
    `augdag retry` of run ``run_id``, or the one `augdag nightly` loaded). Parameters are plain JSON:
    a deployment's runs pass them through the API. The demo profile's data is written when missing
    (``demo_data``); a missing input fails the run before any stage, as a failed run in the catalog."""
    parameters = {"profile": profile, "overrides": overrides or [], "cache": cache, "run_id": run_id}
    known = cache or os.environ.get(CACHE_ENV)  # where a failure is recorded before the profile is read
    root = Path(known) if known else None
    try:
        if config is None:
            conf = load_profile(profile, overrides or [], cache=Path(cache) if cache else None)
        else:
            conf = load_recorded(config, overrides or [], run_id=run_id, cache=Path(cache) if cache else None)
        root = conf.cache
        if (written := demo_data(profile, conf)) is not None:
            run_logger().info("demo data %s %s", "written to" if written[1] else "found in", written[0])
        check_inputs(conf)
    except AugdagError as e:
        if root is not None:  # where a cache is known, `augdag runs` shows the failure
            _record_load_failure(e, root, profile=profile, parameters=parameters)
        raise
    return nightly(conf, profile=profile, config=config)


def __getattr__(name: str) -> Any:
    """``nightly_flow``: ``nightly_body`` as the Prefect flow ``nightly`` (the deployments' entrypoint,
    ``flows/engine/nightly.py:nightly_flow``), made on first use, so that a replayed night never imports Prefect."""
    if name != "nightly_flow":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from prefect import flow

    @functools.wraps(nightly_body)
    def entry(*args: Any, **kwargs: Any) -> dict:
        return nightly_body(*args, **kwargs)

    # what Prefect records as the deployment's entrypoint (`augdag serve`): this module's `nightly_flow`
    entry.__name__ = entry.__qualname__ = "nightly_flow"
    made = globals()["nightly_flow"] = parameters_at_rest(flow(name="nightly", log_prints=True)(entry))  # no secret stored
    return made
