"""Lexical constraints in fairseq's ``SequenceGenerator``, per sentence of a batch:

- negative (banned tokens): a search strategy whose ``step`` sets log p = −inf for the sentence's banned
  token ids before the search chooses (fairseq hands ``step`` each row's ``original_batch_idxs``, so the
  mask follows a sentence as finished ones leave the batch);
- positive (required phrases): fairseq's own ``LexicallyConstrainedBeamSearch`` (Hu et al. 2019's dynamic
  beam allocation, ``fairseq-interactive --constraints``; unordered), which finishes a hypothesis only
  once it holds every constraint.

Hand-written: the banned-token mask (fairseq has no per-sentence ban); the constrained search is fairseq's.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any


@functools.lru_cache(maxsize=4)
def with_bans(base: type) -> type:
    """``base`` (a ``fairseq.search.Search``) that first bans, for each sentence, its ``banned`` token ids
    (a bool tensor, original sentences × vocabulary; set ``banned`` on the instance before generating)."""

    class Banned(base):
        banned = None

        def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
            if self.banned is not None and original_batch_idxs is not None:
                mask = self.banned.to(lprobs.device)[original_batch_idxs.to(lprobs.device)]  # (bsz, V)
                lprobs = lprobs.masked_fill(mask[:, None, :], float("-inf"))
            return super().step(step, lprobs, scores, prev_output_tokens, original_batch_idxs)

    Banned.__name__ = f"Banned{base.__name__}"
    return Banned


def banned_mask(banned: Sequence[Sequence[int]], vocab: int) -> Any:
    """(sentences × vocab) bool tensor, True at each sentence's banned ids."""
    import torch

    mask = torch.zeros((len(banned), vocab), dtype=torch.bool)
    for i, ids in enumerate(banned):
        if ids:
            mask[i, list(ids)] = True
    return mask


def packed_constraints(required: Sequence[Sequence[Sequence[int]]]) -> Any:
    """fairseq's packed constraint tensor: per sentence, each required phrase's token ids."""
    import torch
    from fairseq.token_generation_constraints import pack_constraints

    return pack_constraints([[torch.tensor(list(p), dtype=torch.long) for p in phrases if p] for phrases in required])


def constrained_generator(
    model: Any, tgt_dict: Any, *, beam: int, lenpen: float, max_len_a: float, max_len_b: int, positive: bool
) -> Any:
    """A ``SequenceGenerator`` with bans, and with fairseq's unordered constrained beam search when
    ``positive``."""
    from fairseq import search
    from fairseq.sequence_generator import SequenceGenerator

    if positive:
        strategy = with_bans(search.LexicallyConstrainedBeamSearch)(tgt_dict, "unordered")
    else:
        strategy = with_bans(search.BeamSearch)(tgt_dict)
    # a sentence whose constraints cannot all be met by max_len ends there with what it finished (fairseq
    # otherwise asserts): its unmet hypotheses are never returned
    strategy.stop_on_max_len = True
    return SequenceGenerator(
        [model], tgt_dict, beam_size=beam, max_len_a=max_len_a, max_len_b=max_len_b, len_penalty=lenpen, search_strategy=strategy
    )
