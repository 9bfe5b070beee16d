"""Prefix and RemoveEndPunct (tasks/robustness/prefix.py, punctuation.py): exact outputs, moved links, OpusTrainer's
mark rules, p = 0, the share at p = 0.1, and a row's output whatever its shard."""

from __future__ import annotations

import pyarrow as pa
from robustness_helpers import diagonal, make_pairs, many, within_3_se

from tasks.robustness.prefix import fill, prefix
from tasks.robustness.punctuation import ends_with_punctuation, remove_end_punctuation

SRC = ["A dog runs in the park .", "Hi", "Two men play football"]
TGT = ["Ein Hund rennt im Park .", "Hallo", "Zwei Männer spielen Fußball"]


def test_prefix_puts_a_span_of_the_target_before_the_source_and_moves_the_links():
    out = prefix(make_pairs(SRC, TGT, diagonal(SRC, TGT)), p=1.0, seed=0)
    assert out["src"].to_pylist() == [
        "__start__ Ein Hund rennt im Park __end__ A dog runs in the park .",
        "__start__ Zwei Männer spielen Fußball __end__ Two men play football",
    ]  # "Hallo" has fewer than min_words target words: left as it is
    assert out["links"].to_pylist() == ["7-0 8-1 9-2 10-3 11-4 12-5", "6-0 7-1 8-2 9-3"]
    assert out["tgt"].to_pylist() == [TGT[0], TGT[2]] and out["line"].to_pylist() == [1, 3]


def test_prefix_spans_are_n_consecutive_target_words_with_n_in_range():
    rows = many(2000)
    out = prefix(rows, p=1.0, seed=1, min_words=1, max_words=3)
    targets = dict(zip(rows["uid"].to_pylist(), rows["tgt"].to_pylist(), strict=True))
    lengths = set()
    for parent, src in zip(out["parent_uid"].to_pylist(), out["src"].to_pylist(), strict=True):
        span = src.split(" __end__ ")[0].removeprefix("__start__ ").split()
        words = targets[parent].split()
        lengths.add(len(span))
        assert any(words[i : i + len(span)] == span for i in range(len(words)))
    assert lengths == {1, 2, 3} and out.num_rows == 2000


def test_fill_is_str_format():
    trg = pa.array(["a b", "c"])
    for template in ("__start__ {trg} __end__ ", "<{trg}>{trg}", "{trg!r} {{x}}"):
        assert fill(template, trg).to_pylist() == [template.format(trg=v) for v in trg.to_pylist()]


def test_remove_end_punctuation_follows_opustrainers_rules():
    src = ["Hello .", "Hello!", "Hello!?", "Hello . . .", "你好。", "Hello.", "Wait;", "Hello", "", "Hi ."]
    tgt = ["Hallo .", "Hallo!", "Hallo!", "Hallo .", "Hello.", "Hallo!", "Warte;", "Hallo", "", "Hallo ,"]
    assert ends_with_punctuation(pa.array(src), pa.array(tgt)).tolist() == [
        True,  # one mark each side, of one kind
        True,
        False,  # two marks
        False,  # two marks, spaced
        True,  # a CJK full stop and a period are one kind
        False,  # a period and an exclamation mark are not
        True,  # ";" is a semicolon and, in Greek, a question mark
        False,
        False,  # empty (OpusTrainer raises)
        False,  # a period and a comma
    ]


def test_remove_end_punctuation_removes_the_marks_and_the_links_of_a_word_that_disappears():
    src, tgt = ["A dog .", "A dog.", "你好。"], ["Ein Hund .", "Ein Hund.", "Hi."]
    out = remove_end_punctuation(make_pairs(src, tgt, ["0-0 1-1 2-2", "0-0 1-1", "0-0"]), p=1.0, seed=0)
    assert out["src"].to_pylist() == ["A dog", "A dog", "你好"] and out["tgt"].to_pylist() == ["Ein Hund", "Ein Hund", "Hi"]
    assert out["links"].to_pylist() == ["0-0 1-1", "0-0 1-1", "0-0"]  # "dog." keeps its link as "dog"


def test_p_0_changes_nothing_and_the_shares_at_p_01():
    rows = many(10_000, links=True)
    assert prefix(rows, p=0.0).num_rows == 0 and remove_end_punctuation(rows, p=0.0).num_rows == 0
    assert within_3_se(prefix(rows, p=0.1, seed=2).num_rows, 10_000, 0.1)  # every target has 10 words
    assert within_3_se(remove_end_punctuation(rows, p=0.1, seed=2).num_rows, 10_000, 0.1)  # every row ends with " ."


def test_a_row_comes_out_the_same_whatever_its_shard():
    rows = many(3000, links=True)
    for stage in (prefix, remove_end_punctuation):
        whole = stage(rows, p=0.2, seed=3)
        assert pa.concat_tables(stage(rows.slice(a, 1000), p=0.2, seed=3) for a in (0, 1000, 2000)).equals(whole)
