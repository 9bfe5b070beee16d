"""The `rejects` view: every input row a stage refused, read from its artifact's Parquet parts, not copied.

A reading stage (`read`; delexicalise's malformed BIO too) writes its refusals as the ``rejects`` role of its artifact
(``<cache>/artifacts/<stage>/<fp>/rejects-<shard>.parquet``, ``storage.schemas.REJECTS``). The view reads the
rejects parts of the *current* artifacts, by the rule of every view (per view, stage and dataset, the one a run used
last: storage/schemas.py ``CURRENT_SQL``), each named exactly as its manifest lists it, with the columns the catalog's
table had before it became a view (so every query on it keeps working):

    fingerprint, source, file, line, reason, detail, content

A night's page (flows/reports/night_report.py) shows its own reads' rejects, current or not, from their parts
(``parts_select``); `augdag why` and the cookbook's queries read the view.

The catalog itself keeps only ``reject_counts``: rows per artifact (and the run that made it, its stage, dataset)
and reason, written when an artifact is registered: a few rows a night, where the table took every rejected line
with its content (1–5M rows a night at a web crawl's reject rate, under the catalog's exclusive lock).

**Older catalogs** (a `rejects` table) are migrated when a process first writes or reads them (``migrate``): the
counts are taken from the table; a row is deleted only where the view serves the same artifact's rejects from its
parts (a current artifact with every rejects part there, its manifest listing as many rejects rows as the table
holds for it). Every other row (its artifact is gone, not current any more, or its parts are not all there) stays
in ``rejects_legacy``, which the view serves as the table did (in place of that artifact's parts, should it
be current again), so the view gives the rows the table gave.

A part deleted later (its manifest still there) is not dropped silently either: until the view is rebuilt, DuckDB's
error names it (storage/integrity/ ``missing_part``); a rebuilt view holds a branch for it that fails every query
that would read that artifact's rejects (one filtered to other artifacts still answers), in one line naming the part
and the repair command. An artifact whose directory is gone (no manifest) leaves the view, as from every view, and
its counts stay in ``reject_counts``. What the view reads is proven against the manifests before a user's query
(``check_served``), as the other views' parts are.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from storage import objects
from storage.artifacts import ArtifactRef
from storage.cache_root import files_sql, parquet_sql, present, resolve
from storage.integrity import MANIFEST, failed, repair_hint, verify_artifact
from storage.schemas import CURRENT_SQL

VIEW = "rejects"
ROLE = "rejects"
COUNTS = "reject_counts"
LEGACY = "rejects_legacy"  # an older catalog's copied rows that no current artifact's parts serve (``migrate``)
COLUMNS = {
    "fingerprint": "VARCHAR",
    "source": "VARCHAR",
    "file": "VARCHAR",
    "line": "BIGINT",
    "reason": "VARCHAR",
    "detail": "VARCHAR",
    "content": "VARCHAR",
}
# the current artifacts (the views' rule) with rejects parts that have rows, from their manifests: each file list
# converted to typed structs at once (``from_json``) before it is unnested, so that no JSON is parsed per entry (a JSON
# path per entry, or a column of the manifest beside the unnested entries, parsed a 400 KB manifest once per entry:
# seconds of every registration's write lock at a night's ~10,000 parts; bench/catalog_scale.py)
_FILES = '[{"file": "VARCHAR", "role": "VARCHAR", "rows": "BIGINT", "sha256": "VARCHAR"}]'
_CURRENT_REJECTS = f"""
WITH current AS (SELECT fingerprint, path, manifest FROM artifacts {CURRENT_SQL}),
typed AS MATERIALIZED (
  SELECT fingerprint, path, coalesce(json_extract_string(manifest, '$.uniform.{ROLE}') = 'true', false) AS uniform,
    from_json(json_extract(manifest, '$.files'), '{_FILES}') AS files
  FROM current)
SELECT fingerprint, path, list(f.file ORDER BY f.file) AS files, sum(f.rows) AS rows, any_value(uniform) AS uniform,
  list(f.sha256 ORDER BY f.file) AS sha256
FROM typed, unnest(files) AS t(f) WHERE f.role = '{ROLE}' AND f.rows > 0
GROUP BY fingerprint, path ORDER BY fingerprint
"""


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _exists(con: duckdb.DuckDBPyConnection, name: str) -> str | None:
    """``BASE TABLE`` or ``VIEW`` when the attached catalog has ``name``, else None (``duckdb_tables()``: 7x faster
    than ``information_schema.tables``, which lists every view's SQL)."""
    row = con.execute(
        "SELECT 'BASE TABLE' FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name = $n UNION ALL SELECT 'VIEW' FROM duckdb_views() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND view_name = $n",
        {"n": name},
    ).fetchone()
    return row[0] if row else None


def insert_counts(con: duckdb.DuckDBPyConnection, ref: ArtifactRef, manifest: Mapping[str, Any], run_id: str) -> None:
    """Record a new artifact's rejects per reason in ``reject_counts`` (``run_id``: the run that made it): one DuckDB
    pass over the `reason` column of its rejects parts with rows, the lines themselves left in the parts."""
    files = [str(objects.join(ref.dir, f["file"])) for f in manifest["files"] if f["role"] == ROLE and f["rows"]]
    if files:
        con.execute(
            f"INSERT INTO {COUNTS} SELECT $run, $f, $st, $ds, reason, count(*) FROM read_parquet({files_sql(files)}) "
            "GROUP BY reason ORDER BY reason",
            {"run": run_id, "f": ref.fingerprint, "st": ref.stage, "ds": ref.dataset},
        )


@dataclasses.dataclass(frozen=True)
class Served:
    """A current artifact whose rejects the view reads: its parts there and gone (relative to the cache root, as its
    manifest lists them, with their sha256), its rejected rows, whether its parts share one schema."""

    fingerprint: str
    path: str
    here: list[str]
    gone: list[str]
    rows: int
    uniform: bool
    sha256: dict[str, str]


def _served(con: duckdb.DuckDBPyConnection, root: Path) -> list[Served]:
    """Each current artifact with rejected rows whose manifest is still there (a deleted artifact leaves the view,
    as from every view)."""
    served = []
    for fp, path, files, rows, uniform, shas in con.execute(_CURRENT_REJECTS).fetchall():
        if present(resolve(root, f"{path}/{MANIFEST}")):
            here = [f"{path}/{f}" for f in files if present(resolve(root, f"{path}/{f}"))]
            gone = [f for f in files if f"{path}/{f}" not in here]
            served.append(Served(fp, path, here, gone, rows, uniform, dict(zip(files, shas))))
    return served


def rejects_view_sql(con: duckdb.DuckDBPyConnection, root: Path) -> str:
    """``CREATE OR REPLACE VIEW rejects`` over the current artifacts' rejects parts and an older catalog's kept rows
    (``rejects_legacy``, if any: an artifact's rows there stand in for its parts), typed as the table was; empty,
    typed, if there is nothing."""
    legacy = _exists(con, LEGACY) == "BASE TABLE"
    kept = {fp for (fp,) in con.execute(f"SELECT DISTINCT fingerprint FROM {LEGACY}").fetchall()} if legacy else set()
    selects = []
    for a in _served(con, root):
        if a.fingerprint in kept:  # the older catalog's copy of its rows, served as the table served them
            continue
        if a.here:
            selects.append(_branch(a.fingerprint, a.here, uniform=a.uniform))
        if a.gone:  # its rows are not dropped silently: a query that would read them fails, naming the part
            selects.append(_missing(a.fingerprint, a.path, a.gone, root))
    if legacy:
        selects.append(f"SELECT {', '.join(COLUMNS)} FROM {LEGACY}")
    if not selects:
        selects = ["SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {c}" for c, t in COLUMNS.items()) + " WHERE false"]
    return f'CREATE OR REPLACE VIEW "{VIEW}" AS\n' + "\nUNION ALL\n".join(selects)


def _branch(fingerprint: str, paths: list[str], *, uniform: bool) -> str:
    """One artifact's rejects parts (``paths`` relative to the cache root) with the view's columns."""
    cols = {"fingerprint": _lit(fingerprint)} | {c: c for c in COLUMNS if c != "fingerprint"}
    listed = ", ".join(f"CAST({cols[c]} AS {t}) AS {c}" for c, t in COLUMNS.items())
    return f"SELECT {listed} FROM {parquet_sql(paths, uniform=uniform)}"


def legacy_fingerprints(query: Callable[..., pa.Table]) -> set[str]:
    """The artifacts an older catalog's kept rows stand for (``rejects_legacy``; none in a catalog made since), through
    ``query`` (``Catalog.query``)."""
    exists = query(
        "SELECT count(*) AS n FROM duckdb_tables() WHERE database_name = current_database() AND table_name = $t",
        {"t": LEGACY},
    )["n"][0].as_py()
    return set(query(f"SELECT DISTINCT fingerprint FROM {LEGACY}")["fingerprint"].to_pylist()) if exists else set()


def parts_select(
    root: Path, artifacts: Sequence[Mapping[str, Any]], legacy: Collection[str] = ()
) -> tuple[str | None, list[objects.Loc]]:
    """The rejects of ``artifacts`` (each: fingerprint, path, manifest), current or not, from their parts: what a night's
    page shows of its own reads whatever ran since. Returns a SELECT with the view's columns (None when none has a
    rejected row) and the parts it reads (to prove first: storage/integrity/ ``check_files``). An artifact in
    ``legacy`` (``legacy_fingerprints``) is read from an older catalog's kept rows, as the view reads it; one whose
    parts are not all there fails the query in one line (``_missing``), never shows fewer rows."""
    selects, files = [], []
    for a in artifacts:
        manifest = json.loads(a["manifest"]) if isinstance(a["manifest"], str) else a["manifest"]
        paths = [f"{a['path']}/{f['file']}" for f in manifest["files"] if f["role"] == ROLE and f["rows"]]
        gone = [p.rsplit("/", 1)[1] for p in paths if not present(resolve(root, p))]
        if not paths:
            continue
        if a["fingerprint"] in legacy:
            selects.append(f"SELECT {', '.join(COLUMNS)} FROM {LEGACY} WHERE fingerprint = {_lit(a['fingerprint'])}")
        elif gone:
            selects.append(_missing(a["fingerprint"], a["path"], gone, root))
        else:
            selects.append(_branch(a["fingerprint"], paths, uniform=bool(manifest.get("uniform", {}).get(ROLE))))
            files += [resolve(root, p) for p in paths]
    return ("\nUNION ALL\n".join(selects) or None), files


def _missing(fingerprint: str, path: str, gone: list[str], root: Path) -> str:
    """A branch of the view for an artifact's rejects parts deleted since its manifest named them: no row, and every
    query that would read this artifact's rejects (not one filtered to other artifacts) fails in one line naming the
    first part and the repair (DuckDB cannot create a view over a missing file, and would drop ``error()`` from a
    column no query reads; a filter it must evaluate)."""
    stage = path.rstrip("/").rsplit("/", 2)[-2]
    more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
    message = (
        f"artifact {stage}/{fingerprint}: {gone[0]} is missing{more}: its rejected rows are counted in {COUNTS} but "
        f"cannot be shown. Hint: {repair_hint(root)}"
    )
    nulls = ", ".join(f"CAST({_lit(fingerprint) if c == 'fingerprint' else 'NULL'} AS {t}) AS {c}" for c, t in COLUMNS.items())
    return f"SELECT {nulls} FROM range(1) WHERE error({_lit(message)})"


def needs_migration(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the catalog is older than the view: `rejects` is a table."""
    return _exists(con, VIEW) == "BASE TABLE"


def migrate(con: duckdb.DuckDBPyConnection, root: Path) -> bool:
    """An older catalog's `rejects` table becomes ``reject_counts`` (made by the catalog's DDL) plus the view (see the
    module docstring), in the caller's write transaction; False when there was nothing to migrate. The caller then
    rebuilds the views in the same transaction."""
    if not needs_migration(con):
        return False
    con.execute(
        f"INSERT INTO {COUNTS} SELECT a.created_run, r.fingerprint, a.stage, a.dataset, r.reason, count(*) FROM {VIEW} r "
        "LEFT JOIN artifacts a USING (fingerprint) GROUP BY ALL ORDER BY ALL"
    )
    held = dict(con.execute(f"SELECT fingerprint, count(*) FROM {VIEW} GROUP BY ALL").fetchall())
    # the rows the parts serve: a current artifact with every rejects part there, holding as many rows as the table
    served = [a.fingerprint for a in _served(con, root) if not a.gone and held.get(a.fingerprint) == a.rows]
    con.execute(f"DELETE FROM {VIEW} WHERE list_contains($f::VARCHAR[], fingerprint)", {"f": served})
    if con.execute(f"SELECT count(*) FROM {VIEW}").fetchone()[0]:
        con.execute(f"ALTER TABLE {VIEW} RENAME TO {LEGACY}")
    else:
        con.execute(f"DROP TABLE {VIEW}")
    return True


def check_served(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """Every rejects part the view reads, hashed against its manifest before a user's query (memoised: a stat per
    part; storage/integrity/ ``verify_artifact``). A missing part is the view's own one line (``_missing``)."""
    for a in _served(con, root):
        files = {f: sha for f, sha in a.sha256.items() if f not in a.gone}
        if bad := [f for f in verify_artifact(root, resolve(root, a.path), files) if f.found is not None]:
            raise failed(bad[0], root)
