"""Seeded uniform streams and the inverse-CDF and fragment helpers every demo corpus draws with.

Rows are a pure function of (seed, stream, row index): chunk k of `CHUNK_ROWS` rows draws one uniform
matrix from `default_rng([seed, stream, k])` (row-major, so fewer rows are a prefix of more), and every
choice is an inverse-CDF lookup into it. Lines are assembled from fragment tables (`fragments`) in one
join per chunk (`join_lines`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from conf.errors import ConfError

CHUNK_ROWS = 50_000
STREAMS = {
    "train": 1,
    "test": 2,
    "mono": 3,
    "labeled": 4,
    "slots": 5,
    "labeled_test": 6,
    "slots_test": 7,
    "slots_small": 8,
    "slots_small_test": 9,
}
BAD_STREAM = 99  # the stream of the planted bad lines' offsets (demo/corruptions.py)


def uniforms(seed: int, stream: str, n: int, k: int) -> Iterator[np.ndarray]:
    """U[0, 1) draws of `n` rows × `k` columns, one (≤ CHUNK_ROWS, k) matrix per chunk.

    Args:
        seed: The corpus seed, >= 0.
        stream: A key of `STREAMS`; each stream draws independently of the others.
        n: Rows, >= 0.
        k: Uniforms per row.

    Raises:
        ConfError: `n` or `seed` is negative.
    """
    if n < 0 or seed < 0:
        msg = (
            f"demo corpus: n = {n}, seed = {seed}; both must be >= 0. "
            "Hint: set demo.seed and the demo.*_rows counts (augdag demo --set demo.<key>=N) to 0 or more"
        )
        raise ConfError(msg)
    for c in range(math.ceil(n / CHUNK_ROWS)):
        yield np.random.default_rng([seed, STREAMS[stream], c]).random((min(CHUNK_ROWS, n - c * CHUNK_ROWS), k))


def zipf_weights(n: int, a: float = 0.7) -> np.ndarray:
    """p(rank) ∝ 1 / rank^a over ranks 1..n, normalised."""
    w = 1.0 / np.arange(1, n + 1) ** a
    return w / w.sum()


def cumulative(p) -> np.ndarray:
    """Cumulative probabilities ending in exactly 1.0, so an inverse-CDF draw u < 1 never runs past the end."""
    c = np.cumsum(p, dtype=float)
    c[-1] = 1.0
    return c


def pick(cum: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse CDF with one cumulative row per u (rows padded with 2): i with cum[i-1] <= u < cum[i]."""
    return (u[:, None] >= cum).sum(1)


def fragments(words: list[str], sep: str = " ") -> np.ndarray:
    """(2, n) object array: row 0 the words as they are (a line's first), row 1 led by `sep` ("" stays "")."""
    return np.array([words, [sep + w if w else "" for w in words]], dtype=object)


def join_lines(*cols: str | np.ndarray) -> list[str]:
    """m lines from columns of fragments (a str, an (m,) or an (m, k) object array) joined in one pass.

    The first column starts each line with a newline; the other fragments carry their own separators.
    """
    m = next(len(c) for c in cols if not isinstance(c, str))
    widths = [1 if isinstance(c, str) or c.ndim == 1 else c.shape[1] for c in cols]
    mat, at = np.empty((m, sum(widths)), dtype=object), 0
    for c, w in zip(cols, widths):
        mat[:, at : at + w] = c if isinstance(c, str) or c.ndim == 2 else c[:, None]
        at += w
    return "".join(mat.ravel().tolist()).split("\n")[1:]
