"""models/lm.py: lmplz training, KenLM scoring, the exact sharded LM filter."""

from __future__ import annotations

import logging
import math
import random
import sys
from collections import Counter
from pathlib import Path

import kenlm
import numpy as np
import pyarrow as pa
import pytest

from conf.errors import ArtifactError, ModelError
from models.lm import NgramLM, find_lmplz, train_arpa
from storage.artifacts import hash_file
from tasks.common.lm import LmCut, lm_drop_count, lm_filter, lm_filter_rows, lm_threshold, lm_worst


def _have_lmplz() -> bool:
    try:
        find_lmplz()
        return True
    except ModelError:
        return False


needs_lmplz = pytest.mark.skipif(
    not _have_lmplz(), reason="KenLM's lmplz is not built here: run `make kenlm` (make install builds it into .venv/bin; CI does)"
)
MEMORY = "200M"  # lmplz's sorting memory: plenty for these corpora, less RSS than the default 20 %

# -- a small in-domain corpus: determiner phrases, verbs, an optional tail; Zipf-weighted choices --------
DET = ["the", "a", "my", "our", "every"]
ADJ = ["red", "small", "old", "happy", "quiet", "new", "green"]
NOUN = [
    "cat",
    "dog",
    "child",
    "teacher",
    "bird",
    "car",
    "house",
    "garden",
    "book",
    "river",
    "friend",
    "station",
    "doctor",
    "farmer",
    "boat",
    "letter",
    "window",
    "apple",
    "song",
    "horse",
    "city",
    "lamp",
    "chair",
    "road",
    "tree",
    "baker",
    "student",
    "key",
    "door",
    "map",
]
VERB = ["sees", "likes", "finds", "follows", "watches", "helps", "calls", "meets", "visits"]
TAIL = ["in the morning", "after lunch", "near the station", "every day", "at night", "with a smile", "again"]


def _zipf(r: random.Random, words: list[str]) -> str:
    return r.choices(words, weights=[1 / (i + 1) for i in range(len(words))])[0]


def _noun_phrase(r: random.Random) -> str:
    return " ".join([_zipf(r, DET), *([_zipf(r, ADJ)] if r.random() < 0.4 else []), _zipf(r, NOUN)])


def _maybe_tail(r: random.Random) -> list[str]:
    return [_zipf(r, TAIL)] if r.random() < 0.5 else []


def sentences(n: int, seed: int) -> list[str]:
    r = random.Random(seed)
    return [" ".join([_noun_phrase(r), _zipf(r, VERB), _noun_phrase(r), *_maybe_tail(r)]) for _ in range(n)]


TRAIN = sentences(200, seed=0)
HELD_OUT = [s for s in sentences(100, seed=1) if s not in set(TRAIN)][:50]


def shuffled(texts: list[str], seed: int = 2) -> list[str]:
    """Each sentence with its words in another order (never the same order)."""
    r, out = random.Random(seed), []
    for s in texts:
        words = s.split()
        while " ".join(words) == s:
            r.shuffle(words)
        out.append(" ".join(words))
    return out


@pytest.fixture(scope="module")
def trigram(tmp_path_factory) -> Path:
    return train_arpa(TRAIN, tmp_path_factory.mktemp("lm") / "tri.arpa", order=3, discount_fallback=False, memory=MEMORY)


# -- a corpus small enough to do modified Kneser-Ney by hand -------------------------------------------
# One sentence "a b c", order 2. Every count is 1, so lmplz cannot estimate discounts and uses its fallback
# D1 = 0.5 for both orders. Unigrams (adjusted count = distinct left words: 1 each for a, b, c, </s>; sum 4)
# interpolate with the uniform 1/|V| over V = {<unk>, </s>, a, b, c}:
#   p(a) = (1 − 0.5)/4 + γ·1/5,  γ = 0.5·4/4 = 0.5  ->  0.225 (log10 −0.6478175);  p(<unk>) = 0.5/5 = 0.1 (−1)
#   p(a | <s>) = (1 − 0.5)/1 + γ(<s>)·p(a),  γ(<s>) = 0.5·1/1  ->  0.6125 (log10 −0.2128939)
#   backoff(a) = γ(a) = log10 0.5 = −0.30103
HAND_ARPA = """\\data\\
ngram 1=6
ngram 2=4

\\1-grams:
-1\t<unk>\t0
0\t<s>\t-0.30103
-0.6478175\t</s>\t0
-0.6478175\ta\t-0.30103
-0.6478175\tb\t-0.30103
-0.6478175\tc\t-0.30103

\\2-grams:
-0.2128939\tc </s>
-0.2128939\t<s> a
-0.2128939\ta b
-0.2128939\tb c

\\end\\
"""


@pytest.fixture
def hand_lm(tmp_path) -> NgramLM:
    path = tmp_path / "hand.arpa"
    path.write_text(HAND_ARPA)
    return NgramLM.load(path)


def test_hand_arpa_numbers_are_modified_kneser_ney_with_fallback_discounts():
    # double arithmetic vs the decimals written above: equal up to the last bit
    assert pytest.approx((0.225, 0.1, 0.6125), rel=1e-12) == (0.5 / 4 + 0.5 / 5, 0.5 / 5, 0.5 + 0.5 * 0.225)
    # libm's log10 vs the ARPA's printed digits: within half a unit of the last printed digit
    assert (math.log10(0.225), math.log10(0.6125)) == pytest.approx((-0.6478175, -0.2128939), abs=5e-8)
    assert math.log10(0.5) == pytest.approx(-0.30103, abs=5e-6)


def assert_arpa_like(text: str, expected: str) -> None:
    """``text`` has ``expected``'s lines, tabs, words and counts exactly, and its numbers (lmplz's float32
    arithmetic, printed as the shortest float32 repr) within 2e-7 of the hand-computed ones: their 7th-digit
    rounding (5e-8) plus two float32 ulps (6e-8 at 0.65). A last-bit difference of lmplz's build passes, a wrong
    discount or count does not."""

    def fields(arpa: str) -> list[list[str]]:
        return [line.split("\t") for line in arpa.split("\n")]

    def number(field: str) -> float | None:
        try:
            return float(field)
        except ValueError:
            return None

    got, want = fields(text), fields(expected)
    assert [len(row) for row in got] == [len(row) for row in want], text
    for g_row, w_row in zip(got, want):
        for g, w in zip(g_row, w_row):
            if number(w) is None:
                assert g == w, text
            else:
                assert number(g) == pytest.approx(number(w), abs=2e-7), (g_row, w_row)


@needs_lmplz
def test_train_arpa_reproduces_the_hand_computed_bigram_model(tmp_path):
    path = train_arpa(["a b c"], tmp_path / "abc.arpa", order=2, memory=MEMORY)
    assert_arpa_like(path.read_text(), HAND_ARPA)


def ngram_counts(texts: list[str], n: int) -> Counter:
    """Raw n-gram counts over "<s> words </s>", the way lmplz pads (one <s>, one </s>)."""
    counts: Counter = Counter()
    for s in texts:
        w = ["<s>", *s.split(), "</s>"]
        counts.update(tuple(w[i : i + n]) for i in range(len(w) - n + 1))
    return counts


@needs_lmplz
def test_train_arpa_writes_counts_header_and_prunes_singletons(tmp_path):
    full = train_arpa(TRAIN, tmp_path / "full.arpa", order=3, memory=MEMORY)
    pruned = train_arpa(TRAIN, tmp_path / "pruned.arpa", order=3, memory=MEMORY, prune=(0, 0, 1))
    vocab = len({w for s in TRAIN for w in s.split()}) + 3  # + <unk>, <s>, </s>
    bigrams, trigrams = ngram_counts(TRAIN, 2), ngram_counts(TRAIN, 3)
    assert (vocab, len(bigrams), len(trigrams), sum(c > 1 for c in trigrams.values())) == (65, 434, 903, 208)
    assert full.read_text().split("\n\n")[0].splitlines() == ["\\data\\", "ngram 1=65", "ngram 2=434", "ngram 3=903"]
    assert pruned.read_text().split("\n\n")[0].splitlines() == ["\\data\\", "ngram 1=65", "ngram 2=434", "ngram 3=208"]


def test_train_arpa_refuses_an_order_kenlm_cannot_load(tmp_path):
    with pytest.raises(ModelError, match=r"order = 7, must be in \[1, 6\]"):
        train_arpa(["a b"], tmp_path / "x.arpa", order=7)


def test_train_arpa_refuses_a_prune_not_starting_with_zero(tmp_path):
    with pytest.raises(ModelError, match=r"prune = \[1, 1\]: expected non-decreasing thresholds starting with 0"):
        train_arpa(["a b"], tmp_path / "x.arpa", order=2, prune=(1, 1))


@needs_lmplz
def test_train_arpa_trigram_scores_in_domain_below_shuffled(trigram):
    lm = NgramLM.load(trigram)
    ours = lm.score(HELD_OUT)["cross_entropy"].to_numpy()
    scrambled = lm.score(shuffled(HELD_OUT))["cross_entropy"].to_numpy()
    # 49 of 50: the exception, "the car teacher sees the", keeps the frequent bigrams "sees the", "the car"
    assert (len(HELD_OUT), int((ours < scrambled).sum())) == (50, 49)
    assert ours.mean() < scrambled.mean() - 1.5  # 2.49 vs 4.21 nats per token


@needs_lmplz
def test_train_arpa_fivegram_falls_back_on_a_tiny_corpus_and_logs_it(tmp_path, caplog):
    tiny = TRAIN[:50]
    with pytest.raises(ModelError, match=r"(?s)BadDiscountException.*Hint: discount_fallback=None or True"):
        train_arpa(tiny, tmp_path / "strict.arpa", order=5, discount_fallback=False, memory=MEMORY)
    assert not (tmp_path / "strict.arpa").exists()
    with caplog.at_level(logging.WARNING, logger="models.lm"):
        auto = train_arpa(tiny, tmp_path / "auto.arpa", order=5, memory=MEMORY)
    assert [r.getMessage().split(": ", 1)[1][:103] for r in caplog.records] == [
        "too few distinct counts to estimate modified Kneser-Ney discounts for the 1, 4, 5-grams; lmplz used its"
    ]
    explicit = train_arpa(tiny, tmp_path / "explicit.arpa", order=5, discount_fallback=True, memory=MEMORY)
    assert auto.read_bytes() == explicit.read_bytes()
    lm = NgramLM.load(auto)
    ours = lm.score(HELD_OUT)["cross_entropy"].to_numpy()
    assert (lm.order, int((ours < lm.score(shuffled(HELD_OUT))["cross_entropy"].to_numpy()).sum())) == (5, 48)


@needs_lmplz
def test_train_arpa_fallback_changes_nothing_when_discounts_exist(trigram, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="models.lm"):
        auto = train_arpa(TRAIN, tmp_path / "auto.arpa", order=3, memory=MEMORY)
    assert auto.read_bytes() == trigram.read_bytes() and caplog.records == []


@needs_lmplz
def test_train_arpa_streams_arrow_like_a_list_and_keeps_rows_one_line(tmp_path):
    chunked = pa.chunked_array([TRAIN[:70] + [None], TRAIN[70:]])
    from_arrow = train_arpa(chunked, tmp_path / "arrow.arpa", order=3, memory=MEMORY)
    from_gen = train_arpa((s for s in TRAIN), tmp_path / "gen.arpa", order=3, memory=MEMORY)
    assert from_arrow.read_bytes() == from_gen.read_bytes()
    # a newline or \v inside a row is a space: still one sentence of 3 words, as kenlm splits it
    split = train_arpa(["a\nb\vc"], tmp_path / "split.arpa", order=2, memory=MEMORY)
    assert_arpa_like(split.read_text(), HAND_ARPA)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arrow.arpa", "gen.arpa", "split.arpa"]  # no temp left


@needs_lmplz
def test_train_arpa_binary_scores_like_the_arpa(tmp_path):
    arpa = train_arpa(TRAIN, tmp_path / "tri.arpa", order=3, memory=MEMORY, binary=True)
    binary = NgramLM.load(tmp_path / "tri.binary")
    assert binary.order == 3
    assert binary.score(HELD_OUT).equals(NgramLM.load(arpa).score(HELD_OUT))


@needs_lmplz
def test_ngram_lm_score_equals_kenlm_score_and_perplexity(trigram):
    lm, model = NgramLM.load(trigram), kenlm.Model(str(trigram))
    texts = HELD_OUT + shuffled(HELD_OUT) + ["unseen words only", ""]
    table = lm.score(texts)
    assert lm.order == model.order == 3
    assert table["log10_prob"].to_pylist() == [model.score(s, bos=True, eos=True) for s in texts]  # one path: exact
    assert table["perplexity"].to_pylist() == pytest.approx([model.perplexity(s) for s in texts], rel=1e-12)


def test_ngram_lm_score_columns_on_the_hand_model(hand_lm):
    table = hand_lm.score(["a b c", "c b a", "", None])
    p = math.log10(0.6125)  # every bigram of "<s> a b c </s>" has p = 0.6125
    assert table.schema.names == ["log10_prob", "tokens", "cross_entropy", "perplexity"]
    assert table["tokens"].to_pylist() == [4, 4, 1, None]
    assert table["log10_prob"][0].as_py() == pytest.approx(4 * p, abs=1e-6)
    assert table["cross_entropy"][0].as_py() == pytest.approx(-p * math.log(10), abs=1e-6)
    assert table["perplexity"][0].as_py() == pytest.approx(1 / 0.6125, abs=1e-6)
    assert table["log10_prob"][3].as_py() is None


def test_ngram_lm_score_counts_tokens_as_kenlm_splits(hand_lm):
    texts = ["  a   b ", "a\tb\nc", "a\x0bb\x0cc\rd", "a\u00a0b", "   ", "x\u3000y", "é è"]
    table = hand_lm.score(pa.chunked_array([texts[:3], texts[3:]]))
    assert table["tokens"].to_pylist() == [len(s.encode().split()) + 1 for s in texts] == [3, 4, 5, 2, 1, 2, 3]
    # ours: numpy's 10.0 ** array; kenlm's: Python's float pow (libm): they may differ in the last bit
    assert table["perplexity"].to_pylist() == pytest.approx([hand_lm.model.perplexity(s) for s in texts], rel=1e-12)


def test_ngram_lm_fingerprint_is_the_file_sha256(hand_lm):
    assert hand_lm.fingerprint() == hash_file(hand_lm.path) and len(hand_lm.fingerprint()) == 64


def test_ngram_lm_load_names_the_path_it_cannot_load(tmp_path):
    bad = tmp_path / "bad.arpa"
    bad.write_text("not an arpa file\n")
    with pytest.raises(ModelError, match=rf"^{bad}: cannot load as a KenLM model \(ARPA or binary\)"):
        NgramLM.load(bad)
    with pytest.raises(ModelError, match=rf"^{tmp_path / 'none.arpa'}: no such LM file"):
        NgramLM.load(tmp_path / "none.arpa")


def test_find_lmplz_missing_raises_with_the_build_hint(tmp_path, monkeypatch):
    monkeypatch.delenv("AUGDAG_LMPLZ", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(ModelError, match=r"lmplz: not found beside .*Hint: `make kenlm` \(or scripts/build_kenlm\.sh"):
        find_lmplz()
    with pytest.raises(ModelError, match="Hint: `make kenlm`"):
        train_arpa(["a b"], tmp_path / "x.arpa", order=2)
    assert not (tmp_path / "x.arpa").exists()


def test_find_lmplz_prefers_augdag_lmplz_and_names_a_wrong_one(tmp_path, monkeypatch):
    fake = tmp_path / "lmplz"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("AUGDAG_LMPLZ", str(fake))
    assert find_lmplz() == fake
    monkeypatch.setenv("AUGDAG_LMPLZ", str(tmp_path / "nope"))
    with pytest.raises(ModelError, match=rf"AUGDAG_LMPLZ={tmp_path / 'nope'}: expected an executable lmplz"):
        find_lmplz()


# -- the filter ------------------------------------------------------------------------------------------
# Ten rows, three tied at the worst cross-entropy 5.0 (u01, u03, u06). ⌊0.2·10⌋ = 2 are dropped; the tie is
# broken by uid, larger first: u06 and u03 go, u01 stays.
CE = [1.0, 5.0, 2.0, 5.0, 3.0, 0.5, 5.0, 4.0, 2.5, 1.5]
UIDS = [f"u{i:02d}" for i in range(10)]


def scored_rows(order: list[int] | None = None) -> pa.Table:
    idx = order or list(range(10))
    return pa.table(
        {
            "uid": [UIDS[i] for i in idx],
            "text": [f"s{i}" for i in idx],
            "cross_entropy": pa.array([CE[i] for i in idx], pa.float64()),
        }
    )


def test_lm_threshold_drops_exactly_the_two_worst_with_reason():
    table = scored_rows()
    cut = lm_threshold(table["cross_entropy"], uids=table["uid"], drop_fraction=0.2)
    kept, dropped = lm_filter(table, threshold=cut)
    assert cut == LmCut(5.0, "u03", 2)
    assert dropped.column_names == ["uid", "text", "cross_entropy", "reason"]
    assert dropped.to_pydict() == {
        "uid": ["u03", "u06"],
        "text": ["s3", "s6"],
        "cross_entropy": [5.0, 5.0],
        "reason": ["lm_score", "lm_score"],
    }
    assert kept["uid"].to_pylist() == ["u00", "u01", "u02", "u04", "u05", "u07", "u08", "u09"]


@pytest.mark.parametrize("bounds", [[0, 10], [0, 5, 10], [0, 3, 7, 10], [0, 1, 2, 10], [0, 0, 9, 10]])
@pytest.mark.parametrize("via_candidates", [False, True])
def test_lm_filter_same_rows_for_any_sharding(bounds, via_candidates):
    order = [7, 3, 0, 9, 6, 2, 5, 1, 8, 4]  # rows in a scrambled order, then cut into shards
    table = scored_rows(order)
    shards = [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]
    n, f = sum(s.num_rows for s in shards), 0.2
    if via_candidates:  # the reduce step holds ≤ shards × k rows
        cands = pa.concat_tables([lm_worst(s, n_drop=lm_drop_count(n, f)) for s in shards])
        cut = lm_threshold(cands["cross_entropy"], uids=cands["uid"], n_rows=n, drop_fraction=f)
    else:
        scores = pa.concat_tables([s.select(["cross_entropy", "uid"]) for s in shards])
        cut = lm_threshold(scores["cross_entropy"], uids=scores["uid"], drop_fraction=f)
    kept, dropped = zip(*(lm_filter(s, threshold=cut) for s in shards))
    assert cut == LmCut(5.0, "u03", 2)
    assert pa.concat_tables(dropped)["uid"].to_pylist() == ["u03", "u06"]
    assert pa.concat_tables(kept).equals(lm_filter(table, threshold=cut)[0])


def test_lm_worst_returns_the_shard_candidates_worst_first():
    worst = lm_worst(scored_rows(), n_drop=4)
    assert worst.to_pydict() == {"cross_entropy": [5.0, 5.0, 5.0, 4.0], "uid": ["u06", "u03", "u01", "u07"]}
    assert lm_worst(scored_rows().slice(0, 2), n_drop=4)["uid"].to_pylist() == ["u01", "u00"]


def test_lm_threshold_refuses_too_few_candidates():
    with pytest.raises(ModelError, match=r"1 scores for n_rows = 10, drop_fraction = 0.2: expected at least 2"):
        lm_threshold(np.array([5.0]), uids=["u01"], n_rows=10, drop_fraction=0.2)


@pytest.mark.parametrize(
    "n, f, k", [(10, 0.2, 2), (9, 0.2, 1), (4, 0.2, 0), (100, 0.29, 29), (10, 0.0, 0), (10, 1.0, 10), (3, 0.5, 1), (0, 0.2, 0)]
)
def test_lm_drop_count_is_floor_of_the_decimal_fraction(n, f, k):
    assert lm_drop_count(n, f) == k


def test_lm_drop_count_refuses_a_fraction_outside_0_1():
    with pytest.raises(ModelError, match=r"drop_fraction = 1.5, must be in \[0, 1\]"):
        lm_drop_count(10, 1.5)


def test_lm_threshold_without_uids_drops_every_tie_at_the_cut():
    cut = lm_threshold(np.array(CE), drop_fraction=0.2)
    kept, dropped = lm_filter(scored_rows(), threshold=cut)
    assert cut == LmCut(5.0, None, 2) and dropped["uid"].to_pylist() == ["u01", "u03", "u06"]


def test_lm_filter_zero_drop_and_float_threshold():
    table = scored_rows()
    assert lm_filter(table, threshold=lm_threshold(table["cross_entropy"], drop_fraction=0.05))[1].num_rows == 0
    kept, dropped = lm_filter(table, threshold=3.0)  # a fixed bound: drop > 3.0
    assert (kept.num_rows, dropped["uid"].to_pylist()) == (6, ["u01", "u03", "u06", "u07"])


def test_lm_filter_ranks_null_and_nan_worst():
    table = pa.table(
        {"uid": ["a", "b", "c", "d", "e"], "cross_entropy": pa.array([1.0, None, 9.0, float("nan"), 2.0], pa.float64())}
    )
    cut = lm_threshold(table["cross_entropy"], uids=table["uid"], drop_fraction=0.4)
    kept, dropped = lm_filter(table, threshold=cut)
    assert (cut, dropped["uid"].to_pylist(), kept["uid"].to_pylist()) == (LmCut(math.inf, "b", 2), ["b", "d"], ["a", "c", "e"])


def test_lm_filter_names_a_missing_column():
    with pytest.raises(ModelError, match="lm filter: column uid missing; found cross_entropy"):
        lm_filter(scored_rows().select(["cross_entropy"]), threshold=LmCut(5.0, "u03", 2))


def test_lm_filter_rows_names_the_first_row_whose_score_is_not_its_own():
    rows, cut = scored_rows(), pa.table({"rows": [10], "n_drop": [2], "cross_entropy": [5.0], "uid": ["u03"]})
    out = lm_filter_rows(rows, rows.select(["uid", "cross_entropy"]), cut=cut)
    assert (out["part"].num_rows, out["dropped"]["uid"].to_pylist()) == (8, ["u03", "u06"])
    swapped = scored_rows([0, 1, 3, 2, 4, 5, 6, 7, 8, 9]).select(["uid", "cross_entropy"])
    with pytest.raises(
        ArtifactError,
        match=r"^lm_filter: shard row 3, column uid: expected the scores row for row, "
        r"found uid 'u02' in the rows and uid 'u03' in the scores "
        r"\(10 rows, 10 scores\)\. Hint: ",
    ):
        lm_filter_rows(rows, swapped, cut=cut)
    with pytest.raises(
        ArtifactError,
        match=r"^lm_filter: shard row 10, column uid: .* found uid 'u09' in the rows "
        r"and no score in the scores \(10 rows, 9 scores\)",
    ):
        lm_filter_rows(rows, rows.slice(0, 9).select(["uid", "cross_entropy"]), cut=cut)
