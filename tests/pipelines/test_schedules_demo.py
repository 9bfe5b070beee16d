"""The samplers against what the tiny demo trained (issue 49): the curriculum sampler over the `curriculum` view
yields the batches train_classifier recorded beside its classifier, and each train_nmt arm's Mix, built from the
arm's queries over the catalog's views, is its `training_mix` artifact row for row."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from augdag.samplers import Curriculum, Mix
from storage.catalog import Catalog
from tasks.train_classifier.classify import BATCHES

pytestmark = [pytest.mark.slow, pytest.mark.tiny_demo_run]


@pytest.fixture(scope="module")
def demo_cache(tiny_demo_run) -> Path:
    assert tiny_demo_run.returncode == 0, (tiny_demo_run.stdout + tiny_demo_run.stderr)[-3000:]
    return tiny_demo_run.cache


def test_the_curriculum_sampler_yields_the_batches_train_classifier_trained_with(demo_cache):
    catalog = Catalog(demo_cache)
    (model,) = catalog.query("SELECT path, meta FROM models WHERE name = 'classifier'").to_pylist()
    params = json.loads(model["meta"])["params"]
    rows = catalog.query("SELECT * FROM curriculum WHERE source = 'demo_labeled'")
    sampler = Curriculum(
        rows,
        **{k: params[k] for k in ("schedule", "levels", "cycles", "steps_per_level", "batch_size", "original_share", "seed")},
    )
    recorded = pq.read_table(Path(model["path"]) / BATCHES)
    # the tiny demo's schedule: cyclic over levels 0..5, one cycle of 2 steps each, 16 rows a step
    assert (params["schedule"], sampler.steps()) == ("cyclic", [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5])
    assert recorded.num_rows == 12 * 16 and recorded.equals(sampler.record())
    level_of = dict(zip(rows["uid"].to_pylist(), rows["level"].to_pylist()))
    for step, batch in enumerate(sampler):
        levels = [level_of[u] for u in batch["uid"].to_pylist()]
        # round(0.2 · 16) = 3 originals first; the rest of the step's level where the sentence has one
        assert levels[:3] == [0, 0, 0] and set(levels[3:]) <= {0, sampler.steps()[step]}


def test_each_arms_mix_is_its_training_mix_artifact_row_for_row(demo_cache):
    catalog = Catalog(demo_cache)
    arms = catalog.query("SELECT params FROM artifacts WHERE stage = 'training_mix' ORDER BY dataset")["params"].to_pylist()
    assert sorted(json.loads(p)["arm"] for p in arms) == ["bitext", "rejuvenated"]
    for params in map(json.loads, arms):
        mix = Mix(
            {name: catalog.query(sql) for name, sql in params["mix"].items()},
            params["copies"],
            arm=params["arm"],
            phase=params["phase"],
        )
        artifact = catalog.query(
            "SELECT * FROM training_mix WHERE arm = $a AND phase = $p ORDER BY line",
            {"a": params["arm"], "p": params["phase"]},
        )
        assert artifact.num_rows > 0 and mix.table().equals(artifact.select(mix.table().column_names))
        assert Mix.from_training_mix(artifact, arm=params["arm"]).table().equals(mix.table())


USER_SCRIPT = """
import sys
import augdag
import pyarrow.parquet as pq
from augdag.samplers import Curriculum, Mix

cache = augdag.open(sys.argv[1])
night = cache.latest("train_classifier")
sampler = Curriculum(
    night.view("curriculum", where="source = 'demo_labeled'"),
    schedule="cyclic", levels=5, cycles=1, steps_per_level=2, batch_size=16, original_share=0.2, seed=0,
)
pq.write_table(sampler.record(), "batches.parquet")
arm = Mix.from_training_mix(cache.latest("train_nmt").view("training_mix"), arm="rejuvenated")
pq.write_table(arm.table(), "rejuvenated.parquet")
first = next(arm.interleaved(seed=1, batch_size=8))
print(arm.num_rows, arm.proportions(), first.num_rows)
"""


def test_a_user_script_pinned_to_the_nights_runs_samples_what_augdag_trained_on(demo_cache, tmp_path):
    """As a user's trainer would: `augdag.samplers` over views pinned to the runs that trained, in a subprocess."""
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    proc = subprocess.run(
        [sys.executable, "-c", USER_SCRIPT, str(demo_cache)],
        cwd=tmp_path,
        env=subprocess_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    catalog = Catalog(demo_cache)
    (path,) = catalog.query("SELECT path FROM models WHERE name = 'classifier'")["path"].to_pylist()
    assert pq.read_table(tmp_path / "batches.parquet").equals(pq.read_table(Path(path) / BATCHES))
    artifact = catalog.query("SELECT * FROM training_mix WHERE arm = 'rejuvenated' ORDER BY line")
    assert pq.read_table(tmp_path / "rejuvenated.parquet").equals(artifact)
    assert proc.stdout == f"{artifact.num_rows} {{'rejuvenated': 1.0}} 8\n"
