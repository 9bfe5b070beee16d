"""What a comparison of trained models may claim, in one wording shared by every training pipeline's summary lines
and report (issue 47): train_nmt, train_classifier, train_slot_tagger.

- Spread: the sample sd over seeds, printed ``31.00 ± 1.41`` with the seed count; with one seed there is no spread
  to print, and the value reads ``0.51 ± n/a (1 seed)``, never ``± 0.00``.
- What a p-value resamples: sacrebleu's paired bootstrap (tasks/train_nmt/significance.py) resamples test
  sentences of the seeds' outputs concatenated; it does not see how much another seed would move a score
  (training variance). With fewer than ``MIN_SEEDS`` seeds per arm every such p says so (``SENTENCES_CAVEAT``).
- Across seeds: with ``MIN_SEEDS`` or more seeds per arm, ``seeds_test`` (a paired t-test over the per-seed corpus
  scores) decides, and the line names it; the sentence-resampling p is printed beside it.
- Floors: a baseline below BLEU 5 or chrF 20 (``FLOORS``), or a classifier's accuracy at chance
  (``chance_accuracy``), makes any comparison with it not informative, and the line says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from conf.errors import InputError

MIN_SEEDS = 3  # seeds per arm before the across-seeds test runs (a t-test on 2 pairs has 1 degree of freedom)
SENTENCES_CAVEAT = f"p resamples test sentences; training variance not measured: use ≥ {MIN_SEEDS} seeds"
FLOORS = {"BLEU": 5.0, "chrF": 20.0}  # a baseline below these translates too little for a Δ to mean anything
SEEDS_TEST = "paired t-test over the seeds' corpus scores"


def spread(mean: float, sd: float, seeds: int, *, digits: int = 2) -> str:
    """A mean over seeds and its sample sd: ``31.00 ± 1.41``; with one seed ``0.51 ± n/a (1 seed)``.

    Args:
        mean: The mean score over the seeds.
        sd: The sample sd over the seeds (``tasks.common.evaluation.mean_sd`` gives 0.0 for one seed).
        seeds: How many seeds the mean is over.
        digits: Decimals of both numbers.

    Returns:
        The mean and its spread as text.
    """
    if seeds < 2:
        return f"{mean:.{digits}f} ± n/a (1 seed)"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def seeds_phrase(seeds: int) -> str:
    """What a ``spread`` with ``seeds`` ≥ 2 shows, ``mean ± sd over 3 seeds``; nothing for one seed (its ``spread``
    says it)."""
    return f"mean ± sd over {seeds} seeds" if seeds > 1 else ""


def over_seeds(seeds: int) -> str:
    """``seeds_phrase`` in parentheses after a space, `` (mean ± sd over 3 seeds)``; nothing for one seed."""
    return f" ({seeds_phrase(seeds)})" if seeds > 1 else ""


def axis_label(metric: str, seeds: Sequence[int]) -> str:
    """A plot's value axis: ``BLEU, mean ± sd over 3 seeds``, ``BLEU, 1 seed (no spread)``, or for arms of unequal
    seed counts ``BLEU, mean ± sd over 1–3 seeds per arm``."""
    low, high = min(seeds), max(seeds)
    if high < 2:
        return f"{metric}, 1 seed (no spread)"
    return f"{metric}, mean ± sd over {low if low == high else f'{low}–{high}'} seeds" + (" per arm" if low != high else "")


def p_value_text(p: float | None) -> str:
    """A p-value to two significant digits; ``n/a`` when there is none."""
    return "n/a" if p is None else f"{p:.2g}"


def seeds_test(scores: Sequence[float], baseline: Sequence[float]) -> float | None:
    """Two-sided p of a paired t-test (``scipy.stats.ttest_rel``) over per-seed corpus scores: pair i is seed i of
    the arm and seed i of the baseline, d_i = scores_i − baseline_i, t = mean(d) / (sd(d) / √n), n − 1 degrees of
    freedom.

    Why this test: it measures training variance, which resampling test sentences cannot; a sign-flip permutation
    over the seed pairs needs no normality but its smallest two-sided p is 2 / 2ⁿ (0.25 at 3 seeds, 0.0625 at 5),
    so it could never reject at the seed counts people train; the t-test assumes the per-seed differences are
    roughly normal. Degenerate pairs: every d_i = 0 gives p = 1 (no difference, as
    tasks.train_nmt.significance rules for identical outputs); every d_i equal but not 0 gives None (no spread
    to test: the t statistic is infinite).

    Args:
        scores: The arm's corpus score per seed.
        baseline: The baseline's corpus score per seed, in the same seed order.

    Returns:
        The p-value, or None with fewer than ``MIN_SEEDS`` pairs or equal non-zero differences.
    """
    if len(scores) != len(baseline):
        raise InputError(f"seeds_test: {len(scores)} scores for {len(baseline)} baseline scores")
    if len(scores) < MIN_SEEDS:
        return None
    d = [a - b for a, b in zip(scores, baseline)]
    if statistics.pstdev(d) == 0:
        return 1.0 if d[0] == 0 else None
    from scipy.stats import ttest_rel

    return float(ttest_rel(scores, baseline).pvalue)


def seeds_verdict(seeds: int, *, p_sentences: Mapping[str, float | None] | None = None) -> str:
    """What decided an arm's verdict: with ≥ ``MIN_SEEDS`` seeds the across-seeds test (and, when given, the
    sentence-resampling p per metric beside it); with fewer, ``SENTENCES_CAVEAT``, or, for a pipeline without a
    sentence-level test, that the difference is untested.

    Args:
        seeds: Seeds per arm.
        p_sentences: Metric -> the paired bootstrap's p, for pipelines that have one (train_nmt).

    Returns:
        The clause, e.g. ``decided by a paired t-test over the seeds' corpus scores (3 seeds); test sentences
        resampled: BLEU p = 0.03, chrF p = 0.5``.
    """
    if seeds < MIN_SEEDS:
        return (
            SENTENCES_CAVEAT if p_sentences is not None else f"untested: training variance not measured: use ≥ {MIN_SEEDS} seeds"
        )
    out = f"decided by a {SEEDS_TEST} ({seeds} seeds)"
    if p_sentences:
        out += "; test sentences resampled: " + ", ".join(f"{m} p = {p_value_text(p)}" for m, p in p_sentences.items())
    return out


def seeds_p_text(p: float | None) -> str:
    """``seeds_test``'s p as text; ``n/a, the same Δ on every seed`` where it has none."""
    return "n/a, the same Δ on every seed" if p is None else p_value_text(p)


def versus(scores: Sequence[float], baseline: Sequence[float], *, against: str, digits: int = 4) -> str:
    """An arm against a baseline arm by per-seed scores alone (pipelines without a sentence-level test):
    ``Δ +0.0200 vs none (p = 0.04), decided by a paired t-test over the seeds' corpus scores (3 seeds)``, or under
    ``MIN_SEEDS`` seeds ``Δ +0.0200 vs none, untested: training variance not measured: use ≥ 3 seeds``.

    Args:
        scores: The arm's score per seed.
        baseline: The baseline arm's score per seed, in the same seed order.
        against: The baseline arm's name.
        digits: Decimals of Δ.

    Returns:
        The clause.
    """
    delta = statistics.fmean(scores) - statistics.fmean(baseline)
    head = f"Δ {delta:+.{digits}f} vs {against}"
    if len(scores) < MIN_SEEDS:
        return f"{head}, {seeds_verdict(len(scores))}"
    return f"{head} (p = {seeds_p_text(seeds_test(scores, baseline))}), {seeds_verdict(len(scores))}"


def below_floor(baseline_means: Mapping[str, float]) -> str | None:
    """``not informative: the baseline's BLEU 0.50 < 5, chrF 12.00 < 20`` when a baseline mean is under its
    ``FLOORS`` entry (every such metric named), else None."""
    low = [f"{m} {v:.2f} < {FLOORS[m]:g}" for m, v in baseline_means.items() if m in FLOORS and v < FLOORS[m]]
    return f"not informative: the baseline's {', '.join(low)}" if low else None


def chance_accuracy(labels: int, sentences: int) -> float:
    """The accuracy still "at chance": a uniform guess over ``labels`` classes, c = 1/k, plus two binomial sd of
    such a guesser's accuracy on ``sentences`` test rows, c + 2·√(c(1 − c)/n). The uniform guess, not the majority
    class's share: the summary knows the label set, not the test set's label counts."""
    c = 1 / labels
    return c + 2 * math.sqrt(c * (1 - c) / sentences)


def at_chance(accuracy: float, labels: int, sentences: int) -> str | None:
    """``at chance (≤ 1/6 + 2 binomial sd on 50 test rows = 0.2721)`` when ``accuracy`` is at or under
    ``chance_accuracy``, else None."""
    limit = chance_accuracy(labels, sentences)
    if accuracy > limit:
        return None
    return f"at chance (≤ 1/{labels} + 2 binomial sd on {sentences} test rows = {limit:.4f})"
