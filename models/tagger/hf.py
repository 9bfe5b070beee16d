"""``hf``: any Hugging Face token-classification model (or bare encoder, given a new head) as a slot tagger.

    p(tag of word j) = softmax(W·h_k + b),  k = the first sub-token of word j

From transformers: ``AutoModelForTokenClassification`` (a new head of ``len(tags)`` units,
``ignore_mismatched_sizes=True``), ``AutoTokenizer`` (a fast one: ``word_ids()`` is needed) and the
loss (cross-entropy ignoring −100). Hand-written here: the label alignment (``align_labels``): a word's
tag goes on its first sub-token, its other sub-tokens and the special tokens get −100 (ignored), and a
prediction reads the first sub-token's argmax, so every word gets exactly one tag. Inputs are truncated
to the model's length (the tokenizer's ``model_max_length``, capped by ``max_position_embeddings``): the
words cut off, and any word the tokenizer turns into no sub-token at all, are predicted ``O``. A byte-level
BPE tokenizer (RoBERTa, GPT-2) gets ``add_prefix_space`` turned on, as split words need.

Loading is offline (``conf.offline``): a local directory, else a name already in the Hugging Face cache.
A trained tagger is the model and tokenizer ``save_pretrained`` wrote, beside ``tagger.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conf.errors import ModelError
from models.runtime import loading
from models.tagger.settings import TaggerSettings

IGNORE = -100  # the label id cross-entropy skips (transformers' convention)
NO_LIMIT = 1_000_000  # tokenizers without a length limit report ~1e30


def align_labels(word_ids: Sequence[int | None], word_tags: Sequence[int] | None = None) -> tuple[list[int], dict[int, int]]:
    """Sub-token labels and the first sub-token of each word.

    ``word_ids``: the tokenizer's ``word_ids()`` of one encoded sentence (None for special tokens).
    Returns (labels, first): ``labels[k]`` is ``word_tags[j]`` on the first sub-token k of word j and
    ``IGNORE`` elsewhere (all ``IGNORE`` without ``word_tags``); ``first[j] = k`` for every word that
    has a sub-token (a truncated or vanished word has none).
    """
    labels, first = [IGNORE] * len(word_ids), {}
    for k, j in enumerate(word_ids):
        if j is not None and j not in first:
            first[j] = k
            if word_tags is not None:
                labels[k] = word_tags[j]
    return labels, first


def add_prefix_space(tokenizer: Any) -> bool:
    """Turn on ``add_prefix_space`` in a byte-level BPE pre-tokenizer (RoBERTa, GPT-2) that has it off: given
    split words it would encode every word but the first as a word-internal piece (without ``Ġ``).
    True if it changed anything (the change is saved with the tokenizer)."""

    def walk(node: Any) -> bool:
        changed = False
        if isinstance(node, dict):
            if node.get("type") == "ByteLevel" and node.get("add_prefix_space") is False:
                node["add_prefix_space"], changed = True, True
            return any([changed, *(walk(v) for v in node.values())])  # noqa: C419 — every node is walked
        return isinstance(node, list) and any([walk(v) for v in node])  # noqa: C419 — every node is walked

    from tokenizers import Tokenizer

    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = json.loads(backend.to_str()) if backend is not None else {}
    if not walk(spec.get("pre_tokenizer")):
        return False
    backend.pre_tokenizer = Tokenizer.from_str(json.dumps(spec)).pre_tokenizer
    return True


def load_pretrained(source: str | Path, *, tags: Sequence[str] | None = None) -> tuple[Any, Any]:
    """(model, fast tokenizer) from a name or local path; with ``tags``, a new head of ``len(tags)`` units."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    try:
        with loading():
            tokenizer = AutoTokenizer.from_pretrained(str(source))
            add_prefix_space(tokenizer)
            if tags is None:
                model = AutoModelForTokenClassification.from_pretrained(str(source))
            else:
                id2label = dict(enumerate(tags))
                model = AutoModelForTokenClassification.from_pretrained(
                    str(source),
                    num_labels=len(tags),
                    id2label=id2label,
                    label2id={t: i for i, t in id2label.items()},
                    ignore_mismatched_sizes=True,
                )
    except (OSError, ValueError, KeyError) as e:
        raise ModelError(
            f"{source}: no Hugging Face token-classification model (or encoder) with its tokenizer "
            f"found by this name or path (local directory, else the Hugging Face cache; offline): "
            f"{e}. Hint: pass a directory written by save_pretrained (model and tokenizer), or copy "
            "a cached download here"
        ) from e
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(
            f"{source}: its tokenizer is a slow (Python) one; the tagger needs a fast tokenizer "
            "(word_ids() to align word tags with sub-tokens). Hint: save a tokenizer.json with it"
        )
    if tokenizer.pad_token is None:  # GPT-2 and kin: pad with eos (attention-masked, never tagged)
        if tokenizer.eos_token is None:
            raise ModelError(
                f"{source}: its tokenizer has neither a pad nor an eos token to pad batches with. "
                "Hint: set tokenizer.pad_token and save it with the model"
            )
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


class HFBackend:
    """The ``hf`` kind behind ``SlotTagger`` and ``train_tagger``."""

    kind = "hf"

    def __init__(self, settings: TaggerSettings, tags: Sequence[str], device: str, *, model: Any, tokenizer: Any):
        self.settings, self.tags, self.device = settings, list(tags), device
        if model.config.num_labels != len(self.tags):
            raise ModelError(
                f"{settings.model}: the model has {model.config.num_labels} labels, the tagger "
                f"{len(self.tags)} tags ({self.tags})"
            )
        self.module, self.tokenizer = model.to(device), tokenizer
        limits = [
            n
            for n in (tokenizer.model_max_length, getattr(model.config, "max_position_embeddings", None))
            if isinstance(n, int) and 0 < n < NO_LIMIT
        ]
        self.max_length = min(limits) if limits else None  # None: the model takes any length

    @classmethod
    def start(cls, settings: TaggerSettings, tags: Sequence[str], device: str) -> HFBackend:
        """A new head on ``settings.model`` (drawn from torch's generator: seed it first)."""
        model, tokenizer = load_pretrained(settings.model, tags=tags)
        return cls(settings, tags, device, model=model, tokenizer=tokenizer)

    @classmethod
    def load(cls, path: Path, settings: TaggerSettings, tags: Sequence[str], device: str) -> HFBackend:
        model, tokenizer = load_pretrained(path)
        if [model.config.id2label.get(i) for i in range(len(tags))] != list(tags):
            raise ModelError(
                f"{path}: config.json labels {model.config.id2label} differ from tagger.json's "
                f"tags {list(tags)}. Hint: the directory was changed after train_tagger"
            )
        return cls(settings, tags, device, model=model, tokenizer=tokenizer)

    def _encode(self, sentences: Sequence[Sequence[str]]) -> tuple[dict[str, torch.Tensor], list[list[int | None]]]:
        words = [[self.settings.normalise(w) for w in s] for s in sentences]
        enc = self.tokenizer(
            words,
            is_split_into_words=True,
            truncation=self.max_length is not None,
            max_length=self.max_length,
            padding=True,
            return_tensors="pt",
        )
        word_ids = [enc.word_ids(i) for i in range(len(sentences))]
        return {k: v.to(self.device) for k, v in enc.items()}, word_ids

    def loss(
        self, sentences: Sequence[Sequence[str]], tag_ids: Sequence[Sequence[int]], rng: np.random.Generator | None = None
    ) -> torch.Tensor:
        """Mean cross-entropy over the first sub-tokens of the batch's words (``rng`` unused)."""
        inputs, word_ids = self._encode(sentences)
        labels = torch.tensor([align_labels(ids, tags)[0] for ids, tags in zip(word_ids, tag_ids)], device=self.device)
        return self.module(**inputs, labels=labels).loss

    def decode(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        """Tag ids, one per word: the first sub-token's argmax; 0 (``O``) for a word with no sub-token."""
        inputs, word_ids = self._encode(sentences)
        best = self.module(**inputs).logits.argmax(-1).tolist()
        out = []
        for row, ids, sentence in zip(best, word_ids, sentences):
            first = align_labels(ids)[1]
            out.append([row[first[j]] if j in first else 0 for j in range(len(sentence))])
        return out

    def save(self, out: Path) -> None:
        self.module.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
