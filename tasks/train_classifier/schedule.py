"""The curriculum sampler of PCC Alg. 1: which difficulty level each training step draws from, and its batch.

Schedules (every one runs ``(C + 1) × cycles × steps_per_level`` steps, so they compare at equal compute):

    original        level 0 throughout: no augmentation (the baseline)
    none            every augmented level mixed at every step: the same paraphrases, no curriculum
    two_stage       level 0 for a 1/(C+1) share of the steps, then every level mixed (Wei et al. 2021)
    gradual         0, 1, …, C once, each level (cycles × steps_per_level) steps
    cyclic          (0, 1, …, C) repeated ``cycles`` times (PCC, Alg. 1)
    inverse_cyclic  0 … C, then C … 0, alternating (what the authors' released code ran on its second pass)

A batch follows Alg. 1: ``batch_size`` original sentences drawn uniformly (a fresh permutation per
epoch), of which a share ``original_share`` (20 % in the paper) stays original and the rest is
replaced by one of that sentence's paraphrases at the step's level, picked uniformly; a sentence with
none at that level stays original. Seeded: the same arguments give the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from conf.errors import ConfError, InputError

SCHEDULES = ("original", "none", "two_stage", "gradual", "cyclic", "inverse_cyclic")
MIXED = -1  # a step that draws from every augmented level


def level_schedule(schedule: str, *, levels: int, cycles: int, steps_per_level: int) -> list[int]:
    """The level of every step (``MIXED`` = all augmented levels), levels 0..``levels``."""
    ascending = list(range(levels + 1))
    total = (levels + 1) * cycles * steps_per_level
    if schedule == "original":
        return [0] * total
    if schedule == "none":
        return [MIXED] * total
    if schedule == "two_stage":
        first = cycles * steps_per_level
        return [0] * first + [MIXED] * (total - first)
    if schedule == "gradual":
        return [lv for lv in ascending for _ in range(cycles * steps_per_level)]
    if schedule == "cyclic":
        passes = [ascending] * cycles
    elif schedule == "inverse_cyclic":
        passes = [ascending if c % 2 == 0 else ascending[::-1] for c in range(cycles)]
    else:
        raise ConfError(f"train_classifier.schedule: expected one of {', '.join(SCHEDULES)}, found {schedule!r}")
    return [lv for order in passes for lv in order for _ in range(steps_per_level)]


def curriculum_batches(
    parent: Sequence[str],
    level: Sequence[int],
    uid: Sequence[str],
    steps: Sequence[int],
    *,
    batch_size: int,
    original_share: float,
    seed: int,
) -> Iterator[np.ndarray]:
    """Row indices of each step's batch over a curriculum table (columns ``parent_uid``, ``level``, ``uid``).

    Originals are the rows whose ``uid`` equals their ``parent_uid`` (level 0)."""
    parent, level, uid = np.asarray(parent, dtype=object), np.asarray(level), np.asarray(uid, dtype=object)
    originals = np.flatnonzero((uid == parent) & (level == 0))
    if len(originals) == 0:
        found = sorted({int(lv) for lv in level}) if len(level) else "none"
        raise InputError(
            f"curriculum (columns level, uid, parent_uid): expected at least one original row (level 0, "
            f"uid = parent_uid), found none in {len(uid):,} rows, levels {found}. Hint: train on "
            "the curriculum of a dataset the paraphrase pipeline ran on (train_classifier.dataset)"
        )
    row_of = {p: i for i, p in enumerate(parent[originals])}
    by_level: dict[int, list[list[int]]] = {}
    for r in np.flatnonzero(level > 0):
        for key in (int(level[r]), MIXED):
            by_level.setdefault(key, [[] for _ in originals])[row_of[parent[r]]].append(int(r))
    rng = np.random.default_rng(seed)
    keep = round(original_share * batch_size)
    order, pos = rng.permutation(len(originals)), 0
    none: list[list[int]] = [[] for _ in originals]  # a level no sentence has: every step stays original
    for lv in steps:
        paraphrases = by_level.get(lv, none)
        picked = []
        for _ in range(batch_size):
            if pos == len(order):
                order, pos = rng.permutation(len(originals)), 0
            picked.append(order[pos])
            pos += 1
        batch = []
        for j, o in enumerate(picked):
            options = paraphrases[o] if lv != 0 and j >= keep else []
            batch.append(options[rng.integers(len(options))] if options else originals[o])
        yield np.asarray(batch, dtype=np.int64)
