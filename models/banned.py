"""Negative lexical constraints for transformers decoders: a ``LogitsProcessor`` with a banned-token set per
input row (transformers' own ``bad_words_ids`` bans the same ids in every row of a call).

    scores[row, y] = −inf  for every y in banned[row // n]        (n = num_return_sequences)

Each banned word is banned by the first token of each of its spellings (as written, lower-cased and
capitalised, with and without a leading space), so no tokenisation of the word that starts with one of
those tokens can be produced. A word the tokenizer can also build from other pieces is caught by the
caller's check of the output (``tasks.mt_paraphrase.constrained``). Hand-written: no maintained package bans per row.
Positive constraints have no transformers path here: constrained beam search left transformers' core in
5.x (it lives on the Hugging Face Hub as custom generation code, which cannot be fetched offline).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from transformers import LogitsProcessor
except ImportError:  # pragma: no cover
    LogitsProcessor = object  # type: ignore[misc,assignment]


def banned_token_ids(tokenizer: Any, words: Sequence[str]) -> list[int]:
    """The first token of every spelling of every word (see the module docstring), sorted."""
    ids: set[int] = set()
    for word in words:
        for variant in {word, word.lower(), word.capitalize()}:
            for text in (variant, " " + variant):
                tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
                if tokens and tokens[0] != tokenizer.unk_token_id:
                    ids.add(tokens[0])
    return sorted(ids)


class BannedTokensLogitsProcessor(LogitsProcessor):
    """Row r of a generation batch never emits ``banned[r // n]``'s ids (``n`` rows per input)."""

    def __init__(self, banned: Sequence[Sequence[int]], *, n: int = 1):
        self.banned, self.n = [list(b) for b in banned], n
        self._mask = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self._mask is None or self._mask.shape != scores.shape:
            mask = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
            for row in range(scores.shape[0]):
                ids = [i for i in self.banned[row // self.n] if i < scores.shape[1]]
                if ids:
                    mask[row, ids] = True
            self._mask = mask
        return scores.masked_fill(self._mask, float("-inf"))
