"""PCC's bottom-k (Eq. 2) as a transformers ``LogitsProcessor``, for every transformers decoder in augdag.

    for the first N = ``steps`` generated tokens:  scores[y] = −inf for the k highest-scoring y

softmax then renormalises the rest. No library ships bottom-k, so it is written here; it only masks, and
transformers' own temperature / top-k / top-p warpers, which run after every custom processor, do the
rest. So with ``top_k = 0`` and ``top_p = 1`` its first N steps are exactly Eq. 2, after step N it is the
identity, and with k = 0 generation is plain top-k/top-p sampling. Used by ``models.generation``
(paraphrasers) and ``models.nmt.transformers`` (translation); fairseq's twin is
``models.nmt.fairseq_bottom_k``.
"""

from __future__ import annotations

from typing import Any

from conf.errors import ConfError

try:  # transformers is a dependency; the import is deferred only for the class's base
    from transformers import LogitsProcessor
except ImportError:  # pragma: no cover
    LogitsProcessor = object  # type: ignore[misc,assignment]


class BottomKLogitsProcessor(LogitsProcessor):
    """PCC Eq. 2 as a transformers ``LogitsProcessor``: while fewer than ``steps`` tokens have been generated,
    the ``k`` highest scores are set to −inf (softmax renormalises the rest).

    Args:
        k: how many of the most probable tokens to remove (0: none); the ``bottom_k`` setting.
        steps: N, the number of first generated tokens drawn this way; the ``bottom_k_steps`` setting.
        start: the length of ``input_ids`` before the first generated token (1 for an encoder-decoder's start
            token, plus a forced first token; the padded prompt length for a causal LM).

    Raises:
        ConfError: ``k`` or ``steps`` is negative.
    """

    def __init__(self, k: int = 2, steps: int = 1, *, start: int = 1):
        for key, value in (("bottom_k", k), ("bottom_k_steps", steps)):
            if value < 0:
                raise ConfError(
                    f"{key} = {value}: must be >= 0 (k and N of PCC Eq. 2 bottom-k; got bottom_k={k}, bottom_k_steps={steps})"
                )
        self.k, self.steps, self.start = k, steps, start

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.k == 0 or input_ids.shape[-1] - self.start >= self.steps:
            return scores
        masked = scores.scatter(-1, scores.topk(self.k, dim=-1).indices, float("-inf"))
        # a row with at most k allowed tokens (e.g. a forced token) is left alone rather than emptied
        allowed = torch.isfinite(scores).sum(-1, keepdim=True)
        return torch.where(allowed > self.k, masked, scores)
