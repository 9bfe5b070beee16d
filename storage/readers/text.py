"""Format parsers of ``storage.readers.dataset`` for line-based files: text (mono or a line-aligned bitext), tsv and jsonl.

Text and TSV go through ``storage.readers.lines`` (byte blocks split with numpy, plain or decompressed: gzip,
bzip2, xz, zstd) and vectorised Arrow kernels; only jsonl is parsed line by line in Python. Lines are
decoded in the dataset's ``encoding`` (``on_decode_error``: a line that does not decode is rejected,
or kept with U+FFFD), a bitext's sides each in its own where the profile gives one per side: two files
each with its codec, a TSV's columns each with its side's (the fields are split on the tab byte before
they are decoded; conf/sections/decoding.py says why jsonl cannot). Each parser checks the whole input eagerly
(InputError, ConfError; a non-UTF-8 codec on valid UTF-8: ``storage.readers.encoding``) and returns an
iterator of `Parsed` batches of ``batch_rows`` lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError, InputError
from conf.schema import DatasetConf
from conf.sections.decoding import SIDES
from storage.readers.common import decode_text, existing_path, line_numbers, numbered, show_value
from storage.readers.encoding import check_encodings
from storage.readers.lines import count_lines, iter_lines, rebatch
from storage.readers.row_checks import Parsed, Problem
from storage.schemas import FIELDS

__all__ = ["parse_jsonl", "parse_text", "parse_tsv"]

_TEXT_FIELDS = {"src", "tgt", "text"}  # a string in the input; `label` may also be a number, tokens/tags are lists


# --- text and tsv: lines of a file --------------------------------------------------------------------------------


def parse_text(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    """A mono text file, or a bitext's two files read in lockstep (their line counts checked first)."""
    if ds.kind == "mono":
        path = existing_path(name, ds.path)
        check_encodings(name, ds, {None: (path, None)}, block_bytes=block_bytes)
        return (
            _text_batch(ds, {"text": raw}, {None: str(ds.path)}, first)
            for first, raw in numbered(rebatch(iter_lines(path, block_bytes=block_bytes), batch_rows), start=1)
        )
    src, tgt = existing_path(name, ds.src), existing_path(name, ds.tgt)
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    if n_src != n_tgt:
        raise InputError(
            f"{ds.src} and {ds.tgt}: a bitext needs line-aligned files, found {n_src:,} and {n_tgt:,} lines. "
            "Hint: check the pair was not cut, or concatenated with a missing final newline"
        )
    check_encodings(name, ds, {"src": (src, None), "tgt": (tgt, None)}, block_bytes=block_bytes)
    sides = zip(*(rebatch(iter_lines(p, block_bytes=block_bytes), batch_rows) for p in (src, tgt)))
    files = {None: str(ds.src), "src": str(ds.src), "tgt": str(ds.tgt)}
    return (_text_batch(ds, {"src": s, "tgt": t}, files, first) for first, (s, t) in numbered(sides, start=1))


def _text_batch(ds: DatasetConf, raw: dict[str, pa.BinaryArray], files: dict, first: int) -> Parsed:
    """Lines of one file (mono) or of two in lockstep (bitext); a problem on either side refuses the pair."""
    fields, refused = {}, {}
    for side, lines in raw.items():  # src before tgt: a pair bad on both sides is reported for src
        fields[side], bad = decode_text(lines, side, ds.codec(side), ds.on_error(side))
        refused = bad | refused
    n = len(next(iter(raw.values())))
    return Parsed(
        first,
        line_numbers(first, n),
        fields,
        lambda i, f: show_value(raw[f or next(iter(raw))][i].as_py(), ds.codec(f)),
        files,
        refused,
    )


def parse_tsv(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    """Tab-separated rows in ``ds.columns`` order (the kind's fields by default), a header line skipped."""
    columns = list(ds.columns or FIELDS[ds.kind])
    missing = [f for f in FIELDS[ds.kind] if f not in columns]
    if missing:
        raise ConfError(f"datasets.{name}.columns: {columns} lacks {missing} of kind {ds.kind}; name every field")
    path = existing_path(name, ds.path)
    sides = {s: (path, columns.index(s)) for s in SIDES} if ds.kind == "bitext" else {None: (path, None)}
    check_encodings(name, ds, sides, n_columns=len(columns), block_bytes=block_bytes)
    lines = iter_lines(path, block_bytes=block_bytes)
    if ds.header:
        lines = _skip_first(lines)
    batches = rebatch(lines, batch_rows)
    return (_tsv_batch(ds, columns, raw, first, max_chars) for first, raw in numbered(batches, start=2 if ds.header else 1))


def _tsv_batch(ds: DatasetConf, columns: list[str], raw: pa.BinaryArray, first: int, max_chars: int) -> Parsed:
    text, refused = _tsv_lines(ds, columns, raw)
    refused = _long_lines(text, max_chars) | refused
    parts = pc.split_pattern(text, "\t")
    counts = pc.list_value_length(parts)
    wrong = pc.fill_null(pc.not_equal(counts, len(columns)), False)
    for i in np.flatnonzero(wrong.to_numpy(zero_copy_only=False)).tolist():
        refused[i] = (
            "column_count",
            None,
            f"expected {len(columns)} tab-separated fields ({', '.join(columns)}), found {counts[i].as_py()}",
        )
    if refused:
        parts = pc.if_else(wrong, pa.scalar(None, parts.type), parts)
    fields = {f: pc.list_element(parts, columns.index(f)) for f in FIELDS[ds.kind]}
    if ds.kind == "slots":  # space-separated tokens and tags
        fields = {f: pc.ascii_split_whitespace(pc.ascii_trim_whitespace(a)) for f, a in fields.items()}
    return Parsed(first, line_numbers(first, len(raw)), fields, _line_shower(raw, ds, columns), {None: str(ds.path)}, refused)


def _tsv_lines(ds: DatasetConf, columns: list[str], raw: pa.BinaryArray) -> tuple[pa.StringArray, dict[int, Problem]]:
    """The lines as text: decoded whole, or (sides in different encodings) field by field, each with its side's
    codec, and joined again by tabs. A line of the wrong shape is then decoded whole with the source's codec and
    replacement: it is rejected `column_count` in any case."""
    if not ds.per_side():
        return decode_text(raw, None, ds.codec(), ds.on_error())
    parts = pc.split_pattern(raw, b"\t")
    wrong = pc.fill_null(pc.not_equal(pc.list_value_length(parts), len(columns)), False)
    parts = pc.if_else(wrong, pa.scalar(None, parts.type), parts)
    fields, refused = [], {}
    for k, column in enumerate(columns):  # another column than src/tgt is read with the source's codec
        text, bad = decode_text(pc.list_element(parts, k), column, ds.codec(column), ds.on_error(column))
        fields.append(text)
        refused = bad | refused  # the first column's problem is reported
    whole, _ = decode_text(raw, None, ds.codec(), "replace")
    return pc.if_else(wrong, whole, pc.binary_join_element_wise(*fields, "\t")), refused


def _line_shower(raw: pa.BinaryArray, ds: DatasetConf, columns: list[str] | None = None):
    """A line as a reject's `content`: decoded with replacement, a TSV's fields each in its side's codec."""
    if columns is None or not ds.per_side():
        return lambda i, f: show_value(raw[i].as_py(), ds.codec())

    def show(i: int, f: str | None) -> str:
        fields = raw[i].as_py().split(b"\t")
        return show_value(
            "\t".join(
                b.decode(ds.codec(columns[k] if k < len(columns) else None), errors="replace") for k, b in enumerate(fields)
            )
        )

    return show


def _long_lines(lines: pa.Array, max_chars: int) -> dict[int, Problem]:
    """Whole input lines (a TSV row, a JSON object) over ``max_line_chars`` characters."""
    if not pc.any(pc.greater(pc.binary_length(lines), max_chars)).as_py():  # bytes >= characters
        return {}
    chars = pc.utf8_length(lines)
    hits = np.flatnonzero(pc.fill_null(pc.greater(chars, max_chars), False).to_numpy(zero_copy_only=False))
    return {i: ("too_long", None, f"line: {chars[i].as_py()} characters, max_line_chars is {max_chars}") for i in hits.tolist()}


def _skip_first(arrays: Iterator[pa.Array]) -> Iterator[pa.Array]:
    skipped = False
    for a in arrays:
        if not skipped and len(a):
            a, skipped = a.slice(1), True
        yield a


# --- jsonl: one object per line -----------------------------------------------------------------------------------


def parse_jsonl(name: str, ds: DatasetConf, *, batch_rows: int, block_bytes: int, max_chars: int) -> Iterator[Parsed]:
    """One JSON object per line, its keys the kind's fields (through ``ds.rename``)."""
    path = existing_path(name, ds.path)
    check_encodings(name, ds, {None: (path, None)}, block_bytes=block_bytes)
    batches = rebatch(iter_lines(path, block_bytes=block_bytes), batch_rows)
    return (_jsonl_batch(ds, raw, first, max_chars) for first, raw in numbered(batches, start=1))


def _jsonl_batch(ds: DatasetConf, raw: pa.BinaryArray, first: int, max_chars: int) -> Parsed:
    names = FIELDS[ds.kind]
    values: dict[str, list] = {f: [] for f in names}
    text, refused = decode_text(raw, None, ds.codec(), ds.on_error())
    long = _long_lines(text, max_chars)
    for i, line in enumerate(text.to_pylist()):
        record, problem = {}, refused.get(i) or long.get(i)  # not decoded, or too long: not parsed
        if problem is None:
            record, problem = _json_record(line, ds.kind, ds.rename)
        if problem:
            refused[i] = problem
        for f in names:
            values[f].append(None if problem else record[f])
    fields = {f: pa.array(v, pa.list_(pa.string()) if ds.kind == "slots" else pa.string()) for f, v in values.items()}
    return Parsed(first, line_numbers(first, len(raw)), fields, _line_shower(raw, ds), {None: str(ds.path)}, refused)


def _json_record(text: str, kind: str, rename: dict[str, str]) -> tuple[dict, Problem | None]:
    """The fields of one decoded jsonl line as strings (lists of strings for slots), or why not."""
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
