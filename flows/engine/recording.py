"""What the flow driver records of each stage: its report in the run summary and its rows in the catalog.

``record_computed`` (every shard succeeded: the manifest, the artifact, its lineage and shard runs),
``record_cached`` (a complete artifact found: its shards as cached) and ``record_failure`` (the written
and failed shards, and the one-line ``StageError`` that names the stage, dataset, shard i of N, the
input, why, and the run to retry). The driver (flows/engine/driver.py) decides; this module writes.

A report's counts are rows, computed or cached alike: ``rows_in`` the stage's input rows (a shard this run did
not compute counts the rows recorded in `stage_runs` when it was computed, ``recorded_rows_in``), ``kept`` and
``dropped`` input rows (the part's and the dropped part's rows, or the stage's own ``counts`` where its part is
not the rows it keeps: duplicates, one row per group). A run's totals: flows/engine/counts.py.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conf.at_rest import redact
from conf.errors import AugdagError, StageError
from flows.engine.replay import run_logger
from flows.engine.transient import is_transient
from storage.artifacts import ArtifactRef, canonical, read_manifest, write_manifest
from tasks.runtime.stage import ShardResult

if TYPE_CHECKING:
    from flows.engine.driver import Run

Counts = Callable[[ArtifactRef, int], tuple[int, int, int]]  # (artifact, rows in) -> (rows in, kept, dropped): Stage.counts


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
    rows_in: int  # input rows, also of the shards computed before this run (recorded_rows_in)
    rows_out: dict[str, int]  # the artifact's rows per role (part, rejects, dropped, ...)
    seconds: float
    error: str | None = None
    kind: str = "artifact"  # artifact | model
    failed_shards: list[int] = dataclasses.field(default_factory=list)
    shards_known: bool = True  # False: `shards` is a lower bound (a reader that failed before its input's end)
    view: str | None = None  # the catalog view its part fills; None: an internal artifact
    kept: int | None = None  # input rows kept (the part's rows unless the stage counts them); None: failed
    dropped: int | None = None  # input rows dropped (the dropped part's, unless the stage counts them)


def kept_dropped(out: ArtifactRef, rows_in: int, rows_out: Mapping[str, int], counts: Counts | None) -> tuple[int, int, int]:
    """Rows in, kept and dropped: the stage's ``counts`` when it has them, else as read, its part and dropped part."""
    return counts(out, rows_in) if counts else (rows_in, rows_out.get("part", 0), rows_out.get("dropped", 0))


_recorded: dict[Path, dict[tuple[str, int], int]] = {}  # catalog -> (fingerprint, shard) -> rows in, read once
_recorded_lock = threading.Lock()


def recorded_rows_in(run: Run, fingerprint: str, shards: Sequence[int]) -> int:
    """Input rows of ``shards`` of an artifact as `stage_runs` recorded them when each was computed (by this
    run or an earlier one: a cached shard's own record says 0). One read of the catalog per process (a shard's
    record never changes: the same fingerprint computes the same rows), again only for a shard it did not know
    (computed since, by a pipeline beside it or another process); a shard never recorded counts 0."""
    with _recorded_lock:
        known = _recorded.get(run.catalog.path)
        if known is None or any((fingerprint, s) not in known for s in shards):
            with run.catalog.read() as con:  # not query(): a replay's deferred registrations stay deferred
                known = {
                    (f, s): n
                    for f, s, n in con.execute(
                        "SELECT fingerprint, shard, arg_max(rows_in, started_at) FROM stage_runs WHERE status = 'computed'"
                        " AND rows_in IS NOT NULL GROUP BY ALL"
                    ).fetchall()
                }
            _recorded[run.catalog.path] = known
            while len(_recorded) > 32:  # a server runs many caches' runs: keep the latest
                _recorded.pop(next(iter(_recorded)))
        return sum(known.get((fingerprint, s), 0) for s in shards)


def record_computed(
    run: Run,
    out: ArtifactRef,
    results: list[ShardResult],
    *,
    version: str,
    params: Mapping[str, Any],
    inputs: Sequence[str],
    models: Sequence[str],
    t0: float,
    counts: Counts | None = None,
) -> ArtifactRef:
    """Every shard succeeded: write the manifest, register the artifact with its lineage and shard runs."""
    known = {name: said for r in results for name, said in getattr(r, "files", {}).items()}  # parts PUT on a store
    stored = redact(json.loads(canonical(params)))  # the fingerprint hashed the values; the manifest keeps ${VAR}
    manifest = write_manifest(out, version=version, params=stored, inputs=inputs, models=models, known=known)
    computed = [r for r in results if r.status == "computed"]
    before = [r.shard for r in results if r.status != "computed"]  # on disk before this run: their own record
    rows_in = sum(r.rows_in for r in computed) + (recorded_rows_in(run, out.fingerprint, before) if before else 0)
    run.catalog.register(out, manifest, run_id=run.run_id, parents=[*inputs, *models], stage_runs=shard_rows(run, out, results))
    rows_out = rows_by_role(manifest)
    counted_in, kept, dropped = kept_dropped(out, rows_in, rows_out, counts)  # rows_in: as read (the log's)
    run.reports.append(
        StageReport(
            out.stage,
            out.dataset,
            out.fingerprint,
            "computed" if computed else "cached",
            out.n_shards,
            len(computed),
            counted_in,
            rows_out,
            time.perf_counter() - t0,
            view=out.view,
            kept=kept,
            dropped=dropped,
        )
    )
    run_logger().info(
        "%s[%s] %s: %d/%d shards computed, rows %s -> %s",
        out.stage,
        out.dataset,
        out.fingerprint[:12],
        len(computed),
        out.n_shards,
        rows_in,
        rows_out,
    )
    return out


def shard_rows(run: Run, out: ArtifactRef, results: Sequence[ShardResult]) -> list[dict[str, Any]]:
    """`stage_runs` rows of the shards that were written (computed, or cached: already on disk)."""
    return [
        {
            "run_id": run.run_id,
            "stage": out.stage,
            "dataset": out.dataset,
            "fingerprint": out.fingerprint,
            "shard": r.shard,
            "status": r.status,
            "started_at": r.started_at,
            "seconds": r.seconds,
            "rows_in": r.rows_in,
            "rows_out": r.rows_out.get("part", 0),
            "error": None,
        }
        for r in results
    ]


def record_cached(
    run: Run, out: ArtifactRef, manifest: Mapping[str, Any], parents: Sequence[str], t0: float, counts: Counts | None = None
) -> ArtifactRef:
    """A complete artifact found: registered for this run, every shard shown as cached; its rows in are those
    recorded when its shards were computed."""
    rows_out = rows_by_role(manifest)
    shards = sorted({f["shard"] for f in manifest["files"] if f["role"] == "part"})
    rows_in = recorded_rows_in(run, out.fingerprint, shards)
    counted_in, kept, dropped = kept_dropped(out, rows_in, rows_out, counts)  # rows_in: as read (the log's)
    cached = [  # every shard of a cached stage shows in `stage_runs` as cached, as in the UI
        {
            "run_id": run.run_id,
            "stage": out.stage,
            "dataset": out.dataset,
            "fingerprint": out.fingerprint,
            "shard": f["shard"],
            "status": "cached",
            "seconds": 0.0,
            "rows_in": 0,
            "rows_out": f["rows"],
        }
        for f in manifest["files"]
        if f["role"] == "part"
    ]
    run.catalog.register(out, manifest, run_id=run.run_id, parents=parents, stage_runs=cached)
    run.reports.append(
        StageReport(
            out.stage,
            out.dataset,
            out.fingerprint,
            "cached",
            out.n_shards,
            0,
            counted_in,
            rows_out,
            time.perf_counter() - t0,
            view=out.view,
            kept=kept,
            dropped=dropped,
        )
    )
    run_logger().info("%s[%s] %s: cached (%d shards)", out.stage, out.dataset, out.fingerprint[:12], out.n_shards)
    return out


def record_failure(
    run: Run,
    out: ArtifactRef,
    failed: Mapping[int, BaseException],
    t0: float,
    *,
    written: Sequence[ShardResult] = (),
    inputs: Callable[[int], str | None] = lambda _shard: None,
    shards_known: bool = True,
) -> StageError:
    """Record a failed stage in `stage_runs` (its written shards, computed or cached, and its failed ones)
    and return the error that says it in one line: what failed (stage, dataset, shard i of N, the input
    file ``inputs(i)``), why, and what is kept. ``run_id``, ``cache`` and ``log`` ride on the error (the
    CLI prints the command that resumes). ``shards_known`` False: N is a lower bound (a reader)."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds")
    rows = shard_rows(run, out, written)
    rows += [
        {
            "run_id": run.run_id,
            "stage": out.stage,
            "dataset": out.dataset,
            "fingerprint": out.fingerprint,
            "shard": shard,
            "status": "failed",
            "started_at": now,
            "error": f"{type(e).__name__}: {one_line(e)}",
        }
        for shard, e in sorted(failed.items())
    ]
    run.catalog.register_failures(rows)
    n = out.n_shards if shards_known else max([*failed, *(r.shard for r in written)]) + 1
    first_shard, first = min(failed.items())
    which = f"shard {first_shard}" if len(failed) == 1 else f"shards {', '.join(map(str, sorted(failed)))}; shard {first_shard}"
    where = f", input {source}" if (source := inputs(first_shard)) else ""
    kept = f" {len(written)} written shard(s) are kept." if written else ""
    msg = (
        f"stage {out.stage!r} (dataset {out.dataset}) failed on {which} {'of' if shards_known else '(of at least'}"
        f" {n}{'' if shards_known else ')'}{where}: {explain(run, first)}.{kept}"
    )
    rows_out: dict[str, int] = {}
    for r in written:
        for role, k in r.rows_out.items():
            rows_out[role] = rows_out.get(role, 0) + k
    run.reports.append(
        StageReport(
            out.stage,
            out.dataset,
            out.fingerprint,
            "failed",
            n,
            sum(r.status == "computed" for r in written),
            sum(r.rows_in for r in written),
            rows_out,
            time.perf_counter() - t0,
            msg,
            failed_shards=sorted(failed),
            shards_known=shards_known,
        )
    )
    logger = run_logger()
    for shard, e in sorted(failed.items()):  # the tracebacks, for the run's log (Prefect logs none when
        logger.error("%s[%s] shard %d failed:", out.stage, out.dataset, shard, exc_info=e)  # it did not retry)
    logger.error("%s", msg)
    error = StageError(msg)
    if all(isinstance(e, AugdagError) and e.exit_code == 2 for e in failed.values()):
        error.exit_code = 2  # the input or configuration is wrong, not the run: bad usage
    error.run_id, error.cache, error.log = run.run_id, run.root, run.log
    return error


def explain(run: Run, error: BaseException) -> str:
    """An error in words: augdag's own message (it starts with the place), else the type and message,
    and for a transient error that it outlived the retries."""
    text = one_line(error) if isinstance(error, AugdagError) else f"{type(error).__name__}: {one_line(error)}"
    if is_transient(error) and run.orchestration.retries:
        text += f" (still failing after {run.orchestration.retries} retries)"
    return text.rstrip(".")


def one_line(error: BaseException) -> str:
    """``error``'s message on one line (whitespace runs collapsed), or its type's name when it has none."""
    return " ".join(str(error).split()) or type(error).__name__
