"""Exports of any catalog view to Parquet, JSONL or plain line-aligned text files, streamed in batches.

Text export writes one file per text column, line-aligned (``<out>.src`` / ``<out>.tgt`` for a
bitext; ``<out>.text`` and ``<out>.label`` for a labelled set; ``tokens``/``tags`` space-joined for
slots). A value with a line break cannot be written as one line; rather than corrupting the
alignment the export stops and names the row.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from conf.errors import CatalogError
from storage.artifacts import commit_file, temp_path
from storage.catalog import Catalog, check_read_only, outside_cache

Format = Literal["parquet", "jsonl", "text"]
TEXT_COLUMNS = {"bitext": ("src", "tgt"), "mono": ("text",), "labeled": ("text", "label"), "slots": ("tokens", "tags")}
BATCH_ROWS = 65_536


def _text_columns(view: str, schema: pa.Schema) -> tuple[str, ...]:
    if view in TEXT_COLUMNS:
        return TEXT_COLUMNS[view]
    found = tuple(n for n in ("src", "tgt", "text", "label", "tokens", "tags") if n in schema.names)
    if not found:
        raise CatalogError(f"view {view!r} has no text column to export as lines (columns: {', '.join(schema.names)})")
    return found


def _as_lines(batch: pa.RecordBatch, column: str) -> pa.Array:
    values = batch.column(column)
    if pa.types.is_list(values.type):
        values = pc.binary_join(values, " ")
    values = pc.fill_null(pc.cast(values, pa.string()), "")
    broken = pc.match_substring_regex(values, r"[\n\r]")
    if pc.any(broken).as_py():
        i = pc.index(broken, True).as_py()
        uid = batch.column("uid")[i].as_py() if "uid" in batch.schema.names else f"row {i}"
        raise CatalogError(f"{column} of {uid} contains a line break and cannot be exported as a line. Hint: --format jsonl")
    return values


def export_view(catalog: Catalog, view: str, out: Path, *, fmt: Format, where: str | None = None) -> list[Path]:
    """Write ``SELECT * FROM view [WHERE ...]`` to ``out``; returns the files written (each committed by rename)."""
    sql = f'SELECT * FROM "{view}"' + (f" WHERE {where}" if where else "")
    check_read_only(sql)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with catalog.read(sandbox=True) as con:
        views = {r[0] for r in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        if view not in views:
            raise CatalogError(f"no view {view!r}; the catalog has: {', '.join(sorted(views)) or '(none)'}")
        try:
            reader = con.sql(sql).to_arrow_reader(BATCH_ROWS)
        except duckdb.PermissionException as e:  # --where read a file outside the cache
            raise CatalogError(outside_cache(catalog.root, e)) from None
        if fmt in ("parquet", "jsonl"):
            finals = [out]
        else:
            finals = [out.with_name(f"{out.name}.{c}") for c in _text_columns(view, reader.schema)]
        tmps = [temp_path(f) for f in finals]
        try:
            with ExitStack() as stack:
                if fmt == "parquet":
                    writer = stack.enter_context(pq.ParquetWriter(tmps[0], reader.schema, compression="zstd"))
                    for batch in reader:
                        writer.write_batch(batch)
                elif fmt == "jsonl":
                    f = stack.enter_context(open(tmps[0], "w", encoding="utf-8"))
                    for batch in reader:
                        f.writelines(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in batch.to_pylist())
                else:
                    columns = _text_columns(view, reader.schema)
                    files = [stack.enter_context(open(t, "w", encoding="utf-8")) for t in tmps]
                    for batch in reader:
                        for f, column in zip(files, columns):
                            lines = _as_lines(batch, column).to_pylist()
                            if lines:
                                f.write("\n".join(lines) + "\n")
            for tmp, final in zip(tmps, finals):
                commit_file(tmp, final)
        finally:
            for tmp in tmps:
                tmp.unlink(missing_ok=True)
    return finals
