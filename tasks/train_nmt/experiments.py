"""train_nmt's arms: an arm's training data (the mix, tagged with its arm and phase) and its continued training.

    arm = (mix, copies) → student per seed  [→ continue_on: (mix', copies') from that checkpoint at lr']

The continued phase is fairseq-train from the arm's checkpoint (``models.nmt.fairseq_train``, ``init``)
with the first model's subwords and dictionary; its learning rate, warm-up and updates are its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa

from conf.schema import NMTConf, NMTTrainConf
from storage.parts import Parts
from tasks.common.evaluation import translate_test
from tasks.common.mix import ARM_MIX, PHASES, Mix
from tasks.common.nmt import part_batches, training_log
from tasks.runtime.stage import Stage

__all__ = ["ARM_MIX", "PHASES", "arm_mix"]  # the `training_mix` view's schema and phases live with the Mix


def arm_mix(selected: Mapping[str, pa.Table], copies: Mapping[str, int], *, arm: str, phase: str) -> pa.Table:
    """The arm's ``tasks.common.mix.Mix`` materialised: its rows with the ``arm`` and ``phase`` (train | continue)."""
    return Mix(selected, copies, arm=arm, phase=phase).table()


def continued_train_conf(
    train: NMTTrainConf, *, lr: float, max_update: int | None, warmup_updates: int, seed: int
) -> NMTTrainConf:
    """The continued phase's settings: the arm's architecture and batch, its own lr, warm-up, updates and seed."""
    return train.model_copy(
        update={"lr": lr, "max_update": max_update or train.max_update, "warmup_updates": warmup_updates, "seed": seed}
    )


def continued_builder(parts: Parts, conf: NMTConf, train: NMTTrainConf, *, init: Path, label: str) -> Callable[[Path], None]:
    """A ``build(path)`` for ``run_model_stage``: fairseq-train from the model at ``init`` on (src → tgt) of the
    parts, with ``train``'s lr and updates; its log goes to ``tasks.common.nmt.training_log``, its updates to
    ``train <label>``."""

    def build(path: Path) -> None:
        from models.nmt.fairseq import train_fairseq_batches
        from tasks.runtime.progress import report

        train_fairseq_batches(
            part_batches(parts),
            path,
            train,
            init=init,
            log=training_log(),
            progress=lambda done, total: report(f"train {label}", done, total),
            threads=conf.threads,
            device=conf.device,
        )

    return build


# each student's translations of a test set (internal: `arm_translations` gathers them into `test_translations`)
TRANSLATE_STUDENT = Stage("translate_student", "2", translate_test, tags=("gpu",))  # 2: bounded per length chunk
