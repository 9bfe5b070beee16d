"""What PCC's candidate bags are made of, without a model: the samplers, the bag, and its metrics.

Kept apart from ``models.generation`` (which imports torch and transformers, ~5 s) so that the
curriculum stages and their metrics start without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from models.nmt.base import DecodeOptions

TOP_K_TOP_P, BOTTOM_K = "top_k_top_p", "bottom_k"


@dataclasses.dataclass(frozen=True)
class Sampler:
    """One way of drawing candidates: top-k + top-p (Eq. 1), or bottom-k first (Eq. 2) then top-k + top-p."""

    name: str = TOP_K_TOP_P
    top_k: int = 120
    top_p: float = 0.95
    bottom_k: int = 0  # k of Eq. 2 (0: plain top-k/top-p)
    bottom_k_steps: int = 0  # N: the first N generated tokens are drawn without the top k
    temperature: float = 1.0
    seed: int = 0

    def decode_options(self) -> DecodeOptions:
        return DecodeOptions(
            sampling=True,
            topk=self.top_k,
            topp=self.top_p,
            temperature=self.temperature,
            seed=self.seed,
            bottom_k=self.bottom_k,
            bottom_k_steps=self.bottom_k_steps,
        )


def pcc_samplers(
    *, top_k: int = 120, top_p: float = 0.95, bottom_k: int = 2, bottom_k_steps: int = 1, seed: int = 0
) -> tuple[Sampler, Sampler]:
    """The paper's two samplers: easy (top-k + top-p) and hard (bottom-k for N steps, then top-k + top-p)."""
    return (
        Sampler(TOP_K_TOP_P, top_k, top_p, seed=seed),
        Sampler(BOTTOM_K, top_k, top_p, bottom_k=bottom_k, bottom_k_steps=bottom_k_steps, seed=seed + 1),
    )


Plan = Sequence[tuple[Sampler, int]]  # (sampler, samples per sentence)


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
    grams = [tuple(toks[i : i + n]) for t in texts for toks in [t.split()] for i in range(len(toks) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def copies_first_token(texts: Sequence[str], candidates: Sequence[str]) -> np.ndarray:
    """Per candidate: does it start with its input's first token (case-insensitive)? Appendix F's copying."""

    def first(s: str) -> str:
        return (s.split() or [""])[0].lower()

    return np.array([bool(first(c)) and first(c) == first(t) for t, c in zip(texts, candidates)], dtype=bool)
