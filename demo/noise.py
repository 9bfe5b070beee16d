"""The planted noisy pairs of the demo bitext, which the corpus filters of its profile drop (issue 28).

Valid lines, unlike demo/corruptions.py's: the read keeps them and `clean` drops them, each with its reason.

- ``language_id``: the German side on the English side too (src := tgt), as crawled bitexts hold them;
- ``non_zero_numerals``: a number after each side, a different one (``… 12`` / ``… 40``);
- ``test_overlap``: a pair of the held-out test set, capitalised and with a full stop (``Anna sleeps.``): the
  same line after ``normalise``.

Each keeps its gold alignment valid (src := tgt aligned one to one; a number linked to the number), so every
line of ``train.align`` but the bad lines' still links each target word once. ``k = min(3, n // 100)`` of each
reason in a file of ``n`` pairs (none below 100), one per stratum of the file at a seeded offset, never on a
line demo/corruptions.py plants.
"""

from __future__ import annotations

import numpy as np

from demo.draws import STREAMS

NOISE_STREAM = 98  # the stream of the planted lines' offsets
NOISE_REASONS = ("language_id", "non_zero_numerals", "test_overlap")
NUMBERS = (("12", "40"), ("3", "8"), ("2024", "1999"))  # src, tgt: no non-zero digit in common


def noise_lines(n: int, *, seed: int = 0, avoid: set[int] | frozenset[int] = frozenset()) -> dict[int, str]:
    """{1-based line: reason} of the planted pairs of a bitext of ``n`` pairs, none on a line of ``avoid``."""
    k = min(3, n // 100) * len(NOISE_REASONS)
    if k == 0:
        return {}
    offset = np.random.default_rng([seed, NOISE_STREAM, STREAMS["train"]]).random(k)
    lines = (np.arange(k) * n) // k + (offset * (n // k)).astype(int) + 1
    out = {}
    for i, line in enumerate(lines.tolist()):
        while line in avoid or line in out:  # the next free line (a stratum has n // k >= 33 lines)
            line = line % n + 1
        out[line] = NOISE_REASONS[i % len(NOISE_REASONS)]
    return out


def plant(src: str, tgt: str, align: str, reason: str, *, nth: int, test: tuple[str, str, str]) -> tuple[str, str, str]:
    """The planted version of a pair (and its gold alignment): ``nth`` picks the numbers, ``test`` is the held-out
    (src, tgt, alignment) a test-overlap pair copies."""
    if reason == "language_id":
        return tgt, tgt, " ".join(f"{i}-{i}" for i in range(len(tgt.split())))
    if reason == "non_zero_numerals":
        a, b = NUMBERS[nth % len(NUMBERS)]
        link = f"{len(src.split())}-{len(tgt.split())}"
        return f"{src} {a}", f"{tgt} {b}", f"{align} {link}".strip()
    if reason == "test_overlap":
        s, t, a = test
        return s[:1].upper() + s[1:] + ".", t[:1].upper() + t[1:] + ".", a
    raise AssertionError(reason)
