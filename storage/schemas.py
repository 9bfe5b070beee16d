"""Arrow schemas of the record kinds (the data contracts) and the stable row uid.

Every row carries ``uid`` (a hash of its source and content), ``source`` (the dataset name) and
``line`` (1-based position in the input) so that errors, rejects and derived rows point back. A mono
dataset split into sentences (tasks/ingest/sentences.py) adds ``sentence``; the catalog's views are
``VIEW_SCHEMAS``, so the `mono` view has that column whether or not a dataset is split (null where not).
A held-out set (a test or dev set some section evaluates on: conf/roles.py) is never in its kind's view, which
training reads, but in ``heldout_<kind>`` (``HELDOUT_VIEWS``), with the same columns.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa

_ID = [("uid", pa.string())]
_WHERE = [("source", pa.string()), ("line", pa.int64())]

BITEXT = pa.schema(_ID + [("src", pa.string()), ("tgt", pa.string())] + _WHERE)
MONO = pa.schema(_ID + [("text", pa.string())] + _WHERE)
LABELED = pa.schema(_ID + [("text", pa.string()), ("label", pa.string())] + _WHERE)
SLOTS = pa.schema(_ID + [("tokens", pa.list_(pa.string())), ("tags", pa.list_(pa.string()))] + _WHERE)

SCHEMAS: dict[str, pa.Schema] = {"bitext": BITEXT, "mono": MONO, "labeled": LABELED, "slots": SLOTS}
SENTENCE = pa.field("sentence", pa.int32())  # 1-based index of the sentence within its input line
# the views of the record kinds: every column any of their artifacts may have (a saved query keeps working)
VIEW_SCHEMAS: dict[str, pa.Schema] = {**SCHEMAS, "mono": pa.schema([*MONO, SENTENCE])}
HELDOUT = "heldout_"  # the prefix of a held-out kind's view: heldout_bitext, heldout_labeled, heldout_slots, ...
HELDOUT_VIEWS: dict[str, pa.Schema] = {HELDOUT + k: s for k, s in VIEW_SCHEMAS.items()}
VIEW_SCHEMAS |= HELDOUT_VIEWS


def heldout_view(kind: str) -> str:
    """The view of the held-out sets of record kind ``kind`` (``heldout_bitext``)."""
    return HELDOUT + kind


def view_key(view: str | None) -> str | None:
    """The view a dataset's artifact competes in: a kind's view and its held-out view are one (``bitext``), so that
    a dataset is in one of them, the one its last registration chose (a training set later held out leaves
    `bitext`, and comes back when it trains again). ``VIEW_KEY_SQL`` is the same over ``artifacts.view``."""
    return view[len(HELDOUT) :] if view is not None and view in HELDOUT_VIEWS else view


def paired_view(view: str | None) -> str | None:
    """The other view of a dataset's kind (``bitext`` <-> ``heldout_bitext``), or None for any other view."""
    if view in HELDOUT_VIEWS:
        return view_key(view)
    return HELDOUT + view if view is not None and HELDOUT + view in HELDOUT_VIEWS else None


VIEW_KEY_SQL = (
    f"CASE WHEN view IN ({', '.join(repr(v) for v in HELDOUT_VIEWS)}) THEN substr(view, {len(HELDOUT) + 1}) ELSE view END"
)
# the current artifact of each (view key, stage, dataset): the last used (storage/catalog.py, storage/dropped.py)
CURRENT_SQL = (
    f"QUALIFY row_number() OVER (PARTITION BY {VIEW_KEY_SQL}, stage, dataset ORDER BY last_used_at DESC, created_at DESC) = 1"
)
# the content fields of each kind, in their default input order (TSV columns, text files)
FIELDS: dict[str, tuple[str, ...]] = {
    kind: tuple(n for n in schema.names if n not in ("uid", "source", "line")) for kind, schema in SCHEMAS.items()
}
# the fields counted in tokens by length filters (text sides)
TEXT_FIELDS: dict[str, tuple[str, ...]] = {"bitext": ("src", "tgt"), "mono": ("text",), "labeled": ("text",), "slots": ()}

# a row the reader refused: `reason` is a word of storage.readers.dataset.REASONS, `detail` the human sentence
# ("expected 2 tab-separated fields (src, tgt), found 3"), `content` the offending input, shortened
REJECTS = pa.schema(
    [
        ("source", pa.string()),
        ("file", pa.string()),
        ("line", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("content", pa.string()),
    ]
)
DROPPED_EXTRA = [("reason", pa.string())]  # a filter's drops: the input schema plus `reason`

_SEP = "\x1f"  # unit separator: cannot appear in a kept row (control characters are not stripped, but NUL is)


_local = threading.local()


def _connection() -> duckdb.DuckDBPyConnection:
    """One private in-memory DuckDB connection per thread (opening one costs ~25 ms)."""
    if getattr(_local, "pid", None) != os.getpid():  # never reuse a connection inherited through fork
        _local.con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
        _local.pid = os.getpid()
    return _local.con


def with_uid(table: pa.Table, kind: str) -> pa.Table:
    """Set ``uid`` = md5(source, content fields) as 32 hex chars, vectorised in DuckDB.

    Exact duplicates of one source share a uid, which is what the `clean` stage deduplicates on.
    """
    fields = FIELDS[kind]
    parts = ["source"] + [f"list_aggregate({f}, 'string_agg', chr(30))" if kind == "slots" else f for f in fields]
    expr = f" || chr({ord(_SEP)}) || ".join(f"coalesce({p}, '')" for p in parts)
    con = _connection()
    con.register("uid_input", table)
    try:
        uid = con.sql(f"SELECT md5({expr}) AS uid FROM uid_input").to_arrow_table()["uid"]
    finally:
        con.unregister("uid_input")
    idx = table.schema.get_field_index("uid")
    return table.set_column(idx, "uid", uid.cast(pa.string())) if idx >= 0 else table.add_column(0, "uid", uid)


def empty(kind_or_schema: str | pa.Schema) -> pa.Table:
    schema = SCHEMAS[kind_or_schema] if isinstance(kind_or_schema, str) else kind_or_schema
    return schema.empty_table()


def has_schema(path: os.PathLike, schema: pa.Schema) -> bool:
    """Whether the Parquet file ``path`` exists with exactly ``schema`` (an empty view part made before a column
    joined its view is written again)."""
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path).remove_metadata().equals(schema.remove_metadata())
    except (OSError, pa.ArrowInvalid):
        return False


# the catalog's stage_runs rows as a write brings them, in Arrow (started_at an ISO string, cast by the INSERT as before)
STAGE_RUNS = pa.schema(
    [
        ("run_id", pa.string()),
        ("stage", pa.string()),
        ("dataset", pa.string()),
        ("fingerprint", pa.string()),
        ("shard", pa.int32()),
        ("status", pa.string()),
        ("started_at", pa.string()),
        ("seconds", pa.float64()),
        ("rows_in", pa.int64()),
        ("rows_out", pa.int64()),
        ("error", pa.string()),
    ]
)


def insert_stage_runs(con: duckdb.DuckDBPyConnection, rows: Sequence[Mapping[str, Any]]) -> None:
    """``rows`` into the catalog's ``stage_runs`` as one INSERT of an Arrow table (executemany is a statement per
    row: ~1 s of a cached demo nightly)."""
    if rows:
        new_stage_runs = pa.Table.from_pylist(  # noqa: F841 — DuckDB scans the local by its name
            [{c: r.get(c) for c in STAGE_RUNS.names} for r in rows], STAGE_RUNS
        )
        con.execute(f"INSERT INTO stage_runs ({', '.join(STAGE_RUNS.names)}) SELECT * FROM new_stage_runs")
