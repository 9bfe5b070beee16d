"""Scratch DuckDB for global steps over Parquet parts: a private in-memory connection that spills to a
temporary directory past its memory limit (without one DuckDB does not enforce the limit), offline."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from storage.catalog import DUCKDB_CONFIG


# threads=1 where a stage aggregates floats (avg, sum): with more threads DuckDB adds partial sums in
# whatever order they finish, and the artifact's last bits (so its sha256) change from run to run.
@contextmanager
def scratch_duckdb(
    *, memory_limit: str = "512MB", threads: int = 2, name: str = "scratch"
) -> Iterator[duckdb.DuckDBPyConnection]:
    spill = tempfile.TemporaryDirectory(prefix=f"augdag-{name}-")
    con = duckdb.connect(config={**DUCKDB_CONFIG, "memory_limit": memory_limit, "threads": threads, "temp_directory": spill.name})
    try:
        yield con
    finally:
        con.close()
        spill.cleanup()
