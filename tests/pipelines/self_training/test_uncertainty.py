"""Lexicon, word entropy, sentence uncertainty and the sampling of thesis ch. 6 (Eq. 6.3–6.7), as pure functions."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.errors import InputError
from models.lexicon import build_lexicon, linked_words, tokenize, word_entropy, word_uncertainty
from storage.parts import Parts
from storage.schemas import MONO, with_uid
from tasks.self_training.uncertainty import (
    sample_keys,
    sampling_probability,
    sampling_weight,
    select_sample,
    sentence_uncertainty,
    take_sample,
    u_max,
    uid_uniform,
    uncertainty_bins,
)


def _lexicon_abc():
    """The issue's example: ("a b"/"x y"/"0-0 1-1"), ("a c"/"z w"/"0-0 1-1"), ("a"/"x"/"0-0")."""
    src, tgt = tokenize(pa.array(["a b", "a c", "a"])), tokenize(pa.array(["x y", "z w", "x"]))
    links = linked_words(src, tgt, np.array([0, 2, 4, 5]), np.array([0, 1, 0, 1, 0]), np.array([0, 1, 0, 1, 0]))
    return build_lexicon(links), src


def mono(texts: list[str], *, source: str = "m", first_line: int = 1) -> pa.Table:
    n = len(texts)
    table = pa.table(
        {
            "uid": pa.nulls(n, pa.string()),
            "text": texts,
            "source": [source] * n,
            "line": pa.array(range(first_line, first_line + n), pa.int64()),
        },
        schema=MONO,
    )
    return with_uid(table, "mono")


def test_tokenize_splits_whitespace_runs_and_empty_rows_have_no_tokens():
    assert tokenize(pa.array(["  a\tb  c ", "", "   ", "D e"]), lowercase=True).to_pylist() == [
        ["a", "b", "c"],
        [],
        [],
        ["d", "e"],
    ]


def test_lexicon_counts_links_and_normalises_rows():
    lexicon, _ = _lexicon_abc()
    assert lexicon.to_pylist() == [  # p: the lexicon's count / row total vs the fractions, to the last bits
        {"src": "a", "tgt": "x", "count": 2, "p": pytest.approx(2 / 3, rel=1e-12)},
        {"src": "a", "tgt": "z", "count": 1, "p": pytest.approx(1 / 3, rel=1e-12)},
        {"src": "b", "tgt": "y", "count": 1, "p": 1.0},
        {"src": "c", "tgt": "w", "count": 1, "p": 1.0},
    ]


def test_word_entropy_natural_log_eq_6_4():
    lexicon, _ = _lexicon_abc()
    H = dict(zip(*word_entropy(lexicon).select(["src", "H"]).to_pydict().values()))
    assert {"a": pytest.approx(0.636514, abs=1e-6), "b": 0.0, "c": 0.0} == H
    assert H["a"] == pytest.approx(-(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3), abs=1e-15)


def test_sentence_uncertainty_is_mean_entropy_unknown_word_zero_eq_6_3():
    lexicon, src = _lexicon_abc()
    words = word_uncertainty(lexicon, src)
    assert words.to_pylist() == [
        {"src": "a", "H": pytest.approx(0.636514, abs=1e-6), "links": 3, "freq": 3},
        {"src": "b", "H": 0.0, "links": 1, "freq": 1},
        {"src": "c", "H": 0.0, "links": 1, "freq": 1},
    ]
    scored = sentence_uncertainty(mono(["a b d", "d", "a a", "   "]), words, column="text")
    assert scored["uncertainty"].to_pylist() == pytest.approx([0.212172, 0.0, 0.636514, 0.0], abs=1e-6)
    assert scored["tokens"].to_pylist() == [3, 1, 2, 0]
    # Eq. 6.5: -mean ln p(w), p = freq / 5 source tokens; the unseen "d" counts as seen once
    # (numpy's ln total − ln freq, meaned in the numba kernel, vs these libm logs: equal up to the last bits)
    assert scored["word_rarity"].to_pylist() == pytest.approx(
        [(math.log(5 / 3) + math.log(5) + math.log(5)) / 3, math.log(5), math.log(5 / 3), 0.0], rel=1e-12
    )


def test_sampling_probability_eq_6_6_and_6_7():
    p = sampling_probability(np.array([0.5, 1, 2, 3, 4]), u_max=2.9, beta=2)
    assert p.tolist() == pytest.approx([0.015309, 0.061237, 0.244948, 0.480098, 0.198408], abs=1e-6)
    # numpy's 2.9 ** 2 vs the decimal 8.41: equal up to the last bits
    assert sampling_weight(np.array([6.0, 5.8, 2.9]), u_max=2.9, beta=2).tolist() == pytest.approx([0.0, 0.0, 8.41], rel=1e-12)


def test_u_max_is_the_nearest_rank_percentile(tmp_path):
    pq.write_table(pa.table({"uncertainty": [float(v) for v in range(10, 0, -1)]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"uncertainty": [0.5]}), tmp_path / "b.parquet")
    # 11 values 0.5, 1..10 ascending: R = 90 -> rank ceil(9.9) = 10 -> 9.0; R = 100 -> the largest
    assert u_max(Parts((tmp_path / "a.parquet", tmp_path / "b.parquet")), percentile_r=90)["u_max"].to_pylist() == [9.0]
    assert u_max(Parts((tmp_path / "a.parquet",)), percentile_r=100)["u_max"].to_pylist() == [10.0]


def test_uid_uniform_depends_on_seed_and_uid_only():
    rows = mono([f"s{i}" for i in range(1000)])
    v = uid_uniform(rows["uid"], 7)
    assert np.all((v > 0) & (v < 1)) and abs(v.mean() - 0.5) < 0.03
    assert np.array_equal(uid_uniform(rows["uid"].slice(10, 5), 7), v[10:15])
    assert not np.array_equal(uid_uniform(rows["uid"], 8), v)


def _scored(n: int, seed: int = 0) -> pa.Table:
    rows = mono([f"sentence {i}" for i in range(n)])
    u = np.random.default_rng(seed).uniform(0, 4, n)
    u[:5] = [0.0, 6.0, 5.8, 2.0, 3.0]  # p = 0 for U = 0 and U >= 2 U_max
    return pa.table(
        {
            "uid": rows["uid"],
            "source": rows["source"],
            "line": rows["line"],
            "tokens": pa.array([2] * n, pa.int32()),
            "uncertainty": u,
            "word_rarity": u[::-1].copy(),
        }
    ), rows


def _sample_over_shards(
    scored: pa.Table, n_shards: int, tmp_path, *, budget: int, method: str = "uncertainty", seed: int = 0
) -> pa.Table:
    bounds = np.linspace(0, scored.num_rows, n_shards + 1).astype(int)
    umax = pa.table({"u_max": [2.9]})
    parts = []
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        keys = sample_keys(scored.slice(a, b - a), u_max=umax, method=method, beta=2.0, seed=seed, budget=budget)
        parts.append(tmp_path / f"{method}-{n_shards}-{k}.parquet")
        pq.write_table(keys, parts[-1])
    return select_sample(Parts(tuple(parts)), budget=budget, method=method)


@pytest.mark.parametrize("method", ["uncertainty", "random", "word_rarity"])
def test_sample_is_the_same_whatever_the_number_of_shards(tmp_path, method):
    scored, _ = _scored(600)
    one = _sample_over_shards(scored, 1, tmp_path, budget=50, method=method)
    for n_shards in (2, 7):
        assert _sample_over_shards(scored, n_shards, tmp_path, budget=50, method=method).equals(one)
    assert one.num_rows == 50 and sorted(one["rank"].to_pylist()) == list(range(1, 51))  # sorted by line, not rank
    assert len(set(one["uid"].to_pylist())) == 50  # without replacement


def test_sample_excludes_p_zero_and_gives_eq_6_6_probabilities(tmp_path):
    scored, _ = _scored(600)
    sample = _sample_over_shards(scored, 3, tmp_path, budget=100)
    excluded = set(scored["uid"].to_pylist()[:3])  # U = 0, 6.0 and 5.8 (= 2 U_max)
    assert not excluded & set(sample["uid"].to_pylist())
    p_all = sampling_probability(scored["uncertainty"].to_numpy(), u_max=2.9, beta=2.0)
    p_of = dict(zip(scored["uid"].to_pylist(), p_all))
    assert sample["p"].to_pylist() == pytest.approx([p_of[u] for u in sample["uid"].to_pylist()], rel=1e-12)


def test_sample_favours_high_uncertainty_below_u_max(tmp_path):
    scored, _ = _scored(4000, seed=1)
    sample = _sample_over_shards(scored, 2, tmp_path, budget=400)
    u = np.asarray(sample["uncertainty"])
    # weights (α u)^2 peak at U_max = 2.9: the sample's mean is well above the uniform mean of 2.0
    assert 2.3 < u.mean() < 2.9


def test_sample_seed_changes_the_draw(tmp_path):
    scored, _ = _scored(600)
    a = _sample_over_shards(scored, 2, tmp_path, budget=50, seed=0)
    b = _sample_over_shards(scored, 2, tmp_path, budget=50, seed=1)
    assert set(a["uid"].to_pylist()) != set(b["uid"].to_pylist())


def test_word_rarity_baseline_takes_the_highest_first(tmp_path):
    scored, _ = _scored(300)
    sample = _sample_over_shards(scored, 3, tmp_path, budget=10, method="word_rarity").sort_by("rank")
    wr = dict(zip(scored["uid"].to_pylist(), scored["word_rarity"].to_pylist()))
    assert sorted(wr.values(), reverse=True)[:10] == [wr[u] for u in sample["uid"].to_pylist()]


def test_sample_refuses_a_budget_above_the_rows_with_p_above_zero(tmp_path):
    scored = _scored(10)[0].slice(0, 4)  # U = 0, 6.0, 5.8, 2.0: one row has p > 0
    with pytest.raises(InputError) as info:
        _sample_over_shards(scored, 2, tmp_path, budget=2)
    assert str(info.value) == (
        "sampling (uncertainty): only 1 monolingual rows have p > 0 (U > 0 and U < 2·U_max), fewer than the budget 2. "
        "Hint: lower self_training.sampling.budget (or budget_ratio), or add monolingual data"
    )


def test_take_sample_keeps_input_order_and_lineage(tmp_path):
    scored, rows = _scored(100)
    sample = _sample_over_shards(scored, 1, tmp_path, budget=10)
    shard = rows.slice(40, 60)
    taken = take_sample(shard, sample)
    inside = [u for u in shard["uid"].to_pylist() if u in set(sample["uid"].to_pylist())]
    assert len(inside) >= 3 and taken["uid"].to_pylist() == inside  # the drawn rows of lines 41-100, in order
    by_uid = {r["uid"]: r for r in sample.to_pylist()}
    assert [(r["uncertainty"], r["p"], r["rank"]) for r in taken.to_pylist()] == [
        (by_uid[u]["uncertainty"], by_uid[u]["p"], by_uid[u]["rank"]) for u in inside
    ]
    assert taken["method"].to_pylist() == ["uncertainty"] * len(inside)


def test_take_sample_reads_only_its_lines_row_groups_of_the_sample_parts(tmp_path):
    """The flow hands `selected` as Parts: a shard reads the row groups that can hold its lines (the sample
    is sorted by source and line), and takes the same rows as from the whole table."""
    scored, rows = _scored(100)
    sample = _sample_over_shards(scored, 1, tmp_path, budget=30)
    assert sample["line"].to_pylist() == sorted(sample["line"].to_pylist())  # select_sample sorts by line
    pq.write_table(sample, tmp_path / "selected.parquet", row_group_size=5)
    parts = Parts((tmp_path / "selected.parquet",))
    for shard in (rows.slice(0, 30), rows.slice(40, 60), rows.slice(0, 0)):
        assert take_sample(shard, parts).equals(take_sample(shard, sample))
    # row-group statistics rule out all but the groups holding lines 41-60: here 2 of 6 groups
    ds = __import__("pyarrow.dataset", fromlist=["dataset"]).dataset(str(tmp_path / "selected.parquet"))
    lines = pa.compute.field("line")
    groups = list(ds.get_fragments())[0].split_by_row_group(filter=(lines >= 41) & (lines <= 60))
    assert 1 <= len(groups) < 6


def test_uncertainty_bins_are_equal_size_and_ordered(tmp_path):
    scored, _ = _scored(103)
    pq.write_table(scored, tmp_path / "s.parquet")
    bins = uncertainty_bins(Parts((tmp_path / "s.parquet",)), bins=5)
    assert bins["rows"].to_pylist() == [21, 21, 21, 20, 20] and bins["source"].to_pylist() == ["m"] * 5
    u = sorted(scored["uncertainty"].to_pylist())
    assert bins["u_min"].to_pylist() == [u[0], u[21], u[42], u[63], u[83]]
    assert bins["length"].to_pylist() == [2.0] * 5 and bins["coverage"].to_pylist() == [None] * 5


def test_word_scores_split_exactly_like_tokenize():
    """The byte kernel and Arrow's split agree on every whitespace character, ASCII or not."""
    from models.lexicon import WordScores

    spaces = [
        " ",
        "\t",
        "\n",
        "\x0b",
        "\x0c",
        "\r",
        "\x1c",
        "\x1f",
        "\x85",
        "\xa0",
        "\u1680",
        "\u2000",
        "\u200a",
        "\u2028",
        "\u2029",
        "\u202f",
        "\u205f",
        "\u3000",
    ]
    near_misses = ["\u200b", "\xad", "\u2060", "é", "ü", "中", "\U0001f600"]  # not whitespace
    rng = np.random.default_rng(0)
    alphabet = ["a", "b", "é"] + near_misses
    texts = [
        "".join(rng.choice(spaces if rng.random() < 0.3 else alphabet) for _ in range(rng.integers(0, 12))) for _ in range(2000)
    ]
    words = sorted({w for t in tokenize(pa.array(texts)).to_pylist() for w in t})
    table = pa.table({"src": words, "H": [float(i + 1) for i in range(len(words))], "freq": [1] * len(words)})
    tokens, u, _ = WordScores(table.slice(0, len(words) // 2)).score(pa.array(texts))  # half the words unknown
    H = dict(zip(words[: len(words) // 2], table["H"].to_pylist()))
    for text, n, got in zip(texts, tokens, u):
        expected = text.split()
        assert n == len(expected), repr(text)
        # the numba byte kernel's mean vs Python's sum / len: equal up to the last bits
        assert got == pytest.approx(sum(H.get(w, 0.0) for w in expected) / len(expected) if expected else 0.0, rel=1e-12)


def test_force_align_with_the_stored_models_reproduces_the_training_links(tmp_path):
    """The `align` artifact's tables and tensions are a usable aligner: force-aligning the training pairs
    gives back exactly the links of its last (decode-only) iteration, so the synthetic pairs' coverage
    (monolingual bins) is measured with the very model that aligned the bitext."""
    from demo import iter_bitext
    from tasks.self_training.alignment import align_bitext
    from tasks.self_training.lexicon import force_align
    from tests.conftest import bitext

    rows = bitext([(s, t) for s, t, _ in iter_bitext(400, seed=3)])
    pq.write_table(rows, tmp_path / "bitext.parquet")
    out = align_bitext(Parts((tmp_path / "bitext.parquet",)))
    for role, table in out.items():
        pq.write_table(table, tmp_path / f"{role}-00000.parquet")
    again = force_align(rows, alignment=Parts((tmp_path / "part-00000.parquet",)))
    assert again["links"].equals(out["part"]["links"]) and again["coverage"].equals(out["part"]["coverage"])
    assert again["uid"].equals(rows["uid"])


def test_align_over_parts_and_in_row_chunks_equals_one_pass(tmp_path, monkeypatch):
    """`align` encodes part by part and builds its rows ROWS_PER_CHUNK sentences at a time (the thesis' 4.5M
    pairs would otherwise hold every temporary at once): the same rows as one part and one chunk."""
    import tasks.self_training.alignment as alignment
    from demo import iter_bitext
    from tests.conftest import bitext

    rows = bitext([(s, t) for s, t, _ in iter_bitext(300, seed=4)])
    one = alignment.align_bitext(Parts.of_tables([rows], tmp_path / "one"))
    monkeypatch.setattr(alignment, "ROWS_PER_CHUNK", 7)
    many = alignment.align_bitext(
        Parts.of_tables([rows.slice(0, 100), rows.slice(100, 150), rows.slice(250)], tmp_path / "three")
    )
    assert many["part"]["links"].num_chunks > 40  # really built in chunks
    assert all(many[role].equals(one[role]) for role in one)
