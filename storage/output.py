"""Files a user names (`augdag sql -o`, `augdag export -o`, `augdag report -o`), and the catalog a read command needs.

A user-named file is written the way careful command-line tools write one (GNU ``sed -i``, ``rsync``,
``git``'s lock files), hand-written here because no package does it this way for Arrow data:

- its format is ``--format`` or else its extension (``FORMAT_OF``); both given must agree;
- the target is checked with ``lstat`` before anything is computed: absent or a regular file is replaced;
  a directory is refused; a symbolic link, FIFO, device or socket is refused unless ``force``, and even then
  the link (or node) itself is replaced, never written through; a file of the cache is never replaced;
- the data goes to a ``tempfile.mkstemp`` file in the target's directory (a fresh name created with
  ``O_EXCL``: a link planted at any name is not followed), written through its descriptor (never reopened
  by name), and ``os.replace`` puts it on the target only after a second check of the target;
- missing parent directories are created only then, after the caller validated everything else;
- every refusal or OS error is a ``ConfError`` (one line, exit 2) naming the path.

CSV and TSV have no nested values: list, struct and map columns are written as JSON text (``flat_for_csv``).
``existing_catalog`` is the check of every read command: a cache without a catalog is a typo, not an empty
result, and nothing is created for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from conf.errors import CatalogError, ConfError
from storage.catalog import Catalog

FORMAT_OF = {".csv": "csv", ".tsv": "tsv", ".json": "jsonl", ".jsonl": "jsonl", ".parquet": "parquet"}
ALIASES = {"json": "jsonl"}  # `--format json` is JSON Lines (one object per line), as DuckDB writes .json
MISSING_DIRS = "missing parent directories are created once the query has run"


def existing_catalog(root: Path) -> Catalog:
    """The catalog of ``root``, which must exist: a read command on a cache that no run wrote is exit 2."""
    catalog = Catalog(root)
    if not catalog.path.is_file():
        raise CatalogError(f"no catalog at {catalog.root} (runs write it; --cache or $AUGDAG_CACHE)")
    return catalog


def output_format(path: Path, fmt: str | None, choices: Sequence[str]) -> str:
    """The format to write ``path`` in: ``fmt`` (``json`` read as ``jsonl``), else the one its extension names.

    A known extension that names another format than ``fmt`` is an error, as is no ``fmt`` and no known
    extension; ``choices`` are the formats the command writes."""
    if os.path.isdir(path):
        raise ConfError(f"{path}: is a directory; --output names a file (e.g. {path / 'result.parquet'})")
    by_ext = FORMAT_OF.get(path.suffix.lower())
    if fmt is None:
        if by_ext is None or by_ext not in {ALIASES.get(c, c) for c in choices}:
            raise ConfError(
                f"{path}: cannot tell the format from the extension {path.suffix or '(none)'!r}; "
                f"expected one of {', '.join(e for e, f in FORMAT_OF.items() if f in _canon(choices))}. "
                f"Hint: --format {'|'.join(choices)}"
            )
        return by_ext
    canon = ALIASES.get(fmt, fmt)
    if by_ext is not None and by_ext != canon:
        raise ConfError(
            f"{path}: --format {fmt} but the extension {path.suffix!r} says {by_ext}. "
            f"Hint: name the file *.{canon} or drop --format"
        )
    return canon


def _canon(choices: Sequence[str]) -> set[str]:
    return {ALIASES.get(c, c) for c in choices}


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_target(path: Path, *, force: bool = False, cache: Path | None = None) -> None:
    """Refuse ``path`` as an output file unless it is absent or a regular file (see the module docstring);
    nothing is created. ``cache``: the cache root, whose existing files are never replaced."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # a new name (its parent is checked below)
        st = None
    except OSError as e:
        raise ConfError(f"{path}: cannot write here: {e.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ConfError(f"{path}: is a directory; --output names a file (e.g. {path / 'result.parquet'})")
    if st is not None and not stat.S_ISREG(st.st_mode) and not force:
        what = _kind(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            what += f" (to {os.readlink(path)})"
        raise ConfError(
            f"{path}: is {what}; expected a regular file or a new name. Hint: another name, or "
            "--force to replace it (a link is replaced itself, never written through)"
        )
    if st is not None and cache is not None:
        real, root = Path(os.path.realpath(path.parent)) / path.name, Path(os.path.realpath(cache))
        if real == root or root in real.parents:
            raise ConfError(
                f"{path}: is a file of the cache {cache}; augdag never replaces its cache's files. Hint: another name"
            )
    parent = _existing_ancestor(path.parent)
    if not parent.is_dir():
        raise ConfError(f"{parent}: is not a directory, so {path} cannot be written")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfError(f"{path}: cannot write here: {parent} is not writable")


def _existing_ancestor(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (as anything: a file there is reported as not a directory)."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _mode_for(path: Path) -> int:
    """The permission bits of a new output file: the replaced file's, else 0666 less the umask."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def replacing(paths: Sequence[Path], *, force: bool = False, cache: Path | None = None) -> Iterator[list[IO[bytes]]]:
    """Binary files that replace ``paths`` together when the block ends without an error; on an error no target
    changes and no temporary file is left. Call it after validating the rest: it creates missing directories."""
    paths = [Path(p) for p in paths]
    for p in paths:
        check_target(p, force=force, cache=cache)
    temps: list[Path] = []  # created and not (yet) renamed onto their target
    try:
        with ExitStack() as stack:
            files = []
            for p in paths:
                try:
                    p.parent.mkdir(parents=True, exist_ok=True)
                    fd, name = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
                except OSError as e:
                    raise ConfError(f"{p}: cannot write here: {e.strerror}") from None
                temps.append(Path(name))
                os.fchmod(fd, _mode_for(p))
                files.append(stack.enter_context(os.fdopen(fd, "wb")))
            try:
                yield files
            except OSError as e:  # a full disk, a quota: the targets stay as they were
                raise ConfError(f"{paths[0]}: could not be written: {e.strerror or e}") from None
        for p in paths:
            check_target(p, force=force, cache=cache)  # again: it may have changed while the data was written
        for tmp, p in list(zip(temps, paths)):
            try:
                os.replace(tmp, p)  # renames over the entry itself: a link or FIFO there is replaced, not followed
            except OSError as e:
                raise ConfError(f"{p}: cannot write here: {e.strerror}") from None
            temps.remove(tmp)
    finally:
        for tmp in temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def flat_for_csv(table: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    """``table`` with each list, struct or map column as JSON text (arrays, objects; null stays null)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_nested(field.type):
            as_dict = pa.types.is_map(field.type)  # a map's rows come as (key, value) pairs
            values = [
                None if v is None else json.dumps(dict(v) if as_dict else v, ensure_ascii=False, default=str)
                for v in table.column(i).to_pylist()
            ]
            table = table.set_column(i, pa.field(field.name, pa.string()), pa.array(values, pa.string()))
    return table


def json_line(row: dict) -> str:
    return json.dumps(row, default=str, ensure_ascii=False) + "\n"


def check_json_names(schema: pa.Schema, fmt: str) -> None:
    """A JSON object holds one value per key: a result with a repeated column name (``SELECT 1 a, 2 a``) is
    refused as json/jsonl instead of keeping only the last of the columns."""
    if fmt not in ("json", "jsonl"):
        return
    seen: set[str] = set()
    for name in schema.names:
        if name in seen:
            raise CatalogError(f"the result has two columns named {name!r}: name them apart (AS) for {fmt} output")
        seen.add(name)


def write_batches(reader: pa.RecordBatchReader, f: IO[bytes], fmt: str) -> int:
    """Stream ``reader`` into the open binary file ``f`` as ``fmt`` (csv, tsv, jsonl, parquet); returns its rows."""
    check_json_names(reader.schema, fmt)
    rows = 0
    if fmt == "parquet":
        with pq.ParquetWriter(f, reader.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(batch)
                rows += batch.num_rows
    elif fmt in ("csv", "tsv"):
        options = pacsv.WriteOptions(delimiter="\t" if fmt == "tsv" else ",")
        schema = flat_for_csv(reader.schema.empty_table()).schema
        with pacsv.CSVWriter(f, schema, write_options=options) as writer:
            for batch in reader:
                writer.write_batch(flat_for_csv(batch))
                rows += batch.num_rows
    elif fmt == "jsonl":
        for batch in reader:
            f.write("".join(json_line(row) for row in batch.to_pylist()).encode("utf-8"))
            rows += batch.num_rows
    else:
        raise ValueError(f"write_batches: unknown format {fmt!r}")
    return rows


def write_table(table: pa.Table, path: Path, fmt: str, *, force: bool = False, cache: Path | None = None) -> int:
    """``table`` as the file ``path`` in ``fmt``, safely (see the module docstring); returns its rows."""
    check_json_names(table.schema, fmt)
    with replacing([path], force=force, cache=cache) as (f,):
        return write_batches(table.to_reader(), f, fmt)
