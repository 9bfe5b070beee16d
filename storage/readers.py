"""Input readers: a configured dataset as batches of typed rows plus the rows refused, with a reason.

``read_dataset`` reads one ``DatasetConf`` (text, tsv, jsonl, parquet or a saved Hugging Face
dataset) into `ReadBatch`es of exactly ``batch_rows`` input rows each, the last one shorter: batch
*i* is always the same input rows, so a crashed read resumes batch by batch. A file that cannot be
read as configured raises ``InputError`` before any batch (a Parquet file whose rows cannot be decoded:
at that batch, naming the rows); a bad row becomes a reject (`REASONS`), never an exception and never
silently dropped, so input rows = kept + rejected.

Hand-written because no package reads line-aligned pairs with per-line rejects: ``pyarrow.csv``
stops at (or skips) a bad row and cannot read two files in lockstep, ``datasets`` and pandas
raise on bad rows. Text and TSV go through ``storage.lines`` (byte blocks split with numpy) and
the vectorised checks of ``storage.row_checks``; only jsonl is parsed line by line in Python.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from conf.errors import ConfError, InputError
from conf.schema import DatasetConf
from storage.lines import BLOCK_BYTES, count_lines, iter_lines, rebatch
from storage.row_checks import CONTENT_CHARS, REASONS, Parsed, Problem, split_rows
from storage.schemas import FIELDS

__all__ = ["REASONS", "ReadBatch", "read_dataset"]

_TEXT_FIELDS = {"src", "tgt", "text"}  # a string in the input; `label` may also be a number, tokens/tags are lists


@dataclass(frozen=True)
class ReadBatch:
    """One shard of input: the rows kept and the rows refused, which together are ``n_input`` input rows."""

    index: int  # 0-based batch (= shard) number
    rows: pa.Table  # the kind's schema, uid/source/line filled, in input order
    rejects: pa.Table  # REJECTS schema: source, file, line, reason, detail, content
    first_line: int  # 1-based input line of the batch's first row
    n_input: int  # input rows this batch covers == rows.num_rows + rejects.num_rows


def read_dataset(
    name: str, ds: DatasetConf, *, max_line_chars: int = 4096, batch_rows: int = 100_000, block_bytes: int = BLOCK_BYTES
) -> Iterator[ReadBatch]:
    """Batches of ``batch_rows`` input rows of dataset ``name``; whole-input problems raise here, at the call.

    Args:
        name: the dataset's name, written to ``source``.
        ds: its configuration.
        max_line_chars: a longer input line (text, tsv, jsonl) or field (also parquet, hf) is rejected ``too_long``.
        batch_rows: input rows per batch, kept and rejected together.
        block_bytes: bytes read per block from a text file (tests make it tiny).

    Raises:
        InputError: a file is missing or unreadable, a bitext's files differ in line count, a parquet / hf input
            lacks a needed column or has one of the wrong type, a DatasetDict without its `split`.
        ConfError: ``rename`` names no field of the kind, or tsv ``columns`` lacks one.
    """
    for key in ds.rename:
        if key not in FIELDS[ds.kind]:
            raise ConfError(f"datasets.{name}.rename: {key!r} is not a field of kind {ds.kind} {FIELDS[ds.kind]}")
    parse = {"text": _text, "tsv": _tsv, "jsonl": _jsonl, "parquet": _parquet, "hf": _hf}[ds.format]
    parsed = parse(name, ds, batch_rows=batch_rows, block_bytes=block_bytes, max_chars=max_line_chars)  # eager checks
    return _batches(name, ds.kind, parsed, max_line_chars)


def _batches(name: str, kind: str, parsed: Iterator[Parsed], max_chars: int) -> Iterator[ReadBatch]:
    for index, p in enumerate(parsed):
        rows, rejects = split_rows(name, kind, p, max_chars=max_chars)
        yield ReadBatch(index, rows, rejects, p.first_line, len(p.line))


# --- text and tsv: lines of a file --------------------------------------------------------------------------------


def _text(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    if ds.kind == "mono":
        path = _existing(name, ds.path)
        return (_text_batch({"text": raw}, {None: str(ds.path)}, first) for first, raw in _numbered(
            rebatch(iter_lines(path, block_bytes=block_bytes), batch_rows), start=1))
    src, tgt = _existing(name, ds.src), _existing(name, ds.tgt)
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    if n_src != n_tgt:
        raise InputError(
            f"{ds.src} and {ds.tgt}: a bitext needs line-aligned files, found {n_src:,} and {n_tgt:,} lines. "
            "Hint: check the pair was not cut, or concatenated with a missing final newline"
        )
    sides = zip(*(rebatch(iter_lines(p, block_bytes=block_bytes), batch_rows) for p in (src, tgt)))
    files = {None: str(ds.src), "src": str(ds.src), "tgt": str(ds.tgt)}
    return (_text_batch({"src": s, "tgt": t}, files, first) for first, (s, t) in _numbered(sides, start=1))


def _text_batch(raw: dict[str, pa.BinaryArray], files: dict, first: int) -> Parsed:
    """Lines of one file (mono) or of two in lockstep (bitext); a problem on either side refuses the pair."""
    fields, refused = {}, {}
    for side, lines in raw.items():  # src before tgt: a pair bad on both sides is reported for src
        fields[side], bad = _decode(lines, side)
        refused = bad | refused
    n = len(next(iter(raw.values())))
    return Parsed(first, _line_numbers(first, n), fields, lambda i, f: _show(raw[f or next(iter(raw))][i].as_py()),
                  files, refused)


def _tsv(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    columns = list(ds.columns or FIELDS[ds.kind])
    missing = [f for f in FIELDS[ds.kind] if f not in columns]
    if missing:
        raise ConfError(f"datasets.{name}.columns: {columns} lacks {missing} of kind {ds.kind}; name every field")
    lines = iter_lines(_existing(name, ds.path), block_bytes=block_bytes)
    if ds.header:
        lines = _skip_first(lines)
    batches = rebatch(lines, batch_rows)
    return (_tsv_batch(ds, columns, raw, first, max_chars) for first, raw in _numbered(batches, start=2 if ds.header else 1))


def _tsv_batch(ds: DatasetConf, columns: list[str], raw: pa.BinaryArray, first: int, max_chars: int) -> Parsed:
    text, refused = _decode(raw, None)
    refused = _long_lines(text, max_chars) | refused
    parts = pc.split_pattern(text, "\t")
    counts = pc.list_value_length(parts)
    wrong = pc.fill_null(pc.not_equal(counts, len(columns)), False)
    for i in np.flatnonzero(wrong.to_numpy(zero_copy_only=False)).tolist():
        refused[i] = ("column_count", None,
                      f"expected {len(columns)} tab-separated fields ({', '.join(columns)}), found {counts[i].as_py()}")
    if refused:
        parts = pc.if_else(wrong, pa.scalar(None, parts.type), parts)
    fields = {f: pc.list_element(parts, columns.index(f)) for f in FIELDS[ds.kind]}
    if ds.kind == "slots":  # space-separated tokens and tags
        fields = {f: pc.ascii_split_whitespace(pc.ascii_trim_whitespace(a)) for f, a in fields.items()}
    return Parsed(first, _line_numbers(first, len(raw)), fields, lambda i, f: _show(raw[i].as_py()),
                  {None: str(ds.path)}, refused)


def _long_lines(lines: pa.Array, max_chars: int) -> dict[int, Problem]:
    """Whole input lines (a TSV row, a JSON object) over ``max_line_chars`` characters."""
    if not pc.any(pc.greater(pc.binary_length(lines), max_chars)).as_py():  # bytes >= characters
        return {}
    chars = pc.utf8_length(lines)
    hits = np.flatnonzero(pc.fill_null(pc.greater(chars, max_chars), False).to_numpy(zero_copy_only=False))
    return {i: ("too_long", None, f"line: {chars[i].as_py()} characters, max_line_chars is {max_chars}") for i in hits.tolist()}


# --- jsonl: one object per line -----------------------------------------------------------------------------------


def _jsonl(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    batches = rebatch(iter_lines(_existing(name, ds.path), block_bytes=block_bytes), batch_rows)
    return (_jsonl_batch(ds, raw, first, max_chars) for first, raw in _numbered(batches, start=1))


def _jsonl_batch(ds: DatasetConf, raw: pa.BinaryArray, first: int, max_chars: int) -> Parsed:
    names = FIELDS[ds.kind]
    values: dict[str, list] = {f: [] for f in names}
    long = _long_lines(pc.cast(raw, pa.string(), safe=False), max_chars)
    refused: dict[int, Problem] = {}
    for i, line in enumerate(raw.to_pylist()):
        record, problem = _json_record(line, ds.kind, ds.rename)
        if i in long and (problem is None or problem[0] != "invalid_utf8"):
            record, problem = {}, long[i]
        if problem:
            refused[i] = problem
        for f in names:
            values[f].append(None if problem else record[f])
    fields = {f: pa.array(v, pa.list_(pa.string()) if ds.kind == "slots" else pa.string()) for f, v in values.items()}
    return Parsed(first, _line_numbers(first, len(raw)), fields, lambda i, f: _show(raw[i].as_py()),
                  {None: str(ds.path)}, refused)


def _json_record(line: bytes, kind: str, rename: dict[str, str]) -> tuple[dict, Problem | None]:
    """The fields of one jsonl line as strings (lists of strings for slots), or why not."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return {}, ("invalid_utf8", None, f"invalid UTF-8 at byte {e.start}")
    if "\x00" in text:
        return {}, ("nul_byte", None, "NUL byte in the line")
    if not text.strip():
        return {}, ("empty", None, "blank line")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return {}, ("bad_json", None, f"{e.msg} at column {e.colno}")
    if not isinstance(obj, dict):
        return {}, ("bad_type", None, f"expected a JSON object, found {type(obj).__name__}")
    record = {}
    for f in FIELDS[kind]:
        key = rename.get(f, f)
        if obj.get(key) is None:
            return {}, ("missing_field", f, f"no key {key!r}" + (f" (field {f})" if key != f else ""))
        value = _json_value(f, obj[key])
        if value is None:
            want = "a list of strings" if kind == "slots" else "a string or a number" if f == "label" else "a string"
            return {}, ("bad_type", f, f"{key!r} is {type(obj[key]).__name__}, expected {want}")
        record[f] = value
    return record, None


def _json_value(f: str, v: object) -> str | list[str] | None:
    if f in _TEXT_FIELDS:
        return v if isinstance(v, str) else None
    if f == "label":
        return _label(v)
    if isinstance(v, list) and all(_label(x) is not None for x in v):  # tokens, tags
        return [_label(x) for x in v]
    return None


def _label(v: object) -> str | None:
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    return None


# --- parquet and hf: columns of an Arrow table ----------------------------------------------------------------------


def _parquet(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    path = _existing(name, ds.path)
    try:
        pf = pq.ParquetFile(path)
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
            raise InputError(f"{path}: rows {first:,}-{last:,} of {total:,} cannot be decoded "
                             f"({type(e).__name__}: {' '.join(str(e).split())}). Hint: the file is corrupt or "
                             "truncated: write it again from its source") from e
        first += batch.num_rows
        yield pa.Table.from_batches([batch])


def _hf(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    import datasets  # heavy: only for this format

    path = _existing(name, ds.path, directory=True)
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise InputError(f"{ds.path}: not a dataset saved with `save_to_disk` ({e})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if ds.split not in loaded:
            found = "no `split` set" if ds.split is None else f"split {ds.split!r}"
            raise InputError(f"{ds.path}: a DatasetDict with splits {sorted(loaded)}, {found}. "
                             f"Hint: set `split: {sorted(loaded)[0]}`")
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
            raise InputError(f"{ds.path}: no column {c!r} for field {f!r}; columns present: {', '.join(schema.names)}. "
                             f"Hint: map it with `rename: {{{f}: <column>}}`")
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
                column, bad = _decode(column, f)
                refused = bad | refused
            for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist():
                refused.setdefault(i, ("missing_field", f, f"column {c!r} is null"))
            fields[f] = column
        yield Parsed(first, _line_numbers(first, table.num_rows), fields, _row_shower(table, list(cols.values())),
                     {None: str(ds.path)}, refused)
        first += table.num_rows


def _class_names(ids: pa.Array, names: list[str]) -> pa.Array:
    """ClassLabel ids -> names (item-wise for a list column); -1, HF's "no label", becomes null."""
    if not pa.types.is_integer(ids.type):
        return pa.ListArray.from_arrays(ids.offsets, _class_names(ids.values, names), mask=ids.is_null())
    valid = pc.and_(pc.greater_equal(ids, 0), pc.less(ids, len(names)))
    return pa.array(names, pa.string()).take(pc.if_else(valid, ids, pa.scalar(None, ids.type)))


def _row_shower(table: pa.Table, cols: list[str]):
    def show(i: int, f: str | None) -> str:
        values = [table.column(c)[i].as_py() for c in cols]
        return "\t".join(_show(v) for v in values)[:CONTENT_CHARS]

    return show


# --- helpers ----------------------------------------------------------------------------------------------------------


def _existing(name: str, path: Path | None, *, directory: bool = False) -> Path:
    if path is None or not (path.is_dir() if directory else path.is_file()):
        what = "directory" if directory else "file"
        raise InputError(f"{path}: no such {what} (dataset {name!r}). Hint: check its path in the profile")
    return path


def _decode(raw: pa.Array, fld: str | None) -> tuple[pa.StringArray, dict[int, Problem]]:
    """Binary -> string; where the vectorised cast refuses the batch, find the bad rows one by one."""
    try:
        return raw.cast(pa.string()), {}
    except pa.ArrowInvalid:
        pass
    out, bad = [], {}
    for i, b in enumerate(raw.to_pylist()):
        try:
            out.append(None if b is None else b.decode("utf-8"))
        except UnicodeDecodeError as e:
            out.append(None)
            bad[i] = ("invalid_utf8", fld, f"{fld + ': ' if fld else ''}invalid UTF-8 at byte {e.start}")
    return pa.array(out, pa.string()), bad


def _show(value: object) -> str:
    """A value of the input as text for a reject's `content`: bytes decoded with replacement, lists space-joined."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value[: 4 * CONTENT_CHARS].decode("utf-8", errors="replace")
    elif isinstance(value, list):
        value = " ".join(_show(v) for v in value)
    return str(value)[:CONTENT_CHARS]


def _numbered(batches: Iterable, *, start: int) -> Iterator[tuple[int, object]]:
    """(first line, batch) for consecutive batches of lines."""
    first = start
    for b in batches:
        yield first, b
        first += len(b[0]) if isinstance(b, tuple) else len(b)


def _skip_first(arrays: Iterator[pa.Array]) -> Iterator[pa.Array]:
    skipped = False
    for a in arrays:
        if not skipped and len(a):
            a, skipped = a.slice(1), True
        yield a


def _line_numbers(first: int, n: int) -> np.ndarray:
    return np.arange(first, first + n, dtype=np.int64)
