"""Format parsers of ``storage.readers.dataset`` for Arrow tables: a parquet file and a dataset saved by Hugging Face
``datasets`` (``save_to_disk``), read column by column into `Parsed` batches of ``batch_rows`` rows.

The needed columns and their types are checked before any batch (InputError); a parquet batch that
cannot be decoded is an InputError at that batch, naming the rows. A binary column is decoded in the
dataset's ``encoding`` (string columns are Arrow's UTF-8 already).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from conf.errors import InputError
from conf.schema import DatasetConf
from storage import objects
from storage.readers.common import decode_text, existing_path, line_numbers, show_value
from storage.readers.lines import rebatch
from storage.readers.row_checks import CONTENT_CHARS, Parsed
from storage.schemas import FIELDS

__all__ = ["parse_hf", "parse_parquet"]


def parse_parquet(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    """The kind's fields (through ``ds.rename``) of a parquet file."""
    path = existing_path(name, ds.path)
    try:
        pf = objects.parquet_file(path)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{ds.path}: not a readable parquet file ({e})") from None
    cols = _needed_columns(ds, pf.schema_arrow)
    columns = list(dict.fromkeys(cols.values()))
    return _table_batches(ds, cols, rebatch(_parquet_tables(ds.path, pf, columns, batch_rows), batch_rows))


def _parquet_tables(path: Path, pf: pq.ParquetFile, columns: list[str], batch_rows: int) -> Iterator[pa.Table]:
    """The file's rows in batches; a batch that cannot be decoded is an ``InputError`` naming the rows (a
    corrupt file fails the same way every time: it is not retried)."""
    batches, first, total = pf.iter_batches(batch_size=batch_rows, columns=columns), 1, pf.metadata.num_rows
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except MemoryError:
            raise
        except (pa.ArrowException, OSError) as e:
            if isinstance(e, OSError) and e.errno is not None:
                raise  # the operating system's I/O error (a disk, a network mount): may pass on a retry
            last = min(first + batch_rows - 1, total)
            raise InputError(
                f"{path}: rows {first:,}-{last:,} of {total:,} cannot be decoded "
                f"({type(e).__name__}: {' '.join(str(e).split())}). Hint: the file is corrupt or "
                "truncated: write it again from its source"
            ) from e
        first += batch.num_rows
        yield pa.Table.from_batches([batch])


def parse_hf(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    """The kind's fields of a saved Hugging Face dataset (``ds.split`` of a DatasetDict); ClassLabel ids as names."""
    import datasets  # heavy: only for this format

    path = existing_path(name, ds.path, directory=True)
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise InputError(f"{ds.path}: not a dataset saved with `save_to_disk` ({e})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if ds.split not in loaded:
            found = "no `split` set" if ds.split is None else f"split {ds.split!r}"
            raise InputError(f"{ds.path}: a DatasetDict with splits {sorted(loaded)}, {found}. Hint: set `split: {min(loaded)}`")
        loaded = loaded[ds.split]
    cols = _needed_columns(ds, loaded.data.schema)
    classes = {}  # field -> ClassLabel names: a label or tag id becomes its name, as the dataset shows it
    for f, c in cols.items():
        feature = loaded.features[c]
        feature = getattr(feature, "feature", feature)  # the item of a List / Sequence
        if isinstance(feature, datasets.ClassLabel):
            classes[f] = feature.names
    tables = loaded.select_columns(list(dict.fromkeys(cols.values()))).with_format("arrow").iter(batch_size=batch_rows)
    return _table_batches(ds, cols, tables, classes)


def _needed_columns(ds: DatasetConf, schema: pa.Schema) -> dict[str, str]:
    """field -> input column, each present and of a usable type, or InputError."""
    cols = {f: ds.rename.get(f, f) for f in FIELDS[ds.kind]}
    for f, c in cols.items():
        if c not in schema.names:
            raise InputError(
                f"{ds.path}: no column {c!r} for field {f!r}; columns present: {', '.join(schema.names)}. "
                f"Hint: map it with `rename: {{{f}: <column>}}`"
            )
        if _target_type(f, schema.field(c).type) is None:
            want = {"label": "strings or integers", "tokens": "lists of strings", "tags": "lists of strings or ids"}
            raise InputError(f"{ds.path}: column {c!r} is {schema.field(c).type}, expected {want.get(f, 'strings')}")
    return cols


def _target_type(f: str, t: pa.DataType, *, item: bool = False) -> pa.DataType | None:
    """What column type ``t`` is cast to for field ``f`` (``item``: an element of its list), None if it cannot be."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    listed = f in ("tokens", "tags") and not item
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return None if listed else pa.string()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return None if listed or item else pa.binary()
    if pa.types.is_integer(t):  # a class id: a label, or a tag id of a token classification dataset
        return pa.string() if f == "label" or (f == "tags" and item) else None
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(pa.string()) if listed and _target_type(f, t.value_type, item=True) else None
    return None


def _table_batches(
    ds: DatasetConf, cols: dict[str, str], tables: Iterable[pa.Table], classes: dict[str, list[str]] | None = None
) -> Iterator[Parsed]:
    first = 1
    for table in tables:
        fields, refused = {}, {}
        for f, c in cols.items():
            column = table.column(c).combine_chunks()
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            if classes and f in classes:
                column = _class_names(column, classes[f])
            column = column.cast(_target_type(f, column.type))
            if column.type == pa.binary():
                column, bad = decode_text(column, f, ds.codec(f), ds.on_error(f))
                refused = bad | refused
            for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist():
                refused.setdefault(i, ("missing_field", f, f"column {c!r} is null"))
            fields[f] = column
        shower = _row_shower(table, list(cols.values()), ds.codec())
        yield Parsed(first, line_numbers(first, table.num_rows), fields, shower, {None: str(ds.path)}, refused)
        first += table.num_rows


def _class_names(ids: pa.Array, names: list[str]) -> pa.Array:
    """ClassLabel ids -> names (item-wise for a list column); -1, HF's "no label", becomes null."""
    if not pa.types.is_integer(ids.type):
        return pa.ListArray.from_arrays(ids.offsets, _class_names(ids.values, names), mask=ids.is_null())
    valid = pc.and_(pc.greater_equal(ids, 0), pc.less(ids, len(names)))
    return pa.array(names, pa.string()).take(pc.if_else(valid, ids, pa.scalar(None, ids.type)))


def _row_shower(table: pa.Table, cols: list[str], encoding: str):
    def show(i: int, f: str | None) -> str:
        values = [table.column(c)[i].as_py() for c in cols]
        return "\t".join(show_value(v, encoding) for v in values)[:CONTENT_CHARS]

    return show
