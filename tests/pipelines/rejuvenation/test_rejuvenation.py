"""Rejuvenation's numbers (thesis ch. 5): the sentence score, the inactive cut over shards, the union."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.errors import ConfError
from models.nmt import length_batches, sentence_score
from storage.parts import Parts
from tasks.common.evaluation import corpus_scores
from tasks.common.mix import content_hash, training_mix
from tasks.common.nmt import sentence_probabilities
from tasks.rejuvenation.rejuvenate import (
    REJUVENATED,
    inactive_cut,
    inactive_split,
    probability_bins,
    rejuvenate,
    rejuvenated_bitext,
)


def test_sentence_score_is_exp_of_the_mean_token_logprob():
    assert sentence_score([-0.1, -0.2, -0.3]) == pytest.approx(0.818731, abs=5e-7)
    assert sentence_score([-0.05, -0.05]) == pytest.approx(0.951229, abs=5e-7)
    assert sentence_score([]) is None and sentence_score(None) is None


def test_sentence_probabilities_keep_unscored_pairs_as_nulls():
    table = sentence_probabilities(
        pa.array(["a", "b", "c"]), [np.array([-0.1, -0.2, -0.3], np.float32), None, np.array([-0.05, -0.05])]
    )
    assert table["uid"].to_pylist() == ["a", "b", "c"]
    assert table["tokens"].to_pylist() == [3, None, 2]
    assert table["prob"][0].as_py() == pytest.approx(0.818731, abs=5e-7)
    assert table["prob"][1].as_py() is None and table["cross_entropy"][1].as_py() is None
    assert table["cross_entropy"][2].as_py() == pytest.approx(0.05, rel=1e-12)  # −mean of float64 −0.05s vs 0.05
    assert table["logprob"][0].as_py() == pytest.approx(-0.6, abs=1e-6)


def _bitext(n: int, probs: list[float | None]) -> tuple[pa.Table, pa.Table]:
    uids = [f"u{i:02d}" for i in range(n)]
    rows = pa.table(
        {
            "uid": uids,
            "src": [f"s{i}" for i in range(n)],
            "tgt": [f"t{i}" for i in range(n)],
            "source": ["d"] * n,
            "line": list(range(1, n + 1)),
        }
    )
    logprobs = [None if p is None else np.array([math.log(p)] * 3) for p in probs]
    return rows, sentence_probabilities(rows["uid"], logprobs)


def _split(tmp_path, rows: pa.Table, scores: pa.Table, shards: int, ratio: float = 0.1):
    bounds = np.linspace(0, rows.num_rows, shards + 1).astype(int)
    parts = []
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        path = tmp_path / f"scores-{shards}-{i}.parquet"
        pq.write_table(scores.slice(a, b - a), path)
        parts.append(path)
    cut = inactive_cut(Parts(tuple(parts)), inactive_ratio=ratio)
    states = {}
    for a, b in zip(bounds[:-1], bounds[1:]):
        inactive = inactive_split(rows.slice(a, b - a), scores.slice(a, b - a), cut=cut, state="inactive")
        active = inactive_split(rows.slice(a, b - a), scores.slice(a, b - a), cut=cut, state="active")
        # the active side's dropped part is the inactive side, row for row, with its reason and probability
        assert active["dropped"].drop_columns(["reason", "detail"]).equals(inactive)
        assert set(active["dropped"]["reason"].to_pylist()) <= {"inactive"}
        assert active["dropped"]["detail"].to_pylist() == [f"prob={p:.6g}" for p in inactive["prob"].to_pylist()]
        states.setdefault("active", []).extend(active["part"]["uid"].to_pylist())
        states.setdefault("inactive", []).extend(inactive["uid"].to_pylist())
    return cut, states


@pytest.mark.parametrize("shards", [1, 2, 3, 10])
def test_ten_scored_pairs_at_ten_percent_give_exactly_one_inactive_whatever_the_shards(tmp_path, shards):
    probs = [0.9, 0.8, 0.35, 0.7, 0.6, 0.95, 0.5, 0.85, 0.75, 0.65]
    rows, scores = _bitext(10, probs)
    cut, states = _split(tmp_path, rows, scores, shards)
    assert cut["scored"][0].as_py() == 10 and cut["n_inactive"][0].as_py() == 1
    assert states["inactive"] == ["u02"]  # the lowest probability
    assert sorted(states["active"]) == sorted(set(rows["uid"].to_pylist()) - {"u02"})


@pytest.mark.parametrize("shards", [1, 4])
def test_unscored_pairs_stay_active_and_do_not_count_in_the_cut(tmp_path, shards):
    probs = [0.9, None, 0.2, 0.7, 0.6, 0.95, 0.5, None, 0.75, 0.65, 0.3, 0.4]
    rows, scores = _bitext(12, probs)
    cut, states = _split(tmp_path, rows, scores, shards, ratio=0.2)
    assert cut["scored"][0].as_py() == 10 and cut["unscored"][0].as_py() == 2
    assert cut["n_inactive"][0].as_py() == 2
    assert sorted(states["inactive"]) == ["u02", "u10"]  # 0.2 and 0.3
    assert {"u01", "u07"} <= set(states["active"])
    assert len(states["active"]) + len(states["inactive"]) == 12


def test_inactive_split_refuses_an_unknown_state():
    rows, scores = _bitext(2, [0.9, 0.5])
    with pytest.raises(
        ConfError,
        match=r"^inactive_split: parameter state: expected one of active, inactive, "
        r"found 'dormant'$",
    ):
        inactive_split(rows, scores, cut=pa.table({"n_inactive": [0]}), state="dormant")


@pytest.mark.parametrize(
    "direction, kwargs, message",
    [
        ("sideways", {}, r"^rejuvenation.direction: expected forward, backward or both, found 'sideways'$"),
        (
            "forward",
            {"forward_fingerprint": "fp"},
            (
                r"^rejuvenate: parameters forward_path and forward_fingerprint: "
                r"expected the forward model's path and fingerprint, found None and fp\."
            ),
        ),
        (
            "both",
            {"forward_path": Path("f"), "forward_fingerprint": "fp"},
            r"^rejuvenate: parameters backward_path and backward_fingerprint: .* found None and None\.",
        ),
    ],
)
def test_rejuvenate_refuses_a_direction_without_its_model(direction, kwargs, message, monkeypatch):
    made = []
    monkeypatch.setattr("tasks.rejuvenation.rejuvenate.translate_column", lambda column, **kw: made.append(len(column)) or column)
    rows, _ = _bitext(2, [0.9, 0.5])
    inactive = rows.append_column("prob", pa.array([0.9, 0.5]))
    with pytest.raises(ConfError, match=message):
        rejuvenate(
            inactive,
            direction=direction,
            model=None,
            decode=None,
            identification=None,
            identification_path=Path("id"),
            runtime=None,
            identification_runtime=None,
            **kwargs,
        )
    assert made == ([2] if direction == "both" else [])  # "both": forward translated, then backward refused


def test_ties_at_the_cut_are_broken_by_uid_the_same_in_every_sharding(tmp_path):
    probs = [0.5] * 10
    rows, scores = _bitext(10, probs)
    results = {shards: _split(tmp_path, rows, scores, shards, ratio=0.3)[1]["inactive"] for shards in (1, 3, 5)}
    assert all(sorted(v) == ["u07", "u08", "u09"] for v in results.values())  # larger uid first


def test_rejuvenated_union_keeps_active_rows_and_adds_new_ones_with_lineage():
    rows, scores = _bitext(3, [0.9, 0.8, 0.1])
    active = rows.slice(0, 2).append_column("prob", scores["prob"].slice(0, 2))
    fresh = pa.table(
        {
            "uid": ["n2"],
            "src": ["s2"],
            "tgt": ["new"],
            "source": ["d"],
            "line": [3],
            "origin": ["rejuvenated"],
            "parent_uid": ["u02"],
            "direction": ["forward"],
            "prob": [0.1],
            "rejuvenated_prob": [0.7],
            "model": ["fp"],
        },
        schema=REJUVENATED,
    )
    out = rejuvenated_bitext(active, fresh)
    assert out.schema == REJUVENATED
    assert out["origin"].to_pylist() == ["original", "original", "rejuvenated"]
    assert out["parent_uid"].to_pylist() == [None, None, "u02"]
    assert out["tgt"].to_pylist() == ["t0", "t1", "new"]


def test_probability_bins_are_equal_size_by_rank(tmp_path):
    rows, scores = _bitext(20, [i / 20 + 0.01 for i in range(20)])
    path = tmp_path / "s.parquet"
    pq.write_table(scores, path)
    bins = probability_bins(Parts((path,)), bins=10)
    assert bins["rows"].to_pylist() == [2] * 10
    # DuckDB's avg of exp(mean(ln p)) vs the decimal means: equal up to the last bits
    assert bins["p_mean"][0].as_py() == pytest.approx(0.035, rel=1e-12)
    assert bins["p_mean"][9].as_py() == pytest.approx(0.935, rel=1e-12)


def test_length_batches_sort_by_length_and_respect_the_token_budget():
    lengths = [5, 1, 9, 3, 3, 20]
    batches = length_batches(lengths, max_tokens=10)
    assert [b.tolist() for b in batches] == [[1, 3, 4], [0], [2], [5]]
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert [b.tolist() for b in length_batches(lengths, max_tokens=100, max_sentences=2)] == [[1, 3], [4, 0], [2, 5]]


def test_training_mix_repeats_each_selection_its_copy_count():
    a = pa.table({"src": ["x", "y"], "tgt": ["X", "Y"]})
    b = pa.table({"src": ["z"], "tgt": ["Z"], "extra": [1]})
    mix = training_mix({"orig": a, "syn": b}, {"syn": 3})
    assert mix.num_rows == 5
    assert mix["source"].to_pylist() == ["orig", "orig", "syn", "syn", "syn"]
    assert mix["copy"].to_pylist() == [0, 0, 0, 1, 2]
    assert mix["line"].to_pylist() == [1, 2, 3, 4, 5]
    assert content_hash(mix) == content_hash(training_mix({"syn": b, "orig": a.take([1, 0])}, {"syn": 3}))
    with pytest.raises(Exception, match=r"train_nmt.mix.bad: .*missing \['tgt'\]"):
        training_mix({"bad": pa.table({"src": ["a"]})}, {})
    # a null side (e.g. from a LEFT JOIN) is the query's mistake: named, never dropped silently
    with pytest.raises(
        ConfError,
        match=r"^train_nmt.mix.joined: the query returns 2 of 3 rows with a null src or "
        r"tgt \(the first is row 2: \{'src': 'b', 'tgt': None\}\)",
    ):
        training_mix({"joined": pa.table({"src": ["a", "b", None], "tgt": ["A", None, "C"]})}, {})


def test_corpus_scores_are_sacrebleus():
    hyps = ["the cat sat on the mat today", "a dog barks at night"]
    refs = ["the cat sat on the mat today", "a dog barked at night"]
    scores = {r["metric"]: r for r in corpus_scores(hyps, refs).to_pylist()}
    import sacrebleu

    # our evaluation (sacrebleu's metric objects, stored as float64) vs sacrebleu's corpus_* helpers
    assert scores["BLEU"]["score"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, rel=1e-12)
    assert scores["chrF"]["score"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, rel=1e-12)
    assert scores["BLEU"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert scores["BLEU"]["sentences"] == 2
