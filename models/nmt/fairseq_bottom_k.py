"""PCC's bottom-k (Eq. 2) for fairseq's ``SequenceGenerator``: a ``search.Sampling`` that skips the top k first.

    for the first N = ``bottom_k_steps`` steps:  log p'(y) = log p(y) − log Σ_{y' ∉ top_k} p(y'),  y ∉ top_k

then top-k / top-p sampling as usual. The twin of ``models.bottom_k.BottomKLogitsProcessor`` (transformers).
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def bottom_k_sampling() -> type:
    """fairseq's ``search.Sampling`` with PCC's bottom-k (Eq. 2): for the first ``bottom_k_steps`` steps the
    ``bottom_k`` most probable tokens are removed and the rest renormalised, then top-k / top-p as usual.
    Built on first use (importing fairseq takes seconds); set ``bottom_k`` and ``bottom_k_steps`` on the
    instance."""
    import torch
    from fairseq import search

    class BottomKSampling(search.Sampling):
        bottom_k, bottom_k_steps = 0, 0

        def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
            if step < self.bottom_k_steps and self.bottom_k > 0:
                finite = torch.isfinite(lprobs).sum(-1, keepdim=True)
                top = lprobs.topk(self.bottom_k, dim=-1).indices
                masked = lprobs.scatter(-1, top, float("-inf"))
                # a row with no more than k allowed tokens (EOS/pad already barred) is left as it is
                lprobs = torch.where(finite > self.bottom_k, masked, lprobs)
                lprobs = lprobs - torch.logsumexp(lprobs, dim=-1, keepdim=True)
            return super().step(step, lprobs, scores, prev_output_tokens, original_batch_idxs)

    return BottomKSampling
