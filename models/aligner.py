"""fast_align (Dyer, Chahuneau & Smith 2013): IBM Model 2 with a diagonal tension prior, hot loops in numba.

    p(a_j = 0 | j, m, n) = p0                                                        (NULL, p0 = 0.08)
    p(a_j = i | j, m, n) = (1 − p0) · exp(λ·h(j, i, m, n)) / Z_λ(j, m, n),  h = −|i/n − j/m|   (i, j 1-based)
    p(f | e_{a_j})       = θ(f | e),  θ = exp(ψ(c_ef + α) − ψ(Σ_f' (c_ef' + α)))  (variational Bayes, α=0.01)
    λ ← clamp(λ + 20·(E_post[h] − E_λ[h]), 0.1, 14), 8 steps after each iteration but the first and last

No maintained PyPI package ships clab's fast_align (the tool is C++ built from source; `systran-align` is a
2023 fork with its own changes, `eflomal` a different model), so this module re-implements
clab/fast_align's `fast_align.cc`, `da.h` (`DiagonalAlignment`) and `ttables.h` (`TTable`, `Md::digamma`)
with the reference's quirks kept: the E-step's prior uses the 1-based target position j+1 but the posterior
feature E_post[h] the 0-based j; `ComputeDLogZ` normalises by `ComputeZ(j, n, m)` (m and n swapped, its
unsigned wrap included); an unseen pair and every pair before the first normalisation has θ = 1e-9, so
iteration 0 is the prior alone; the last iteration only decodes (Viterbi per target word, NULL wins ties,
then the leftmost source word); `mean_srclen_multiplier` = mean |f|/|e| from the first pass; force
alignment scores log Poisson(m; 0.05 + n·multiplier) + Σ_j log Σ_i p(a_j = i)·θ(f_j | e_i).
`reverse` conditions on the target (the tool's `-r`); links are always (src, tgt), 0-based, Pharaoh "i-j".

Where it differs on purpose: tokens are split on Unicode whitespace (the tool: space and tab); a pair with
an empty side is skipped by training (the tool counts it in the corpus statistics and divides by zero) and
gets no links and a NaN score; counts are summed per contiguous sentence chunk and the chunks reduced in
order, so a run is bit-for-bit repeatable for a given chunk count (the tool's OpenMP updates race);
`export_table` writes shortest round-trip floats (the tool: 6 significant digits) and rows sorted by ids.
`grow_diag_final_and` follows `atools -c grow-diag-final-and` (atools.cc: grow over the union's points in
(i, j) order, repeated until nothing is added, then "final-and" over the forward, then the reverse links).

Layout. Words are ids in order of first appearance (Arrow `dictionary_encode`), sentences CSR (int32 ids,
int64 offsets). θ and the counts live in one CSR table over the co-occurring (e, f) pairs only (row 0 is NULL,
f sorted, so `align` finds a pair by binary search, an unseen one gets 1e-9). Training writes each cell's
(sentence, target j, source i) table index once (4 bytes a cell, up to 1 GiB, else binary search per pass) and
computes the prior rows of the most frequent (m, n) once per iteration (the same function as inline: the same
bits). The kernels are serial `@njit(nogil=True)` functions over contiguous sentence chunks of equal cells, run on
a thread pool; each chunk owns a count row, and the rows are summed in chunk order, so `threads` changes no bit
while `chunks` (default max(8, threads)) may change the last ones.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from numba import njit

from conf.errors import InputError, ModelError

NULL = "<eps>"  # the NULL source word in exported tables (source id 0)
UNSEEN = 1e-9  # TTable::prob before the first normalisation, safe_prob of an unknown pair
TABLE_SCHEMA = pa.schema([("e", pa.string()), ("f", pa.string()), ("log_prob", pa.float64())])
CHUNKS = 8  # default sentence chunks (counts are reduced in chunk order: results depend on this, not on threads)
_CELL_INDEX_BUDGET = 1 << 30  # bytes for the precomputed table index of every (sentence, j, i); else binary search
_COUNT_BUDGET = 1 << 30  # bytes for the per-chunk count arrays; fewer chunks beyond it
_PRIOR_BUDGET = 1 << 23  # cached prior cells (doubles) over the most frequent (m, n); the rest computed per pair
_WRAP = 4294967296  # 2**32: the reference's `unsigned` arithmetic

Texts = Sequence[str] | pa.Array | pa.ChunkedArray


# ---- the reference's maths (da.h, ttables.h), scalar
@njit(cache=True, nogil=True, error_model="numpy")
def _feature(i, j, m, n):
    """DiagonalAlignment::Feature: h = −|j/n − i/m| for target position i of m, source position j of n."""
    return -abs(j / n - i / m)


@njit(cache=True, nogil=True, error_model="numpy")
def _unnormalized(i, j, m, n, tension):
    return math.exp(_feature(i, j, m, n) * tension)


@njit(cache=True, nogil=True, error_model="numpy")
def _compute_z(i, m, n, tension):
    """DiagonalAlignment::ComputeZ: Σ_j exp(λ·h) in closed form (two geometric series around i·n/m)."""
    split = float(i) * n / m
    floor = int(split)
    ratio = math.exp(-tension / n)
    num_top = n - floor
    if num_top < 0:
        num_top += _WRAP  # unsigned wrap (reachable through ComputeDLogZ's swapped call)
    ezt = 0.0
    ezb = 0.0
    if num_top != 0:
        ezt = _unnormalized(i, floor + 1, m, n, tension) * (1.0 - math.pow(ratio, float(num_top))) / (1.0 - ratio)
    if floor != 0:
        ezb = _unnormalized(i, floor, m, n, tension) * (1.0 - math.pow(ratio, float(floor))) / (1.0 - ratio)
    return ezb + ezt


@njit(cache=True, nogil=True, error_model="numpy")
def _arithmetico_geometric(a_1, g_1, r, d, n):
    g_np1 = g_1 * math.pow(r, float(n))
    a_n = d * float(n - 1) + a_1
    x_1 = a_1 * g_1
    g_2 = g_1 * r
    rm1 = r - 1
    return (a_n * g_np1 - x_1) / rm1 - d * (g_np1 - g_2) / (rm1 * rm1)


@njit(cache=True, nogil=True, error_model="numpy")
def _dlogz(i, m, n, tension):
    """DiagonalAlignment::ComputeDLogZ: E_λ[h] at target position i, over ComputeZ(i, n, m) as the reference."""
    z = _compute_z(i, n, m, tension)
    split = float(i) * n / m
    floor = int(split)
    ratio = math.exp(-tension / n)
    d = -1.0 / n
    num_top = n - floor
    pct = 0.0
    pcb = 0.0
    if num_top != 0:
        pct = _arithmetico_geometric(_feature(i, floor + 1, m, n), _unnormalized(i, floor + 1, m, n, tension),
                                     ratio, d, num_top)
    if floor != 0:
        pcb = _arithmetico_geometric(_feature(i, floor, m, n), _unnormalized(i, floor, m, n, tension), ratio, d, floor)
    return (pct + pcb) / z


@njit(cache=True, nogil=True, error_model="numpy")
def _digamma(x):
    """Md::digamma: recurrence up to 7, then the asymptotic series (the reference's, not scipy's)."""
    result = 0.0
    while x < 7:
        result -= 1 / x
        x += 1
    x -= 1.0 / 2.0
    xx = 1.0 / x
    xx2 = xx * xx
    xx4 = xx2 * xx2
    result += (math.log(x) + (1.0 / 24.0) * xx2 - (7.0 / 960.0) * xx4 + (31.0 / 8064.0) * xx4 * xx2
               - (127.0 / 30720.0) * xx4 * xx4)
    return result


def log_poisson(x: int, lam: float) -> float:
    """Md::log_poisson: ln Poisson(x; λ) = x·ln λ − ln x! − λ."""
    return math.log(lam) * x - math.lgamma(x + 1) - lam


def diagonal_prior(j: int, m: int, n: int, *, tension: float = 4.0, p0: float = 0.08) -> np.ndarray:
    """[p(a_j = 0), p(a_j = 1), …, p(a_j = n)] for 1-based target position j of m, n source words (da.h)."""
    az = _compute_z(j, m, n, tension) / (1.0 - p0)
    return np.array([p0] + [_unnormalized(j, i, m, n, tension) / az for i in range(1, n + 1)])


def vb_normalize(counts: np.ndarray, alpha: float = 0.01) -> np.ndarray:
    """TTable::NormalizeVB of one row: θ_f = exp(ψ(c_f + α) − ψ(Σ_f' (c_f' + α)))."""
    counts = np.asarray(counts, dtype=np.float64)
    tot = 0.0
    for c in counts:
        tot += c + alpha
    dt = _digamma(tot or 1.0)
    return np.array([math.exp(_digamma(c + alpha) - dt) for c in counts])


# ---- kernels
@njit(cache=True, nogil=True, error_model="numpy")
def _lookup(row_ptr, cols, e, f):
    """Index of (e, f) in the CSR table (rows sorted by f), −1 when absent or a word is unknown (−1)."""
    if e < 0 or f < 0 or e >= len(row_ptr) - 1:
        return -1
    lo = row_ptr[e]
    end = row_ptr[e + 1]
    hi = end
    while lo < hi:
        mid = (lo + hi) >> 1
        if cols[mid] < f:
            lo = mid + 1
        else:
            hi = mid
    if lo < end and cols[lo] == f:
        return lo
    return -1


@njit(cache=True, nogil=True, error_model="numpy")
def _heapsort(a, lo, hi):
    """Sort a[lo:hi] in place (heapsort: numba's own sort costs seconds of compile time)."""
    n = hi - lo
    for start in range(n // 2 - 1, -1, -1):
        _sift(a, lo, start, n)
    for end in range(n - 1, 0, -1):
        a[lo], a[lo + end] = a[lo + end], a[lo]
        _sift(a, lo, 0, end)


@njit(cache=True, nogil=True, error_model="numpy")
def _sift(a, lo, root, n):
    while True:
        child = 2 * root + 1
        if child >= n:
            return
        if child + 1 < n and a[lo + child + 1] > a[lo + child]:
            child += 1
        if a[lo + root] >= a[lo + child]:
            return
        a[lo + root], a[lo + child] = a[lo + child], a[lo + root]
        root = child


@njit(cache=True, nogil=True, error_model="numpy")
def _occurrences(e_ids, e_off, valid, n_e):
    """Counting sort of the source tokens by word: for word e (0 = NULL, once per valid sentence) its
    occurrences occ_ptr[e]:occ_ptr[e+1] as (sentence, 1-based position; 0 for NULL)."""
    occ_ptr = np.zeros(n_e + 1, np.int64)
    n_valid = 0
    for s in range(len(e_off) - 1):
        if valid[s]:
            n_valid += 1
            for t in range(e_off[s], e_off[s + 1]):
                occ_ptr[e_ids[t] + 1] += 1
    occ_ptr[1] += n_valid
    for e in range(n_e):
        occ_ptr[e + 1] += occ_ptr[e]
    occ_s = np.empty(occ_ptr[n_e], np.int64)
    occ_i = np.empty(occ_ptr[n_e], np.int64)
    fill = np.empty(n_e, np.int64)
    for e in range(n_e):
        fill[e] = occ_ptr[e]
    for s in range(len(e_off) - 1):
        if valid[s]:
            occ_s[fill[0]] = s
            occ_i[fill[0]] = 0
            fill[0] += 1
            for t in range(e_off[s], e_off[s + 1]):
                e = e_ids[t]
                occ_s[fill[e]] = s
                occ_i[fill[e]] = t - e_off[s] + 1
                fill[e] += 1
    return occ_ptr, occ_s, occ_i


@njit(cache=True, nogil=True, error_model="numpy")
def _row(e, occ_ptr, occ_s, f_ids, f_off, st, cols, a):
    """The distinct f co-occurring with e, stamped st[f] = e; written to cols[a:] when cols is given."""
    c = a
    for k in range(occ_ptr[e], occ_ptr[e + 1]):
        s = occ_s[k]
        for t in range(f_off[s], f_off[s + 1]):
            f = f_ids[t]
            if st[f] != e:
                st[f] = e
                if len(cols):
                    cols[c] = f
                c += 1
    return c


@njit(cache=True, nogil=True, error_model="numpy")
def _table_rows(occ_ptr, occ_s, occ_i, e_off, f_ids, f_off, n_f, row_ptr, cols, cell_off, cell_idx, write_idx,
                b, n_blocks, row_len):
    """Rows e = b, b + n_blocks, … (interleaved, so the frequent early words spread over blocks). Phase 1
    (row_len given): the distinct f per e. Phase 2: the rows of the CSR table (f sorted) and, when write_idx,
    every cell's table index, cell_idx[cell_off[s] + j·(n+1) + i] (target j, source i, 0 = NULL)."""
    n_e = len(occ_ptr) - 1
    count_only = len(row_len) > 0
    st = np.full(max(n_f, 1), -1, np.int64)  # st[f] == e: f seen with e
    for e in range(b, n_e, n_blocks):
        if count_only:
            row_len[e] = _row(e, occ_ptr, occ_s, f_ids, f_off, st, cols[:0], 0)
            continue
        a = row_ptr[e]
        c = _row(e, occ_ptr, occ_s, f_ids, f_off, st, cols, a)
        _heapsort(cols, a, c)
        if write_idx:
            for k in range(a, c):
                st[cols[k]] = k  # a position map for now; restamped below so stamps stay distinct
            for k in range(occ_ptr[e], occ_ptr[e + 1]):
                s = occ_s[k]
                n1 = e_off[s + 1] - e_off[s] + 1
                base = cell_off[s] + occ_i[k]
                f0 = f_off[s]
                for j in range(f_off[s + 1] - f0):
                    cell_idx[base + j * n1] = st[f_ids[f0 + j]]
            for k in range(a, c):
                st[cols[k]] = -2 - e


def _build_table(e_ids, e_off, f_ids, f_off, valid, n_e, n_f, cell_off, cell_idx, write_idx, threads):
    """The co-occurring (e, f) pairs as CSR (row 0 is NULL, f sorted per row) and optionally each cell's index."""
    occ_ptr, occ_s, occ_i = _occurrences(e_ids, e_off, valid, n_e)
    row_ptr = np.zeros(n_e + 1, np.int64)
    row_len = np.zeros(n_e, np.int64)
    no_cols = np.empty(0, np.int32)
    n_blocks = 4 * threads
    _run(threads, n_blocks, lambda b: _table_rows(occ_ptr, occ_s, occ_i, e_off, f_ids, f_off, n_f, row_ptr, no_cols,
                                                  cell_off, cell_idx, write_idx, b, n_blocks, row_len))
    np.cumsum(row_len, out=row_ptr[1:])
    cols = np.empty(row_ptr[-1], np.int32)
    _run(threads, n_blocks, lambda b: _table_rows(occ_ptr, occ_s, occ_i, e_off, f_ids, f_off, n_f, row_ptr, cols,
                                                  cell_off, cell_idx, write_idx, b, n_blocks, row_len[:0]))
    return row_ptr, cols


@njit(cache=True, nogil=True, error_model="numpy")
def _prior_row(j, m, n, tension, p0, favor_diagonal, q, out, o):
    """out[o + i] = p(a_j = i | j, m, n) for i = 0 … n (0-based target j; q[i] = i/n), as UpdateFromPairs."""
    if favor_diagonal:
        az = _compute_z(j + 1, m, n, tension) / (1.0 - p0)
        out[o] = p0
        jm = (j + 1) / m
        for i in range(1, n + 1):
            out[o + i] = math.exp(-abs(q[i] - jm) * tension) / az  # UnnormalizedProb(j + 1, i, m, n) / az
    else:
        for i in range(n + 1):
            out[o + i] = 1.0 / (n + 1)


@njit(cache=True, nogil=True, error_model="numpy")
def _fill_priors(pair_m, pair_n, prior_off, tension, p0, favor_diagonal, prior):
    """The prior rows of every cached (m, n): prior[prior_off[k] + j·(n+1) + i]."""
    for k in range(len(pair_m)):
        m = pair_m[k]
        n = pair_n[k]
        q = np.empty(n + 1)
        for i in range(n + 1):
            q[i] = i / n
        for j in range(m):
            _prior_row(j, m, n, tension, p0, favor_diagonal, q, prior, prior_off[k] + j * (n + 1))


@njit(cache=True, nogil=True, error_model="numpy")
def _em_chunk(e_ids, e_off, f_ids, f_off, valid, row_ptr, cols, theta, cell_idx, cell_off, have_idx, pair_of, prior,
              prior_off, lo, hi, decode, tension, p0, favor_diagonal, max_n, counts, stats, sent_ll, best):
    """fast_align.cc's UpdateFromPairs over sentences lo … hi−1 (one chunk; its own counts and stats rows).

    Training (decode=False): counts = posteriors summed, stats = (Σ ln Σ_i p, Σ h(j, i)·post, Σ NULL post).
    Decoding: best[t] = Viterbi source position of target token t (−1: NULL). sent_ll[s] = Σ_j ln Σ_i p.
    θ comes through cell_idx (have_idx) or a binary search per cell; the prior from the cache where
    pair_of[s] >= 0, else computed (same function, same bits).
    """
    probs = np.empty(max_n + 1)
    pbuf = np.empty(max_n + 1)
    kbuf = np.empty(max_n + 1, cell_idx.dtype)
    q = np.empty(max_n + 1)
    if not decode:
        counts[:] = 0.0
    ll = 0.0
    emp = 0.0
    c0 = 0.0
    for s in range(lo, hi):
        f0 = f_off[s]
        m = f_off[s + 1] - f0
        if not valid[s]:
            sent_ll[s] = np.nan
            if decode:
                best[f0:f0 + m] = -1
            continue
        e0 = e_off[s]
        n = e_off[s + 1] - e0
        for i in range(n + 1):
            q[i] = i / n
        pid = pair_of[s]
        sll = 0.0
        for j in range(m):
            if have_idx:
                idx = cell_idx
                ib = cell_off[s] + j * (n + 1)
            else:
                f = f_ids[f0 + j]
                kbuf[0] = _lookup(row_ptr, cols, 0, f)
                for i in range(1, n + 1):
                    kbuf[i] = _lookup(row_ptr, cols, e_ids[e0 + i - 1], f)
                idx = kbuf
                ib = 0
            if pid >= 0:
                pri = prior
                pb = prior_off[pid] + j * (n + 1)
            else:
                _prior_row(j, m, n, tension, p0, favor_diagonal, q, pbuf, 0)
                pri = pbuf
                pb = 0
            tot = 0.0
            for i in range(n + 1):
                k = idx[ib + i]
                t = theta[k] if k >= 0 else UNSEEN
                probs[i] = t * pri[pb + i]
                tot += probs[i]
            if decode:
                arg = 0
                top = probs[0]
                for i in range(1, n + 1):
                    if probs[i] > top:
                        top = probs[i]
                        arg = i
                best[f0 + j] = arg - 1
            else:
                p = probs[0] / tot
                c0 += p
                counts[idx[ib]] += p
                jm = j / m
                for i in range(1, n + 1):
                    p = probs[i] / tot
                    counts[idx[ib + i]] += p
                    emp += -abs(q[i] - jm) * p  # Feature(j, i, m, n): the 0-based j, as the reference
            sll += math.log(tot)
        sent_ll[s] = sll
        ll += sll
    stats[0] = ll
    stats[1] = emp
    stats[2] = c0


@njit(cache=True, nogil=True, error_model="numpy")
def _normalize(counts, row_ptr, theta, alpha, variational_bayes):
    """Chunk counts summed in chunk order, then TTable::NormalizeVB (or Normalize) per source word."""
    n_chunks = counts.shape[0]
    for e in range(len(row_ptr) - 1):
        a = row_ptr[e]
        b = row_ptr[e + 1]
        tot = 0.0
        for k in range(a, b):
            c = counts[0, k]
            for ch in range(1, n_chunks):
                c += counts[ch, k]
            theta[k] = c
            if variational_bayes:
                tot += c + alpha
            else:
                tot += c
        if tot == 0.0:
            tot = 1.0
        if variational_bayes:
            dt = _digamma(tot)
            for k in range(a, b):
                theta[k] = math.exp(_digamma(theta[k] + alpha) - dt)
        else:
            for k in range(a, b):
                theta[k] = theta[k] / tot


@njit(cache=True, nogil=True, error_model="numpy")
def _optimize_tension(pair_m, pair_n, pair_count, n_target_tokens, emp_feat, tension):
    """fast_align.cc's 8 steps λ += 20·(E_post[h] − E_λ[h]), clamped to [0.1, 14]; E_λ over the (m, n) counts."""
    for _ in range(8):
        mod_feat = 0.0
        for k in range(len(pair_m)):
            m = pair_m[k]
            n = pair_n[k]
            for j in range(1, m + 1):
                mod_feat += pair_count[k] * _dlogz(j, m, n, tension)
        mod_feat /= n_target_tokens
        tension += (emp_feat - mod_feat) * 20.0
        if tension <= 0.1:
            tension = 0.1
        if tension > 14:
            tension = 14.0
    return tension


@njit(cache=True, nogil=True, error_model="numpy")
def _log_scores(m, lam, sent_ll, valid):
    """Per pair ln Poisson(m; λ) + Σ_j ln Σ_i p (Md::log_poisson + the -f loop); NaN where a side is empty."""
    out = np.full(len(m), np.nan)
    for s in range(len(m)):
        if valid[s]:
            out[s] = math.log(lam[s]) * m[s] - math.lgamma(m[s] + 1.0) - lam[s] + sent_ll[s]
    return out


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
def _links_from_best(best, f_off, reverse):
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


@njit(cache=True, nogil=True, error_model="numpy")
def _gdfa_sentence(a_src, a_tgt, a0, a1, b_src, b_tgt, b0, b1, w, h, fa, fb, res, i_al, j_al, pts, done, added,
                   out_src, out_tgt, o0):
    """atools' GDFACommand on one sentence's w × h grid (scratch arrays at least that big, all False on entry
    and left so); writes the result in (i, j) order from out[o0] and returns its size."""
    for k in range(a0, a1):
        fa[a_src[k] * h + a_tgt[k]] = True
    for k in range(b0, b1):
        fb[b_src[k] * h + b_tgt[k]] = True
    for x in range(w * h):
        if fa[x] and fb[x]:
            res[x] = True
            i_al[x // h] = True
            j_al[x % h] = True
    n_pts = 0
    for x in range(w * h):  # the union's points not yet in res, in (i, j) order (std::set<pair<int, int>>)
        if (fa[x] or fb[x]) and not res[x]:
            pts[n_pts] = x
            n_pts += 1
    keep_going = n_pts > 0
    while keep_going:  # Grow(KoehnAligned, not idempotent, union)
        keep_going = False
        for q in range(n_pts):
            if done[q]:
                continue
            i = pts[q] // h
            j = pts[q] % h
            if i_al[i] and j_al[j]:
                continue  # KoehnAligned needs one or both unaligned
            near = False
            for di in range(-1, 2):
                for dj in range(-1, 2):
                    ii = i + di
                    jj = j + dj
                    if (di != 0 or dj != 0) and 0 <= ii < w and 0 <= jj < h and res[ii * h + jj]:
                        near = True
            if near:
                res[pts[q]] = True
                i_al[i] = True
                j_al[j] = True
                added[q] = True
                keep_going = True
        for q in range(n_pts):
            if added[q]:
                done[q] = True
                added[q] = False
    for side in range(2):  # Grow(IsNeitherAligned, idempotent): the forward links, then the reverse ones
        grid = fa if side == 0 else fb
        for x in range(w * h):
            if grid[x] and not res[x] and not i_al[x // h] and not j_al[x % h]:
                res[x] = True
                i_al[x // h] = True
                j_al[x % h] = True
    c = o0
    for x in range(w * h):
        if res[x]:
            out_src[c] = x // h
            out_tgt[c] = x % h
            c += 1
        fa[x] = fb[x] = res[x] = False
    i_al[:w] = False
    j_al[:h] = False
    done[:n_pts] = False
    return c - o0


@njit(cache=True, nogil=True, error_model="numpy")
def _gdfa(a_off, a_src, a_tgt, b_off, b_src, b_tgt, src_len, tgt_len):
    n = len(a_off) - 1
    dims = np.empty((n, 2), np.int64)  # the grid, grown to links past the given lengths
    big = 1
    for s in range(n):
        w = src_len[s]
        h = tgt_len[s]
        for k in range(a_off[s], a_off[s + 1]):
            w = max(w, a_src[k] + 1)
            h = max(h, a_tgt[k] + 1)
        for k in range(b_off[s], b_off[s + 1]):
            w = max(w, b_src[k] + 1)
            h = max(h, b_tgt[k] + 1)
        dims[s, 0] = w
        dims[s, 1] = h
        big = max(big, w * h)
    fa = np.zeros(big, np.bool_)
    fb = np.zeros(big, np.bool_)
    res = np.zeros(big, np.bool_)
    i_al = np.zeros(big, np.bool_)
    j_al = np.zeros(big, np.bool_)
    pts = np.empty(big, np.int64)
    done = np.zeros(big, np.bool_)
    added = np.zeros(big, np.bool_)
    offsets = np.zeros(n + 1, np.int64)
    src = np.empty(len(a_src) + len(b_src), np.int32)
    tgt = np.empty(len(a_src) + len(b_src), np.int32)
    for s in range(n):
        c = 0
        if a_off[s + 1] + b_off[s + 1] > a_off[s] + b_off[s]:
            c = _gdfa_sentence(a_src, a_tgt, a_off[s], a_off[s + 1], b_src, b_tgt, b_off[s], b_off[s + 1], dims[s, 0],
                               dims[s, 1], fa, fb, res, i_al, j_al, pts, done, added, src, tgt, offsets[s])
        offsets[s + 1] = offsets[s] + c
    return offsets, src[:offsets[n]].copy(), tgt[:offsets[n]].copy()


# ---- links
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
        if (len(self.offsets) == 0 or self.offsets[0] != 0 or self.offsets[-1] != len(self.src)
                or len(self.src) != len(self.tgt)):
            raise ModelError(f"Alignment: offsets end at {self.offsets[-1] if len(self.offsets) else None}, "
                             f"expected 0 … {len(self.src)} with len(src) = len(tgt)")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __repr__(self) -> str:
        return f"Alignment({len(self)} sentences, {len(self.src)} links)"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Alignment) and np.array_equal(self.offsets, other.offsets)
                and np.array_equal(self.src, other.src) and np.array_equal(self.tgt, other.tgt))

    __hash__ = None  # type: ignore[assignment]

    def links(self, s: int) -> list[tuple[int, int]]:
        """Sentence s's links as (src, tgt) tuples."""
        a, b = self.offsets[s], self.offsets[s + 1]
        return list(zip(self.src[a:b].tolist(), self.tgt[a:b].tolist()))

    def to_pharaoh(self) -> list[str]:
        """"0-0 1-2" per sentence ("" for none), sorted by (src, tgt)."""
        return self.pharaoh_array().to_pylist()

    def pharaoh_array(self) -> pa.Array:
        """The Pharaoh text per sentence as an Arrow string array, built without a loop over sentences."""
        src, tgt = self.src.copy(), self.tgt.copy()
        _sort_links(self.offsets, src, tgt)
        pairs = pc.binary_join_element_wise(pc.cast(pa.array(src), pa.string()), pc.cast(pa.array(tgt), pa.string()),
                                            "-")
        return pc.binary_join(pa.LargeListArray.from_arrays(pa.array(self.offsets), pairs), " ").cast(pa.string())

    @classmethod
    def from_pharaoh(cls, lines: Iterable[str]) -> "Alignment":
        """Parse Pharaoh lines ("i-j i-j …", one per sentence, "" for none)."""
        arr = pa.array(list(lines), pa.string())
        toks, offsets = _split(arr)
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
            raise InputError(f"line {bad}: expected Pharaoh links 'i-j' (0-based integers), found "
                             f"{arr[bad - 1].as_py()!r}") from None
        src, tgt = src.copy(), tgt.copy()
        _sort_links(offsets, src, tgt)
        return cls(offsets, src, tgt)


# ---- corpora
@dataclass(frozen=True)
class _Side:
    ids: np.ndarray  # int32 word ids per token (−1: not in the vocabulary given)
    offsets: np.ndarray  # int64, n + 1
    vocab: pa.Array  # string per id

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def _strings(texts: Texts) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not isinstance(texts, pa.Array):
        texts = pa.array(list(texts), pa.string())
    return texts if texts.type == pa.string() else pc.cast(texts, pa.string())


def _split(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Whitespace tokens of every row (flattened) and their CSR offsets; empty tokens ("" rows) dropped."""
    lists = pc.utf8_split_whitespace(arr)
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(lists)
    offsets = np.zeros(len(arr) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    empty = pc.equal(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    if empty.any():
        kept = np.concatenate([[0], np.cumsum(~empty)])
        offsets = kept[offsets]
        flat = flat.filter(pa.array(~empty))
    return flat, offsets


def _encode(texts: Texts, vocab: pa.Array | None = None) -> _Side:
    """Token ids: a new vocabulary in order of first appearance, or ids in `vocab` (−1 when absent)."""
    toks, offsets = _split(_strings(texts))
    if vocab is None:
        enc = pc.dictionary_encode(toks)
        return _Side(enc.indices.to_numpy(zero_copy_only=False).astype(np.int32), offsets, enc.dictionary)
    ids = pc.fill_null(pc.index_in(toks, value_set=vocab), -1).to_numpy(zero_copy_only=False)
    return _Side(ids.astype(np.int32), offsets, vocab)


def _pair(src: Texts, tgt: Texts) -> tuple[pa.Array, pa.Array]:
    s, t = _strings(src), _strings(tgt)
    if len(s) != len(t):
        raise InputError(f"aligner: src has {len(s)} sentences, tgt has {len(t)}; expected the same count. "
                         "Hint: pass the two sides of one bitext, row by row")
    return s, t


def _n_threads(threads: int | None) -> int:
    """Worker threads (None: the CPUs this process may use)."""
    return max(1, int(threads)) if threads is not None else max(1, len(os.sched_getaffinity(0)))


def _run(threads: int, n_tasks: int, task) -> None:
    """task(0 … n_tasks−1) on `threads` threads (the kernels release the GIL); in order when threads = 1."""
    if threads == 1 or n_tasks <= 1:
        for k in range(n_tasks):
            task(k)
        return
    with ThreadPoolExecutor(min(threads, n_tasks)) as pool:
        list(pool.map(task, range(n_tasks)))


def _chunk_bounds(cell_off: np.ndarray, chunks: int) -> np.ndarray:
    """Sentence boundaries of `chunks` contiguous chunks with about equal cells (m·(n+1)) each."""
    total = cell_off[-1]
    cuts = np.searchsorted(cell_off, (np.arange(1, chunks) * total) // chunks, side="left")
    return np.concatenate([[0], cuts, [len(cell_off) - 1]]).astype(np.int64)


def _cells(e_len: np.ndarray, f_len: np.ndarray, valid: np.ndarray) -> np.ndarray:
    cell_off = np.zeros(len(e_len) + 1, np.int64)
    np.cumsum(np.where(valid, f_len * (e_len + 1), 0), out=cell_off[1:])
    return cell_off


@dataclass(frozen=True)
class _Lengths:
    """The distinct (m, n) of the valid pairs with their counts (tension optimisation) and the prior cache."""

    pair_m: np.ndarray
    pair_n: np.ndarray
    pair_count: np.ndarray
    pair_of: np.ndarray  # per sentence: its cached (m, n) slot, −1 if none
    cached_m: np.ndarray
    cached_n: np.ndarray
    prior_off: np.ndarray

    @classmethod
    def of(cls, e_len: np.ndarray, f_len: np.ndarray, valid: np.ndarray) -> "_Lengths":
        width = int(e_len.max(initial=0)) + 1
        keys, inverse, count = np.unique(f_len[valid] * width + e_len[valid], return_inverse=True,
                                         return_counts=True)
        pm, pn = keys // width, keys % width
        cells = pm * (pn + 1)
        order = np.argsort(-count, kind="stable")
        cached = np.zeros(len(keys), bool)
        cached[order[np.cumsum(cells[order]) <= _PRIOR_BUDGET]] = True
        slot = np.full(len(keys), -1, np.int64)
        slot[cached] = np.arange(cached.sum())
        prior_off = np.zeros(int(cached.sum()) + 1, np.int64)
        np.cumsum(cells[cached], out=prior_off[1:])
        pair_of = np.full(len(e_len), -1, np.int64)
        pair_of[valid] = slot[inverse.ravel()]
        return cls(pm, pn, count.astype(np.float64), pair_of, pm[cached], pn[cached], prior_off)

    def priors(self, tension: float, p0: float, favor_diagonal: bool) -> np.ndarray:
        prior = np.empty(self.prior_off[-1])
        _fill_priors(self.cached_m, self.cached_n, self.prior_off, tension, p0, favor_diagonal, prior)
        return prior


@dataclass(frozen=True)
class _Direction:
    """One direction's corpus as the kernels see it: e (conditioning side, NULL = 0, −1 unknown), f (generated)."""

    e_ids: np.ndarray
    e_off: np.ndarray
    f_ids: np.ndarray
    f_off: np.ndarray
    valid: np.ndarray  # both sides non-empty
    cell_off: np.ndarray  # sentence s's cells (j, i) start here
    lengths: _Lengths
    max_n: int

    @classmethod
    def of(cls, e: _Side, f: _Side) -> "_Direction":
        valid = (e.lengths > 0) & (f.lengths > 0)
        return cls(np.where(e.ids >= 0, e.ids + 1, -1).astype(np.int32), e.offsets, f.ids, f.offsets, valid,
                   _cells(e.lengths, f.lengths, valid), _Lengths.of(e.lengths, f.lengths, valid),
                   int(e.lengths.max(initial=0)))

    def em_pass(self, row_ptr: np.ndarray, cols: np.ndarray, theta: np.ndarray, cell_idx: np.ndarray,
                bounds: np.ndarray, decode: bool, tension: float, p0: float, favor_diagonal: bool,
                counts: np.ndarray, stats: np.ndarray, sent_ll: np.ndarray, best: np.ndarray, threads: int) -> None:
        """One pass of UpdateFromPairs: chunk k of `bounds` into counts[k], stats[k], on `threads` threads."""
        prior = self.lengths.priors(tension, p0, favor_diagonal)
        have_idx = len(cell_idx) == self.cell_off[-1] and len(cell_idx) > 0

        def chunk(k: int) -> None:
            _em_chunk(self.e_ids, self.e_off, self.f_ids, self.f_off, self.valid, row_ptr, cols, theta, cell_idx,
                      self.cell_off, have_idx, self.lengths.pair_of, prior, self.lengths.prior_off, bounds[k],
                      bounds[k + 1], decode, tension, p0, favor_diagonal, self.max_n, counts[k], stats[k], sent_ll,
                      best)

        _run(threads, len(bounds) - 1, chunk)


# ---- the model
@dataclass(frozen=True, eq=False)
class FastAlign:
    """One direction's trained fast_align model: θ(f | e) over the co-occurring pairs (CSR by e, e = 0 NULL)."""

    reverse: bool  # True: p(src | tgt), the tool's -r
    tension: float  # λ after optimisation (the one the last iteration decoded with)
    mean_srclen_multiplier: float
    p0: float
    log_likelihood: tuple[float, ...]  # ln likelihood per iteration, as the tool prints
    favor_diagonal: bool
    e_vocab: pa.Array = field(repr=False)  # conditioning-side words; e id = index + 1 (0 is NULL)
    f_vocab: pa.Array = field(repr=False)  # generated-side words
    row_ptr: np.ndarray = field(repr=False)  # int64, len(e_vocab) + 2
    cols: np.ndarray = field(repr=False)  # int32 f ids, sorted within a row
    theta: np.ndarray = field(repr=False)  # float64 θ(f | e)

    @classmethod
    def train(
        cls, src: Texts, tgt: Texts, *, reverse: bool = False, iterations: int = 5, p0: float = 0.08,
        alpha: float = 0.01, tension: float = 4.0, optimize_tension: bool = True, favor_diagonal: bool = True,
        variational_bayes: bool = True, threads: int | None = None, chunks: int | None = None,
    ) -> tuple["FastAlign", Alignment]:
        """Train on the bitext (the tool's `-d -o -v` with the defaults) and return the last iteration's links.

        `chunks` (default max(8, threads)) fixes the summation order: equal chunks, equal bits, any `threads`.
        """
        s, t = _pair(src, tgt)
        ss, ts = _encode(s), _encode(t)
        return _train(ss, ts, reverse=reverse, iterations=iterations, p0=p0, alpha=alpha, tension=tension,
                      optimize_tension=optimize_tension, favor_diagonal=favor_diagonal,
                      variational_bayes=variational_bayes, threads=threads, chunks=chunks)

    def align(self, src: Texts, tgt: Texts, *, threads: int | None = None) -> tuple[Alignment, np.ndarray]:
        """Force alignment (the tool's `-f`): Viterbi links and ln p(f, a | e) per pair (NaN for an empty side).

        ln p = ln Poisson(m; 0.05 + n·mean_srclen_multiplier) + Σ_j ln Σ_i p(a_j = i)·θ(f_j | e_i), unknown
        pairs at θ = 1e-9."""
        s, t = _pair(src, tgt)
        e_txt, f_txt = (t, s) if self.reverse else (s, t)
        e, f = _encode(e_txt, self.e_vocab), _encode(f_txt, self.f_vocab)
        d = _Direction.of(e, f)
        best = np.full(len(f.ids), -1, np.int32)
        sent_ll = np.zeros(len(d.valid))
        nt = _n_threads(threads)
        bounds = _chunk_bounds(d.cell_off, max(CHUNKS, nt))
        d.em_pass(self.row_ptr, self.cols, self.theta, np.zeros(0, np.int32), bounds, True, self.tension, self.p0,
                  self.favor_diagonal, np.zeros((len(bounds) - 1, 0)), np.zeros((len(bounds) - 1, 3)), sent_ll, best,
                  nt)
        lp = _log_scores(f.lengths, 0.05 + e.lengths * self.mean_srclen_multiplier, sent_ll, d.valid)
        return Alignment(*_links_from_best(best, f.offsets, self.reverse)), lp

    def table(self) -> pa.Table:
        """The translation table: e, f (strings, NULL as "<eps>"), log_prob = ln θ(f | e); rows by e id, f id."""
        e_names = pa.concat_arrays([pa.array([NULL], pa.string()), self.e_vocab.cast(pa.string())])
        e_of = np.repeat(np.arange(len(self.row_ptr) - 1), np.diff(self.row_ptr))
        with np.errstate(divide="ignore"):
            lp = np.log(self.theta)
        return pa.table([e_names.take(pa.array(e_of)), self.f_vocab.cast(pa.string()).take(pa.array(self.cols)),
                         pa.array(lp)], schema=TABLE_SCHEMA)

    def export_table(self, path: str | Path, *, beam_threshold: float = -4.0) -> int:
        """Write the tool's `-p` file (e<TAB>f<TAB>ln θ, NULL as "<eps>"): the rows it keeps, ln θ >=
        −ln(max_f θ(f|e))·beam_threshold per e (−inf keeps all). Returns the row count."""
        table = self.table()
        lp = table["log_prob"].to_numpy()
        if np.isfinite(beam_threshold) and len(lp):
            nonempty = np.diff(self.row_ptr) > 0
            row_max = np.full(len(self.row_ptr) - 1, -np.inf)
            row_max[nonempty] = np.maximum.reduceat(lp, self.row_ptr[:-1][nonempty])
            e_of = np.repeat(np.arange(len(self.row_ptr) - 1), np.diff(self.row_ptr))
            table = table.filter(pa.array(lp >= (-row_max * beam_threshold)[e_of]))
        lines = pc.binary_join_element_wise(pc.cast(table["log_prob"], pa.string()), "", "\n")  # "ln θ\n"
        text = pc.binary_join_element_wise(table["e"], table["f"], lines, "\t").combine_chunks()
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as out:
            if len(text):
                off = np.frombuffer(text.buffers()[1], np.int32, len(text) + 1, text.offset * 4)
                out.write(memoryview(text.buffers()[2])[off[0]:off[-1]])
        tmp.rename(path)
        return table.num_rows

    @classmethod
    def from_table(
        cls, table_or_path: pa.Table | str | Path, *, tension: float, mean_srclen_multiplier: float,
        reverse: bool = False, p0: float = 0.08, favor_diagonal: bool = True,
    ) -> "FastAlign":
        """A model for `align` from a translation table (columns e, f, log_prob), a Parquet file of one, or the
        tool's `-p` text; a repeated (e, f) keeps its last row, as the tool's reader."""
        table = table_or_path
        if not isinstance(table, pa.Table):
            path = Path(table_or_path)
            if not path.exists():
                raise InputError(f"{path}: no such translation table")
            if path.suffix == ".parquet":
                table = pq.read_table(path)
            else:
                table = pcsv.read_csv(path, read_options=pcsv.ReadOptions(column_names=TABLE_SCHEMA.names),
                                      parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False),
                                      convert_options=pcsv.ConvertOptions(
                                          column_types=dict(zip(TABLE_SCHEMA.names, TABLE_SCHEMA.types)),
                                          null_values=[], strings_can_be_null=False))
        missing = [c for c in TABLE_SCHEMA.names if c not in table.column_names]
        if missing:
            raise InputError(f"translation table: columns {missing} missing, found {table.column_names}")
        e_col = pc.cast(table["e"].combine_chunks(), pa.string())
        f_enc = pc.dictionary_encode(pc.cast(table["f"].combine_chunks(), pa.string()))
        is_null = pc.equal(e_col, NULL).to_numpy(zero_copy_only=False)
        words = e_col.filter(pa.array(~is_null))
        e_vocab = pc.unique(words)
        e_ids = np.zeros(len(e_col), np.int64)
        e_ids[~is_null] = pc.index_in(words, value_set=e_vocab).to_numpy(zero_copy_only=False) + 1
        f_ids = f_enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        n_f = max(len(f_enc.dictionary), 1)
        key = e_ids * n_f + f_ids
        order = np.argsort(key, kind="stable")
        key_sorted = key[order]
        last = np.ones(len(order), bool)
        last[:-1] = key_sorted[1:] != key_sorted[:-1]
        order = order[last]
        row_ptr = np.zeros(len(e_vocab) + 2, np.int64)
        np.cumsum(np.bincount(e_ids[order], minlength=len(e_vocab) + 1), out=row_ptr[1:])
        theta = np.exp(table["log_prob"].to_numpy()[order].astype(np.float64))
        return cls(reverse=reverse, tension=float(tension), mean_srclen_multiplier=float(mean_srclen_multiplier),
                   p0=p0, log_likelihood=(), favor_diagonal=favor_diagonal, e_vocab=e_vocab,
                   f_vocab=f_enc.dictionary, row_ptr=row_ptr, cols=f_ids[order].astype(np.int32), theta=theta)

    def fingerprint(self) -> str:
        """A stable hash of the table, λ, the length multiplier and the decoding settings (artifact keys)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(repr(("fast_align", 1, self.reverse, self.tension, self.mean_srclen_multiplier, self.p0,
                       self.favor_diagonal)).encode())
        for vocab in (self.e_vocab, self.f_vocab):
            h.update("\n".join(vocab.to_pylist()).encode() + b"\0")
        for arr in (self.row_ptr.astype("<i8"), self.cols.astype("<i4"), self.theta.astype("<f8")):
            h.update(arr.tobytes())
        return h.hexdigest()


def _train(src: _Side, tgt: _Side, *, reverse: bool, iterations: int, p0: float, alpha: float, tension: float,
           optimize_tension: bool, favor_diagonal: bool, variational_bayes: bool, threads: int | None,
           chunks: int | None) -> tuple[FastAlign, Alignment]:
    if iterations < 1:
        raise ModelError(f"fast_align: iterations = {iterations}, expected >= 1 (the last one only decodes)")
    if not 0 < p0 < 1 or (variational_bayes and alpha <= 0):
        raise ModelError(f"fast_align: p0 = {p0} must be in (0, 1) and alpha = {alpha} > 0")
    e, f = (tgt, src) if reverse else (src, tgt)
    d = _Direction.of(e, f)
    n, m, valid = e.lengths, f.lengths, d.valid
    n_valid = int(valid.sum())
    msm = float(np.cumsum(m[valid] / n[valid])[-1] / n_valid) if n_valid else 1.0  # summed in line order
    n_target_tokens = float(m[valid].sum())
    cells = int(d.cell_off[-1])
    cell_idx = np.empty(cells if cells * 4 <= _CELL_INDEX_BUDGET else 0, np.int32)
    nt = _n_threads(threads)
    row_ptr, cols = _build_table(d.e_ids, d.e_off, d.f_ids, d.f_off, valid, len(e.vocab) + 1, len(f.vocab),
                                 d.cell_off, cell_idx, len(cell_idx) > 0, nt)
    if cols.size >= 2**31:
        raise ModelError(f"fast_align: {cols.size} translation pairs, more than an int32 index holds")
    k = max(CHUNKS, nt) if chunks is None else max(1, int(chunks))
    k = max(1, min(k, _COUNT_BUDGET // max(8 * cols.size, 1)))
    bounds = _chunk_bounds(d.cell_off, k)
    theta = np.full(cols.size, UNSEEN)
    counts = np.zeros((k, cols.size))
    stats = np.zeros((k, 3))
    best = np.full(len(f.ids), -1, np.int32)
    sent_ll = np.zeros(len(valid))
    lls = []
    for it in range(iterations):
        final = it == iterations - 1
        d.em_pass(row_ptr, cols, theta, cell_idx, bounds, final, tension, p0, favor_diagonal, counts, stats, sent_ll,
                  best, nt)
        ll = emp = 0.0
        for c in range(k):  # chunk order
            ll += stats[c, 0]
            emp += stats[c, 1]
        lls.append(float(ll))
        if final:
            break
        if favor_diagonal and optimize_tension and it > 0 and n_valid:
            tension = _optimize_tension(d.lengths.pair_m, d.lengths.pair_n, d.lengths.pair_count, n_target_tokens,
                                        emp / n_target_tokens, tension)
        _normalize(counts, row_ptr, theta, alpha, variational_bayes)
    model = FastAlign(reverse=reverse, tension=float(tension), mean_srclen_multiplier=msm, p0=p0,
                      log_likelihood=tuple(lls), favor_diagonal=favor_diagonal, e_vocab=e.vocab, f_vocab=f.vocab,
                      row_ptr=row_ptr, cols=cols, theta=theta)
    return model, Alignment(*_links_from_best(best, f.offsets, reverse))


def align_both(src: Texts, tgt: Texts, **train_kwargs) -> tuple[FastAlign, FastAlign, Alignment, Alignment]:
    """Forward and reverse models and their links (both as (src, tgt)); the corpus is encoded once."""
    s, t = _pair(src, tgt)
    return _both(_encode(s), _encode(t), train_kwargs)


def _both(ss: _Side, ts: _Side, train_kwargs: dict) -> tuple[FastAlign, FastAlign, Alignment, Alignment]:
    kw = {"iterations": 5, "p0": 0.08, "alpha": 0.01, "tension": 4.0, "optimize_tension": True,
          "favor_diagonal": True, "variational_bayes": True, "threads": None, "chunks": None, **train_kwargs}
    kw.pop("reverse", None)
    fwd_model, fwd = _train(ss, ts, reverse=False, **kw)
    rev_model, rev = _train(ss, ts, reverse=True, **kw)
    return fwd_model, rev_model, fwd, rev


def grow_diag_final_and(fwd: Alignment, rev: Alignment, src_len: np.ndarray, tgt_len: np.ndarray) -> Alignment:
    """atools -c grow-diag-final-and of the forward and reverse links (both (src, tgt)), per sentence."""
    src_len, tgt_len = np.asarray(src_len, np.int64), np.asarray(tgt_len, np.int64)
    if not len(fwd) == len(rev) == len(src_len) == len(tgt_len):
        raise InputError(f"grow_diag_final_and: fwd has {len(fwd)} sentences, rev {len(rev)}, src_len "
                         f"{len(src_len)}, tgt_len {len(tgt_len)}; expected one count")
    return Alignment(*_gdfa(fwd.offsets, fwd.src, fwd.tgt, rev.offsets, rev.src, rev.tgt, src_len, tgt_len))


def symmetrize(src: Texts, tgt: Texts, **train_kwargs) -> Alignment:
    """Both directions, then grow-diag-final-and (the thesis' alignment, ch. 6)."""
    s, t = _pair(src, tgt)
    ss, ts = _encode(s), _encode(t)
    _, _, fwd, rev = _both(ss, ts, train_kwargs)
    return grow_diag_final_and(fwd, rev, ss.lengths, ts.lengths)
