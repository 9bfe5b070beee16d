"""Per-row draws (tasks/robustness/draws.py): a function of (seed, uid, modifier, counter) only, the same whether
computed for a whole column or one row at a time, and uniform."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from robustness_helpers import many

from tasks.robustness.draws import Stream, integers, lane, row_state, row_states, uid_words, uniform

UIDS = ["0123456789abcdef0123456789abcdef", "r1", "ünï", "ABCDEF0123456789ABCDEF0123456789", ""]


def test_uniform_for_a_column_equals_the_stream_of_each_row():
    states = row_states(pa.array(UIDS), seed=7, modifier="Typos")
    assert states.tolist() == [row_state(u, seed=7, modifier="Typos") for u in UIDS]
    table = uniform(states[:, None], np.array([0, 1, 2, lane(1), lane(1) + 1])[None, :])
    for state, row in zip(states.tolist(), table, strict=True):
        first, second = Stream(state), Stream(state, lane(1))
        assert row.tolist() == [first.uniform(), first.uniform(), first.uniform(), second.uniform(), second.uniform()]


def test_md5_uids_are_read_from_the_buffer_as_the_scalar_path_reads_them():
    uids = many(50)["uid"]
    fast = uid_words(uids)
    slow = uid_words(pa.array(uids.to_pylist() + ["short"]))[:50]  # a mixed column takes the per-row path
    assert np.array_equal(fast, slow)


def test_a_rows_draws_do_not_depend_on_its_table_position_or_neighbours():
    table = many(200)
    whole = row_states(table["uid"], seed=3, modifier="UpperCase")
    part = row_states(table.slice(150, 50)["uid"], seed=3, modifier="UpperCase")
    reversed_ = row_states(pa.array(table["uid"].to_pylist()[::-1]), seed=3, modifier="UpperCase")
    assert np.array_equal(whole[150:], part) and np.array_equal(whole[::-1], reversed_)
    assert not np.array_equal(whole, row_states(table["uid"], seed=4, modifier="UpperCase"))
    assert not np.array_equal(whole, row_states(table["uid"], seed=3, modifier="TitleCase"))


def test_uniform_draws_are_uniform_and_integers_cover_their_range():
    states = row_states(many(20_000)["uid"], seed=0, modifier="X")
    u = uniform(states[:, None], np.arange(50)[None, :]).ravel()  # a million draws
    counts = np.bincount((u * 20).astype(int), minlength=20)
    chi2 = float(((counts - len(u) / 20) ** 2 / (len(u) / 20)).sum())
    assert u.min() >= 0 and u.max() < 1 and chi2 < 50  # 19 degrees of freedom: p ≈ 1e-4 at 50
    k = integers(states, 1, 2, 4)
    assert set(k.tolist()) == {2, 3, 4} and abs(np.mean(k) - 3) < 0.05
