"""A trained classifier on a held-out labelled set: predictions (`test_predictions`), accuracy and
macro-F1 (`evaluations`, with the arm and seed when a run compares several)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conf.classifier import ClassifierConf
from flows.driver import ModelRef, Run, run_stage
from storage.artifacts import ArtifactRef
from tasks.classify import PREDICT, SCORE_PREDICTIONS


def evaluate_classifier(run: Run, model: ModelRef, test: ArtifactRef, *, labels: Sequence[str], conf: ClassifierConf,
                        meta: Mapping[str, Any], arm: str | None = None, seed: int | None = None,
                        model_name: str = "classifier") -> list[dict[str, Any]]:
    """Score ``model`` on ``test`` and register the scores; returns them (metric, score, signature, sentences)."""
    preds = run_stage(run, PREDICT, inputs=[test], models=[model.fingerprint], params={},
                      resources={"model_path": str(model.path), "device": conf.device, "threads": conf.threads})
    scores = run_stage(run, SCORE_PREDICTIONS, inputs=[preds], n_shards=1, params={"labels": list(labels)}
                       ).read(0).to_pylist()
    run.catalog.register_evaluation(run_id=run.run_id, model=model.fingerprint, model_name=model_name,
                                    testset=test.dataset or "", scores=scores, meta=dict(meta), arm=arm, seed=seed)
    return scores
