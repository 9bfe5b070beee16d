"""Textual similarity G(x, x̄) of the paraphrase curriculum (PCC, Eq. 3), behind one interface.

    keep (x, x̄)  iff  M(x, x̄) ∧ G(x, x̄) ≥ β      (M: mutual implication, ``models.nli``)

``Similarity.score(references, candidates)`` gives G of each (reference x, candidate x̄) pair, float64,
in input order. Three implementations:

- ``ChrF`` (``chrf``): sacrebleu's sentence chrF (character 6-grams, β = 2: ``sacrebleu.metrics.CHRF()``)
  of the candidate against the reference as its only reference, divided by 100, so G ∈ [0, 1] and the
  β = 0.5 of Eq. 3 means chrF 50. The metric is written by sacrebleu, not here; model-free.
- ``CrossEncoderSimilarity`` (``cross_encoder``): a sequence-pair regression model with one output
  (BLEURT-style checkpoints converted to PyTorch, e.g. ``BertForSequenceClassification`` with
  ``num_labels=1``); G = the raw output for the (reference, candidate) pair, no activation applied.
  A thin wrapper over transformers (``models.pair_classifier.pair_logits``).
- ``EmbeddingSimilarity`` (``embedding``): the cosine of the normalised sentence-transformers embeddings
  of reference and candidate. A thin wrapper over ``SentenceTransformer.encode``.

``load_similarity(kind, model)`` builds one. Models load offline (``conf.offline``): a local directory,
else a name already in the Hugging Face cache.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ModelError
from models.nmt.base import pick_device
from models.pair_classifier import (
    load_pair_classifier,
    max_length,
    model_fingerprint,
    pair_logits,
)
from models.runtime import loading, torch_threads

KINDS = ("chrf", "cross_encoder", "embedding")


class Similarity(abc.ABC):
    """G(reference, candidate) per pair. Subclasses set ``name`` (e.g. "chrf", "embedding:<path>")."""

    name: str

    @abc.abstractmethod
    def fingerprint(self) -> str:
        """What identifies the scores: the metric's signature, or a content hash of the model's files."""

    @abc.abstractmethod
    def score(self, references: Sequence[str], candidates: Sequence[str], *, max_tokens: int = 4096) -> np.ndarray:
        """G of each (reference, candidate) pair, float64, in input order."""

    def describe(self) -> str:
        return self.name


def check_pairs(name: str, references: Sequence[str], candidates: Sequence[str]) -> None:
    if len(references) != len(candidates):
        raise ModelError(
            f"{name}: {len(references)} references but {len(candidates)} candidates; expected one candidate per reference"
        )


class ChrF(Similarity):
    """sacrebleu's sentence chrF / 100 (default ``CHRF()``: character order 6, no word n-grams, β = 2)."""

    name = "chrf"

    def __init__(self) -> None:
        from sacrebleu.metrics import CHRF

        self.metric = CHRF()

    def fingerprint(self) -> str:
        """ "chrf-" + sacrebleu's signature, e.g. ``chrf-nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0``
        (sacrebleu knows the number of references only after a score, hence the one on a fresh metric)."""
        from sacrebleu.metrics import CHRF

        metric = CHRF(
            **{
                k: getattr(self.metric, k)
                for k in ("char_order", "word_order", "beta", "lowercase", "whitespace", "eps_smoothing")
            }
        )
        metric.sentence_score("a", ["a"])
        return "chrf-" + metric.get_signature().format()

    def score(self, references: Sequence[str], candidates: Sequence[str], *, max_tokens: int = 4096) -> np.ndarray:
        """``max_tokens`` is accepted for the interface; chrF has no batches. Note that sacrebleu scores an
        empty candidate (and an empty pair) 0."""
        check_pairs(self.name, references, candidates)
        return np.array(
            [self.metric.sentence_score(c, [r]).score / 100.0 for r, c in zip(references, candidates)], dtype=np.float64
        )


class CrossEncoderSimilarity(Similarity):
    """A sequence-pair regression model with one output: G = logits[:, 0] of (reference, candidate)."""

    def __init__(self, model: Any, tokenizer: Any, *, path: str | Path, device: str):
        if model.config.num_labels != 1:
            raise ModelError(
                f"{path}: a cross-encoder similarity needs a regression head with one output "
                f"(num_labels = 1), but the model has num_labels = {model.config.num_labels} "
                f"(labels {list(model.config.id2label.values())}). Hint: use a BLEURT-style "
                "regression checkpoint; an NLI classifier belongs in models.nli"
            )
        self.model, self.tokenizer, self.path, self.device = model, tokenizer, path, device
        self.max_length = max_length(model.config, tokenizer)
        self.name = f"cross_encoder:{path}"

    @classmethod
    def load(cls, model: str | Path, *, device: str = "auto", threads: int = 0) -> CrossEncoderSimilarity:
        loaded, tokenizer, device = load_pair_classifier(model, device=device, threads=threads, what="cross-encoder regression")
        return cls(loaded, tokenizer, path=model, device=device)

    def fingerprint(self) -> str:
        return model_fingerprint(self.path)

    def score(self, references: Sequence[str], candidates: Sequence[str], *, max_tokens: int = 4096) -> np.ndarray:
        check_pairs(self.name, references, candidates)
        logits = pair_logits(
            self.model,
            self.tokenizer,
            references,
            candidates,
            device=self.device,
            max_length=self.max_length,
            max_tokens=max_tokens,
            path=self.path,
        )
        return logits[:, 0].copy()

    def describe(self) -> str:
        return f"{self.name} on {self.device}"


class EmbeddingSimilarity(Similarity):
    """Cosine of ``SentenceTransformer`` embeddings (normalised here, in float64); each distinct text is encoded
    once a call. An all-zero embedding has cosine 0 with everything."""

    def __init__(self, model: Any, *, path: str | Path, device: str):
        self.model, self.path, self.device = model, path, device
        self.name = f"embedding:{path}"

    @classmethod
    def load(cls, model: str | Path, *, device: str = "auto", threads: int = 0) -> EmbeddingSimilarity:
        from sentence_transformers import SentenceTransformer

        device = pick_device(device)
        if device == "cpu":
            torch_threads(threads)
        try:
            with loading():
                loaded = SentenceTransformer(str(model), device=device, local_files_only=True)
        except (OSError, ValueError) as e:
            raise ModelError(
                f"{model}: no sentence-transformers model found, looked up offline by this name or "
                f"path (local directory, else the Hugging Face cache): {e}. Hint: pass a local "
                "directory written by SentenceTransformer.save, or download the model on a "
                "connected machine and copy its Hugging Face cache here"
            ) from e
        return cls(loaded.eval(), path=model, device=device)

    def fingerprint(self) -> str:
        return model_fingerprint(self.path)

    def score(self, references: Sequence[str], candidates: Sequence[str], *, max_tokens: int = 4096) -> np.ndarray:
        """``max_tokens`` sets the batch size: ``max_tokens // max_seq_length`` sentences (at least one);
        sentence-transformers sorts them by length itself."""
        check_pairs(self.name, references, candidates)
        if not len(references):
            return np.zeros(0, dtype=np.float64)
        texts = sorted(set(references) | set(candidates))
        row = {t: i for i, t in enumerate(texts)}
        longest = getattr(self.model, "max_seq_length", None) or 128
        embeddings = self.model.encode(
            texts, batch_size=max(1, max_tokens // longest), convert_to_numpy=True, show_progress_bar=False
        ).astype(np.float64)
        norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
        embeddings = np.divide(embeddings, norms, out=np.zeros_like(embeddings), where=norms > 0)  # 0 vector: G = 0
        ref = embeddings[[row[t] for t in references]]
        cand = embeddings[[row[t] for t in candidates]]
        return np.einsum("ij,ij->i", ref, cand)

    def describe(self) -> str:
        return f"{self.name} on {self.device}"


def load_similarity(kind: str, model: str | Path | None = None, *, device: str = "auto", threads: int = 0) -> Similarity:
    """A ``Similarity`` by kind: "chrf" (no model), "cross_encoder" or "embedding" (a model path or name)."""
    if kind not in KINDS:
        raise ModelError(f"similarity kind {kind!r}: expected one of {', '.join(KINDS)}")
    if kind == "chrf":
        return ChrF()
    if model is None or not str(model):
        raise ModelError(
            f"similarity kind {kind!r} needs a model (a local directory or a Hugging Face name), "
            "but none was given. Hint: set the model, or use kind 'chrf', which needs none"
        )
    if kind == "cross_encoder":
        return CrossEncoderSimilarity.load(model, device=device, threads=threads)
    return EmbeddingSimilarity.load(model, device=device, threads=threads)


__all__ = ["KINDS", "ChrF", "CrossEncoderSimilarity", "EmbeddingSimilarity", "Similarity", "load_similarity"]
