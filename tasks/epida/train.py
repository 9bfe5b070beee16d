"""Training a classifier on originals plus augmented rows, the loss of EPiDA's Eq. 14 (appendix B).

    L(ω) = L_o(ω) + L_g(ω)        L_o: mean cross-entropy over originals (Eq. 12),
                                   L_g: over the augmented rows (Eq. 13)

Each step takes ``batch_size`` originals (a fresh permutation per epoch; an epoch is one pass over the
originals) and as many augmented rows (a permutation cycled through), and one optimiser step on the
two together: the mean over the joint batch is (L_o + L_g) / 2 with equal halves, Eq. 14 up to a
constant factor. With no augmented rows the step is L_o alone (Eq. 12: the pre-training of Table 5's PT
and the `none` arm). Training goes on from a saved classifier (``init``: the previous round's) or starts
a new one; losses are kept per step with the round and epoch. Seeded: the same arguments give the same
batches and, with the classifier's seeded dropout, the same losses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from conf.errors import InputError

LOSSES = "losses.parquet"


def eq14_batches(
    n_originals: int, n_augmented: int, *, epochs: int, batch_size: int, seed: int
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(epoch, original indices, augmented indices) of every step: ⌈n_originals / batch_size⌉ steps per epoch,
    each with as many augmented rows as originals (none when ``n_augmented`` is 0)."""
    rng = np.random.default_rng(seed)
    pool, pos = rng.permutation(n_augmented), 0
    for epoch in range(epochs):
        order = rng.permutation(n_originals)
        for start in range(0, n_originals, batch_size):
            batch = order[start : start + batch_size]
            picked = np.empty(len(batch) if n_augmented else 0, dtype=np.int64)
            for k in range(len(picked)):
                if pos == n_augmented:
                    pool, pos = rng.permutation(n_augmented), 0
                picked[k], pos = pool[pos], pos + 1
            yield epoch, batch, picked


def train_on(
    originals: pa.Table,
    augmented: pa.Table | None,
    *,
    labels: Sequence[str],
    classifier: Mapping[str, Any],
    epochs: int,
    batch_size: int,
    seed: int,
    init: str | None = None,
    round: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, pa.Table]:
    """The classifier after ``epochs`` of Eq. 14 on ``originals`` and ``augmented`` (columns text, label), and
    its losses (round, epoch, step, loss). ``init``: a saved classifier to go on training (its labels must be
    ``labels``); else a new one from ``classifier`` (``build_classifier``'s kind, model, lr, device, threads)."""
    from models.classifier import build_classifier, load_classifier

    device, threads = classifier.get("device", "auto"), classifier.get("threads", 0)
    if init is not None:
        model = load_classifier(Path(init), device=device, threads=threads)
        if model.labels != list(labels):
            raise InputError(f"epida: the classifier at {init} has labels {model.labels}; expected {list(labels)}")
    else:
        model = build_classifier(
            classifier["kind"],
            labels,
            model=classifier.get("model"),
            lr=classifier.get("lr"),
            seed=seed,
            device=device,
            threads=threads,
        )
    index = {label: i for i, label in enumerate(labels)}
    texts, gold = _indexed(originals, index, "originals")
    aug_texts, aug_gold = _indexed(augmented, index, "augmented rows") if augmented is not None else ([], np.zeros(0))
    steps = list(
        eq14_batches(
            len(texts),
            len(aug_texts),
            epochs=epochs,
            batch_size=batch_size,
            seed=int(np.random.SeedSequence([seed, round]).generate_state(1)[0]),
        )
    )
    losses = np.zeros(len(steps))
    for i, (_, o, a) in enumerate(steps):
        batch = [texts[j] for j in o] + [aug_texts[j] for j in a]
        losses[i] = model.train_step(batch, np.concatenate([gold[o], aug_gold[a]]).astype(np.int64).tolist())
        if progress is not None and (i + 1) % 10 == 0:
            progress(i + 1, len(steps))
    return model, pa.table(
        {
            "round": pa.array([round] * len(steps), pa.int32()),
            "epoch": pa.array([s[0] for s in steps], pa.int32()),
            "step": pa.array(np.arange(len(steps)), pa.int32()),
            "loss": losses,
        }
    )


def _indexed(table: pa.Table, index: Mapping[str, int], what: str) -> tuple[list[str], np.ndarray]:
    labels = table["label"].to_pylist()
    unknown = sorted({x for x in labels if x not in index}, key=str)
    if unknown:
        raise InputError(f"epida: labels {unknown[:10]} of the {what} are not among the classes {list(index)}")
    return table["text"].to_pylist(), np.array([index[x] for x in labels], dtype=np.int64)


def trainer(originals: pa.Table, augmented: pa.Table | None, **kwargs: Any) -> Callable[[Path], None]:
    """A ``build(path)`` for a flow's model stage: ``train_on``, then save the classifier and its losses."""

    def build(path: Path) -> None:
        from tasks.runtime.progress import report

        model, losses = train_on(originals, augmented, progress=lambda d, t: report("train classifier", d, t), **kwargs)
        model.save(path)
        pq.write_table(losses, Path(path) / LOSSES)

    return build
