"""The corpus filters' keys under `clean` (conf/sections/filters.py, issue 28): OpusFilter's parameter names and
defaults, on with `{}` or `true`, off when absent or `false`, a dataset's own value replacing the global one, each
side's language and script resolved from the dataset; every mistake one line naming its file, line and key."""

from __future__ import annotations

import pytest

from conf.loader import load_profile
from conf.sections.cleaning import CleanConf, CleanOverride, dataset_clean, own_filters
from conf.sections.filters import FILTERS, resolved
from storage.artifacts import canonical
from tests.conf.test_conf import conf_error, write

PROFILE = """
ingest:
  clean:
    language_id: {threshold: 0.3}
    character_score: {}
    html_tags: {}
    non_zero_numerals: true
datasets:
  crawl:
    kind: bitext
    format: text
    src: c.en
    tgt: c.ru
    src_lang: en
    tgt_lang: ru
    clean: {html_tags: false, length: {unit: char, max_length: 300}}
  news:
    kind: mono
    format: text
    path: n.de
    language: de
  slots:
    kind: slots
    format: jsonl
    path: s.jsonl
"""


def test_filters_parse_with_opusfilter_defaults_and_a_dataset_s_own_values_replace_the_global_ones(tmp_path):
    conf = load_profile(write(tmp_path, PROFILE), environ={})
    clean = conf.ingest.clean
    assert clean.language_id.model_dump() == {
        "threshold": 0.3,
        "identifier": "py3langid",
        "langid_languages": None,
        "lingua_mode": "low",
        "languages": None,
        "min_chars": 0,
    }
    assert clean.non_zero_numerals.threshold == 0.5 and clean.length is None and clean.near_duplicates is None
    crawl = conf.datasets["crawl"]
    settings = dataset_clean(clean, crawl.clean)
    assert own_filters(crawl.clean) == {"html_tags", "length"}
    filters = resolved(settings, crawl, "crawl", own_filters(crawl.clean))
    assert list(filters) == ["length", "character_score", "non_zero_numerals", "language_id"]  # the chain's order
    assert filters["length"].model_dump() == {"min_length": 1, "max_length": 300, "unit": "char"}
    assert filters["character_score"].scripts == ["Latin", "Cyrillic"]  # from src_lang, tgt_lang
    assert filters["language_id"].languages == ["en", "ru"]
    news = resolved(clean, conf.datasets["news"], "news")
    assert list(news) == ["character_score", "html_tags", "language_id"]  # non_zero_numerals compares two sides
    assert (news["character_score"].scripts, news["language_id"].languages) == (["Latin"], ["de"])
    assert resolved(clean, conf.datasets["slots"], "slots") == {}  # slots rows: length only


def test_with_every_filter_off_a_section_dumps_and_fingerprints_as_before():
    assert canonical(CleanConf()) == '{"dedup":true,"max_ratio":1.5,"max_tokens":250,"min_tokens":1}'
    assert CleanConf(language_id=False, html_tags=None).model_dump() == CleanConf().model_dump()
    on = CleanConf(html_tags=True, decontaminate={"threshold": 1})
    assert on.model_dump() == {**CleanConf().model_dump(), "html_tags": {}, "decontaminate": {
        "shingle": "char", "n": 5, "num_perm": 128, "threshold": 1.0, "seed": 1}}  # fmt: skip
    assert dataset_clean(on, CleanOverride(html_tags=False, max_ratio=2)).model_dump() == {
        **CleanConf(max_ratio=2).model_dump(),
        "decontaminate": on.decontaminate.model_dump(),
    }
    assert set(FILTERS) <= set(CleanConf.model_fields) and set(FILTERS) <= set(CleanOverride.model_fields)


BASE = """
datasets:
  crawl: {kind: bitext, format: text, src: c.en, tgt: c.de}
  news: {kind: mono, format: text, path: n.txt}
  test: {kind: bitext, format: text, src: t.en, tgt: t.de}
"""


@pytest.mark.parametrize(
    "extra, line, message",
    [
        (
            "ingest:\n  clean:\n    language_id: {}\n",
            7,
            "ingest.clean.language_id: dataset 'crawl' (kind bitext) names no language; set `src_lang` and `tgt_lang` "
            "(ISO 639-1) on datasets.crawl, or switch the filter off for it (datasets.crawl.clean.language_id: false)",
        ),
        (
            "ingest:\n  clean:\n    language_id: {threshold: 2}\n",
            7,
            "ingest.clean.language_id.threshold: Input should be less than or equal to 1, found 2",
        ),
        (
            "ingest:\n  clean:\n    repetition: {treshold: 3}\n",
            7,
            "ingest.clean.repetition.treshold: unknown key; did you mean 'threshold'? expected one of: threshold, "
            "min_length, max_length, unit",
        ),
        (
            "ingest:\n  clean:\n    length: {unit: token}\n",
            7,
            "ingest.clean.length.unit: Input should be 'word' or 'char', found 'token'",
        ),
        (
            "ingest:\n  clean:\n    character_score: {scripts: [Latin, Klingon]}\n",
            7,
            "ingest.clean.character_score.scripts.1: unknown Unicode script 'Klingon'; expected one such as "
            "Latin, Cyrillic, Greek, Han, found 'Klingon'",
        ),
        (
            "ingest:\n  clean:\n    near_duplicates: {threshold: 1}\n",
            7,
            "ingest.clean.near_duplicates.threshold: Input should be less than 1, found 1",
        ),
        (
            "ingest:\n  clean:\n    decontaminate: {}\n",
            7,
            "ingest.clean.decontaminate: the profile holds out no test or dev set of text (train_nmt.tests, "
            "train_classifier.test, epida.test, ...) to compare the training rows with",
        ),
        (
            "  news2: {kind: mono, format: text, path: n.txt, language: english, clean: {html_tags: {}, language_id: {}}}\n",
            5,
            "datasets.news2.language: expected an ISO 639-1 code such as en, de, found 'english'",
        ),
        (
            "  news2: {kind: mono, format: text, path: n.txt, clean: {terminal_punctuation: {}}}\n",
            5,
            "datasets.news2.clean.terminal_punctuation: does not apply to kind 'mono' (it applies to bitext)",
        ),
        (
            "  news2: {kind: mono, format: text, path: n.txt, src_lang: en}\n",
            5,
            "datasets.news2.src_lang: names a bitext's side; this one is kind 'mono': use `language`",
        ),
        (
            "  crawl2: {kind: bitext, format: text, src: c.en, tgt: c.de, src_lang: EN}\n",
            5,
            "datasets.crawl2.src_lang: expected an ISO 639-1 code such as en, de (two lower-case letters), found 'EN'",
        ),
    ],
)
def test_a_wrong_filter_setting_is_one_line_naming_its_file_line_and_key(tmp_path, extra, line, message):
    path = write(tmp_path, BASE + extra)
    assert conf_error(path) == f"{path}:{line}: {message}"


def test_filters_across_datasets_need_one_setting_and_a_dataset_can_leave_them(tmp_path):
    held = "train_nmt: {tests: [test]}\ningest:\n  clean:\n    near_duplicates: {}\n"
    path = write(
        tmp_path, BASE + "  crawl2: {kind: bitext, format: text, src: c.en, tgt: c.de, clean: {near_duplicates: {n: 3}}}\n" + held
    )
    assert conf_error(path) == (
        f"{path}:5: datasets.crawl2.clean.near_duplicates: runs across datasets with one setting, but 'crawl' and "
        "'crawl2' set it differently. Hint: set it once in ingest.clean (a dataset can still leave it: "
        "`near_duplicates: false`)"
    )
    ok = write(
        tmp_path,
        BASE + "  crawl2: {kind: bitext, format: text, src: c.en, tgt: c.de, clean: {near_duplicates: false}}\n" + held,
        "ok.yaml",
    )
    conf = load_profile(ok, environ={})
    on = [
        n for n, ds in conf.datasets.items() if "near_duplicates" in resolved(dataset_clean(conf.ingest.clean, ds.clean), ds, n)
    ]
    assert on == ["crawl", "news", "test"]  # crawl2 left; the flow leaves the held-out `test` out (conf/roles.py)


def test_the_demo_profile_switches_every_filter_on_for_its_training_bitext():
    conf = load_profile("demo", environ={"AUGDAG_DEMO_DATA": "/nonexistent"})
    bitext = conf.datasets["demo_bitext"]
    filters = resolved(dataset_clean(conf.ingest.clean, bitext.clean), bitext, "demo_bitext", own_filters(bitext.clean))
    assert list(filters) == list(FILTERS)
    assert (bitext.src_lang, bitext.tgt_lang, filters["language_id"].langid_languages) == ("en", "de", ["en", "de"])
    assert conf.datasets["demo_mono"].clean is None and conf.ingest.clean == CleanConf()  # the others: as before
