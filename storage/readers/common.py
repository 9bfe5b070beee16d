"""Helpers shared by the format parsers of ``storage.readers.dataset``: paths, decoding, line numbers, shown content."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError
from storage import objects
from storage.readers.row_checks import CONTENT_CHARS, Problem

__all__ = ["decode_text", "existing_path", "line_numbers", "numbered", "show_value"]


def existing_path(name: str, path: Path | str | None, *, directory: bool = False) -> Path | str:
    """``path`` if it is an existing, readable file (``directory``: directory) of dataset ``name``, else InputError
    (no such file, a directory where a file was expected or the other way round, permission denied). An
    object-store URI must name an object the credentials may read."""
    if objects.is_remote(path):
        return _existing_object(name, str(path))
    what = "directory" if directory else "file"
    if path is None or not path.exists():
        raise InputError(f"{path}: no such {what} (dataset {name!r}). Hint: check its path in the profile")
    if path.is_dir() != directory:
        raise InputError(
            f"{path}: is a {'file' if directory else 'directory'}; expected a {what} (dataset {name!r}). "
            "Hint: check its path in the profile"
        )
    try:
        os.listdir(path) if directory else open(path, "rb").close()
    except PermissionError:
        raise InputError(
            f"{path}: permission denied: the {what} cannot be read (dataset {name!r}). Hint: check its "
            f"mode and owner (ls -ld {path})"
        ) from None
    return path


def _existing_object(name: str, uri: str) -> str:
    try:
        found = objects.size(uri)
    except OSError as e:  # credentials, endpoint, a bucket of another account
        raise InputError(f"{uri}: cannot be read ({' '.join(str(e).split())}) (dataset {name!r})") from None
    if found is None:
        raise InputError(f"{uri}: no such object (dataset {name!r}). Hint: check its path in the profile")
    return uri


def decode_text(
    raw: pa.Array, fld: str | None, encoding: str = "utf-8", on_error: str = "reject"
) -> tuple[pa.StringArray, dict[int, Problem]]:
    """Binary -> string in ``encoding``; where a value does not decode, it is refused (``on_error`` reject: an
    ``invalid_utf8`` problem, ``invalid_encoding`` for another ``encoding``, the detail naming it) or kept with
    U+FFFD (replace).

    UTF-8 is validated by Arrow's vectorised cast; another encoding is decoded in one ``bytes.decode`` per
    batch (the values joined by newlines, split again by Arrow). Only a batch with a bad value is decoded
    value by value, to find it.
    """
    fast = _utf8(raw) if encoding == "utf-8" else _decoded_at_once(raw, encoding)
    if fast is not None:
        return fast, {}
    out, bad = [], {}
    name, reason = ("UTF-8", "invalid_utf8") if encoding == "utf-8" else (encoding, "invalid_encoding")
    for i, b in enumerate(raw.to_pylist()):
        try:
            out.append(None if b is None else b.decode(encoding))
        except UnicodeDecodeError as e:
            if on_error == "replace":
                out.append(b.decode(encoding, errors="replace"))
                continue
            out.append(None)
            bad[i] = (reason, fld, f"{fld + ': ' if fld else ''}invalid {name} at byte {e.start}")
    return pa.array(out, pa.string()), bad


def _utf8(raw: pa.Array) -> pa.StringArray | None:
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return None


def _decoded_at_once(raw: pa.Array, encoding: str) -> pa.StringArray | None:
    """``raw`` decoded strictly as one text, None if a value does not decode (or holds a newline itself)."""
    values = raw.fill_null(b"") if raw.null_count else raw
    offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset : values.offset + len(values) + 1]
    data = np.frombuffer(values.buffers()[2] or b"", np.uint8)[offsets[0] : offsets[-1]]
    joined = np.insert(data, offsets[1:-1] - offsets[0], np.uint8(10)).tobytes()
    try:
        text = joined.decode(encoding)
    except UnicodeDecodeError:
        return None
    lines = pc.split_pattern(pa.array([text], pa.large_string()), "\n").flatten()
    if len(lines) != len(raw):  # a value held a newline (a parquet field), or the codec made one
        return None
    lines = lines.cast(pa.string())
    return pc.if_else(raw.is_null(), pa.scalar(None, pa.string()), lines) if raw.null_count else lines


def show_value(value: object, encoding: str = "utf-8") -> str:
    """A value of the input as text for a reject's `content`: bytes decoded with replacement, lists space-joined."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value[: 4 * CONTENT_CHARS].decode(encoding, errors="replace")
    elif isinstance(value, list):
        value = " ".join(show_value(v, encoding) for v in value)
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
