"""One mechanism for every stage: a pure function over Arrow tables, run per shard as a Prefect task.

A ``Stage`` names a function ``fn(*tables, **params) -> pa.Table | {role: pa.Table}``. The shard task
reads shard ``i`` of each sharded input (and the whole of each side input), calls ``fn`` and commits
its outputs as ``<role>-<i>.parquet`` in the output artifact, the main part last: a main part on
disk means the shard is finished. The Prefect cache key is the artifact fingerprint plus the shard,
so a re-run (or the UI's Retry) shows finished shards as Cached; the flow driver forces a recompute
of any shard whose file is missing, because the artifact store, not Prefect, is the ground truth.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import NO_CACHE

from conf.errors import InputError
from storage.artifacts import MAIN, ArtifactRef, commit_file, temp_path, write_part
from tasks.progress import report

StageOutput = pa.Table | Mapping[str, pa.Table]


@dataclasses.dataclass(frozen=True)
class Stage:
    """A stage: its name and code version (both in the fingerprint), the function, and its view."""

    name: str
    version: str
    fn: Callable[..., StageOutput]
    view: str | None = None  # catalog view of its main output; None for internal artifacts
    tags: tuple[str, ...] = ()  # Prefect tags, e.g. ("gpu",) for model stages
    reduce: bool = False  # fn gets each input's list of part paths (a global step, e.g. in DuckDB) -> 1 shard


@dataclasses.dataclass(frozen=True)
class ShardResult:
    shard: int
    status: str  # "computed" | "cached"
    started_at: str
    seconds: float
    rows_in: int
    rows_out: dict[str, int]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def commit_shard(out: ArtifactRef, shard: int, outputs: StageOutput) -> dict[str, int]:
    """Commit one shard's outputs, side roles first and the main part last."""
    tables = {MAIN: outputs} if isinstance(outputs, pa.Table) else dict(outputs)
    for role in sorted(tables, key=lambda r: r == MAIN):
        write_part(tables[role], out.path(shard, role))
    return {role: t.num_rows for role, t in tables.items()}


def read_side(ref: ArtifactRef) -> pa.Table:
    """All shards of a side input (a small, unsharded table such as a duplicate list or a lexicon)."""
    return pa.concat_tables([ref.read(i) for i in range(ref.n_shards)])


def read_parts(parts: Sequence[Path], columns: list[str]) -> pa.Table:
    """The given columns of every part, in order, as one table (for a reduce step that needs them all)."""
    if not parts:
        raise InputError("nothing to read: the input artifact has no parts")
    return pa.concat_tables([pq.read_table(p, columns=columns) for p in parts])


def run_shard(
    stage: Stage,
    out: ArtifactRef,
    shard: int,
    inputs: tuple[ArtifactRef, ...],
    side: Mapping[str, ArtifactRef],
    params: Mapping[str, Any],
    resources: Mapping[str, Any] | None = None,
    force: bool = False,
) -> ShardResult:
    """The body of a shard task; callable without Prefect.

    ``resources`` are passed to ``fn`` like ``params`` but are not part of the fingerprint: the paths
    of trained models, whose own fingerprints the flow adds to the artifact's (``models=``). ``force``
    recomputes a shard that is already on disk (each file is replaced by rename, never truncated).
    """
    started, t0 = _now(), time.perf_counter()
    if not force and out.path(shard).exists():
        return ShardResult(shard, "cached", started, 0.0, 0, {})
    side_tables = {name: read_side(ref) for name, ref in side.items()}
    if stage.reduce:
        paths = [ref.paths() for ref in inputs]
        result = stage.fn(*paths, **side_tables, **params, **(resources or {}))
        rows_in = sum(pq.ParquetFile(p).metadata.num_rows for ps in paths for p in ps)  # footers only
    else:
        tables = [ref.read(shard) for ref in inputs]
        result = stage.fn(*tables, **side_tables, **params, **(resources or {}))
        rows_in = sum(t.num_rows for t in tables)
    rows_out = commit_shard(out, shard, result)
    return ShardResult(shard, "computed", started, time.perf_counter() - t0, rows_in, rows_out)


def shard_cache_key(_context: Any, parameters: Mapping[str, Any]) -> str:
    """The Prefect cache key of a shard task: the artifact fingerprint and the shard number."""
    out: ArtifactRef = parameters["out"]
    return f"{out.stage}-{out.fingerprint}-{parameters['shard']:05d}"


# the Prefect task over the same body: a shard task is run_shard with a cache key, retries and a name
shard_task = task(run_shard, name="stage-shard", task_run_name="{stage.name}-{shard:05d}", cache_key_fn=shard_cache_key,
                  persist_result=True)


SourceFn = Callable[[], Iterator[tuple[int, StageOutput]]]


def run_source(out: ArtifactRef, produce: SourceFn, force: bool = False) -> list[ShardResult]:
    """The body of a source task (a reader): it streams shards in order and commits each one.

    Reading is sequential, but shards that are already on disk (a crashed run) are not rewritten, and
    because a shard always covers the same input rows, the resumed artifact is byte-identical.
    """
    results, t0, started = [], time.perf_counter(), _now()
    for shard, outputs in produce():
        if not force and out.path(shard).exists():
            results.append(ShardResult(shard, "cached", started, 0.0, 0, {}))
        else:
            rows_out = commit_shard(out, shard, outputs)
            results.append(ShardResult(shard, "computed", started, time.perf_counter() - t0, sum(rows_out.values()), rows_out))
        report(f"{out.stage}[{out.dataset}]", len(results), None)
        t0, started = time.perf_counter(), _now()
    return results


def build_model(path: Path, build: Callable[[Path], None]) -> float:
    """The body of a model task: ``build`` writes the model (a file or a directory) to a temporary name,
    renamed to ``path`` when complete (a crash never leaves a model that looks trained). Returns the
    seconds it took."""
    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        build(tmp)
        commit_file(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        tmp.unlink(missing_ok=True)
    return time.perf_counter() - t0


# no Prefect cache: the model file on disk is the record (as an artifact's manifest is)
model_task = task(build_model, name="model", task_run_name="{path.parent.parent.name}", cache_policy=NO_CACHE,
                  persist_result=False)


def source_cache_key(_context: Any, parameters: Mapping[str, Any]) -> str:
    out: ArtifactRef = parameters["out"]
    return f"{out.stage}-{out.fingerprint}"


source_task = task(run_source, name="source", task_run_name="{out.stage}", cache_key_fn=source_cache_key,
                   persist_result=True)
