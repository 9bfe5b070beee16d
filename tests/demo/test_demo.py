"""The demo corpora: determinism, streaming, the planted ambiguity, gold alignments, formats and bad rows."""

from __future__ import annotations

import inspect
import json
import math
from collections import Counter, defaultdict
from itertools import islice

import pytest

import demo
from conf.errors import ConfError
from conf.schema import DemoConf
from demo import DemoPaths, ambiguous_words, translation_table, word_entropy, write_demo
from demo.draws import CHUNK_ROWS
from demo.grammar import CLASS_WORDS, TEMPLATES
from demo.labeled import LABEL_NOUNS

DATA_FILES = [
    "train.en",
    "train.de",
    "train.align",
    "test.en",
    "test.de",
    "mono.en",
    "labeled.tsv",
    "slots.jsonl",
    "labeled_test.tsv",
    "slots_test.jsonl",
    "slots_small.jsonl",
    "slots_small_test.jsonl",
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The default demo (3,000 pairs) with bad rows: (paths, planted, {file name: raw lines})."""
    paths, planted = write_demo(tmp_path_factory.mktemp("demo"))
    raw = {name: (paths.root / name).read_bytes().split(b"\n") for name in DATA_FILES + ["lexicon.tsv"]}
    assert all(lines[-1] == b"" for lines in raw.values())  # every file ends with a newline
    return paths, planted, {name: lines[:-1] for name, lines in raw.items()}


def links(alignment: str) -> list[tuple[int, int]]:
    return [tuple(map(int, link.split("-"))) for link in alignment.split()]


def translations(src: str, tgt: str, alignment: str) -> list[tuple[str, str]]:
    """(source word, the target words linked to it in target order) for every source word."""
    linked = defaultdict(list)
    for i, j in links(alignment):
        linked[i].append(j)
    tgt_words = tgt.split()
    return [(w, " ".join(tgt_words[j] for j in sorted(linked[i]))) for i, w in enumerate(src.split())]


def test_write_demo_same_seed_same_bytes_other_seed_differs(tmp_path, written):
    _, planted, raw = written
    again, planted_again = write_demo(tmp_path / "again")
    other, planted_other = write_demo(tmp_path / "other", seed=1)
    for name in DATA_FILES:
        assert (again.root / name).read_bytes() == b"\n".join(raw[name]) + b"\n", name
        assert (other.root / name).read_bytes() != (again.root / name).read_bytes(), name
    assert planted_again == planted and planted_other != planted
    assert sorted(p.name for p in again.root.iterdir()) == sorted(DATA_FILES + ["lexicon.tsv"])  # no .tmp left


def test_demo_paths_name_the_files_under_root(tmp_path):
    paths = DemoPaths.at(tmp_path)
    assert [
        p.name
        for p in (
            paths.train_src,
            paths.train_tgt,
            paths.alignments,
            paths.test_src,
            paths.test_tgt,
            paths.mono,
            paths.labeled,
            paths.slots,
            paths.labeled_test,
            paths.slots_test,
            paths.slots_small,
            paths.slots_small_test,
            paths.lexicon,
        )
    ] == DATA_FILES + ["lexicon.tsv"]


@pytest.mark.parametrize("iterate", [demo.iter_mono, demo.iter_labeled, demo.iter_slots])
def test_iter_first_n_rows_are_the_prefix_of_a_longer_iteration(iterate):
    assert list(iterate(123, seed=3)) == list(islice(iterate(1000, seed=3), 123))
    assert list(iterate(123, seed=3)) != list(iterate(123, seed=4))


def test_iter_bitext_prefix_holds_across_a_chunk_boundary():
    n = CHUNK_ROWS + 7
    short, long = list(demo.iter_bitext(n)), list(islice(demo.iter_bitext(n + 5000), n))
    assert len(short) == n and short == long
    assert short[:50] != list(demo.iter_bitext(50, seed=1))
    assert short[:50] != list(demo.iter_bitext(50, split="test"))


def test_iter_rejects_a_negative_row_count():
    with pytest.raises(ConfError, match=r"demo corpus: n = -1, seed = 0; both must be >= 0"):
        next(demo.iter_bitext(-1))


def test_write_demo_bitext_files_have_one_line_per_pair(written):
    _, _, raw = written
    bitext = ("train.en", "train.de", "train.align", "test.en", "test.de")
    assert [len(raw[n]) for n in bitext] == [3000, 3000, 3000, 300, 300]
    assert [len(raw[n]) for n in ("mono.en", "labeled.tsv", "slots.jsonl")] == [5000, 1200, 1200]


def test_gold_alignment_links_every_target_word_once_within_range(written):
    _, planted, raw = written
    good = [i for i in range(3000) if i + 1 not in planted["train.en"]]
    assert len(good) == 2995
    for i in good:
        src, tgt = raw["train.en"][i].decode().split(), raw["train.de"][i].decode().split()
        pairs = links(raw["train.align"][i].decode())
        assert all(0 <= s < len(src) and 0 <= t < len(tgt) for s, t in pairs), i
        assert sorted(t for _, t in pairs) == list(range(len(tgt))), i  # each target word from one source word
        assert [s for s, _ in pairs] == sorted(s for s, _ in pairs), i  # links in source order


def test_every_aligned_translation_is_in_the_table_and_alignment_is_not_identity():
    table, null, moved = translation_table(), 0, 0
    for src, tgt, alignment in demo.iter_bitext(5000):
        for word, translation in translations(src, tgt, alignment):
            assert translation in table[word], (src, tgt, word, translation)
            null += translation == ""
        moved += any(s != t for s, t in links(alignment))
    assert 100 < null < 200 and moved > 1000  # "really" and "to" in 1.5 % of the pairs


def test_ambiguous_words_follow_the_table_probabilities_within_4_sigma():
    table, seen = translation_table(), defaultdict(Counter)
    for row in demo.iter_bitext(20_000):
        for word, translation in translations(*row):
            if word in table and len(table[word]) > 1:
                seen[word][translation] += 1
    assert sorted(seen) == sorted(ambiguous_words()) and len(ambiguous_words()) == 8
    for word, counts in seen.items():
        n = sum(counts.values())
        assert n >= 300, word
        for translation, p in table[word].items():
            assert abs(counts[translation] / n - p) <= 4 * math.sqrt(p * (1 - p) / n), (word, translation)


def test_word_entropy_is_natural_log_and_zero_off_the_planted_words():
    h = word_entropy()
    # −Σ p ln p over the table (its order) vs ln 2 and this sum's order: equal up to the last bits
    assert h["bank"] == pytest.approx(math.log(2), rel=1e-12)
    assert h["runs"] == pytest.approx(-sum(p * math.log(p) for p in (0.4, 0.3, 0.2, 0.1)), rel=1e-12)
    assert {w for w, v in h.items() if v > 0} == set(ambiguous_words())
    assert sorted(len(translation_table()[w]) for w in ambiguous_words()) == [2, 2, 2, 2, 2, 3, 3, 4]
    assert all(sum(t.values()) == pytest.approx(1.0, abs=1e-12) for t in translation_table().values())  # 0.4 + … + 0.1


def test_lexicon_tsv_is_the_translation_table(written):
    _, _, raw = written
    rows = [line.decode().split("\t") for line in raw["lexicon.tsv"]]
    assert {(en, de): float(p) for en, de, p in rows} == {
        (en, de): p for en, t in translation_table().items() for de, p in t.items()
    }
    assert ["really", "", "1"] in rows and ["to", "", "1"] in rows


def test_bitext_length_ratio_over_1_5_is_rare_and_duplicate_pairs_exist(written):
    _, planted, raw = written
    good = [i for i in range(3000) if i + 1 not in planted["train.en"]]
    pairs = [(raw["train.en"][i].decode(), raw["train.de"][i].decode()) for i in good]
    lengths = [(len(s.split()), len(t.split())) for s, t in pairs]
    over = sum(max(a, b) / min(a, b) > 1.5 for a, b in lengths)
    assert 0.005 * len(pairs) < over < 0.03 * len(pairs)
    assert len(pairs) - len(set(pairs)) >= 20


def test_held_out_test_set_is_another_stream(written):
    _, _, raw = written
    assert raw["test.en"] != raw["train.en"][:300]
    assert [line.decode() for line in raw["test.en"]] == [s for s, _, _ in demo.iter_bitext(300, split="test")]


def test_mono_has_about_10_percent_out_of_grammar_lines():
    lines = list(demo.iter_mono(5000))
    table = translation_table()
    oog = sum(any(w not in table for w in line.split()) for line in lines)
    assert 400 <= oog <= 600 and all(line.split() for line in lines)


def _in_grammar(sentence: str) -> bool:
    """Whether a bitext template generates the sentence: as many words as slots, each word in its slot's class."""
    words = sentence.split()
    slots = [classes.split() for _, classes, _ in TEMPLATES]
    return any(len(s) == len(words) and all(w in CLASS_WORDS[c] for w, c in zip(words, s)) for s in slots)


def test_labeled_sentences_are_bitext_grammar_sentences_in_six_balanced_topics():
    rows = list(demo.iter_labeled(6000))
    labels = Counter(label for label, _ in rows)
    assert sorted(labels) == sorted(["animals", "food", "travel", "family", "nature", "buildings"])
    assert all(850 <= n <= 1150 for n in labels.values()), labels  # 1,000 each, ~1 % sd
    table, nouns = translation_table(), set(CLASS_WORDS["N"]) | set(CLASS_WORDS["F"])
    for _, text in rows:  # the demo NMT models, trained on the bitext, know every word and every sentence shape
        assert text and all(w in table for w in text.split()), text
        assert _in_grammar(text), text
        assert any(w in nouns for w in text.split()), text  # a noun slot, the topic's carrier, in every sentence


def test_labeled_topics_share_words_and_are_learnable_but_not_trivial():
    rows = list(demo.iter_labeled(6000))
    labels_of, topic_of = defaultdict(set), {w: c for c, ws in LABEL_NOUNS.items() for w in ws.split()}
    topic_of |= dict.fromkeys(CLASS_WORDS["M"] + CLASS_WORDS["F"], "food")
    for label, text in rows:
        for word in text.split():
            labels_of[word].add(label)
    assert all(labels_of[w] <= {c} for w, c in topic_of.items())  # a topic noun belongs to one topic
    shared = {w for w, ls in labels_of.items() if len(ls) == 6}
    assert {"book", "teacher", "game", "money"} <= shared  # nouns of no topic, drawn in every topic
    assert {"the", "sees", "anna", "old", "because", "today"} <= shared  # the other classes, as in the bitext
    # a sentence with a topic noun has its label's; ~8 % have only shared nouns, so no rule is always right
    carried = sum(any(topic_of.get(w) == label for w in text.split()) for label, text in rows)
    assert 0.85 * len(rows) < carried < 0.97 * len(rows)


def test_labeled_rows_are_deterministic_for_a_seed_across_a_chunk_boundary():
    n = CHUNK_ROWS + 7
    rows = list(demo.iter_labeled(n, seed=2))
    assert rows == list(demo.iter_labeled(n, seed=2)) and rows[:500] == list(demo.iter_labeled(500, seed=2))
    assert rows[:500] != list(demo.iter_labeled(500, seed=3))
    assert rows[CHUNK_ROWS:] != rows[:7]


def test_slots_rows_are_valid_bio_with_several_slot_types():
    types = set()
    for tokens, tags in demo.iter_slots(1200):
        assert len(tokens) == len(tags) and tokens
        for prev, tag in zip(["O"] + tags, tags):
            assert tag == "O" or tag[:2] in ("B-", "I-"), tag
            if tag.startswith("I-"):
                assert prev in ("B-" + tag[2:], tag), (tokens, tags)
            types.add(tag[2:]) if tag != "O" else None
    assert len(types) >= 8


def _bad(name: str, line: bytes) -> str | None:
    """Why a raw line is unusable, or None."""
    if b"\x00" in line:
        return "nul_byte"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8"
    if len(text) > demo.MAX_LINE_CHARS:
        return "too_long"
    if name == "labeled.tsv":
        fields = text.split("\t")
        return "wrong_columns" if len(fields) != 2 else "empty_text" if not fields[1] else None
    if name == "slots.jsonl":
        try:
            row = json.loads(text)
        except json.JSONDecodeError:
            return "malformed_json"
        return "length_mismatch" if len(row["tokens"]) != len(row["tags"]) else None
    return "empty" if not text else None


def test_write_demo_bad_rows_are_exactly_at_the_returned_lines(written):
    _, planted, raw = written
    assert {name: len(bad) for name, bad in planted.items()} == {
        "train.en": 5,
        "train.de": 5,
        "train.align": 5,
        "mono.en": 4,
        "labeled.tsv": 5,
        "slots.jsonl": 5,
    }
    assert sorted(planted["train.en"].values()) == sorted(demo.BAD_REASONS["bitext"])
    for name in ("mono.en", "labeled.tsv", "slots.jsonl"):
        found = {i + 1: why for i, line in enumerate(raw[name]) if (why := _bad(name, line))}
        assert found == planted[name], name
    found = {
        i + 1: f"{_bad('', en) or _bad('', de)}_{'src' if _bad('', en) else 'tgt'}"
        for i, (en, de) in enumerate(zip(raw["train.en"], raw["train.de"]))
        if _bad("", en) or _bad("", de)
    }
    assert found == planted["train.en"] == planted["train.de"] == planted["train.align"]
    assert {i + 1 for i, line in enumerate(raw["train.align"]) if not line} == set(planted["train.align"])


def test_write_demo_without_bad_rows_writes_only_good_lines(tmp_path):
    sizes = {"bitext_rows": 600, "mono_rows": 600, "labeled_rows": 600, "slots_rows": 600, "test_rows": 100}
    paths, planted = write_demo(tmp_path, **sizes, bad_rows=False)
    written = ["train.en", "train.de", "train.align", "mono.en", "labeled.tsv", "slots.jsonl"]
    assert planted == {name: {} for name in written}
    for name in DATA_FILES:
        lines = (paths.root / name).read_bytes().split(b"\n")[:-1]
        assert [i for i, line in enumerate(lines) if _bad(name, line)] == [], name


def test_bad_lines_count_is_one_in_2000_and_each_reason_once_from_500_rows():
    assert len(demo.bad_lines("bitext", 99)) == 0 and len(demo.bad_lines("bitext", 100)) == 1
    assert sorted(demo.bad_lines("mono", 500).values()) == sorted(demo.BAD_REASONS["mono"])
    lines = demo.bad_lines("bitext", 1_000_000, seed=2)
    assert len(lines) == 500 and min(lines) >= 1 and max(lines) <= 1_000_000
    assert Counter(lines.values()) == dict.fromkeys(demo.BAD_REASONS["bitext"], 100)


def test_write_demo_defaults_are_the_demo_profile_sizes():
    params = inspect.signature(write_demo).parameters
    assert {name: params[name].default for name in DemoConf.model_fields} == DemoConf().model_dump()
    assert DemoConf().model_dump() == {
        "seed": 0,
        "bitext_rows": 3000,
        "mono_rows": 5000,
        "labeled_rows": 1200,
        "slots_rows": 1200,
        "test_rows": 300,
    }
