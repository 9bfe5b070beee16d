"""Where artifacts live: the cache directory on this machine, or an object store (``s3://bucket/prefix``).

A location (``Loc``) is a ``Path`` on this machine or a URI string of an object store. The functions here take
either and do the same thing on both, so the artifact store (storage/artifacts.py), ``Parts`` and the catalog's
views never ask which one they have:

- **Commit without rename.** On an object store a PUT is atomic per object: a part is written under its final key
  in one request (``put_bytes`` of ``parquet_bytes``), after its bytes are hashed in memory, and the manifest is written
  last, so a part without a manifest is never read as finished (storage/artifacts.py). A crashed writer leaves
  either nothing or whole objects, which the next run overwrites with the same bytes or `augdag gc` collects.
- **Credentials and endpoint** come from the standard variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``), read by pyarrow's ``S3FileSystem``; ``gs://`` and
  ``abfs://`` go through ``pyarrow.fs.FileSystem.from_uri`` with their own variables.
- **DuckDB reads the store** through a read-only fsspec filesystem registered on each connection
  (``register``): fsspec's ``ArrowFSWrapper`` over the same pyarrow filesystem. DuckDB 2.0's ``httpfs`` extension
  cannot be installed here (no extension downloads; the registry's build is for DuckDB 1.4), and registering
  pyarrow datasets per query would make every catalog view a per-connection object instead of the SQL stored in
  the catalog; a registered filesystem keeps the views' ``read_parquet([...])`` text and DuckDB's
  ``allowed_directories`` sandbox as they are, with the artifact prefix allowed. The wrapper refuses every write.

Hand-written: pyarrow and fsspec give the filesystems; nothing maintained gives one API over a local cache with
rename commits and an object store with PUT commits.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import io
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

Loc = Path | str
SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss")
_BLOCK = 1 << 22
_WHOLE_MAX = 8 << 20  # an artifact object read whole up to this size is kept in memory (see _whole)


def is_remote(loc: Loc | None) -> bool:
    """Whether ``loc`` is an object-store URI (``s3://…``)."""
    return isinstance(loc, str) and "://" in loc and loc.split("://", 1)[0].lower() in SCHEMES


def join(loc: Loc, *names: str) -> Loc:
    if is_remote(loc):
        return "/".join([str(loc).rstrip("/"), *names])
    return Path(loc).joinpath(*names)


def name(loc: Loc) -> str:
    return str(loc).rstrip("/").rsplit("/", 1)[-1] if is_remote(loc) else Path(loc).name


def parent(loc: Loc) -> Loc:
    return str(loc).rstrip("/").rsplit("/", 1)[0] if is_remote(loc) else Path(loc).parent


# -- the filesystems ------------------------------------------------------------------------------------------------


@functools.cache
def _filesystem(scheme: str) -> pafs.FileSystem:
    """One pyarrow filesystem per scheme and process (its paths name the bucket: ``bucket/key``)."""
    import pyarrow.fs as pafs

    if scheme == "s3":
        kwargs: dict[str, Any] = {}
        if endpoint := os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"):
            url = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
            kwargs |= {"endpoint_override": url.netloc, "scheme": url.scheme or "https"}
        if region := os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"):
            kwargs["region"] = region
        # allow_delayed_open: an object under one upload part (5 MiB) is one PUT, not a multipart upload's three
        # requests (create, part, complete); a failed PUT is raised at close, which every writer here waits for
        return pafs.S3FileSystem(allow_delayed_open=True, **kwargs)
    return pafs.FileSystem.from_uri(f"{scheme}://")[0]


def split(loc: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of an object-store URI and the path in it (``bucket/key``)."""
    scheme, rest = loc.split("://", 1)
    scheme = "gs" if scheme.lower() == "gcs" else scheme.lower()
    return _filesystem("abfs" if scheme == "abfss" else scheme), rest


def reset() -> None:
    """Forget the filesystems and what DuckDB's reads kept (a test that changes the endpoint variables)."""
    _filesystem.cache_clear()
    _INFO.clear()
    with _WHOLE_LOCK:
        _WHOLE.clear()
        _HANDLES.clear()


# -- files ---------------------------------------------------------------------------------------------------------


def _info(loc: str) -> Any:
    import pyarrow.fs as pafs

    fs, path = split(loc)
    info = fs.get_file_info(path)
    return None if info.type != pafs.FileType.File else info


def _head_size(loc: str) -> int | None:
    """An object's size from one HEAD, None when there is none (``get_file_info`` would also LIST the key as a
    directory when the HEAD finds nothing: two requests for every part that is not written yet)."""
    fs, path = split(loc)
    try:
        with fs.open_input_file(path) as f:
            return f.size()
    except FileNotFoundError:
        return None


def exists(loc: Loc) -> bool:
    return _head_size(str(loc)) is not None if is_remote(loc) else Path(loc).exists()


def size(loc: Loc) -> int | None:
    """The file's size in bytes, None when it does not exist."""
    if is_remote(loc):
        return _head_size(str(loc))
    try:
        return Path(loc).stat().st_size
    except FileNotFoundError:
        return None


def stamp(uri: str) -> tuple[int, int] | None:
    """An object's (size, modification time in ns), None when it does not exist."""
    info = _info(uri)
    return None if info is None else (info.size, info.mtime_ns or 0)


def listing(directory: Loc, suffix: str = "") -> dict[str, tuple[int, int]]:
    """The files directly in ``directory`` whose names end with ``suffix``: name -> (size, mtime in ns).
    One LIST request on an object store; a missing directory has none."""
    if is_remote(directory):
        import pyarrow.fs as pafs

        fs, path = split(str(directory))
        try:
            infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:
            return {}
        return {
            i.base_name: (i.size, i.mtime_ns or 0)
            for i in infos
            if i.type == pafs.FileType.File and i.base_name.endswith(suffix) and not i.base_name.startswith(".")
        }
    out = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return {}
    for e in entries:
        if e.name.endswith(suffix) and not e.name.startswith(".") and e.is_file():
            st = e.stat()
            out[e.name] = (st.st_size, st.st_mtime_ns)
    return out


def read_bytes(loc: Loc) -> bytes:
    """The whole file; a missing one is ``FileNotFoundError`` on both kinds."""
    if not is_remote(loc):
        return Path(loc).read_bytes()
    fs, path = split(str(loc))
    try:
        return _read_all(fs, path)
    except OSError as e:
        if _info(str(loc)) is None:
            raise FileNotFoundError(loc) from e
        raise


def _read_all(fs: pafs.FileSystem, path: str) -> bytes:
    """An object's bytes in one ranged GET after its HEAD. Not ``open_input_stream(...).read()``: pyarrow's S3
    stream reads in 256 KiB requests (115 GETs for 30 MB, 1.85 s against 0.08 s on moto's server)."""
    with fs.open_input_file(path) as f:
        return f.read_at(f.size(), 0)


def open_binary(loc: Loc) -> BinaryIO:
    """The file for reading, seekable: a local file (unbuffered), or an object read by ranged GETs of 8 MiB."""
    if is_remote(loc):  # buffered by 8 MiB: a reader's small reads (gzip's 8 KiB) would each be a ranged GET
        fs, path = split(str(loc))
        return io.BufferedReader(fs.open_input_file(path), buffer_size=_BLOCK * 2)  # type: ignore[arg-type]
    return open(loc, "rb", buffering=0)  # noqa: SIM115 — the caller closes it


def hash_of(loc: Loc) -> str:
    """sha256 of the file's bytes, streamed."""
    h = hashlib.sha256()
    if is_remote(loc):
        fs, path = split(str(loc))
        with fs.open_input_file(path) as f:  # a ranged GET per 64 MiB (a stream would GET every 256 KiB)
            total = f.size()
            for offset in range(0, total, _BLOCK * 16):
                h.update(f.read_at(min(_BLOCK * 16, total - offset), offset))
    else:
        with open(loc, "rb") as f:
            while chunk := f.read(_BLOCK):
                h.update(chunk)
    return h.hexdigest()


def put_bytes(data: bytes, loc: str) -> None:
    """One object written whole under its final key (a PUT: visible whole or not at all)."""
    fs, path = split(loc)
    with fs.open_output_stream(path, compression=None) as f:
        f.write(data)


def remove(loc: Loc) -> None:
    if is_remote(loc):
        fs, path = split(str(loc))
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(path)
    else:
        Path(loc).unlink(missing_ok=True)


def remove_tree(loc: str) -> None:
    """Every object under the prefix ``loc``."""
    fs, path = split(loc)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_dir(path)


def parquet_bytes(table: pa.Table, options: Mapping[str, Any]) -> bytes:
    """The Parquet file of ``table`` in memory (what a part on an object store is PUT as)."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    return buf.getvalue()


def parquet_file(loc: Loc) -> pq.ParquetFile:
    import pyarrow.parquet as pq

    if is_remote(loc):
        fs, path = split(str(loc))
        return pq.ParquetFile(fs.open_input_file(path))
    return pq.ParquetFile(loc)


def read_table(loc: Loc, columns: Iterable[str] | None = None) -> pa.Table:
    import pyarrow.parquet as pq

    cols = list(columns) if columns is not None else None
    if is_remote(loc) and cols is None:  # the whole part: a HEAD and one GET (ranged: the footer, then each column)
        import pyarrow as pa

        fs, path = split(str(loc))
        return pq.read_table(pa.BufferReader(_whole(path, lambda: _read_all(fs, path))))
    if is_remote(loc):
        fs, path = split(str(loc))
        with fs.open_input_file(path) as f:  # one HEAD, then ranged GETs (a path and filesystem would HEAD twice)
            return pq.read_table(f, columns=cols)
    return pq.read_table(loc, columns=cols)


def dataset_source(locs: Iterable[Loc]) -> tuple[list[str], pafs.FileSystem | None]:
    """Paths and filesystem for ``pyarrow.dataset.dataset`` over parts of one kind (all local or all remote)."""
    locs = list(locs)
    if locs and is_remote(locs[0]):
        fs, _ = split(str(locs[0]))
        return [split(str(p))[1] for p in locs], fs
    return [str(p) for p in locs], None


def upload_tree(src: Path, dest: str) -> list[tuple[str, int, str]]:
    """Put every file under ``src`` (a file or a directory) under the prefix ``dest``; returns (relative name,
    bytes, sha256) of each, in name order."""
    files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
    out = []
    for f in files:
        rel = f.relative_to(src).as_posix() if src.is_dir() else ""
        data = f.read_bytes()
        put_bytes(data, f"{dest}/{rel}" if rel else dest)
        out.append((rel, len(data), hashlib.sha256(data).hexdigest()))
    return out


# -- DuckDB --------------------------------------------------------------------------------------------------------

_REGISTER_LOCK = threading.Lock()
_USED: set[str] = set()  # the schemes this process reads or writes artifacts on (``use``)
_INFO: dict[str, dict[str, Any]] = {}  # DuckDB's view of the store: each file's info, once (``ReadOnly.info``)
_INFO_MAX = 1 << 17


def use(loc: Loc | None) -> None:
    """Note that this process works on ``loc``'s object store: its scratch DuckDB connections can read it."""
    if is_remote(loc):
        _USED.add(str(loc).split("://", 1)[0].lower())


@functools.cache
def _duckdb_filesystem(scheme: str) -> Any:
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
            found = super().info(path, **kwargs)
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
            return _PositionalFile(_handle(self.fs, self._strip_protocol(path)))

        def modified(self, path: str) -> Any:
            """From the cached info (DuckDB asks at every open; fsspec's own asks the store each time)."""
            return self.info(path)["mtime"]

        def _refuse(self, path: Any, *args: Any, **kwargs: Any) -> None:
            raise PermissionError(f"{path}: augdag's object store is read-only to SQL")

        rm = rm_file = _rm = mkdir = makedirs = rmdir = mv = cp_file = put_file = pipe_file = touch = _refuse

    return ReadOnly()


_WHOLE: collections.OrderedDict[str, bytes] = collections.OrderedDict()  # small artifact objects read, newest last
_WHOLE_LOCK = threading.Lock()
_WHOLE_KEEP = 64 << 20  # bytes of them kept per process


def _whole(key: str, read: Callable[[], bytes]) -> bytes:
    """The bytes of the artifact object ``key`` (bucket/key), from ``read()``; one of up to ``_WHOLE_MAX``
    is kept while there is room (a part under a fingerprint is never rewritten with other bytes): the side table
    every shard task of a stage reads."""
    with _WHOLE_LOCK:
        if (hit := _WHOLE.get(key)) is not None:
            _WHOLE.move_to_end(key)
            return hit
    data = read()
    if len(data) > _WHOLE_MAX:
        return data
    with _WHOLE_LOCK:
        _WHOLE[key] = data
        while sum(len(v) for v in _WHOLE.values()) > _WHOLE_KEEP:
            _WHOLE.popitem(last=False)
    return data


_HANDLES: collections.OrderedDict[str, Any] = collections.OrderedDict()  # DuckDB's open objects, newest last
_HANDLES_KEEP = 4096


def _handle(fs: Any, key: str) -> Any:
    """A random-access handle of the artifact object ``key``, one per process (its size is known once opened;
    each read is a ranged GET of its own, so threads share it: see ``_PositionalFile``)."""
    with _WHOLE_LOCK:
        if (hit := _HANDLES.get(key)) is not None:
            _HANDLES.move_to_end(key)
            return hit
    native = fs.open_input_file(key)
    with _WHOLE_LOCK:
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
            fs = _duckdb_filesystem("gs" if scheme == "gcs" else scheme)
        try:
            con.register_filesystem(fs)
        except duckdb.Error as e:  # a cursor of an instance that has it already
            if "already" not in str(e).lower():
                raise


def schemes_of(paths: Iterable[Loc]) -> set[str]:
    return {str(p).split("://", 1)[0].lower() for p in paths if is_remote(p)}
