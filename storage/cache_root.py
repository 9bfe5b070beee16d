"""Paths relative to the cache root, so that a copied or moved cache answers every view the same.

The catalog stores an artifact's directory as ``artifacts/<stage>/<fingerprint>`` (``relative``), and a
view names its files relative to the root too, read through the connection's variable ``augdag_cache``
(``set_root``; ``files_sql``): ``read_parquet([coalesce(getvariable('augdag_cache'), '.') || '/' || p
FOR p IN ['artifacts/clean/…/part-00000.parquet', …]])``. Not DuckDB's ``file_search_path``: DuckDB
tries a relative path against the working directory first, so a view would read a file of whatever
directory the user stands in, and the sandbox would have to allow relative paths. Without the variable
(the DuckDB CLI opened in the cache directory) the paths are relative to the working directory.
Paths stored by older versions are absolute; ``resolve`` still reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb

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


def relative(root: Path, path: Path | str) -> str:
    """``path`` relative to ``root`` (POSIX form) when it lies under it, else as given."""
    path = Path(path)
    for base, p in ((root, path.absolute()), (root.resolve(), path.resolve())):
        try:
            return p.relative_to(base).as_posix()
        except ValueError:
            continue
    return str(path)


def resolve(root: Path, path: str) -> Path:
    """A stored path on this machine: relative ones under ``root``, an older catalog's absolute ones as they are."""
    return root / path


def files_sql(paths: Sequence[str]) -> str:
    """A DuckDB list of files for ``read_parquet``: relative paths under the root variable, absolute ones as
    they are."""
    relative_ = [p for p in paths if not Path(p).is_absolute()]
    absolute = [p for p in paths if Path(p).is_absolute()]
    parts = []
    if relative_:
        parts.append(f"[coalesce(getvariable('{VARIABLE}'), '.') || '/' || p FOR p IN [{', '.join(map(_lit, relative_))}]]")
    if absolute:
        parts.append(f"[{', '.join(map(_lit, absolute))}]")
    return " || ".join(parts) or "[]"
