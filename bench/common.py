"""What the benchmarks share: seeded demo pairs on disk, their bitext config, one Prefect server, timing.

Not a benchmark itself. Import ``flows`` (through this module) before Prefect: it switches the offline
environment variables on.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import flows  # noqa: F401 — offline defaults before Prefect is imported
from conf.schema import AugdagConf, DatasetConf, TaskRunnerConf
from demo import write_demo

DATASET = "bench"  # the one dataset's name in every benchmark profile


@contextmanager
def workdir(prefix: str, *, keep: bool = False) -> Iterator[Path]:
    """A fresh directory under /tmp, removed afterwards (even on failure) unless ``keep``."""
    path = Path(tempfile.mkdtemp(prefix=f"augdag-bench-{prefix}-", dir="/tmp"))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def demo_pairs(root: Path, n: int, *, seed: int = 0) -> DatasetConf:
    """Write ``n`` seeded demo pairs (no planted bad lines) to ``root/train.{en,de}``; their dataset config."""
    paths, _ = write_demo(
        root, seed=seed, bitext_rows=n, mono_rows=100, labeled_rows=100, slots_rows=100, test_rows=100, bad_rows=False
    )
    paths.alignments.unlink()  # not read by ingest; a third of the bytes
    return DatasetConf(kind="bitext", format="text", src=paths.train_src, tgt=paths.train_tgt)


def bench_conf(cache: Path, ds: DatasetConf, *, shard_size: int = 100_000, workers: int | None = None) -> AugdagConf:
    """A profile with the one bitext dataset; ``workers`` threads (None: one per core, as `augdag run`)."""
    return AugdagConf(
        cache=cache,
        shard_size=shard_size,
        datasets={DATASET: ds},
        task_runner=TaskRunnerConf(kind="threads", max_workers=workers),
    )


@contextmanager
def prefect_server(root: Path) -> Iterator[None]:
    """Prefect's temporary server for the whole benchmark (its start-up is timed by nobody)."""
    from prefect.testing.utilities import prefect_test_harness

    results = root / "prefect-results"
    results.mkdir(parents=True, exist_ok=True)
    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(results)
    with prefect_test_harness(server_startup_timeout=180):
        yield


def run_ingest(conf: AugdagConf) -> tuple[dict[str, Any], float]:
    """``ingest_flow`` as `augdag run ingest` calls it (the profile's task runner); (summary, wall seconds)."""
    from flows.engine.runners import run_flow
    from flows.pipelines.ingest import ingest_flow

    t0 = time.perf_counter()
    summary = run_flow(ingest_flow, conf, profile="bench", config=conf.model_dump(mode="json"))
    seconds = time.perf_counter() - t0
    if summary["status"] != "completed":
        raise RuntimeError(f"ingest run {summary['run_id']} {summary['status']}: {summary['error']}")
    return summary, seconds


def stage_rows(summary: dict[str, Any]) -> dict[str, dict[str, int]]:
    """stage -> rows_out by role, of the one dataset."""
    return {s["stage"]: s["rows_out"] for s in summary["stages"]}


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def best_of(repeat: int, run: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of ``repeat`` calls of ``run`` in seconds, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - t0)
    return best, result


def median(xs: list[float]) -> float:
    return statistics.median(xs)
