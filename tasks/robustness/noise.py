"""OpusTrainer's ``Noise`` (``opustrainer/modifiers/noise.py``) and the random words it and ``Tags`` insert.

    Noise: p, min_word_length: 2, max_word_length: 5, max_words: 6
    for a row with uniform(row, 0) < p, a new pair (w, w): w = W words of L characters, one script for all,
        L ~ U{min_word_length … max_word_length}, W ~ U{1 … max_words}, the script ~ U(SCRIPTS), each character
        ~ U(the script's range); links "0-0 1-1 …" where the row has an alignment

``get_random_unicode_words`` (opustrainer/modifiers/placeholders.py) draws from the same 20 Unicode blocks. One
deliberate difference: its Basic Latin and Latin-1 blocks include the space (U+0020) and the no-break space
(U+00A0), so an OpusTrainer "word" can hold a space and its one-to-one alignment then points past the words; here
those two are never drawn, so every word stays one token (every output is still one OpusTrainer can produce).
The noise pair is a new row: ``parent_uid`` is the row whose draw made it, and the row itself is not repeated.
Written by hand (no package draws OpusTrainer's noise); vectorised over the chosen rows: the characters of all
noise pairs are one array of counters, one ``uniform`` call.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from tasks.robustness.draws import Stream, integers, lane, row_states, uniform
from tasks.robustness.rows import emit, require_bitext, taken

SCRIPTS = (  # get_random_unicode_words' include_ranges: [low, high)
    (0x0020, 0x007F), (0x00A0, 0x00FF), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0530, 0x058F),
    (0x0590, 0x05FF), (0x0600, 0x06FF), (0x0900, 0x097F), (0x0980, 0x09FF), (0x0A80, 0x0AFF),
    (0x0E00, 0x0E7F), (0x1000, 0x109F), (0x10A0, 0x10FF), (0x1780, 0x17FF), (0x3040, 0x309F),
    (0x30A0, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0x1F600, 0x1F64F),
)  # fmt: skip
NEVER = (0x20, 0xA0)  # whitespace: a word would split


@functools.cache
def _alphabets() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All scripts' characters end to end (whitespace left out), each script's start and size."""
    chars = [np.setdiff1d(np.arange(lo, hi), NEVER) for lo, hi in SCRIPTS]
    sizes = np.array([len(c) for c in chars])
    return np.concatenate(chars).astype(np.uint32), np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes


def unicode_words(stream: Stream, min_length: int = 2, max_length: int = 10, max_words: int = 3) -> list[str]:
    """``get_random_unicode_words`` for one row: 1 … max_words words of one drawn length, one drawn script."""
    chars, start, size = _alphabets()
    length, script, count = stream.randint(min_length, max_length), stream.below(len(SCRIPTS)), stream.randint(1, max_words)
    return ["".join(chr(chars[start[script] + stream.below(int(size[script]))]) for _ in range(length)) for _ in range(count)]


def noise_words(
    states: np.ndarray, first: int, *, min_length: int, max_length: int, max_words: int
) -> tuple[list[str], np.ndarray]:
    """For each state, its noise string (words joined by spaces) and its word count, drawn from counters
    ``first`` (length), ``first + 1`` (script), ``first + 2`` (words), ``first + 3 + j`` (character j)."""
    chars, start, size = _alphabets()
    length = integers(states, first, min_length, max_length)
    script = integers(states, first + 1, 0, len(SCRIPTS) - 1)
    count = integers(states, first + 2, 1, max_words)
    width = length * count + count - 1  # characters with the spaces between words
    row = np.repeat(np.arange(len(states)), width)
    k = np.arange(int(width.sum())) - np.repeat(np.cumsum(width) - width, width)  # position in the row's string
    word, at = k // (length[row] + 1), k % (length[row] + 1)
    is_space = at == length[row]
    draw = uniform(states[row], first + 3 + word * length[row] + np.minimum(at, length[row] - 1))
    points = chars[start[script[row]] + np.floor(draw * size[script[row]]).astype(np.int64)]
    points[is_space] = 0x20
    text = points.astype("<u4").tobytes().decode("utf-32-le")
    ends = np.cumsum(width)
    return [text[a:b] for a, b in zip((ends - width).tolist(), ends.tolist(), strict=True)], count


def noise(
    rows: pa.Table, *, p: float, seed: int = 0, min_word_length: int = 2, max_word_length: int = 5, max_words: int = 6
) -> pa.Table:
    """``Noise``: a pair of the same random words on both sides, made for the rows with uniform(row, 0) < p (needs
    uid, src, tgt; links "i-i" where the row has an alignment)."""
    require_bitext(rows, modifier="Noise")
    states = row_states(rows["uid"], seed=seed, modifier="Noise")
    index = np.flatnonzero(uniform(states, 0) < p)
    texts, count = noise_words(
        states[index], lane(1), min_length=min_word_length, max_length=max_word_length, max_words=max_words
    )
    aligned = (
        taken(rows, "links", pa.array(index, pa.int64())).is_valid().to_pylist()
        if "links" in rows.column_names
        else [False] * len(index)
    )
    links = [" ".join(f"{i}-{i}" for i in range(n)) if a else None for n, a in zip(count.tolist(), aligned, strict=True)]
    params = {"p": p, "min_word_length": min_word_length, "max_word_length": max_word_length, "max_words": max_words}
    return emit(rows, index, src=texts, tgt=texts, links=links, modifier="Noise", params=params, changed_only=False)
