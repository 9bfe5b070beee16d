"""Issue 26, defects 4, 5, 6 and 12 (`augdag runs`): output files written safely (storage/output.py), data
shown as data, read commands on a missing cache, 0-row results said, one line per run. The CLI as a
subprocess on a tiny cache: a `bitext` and a `slots` artifact registered by hand, two recorded runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.artifacts import ArtifactRef, write_manifest, write_part
from storage.catalog import Catalog
from storage.schemas import SLOTS, with_uid
from tests.conftest import bitext, subprocess_env

PWN = "[bold red]pwn[/bold red]"
LONG_STAGE = "a_stage_name_longer_than_twelve"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """bitext: 2 rows of source `news` (one holds markup); slots: 2 rows with list columns; runs: `ing-1`
    (completed, 2 stages, one with a long name) and `ing-2` (failed, retry of ing-1, 1 failed stage)."""
    cache = tmp_path_factory.mktemp("output") / "cache"
    catalog = Catalog(cache)
    ref = ArtifactRef(str(cache), "clean", "a" * 32, "bitext", "news", 1)
    write_part(bitext([("a b", "x y"), (PWN, "z")], source="news"), ref.path(0))
    catalog.register(ref, write_manifest(ref, version="1", params={}), run_id="ing-1")
    slots = pa.table(
        {
            "uid": pa.nulls(2, pa.string()),
            "tokens": [["book", "a", "flight"], ["hi"]],
            "tags": [["O", "O", "B-x"], ["O"]],
            "source": ["s", "s"],
            "line": pa.array([1, 2], pa.int64()),
        },
        schema=SLOTS,
    )
    sref = ArtifactRef(str(cache), "clean", "b" * 32, "slots", "s", 1)
    write_part(with_uid(slots, "slots"), sref.path(0))
    catalog.register(sref, write_manifest(sref, version="1", params={}), run_id="ing-1")
    stages = [
        {"stage": "read", "dataset": "news", "fingerprint": "f" * 32, "status": "computed", "shards": 1},
        {"stage": LONG_STAGE, "dataset": "news", "fingerprint": "e" * 32, "status": "cached", "shards": 1},
    ]
    catalog.start_run("ing-1", pipeline="ingest", profile="p.yaml", config={}, flow_run_id=None)
    catalog.finish_run("ing-1", status="completed", summary={"run_id": "ing-1", "stages": stages})
    catalog.start_run("ing-2", pipeline="ingest", profile="p.yaml", config={}, flow_run_id=None)
    catalog.finish_run(
        "ing-2",
        status="failed",
        summary={
            "run_id": "ing-2",
            "retry_of": "ing-1",
            "error": "Traceback ...\nValueError: boom at row 6",
            "stages": [{**stages[0], "status": "failed"}],
        },
    )
    t0 = datetime(2026, 11, 26, 12, 0, 0)
    with catalog.write() as con:  # fixed times: the listing's start and duration columns are exact
        con.execute(
            "UPDATE runs SET started_at = $s, finished_at = $f WHERE run_id = 'ing-1'",
            {"s": t0, "f": t0 + timedelta(seconds=8.3)},
        )
        con.execute(
            "UPDATE runs SET started_at = $s, finished_at = $f WHERE run_id = 'ing-2'",
            {"s": t0 + timedelta(minutes=5), "f": t0 + timedelta(minutes=9, seconds=7)},
        )
    shard = {"dataset": "news", "shard": 0, "seconds": 0.5, "rows_in": 2}
    catalog.register_failures(
        [
            {**shard, "run_id": "ing-1", "stage": "read", "fingerprint": "f" * 32, "status": "computed", "rows_out": 2},
            {**shard, "run_id": "ing-1", "stage": LONG_STAGE, "fingerprint": "e" * 32, "status": "cached", "rows_out": 2},
            {**shard, "run_id": "ing-2", "stage": "read", "fingerprint": "f" * 32, "status": "failed", "rows_out": 0},
        ]
    )
    return cache


def augdag(cwd: Path, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=subprocess_env(cwd, COLUMNS="200"),
        timeout=timeout,
    )


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The one line of a refused command (exit 2, nothing on stdout, no traceback)."""
    assert (done.returncode, done.stdout) == (2, ""), done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr.rstrip("\n")


# -- defect 4: output files -----------------------------------------------------------------------------------


def test_sql_output_never_follows_a_link_at_the_target_or_at_a_temporary_name(cache, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "q.csv").symlink_to(victim)
    (tmp_path / ".q.csv.tmp").symlink_to(victim)  # the fixed temporary name the old code wrote through
    q = "SELECT src FROM bitext ORDER BY line"
    refused = augdag(tmp_path, "sql", q, "-o", "q.csv", "--cache", str(cache))
    assert one_error_line(refused) == (
        f"error: q.csv: is a symbolic link (to {victim}); expected a regular file or "
        "a new name. Hint: another name, or --force to replace it (a link is replaced "
        "itself, never written through)"
    )
    forced = augdag(tmp_path, "sql", q, "-o", "q.csv", "--force", "--cache", str(cache))
    assert (forced.returncode, forced.stderr) == (0, "wrote 2 row(s) to q.csv\n"), forced.stderr
    assert victim.read_text() == "precious\n"  # the link itself was replaced, nothing written through it
    assert not (tmp_path / "q.csv").is_symlink() and (tmp_path / "q.csv").read_text() == f'"src"\n"a b"\n"{PWN}"\n'
    assert os.readlink(tmp_path / ".q.csv.tmp") == str(victim)  # the planted name untouched, not used
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "prefect-home") == [".q.csv.tmp", "q.csv", "victim.txt"]


def test_export_refuses_a_link_and_force_replaces_the_node_itself(cache, tmp_path):
    victim = tmp_path / "victim.parquet"
    victim.write_bytes(b"precious")
    (tmp_path / "x.parquet").symlink_to(victim)
    refused = augdag(tmp_path, "export", "bitext", "-o", "x.parquet", "--cache", str(cache))
    assert one_error_line(refused).startswith("error: x.parquet: is a symbolic link (to ")
    # a FIFO is written into, as cp does (issue 48): tests/e2e/test_output_terminal_tsv.py
    forced = augdag(tmp_path, "export", "bitext", "-o", "x.parquet", "--force", "--cache", str(cache))
    assert (forced.returncode, forced.stdout) == (0, "wrote 2 row(s) to x.parquet\n"), forced.stderr
    assert victim.read_bytes() == b"precious" and not (tmp_path / "x.parquet").is_symlink()
    assert pq.read_table(tmp_path / "x.parquet").sort_by("line")["src"].to_pylist() == ["a b", PWN]


def test_output_to_a_directory_or_below_a_file_is_one_line_exit_2(cache, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("")
    as_dir = augdag(tmp_path, "sql", "SELECT 1 AS a", "-o", "d", "--cache", str(cache))
    assert one_error_line(as_dir) == "error: d: is a directory; --output names a file (e.g. d/result.parquet)"
    below_file = augdag(tmp_path, "export", "bitext", "-o", "f/x.csv", "--cache", str(cache))
    assert one_error_line(below_file) == "error: f: is not a directory, so f/x.csv cannot be written"
    into_cache = augdag(
        tmp_path, "sql", "SELECT 1 AS a", "-o", str(cache / "catalog.duckdb"), "-f", "parquet", "--cache", str(cache)
    )
    assert one_error_line(into_cache).startswith(f"error: {cache}/catalog.duckdb: is inside the cache {cache};")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "prefect-home") == ["d", "f"]
    assert not any((tmp_path / "d").iterdir())


def test_export_of_an_unknown_view_creates_no_directory(cache, tmp_path):
    done = augdag(tmp_path, "export", "nosuchview", "-o", "a/b/c/x.parquet", "--cache", str(cache))
    assert one_error_line(done) == (
        "error: no view 'nosuchview'; the catalog has: bitext, dropped, evaluation_summary, heldout_bitext, "
        "heldout_labeled, heldout_mono, heldout_slots, labeled, mono, rejects, slots"
    )
    assert not (tmp_path / "a").exists()
    created = augdag(tmp_path, "export", "bitext", "-o", "a/b/c/x.parquet", "--cache", str(cache))
    assert created.returncode == 0 and pq.read_table(tmp_path / "a/b/c/x.parquet").num_rows == 2  # made once valid


def test_the_format_comes_from_the_extension_and_a_conflict_is_refused(cache, tmp_path):
    q = "SELECT line, src FROM bitext ORDER BY line"
    for name in ("q.parquet", "q.tsv", "q.jsonl", "q.json"):
        done = augdag(tmp_path, "sql", q, "-o", name, "--cache", str(cache))
        assert (done.returncode, done.stderr) == (0, f"wrote 2 row(s) to {name}\n"), done.stderr
    assert pq.read_table(tmp_path / "q.parquet").to_pylist() == [{"line": 1, "src": "a b"}, {"line": 2, "src": PWN}]
    assert (tmp_path / "q.tsv").read_text() == f"line\tsrc\n1\ta b\n2\t{PWN}\n"  # TSV raw (issue 48)
    assert (
        (tmp_path / "q.jsonl").read_text()
        == (tmp_path / "q.json").read_text()
        == (f'{{"line": 1, "src": "a b"}}\n{{"line": 2, "src": "{PWN}"}}\n')
    )
    conflict = augdag(tmp_path, "sql", q, "-o", "r.csv", "-f", "parquet", "--cache", str(cache))
    assert one_error_line(conflict) == (
        "error: r.csv: --format parquet but the extension '.csv' says csv. Hint: name the file *.parquet or drop --format"
    )
    unknown = augdag(tmp_path, "export", "bitext", "-o", "r.txt", "--cache", str(cache))
    assert one_error_line(unknown) == (
        "error: r.txt: cannot tell the format from the extension '.txt'; expected one "
        "of .csv, .tsv, .json, .jsonl, .parquet. Hint: --format parquet|jsonl|csv|tsv"
    )
    assert not (tmp_path / "r.csv").exists() and not (tmp_path / "r.txt").exists()


# -- defect 5: data shown as data ------------------------------------------------------------------------------


def test_table_output_prints_markup_in_values_and_names_literally(cache, tmp_path):
    done = augdag(tmp_path, "sql", f"SELECT '[/x]' AS s, '{PWN}' AS \"[i]n[/i]\"", "--cache", str(cache))
    assert done.returncode == 0, done.stderr
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in done.stdout.splitlines() if "│" in line]
    head = [[c.strip() for c in line.split("┃")[1:-1]] for line in done.stdout.splitlines() if "┃" in line]
    assert (head, rows) == ([["s", "[i]n[/i]"]], [["[/x]", PWN]])
    shown = augdag(tmp_path, "sql", "SELECT src FROM bitext ORDER BY line", "--cache", str(cache))
    assert [line.split("│")[1].strip() for line in shown.stdout.splitlines() if "│" in line] == ["a b", PWN]


def test_columns_with_one_name_keep_their_own_values_and_json_refuses_them(cache, tmp_path):
    done = augdag(tmp_path, "sql", "SELECT 1 AS a, 2 AS a, 3 AS b", "--cache", str(cache))
    assert done.returncode == 0, done.stderr
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in done.stdout.splitlines() if "│" in line]
    assert rows == [["1", "2", "3"]]  # by position: a dict per row kept the last `a` and shifted the rest
    refused = augdag(tmp_path, "sql", "SELECT 1 AS a, 2 AS a", "-o", str(tmp_path / "q.jsonl"), "--cache", str(cache))
    assert one_error_line(refused) == "error: the result has two columns named 'a': name them apart (AS) for jsonl output"
    assert not (tmp_path / "q.jsonl").exists()


def test_list_and_struct_columns_are_json_in_csv_and_tsv(cache, tmp_path):
    done = augdag(
        tmp_path,
        "sql",
        "SELECT tokens, tags, {'n': line, 'k': [line]} AS st FROM slots ORDER BY line",
        "-f",
        "csv",
        "--cache",
        str(cache),
    )
    assert (done.returncode, done.stdout) == (
        0,
        (
            '"tokens","tags","st"\n'
            '"[""book"", ""a"", ""flight""]","[""O"", ""O"", ""B-x""]",'
            '"{""n"": 1, ""k"": [1]}"\n'
            '"[""hi""]","[""O""]","{""n"": 2, ""k"": [2]}"\n'
        ),
    ), done.stderr
    exported = augdag(tmp_path, "export", "slots", "-o", "s.tsv", "--where", "line = 2", "--header", "--cache", str(cache))
    assert exported.returncode == 0, exported.stderr
    header, row = (line.split("\t") for line in (tmp_path / "s.tsv").read_text().splitlines())
    assert dict(zip(header, row))["tokens"] == '["hi"]'  # TSV raw, no quoting (issue 48)
    assert json.loads(row[1]) == ["hi"]


# -- defect 6: a missing cache, and 0 rows -----------------------------------------------------------------------

READ_COMMANDS = [
    ["sql", "SELECT count(*) FROM bitext"],
    ["sql", "--shell"],
    ["runs"],
    ["views"],
    ["views", "bitext"],
    ["export", "bitext", "-o", "x.parquet"],
    ["why", "news", "1"],
    ["logs", "ing-1"],
    ["report", "ing-1"],
    ["retry", "ing-1"],
]


def test_read_commands_on_a_missing_cache_exit_2_and_create_nothing(tmp_path):
    typo = tmp_path / "typo"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "--cache", str(typo), *command],
            cwd=tmp_path,
            env=subprocess_env(tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in READ_COMMANDS
    ]  # side by side
    for command, proc in zip(READ_COMMANDS, procs):
        stdout, stderr = proc.communicate("SELECT 1;\n", timeout=300)
        done = subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
        assert one_error_line(done) == f"error: no catalog at {typo} (runs write it; --cache or $AUGDAG_CACHE)", command
    assert not typo.exists() and not (tmp_path / "x.parquet").exists()


def test_a_query_or_export_of_0_rows_says_so(cache, tmp_path):
    none = augdag(tmp_path, "sql", "SELECT * FROM bitext WHERE source = 'multi30k'", "-f", "csv", "--cache", str(cache))
    assert (none.returncode, none.stdout, none.stderr) == (
        0,
        '"uid","src","tgt","source","line"\n',
        "warning: 0 rows: the query selected nothing\n",
    )
    export = augdag(
        tmp_path, "export", "bitext", "-f", "text", "-o", "o", "--where", "source = 'multi30k'", "--cache", str(cache)
    )
    assert (export.returncode, export.stdout, export.stderr) == (
        0,
        "wrote 0 row(s) to o.src\nwrote 0 row(s) to o.tgt\n",
        "warning: 0 rows: the query selected nothing (check the --where condition)\n",
    )
    some = augdag(tmp_path, "export", "bitext", "-o", "b.jsonl", "--where", "source = 'news'", "--cache", str(cache))
    assert (some.returncode, some.stdout, some.stderr) == (0, "wrote 2 row(s) to b.jsonl\n", "")


# -- defect 12: `augdag runs` -------------------------------------------------------------------------------


def test_runs_prints_one_line_per_run_and_stages_on_request(cache, tmp_path):
    done = augdag(tmp_path, "runs", "--cache", str(cache))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.splitlines() == [
        "run    pipeline  profile  status     started              took        stages",
        (
            "ing-2  ingest    p.yaml   failed     2026-11-26 12:05:00  4 min 07 s  0 done, 1 failed  retry of ing-1  "
            "error: ValueError: boom at row 6"
        ),
        "ing-1  ingest    p.yaml   completed  2026-11-26 12:00:00  8.3 s       2 done  retried by ing-2",
    ]
    detail = augdag(tmp_path, "runs", "--stages", "--cache", str(cache))
    lines = detail.stdout.splitlines()
    assert [line.split()[:4] for line in lines if line.startswith("ing-")] == [
        ["ing-2", "ingest", "profile=p.yaml", "failed"],
        ["ing-1", "ingest", "profile=p.yaml", "completed"],
    ]
    stages = [line for line in lines if line.startswith("    ") and "shards" in line]
    assert [s.split()[0] for s in stages] == ["read", "read", LONG_STAGE]  # the long name whole
    assert len({s.index("shards") for s in stages}) == 1  # and the columns aligned all the same
    assert "    error: ValueError: boom at row 6" in lines
