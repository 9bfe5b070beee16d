"""EDA as an EPiDA candidate source (issue 15): each operation's exact output for a fixed sentence and seed,
stop words never replaced, labels kept, alpha 0 a no-op, per-row seeding; WordNet synonyms offline."""

from __future__ import annotations

import warnings

import pyarrow as pa
import pytest

from conf.errors import ModelError
from storage.schemas import with_uid
from tasks.epida.eda import (
    STOP_WORDS,
    eda_candidates,
    random_swap,
    row_rng,
    synonym_replacement,
)

FOX = "the quick brown fox jumps over the lazy dog"
SYNONYMS = {"quick": ["fast", "speedy"], "fox": ["dodger"], "jumps": ["leaps"], "dog": ["hound", "puppy"], "lazy": ["idle"]}


def synonyms(word: str) -> list[str]:
    return SYNONYMS.get(word, [])


def _rows(*texts: str) -> pa.Table:
    n = len(texts)
    return with_uid(
        pa.table({"text": list(texts), "label": ["animals"] * n, "source": ["d"] * n, "line": list(range(1, n + 1))}), "labeled"
    )


def test_eda_each_operation_gives_the_expected_sentence_for_a_fixed_seed():
    out = eda_candidates(_rows(FOX), n_aug=8, alpha=0.2, seed=0, synonyms=synonyms)  # n = max(1, ⌊0.2·9⌋) = 1
    assert [(r["method"], r["candidate"], r["text"]) for r in out.to_pylist()] == [
        ("eda_sr", 0, "the quick brown dodger jumps over the lazy dog"),
        ("eda_ri", 1, "the dodger quick brown fox jumps over the lazy dog"),
        ("eda_rs", 2, "the quick fox brown jumps over the lazy dog"),
        ("eda_rd", 3, "the quick fox jumps over the"),
        ("eda_sr", 4, "the quick brown dodger jumps over the lazy dog"),
        ("eda_ri", 5, "the quick brown fox jumps over the lazy dog dodger"),
        ("eda_rs", 6, "jumps quick brown fox the over the lazy dog"),
        ("eda_rd", 7, "the brown fox jumps lazy dog"),
    ]
    assert set(out["label"].to_pylist()) == {"animals"}
    assert set(out["parent_uid"].to_pylist()) == {_rows(FOX)["uid"][0].as_py()}
    assert out.column_names == ["uid", "text", "label", "source", "line", "parent_uid", "method", "candidate"]


def test_eda_stop_words_are_never_replaced_and_every_occurrence_changes():
    words = ["the", "dog", "and", "the", "other", "dog"]
    out = synonym_replacement(words, 1.0, row_rng(0, "0" * 32, 0), synonyms=lambda w: [f"<{w}>"])
    assert {"the", "and", "other"} <= STOP_WORDS
    assert out == ["the", "<dog>", "and", "the", "other", "<dog>"]  # n = 6, but only dog is not a stop word


def test_eda_alpha_zero_changes_nothing_and_rows_are_seeded_alone():
    unchanged = eda_candidates(_rows(FOX), n_aug=4, alpha=0.0, seed=0, synonyms=synonyms)
    assert unchanged["text"].to_pylist() == [FOX] * 4
    both = eda_candidates(_rows("a lazy dog sleeps", FOX), n_aug=4, alpha=0.3, seed=5, synonyms=synonyms)
    alone = eda_candidates(_rows(FOX), n_aug=4, alpha=0.3, seed=5, synonyms=synonyms)
    assert both["text"].to_pylist()[4:] == alone["text"].to_pylist()  # the other row draws nothing from it
    assert random_swap(["one"], 0.5, row_rng(0, "0" * 32, 0), synonyms) == ["one"]


def test_wordnet_synonyms_offline_from_the_debian_database():
    from models.wordnet import DEBIAN_WORDNET
    from models.wordnet import synonyms as wordnet_synonyms

    if not (DEBIAN_WORDNET / "index.noun").is_file():
        pytest.skip("no WordNet database: apt-get install wordnet-base wordnet-sense-index (make install does it)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nltk: "multilingual functions are not available" (WordNet 3.0 only)
        assert wordnet_synonyms("quick") == [
            "agile",
            "fast",
            "flying",
            "immediate",
            "nimble",
            "prompt",
            "promptly",
            "quickly",
            "ready",
            "speedy",
            "spry",
            "straightaway",
            "warm",
        ]
        assert wordnet_synonyms("the") == []


def test_the_english_reader_gives_nltks_own_readers_synonyms():
    """models/wordnet.py skips nltk's Open Multilingual Wordnet sense map at load (``map30``): the synonyms of
    every 25th noun lemma and of inflected forms (morphy's rules and exception lists) are nltk's reader's."""
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    from models.wordnet import DEBIAN_WORDNET, synonyms, wordnet, wordnet_root

    if not (DEBIAN_WORDNET / "index.noun").is_file():
        pytest.skip("no WordNet database: apt-get install wordnet-base wordnet-sense-index (make install does it)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, path = wordnet(), wordnet_root() / "corpora" / "wordnet"
        theirs = WordNetCorpusReader(str(path), None)
    assert ours.map30 is None and theirs.map30  # nltk maps WordNet 3.0 onto itself; ours does not load it
    lemmas = [line.split()[0] for line in (path / "index.noun").read_text().splitlines() if not line.startswith(" ")]
    words = lemmas[::25] + ["running", "ran", "geese", "better", "was", "houses", "quickly", "mice"]
    assert len(words) > 3000
    assert [synonyms(w, ours) for w in words] == [synonyms(w, theirs) for w in words]


def test_wordnet_missing_database_names_the_packages(tmp_path):
    from models.wordnet import wordnet_root

    with pytest.raises(ModelError, match="no WordNet 3.0 database .* apt-get install wordnet-base wordnet-sense-index"):
        wordnet_root(tmp_path / "nowhere", cache=tmp_path / "cache")
