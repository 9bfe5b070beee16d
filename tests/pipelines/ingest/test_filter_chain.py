"""The corpus filters chained inside `clean` (tasks/ingest/chain.py, issue 28): each row's reason is the first filter
that drops it, cheapest first, with that filter's exact detail; later filters score only the rows still kept; each
kind runs the filters that apply to it; with every filter off, `clean` is what it was."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa

from conf.schema import DatasetConf
from conf.sections.cleaning import CleanConf
from conf.sections.filters import resolved
from storage.parts import Parts
from storage.schemas import with_uid
from tasks.ingest import chain
from tasks.ingest.clean import CLEAN, CleanParams, clean, find_duplicates
from tests.conftest import bitext

EN_DE = DatasetConf(kind="bitext", format="text", src="a.en", tgt="a.de", src_lang="en", tgt_lang="de")
EVERY = {  # every filter of the chain on; thresholds where a case needs another than OpusFilter's default
    "length": {"max_length": 12},
    "long_word": {},
    "alphabet_ratio": {"threshold": 0.5, "exclude_whitespace": True},
    "character_score": {},
    "html_tags": {},
    "terminal_punctuation": {},
    "non_zero_numerals": {"threshold": 0.9},
    "repetition": {},
    "language_id": {},
}
PAIRS = [  # (src, tgt, the reason it is dropped for, None: kept)
    ("A man rides his bicycle through the old town.", "Ein Mann fährt mit seinem Fahrrad durch die Altstadt.", None),
    ("Ein Mann fährt mit seinem Fahrrad durch die Altstadt.", "Ein Mann fährt mit seinem Fahrrad durch die Altstadt.",
     "language_id"),  # German on the English side
    ("This is a house.", "Это дом.", "character_score"),  # a Cyrillic line on the German side
    ("page 12 of 14", "Seite 12 von 40", "non_zero_numerals"),
    ("<div>Click here</div>", "<div>Hier klicken</div>", "html_tags"),
    ("hahahahahahaha", "hahahahahahaha", "repetition"),
    ("x" * 300, "y", "long_word"),  # a 300-character token (its repetition comes later: long_word is first)
    ("What? Really?! Yes...", "Was? Wirklich", "terminal_punctuation"),
    ("%%% ### !!!", "%%% ### !!!", "alphabet_ratio"),
    ("We walked along the river until the sun disappeared behind the high green hills.",
     "Wir gingen am Fluss entlang, bis die Sonne hinter den hohen grünen Hügeln verschwand.", "length"),
    ("one two three four five six seven", "eins", "length_ratio"),  # clean's own reasons come first
    ("A man rides his bicycle through the old town.", "Ein Mann fährt mit seinem Fahrrad durch die Altstadt.",
     "duplicate"),
]  # fmt: skip


def _clean(rows: pa.Table, kind: str, ds: DatasetConf, **filters) -> dict[str, pa.Table]:
    """``clean`` as the flow runs it: the section's filters resolved for ``ds``, bound as the stage binds them."""
    section = CleanConf(max_ratio=3.0, max_tokens=400, **filters)
    params = CleanParams.of(section, kind, resolved(section, ds, "d"))
    bound = CLEAN.bind(params, n_inputs=1, side=["duplicates"])
    with tempfile.TemporaryDirectory(prefix="augdag-test-chain-") as parts:  # the shard's Parquet, removed after
        return clean(rows, find_duplicates(Parts.of_tables([rows], Path(parts))), **dict(bound))


def test_the_chain_drops_each_hand_written_pair_for_its_filter_with_the_exact_detail():
    rows = bitext([(s, t) for s, t, _ in PAIRS])
    out = _clean(rows, "bitext", EN_DE, **EVERY)
    assert out["part"]["line"].to_pylist() == [1]
    assert out["dropped"].select(["line", "reason", "detail"]).to_pylist() == [
        {"line": 2, "reason": "language_id", "detail": "src:language_id=de:1"},
        {"line": 3, "reason": "character_score", "detail": "tgt:character_score=0"},
        {"line": 4, "reason": "non_zero_numerals", "detail": "non_zero_numerals=0.8571 (1214 vs 124)"},
        {"line": 5, "reason": "html_tags", "detail": "src:html_tags=1 tgt:html_tags=1"},
        {"line": 6, "reason": "repetition", "detail": "repetition=2 ('haha')"},
        {"line": 7, "reason": "long_word", "detail": "src:longest_word=300"},
        {"line": 8, "reason": "terminal_punctuation", "detail": "terminal_punctuation=-2.3979"},
        {"line": 9, "reason": "alphabet_ratio", "detail": "src:alphabet_ratio=0 tgt:alphabet_ratio=0"},
        {"line": 10, "reason": "length", "detail": "src:length=14 words tgt:length=14 words"},
        {"line": 11, "reason": "length_ratio", "detail": "ratio=7 (src_tokens=7, tgt_tokens=1)"},
        {"line": 12, "reason": "duplicate", "detail": "the same row as line 1, which is kept"},
    ]
    assert [p[2] for p in PAIRS[1:]] == out["dropped"]["reason"].to_pylist()
    assert out["part"].num_rows + out["dropped"].num_rows == rows.num_rows and out["part"].schema == rows.schema


def test_a_filter_alone_drops_only_its_rows_and_a_later_one_sees_only_the_rows_kept_before_it(monkeypatch):
    rows = bitext([(s, t) for s, t, _ in PAIRS])
    alone = _clean(rows, "bitext", EN_DE, repetition={})
    assert alone["dropped"].select(["line", "detail"]).to_pylist()[:2] == [
        {"line": 6, "detail": "repetition=2 ('haha')"},
        {"line": 7, "detail": "repetition=99 ('xxx')"},  # with long_word off, the 300 x's are a repetition
    ]
    seen = {}
    for name in ("long_word", "repetition", "language_id"):
        score = chain.SCORES[name]

        def counting(columns, section, name=name, score=score):
            seen[name] = len(columns[0])
            return score(columns, section)

        monkeypatch.setitem(chain.SCORES, name, counting)
    _clean(rows, "bitext", EN_DE, **EVERY)
    # 12 rows; clean's own reasons take 2; length 1, long_word (scores 9) 1, alphabet_ratio 1, character_score 1,
    # html_tags 1, terminal_punctuation 1, non_zero_numerals 1; repetition scores 3, language_id the last 2
    assert seen == {"long_word": 9, "repetition": 3, "language_id": 2}


def test_one_text_kinds_run_the_filters_on_their_text_without_a_side_and_skip_the_pair_filters():
    mono = DatasetConf(kind="mono", format="text", path="m.txt", language="en")
    texts = [
        "A man rides his bicycle through the old town.",
        "Мальчик играет в парке с собакой.",
        "<b>Bold</b> text here today",
        "Page 12 of 14!?!",  # terminal_punctuation and non_zero_numerals compare sides: not run on one text
    ]
    rows = with_uid(pa.table({"uid": pa.nulls(4, pa.string()), "text": texts, "source": ["m"] * 4, "line": [1, 2, 3, 4]}), "mono")
    out = _clean(rows, "mono", mono, character_score={}, html_tags={}, terminal_punctuation={}, non_zero_numerals={})
    assert out["part"]["line"].to_pylist() == [1, 4]
    assert out["dropped"].select(["line", "reason", "detail"]).to_pylist() == [
        {"line": 2, "reason": "character_score", "detail": "character_score=0"},
        {"line": 3, "reason": "html_tags", "detail": "html_tags=1"},
    ]


def test_slots_rows_run_only_length_over_their_tokens():
    slots = DatasetConf(kind="slots", format="jsonl", path="s.jsonl")
    tokens = [["book", "a", "flight"], ["<b>", "to", "berlin", "tomorrow"], ["x" * 300]]
    rows = with_uid(
        pa.table(
            {
                "uid": pa.nulls(3, pa.string()),
                "tokens": tokens,
                "tags": [["O"] * len(t) for t in tokens],
                "source": ["s"] * 3,
                "line": [1, 2, 3],
            }
        ),
        "slots",
    )
    out = _clean(rows, "slots", slots, length={"max_length": 3}, long_word={}, html_tags={})
    assert out["dropped"].select(["line", "reason", "detail"]).to_pylist() == [
        {"line": 2, "reason": "length", "detail": "length=4 words"}
    ]
    chars = _clean(rows, "slots", slots, length={"max_length": 16, "unit": "char"})
    assert chars["dropped"].select(["line", "detail"]).to_pylist() == [
        {"line": 2, "detail": "length=22 chars"},  # "<b> to berlin tomorrow": 3 + 2 + 6 + 8 and 3 spaces
        {"line": 3, "detail": "length=300 chars"},
    ]


def test_with_every_filter_off_clean_and_its_parameters_are_what_they_were():
    rows = bitext([(s, t) for s, t, _ in PAIRS])
    section = CleanConf(max_ratio=3.0, max_tokens=400)
    params = CleanParams.of(section, "bitext", resolved(section, EN_DE, "d"))
    assert CLEAN.bind(params, n_inputs=1, side=["duplicates"]).model_dump(mode="json", exclude_unset=True) == {
        "dedup": True,
        "min_tokens": 1,
        "max_tokens": 400,
        "max_ratio": 3.0,
        "kind": "bitext",
    }
    assert _clean(rows, "bitext", EN_DE)["dropped"]["reason"].to_pylist() == ["length_ratio", "duplicate"]


def test_an_empty_shard_passes_every_filter():
    out = _clean(bitext([]), "bitext", EN_DE, **EVERY)
    assert (out["part"].num_rows, out["dropped"].num_rows) == (0, 0)
    assert out["dropped"].column_names[-2:] == ["reason", "detail"]
