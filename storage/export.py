"""Exports of any catalog view to Parquet, JSONL, CSV/TSV or plain line-aligned text files, streamed in batches.

Text export writes one file per text column, line-aligned (``<out>.src`` / ``<out>.tgt`` for a
bitext; ``<out>.text`` and ``<out>.label`` for a labelled set; ``tokens``/``tags`` space-joined for
slots). A value with a line break cannot be written as one line; rather than corrupting the
alignment the export stops and names the row. TSV is raw ``src<TAB>tgt`` lines with no header by default, what
Marian, OpusTrainer, fairseq's and Moses' scripts read (``header=True`` adds the column names); CSV has a header
by default. Files are written and checked by storage/output.py; ``-`` is standard output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import CatalogError, ConfError
from storage.catalog import Catalog, outside_cache
from storage.output import check_target, descriptor, output_format, replacing, write_batches
from storage.sql_guard import check_condition, query_error

EXPORT_FORMATS = ("parquet", "jsonl", "csv", "tsv", "text")


@dataclass(frozen=True)
class Exported:
    """What an export wrote: its files (one, or one per text column) and the rows in each."""

    files: list[Path]
    rows: int


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


def export_view(
    catalog: Catalog,
    view: str,
    out: Path,
    *,
    fmt: str | None,
    where: str | None = None,
    force: bool = False,
    header: bool | None = None,
) -> Exported:
    """Write ``SELECT * FROM view [WHERE ...]`` to ``out`` in ``fmt`` (None: from its extension); returns the
    files written and the rows. The format, the view, the condition and the targets are checked before any
    file or directory is made; the files replace their targets together (storage/output.py).

    Args:
        header: a first line of column names in csv or tsv; None: csv has one, tsv none (the raw lines trainers
            read). Given for another format, it is an error.
    """
    sql = check_condition(view, where) if where is not None else f'SELECT * FROM "{view}"'  # one condition, no more
    out = Path(out)
    if fmt == "text" and descriptor(out) is not None:
        raise ConfError(f"{out}: --format text writes one file per column; -o names their prefix, not a descriptor")
    fmt = "text" if fmt == "text" else output_format(out, fmt, EXPORT_FORMATS[:-1])
    if header is not None and fmt not in ("csv", "tsv"):
        raise ConfError(f"--{'' if header else 'no-'}header is for csv and tsv, not {fmt}")
    header = fmt == "csv" if header is None else header
    with catalog.read(sandbox=True) as con:
        views = {r[0] for r in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        if view not in views:
            raise CatalogError(f"no view {view!r}; the catalog has: {', '.join(sorted(views)) or '(none)'}")
        try:
            reader = con.sql(sql).to_arrow_reader(BATCH_ROWS)
        except duckdb.PermissionException as e:  # --where read a file outside the cache
            raise CatalogError(outside_cache(catalog.root, e, catalog.stores)) from None
        except duckdb.Error as e:  # --where names no column of the view, or fails otherwise: one line
            columns = con.sql(f'SELECT * FROM "{view}" LIMIT 0').columns
            raise query_error(e, view=view, columns=columns, place="--where") from None
        finals = [out] if fmt != "text" else [out.with_name(f"{out.name}.{c}") for c in _text_columns(view, reader.schema)]
        for final in finals:
            check_target(final, force=force, cache=catalog.root)  # before the first row is read
        with replacing(finals, force=force, cache=catalog.root) as files:
            if fmt != "text":
                return Exported(finals, write_batches(reader, files[0], fmt, header=header))
            columns, rows = _text_columns(view, reader.schema), 0
            for batch in reader:
                for f, column in zip(files, columns):
                    lines = _as_lines(batch, column).to_pylist()
                    if lines:
                        f.write(("\n".join(lines) + "\n").encode("utf-8"))
                rows += batch.num_rows
        return Exported(finals, rows)
