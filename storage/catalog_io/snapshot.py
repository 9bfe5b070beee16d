"""The snapshot a user's query reads: a copy of ``catalog.duckdb`` taken under the shared lock, which is then let go.

A user's query may run for hours (`augdag sql`, the shell, `export`); on the live file it held the catalog's
lock that long and every run waited. The catalog file is small (tables of runs, artifacts, lineage; the rows
themselves lie in Parquet parts), so a copy costs milliseconds, and a writer waits no longer than that. The views
of the copy read the same parts: they name them relative to the cache root, which the connection sets
(storage/cache_root.py ``set_root``). A write ends with a checkpoint (storage/engines.py ``detach``), so the
file alone is the whole catalog; a write-ahead log beside it (a writer killed mid-write) is copied with it. The copy
lives in ``$TMPDIR/augdag-query-<pid>-*``; the snapshots of processes that were killed (SIGKILL, SIGTERM: no cleanup
ran) are removed by the next one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PREFIX = "augdag-query-"


def remove_orphans(tmp: Path) -> None:
    """Remove the snapshots under ``tmp`` whose process is gone (another user's stay: they cannot be checked)."""
    for orphan in tmp.glob(f"{PREFIX}*-*"):
        pid = orphan.name.removeprefix(PREFIX).split("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(orphan, ignore_errors=True)
        except OSError:
            continue  # alive, as another user's process


@contextmanager
def snapshot(path: Path) -> Iterator[Path]:
    """A private copy of the DuckDB file ``path`` (and its ``.wal``), removed when the block ends. The caller holds
    the catalog's lock while entering, and may let it go right after."""
    remove_orphans(Path(tempfile.gettempdir()))
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-") as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        wal = path.with_name(path.name + ".wal")
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + ".wal"))
        yield copy
