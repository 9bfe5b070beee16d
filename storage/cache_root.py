"""Paths relative to the cache root, so that a copied or moved cache answers every view the same.

The catalog stores an artifact's directory as ``artifacts/<stage>/<fingerprint>`` (``relative``), and a
view names its files relative to the root too, read through the connection's variable ``augdag_cache``
(``set_root``; ``files_sql``): ``read_parquet([coalesce(getvariable('augdag_cache'), '.') || '/' || p
FOR p IN ['artifacts/clean/…/part-00000.parquet', …]])``. Not DuckDB's ``file_search_path``: DuckDB
tries a relative path against the working directory first, so a view would read a file of whatever
directory the user stands in, and the sandbox would have to allow relative paths. Without the variable
(the DuckDB CLI opened in the cache directory) the paths are relative to the working directory.
Paths stored by older versions are absolute; ``resolve`` still reads them. An artifact on an object store
(``storage.artifacts: s3://…``) is stored as its URI and read as it is (storage/objects/).

A cache keeps its directory's privacy (``keep_private``): what a run creates under a cache made 0700 (artifacts,
manifests, the catalog, logs, reports, Prefect's results) has no group or other bit either.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import duckdb

from storage import objects
from storage.objects import Loc

VARIABLE = "augdag_cache"
# a catalog made before paths were relative to the root (wherever it was then): how many absolute paths it has, and
# the update that makes them relative
_ABSOLUTE = "starts_with(path, '/') AND ends_with(path, '/artifacts/' || stage || '/' || fingerprint)"
ABSOLUTE_PATHS = f"SELECT count(*) FROM artifacts WHERE {_ABSOLUTE}"
RELATIVE_PATHS = f"UPDATE artifacts SET path = 'artifacts/' || stage || '/' || fingerprint WHERE {_ABSOLUTE}"


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def set_root(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """Point the views of ``con``'s catalog at the cache ``root`` (before ``lock_configuration``)."""
    con.execute(f"SET VARIABLE {VARIABLE} = $r", {"r": str(root)})


def relative(root: Path, path: Loc) -> str:
    """``path`` relative to ``root`` (POSIX form) when it lies under it, else as given (an object-store URI)."""
    if objects.is_remote(path):
        return str(path)
    path = Path(path)
    for base, p in ((root, path.absolute()), (root.resolve(), path.resolve())):
        try:
            return p.relative_to(base).as_posix()
        except ValueError:
            continue
    return str(path)


def resolve(root: Path, path: str) -> Loc:
    """A stored path: relative ones under ``root``, an older catalog's absolute ones and URIs as they are."""
    return path if objects.is_remote(path) else root / path


def present(path: Loc) -> bool:
    """Whether a view may name the part at ``path``: a file on this machine that exists (a deleted artifact drops
    out of its views); a part on an object store always (its artifact's manifest named it: complete artifacts are
    never collected, and a HEAD per part per view rebuild would cost more than the rebuild)."""
    return objects.is_remote(path) or Path(path).exists()


def parquet_sql(paths: Sequence[str], *, uniform: bool) -> str:
    """``read_parquet`` over ``paths`` (``files_sql``). DuckDB binds a list of files by reading the first one's
    footer, or with ``union_by_name`` every one's, at each query: so ``uniform`` parts (one schema, as an artifact's
    manifest records) are read without it; a part on an object store costs a HEAD and a ranged GET to bind."""
    return f"read_parquet({files_sql(paths)}{'' if uniform else ', union_by_name = true'})"


def view_select(artifacts: Sequence[tuple[list[str], bool]], empty: list[str]) -> str | None:
    """A view's SELECT over its artifacts' parts (each: its parts, whether they share one schema) and the kind's
    ``empty`` part (every column of the kind): each uniform artifact read on its own (bound from one footer), then
    the others with the empty part in one read by name; columns in the order of their first appearance, as one
    read by name of them all would have them. None when there is nothing to read."""
    reads = [parquet_sql(parts, uniform=True) for parts, uniform in artifacts if uniform and parts]
    rest = [p for parts, uniform in artifacts if not uniform for p in parts] + empty
    reads += [parquet_sql(rest, uniform=len(rest) == 1)] if rest else []
    return "\nUNION ALL BY NAME\n".join(f"SELECT * FROM {r}" for r in reads) or None


def files_sql(paths: Sequence[str]) -> str:
    """A DuckDB list of files for ``read_parquet``: relative paths under the root variable, absolute ones as
    they are."""
    absolute = [p for p in paths if Path(p).is_absolute() or objects.is_remote(p)]
    relative_ = [p for p in paths if p not in set(absolute)]
    parts = []
    if relative_:
        parts.append(f"[coalesce(getvariable('{VARIABLE}'), '.') || '/' || p FOR p IN [{', '.join(map(_lit, relative_))}]]")
    if absolute:
        parts.append(f"[{', '.join(map(_lit, absolute))}]")
    return " || ".join(parts) or "[]"


def object_stores(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The object-store prefixes the catalog's artifacts lie under (``s3://bucket/prefix/``), their filesystems
    registered on ``con`` (read-only, storage/objects/)."""
    paths = [r[0] for r in con.execute("SELECT DISTINCT path FROM artifacts WHERE contains(path, '://')").fetchall()]
    prefixes = store_prefixes(paths)
    objects.register(con, objects.schemes_of(prefixes))
    return prefixes


def store_prefixes(paths: Sequence[str]) -> list[str]:
    """The object-store prefixes (``s3://bucket/prefix/``) that artifacts stored at ``paths`` lie under."""
    return sorted({p.rsplit("/artifacts/", 1)[0] + "/" for p in paths if objects.is_remote(p)})


def private_bits(root: Path) -> int:
    """The group and other permission bits the directory ``root`` lacks (``0o077`` for a 0700 cache, ``0o022`` for
    0755); 0 when it does not exist yet (it is then made with the process's umask, as everything in it)."""
    try:
        return ~root.stat().st_mode & 0o077
    except FileNotFoundError:
        return 0


def current_umask() -> int:
    """This process's umask, read from /proc where it can be (``os.umask`` can only read it by setting it, and a
    thread that creates a file between the two calls would get it with every bit)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def keep_private(root: Path) -> int:
    """From now on this process creates files and directories without the group and other bits the cache ``root``
    lacks (its umask gains them; it never loses any): a cache made 0700 stays private. Call it where a process starts
    working on one cache (the CLI, before a run); returns the umask in force."""
    mask = current_umask()
    if missing := private_bits(Path(root)) & ~mask:
        os.umask(mask | missing)
    return mask | missing
