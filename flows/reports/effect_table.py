"""A night's verdict table (issue 50): per augmentation, the rows it made, its effect on the downstream model that
reads them (with the significance, in flows/reports/verdicts.py's wording) and what the size of the night lets that
effect mean.

The rows come from the registry (flows/engine/registry.py): an augmentation is a pipeline that reads another one and
measures nothing itself (no ``effects``); a training pipeline's ``effects`` name, per arm, the views the arm adds to
its baseline's data, and a view's maker is the augmentation the arm measures. An augmentation that no arm of the
night reads gets a row that says so: its rows were made, their effect was not measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from flows.engine import registry
from flows.reports.verdicts import MIN_SEEDS, SEEDS_TEST

EFFECTS_DOC = "docs/effects.md"
NOT_READ = "not measured: no arm trains on it"


@dataclasses.dataclass(frozen=True)
class EffectRow:
    """One row of the verdict table: the augmentation, the rows it made (its headline's ``made``), the downstream model
    and arm, the effect with its p, and its caveat (empty where nothing limits the reading)."""

    augmentation: str
    made: str
    model: str
    effect: str
    caveat: str


def seeds_caveat(seeds: int, *, sentences_p: bool = False) -> str:
    """What decided an effect, in short: from ``MIN_SEEDS`` seeds ``3 seeds: paired t-test over the seeds' corpus
    scores``; under it ``1 seed: p resamples test sentences`` for a pipeline with a sentence-level test
    (``sentences_p``: training variance not measured), else ``1 seed: untested``."""
    counted = f"{seeds} seed{'s' if seeds != 1 else ''}"
    if seeds >= MIN_SEEDS:
        return f"{counted}: {SEEDS_TEST}"
    return f"{counted}: {'p resamples test sentences' if sentences_p else 'untested'}"


def counted(n: int, noun: str) -> str:
    """``1 student``, ``2 students``."""
    return f"{n:,} {noun}{'s' if n != 1 else ''}"


def is_augmentation(name: str) -> bool:
    """Whether registered pipeline ``name`` makes rows for others to train on: it reads another pipeline and measures
    no effect itself."""
    pipeline = registry.load().get(name)
    return pipeline is not None and bool(pipeline.reads) and pipeline.effects is None


def effect_rows(children: Sequence[Mapping[str, Any]]) -> list[EffectRow]:
    """The verdict table of a night's pipeline summaries (``children``, in the night's order): a row per augmentation
    and arm that reads its rows (on each test set that ``measures`` it), then a row per augmentation no arm reads. An
    augmentation that did not complete makes no row (the night's failure lines say why)."""
    done = {c["pipeline"]: c for c in children if c.get("status") == "completed"}
    makers = {view: name for name in done for view in registry.get(name).views if is_augmentation(name)}
    rows: list[EffectRow] = []
    measured: set[str] = set()
    for child in done.values():
        for e in registry.effects(child):
            for name in sorted({makers[v] for v in e.reads if v in makers}, key=list(done).index):
                if not measures(e.testset, done[name], name):
                    continue
                measured.add(name)
                rows.append(EffectRow(name, made(done[name]), e.model, e.effect, e.caveat))
    for name in (n for n in done if is_augmentation(n) and n not in measured):
        rows.append(EffectRow(name, made(done[name]), "-", NOT_READ, ""))
    return sorted(rows, key=lambda r: list(done).index(r.augmentation))


def noise_of(testset: str) -> frozenset[str]:
    """The OpusTrainer modifiers a noised test set applies, read from its label ``<dataset>+<Modifier>[+...]``
    (conf/sections/experiments.py ``NoisedTest.label``; a dataset name has no ``+``): ``demo_test+UpperCase`` ->
    {UpperCase}; none for a held-out set as it is, or a noised one given its own ``name``."""
    return frozenset(testset.split("+")[1:])


def measures(testset: str, summary: Mapping[str, Any], name: str) -> bool:
    """Whether an effect on ``testset`` measures augmentation ``name`` (its run's ``summary``): a held-out set as it is
    measures every augmentation; a noised one (``noise_of``) only one whose run made rows with one of its modifiers
    (its summary's ``modifiers``: rows per modifier), the robustness it is there to show. The other arms' scores on
    it stay in the report and ``evaluations``."""
    noise = noise_of(testset)
    if not noise:
        return True
    made = (summary.get(name) or {}).get("modifiers") or {}
    return isinstance(made, Mapping) and any(made.get(m) for m in noise)


def made(summary: Mapping[str, Any]) -> str:
    """What a run made, from its headline; ``-`` for a pipeline without one."""
    line = registry.headline(summary)
    return line.made if line is not None else "-"


def size_note(children: Sequence[Mapping[str, Any]], *, demo: bool, models: str = "") -> str | None:
    """What the night's size lets its effects mean, in one line; None when every effect was decided across
    ``MIN_SEEDS`` seeds or more and the night is not the demo.

    Args:
        children: The night's pipeline summaries.
        demo: Whether the night ran the packaged demo profile (its models are tiny by design).
        models: The downstream models' size in words, e.g. ``2+2-layer, 64-dim students trained 300 updates``.

    Returns:
        The note, e.g. ``Size: tiny models (…), 1 seed: a check that the plumbing works, not a measure of the method;
        see docs/effects.md``.
    """
    seeds = sorted({e.seeds for c in children if c.get("status") == "completed" for e in registry.effects(c)})
    few = [s for s in seeds if s < MIN_SEEDS]
    if not demo and not few:
        return None
    counts = f"{'–'.join(map(str, (seeds[0], seeds[-1]) if seeds[0] != seeds[-1] else seeds[:1]))} seed" if seeds else ""
    counts += "s" if seeds and seeds[-1] != 1 else ""
    if demo:
        what = ", ".join(x for x in (f"tiny models ({models})" if models else "tiny models", counts) if x)
        return f"Size: the demo's {what}: a check that the plumbing works, not a measure of the method; see {EFFECTS_DOC}"
    return (
        f"Size: {counts} per arm: training variance is not measured, a p resamples test sentences only; "
        f"use ≥ {MIN_SEEDS} seeds; see {EFFECTS_DOC}"
    )
