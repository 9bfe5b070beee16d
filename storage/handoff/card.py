"""The dataset card (``README.md``) of an arm exported for Hugging Face: what made it, from what, and what was dropped.

- **Producing run**: the run that built the arm's `training_mix` (its pipeline, profile, status, times).
- **Mix**: each phase's entries, their SQL, copies and rows.
- **Lineage**: the views each entry's SQL reads (DuckDB's ``get_table_names``) and, per view, the artifacts that served
  it when the run started: per (stage, dataset), the one a run used last at or before the run's start (the views'
  own rule, `stage_runs` bounded by time), and every artifact they descend from (the `lineage` table, up to the readers).
- **Filters and their drop counts**: over those artifacts, the rows each stage dropped, by reason (their ``dropped``
  parts, proven against their manifests), and the rows each reader rejected, by reason (`reject_counts`).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import duckdb

from storage import objects
from storage.cache_root import resolve
from storage.catalog import Catalog
from storage.handoff import ArmData
from storage.integrity import read_checked


def views_read(sql: str) -> list[str]:
    """The tables and views ``sql`` names, sorted (DuckDB's parser; [] when it cannot parse it)."""
    try:
        return sorted(duckdb.connect().get_table_names(sql))
    except duckdb.Error:
        return []


def served(catalog: Catalog, views: list[str], before: Any) -> list[dict[str, Any]]:
    """Per (view, stage, dataset) of ``views``, the artifact a run used last at or before ``before``."""
    if not views:
        return []
    return catalog.query(
        "WITH used AS (SELECT fingerprint, max(started_at) AS used FROM stage_runs WHERE $t IS NULL OR started_at <= $t "
        "GROUP BY fingerprint) SELECT a.fingerprint, a.stage, a.dataset, a.view, a.path, a.manifest, a.created_run "
        "FROM artifacts a JOIN used u ON u.fingerprint = a.fingerprint WHERE list_contains($views, a.view) "
        "QUALIFY row_number() OVER (PARTITION BY a.view, a.stage, a.dataset ORDER BY u.used DESC) = 1 "
        "ORDER BY a.view, a.stage, a.dataset",
        {"views": views, "t": before},
    ).to_pylist()


def ancestors(catalog: Catalog, fingerprints: list[str]) -> list[dict[str, Any]]:
    """Every artifact ``fingerprints`` descend from (`lineage`, followed up to the readers), not among them."""
    if not fingerprints:
        return []
    return catalog.query(
        "WITH RECURSIVE up(fp) AS (SELECT unnest($f) UNION SELECT l.parent FROM lineage l JOIN up ON l.child = up.fp) "
        "SELECT DISTINCT a.fingerprint, a.stage, a.dataset, a.view, a.path, a.manifest, a.created_run FROM up "
        "JOIN artifacts a ON a.fingerprint = up.fp WHERE NOT list_contains($f, up.fp) ORDER BY a.stage, a.dataset",
        {"f": fingerprints},
    ).to_pylist()


def drop_counts(catalog: Catalog, artifacts: list[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
    """(stage, dataset, reason, rows) of every row ``artifacts`` dropped (their ``dropped`` parts) or rejected
    (`reject_counts`), by stage, dataset and reason."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for a in artifacts:
        manifest = json.loads(a["manifest"]) if isinstance(a["manifest"], str) else a["manifest"] or {}
        for f in manifest.get("files", []):
            if f.get("role") == "dropped" and f.get("rows"):
                loc = objects.join(resolve(catalog.root, a["path"]), f["file"])
                for reason in read_checked(loc, ["reason"], root=catalog.root)["reason"].to_pylist():
                    counts[(a["stage"], a["dataset"] or "", reason or "")] += 1
    fps = [a["fingerprint"] for a in artifacts]
    if fps:
        for r in catalog.query(
            "SELECT stage, dataset, reason, sum(rows) AS n FROM reject_counts WHERE list_contains($f, fingerprint) "
            "GROUP BY ALL",  # counts of every artifact registered, current or not (storage/catalog_io/rejects.py)
            {"f": fps},
        ).to_pylist():
            counts[(r["stage"], r["dataset"] or "", f"rejected: {r['reason']}")] += r["n"]
    return sorted((s, d, reason, n) for (s, d, reason), n in counts.items())


def card(catalog: Catalog, arm: ArmData) -> str:
    """The dataset card of ``arm`` (see the module docstring), as markdown."""
    run = arm.run
    lines = [
        f"# train_nmt arm `{arm.arm}`",
        "",
        f"Exported by `augdag export-arm {arm.arm} --for hf` from run `{arm.run_id}` (pipeline {run.get('pipeline')}, "
        f"profile `{run.get('profile')}`, {run.get('status')}, started {run.get('started_at')}, finished "
        f"{run.get('finished_at')}). Read it with `datasets.load_from_disk`; one split per phase.",
        "",
        "## Splits",
        "",
        "| split | rows | training_mix |",
        "| --- | --- | --- |",
        *(f"| {p.name} | {p.table.num_rows} | {p.fingerprint} |" for p in arm.phases),
        "",
        "## Mix",
        "",
        "| phase | entry | SQL | copies | rows | rows × copies |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    views: set[str] = set()
    for p in arm.phases:
        sql = p.params.get("mix", {})
        for e in p.entries():
            views.update(views_read(sql.get(e.name, "")))
            query = sql.get(e.name, "").replace("|", "\\|")
            lines.append(f"| {p.name} | {e.name} | `{query}` | {e.copies} | {e.rows.num_rows} | {e.mixed_rows} |")
    used = served(catalog, sorted(views), run.get("started_at"))
    above = ancestors(catalog, [a["fingerprint"] for a in used])
    lines += [
        "",
        "## Lineage",
        "",
        f"The views the mix reads: {', '.join(sorted(views)) or 'none'}. The artifacts that served them when the run "
        "started, then the artifacts those descend from:",
        "",
        "| view | stage | dataset | fingerprint | made by run |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| {a['view'] or ''} | {a['stage']} | {a['dataset'] or ''} | {a['fingerprint']} | {a['created_run']} |"
            for a in used + above
        ),
        "",
        "## Filters and their drop counts",
        "",
        "| stage | dataset | reason | rows |",
        "| --- | --- | --- | --- |",
    ]
    drops = drop_counts(catalog, used + above)
    lines += [f"| {s} | {d} | {reason} | {n} |" for s, d, reason, n in drops] or ["| (none) | | | 0 |"]
    return "\n".join(lines) + "\n"
