"""`rejects` as a view over the artifacts' rejects parts, the catalog keeping counts; an older catalog's table migrated
without losing a row (issue 51)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import duckdb
import pyarrow as pa
import pytest

from conf.errors import CatalogError
from storage.artifacts import ArtifactRef, read_manifest, write_manifest, write_part
from storage.catalog import Catalog
from storage.catalog_io.rejects import COLUMNS, legacy_fingerprints, parts_select
from storage.schemas import REJECTS
from storage.views.docs import TABLES, UNDOCUMENTED, catalog_columns
from tests.conftest import bitext, subprocess_env

ALL = "SELECT * FROM rejects ORDER BY fingerprint, file, line"
COUNTS = "SELECT fingerprint, stage, dataset, reason, rows, run_id FROM reject_counts ORDER BY fingerprint, reason"
OLD_TABLE = """CREATE TABLE rejects (
  fingerprint VARCHAR, source VARCHAR, file VARCHAR, line BIGINT, reason VARCHAR, detail VARCHAR, content VARCHAR)"""


def _rejects(dataset: str, rows: list[tuple[int, str]]) -> pa.Table:
    return pa.table(
        {
            "source": [dataset] * len(rows),
            "file": [f"{dataset}.en"] * len(rows),
            "line": pa.array([line for line, _ in rows], pa.int64()),
            "reason": [reason for _, reason in rows],
            "detail": [f"{dataset}.en:{line}: {reason}" for line, reason in rows],
            "content": [f"line {line}'s text" for line, _ in rows],
        },
        schema=REJECTS,
    )


def _read(root, fp: str, dataset: str, shards: list[list[tuple[int, str]]]) -> tuple[ArtifactRef, dict]:
    """A `read` artifact of ``dataset`` with one kept pair and the rejects ``shards[i]`` (line, reason) per shard."""
    ref = ArtifactRef(str(root), "read", fp, None, dataset, len(shards))
    for i, rows in enumerate(shards):
        write_part(bitext([(f"s{i}", f"t{i}")], source=dataset), ref.path(i))
        write_part(_rejects(dataset, rows), ref.path(i, "rejects"))
    return ref, write_manifest(ref, version="2", params={})


def _row(fp, dataset, line, reason):
    return (fp, dataset, f"{dataset}.en", line, reason, f"{dataset}.en:{line}: {reason}", f"line {line}'s text")


def _rows(cat: Catalog, sql: str = ALL, **kw) -> list[tuple]:
    return [tuple(r.values()) for r in cat.query(sql, **kw).to_pylist()]


A, B, C, D = "a" * 32, "b" * 32, "c" * 32, "d" * 32


def test_rejects_is_a_view_over_the_current_reads_parts_and_the_catalog_keeps_counts_issue_51(tmp_path):
    cat = Catalog(tmp_path)
    ref, m = _read(tmp_path, A, "web", [[(2, "empty"), (5, "nul_byte")], [], [(9, "empty")]])
    assert cat.register(ref, m, run_id="r1") is True
    assert _rows(cat) == [_row(A, "web", 2, "empty"), _row(A, "web", 5, "nul_byte"), _row(A, "web", 9, "empty")]
    assert _rows(cat, COUNTS) == [(A, "read", "web", "empty", 2, "r1"), (A, "read", "web", "nul_byte", 1, "r1")]
    kinds = cat.query(
        "SELECT table_name, table_type FROM information_schema.tables WHERE table_name LIKE 'reject%' ORDER BY ALL"
    ).to_pylist()
    assert kinds == [
        {"table_name": "reject_counts", "table_type": "BASE TABLE"},
        {"table_name": "rejects", "table_type": "VIEW"},
    ]
    cat.register(ref, m, run_id="r2")  # a cached re-run counts nothing twice
    assert cat.query("SELECT sum(rows) AS n FROM reject_counts").to_pylist() == [{"n": 3}]
    # the data changed: the new read is the current one (the views' rule); the counts keep both
    ref2, m2 = _read(tmp_path, B, "web", [[(4, "too_long")]])
    cat.register(ref2, m2, run_id="r3")
    assert _rows(cat) == [_row(B, "web", 4, "too_long")]
    assert [r[0] for r in _rows(cat, COUNTS)] == [A, A, B]
    assert cat.query("SELECT reason FROM rejects", sandbox=True)["reason"].to_pylist() == ["too_long"]  # a user's query


def test_a_read_without_rejects_replacing_one_with_takes_its_rejects_out_of_the_view_issue_51(tmp_path):
    """Its empty rejects parts move the view (they were left as they were: the replaced read's rejects stayed), as a
    clean without drops moves `dropped`."""
    cat = Catalog(tmp_path)
    ref, m = _read(tmp_path, A, "web", [[(2, "empty")]])
    cat.register(ref, m, run_id="r1")
    clean = ArtifactRef(str(tmp_path), "clean", C, "bitext", "web", 1)
    write_part(bitext([("a", "b")], source="web"), clean.path(0))
    drops = pa.table({"uid": ["u"], "source": ["web"], "line": [3], "reason": ["duplicate"]})
    write_part(drops, clean.path(0, "dropped"))
    cat.register(clean, write_manifest(clean, version="1", params={}), run_id="r1")
    both = "SELECT (SELECT count(*) FROM rejects) AS rejects, (SELECT count(*) FROM dropped) AS dropped"
    assert cat.query(both).to_pylist() == [{"rejects": 1, "dropped": 1}]
    ref2, m2 = _read(tmp_path, B, "web", [[]])  # the data changed: nothing to refuse
    cat.register(ref2, m2, run_id="r2")
    clean2 = ArtifactRef(str(tmp_path), "clean", D, "bitext", "web", 1)
    write_part(bitext([("a", "b")], source="web"), clean2.path(0))
    write_part(drops.slice(0, 0), clean2.path(0, "dropped"))
    cat.register(clean2, write_manifest(clean2, version="1", params={}), run_id="r2")
    assert cat.query(both).to_pylist() == [{"rejects": 0, "dropped": 0}]


def test_a_nights_own_rejects_are_read_from_its_parts_after_a_later_read_replaced_it_issue_51(tmp_path):
    """The night page (flows/reports/night_report.py) shows its own reads' rejects, current or not: `augdag report`
    of last week's night after this week's reads of the same datasets."""
    cat = Catalog(tmp_path)
    ref, m = _read(tmp_path, A, "web", [[(2, "empty")], [(7, "nul_byte")]])
    cat.register(ref, m, run_id="r1")
    later, ml = _read(tmp_path, B, "web", [[(4, "too_long")]])
    cat.register(later, ml, run_id="r2")
    assert _rows(cat, "SELECT fingerprint, line FROM rejects") == [(B, 4)]  # the view: the current read
    found = cat.query("SELECT fingerprint, path, manifest FROM artifacts WHERE fingerprint = $f", {"f": A}).to_pylist()
    select, files = parts_select(tmp_path, found, legacy_fingerprints(cat.query))
    assert [str(f) for f in files] == [str(tmp_path / "artifacts" / "read" / A / f"rejects-0000{i}.parquet") for i in (0, 1)]
    assert _rows(cat, f"SELECT * FROM ({select}) ORDER BY line") == [_row(A, "web", 2, "empty"), _row(A, "web", 7, "nul_byte")]
    (tmp_path / "artifacts" / "read" / A / "rejects-00001.parquet").unlink()  # not fewer rows: one line
    select, files = parts_select(tmp_path, found, legacy_fingerprints(cat.query))
    with pytest.raises(duckdb.InvalidInputException, match=f"artifact read/{A}: rejects-00001.parquet is missing"):
        cat.query(f"SELECT count(*) FROM ({select})")


def _old_catalog(tmp_path) -> list[tuple]:
    """A catalog as the version before issue 51 left it: every rejected line copied into a `rejects` table (and no
    `reject_counts`). A: current, its parts there; B: replaced by C (same dataset); D: its directory deleted since.
    Returns the table's rows."""
    cat = Catalog(tmp_path)
    arts = [
        (A, "web", [[(2, "empty")], [(7, "nul_byte"), (8, "empty")]]),
        (B, "news", [[(1, "column_count")]]),
        (C, "news", [[(3, "empty")]]),
        (D, "forum", [[(6, "bad_json")]]),
    ]
    rows = []
    for i, (fp, dataset, shards) in enumerate(arts):
        ref, m = _read(tmp_path, fp, dataset, shards)
        cat.register(ref, m, run_id=f"r{i}")
        rows += [_row(fp, dataset, line, reason) for shard in shards for line, reason in shard]
    shutil.rmtree(tmp_path / "artifacts" / "read" / D)
    with duckdb.connect(str(tmp_path / "catalog.duckdb")) as con:
        con.execute("DROP VIEW rejects")
        con.execute("DROP TABLE reject_counts")
        con.execute(OLD_TABLE)
        con.executemany("INSERT INTO rejects VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    return sorted(rows)


def test_an_older_catalogs_rejects_table_migrates_on_open_and_the_view_gives_the_same_rows_issue_51(tmp_path):
    old = _old_catalog(tmp_path)
    cat = Catalog(tmp_path)  # a new process opens it: its first read migrates it
    assert sorted(_rows(cat, "SELECT * FROM rejects", sandbox=True)) == old
    # the parts serve A and C; the rows no current artifact's parts hold stay in rejects_legacy: B (replaced by C),
    # D (its directory is gone)
    legacy = "SELECT fingerprint, line FROM rejects_legacy ORDER BY ALL"
    assert _rows(cat, legacy) == [(B, 1), (D, 6)]
    # a night page's own reads (flows/reports/night_report.py): D's row from the kept rows, its directory gone
    arts = cat.query("SELECT fingerprint, path, manifest FROM artifacts WHERE fingerprint = $f", {"f": D}).to_pylist()
    select, _ = parts_select(tmp_path, arts, legacy_fingerprints(cat.query))
    assert _rows(cat, select) == [_row(D, "forum", 6, "bad_json")]
    documented = catalog_columns(cat, TABLES, "rejects_legacy").to_pylist()  # what `augdag views` says of it
    assert [(c["column"], c["description"] != UNDOCUMENTED) for c in documented] == [(c, True) for c in COLUMNS]
    assert _rows(cat, COUNTS) == [
        (A, "read", "web", "empty", 2, "r0"),
        (A, "read", "web", "nul_byte", 1, "r0"),
        (B, "read", "news", "column_count", 1, "r1"),
        (C, "read", "news", "empty", 1, "r2"),
        (D, "read", "forum", "bad_json", 1, "r3"),
    ]
    # a later registration rebuilds the view: still the same rows, none twice
    ref, m = _read(tmp_path, "e" * 32, "other", [[(5, "empty")]])
    cat.register(ref, m, run_id="r4")
    assert sorted(_rows(cat)) == sorted([*old, _row("e" * 32, "other", 5, "empty")])
    # B, used again, is the current read of `news` (the views' rule): its row once (the kept copy, not its part too),
    # C's row leaves the view as C's kept rows leave `bitext`; its count stays
    b = ArtifactRef(str(tmp_path), "read", B, None, "news", 1)
    cat.register(b, read_manifest(b), run_id="r5")
    assert sorted(r[:4] for r in _rows(cat)) == [
        (A, "web", "web.en", 2),
        (A, "web", "web.en", 7),
        (A, "web", "web.en", 8),
        (B, "news", "news.en", 1),
        (D, "forum", "forum.en", 6),
        ("e" * 32, "other", "other.en", 5),
    ]
    assert cat.query("SELECT rows FROM reject_counts WHERE fingerprint = $f", {"f": C}).to_pylist() == [{"rows": 1}]


def test_a_deleted_rejects_part_fails_the_query_that_would_read_it_in_one_line_issue_51(tmp_path):
    cat = Catalog(tmp_path)
    ref, m = _read(tmp_path, A, "web", [[(2, "empty")], [(7, "nul_byte")]])
    cat.register(ref, m, run_id="r1")
    other, mo = _read(tmp_path, B, "news", [[(1, "empty")]])
    gone = tmp_path / "artifacts" / "read" / A / "rejects-00001.parquet"
    gone.unlink()
    with pytest.raises(CatalogError) as before:  # the view was built with it: DuckDB finds it gone
        cat.query("SELECT count(*) FROM rejects", sandbox=True)
    assert (
        str(before.value)
        == f"artifact read/{A}: rejects-00001.parquet is missing ({gone}). Hint: augdag verify --repair --cache {tmp_path}"
    )
    cat.register(other, mo, run_id="r2")  # a rebuild: the missing part is not left out silently
    with pytest.raises(CatalogError) as after:
        cat.query("SELECT count(*) FROM rejects", sandbox=True)
    assert str(after.value) == (
        f"query failed: Invalid Input Error: artifact read/{A}: rejects-00001.parquet is missing: its rejected rows are "
        f"counted in reject_counts but cannot be shown. Hint: augdag verify --repair --cache {tmp_path}"
    )
    # a query of another artifact's rejects still answers (`why` of another dataset, the night page's)
    assert _rows(cat, "SELECT fingerprint, line FROM rejects WHERE fingerprint = $f", params={"f": B}) == [(B, 1)]


def test_augdag_sql_reads_rejects_through_the_cli_on_a_migrated_catalog_issue_51(tmp_path):
    old = _old_catalog(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "sql", "--cache", str(tmp_path), "-f", "tsv", ALL],
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "fingerprint\tsource\tfile\tline\treason\tdetail\tcontent"
    assert [tuple(line.split("\t")) for line in lines[1:]] == [tuple(map(str, r)) for r in old]


def test_why_of_a_dataset_whose_rejects_part_is_gone_is_one_line_exit_2_issue_51(tmp_path):
    cat = Catalog(tmp_path)
    ref, m = _read(tmp_path, A, "web", [[(2, "empty")], [(7, "nul_byte")]])
    cat.register(ref, m, run_id="r1")
    (tmp_path / "artifacts" / "read" / A / "rejects-00001.parquet").unlink()
    other, mo = _read(tmp_path, B, "news", [[(1, "empty")]])
    cat.register(other, mo, run_id="r2")  # the view rebuilt without the part: its branch fails the query

    done = subprocess.run(  # (another dataset's rows still answer: the test above)
        [sys.executable, "-m", "flows.cli", "why", "web", "7", "--cache", str(tmp_path)],
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path, COLUMNS="300"),
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: query failed: Invalid Input Error: artifact read/{A}: rejects-00001.parquet is missing: its rejected "
        f"rows are counted in reject_counts but cannot be shown. Hint: augdag verify --repair --cache {tmp_path}\n"
    )
