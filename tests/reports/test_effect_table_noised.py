"""Issue 50, the demo's robustness row: a noised test set (train_nmt ``tests: [{dataset, modifiers}]``) measures the
augmentation that made rows with its modifiers; a held-out set as it is measures every augmentation."""

from __future__ import annotations

from flows.reports.effect_table import EffectRow, effect_rows, measures, noise_of

ONE_SEED = "1 seed: p resamples test sentences"


def scores(test: str, arm: str, bleu: float, chrf: float, delta: tuple[float, float], p: float | None) -> list[dict]:
    return [
        {"testset": test, "arm": arm, "metric": m, "seeds": 1, "mean": v, "sd": 0.0, "delta": d, "p_value": p, "p_seeds": None}
        for m, v, d in zip(("BLEU", "chrF"), (bleu, chrf), delta)
    ]


def night() -> list[dict]:
    """rejuvenation and robustness, measured by train_nmt on demo_test and its upper-cased copy."""
    arm = {"seeds": [1], "students": ["s"], "continue_on": None}
    bitext = "SELECT src, tgt FROM bitext"
    summary = []
    for test, base in (("demo_test", (42.0, 64.0)), ("demo_test+UpperCase", (0.5, 12.0))):
        summary += scores(test, "bitext", *base, (0.0, 0.0), None)
        summary += scores(test, "rejuvenated", base[0] - 1, base[1] - 2, (-1.0, -2.0), 0.04)
        summary += scores(test, "robust", base[0] + 3, base[1] + 9, (3.0, 9.0), 0.001)
    return [
        {"pipeline": "ingest", "status": "completed", "seconds": 1.0, "stages": []},
        {
            "pipeline": "rejuvenation",
            "status": "completed",
            "seconds": 2.0,
            "rejuvenation": {
                "active": 90,
                "inactive": 10,
                "validation": {"identification": {"model": "identification", "BLEU": 31.2, "sentences": 200}},
            },
        },
        {
            "pipeline": "robustness",
            "status": "completed",
            "seconds": 1.0,
            "robustness": {"bitext": "b", "pairs": 100, "rows": 12, "modifiers": {"UpperCase": 5, "TitleCase": 7, "Typos": 0}},
        },
        {
            "pipeline": "train_nmt",
            "status": "completed",
            "seconds": 60.0,
            "train_nmt": {
                "baseline": "bitext",
                "tests": ["demo_test", "demo_test+UpperCase"],
                "arms": {
                    "bitext": {"label": "bitext", "mix": {"bitext": bitext}, **arm},
                    "rejuvenated": {"label": "rejuvenated", "mix": {"r": "SELECT src, tgt FROM rejuvenated"}, **arm},
                    "robust": {
                        "label": "bitext + robust",
                        "mix": {"bitext": bitext, "robust": "SELECT src, tgt FROM robust_bitext"},
                        **arm,
                    },
                },
                "summary": summary,
            },
        },
    ]


def test_noise_of_reads_the_modifiers_of_a_noised_sets_label_issue_50():
    assert noise_of("demo_test") == frozenset()
    assert noise_of("demo_test+UpperCase") == {"UpperCase"}
    assert noise_of("test2016+TitleCase+Typos") == {"TitleCase", "Typos"}


def test_a_noised_set_measures_only_the_augmentation_that_made_its_noise_issue_50():
    robustness = night()[2]
    assert measures("demo_test", robustness, "robustness")
    assert measures("demo_test+UpperCase", robustness, "robustness")
    assert not measures("demo_test+Typos", robustness, "robustness")  # Typos made no row in this run
    assert not measures("demo_test+UpperCase", night()[1], "rejuvenation")


def test_the_robustness_row_shows_the_noised_set_and_the_others_only_the_clean_one_issue_50():
    floor = "not informative: the baseline's BLEU 0.50 < 5, chrF 12.00 < 20"
    assert effect_rows(night()) == [
        EffectRow(
            "rejuvenation",
            "10 pairs rejuvenated",
            "train_nmt rejuvenated vs bitext on demo_test",
            "-1.0 BLEU (p = 0.04), -2.0 chrF (p = 0.04)",
            ONE_SEED,
        ),
        EffectRow(
            "robustness",
            "12 noised rows",
            "train_nmt bitext + robust vs bitext on demo_test",
            "+3.0 BLEU (p = 0.001), +9.0 chrF (p = 0.001)",
            ONE_SEED,
        ),
        EffectRow(
            "robustness",
            "12 noised rows",
            "train_nmt bitext + robust vs bitext on demo_test+UpperCase",
            "+3.0 BLEU (p = 0.001), +9.0 chrF (p = 0.001)",
            f"{ONE_SEED}; {floor}",
        ),
    ]
