"""`augdag retry`: run a recorded run again with the configuration it recorded.

Because every shard and model is keyed by its fingerprint, running the same configuration again
recomputes only what is missing: the failed shards, and the stages after them. Finished shards show
as Cached in the Prefect UI. ``--stage S`` recomputes S although its output exists; ``--from S``
recomputes S and everything downstream of it in the catalog's lineage (artifacts and models). With
``--set`` overrides the changed stages get new fingerprints and everything below them follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conf.errors import ConfError
from flows.run_artifacts import pipeline_summaries
from storage.catalog import Catalog


def run_stages(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Every stage and model of a run summary (a nightly run's: of all its pipelines)."""
    return [s for child in pipeline_summaries(summary) for s in child.get("stages") or []]


def forced_stages(catalog: Catalog, run: dict[str, Any], *, stage: str | None, start: str | None) -> list[str]:
    """The stage (and model) names to recompute: ``stage``, plus ``start`` and all that descends from it."""
    stages = run_stages(run["summary"])
    names = sorted({s["stage"] for s in stages})
    for name in (stage, start):
        if name is not None and name not in names:
            raise ConfError(f"run {run['run_id']} has no stage {name!r}; its stages and models: {', '.join(names)}")
    forced = {stage} if stage else set()
    if start:
        seeds = sorted({s["fingerprint"] for s in stages if s["stage"] == start})
        forced |= downstream(catalog, seeds) | {start}
    return sorted(forced)


def downstream(catalog: Catalog, fingerprints: Sequence[str]) -> set[str]:
    """Names of the artifacts' stages and the models that descend from ``fingerprints`` (lineage closure)."""
    if not fingerprints:
        return set()
    rows = catalog.query(
        "WITH RECURSIVE down(fp) AS (SELECT unnest($seeds) UNION SELECT l.child FROM lineage l JOIN down d ON l.parent = d.fp) "
        "SELECT a.stage AS name FROM down JOIN artifacts a ON a.fingerprint = down.fp "
        "UNION SELECT m.name FROM down JOIN models m ON m.fingerprint = down.fp",
        {"seeds": list(fingerprints)}).column("name").to_pylist()
    return set(rows)
