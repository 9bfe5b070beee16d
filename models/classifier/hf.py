"""``hf``: a Hugging Face ``AutoModelForSequenceClassification`` fine-tuned whole with ``AdamW``.

A thin wrapper: a new classification head for ``len(labels)`` classes (``ignore_mismatched_sizes``) on a
name or local path, or the model and tokenizer ``save`` wrote (``save_pretrained``) when loading.
"""

from __future__ import annotations

from pathlib import Path

import torch

from conf.errors import ModelError
from models.classifier.base import TextClassifier, seed_for, seeded
from models.runtime import loading


class HFClassifier(TextClassifier):
    """``hf``: a fine-tuned ``AutoModelForSequenceClassification`` and its tokenizer."""

    kind = "hf"

    def __init__(self, labels, *, model, lr, seed, options, device, weights_from: str | Path | None = None):
        """``weights_from``: a directory this class saved (load); None: start from ``model`` with a new head."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        super().__init__(labels, model=str(model), lr=lr, seed=seed, options=options, device=device)
        source = str(weights_from if weights_from is not None else model)
        id2label = dict(enumerate(self.labels))
        try:
            with loading():
                tokenizer = AutoTokenizer.from_pretrained(source)
            with seeded(seed_for(seed, 0), "cpu"):
                if weights_from is None:
                    net = AutoModelForSequenceClassification.from_pretrained(
                        source,
                        num_labels=len(self.labels),
                        id2label=id2label,
                        label2id={v: k for k, v in id2label.items()},
                        ignore_mismatched_sizes=True,
                    )
                else:
                    net = AutoModelForSequenceClassification.from_pretrained(source)
        except (OSError, ValueError) as e:
            raise ModelError(
                f"{source}: no Hugging Face sequence-classification model with its tokenizer found, "
                f"looked up by this name or path (local directory, else the Hugging Face cache): "
                f"{e}. Hint: pass a directory written by save_pretrained (model and tokenizer), "
                "or copy a cached download here"
            ) from e
        if weights_from is not None and [net.config.id2label.get(i) for i in range(len(self.labels))] != self.labels:
            raise ModelError(
                f"{source}: config.json labels {net.config.id2label} differ from the card's "
                f"{self.labels}. Hint: the directory was changed after TextClassifier.save"
            )
        if tokenizer.pad_token is None:
            if tokenizer.eos_token is None:
                raise ModelError(
                    f"{source}: its tokenizer has neither a pad nor an eos token to pad batches "
                    "with. Hint: set tokenizer.pad_token and save it with the model"
                )
            tokenizer.pad_token = tokenizer.eos_token
        if net.config.pad_token_id is None:
            net.config.pad_token_id = tokenizer.pad_token_id
        self.tokenizer, self.net = tokenizer, net.to(device)
        self._module = self.net
        self._optimizers = [torch.optim.AdamW(self.net.parameters(), lr=lr)]

    def _logits(self, texts: list[str]) -> torch.Tensor:
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.options["max_length"], return_tensors="pt").to(
            self.device
        )
        return self.net(**enc).logits

    def _save_weights(self, path: Path) -> None:
        self.net.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
