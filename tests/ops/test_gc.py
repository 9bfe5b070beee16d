"""`augdag gc` (flows/ops/gc.py), as a user runs it: what crashed writers left in the cache and on its object store
(moto's S3 server) is listed by --dry-run and removed by gc; complete artifacts stay; a running run refuses it."""

import os
import subprocess
import sys

from storage import objects
from storage.artifacts import ArtifactRef, write_manifest
from storage.catalog import Catalog
from storage.objects import models as model_store
from tasks.runtime.stage import commit_shard
from tests.conftest import augdag, bitext

ROWS = bitext([("a b", "x y"), ("c", "z")])


def _artifact(root, fp, store=None, *, finished=True) -> ArtifactRef:
    ref = ArtifactRef(str(root), "clean", fp, "bitext", "d", 1, store)
    commit_shard(ref, 0, ROWS)
    if finished:
        Catalog(root).register(ref, write_manifest(ref, version="1", params={}), run_id="r1")
    return ref


def test_gc_removes_what_crashed_writers_left_here_and_on_the_store_and_keeps_every_complete_artifact(tmp_path, s3_env):
    cache, store = tmp_path / "cache", s3_env.bucket("aug-gc") + "/night"
    objects.use(store)
    kept_here, kept_there = _artifact(cache, "a" * 32), _artifact(cache, "b" * 32, store)
    half_here, half_there = _artifact(cache, "c" * 32, finished=False), _artifact(cache, "d" * 32, store, finished=False)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    tmp = kept_here.dir / f".part-00001.parquet.{dead.stdout.strip()}.0123abcd.tmp"  # a killed writer's temporary file
    tmp.write_bytes(b"half")
    live = kept_here.dir / f".part-00002.parquet.{os.getpid()}.0123abcd.tmp"  # this process still writes it
    live.write_bytes(b"writing")
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"w" * 10)
    model_store.publish(model, f"{store}/models/fairseq/{'e' * 32}")
    objects.put_bytes(b"half a model", f"{store}/models/fairseq/{'f' * 32}/model/weights.bin")  # no manifest

    dry = augdag(tmp_path, "gc", "--dry-run", "--cache", str(cache), **s3_env.env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"would remove unfinished artifact {half_here.dir} (1 file(s), {_size(half_here):,} bytes)",
        f"would remove unfinished artifact {half_there.dir} (1 file(s), {_size(half_there):,} bytes)",
        f"would remove unpublished model {store}/models/fairseq/{'f' * 32} (1 file(s), 12 bytes)",
        f"would remove temporary file {tmp} (1 file(s), 4 bytes)",
        f"gc: would remove 4 item(s), {_size(half_here) + _size(half_there) + 16:,} bytes; complete artifacts kept",
    ]
    assert half_here.dir.exists() and objects.exists(half_there.path(0)) and tmp.exists()

    done = augdag(tmp_path, "gc", "--cache", str(cache), **s3_env.env)
    assert done.returncode == 0 and done.stdout.splitlines()[-1].startswith("gc: removed 4 item(s), "), done.stderr
    assert not half_here.dir.exists() and not objects.exists(half_there.path(0)) and not tmp.exists()
    assert live.exists()  # a live writer's file stays
    assert sorted(s3_env.objects(store)) == [
        f"artifacts/clean/{'b' * 32}/manifest.json",
        f"artifacts/clean/{'b' * 32}/part-00000.parquet",
        f"models/fairseq/{'e' * 32}/manifest.json",
        f"models/fairseq/{'e' * 32}/model/weights.bin",
    ]
    assert (kept_here.dir / "part-00000.parquet").exists() and objects.exists(kept_there.path(0))
    again = augdag(tmp_path, "gc", "--cache", str(cache), **s3_env.env)
    assert again.stdout == "gc: removed 0 item(s), 0 bytes; complete artifacts kept\n"


def _size(ref: ArtifactRef) -> int:
    return objects.size(ref.path(0))


def test_gc_while_a_run_is_running_is_one_line_and_exit_2_removing_nothing(tmp_path):
    cache = tmp_path / "cache"
    half = _artifact(cache, "c" * 32, finished=False)
    _artifact(cache, "a" * 32)
    Catalog(cache).start_run(
        "night-1", pipeline="nightly", profile="demo", config={}, flow_run_id=None
    )  # owned by this live process
    refused = augdag(tmp_path, "gc", "--cache", str(cache))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("error: gc: run night-1 is running on ")
    assert "gc would remove them. Run `augdag gc` when `augdag runs` shows no run running" in " ".join(refused.stderr.split())
    assert len(refused.stderr.strip().splitlines()) <= 2 and half.dir.exists()


def test_gc_of_a_cache_that_does_not_exist_is_one_line_and_creates_nothing(tmp_path):
    done = augdag(tmp_path, "gc", "--cache", str(tmp_path / "typo"))
    assert done.returncode == 2 and not (tmp_path / "typo").exists()
