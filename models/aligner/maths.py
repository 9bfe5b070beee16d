"""The reference's scalar maths: clab/fast_align's `da.h` (`DiagonalAlignment`) and `ttables.h` (`Md`).

    p(a_j = 0 | j, m, n) = p0                                                        (NULL, p0 = 0.08)
    p(a_j = i | j, m, n) = (1 − p0) · exp(λ·h(j, i, m, n)) / Z_λ(j, m, n),  h = −|i/n − j/m|   (i, j 1-based)
    θ_f = exp(ψ(c_f + α) − ψ(Σ_f' (c_f' + α)))                                  (variational Bayes, α=0.01)

Z_λ and E_λ[h] are the reference's closed forms (two geometric series around i·n/m), with its quirks kept:
`ComputeDLogZ` normalises by `ComputeZ(j, n, m)` (m and n swapped, its unsigned wrap included); ψ is
`Md::digamma` (recurrence up to 7, then the asymptotic series), not scipy's.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_WRAP = 4294967296  # 2**32: the reference's `unsigned` arithmetic


@njit(cache=True, nogil=True, error_model="numpy")
def _feature(i, j, m, n):
    """DiagonalAlignment::Feature: h = −|j/n − i/m| for target position i of m, source position j of n."""
    return -abs(j / n - i / m)


@njit(cache=True, nogil=True, error_model="numpy")
def _unnormalized(i, j, m, n, tension):
    return math.exp(_feature(i, j, m, n) * tension)


@njit(cache=True, nogil=True, error_model="numpy")
def compute_z(i, m, n, tension):
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
def dlogz(i, m, n, tension):
    """DiagonalAlignment::ComputeDLogZ: E_λ[h] at target position i, over ComputeZ(i, n, m) as the reference."""
    z = compute_z(i, n, m, tension)
    split = float(i) * n / m
    floor = int(split)
    ratio = math.exp(-tension / n)
    d = -1.0 / n
    num_top = n - floor
    pct = 0.0
    pcb = 0.0
    if num_top != 0:
        pct = _arithmetico_geometric(_feature(i, floor + 1, m, n), _unnormalized(i, floor + 1, m, n, tension), ratio, d, num_top)
    if floor != 0:
        pcb = _arithmetico_geometric(_feature(i, floor, m, n), _unnormalized(i, floor, m, n, tension), ratio, d, floor)
    return (pct + pcb) / z


@njit(cache=True, nogil=True, error_model="numpy")
def digamma(x):
    """Md::digamma: recurrence up to 7, then the asymptotic series (the reference's, not scipy's)."""
    result = 0.0
    while x < 7:
        result -= 1 / x
        x += 1
    x -= 1.0 / 2.0
    xx = 1.0 / x
    xx2 = xx * xx
    xx4 = xx2 * xx2
    result += math.log(x) + (1.0 / 24.0) * xx2 - (7.0 / 960.0) * xx4 + (31.0 / 8064.0) * xx4 * xx2 - (127.0 / 30720.0) * xx4 * xx4
    return result


def log_poisson(x: int, lam: float) -> float:
    """Md::log_poisson: ln Poisson(x; λ) = x·ln λ − ln x! − λ."""
    return math.log(lam) * x - math.lgamma(x + 1) - lam


def diagonal_prior(j: int, m: int, n: int, *, tension: float = 4.0, p0: float = 0.08) -> np.ndarray:
    """[p(a_j = 0), p(a_j = 1), …, p(a_j = n)] for 1-based target position j of m, n source words (da.h)."""
    az = compute_z(j, m, n, tension) / (1.0 - p0)
    return np.array([p0] + [_unnormalized(j, i, m, n, tension) / az for i in range(1, n + 1)])


def vb_normalize(counts: np.ndarray, alpha: float = 0.01) -> np.ndarray:
    """TTable::NormalizeVB of one row: θ_f = exp(ψ(c_f + α) − ψ(Σ_f' (c_f' + α)))."""
    counts = np.asarray(counts, dtype=np.float64)
    tot = 0.0
    for c in counts:
        tot += c + alpha
    dt = digamma(tot or 1.0)
    return np.array([math.exp(digamma(c + alpha) - dt) for c in counts])
