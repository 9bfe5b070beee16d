"""`augdag sql` opens no file outside the cache (issue 13, defect 10): the CLI as a subprocess, on a catalog
whose `bitext` view reads a real artifact, and a secret file beside the cache that must stay unreadable. And it
writes nothing (issue 26, defect 1): no statement of ``HOSTILE`` (EXPLAIN ANALYZE COPY, COPY in a CTE or a subquery,
PRAGMA, SET, ATTACH, EXPORT DATABASE, ...) gets past storage/sql_guard.py, through `sql`, the shell or
`export --where`, and afterwards every file under the cache has the sha256 it had."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.errors import CatalogError
from storage.artifacts import ArtifactRef, write_manifest, write_part
from storage.catalog import Catalog
from storage.sql_guard import check_condition, check_read_only
from tests.conftest import bitext, subprocess_env


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A cache with one registered `bitext` artifact, and outside it a text file, a CSV and a Parquet file."""
    root = tmp_path_factory.mktemp("sandbox")
    cache = root / "cache"
    ref = ArtifactRef(str(cache), "clean", "a" * 32, "bitext", "d", 1)
    write_part(bitext([("a b", "x y"), ("c", "z")]), ref.path(0))
    Catalog(cache).register(ref, write_manifest(ref, version="1", params={}), run_id="r1")
    (root / "secret.txt").write_text("top secret\n")
    (root / "secret.csv").write_text("a,b\n1,2\n")
    pq.write_table(pa.table({"a": [1]}), root / "secret.parquet")
    (root / "cache.sha256.json").write_text(json.dumps(cache_files(cache)))  # as built, before any user SQL
    return cache


def cache_files(cache) -> dict[str, str]:
    """The sha256 of every file under the cache (catalog, its lock, artifacts, manifests, empty parts), by path."""
    return {
        str(p.relative_to(cache)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(cache.rglob("*")) if p.is_file()
    }


def assert_cache_unchanged(cache) -> None:
    assert cache_files(cache) == json.loads((cache.parent / "cache.sha256.json").read_text())


def augdag(cache, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args, "--cache", str(cache)],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        cwd=cache.parent,
        env=subprocess_env(cache.parent),
        timeout=120,
    )


def test_sql_views_still_read_their_artifacts_in_the_sandbox(cache):
    done = augdag(cache, "sql", "SELECT src, tgt FROM bitext ORDER BY line", "--format", "csv")
    assert (done.returncode, done.stdout) == (0, '"src","tgt"\n"a b","x y"\n"c","z"\n')
    inside = augdag(cache, "sql", f"SELECT count(*) AS n FROM read_parquet('{cache}/artifacts/**/*.parquet')", "-f", "csv")
    assert (inside.returncode, inside.stdout) == (0, '"n"\n2\n')  # files under the cache stay readable


@pytest.mark.parametrize(
    "query, path",
    [
        ("SELECT * FROM read_text('{root}/secret.txt')", "{root}/secret.txt"),
        ("SELECT * FROM read_csv('{root}/secret.csv')", "{root}/secret.csv"),
        ("SELECT * FROM read_parquet('{root}/secret.parquet')", "{root}/secret.parquet"),
        ("SELECT * FROM glob('{root}/*')", "{root}/*"),
        ("SELECT * FROM '{root}/secret.csv'", "{root}/secret.csv"),
        ("SELECT * FROM read_text('/etc/hostname')", "/etc/hostname"),
        ("SELECT * FROM read_text('{root}/cache/../secret.txt')", "{root}/cache/../secret.txt"),  # no escape by ..
        ("SELECT * FROM read_text('secret.txt')", "secret.txt"),  # relative to the working directory, outside
        ("SELECT * FROM read_text('http://127.0.0.1:9/x')", "http://127.0.0.1:9/x"),  # no URL, no httpfs hint
    ],
)
def test_sql_refuses_files_outside_the_cache_with_exit_2(cache, query, path):
    root = cache.parent
    done = augdag(cache, "sql", query.format(root=root))
    assert done.returncode == 2
    assert done.stdout == ""
    message = " ".join(done.stderr.split())  # rich folds long lines
    assert message.startswith(f"error: refused: `augdag sql` reads only the catalog and files under the cache {cache}:")
    assert path.format(root=root) in message and "INSTALL" not in message and "top secret" not in message


def test_sql_sandbox_cannot_be_switched_off_by_a_statement(cache):
    done = augdag(cache, "sql", "SET enable_external_access = true")
    assert done.returncode == 2 and "this is a SET statement" in done.stderr
    shell = augdag(
        cache,
        "sql",
        "--shell",
        stdin=f"SELECT * FROM read_text('{cache.parent}/secret.txt');\nSELECT count(*) AS n FROM bitext;\n",
    )
    assert shell.returncode == 1  # piped, and a statement was refused (issue 48, defect 9)
    assert "reads only the catalog and files under the cache" in " ".join(shell.stderr.split())
    assert "top secret" not in shell.stdout and "│ 2 " in shell.stdout  # refused, and the loop went on


def test_export_where_cannot_read_outside_the_cache(cache):
    out = cache.parent / "out.parquet"
    done = augdag(
        cache,
        "export",
        "bitext",
        "-o",
        str(out),
        "--where",
        f"src IN (SELECT content FROM read_text('{cache.parent}/secret.txt'))",
    )
    assert done.returncode == 2 and not out.exists()
    assert "reads only the catalog and files under the cache" in " ".join(done.stderr.split())


@pytest.mark.parametrize(
    "statement, word",
    [
        ("INSTALL httpfs", "an INSTALL"),
        ("LOAD httpfs", "a LOAD"),
        ("CHECKPOINT", "a CHECKPOINT"),
        ("CALL checkpoint()", "a CALL"),
        ("EXPORT DATABASE 'dump'", "an EXPORT"),
        ("IMPORT DATABASE 'dump'", "an IMPORT"),
        ("  -- a comment\n  insert into runs (run_id) values ('x')", "an INSERT"),
        ("RESET threads", "a RESET"),
    ],
)
def test_refusals_name_the_statement_as_written(statement, word):
    from conf.errors import CatalogError
    from storage.catalog import check_read_only

    with pytest.raises(CatalogError, match=rf"^refused: `augdag sql` is read-only and this is {word} statement"):
        check_read_only(statement)


# -- a sandbox that cannot write (issue 26, defect 1) -----------------------------------------------------------------

# each a statement DuckDB parses and would run; {catalog}, {part}, {manifest}: files under the cache, {c}: the cache
HOSTILE = [
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{catalog}'",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{part}' (FORMAT parquet)",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{manifest}' (FORMAT json)",
    "EXPLAIN COPY (SELECT 1) TO '{catalog}'",
    "EXPLAIN (ANALYZE) COPY (SELECT 1) TO '{catalog}'",
    "EXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 1) TO '{catalog}'",
    "explain /* a comment */ analyze -- and another\n copy (select 1) to '{catalog}'",
    "EXPLAIN ANALYZE WITH a AS (COPY (SELECT 1) TO '{catalog}') SELECT 1",
    "COPY (SELECT 1) TO '{catalog}'",
    "COPY bitext TO '{part}' (FORMAT parquet)",
    "COPY runs FROM '{c}/runs.csv'",
    "WITH a AS (COPY (SELECT 1) TO '{catalog}') SELECT 1",
    "WITH a AS (COPY (SELECT 1) TO '{manifest}') SELECT * FROM a",
    "SELECT * FROM (WITH a AS (COPY (SELECT 1) TO '{catalog}') SELECT 1)",
    "SELECT 1 WHERE 1 IN (WITH a AS (COPY (SELECT 1) TO '{part}') SELECT 1)",
    "SELECT (WITH a AS (COPY (SELECT 1) TO '{catalog}') SELECT 1)",
    "SELECT 1 UNION ALL (WITH a AS (COPY (SELECT 1) TO '{catalog}') SELECT 1)",
    "DESCRIBE (WITH a AS (COPY (SELECT 1) TO '{catalog}') SELECT 1)",
    "WITH a AS (INSERT INTO runs (run_id) VALUES ('x') RETURNING *) SELECT * FROM a",
    "WITH a AS (DELETE FROM runs RETURNING *) SELECT 1",
    "WITH a AS (UPDATE artifacts SET path = 'x' RETURNING *) SELECT 1",
    "PRAGMA enable_profiling",
    "PRAGMA profiling_output = '{catalog}'",
    "SET profiling_output = '{catalog}'",
    "SET enable_external_access = true",
    "SET VARIABLE augdag_cache = '/'",
    "RESET allowed_directories",
    "CALL checkpoint()",
    "CALL enable_logging(storage = 'file', storage_path = '{c}/logs')",
    "ATTACH '{c}/new.duckdb' AS n",
    "ATTACH '{catalog}' AS w",
    "DETACH catalog",
    "INSTALL httpfs",
    "LOAD parquet",
    "EXPORT DATABASE '{c}/dump'",
    "IMPORT DATABASE '{c}/dump'",
    "CHECKPOINT",
    "FORCE CHECKPOINT",
    "VACUUM",
    "ANALYZE",
    "CREATE TABLE t AS SELECT 1",
    "CREATE OR REPLACE VIEW bitext AS SELECT 1",
    "CREATE TEMP MACRO m() AS 1",
    "DROP VIEW bitext",
    "ALTER TABLE runs ADD COLUMN x INT",
    "INSERT INTO runs (run_id) VALUES ('x')",
    "UPDATE runs SET status = 'x'",
    "DELETE FROM artifacts",
    "TRUNCATE runs",
    "COMMENT ON TABLE runs IS 'x'",
    "MERGE INTO runs USING (SELECT 1 AS id) s ON false WHEN NOT MATCHED THEN INSERT (run_id) VALUES ('x')",
    "UPDATE EXTENSIONS",
    "USE memory",
    "BEGIN TRANSACTION",
    "PREPARE p AS SELECT 1",
    "PIVOT runs ON status",
    "SELECT * FROM checkpoint()",
    "SELECT * FROM force_checkpoint()",
    "SELECT * FROM enable_logging()",
    "SELECT * FROM query('COPY (SELECT 1) TO ''{catalog}''')",
    "SELECT * FROM query_table('runs')",
    "SELECT nextval('s')",
    "SELECT write_log('x')",
]
# several statements in one: the later ones are checked too, comments hide nothing
MULTI = [
    "SELECT 1; EXPLAIN ANALYZE COPY (SELECT 1) TO '{catalog}'",
    "SELECT 1 /* ; */; -- SELECT 2;\nDROP TABLE runs",
    "SELECT 1;;; ATTACH '{c}/new.duckdb' AS n",
    "EXPLAIN (SELECT 1); COPY runs TO '{c}/runs.csv'",
]


def _hostile(cache, statement: str) -> str:
    ref = ArtifactRef(str(cache), "clean", "a" * 32, "bitext", "d", 1)
    return statement.format(c=cache, catalog=cache / "catalog.duckdb", part=ref.path(0), manifest=ref.dir / "manifest.json")


@pytest.mark.parametrize("statement", HOSTILE + MULTI)
def test_read_only_guard_refuses_every_statement_that_writes(cache, statement):
    with pytest.raises(CatalogError, match=r"^refused: `augdag sql` is read-only and "):
        check_read_only(_hostile(cache, statement))


@pytest.mark.parametrize(
    "query, rows",
    [
        ("EXPLAIN ANALYZE SELECT count(*) FROM bitext", 1),
        ("EXPLAIN (FORMAT json) SELECT 1", 1),
        ("EXPLAIN (SELECT 1)", 1),
        ("SELECT count(*) FROM duckdb_tables()", 1),
        ("FROM pragma_table_info('lineage')", 2),
        ("SUMMARIZE bitext", 5),
        ("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 3) SELECT * FROM t", 3),
        ("SELECT 1; SELECT * FROM bitext", 2),
        ("VALUES (1), (2)", 2),
        ("SELECT * FROM bitext, range(2)", 4),
    ],
)
def test_read_only_guard_lets_every_kind_of_query_run_in_the_sandbox(cache, query, rows):
    check_read_only(query)
    assert Catalog(cache).query(query, sandbox=True).num_rows == rows


def test_shell_refuses_every_hostile_statement_and_changes_no_byte_of_the_cache(cache):
    statements = [_hostile(cache, s) for s in HOSTILE]
    assert len(statements) >= 40
    done = augdag(cache, "sql", "--shell", stdin="".join(f"{s};\n" for s in statements) + "SELECT 42 AS alive;\n")
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr  # piped: refusals fail it (issue 48)
    *errors, last = done.stderr.splitlines()
    assert len(errors) == len(statements), done.stderr  # one line each
    assert last == f"error: {len(statements)} statement(s) failed"
    refused = re.compile(r"error: line \d+: refused: `augdag sql` is read-only and ")  # the line of the statement
    assert [e for e in errors if not refused.match(e)] == []
    assert "│ 42 " in done.stdout  # the loop went on
    assert_cache_unchanged(cache)


REFUSED = "error: refused: `augdag sql` is read-only and this is "
UNKNOWN = 'error: query failed: Binder Error: Referenced column "sorce" not found in FROM clause! Candidate bindings: '
NO_STATEMENT = (
    'error: no statement: the SQL is empty (only spaces, `;` or comments). Hint: augdag sql "SELECT count(*) FROM bitext"\n'
)


@pytest.mark.parametrize(
    "query, says",
    ids=["explain_analyze_copy", "multi", "empty", "semicolons", "unknown_column"],
    argvalues=[
        ("EXPLAIN ANALYZE COPY (SELECT 1) TO '{catalog}'", REFUSED + "an EXPLAIN COPY statement: "),
        ("SELECT 1 /* ; */; -- a comment\nEXPLAIN ANALYZE COPY (SELECT 1) TO '{part}'", REFUSED + "an EXPLAIN COPY statement: "),
        ("", NO_STATEMENT),
        (";;;", NO_STATEMENT),
        ("SELECT sorce FROM bitext", UNKNOWN + '"source", "src"\n'),
    ],
)
def test_sql_refuses_with_one_line_and_exit_2_writing_nothing(cache, query, says):
    done = augdag(cache, "sql", _hostile(cache, query))
    assert (done.returncode, done.stdout) == (2, "")
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(says), done.stderr
    assert_cache_unchanged(cache)


@pytest.mark.parametrize(
    "where, says",
    ids=["statements", "unknown_column"],
    argvalues=[
        (
            "1=0; EXPLAIN ANALYZE COPY (SELECT 1) TO '{catalog}'",
            "error: --where takes one condition on the rows of bitext, found",
        ),
        ("sorce='a'", "error: --where: no column 'sorce' in view bitext; its columns: uid, src, tgt, source, line\n"),
    ],
)
def test_export_where_takes_one_condition_and_names_an_unknown_column(cache, where, says):
    out = cache.parent / "where.parquet"
    done = augdag(cache, "export", "bitext", "-o", str(out), "--where", _hostile(cache, where))
    assert (done.returncode, done.stdout, out.exists()) == (2, "", False)
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(says), done.stderr
    assert_cache_unchanged(cache)


@pytest.mark.parametrize("sql", ["", " \n\t", ";;;", "-- a comment", "/* a comment */ ; ; -- and another"])
def test_sql_of_no_statement_is_one_error(sql):
    with pytest.raises(CatalogError, match=r"^no statement: the SQL is empty \(only spaces, `;` or comments\)"):
        check_read_only(sql)


@pytest.mark.parametrize(
    "where",
    ["1=1 ORDER BY src", "1=1 LIMIT 1", "1=1 UNION SELECT * FROM bitext", "1=1 GROUP BY ALL", "true QUALIFY 1", "1=1; SELECT 1"],
)
def test_where_more_than_a_condition_is_refused(where):
    with pytest.raises(CatalogError, match=r"^--where takes one condition on the rows of bitext, found more"):
        check_condition("bitext", where)


def test_where_a_condition_with_a_subquery_is_one_condition():
    assert check_condition("bitext", "src IN (SELECT src FROM bitext WHERE line < 3) -- a comment") == (
        'SELECT * FROM "bitext" WHERE src IN (SELECT src FROM bitext WHERE line < 3) -- a comment'
    )
