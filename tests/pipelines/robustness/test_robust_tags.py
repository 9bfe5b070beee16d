"""Tags (tasks/robustness/tags.py): OpusTrainer's candidates (one-to-one links whose words differ, scanned from an
offset), exact outputs, every tag around a pair of words aligned to each other, no tag inside a token, balanced tags,
the updated links, p = 0 and p = 1, the share at p = 0.1, the modes, and a row's output whatever its shard."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from robustness_helpers import diagonal, make_pairs, many, within_3_se

from conf.errors import InputError
from tasks.robustness.rows import FlatLinks
from tasks.robustness.tags import candidates, tags

TAGS = ("__source__", "__target__", "__done__")


@pytest.mark.parametrize(
    "links, differ, expected",
    [
        ("0-0 1-1 2-2", [1, 1, 1], [1, 1, 1]),
        ("0-0 1-1 2-2", [1, 0, 1], [1, 0, 1]),  # equal words (a number) are never tagged
        ("0-0 0-1 1-2", [1, 1, 1], [0, 0, 1]),  # source word 0 has two links
        ("0-1 1-0 2-1", [1, 1, 1], [0, 1, 1]),  # 2-1 shares target 1 only with 0-1, before the offset: OpusTrainer's rule
        ("0-1 1-1 2-0 3-1", [1, 1, 1, 1], [0, 0, 1, 1]),  # 3-1: after 2-0, the links sharing its target are behind
        ("0-1 1-0 2-2 3-1", [1, 1, 1, 1], [0, 1, 1, 1]),
    ],
)
def test_candidates_follow_opustrainers_scan(links, differ, expected):
    flat = FlatLinks.of(pa.array([links]), pa.array(["u"]))
    assert candidates(flat, np.array(differ, bool), 1).astype(int).tolist() == expected


SRC = ["A dog runs in the grass .", "Two men play 11 football", "hello", "I see"]
TGT = ["Ein Hund rennt im Gras .", "Zwei Männer spielen 11 Fußball", "hallo", "Ich sehe"]
LINKS = ["0-0 1-1 2-2 3-3 4-3 5-4 6-5", "0-0 1-1 2-2 3-3 4-4", "0-0", None]


def test_tag_mode_at_p_1_tags_every_candidate():
    out = tags(make_pairs(SRC, TGT, LINKS), p=1.0, seed=0)
    assert out["src"].to_pylist() == [
        "__source__ A __target__ Ein __done__ __source__ dog __target__ Hund __done__ "
        "__source__ runs __target__ rennt __done__ in the __source__ grass __target__ Gras __done__ .",
        "__source__ Two __target__ Zwei __done__ __source__ men __target__ Männer __done__ "
        "__source__ play __target__ spielen __done__ 11 __source__ football __target__ Fußball __done__",
        "__source__ hello __target__ hallo __done__",
    ]
    assert out["tgt"].to_pylist() == TGT[:3]  # the target keeps its words; no tag there
    assert out["links"][2].as_py() == "1-0 3-0"  # the source word and its copy in the tag, both to hallo
    assert out["line"].to_pylist() == [1, 2, 3]  # a row without alignment is left alone


def test_exact_outputs_at_p_05_with_augment():
    out = tags(make_pairs(SRC, TGT, LINKS), p=0.5, seed=0, augment=0.5)
    src, tgt = out["src"].to_pylist(), out["tgt"].to_pylist()
    assert src[0] == "__source__ A __target__ Ein __done__ dog runs in the grass ." and tgt[0] == TGT[0]
    noise = src[1].split()[7:9]  # augment: the same random words after "play" and after "spielen"
    assert src[1].split() == ["__source__", "Two", "__target__", "Zwei", "__done__", "men", "play", *noise, "11", "football"]
    assert tgt[1].split() == ["Zwei", "Männer", "spielen", *noise, "11", "Fußball"]
    assert len({len(w) for w in noise}) == 1  # one length for all the words of one draw
    armenian = src[2].split()[1:]
    assert src[2].split() == ["hello", *armenian] and tgt[2].split() == ["hallo", *armenian] and len(armenian) == 3
    assert all(0x0530 <= ord(c) < 0x058F for c in "".join(armenian))  # one script per draw
    assert out["links"].to_pylist() == ["1-0 3-0 5-1 6-2 7-3 8-3 9-4 10-5", "1-0 3-0 5-1 6-2 7-3 8-4 9-5 10-6", "0-0 1-1 2-2 3-3"]


def words_of(src: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The source's own words (tags and their target copies left out) and each tag's (source word, target words)."""
    words, spans, tokens, i = [], [], src.split(), 0
    while i < len(tokens):
        if tokens[i] == "__source__":
            end = tokens.index("__done__", i)
            assert tokens[i + 2] == "__target__" and "__source__" not in tokens[i + 1 : end]  # balanced, not nested
            words.append(tokens[i + 1])
            spans.append((tokens[i + 1], " ".join(tokens[i + 3 : end])))
            i = end + 1
        else:
            assert tokens[i] not in TAGS  # no tag out of place
            words.append(tokens[i])
            i += 1
    return words, spans


def test_every_tag_wraps_words_aligned_one_to_one_and_tags_are_balanced_whole_tokens():
    rows = many(2000, links=True)
    out = tags(rows, p=0.3, seed=1)
    originals = dict(
        zip(
            rows["uid"].to_pylist(),
            zip(rows["src"].to_pylist(), rows["tgt"].to_pylist(), rows["links"].to_pylist(), strict=True),
            strict=True,
        )
    )
    assert out.num_rows > 1000
    for parent, src, tgt, links in zip(
        out["parent_uid"].to_pylist(), out["src"].to_pylist(), out["tgt"].to_pylist(), out["links"].to_pylist(), strict=True
    ):
        old_src, old_tgt, old_links = originals[parent]
        words, spans = words_of(src)
        assert words == old_src.split() and tgt == old_tgt  # nothing inside a token changed; the target as it was
        assert not any(t in tgt.split() for t in TAGS)
        aligned = {(old_src.split()[a], old_tgt.split()[b]) for a, b in (map(int, p.split("-")) for p in old_links.split())}
        assert all(span in aligned for span in spans)
        tokens, target = src.split(), tgt.split()
        for a, b in (map(int, p.split("-")) for p in links.split()):  # the links after tagging join equal words
            assert tokens[a] == target[b] or (tokens[a], target[b]) in aligned


def test_p_0_changes_nothing_and_p_1_tags_every_candidate_of_every_row():
    rows = many(500, links=True)
    assert tags(rows, p=0.0).num_rows == 0
    out = tags(rows, p=1.0)
    assert out.num_rows == 500 and all(s.count("__source__") == 8 for s in out["src"].to_pylist())  # 9 links, "." equal


def test_the_share_at_p_01_is_within_3_standard_errors():
    src, tgt = [f"word{i} ." for i in range(10_000)], [f"Wort{i} ." for i in range(10_000)]
    rows = make_pairs(src, tgt, diagonal(src, tgt))  # one candidate per row
    assert within_3_se(tags(rows, p=0.1, seed=3).num_rows, 10_000, 0.1)


def test_modes_are_drawn_by_weight():
    src, tgt = [f"word{i} ." for i in range(10_000)], [f"Wort{i} ." for i in range(10_000)]
    out = tags(make_pairs(src, tgt, diagonal(src, tgt)), p=1.0, seed=0, augment=0.3, replace=0.2)
    tagged = sum("__source__" in s for s in out["src"].to_pylist())
    replaced = sum(
        "__source__" in s and not t.startswith("Wort")
        for s, t in zip(out["src"].to_pylist(), out["tgt"].to_pylist(), strict=True)
    )
    assert within_3_se(10_000 - tagged, 10_000, 0.3) and within_3_se(replaced, 10_000, 0.2)


def test_a_row_comes_out_the_same_whatever_its_shard():
    rows = many(3000, links=True)
    whole = tags(rows, p=0.1, seed=4, augment=0.2)
    shards = pa.concat_tables(tags(rows.slice(a, 1000), p=0.1, seed=4, augment=0.2) for a in (0, 1000, 2000))
    assert shards.equals(whole)


def test_links_past_the_words_or_no_links_column_are_input_errors():
    with pytest.raises(InputError, match="point past its 2 source / 2 target words"):
        tags(make_pairs(["a b"], ["c d"], ["0-0 2-1"]), p=0.5)
    with pytest.raises(InputError, match="missing links"):
        tags(make_pairs(["a b"], ["c d"]), p=0.5)
    with pytest.raises(InputError, match="expected Pharaoh pairs"):
        tags(make_pairs(["a b"], ["c d"], ["0:0"]), p=0.5)
