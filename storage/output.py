"""Files a user names (`augdag sql -o`, `augdag export -o`, `augdag report -o`), and the catalog a read command needs.

A user-named file is written the way careful command-line tools write one (GNU ``sed -i``, ``rsync``,
``git``'s lock files, ``cp`` for devices), hand-written here because no package does it this way for Arrow data:

- its format is ``--format`` or else its extension (``FORMAT_OF``); both given must agree;
- the target is checked with ``lstat`` before anything is computed (``check_target``): absent or a regular file
  is replaced; a directory, block device or socket is refused; a FIFO or character device (``/dev/null``) is
  written into, in place, as ``cp`` does, never replaced; ``-`` (and ``/dev/stdout``, ``/dev/fd/N``) is written
  through the descriptor; a symbolic link is refused unless ``force``, and then the link itself is replaced
  (never written through) if it points to a regular file or nothing, and refused if to anything else;
  no path inside the cache is accepted (links resolved): the cache holds only what its runs wrote;
- the data goes to a ``tempfile.mkstemp`` file in the target's directory (a fresh name created with
  ``O_EXCL``: a link planted at any name is not followed), written through its descriptor (never reopened
  by name), and ``os.replace`` puts it on the target only after a second check of the target;
- missing parent directories are created only then, after the caller validated everything else;
- every refusal or OS error is a ``ConfError`` (one line, exit 2) naming the path.

CSV is RFC 4180 (strings quoted, inner quotes doubled). TSV is what MT trainers read (Marian, OpusTrainer, fairseq,
Moses): raw lines, NULL as an empty field, a tab, line feed or carriage return in a value refused (``tsv_text``).
Nested values are JSON text in both (``flat_for_csv``). ``existing_catalog`` is the check of every read command:
a cache without a catalog is a typo, not an empty result, and nothing is created for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from conf.errors import CatalogError, ConfError
from storage.catalog import Catalog

FORMAT_OF = {".csv": "csv", ".tsv": "tsv", ".json": "jsonl", ".jsonl": "jsonl", ".parquet": "parquet"}
ALIASES = {"json": "jsonl"}  # `--format json` is JSON Lines (one object per line), as DuckDB writes .json
STDOUT = "-"  # `-o -`: standard output
REPLACE, INTO, DESCRIPTOR = "replace", "into", "descriptor"  # how check_target writes a path
KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}
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
    extension; ``choices`` are the formats the command writes. ``-`` (standard output) needs ``fmt``, and Parquet
    is not written to a terminal."""
    fd = descriptor(path)
    if fd is not None and fmt is None:
        what = "standard output" if fd == 1 else f"descriptor {fd}"
        raise ConfError(f"{path}: {what} has no extension to tell the format. Hint: --format {'|'.join(choices)}")
    if fd is not None and ALIASES.get(fmt, fmt) == "parquet" and os.isatty(fd):
        raise ConfError(f"{path}: is a terminal; Parquet is not written to a terminal. Hint: -o FILE.parquet, or a pipe")
    if fd is None and os.path.isdir(path):
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


def descriptor(path: Path) -> int | None:
    """The file descriptor ``path`` names (``-``: 1; ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``,
    ``/proc/self/fd/N``), else None: such a path is written through a copy of the descriptor, never opened or
    replaced by name (as root, replacing ``/dev/stdout`` would turn it into a regular file)."""
    if str(path) == STDOUT:
        return 1
    path = {"/dev/stdin": "/dev/fd/0", "/dev/stdout": "/dev/fd/1", "/dev/stderr": "/dev/fd/2"}.get(*[os.path.abspath(path)] * 2)
    return int(match.group(1)) if (match := re.fullmatch(r"/(?:dev|proc/self)/fd/(\d+)", path)) else None


def check_outside_cache(path: Path, cache: Path) -> None:
    """Refuse ``path`` when it, its directory or the file a link there points to is inside ``cache`` (symbolic
    links resolved): the cache holds only what augdag's runs wrote, and its files are proven against manifests."""
    root = Path(os.path.realpath(cache))
    for real in (Path(os.path.realpath(path.parent)) / path.name, Path(os.path.realpath(path))):
        if real == root or root in real.parents:
            shown = "" if real == Path(os.path.abspath(path)) else f" ({real})"
            raise ConfError(
                f"{path}: is inside the cache {cache}{shown}; -o never writes into the cache. Hint: a path outside it"
            )


def check_target(path: Path, *, force: bool = False, cache: Path | None = None) -> str:
    """How ``path`` is written as an output file, or a ``ConfError`` (see the module docstring); nothing is
    created. ``cache``: the cache root, inside which nothing is written.

    Returns:
        ``REPLACE`` (a new name or a regular file, or with ``force`` a link to one or a dangling link: a new file
        is renamed onto the link's own node), ``INTO`` (an existing FIFO or character device: opened and written
        in place, as ``cp`` does) or ``DESCRIPTOR`` (``-``, ``/dev/stdout``, ``/dev/fd/N``).
    """
    if descriptor(path) is not None:
        return DESCRIPTOR
    if cache is not None:
        check_outside_cache(path, cache)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # a new name (its parent is checked below)
        st = None
    except OSError as e:
        raise ConfError(f"{path}: cannot write here: {e.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ConfError(f"{path}: is a directory; --output names a file (e.g. {path / 'result.parquet'})")
    if st is not None and stat.S_ISLNK(st.st_mode):
        if not force:
            raise ConfError(
                f"{path}: is a symbolic link (to {os.readlink(path)}); expected a regular file or a new name. Hint: "
                "another name, or --force to replace it (a link is replaced itself, never written through)"
            )
        try:
            pointed = os.stat(path).st_mode
        except OSError:
            pointed = stat.S_IFREG  # a dangling link: its own node is replaced
        if not (stat.S_ISREG(pointed) or stat.S_ISDIR(pointed)):  # a directory was refused by output_format
            raise ConfError(
                f"{path}: is a symbolic link to {KINDS[stat.S_IFMT(pointed)]} ({os.path.realpath(path)}); --force replaces a "
                "regular file or a link to one, never a device's link. Hint: name the device or FIFO itself, or -o -"
            )
        st = None  # the link's own node is replaced, never written through
    if st is not None and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        return INTO
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ConfError(
            f"{path}: is {KINDS[stat.S_IFMT(st.st_mode)]}; augdag writes a regular file, or into a FIFO or character device. "
            "Hint: another name"
        )
    parent = _existing_ancestor(path.parent)
    if not parent.is_dir():
        raise ConfError(f"{parent}: is not a directory, so {path} cannot be written")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfError(f"{path}: cannot write here: {parent} is not writable")
    return REPLACE


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


def _open_in_place(path: Path, how: str) -> IO[bytes]:
    """``path`` opened for writing where it is: a copy of its descriptor (``DESCRIPTOR``) or the FIFO or
    character device itself (``INTO``; a FIFO waits for its reader, as ``cp`` does), never created or truncated."""
    try:
        if how == DESCRIPTOR:
            sys.stdout.flush()
            sys.stderr.flush()
            return os.fdopen(os.dup(descriptor(path)), "wb")
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | os.O_NOFOLLOW)  # a link swapped in: ELOOP
    except OSError as e:
        raise ConfError(f"{path}: cannot write here: {e.strerror}") from None
    if not (stat.S_ISFIFO(mode := os.fstat(fd).st_mode) or stat.S_ISCHR(mode)):  # it changed since check_target
        os.close(fd)
        raise ConfError(f"{path}: changed while it was checked; expected a FIFO or a character device")
    return os.fdopen(fd, "wb")


def _close(f: IO[bytes]) -> None:
    """Close ``f``; after an error its unwritten buffer may fail again (a closed pipe): the first error is reported."""
    with contextlib.suppress(OSError):
        f.close()


@contextmanager
def replacing(paths: Sequence[Path], *, force: bool = False, cache: Path | None = None) -> Iterator[list[IO[bytes]]]:
    """Binary files for ``paths``; a regular file (or new name) is replaced, together with the others, when the
    block ends without an error, and on an error no such target changes and no temporary file is left. A FIFO,
    character device or descriptor (``-``) is written in place as the block writes. Call it after validating
    the rest: it creates missing directories."""
    paths = [Path(p) for p in paths]
    hows = [check_target(p, force=force, cache=cache) for p in paths]
    temps: list[Path] = []  # created and not (yet) renamed onto their target
    try:
        with ExitStack() as stack:
            files = []
            for p, how in zip(paths, hows):
                if how != REPLACE:
                    files.append(_open_in_place(p, how))
                    stack.callback(_close, files[-1])
                    continue
                try:
                    p.parent.mkdir(parents=True, exist_ok=True)
                    fd, name = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
                except OSError as e:
                    raise ConfError(f"{p}: cannot write here: {e.strerror}") from None
                temps.append(Path(name))
                os.fchmod(fd, _mode_for(p))
                files.append(os.fdopen(fd, "wb"))
                stack.callback(_close, files[-1])
            try:
                yield files
                for f in files:
                    f.flush()  # a full disk or a closed pipe is reported here, not by the close
            except OSError as e:  # a full disk, a quota, a reader gone: the replaced targets stay as they were
                raise ConfError(f"{paths[0]}: could not be written: {e.strerror or e}") from None
        for p, how in zip(paths, hows):
            if how == REPLACE and check_target(p, force=force, cache=cache) != REPLACE:  # again: it may have changed
                raise ConfError(f"{p}: changed while the data was written; expected a regular file or a new name")
        for tmp, p in list(zip(temps, [p for p, how in zip(paths, hows) if how == REPLACE])):
            try:
                os.replace(tmp, p)  # renames over the entry itself: a link there is replaced, not followed
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


TSV_BREAKS = {"\t": "a tab", "\n": "a line feed", "\r": "a carriage return"}


def tsv_text(batch: pa.RecordBatch, first_row: int = 1) -> str:
    """``batch`` as TSV lines, raw: fields joined by tabs, rows ended by ``\\n``, NULL as an empty field, numbers
    and times as Arrow casts them to text, nested values as JSON. ``first_row``: the 1-based row number of the
    batch's first row in the whole result, for the error.

    Raises:
        CatalogError: a value holds a tab, line feed or carriage return (TSV has no quoting: the row would split),
            or bytes that are not UTF-8; the message names the row (with its source and line where the result has
            them) and the column.
    """
    batch = flat_for_csv(batch)
    fields = []
    for name, column in zip(batch.schema.names, batch.columns):
        try:
            fields.append(pc.fill_null(pc.cast(column, pa.string()), ""))
        except pa.ArrowInvalid:
            raise CatalogError(f"column {name!r}: holds bytes that are not UTF-8 text. Hint: --format parquet") from None
    if not fields or batch.num_rows == 0:
        return "\n" * batch.num_rows
    lines = pc.binary_join_element_wise(*fields, "\t") if len(fields) > 1 else fields[0]
    whole = pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines)  # one list of every line
    text = pc.binary_join(whole, "\n")[0].as_py() + "\n"  # in Arrow: 3x faster than joining Python strings
    n = batch.num_rows
    if text.count("\t") != n * (len(fields) - 1) or text.count("\n") != n or "\r" in text:  # one pass each
        _refuse_break(batch, fields, first_row)
    return text


def _refuse_break(batch: pa.RecordBatch, fields: list[pa.Array], first_row: int) -> None:
    """The CatalogError of ``tsv_text`` for the first value of ``batch`` (as text: ``fields``) holding a break."""
    for name, text in zip(batch.schema.names, fields):
        broken = pc.match_substring_regex(text, "[\t\n\r]")
        if pc.any(broken).as_py():
            i = pc.index(broken, True).as_py()
            found, row = next(b for c, b in TSV_BREAKS.items() if c in text[i].as_py()), batch.slice(i, 1).to_pylist()[0]
            where = f" (source {row['source']}, line {row['line']})" if {"source", "line"} <= row.keys() else ""
            raise CatalogError(
                f"row {first_row + i}{where}, column {name!r}: holds {found}; TSV is written raw, without quoting, so "
                "the row would split. Hint: --format csv or jsonl (they quote), or replace it in the query"
            )


def tsv_header(names: Sequence[str]) -> str:
    """The TSV header line: the column names, raw; a name holding a tab or line break is refused (CatalogError)."""
    for name in names:
        if found := next((b for c, b in TSV_BREAKS.items() if c in name), None):
            raise CatalogError(f"column name {name!r}: holds {found}; a TSV header cannot hold it. Hint: name it apart (AS)")
    return "\t".join(names) + "\n"


def write_batches(reader: pa.RecordBatchReader, f: IO[bytes], fmt: str, *, header: bool = True) -> int:
    """Stream ``reader`` into the open binary file ``f`` as ``fmt`` (csv, tsv, jsonl, parquet); returns its rows.
    ``header``: a first line of column names in csv and tsv."""
    check_json_names(reader.schema, fmt)
    rows = 0
    if fmt == "parquet":
        with pq.ParquetWriter(f, reader.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(batch)
                rows += batch.num_rows
    elif fmt == "csv":
        schema = flat_for_csv(reader.schema.empty_table()).schema
        with pacsv.CSVWriter(f, schema, write_options=pacsv.WriteOptions(include_header=header)) as writer:
            for batch in reader:
                writer.write_batch(flat_for_csv(batch))
                rows += batch.num_rows
    elif fmt == "tsv":
        if header:
            f.write(tsv_header(reader.schema.names).encode("utf-8"))
        for batch in reader:
            f.write(tsv_text(batch, rows + 1).encode("utf-8"))
            rows += batch.num_rows
    elif fmt == "jsonl":
        for batch in reader:
            f.write("".join(json_line(row) for row in batch.to_pylist()).encode("utf-8"))
            rows += batch.num_rows
    else:
        raise ValueError(f"write_batches: unknown format {fmt!r}")
    return rows


def write_table(
    table: pa.Table, path: Path, fmt: str, *, force: bool = False, cache: Path | None = None, header: bool = True
) -> int:
    """``table`` as the file ``path`` in ``fmt``, safely (see the module docstring); returns its rows. The whole
    result is checked for what its format cannot hold before a byte is written (a FIFO or ``-`` is written in place)."""
    check_json_names(table.schema, fmt)
    text = tsv_table(table, header=header) if fmt == "tsv" else None
    with replacing([path], force=force, cache=cache) as (f,):
        if text is None:
            return write_batches(table.to_reader(), f, fmt, header=header)
        f.write(text.encode("utf-8"))
        return table.num_rows


def tsv_table(table: pa.Table, *, header: bool = True) -> str:
    """The whole of ``table`` as TSV text (``tsv_text``), checked before any of it is written anywhere."""
    parts, row = [tsv_header(table.schema.names)] if header else [], 1
    for batch in table.to_batches():
        parts.append(tsv_text(batch, row))
        row += batch.num_rows
    return "".join(parts)
