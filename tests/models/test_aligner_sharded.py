"""fast_align's EM over a bitext's parts (models/aligner/sharded.py, issue 51) against the one-process `_train`: bit for
bit when `_train`'s chunks are the parts, within 1e-9 of ln θ (and the same links) with its default 8 chunks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from conf.errors import ModelError
from models.aligner.encoding import encode, encode_stream
from models.aligner.model import align_encoded
from models.aligner.sharded import (
    Accumulator,
    Theta,
    direction_lengths,
    expected_counts,
    length_histogram,
    maximise,
    merge_vocab,
    srclen_fold,
    viterbi,
)

TOLERANCE = 1e-9  # relative, θ of the parts' EM vs the one-process EM's 8 chunks (measured: ≤ 1e-11 here)


@pytest.fixture(scope="module")
def demo600() -> tuple[list[str], list[str]]:
    from demo import iter_bitext

    pairs = list(iter_bitext(600, seed=7))
    return [s for s, _, _ in pairs], [t for _, t, _ in pairs]


def sharded_em(src: list[str], tgt: list[str], k: int, iterations: int = 5):
    """The EM rounds in one process, as tasks/self_training/em.py runs them as stages: per direction θ, λ, links."""
    edges = np.linspace(0, len(src), k + 1).astype(int)
    parts = [(src[a:b], tgt[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    sv, tv = (merge_vocab(encode(p[c]).vocab for p in parts) for c in (0, 1))
    enc = [(encode(s, sv), encode(t, tv)) for s, t in parts]
    hist = pa.concat_tables([length_histogram(s.lengths, t.lengths) for s, t in enc])
    hist = hist.group_by(["src_len", "tgt_len"]).aggregate([("count", "sum")]).rename_columns(["src_len", "tgt_len", "count"])
    out = {}
    for reverse in (False, True):
        theta, tension = None, 4.0
        n_e, n_f = (len(tv) + 1, len(sv)) if reverse else (len(sv) + 1, len(tv))
        for it in range(iterations - 1):
            counts = [expected_counts(*((t, s) if reverse else (s, t)), theta, tension=tension) for s, t in enc]
            acc = Accumulator(n_e, n_f, theta)
            if theta is None:
                acc.union(counts)
            for c in counts:
                acc.add(c)
            theta, tension = maximise(acc, iteration=it, tension=tension, lengths=direction_lengths(hist, reverse=reverse))
        links = [viterbi(*((t, s) if reverse else (s, t)), theta, reverse=reverse, tension=tension) for s, t in enc]
        out[reverse] = (theta, tension, np.concatenate([a.src for a in links]), np.concatenate([a.tgt for a in links]))
    return out, np.diff(edges), (sv, tv)


@pytest.mark.parametrize("k", [1, 2, 7])
def test_sharded_em_equals_train_with_the_parts_as_chunks_bit_for_bit_issue_51(demo600, k):
    src, tgt = demo600
    out, rows, (sv, tv) = sharded_em(src, tgt, k)
    ss, ts = encode_stream([src[:100], src[100:]]), encode_stream([tgt])
    assert ss.vocab.equals(sv) and ts.vocab.equals(tv)  # the same word ids as the one-process encoder
    fwd, rev, fwd_links, rev_links = align_encoded(ss, ts, chunk_rows=rows)
    for model, links, reverse in ((fwd, fwd_links, False), (rev, rev_links, True)):
        theta, tension, s, t = out[reverse]
        assert np.array_equal(theta.row_ptr, model.row_ptr) and np.array_equal(theta.cols, model.cols)
        assert np.array_equal(theta.theta, model.theta) and tension == model.tension
        assert np.array_equal(s, links.src) and np.array_equal(t, links.tgt)


@pytest.mark.parametrize("k", [1, 2, 7])
def test_sharded_em_is_within_1e_9_of_the_default_chunks_with_the_same_links_issue_51(demo600, k):
    src, tgt = demo600
    out, _, _ = sharded_em(src, tgt, k)
    fwd, rev, fwd_links, rev_links = align_encoded(encode_stream([src]), encode_stream([tgt]))
    for model, links, reverse in ((fwd, fwd_links, False), (rev, rev_links, True)):
        theta, tension, s, t = out[reverse]
        assert np.array_equal(theta.cols, model.cols)
        assert np.max(np.abs(theta.theta - model.theta) / model.theta) <= TOLERANCE
        assert tension == pytest.approx(model.tension, rel=TOLERANCE, abs=0)
        assert np.array_equal(s, links.src) and np.array_equal(t, links.tgt)


def test_merge_vocab_numbers_words_by_first_appearance_over_the_parts():
    parts = [pa.array(["b", "a"]), pa.array(["a", "c", "b"]), pa.array(["d"])]
    assert merge_vocab(parts).to_pylist() == ["b", "a", "c", "d"]


def test_srclen_fold_continues_the_line_order_sum_and_skips_empty_sides():
    m, n = np.array([3, 1, 0, 2]), np.array([2, 3, 4, 0])
    assert srclen_fold(0.0, m, n) == 3 / 2 + 1 / 3
    assert srclen_fold(srclen_fold(0.0, m[:1], n[:1]), m[1:], n[1:]) == np.cumsum([3 / 2, 1 / 3])[-1]


def test_a_part_with_a_pair_the_table_lacks_is_refused():
    s, t = encode(["a b"]), encode(["x y"])
    table = Theta.of_rows(np.array([0, 1], np.int32), np.array([0, 0], np.int32), np.array([0.5, 0.5]), 3)
    with pytest.raises(ModelError, match="a word pair the M-step's table lacks"):
        expected_counts(s, t, table, tension=4.0)


def test_a_table_over_another_vocabulary_is_refused():
    s, t = encode(["a b"]), encode(["x y"])
    table = Theta.of_rows(np.array([0], np.int32), np.array([0], np.int32), np.array([1.0]), 5)
    with pytest.raises(ModelError, match="not over this vocabulary"):
        expected_counts(s, t, table, tension=4.0)
