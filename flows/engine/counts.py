"""A run's totals from its stage reports (flows/engine/recording.py ``StageReport``, as the run summary holds them).

Pure functions over the summary's dicts, importable without Prefect (the CLI prints with them before Prefect is
imported: flows/engine/run_log.py). A run's rows are counted in the views its stages filled, each artifact once: adding
up every stage's output counts a row once per stage it passed (read, duplicates, clean: ~3x the data).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def once_per_artifact(stages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The finished stage reports, one per artifact (its first): a nightly's pipelines reuse one another's."""
    first: dict[str, Mapping[str, Any]] = {}
    for s in stages:
        if s["status"] != "failed":
            first.setdefault(s["fingerprint"], s)
    return list(first.values())


def view_rows(stages: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """A run's total: the rows of each catalog view that its stages filled (their parts), each artifact once
    however many of its pipelines used it; internal artifacts (read, duplicates, ...) and failed stages aside."""
    rows: dict[str, int] = {}
    for s in once_per_artifact(stages):
        if s.get("view"):
            rows[s["view"]] = rows.get(s["view"], 0) + s["rows_out"].get("part", 0)
    return dict(sorted(rows.items()))
