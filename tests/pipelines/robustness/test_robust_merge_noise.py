"""Merge and Noise (tasks/robustness/merge.py, noise.py): exact merges with offset alignments and lineage, noise
pairs within their rules, p = 0, the shares at p = 0.1, and a row's output whatever its shard."""

from __future__ import annotations

import unicodedata

import numpy as np
import pyarrow as pa
from robustness_helpers import make_pairs, many, within_3_se

from tasks.robustness.draws import row_states
from tasks.robustness.merge import merge, plan
from tasks.robustness.noise import SCRIPTS, noise

SRC = ["A dog runs .", "Two  men play", "I see a cat .", "hello", "x y"]
TGT = ["Ein Hund rennt .", "Zwei Männer spielen", "Ich sehe eine Katze .", "hallo", "x y"]
LINKS = ["0-0 1-1 2-2 3-3", "0-1 1-0 2-2", "0-0 1-1 2-2 3-3 4-4", "0-0", None]


def test_merge_joins_the_following_rows_with_offset_links_and_lists_its_parents():
    rows = make_pairs(SRC, TGT, LINKS)
    uids = rows["uid"].to_pylist()
    out = merge(rows, p=1.0, seed=0, max_lines=2)  # every row starts a merge of two; the last has no next row
    assert out["parents"].to_pylist() == [uids[0:2], uids[1:3], uids[2:4], uids[3:5]]
    assert out["parent_uid"].to_pylist() == uids[:4] and out["line"].to_pylist() == [1, 2, 3, 4]
    assert out["src"].to_pylist() == [
        "A dog runs . Two men play",  # the words joined by single spaces, as merge_sents does
        "Two men play I see a cat .",
        "I see a cat . hello",
        "hello x y",
    ]
    assert out["tgt"][0].as_py() == "Ein Hund rennt . Zwei Männer spielen"
    # the second part's links move by the first part's 4 source and 4 target words; a part without alignment: none
    assert out["links"].to_pylist() == [
        "0-0 1-1 2-2 3-3 4-5 5-4 6-6",
        "0-1 1-0 2-2 3-3 4-4 5-5 6-6 7-7",
        "0-0 1-1 2-2 3-3 4-4 5-5",
        None,
    ]
    wide = merge(rows, p=1.0, seed=0)  # min_lines 2, max_lines 4
    assert [[uids.index(u) for u in p] for p in wide["parents"].to_pylist()] == [[0, 1, 2, 3], [1, 2]]


def test_merged_links_are_each_parts_links_moved_by_the_words_before_it():
    rows = many(3000, links=True)
    out = merge(rows, p=0.2, seed=1, min_lines=2, max_lines=4)
    by_uid = {u: (s, t, ln) for u, s, t, ln in zip(*(rows[c].to_pylist() for c in ("uid", "src", "tgt", "links")), strict=True)}
    assert out.num_rows > 400
    for parents, links in zip(out["parents"].to_pylist(), out["links"].to_pylist(), strict=True):
        expected, ds, dt = [], 0, 0
        for uid in parents:
            s, t, ln = by_uid[uid]
            expected += [(int(a) + ds, int(b) + dt) for a, b in (p.split("-") for p in ln.split())]
            ds, dt = ds + len(s.split()), dt + len(t.split())
        assert links == " ".join(f"{a}-{b}" for a, b in sorted(expected)) and 2 <= len(parents) <= 4


def test_merge_p_0_changes_nothing_and_the_share_at_p_01_is_within_3_standard_errors():
    rows = many(10_000)
    assert merge(rows, p=0.0).num_rows == 0
    starts, k = plan(row_states(rows["uid"], seed=5, modifier="Merge"), 0.1, 2, 4)
    assert within_3_se(len(starts), 10_000, 0.1) and set(np.unique(k).tolist()) == {2, 3, 4}
    assert merge(rows, p=0.1, seed=5).num_rows == len(starts)


def test_a_merge_is_the_same_in_any_shard_that_holds_its_rows():
    rows = many(3000, links=True)
    whole = merge(rows, p=0.1, seed=2)
    shards = pa.concat_tables(merge(rows.slice(a, 100), p=0.1, seed=2) for a in range(0, 3000, 100))
    first = np.array(whole["line"].to_pylist()) - 1
    last = first + np.array([len(p) for p in whole["parents"].to_pylist()]) - 1
    inside = np.flatnonzero(first // 100 == last // 100)  # never merged across a shard boundary
    assert len(inside) < whole.num_rows and shards.equals(whole.take(pa.array(inside)))


def test_noise_makes_one_pair_per_chosen_row_within_its_rules():
    rows = make_pairs([f"a b{i}" for i in range(200)], ["x"] * 200, ["0-0", None, "0-0", "0-0"] * 50)
    out = noise(rows, p=0.5, seed=0, min_word_length=2, max_word_length=5, max_words=6)
    assert 60 < out.num_rows < 140 and out["src"].to_pylist() == out["tgt"].to_pylist()
    had_links = dict(zip(rows["uid"].to_pylist(), rows["links"].is_valid().to_pylist(), strict=True))
    for parent, text, links in zip(out["parent_uid"].to_pylist(), out["src"].to_pylist(), out["links"].to_pylist(), strict=True):
        words = text.split(" ")
        assert 1 <= len(words) <= 6 and len({len(w) for w in words}) == 1 and 2 <= len(words[0]) <= 5
        assert text.split() == words and not any(unicodedata.category(c) == "Zs" for c in text.replace(" ", ""))
        script = next(r for r in SCRIPTS if r[0] <= ord(text[0]) < r[1])
        assert all(script[0] <= ord(c) < script[1] for c in text.replace(" ", ""))  # one script
        assert links == (" ".join(f"{i}-{i}" for i in range(len(words))) if had_links[parent] else None)


def test_noise_p_0_changes_nothing_the_share_at_p_01_and_shards():
    rows = many(10_000)
    assert noise(rows, p=0.0).num_rows == 0
    out = noise(rows, p=0.1, seed=1)
    assert within_3_se(out.num_rows, 10_000, 0.1)
    assert pa.concat_tables(noise(rows.slice(a, 2500), p=0.1, seed=1) for a in range(0, 10_000, 2500)).equals(out)
