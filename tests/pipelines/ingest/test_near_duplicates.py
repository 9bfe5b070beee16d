"""Near-duplicate rows (tasks/ingest/near_duplicates.py, issue 28): Jaccard values counted by hand, the kept-row rule,
planted near copies found, determinism, and the MinHash signatures and LSH candidates equal to datasketch's own."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from conf.errors import ConfError
from tasks.ingest import near_duplicates as N

A20 = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen " + (
    "eighteen nineteen twenty"
)


def swap(text: str, *words: tuple[str, str]) -> str:
    """``text`` with each (old, new) word replaced."""
    new = dict(words)
    return " ".join(new.get(w, w) for w in text.split())


def run(texts: list[str], **params) -> N.NearDuplicates:
    return N.near_duplicates([f"k{i}" for i in range(len(texts))], pa.array(texts, pa.string()), **params)


def edited_corpus(n: int, seed: int) -> list[str]:
    """``n`` random sentences, then ``n`` near copies of them: a word replaced or dropped, punctuation added."""
    rng = random.Random(seed)
    words = ["a", "dog", "cat", "man", "woman", "runs", "walks", "on", "the", "beach", "in", "park", "red", "blue"]
    words += ["small", "big", "old", "young", "near"]
    base = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))) for _ in range(n)]
    copies = []
    for _ in range(n):
        edit = rng.choice(base).split()
        k = rng.randrange(len(edit))
        edit[k : k + 1] = rng.choice([[], [rng.choice(words)], [edit[k] + ","]])
        copies.append(" ".join(edit))
    return base + copies


def test_normalise_folds_case_punctuation_and_whitespace():
    assert N.normalise("  Hello,\u00a0WORLD!!  ﬁne\tdon't ") == "hello world fine don t"  # NFKC: ﬁ is fi
    assert N.normalise("A dog, running.") == N.normalise("a dog running") == "a dog running"
    assert N.normalise("...") == "" and N.normalise("") == ""
    assert N.normalise_column(pa.array(["Größe:  10 €", None])).to_pylist() == ["größe 10 €", ""]  # € is \p{Sc}


def test_jaccard_by_hand_char_and_word_shingles():
    # "abcdefgh" has the 5-grams abcde bcdef cdefg defgh; "abcdefgx" shares the first three: 3 / (4 + 4 − 3)
    assert N.shingles("abcdefgh") == {"abcde", "bcdef", "cdefg", "defgh"}
    assert N.jaccard(N.shingles("abcdefgh"), N.shingles("abcdefgx")) == 3 / 5
    assert N.shingles("abc") == {"abc"} and N.shingles("") == set() and N.jaccard(set(), set()) == 1.0
    # 20 distinct words, one replaced: 19 shared of 21; two replaced: 18 of 22
    a = N.shingles(A20, shingle="word", n=1)
    assert len(a) == 20
    assert N.jaccard(a, N.shingles(swap(A20, ("ten", "dog")), shingle="word", n=1)) == 19 / 21
    assert N.jaccard(a, N.shingles(swap(A20, ("ten", "dog"), ("two", "cat")), shingle="word", n=1)) == 18 / 22
    assert N.shingles("a b c", shingle="word", n=2) == {"a b", "b c"}


def test_near_duplicates_hand_cases_with_exact_jaccard_and_details():
    sentence = "a small boy in a red jacket is climbing over the wooden fence"  # 61 characters, 57 distinct 5-grams
    assert len(sentence) == 61 and len(N.shingles(sentence)) == 57
    texts = [
        "A dog, running on the beach!",
        "a dog running on the beach",  # the same after normalising: J = 1
        "abcdefgh",
        "abcdefgx",  # 3/5 of the 5-grams shared
        sentence,
        sentence.replace("wooden", "woolen"),  # one letter: the 5 windows over it change, J = 52 / (57 + 5)
        "Two women are drinking coffee at a small table outside a cafe.",  # nothing like the others
        "A dog, running on the beach!",  # an exact copy
    ]
    got = run(texts, threshold=0.6)
    assert got.keep.tolist() == [True, False, True, False, True, False, True, False]
    assert got.duplicate_of.tolist() == [-1, 0, -1, 2, -1, 4, -1, 0]
    assert got.value.tolist() == [0, 1, 0, 3 / 5, 0, 52 / 62, 0, 1]
    assert got.detail[:6] == [None, "near_duplicate_of=k0 jaccard=1", None, "near_duplicate_of=k2 jaccard=0.6", None,
                              "near_duplicate_of=k4 jaccard=0.8387"]  # fmt: skip
    assert run(texts).keep.tolist() == [True, False, True, True, True, False, True, False]  # at 0.8: 3/5 is kept


def test_near_duplicates_compares_with_kept_rows_only_and_names_the_first():
    b = swap(A20, ("ten", "dog"))
    c = swap(A20, ("ten", "dog"), ("two", "cat"))  # J(b, c) = 19/21, J(a, c) = 18/22 < 0.85
    chain = run([A20, b, c], shingle="word", n=1, threshold=0.85)
    assert chain.keep.tolist() == [True, False, True]  # b goes as a copy of a; c is compared with a only
    assert chain.detail[1] == f"near_duplicate_of=k0 jaccard={round(19 / 21, 4)}"
    # b is within 0.85 of both a and c (both kept, J(a, c) = 18/22): it names the first
    first = run([A20, c, b, b + "!"], shingle="word", n=1, threshold=0.85)
    assert first.keep.tolist() == [True, True, False, False]
    assert first.duplicate_of.tolist() == [-1, -1, 0, 0]  # the copy of a dropped row goes to that row's kept one
    assert first.value[2] == first.value[3] == 19 / 21


def test_near_duplicates_finds_planted_punctuation_and_one_word_edits():
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(2000)]
    base = [" ".join(rng.sample(vocabulary, 30)) for _ in range(300)]  # 30 distinct words each
    texts, planted = list(base), {}
    for i in rng.sample(range(300), 60):
        words = base[i].split()
        if len(planted) % 2:
            copy = " ".join(words[:10]) + ", " + " ".join(words[10:]) + "."  # punctuation only: J = 1
        else:
            words[rng.randrange(30)] = "edited"  # one word: J = 29/31 = 0.9355
            copy = " ".join(words)
        planted[len(texts)] = i
        texts.append(copy)
    got = run(texts, shingle="word", n=1, threshold=0.9)
    assert got.keep[:300].all() and not got.keep[300:].any()  # every copy found, no original lost
    assert {i: int(got.duplicate_of[i]) for i in planted} == planted
    assert sorted(set(got.value[300:].round(4))) == [0.9355, 1.0]


def test_near_duplicates_is_deterministic(monkeypatch):
    texts = edited_corpus(300, seed=3)
    first = run(texts, threshold=0.7)
    run(texts[::-1], threshold=0.5, num_perm=64)  # another call in between changes nothing
    again = run(texts, threshold=0.7)
    monkeypatch.setattr(N, "CHUNK_SHINGLES", 7)  # signatures computed a few rows at a time
    chunked = run(texts, threshold=0.7)
    for other in (again, chunked):
        assert other.keep.tolist() == first.keep.tolist() and other.duplicate_of.tolist() == first.duplicate_of.tolist()
        assert other.detail == first.detail
    assert 150 < (~first.keep).sum() < 450  # a corpus with many near copies


@pytest.mark.parametrize("shingle, n", [("char", 5), ("char", 3), ("word", 2)])
def test_signatures_and_candidates_are_datasketchs(shingle, n):
    from datasketch import LeanMinHash, MinHash, MinHashLSH

    texts = edited_corpus(100, seed=1) + ["", "ab", "Ünïcödé ß"]
    normalised = N.normalise_column(pa.array(texts))
    sig = N.signatures(normalised, shingle=shingle, n=n, num_perm=64, seed=5)
    for i, text in enumerate(normalised.to_pylist()):
        m = MinHash(num_perm=64, seed=5, hashfunc=N.shingle_hash)
        m.update_batch(list(N.shingles(text, shingle=shingle, n=n)))
        assert np.array_equal(sig[i], m.hashvalues), text
    bands, rows = N.lsh_params(0.7, 64)
    lsh = MinHashLSH(num_perm=64, params=(bands, rows))
    sketches = [LeanMinHash(seed=5, hashvalues=s, scheme="affine32") for s in sig]
    for i, m in enumerate(sketches):
        lsh.insert(i, m)
    expected = sorted((i, j) for i, m in enumerate(sketches) for j in lsh.query(m) if j < i)
    assert [(i, j) for j, i in N.candidate_pairs(sig, bands=bands, rows=rows).tolist()] == expected
    assert len(expected) > 100


def test_lsh_params_and_parameter_errors():
    assert N.lsh_params(0.8, 128) == (16, 8)  # P(miss) = (1 − J⁸)¹⁶: 5.3 % at J = 0.8, 0.01 % at 0.9
    with pytest.raises(ConfError, match="parameter shingle: expected one of char, word, found 'line'"):
        run(["a"], shingle="line")
    with pytest.raises(ConfError, match="0 < threshold <= 1"):
        run(["a"], threshold=0)
    assert run([]).keep.tolist() == []
