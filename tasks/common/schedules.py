"""Schedules as samplers: PCC's curriculum (Alg. 1) and EPiDA's selected samples, over their views' rows.

The one implementation: ``train_classifier`` trains with these objects, and ``augdag.samplers`` hands the same
ones to a user's own trainer, so a trainer outside augdag sees the batches augdag's trainer saw.

Curriculum schedules (every one runs ``(C + 1) × cycles × steps_per_level`` steps, so they compare at equal compute):

    original        level 0 throughout: no augmentation (the baseline)
    none            every augmented level mixed at every step: the same paraphrases, no curriculum
    two_stage       level 0 for a 1/(C+1) share of the steps, then every level mixed (Wei et al. 2021)
    gradual         0, 1, …, C once, each level (cycles × steps_per_level) steps
    cyclic          (0, 1, …, C) repeated ``cycles`` times (PCC, Alg. 1)
    inverse_cyclic  0 … C, then C … 0, alternating (what the authors' released code ran on its second pass)

A batch follows Alg. 1: ``batch_size`` original sentences drawn uniformly (a fresh permutation per epoch), of which
a share ``original_share`` (20 % in the paper) stays original and the rest is replaced by one of that sentence's
paraphrases at the step's level, picked uniformly; a sentence with none at that level stays original. Seeded: the
same rows and parameters give the same batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError, InputError

SCHEDULES = ("original", "none", "two_stage", "gradual", "cyclic", "inverse_cyclic")
MIXED = -1  # a step that draws from every augmented level
CURRICULUM_ORDER = ("parent_uid", "level", "rank", "copy")  # the `curriculum` view's rows as the sampler indexes them
BATCHES = pa.schema([("step", pa.int32()), ("level", pa.int32()), ("position", pa.int32()), ("uid", pa.string())])


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


def as_table(rows: Any, *, view: str) -> pa.Table:
    """``rows`` as a pyarrow Table: a Table as it is, a pinned view (anything with ``to_arrow()``, ``augdag.View``)
    read; else an ``InputError`` naming the ``view`` expected."""
    if isinstance(rows, pa.Table):
        return rows
    if callable(getattr(rows, "to_arrow", None)):
        table = rows.to_arrow()
        if isinstance(table, pa.Table):
            return table
    raise InputError(
        f"{view}: expected the rows as a pyarrow.Table or a view (augdag.View), found {type(rows).__name__}. "
        f'Hint: augdag.open(CACHE).latest(PIPELINE).view("{view}")'
    )


def require(rows: pa.Table, columns: Sequence[str], *, view: str) -> None:
    """An ``InputError`` naming the ``view`` and the columns ``rows`` lacks."""
    if missing := [c for c in columns if c not in rows.column_names]:
        raise InputError(
            f"{view}: the rows have columns {rows.column_names}; missing {missing}. Hint: read the whole "
            f"`{view}` view (SELECT * FROM {view}), or at least {list(columns)}"
        )


def one_curriculum(rows: pa.Table) -> None:
    """An ``InputError`` when ``rows`` hold more than one dataset's curriculum, or one row twice (the rows of more
    than one night): the sampler would train on them all."""
    hint = "Hint: read the view pinned to one run, with where=\"source = '<dataset>'\""
    if "source" in rows.column_names and len(sources := pc.unique(rows["source"])) > 1:
        raise InputError(
            f"curriculum: the rows hold {len(sources)} datasets {sorted(sources.to_pylist())}; one is sampled. {hint}"
        )
    distinct = rows.group_by(list(CURRICULUM_ORDER)).aggregate([]).num_rows
    if distinct != rows.num_rows:
        raise InputError(
            f"curriculum: {rows.num_rows:,} rows but {distinct:,} distinct ({', '.join(CURRICULUM_ORDER)}): rows of "
            f"more than one night's curriculum. {hint}"
        )


@dataclasses.dataclass(frozen=True)
class Curriculum:
    """PCC's curriculum (Alg. 1) as a sampler over the `curriculum` view's rows of one dataset.

    ``rows`` are put in the view's order (``CURRICULUM_ORDER``: by original, level, rank, copy) whatever order they
    came in, so the same rows and parameters give the same batches as ``train_classifier`` trained with (it records
    them beside the classifier, ``batches.parquet``: ``record()``'s table).

    Args:
        rows: the `curriculum` rows of one dataset, a Table or a pinned view (uid, parent_uid, level, rank, copy;
            text and label to train on).
        schedule: one of ``SCHEDULES`` (``train_classifier.schedule``).
        levels: C, the highest difficulty level (``paraphrase.levels``).
        cycles: passes over the levels (``train_classifier.cycles``).
        steps_per_level: steps at one level in one pass (``train_classifier.steps_per_level``).
        batch_size: rows per step (``train_classifier.batch_size``).
        original_share: the share of a batch kept original (Alg. 1's 20 %; ``train_classifier.original_share``).
        seed: the sampler's seed (the arm's seed in ``train_classifier``).
    """

    rows: pa.Table
    schedule: str
    levels: int
    cycles: int
    steps_per_level: int
    batch_size: int
    original_share: float
    seed: int

    def __post_init__(self) -> None:
        rows = as_table(self.rows, view="curriculum")
        require(rows, ("uid", *CURRICULUM_ORDER), view="curriculum")
        level_schedule(self.schedule, levels=self.levels, cycles=self.cycles, steps_per_level=self.steps_per_level)
        one_curriculum(rows)
        ordered = rows.sort_by([(c, "ascending") for c in CURRICULUM_ORDER])
        object.__setattr__(self, "rows", ordered)

    def steps(self) -> list[int]:
        """The level of every training step (``MIXED``: every augmented level at once)."""
        return level_schedule(self.schedule, levels=self.levels, cycles=self.cycles, steps_per_level=self.steps_per_level)

    def indices(self) -> Iterator[np.ndarray]:
        """Each step's batch as indices into ``rows``."""
        return curriculum_batches(
            self.rows["parent_uid"].to_pylist(),
            self.rows["level"].to_pylist(),
            self.rows["uid"].to_pylist(),
            self.steps(),
            batch_size=self.batch_size,
            original_share=self.original_share,
            seed=self.seed,
        )

    def __iter__(self) -> Iterator[pa.Table]:
        """Each step's batch: its rows of ``rows`` (a paraphrase drawn twice appears twice)."""
        for batch in self.indices():
            yield self.rows.take(pa.array(batch))

    def record(self) -> pa.Table:
        """Every batch position: (step, level of the step, position in the batch, uid of the row), in order."""
        uids, steps = self.rows["uid"], self.steps()
        picked = list(self.indices())
        flat = np.concatenate(picked) if picked else np.zeros(0, np.int64)
        sizes = [len(b) for b in picked]
        return pa.table(
            {
                "step": pa.array(np.repeat(np.arange(len(picked)), sizes), pa.int32()),
                "level": pa.array(np.repeat(np.asarray(steps[: len(picked)], np.int64), sizes), pa.int32()),
                "position": pa.array(np.concatenate([np.arange(n) for n in sizes]) if sizes else [], pa.int32()),
                "uid": uids.take(pa.array(flat)),
            },
            schema=BATCHES,
        )


@dataclasses.dataclass(frozen=True)
class SelectedSamples:
    """EPiDA's selection as a sampler over the `augmented` view: per round, the candidates SEAS kept (Alg. 1).

    Round 0 is the one-time augmentation (what ``train_classifier``'s ``epida`` arm adds to the originals, Eq. 14);
    round r the r-th online reselection. Each round's rows are ordered by (parent_uid, uid).

    Args:
        rows: `augmented` rows, a Table or a pinned view (uid, parent_uid, round, selected; what to train on: text,
            label, ...).
    """

    rows: pa.Table

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", as_table(self.rows, view="augmented"))
        require(self.rows, ("uid", "parent_uid", "round", "selected"), view="augmented")

    def rounds(self) -> list[int]:
        """The rounds with a selected row, ascending."""
        chosen = self.rows.filter(pc.fill_null(self.rows["selected"], False))
        return sorted({int(r) for r in chosen["round"].to_pylist()})

    def round(self, number: int) -> pa.Table:
        """The rows selected in round ``number``, by original then uid (empty when that round selected none)."""
        keep = pc.and_(pc.fill_null(self.rows["selected"], False), pc.equal(self.rows["round"], number))
        return self.rows.filter(keep).sort_by([("parent_uid", "ascending"), ("uid", "ascending")])

    def __iter__(self) -> Iterator[tuple[int, pa.Table]]:
        """(round, its selected rows) for every round that selected rows."""
        for number in self.rounds():
            yield number, self.round(number)
