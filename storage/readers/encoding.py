"""Whether a dataset's ``encoding`` fits its bytes: the two checks of issue 26 around ``storage.readers.text``.

``misread_utf8`` / ``not_utf8_error`` (before a read, eager): a file (or a bitext side, or a TSV side's column) read with a
codec other than UTF-8 whose bytes decode entirely as UTF-8 and hold non-ASCII is an ``InputError`` naming
the file and side. Any one-byte codec (latin-1, cp1252) decodes every byte sequence, so such a read never
rejects a line: it turns "It’s" into "Itâ\\x80\\x99s" without a word. The test is exact, no guessing: the
bytes are valid UTF-8 (Arrow's cast validates it) and not all ASCII. A real Latin-1 text with non-ASCII
letters is almost never valid UTF-8 (an accented letter would have to be followed by 1–3 continuation
bytes from 0x80–0xBF, which are control codes, not letters, in Latin-1).

``undecodable_sample`` / ``proposed_encoding`` (after a read): when more than ``WARN_SHARE`` of a file's lines
were rejected ``invalid_utf8``, ``tasks.ingest.read.decode_warnings`` warns with the encoding that
charset-normalizer proposes for a sample of those lines. It only proposes: the run still reads what the
profile says, and the user sets ``encoding``. The checks are hand-written glue (reading lines, choosing the
sample, wording the hint); detection itself is charset-normalizer's.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError
from conf.schema import DatasetConf
from conf.sections.decoding import SIDES
from storage.readers.lines import BLOCK_BYTES, iter_lines

__all__ = [
    "SAMPLE_BYTES",
    "WARN_SHARE",
    "check_encodings",
    "misread_utf8",
    "not_utf8_error",
    "proposed_encoding",
    "undecodable_sample",
]

WARN_SHARE = 0.05  # more than this share of a file's lines rejected `invalid_utf8`: the run warns
SAMPLE_BYTES = 1 << 16  # undecodable lines handed to charset-normalizer: enough for its statistics, quick


def _values(path: Path, column: int | None, n_columns: int | None, block_bytes: int) -> Iterator[tuple[int, pa.Array]]:
    """(first line, binary values) per block: whole lines, or field ``column`` of the lines with ``n_columns``
    tab-separated fields (null in the others: a line of the wrong shape is rejected by the read anyway)."""
    first = 1
    for lines in iter_lines(path, block_bytes=block_bytes):
        values = lines
        if column is not None:
            parts = pc.split_pattern(lines, b"\t")
            wrong = pc.not_equal(pc.list_value_length(parts), n_columns)
            values = pc.list_element(pc.if_else(wrong, pa.scalar(None, parts.type), parts), column)
        yield first, values
        first += len(lines)


def _first_non_ascii(path: Path, column: int | None, n_columns: int | None, block_bytes: int) -> tuple[int, bytes] | None:
    """(line, value) of the first value with a non-ASCII byte, if every value is valid UTF-8; else None."""
    found = None
    for first, values in _values(path, column, n_columns, block_bytes):
        try:
            text = values.cast(pa.string())  # validates UTF-8
        except pa.ArrowInvalid:
            return None
        if found is None:
            non_ascii = np.flatnonzero(pc.fill_null(pc.invert(pc.string_is_ascii(text)), False).to_numpy(zero_copy_only=False))
            if len(non_ascii):
                found = (first + int(non_ascii[0]), values[int(non_ascii[0])].as_py())
    return found


def misread_utf8(
    path: Path, codec: str, *, column: int | None = None, n_columns: int | None = None, block_bytes: int = BLOCK_BYTES
) -> tuple[int, bytes] | None:
    """(line, value) of the first non-ASCII value of ``path`` (its field ``column`` of ``n_columns``: a TSV side) when
    ``codec`` is not UTF-8 but every value is valid UTF-8 with some non-ASCII byte: a read that would be mojibake.
    None when the codec is UTF-8, a value is not valid UTF-8, or the text is ASCII (the same in any such codec)."""
    if codecs.lookup(codec).name == "utf-8":
        return None
    return _first_non_ascii(path, column, n_columns, block_bytes)


def not_utf8_error(
    name: str, path: Path, codec: str, found: tuple[int, bytes], *, side: str | None, hint: str, column: bool = False
) -> InputError:
    """The one line for a ``misread_utf8`` hit: the file and line, the dataset and side, the text as it would be
    misread, and ``hint`` (the setting that reads it right)."""
    line, value = found
    text = value.decode("utf-8")
    at = next(i for i, ch in enumerate(text) if not ch.isascii())
    shown = text[max(0, at - 12) : at + 12]
    misread = shown.encode("utf-8").decode(codec, errors="replace")
    where = f"side {side} of dataset {name!r}" if side else f"dataset {name!r}"
    col = f" (its {side} column)" if column else ""
    return InputError(
        f"{path}:{line}: {where} is read as {codec}, but the file{col} is valid UTF-8 with non-ASCII "
        f"text: {shown!r} would become {misread!r}. Hint: it is valid UTF-8: set {hint}"
    )


def undecodable_sample(
    path: Path,
    *,
    column: int | None = None,
    n_columns: int | None = None,
    limit: int = SAMPLE_BYTES,
    block_bytes: int = BLOCK_BYTES,
) -> bytes:
    """The first values of ``path`` (field ``column``) that are not valid UTF-8, newline-joined, up to ``limit``."""
    sample: list[bytes] = []
    size = 0
    for _first, values in _values(path, column, n_columns, block_bytes):
        try:
            values.cast(pa.string())
            continue  # a block of valid UTF-8: nothing to sample
        except pa.ArrowInvalid:
            pass
        for b in values.to_pylist():
            if b is None:
                continue
            try:
                b.decode("utf-8")
            except UnicodeDecodeError:
                sample.append(b)
                size += len(b) + 1
                if size >= limit:
                    return b"\n".join(sample)
    return b"\n".join(sample)


def proposed_encoding(sample: bytes) -> list[str]:
    """The codecs charset-normalizer proposes for ``sample``, best first (its best match, then the codecs it says
    decode the sample the same way), as canonical Python names; empty when it proposes none."""
    from charset_normalizer import from_bytes

    best = from_bytes(sample).best() if sample else None
    if best is None:
        return []
    names = [best.encoding, *best.could_be_from_charset]
    out: list[str] = []
    for n in names:
        try:
            canonical = codecs.lookup(n).name
        except LookupError:
            continue
        if canonical not in out:
            out.append(canonical)
    return out


def check_encodings(
    name: str,
    ds: DatasetConf,
    sides: dict[str | None, tuple[Path, int | None]],
    *,
    n_columns: int | None = None,
    block_bytes: int = BLOCK_BYTES,
) -> None:
    """``misread_utf8`` of each side (``sides``: side, or None for a whole file -> (path, TSV column or None)); the
    first hit is an InputError whose hint is the ``encoding`` that reads every hit side as UTF-8."""
    found = {
        s: f
        for s, (path, col) in sides.items()
        if (f := misread_utf8(path, ds.codec(s), column=col, n_columns=n_columns, block_bytes=block_bytes))
    }
    if not found:
        return
    side, hit = next(iter(found.items()))
    fixed = {s: "utf-8" if s in found else ds.codec(s) for s in SIDES}
    hint = (
        f"encoding: {{src: {fixed['src']}, tgt: {fixed['tgt']}}}"
        if side is not None and fixed["src"] != fixed["tgt"]
        else "encoding: utf-8 (the default: leave `encoding` out)"
    )
    path, col = sides[side]
    raise not_utf8_error(name, path, ds.codec(side), hit, side=side, hint=hint, column=col is not None)
