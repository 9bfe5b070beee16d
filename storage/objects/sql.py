"""The object store as DuckDB reads it: a read-only fsspec filesystem registered on each connection.

fsspec's ``ArrowFSWrapper`` over the same pyarrow filesystem as storage/objects/ (DuckDB 2.0's ``httpfs`` extension
cannot be installed here: no extension downloads, and the registry's build is for DuckDB 1.4). Registering pyarrow
datasets per query would make every catalog view a per-connection object instead of the SQL stored in the catalog;
a registered filesystem keeps the views' ``read_parquet([...])`` text and DuckDB's ``allowed_directories`` sandbox as
they are, with the artifact prefix allowed. The wrapper refuses every write; a file's info and its handle are asked
of the store once per process (a part under a fingerprint is never rewritten with other bytes).

Hand-written: fsspec gives the wrapper; the per-thread positions DuckDB's shared handles need, the read-only
refusals and the caching are ours.
"""

from __future__ import annotations

import collections
import functools
import io
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from storage.objects import Loc, is_remote, split
from storage.objects.reach import unreachable

if TYPE_CHECKING:
    import duckdb


_REGISTER_LOCK = threading.Lock()
_USED: set[str] = set()  # the schemes this process reads or writes artifacts on (``use``)
_INFO: dict[str, dict[str, Any]] = {}  # DuckDB's view of the store: each file's info, once (``ReadOnly.info``)
_INFO_MAX = 1 << 17


def use(loc: Loc | None) -> None:
    """Note that this process works on ``loc``'s object store: its scratch DuckDB connections can read it."""
    if is_remote(loc):
        _USED.add(str(loc).split("://", 1)[0].lower())


@functools.cache
def duckdb_filesystem(scheme: str) -> Any:
    from fsspec.implementations.arrow import ArrowFSWrapper

    class ReadOnly(ArrowFSWrapper):
        """The object store as DuckDB sees it: reads only (a user's SQL never writes a byte)."""

        protocol = (scheme, "s3a") if scheme == "s3" else (scheme,)

        def __init__(self) -> None:
            super().__init__(split(f"{scheme}://x")[0])

        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            """A file's size and time, asked once per process: DuckDB asks before every read of a part, and a view
            rebuild reads every part's footer; a part under a fingerprint is never rewritten with other bytes."""
            key = self._strip_protocol(path)
            if (hit := _INFO.get(key)) is not None:
                return hit
            try:
                found = super().info(path, **kwargs)
            except OSError as e:  # a store that did not answer: one line naming it (storage/objects/reach.py)
                raise unreachable(e, f"{scheme}://{key}") or e from None
            if found["type"] == "file":
                if len(_INFO) >= _INFO_MAX:
                    _INFO.clear()
                _INFO[key] = found
            return found

        def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
            """A positional view of the object's handle, opened once per process: DuckDB opens a part several
            times in one query, and each open of a new handle is a HEAD."""
            if mode != "rb":
                raise PermissionError(f"{scheme}://{path}: augdag's object store is read-only to SQL")
            key = self._strip_protocol(path)
            try:
                return _PositionalFile(_handle(self.fs, key))
            except OSError as e:
                raise unreachable(e, f"{scheme}://{key}") or e from None

        def modified(self, path: str) -> Any:
            """From the cached info (DuckDB asks at every open; fsspec's own asks the store each time)."""
            return self.info(path)["mtime"]

        def _refuse(self, path: Any, *args: Any, **kwargs: Any) -> None:
            raise PermissionError(f"{path}: augdag's object store is read-only to SQL")

        rm = rm_file = _rm = mkdir = makedirs = rmdir = mv = cp_file = put_file = pipe_file = touch = _refuse

    return ReadOnly()


_HANDLES: collections.OrderedDict[str, Any] = collections.OrderedDict()  # DuckDB's open objects, newest last
_HANDLES_KEEP = 4096
_HANDLES_LOCK = threading.Lock()


def _handle(fs: Any, key: str) -> Any:
    """A random-access handle of the artifact object ``key``, one per process (its size is known once opened;
    each read is a ranged GET of its own, so threads share it: see ``_PositionalFile``)."""
    with _HANDLES_LOCK:
        if (hit := _HANDLES.get(key)) is not None:
            _HANDLES.move_to_end(key)
            return hit
    native = fs.open_input_file(key)
    with _HANDLES_LOCK:
        _HANDLES[key] = native
        while len(_HANDLES) > _HANDLES_KEEP:
            _HANDLES.popitem(last=False)
    return native


class _PositionalFile(io.RawIOBase):
    """An object opened for DuckDB: its position is per thread, and each read is a positional ``read_at``.

    DuckDB shares one handle of a Parquet file among its threads and reads with "seek, then read", two calls into
    Python that each take the GIL; pyarrow releases the GIL while it fetches, so with one shared position another
    thread's seek lands between them and a read returns the wrong bytes (a Thrift "Invalid data" error on a large
    part). A thread's own position makes each seek-and-read pair whole."""

    def __init__(self, native: Any) -> None:
        super().__init__()
        self._native, self._size, self._local = native, native.size(), threading.local()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return getattr(self._local, "pos", 0)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.tell(), io.SEEK_END: self._size}[whence]
        self._local.pos = max(0, base + offset)
        return self._local.pos

    def read(self, size: int | None = -1) -> bytes:
        pos = self.tell()
        n = max(0, self._size - pos) if size is None or size < 0 else max(0, min(size, self._size - pos))
        data = self._native.read_at(n, pos) if n else b""
        self._local.pos = pos + len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:  # the handle is shared (``_handle``) and holds no data: it is left open
        super().close()


def register(con: duckdb.DuckDBPyConnection, schemes: Iterable[str] | None = None) -> None:
    """Let ``con`` read the object stores of ``schemes`` (default: those this process ``use``s), read-only."""
    import duckdb

    for scheme in sorted(set(_USED if schemes is None else schemes)):
        with _REGISTER_LOCK:
            fs = duckdb_filesystem("gs" if scheme == "gcs" else scheme)
        try:
            con.register_filesystem(fs)
        except duckdb.Error as e:  # a cursor of an instance that has it already
            if "already" not in str(e).lower():
                raise


def schemes_of(paths: Iterable[Loc]) -> set[str]:
    return {str(p).split("://", 1)[0].lower() for p in paths if is_remote(p)}


def forget() -> None:
    """Forget what this process knows of the stores' objects and DuckDB's filesystems, each bound to the endpoint it
    was made with (a test that changes the endpoint)."""
    _INFO.clear()
    duckdb_filesystem.cache_clear()
    with _HANDLES_LOCK:
        _HANDLES.clear()
