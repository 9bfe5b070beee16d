"""EPiDA's sample evaluation and selection (SEAS, Alg. 1): score each augmented candidate by the classifier's
feedback and keep the m best per original row.

- s_div, Eq. 7 (REM): the relative entropy between p(t) and the one-hot label, i.e. the cross-entropy
  −log p_y(t), with p clamped at 1e-10 as in the authors' Fig. 7.
- s_qua, Eq. 10 (CEM): −H(p(t) | p(x)), computed as Fig. 7's code computes it: the joint is the outer
  product p(t)·p(x)ᵀ, symmetrised ((P + Pᵀ)/2) and normalised, clamped at 1e-10; with its marginals
  Pi, Pj the code returns MI = 1 − Σ P (log Pi + log Pj − log P) = 1 + I(P) and CEM = MI − H(p(t)). The
  textbook conditional entropy would be H(t | x) = H(P) − H(Pj) of an empirical joint over samples; Fig. 7
  instead uses the mutual information of one symmetrised outer product (after Ji et al. 2019) and adds a
  constant 1. We follow the code, since it is what produced the paper's numbers: s_qua = 1 + I − H(p(t)).
  The constant offset changes nothing after min-max normalisation.
- Eq. 11: both scores min-max normalised over the row's K·m candidates (all equal: 0), s_tot =
  α·s_div + (1 − α)·s_qua (α = 0.5); the m candidates of highest s_tot are kept (Alg. 1's argtopm(−s_tot)),
  ties broken by the candidate's uid. Ablations: ``mode`` rem_only | cem_only | both, ``normalise``.

Hand-written: no maintained package implements SEAS; the arithmetic is numpy over all candidates at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError

EPS = 1e-10  # the authors' clamp (Fig. 7)
Mode = Literal["both", "rem_only", "cem_only"]


def rem(p_t: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """s_div (Eq. 7): −log max(p_y(t), 1e-10) for each candidate's distribution ``p_t`` (n × C) and label index."""
    p = np.asarray(p_t, dtype=np.float64)
    return -np.log(np.maximum(p[np.arange(len(p)), np.asarray(labels)], EPS))


def cem(p_t: np.ndarray, p_x: np.ndarray) -> np.ndarray:
    """s_qua (Eq. 10) as Fig. 7 computes it, per row: 1 + I(P) − H(p(t)), P the symmetrised, normalised
    outer product of ``p_t`` and ``p_x`` (both n × C), clamped at 1e-10 (see the module docstring)."""
    z, zt = np.asarray(p_t, dtype=np.float64), np.asarray(p_x, dtype=np.float64)
    joint = z[:, :, None] * zt[:, None, :]
    joint = (joint + joint.transpose(0, 2, 1)) / 2
    joint = np.maximum(joint / joint.sum(axis=(1, 2), keepdims=True), EPS)
    pi, pj = joint.sum(axis=2, keepdims=True), joint.sum(axis=1, keepdims=True)
    mi = 1.0 - (joint * (np.log(pi) + np.log(pj) - np.log(joint))).sum(axis=(1, 2))
    z = np.maximum(z, EPS)
    return mi - (-(z * np.log(z)).sum(axis=1))


def min_max(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(s − min) / (max − min) within each group (a row's candidates); a group whose scores are all equal
    gets 0 (it then cannot outrank a candidate on this score)."""
    s = np.asarray(scores, dtype=np.float64)
    lo, hi = np.full(groups.max(initial=-1) + 1, np.inf), np.full(groups.max(initial=-1) + 1, -np.inf)
    np.minimum.at(lo, groups, s)
    np.maximum.at(hi, groups, s)
    span = (hi - lo)[groups]
    return np.divide(s - lo[groups], span, out=np.zeros_like(s), where=span > 0)


def seas_select(
    cands: pa.Table,
    *,
    m: int = 3,
    alpha: float = 0.5,
    mode: Mode = "both",
    normalise: bool = True,
    by: Sequence[str] = ("parent_uid",),
) -> pa.Table:
    """Alg. 1's selection over scored candidates (columns ``parent_uid``, ``uid``, ``s_div``, ``s_qua``):
    adds ``s_tot`` (Eq. 11) and ``selected`` (the m highest s_tot of each group, ties: smaller uid). A group
    is a parent's candidates (``by``; e.g. ``("parent_uid", "algorithm")``: m per DA algorithm T).
    Rows keep their order; every candidate is returned, selected or not."""
    missing = [c for c in ("uid", "s_div", "s_qua", *by) if c not in cands.column_names]
    if missing:
        raise InputError(f"seas_select: columns {', '.join(missing)} missing; found {', '.join(cands.column_names)}")
    if not 0 <= alpha <= 1 or m < 1:
        raise InputError(f"seas_select: alpha = {alpha} must be in [0, 1] and m = {m} at least 1")
    keys = ["\x1f".join(map(str, k)) for k in zip(*(cands[c].to_pylist() for c in by))]
    _, groups = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)
    groups = groups.reshape(-1)
    div, qua = (cands[c].to_numpy(zero_copy_only=False).astype(np.float64) for c in ("s_div", "s_qua"))
    if normalise:
        div, qua = min_max(div, groups), min_max(qua, groups)
    weight = {"both": alpha, "rem_only": 1.0, "cem_only": 0.0}[mode]
    total = weight * div + (1 - weight) * qua
    uids = cands["uid"].to_numpy(zero_copy_only=False).astype(str)
    order = np.lexsort((uids, -total, groups))  # by parent, then s_tot descending, then uid
    first = np.r_[0, np.flatnonzero(np.diff(groups[order])) + 1]
    rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    selected = np.zeros(len(order), dtype=bool)
    selected[order] = rank < m
    return cands.append_column("s_tot", pa.array(total, pa.float64())).append_column("selected", pa.array(selected, pa.bool_()))


def selected_rows(scored: pa.Table) -> pa.Table:
    """The kept candidates of ``seas_select``'s output."""
    return scored.filter(pc.equal(scored["selected"], True))
