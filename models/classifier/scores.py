"""Accuracy and macro-F1 of a classifier's predictions (sklearn's, over every class)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from conf.errors import ModelError


def classification_scores(gold: Sequence[int], pred: Sequence[int], n_labels: int) -> dict[str, float]:
    """Accuracy and macro-F1 over all ``n_labels`` classes: a class neither present nor predicted counts
    as F1 0 (sklearn ``f1_score(average="macro", labels=range(n_labels), zero_division=0)``)."""
    from sklearn.metrics import accuracy_score, f1_score

    gold, pred = np.asarray(gold, dtype=np.int64), np.asarray(pred, dtype=np.int64)
    if gold.shape != pred.shape or gold.ndim != 1:
        raise ModelError(
            f"classification_scores: {gold.size} gold labels but {pred.size} predictions; expected one prediction per gold label"
        )
    if not len(gold):
        raise ModelError("classification_scores: no examples to score")
    outside = [int(x) for x in np.concatenate([gold, pred]) if not 0 <= x < n_labels]
    if outside:
        raise ModelError(f"classification_scores: label indices {sorted(set(outside))[:10]} outside [0, {n_labels})")
    return {
        "accuracy": float(accuracy_score(gold, pred)),
        "macro_f1": float(f1_score(gold, pred, average="macro", labels=list(range(n_labels)), zero_division=0)),
    }
