"""Schedules as samplers: what augdag's own trainers train with, for a trainer outside augdag.

The same objects ``train_classifier`` and ``train_nmt`` use (tasks/common/schedules.py, tasks/common/mix.py), over a
pinned view (``augdag.View``) or a pyarrow Table::

    import augdag
    from augdag.samplers import Curriculum, Mix, SelectedSamples

    night = augdag.open(".augdag").latest("nightly")
    curriculum = Curriculum(                       # PCC Alg. 1, as train_classifier trains (its conf's values)
        night.view("curriculum", where="source = 'demo_labeled'"),
        schedule="cyclic", levels=5, cycles=2, steps_per_level=30, batch_size=16, original_share=0.2, seed=1,
    )
    for step, batch in enumerate(curriculum):      # a pyarrow.Table per step: originals + paraphrases of its level
        ...
    arm = Mix.from_training_mix(night.view("training_mix"), arm="para_10_1")    # a train_nmt arm
    arm = Mix({"bitext": night.view("bitext", columns=["src", "tgt"])}, {"bitext": 10}, arm="x10")  # or your own
    for batch in arm.interleaved(seed=1):          # every row once, the selections in the arm's proportions
        ...
    for round_, rows in SelectedSamples(night.view("augmented", where="source = 'demo_labeled'")):   # EPiDA
        ...

``Curriculum.record()`` is the table of every batch's rows that ``train_classifier`` saves beside its classifier
(``batches.parquet``); ``Mix.table()`` is the arm's `training_mix` artifact, row for row.
"""

from __future__ import annotations

from tasks.common.mix import ARM_MIX, Mix
from tasks.common.schedules import MIXED, SCHEDULES, Curriculum, SelectedSamples

__all__ = ["ARM_MIX", "MIXED", "SCHEDULES", "Curriculum", "Mix", "SelectedSamples"]
