"""The corpus filters (tasks/ingest/filters.py): exact keep/drop decisions and details on hand-written pairs, and
the same decisions and scores as a plain per-sentence implementation of OpusFilter's definitions on a noisy
generated corpus (mixed scripts, digits, HTML, repeats, empty lines, unusual whitespace)."""

from __future__ import annotations

import difflib
import math
import random

import numpy as np
import pyarrow as pa
import pytest
import regex

from tasks.ingest import filters as F

PAIRS = [  # (src, tgt): the cases of the issue, and the edges of each definition
    ("Page 12 of 14.", "Seite 12 von 40."),
    ("Hello world!", "Hallo Welt!"),
    ("<div>Click here</div>", "<div>Hier klicken</div>"),
    ("hahahahahahaha", "hahahahahahaha"),
    ("x" * 300, "y"),
    ("This is a house.", "Это дом."),  # a Cyrillic line on the German side
    ("", ""),
    ("What? Really?! Yes...", "Was? Wirklich"),
    ("a < b and c > d", "a < b und c > d"),
]
SRC, TGT = (pa.array([p[i] for p in PAIRS]) for i in (0, 1))


def test_each_filter_decides_the_hand_written_pairs_with_their_details():
    alpha = F.alphabet_ratio(SRC)
    assert alpha.keep.tolist() == [False, True, False, True, True, True, True, False, False]
    assert alpha.detail[:2] == ["alphabet_ratio=0.4286", None]  # 6 of 14 letters; a kept row has no detail
    assert alpha.value[[1, 5, 6]].tolist() == [10 / 12, 0.75, 1.0]  # 0.75 is kept (>=); an empty side scores 1
    assert alpha.detail[7:] == ["alphabet_ratio=0.619", "alphabet_ratio=0.4667"]
    cyrillic = F.character_score(TGT, script="Latin")
    assert cyrillic.keep.tolist() == [True] * 5 + [False] + [True] * 3
    assert cyrillic.detail[5] == "character_score=0" and cyrillic.value[6] == 1.0  # no letters: 1
    long = F.long_word(SRC)
    assert long.keep.tolist() == [True] * 4 + [False] + [True] * 4 and long.detail[4] == "longest_word=300"
    assert long.value.tolist() == [4, 6, 10, 14, 300, 6, 0, 8, 3]
    ratio = F.length_ratio(SRC, TGT)
    assert ratio.value[5:8].tolist() == [2.0, 0.0, 1.5] and ratio.keep.all()  # 4/2; both empty; 3/2
    punct = F.terminal_punctuation(SRC, TGT)
    assert punct.keep.tolist() == [True] * 7 + [False, True]
    assert punct.detail[7] == "terminal_punctuation=-2.3979"  # 6 marks vs 1: -log(|6 - 1| + (6 - 1) + 0 + 1)
    numerals = F.non_zero_numerals(SRC, TGT, threshold=0.9)
    assert numerals.keep.tolist() == [False] + [True] * 8
    assert numerals.detail[0] == "non_zero_numerals=0.8571 (1214 vs 124)"  # zeros removed: "40" is 4
    repeats = F.repetition([SRC, TGT])
    assert repeats.keep.tolist() == [True] * 3 + [False, False] + [True] * 4
    assert repeats.detail[3:5] == ["repetition=2 ('haha')", "repetition=99 ('xxx')"]
    html = F.html_tags([SRC, TGT])
    assert html.keep.tolist() == [True, True, False] + [True] * 6  # "a < b and c > d" is no tag
    assert html.detail[2] == "html_tags=1"


def test_length_counts_words_or_characters_per_side():
    words, ok = F.length(SRC, min_length=1, max_length=3)
    assert words.tolist() == [4, 2, 2, 1, 1, 4, 0, 3, 7]  # "<" and ">" are words
    assert ok.tolist() == [False, True, True, True, True, False, False, True, False]
    chars, _ = F.length(TGT, unit="char")
    assert chars.tolist() == [len(t) for _, t in PAIRS]


# -- OpusFilter's definitions, one sentence at a time (the plain way, to compare with) ------------------------


def naive_alphabet_ratio(s: str, exclude_whitespace: bool) -> float:
    if exclude_whitespace:
        s = regex.sub(r"\s", "", s)
    return len(regex.sub(r"\p{Alphabetic=No}", "", s)) / len(s) if s else 1.0


def naive_character_score(s: str, script: str) -> float:
    alphas = regex.sub(r"\p{Alphabetic=No}", "", s)
    return len(regex.sub(rf"\p{{^Script={script}}}", "", alphas)) / len(alphas) if alphas else 1.0


def naive_length_ratio(a: str, b: str) -> float:
    low, high = sorted((len(a.split()), len(b.split())))
    return (0.0 if high == 0 else math.inf) if low == 0 else high / low


def naive_terminal_punctuation(a: str, b: str) -> float:
    s, t = (sum(c in ".?!…" for c in x) for x in (a, b))
    return -math.log(abs(s - t) + max(s - 1, 0) + max(t - 1, 0) + 1)


def naive_numerals(a: str, b: str) -> float:
    digits = [[c for c in x if c in "123456789"] for x in (a, b)]
    return difflib.SequenceMatcher(None, *digits).ratio()


def naive_repeats(s: str) -> int:
    match = regex.search(r"(\S.{2,100}?)(?: *\1){2,}", s)
    return match.group(0).count(match.group(1)) - 1 if match else 0


def noisy_corpus(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    words = ["the", "house", "Haus", "дом", "maison", "12", "2024", "0", "ok!", "why?", "…", "<b>", "</b>", "é", "ß"]
    words += ["日本", "ﬁne", "\u00a0", "\u2003", "\x1c", "a\u0301", "x" * 45, "ab", "٣", "½"]

    def line() -> str:
        kind = rng.random()
        if kind < 0.05:
            return ""
        if kind < 0.1:
            return (rng.choice(words) + rng.choice(["", " ", "  "])) * rng.randint(2, 6)
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))

    return [line() for _ in range(n)], [line() for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_same_decisions_and_scores_as_the_definitions_sentence_by_sentence(seed):
    src, tgt = noisy_corpus(2000, seed)
    s, t = pa.array(src), pa.array(tgt)

    for exclude in (False, True):
        expected = np.array([naive_alphabet_ratio(x, exclude) for x in src])
        got = F.alphabet_ratio(s, threshold=0.75, exclude_whitespace=exclude)
        assert got.keep.tolist() == (expected >= 0.75).tolist()
        np.testing.assert_allclose(got.value, expected, rtol=1e-12)  # the same divisions, in numpy
    for script in ("Latin", "Cyrillic"):
        expected = np.array([naive_character_score(x, script) for x in tgt])
        assert F.character_score(t, script=script, threshold=0.9).keep.tolist() == (expected >= 0.9).tolist()
    longest = np.array([max((len(w) for w in x.split()), default=0) for x in src])
    assert F.long_word(s, threshold=40).keep.tolist() == (longest < 40).tolist()
    words, _ = F.length(s)
    assert words.tolist() == [len(x.split()) for x in src]  # str.split(): \x1c is a separator, NBSP too
    ratio = np.array([naive_length_ratio(a, b) for a, b in zip(src, tgt, strict=True)])
    assert F.length_ratio(s, t, threshold=3).keep.tolist() == (ratio < 3).tolist()
    punct = np.array([naive_terminal_punctuation(a, b) for a, b in zip(src, tgt, strict=True)])
    assert F.terminal_punctuation(s, t, threshold=-2).keep.tolist() == (punct >= -2).tolist()
    numerals = np.array([naive_numerals(a, b) for a, b in zip(src, tgt, strict=True)])
    assert F.non_zero_numerals(s, t, threshold=0.5).keep.tolist() == (numerals >= 0.5).tolist()
    repeats = np.array([max(naive_repeats(a), naive_repeats(b)) for a, b in zip(src, tgt, strict=True)])
    assert F.repetition([s, t], threshold=2).keep.tolist() == (repeats < 2).tolist()
    assert 0 < (repeats >= 2).sum() < len(src)  # the corpus has both
