"""A copied or moved cache answers every view the same (issue 26, defect 11): the catalog stores artifact paths
relative to the cache root and each view names its files so (storage/cache_root.py). A tiny ingest builds a cache,
`cp -a` copies it, the original is renamed away, and the copy is queried through the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import duckdb
import pytest

from conf.loader import load_profile
from storage.artifacts import ArtifactRef, write_manifest, write_part
from storage.catalog import Catalog
from storage.dropped import row_path
from tests.conftest import bitext, subprocess_env

pytestmark = pytest.mark.slow
# 1, 2 kept; 3 a duplicate of 1 (dropped); 4 bad UTF-8 (rejected); 5 kept
BITEXT = [
    (b"the cat sat", b"die katze sass"),
    (b"a dog ran home", b"ein hund lief heim"),
    (b"the cat sat", b"die katze sass"),
    (b"bad \xff byte", b"schlecht"),
    (b"good morning", b"guten morgen"),
]
MONO = b"one sentence here\nanother one there\none sentence here\n"


def _fingerprint_sql(views: list[str]) -> str:
    """Per view: its row count and the md5 of its rows, each row as text, in sorted order (so the files' order and
    the scan's do not matter)."""
    return (
        " UNION ALL ".join(
            f"SELECT '{v}' AS view, count(*) AS n, md5(coalesce(string_agg(r, '|' ORDER BY r), '')) AS h "
            f'FROM (SELECT CAST(t AS VARCHAR) AS r FROM "{v}" t)'
            for v in views
        )
        + " ORDER BY view"
    )


@pytest.fixture(scope="module")
def moved(prefect_harness, tmp_path_factory):
    """(copy, views, fingerprints before the move, `why` of line 3 before the move, original's old path)."""
    from flows.pipelines.ingest import ingest_flow

    data = tmp_path_factory.mktemp("reloc-data")
    (data / "train.en").write_bytes(b"".join(s + b"\n" for s, _ in BITEXT))
    (data / "train.de").write_bytes(b"".join(t + b"\n" for _, t in BITEXT))
    (data / "mono.en").write_bytes(MONO)
    (data / "p.yaml").write_text(
        "pipelines: [ingest]\nshard_size: 2\ndatasets:\n"
        "  tiny: {kind: bitext, format: text, src: train.en, tgt: train.de}\n"
        "  news: {kind: mono, format: text, path: mono.en}\n"
    )
    root = tmp_path_factory.mktemp("reloc")
    original = root / "first" / ".augdag"
    ingest_flow(load_profile(data / "p.yaml", [], cache=original), profile="test")
    catalog = Catalog(original)
    views = catalog.query("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY ALL")["view_name"].to_pylist()
    before = catalog.query(_fingerprint_sql(views)).to_pylist()
    why = row_path(catalog, "tiny", 3)
    copy = root / "other" / ".augdag"
    copy.parent.mkdir()
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True)
    (root / "first").rename(root / "gone")  # nothing of the original is left where its catalog was made
    return copy, views, before, why, original


def test_moved_cache_answers_every_view_identically_through_the_cli(moved, tmp_path):
    copy, views, before, _, _ = moved
    assert {"bitext", "mono", "dropped", "labeled", "slots"} <= set(views)
    counts = {r["view"]: r["n"] for r in before}
    assert (counts["bitext"], counts["mono"], counts["dropped"]) == (3, 2, 2)  # the rows the fixture planted
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "--cache", str(copy), "sql", _fingerprint_sql(views), "--format", "json"],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=subprocess_env(tmp_path),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == before


def test_moved_cache_stores_no_path_of_where_it_was_made(moved):
    copy, _, _, _, original = moved
    catalog = Catalog(copy)
    assert catalog.query("SELECT count(*) AS n FROM artifacts WHERE path NOT LIKE 'artifacts/%'").to_pylist() == [{"n": 0}]
    found = catalog.query(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND contains(sql, $old)", {"old": str(original.parent)}
    )
    assert found.num_rows == 0
    assert catalog.query("SELECT count(*) AS n FROM rejects").to_pylist() == [{"n": 1}]


def test_why_follows_a_row_in_a_moved_cache(moved):
    copy, _, _, why, _ = moved
    assert why.drops and why.drops[0]["reason"] == "duplicate"
    assert row_path(Catalog(copy), "tiny", 3) == why


def test_an_older_catalog_of_absolute_paths_still_reads_and_becomes_relative_when_moved(tmp_path):
    """A catalog an older augdag made (absolute paths in `artifacts` and in the views) reads where it was made; after
    a move, the first query makes its paths relative to the new root and rebuilds the views."""
    old = tmp_path / "old"
    ref = ArtifactRef(str(old), "clean", "a" * 32, "bitext", "d", 1)
    write_part(bitext([("a b", "x y"), ("c", "z")]), ref.path(0))
    Catalog(old).register(ref, write_manifest(ref, version="1", params={}), run_id="r1")
    with duckdb.connect(str(old / "catalog.duckdb")) as con:  # as the older version left it
        con.execute("UPDATE artifacts SET path = $p", {"p": str(ref.dir)})
        con.execute(f"CREATE OR REPLACE VIEW bitext AS SELECT * FROM read_parquet(['{ref.path(0)}'])")
    shutil.copytree(old, tmp_path / "new", symlinks=True)
    assert Catalog(old).query("SELECT count(*) AS n FROM bitext", sandbox=True).to_pylist() == [{"n": 2}]
    shutil.rmtree(old)
    moved = Catalog(tmp_path / "new")
    assert moved.query("SELECT count(*) AS n FROM bitext", sandbox=True).to_pylist() == [{"n": 2}]
    assert moved.query("SELECT path FROM artifacts").to_pylist() == [{"path": f"artifacts/clean/{'a' * 32}"}]
