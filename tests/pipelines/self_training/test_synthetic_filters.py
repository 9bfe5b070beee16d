"""Gated teachers and filtered synthetic data (issue 47, defect 4): a teacher under `min_bleu` fails the run (or warns),
and the teacher's degenerate output is dropped with its own reason before the target LM, each counted in the summary."""

from __future__ import annotations

import pyarrow as pa
import pytest

from conf.errors import ConfError
from conf.loader import load_profile
from conf.sections.filters import LanguageIdConf, RepetitionConf
from conf.sections.nmt import GatedNMTConf, RepeatedNgramConf
from flows.pipelines.model_scores import gate
from flows.pipelines.self_training import summary_lines
from tasks.self_training.synthetic import repeated_ngram_run, synthetic_clean
from tests.conftest import REPO

NO_DUPLICATES = pa.table(
    {"uid": pa.array([], pa.string()), "first_line": pa.array([], pa.int64()), "copies": pa.array([], pa.int64())}
)


def pairs(tgt: list[str]) -> pa.Table:
    src = ["we see it", "that is that is that is good", "we say that it is", "the dog sleeps on the mat all day", "it is big"]
    n = len(tgt)
    return pa.table(
        {"uid": [f"u{i}" for i in range(n)], "src": src[:n], "tgt": tgt, "source": ["m"] * n, "line": range(1, n + 1)}
    )


DEGENERATE = [
    "wir sehen es es es",  # "es" 3 times: too short for the character rule (3-character copies)
    "das ist das ist das ist gut",  # OpusFilter's RepetitionFilter: "das ist " followed twice by itself
    "„Wir, dass es, dass es. dass es…",  # "dass es" 3 times, the punctuation between the copies differing
    "the dog sleeps on the mat all day",  # English on the German side
    "es ist groß",  # kept
]


def test_each_check_drops_its_degenerate_pair_with_its_reason():
    out = synthetic_clean(
        pairs(DEGENERATE),
        NO_DUPLICATES,
        max_ratio=3,
        repetition=RepetitionConf(),
        repeated_ngram=RepeatedNgramConf(),
        language_id=LanguageIdConf(min_chars=25),
        tgt_lang="de",
        candidates=["en", "de"],
    )
    assert out["part"]["tgt"].to_pylist() == ["es ist groß"]
    assert out["dropped"].select(["uid", "reason", "detail"]).to_pylist() == [
        {"uid": "u0", "reason": "repeated_ngram", "detail": "repeated_ngram=3 ('es')"},
        {"uid": "u1", "reason": "repetition", "detail": "repetition=2 ('das ist')"},
        {"uid": "u2", "reason": "repeated_ngram", "detail": "repeated_ngram=3 ('dass es')"},
        {"uid": "u3", "reason": "language_id", "detail": "language_id=en:1"},
    ]


def test_checks_that_are_off_or_without_a_language_keep_the_pairs():
    out = synthetic_clean(pairs(DEGENERATE), NO_DUPLICATES, max_ratio=3, language_id=LanguageIdConf(), tgt_lang=None)
    assert out["part"].num_rows == 5 and out["dropped"].num_rows == 0
    assert repeated_ngram_run("„Wir, dass es es, dass es, dass es, dass es") == (3, "es dass")
    assert repeated_ngram_run("a b a b") == (2, "a b") and repeated_ngram_run("...") == (0, None)


def test_summary_counts_each_filter_and_says_when_language_id_is_skipped():
    summary = {
        "u_max": 0.5,
        "synthetic": {"mono": 861},
        "synthetic_filters": {
            "counts": {
                "mono": {"translated": 1000, "dropped": {"length_ratio": 9, "repeated_ngram": 100, "lm_score": 30}, "kept": 861}
            },
            "language_id": "skipped: no target language known (set the bitext's tgt_lang, or self_training.teacher.tgt_lang)",
        },
    }
    assert summary_lines(summary)[-1] == (
        "synthetic filters [mono]: 1,000 translated, 9 length_ratio, 100 repeated_ngram, 30 lm_score, 861 kept; "
        "language_id skipped: no target language known (set the bitext's tgt_lang, or self_training.teacher.tgt_lang)"
    )


class _Run:
    warnings: list[str]

    def __init__(self) -> None:
        self.warnings = []


SCORE = {"model": "teacher", "BLEU": 0.36, "chrF": 10.0, "sentences": 200, "dataset": "news", "trained_on_it": True}


def test_gate_fails_below_min_bleu_naming_the_setting_the_score_and_the_data():
    with pytest.raises(ConfError) as e:
        gate(_Run(), SCORE, GatedNMTConf(), key="self_training.teacher")
    assert str(e.value) == (
        "self_training.teacher.min_bleu: the teacher scores BLEU 0.36 on 200 pairs of `news` (its training data: an "
        "upper bound of what it does on new text), under the minimum 5: its translations would be degenerate training "
        "data. Hint: train it longer or larger (self_training.teacher.train.max_update) or configure a stronger model "
        "(self_training.teacher.model), or set self_training.teacher.on_weak: warn to go on"
    )
    run = _Run()
    assert gate(run, {**SCORE, "BLEU": 5.0}, GatedNMTConf(), key="self_training.teacher") is None  # at the minimum
    assert gate(run, SCORE, GatedNMTConf(min_bleu=0), key="self_training.teacher") is None and run.warnings == []


def test_gate_warns_and_goes_on_with_on_weak_warn():
    run = _Run()
    conf = GatedNMTConf(on_weak="warn", min_bleu=1)
    line = gate(run, {**SCORE, "trained_on_it": False}, conf, key="rejuvenation.identification")
    assert line == (
        "rejuvenation.identification.min_bleu: the teacher scores BLEU 0.36 on 200 pairs of `news`, under the minimum 1; "
        "on_weak: warn, so its translations are used"
    )
    assert run.warnings == [line]


def test_gated_models_and_the_demo_default():
    demo = load_profile(REPO / "conf" / "demo.yaml", environ={"AUGDAG_DEMO_DATA": "/data"})
    for model in (demo.self_training.teacher, demo.rejuvenation.identification, demo.rejuvenation.rejuvenation):
        assert (model.min_bleu, model.on_weak) == (5.0, "fail")
    assert demo.self_training.filter.language_id == LanguageIdConf(min_chars=25)
