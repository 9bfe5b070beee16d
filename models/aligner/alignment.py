"""Word links of a bitext (`Alignment`, CSR) and their Pharaoh text: "i-j" per link, 0-based, links always
(src, tgt) whichever side a model conditions on, sorted by (src, tgt) within a sentence, "" for none.

`links_from_best` builds one from the Viterbi source position of every generated word (−1: NULL, no link);
a reverse model (the tool's `-r`) generates the source, so its (generated, conditioning) pairs are swapped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from conf.errors import InputError, ModelError
from models.aligner.encoding import split_tokens


@njit(cache=True, nogil=True, error_model="numpy")
def _sort_pairs(src, tgt, a, b):
    """Sort links [a, b) by (src, tgt) in place (insertion sort: sentences are short)."""
    for x in range(a + 1, b):
        si = src[x]
        ti = tgt[x]
        y = x - 1
        while y >= a and (src[y] > si or (src[y] == si and tgt[y] > ti)):
            src[y + 1] = src[y]
            tgt[y + 1] = tgt[y]
            y -= 1
        src[y + 1] = si
        tgt[y + 1] = ti


@njit(cache=True, nogil=True, error_model="numpy")
def _sort_links(offsets, src, tgt):
    for s in range(len(offsets) - 1):
        _sort_pairs(src, tgt, offsets[s], offsets[s + 1])


@njit(cache=True, nogil=True, error_model="numpy")
def links_from_best(best, f_off, reverse):
    """Alignment CSR from the Viterbi source position of every generated word (−1: NULL, no link)."""
    n = len(f_off) - 1
    offsets = np.zeros(n + 1, np.int64)
    for s in range(n):
        c = 0
        for t in range(f_off[s], f_off[s + 1]):
            if best[t] >= 0:
                c += 1
        offsets[s + 1] = offsets[s] + c
    src = np.empty(offsets[n], np.int32)
    tgt = np.empty(offsets[n], np.int32)
    for s in range(n):
        k = offsets[s]
        for t in range(f_off[s], f_off[s + 1]):
            a = best[t]
            if a >= 0:
                j = t - f_off[s]
                if reverse:
                    src[k] = j
                    tgt[k] = a
                else:
                    src[k] = a
                    tgt[k] = j
                k += 1
        if not reverse:
            _sort_pairs(src, tgt, offsets[s], k)
    return offsets, src, tgt


@dataclass(frozen=True, eq=False)
class Alignment:
    """Links of n sentence pairs as CSR: sentence s has links (src[k], tgt[k]) for offsets[s] <= k < offsets[s+1],
    0-based positions, sorted by (src, tgt) within a sentence."""

    offsets: np.ndarray  # int64, n + 1
    src: np.ndarray  # int32
    tgt: np.ndarray  # int32

    def __post_init__(self) -> None:
        object.__setattr__(self, "offsets", np.ascontiguousarray(self.offsets, dtype=np.int64))
        object.__setattr__(self, "src", np.ascontiguousarray(self.src, dtype=np.int32))
        object.__setattr__(self, "tgt", np.ascontiguousarray(self.tgt, dtype=np.int32))
        if len(self.offsets) == 0 or self.offsets[0] != 0 or self.offsets[-1] != len(self.src) or len(self.src) != len(self.tgt):
            raise ModelError(
                f"Alignment: offsets end at {self.offsets[-1] if len(self.offsets) else None}, "
                f"expected 0 … {len(self.src)} with len(src) = len(tgt)"
            )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __repr__(self) -> str:
        return f"Alignment({len(self)} sentences, {len(self.src)} links)"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Alignment)
            and np.array_equal(self.offsets, other.offsets)
            and np.array_equal(self.src, other.src)
            and np.array_equal(self.tgt, other.tgt)
        )

    __hash__ = None  # type: ignore[assignment]

    def slice(self, a: int, b: int) -> Alignment:
        """Sentences a..b-1 (their links are views of this alignment's arrays, not copies)."""
        lo, hi = self.offsets[a], self.offsets[b]
        return Alignment(self.offsets[a : b + 1] - lo, self.src[lo:hi], self.tgt[lo:hi])

    def links(self, s: int) -> list[tuple[int, int]]:
        """Sentence s's links as (src, tgt) tuples."""
        a, b = self.offsets[s], self.offsets[s + 1]
        return list(zip(self.src[a:b].tolist(), self.tgt[a:b].tolist()))

    def to_pharaoh(self) -> list[str]:
        """ "0-0 1-2" per sentence ("" for none), sorted by (src, tgt)."""
        return self.pharaoh_array().to_pylist()

    def pharaoh_array(self) -> pa.Array:
        """The Pharaoh text per sentence as an Arrow string array, built without a loop over sentences."""
        src, tgt = self.src.copy(), self.tgt.copy()
        _sort_links(self.offsets, src, tgt)
        pairs = pc.binary_join_element_wise(pc.cast(pa.array(src), pa.string()), pc.cast(pa.array(tgt), pa.string()), "-")
        return pc.binary_join(pa.LargeListArray.from_arrays(pa.array(self.offsets), pairs), " ").cast(pa.string())

    @classmethod
    def from_pharaoh(cls, lines: Iterable[str]) -> Alignment:
        """Parse Pharaoh lines ("i-j i-j …", one per sentence, "" for none)."""
        arr = pa.array(list(lines), pa.string())
        toks, offsets = split_tokens(arr)
        parts = pc.split_pattern(toks, "-", max_splits=1)
        try:
            if len(toks) and pc.min(pc.list_value_length(parts)).as_py() != 2:
                raise pa.ArrowInvalid("no '-'")
            src = pc.cast(pc.list_element(parts, 0), pa.int32()).to_numpy()
            tgt = pc.cast(pc.list_element(parts, 1), pa.int32()).to_numpy()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):

            def good(tok: str) -> bool:
                i, dash, j = tok.partition("-")
                return dash == "-" and i.isdigit() and j.isdigit() and max(int(i), int(j)) < 2**31

            bad = next(k for k, line in enumerate(arr.to_pylist(), 1) if not all(map(good, (line or "").split())))
            raise InputError(
                f"line {bad}: expected Pharaoh links 'i-j' (0-based integers), found {arr[bad - 1].as_py()!r}"
            ) from None
        src, tgt = src.copy(), tgt.copy()
        _sort_links(offsets, src, tgt)
        return cls(offsets, src, tgt)
