"""Every registered pipeline of the demo survives a crash: on a copy of the session's tiny `augdag demo` cache (demo/
tiny.py's sizes: every pipeline, each stage as it runs in the demo, on 300 pairs), a part of
one of the stages the pipeline computed (one with the most shards) and its manifest are deleted, as a process
killed before the stage finished leaves it; `augdag run <pipeline>`'s code path (replayed while cached, handed to
Prefect at the stage that must compute) recomputes that shard alone, byte for byte, and nothing else. That a
second night over the same cache computes nothing is tested on the demo itself (tests/cli/test_cli.py)."""

from __future__ import annotations

import fcntl
import json
import shutil
from pathlib import Path

import pytest

from conf.loader import load_profile
from demo.tiny import TINY_SETS
from storage.artifacts import MANIFEST
from storage.catalog import Catalog
from tests.conftest import DEMO_PIPELINES

pytestmark = [pytest.mark.slow, pytest.mark.tiny_demo_run]


@pytest.fixture(scope="module")
def demo_copy(tiny_demo_run, prefect_harness, tmp_path_factory) -> tuple[Path, Path]:
    """A copy of the finished tiny demo's cache (its paths are relative: it answers as the original), and the demo's
    data directory, which the copy reads where the demo read it (a dataset's path is one of its read's parameters)."""
    assert tiny_demo_run.returncode == 0, (tiny_demo_run.stdout + tiny_demo_run.stderr)[-3000:]
    copy = tmp_path_factory.mktemp("every-pipeline") / "cache"
    ignore = shutil.ignore_patterns("server", "logs", "*.lock", "demo-data")
    # under the catalog's shared lock, as every reader takes it
    with open(tiny_demo_run.cache / "catalog.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        shutil.copytree(tiny_demo_run.cache, copy, symlinks=True, ignore=ignore)
    return copy, tiny_demo_run.cache / "demo-data"


def computed_in_the_demo(cache: Path, pipeline: str) -> list[dict]:
    """The artifact stages ``pipeline``'s run of the demo night computed itself (not cached from a sibling)."""
    summary = (
        Catalog(cache)
        .query(
            "SELECT summary FROM runs WHERE pipeline = $p AND status = 'completed' ORDER BY started_at LIMIT 1", {"p": pipeline}
        )
        .column(0)[0]
        .as_py()
    )
    return [s for s in json.loads(summary)["stages"] if s["kind"] == "artifact" and s["status"] == "computed"]


@pytest.mark.parametrize("pipeline", DEMO_PIPELINES)
def test_a_lost_shard_of_every_pipeline_is_recomputed_alone_and_byte_identical(demo_copy, pipeline):
    from flows.cli.run import run_pipeline

    demo_copy, data = demo_copy
    # the stage with the most shards (a mapped one), of those the quickest to compute again
    stage = max(computed_in_the_demo(demo_copy, pipeline), key=lambda s: (s["shards"], -s["seconds"]))
    artifact = demo_copy / "artifacts" / stage["stage"] / stage["fingerprint"]
    parts = sorted(artifact.glob("part-*.parquet"))
    victim = parts[min(1, len(parts) - 1)]
    before = victim.read_bytes()
    victim.unlink()
    (artifact / MANIFEST).unlink()

    conf = load_profile("demo", TINY_SETS, cache=demo_copy, environ={"AUGDAG_DEMO_DATA": str(data)}, pipeline=pipeline)
    resumed = run_pipeline(pipeline, conf, "demo")
    assert resumed["status"] == "completed", resumed.get("error")
    redo = [s for s in resumed["stages"] if s["fingerprint"] == stage["fingerprint"]]
    assert [(s["status"], s["shards_computed"]) for s in redo] == [("computed", 1)], redo
    assert victim.read_bytes() == before
    assert {s["status"] for s in resumed["stages"] if s["fingerprint"] != stage["fingerprint"]} == {"cached"}
