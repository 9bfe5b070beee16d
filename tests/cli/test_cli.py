"""The `augdag` command line: exit codes, the read-only SQL guard, exports (the demo: tests/e2e/test_augdag_demo.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage.catalog import Catalog

runner = CliRunner()


def fresh_catalog(root: Path) -> None:
    """An empty catalog at ``root``: read commands on a cache without one exit 2 (issue 26, defect 6)."""
    with Catalog(root).write():
        pass


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE x AS SELECT 1",
        "DROP VIEW bitext",
        "INSERT INTO runs (run_id) VALUES ('x')",
        "DELETE FROM rejects",
        "ATTACH '/tmp/x.duckdb' AS x",
        "COPY (SELECT * FROM runs) TO '/tmp/runs.csv'",
        "INSTALL httpfs",
        "LOAD httpfs",
    ],
)
def test_sql_refuses_write_forms_with_exit_2(tmp_path, statement):
    fresh_catalog(tmp_path)
    result = runner.invoke(app, ["sql", statement, "--cache", str(tmp_path)])
    assert result.exit_code == 2
    assert "read-only" in result.output


def test_sql_formats_and_bad_query_exit_code(tmp_path):
    fresh_catalog(tmp_path)
    ok = runner.invoke(app, ["sql", "SELECT 1 AS a, 'x' AS b", "--format", "json", "--cache", str(tmp_path)])
    assert (ok.exit_code, ok.output.strip()) == (0, '{"a": 1, "b": "x"}')
    csv = runner.invoke(app, ["sql", "SELECT 1 AS a, 'x' AS b", "--format", "csv", "--cache", str(tmp_path)])
    assert csv.exit_code == 0 and csv.output.splitlines() == ['"a","b"', '1,"x"']
    bad = runner.invoke(app, ["sql", "SELECT * FROM no_such_view", "--cache", str(tmp_path)])
    assert bad.exit_code == 2 and "no_such_view" in bad.output


def test_sql_writes_parquet_csv_and_json_files(tmp_path):
    cache = tmp_path / "cache"  # -o never writes into the cache (issue 48, defect 6): the files go beside it
    fresh_catalog(cache)
    q = "SELECT range AS n, 'row ' || range AS s FROM range(3)"
    out = tmp_path / "out" / "r.parquet"
    ok = runner.invoke(app, ["sql", q, "--format", "parquet", "--output", str(out), "--cache", str(cache)])
    assert ok.exit_code == 0, ok.output
    assert pq.read_table(out).to_pylist() == [{"n": i, "s": f"row {i}"} for i in range(3)]
    assert [p.name for p in out.parent.iterdir()] == ["r.parquet"]  # no temporary file left
    as_json = tmp_path / "r.jsonl"
    assert runner.invoke(app, ["sql", q, "-f", "json", "-o", str(as_json), "--cache", str(cache)]).exit_code == 0
    assert as_json.read_text().splitlines()[2] == '{"n": 2, "s": "row 2"}'
    as_csv = tmp_path / "r.csv"
    assert runner.invoke(app, ["sql", q, "-f", "csv", "-o", str(as_csv), "--cache", str(cache)]).exit_code == 0
    assert as_csv.read_text().splitlines()[:2] == ['"n","s"', '0,"row 0"']
    no_file = runner.invoke(app, ["sql", q, "--format", "parquet", "--cache", str(cache)])
    assert no_file.exit_code == 2 and "--output" in no_file.output
    table_to_file = runner.invoke(app, ["sql", q, "--output", str(tmp_path / "x"), "--cache", str(cache)])
    assert table_to_file.exit_code == 2 and not (tmp_path / "x").exists()
    assert "cannot tell the format from the extension '(none)'" in " ".join(table_to_file.output.split())
    as_table = runner.invoke(app, ["sql", q, "-f", "table", "-o", str(tmp_path / "x.csv"), "--cache", str(cache)])
    assert as_table.exit_code == 2 and not (tmp_path / "x.csv").exists()


def test_run_with_bad_profile_exits_2_naming_file_line_and_key(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("shard_size: 10\ningest:\n  clean:\n    max_ratoi: 2\n")
    result = runner.invoke(app, ["run", "ingest", "--config", str(profile), "--cache", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{profile}:4: ingest.clean.max_ratoi: unknown key" in result.output.replace("\n", "")


def test_run_unknown_pipeline_exits_2(tmp_path):
    assert runner.invoke(app, ["run", "nope", "--cache", str(tmp_path)]).exit_code == 2


@pytest.mark.slow
def test_run_with_misaligned_pair_exits_2_naming_both_files(prefect_harness, tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"datasets:\n  pair:\n    kind: bitext\n    format: text\n    src: {tmp_path}/a.en\n    tgt: {tmp_path}/a.de\n"
    )
    result = runner.invoke(app, ["run", "ingest", "--config", str(profile), "--cache", str(tmp_path / "c")])
    text = result.output.replace("\n", "")
    assert result.exit_code == 2, result.output
    assert f"{tmp_path}/a.en and {tmp_path}/a.de: a bitext needs line-aligned files, found 3 and 2 lines" in text


@pytest.mark.slow
def test_export_parquet_jsonl_and_aligned_text(prefect_harness, tmp_path):
    for name, lines in (("x.en", ["a b", "c d", "a b", "e f"]), ("x.de", ["u v", "w x", "u v", "y z"])):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"datasets:\n  pair:\n    kind: bitext\n    format: text\n    src: {tmp_path}/x.en\n    tgt: {tmp_path}/x.de\n"
    )
    cache = str(tmp_path / "c")
    assert runner.invoke(app, ["run", "ingest", "--config", str(profile), "--cache", cache]).exit_code == 0
    assert (
        runner.invoke(app, ["export", "bitext", "-f", "parquet", "-o", str(tmp_path / "o.parquet"), "--cache", cache]).exit_code
        == 0
    )
    assert pq.read_table(tmp_path / "o.parquet").sort_by("line")["src"].to_pylist() == ["a b", "c d", "e f"]
    assert (
        runner.invoke(
            app, ["export", "bitext", "-f", "jsonl", "-o", str(tmp_path / "o.jsonl"), "--cache", cache, "--where", "line > 1"]
        ).exit_code
        == 0
    )
    rows = sorted((json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()), key=lambda r: r["line"])
    assert [(r["src"], r["tgt"], r["line"]) for r in rows] == [("c d", "w x", 2), ("e f", "y z", 4)]
    assert runner.invoke(app, ["export", "bitext", "-f", "text", "-o", str(tmp_path / "o"), "--cache", cache]).exit_code == 0
    src, tgt = (sorted((tmp_path / f"o.{side}").read_text().splitlines()) for side in ("src", "tgt"))
    assert (src, tgt) == (["a b", "c d", "e f"], ["u v", "w x", "y z"])
    missing = runner.invoke(app, ["export", "nope", "-o", str(tmp_path / "n.parquet"), "--cache", cache])
    assert missing.exit_code == 2 and "no view 'nope'" in missing.output


# the temporary Prefect server's own report of sqlite lock contention on a loaded machine (its task-run
# recorder; the run goes on): a log line and the chained tracebacks ending in "database is locked"
PREFECT_SQLITE_LOCKED = re.compile(
    r"^[^\n]*ERROR[^\n]*prefect\.server\.[^\n]*\n"
    r"|^[^\n]*Traceback \(most recent call last\):\n(?:(?!Traceback \(most)[^\n]*\n)*?"
    r"[^\n]*OperationalError[^\n]*database is locked[^\n]*\n(?:[ \t]*\[(?:SQL|parameters):[^\n]*\n"
    r"|[ \t]*\(Background[^\n]*\n)*",
    re.M,
)


def test_only_prefects_own_sqlite_lock_reports_are_set_aside():
    ours = 'Traceback (most recent call last):\n  File "flows/pipelines/epida.py", line 3\nValueError: boom\n'
    locked = (
        "12:00 | ERROR   | prefect.server.services.task_run_recorder - failed\n"
        'Traceback (most recent call last):\n  File "aiosqlite/core.py", line 63\n'
        "sqlite3.OperationalError: database is locked\n\nDuring handling of the above exception:\n\n"
        'Traceback (most recent call last):\n  File "sqlalchemy/orm/session.py"\n'
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked\n"
        "[SQL: INSERT INTO task_run_state ...]\n[parameters: {}]\n(Background on this error at: x)\n"
    )
    assert "Traceback" not in PREFECT_SQLITE_LOCKED.sub("", "run ok\n" + locked + "done\n")
    assert PREFECT_SQLITE_LOCKED.sub("", ours + locked) == ours + "\nDuring handling of the above exception:\n\n"
    assert PREFECT_SQLITE_LOCKED.sub("", locked + ours).endswith(ours)
