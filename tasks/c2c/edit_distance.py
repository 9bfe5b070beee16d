"""Token-level edit distance for C2C-GenDA (cluster pairing, Inter/Intra MED), with rapidfuzz.

Unit-cost Levenshtein over word tokens, as the authors' pairing computes it. rapidfuzz compares
sequences of hashables, but it is fastest on strings; so each distinct token becomes one character
(``encode``: a code point per token, surrogates skipped) and ``rapidfuzz.process.cdist`` computes the
whole matrix in C++ on every core (``workers``). Nothing here is hand-written but the encoding.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from rapidfuzz.distance import Levenshtein
from rapidfuzz.process import cdist

_FIRST, _SURROGATES = 0x100, range(0xD800, 0xE000)
SMALL = 250_000  # cells below which one thread is faster


def _char(i: int) -> str:
    code = _FIRST + i
    return chr(code + len(_SURROGATES) if code >= _SURROGATES.start else code)


class TokenCodes:
    """A character per distinct token, shared by every utterance encoded with it."""

    def __init__(self) -> None:
        self.codes: dict[str, str] = {}

    def encode(self, tokens: Sequence[str]) -> str:
        """``tokens`` as a string of one character per token, new tokens given the next free character."""
        codes = self.codes
        return "".join(codes.get(t) or codes.setdefault(t, _char(len(codes))) for t in tokens)

    def encode_all(self, utterances: Iterable[Sequence[str]]) -> list[str]:
        """``encode`` of each utterance, in order."""
        return [self.encode(u) for u in utterances]


def distance_matrix(a: Sequence[str], b: Sequence[str] | None = None, *, workers: int = -1) -> np.ndarray:
    """Edit distances (int32) between the encoded utterances ``a`` and ``b`` (default: ``a`` itself); a small
    matrix runs on one thread (starting the pool costs more than it saves)."""
    b = a if b is None else b
    workers = 1 if len(a) * len(b) < SMALL else workers
    return cdist(a, b, scorer=Levenshtein.distance, dtype=np.int32, workers=workers)


def min_distances(
    queries: Sequence[str], references: Sequence[str], *, exclude_self: bool = False, chunk: int = 2048, workers: int = -1
) -> np.ndarray:
    """MED(u, C) = min over C of the edit distance, for each query u (int64; empty C: -1). ``exclude_self``:
    ``queries`` is ``references`` and each query's own index is left out (another equal utterance counts 0)."""
    out = np.full(len(queries), -1, dtype=np.int64)
    if not len(references) or not len(queries):
        return out
    for start in range(0, len(queries), chunk):
        block = distance_matrix(queries[start : start + chunk], references, workers=workers).astype(np.int64)
        if exclude_self:
            rows = np.arange(block.shape[0])
            block[rows, start + rows] = np.iinfo(np.int64).max
        out[start : start + chunk] = block.min(axis=1)
    if exclude_self and len(references) == 1:
        out[:] = -1
    return out
