"""Compressed inputs: a file's codec from its first bytes, and its decompressed bytes as a stream.

``open_input`` opens a text, tsv or jsonl file for ``storage.readers.lines``: a plain file as itself, a gzip,
bzip2, xz or zstd file as a stream of its decompressed bytes, read one buffer at a time: nothing is
written to disk, and memory is the reader's block plus the codec's state (for zstd, plus what 128 KB of
input decodes to). The codec is what the file's first bytes say, never its name: a gzip file named
``.txt`` is read as gzip, and a plain file named ``.gz`` (a download that was decompressed but kept its
name) as plain text. The rows come from the content either way; refusing the misnamed file would only
make its user rename it.

Concatenated streams (``cat a.gz b.gz``, ``pigz``, ``zstd`` frames, ``pbzip2``) read as one. A stream
that ends before its end marker (a cut download) or does not decode raises `StreamFailure` only once the
bytes before it have been handed out, so the reader keeps every complete line before the break.
gzip, bzip2 and xz through the standard library; zstd through ``zstandard``, one frame at a time
(its ``stream_reader`` reports a cut frame as a clean end of file).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from conf.errors import InputError
from storage import objects

__all__ = ["CODECS", "StreamFailure", "TruncatedInput", "codec_of", "open_input"]

CODECS = ("plain", "gzip", "bzip2", "xz", "zstd")
_MAGIC = {  # RFC 1952; xz file format 1.0.4 §2.1.1.1; RFC 8878 §3.1.1 (a frame) and §3.1.2 (a skippable frame)
    "gzip": b"\x1f\x8b\x08",
    "xz": b"\xfd7zXZ\x00",
    "zstd": b"\x28\xb5\x2f\xfd",
}
_BZIP2_BLOCKS = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")  # a block (π), or an empty stream's end
_TEST = {"gzip": "gzip -t", "bzip2": "bzip2 -t", "xz": "xz -t", "zstd": "zstd -t"}
_ZSTD_IN = 1 << 17  # compressed bytes fed to the zstd decoder at a time


def codec_of(head: bytes) -> str:
    """The codec whose magic bytes start ``head`` (the file's first 10 bytes), else ``"plain"``.

    bzip2's magic is three letters (``BZh``), so it also needs the level digit and the first block's own
    magic: a text file whose first line starts with "BZh" stays plain.
    """
    for codec, magic in _MAGIC.items():
        if head.startswith(magic):
            return codec
    if len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18":  # a zstd skippable frame
        return "zstd"
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[3:4] != b"0" and head[4:10] in _BZIP2_BLOCKS:
        return "bzip2"
    return "plain"


class StreamFailure(Exception):
    """A compressed stream ended before its end marker, or does not decode; ``str`` says which, in words."""

    def __init__(self, codec: str, problem: str) -> None:
        super().__init__(problem)
        self.codec = codec

    def hint(self, path: Path) -> str:
        return (
            f"Hint: the file was cut short or damaged (an interrupted download or copy?): fetch or compress "
            f"it again; `{_TEST[self.codec]} {path}` tests it"
        )


class TruncatedInput(InputError):
    """A compressed input broke off: raised after its last complete line was read, so ``storage.readers.lines.rebatch``
    hands out the rows before it (as a last, shorter batch) before passing the error on."""


@contextlib.contextmanager
def open_input(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened for ``readinto``: the file itself when plain, else its decompressed bytes. ``readinto`` of a
    compressed stream fills as much of the buffer as it can; a broken stream raises `StreamFailure` at the first
    call that has no byte before the break left to give."""
    with objects.open_binary(path) as raw:  # a local file or an object-store URI (storage/objects/)
        codec = codec_of(raw.read(10))
        raw.seek(0)
        if codec == "plain":
            yield raw
            return
        with _Decompressed(raw, codec) as stream:
            yield stream


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of ``raw``; the codec's own errors become `StreamFailure`, after the bytes before them."""

    def __init__(self, raw: BinaryIO, codec: str) -> None:
        self.codec = codec
        self._failure: StreamFailure | None = None
        if codec == "zstd":
            self._chunks, self._pending = _zstd_chunks(raw), memoryview(b"")
        else:
            opener = {"gzip": lambda f: gzip.GzipFile(fileobj=f), "bzip2": bz2.BZ2File, "xz": lzma.LZMAFile}[codec]
            self._file = opener(raw)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._failure is not None:
            raise self._failure
        n = 0
        with memoryview(b) as view:
            while n < len(view):
                try:
                    got = self._read1(view[n:])
                except Exception as e:  # noqa: BLE001 — each codec's errors are sorted by _failure_of
                    failure = self._failure_of(e)
                    if failure is None:
                        raise
                    if n == 0:
                        raise failure from e
                    self._failure = failure  # the bytes before the break first; the error on the next call
                    break
                if got == 0:
                    break
                n += got
        return n

    def _read1(self, view: memoryview) -> int:
        """Decompressed bytes into ``view`` from at most one step of the decoder; 0 at the end of the stream."""
        if self.codec != "zstd":
            chunk = self._file.read1(len(view))
        else:
            if not self._pending:
                self._pending = memoryview(next(self._chunks, b""))
            chunk, self._pending = self._pending[: len(view)], self._pending[len(view) :]
        view[: len(chunk)] = chunk
        return len(chunk)

    def _failure_of(self, e: Exception) -> StreamFailure | None:
        """The codec's error as a `StreamFailure`; None for any other (an I/O error of the operating system,
        which carries an errno, stays as it is: it may pass on a retry)."""
        if isinstance(e, StreamFailure):
            return e
        if isinstance(e, OSError) and e.errno is not None:
            return None
        if isinstance(e, EOFError):
            return StreamFailure(self.codec, f"truncated {self.codec} stream")
        if isinstance(e, (OSError, zlib.error, lzma.LZMAError)):  # BadGzipFile, bz2's "Invalid data stream"
            return StreamFailure(self.codec, f"corrupt {self.codec} stream ({' '.join(str(e).split())})")
        return None

    def close(self) -> None:
        if self.codec != "zstd" and not self.closed:
            self._file.close()
        super().close()


def _zstd_chunks(raw: BinaryIO) -> Iterator[bytes]:
    """The decompressed bytes of the zstd frames of ``raw``, one after another; EOFError when the input ends
    inside a frame. Output per step is what ``_ZSTD_IN`` compressed bytes decode to."""
    import zstandard  # only for .zst input

    dctx, frame, data = zstandard.ZstdDecompressor(), None, b""
    while True:
        if not data:
            data = raw.read(_ZSTD_IN)
            if not data:
                if frame is not None and not frame.eof:
                    raise EOFError("the input ended inside a zstd frame")
                return
        if frame is None or frame.eof:
            frame = dctx.decompressobj()  # the next frame (one at a time: `eof` then says a frame is complete)
        try:
            out = frame.decompress(data)
        except zstandard.ZstdError as e:
            raise StreamFailure("zstd", f"corrupt zstd stream ({' '.join(str(e).split())})") from e
        data = frame.unused_data if frame.eof else b""
        if out:
            yield out
