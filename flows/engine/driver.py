"""The flow driver: fingerprints stages, maps shard tasks, writes manifests, and is the one catalog writer.

``run_stage`` is how every flow runs a per-shard stage: it computes the output fingerprint, returns
at once when the artifact's manifest is complete (a cached stage submits no task), otherwise maps
the shard task over the shards — forcing a recompute of the shards whose files are missing — and,
when every shard succeeded, writes the manifest and registers the artifact, its lineage, its
rejects and the shard runs in the catalog. A shard that still fails after its retries fails the
stage with the shard named; the other shards' outputs stay on disk for the next run.

Failures. Only a transient error (``is_transient``: I/O, a timeout, memory) is retried, with exponential
backoff; bad input, bad configuration, a missing model or a bug fails the shard at once, since it would
fail the same way again. A failed stage raises one ``StageError`` that says what failed (stage, dataset,
shard i of N, the input file), why, and which run to retry (``run_id``, ``cache``: the CLI prints
``augdag retry RUN``); its shards are recorded in `stage_runs`: written (computed or cached) and failed.
Every run logs to ``<cache>/logs/<run_id>.log`` (flows/engine/run_log.py), tracebacks included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import BaseModel

from conf.errors import AugdagError, StageError
from conf.schema import AugdagConf, OrchestrationConf
from conf.sections.storage import scratch_dir
from flows.engine.drop_warnings import run_warnings
from flows.engine.recording import StageReport, explain, record_cached, record_computed, record_failure
from flows.engine.replay import check_cached, flow_run_context, in_flow_run, replay_catalog, run_logger, started
from flows.engine.retry import Forcing, forced_now
from flows.engine.run_artifacts import ShardProgress, publish_run_artifacts
from flows.engine.run_log import open_run_log
from flows.engine.transient import retry_transient
from flows.ops.liveness import reap_before_run
from models.runtime import fix_torch_threads
from storage import objects
from storage.artifacts import FIGURE_MEMO, MAIN, ArtifactRef, fingerprint, part_name, read_manifest, recorded_hashes, sweep_temp
from storage.catalog import Catalog
from storage.integrity import IntegrityError, check_artifact
from storage.objects import models as model_store
from tasks.runtime.progress import Interrupted, interruption, request_stop
from tasks.runtime.stage import ShardResult, SourceFn, Stage, model_task, shard_task, source_task


@dataclasses.dataclass
class Run:
    """One flow run's bookkeeping: its id, where it writes, and the reports of its stages."""

    run_id: str
    pipeline: str
    root: Path
    catalog: Catalog
    orchestration: OrchestrationConf
    reports: list[StageReport] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)  # lines for the summary (an input's encoding, ...)
    force: Forcing = Forcing()
    store: str | None = None  # storage.artifacts: the object-store prefix artifacts and models go to (storage/objects/)
    log: Path = dataclasses.field(init=False)  # <cache>/logs/<run_id>.log: Prefect's and augdag's records

    def __post_init__(self) -> None:
        self.log = open_run_log(self.root, self.run_id, flow_run_context())

    @classmethod
    def start(cls, conf: AugdagConf, *, pipeline: str, profile: str, config: Mapping[str, Any]) -> Run:
        """Open a run of ``pipeline`` in the catalog of ``conf``'s cache (earlier crashed runs reaped first) and
        return its bookkeeping; ``started`` also finishes it as failed on an exception."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        root = Path(conf.cache).absolute()
        catalog = replay_catalog() or Catalog(root)  # a replay's runs share one catalog, written once at its end
        catalog.lock_timeout_s = conf.orchestration.lock_timeout_s
        run = cls(f"{pipeline}-{stamp}-{uuid.uuid4().hex[:6]}", pipeline, root, catalog, conf.orchestration, force=forced_now())
        run.store = conf.storage.artifacts
        objects.use(run.store)  # this process's DuckDB connections read the store's parts
        objects.configure(conf.storage)  # a store that is down or silent fails in bounded time
        fix_torch_threads(conf.orchestration.torch_threads)  # before any stage: one count for the process
        FIGURE_MEMO.set(root / "reports" / "figures")  # a report's figure drawn before is read back (flows/reports/plots.py)
        ctx = flow_run_context()
        flow_run_id = str(ctx.flow_run.id) if ctx and ctx.flow_run else None
        reap_before_run(run.catalog)  # earlier runs whose process is gone: crashed (flows/ops/liveness.py)
        started(run.run_id)  # a replay remembers it: discarded if a stage turns out not cached (flows/engine/replay.py)
        run.catalog.start_run(run.run_id, pipeline=pipeline, profile=profile, config=config, flow_run_id=flow_run_id)
        return run

    @classmethod
    @contextlib.contextmanager
    def started(cls, conf: AugdagConf, *, pipeline: str, profile: str, config: Mapping[str, Any] | None) -> Iterator[Run]:
        """``start``, and on any exception inside the block ``finish`` the run as failed before re-raising."""
        run = cls.start(conf, pipeline=pipeline, profile=profile, config=config or conf.model_dump(mode="json"))
        try:
            yield run
        except BaseException as e:
            if not isinstance(e, Exception):  # SIGINT, or SIGTERM (Prefect's TerminationSignal): stop every shard
                request_stop()  # at its next batch (tasks/runtime/progress.py), record the run interrupted, and
                run.finish(error=(stopped := interruption(e)))  # leave with an error the CLI prints with `Resume:`
                stopped.run_id, stopped.cache = run.run_id, str(run.root)
                raise stopped from e
            run.finish(error=e)
            if isinstance(e, AugdagError) and getattr(e, "run_id", None) is None:
                e.run_id, e.cache = run.run_id, str(run.root)  # the CLI's last line: `augdag retry RUN_ID`
            raise

    def finish(self, *, error: BaseException | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Close the run in the catalog; ``extra`` (e.g. report paths, U_max) joins the summary."""
        summary = {
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "cache": str(self.root),
            "status": ("interrupted" if isinstance(error, Interrupted) else "failed") if error else "completed",
            "error": (str(error) or f"interrupted ({type(error).__name__})") if error else None,
            "stages": [dataclasses.asdict(r) for r in self.reports],
            **(extra or {}),
        }
        summary["warnings"] = [
            *self.warnings,
            *summary.get("warnings", []),
            *run_warnings(self.root, summary["stages"], self.store),
        ]
        self.catalog.finish_run(self.run_id, status=summary["status"], summary=summary)
        if in_flow_run():  # not in a replay (flows/engine/replay.py): no Prefect run to attach artifacts to
            publish_run_artifacts(summary)
        return summary

    def task_options(self, tags: Sequence[str] = ()) -> dict[str, Any]:
        """Prefect options of this run's shard and model tasks: the configured retries with exponential backoff,
        retried on transient errors only (``retry_transient``), and ``tags``."""
        delays = [self.orchestration.retry_delay_s * 2**i for i in range(self.orchestration.retries)]
        return {
            "retries": self.orchestration.retries,
            "retry_delay_seconds": delays or 0,
            "retry_condition_fn": retry_transient,
            # only real tags (gpu, ...): any tag makes Prefect ask the server for concurrency slots per task
            "tags": list(tags),
        }


def record_retry(cache: Path, run_id: str, retry_of: str) -> None:
    """Note in the summary of run ``run_id`` that it retried run ``retry_of`` (`augdag runs` shows the chain)."""
    with Catalog(cache).write() as con:
        con.execute(
            "UPDATE runs SET summary = json_merge_patch(coalesce(summary, '{}'), $patch) WHERE run_id = $r",
            {"patch": json.dumps({"retry_of": retry_of}), "r": run_id},
        )


def run_stage(
    run: Run,
    stage: Stage,
    *,
    inputs: Sequence[ArtifactRef],
    params: Mapping[str, Any] | BaseModel,
    side: Mapping[str, ArtifactRef] | None = None,
    models: Sequence[str] = (),
    resources: Mapping[str, Any] | None = None,
    n_shards: int | None = None,
    dataset: str | None = None,
) -> ArtifactRef:
    """Run ``stage`` over the shards of ``inputs`` (all with the same shard count) and register its output, under
    ``dataset`` (default: the first input's; a derived set such as a noised test set names itself).

    ``params`` (a mapping, or a conf section whose fields are the stage's parameters) are validated
    against the stage's parameter model and the function's signature before any shard is submitted
    (``Stage.bind``: a wrong key is a ConfError, exit 2); the fingerprint hashes the model's JSON dump.
    ``models`` are the fingerprints of the trained models the stage uses; ``resources`` hands the stage
    their paths (``ModelRef.path``) without making the cache location part of the fingerprint.
    """
    t0, side = time.perf_counter(), dict(side or {})
    bound = stage.bind(params, n_inputs=len(inputs), side=side, resources=resources or {})
    params = bound.model_dump(mode="json", exclude_unset=True)  # fingerprinted: what the flow set (a default is
    # part of the stage's code, which its version covers), so the record says what was chosen
    call = dict(bound)  # what the function gets: the validated values, typed
    counts = {ref.n_shards for ref in inputs}
    if n_shards is None:
        if len(counts) != 1:
            raise StageError(f"stage {stage.name!r}: inputs have different shard counts {sorted(counts)}")
        n_shards = counts.pop()
    parents = [ref.fingerprint for ref in inputs] + [side[k].fingerprint for k in sorted(side)]
    fp = fingerprint(stage.name, stage.version, params, parents, models)
    dataset = dataset or (inputs[0].dataset if inputs else None)
    out = ArtifactRef(str(run.root), stage.name, fp, stage.view, dataset, n_shards, run.store)
    force = run.force.wants(fp)
    if not force and (manifest := read_manifest(out)) is not None:
        proven(run, out, {f["file"]: f["sha256"] for f in manifest["files"]})
        return record_cached(run, out, manifest, parents, t0, counts=stage.counts)
    check_cached(f"{stage.name}[{dataset}]")
    sweep_temp(out.dir)  # a killed run's half-written parts
    from prefect import unmapped
    from prefect.futures import as_completed

    task = shard_task().with_options(name=stage.name, **run.task_options(stage.tags))
    committed = objects.listing(out.dir, ".parquet")  # one listing (one request on an object store)
    missing = [i for i in range(n_shards) if force or part_name(i) not in committed]
    present = sorted(set(range(n_shards)) - set(missing))
    proven(
        run, out, recorded_hashes(out), on_disk=True, shards=set(present)
    )  # shards kept as done: as their earlier manifest records them
    futures = []
    for refresh, shards in ((False, present), (True, missing)):
        if shards:
            futures += zip(
                shards,
                task.with_options(refresh_cache=refresh).map(
                    stage=unmapped(stage),
                    out=unmapped(out),
                    shard=shards,
                    inputs=unmapped(tuple(inputs)),
                    side=unmapped(side),
                    params=unmapped(call),
                    resources=unmapped(dict(resources or {})),
                    force=unmapped(force),
                ),
            )
    results, failed = [], {}
    shard_of = {id(f): shard for shard, f in futures}
    progress = ShardProgress(f"{stage.name}[{dataset}]", n_shards)
    for done, future in enumerate(as_completed([f for _, f in futures]), start=1):
        shard = shard_of[id(future)]
        progress.update(done)
        try:
            result = future.result()
            if shard not in missing:  # finished before this run; Prefect may hand back the first run's record
                result = dataclasses.replace(result, status="cached", seconds=0.0, rows_in=0, files={})
            results.append(result)
        except Exception as e:  # noqa: BLE001 — every shard's failure is collected, then reported together
            failed[shard] = e
    results.sort(key=lambda r: r.shard)
    if failed:
        first = inputs[0] if inputs else None
        raise record_failure(
            run, out, failed, t0, written=results, inputs=lambda i: first and str(first.dir if stage.reduce else first.path(i))
        )
    if force:
        run.force.done.add(fp)
    return record_computed(
        run, out, results, version=stage.version, params=params, inputs=parents, models=models, t0=t0, counts=stage.counts
    )


@dataclasses.dataclass(frozen=True)
class ModelRef:
    """A trained model in the cache: ``<cache>/models/<name>/<fingerprint>/<file>``; with an object store, in this
    host's scratch (``path``) and on the store (``uri``)."""

    name: str
    fingerprint: str
    path: Path
    uri: str | None = None

    @property
    def location(self) -> str:
        """What a shard task is handed as the model's path: on a store, its URI (the worker fetches it once per host,
        storage/objects/models.py ``localized``), else the path on this machine."""
        return self.uri or str(self.path)


def run_model_stage(
    run: Run,
    *,
    name: str,
    version: str,
    kind: str,
    filename: str,
    build: Callable[[Path], None],
    params: Mapping[str, Any],
    inputs: Sequence[ArtifactRef],
    key: str | None = None,
) -> ModelRef:
    """Train a model once per fingerprint (``key``, version, params, inputs) and register it in `models`.

    ``build(path)`` writes the model file; it runs as a Prefect task with the run's retries. A model
    whose file exists is reused (cached), as an artifact with a complete manifest is. ``key`` (default
    ``name``) is what the model is, ``name`` the role it plays: two roles with one key and the same
    parameters and data (a teacher that is also the identification model) share one training.
    """
    t0 = time.perf_counter()
    parents = [ref.fingerprint for ref in inputs]
    fp = fingerprint(key or name, version, params, parents)
    # with an object store: trained (or fetched) into this host's scratch and published to the store
    ref = ModelRef(name, fp, (scratch_dir() if run.store else run.root) / "models" / (key or name) / fp / filename)
    remote = objects.join(run.store, "models", key or name, fp) if run.store else None
    ref = dataclasses.replace(ref, uri=f"{remote}/{filename}" if remote else None)
    ref.path.parent.mkdir(parents=True, exist_ok=True)
    # one training per fingerprint: a concurrent pipeline (the nightly's) that needs the same model waits
    with FileLock(ref.path.parent / ".training.lock"):
        forced = run.force.wants(fp)
        cached = not forced and model_store.trained(ref.path, remote)
        if not cached:
            check_cached(f"model {name}")
            sweep_temp(ref.path.parent)  # a killed training's half-written model
            task = model_task().with_options(name=name, **run.task_options(("gpu",)))
            try:
                task(path=ref.path, build=build, publish=remote)
            except Exception as e:
                msg = f"model {name!r} ({key or name} {fp[:12]}) failed to train: {explain(run, e)}"
                run.reports.append(
                    StageReport(
                        name, None, fp, "failed", 1, 0, 0, {}, time.perf_counter() - t0, msg, kind="model", failed_shards=[0]
                    )
                )
                run_logger().error("%s", msg, exc_info=e)
                error = StageError(msg)
                error.exit_code = e.exit_code if isinstance(e, AugdagError) else 1
                error.run_id, error.cache, error.log = run.run_id, run.root, run.log
                raise error from e
            if forced:
                run.force.done.add(fp)
    run.catalog.register_model(
        fp,
        name=name,
        kind=kind,
        path=ref.location,
        run_id=run.run_id,
        meta={"version": version, "params": dict(params), "inputs": parents},
    )
    status, seconds = "cached" if cached else "computed", time.perf_counter() - t0
    run.reports.append(StageReport(name, None, fp, status, 1, int(not cached), 0, {}, seconds, kind="model"))
    run_logger().info("%s %s: %s (%s)", name, fp[:12], "cached" if cached else "trained", ref.path)
    return ref


def run_source_stage(
    run: Run,
    *,
    name: str,
    version: str,
    produce: SourceFn,
    params: Mapping[str, Any],
    input_fingerprint: str,
    dataset: str,
    view: str | None = None,
) -> ArtifactRef:
    """Run a reader (one sequential task that writes shard after shard) and register its output."""
    t0 = time.perf_counter()
    fp = fingerprint(name, version, params, [input_fingerprint])
    out = ArtifactRef(str(run.root), name, fp, view, dataset, store=run.store)
    force = run.force.wants(fp)
    if not force and (manifest := read_manifest(out)) is not None:
        proven(run, out, {f["file"]: f["sha256"] for f in manifest["files"]})
        return record_cached(run, out.with_shards(manifest["n_shards"]), manifest, [], t0)
    check_cached(f"{name}[{dataset}]")
    sweep_temp(out.dir)
    if not force:  # the shards the reader skips: as their earlier manifest records them
        proven(run, out, recorded_hashes(out), on_disk=True)
    task = source_task().with_options(name=name, refresh_cache=True, **run.task_options())
    before = _parts_on_disk(out)
    try:
        results = task(out=out, produce=produce, force=force)
    except Exception as e:
        # the reader goes shard after shard, writing each one missing (forced: each one): it stopped at the
        # first missing one (forced: after the last one it rewrote)
        after = _parts_on_disk(out)
        new = {i for i, stamp in after.items() if before.get(i) != stamp}
        kept = sorted(new) if force else sorted(after)
        failed = max(new, default=-1) + 1 if force else min(set(range(len(after) + 1)) - set(after))
        written = [_written(out, i, "computed" if i in new else "cached") for i in kept]
        raise record_failure(run, out, {failed: e}, t0, written=written, shards_known=False) from e
    if force:
        run.force.done.add(fp)
    return record_computed(
        run, out.with_shards(len(results)), results, version=version, params=params, inputs=[input_fingerprint], models=(), t0=t0
    )


def proven(run: Run, out: ArtifactRef, files: Mapping[str, str], **which: Any) -> None:
    """Files of ``out`` a run takes as done (file -> recorded sha256; ``which``: storage/integrity/'s ``check_artifact``
    options), proven before they count as cached: one that differs fails the stage in one line with the repair
    command and the run is recorded failed (a replay goes to Prefect first, to record it)."""
    try:
        check_artifact(run.root, out.dir, files, **which)
    except IntegrityError as e:
        check_cached(f"{out.stage}[{out.dataset}]")  # a replay records nothing of a failure: run it on Prefect
        run_logger().error("%s", e)
        raise


def _parts_on_disk(out: ArtifactRef) -> dict[int, int]:
    """The shards whose main part is committed, with its modification time (``part-00003.parquet`` -> 3)."""
    listed = objects.listing(out.dir, ".parquet")
    return {int(f[:-8].rsplit("-", 1)[1]): mtime for f, (_, mtime) in listed.items() if f.startswith(f"{MAIN}-")}


def _written(out: ArtifactRef, shard: int, status: str) -> ShardResult:
    """A committed shard of a stage that failed later, as a shard result (its rows from the Parquet footer)."""
    rows = objects.parquet_file(out.path(shard)).metadata.num_rows
    return ShardResult(shard, status, datetime.now(UTC).isoformat(timespec="milliseconds"), 0.0, 0, {"part": rows})
