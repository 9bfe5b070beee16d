"""OpusTrainer's ``UpperCase`` and ``TitleCase`` (``opustrainer/modifiers/surface.py``), both sides of a row.

    UpperCase: p    row ↦ (src.upper(), tgt.upper())                                  if uniform(row, 0) < p
    TitleCase: p    each side ↦ " ".join(w[0].upper() + w[1:] for w in side.split())  if uniform(row, 0) < p

As OpusTrainer does: Python's full case mapping (ß → SS), TitleCase re-joining the words with single spaces; a row
that comes out the same (no lower-case letter, already title-cased) is not emitted. Computed with
``pyarrow.compute`` (``utf8_upper``, slices and joins over whole columns) for the chosen rows; Arrow upper-cases
one code point to one (ß → ẞ), so ß is replaced by SS first, and a row holding any other of the ~180 characters
whose upper case differs in Python (at a word's start, for TitleCase) is done with ``str.upper`` (``python_only``).
Alignments are unchanged: no word moves.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.robustness.draws import row_states, uniform
from tasks.robustness.rows import emit, require_bitext, taken, tokens

CASED_PLANES = 0x20000  # planes 0 and 1: no later plane has a cased character


@functools.cache
def python_only() -> str:
    """A character class (RE2) of the characters whose ``str.upper()`` differs from Arrow's ``utf8_upper``."""
    points = np.arange(CASED_PLANES, dtype=np.uint32)
    points = points[(points < 0xD800) | (points > 0xDFFF)]
    chars = points.astype("<u4").tobytes().decode("utf-32-le")
    upper = pc.utf8_upper(pa.array([chars]))[0].as_py()  # one code point to one
    differ = [c for c, u in zip(chars, upper, strict=True) if c.upper() != u and c != "ß"]  # ß: see upper
    return "[" + "".join(re.escape(c) for c in differ) + "]"


def _patched(arrow: pa.Array, text: pa.Array, python: Callable[[str], str], where: pa.Array | None = None) -> pa.Array:
    """``arrow`` with the rows where ``where`` (default: ``text``) holds a ``python_only`` character recomputed by
    ``python`` from ``text``."""
    found = pc.match_substring_regex(text if where is None else where, python_only())
    rows = np.flatnonzero(found.to_numpy(zero_copy_only=False))
    if not len(rows):
        return arrow
    values = arrow.to_pylist()
    for i, value in zip(rows.tolist(), text.take(pa.array(rows)).to_pylist(), strict=True):
        values[i] = python(value)
    return pa.array(values, pa.string())


def upper(text: pa.Array) -> pa.Array:
    """``str.upper()`` of every row (ß, frequent in German, becomes SS by a replace before Arrow's upper case)."""
    sharp_s = pc.replace_substring(text, "ß", "SS")
    return _patched(pc.utf8_upper(sharp_s), sharp_s, str.upper)


def _title(value: str) -> str:
    return " ".join(word[0].upper() + word[1:] for word in value.split())


def title(text: pa.Array) -> pa.Array:
    """OpusTrainer's title case of every row: each whitespace word's first character upper-cased, single spaces."""
    words = tokens(text)
    flat = words.flatten()
    head = pc.utf8_upper(pc.replace_substring(pc.utf8_slice_codeunits(flat, 0, 1), "ß", "SS"))
    titled = pc.binary_join_element_wise(head, pc.utf8_slice_codeunits(flat, 1), "")
    joined = pc.binary_join(pa.ListArray.from_arrays(words.offsets, titled), " ")
    heads = pc.binary_join(pa.ListArray.from_arrays(words.offsets, pc.utf8_slice_codeunits(flat, 0, 1)), "")
    return _patched(joined, text, _title, where=heads)  # only a word's first character is upper-cased


def _chosen(rows: pa.Table, p: float, seed: int, modifier: str) -> np.ndarray:
    return np.flatnonzero(uniform(row_states(rows["uid"], seed=seed, modifier=modifier), 0) < p)


def upper_case(rows: pa.Table, *, p: float, seed: int = 0) -> pa.Table:
    """``UpperCase``: both sides upper-cased in the rows with uniform(row, 0) < p (needs uid, src, tgt)."""
    require_bitext(rows, modifier="UpperCase")
    index = _chosen(rows, p, seed, "UpperCase")
    take = pa.array(index, pa.int64())
    src, tgt = taken(rows, "src", take), taken(rows, "tgt", take)
    return emit(rows, index, src=upper(src), tgt=upper(tgt), modifier="UpperCase", params={"p": p})


def title_case(rows: pa.Table, *, p: float, seed: int = 0) -> pa.Table:
    """``TitleCase``: both sides title-cased in the rows with uniform(row, 0) < p (needs uid, src, tgt)."""
    require_bitext(rows, modifier="TitleCase")
    index = _chosen(rows, p, seed, "TitleCase")
    take = pa.array(index, pa.int64())
    src, tgt = taken(rows, "src", take), taken(rows, "tgt", take)
    return emit(rows, index, src=title(src), tgt=title(tgt), modifier="TitleCase", params={"p": p})
