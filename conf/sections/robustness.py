"""The robustness section (issue 30): OpusTrainer's modifiers applied to a bitext as a cached stage, materialised
with lineage in the view `robust_bitext`, for train_nmt's mixes; the one-sided ones (casing, typos, end punctuation)
also to the monolingual datasets of ``mono``, in the view `robust_mono`."""

from __future__ import annotations

from typing import Any

from conf.base import ConfModel


class RobustnessConf(ConfModel):
    """``robustness: {bitext: NAME, seed: 0, modifiers: [{UpperCase: 0.05}, {Typos: 0.05}, {Tags: 0.02}]}``: each
    entry OpusTrainer 0.5's modifier name with its probability, its parameters beside it (checked against
    tasks/robustness/spec.py's models when the pipeline is enabled: an unknown modifier or key is one line naming it)."""

    bitext: str | None = None  # the bitext whose pairs are modified (default: the profile's only bitext)
    mono: list[str] = []  # monolingual datasets whose sentences get the one-sided modifiers (view robust_mono)
    seed: int = 0  # every draw is a function of (seed, row uid, modifier): the same rows every night
    modifiers: list[dict[str, Any]] = []  # OpusTrainer's list, in order; each modifier reads the original pairs
