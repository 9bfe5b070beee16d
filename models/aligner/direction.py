"""One direction's corpus as the kernels see it: e (the conditioning side, NULL = 0, −1 unknown), f (generated).

A pair with an empty side is not `valid`: it has no cells, no links and a NaN score (the reference tool counts
it in the corpus statistics and divides by zero). Sentence s's cells (target j, source i, i = 0 NULL) start at
`cell_off[s]`. The prior rows of the most frequent (m, n) are cached, up to `PRIOR_BUDGET` doubles, and refilled
once per iteration. An EM pass runs the serial kernel over contiguous sentence chunks of about equal cells
(`chunk_bounds`), each chunk into its own count row: the rows are reduced in chunk order, so a run is
bit-for-bit repeatable for a given chunk count, whatever the threads (the tool's OpenMP updates race).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.aligner.encoding import Side
from models.aligner.kernels import em_chunk, fill_priors
from models.aligner.pool import run_tasks

PRIOR_BUDGET = 1 << 23  # cached prior cells (doubles) over the most frequent (m, n); the rest computed per pair


def chunk_bounds(cell_off: np.ndarray, chunks: int) -> np.ndarray:
    """Sentence boundaries of `chunks` contiguous chunks with about equal cells (m·(n+1)) each."""
    total = cell_off[-1]
    cuts = np.searchsorted(cell_off, (np.arange(1, chunks) * total) // chunks, side="left")
    return np.concatenate([[0], cuts, [len(cell_off) - 1]]).astype(np.int64)


def _cells(e_len: np.ndarray, f_len: np.ndarray, valid: np.ndarray) -> np.ndarray:
    cell_off = np.zeros(len(e_len) + 1, np.int64)
    np.cumsum(np.where(valid, f_len * (e_len + 1), 0), out=cell_off[1:])
    return cell_off


@dataclass(frozen=True)
class Lengths:
    """The distinct (m, n) of the valid pairs with their counts (tension optimisation) and the prior cache."""

    pair_m: np.ndarray
    pair_n: np.ndarray
    pair_count: np.ndarray
    pair_of: np.ndarray  # per sentence: its cached (m, n) slot, −1 if none
    cached_m: np.ndarray
    cached_n: np.ndarray
    prior_off: np.ndarray

    @classmethod
    def of(cls, e_len: np.ndarray, f_len: np.ndarray, valid: np.ndarray) -> Lengths:
        width = int(e_len.max(initial=0)) + 1
        keys, inverse, count = np.unique(f_len[valid] * width + e_len[valid], return_inverse=True, return_counts=True)
        pm, pn = keys // width, keys % width
        cells = pm * (pn + 1)
        order = np.argsort(-count, kind="stable")
        cached = np.zeros(len(keys), bool)
        cached[order[np.cumsum(cells[order]) <= PRIOR_BUDGET]] = True
        slot = np.full(len(keys), -1, np.int64)
        slot[cached] = np.arange(cached.sum())
        prior_off = np.zeros(int(cached.sum()) + 1, np.int64)
        np.cumsum(cells[cached], out=prior_off[1:])
        pair_of = np.full(len(e_len), -1, np.int64)
        pair_of[valid] = slot[inverse.ravel()]
        return cls(pm, pn, count.astype(np.float64), pair_of, pm[cached], pn[cached], prior_off)

    def priors(self, tension: float, p0: float, favor_diagonal: bool) -> np.ndarray:
        """The cached prior rows for this λ: prior[prior_off[k] + j·(n+1) + i]."""
        prior = np.empty(self.prior_off[-1])
        fill_priors(self.cached_m, self.cached_n, self.prior_off, tension, p0, favor_diagonal, prior)
        return prior


@dataclass(frozen=True)
class Direction:
    """One direction's corpus as the kernels see it: e (conditioning side, NULL = 0, −1 unknown), f (generated)."""

    e_ids: np.ndarray
    e_off: np.ndarray
    f_ids: np.ndarray
    f_off: np.ndarray
    valid: np.ndarray  # both sides non-empty
    cell_off: np.ndarray  # sentence s's cells (j, i) start here
    lengths: Lengths
    max_n: int

    @classmethod
    def of(cls, e: Side, f: Side) -> Direction:
        valid = (e.lengths > 0) & (f.lengths > 0)
        return cls(
            np.where(e.ids >= 0, e.ids + 1, -1).astype(np.int32),
            e.offsets,
            f.ids,
            f.offsets,
            valid,
            _cells(e.lengths, f.lengths, valid),
            Lengths.of(e.lengths, f.lengths, valid),
            int(e.lengths.max(initial=0)),
        )

    def em_pass(
        self,
        row_ptr: np.ndarray,
        cols: np.ndarray,
        theta: np.ndarray,
        cell_idx: np.ndarray,
        bounds: np.ndarray,
        decode: bool,
        tension: float,
        p0: float,
        favor_diagonal: bool,
        counts: np.ndarray,
        stats: np.ndarray,
        sent_ll: np.ndarray,
        best: np.ndarray,
        threads: int,
    ) -> None:
        """One pass of UpdateFromPairs: chunk k of `bounds` into counts[k], stats[k], on `threads` threads."""
        prior = self.lengths.priors(tension, p0, favor_diagonal)
        indexed = int(np.searchsorted(self.cell_off, len(cell_idx), side="right")) - 1  # sentences with an index

        def chunk(k: int) -> None:
            em_chunk(
                self.e_ids,
                self.e_off,
                self.f_ids,
                self.f_off,
                self.valid,
                row_ptr,
                cols,
                theta,
                cell_idx,
                self.cell_off,
                indexed,
                self.lengths.pair_of,
                prior,
                self.lengths.prior_off,
                bounds[k],
                bounds[k + 1],
                decode,
                tension,
                p0,
                favor_diagonal,
                self.max_n,
                counts[k],
                stats[k],
                sent_ll,
                best,
            )

        run_tasks(threads, len(bounds) - 1, chunk)
