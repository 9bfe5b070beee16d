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
  (storage/objects/sql.py: ``register``, ``use``).
- **A store that is down or silent** fails in bounded time: each request gives up after ``connect_timeout_s`` to
  connect, or after ``read_timeout_s`` without a byte (the AWS SDK's low-speed limit), and is tried ``retries`` more
  times (``configure``, from the profile's ``storage`` section; other processes keep the defaults). What still fails
  to reach the store is one ``StoreUnreachable`` naming the object and the endpoint (no Prefect retry either: the
  SDK has retried already).

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

from storage.objects.reach import TIMEOUTS, Timeouts, reaching, unreachable

if TYPE_CHECKING:
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


def configure(settings: Any) -> None:
    """Use ``settings``' ``connect_timeout_s``, ``read_timeout_s`` and ``retries`` (a ``StorageConf``) for the
    stores this process opens from now on (the filesystems are made again when they changed)."""
    wanted = Timeouts(settings.connect_timeout_s, settings.read_timeout_s, settings.retries)
    if wanted != TIMEOUTS[0]:
        TIMEOUTS[0] = wanted
        reset()


@functools.cache
def _filesystem(scheme: str) -> pafs.FileSystem:
    """One pyarrow filesystem per scheme and process (its paths name the bucket: ``bucket/key``)."""
    import pyarrow.fs as pafs

    if scheme == "s3":
        t = TIMEOUTS[0]
        kwargs: dict[str, Any] = {
            "connect_timeout": t.connect_timeout_s,
            "request_timeout": t.read_timeout_s,  # on Linux too: curl's low-speed time (no byte for that long)
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=t.retries + 1),
        }
        if url := os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"):
            parts = urlsplit(url if "://" in url else f"https://{url}")
            kwargs |= {"endpoint_override": parts.netloc, "scheme": parts.scheme or "https"}
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
    from storage.objects import sql

    _filesystem.cache_clear()
    sql.forget()
    with _WHOLE_LOCK:
        _WHOLE.clear()


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


@reaching
def exists(loc: Loc) -> bool:
    return _head_size(str(loc)) is not None if is_remote(loc) else Path(loc).exists()


@reaching
def size(loc: Loc) -> int | None:
    """The file's size in bytes, None when it does not exist."""
    if is_remote(loc):
        return _head_size(str(loc))
    try:
        return Path(loc).stat().st_size
    except FileNotFoundError:
        return None


@reaching
def stamp(uri: str) -> tuple[int, int] | None:
    """An object's (size, modification time in ns), None when it does not exist."""
    info = _info(uri)
    return None if info is None else (info.size, info.mtime_ns or 0)


@reaching
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


@reaching
def read_bytes(loc: Loc) -> bytes:
    """The whole file; a missing one is ``FileNotFoundError`` on both kinds."""
    if not is_remote(loc):
        return Path(loc).read_bytes()
    fs, path = split(str(loc))
    try:
        return _read_all(fs, path)
    except OSError as e:
        if unreachable(e, str(loc)) is None and _info(str(loc)) is None:  # a store that did not answer: asked once
            raise FileNotFoundError(loc) from e
        raise


def _read_all(fs: pafs.FileSystem, path: str) -> bytes:
    """An object's bytes in one ranged GET after its HEAD. Not ``open_input_stream(...).read()``: pyarrow's S3
    stream reads in 256 KiB requests (115 GETs for 30 MB, 1.85 s against 0.08 s on moto's server)."""
    with fs.open_input_file(path) as f:
        return f.read_at(f.size(), 0)


@reaching
def open_binary(loc: Loc) -> BinaryIO:
    """The file for reading, seekable: a local file (unbuffered), or an object read by ranged GETs of 8 MiB."""
    if is_remote(loc):  # buffered by 8 MiB: a reader's small reads (gzip's 8 KiB) would each be a ranged GET
        fs, path = split(str(loc))
        return io.BufferedReader(fs.open_input_file(path), buffer_size=_BLOCK * 2)  # type: ignore[arg-type]
    return open(loc, "rb", buffering=0)  # noqa: SIM115 — the caller closes it


@reaching
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


@reaching
def put_bytes(data: bytes, loc: str) -> None:
    """One object written whole under its final key (a PUT: visible whole or not at all)."""
    fs, path = split(loc)
    with fs.open_output_stream(path, compression=None) as f:
        f.write(data)


@reaching
def remove(loc: Loc) -> None:
    if is_remote(loc):
        fs, path = split(str(loc))
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(path)
    else:
        Path(loc).unlink(missing_ok=True)


@reaching
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


@reaching
def parquet_file(loc: Loc) -> pq.ParquetFile:
    import pyarrow.parquet as pq

    if is_remote(loc):
        fs, path = split(str(loc))
        return pq.ParquetFile(fs.open_input_file(path))
    return pq.ParquetFile(loc)


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


@reaching
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


from storage.objects.sql import register as register  # noqa: E402 — after what it imports from here
from storage.objects.sql import schemes_of as schemes_of  # noqa: E402
from storage.objects.sql import use as use  # noqa: E402
