"""Building and loading a classifier: the kinds, their options and defaults, the card read back.

``build_classifier(kind, labels, …)`` checks every argument against ``KINDS`` (unknown options, types and
ranges refused with the kind's options listed) and builds a fresh classifier; ``load_classifier(dir)``
reads the card ``TextClassifier.save`` wrote and the weights beside it. Models load offline
(``conf.offline``): a local directory, else a name already in the Hugging Face cache.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ModelError
from models.classifier.bag import BagClassifier
from models.classifier.base import CARD, CARD_FORMAT, TextClassifier
from models.classifier.hf import HFClassifier
from models.classifier.sentence_embedding import SentenceEmbeddingClassifier
from models.nmt.base import pick_device
from models.runtime import torch_threads


@dataclasses.dataclass(frozen=True)
class KindSpec:
    """What a kind needs: a ``model`` or not, its default learning rate and its options with their defaults."""

    needs_model: bool
    lr: float
    options: dict[str, Any]


KINDS: dict[str, KindSpec] = {
    "builtin": KindSpec(needs_model=False, lr=1e-2, options={"buckets": 2**18, "dim": 64, "dropout": 0.1, "ngrams": 2}),
    "sentence_embedding": KindSpec(needs_model=True, lr=1e-2, options={"hidden": 0, "dropout": 0.1, "encode_batch_size": 64}),
    "hf": KindSpec(needs_model=True, lr=5e-5, options={"max_length": 128}),
}
_LIMITS = {  # option: (smallest, largest) allowed, both inclusive; dropout below 1
    "buckets": (1, None),
    "dim": (1, None),
    "ngrams": (1, None),
    "hidden": (0, None),
    "encode_batch_size": (1, None),
    "max_length": (2, None),
    "dropout": (0.0, 1.0),
}


def _kinds_hint() -> str:
    return "; ".join(
        f"{k} ({'needs model' if s.needs_model else 'no model'}; options: "
        f"{', '.join(f'{o}={v!r}' for o, v in s.options.items())}; lr={s.lr:g})"
        for k, s in KINDS.items()
    )


def _check_options(kind: str, given: dict[str, Any]) -> dict[str, Any]:
    """The options of ``kind``: its defaults updated with ``given``, each checked for type and range."""
    spec = KINDS[kind]
    unknown = sorted(set(given) - set(spec.options))
    if unknown:
        raise ModelError(
            f"classifier {kind}: unknown option(s) {', '.join(map(repr, unknown))}; options of "
            f"{kind}: {', '.join(f'{o}={v!r}' for o, v in spec.options.items())}"
        )
    options = dict(spec.options)
    for name, value in given.items():
        want = type(spec.options[name])
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if want is int and ok and float(value).is_integer():
            value = int(value)
        elif want is float and ok:
            value = float(value)
        else:
            raise ModelError(f"classifier {kind}: option {name}={value!r}; expected {want.__name__}")
        low, high = _LIMITS.get(name, (None, None))
        if (low is not None and value < low) or (high is not None and value >= high):
            bound = f"in [{low}, {high})" if high is not None else f">= {low}"
            raise ModelError(f"classifier {kind}: option {name}={value!r}; expected {bound}")
        options[name] = value
    return options


def _setup_device(device: str, threads: int) -> str:
    device = pick_device(device)
    if device == "cpu":
        torch_threads(threads)
    return device


_CLASSES: dict[str, type[TextClassifier]] = {
    "builtin": BagClassifier,
    "sentence_embedding": SentenceEmbeddingClassifier,
    "hf": HFClassifier,
}


def build_classifier(
    kind: str,
    labels: Sequence[str],
    *,
    model: str | None = None,
    lr: float | None = None,
    seed: int = 0,
    device: str = "auto",
    threads: int = 0,
    **options: Any,
) -> TextClassifier:
    """A new classifier of ``kind`` into ``labels``.

    Args:
        kind: builtin | sentence_embedding | hf (``KINDS``).
        labels: the class names, index i = ``labels[i]``; at least two, distinct.
        model: sentence_embedding: the encoder (name or local path); hf: the model to fine-tune; builtin: None.
        lr: the learning rate (None: the kind's default, ``KINDS[kind].lr``).
        seed: the initialisation and dropout stream (same seed, same batches → the same losses).
        device: auto, cpu or cuda (``pick_device``).
        threads: CPU threads for torch (0: every core this process may use).
        options: the kind's options (``KINDS[kind].options``).
    """
    if kind not in KINDS:
        raise ModelError(f"classifier kind {kind!r} unknown; kinds: {_kinds_hint()}")
    spec = KINDS[kind]
    if spec.needs_model and not model:
        raise ModelError(f"classifier {kind} needs a model (a name or a local directory); none given. Kinds: {_kinds_hint()}")
    if not spec.needs_model and model:
        raise ModelError(f"classifier {kind} takes no model; {model!r} given. Kinds: {_kinds_hint()}")
    labels = list(labels)
    if len(labels) < 2 or len(set(labels)) != len(labels) or not all(isinstance(x, str) and x for x in labels):
        raise ModelError(f"classifier {kind}: labels {labels[:20]}; expected two or more distinct non-empty names")
    lr = spec.lr if lr is None else float(lr)
    if not (lr > 0 and math.isfinite(lr)):
        raise ModelError(f"classifier {kind}: lr={lr!r}; expected a positive number")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ModelError(f"classifier {kind}: seed={seed!r}; expected an integer >= 0")
    options = _check_options(kind, options)
    device = _setup_device(device, threads)
    return _CLASSES[kind](labels, model=model, lr=lr, seed=int(seed), options=options, device=device)


def load_classifier(path: Path, *, device: str = "auto", threads: int = 0) -> TextClassifier:
    """The classifier ``TextClassifier.save`` wrote to ``path``, as the card ``augdag_classifier.json`` describes."""
    path = Path(path)
    card_file = path / CARD
    if not card_file.is_file():
        raise ModelError(f"{path}: no {CARD}; expected a directory written by TextClassifier.save")
    try:
        card = json.loads(card_file.read_text())
        kind, labels, model, hyper = card["kind"], card["labels"], card["model"], dict(card["hyper"])
        steps = int(card.get("steps", 0))
        lr, seed = float(hyper.pop("lr")), int(hyper.pop("seed"))
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{card_file}: not a valid classifier card ({type(e).__name__}: {e})") from e
    if card.get("format") != CARD_FORMAT:
        raise ModelError(f"{card_file}: card format {card.get('format')!r}; this augdag reads {CARD_FORMAT}")
    if kind not in KINDS:
        raise ModelError(f"{card_file}: classifier kind {kind!r} unknown; kinds: {', '.join(KINDS)}")
    options = _check_options(kind, hyper)
    device = _setup_device(device, threads)
    if kind == "hf":
        clf: TextClassifier = HFClassifier(
            labels, model=model, lr=lr, seed=seed, options=options, device=device, weights_from=path
        )
    else:
        clf = _CLASSES[kind](labels, model=model, lr=lr, seed=seed, options=options, device=device)
        clf.load_weights(path)  # type: ignore[attr-defined]
    clf.steps = steps
    return clf
