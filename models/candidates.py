"""What PCC's candidate bags are made of, without a model: sampler names, the bag, and its metrics.

Kept apart from ``models.generation`` (which imports torch and transformers, ~5 s) so that the
curriculum stages and their metrics start without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

TOP_K_TOP_P, BOTTOM_K = "top_k_top_p", "bottom_k"


def candidate_bag(text: str, samples: Mapping[str, Sequence[str]]) -> list[tuple[str, int, str]]:
    """The bag of one sentence: (sampler, sample index, candidate) in plan order, whitespace-normalised,
    deduplicated (first draw kept), never the input itself nor empty."""
    seen = {" ".join(text.split())}
    bag = []
    for name, drawn in samples.items():
        for i, cand in enumerate(drawn):
            norm = " ".join(cand.split())
            if norm and norm not in seen:
                seen.add(norm)
                bag.append((name, i, norm))
    return bag


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct-n (Li et al. 2016): distinct n-grams / n-grams over all ``texts`` (whitespace tokens); 0 if none."""
    grams = [tuple(toks[i:i + n]) for t in texts for toks in [t.split()] for i in range(len(toks) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def copies_first_token(texts: Sequence[str], candidates: Sequence[str]) -> np.ndarray:
    """Per candidate: does it start with its input's first token (case-insensitive)? Appendix F's copying."""
    first = lambda s: (s.split() or [""])[0].lower()
    return np.array([bool(first(c)) and first(c) == first(t) for t, c in zip(texts, candidates)], dtype=bool)
