"""EPiDA's SEAS (issue 15): REM (Eq. 7) and CEM (Eq. 10, as the authors' Fig. 7 computes it), min-max
normalisation, Eq. 11 and the top-m selection with its tie rule."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from conf.errors import InputError
from tasks.epida.seas import cem, min_max, rem, seas_select


def test_rem_is_the_cross_entropy_to_the_one_hot_label_eq_7():
    # p(t) = (0.7, 0.2, 0.1), label 0: -log 0.7; label 2 of a zero probability: the 1e-10 clamp
    assert rem(np.array([[0.7, 0.2, 0.1], [0.5, 0.5, 0.0]]), np.array([0, 2])) == pytest.approx(
        [0.35667494393873245, -math.log(1e-10)], rel=1e-12
    )


def test_cem_follows_fig_7_eq_10():
    # by hand: P = (p(t) p(x)^T + p(x) p(t)^T) / 2 = [[.42, .165, .065], [.165, .06, .025], [.065, .025, .01]]
    # (sums to 1), marginals (.65, .25, .10) = (p(t) + p(x)) / 2; I = sum P log(P / (Pi Pj)) = 9.63572e-05;
    # H(p(t)) = -(.7 ln .7 + .2 ln .2 + .1 ln .1) = 0.80181855; CEM = 1 + I - H
    p_t, p_x = np.array([[0.7, 0.2, 0.1]]), np.array([[0.6, 0.3, 0.1]])
    i = sum(
        p * math.log(p / (a * b))
        for p, a, b in [
            (0.42, 0.65, 0.65),
            (0.165, 0.65, 0.25),
            (0.065, 0.65, 0.10),
            (0.165, 0.25, 0.65),
            (0.06, 0.25, 0.25),
            (0.025, 0.25, 0.10),
            (0.065, 0.10, 0.65),
            (0.025, 0.10, 0.25),
            (0.01, 0.10, 0.10),
        ]
    )
    h = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    assert i == pytest.approx(9.63572136226e-05, rel=1e-9) and h == pytest.approx(0.8018185525433372, rel=1e-12)
    assert cem(p_t, p_x) == pytest.approx([1 + i - h], rel=1e-9)  # 0.19827780467028533
    # a candidate predicted like its original and confidently scores higher than a flat one
    sure, flat = cem(np.array([[0.98, 0.01, 0.01], [1 / 3, 1 / 3, 1 / 3]]), np.array([[0.98, 0.01, 0.01]] * 2))
    assert sure > flat


def test_min_max_per_row_and_equal_scores_give_zero():
    groups = np.array([0, 0, 0, 1, 1])
    assert min_max(np.array([1.0, 3.0, 2.0, 5.0, 5.0]), groups).tolist() == [0.0, 1.0, 0.5, 0.0, 0.0]


def _cands(s_div, s_qua, parents=None, uids=None):
    n = len(s_div)
    return pa.table(
        {
            "parent_uid": parents or ["p"] * n,
            "uid": uids or [f"c{i}" for i in range(n)],
            "s_div": pa.array(s_div, pa.float64()),
            "s_qua": pa.array(s_qua, pa.float64()),
        }
    )


def test_seas_select_keeps_the_m_highest_s_tot_per_row_eq_11():
    # s_div normalised: 0, .5, 1, .25; s_qua normalised: 1, 0, .5, 1 -> s_tot = .5, .25, .75, .625
    out = seas_select(_cands([0.0, 2.0, 4.0, 1.0], [3.0, 1.0, 2.0, 3.0]), m=2)
    assert out["s_tot"].to_pylist() == [0.5, 0.25, 0.75, 0.625]
    assert out["selected"].to_pylist() == [False, False, True, True]
    rem_only = seas_select(_cands([0.0, 2.0, 4.0, 1.0], [3.0, 1.0, 2.0, 3.0]), m=2, mode="rem_only")
    assert rem_only["selected"].to_pylist() == [False, True, True, False]
    cem_only = seas_select(_cands([0.0, 2.0, 4.0, 1.0], [3.0, 1.0, 2.0, 3.0]), m=1, mode="cem_only")
    assert cem_only["selected"].to_pylist() == [True, False, False, False]  # tie of c0 and c3: smaller uid
    raw = seas_select(_cands([0.0, 2.0, 4.0, 1.0], [3.0, 1.0, 2.0, 3.0]), m=1, normalise=False)
    assert raw["s_tot"].to_pylist() == [1.5, 1.5, 3.0, 2.0]
    assert raw["selected"].to_pylist() == [False, False, True, False]


def test_seas_select_ties_go_to_the_smaller_uid_within_each_row():
    out = seas_select(
        _cands([1.0, 1.0, 1.0, 2.0, 2.0], [1.0] * 5, parents=["a", "a", "a", "b", "b"], uids=["z", "m", "b", "y", "x"]), m=2
    )
    assert out["s_tot"].to_pylist() == [0.0] * 5  # every score equal within its row: all 0
    assert out["selected"].to_pylist() == [False, True, True, True, True]  # a keeps b, m; b keeps both


def test_seas_select_refuses_missing_columns_and_bad_alpha():
    with pytest.raises(InputError, match="columns s_qua missing"):
        seas_select(_cands([1.0], [1.0]).drop_columns(["s_qua"]))
    with pytest.raises(InputError, match="alpha = 1.5 must be in"):
        seas_select(_cands([1.0], [1.0]), alpha=1.5)
