"""The recommended corpus filters (issue 47, defect 3): on correct professional pairs (greetings, numbers written as
words on one side, reordered numbers, headlines, short segments) they drop nothing, while each kind of noise
bench/filters.py plants is dropped for its filter; OpusFilter's defaults (``preset: opusfilter``) drop the correct
pairs the issue names; a bitext whose src_lang and tgt_lang are swapped fails with one line (exit 2 from the CLI)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest

from conf.errors import ConfError
from conf.schema import DatasetConf
from conf.sections.cleaning import CleanConf
from conf.sections.filters import resolved
from flows.reports.ingest_report import low_confidence
from storage.parts import Parts
from tasks.ingest import filters as F
from tasks.ingest.clean import CLEAN, CleanParams, clean, find_duplicates
from tests.conftest import bitext, harness_url, subprocess_env

REPO = Path(__file__).resolve().parents[3]
EN_DE = DatasetConf(kind="bitext", format="text", src="a.en", tgt="a.de", src_lang="en", tgt_lang="de")
CORRECT = [  # written for this test: correct English-German translations of the kinds the issue lists
    ("Hello", "Hallo"),
    ("Best regards", "Mit freundlichen Grüßen"),
    ("Thank you very much!", "Vielen Dank!"),
    ("I am going to the shop now.", "Ich gehe jetzt einkaufen."),
    ("The shop is open 24/7.", "Der Laden ist rund um die Uhr geöffnet."),
    ("You can return it within sixty days.", "Sie können es innerhalb von 60 Tagen zurückgeben."),
    ("Inter Milan is seven points behind.", "Inter Mailand liegt 7 Punkte zurück."),
    ("At 21:30 a 44-year-old driver lost control of her car.",
     "Gegen 21.30 Uhr verlor eine 44-jährige Fahrerin die Kontrolle über ihr Auto."),
    ("Merry Christmas and a happy new year to all of you.", "Frohe Weihnachten und ein gutes neues Jahr euch allen."),
    ("I am going to go to the shop.", "Ich gehe einkaufen."),
    ("Chancellor visits flood region", "Kanzlerin besucht Hochwassergebiet"),
    ("Biker reacts lightning fast", "Biker reagiert blitzschnell"),
    ("4,090 people have recovered.", "4.090 Personen sind genesen."),
    ("The match ended 1:1 (0:0).", "Das Spiel endete 1:1 (0:0)."),
    ("How old are you?", "Wie alt bist du?"),
    ("I don't know.", "Ich weiß es nicht."),
    ("The meeting was moved from Monday to Tuesday.", "Das Treffen wurde von Montag auf Dienstag verschoben."),
    ("He said that the new bridge will be finished next spring.",
     "Er sagte, dass die neue Brücke im nächsten Frühjahr fertig wird."),
    ("Tom is reading a book in the garden.", "Tom liest ein Buch im Garten."),
    ("The museum has been closed since March 2020.", "Das Museum ist seit März 2020 geschlossen."),
]  # fmt: skip
NOISE = [  # (src, tgt, the filter that drops it): one pair of each kind bench/filters.py plants
    ("The museum has been closed since March 2020.", "Tom liest ein Buch im Garten. Er ist sehr glücklich.", None),
    ("Ein Mann fährt mit seinem Fahrrad durch die Altstadt.", "A man rides his bicycle through the old town.",
     "language_id"),  # swapped
    ("Tom is reading a book in the garden. 417", "Tom liest ein Buch im Garten. 82", "non_zero_numerals"),  # numbers
    ('<div class="c">Tom is reading a book.</div>', "<p>Tom liest ein Buch.</p>", "html_tags"),  # html
    ("Two dogs run through the snow. Two Two Two", "Zwei Hunde rennen durch den Schnee.", "repetition"),  # repeated
    ("A man sleeps. " + "x" * 50, "Ein Mann schläft.", "long_word"),  # long_token
    ("This is a house.", "Это дом.", "character_score"),  # cyrillic
    ("Two dogs run through the snow?!...", "Zwei Hunde rennen durch den Schnee.", "terminal_punctuation"),
]  # fmt: skip


def _clean(pairs: list[tuple[str, str]], preset: str, ds: DatasetConf = EN_DE, **keys) -> dict[str, pa.Table]:
    """``clean`` as the flow runs it with ``preset`` (and ``keys``) for the bitext ``ds``."""
    rows = bitext(pairs, source="news")
    section = CleanConf(preset=preset, **keys)
    params = CleanParams.of(section, "bitext", resolved(section, ds, "news"))
    bound = CLEAN.bind(params, n_inputs=1, side=["duplicates"])
    with tempfile.TemporaryDirectory(prefix="augdag-test-recommended-") as parts:
        return clean(rows, find_duplicates(Parts.of_tables([rows], Path(parts))), **dict(bound))


def test_recommended_filters_drop_no_correct_professional_pair_issue_47():
    out = _clean(CORRECT, "recommended")
    assert (out["part"].num_rows, out["dropped"].num_rows) == (20, 0)


def test_a_twelve_hour_time_against_a_twenty_four_hour_one_is_still_dropped_by_non_zero_numerals():
    # a known limit of comparing digits: 9pm / 21 Uhr share none (the issue's example; not in CORRECT above)
    out = _clean([("See you at 9pm.", "Wir sehen uns um 21 Uhr.")], "recommended")
    assert out["dropped"]["detail"].to_pylist() == ["non_zero_numerals=0 (9 vs 12)"]


def test_opusfilter_defaults_drop_the_correct_pairs_the_issue_names_issue_47():
    out = _clean(CORRECT, "opusfilter")
    got = dict(zip(out["dropped"]["line"].to_pylist(), out["dropped"]["reason"].to_pylist(), strict=True))
    assert got == {
        1: "language_id",  # Hello ||| Hallo over all 97 languages: br, it
        2: "language_id",  # Best regards: Icelandic at 0.04
        3: "length_ratio",  # 4 tokens against 2: the thesis filter's 1.5
        4: "length_ratio",
        5: "length_ratio",
        6: "non_zero_numerals",  # sixty / 60
        7: "non_zero_numerals",  # seven / 7
        8: "alphabet_ratio",  # digits and spaces count against 0.75
        10: "length_ratio",
        12: "language_id",  # Biker reagiert blitzschnell: Danish
        13: "alphabet_ratio",
        14: "alphabet_ratio",
        16: "alphabet_ratio",
        20: "alphabet_ratio",
    }


def test_recommended_filters_drop_each_planted_noise_for_its_filter_issue_47():
    out = _clean([(s, t) for s, t, _ in NOISE], "recommended")
    assert out["part"]["line"].to_pylist() == [1]
    assert out["dropped"].select(["line", "reason", "detail"]).to_pylist() == [
        {"line": 2, "reason": "language_id", "detail": "src:language_id=de:1 tgt:language_id=en:1"},
        {"line": 3, "reason": "non_zero_numerals", "detail": "non_zero_numerals=0 (147 vs 28)"},
        {"line": 4, "reason": "html_tags", "detail": "src:html_tags=1 tgt:html_tags=1"},
        {"line": 5, "reason": "repetition", "detail": "repetition=2 ('Two')"},
        {"line": 6, "reason": "long_word", "detail": "src:longest_word=50"},
        {"line": 7, "reason": "character_score", "detail": "tgt:character_score=0"},
        {"line": 8, "reason": "terminal_punctuation", "detail": "terminal_punctuation=-2.1972"},
    ]


def test_short_segments_are_never_dropped_on_language_alone_but_longer_ones_are():
    short = [("Hallo", "Hallo"), ("Danke schön", "Danke schön")]  # German on the English side, < 25 characters
    long = [("Der Hund sieht die Katze im Garten.", "Der Hund sieht die Katze im Garten.")]
    out = _clean(short + long, "recommended")
    assert out["part"]["line"].to_pylist() == [1, 2]
    assert out["dropped"].select(["line", "detail"]).to_pylist() == [{"line": 3, "detail": "src:language_id=de:1"}]


def test_swapped_src_lang_and_tgt_lang_fail_with_one_line_naming_the_keys_issue_47():
    swapped = DatasetConf(kind="bitext", format="text", src="a.en", tgt="a.de", src_lang="de", tgt_lang="en")
    with pytest.raises(ConfError) as e:
        _clean(CORRECT, "recommended", swapped)
    assert str(e.value) == (
        "datasets.news.src_lang is 'de', but 14 of the 14 confidently identified src rows are 'en', its tgt_lang: "
        "are datasets.news.src_lang and tgt_lang swapped (or wrong)?"
    )


def test_the_nine_opusfilter_filters_keep_their_parity_settings_by_name():
    section = CleanConf(preset="opusfilter")
    filters = resolved(section, EN_DE, "news")
    assert list(filters) == [
        "length", "long_word", "alphabet_ratio", "character_score", "html_tags", "terminal_punctuation",
        "non_zero_numerals", "repetition", "language_id",
    ]  # fmt: skip
    assert filters["alphabet_ratio"].model_dump() == {"threshold": 0.75, "exclude_whitespace": False}
    assert filters["non_zero_numerals"].model_dump() == {"threshold": 0.5, "ordered": True, "skip_one_sided": False}
    assert (filters["language_id"].langid_languages, filters["language_id"].min_chars) == ("all", 0)


def test_non_zero_numerals_options_compare_sorted_digits_and_skip_one_sided_pairs():
    src, tgt = (
        pa.array(["at 21:30 a 44-year-old", "seven points", "page 5"]),
        pa.array(["44-Jähriger um 21.30", "7 Punkte", "Seite 57"]),
    )
    opus = F.non_zero_numerals(src, tgt)
    assert opus.value.round(4).tolist() == [0.6, 0.0, 0.6667]
    ours = F.non_zero_numerals(src, tgt, threshold=0.7, ordered=False, skip_one_sided=True)
    assert (ours.value.round(4).tolist(), ours.keep.tolist()) == ([1.0, 1.0, 0.6667], [True, True, False])


def test_low_confidence_language_id_drops_are_told_apart():
    assert [low_confidence(d) for d in ["src:language_id=is:0.04", "src:language_id=is:0.04 tgt:language_id=en:1",
                                        "tgt:language_id=de:0.99", "non_zero_numerals=0 (12 vs 4)"]] == [
        True, False, False, False]  # fmt: skip


def test_the_cli_refuses_a_swapped_bitext_with_exit_2(prefect_harness, tmp_path):
    (tmp_path / "a.en").write_text("".join(f"{t}\n" for _, t in CORRECT), encoding="utf-8")  # German in the .en file
    (tmp_path / "a.de").write_text("".join(f"{s}\n" for s, _ in CORRECT), encoding="utf-8")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "pipelines: [ingest]\ningest:\n  clean: {preset: recommended}\ndatasets:\n"
        "  news: {kind: bitext, format: text, src: a.en, tgt: a.de, src_lang: en, tgt_lang: de}\n",
        encoding="utf-8",
    )
    cmd = [sys.executable, "-m", "flows.cli", "run", "ingest", "--config", str(profile), "--cache", str(tmp_path / "c")]
    env = subprocess_env(tmp_path, PREFECT_API_URL=harness_url())  # its own Prefect home, the session's server
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, out
    assert "datasets.news.src_lang is 'en', but 14 of the 14 confidently identified src rows are 'de', its tgt_lang" in out
