"""Span-level precision, recall and F1 of BIO tag sequences, conlleval's convention (from seqeval).

    P = correct / predicted spans,  R = correct / gold spans,  F1 = 2·P·R / (P + R)

A span is a maximal run ``B-x I-x …`` or, as conlleval reads it, an ``I-x`` that follows ``O`` or another
type (it starts a span of its own); a predicted span is correct when its type, start and end all match a
gold span. Sentences never join: a span ends with its sentence. This is ``seqeval.metrics``' default
mode (not ``mode="strict"``, which would drop the ``I-x``-started spans); the counts come from seqeval's
``get_entities``. With no predicted or no gold span the undefined ratio is 0 (``zero_division=0``),
as conlleval prints it.
"""

from __future__ import annotations

from collections.abc import Sequence

from conf.errors import InputError


def _checked(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> tuple[list[list[str]], list[list[str]]]:
    if len(gold) != len(pred):
        raise InputError(
            f"span scores: {len(gold)} gold rows but {len(pred)} predicted rows; expected one prediction per gold row"
        )
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise InputError(f"span scores: row {i}: {len(g)} gold tags but {len(p)} predicted tags; expected one tag per token")
    return [list(g) for g in gold], [list(p) for p in pred]


def span_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> float:
    """Micro span F1 over all rows (conlleval's; ``seqeval.metrics.f1_score`` in its default mode)."""
    from seqeval.metrics import f1_score

    gold, pred = _checked(gold, pred)
    return float(f1_score(gold, pred, zero_division=0))


def span_scores(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, float | int]:
    """``precision``, ``recall``, ``f1`` (as ``span_f1``) and the counts ``gold_spans``, ``pred_spans``,
    ``correct`` they are made of."""
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.metrics.sequence_labeling import get_entities

    gold, pred = _checked(gold, pred)
    gold_spans, pred_spans = set(get_entities(gold)), set(get_entities(pred))
    return {
        "precision": float(precision_score(gold, pred, zero_division=0)),
        "recall": float(recall_score(gold, pred, zero_division=0)),
        "f1": float(f1_score(gold, pred, zero_division=0)),
        "gold_spans": len(gold_spans),
        "pred_spans": len(pred_spans),
        "correct": len(gold_spans & pred_spans),
    }
