"""The tiny demo's `rejects` (a view over the parts since issue 51) gives the rows the catalog's table held before:
every registered artifact's rejects parts, as ``Catalog.register`` copied them, through `augdag sql`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import duckdb
import pytest

from storage.catalog import Catalog
from tests.conftest import subprocess_env

COLUMNS = ["fingerprint", "source", "file", "line", "reason", "detail", "content"]


def _as_before(cache) -> list[dict]:
    """What the version before issue 51 copied into the table: for every artifact registered (current or not), its
    rejects parts with rows, as ``INSERT INTO rejects SELECT $f, source, file, line, reason, detail, content``."""
    artifacts = Catalog(cache).query("SELECT fingerprint, path, manifest FROM artifacts ORDER BY fingerprint").to_pylist()
    rows = []
    with duckdb.connect() as con:
        for a in artifacts:
            files = [
                str(cache / a["path"] / f["file"])
                for f in json.loads(a["manifest"])["files"]
                if f["role"] == "rejects" and f["rows"]
            ]
            if files:
                rows += [
                    dict(zip(COLUMNS, r))
                    for r in con.execute(
                        "SELECT $f, source, file, line, reason, detail, content FROM read_parquet($p)",
                        {"f": a["fingerprint"], "p": files},
                    ).fetchall()
                ]
    return sorted(rows, key=lambda r: tuple(str(r[c]) for c in COLUMNS))


@pytest.mark.slow
@pytest.mark.tiny_demo_run
def test_the_tiny_demos_rejects_are_the_rows_the_table_held_and_their_counts_issue_51(tiny_demo_run, tmp_path):
    assert tiny_demo_run.returncode == 0, (tiny_demo_run.stdout + tiny_demo_run.stderr)[-3000:]
    cache = tiny_demo_run.cache
    query = "SELECT * FROM rejects ORDER BY fingerprint, source, file, line, reason, detail, content"
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "sql", "--cache", str(cache), "-f", "json", query],
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = [json.loads(line) for line in done.stdout.splitlines()]
    before = _as_before(cache)
    assert [list(r) for r in shown] == [COLUMNS] * len(shown)  # the table's columns, in its order
    assert sorted(shown, key=lambda r: tuple(str(r[c]) for c in COLUMNS)) == before
    # the demo's inputs carry broken lines in each kind (demo/corruptions.py): some of every read are refused
    assert {r["source"] for r in before} >= {"demo_bitext", "demo_mono", "demo_labeled", "demo_slots"}
    # the catalog's counts, per artifact and reason, are the rows'
    counts = Catalog(cache).query("SELECT fingerprint, reason, rows FROM reject_counts").to_pylist()
    assert Counter({(c["fingerprint"], c["reason"]): c["rows"] for c in counts}) == Counter(
        (r["fingerprint"], r["reason"]) for r in before
    )
