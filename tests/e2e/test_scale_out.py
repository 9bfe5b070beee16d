"""Scale-out (issue 6): a local Dask cluster of two worker processes (and Ray's local instance, with the `ray`
extra) writes the artifacts threads write, byte for byte. (The `gpu` tag limit and the runners' settings:
tests/engine/test_task_runners.py.)"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from conf.loader import load_profile
from conf.schema import AugdagConf
from demo import write_demo
from storage.catalog import Catalog
from tests.conftest import REPO

slow = pytest.mark.slow


def _conf(cache: Path, data: Path, *sets: str) -> AugdagConf:
    return load_profile(
        REPO / "conf" / "demo.yaml", ["shard_size=500", *sets], cache=cache, environ={"AUGDAG_DEMO_DATA": str(data)}
    )


def _sampling_flow():
    """The self-training pipeline up to `sampled_mono`: ingest, alignment, U of every shard, the sample."""
    from prefect import flow

    from flows.engine.driver import Run
    from flows.pipelines.self_training import sample_monolingual

    @flow(name="scale_out_sampling")
    def sampling(conf: AugdagConf) -> dict:
        with Run.started(conf, pipeline="scale_out_sampling", profile="test", config=None) as run:
            sample_monolingual(run, conf)
        return run.finish()

    return sampling


def _parts(cache: Path) -> dict[str, dict[str, str]]:
    """fingerprint -> {file name: sha256} of every artifact the catalog lists."""
    rows = Catalog(cache).query("SELECT stage, fingerprint FROM artifacts").to_pylist()
    return {
        r["fingerprint"]: {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((cache / "artifacts" / r["stage"] / r["fingerprint"]).glob("*.parquet"))
        }
        for r in rows
    }


@pytest.fixture(scope="module")
def by_threads(prefect_harness, tmp_path_factory):
    """The demo data, and the cache of one run on threads (the reference)."""
    from flows.engine.runners import run_flow

    data, cache = tmp_path_factory.mktemp("scale-data"), tmp_path_factory.mktemp("scale-threads")
    write_demo(data, seed=7, bitext_rows=2000, mono_rows=2000, labeled_rows=100, slots_rows=100)
    summary = run_flow(_sampling_flow(), _conf(cache, data))
    assert summary["status"] == "completed"
    assert len(_parts(cache)) == len(summary["stages"])
    return data, cache


@slow
def test_dask_two_workers_write_the_same_artifacts_as_threads(by_threads, tmp_path):
    from flows.engine.runners import run_flow

    data, threads = by_threads
    summary = run_flow(_sampling_flow(), _conf(tmp_path, data, "task_runner.kind=dask", "task_runner.n_workers=2"))
    assert summary["status"] == "completed"
    scored = next(s for s in summary["stages"] if (s["stage"], s["dataset"]) == ("uncertainty", "demo_mono"))
    assert scored["shards"] == scored["shards_computed"] == 4  # 2000 rows, shards of 500
    # the same fingerprints; every part, rejects and dropped file byte-identical
    assert _parts(tmp_path) == _parts(threads)


needs_ray = pytest.mark.skipif(importlib.util.find_spec("prefect_ray") is None, reason="no `ray` extra: pip install -e .[ray]")


@slow
@needs_ray
def test_ray_local_instance_writes_the_same_artifacts_as_threads(by_threads, tmp_path):
    from flows.engine.runners import run_flow

    data, threads = by_threads
    summary = run_flow(_sampling_flow(), _conf(tmp_path, data, "task_runner.kind=ray", "task_runner.n_workers=2"))
    assert summary["status"] == "completed"
    assert _parts(tmp_path) == _parts(threads)
