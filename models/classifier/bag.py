"""``builtin``: a fastText-style bag of hashed n-grams, hand-written.

    logits = W · dropout(mean_{b ∈ bag(text)} E[b]) + c,   bag(text) = crc32(n-gram) mod buckets, n = 1..ngrams

No maintained package offers a torch fastText that takes one optimiser step on a given batch (fastText
itself trains a whole file in one call), so the model is ~60 lines: lowercased whitespace tokens, word
n-grams up to ``ngrams`` (default 2: unigrams and bigrams) hashed with ``zlib.crc32`` (stable across
processes, unlike Python's salted ``hash``) into ``buckets`` rows of an ``EmbeddingBag(mode="mean")``,
dropout, one linear layer. The bag has sparse gradients, updated by ``SparseAdam`` (only the rows a batch
touches, as fastText does); the linear layer by ``Adam``.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import torch
from torch import nn

from models.classifier.base import (
    WEIGHTS,
    TextClassifier,
    load_state,
    save_state,
    seed_for,
    seeded,
)


def hashed_ngrams(text: str, *, buckets: int, ngrams: int = 2) -> list[int]:
    """The bucket ids of a text's lowercased whitespace-token n-grams, n = 1..``ngrams`` (crc32 of the
    space-joined n-gram's UTF-8, modulo ``buckets``). An empty text has none."""
    tokens = text.lower().split()
    return [
        zlib.crc32(" ".join(tokens[i : i + n]).encode()) % buckets
        for n in range(1, ngrams + 1)
        for i in range(len(tokens) - n + 1)
    ]


class _Bag(nn.Module):
    def __init__(self, buckets: int, dim: int, n_labels: int, dropout: float):
        super().__init__()
        self.embedding = nn.EmbeddingBag(buckets, dim, mode="mean", sparse=True)
        nn.init.uniform_(self.embedding.weight, -1.0 / dim, 1.0 / dim)  # fastText's initialisation
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(dim, n_labels)

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(self.embedding(ids, offsets)))


class BagClassifier(TextClassifier):
    """``builtin``: hashed unigram+bigram bag → mean embedding → dropout → linear (see the module doc)."""

    kind = "builtin"

    def __init__(self, labels, *, model=None, lr, seed, options, device):
        super().__init__(labels, model=None, lr=lr, seed=seed, options=options, device=device)
        with seeded(seed_for(seed, 0), "cpu"):
            self._module = _Bag(options["buckets"], options["dim"], len(self.labels), options["dropout"])
        self._module.to(device)
        self._optimizers = [
            torch.optim.SparseAdam(list(self._module.embedding.parameters()), lr=lr),
            torch.optim.Adam(list(self._module.linear.parameters()), lr=lr),
        ]

    def _logits(self, texts: list[str]) -> torch.Tensor:
        bags = [hashed_ngrams(t, buckets=self.options["buckets"], ngrams=self.options["ngrams"]) for t in texts]
        offsets = np.cumsum([0] + [len(b) for b in bags[:-1]])
        ids = torch.tensor([i for b in bags for i in b], dtype=torch.long, device=self.device)
        return self._module(ids, torch.as_tensor(offsets, dtype=torch.long, device=self.device))

    def _save_weights(self, path: Path) -> None:
        save_state(self._module, path / WEIGHTS)

    def load_weights(self, path: Path) -> None:
        """The weights ``save`` wrote into the directory ``path``."""
        load_state(self._module, path / WEIGHTS, self.device)
