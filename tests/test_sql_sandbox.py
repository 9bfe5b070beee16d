"""`augdag sql` opens no file outside the cache (issue 13, defect 10): the CLI as a subprocess, on a catalog
whose `bitext` view reads a real artifact, and a secret file beside the cache that must stay unreadable."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.artifacts import ArtifactRef, write_manifest, write_part
from storage.catalog import Catalog
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
    return cache


def augdag(cache, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args, "--cache", str(cache)], input=stdin,
                          capture_output=True, text=True, cwd=cache.parent, env=subprocess_env(cache.parent), timeout=120)


def test_sql_views_still_read_their_artifacts_in_the_sandbox_issue_13(cache):
    done = augdag(cache, "sql", "SELECT src, tgt FROM bitext ORDER BY line", "--format", "csv")
    assert (done.returncode, done.stdout) == (0, '"src","tgt"\n"a b","x y"\n"c","z"\n')
    inside = augdag(cache, "sql", f"SELECT count(*) AS n FROM read_parquet('{cache}/artifacts/**/*.parquet')", "-f", "csv")
    assert (inside.returncode, inside.stdout) == (0, '"n"\n2\n')  # files under the cache stay readable


@pytest.mark.parametrize("query, path", [
    ("SELECT * FROM read_text('{root}/secret.txt')", "{root}/secret.txt"),
    ("SELECT * FROM read_csv('{root}/secret.csv')", "{root}/secret.csv"),
    ("SELECT * FROM read_parquet('{root}/secret.parquet')", "{root}/secret.parquet"),
    ("SELECT * FROM glob('{root}/*')", "{root}/*"),
    ("SELECT * FROM '{root}/secret.csv'", "{root}/secret.csv"),
    ("SELECT * FROM read_text('/etc/hostname')", "/etc/hostname"),
    ("SELECT * FROM read_text('{root}/cache/../secret.txt')", "{root}/cache/../secret.txt"),  # no escape by ..
    ("SELECT * FROM read_text('secret.txt')", "secret.txt"),  # relative to the working directory, outside
    ("SELECT * FROM read_text('http://127.0.0.1:9/x')", "http://127.0.0.1:9/x"),  # no URL, no httpfs hint
])
def test_sql_refuses_files_outside_the_cache_with_exit_2_issue_13(cache, query, path):
    root = cache.parent
    done = augdag(cache, "sql", query.format(root=root))
    assert done.returncode == 2
    assert done.stdout == ""
    message = " ".join(done.stderr.split())  # rich folds long lines
    assert message.startswith(f"error: refused: `augdag sql` reads only the catalog and files under the cache {cache}:")
    assert path.format(root=root) in message and "INSTALL" not in message and "top secret" not in message


def test_sql_sandbox_cannot_be_switched_off_by_a_statement_issue_13(cache):
    done = augdag(cache, "sql", "SET enable_external_access = true")
    assert done.returncode == 2 and "this is a SET statement" in done.stderr
    shell = augdag(cache, "sql", "--shell", stdin=f"SELECT * FROM read_text('{cache.parent}/secret.txt');\n"
                                                  "SELECT count(*) AS n FROM bitext;\n")
    assert shell.returncode == 0
    assert "reads only the catalog and files under the cache" in " ".join(shell.stderr.split())
    assert "top secret" not in shell.stdout and "│ 2 " in shell.stdout  # refused, and the loop went on


def test_export_where_cannot_read_outside_the_cache_issue_13(cache):
    out = cache.parent / "out.parquet"
    done = augdag(cache, "export", "bitext", "-o", str(out),
                  "--where", f"src IN (SELECT content FROM read_text('{cache.parent}/secret.txt'))")
    assert done.returncode == 2 and not out.exists()
    assert "reads only the catalog and files under the cache" in " ".join(done.stderr.split())


@pytest.mark.parametrize("statement, word", [
    ("INSTALL httpfs", "an INSTALL"), ("LOAD httpfs", "a LOAD"), ("CHECKPOINT", "a CHECKPOINT"),
    ("CALL checkpoint()", "a CALL"), ("EXPORT DATABASE 'dump'", "an EXPORT"), ("IMPORT DATABASE 'dump'", "an IMPORT"),
    ("  -- a comment\n  insert into runs (run_id) values ('x')", "an INSERT"), ("RESET threads", "a RESET"),
])
def test_refusals_name_the_statement_as_written_issue_13(statement, word):
    from conf.errors import CatalogError
    from storage.catalog import check_read_only

    with pytest.raises(CatalogError, match=rf"^refused: `augdag sql` is read-only and this is {word} statement"):
        check_read_only(statement)

