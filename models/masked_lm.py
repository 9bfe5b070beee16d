"""A Hugging Face masked LM (``AutoModelForMaskedLM`` + its tokenizer) as a word-substitution distribution,
for CWE (contextual word substitution, Kobayashi 2018).

    p(w | sentence with word i masked) = softmax(logits[mask_i] / T) over whole-word vocabulary entries

Each chosen word is replaced by ONE mask token and all chosen words of a sentence are masked at once, so
one forward pass per sentence gives every substitution (Kobayashi samples each word from a model that
sees the others; masking them together is the usual BERT-era simplification, cheaper by a factor of the
words changed). Whole words: the vocabulary minus the special tokens, ``[unused…]`` placeholders,
WordPiece continuations (``##…``) and entries without a letter or digit; for SentencePiece/BPE
vocabularies, entries that start a word (``▁`` or ``Ġ``), with the marker stripped. Batches run sorted by
length under ``torch.inference_mode()`` on the device ``pick_device`` chooses. Loading is offline
(``conf.offline``): a local directory, else a name already in the Hugging Face cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from conf.errors import ModelError
from models.nmt.base import pick_device
from models.runtime import loading, torch_threads

OFFLINE_HINT = (
    "Hint: pass a local directory written by save_pretrained (model and tokenizer), or download "
    "the model on a connected machine and copy its Hugging Face cache here"
)


def whole_words(tokenizer: Any) -> tuple[np.ndarray, list[str]]:
    """The vocabulary ids that are whole words, and their surface forms (see the module docstring)."""
    special = set(tokenizer.all_special_ids)
    ids, words = [], []
    for token, i in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
        if i in special or token.startswith("##") or (token.startswith("[") and token.endswith("]")):
            continue
        word = token[1:] if token[:1] in ("▁", "Ġ") else token
        if word and any(c.isalnum() for c in word):
            ids.append(i)
            words.append(word)
    return np.array(ids, dtype=np.int64), words


class MaskedLM:
    """``substitutions(sentences, positions)``: per masked word, a distribution over ``words``."""

    def __init__(self, model: Any, tokenizer: Any, device: str, name: str):
        if tokenizer.mask_token_id is None:
            raise ModelError(f"{name}: its tokenizer has no mask token; CWE needs a masked LM (BERT, RoBERTa, …)")
        self.model, self.tokenizer, self.device, self.name = model, tokenizer, device, name
        self.ids, self.words = whole_words(tokenizer)
        if not len(self.ids):
            raise ModelError(f"{name}: no whole-word entries in its vocabulary to substitute with")

    @classmethod
    def load(cls, model: str | Path, *, device: str = "auto", threads: int = 0) -> MaskedLM:
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        device = pick_device(device)
        if device == "cpu":
            torch_threads(threads)
        try:
            with loading():
                net = AutoModelForMaskedLM.from_pretrained(str(model))
                tokenizer = AutoTokenizer.from_pretrained(str(model))
        except (OSError, ValueError) as e:
            raise ModelError(
                f"{model}: no Hugging Face masked LM with its tokenizer found, looked up by this name "
                f"or path (local directory, else the Hugging Face cache): {e}. {OFFLINE_HINT}"
            ) from e
        return cls(net.to(device).eval(), tokenizer, device, str(model))

    def substitutions(
        self,
        sentences: Sequence[Sequence[str]],
        positions: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        batch_size: int = 64,
    ) -> list[np.ndarray]:
        """For each sentence (a list of words) and each of its ``positions``, in order: the distribution
        over ``self.words`` at that word's mask (float64, rows sum to 1), as an array (len(positions) × V)."""
        import torch

        out: list[np.ndarray] = [np.zeros((0, len(self.ids)))] * len(sentences)
        order = sorted((i for i in range(len(sentences)) if positions[i]), key=lambda i: len(sentences[i]))
        mask = self.tokenizer.mask_token
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                masked = [" ".join(mask if j in set(positions[i]) else w for j, w in enumerate(sentences[i])) for i in rows]
                enc = self.tokenizer(masked, padding=True, truncation=True, return_tensors="pt").to(self.device)
                logits = self.model(**enc).logits.double()
                where = enc["input_ids"] == self.tokenizer.mask_token_id
                for k, i in enumerate(rows):
                    found = logits[k][where[k]][:, torch.as_tensor(self.ids, device=logits.device)]
                    if found.shape[0] != len(positions[i]):  # truncated away: no distribution for those words
                        found = found[:0]
                    out[i] = torch.softmax(found / temperature, dim=-1).cpu().numpy()
        return out
