"""Symmetrisation of forward and reverse links: grow-diag-final-and as `atools -c grow-diag-final-and`.

It follows atools.cc's GDFACommand per sentence: start from the intersection, grow over the union's points in
(i, j) order (a point joins when one or both of its words are unaligned and one of its 8 neighbours is in),
repeated until nothing is added, then "final-and" over the forward, then the reverse links (a link joins when
both its words are still unaligned). A sentence's grid is its given lengths, grown to links past them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from conf.errors import InputError
from models.aligner.alignment import Alignment


@njit(cache=True, nogil=True, error_model="numpy")
def _gdfa_sentence(
    a_src, a_tgt, a0, a1, b_src, b_tgt, b0, b1, w, h, fa, fb, res, i_al, j_al, pts, done, added, out_src, out_tgt, o0
):
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
            c = _gdfa_sentence(
                a_src,
                a_tgt,
                a_off[s],
                a_off[s + 1],
                b_src,
                b_tgt,
                b_off[s],
                b_off[s + 1],
                dims[s, 0],
                dims[s, 1],
                fa,
                fb,
                res,
                i_al,
                j_al,
                pts,
                done,
                added,
                src,
                tgt,
                offsets[s],
            )
        offsets[s + 1] = offsets[s] + c
    return offsets, src[: offsets[n]].copy(), tgt[: offsets[n]].copy()


def grow_diag_final_and(fwd: Alignment, rev: Alignment, src_len: np.ndarray, tgt_len: np.ndarray) -> Alignment:
    """atools -c grow-diag-final-and of the forward and reverse links (both (src, tgt)), per sentence."""
    src_len, tgt_len = np.asarray(src_len, np.int64), np.asarray(tgt_len, np.int64)
    if not len(fwd) == len(rev) == len(src_len) == len(tgt_len):
        raise InputError(
            f"grow_diag_final_and: fwd has {len(fwd)} sentences, rev {len(rev)}, src_len "
            f"{len(src_len)}, tgt_len {len(tgt_len)}; expected one count"
        )
    return Alignment(*_gdfa(fwd.offsets, fwd.src, fwd.tgt, rev.offsets, rev.src, rev.tgt, src_len, tgt_len))
