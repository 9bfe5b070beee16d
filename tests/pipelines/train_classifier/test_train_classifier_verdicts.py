"""Issue 47, defect 2: train_classifier's and train_slot_tagger's summary lines: no spread with one seed, an
augmentation's Δ against `none` (the slot tagger's arm against `original`) tested across seeds from 3 seeds on and
said to be untested below, and an accuracy at chance named."""

from __future__ import annotations

import pytest

from flows.reports.verdicts import at_chance, chance_accuracy
from tasks.common.evaluation import mean_sd

UNTESTED = "untested: training variance not measured: use ≥ 3 seeds"
DECIDED = "decided by a paired t-test over the seeds' corpus scores (3 seeds)"


def _classifier(scores: dict[tuple[str, str], list[float]], seeds: list[int], *, labels: int = 6, rows: int = 50) -> dict:
    """A run summary's ``train_classifier`` as the pipeline builds it (evaluations per seed, ``mean_sd`` over them)."""
    evaluation = [
        {"augmentation": a, "seed": s, "metric": m, "score": v, "sentences": rows, "signature": "classes"}
        for (a, m), values in scores.items()
        for s, v in zip(seeds, values, strict=True)
    ]
    return {
        "testset": "test",
        "schedule": "cyclic",
        "labels": [f"l{i}" for i in range(labels)],
        "augmentation": list(dict.fromkeys(a for a, _ in scores)),
        "seeds": seeds,
        "evaluation": evaluation,
        "summary": mean_sd(evaluation, by="augmentation"),
    }


def test_classifier_one_seed_has_no_spread_and_its_delta_is_untested_issue_47():
    from flows.pipelines.train_classifier import summary_lines

    scores = {("none", "accuracy"): [0.62], ("none", "macro_f1"): [0.55], ("eda", "accuracy"): [0.66], ("eda", "macro_f1"): [0.6]}
    assert summary_lines({"train_classifier": _classifier(scores, [0])}) == [
        "accuracy = 0.6200 ± n/a (1 seed) on test (none)",
        "macro_f1 = 0.5500 ± n/a (1 seed) on test (none)",
        f"accuracy = 0.6600 ± n/a (1 seed) on test (eda); Δ +0.0400 vs none, {UNTESTED}",
        f"macro_f1 = 0.6000 ± n/a (1 seed) on test (eda); Δ +0.0500 vs none, {UNTESTED}",
    ]


def test_classifier_three_seeds_test_each_augmentation_against_none_across_seeds_issue_47():
    from flows.pipelines.train_classifier import summary_lines

    scores = {
        ("none", "accuracy"): [0.60, 0.62, 0.64],
        ("curriculum", "accuracy"): [0.63, 0.66, 0.65],  # d = (0.03, 0.04, 0.01): t = 3.0237, 2 df -> p = 0.094
    }
    assert summary_lines({"train_classifier": _classifier(scores, [0, 1, 2])}) == [
        "accuracy = 0.6200 ± 0.0200 on test (none, mean ± sd over 3 seeds)",
        "accuracy = 0.6467 ± 0.0153 on test (curriculum, schedule cyclic, mean ± sd over 3 seeds); Δ +0.0267 vs none "
        f"(p = 0.094), {DECIDED}",
    ]


def test_classifier_accuracy_at_chance_is_named_and_makes_the_comparison_not_informative_issue_47():
    from flows.pipelines.train_classifier import summary_lines

    # 6 labels, 50 test rows: chance = 1/6 + 2·√((1/6)(5/6)/50) = 0.2721
    assert chance_accuracy(6, 50) == pytest.approx(1 / 6 + 2 * (1 / 6 * 5 / 6 / 50) ** 0.5)
    assert (at_chance(0.2720, 6, 50), at_chance(0.2721, 6, 50)) == (  # the limit is 0.27208
        "at chance (≤ 1/6 + 2 binomial sd on 50 test rows = 0.2721)",
        None,
    )
    scores = {("none", "accuracy"): [0.20], ("eda", "accuracy"): [0.30]}
    assert summary_lines({"train_classifier": _classifier(scores, [0])}) == [
        "accuracy = 0.2000 ± n/a (1 seed) on test (none); at chance (≤ 1/6 + 2 binomial sd on 50 test rows = 0.2721)",
        f"accuracy = 0.3000 ± n/a (1 seed) on test (eda); Δ +0.1000 vs none, {UNTESTED}; not informative: the "
        "baseline's accuracy is at chance",
    ]


def test_slot_tagger_lines_say_the_spread_and_test_original_plus_c2c_across_seeds_issue_47():
    from flows.pipelines.train_slot_tagger import summary_lines

    def lines(f1: dict[str, list[float]], seeds: list[int]) -> list[str]:
        evaluation = [
            {"arm": a, "seed": s, "metric": m, "score": v if m == "f1" else 0.5}
            for a, values in f1.items()
            for s, v in zip(seeds, values, strict=True)
            for m in ("f1", "precision")
        ]
        t = {"testset": "test", "arms": {"original": 1200, "original+c2c": 1500}, "evaluation": evaluation}
        return summary_lines({"train_slot_tagger": {**t, "summary": mean_sd(evaluation, by="arm")}})

    assert lines({"original": [0.8], "original+c2c": [0.81]}, [0]) == [
        "f1 = 0.8000 ± n/a (1 seed) on test (original, 1,200 rows)",
        f"f1 = 0.8100 ± n/a (1 seed) on test (original+c2c, 1,500 rows); Δ +0.0100 vs original, {UNTESTED}",
    ]
    # d = (0.02, 0.01, 0.03): t = 0.02 / (0.01 / √3) = 3.4641, 2 df -> p = 0.074
    assert lines({"original": [0.80, 0.82, 0.81], "original+c2c": [0.82, 0.83, 0.84]}, [0, 1, 2])[1] == (
        "f1 = 0.8300 ± 0.0100 on test (original+c2c, 1,500 rows, mean ± sd over 3 seeds); Δ +0.0200 vs original "
        f"(p = 0.074), {DECIDED}"
    )
