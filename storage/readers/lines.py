"""A text file as a stream of Arrow binary arrays, one element per line, read in byte blocks.

Hand-written because nothing off the shelf reads plain lines into Arrow with exact line numbers:
``pyarrow.csv`` interprets quotes, skips empty lines and treats a lone ``\\r`` as a line break, and
Python's line iteration costs one object per line. Here a block of ``block_bytes`` is read, its
``\\n`` found with numpy, the newlines (and a ``\\r`` before them) squeezed out in one vectorised
copy, and the result wrapped as a ``pa.BinaryArray`` over that copy. Memory is one block plus the
longest line, whatever the file size. A line is what ``wc -l`` counts, plus a last line without
its newline; a final newline does not start an empty line.

A compressed file (gzip, bzip2, xz, zstd: told by its first bytes, ``storage.readers.compressed``) is read
the same way from its decompressed stream, so its lines, line numbers and batches are the plain
file's. One that breaks off raises ``TruncatedInput`` naming the last complete line, after the
lines before it were yielded (and ``rebatch`` hands them out as a last, shorter piece).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa

from conf.errors import InputError
from storage.readers.compressed import StreamFailure, TruncatedInput, open_input

MAX_LINE_BYTES = 1 << 30  # a longer "line" means a binary file (and would overflow Arrow's int32 offsets)
BLOCK_BYTES = 8 << 20  # bytes per read; 8-16 MB measured fastest (tests pass a few bytes to cut lines)

_NL, _CR = 10, 13


def iter_lines(path: Path, *, block_bytes: int = BLOCK_BYTES, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[pa.BinaryArray]:
    """Yield the lines of ``path`` in order, without their ``\\n`` or ``\\r\\n``, a block's worth at a time."""
    with open_input(path) as f:
        buf = bytearray(block_bytes)
        carry = 0  # bytes of an unfinished line at the front of buf
        done = 0  # lines yielded so far
        while True:
            if carry > max_line_bytes:
                raise InputError(f"{path}:{done + 1}: a line of more than {max_line_bytes:,} bytes. Hint: is this a text file?")
            if len(buf) < carry + block_bytes:  # a line longer than a block: grow, keeping the carry
                grown = bytearray(max(carry + block_bytes, 2 * len(buf)))
                grown[:carry] = buf[:carry]
                buf = grown
            try:
                with memoryview(buf) as view:
                    got = f.readinto(view[carry : carry + block_bytes])
            except StreamFailure as e:
                raise _broken(path, e, done, carry) from e
            block = np.frombuffer(buf, np.uint8, count=carry + got)
            if got == 0:  # end of file: an unfinished line is the last line
                if carry:
                    yield _split(np.append(block, np.uint8(_NL)))
                return
            newlines = np.flatnonzero(block[carry:] == _NL) + carry  # the carry holds no newline
            if len(newlines) == 0:
                carry += got
                continue
            end = int(newlines[-1]) + 1
            yield _split(block[:end], newlines)
            done += len(newlines)
            rest = len(block) - end
            buf[:rest] = buf[end : end + rest]
            carry = rest


def _broken(path: Path, failure: StreamFailure, lines: int, unfinished: int) -> TruncatedInput:
    where = f"after line {lines:,}" if lines else "before its first complete line"
    cut = f" (the {unfinished:,} bytes read of line {lines + 1:,} are dropped)" if unfinished else ""
    return TruncatedInput(f"{path}: {failure} {where}{cut}. {failure.hint(path)}")


def _split(block: np.ndarray, newlines: np.ndarray | None = None) -> pa.BinaryArray:
    """The lines of ``block``, which ends with ``\\n``, as one binary array over a squeezed copy."""
    if newlines is None:
        newlines = np.flatnonzero(block == _NL)
    starts = np.empty_like(newlines)
    starts[0] = 0
    starts[1:] = newlines[:-1] + 1
    ends = newlines - ((newlines > starts) & (block[np.maximum(newlines - 1, 0)] == _CR))
    keep = np.ones(len(block), dtype=bool)
    keep[newlines] = False
    keep[ends] = False  # the \r where there is one; the \n itself otherwise
    offsets = np.zeros(len(newlines) + 1, dtype=np.int32)
    np.cumsum(ends - starts, out=offsets[1:])
    data = block[keep]
    return pa.BinaryArray.from_buffers(pa.binary(), len(newlines), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def count_lines(path: Path, *, block_bytes: int = 16 << 20) -> int:
    """The number of lines ``iter_lines`` yields for ``path``: its ``\\n`` count, plus one for an unended last line."""
    count, tail = 0, 0  # tail: bytes after the last newline
    with open_input(path) as f:
        buf = bytearray(block_bytes)
        with memoryview(buf) as view:
            while True:
                try:
                    got = f.readinto(view)
                except StreamFailure as e:
                    raise _broken(path, e, count, tail) from e
                if not got:
                    break
                count += int(np.count_nonzero(np.frombuffer(buf, np.uint8, count=got) == _NL))
                last = buf.rfind(b"\n", 0, got)
                tail = tail + got if last < 0 else got - 1 - last
    return count + (tail > 0)


T = TypeVar("T", pa.Array, pa.Table)


def rebatch(chunks: Iterable[T], size: int) -> Iterator[T]:
    """Regroup arrays (or tables) into pieces of exactly ``size`` rows, the last one shorter, slicing where possible.

    When ``chunks`` breaks off with ``TruncatedInput`` (a cut compressed file), the rows before the break are
    handed out first, as a last shorter piece, then the error is raised: the reader commits them.
    """
    pending: list[T] = []
    have = 0
    try:
        for chunk in chunks:
            while len(chunk):
                take = min(size - have, len(chunk))
                pending.append(chunk.slice(0, take))
                have += take
                chunk = chunk.slice(take)
                if have == size:
                    yield _concat(pending)
                    pending, have = [], 0
    except TruncatedInput:
        if have:
            yield _concat(pending)
        raise
    if have:
        yield _concat(pending)


def _concat(pieces: list[T]) -> T:
    if len(pieces) == 1:
        return pieces[0]
    if isinstance(pieces[0], pa.Table):
        return pa.concat_tables(pieces)
    return pa.concat_arrays(pieces)
