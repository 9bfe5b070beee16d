"""Recorded runs as the catalog holds them: a run's row, the pipeline runs it covers with their stage
reports, its evaluation scores and the Parquet parts of the views it produced.

Read-only lookups over `storage.catalog.Catalog` (no Prefect, no HTML); `augdag retry` and `augdag report`
read runs through them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from conf.errors import CatalogError
from storage import objects
from storage.cache_root import resolve
from storage.catalog import Catalog

RECENT = 5  # run ids an unknown-id error lists
ROLES = ("part", "rejects", "dropped")  # the roles of a stage's output that come first, in this order


def load_run(catalog: Catalog, run_id: str) -> dict[str, Any]:
    """The `runs` row of ``run_id``, its summary parsed; an unknown id raises CatalogError naming recent ones."""
    if (row := find_run(catalog, run_id)) is not None:
        return row
    recent = catalog.query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT $n", {"n": RECENT})
    listed = ", ".join(recent["run_id"].to_pylist()) or "none (the catalog has no runs)"
    raise CatalogError(f"{catalog.path}: no run {run_id!r}; the most recent runs: {listed}. Hint: `augdag runs` lists them")


def find_run(catalog: Catalog, run_id: str) -> dict[str, Any] | None:
    """The `runs` row of ``run_id`` with its config and summary parsed, or None."""
    rows = catalog.query(
        "SELECT run_id, pipeline, profile, status, started_at, finished_at, config, summary FROM runs WHERE run_id = $r",
        {"r": run_id},
    ).to_pylist()
    if not rows:
        return None
    row = rows[0]
    return {
        **row,
        "config": json.loads(row["config"]) if row["config"] else {},
        "summary": json.loads(row["summary"]) if row["summary"] else {},
    }


def older_first(catalog: Catalog, run_a: str, run_b: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two runs' rows, the one that started first first."""
    a, b = load_run(catalog, run_a), load_run(catalog, run_b)
    return (a, b) if (a["started_at"], a["run_id"]) <= (b["started_at"], b["run_id"]) else (b, a)


def pipeline_runs(catalog: Catalog, run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pipeline runs a report covers: a nightly run's pipelines in its order, else the run itself.

    Each has pipeline, run_id (None for a skipped pipeline), status, error, seconds, stages (the summary's
    stage reports; from `stage_runs` when the run recorded no summary) and row (its `runs` row or None).
    """
    if run["pipeline"] != "nightly":
        children = [{**run["summary"], "pipeline": run["pipeline"], "run_id": run["run_id"], "status": run["status"]}]
    else:
        children = run["summary"].get("pipelines", [])
    out = []
    for child in children:
        row = (
            run if child.get("run_id") == run["run_id"] else (find_run(catalog, child["run_id"]) if child.get("run_id") else None)
        )
        stages = (
            child.get("stages")
            or (row and row["summary"].get("stages"))
            or (stages_from_stage_runs(catalog, child["run_id"]) if child.get("run_id") else [])
        )
        seconds = child.get("seconds", duration(row))
        out.append(
            {
                "pipeline": child["pipeline"],
                "run_id": child.get("run_id"),
                "status": child["status"],
                "error": child.get("error"),
                "seconds": seconds,
                "stages": stages,
                "row": row,
            }
        )
    return out


def stages_from_stage_runs(catalog: Catalog, run_id: str) -> list[dict[str, Any]]:
    """Stage reports rebuilt from the shard rows of a run that has no summary (still running, or killed)."""
    rows = catalog.query(
        "SELECT stage, dataset, fingerprint, count(*) AS shards, count(*) FILTER (status = 'computed') AS computed,"
        " count(*) FILTER (status = 'failed') AS failed, sum(rows_in) AS rows_in, sum(rows_out) AS rows_out,"
        " sum(seconds) AS seconds, max(error) AS error FROM stage_runs WHERE run_id = $r GROUP BY ALL"
        " ORDER BY min(started_at) NULLS LAST, stage, dataset",
        {"r": run_id},
    ).to_pylist()
    return [
        {
            "stage": r["stage"],
            "dataset": r["dataset"],
            "fingerprint": r["fingerprint"],
            "status": "failed" if r["failed"] else "computed" if r["computed"] else "cached",
            "shards": r["shards"],
            "shards_computed": r["computed"],
            "rows_in": r["rows_in"] or 0,
            "rows_out": {} if r["failed"] else {"part": r["rows_out"] or 0},
            "seconds": r["seconds"] or 0.0,
            "error": r["error"],
        }
        for r in rows
    ]


def evaluations(catalog: Catalog, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The evaluation scores the runs recorded, oldest first."""
    return catalog.query(
        "SELECT run_id, model_name, testset, metric, score, sentences, signature, model FROM evaluations"
        " WHERE list_contains($ids, run_id) ORDER BY created_at, model_name, testset, metric",
        {"ids": list(run_ids)},
    ).to_pylist()


def view_parts(catalog: Catalog, run_ids: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """The main Parquet parts of the artifacts the runs used, by view and fingerprint (parts on disk only)."""
    rows = catalog.query(
        "SELECT view, fingerprint, path, manifest FROM artifacts WHERE view IS NOT NULL AND fingerprint IN "
        "(SELECT fingerprint FROM stage_runs WHERE list_contains($ids, run_id) AND status <> 'failed') "
        "ORDER BY view, fingerprint",
        {"ids": list(run_ids)},
    ).to_pylist()
    out: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        files = [
            objects.join(resolve(catalog.root, r["path"]), f["file"])
            for f in json.loads(r["manifest"])["files"]
            if f["role"] == "part"
        ]
        out.setdefault(r["view"], {})[r["fingerprint"]] = [str(f) for f in files if objects.exists(f)]
    return out


def run_ids(pipes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The run ids of `pipeline_runs` output, skipped pipelines (no run) left out."""
    return [p["run_id"] for p in pipes if p["run_id"]]


def duration(row: Mapping[str, Any] | None) -> float | None:
    """Seconds from a `runs` row's start to its finish; None while it has not finished."""
    if not row or not row["finished_at"] or not row["started_at"]:
        return None
    return (row["finished_at"] - row["started_at"]).total_seconds()


def roles(rows_out: Iterable[Mapping[str, int]]) -> list[str]:
    """The roles of stage reports' ``rows_out`` in a fixed order: the main part, rejects, dropped, then any
    other by name."""
    seen = {r for ro in rows_out for r in ro}
    return [r for r in ROLES if r in seen] + sorted(seen - set(ROLES))
