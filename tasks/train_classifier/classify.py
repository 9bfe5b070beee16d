"""Train a text classifier on a curriculum (PCC Alg. 1) and score it on a held-out set.

    for step, batch in enumerate(Curriculum(rows, schedule, ...)):    (tasks.common.schedules: the one sampler)
        loss[step] = classifier.train_step(batch)                    originals + paraphrases of the step's level
    accuracy, macro-F1 = classification_scores(test labels, predictions)

The training is a model build (``classifier_builder``, run once per fingerprint by the flow); the losses per step
and level are saved beside the weights (``losses.parquet``) for the loss-curve plot, and every batch's rows
(``batches.parquet``: step, level, position, uid) for a trainer outside augdag to compare its sampler with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from conf.errors import InputError
from storage.parts import Parts
from tasks.common.schedules import Curriculum
from tasks.runtime.stage import Stage

LOSSES = "losses.parquet"
BATCHES = "batches.parquet"  # the rows of every step (Curriculum.record)
PREDICTIONS = pa.schema([("uid", pa.string()), ("text", pa.string()), ("label", pa.string()), ("predicted", pa.string())])


def curriculum_training(
    sampler: Curriculum,
    *,
    labels: Sequence[str],
    classifier: Mapping[str, Any],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, pa.Table]:
    """The classifier trained on the ``sampler``'s batches, and its losses (step, level, loss). The sampler's rows
    need text and label too; ``classifier`` is ``build_classifier``'s kind, model, lr, device, threads (its seed is
    the sampler's)."""
    from models.classifier import build_classifier

    curriculum = sampler.rows
    index = {label: i for i, label in enumerate(labels)}
    missing = sorted({lb for lb in curriculum["label"].to_pylist() if lb not in index}, key=str)
    if missing:
        raise InputError(f"train_classifier: curriculum labels {missing} are not among the classes {list(labels)}")
    steps = sampler.steps()
    texts, gold = curriculum["text"].to_pylist(), np.array([index[lb] for lb in curriculum["label"].to_pylist()])
    model = build_classifier(
        classifier["kind"],
        labels,
        model=classifier.get("model"),
        lr=classifier.get("lr"),
        seed=sampler.seed,
        device=classifier.get("device", "auto"),
        threads=classifier.get("threads", 0),
    )
    losses = np.zeros(len(steps))
    for i, batch in enumerate(sampler.indices()):
        losses[i] = model.train_step([texts[j] for j in batch], gold[batch].tolist())
        if progress is not None and (i + 1) % 10 == 0:
            progress(i + 1, len(steps))
    return model, pa.table({"step": np.arange(len(steps), dtype=np.int32), "level": pa.array(steps, pa.int32()), "loss": losses})


def classifier_builder(sampler: Curriculum, **kwargs: Any) -> Callable[[Path], None]:
    """A ``build(path)`` for the flow's model stage: train, save the classifier, its losses and its batches."""

    def build(path: Path) -> None:
        from tasks.runtime.progress import report

        model, losses = curriculum_training(sampler, progress=lambda d, t: report("train classifier", d, t), **kwargs)
        model.save(path)
        pq.write_table(losses, Path(path) / LOSSES)
        pq.write_table(sampler.record(), Path(path) / BATCHES)

    return build


def predict_labels(rows: pa.Table, *, model_path: str, device: str = "auto", threads: int = 0) -> pa.Table:
    """The test rows with the classifier's ``predicted`` label."""
    from models.classifier import load_classifier

    model = load_classifier(Path(model_path), device=device, threads=threads)
    pred = model.predict(rows["text"].to_pylist()) if rows.num_rows else np.zeros(0, np.int64)
    return pa.table(
        {
            "uid": rows["uid"],
            "text": rows["text"],
            "label": rows["label"],
            "predicted": pa.array([model.labels[i] for i in pred], pa.string()),
        },
        schema=PREDICTIONS,
    )


def score_predictions(parts: Parts, *, labels: Sequence[str]) -> pa.Table:
    """Accuracy and macro-F1 (over every class, sklearn's) of all predictions, one row per metric."""
    from models.classifier import classification_scores

    table = parts.table(["label", "predicted"])
    if table.num_rows == 0:
        raise InputError("train_classifier: the test set is empty")
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted(set(table["label"].to_pylist()) - set(index), key=str)
    if unknown:
        raise InputError(f"train_classifier: test labels {unknown} never occur in the training data")
    gold = [index[x] for x in table["label"].to_pylist()]
    pred = [index[x] for x in table["predicted"].to_pylist()]
    scores = classification_scores(gold, pred, len(labels))
    signature = f"classes:{len(labels)}|average:macro|sklearn"
    return pa.Table.from_pylist(
        [
            {"metric": m, "score": float(scores[m]), "signature": signature, "sentences": table.num_rows}
            for m in ("accuracy", "macro_f1")
        ]
    )


PREDICT = Stage("classify_test", "1", predict_labels, view="test_predictions", tags=("gpu",))
SCORE_PREDICTIONS = Stage("classifier_scores", "1", score_predictions, reduce=True)
