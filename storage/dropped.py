"""The `dropped` view (every row a stage dropped, with its stage and reason) and the path of one input row.

A filtering stage returns its drops as the ``dropped`` role of its artifact
(``<cache>/artifacts/<stage>/<fp>/dropped-<shard>.parquet``: the stage's input columns plus ``reason``, so the
schemas differ per stage). The view reads the dropped parts of the *current* artifacts, by the rule of every
view (per view, stage and dataset, the one a run used last; internal artifacts too, e.g. ``lm_filter``), and
selects the columns they share, NULL where a stage lacks one:

    stage, reason, detail, source, line, sentence, uid, parent_uid, run, fingerprint, src, tgt, text

``detail`` is a stage's own ``detail`` column, else the measure it cut on when the part has one
(``MEASURES``: ``lm_cross_entropy=7.312``, ``mi=false, sim=0.412``), else NULL. ``run`` is the run that made
the artifact. Derived rows (a paraphrase, a synthetic pair) keep the ``parent_uid`` of the row they came from.
``src``/``tgt`` (a pair) and ``text`` (a sentence; a slots row's tokens joined by spaces) are the dropped row's own
text, from its part: what a user reads to judge the drop without opening the input file.

With `rejects` (the readers' refusals, and a stage's such as delexicalise's malformed BIO) every stage's
input is accounted for: input rows = kept (``artifacts.rows``) + rejected + dropped, per artifact.
``row_path`` follows one input row (dataset, 1-based line) through them for `augdag why`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from conf.errors import InputError
from storage import objects
from storage.artifacts import part_name
from storage.cache_root import parquet_sql, present, resolve
from storage.integrity import check_files
from storage.schemas import CURRENT_SQL, SCHEMAS

if TYPE_CHECKING:
    from storage.catalog import Catalog

VIEW = "dropped"
ROLE = "dropped"
COLUMNS = {
    "stage": "VARCHAR",
    "reason": "VARCHAR",
    "detail": "VARCHAR",
    "source": "VARCHAR",
    "line": "BIGINT",
    "sentence": "INTEGER",
    "uid": "VARCHAR",
    "parent_uid": "VARCHAR",
    "run": "VARCHAR",
    "fingerprint": "VARCHAR",
    "src": "VARCHAR",
    "tgt": "VARCHAR",
    "text": "VARCHAR",
}
_FROM_PART = ("reason", "source", "line", "sentence", "uid", "parent_uid", "src", "tgt")  # from the part if it has it
MEASURES = ("lm_cross_entropy", "jaccard", "mi", "sim")  # the value a filter cut on, shown as detail
# the current artifacts (the views' rule) and their dropped parts with rows, from the manifests: each file list
# converted to typed structs at once (``from_json``) before it is unnested, so that no JSON is parsed per entry (a JSON
# path per entry, or a column of the manifest beside the unnested entries, parsed a 400 KB manifest once per entry:
# seconds of every registration's write lock at a night's ~10,000 parts, issue 51, bench/catalog_scale.py)
_CURRENT_DROPS = f"""
WITH current AS (
  SELECT stage, fingerprint, path, created_run, manifest FROM artifacts
  {CURRENT_SQL}),
typed AS MATERIALIZED (
  SELECT stage, fingerprint, path, created_run,
    coalesce(json_extract_string(manifest, '$.uniform.dropped') = 'true', false) AS uniform,
    from_json(json_extract(manifest, '$.files'), '[{{"file": "VARCHAR", "role": "VARCHAR", "rows": "BIGINT"}}]') AS files
  FROM current)
SELECT stage, fingerprint, path, created_run, list(f.file ORDER BY f.file) AS files, any_value(uniform) AS uniform
FROM typed, unnest(files) AS t(f) WHERE f.role = 'dropped' AND f.rows > 0
GROUP BY stage, fingerprint, path, created_run ORDER BY stage, fingerprint
"""


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _detail(names: set[str]) -> str:
    if "detail" in names:
        return "CAST(detail AS VARCHAR)"
    shown = [f"'{m}=' || CAST({'round(' + m + ', 3)' if m != 'mi' else m} AS VARCHAR)" for m in MEASURES if m in names]
    return f"nullif(concat_ws(', ', {', '.join(shown)}), '')" if shown else "NULL"


def _select(stage: str, fingerprint: str, run: str, files: list[str], root: Path, uniform: bool) -> str:
    """One artifact's dropped parts with the view's columns; ``files`` as stored, relative to the cache ``root``
    (storage/cache_root.py); ``uniform``: the manifest says they share one schema (the stage's)."""
    schema = objects.parquet_file(resolve(root, files[0])).schema_arrow
    names = set(schema.names)
    cols = {"stage": _lit(stage), "detail": _detail(names), "run": _lit(run), "fingerprint": _lit(fingerprint)}
    cols |= {c: (c if c in names else "NULL") for c in _FROM_PART}
    words = "tokens" in names and pa.types.is_list(schema.field("tokens").type)  # a slots row (elsewhere: a count)
    cols["text"] = "text" if "text" in names else "array_to_string(tokens, ' ')" if words else "NULL"
    listed = ", ".join(f"CAST({cols[c]} AS {t}) AS {c}" for c, t in COLUMNS.items())
    return f"SELECT {listed} FROM {parquet_sql(files, uniform=uniform)}"


def dropped_view_sql(con: duckdb.DuckDBPyConnection, root: Path) -> str:
    """``CREATE OR REPLACE VIEW dropped`` over the current artifacts' dropped parts (empty, typed, if none), their
    files named relative to the cache ``root``."""
    selects = []
    for stage, fingerprint, path, run, files, uniform in con.execute(_CURRENT_DROPS).fetchall():
        paths = [f"{path}/{f}" for f in files]
        if all(present(resolve(root, p)) for p in paths):  # a deleted artifact drops out, as from the other views
            selects.append(_select(stage, fingerprint, run, paths, root, uniform))
    if not selects:
        selects = ["SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {c}" for c, t in COLUMNS.items()) + " WHERE false"]
    return f'CREATE OR REPLACE VIEW "{VIEW}" AS\n' + "\nUNION ALL\n".join(selects)


# -- `augdag why`: one input row's path --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RowPath:
    """Where input row ``line`` of dataset ``source`` went. ``rejected``: the read's refusal (file, reason, detail);
    else ``uid`` and its ``drops`` (stage, reason, detail, run), the views that hold it at this line
    (``views``: view -> rows), its derived rows per view (``derived``) and the derived rows dropped
    (``derived_drops``: (stage, reason) -> rows). ``read_run``: the run that made the read artifact.
    A line of a dataset split into sentences (``split_sentences``) has its ``sentences``, each a path of its
    own (``sentence``: its 1-based index); the line's own ``drops`` are then the split's (``no_sentence``)."""

    source: str
    line: int
    read_run: str
    rejected: dict[str, Any] | None = None
    uid: str | None = None
    drops: tuple[dict[str, Any], ...] = ()
    views: dict[str, int] = dataclasses.field(default_factory=dict)
    derived: dict[str, int] = dataclasses.field(default_factory=dict)
    derived_drops: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    sentence: int | None = None
    sentences: tuple[RowPath, ...] = ()


def row_path(catalog: Catalog, source: str, line: int) -> RowPath:
    """The path of one input row through the stages.

    Raises:
        InputError: the catalog has never seen that row: no read of ``source``, or no such line in its current read.
    """
    never = f"{source}:{line}: the catalog has never seen this row"
    read = catalog.query(
        "SELECT fingerprint, path, n_shards, rows, created_run FROM artifacts WHERE stage = 'read' AND dataset = $s "
        "ORDER BY last_used_at DESC, created_at DESC LIMIT 1",
        {"s": source},
    ).to_pylist()
    if not read:
        known = catalog.query("SELECT DISTINCT dataset FROM artifacts WHERE stage = 'read' ORDER BY ALL")["dataset"]
        raise InputError(
            f"{never}: no dataset {source!r} was read; the datasets read are "
            f"{', '.join(known.to_pylist()) or 'none (run `augdag run ingest` first)'}"
        )
    read = read[0]
    rejected = catalog.query(
        "SELECT file, reason, detail FROM rejects WHERE fingerprint = $f AND source = $s AND line = $l LIMIT 1",
        {"f": read["fingerprint"], "s": source, "l": line},
    ).to_pylist()
    if rejected:
        return RowPath(source, line, read["created_run"], rejected=rejected[0])
    found = _rows_at(catalog, read, line, "uid")
    if not found:
        n = (
            read["rows"]
            + catalog.query("SELECT count(*) AS n FROM rejects WHERE fingerprint = $f", {"f": read["fingerprint"]})["n"][
                0
            ].as_py()
        )
        raise InputError(
            f"{never}: the current read of {source!r} (run {read['created_run']}) has no line {line} in its {n:,} input rows"
        )
    here = RowPath(source, line, read["created_run"], uid=found[0]["uid"])
    split = _current_split(catalog, source)
    if split is None:
        return _fate(catalog, here)
    sentences = _rows_at(catalog, split, line, "sentence, uid", order="sentence")
    return dataclasses.replace(
        _fate(catalog, here, kept_here=False),
        sentences=tuple(_fate(catalog, dataclasses.replace(here, uid=s["uid"], sentence=s["sentence"])) for s in sentences),
    )


def _rows_at(catalog: Catalog, artifact: dict[str, Any], line: int, columns: str, order: str = "") -> list[dict]:
    parts = [str(objects.join(resolve(catalog.root, artifact["path"]), part_name(i))) for i in range(artifact["n_shards"])]
    check_files(parts, root=catalog.root)  # `why` shows no byte its manifest does not vouch for (storage/integrity/)
    sql = f"SELECT {columns} FROM read_parquet($p) WHERE line = $l" + (f" ORDER BY {order}" if order else " LIMIT 1")
    return catalog.query(sql, {"p": parts, "l": line}).to_pylist() if parts else []


def _current_split(catalog: Catalog, source: str) -> dict[str, Any] | None:
    """The `split_sentences` artifact the current `clean` of ``source`` read, if it read one (directly, or through
    its `filter_chain` when the dataset is compared across datasets: tasks/ingest/across.py)."""
    rows = catalog.query(
        "WITH clean AS (SELECT fingerprint FROM artifacts WHERE stage = 'clean' AND dataset = $s "
        "ORDER BY last_used_at DESC, created_at DESC LIMIT 1), "
        "up AS (SELECT l.parent FROM lineage l JOIN clean c ON l.child = c.fingerprint UNION ALL "
        "SELECT l.parent FROM lineage l JOIN artifacts f ON l.child = f.fingerprint AND f.stage = 'filter_chain' "
        "JOIN lineage k ON k.parent = f.fingerprint JOIN clean c ON k.child = c.fingerprint) "
        "SELECT a.path, a.n_shards FROM artifacts a JOIN up ON up.parent = a.fingerprint WHERE a.stage = 'split_sentences'",
        {"s": source},
    ).to_pylist()
    return rows[0] if rows else None


def _fate(catalog: Catalog, p: RowPath, *, kept_here: bool = True) -> RowPath:
    """``p`` (a row, or a sentence of a split line) with its drops, views and derived rows. ``kept_here=False``:
    a split line, whose rows are its sentences: only its own drops (the split's)."""
    key = {"s": p.source, "l": p.line, "u": p.uid, "n": p.sentence}
    drops = catalog.query(
        "SELECT d.stage, d.reason, d.detail, d.run, d.fingerprint FROM dropped d JOIN artifacts a USING (fingerprint) "
        "WHERE d.source = $s AND d.line = $l AND d.uid = $u AND d.parent_uid IS NULL AND d.sentence IS NOT DISTINCT "
        "FROM $n ORDER BY a.created_at",
        key,
    ).to_pylist()
    for d in drops:
        if d["reason"] == "duplicate" and d["detail"] is None and (first := _first_copy(catalog, p)):
            d["detail"] = f"the same {'row' if p.sentence is None else 'sentence'} as {first}, which is kept"
    if not kept_here:
        return dataclasses.replace(p, drops=tuple(drops))
    views = _counts(catalog, "uid = $u AND source = $s AND line = $l", key, ("uid", "source", "line"), sentence=True)
    kept = any(v in SCHEMAS for v in views)  # a duplicate shares its uid with the kept copy: not its derived rows
    if p.sentence is not None and not kept:  # nor its views (a copy in the same line: only `mono` tells them apart)
        views = {}
    derived = _counts(catalog, "parent_uid = $u", {"u": p.uid}, ("parent_uid",)) if kept else {}
    derived_drops = (
        {
            (r["stage"], r["reason"]): r["n"]
            for r in catalog.query(
                "SELECT stage, reason, count(*) AS n FROM dropped WHERE parent_uid = $u GROUP BY ALL ORDER BY ALL", {"u": p.uid}
            ).to_pylist()
        }
        if kept
        else {}
    )
    return dataclasses.replace(p, drops=tuple(drops), views=views, derived=derived, derived_drops=derived_drops)


def _first_copy(catalog: Catalog, p: RowPath) -> str | None:
    """Where the kept copy of a duplicate is: its uid in the record kind's view (``line 3``, ``line 3 sentence 2``)."""
    if p.sentence is not None:  # split rows are mono
        rows = catalog.query(
            'SELECT line, sentence FROM "mono" WHERE uid = $u AND source = $s ORDER BY line, sentence LIMIT 1',
            {"u": p.uid, "s": p.source},
        ).to_pylist()
        return f"line {rows[0]['line']} sentence {rows[0]['sentence']}" if rows else None
    union = " UNION ALL ".join(f'SELECT line FROM "{v}" WHERE uid = $u AND source = $s' for v in SCHEMAS)
    rows = catalog.query(f"SELECT min(line) AS line FROM ({union})", {"u": p.uid, "s": p.source}).to_pylist()
    return f"line {rows[0]['line']}" if rows and rows[0]["line"] is not None else None


def _counts(
    catalog: Catalog, where: str, params: dict[str, Any], needs: tuple[str, ...], *, sentence: bool = False
) -> dict[str, int]:
    """Rows matching ``where`` per view that has every column of ``needs`` (`dropped` aside), non-zero only.
    ``sentence``: in a view with a `sentence` column, only the rows whose sentence is ``params["n"]`` (NULL: a
    row that was not split)."""
    names = [
        (r["name"], r["split"])
        for r in catalog.query(
            "SELECT table_name AS name, bool_or(column_name = 'sentence') AS split FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_name IN "
            "(SELECT table_name FROM information_schema.tables WHERE table_type = 'VIEW') AND table_name <> $d "
            "GROUP BY table_name HAVING count(*) FILTER (list_contains($needs, column_name)) = $n ORDER BY table_name",
            {"d": VIEW, "needs": list(needs), "n": len(needs)},
        ).to_pylist()
    ]
    if not names:
        return {}
    by_sentence = " AND sentence IS NOT DISTINCT FROM $n"
    union = " UNION ALL ".join(
        f'SELECT {_lit(n)} AS name, count(*) AS n FROM "{n}" WHERE {where}' + (by_sentence if sentence and split else "")
        for n, split in names
    )
    params = {k: v for k, v in params.items() if k != "n" or by_sentence in union}
    return {r["name"]: r["n"] for r in catalog.query(union, params).to_pylist() if r["n"]}
