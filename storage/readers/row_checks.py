"""Row checks of the readers: a parsed batch becomes its kept rows and its rejects, each with a reason.

A format parser (``storage.readers.dataset``) turns input into `Parsed`: the kind's fields as Arrow arrays,
plus the rows it already refused (bad UTF-8, a wrong field count, bad JSON). `split_rows` then runs
the checks every format shares, vectorised over the batch, in the order of `REASONS`. A refused row
gets one reason: the parser's, else the first shared check it fails. Only rejected rows are touched
in Python (to write their detail and content).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage import objects
from storage.schemas import FIELDS, REJECTS, SCHEMAS, with_uid

# the `reason` vocabulary of the rejects; a row gets the first that applies, in this order
REASONS = (
    "invalid_utf8",  # the line (or a field) is not UTF-8
    "invalid_encoding",  # not valid in the dataset's `encoding` (cp1252's undefined bytes, ...)
    "column_count",  # tsv: not as many tab-separated fields as `columns`
    "bad_json",  # jsonl: the line does not parse
    "missing_field",  # jsonl / parquet / hf: a needed field is absent or null
    "bad_type",  # jsonl: not an object, or a field of the wrong type
    "nul_byte",  # a NUL character
    "too_long",  # a line / field over `max_line_chars` characters
    "empty",  # a side / field empty or whitespace-only
    "tags_mismatch",  # slots: len(tokens) != len(tags)
)
CONTENT_CHARS = 200  # `content` of a reject is cut to this many characters

Problem = tuple[str, str | None, str]  # (reason, field or None for the whole row, detail)


@dataclass
class Parsed:
    """One batch of input, parsed, before the shared checks."""

    first_line: int  # 1-based input line of the first row
    line: np.ndarray  # int64, the input line of each row
    fields: dict[str, pa.Array]  # the kind's fields (string or list<string>), null where a row is refused
    content: Callable[[int, str | None], str]  # (row, field) -> the offending input, for a reject
    files: dict[str | None, str]  # field -> the file it came from; None -> the file of the row
    refused: dict[int, Problem] = field(default_factory=dict)  # rows refused while parsing


def split_rows(name: str, kind: str, parsed: Parsed, *, max_chars: int) -> tuple[pa.Table, pa.Table]:
    """(kept rows in the kind's schema with uid/source/line, rejects in ``REJECTS``), both in input order."""
    n = len(parsed.line)
    names = FIELDS[kind]
    code = np.zeros(n, dtype=np.int8)  # 0: kept, else 1 + index into REASONS
    which = np.full(n, -1, dtype=np.int8)  # the field at fault, -1 for the whole row
    for row, (reason, fld, _) in parsed.refused.items():
        code[row], which[row] = REASONS.index(reason) + 1, -1 if fld is None else names.index(fld)
    for reason, fld, mask in _problems(parsed.fields, names, n, max_chars):
        new = mask & (code == 0)
        code[new], which[new] = REASONS.index(reason) + 1, names.index(fld)

    keep = code == 0
    kept = {f: parsed.fields[f] if keep.all() else parsed.fields[f].filter(pa.array(keep)) for f in names}
    m = int(keep.sum())
    rows = pa.table(
        {
            "uid": pa.nulls(m, pa.string()),
            **kept,
            "source": pa.repeat(pa.scalar(name, pa.string()), m),
            "line": pa.array(parsed.line[keep], pa.int64()),
        },
        schema=SCHEMAS[kind],
    )
    return with_uid(rows, kind), _rejects(name, parsed, names, code, which, max_chars)


def input_names(files: Mapping[str | None, str]) -> dict[str | None, str]:
    """What a reject's ``file`` says of each input file: its name, not its directory (nor a secret in it), so that a
    moved or copied data directory reads the same bytes, as the read's fingerprint (the files' names and content)
    says. The two sides of a bitext with one name are told apart by their side: ``train.txt (src)``."""
    out = {fld: objects.name(f) for fld, f in files.items()}
    if "src" in out and out["src"] == out.get("tgt"):
        out = {fld: f"{n} ({fld or 'src'})" for fld, n in out.items()}
    return out


def _rejects(name: str, parsed: Parsed, names: tuple[str, ...], code, which, max_chars: int) -> pa.Table:
    out: dict[str, list] = {c: [] for c in REJECTS.names}
    files = input_names(parsed.files)
    for i in np.flatnonzero(code).tolist():
        fld = None if which[i] < 0 else names[which[i]]
        reason = REASONS[code[i] - 1]
        detail = parsed.refused[i][2] if i in parsed.refused else _detail(reason, fld, parsed.fields, i, max_chars)
        out["source"].append(name)
        out["file"].append(files.get(fld, files[None]))
        out["line"].append(int(parsed.line[i]))
        out["reason"].append(reason)
        out["detail"].append(detail)
        out["content"].append(parsed.content(i, fld)[:CONTENT_CHARS])
    return pa.table(out, schema=REJECTS)


def _detail(reason: str, fld: str, fields: dict[str, pa.Array], i: int, max_chars: int) -> str:
    value = fields[fld][i].as_py()
    if reason == "nul_byte":
        return f"{fld}: contains a NUL character"
    if reason == "too_long":
        chars = len(value) if isinstance(value, str) else len(" ".join(value))
        return f"{fld}: {chars} characters, max_line_chars is {max_chars}"
    if reason == "empty":
        return f"{fld}: no items, or an empty item" if isinstance(value, list) else f"{fld}: empty or whitespace-only"
    tokens, tags = fields["tokens"][i].as_py(), fields["tags"][i].as_py()
    return f"{len(tokens)} tokens but {len(tags)} tags"


def _problems(fields: dict[str, pa.Array], names, n: int, max_chars: int) -> Iterator[tuple[str, str, np.ndarray]]:
    """(reason, field, rows) for each shared check, in the order of REASONS, nulls never flagged."""
    strings = {f: fields[f] for f in names if pa.types.is_string(fields[f].type)}
    lists = {f: fields[f] for f in names if f not in strings}
    flat = {f: (pc.list_flatten(a), pc.list_parent_indices(a).to_numpy()) for f, a in lists.items()}
    for f, a in strings.items():
        yield "nul_byte", f, _has_nul(a)
    for f, (values, parent) in flat.items():
        yield "nul_byte", f, _rows_of(_has_nul(values), parent, n)
    for f, a in strings.items():
        yield "too_long", f, _too_long(a, max_chars)
    for f, (values, parent) in flat.items():  # a token list counts as its space-joined text
        chars = np.bincount(parent, weights=_np_int(pc.utf8_length(values)), minlength=n)
        yield "too_long", f, chars + np.maximum(_np_int(pc.list_value_length(lists[f])) - 1, 0) > max_chars
    for f, a in strings.items():
        yield "empty", f, _blank(a)
    for f, (values, parent) in flat.items():
        no_items = _np(pc.equal(pc.list_value_length(lists[f]), 0))
        yield "empty", f, no_items | _rows_of(_np(_blank(values, null=True)), parent, n)
    if "tokens" in lists and "tags" in lists:
        tokens, tags = (pc.list_value_length(lists[f]) for f in ("tokens", "tags"))
        yield "tags_mismatch", "tags", _np(pc.not_equal(tokens, tags))


def _has_nul(a: pa.Array) -> np.ndarray:
    """Rows holding a NUL: one numpy pass over the character data, then the rows of the (rare) hits."""
    rows = np.zeros(len(a), dtype=bool)
    _, offsets, data = a.buffers()
    if data is None or len(a) == 0:
        return rows
    offsets = np.frombuffer(offsets, np.int32)[a.offset : a.offset + len(a) + 1]
    hits = np.flatnonzero(np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]] == 0)
    if len(hits):
        rows[np.searchsorted(offsets, hits + offsets[0], side="right") - 1] = True
    return rows


def _too_long(a: pa.Array, max_chars: int) -> np.ndarray:
    if not _np(pc.greater(pc.binary_length(a), max_chars)).any():  # bytes >= characters: nothing to count
        return np.zeros(len(a), dtype=bool)
    return _np(pc.greater(pc.utf8_length(a), max_chars))


def _blank(a: pa.Array, *, null: bool = False) -> np.ndarray | pa.Array:
    blank = pc.or_(pc.equal(pc.binary_length(a), 0), pc.utf8_is_space(a))
    return pc.fill_null(blank, True) if null else _np(blank)


def _rows_of(item_mask: np.ndarray, parent: np.ndarray, n: int) -> np.ndarray:
    rows = np.zeros(n, dtype=bool)
    rows[parent[item_mask]] = True
    return rows


def _np(mask: pa.Array) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _np_int(a: pa.Array) -> np.ndarray:
    return pc.fill_null(a, 0).to_numpy(zero_copy_only=False)
