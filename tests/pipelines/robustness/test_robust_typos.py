"""Typos (tasks/robustness/typos.py): each of typo's nine kinds and OpusTrainer's three alignment-keeping variants
with scripted positions, exact outputs of the stage, p = 0, p = 1 with each kind's own probability, the share at
p = 0.1, source side only, and a row's output whatever its shard."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from robustness_helpers import diagonal, make_pairs, many, within_3_se

from tasks.robustness import typos as T
from tasks.robustness.draws import Stream, row_states


class Scripted(Stream):
    """A stream whose ``below(n)`` answers are given in advance (each must be < n)."""

    def __init__(self, *answers: int) -> None:
        super().__init__(0)
        self.answers = list(answers)

    def below(self, n: int) -> int:
        k = self.answers.pop(0)
        assert 0 <= k < n
        return k


@pytest.mark.parametrize(
    "kind, text, answers, expected",
    [
        ("char_swap", "Happy day", (0,), "Ahppy day"),  # typo's own example: the cases stay in place
        ("char_swap", "Happy day", (4,), "Happy ady"),  # candidates: H a p p (not y: a space follows) d a
        ("missing_char", "ab c", (2,), "ab "),
        ("missing_char", "a !", (), "a !"),  # one word character only: unchanged, nothing drawn
        ("extra_char", "cat", (0, 1), "dcat"),  # c's neighbours: x d f v
        ("extra_char", "A7", (0, 0), "QA7"),  # an upper-case letter gets an upper-case neighbour
        ("extra_char", "7", (0, 0, 2), "47"),  # a digit: the numpad (8 5 4) …
        ("extra_char", "7", (0, 1, 0), "87"),  # … or one up …
        ("extra_char", "7", (0, 1, 1), "67"),  # … or down
        ("nearby_char", "Dog", (0, 2), "Rog"),
        ("similar_char", "bog", (0, 0), "6og"),
        ("similar_char", "xa", (0,), "xa"),  # x has no look-alike: unchanged
        ("skipped_space", "a b  c", (1,), "a b c"),
        ("random_space", "ab", (1,), "a b"),
        ("repeated_char", "ab!", (1,), "abb!"),
        ("unichar", "aaa bb", (1,), "aaa b"),  # pairs do not overlap: "aa" at 0 and "bb" at 4
    ],
)
def test_each_kind_follows_typos_rule(kind, text, answers, expected):
    stream = Scripted(*answers)
    assert T.APPLY[kind](text, stream) == expected and not stream.answers


def test_random_space_inside_a_word_gives_both_halves_its_links():
    assert T.random_space_aligned("ab cd", [(0, 0), (1, 1)], Scripted(2)) == ("ab c d", [(0, 0), (1, 1), (2, 1)])
    assert T.random_space_aligned("ab cd", [(0, 0), (1, 1)], Scripted(1)) == ("ab  cd", [(0, 0), (1, 1)])  # before a word


def test_skipped_space_between_words_joins_their_links():
    assert T.skipped_space_aligned("a b c", [(0, 0), (1, 1), (2, 2)], Scripted(0)) == ("ab c", [(0, 0), (0, 1), (1, 2)])


def test_missing_char_of_a_one_letter_word_hands_its_links_to_a_neighbour():
    links = [(0, 0), (1, 1), (2, 2)]
    assert T.missing_char_aligned("x a yz", links, Scripted(1, 0)) == ("x  yz", [(0, 0), (0, 1), (1, 2)])  # left
    assert T.missing_char_aligned("x a yz", links, Scripted(1, 1)) == ("x  yz", [(0, 0), (1, 1), (1, 2)])  # right
    assert T.missing_char_aligned("ab c", [(0, 0), (1, 1)], Scripted(2, 0)) == ("ab ", [(0, 0), (0, 1)])  # last: left


SRC = ["The cat sat on the mat .", "A man plays football", "Hello"]
TGT = ["Die Katze saß auf der Matte .", "Ein Mann spielt Fußball", "Hallo"]


def test_the_stage_gives_these_exact_outputs_for_seed_0():
    rows = make_pairs(SRC, TGT, diagonal(SRC, TGT))
    out = T.typos(rows, p=1.0, seed=0, kinds={"char_swap": 0.5, "missing_char": 0.5, "random_space": 0.5})
    assert out["src"].to_pylist() == ["The ct sat on the mat .", "A mn plays fo otball", "Hel o"]
    assert out["links"].to_pylist() == ["0-0 1-1 2-2 3-3 4-4 5-5 6-6", "0-0 1-1 2-2 3-3 4-3", "0-0 1-0"]  # split words
    assert out["tgt"].to_pylist() == TGT  # the source side only


def test_naming_kinds_applies_only_those_in_their_order():
    rows = make_pairs(["ab cd"] * 3, ["x"] * 3)
    out = T.typos(rows, p=1.0, kinds={"random_space": 1.0, "repeated_char": 1.0})
    assert all(len(s) == 7 and s.count(" ") == 2 for s in out["src"].to_pylist())  # one space, one letter more
    assert T.typos(rows, p=1.0, kinds={"unichar": 1.0}).num_rows == 0  # nothing doubled: unchanged rows are not emitted


def test_p_0_changes_nothing():
    assert T.typos(many(2000), p=0.0).num_rows == 0


def test_at_p_1_every_row_is_considered_and_each_kind_applied_with_its_own_probability():
    states = row_states(many(10_000)["uid"], seed=0, modifier="Typos")
    kinds = {"char_swap": 0.3, "unichar": 0.05, "random_space": 0.8}
    chosen, applied = T.decisions(states, 1.0, kinds)
    assert len(chosen) == 10_000
    for column, p in enumerate(kinds.values()):
        assert within_3_se(int(applied[:, column].sum()), 10_000, p)
    defaults = T.decisions(states, 1.0, T.typo_kinds(None))[1]
    assert defaults.shape == (10_000, 9) and all(within_3_se(int(c), 10_000, 0.1) for c in defaults.sum(axis=0))


def test_the_share_at_p_01_is_within_3_standard_errors():
    rows = many(10_000, links=True)
    out = T.typos(rows, p=0.1, seed=2, kinds={"repeated_char": 1.0})  # always changes a row with a letter
    assert within_3_se(out.num_rows, 10_000, 0.1)


def test_a_row_comes_out_the_same_whatever_its_shard():
    rows = many(3000, links=True)
    whole = T.typos(rows, p=0.3, seed=4)
    shards = pa.concat_tables(T.typos(rows.slice(a, 1000), p=0.3, seed=4) for a in (0, 1000, 2000))
    assert shards.equals(whole)


def test_links_stay_inside_the_words_after_every_kind():
    rows = many(3000, links=True)
    out = T.typos(rows, p=1.0, seed=1, kinds=dict.fromkeys(T.KINDS, 0.5))
    for src, tgt, links in zip(out["src"].to_pylist(), out["tgt"].to_pylist(), out["links"].to_pylist(), strict=True):
        pairs = np.array([[int(x) for x in p.split("-")] for p in links.split()])
        assert pairs[:, 0].max() < len(src.split()) and pairs[:, 1].max() < len(tgt.split())
