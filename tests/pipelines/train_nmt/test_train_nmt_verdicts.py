"""Issue 47, defect 2: train_nmt's verdict lines and report say what their numbers can claim: no spread with one
seed, what a p resamples, a test across seeds from 3 seeds on, and a baseline too weak to compare against."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from flows.reports.verdicts import axis_label, below_floor, seeds_test, spread
from tests.conftest import REPO, subprocess_env

CAVEAT = "p resamples test sentences; training variance not measured: use ≥ 3 seeds"


def _summary(scores: dict[tuple[str, str], list[float]], p: dict[str, float], seeds: list[int]) -> dict:
    """A run summary's ``train_nmt`` as the pipeline builds it: per-seed evaluations, the paired bootstrap's rows
    (``p``: metric -> the arm's p), and ``arm_summary`` over them."""
    from flows.reports.train_nmt_report import arm_summary

    evaluation = [
        {"testset": "t", "arm": a, "seed": s, "metric": m, "score": v, "signature": f"sig-{m}"}
        for (a, m), values in scores.items()
        for s, v in zip(seeds, values, strict=True)
    ]
    significance = [
        {"testset": "t", "arm": a, "metric": m, "p_value": pv, "p_ar": pv, "ci_low": 1.0, "ci_high": 2.0}
        for a, m, pv in [
            ("bitext", "BLEU", None),
            ("bitext", "chrF", None),
            ("synth", "BLEU", p["BLEU"]),
            ("synth", "chrF", p["chrF"]),
        ]
    ]
    arms = {"bitext": {"label": "bitext", "seeds": seeds}, "synth": {"label": "bitext_synth", "seeds": seeds}}
    summary = arm_summary(evaluation, significance, "bitext", arms)
    return {"tests": ["t"], "baseline": "bitext", "arms": arms, "summary": summary, "evaluation": evaluation}


ONE_SEED_WEAK = {("bitext", "BLEU"): [0.5], ("bitext", "chrF"): [12.0], ("synth", "BLEU"): [0.2], ("synth", "chrF"): [12.1]}
THREE_SEEDS = {
    ("bitext", "BLEU"): [30.0, 32.0, 31.0],
    ("bitext", "chrF"): [50.0, 52.0, 51.0],
    ("synth", "BLEU"): [31.0, 32.2, 33.0],  # Δ per seed 1.0, 0.2, 2.0
    ("synth", "chrF"): [51.0, 51.0, 52.0],  # Δ per seed 1.0, -1.0, 1.0
}


def test_one_seed_has_no_spread_and_its_p_says_it_resamples_test_sentences_issue_47():
    from flows.reports.train_nmt_report import summary_lines

    scores = {
        ("bitext", "BLEU"): [30.0],
        ("bitext", "chrF"): [50.0],
        ("synth", "BLEU"): [30.6],
        ("synth", "chrF"): [50.0],
    }
    lines = summary_lines({"train_nmt": _summary(scores, {"BLEU": 0.03, "chrF": 0.5}, [7])})
    assert lines == [
        "bitext (baseline): BLEU = 30.00 ± n/a (1 seed), chrF = 50.00 ± n/a (1 seed) on t  sig-BLEU",
        "bitext_synth: +0.6 BLEU (p = 0.03), +0.0 chrF (p = 0.5); BLEU = 30.60 ± n/a (1 seed), chrF = 50.00 ± n/a "
        f"(1 seed) on t; {CAVEAT}",
    ]


def test_a_baseline_below_bleu_5_and_chrf_20_makes_the_comparison_not_informative_issue_47():
    """The issue's example: two models at BLEU 0.5 and 0.2, p = 0.002, one seed."""
    from flows.reports.train_nmt_report import summary_lines

    lines = summary_lines({"train_nmt": _summary(ONE_SEED_WEAK, {"BLEU": 0.002, "chrF": 0.4}, [1])})
    assert lines[1] == (
        "bitext_synth: -0.3 BLEU (p = 0.002), +0.1 chrF (p = 0.4); BLEU = 0.20 ± n/a (1 seed), chrF = 12.10 ± n/a "
        f"(1 seed) on t; {CAVEAT}; not informative: the baseline's BLEU 0.50 < 5, chrF 12.00 < 20"
    )
    assert below_floor({"BLEU": 6.0, "chrF": 19.99}) == "not informative: the baseline's chrF 19.99 < 20"
    assert below_floor({"BLEU": 5.0, "chrF": 20.0}) is None


def test_three_seeds_are_decided_by_a_paired_t_test_over_the_seeds_issue_47():
    from flows.reports.train_nmt_report import summary_lines

    lines = summary_lines({"train_nmt": _summary(THREE_SEEDS, {"BLEU": 0.002, "chrF": 0.5}, [1, 2, 3])})
    # BLEU: d = (1.0, 0.2, 2.0), t = 1.0667 / (0.9018 / √3) = 2.0486, 2 df -> p = 0.177; chrF: d = (1, -1, 1),
    # t = 0.3333 / (1.1547 / √3) = 0.5 -> p = 0.667. The bootstrap's p over test sentences is printed beside them.
    assert lines == [
        "bitext (baseline): BLEU = 31.00 ± 1.00, chrF = 51.00 ± 1.00 on t (mean ± sd over 3 seeds)  sig-BLEU",
        "bitext_synth: +1.1 BLEU (p = 0.18), +0.3 chrF (p = 0.67); BLEU = 32.07 ± 1.01, chrF = 51.33 ± 0.58 on t "
        "(mean ± sd over 3 seeds); decided by a paired t-test over the seeds' corpus scores (3 seeds); test sentences "
        "resampled: BLEU p = 0.002, chrF p = 0.5",
    ]


def test_seeds_test_is_a_paired_t_test_with_its_degenerate_cases():
    assert seeds_test([31.0, 32.2, 33.0], [30.0, 32.0, 31.0]) == pytest.approx(0.17704880020217584, rel=1e-12)
    assert seeds_test([51.0, 51.0, 52.0], [50.0, 52.0, 51.0]) == pytest.approx(2 / 3, rel=1e-12)  # |t| = 0.5, 2 df
    assert seeds_test([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == 1.0  # no difference at all
    assert seeds_test([2.0, 3.0, 4.0], [1.0, 2.0, 3.0]) is None  # the same Δ on every seed: nothing to test
    assert seeds_test([2.0, 3.0], [1.0, 1.0]) is None  # under 3 seeds


def test_the_report_table_and_axes_say_what_they_show_issue_47():
    from flows.reports.train_nmt_report import comparison_table

    one = comparison_table(_summary(ONE_SEED_WEAK, {"BLEU": 0.002, "chrF": 0.4}, [1])["summary"]).to_pylist()[1]
    assert (one["BLEU mean ± sd over seeds"], one["p BLEU (t-test over seeds)"], one["p BLEU (test sentences, bootstrap)"]) == (
        "0.20 ± n/a (1 seed)",
        "n/a (< 3 seeds)",
        "0.002",
    )
    assert (one["decided by"], one["note"]) == (
        "paired bootstrap over test sentences (training variance not measured)",
        "not informative: the baseline's BLEU 0.50 < 5, chrF 12.00 < 20",
    )
    three = comparison_table(_summary(THREE_SEEDS, {"BLEU": 0.002, "chrF": 0.5}, [1, 2, 3])["summary"]).to_pylist()[1]
    assert (three["BLEU mean ± sd over seeds"], three["p BLEU (t-test over seeds)"], three["decided by"], three["note"]) == (
        "32.07 ± 1.01",
        "0.18",
        "paired t-test over 3 seeds",
        "",
    )
    assert [axis_label("BLEU", s) for s in ([1, 1], [3, 3], [1, 3])] == [
        "BLEU, 1 seed (no spread)",
        "BLEU, mean ± sd over 3 seeds",
        "BLEU, mean ± sd over 1–3 seeds per arm",
    ]
    assert (spread(0.51, 0.0, 1), spread(0.51, 0.0, 2)) == ("0.51 ± n/a (1 seed)", "0.51 ± 0.00")


def test_the_cli_prints_a_verdict_line_unwrapped_when_piped_issue_47(tmp_path):
    """`augdag run`'s summary printer, its output piped (160 columns): a 250-character verdict line stays whole."""
    script = tmp_path / "print.py"
    script.write_text(
        "import json, sys\nfrom flows.cli.run import print_summary\n"
        "print_summary({'pipeline': 'train_nmt', 'status': 'completed', 'run_id': 'r', 'stages': [],"
        " 'train_nmt': json.loads(sys.argv[1])})\n"
    )
    summary = _summary(ONE_SEED_WEAK, {"BLEU": 0.002, "chrF": 0.4}, [1])
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(summary)], cwd=REPO, env=subprocess_env(tmp_path), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("bitext_synth: "))
    assert len(line) > 160 and line.endswith(f"{CAVEAT}; not informative: the baseline's BLEU 0.50 < 5, chrF 12.00 < 20")
