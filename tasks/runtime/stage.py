"""One mechanism for every stage: a pure function over Arrow tables, run per shard as a Prefect task.

A ``Stage`` names a function ``fn(*tables, **side, **params, **resources) -> pa.Table | {role: pa.Table}``.
Its parameters are typed: ``Stage.params`` is a pydantic model (by default built from ``fn``'s keyword
parameters and their annotations, side inputs and resources left out) that ``bind`` validates the
flow's parameters against, with the function's signature, before any shard is submitted: a misspelt or
ill-typed parameter is a ``ConfError`` naming the stage and the key (exit 2), never a TypeError retried
in every shard. The fingerprint hashes the model's JSON dump of the parameters the flow set.

A mapped stage gets shard ``i`` of each input as a table; a reduce stage (``reduce=True``, one shard)
gets each input as ``storage.parts.Parts``, a lazy dataset over all its parts; side inputs come whole,
as tables, except those the stage names ``lazy_side``, which come as ``Parts`` (a large side input that
each shard filters on read: the sample's rows of one shard's lines). Neither opens a file itself. The shard task
calls ``fn`` and commits its outputs as ``<role>-<i>.parquet`` in the output artifact, the main part last: a main part on
disk means the shard is finished. The Prefect cache key is the artifact fingerprint plus the shard,
so a re-run (or the UI's Retry) shows finished shards as Cached; the flow driver forces a recompute
of any shard whose file is missing, because the artifact store, not Prefect, is the ground truth.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import shutil
import time
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from conf.errors import ConfError
from storage import objects
from storage.artifacts import MAIN, ArtifactRef, commit_file, hash_file, recorded_hashes, temp_path, write_part
from storage.objects.models import localized
from tasks.runtime.progress import check_stop, in_shard, report

if TYPE_CHECKING:
    from prefect import Task

StageOutput = pa.Table | Mapping[str, pa.Table]


@dataclasses.dataclass(frozen=True)
class Stage:
    """A stage: its name and code version (both in the fingerprint), the function, and its view."""

    name: str
    version: str
    fn: Callable[..., StageOutput]
    view: str | None = None  # catalog view of its main output; None for internal artifacts
    tags: tuple[str, ...] = ()  # Prefect tags, e.g. ("gpu",) for model stages
    reduce: bool = False  # fn gets each input as Parts, a lazy dataset of all its parts (a global step) -> 1 shard
    params: type[BaseModel] | None = None  # the parameter model; None: built from fn's signature (param_model)
    lazy_side: tuple[str, ...] = ()  # side inputs handed to fn as Parts, not read whole per shard
    shard_arg: bool = False  # fn gets shard=i too (a mapped stage that writes a side role once: the aligner's tables)
    # (artifact, rows in) -> (rows in, kept, dropped) in rows, for a stage whose part is not the rows it keeps
    # (duplicates: one row per group) or whose drops an earlier stage already counted (clean's duplicates: each
    # row is counted once); None: rows in as read, kept = the part's rows, dropped = the dropped part's
    counts: Callable[[ArtifactRef, int], tuple[int, int, int]] | None = None

    def param_model(self, exclude: Collection[str] = ()) -> type[BaseModel]:
        """The stage's parameter model: ``params`` if declared, else one field per keyword parameter of
        ``fn`` (its annotation, its default) other than ``exclude`` (the side inputs and resources); a
        function with ``**kwargs`` takes any other key as it is."""
        return self.params or _signature_model(self.fn, frozenset(exclude))

    def bind(
        self, params: Mapping[str, Any] | BaseModel, *, n_inputs: int, side: Collection[str] = (), resources: Collection[str] = ()
    ) -> BaseModel:
        """Validate ``params`` (a mapping, or a conf section whose fields are the parameters) and check that
        ``fn`` accepts ``n_inputs`` inputs, the ``side`` inputs, the parameters and the ``resources``.
        Raises ConfError naming the stage and each wrong key."""
        data = params.model_dump() if isinstance(params, BaseModel) else dict(params)
        engine = ("shard",) if self.shard_arg else ()
        model = self.param_model({*side, *resources, *engine})
        try:
            bound = model.model_validate(data)
        except ValidationError as e:
            wrong = "; ".join(f"parameter {'.'.join(map(str, err['loc']))!r} {_problem(err, model)}" for err in e.errors())
            raise ConfError(f"stage {self.name!r}: {wrong}") from None
        try:
            inspect.signature(inspect.unwrap(self.fn)).bind(
                *range(n_inputs), **dict.fromkeys([*side, *resources, *engine]), **dict(bound)
            )
        except TypeError as e:
            raise ConfError(f"stage {self.name!r}: {self.fn.__name__}() does not take these inputs: {e}") from None
        return bound


def _problem(err: Mapping[str, Any], model: type[BaseModel]) -> str:
    if err["type"] == "extra_forbidden":
        return f"is not one of {', '.join(model.model_fields) or '(none)'}"
    if err["type"] == "missing":
        return "is required"
    return f"is invalid: {err['msg']} (found {err['input']!r})"


@functools.cache
def _signature_model(fn: Callable[..., Any], exclude: frozenset[str]) -> type[BaseModel]:
    fn = inspect.unwrap(fn)  # a wrapper (functools.wraps) stands for the function it wraps
    hints = typing.get_type_hints(fn)
    fields = {
        name: (hints.get(name, Any), ... if p.default is inspect.Parameter.empty else p.default)
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in exclude
    }
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    config = ConfigDict(extra="allow" if open_ended else "forbid", frozen=True, arbitrary_types_allowed=True)
    return create_model(f"{fn.__name__}_params", __config__=config, **fields)


@dataclasses.dataclass(frozen=True)
class ShardResult:
    shard: int
    status: str  # "computed" | "cached"
    started_at: str
    seconds: float
    rows_in: int
    rows_out: dict[str, int]
    files: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # parts PUT on an object store: their facts


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def commit_shard(
    out: ArtifactRef, shard: int, outputs: StageOutput, files: dict[str, dict[str, Any]] | None = None
) -> dict[str, int]:
    """Commit one shard's outputs, side roles first and the main part last.

    A file that is already recorded (in the manifest, or committed by an earlier try: a forced re-run, a
    retried or resumed shard) must come out byte-identical: ``write_part`` compares the hashes and raises an
    ``ArtifactError`` naming the stage, the shard and both hashes on a difference, keeping the recorded file.
    ``files`` collects what the manifest will say of each part PUT on an object store."""
    tables = {MAIN: outputs} if isinstance(outputs, pa.Table) else dict(outputs)
    recorded = recorded_hashes(out)
    for role in sorted(tables, key=lambda r: r == MAIN):
        path = out.path(shard, role)
        expect = recorded.get(objects.name(path)) or (hash_file(path) if objects.exists(path) else None)
        said = write_part(
            tables[role],
            path,
            recorded=expect,
            what=f"stage {out.stage!r} ({out.fingerprint[:12]}), shard {shard}" + (f" of {out.n_shards}" if out.n_shards else ""),
        )
        if said is not None and files is not None:
            files[objects.name(path)] = said
    return {role: t.num_rows for role, t in tables.items()}


def read_side(ref: ArtifactRef) -> pa.Table:
    """All shards of a side input (a small, unsharded table such as a duplicate list or a lexicon)."""
    return pa.concat_tables([ref.read(i) for i in range(ref.n_shards)])


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
    objects.use(out.store)  # on an object store: this process's scratch DuckDB connections read it
    if not force and objects.exists(out.path(shard)):
        return ShardResult(shard, "cached", started, 0.0, 0, {})
    check_stop()  # an interrupted run starts no shard
    side_tables = {name: ref.parts() if name in stage.lazy_side else read_side(ref) for name, ref in side.items()}
    resources = localized(resources) if out.store else resources  # models on the store: this host's copies
    label = f"{out.stage}[{out.dataset}]" + (f" shard {shard}" if out.n_shards and out.n_shards > 1 else "")
    if stage.reduce:
        parts = [ref.parts() for ref in inputs]
        with in_shard(label):  # a model's sentences done show under it (tasks/runtime/progress.py)
            result = stage.fn(*parts, **side_tables, **params, **(resources or {}))
        rows_in = sum(p.num_rows for p in parts)  # footers only
    else:
        tables = [ref.read(shard) for ref in inputs]
        with in_shard(label):
            shard_arg = {"shard": shard} if stage.shard_arg else {}
            result = stage.fn(*tables, **side_tables, **params, **(resources or {}), **shard_arg)
        rows_in = sum(t.num_rows for t in tables)
    files: dict[str, dict[str, Any]] = {}
    rows_out = commit_shard(out, shard, result, files)
    return ShardResult(shard, "computed", started, time.perf_counter() - t0, rows_in, rows_out, files)


def shard_cache_key(_context: Any, parameters: Mapping[str, Any]) -> str:
    """The Prefect cache key of a shard task: the artifact fingerprint and the shard number."""
    out: ArtifactRef = parameters["out"]
    return f"{out.stage}-{out.fingerprint}-{parameters['shard']:05d}"


# The Prefect tasks over these bodies, made on first use: importing Prefect costs ~1.5 s, which a replayed run
# (every stage cached, flows/engine/replay.py) never needs.


@functools.cache
def shard_task() -> Task:
    """run_shard as a Prefect task: with a cache key (the artifact's fingerprint and the shard), retries and a name."""
    from prefect import task

    return task(
        run_shard, name="stage-shard", task_run_name="{stage.name}-{shard:05d}", cache_key_fn=shard_cache_key, persist_result=True
    )


SourceFn = Callable[[], Iterator[tuple[int, StageOutput]]]


def run_source(out: ArtifactRef, produce: SourceFn, force: bool = False) -> list[ShardResult]:
    """The body of a source task (a reader): it streams shards in order and commits each one.

    Reading is sequential, but shards that are already on disk (a crashed run) are not rewritten, and
    because a shard always covers the same input rows, the resumed artifact is byte-identical.
    """
    results, t0, started = [], time.perf_counter(), _now()
    objects.use(out.store)
    for shard, outputs in produce():
        if not force and objects.exists(out.path(shard)):
            results.append(ShardResult(shard, "cached", started, 0.0, 0, {}))
        else:
            files: dict[str, dict[str, Any]] = {}
            rows_out = commit_shard(out, shard, outputs, files)
            seconds = time.perf_counter() - t0
            results.append(ShardResult(shard, "computed", started, seconds, sum(rows_out.values()), rows_out, files))
        report(f"{out.stage}[{out.dataset}]", len(results), None)
        t0, started = time.perf_counter(), _now()
    return results


def build_model(path: Path, build: Callable[[Path], None], publish: str | None = None) -> float:
    """The body of a model task: ``build`` writes the model (a file or a directory) to a temporary name,
    renamed to ``path`` when complete (a crash never leaves a model that looks trained), then (``publish``: an
    object-store prefix) PUT there with its manifest last (storage/objects/models.py). Returns the seconds it took."""
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
    if publish is not None:
        from storage.objects.models import publish as put_model

        put_model(path, publish)
    return time.perf_counter() - t0


@functools.cache
def model_task() -> Task:
    """build_model as a Prefect task, without Prefect's cache: the model file on disk is the record (as an
    artifact's manifest is)."""
    from prefect import task
    from prefect.cache_policies import NO_CACHE

    return task(build_model, name="model", task_run_name="{path.parent.parent.name}", cache_policy=NO_CACHE, persist_result=False)


def source_cache_key(_context: Any, parameters: Mapping[str, Any]) -> str:
    """The Prefect cache key of a source task: its output artifact's stage and fingerprint."""
    out: ArtifactRef = parameters["out"]
    return f"{out.stage}-{out.fingerprint}"


@functools.cache
def source_task() -> Task:
    """run_source as a Prefect task, cached by the artifact's fingerprint."""
    from prefect import task

    return task(run_source, name="source", task_run_name="{out.stage}", cache_key_fn=source_cache_key, persist_result=True)
