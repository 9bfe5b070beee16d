"""fast_align.cc's EM, normalisation and tension kernels (numba, serial, `nogil`, one sentence chunk per call).

    E-step:  post(a_j = i) = p(a_j = i | j, m, n)·θ(f_j | e_i) / Σ_i' p(a_j = i' | j, m, n)·θ(f_j | e_i')
    M-step:  θ(f | e) = exp(ψ(c_ef + α) − ψ(Σ_f' (c_ef' + α)))   (variational Bayes, α=0.01; else c_ef / Σ_f' c_ef')
    λ ← clamp(λ + 20·(E_post[h] − E_λ[h]), 0.1, 14), 8 steps after each iteration but the first and last

The reference's quirks are kept: the E-step's prior uses the 1-based target position j+1 but the posterior
feature E_post[h] the 0-based j; a pair without a table cell has θ = 1e-9 (`UNSEEN`). The last iteration only
decodes: Viterbi per target word, NULL wins ties, then the leftmost source word. Force alignment scores
ln Poisson(m; 0.05 + n·multiplier) + Σ_j ln Σ_i p(a_j = i)·θ(f_j | e_i). The prior rows of the most frequent
(m, n) are filled once per iteration by the same function that computes the others inline: the same bits.
Each chunk owns a count row; `normalize` sums the rows in chunk order, so results depend on the chunk count,
not on the threads.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from models.aligner.maths import compute_z, digamma, dlogz
from models.aligner.table import UNSEEN, sentence_index


@njit(cache=True, nogil=True, error_model="numpy")
def _prior_row(j, m, n, tension, p0, favor_diagonal, q, out, o):
    """out[o + i] = p(a_j = i | j, m, n) for i = 0 … n (0-based target j; q[i] = i/n), as UpdateFromPairs."""
    if favor_diagonal:
        az = compute_z(j + 1, m, n, tension) / (1.0 - p0)
        out[o] = p0
        jm = (j + 1) / m
        for i in range(1, n + 1):
            out[o + i] = math.exp(-abs(q[i] - jm) * tension) / az  # UnnormalizedProb(j + 1, i, m, n) / az
    else:
        for i in range(n + 1):
            out[o + i] = 1.0 / (n + 1)


@njit(cache=True, nogil=True, error_model="numpy")
def fill_priors(pair_m, pair_n, prior_off, tension, p0, favor_diagonal, prior):
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
def em_chunk(
    e_ids,
    e_off,
    f_ids,
    f_off,
    valid,
    row_ptr,
    cols,
    theta,
    cell_idx,
    cell_off,
    indexed,
    pair_of,
    prior,
    prior_off,
    lo,
    hi,
    decode,
    tension,
    p0,
    favor_diagonal,
    max_n,
    counts,
    stats,
    sent_ll,
    best,
):
    """fast_align.cc's UpdateFromPairs over sentences lo … hi−1 (one chunk; its own counts and stats rows).

    Training (decode=False): counts = posteriors summed, stats = (Σ ln Σ_i p, Σ h(j, i)·post, Σ NULL post).
    Decoding: best[t] = Viterbi source position of target token t (−1: NULL). sent_ll[s] = Σ_j ln Σ_i p.
    θ's table index comes from cell_idx for sentences s < indexed, else from ``sentence_index`` once per sentence
    and pass; the prior from the cache where pair_of[s] >= 0, else computed (same function, same bits).
    """
    probs = np.empty(max_n + 1)
    pbuf = np.empty(max_n + 1)
    max_m = 0
    for s in range(max(lo, indexed), hi):
        max_m = max(max_m, f_off[s + 1] - f_off[s])
    kbuf = np.empty(max_m * (max_n + 1), cell_idx.dtype)
    order = np.empty(max_m, np.int64)
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
                best[f0 : f0 + m] = -1
            continue
        e0 = e_off[s]
        n = e_off[s + 1] - e0
        for i in range(n + 1):
            q[i] = i / n
        pid = pair_of[s]
        sll = 0.0
        use_idx = s < indexed
        if not use_idx:
            sentence_index(row_ptr, cols, e_ids, e0, n, f_ids, f0, m, order, kbuf)
        for j in range(m):
            if use_idx:
                idx = cell_idx
                ib = cell_off[s] + j * (n + 1)
            else:
                idx = kbuf
                ib = j * (n + 1)
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
def normalize(counts, row_ptr, theta, alpha, variational_bayes):
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
            dt = digamma(tot)
            for k in range(a, b):
                theta[k] = math.exp(digamma(theta[k] + alpha) - dt)
        else:
            for k in range(a, b):
                theta[k] = theta[k] / tot


@njit(cache=True, nogil=True, error_model="numpy")
def optimize_tension(pair_m, pair_n, pair_count, n_target_tokens, emp_feat, tension):
    """fast_align.cc's 8 steps λ += 20·(E_post[h] − E_λ[h]), clamped to [0.1, 14]; E_λ over the (m, n) counts."""
    for _ in range(8):
        mod_feat = 0.0
        for k in range(len(pair_m)):
            m = pair_m[k]
            n = pair_n[k]
            for j in range(1, m + 1):
                mod_feat += pair_count[k] * dlogz(j, m, n, tension)
        mod_feat /= n_target_tokens
        tension += (emp_feat - mod_feat) * 20.0
        if tension <= 0.1:  # noqa: PLR1730 — the reference's branch (max() would differ for a NaN)
            tension = 0.1
        if tension > 14:
            tension = 14.0
    return tension


@njit(cache=True, nogil=True, error_model="numpy")
def log_scores(m, lam, sent_ll, valid):
    """Per pair ln Poisson(m; λ) + Σ_j ln Σ_i p (Md::log_poisson + the -f loop); NaN where a side is empty."""
    out = np.full(len(m), np.nan)
    for s in range(len(m)):
        if valid[s]:
            out[s] = math.log(lam[s]) * m[s] - math.lgamma(m[s] + 1.0) - lam[s] + sent_ll[s]
    return out
