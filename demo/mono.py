"""The demo mono corpus: the source side of its own grammar stream plus ~10 % out-of-grammar lines.

An out-of-grammar line has 3 to 12 words, each a pseudo-word (syllable pairs not in the translation table)
or a table word, half and half, in random order.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from demo.bitext import sentence_ids
from demo.draws import fragments, join_lines, uniforms
from demo.grammar import LMAX, PAD_WORD, SOURCE_WORDS, TABLE

_SYL = ["ka", "lo", "mi", "zu", "ri", "ta", "ven", "dor", "bli", "sna", "gru", "fex"]
_PSEUDO = [a + b for a in _SYL for b in _SYL if a != b and a + b not in TABLE]
_MONO_WORDS = fragments(SOURCE_WORDS + [""] + _PSEUDO)  # pseudo-word i has id PAD_WORD + 1 + i
_OOG_SHARE, _OOG_LEN = 0.1, (3, 12)


def mono_chunks(n: int, seed: int) -> Iterator[list[str]]:
    """The lines of `n` mono rows, one list per chunk."""
    width = max(LMAX, _OOG_LEN[1])
    for u in uniforms(seed, "mono", n, 1 + 2 * LMAX + 2 + _OOG_LEN[1]):
        src = np.full((len(u), width), PAD_WORD)
        src[:, :LMAX] = sentence_ids(u)[0]
        oog = np.flatnonzero(u[:, 1 + 2 * LMAX] < _OOG_SHARE)
        v = u[oog, -_OOG_LEN[1] :]  # < 0.5: a pseudo-word, else a table word
        pseudo, known = PAD_WORD + 1 + (v * 2 * len(_PSEUDO)).astype(int), ((v - 0.5) * 2 * PAD_WORD).astype(int)
        words = np.where(v < 0.5, pseudo, known)
        length = _OOG_LEN[0] + (u[oog, 2 + 2 * LMAX] * (_OOG_LEN[1] - _OOG_LEN[0] + 1)).astype(int)
        src[oog] = np.where(np.arange(width) < length[:, None], words, PAD_WORD)
        yield join_lines("\n", _MONO_WORDS[0][src[:, 0]], _MONO_WORDS[1][src[:, 1:]])


def iter_mono(n: int, *, seed: int = 0) -> Iterator[str]:
    """`n` English-like lines, ~10 % of them out of the grammar (words not in the translation table)."""
    for chunk in mono_chunks(n, seed):
        yield from chunk
