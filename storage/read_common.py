"""Helpers shared by the format parsers of ``storage.readers``: paths, UTF-8 decoding, line numbers, shown content."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from conf.errors import InputError
from storage.row_checks import CONTENT_CHARS, Problem

__all__ = ["decode_utf8", "existing_path", "line_numbers", "numbered", "show_value"]


def existing_path(name: str, path: Path | None, *, directory: bool = False) -> Path:
    """``path`` if it is an existing file (``directory``: directory) of dataset ``name``, else InputError."""
    if path is None or not (path.is_dir() if directory else path.is_file()):
        what = "directory" if directory else "file"
        raise InputError(f"{path}: no such {what} (dataset {name!r}). Hint: check its path in the profile")
    return path


def decode_utf8(raw: pa.Array, fld: str | None) -> tuple[pa.StringArray, dict[int, Problem]]:
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


def show_value(value: object) -> str:
    """A value of the input as text for a reject's `content`: bytes decoded with replacement, lists space-joined."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value[: 4 * CONTENT_CHARS].decode("utf-8", errors="replace")
    elif isinstance(value, list):
        value = " ".join(show_value(v) for v in value)
    return str(value)[:CONTENT_CHARS]


def numbered(batches: Iterable, *, start: int) -> Iterator[tuple[int, object]]:
    """(first line, batch) for consecutive batches of lines."""
    first = start
    for b in batches:
        yield first, b
        first += len(b[0]) if isinstance(b, tuple) else len(b)


def line_numbers(first: int, n: int) -> np.ndarray:
    """The 1-based input lines ``first`` .. ``first + n - 1`` of a batch of ``n`` rows."""
    return np.arange(first, first + n, dtype=np.int64)
