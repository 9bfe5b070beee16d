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
Every run logs to ``<cache>/logs/<run_id>.log`` (flows/run_log.py), tracebacks included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from filelock import FileLock
from prefect import get_run_logger, unmapped
from prefect.futures import as_completed
from prefect.context import FlowRunContext

from conf.errors import AugdagError, StageError
from conf.schema import AugdagConf, OrchestrationConf
from storage.artifacts import ArtifactRef, fingerprint, read_manifest, write_manifest
from storage.catalog import Catalog
from flows.liveness import reap_before_run
from flows.run_artifacts import ShardProgress, publish_run_artifacts
from flows.retry import Forcing
from flows.retry import forced as _forced  # what the runs started inside `forcing` recompute (Run.start)
from flows.run_log import open_run_log
from tasks.stage import ShardResult, SourceFn, Stage, model_task, shard_task, source_task


def rows_by_role(manifest: Mapping[str, Any]) -> dict[str, int]:
    """Rows of an artifact per role (part, rejects, dropped, ...), from its manifest."""
    rows: dict[str, int] = {}
    for f in manifest["files"]:
        rows[f["role"]] = rows.get(f["role"], 0) + f["rows"]
    return rows


def artifact_rows(ref: ArtifactRef, role: str = "part") -> int:
    """Rows of one role of a finished artifact, from its manifest (0 when it has none)."""
    manifest = read_manifest(ref)
    return rows_by_role(manifest).get(role, 0) if manifest else 0


@dataclasses.dataclass
class StageReport:
    stage: str
    dataset: str | None
    fingerprint: str
    status: str  # computed | cached | failed
    shards: int
    shards_computed: int
    rows_in: int
    rows_out: dict[str, int]
    seconds: float
    error: str | None = None
    kind: str = "artifact"  # artifact | model
    failed_shards: list[int] = dataclasses.field(default_factory=list)
    shards_known: bool = True  # False: `shards` is a lower bound (a reader that failed before its input's end)


@dataclasses.dataclass
class Run:
    """One flow run's bookkeeping: its id, where it writes, and the reports of its stages."""

    run_id: str
    pipeline: str
    root: Path
    catalog: Catalog
    orchestration: OrchestrationConf
    reports: list[StageReport] = dataclasses.field(default_factory=list)
    force: Forcing = Forcing()
    log: Path = dataclasses.field(init=False)  # <cache>/logs/<run_id>.log: Prefect's and augdag's records

    def __post_init__(self) -> None:
        self.log = open_run_log(self.root, self.run_id, FlowRunContext.get())

    @classmethod
    def start(cls, conf: AugdagConf, *, pipeline: str, profile: str, config: Mapping[str, Any]) -> "Run":
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        root = Path(conf.cache).absolute()
        run = cls(f"{pipeline}-{stamp}-{uuid.uuid4().hex[:6]}", pipeline, root,
                  Catalog(root, lock_timeout_s=conf.orchestration.lock_timeout_s), conf.orchestration,
                  force=_forced.get())
        ctx = FlowRunContext.get()
        flow_run_id = str(ctx.flow_run.id) if ctx and ctx.flow_run else None
        reap_before_run(run.catalog)  # earlier runs whose process is gone: crashed (flows/liveness.py)
        run.catalog.start_run(run.run_id, pipeline=pipeline, profile=profile, config=config, flow_run_id=flow_run_id)
        return run

    @classmethod
    @contextlib.contextmanager
    def started(cls, conf: AugdagConf, *, pipeline: str, profile: str,
                config: Mapping[str, Any] | None) -> Iterator["Run"]:
        """``start``, and on any exception inside the block ``finish`` the run as failed before re-raising."""
        run = cls.start(conf, pipeline=pipeline, profile=profile, config=config or conf.model_dump(mode="json"))
        try:
            yield run
        except BaseException as e:
            run.finish(error=e)
            if isinstance(e, AugdagError) and getattr(e, "run_id", None) is None:
                e.run_id, e.cache = run.run_id, str(run.root)  # the CLI's last line: `augdag retry RUN_ID`
            raise

    def finish(self, *, error: BaseException | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Close the run in the catalog; ``extra`` (e.g. report paths, U_max) joins the summary."""
        summary = {
            "run_id": self.run_id, "pipeline": self.pipeline, "cache": str(self.root),
            "status": "failed" if error else "completed",
            "error": (str(error) or f"interrupted ({type(error).__name__})") if error else None,
            "stages": [dataclasses.asdict(r) for r in self.reports], **(extra or {}),
        }
        self.catalog.finish_run(self.run_id, status=summary["status"], summary=summary)
        publish_run_artifacts(summary)
        return summary

    def _task_options(self, tags: Sequence[str] = ()) -> dict[str, Any]:
        delays = [self.orchestration.retry_delay_s * 2**i for i in range(self.orchestration.retries)]
        return {
            "retries": self.orchestration.retries, "retry_delay_seconds": delays or 0,
            "retry_condition_fn": retry_transient,
            # only real tags (gpu, ...): any tag makes Prefect ask the server for concurrency slots per task
            "tags": list(tags),
        }

    def _conclude(
        self, out: ArtifactRef, results: list[ShardResult], *, version: str, params: Mapping[str, Any],
        inputs: Sequence[str], models: Sequence[str], t0: float,
    ) -> ArtifactRef:
        manifest = write_manifest(out, version=version, params=params, inputs=inputs, models=models)
        rows = [
            {"run_id": self.run_id, "stage": out.stage, "dataset": out.dataset, "fingerprint": out.fingerprint,
             "shard": r.shard, "status": r.status, "started_at": r.started_at, "seconds": r.seconds,
             "rows_in": r.rows_in, "rows_out": r.rows_out.get("part", 0), "error": None}
            for r in results
        ]
        self.catalog.register(out, manifest, run_id=self.run_id, parents=[*inputs, *models], stage_runs=rows)
        rows_out = rows_by_role(manifest)
        computed = [r for r in results if r.status == "computed"]
        self.reports.append(StageReport(
            out.stage, out.dataset, out.fingerprint, "computed" if computed else "cached", out.n_shards,
            len(computed), sum(r.rows_in for r in results), rows_out, time.perf_counter() - t0))
        get_run_logger().info(
            "%s[%s] %s: %d/%d shards computed, rows %s -> %s", out.stage, out.dataset, out.fingerprint[:12],
            len(computed), out.n_shards, sum(r.rows_in for r in results), rows_out)
        return out

    def _cached(self, out: ArtifactRef, manifest: Mapping[str, Any], parents: Sequence[str], t0: float) -> ArtifactRef:
        rows_out = rows_by_role(manifest)
        shard_rows = [  # every shard of a cached stage shows in `stage_runs` as cached, as in the UI
            {"run_id": self.run_id, "stage": out.stage, "dataset": out.dataset, "fingerprint": out.fingerprint,
             "shard": f["shard"], "status": "cached", "seconds": 0.0, "rows_in": 0, "rows_out": f["rows"]}
            for f in manifest["files"] if f["role"] == "part"]
        self.catalog.register(out, manifest, run_id=self.run_id, parents=parents, stage_runs=shard_rows)
        self.reports.append(StageReport(out.stage, out.dataset, out.fingerprint, "cached", out.n_shards, 0, 0,
                                        rows_out, time.perf_counter() - t0))
        get_run_logger().info("%s[%s] %s: cached (%d shards)", out.stage, out.dataset, out.fingerprint[:12], out.n_shards)
        return out

    def _fail(
        self, out: ArtifactRef, failed: Mapping[int, BaseException], t0: float, *, written: Sequence[ShardResult] = (),
        inputs: Callable[[int], str | None] = lambda _shard: None, shards_known: bool = True,
    ) -> StageError:
        """Record a failed stage in `stage_runs` (its written shards, computed or cached, and its failed ones)
        and return the error that says it in one line: what failed (stage, dataset, shard i of N, the input
        file ``inputs(i)``), why, and what is kept. ``run_id``, ``cache`` and ``log`` ride on the error (the
        CLI prints the command that resumes). ``shards_known`` False: N is a lower bound (a reader)."""
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        rows = [{"run_id": self.run_id, "stage": out.stage, "dataset": out.dataset, "fingerprint": out.fingerprint,
                 "shard": r.shard, "status": r.status, "started_at": r.started_at, "seconds": r.seconds,
                 "rows_in": r.rows_in, "rows_out": r.rows_out.get("part", 0), "error": None} for r in written]
        rows += [{"run_id": self.run_id, "stage": out.stage, "dataset": out.dataset, "fingerprint": out.fingerprint,
                  "shard": shard, "status": "failed", "started_at": now, "error": f"{type(e).__name__}: {_one_line(e)}"}
                 for shard, e in sorted(failed.items())]
        self.catalog.register_failures(rows)
        n = out.n_shards if shards_known else max([*failed, *(r.shard for r in written)]) + 1
        first_shard, first = min(failed.items())
        which = (f"shard {first_shard}" if len(failed) == 1 else
                 f"shards {', '.join(map(str, sorted(failed)))}; shard {first_shard}")
        where = f", input {source}" if (source := inputs(first_shard)) else ""
        kept = f" {len(written)} written shard(s) are kept." if written else ""
        msg = (f"stage {out.stage!r} (dataset {out.dataset}) failed on {which} {'of' if shards_known else '(of at least'}"
               f" {n}{'' if shards_known else ')'}{where}: {self._why(first)}.{kept}")
        rows_out: dict[str, int] = {}
        for r in written:
            for role, k in r.rows_out.items():
                rows_out[role] = rows_out.get(role, 0) + k
        self.reports.append(StageReport(
            out.stage, out.dataset, out.fingerprint, "failed", n, sum(r.status == "computed" for r in written),
            sum(r.rows_in for r in written), rows_out, time.perf_counter() - t0, msg, failed_shards=sorted(failed),
            shards_known=shards_known))
        logger = get_run_logger()
        for shard, e in sorted(failed.items()):  # the tracebacks, for the run's log (Prefect logs none when
            logger.error("%s[%s] shard %d failed:", out.stage, out.dataset, shard, exc_info=e)  # it did not retry)
        logger.error("%s", msg)
        error = StageError(msg)
        if all(isinstance(e, AugdagError) and e.exit_code == 2 for e in failed.values()):
            error.exit_code = 2  # the input or configuration is wrong, not the run: bad usage
        error.run_id, error.cache, error.log = self.run_id, self.root, self.log
        return error

    def _why(self, error: BaseException) -> str:
        """An error in words: augdag's own message (it starts with the place), else the type and message,
        and for a transient error that it outlived the retries."""
        text = _one_line(error) if isinstance(error, AugdagError) else f"{type(error).__name__}: {_one_line(error)}"
        if is_transient(error) and self.orchestration.retries:
            text += f" (still failing after {self.orchestration.retries} retries)"
        return text.rstrip(".")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


# errors that may pass on a second try; every other error fails its shard at once
TRANSIENT = (OSError, MemoryError)  # OSError: I/O, and TimeoutError, ConnectionError are OSErrors
NOT_TRANSIENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)  # the same next time
# (module, class) matched without importing torch: torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
TRANSIENT_BY_NAME = {("torch", "OutOfMemoryError"), ("torch.cuda", "OutOfMemoryError")}


def is_transient(error: BaseException) -> bool:
    """I/O errors (but a missing file, a denied permission, a directory where a file belongs), timeouts,
    connection errors and out-of-memory errors, CUDA's included."""
    if isinstance(error, NOT_TRANSIENT):
        return False
    if isinstance(error, TRANSIENT):
        return True
    return any((c.__module__, c.__name__) in TRANSIENT_BY_NAME for c in type(error).__mro__)


def retry_transient(_task: Any, _task_run: Any, state: Any) -> bool:
    """Prefect's retry condition of every shard and model task: retry only a transient error (``is_transient``)."""
    try:
        error = state.result(raise_on_failure=False)
    except Exception:  # noqa: BLE001 — a result that cannot be read is not worth a retry
        return False
    return isinstance(error, BaseException) and is_transient(error)


def record_retry(cache: Path, run_id: str, retry_of: str) -> None:
    """Note in the summary of run ``run_id`` that it retried run ``retry_of`` (`augdag runs` shows the chain)."""
    with Catalog(cache).write() as con:
        con.execute("UPDATE runs SET summary = json_merge_patch(coalesce(summary, '{}'), $patch) WHERE run_id = $r",
                    {"patch": json.dumps({"retry_of": retry_of}), "r": run_id})


def run_stage(
    run: Run,
    stage: Stage,
    *,
    inputs: Sequence[ArtifactRef],
    params: Mapping[str, Any],
    side: Mapping[str, ArtifactRef] | None = None,
    models: Sequence[str] = (),
    resources: Mapping[str, Any] | None = None,
    n_shards: int | None = None,
) -> ArtifactRef:
    """Run ``stage`` over the shards of ``inputs`` (all with the same shard count) and register its output.

    ``models`` are the fingerprints of the trained models the stage uses; ``resources`` hands the stage
    their paths (``ModelRef.path``) without making the cache location part of the fingerprint.
    """
    t0, side = time.perf_counter(), dict(side or {})
    counts = {ref.n_shards for ref in inputs}
    if n_shards is None:
        if len(counts) != 1:
            raise StageError(f"stage {stage.name!r}: inputs have different shard counts {sorted(counts)}")
        n_shards = counts.pop()
    parents = [ref.fingerprint for ref in inputs] + [side[k].fingerprint for k in sorted(side)]
    fp = fingerprint(stage.name, stage.version, params, parents, models)
    dataset = inputs[0].dataset if inputs else None
    out = ArtifactRef(str(run.root), stage.name, fp, stage.view, dataset, n_shards)
    force = run.force.wants(fp)
    if not force and (manifest := read_manifest(out)) is not None:
        return run._cached(out, manifest, parents, t0)
    task = shard_task.with_options(name=stage.name, **run._task_options(stage.tags))
    missing = [i for i in range(n_shards) if force or not out.path(i).exists()]
    present = sorted(set(range(n_shards)) - set(missing))
    futures = []
    for refresh, shards in ((False, present), (True, missing)):
        if shards:
            futures += zip(shards, task.with_options(refresh_cache=refresh).map(
                stage=unmapped(stage), out=unmapped(out), shard=shards, inputs=unmapped(tuple(inputs)),
                side=unmapped(side), params=unmapped(dict(params)), resources=unmapped(dict(resources or {})),
                force=unmapped(force)))
    results, failed = [], {}
    shard_of = {id(f): shard for shard, f in futures}
    progress = ShardProgress(f"{stage.name}[{dataset}]", n_shards)
    for done, future in enumerate(as_completed([f for _, f in futures]), start=1):
        shard = shard_of[id(future)]
        progress.update(done)
        try:
            result = future.result()
            if shard not in missing:  # finished before this run; Prefect may hand back the first run's record
                result = dataclasses.replace(result, status="cached", seconds=0.0, rows_in=0)
            results.append(result)
        except Exception as e:  # noqa: BLE001 — every shard's failure is collected, then reported together
            failed[shard] = e
    results.sort(key=lambda r: r.shard)
    if failed:
        first = inputs[0] if inputs else None
        raise run._fail(out, failed, t0, written=results, inputs=lambda i: first and str(
            first.dir if stage.reduce else first.path(i)))
    if force:
        run.force.done.add(fp)
    return run._conclude(out, results, version=stage.version, params=params, inputs=parents, models=models, t0=t0)


@dataclasses.dataclass(frozen=True)
class ModelRef:
    """A trained model in the cache: ``<cache>/models/<name>/<fingerprint>/<file>``."""

    name: str
    fingerprint: str
    path: Path


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
    ref = ModelRef(name, fp, run.root / "models" / (key or name) / fp / filename)
    ref.path.parent.mkdir(parents=True, exist_ok=True)
    # one training per fingerprint: a concurrent pipeline (the nightly's) that needs the same model waits
    with FileLock(ref.path.parent / ".training.lock"):
        forced = run.force.wants(fp)
        cached = ref.path.exists() and not forced
        if not cached:
            task = model_task.with_options(name=name, **run._task_options(("gpu",)))
            try:
                task(path=ref.path, build=build)
            except Exception as e:
                msg = f"model {name!r} ({key or name} {fp[:12]}) failed to train: {run._why(e)}"
                run.reports.append(StageReport(name, None, fp, "failed", 1, 0, 0, {}, time.perf_counter() - t0,
                                               msg, kind="model", failed_shards=[0]))
                get_run_logger().error("%s", msg, exc_info=e)
                error = StageError(msg)
                error.exit_code = e.exit_code if isinstance(e, AugdagError) else 1
                error.run_id, error.cache, error.log = run.run_id, run.root, run.log
                raise error from e
            if forced:
                run.force.done.add(fp)
    run.catalog.register_model(fp, name=name, kind=kind, path=str(ref.path), run_id=run.run_id,
                               meta={"version": version, "params": dict(params), "inputs": parents})
    run.reports.append(StageReport(name, None, fp, "cached" if cached else "computed", 1, 0 if cached else 1, 0, {},
                                   time.perf_counter() - t0, kind="model"))
    get_run_logger().info("%s %s: %s (%s)", name, fp[:12], "cached" if cached else "trained", ref.path)
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
    out = ArtifactRef(str(run.root), name, fp, view, dataset)
    force = run.force.wants(fp)
    if not force and (manifest := read_manifest(out)) is not None:
        return run._cached(out.with_shards(manifest["n_shards"]), manifest, [], t0)
    task = source_task.with_options(name=name, refresh_cache=True, **run._task_options())
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
        raise run._fail(out, {failed: e}, t0, written=written, shards_known=False) from e
    if force:
        run.force.done.add(fp)
    return run._conclude(out.with_shards(len(results)), results, version=version, params=params,
                         inputs=[input_fingerprint], models=(), t0=t0)


def _parts_on_disk(out: ArtifactRef) -> dict[int, int]:
    """The shards whose main part is committed, with its modification time (``part-00003.parquet`` -> 3)."""
    return {int(p.stem.rsplit("-", 1)[1]): p.stat().st_mtime_ns for p in out.dir.glob("part-*.parquet")}


def _written(out: ArtifactRef, shard: int, status: str) -> ShardResult:
    """A committed shard of a stage that failed later, as a shard result (its rows from the Parquet footer)."""
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(out.path(shard)).metadata.num_rows
    return ShardResult(shard, status, datetime.now(timezone.utc).isoformat(timespec="milliseconds"), 0.0, 0,
                       {"part": rows})
