"""fast_align's EM over the parts of a bitext (issue 51): an E-step per part, the M-step a sum of the parts' counts.

The words are numbered once for the whole bitext (``merge_vocab``: in order of first appearance over the parts,
the ids ``encode_stream`` gives), so every part speaks of the same (e, f). A part's E-step (``expected_counts``)
runs the one-process kernel (``Direction.em_pass``) over the part as one chunk: the first over the part's own table
of co-occurring pairs with θ = 1e-9 (``_train``'s iteration 0), the later ones over the global table of the M-step
before, each sentence's cells found by walking its rows. It returns the part's expected counts as a sparse table
(``PartCounts``: e, f, count, sorted) with its statistics (Σ ln Σ_i p, Σ h·post, Σ NULL post). The M-step
(``Accumulator``, then ``maximise``) adds the parts' counts cell by cell in part order and their statistics in
part order, optimises λ and normalises: what ``_train`` computes when its chunks are the parts
(``FastAlign.train(..., chunk_rows=<the parts' sizes>)`` gives the same bits). With ``_train``'s default chunks
(8 of equal cells) the sums are grouped otherwise: θ then differs in the last bits (relative ≤ 2.1e-11 on
Multi30k's 29k pairs in 6 parts, every link identical) and a link may differ where two source words tie within
that. Memory: a part and the lexical table (θ, and the E-step's counts dense over it), never the corpus.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from conf.errors import ModelError
from models.aligner import kernels
from models.aligner.alignment import Alignment, links_from_best
from models.aligner.direction import Direction
from models.aligner.encoding import Side
from models.aligner.table import UNSEEN, build_table, gallop

CELL_INDEX_BUDGET = 1 << 26  # bytes of a part's cell index (the rest of its sentences walk the table rows)


def merge_vocab(vocabs: Iterable[pa.Array]) -> pa.Array:
    """The bitext's words in order of first appearance, from each part's words in their order of first appearance
    (``encode(part).vocab``), parts in order: the vocabulary ``encode_stream`` builds over the whole bitext."""
    vocab = pa.array([], pa.string())
    for words in vocabs:
        words = words.cast(pa.string())
        new = pc.invert(pc.is_in(words, value_set=vocab))
        vocab = pa.concat_arrays([vocab, words.filter(new)])
    return vocab


@dataclass(frozen=True)
class Theta:
    """One direction's θ(f | e) over the co-occurring pairs of the whole bitext: CSR by e (0 = NULL, word id + 1)."""

    row_ptr: np.ndarray  # int64, n_e + 1
    cols: np.ndarray  # int32 f ids, sorted within a row
    theta: np.ndarray  # float64

    @classmethod
    def of_rows(cls, e: np.ndarray, f: np.ndarray, theta: np.ndarray, n_e: int) -> Theta:
        """From rows (e, f, θ) sorted by (e, f), as ``rows`` gives them."""
        row_ptr = np.zeros(n_e + 1, np.int64)
        np.cumsum(np.bincount(e, minlength=n_e), out=row_ptr[1:])
        return cls(row_ptr, np.asarray(f, np.int32), np.asarray(theta, np.float64))

    def rows(self) -> np.ndarray:
        """e of every entry (int32), beside ``cols`` and ``theta``."""
        return np.repeat(np.arange(len(self.row_ptr) - 1, dtype=np.int32), np.diff(self.row_ptr))


@njit(cache=True, nogil=True, error_model="numpy")
def locate(row_ptr, cols, sub_ptr, sub_cols):
    """The index in (row_ptr, cols) of every entry of (sub_ptr, sub_cols) (both CSR over the same rows, columns
    sorted), −1 where absent: each row is walked forward by galloping from the last hit."""
    out = np.full(len(sub_cols), -1, np.int64)
    for e in range(min(len(sub_ptr), len(row_ptr)) - 1):
        lo = row_ptr[e]
        end = row_ptr[e + 1]
        for k in range(sub_ptr[e], sub_ptr[e + 1]):
            f = sub_cols[k]
            lo = gallop(cols, lo, end, f)
            if lo < end and cols[lo] == f:
                out[k] = lo
    return out


@dataclass(frozen=True)
class PartCounts:
    """A part's expected counts (e, f sorted, as a CSR table's rows) and its statistics (ll, emp, c0)."""

    e: np.ndarray  # int32
    f: np.ndarray  # int32
    count: np.ndarray  # float64
    stats: np.ndarray  # float64 (Σ ln Σ_i p, Σ h(j, i)·post, Σ NULL post)


def _part_table(d: Direction, n_e: int, n_f: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The part's co-occurring pairs (global ids) as CSR, and the table index of its first sentences' cells."""
    indexed = min(int(np.searchsorted(d.cell_off, CELL_INDEX_BUDGET // 4, side="right")) - 1, len(d.valid))
    cell_idx = np.empty(int(d.cell_off[indexed]), np.int32)
    row_ptr, cols = build_table(d.e_ids, d.e_off, d.f_ids, d.f_off, d.valid, n_e, n_f, d.cell_off, cell_idx, indexed, 1)
    return row_ptr, cols, cell_idx


def sizes_of(e: Side, f: Side) -> tuple[int, int]:
    """(words of e's vocabulary, words of f's): the sides' own vocabularies."""
    if e.vocab is None or f.vocab is None:
        raise ModelError("fast_align: a side's vocabulary is not at hand; give the vocabularies' sizes")
    return len(e.vocab), len(f.vocab)


def _pass(
    e: Side,
    f: Side,
    theta: Theta | None,
    decode: bool,
    tension: float,
    p0: float,
    favor_diagonal: bool,
    sizes: tuple[int, int] | None,
):
    """One pass over a part. Before the first M-step (``theta`` None): over the part's own table of co-occurring pairs
    (θ = 1e-9), which lists every pair for the first M-step's union. Afterwards: over the global table itself, each
    sentence's cells found by walking its rows (``sentence_index``), the counts dense over it and their non-zero
    entries kept (a pair left out adds 0.0, which changes no sum): no per-part table to build again. ``sizes``: the
    words of e's and f's vocabularies (None: the sides' own)."""
    n_e, n_f = sizes_of(e, f) if sizes is None else sizes
    if (e.ids < 0).any() or (f.ids < 0).any():
        raise ModelError("fast_align: a part has a word outside the bitext's vocabulary (a stale vocabulary artifact?)")
    d = Direction.of(e, f)
    if theta is None:
        row_ptr, cols, cell_idx = _part_table(d, n_e + 1, n_f)
        values = np.full(cols.size, UNSEEN)
    else:
        if len(theta.row_ptr) != n_e + 2:
            raise ModelError("fast_align: the M-step's table is not over this vocabulary (a stale parameter artifact?)")
        row_ptr, cols, values, cell_idx = theta.row_ptr, theta.cols, theta.theta, np.zeros(0, np.int32)
    counts = np.zeros((1, 0 if decode else cols.size + 1))  # the last slot: a cell whose pair the table lacks (−1)
    stats = np.zeros((1, 3))
    best = np.full(len(f.ids), -1, np.int32)
    bounds = np.array([0, len(d.valid)], np.int64)
    sent_ll = np.zeros(len(d.valid))
    d.em_pass(row_ptr, cols, values, cell_idx, bounds, decode, tension, p0, favor_diagonal, counts, stats, sent_ll, best, 1)
    if not decode and counts[0, -1] != 0:
        raise ModelError("fast_align: a part has a word pair the M-step's table lacks (a stale parameter artifact?)")
    return row_ptr, cols, counts[0, :-1] if not decode else counts[0], stats[0], best


def expected_counts(
    e: Side,
    f: Side,
    theta: Theta | None,
    *,
    tension: float,
    p0: float = 0.08,
    favor_diagonal: bool = True,
    sizes: tuple[int, int] | None = None,
) -> PartCounts:
    """One E-step over one part (``e`` conditions, ``f`` is generated; ids of the whole bitext's vocabularies, whose
    sizes ``sizes`` gives when the sides hold ids only): posteriors summed per (e, f) in sentence order. ``theta``
    None: before the first M-step (θ = 1e-9)."""
    row_ptr, cols, counts, stats, _ = _pass(e, f, theta, False, tension, p0, favor_diagonal, sizes)
    keep = np.arange(cols.size) if theta is None else np.flatnonzero(counts)
    rows = np.searchsorted(row_ptr, keep, side="right").astype(np.int32) - 1
    return PartCounts(rows, cols[keep], counts[keep], stats.copy())


def viterbi(
    e: Side,
    f: Side,
    theta: Theta,
    *,
    reverse: bool,
    tension: float,
    p0: float = 0.08,
    favor_diagonal: bool = True,
    sizes: tuple[int, int] | None = None,
) -> Alignment:
    """The last iteration over one part: Viterbi links (always (src, tgt); ``reverse``: e is the target)."""
    *_, best = _pass(e, f, theta, True, tension, p0, favor_diagonal, sizes)
    return Alignment(*links_from_best(best, f.offsets, reverse))


class Accumulator:
    """The M-step's sum: the parts' counts added cell by cell, and their statistics, in the order they come."""

    def __init__(self, n_e: int, n_f: int, theta: Theta | None) -> None:
        """``theta``: the previous M-step's table (its pairs are every part's); None: the pairs come from the
        parts (the first M-step), their union taken before any count is added (``union``)."""
        self.n_e, self.n_f = n_e, n_f
        self.row_ptr = None if theta is None else theta.row_ptr
        self.cols = None if theta is None else theta.cols
        self.total = None if theta is None else np.zeros(theta.cols.size)
        self.stats = np.zeros(3)

    def union(self, parts: Iterable[PartCounts]) -> None:
        """The table's pairs: every part's, merged a part at a time (sorted keys e·n_f + f)."""
        keys = np.zeros(0, np.int64)
        for p in parts:
            keys = np.union1d(keys, p.e.astype(np.int64) * self.n_f + p.f)
        row_ptr = np.zeros(self.n_e + 1, np.int64)
        np.cumsum(np.bincount(keys // self.n_f, minlength=self.n_e), out=row_ptr[1:])
        self.row_ptr, self.cols, self.total = row_ptr, (keys % self.n_f).astype(np.int32), np.zeros(len(keys))

    def add(self, part: PartCounts) -> None:
        """total[e, f] += the part's count, for each of its pairs; stats += the part's."""
        if self.total is None:
            raise ModelError("fast_align: the M-step's pairs are not known yet (union of the parts first)")
        sub_ptr = np.zeros(self.n_e + 1, np.int64)
        np.cumsum(np.bincount(part.e, minlength=self.n_e), out=sub_ptr[1:])
        idx = locate(self.row_ptr, self.cols, sub_ptr, part.f)
        if len(idx) and idx.min() < 0:
            raise ModelError("fast_align: a part's counts have a word pair the table lacks (a stale artifact?)")
        self.total[idx] += part.count  # a part's pairs are distinct: one addition per cell, in part order
        for k in range(3):  # the one-process loop: ll += stats[c, 0], … chunk after chunk
            self.stats[k] += part.stats[k]


def maximise(
    acc: Accumulator,
    *,
    iteration: int,
    tension: float,
    lengths: tuple[np.ndarray, np.ndarray, np.ndarray],
    alpha: float = 0.01,
    optimize_tension: bool = True,
    favor_diagonal: bool = True,
    variational_bayes: bool = True,
) -> tuple[Theta, float]:
    """The M-step after E-step ``iteration``: λ optimised (but after the first) from Σ h·post / target tokens over
    ``lengths`` (the distinct (m, n) of the valid pairs, sorted, and their counts), then θ normalised (VB)."""
    pair_m, pair_n, pair_count = lengths
    n_target_tokens = float((pair_m * pair_count).sum())
    if favor_diagonal and optimize_tension and iteration > 0 and len(pair_m):
        tension = kernels.optimize_tension(
            pair_m, pair_n, pair_count.astype(np.float64), n_target_tokens, acc.stats[1] / n_target_tokens, tension
        )
    theta = np.empty(acc.total.size)
    kernels.normalize(acc.total[None, :], acc.row_ptr, theta, alpha, variational_bayes)
    return Theta(acc.row_ptr, acc.cols, theta), float(tension)


def length_histogram(src_len: np.ndarray, tgt_len: np.ndarray) -> pa.Table:
    """The (src_len, tgt_len) of the pairs with both sides non-empty and their counts (int64; a part's or a sum)."""
    valid = (src_len > 0) & (tgt_len > 0)
    width = int(max(src_len.max(initial=0), tgt_len.max(initial=0))) + 1
    keys, count = np.unique(src_len[valid].astype(np.int64) * width + tgt_len[valid], return_counts=True)
    return pa.table({"src_len": keys // width, "tgt_len": keys % width, "count": count.astype(np.int64)})


def direction_lengths(histogram: pa.Table, *, reverse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m, n, count) sorted by (m, n) for one direction (m: the generated side's length), as ``Lengths.of``."""
    s, t, c = (histogram[k].to_numpy().astype(np.int64) for k in ("src_len", "tgt_len", "count"))
    m, n = (s, t) if reverse else (t, s)
    order = np.lexsort((n, m))
    return m[order], n[order], c[order].astype(np.float64)


def srclen_fold(total: float, m: np.ndarray, n: np.ndarray) -> float:
    """Σ m/n over the valid pairs, continued from ``total`` in line order (``_train``'s cumulative sum, part by
    part: the same bits)."""
    valid = (m > 0) & (n > 0)
    return float(np.cumsum(np.concatenate([[total], m[valid] / n[valid]]))[-1])
