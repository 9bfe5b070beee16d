"""The corpus filters in the ingest flow (issue 28), in-process under the session's Prefect harness: every input row
of every dataset is kept, rejected or dropped (by SQL over the views, `rejects` and `dropped`), each drop with its
reason and detail; the views show each dataset's final `clean`; the held-out set is never filtered; a re-run
computes nothing; switching the filters across datasets off makes the plain `clean` current again."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conf.loader import load_profile
from storage.catalog import Catalog
from storage.dropped import row_path
from tests.conftest import catalog_rows

pytestmark = pytest.mark.slow

FILES = {
    "a.en": [
        "A man rides his bicycle through the old town.",
        "Ein Mann fährt mit seinem Fahrrad durch die Altstadt.",  # German on the English side
        "The train leaves at 7 and arrives at 9.",
        "<div>Click here to subscribe</div>",
        "Two women are drinking coffee at a small table outside a cafe.",  # news_test:1 after normalising
        "a small boy in a red jacket is climbing over the wooden fence",
        "",  # rejected by the read: an empty side
        "A man rides his bicycle through the old town.",  # a duplicate of line 1
    ],
    "a.de": [
        "Ein Mann fährt mit seinem Fahrrad durch die Altstadt.",
        "Ein Mann fährt mit seinem Fahrrad durch die Altstadt.",
        "Der Zug fährt um 8 ab und kommt um 3 an.",  # its numbers disagree
        "<div>Hier klicken zum Abonnieren</div>",
        "Zwei Frauen trinken Kaffee vor einem Café.",
        "ein kleiner junge in einer roten jacke klettert über den holzzaun",
        "Leer.",
        "Ein Mann fährt mit seinem Fahrrad durch die Altstadt.",
    ],
    "b.en": [
        "a small boy in a red jacket is climbing over the woolen fence",  # crawl_a:6, one letter changed
        "The children are playing in the garden.",
        "A dog is running on the beach.",
    ],
    "b.de": [
        "ein kleiner junge in einer roten jacke klettert über den holzzaun",
        "Die Kinder spielen im Garten.",
        "Ein Hund rennt am Strand.",
    ],
    "t.en": ["two women are drinking coffee at a small table outside a cafe", "The weather is nice today."],
    "t.de": ["Zwei Frauen trinken Kaffee an einem kleinen Tisch.", "Das Wetter ist heute schön."],
    "m.en": [
        "The children are playing in the garden.",
        "Мальчик играет в парке с собакой.",  # Russian in an English corpus
        "the weather is nice today",  # news_test:2's source
        "The children are playing in the garden!",  # mono_en:1 after normalising
    ],
}
PROFILE = """
shard_size: 3
train_nmt: {tests: [news_test]}     # held out: read and validated, never filtered
ingest:
  clean:
    max_ratio: 3
    html_tags: {}
    non_zero_numerals: {}
    language_id: {langid_languages: [en, de, ru]}
    near_duplicates: {}
    decontaminate: {}
datasets:
  crawl_a: {kind: bitext, format: text, src: a.en, tgt: a.de, src_lang: en, tgt_lang: de}
  crawl_b: {kind: bitext, format: text, src: b.en, tgt: b.de, src_lang: en, tgt_lang: de}
  news_test: {kind: bitext, format: text, src: t.en, tgt: t.de}
  mono_en: {kind: mono, format: text, path: m.en, language: en}
"""
LINES = {"crawl_a": 8, "crawl_b": 3, "news_test": 2, "mono_en": 4}
DROPS = [  # (source, line, reason, detail)
    ("crawl_a", 2, "language_id", "src:language_id=de:1"),
    ("crawl_a", 3, "non_zero_numerals", "non_zero_numerals=0 (79 vs 83)"),
    ("crawl_a", 4, "html_tags", "src:html_tags=1 tgt:html_tags=1"),
    ("crawl_a", 5, "test_overlap", "test_overlap=news_test:1 side=src jaccard=1"),
    ("crawl_a", 8, "duplicate", "the same row as line 1, which is kept"),
    ("crawl_b", 1, "near_duplicates", "near_duplicate_of=crawl_a:6 jaccard=0.9194"),
    ("mono_en", 2, "language_id", "language_id=ru:1"),
    ("mono_en", 3, "test_overlap", "test_overlap=news_test:2 side=text jaccard=1"),
    ("mono_en", 4, "near_duplicates", "near_duplicate_of=mono_en:1 jaccard=1"),
]
ACCOUNTING = """
SELECT s.source,
  (SELECT count(*) FROM bitext v WHERE v.source = s.source) + (SELECT count(*) FROM mono v WHERE v.source = s.source)
    + (SELECT count(*) FROM heldout_bitext v WHERE v.source = s.source) AS kept,  -- a held-out set: its own view
  (SELECT count(*) FROM rejects r WHERE r.source = s.source) AS rejected,
  (SELECT count(*) FROM dropped d WHERE d.source = s.source) AS dropped
FROM (SELECT DISTINCT dataset AS source FROM artifacts WHERE stage = 'read') s ORDER BY s.source
"""


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("filters")
    for name, lines in FILES.items():
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "p.yaml").write_text(textwrap.dedent(PROFILE))
    return root / "p.yaml"


def _ingest(profile: Path, cache: Path, *sets: str) -> dict:
    from flows.pipelines.ingest import ingest_flow

    return ingest_flow(load_profile(profile, list(sets), cache=cache, environ={}), profile="test")


@pytest.fixture(scope="module")
def first(prefect_harness, profile, tmp_path_factory) -> tuple[Path, dict]:
    cache = tmp_path_factory.mktemp("filters-cache")
    return cache, _ingest(profile, cache)


def test_every_input_row_is_kept_rejected_or_dropped_with_its_reason_by_sql(first):
    cache, summary = first
    rows = catalog_rows(cache, ACCOUNTING)
    assert [(r["source"], r["kept"], r["rejected"], r["dropped"]) for r in rows] == [
        ("crawl_a", 2, 1, 5),
        ("crawl_b", 2, 0, 1),
        ("mono_en", 1, 0, 3),
        ("news_test", 2, 0, 0),  # the held-out set: every line kept
    ]
    assert all(r["kept"] + r["rejected"] + r["dropped"] == LINES[r["source"]] for r in rows)
    dropped = catalog_rows(cache, "SELECT stage, source, line, reason, detail FROM dropped ORDER BY source, line")
    assert {d["stage"] for d in dropped} == {"clean"}
    assert [(d["source"], d["line"], d["reason"], d["detail"]) for d in dropped] == DROPS
    assert summary["ingest"]["dropped"]["crawl_a"] == {
        "rows": 7,
        "kept": 2,
        "reasons": {"duplicate": 1, "html_tags": 1, "non_zero_numerals": 1, "language_id": 1, "test_overlap": 1},
    }


def test_the_views_show_each_dataset_s_final_clean_and_the_stages_say_what_ran(first):
    cache, summary = first
    stages = [(s["stage"], s["dataset"]) for s in summary["stages"]]
    assert [s for s in stages if s[0] in ("filter_chain", "across_datasets")] == [
        ("filter_chain", "crawl_a"),
        ("filter_chain", "crawl_b"),
        ("filter_chain", "mono_en"),
        ("across_datasets", None),
    ]
    current = catalog_rows(
        cache,
        "SELECT dataset, rows, view FROM artifacts WHERE stage = 'clean' AND view IS NOT NULL ORDER BY dataset",
    )
    assert [(r["dataset"], r["rows"], r["view"]) for r in current] == [
        ("crawl_a", 2, "bitext"),
        ("crawl_b", 2, "bitext"),
        ("mono_en", 1, "mono"),
        ("news_test", 2, "heldout_bitext"),  # never in the view training reads (issue 47)
    ]
    assert catalog_rows(cache, "SELECT src FROM bitext WHERE source = 'crawl_b' ORDER BY line") == [
        {"src": "The children are playing in the garden."},
        {"src": "A dog is running on the beach."},
    ]
    why = row_path(Catalog(cache), "crawl_b", 1)
    assert [(d["stage"], d["reason"], d["detail"]) for d in why.drops] == [
        ("clean", "near_duplicates", "near_duplicate_of=crawl_a:6 jaccard=0.9194")
    ]
    assert list(summary["ingest"]["dropped"]) == ["crawl_a", "crawl_b", "mono_en"]  # news_test is not filtered


def test_the_summary_lines_and_the_report_page_count_each_filter_s_drops(first):
    from flows.pipelines.ingest import summary_lines

    cache, summary = first
    *lines, outside = summary_lines(summary)  # the data is outside the cache (and no profile file): said last
    assert outside.startswith(f"ingest read inputs outside {cache}: crawl_a ") and "mono_en " in outside
    assert lines == [
        "ingest crawl_a: 7 rows in, 2 kept; dropped duplicate 1, html_tags 1, non_zero_numerals 1, language_id 1, test_overlap 1",
        "ingest crawl_b: 3 rows in, 2 kept; dropped near_duplicates 1",
        "ingest mono_en: 4 rows in, 1 kept; dropped language_id 1, test_overlap 1, near_duplicates 1",
    ]
    page = Path(summary["reports"]["ingest_html"]).read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') == 1 and Path(summary["reports"]["ingest_filters_png"]).is_file()
    assert "near_duplicate_of=crawl_a:6 jaccard=0.9194" in page and "<td>test_overlap</td>" in page


def test_a_rerun_computes_nothing_and_filters_off_make_the_plain_clean_current(first, profile):
    cache, summary = first
    before = catalog_rows(cache, "SELECT count(*) AS n FROM artifacts")[0]["n"]
    again = _ingest(profile, cache)
    assert {s["status"] for s in again["stages"]} == {"cached"}
    assert [s["fingerprint"] for s in again["stages"]] == [s["fingerprint"] for s in summary["stages"]]
    assert catalog_rows(cache, "SELECT count(*) AS n FROM artifacts")[0]["n"] == before
    off = _ingest(profile, cache, "ingest.clean.near_duplicates=false", "ingest.clean.decontaminate=false")
    assert not any(s["stage"] in ("filter_chain", "across_datasets") for s in off["stages"])
    rows = catalog_rows(cache, ACCOUNTING)
    assert [(r["source"], r["kept"], r["rejected"], r["dropped"]) for r in rows] == [
        ("crawl_a", 3, 1, 4),  # line 5 is back: nothing compares it with news_test
        ("crawl_b", 3, 0, 0),
        ("mono_en", 3, 0, 1),  # lines 3 and 4 are back (4 is no exact duplicate of line 1: its uid differs)
        ("news_test", 2, 0, 0),
    ]
    back = _ingest(profile, cache)  # and on again: the filtered clean is current, nothing computed
    assert {s["status"] for s in back["stages"]} == {"cached"}
    assert [(r["source"], r["kept"]) for r in catalog_rows(cache, ACCOUNTING)] == [
        ("crawl_a", 2),
        ("crawl_b", 2),
        ("mono_en", 1),
        ("news_test", 2),
    ]
