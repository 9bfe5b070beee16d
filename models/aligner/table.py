"""The translation table's layout: θ and the counts live in one CSR table over the co-occurring (e, f) pairs only.

Row e is a conditioning-side word (row 0 is NULL, word ids + 1 after it), its columns the generated-side words
f it shares a sentence with, sorted, so `sentence_index` finds a sentence's pairs by galloping along each row; an
unseen pair (or an unknown word) is absent, and θ of it is `UNSEEN` = 1e-9, the reference's `TTable::prob` before
the first normalisation and its `safe_prob` of an unknown pair. `build_table` can also write the table index of
each cell (sentence, target j, source i) of the first sentences once (4 bytes a cell), so those need no search.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from models.aligner.pool import run_tasks

UNSEEN = 1e-9  # TTable::prob before the first normalisation, safe_prob of an unknown pair


@njit(cache=True, nogil=True, error_model="numpy")
def gallop(cols, lo, end, f):
    """The first position in ``cols[lo:end]`` (sorted) whose value is >= ``f``, found by galloping from ``lo`` (steps
    1, 2, 4, ... while below ``f``), then a binary search in the last step: cheap when ``f`` is close to ``lo``."""
    if lo < end and cols[lo] < f:  # cols[prev] < f; then binary search (prev, nxt)
        prev = lo
        step = 1
        nxt = lo + 1
        while nxt < end and cols[nxt] < f:
            prev = nxt
            step *= 2
            nxt = prev + step
        lo = prev + 1
        hi = min(nxt, end)
        while lo < hi:
            mid = (lo + hi) >> 1
            if cols[mid] < f:
                lo = mid + 1
            else:
                hi = mid
    return lo


@njit(cache=True, nogil=True, error_model="numpy")
def sentence_index(row_ptr, cols, e_ids, e0, n, f_ids, f0, m, order, out):
    """The table index of every cell of one sentence: out[j·(n+1) + i] = that of (e_i, f_j) (−1: absent), e_0 = NULL
    (row 0), e_i = e_ids[e0 + i − 1] (rows already 1-based). The target words are visited in increasing id
    (``order``: an insertion sort of the sentence's m ids), so each row is walked forward by galloping from
    the last hit instead of one binary search from scratch per cell: the same indexes, fewer and nearer reads."""
    for a in range(m):
        order[a] = a
    for a in range(1, m):  # m is a sentence length: insertion sort (numba's sort costs seconds of compile time)
        k = order[a]
        f = f_ids[f0 + k]
        b = a
        while b > 0 and f_ids[f0 + order[b - 1]] > f:
            order[b] = order[b - 1]
            b -= 1
        order[b] = k
    n1 = n + 1
    n_rows = len(row_ptr) - 1
    for i in range(n1):
        e = 0 if i == 0 else e_ids[e0 + i - 1]
        if e < 0 or e >= n_rows:
            for j in range(m):
                out[j * n1 + i] = -1
            continue
        lo = row_ptr[e]
        end = row_ptr[e + 1]
        for a in range(m):
            j = order[a]
            f = f_ids[f0 + j]
            if f < 0:
                out[j * n1 + i] = -1
                continue
            lo = gallop(cols, lo, end, f)
            out[j * n1 + i] = lo if lo < end and cols[lo] == f else -1


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
def _table_rows(
    occ_ptr, occ_s, occ_i, e_off, f_ids, f_off, n_f, row_ptr, cols, cell_off, cell_idx, indexed, b, n_blocks, row_len
):
    """Rows e = b, b + n_blocks, … (interleaved, so the frequent early words spread over blocks). Phase 1
    (row_len given): the distinct f per e. Phase 2: the rows of the CSR table (f sorted) and the table index of
    every cell of sentences s < indexed, cell_idx[cell_off[s] + j·(n+1) + i] (target j, source i, 0 = NULL)."""
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
        if indexed > 0:
            for k in range(a, c):
                st[cols[k]] = k  # a position map for now; restamped below so stamps stay distinct
            for k in range(occ_ptr[e], occ_ptr[e + 1]):
                s = occ_s[k]
                if s >= indexed:  # occurrences are in sentence order
                    break
                n1 = e_off[s + 1] - e_off[s] + 1
                base = cell_off[s] + occ_i[k]
                f0 = f_off[s]
                for j in range(f_off[s + 1] - f0):
                    cell_idx[base + j * n1] = st[f_ids[f0 + j]]
            for k in range(a, c):
                st[cols[k]] = -2 - e


def build_table(e_ids, e_off, f_ids, f_off, valid, n_e, n_f, cell_off, cell_idx, indexed, threads):
    """The co-occurring (e, f) pairs as CSR (row 0 is NULL, f sorted per row) and the index of each cell of the
    first ``indexed`` sentences."""
    occ_ptr, occ_s, occ_i = _occurrences(e_ids, e_off, valid, n_e)
    row_ptr = np.zeros(n_e + 1, np.int64)
    row_len = np.zeros(n_e, np.int64)
    no_cols = np.empty(0, np.int32)
    n_blocks = 4 * threads
    run_tasks(
        threads,
        n_blocks,
        lambda b: _table_rows(
            occ_ptr, occ_s, occ_i, e_off, f_ids, f_off, n_f, row_ptr, no_cols, cell_off, cell_idx, indexed, b, n_blocks, row_len
        ),
    )
    np.cumsum(row_len, out=row_ptr[1:])
    cols = np.empty(row_ptr[-1], np.int32)
    run_tasks(
        threads,
        n_blocks,
        lambda b: _table_rows(
            occ_ptr, occ_s, occ_i, e_off, f_ids, f_off, n_f, row_ptr, cols, cell_off, cell_idx, indexed, b, n_blocks, row_len[:0]
        ),
    )
    return row_ptr, cols
