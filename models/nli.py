"""Mutual implication with an NLI classifier: the M(x, x̄) of the paraphrase curriculum (PCC, Eq. 3).

    M(x, x̄) = [argmax_c p(c | x ⇒ x̄) = entailment] ∧ [argmax_c p(c | x̄ ⇒ x) = entailment]

where p(· | premise ⇒ hypothesis) is the softmax of a sequence-pair classifier (any Hugging Face
``AutoModelForSequenceClassification`` trained on NLI: RoBERTa-MNLI, DeBERTa-MNLI, …) over its labels.

The entailment class is read from the model's ``config.id2label``, never assumed: the one label that
contains "entail" (case-insensitive; among several, the one that is exactly "entailment", as in
{entailment, not_entailment}), or the label named by ``entailment_label``. Label orders differ between
checkpoints (MNLI models put entailment at 0, 1 or 2), which is why no index is ever guessed.

A pair is tokenised as the tokenizer's sentence pair (premise, hypothesis), truncated to the model's
length, and run in length-sorted batches (``length_batches``) under ``torch.inference_mode()``, on the
device ``pick_device`` chooses: ``models.pair_classifier``, shared with the cross-encoder similarity
(``models.similarity``).

Loading is offline (``conf.offline``): a local directory, else a name already in the Hugging Face cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ModelError
from models.pair_classifier import (
    load_pair_classifier,
    max_length,
    model_fingerprint,
    pair_logits,
)


@dataclasses.dataclass(frozen=True)
class MutualImplication:
    """Per pair (x_i, x̄_i): ``mi`` = entailment is the argmax both ways; the entailment probabilities of
    x ⇒ x̄ (``p_forward``) and x̄ ⇒ x (``p_backward``); whether each direction alone entails."""

    mi: np.ndarray  # bool
    p_forward: np.ndarray  # float64, P(entailment | premise x, hypothesis x̄)
    p_backward: np.ndarray  # float64, P(entailment | premise x̄, hypothesis x)
    forward: np.ndarray  # bool, entailment is the argmax of x ⇒ x̄
    backward: np.ndarray  # bool, entailment is the argmax of x̄ ⇒ x


class NLIModel:
    """A sequence-pair NLI classifier with its tokenizer and the index of its entailment class."""

    def __init__(self, model: Any, tokenizer: Any, *, path: str | Path, device: str, entailment_label: str | None = None):
        self.model, self.tokenizer, self.path, self.device = model, tokenizer, path, device
        self.labels: list[str] = labels_of(model.config)
        self.entailment_index: int = find_entailment(self.labels, path, entailment_label)
        self.max_length: int | None = max_length(model.config, tokenizer)

    @classmethod
    def load(cls, model: str | Path, *, device: str = "auto", threads: int = 0, entailment_label: str | None = None) -> NLIModel:
        """Load an NLI classifier by local path or by a name in the Hugging Face cache, never over the network.

        Args:
            model: a directory written by ``save_pretrained`` (model and tokenizer), or a Hugging Face name.
            device: auto, cpu or cuda (``pick_device``).
            threads: CPU threads for torch (0: every core this process may use).
            entailment_label: the exact ``id2label`` name of the entailment class, where the model's labels
                do not name it unambiguously (e.g. LABEL_0/LABEL_1/LABEL_2).
        """
        loaded, tokenizer, device = load_pair_classifier(model, device=device, threads=threads, what="NLI")
        return cls(loaded, tokenizer, path=model, device=device, entailment_label=entailment_label)

    @property
    def entailment_label(self) -> str:
        return self.labels[self.entailment_index]

    def entailment(
        self, premises: Sequence[str], hypotheses: Sequence[str], *, max_tokens: int = 4096
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per (premise, hypothesis) pair: whether entailment is the argmax class (bool), and P(entailment),
        the softmax of the logits (float64). In input order; batching does not change the results
        beyond float rounding of padded batches."""
        logits = pair_logits(
            self.model,
            self.tokenizer,
            premises,
            hypotheses,
            device=self.device,
            max_length=self.max_length,
            max_tokens=max_tokens,
            path=self.path,
        )
        return logits.argmax(axis=1) == self.entailment_index, softmax(logits)[:, self.entailment_index]

    def mutual_implication(self, x: Sequence[str], xbar: Sequence[str], *, max_tokens: int = 4096) -> MutualImplication:
        """M(x, x̄) per pair: both directions in one batched pass over the 2n pairs (x ⇒ x̄, then x̄ ⇒ x)."""
        if len(x) != len(xbar):
            raise ModelError(
                f"{self.path}: mutual_implication got {len(x)} sentences but {len(xbar)} "
                "paraphrases; expected one paraphrase per sentence"
            )
        n = len(x)
        entails, p = self.entailment([*x, *xbar], [*xbar, *x], max_tokens=max_tokens)
        forward, backward = entails[:n], entails[n:]
        return MutualImplication(mi=forward & backward, p_forward=p[:n], p_backward=p[n:], forward=forward, backward=backward)

    def fingerprint(self) -> str:
        """A content hash of the model directory for a local path; the name for a Hugging Face name."""
        return model_fingerprint(self.path)

    def describe(self) -> str:
        return (
            f"nli:{self.path} on {self.device} (entailment = {self.entailment_label!r}, "
            f"class {self.entailment_index} of {self.labels})"
        )


def labels_of(config: Any) -> list[str]:
    """The class names by index, from ``config.id2label`` (keys may be ints or strings)."""
    id2label = {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}
    return [id2label.get(i, f"LABEL_{i}") for i in range(config.num_labels)]


def find_entailment(labels: Sequence[str], path: str | Path, entailment_label: str | None = None) -> int:
    """The index of the entailment class: ``entailment_label`` exactly, else the one label containing
    "entail" (case-insensitive), or among several such the one that is "entailment" (case-insensitive)."""
    if entailment_label is not None:
        found = [i for i, label in enumerate(labels) if label == entailment_label]
        if len(found) != 1:
            raise ModelError(
                f"{path}: entailment_label={entailment_label!r} given, but the model's labels "
                f"(config.id2label) are {list(labels)}. Hint: entailment_label must be one of them, "
                "exactly"
            )
        return found[0]
    found = [i for i, label in enumerate(labels) if "entail" in label.lower()]
    exact = [i for i in found if labels[i].lower() == "entailment"]
    if len(found) > 1 and len(exact) == 1:
        found = exact
    if len(found) != 1:
        what = "no label names" if not found else f"{len(found)} labels name"
        raise ModelError(
            f"{path}: {what} the entailment class among the model's labels (config.id2label) "
            f"{list(labels)}; expected exactly one containing 'entail'. Hint: set entailment_label "
            "to the name of the entailment class, if this is an NLI model"
        )
    return found[0]


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64."""
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)
