"""The process's DuckDB instances other than a reader's: the one the catalog's writes ATTACH to, and scratch ones.

**Attach.** ``duckdb.connect(path)`` starts a new database instance each time (~20 ms of CPU, mostly DuckDB
registering its built-in functions) and closing it checkpoints (~5 ms); a nightly writes the catalog hundreds of times.
ATTACH and DETACH of the file in an in-memory instance that lives as long as the process cost ~4 ms together, and
DETACH checkpoints and lets the file go as closing did, so another process may open it right after (storage/catalog.py's
lock protocol). Measured on a tiny demo nightly (demo/tiny.py): 57.2 -> 52.1 CPU-s.

**Scratch.** Global steps over Parquet parts get a private in-memory connection that spills to a temporary directory
past its memory limit (without one DuckDB does not enforce the limit), offline.
"""

from __future__ import annotations

import atexit
import itertools
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from storage import objects

OFFLINE = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}  # never fetch an extension

_INSTANCE_LOCK = threading.Lock()
_instance: tuple[int, duckdb.DuckDBPyConnection] | None = None  # (pid, connection): a fork makes its own
_aliases = itertools.count()


def attach(path: Path, config: dict[str, object]) -> tuple[duckdb.DuckDBPyConnection, str]:
    """A new connection to this process's one in-memory DuckDB instance with the database file ``path`` attached
    read-write under a fresh alias and in use; ``detach`` gives it back. The caller holds the catalog's exclusive
    lock: one file is attached at most once at a time (DuckDB refuses a second attach of the same file)."""
    global _instance
    with _INSTANCE_LOCK:
        if _instance is None or _instance[0] != os.getpid():
            _instance = (os.getpid(), duckdb.connect(":memory:", config=config))
            atexit.register(close_instance)
        con, alias = _instance[1].cursor(), f"catalog_{next(_aliases)}"
        objects.register(con)  # the views over an object store's parts (storage/objects/)
    try:
        con.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS {alias}")
    except BaseException:
        con.close()
        raise
    con.execute(f"USE {alias}")
    return con, alias


def close_instance() -> None:
    """At exit: close the instance (left to the interpreter's teardown, DuckDB's bindings report it leaked)."""
    global _instance
    with _INSTANCE_LOCK:
        if _instance is not None and _instance[0] == os.getpid():
            _instance[1].close()
        _instance = None


def detach(con: duckdb.DuckDBPyConnection, alias: str) -> None:
    """Detach ``alias`` (DuckDB checkpoints it and closes the file) and close the connection."""
    try:
        con.execute("USE memory")
        con.execute(f"DETACH {alias}")
    finally:
        con.close()


# threads=1 where a stage aggregates floats (avg, sum): with more threads DuckDB adds partial sums in
# whatever order they finish, and the artifact's last bits (so its sha256) change from run to run.
@contextmanager
def scratch_duckdb(
    *, memory_limit: str = "512MB", threads: int = 2, name: str = "scratch"
) -> Iterator[duckdb.DuckDBPyConnection]:
    spill = tempfile.TemporaryDirectory(prefix=f"augdag-{name}-")
    con = duckdb.connect(config={**OFFLINE, "memory_limit": memory_limit, "threads": threads, "temp_directory": spill.name})
    objects.register(con)  # parts on an object store (storage/objects/), when this process works on one
    try:
        yield con
    finally:
        con.close()
        spill.cleanup()
