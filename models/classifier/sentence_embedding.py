"""``sentence_embedding``: a frozen ``sentence_transformers.SentenceTransformer`` encoder and a trained head.

    logits = head(encoder(text)),   head = linear, or linear → ReLU → linear with ``hidden`` units

A thin wrapper: the encoder is a name or a local path; the head is linear, or one hidden ReLU layer with
``hidden``. A text is encoded once and its embedding memoised in the object: few-shot training repeats the
same texts over hundreds of steps. The card names the encoder (an absolute path when it was a local
directory); the encoder itself is not copied, only the head's weights are saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from conf.errors import ModelError
from models.classifier.base import (
    WEIGHTS,
    TextClassifier,
    load_state,
    save_state,
    seed_for,
    seeded,
)
from models.runtime import loading


class SentenceEmbeddingClassifier(TextClassifier):
    """``sentence_embedding``: a frozen SentenceTransformer encoder and a trained head."""

    kind = "sentence_embedding"

    def __init__(self, labels, *, model, lr, seed, options, device):
        from sentence_transformers import SentenceTransformer

        local = Path(model).expanduser()
        model = str(local.resolve()) if local.is_dir() else str(model)
        super().__init__(labels, model=model, lr=lr, seed=seed, options=options, device=device)
        try:
            with loading():
                encoder = SentenceTransformer(model, device=device)
        except (OSError, ValueError) as e:
            raise ModelError(
                f"{model}: no sentence-transformers model found, looked up by this name or path "
                f"(local directory, else the Hugging Face cache): {e}. Hint: pass a local directory "
                "written by SentenceTransformer.save, or copy a cached download here"
            ) from e
        self.encoder = encoder.eval().requires_grad_(False)
        dim = self.encoder.get_embedding_dimension()
        if not dim:
            raise ModelError(
                f"{model}: the encoder does not say its embedding dimension; expected a "
                "SentenceTransformer ending in a pooling layer"
            )
        hidden, p = options["hidden"], options["dropout"]
        with seeded(seed_for(seed, 0), "cpu"):
            if hidden:
                head = nn.Sequential(
                    nn.Dropout(p), nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(p), nn.Linear(hidden, len(self.labels))
                )
            else:
                head = nn.Sequential(nn.Dropout(p), nn.Linear(dim, len(self.labels)))
        self._module = self.head = head.to(device)
        self._optimizers = [torch.optim.Adam(self.head.parameters(), lr=lr)]
        self.memo: dict[str, torch.Tensor] = {}  # text → its embedding on device

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """The encoder's embeddings of ``texts`` (float32, on device), each distinct text encoded once."""
        missing = list(dict.fromkeys(t for t in texts if t not in self.memo))
        if missing:
            encoded = self.encoder.encode(
                missing, batch_size=self.options["encode_batch_size"], convert_to_tensor=True, show_progress_bar=False
            )
            encoded = encoded.float().clone()  # out of inference mode: the head's backward saves its input
            for text, row in zip(missing, encoded):
                self.memo[text] = row
        return torch.stack([self.memo[t] for t in texts])

    def _logits(self, texts: list[str]) -> torch.Tensor:
        return self.head(self.embed(texts))

    def _save_weights(self, path: Path) -> None:
        save_state(self.head, path / WEIGHTS)

    def load_weights(self, path: Path) -> None:
        """The head's weights ``save`` wrote into the directory ``path``."""
        load_state(self.head, path / WEIGHTS, self.device)
