"""``SlotTagger``: a trained slot tagger (``bilstm`` or ``hf``) loaded from its directory; one verb, ``predict``
(and ``save``, which ``train_tagger`` writes with).

Prediction (hand-written batching over the kinds' ``decode``): sentences sorted by length (stable) and cut
into batches of ``batch_size``, run in eval mode under ``torch.inference_mode()``, put back in input
order. Each sentence is encoded on its own (packed LSTM sequences; attention masks for ``hf``), so its
tags do not depend on the batch it lands in. An empty sentence gets no tags. Every tag is one of the
training tag set (the output layer has one unit per tag). ``train_tagger`` evaluates the dev set with
this same code, so a loaded tagger reproduces the dev F1 recorded for its epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conf.errors import InputError
from models.nmt.base import pick_device
from models.runtime import torch_threads
from models.tagger.bilstm import BiLSTMBackend
from models.tagger.hf import HFBackend
from models.tagger.settings import TaggerSettings, read_card, write_card
from storage.artifacts import hash_inputs


def check_sentences(sentences: Sequence[Sequence[str]], what: str = "predict") -> list[list[str]]:
    """Token lists as lists; a bare string where a token list belongs is an InputError naming its row."""
    out = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, str):
            raise InputError(
                f"{what}: row {i} is a string ({sentence[:40]!r}); expected a list of tokens. Hint: pass sentence.split()"
            )
        out.append(list(sentence))
    return out


class SlotTagger:
    """A slot tagger: ``predict`` token lists → BIO tags; ``tags`` is its tag set (``O`` first)."""

    def __init__(self, backend: BiLSTMBackend | HFBackend, *, path: Path | None = None, trained: dict[str, Any] | None = None):
        self.backend, self.path = backend, path
        self.trained = trained or {}  # train_tagger's record (epochs, best_epoch, dev_f1, losses), kept in the card

    @property
    def settings(self) -> TaggerSettings:
        return self.backend.settings

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(self.backend.tags)

    @property
    def device(self) -> str:
        return self.backend.device

    @classmethod
    def load(cls, path: str | Path, *, device: str = "auto", threads: int = 0) -> SlotTagger:
        """The tagger ``train_tagger`` wrote into ``path`` (tagger.json + weights), on ``pick_device(device)``.
        A missing or foreign directory is a ModelError naming it."""
        path = Path(path)
        settings, tags, vocab, trained = read_card(path)
        device = pick_device(device)
        if device == "cpu":
            torch_threads(threads)
        if settings.kind == "bilstm":
            backend = BiLSTMBackend.load(path, settings, vocab, tags, device)
        else:
            backend = HFBackend.load(path, settings, tags, device)
        return cls(backend, path=path, trained=trained)

    def save(self, out: str | Path) -> None:
        """Write the tagger into the directory ``out`` (created if needed): the weights (``bilstm``:
        model.safetensors; ``hf``: save_pretrained of model and tokenizer), then ``tagger.json``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        self.backend.save(out)
        write_card(out, self.settings, self.tags, vocab=getattr(self.backend, "vocab", None), trained=self.trained)

    def predict(self, sentences: Sequence[Sequence[str]], *, batch_size: int = 128) -> list[list[str]]:
        """One tag per token, in input order; independent of ``batch_size``."""
        sentences = check_sentences(sentences)
        if batch_size < 1:
            raise InputError(f"predict: batch_size = {batch_size}, must be at least 1")
        out: list[list[str]] = [[] for _ in sentences]
        todo = [i for i, s in enumerate(sentences) if s]
        order = [todo[k] for k in np.argsort([len(sentences[i]) for i in todo], kind="stable")]
        module, was_training = self.backend.module, self.backend.module.training
        module.eval()
        try:
            with torch.inference_mode():
                for start in range(0, len(order), batch_size):
                    batch = order[start : start + batch_size]
                    for i, ids in zip(batch, self.backend.decode([sentences[i] for i in batch])):
                        out[i] = [self.backend.tags[t] for t in ids]
        finally:
            module.train(was_training)
        return out

    def fingerprint(self) -> str:
        """A content hash of the tagger's directory (card, weights, tokenizer); needs a saved tagger."""
        if self.path is None:
            raise InputError("fingerprint: this tagger was not loaded from a directory; save it first")
        return hash_inputs([self.path])

    def describe(self) -> str:
        s = self.settings
        net = (
            (
                f"Bi-LSTM {s.layers}x{s.hidden}x2 over {s.embedding_dim}-d embeddings"
                f"{' + CRF' if s.crf else ''}, {len(self.backend.vocab)} words"
            )
            if s.kind == "bilstm"
            else s.model
        )
        where = f" from {self.path}" if self.path is not None else ""
        return f"{s.kind} slot tagger ({net}; {len(self.tags)} tags){where} on {self.device}"
