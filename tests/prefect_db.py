"""A migrated Prefect database to start each test's Prefect home from.

Every `augdag` subprocess of the tests gets a Prefect home of its own (``subprocess_env``), and Prefect's temporary
server then created its SQLite database from nothing: Alembic's ~150 migrations and the block registration, ~14 of
the ~27 CPU-s of the smallest `augdag run` (2026-12-02; with the database already there, ~13 s), once per test. A
user pays that once, at the first run in their ``~/.prefect``; the tests paid it in every run. Here the migrations
run once per Prefect version on the machine (a file lock across xdist workers and sessions; written under a
temporary name and renamed, so a reader never sees half of it) and each home starts from a copy: the state a
user's second run finds. The first-run path itself stays covered: the session's harness and the e2e tier's
servers migrate their own databases.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from filelock import FileLock

MIGRATE = """
import asyncio
from prefect.server.database import provide_database_interface
asyncio.run(provide_database_interface().create_db())
"""


@cache
def migrated() -> Path:
    """The migrated database of this Prefect version (made on first use): one file, no WAL beside it."""
    import prefect

    root = Path(tempfile.gettempdir()) / f"augdag-tests-prefect-db-{prefect.__version__}-{os.getuid()}"
    root.mkdir(exist_ok=True)
    db = root / "prefect.db"
    with FileLock(root / "lock"):
        if not db.exists():
            home = Path(tempfile.mkdtemp(dir=root))
            env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
            env.update(PREFECT_HOME=str(home))
            subprocess.run([sys.executable, "-c", MIGRATE], env=env, check=True, capture_output=True, timeout=600)
            with sqlite3.connect(home / "prefect.db") as con:  # one self-contained file (the WAL folded in)
                con.execute("VACUUM INTO ?", (str(root / "prefect.db.tmp"),))
            os.replace(root / "prefect.db.tmp", db)
            shutil.rmtree(home, ignore_errors=True)
    return db


def seed(home: Path) -> Path:
    """``home`` with a copy of the migrated database, unless it has a database already."""
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "prefect.db").exists():
        shutil.copyfile(migrated(), home / "prefect.db")
    return home
