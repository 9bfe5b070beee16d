"""A fingerprint names its bytes (issue 25): model stages side by side in threads of one process draw exactly
what each draws alone, and a part computed again must reproduce its recorded bytes. (Two nights of the demo's
pipelines, all at once, one killed and retried, giving the same bytes and scores: tests/e2e/test_killed_night.py.)"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from conf.errors import ArtifactError
from models.classifier import build_classifier
from models.classifier.bag import BagClassifier
from models.generation import HFParaphraser, Sampler
from storage.artifacts import ArtifactRef, hash_file, write_manifest, write_part
from tasks.runtime.stage import Stage, run_shard
from tests.models.test_generation import SRC, gpt2_dir  # noqa: F401 — the module fixture (a tiny random GPT-2)

LABELS = ["a", "b", "c"]
TEXTS = [f"{w} {v} {u}" for w in ("red", "green", "blue") for v in ("cat", "dog") for u in ("runs", "sits")]
TARGETS = [i % 3 for i in range(len(TEXTS))]


def train_classifier(steps: int = 4) -> bytes:
    """A builtin classifier (dropout 0.5: every step draws) trained ``steps`` steps: its distributions' bytes."""
    clf = build_classifier("builtin", LABELS, seed=3, lr=0.05, device="cpu", threads=1, dropout=0.5, dim=16, buckets=1024)
    for _ in range(steps):
        clf.train_step(TEXTS, TARGETS)
    return clf.predict_proba(TEXTS).tobytes()


def sample(para: HFParaphraser) -> list[list[str]]:
    plan = [(Sampler(top_k=0, top_p=1.0, temperature=2.0, seed=5), 4)]
    return para.generate(SRC[:6], plan, max_len_a=0, max_len_b=4)[plan[0][0].name]


def test_classifier_training_and_sampling_side_by_side_draw_what_each_draws_alone(gpt2_dir, monkeypatch):  # noqa: F811
    """Forced interleaving: the classifier's first step stops right after seeding, until the sampler in the other
    thread has seeded torch's global generator too (or 1 s has passed: it cannot while the step owns the
    generators). Without an owner of the global state the sampler's seed lands inside the step's dropout draws
    and the step's fork_rng exit rewinds the sampler's generator: both outputs change."""
    para = HFParaphraser.load(gpt2_dir, device="cpu", threads=1)
    alone = (train_classifier(), sample(para))
    assert alone == (train_classifier(), sample(para))  # each is deterministic alone

    sampler_seeded, step_started, sampler_thread = threading.Event(), threading.Event(), []
    manual_seed, logits = torch.manual_seed, BagClassifier._logits

    def spying_manual_seed(seed):
        out = manual_seed(seed)
        if threading.current_thread() in sampler_thread:
            sampler_seeded.set()
        return out

    def first_step_waits(self, texts):
        if not step_started.is_set():
            step_started.set()
            sampler_seeded.wait(timeout=1.0)
        return logits(self, texts)

    monkeypatch.setattr(torch, "manual_seed", spying_manual_seed)
    monkeypatch.setattr(BagClassifier, "_logits", first_step_waits)
    results: dict[str, object] = {}

    def sampler() -> None:
        step_started.wait(timeout=10)
        results["samples"] = sample(para)

    thread = threading.Thread(target=sampler)
    sampler_thread.append(thread)
    thread.start()
    results["classifier"] = train_classifier()
    thread.join()
    assert step_started.is_set()
    assert (results["classifier"], results["samples"]) == alone


def _planted(rows: pa.Table, *, salt: int) -> pa.Table:
    return rows.append_column("y", pa.array([salt] * rows.num_rows, pa.int64()))


PLANTED = Stage("planted", "1", _planted)


def test_a_part_computed_again_with_other_bytes_fails_naming_stage_shard_and_both_hashes(tmp_path):
    rows = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    source = ArtifactRef(str(tmp_path), "source", "f" * 32, None, None, 1)
    write_part(rows, source.path(0))
    out = ArtifactRef(str(tmp_path), "planted", "e" * 32, None, None, 1)
    run_shard(PLANTED, out, 0, (source,), {}, {"salt": 1})
    write_manifest(out, version="1", params={"salt": 1})
    recorded = hash_file(out.path(0))
    run_shard(PLANTED, out, 0, (source,), {}, {"salt": 1}, force=True)  # the same bytes again: fine
    with pytest.raises(ArtifactError) as e:  # the code changed under the same fingerprint
        run_shard(PLANTED, out, 0, (source,), {}, {"salt": 2}, force=True)
    message = str(e.value)
    assert message.startswith(f"stage 'planted' ({'e' * 12}), shard 0 of 1: part-00000.parquet was computed again")
    new = re.search(rf"recorded sha256 {recorded}, new ([0-9a-f]{{64}})\.", message)
    assert new and new.group(1) != recorded  # both hashes, in full
    assert hash_file(out.path(0)) == recorded  # the recorded part is kept
    assert sorted(p.name for p in out.dir.iterdir()) == ["manifest.json", "part-00000.parquet"]  # no temp left
    # without a manifest, the committed file is the record (a shard retried or resumed after a crash)
    out.path(0).with_name("manifest.json").unlink()
    with pytest.raises(ArtifactError, match=f"recorded sha256 {recorded}"):
        run_shard(PLANTED, out, 0, (source,), {}, {"salt": 3}, force=True)


# -- what two nights are compared by (tests/e2e/test_killed_night.py) ---------------------------------------------


def parquet_hashes(cache: Path) -> dict[str, str]:
    """Every Parquet file under the cache's artifacts, by path, with its sha256."""
    return {str(p.relative_to(cache)): hash_file(p) for p in sorted((cache / "artifacts").rglob("*.parquet"))}


def evaluation_scores(cache: Path) -> list[tuple]:
    import duckdb

    with duckdb.connect(str(cache / "catalog.duckdb"), read_only=True) as con:
        return con.execute("SELECT model_name, arm, testset, metric, seed, score FROM evaluations ORDER BY ALL").fetchall()


def test_seeded_draws_what_torch_manual_seed_draws_and_gives_the_outer_state_back():
    """``seeded`` seeds the CPU generator alone (torch.manual_seed would also queue a lazy seed with a formatted
    stack per accelerator API, once per optimiser step): the draws are torch.manual_seed's, and the state outside
    the block is the one before it."""
    from models.runtime import seeded

    torch.manual_seed(11)
    expected = torch.rand(5)
    outer = torch.random.get_rng_state()
    with seeded(11):
        drawn = torch.rand(5)
    assert torch.equal(drawn, expected) and torch.equal(torch.random.get_rng_state(), outer)
