"""Issue 48, defects 6, 8 and 10 through the CLI: `-o` never replaces a device, FIFO or socket and never writes
inside the cache, `-o -` is standard output (storage/output.py); control characters in values and names reach
the terminal escaped in `sql`'s table, `why`, `runs` and error lines, and files keep the bytes (flows/cli/app.py
``shown``); `--format tsv` is raw src<TAB>tgt lines, CSV is RFC 4180 (round trips through csv, pandas, `cut -f`).
In e2e: five `augdag` processes a test, over the fast tier's 3 s; the same rules in process, in the fast tier:
tests/storage/test_output_targets.py and tests/cli/test_shown.py.

The cache: a `read` and a `clean` artifact of source `news` (5 pairs: commas and quotes, terminal escapes, bidi
and C1 controls, a tab, a line feed) and one failed run whose profile and error hold escapes.
"""

from __future__ import annotations

import csv
import io
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from storage.artifacts import ArtifactRef, write_manifest, write_part
from storage.catalog import Catalog
from tests.conftest import bitext, subprocess_env

PAIRS = [
    ("Two young, White males are outside.", 'He said "hi", then left.'),
    ("\x1b]0;PWNED-TITLE\x07 sun", "\x1b[2J moon"),
    ("abc\u202edef", "x\u2066y\x9bz\x7f"),
    ("a\tb", "tab in src"),
    ("line\nbreak", "lf in src"),
]
CLEAN = "c" * 32


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """`news` lines 1-5 (PAIRS) read and kept by clean (the `bitext` view); run `ing-x` failed with escapes."""
    cache = tmp_path_factory.mktemp("hostile") / "cache"
    catalog = Catalog(cache)
    rows = bitext(PAIRS, source="news")
    no_drops = rows.slice(0, 0).append_column("reason", pa.array([], pa.string()))
    for stage, fp, view in (("read", "r" * 32, None), ("clean", CLEAN, "bitext")):
        ref = ArtifactRef(str(cache), stage, fp, view, "news", 1)
        write_part(no_drops, ref.path(0, "dropped"))
        write_part(rows, ref.path(0))
        catalog.register(ref, write_manifest(ref, version="1", params={}), run_id="ing-1")
    catalog.start_run("ing-x", pipeline="ingest", profile="p\u202egnp.yaml", config={}, flow_run_id=None)
    catalog.finish_run("ing-x", status="failed", summary={"error": "ValueError: \x1b]0;PWNED\x07 at \x1b[2J"})
    return cache


def augdag(cwd: Path, *commands: list[str], stdin: str | None = None) -> list[subprocess.CompletedProcess]:
    """Each of ``commands`` as `augdag ...` in its own process, all started at once (bytes out, not decoded)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "flows.cli", *c],
            cwd=cwd,
            env=subprocess_env(cwd, COLUMNS="200"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for c in commands
    ]
    done = []
    for c, p in zip(commands, procs):
        out, err = p.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(c, p.returncode, out, err))
    return done


def refused(done: subprocess.CompletedProcess) -> str:
    """The one line of a refused command (exit 2, nothing on stdout, no traceback)."""
    assert (done.returncode, done.stdout) == (2, b""), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr.decode().rstrip("\n")


# -- defect 6: output files ---------------------------------------------------------------------------------------


def test_o_writes_into_a_fifo_and_a_device_never_replaces_them_and_o_dash_is_stdout(cache, tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))  # a reader, as `cat pipe.csv` is
    reader.start()
    q, c = "SELECT line, src FROM bitext WHERE line <= 2 ORDER BY line", ["--cache", str(cache)]
    into_fifo, into_null, dash, dev_stdout = augdag(
        tmp_path,
        ["sql", q, "-o", str(fifo), "--force", *c],
        ["sql", q, "-o", "/dev/null", "-f", "csv", "--force", *c],
        ["sql", q, "-o", "-", "-f", "tsv", "--no-header", *c],
        ["export", "bitext", "-o", "/dev/stdout", "-f", "jsonl", "--where", "line = 1", *c],
    )
    reader.join(timeout=60)
    assert (into_fifo.returncode, into_fifo.stderr) == (0, f"wrote 2 row(s) to {fifo}\n".encode())
    assert got == [b'"line","src"\n1,"Two young, White males are outside."\n2,"\x1b]0;PWNED-TITLE\x07 sun"\n']
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and stat.S_ISCHR(os.lstat("/dev/null").st_mode)  # never replaced
    assert (into_null.returncode, into_null.stderr) == (0, b"wrote 2 row(s) to /dev/null\n")
    assert (dash.returncode, dash.stdout, dash.stderr) == (
        0,
        b"1\tTwo young, White males are outside.\n2\t\x1b]0;PWNED-TITLE\x07 sun\n",  # a file keeps the bytes
        b"wrote 2 row(s) to -\n",
    )
    assert (dev_stdout.returncode, dev_stdout.stderr) == (0, b"wrote 1 row(s) to /dev/stdout\n")
    assert dev_stdout.stdout.decode().startswith('{"uid": ') and '"line": 1}\n' in dev_stdout.stdout.decode()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "prefect-home") == ["pipe.csv"]


def test_o_refuses_any_path_inside_the_cache_through_links_too_and_a_socket(cache, tmp_path):
    (tmp_path / "parts").symlink_to(cache / "artifacts" / "clean" / CLEAN)
    (tmp_path / "wal.parquet").symlink_to(cache / "catalog.duckdb.wal")  # dangling: --force replaces such a link
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.csv"))
    c = ["--cache", str(cache)]
    part, wal, direct, sock_forced, no_format = augdag(
        tmp_path,
        ["sql", "SELECT 1 AS x", "-o", "parts/part-00099.parquet", *c],
        ["export", "bitext", "-o", "wal.parquet", "--force", *c],
        ["sql", "SELECT 1 AS x", "-o", str(cache / "catalog.duckdb.wal"), "-f", "csv", *c],
        ["sql", "SELECT 1 AS x", "-o", "s.csv", "--force", *c],
        ["sql", "SELECT 1 AS x", "-o", "-", *c],
    )
    sock.close()
    real = os.path.realpath(cache)
    assert refused(part) == (
        f"error: parts/part-00099.parquet: is inside the cache {cache} ({real}/artifacts/clean/{CLEAN}/part-00099.parquet); "
        "-o never writes into the cache. Hint: a path outside it"
    )
    assert refused(wal) == (
        f"error: wal.parquet: is inside the cache {cache} ({real}/catalog.duckdb.wal); -o never writes into the cache. "
        "Hint: a path outside it"
    )
    assert refused(direct) == (
        f"error: {cache}/catalog.duckdb.wal: is inside the cache {cache}; -o never writes into the cache. Hint: a path outside it"
    )
    assert refused(sock_forced) == (
        "error: s.csv: is a socket; augdag writes a regular file, or into a FIFO or character device. Hint: another name"
    )
    assert refused(no_format) == (
        "error: -: standard output has no extension to tell the format. Hint: --format csv|tsv|json|parquet"
    )
    assert sorted(os.listdir(cache / "artifacts" / "clean" / CLEAN)) == [
        "dropped-00000.parquet",
        "manifest.json",
        "part-00000.parquet",
    ]
    assert not os.path.lexists(cache / "catalog.duckdb.wal") and (tmp_path / "wal.parquet").is_symlink()
    assert stat.S_ISSOCK(os.lstat(tmp_path / "s.csv").st_mode)


# -- defect 8: terminal-safe display --------------------------------------------------------------------------------


def test_escapes_in_values_and_names_reach_the_terminal_escaped_in_sql_why_runs_and_errors(cache, tmp_path):
    c = ["--cache", str(cache)]
    table, why, runs, error = augdag(
        tmp_path,
        ["sql", 'SELECT src AS "s\x1b[1m", tgt FROM bitext WHERE line IN (2, 3) ORDER BY line', *c],
        ["why", "news", "2", *c],
        ["runs", *c],
        ["sql", 'SELECT * FROM "\x1b]0;t\x07"', *c],
    )
    for done in (table, why, runs, error):
        assert b"\x1b" not in done.stdout + done.stderr and b"\xe2\x80\xae" not in done.stdout, done.args
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in table.stdout.decode().splitlines() if "│" in line]
    head = [[c.strip() for c in line.split("┃")[1:-1]] for line in table.stdout.decode().splitlines() if "┃" in line]
    assert (head, cells) == (
        [["s\\x1b[1m", "tgt"]],
        [["\\x1b]0;PWNED-TITLE\\x07 sun", "\\x1b[2J moon"], ["abc\\u202edef", "x\\u2066y\\x9bz\\x7f"]],
    )
    assert why.returncode == 0, why.stderr
    assert why.stdout.decode().splitlines()[1:3] == ["  src: \\x1b]0;PWNED-TITLE\\x07 sun", "  tgt: \\x1b[2J moon"]
    assert runs.stdout.decode().splitlines()[1].split()[0:3] == ["ing-x", "ingest", "p\\u202egnp.yaml"]
    assert runs.stdout.decode().splitlines()[1].endswith("error: ValueError: \\x1b]0;PWNED\\x07 at \\x1b[2J")
    assert refused(error).startswith("error: query failed: Catalog Error: Table with name \\x1b]0;t\\x07 does not exist")


# -- defect 10: TSV for trainers, CSV as RFC 4180 -------------------------------------------------------------------


def test_tsv_is_raw_lines_cut_f_reads_back_and_a_tab_or_line_break_is_refused_naming_row_and_column(cache, tmp_path):
    c = ["--cache", str(cache)]
    clean, with_tab, sql_tsv, no_header, header_parquet = augdag(
        tmp_path,
        ["export", "bitext", "-o", "train.tsv", "--where", "line <= 3", *c],
        ["export", "bitext", "-o", "all.tsv", *c],
        ["sql", "SELECT line, NULL AS nothing, tgt FROM bitext WHERE line <= 2 ORDER BY line", "-f", "tsv", *c],
        ["sql", "SELECT 'x' AS a, 1.5 AS b", "-o", "n.tsv", "--no-header", *c],
        ["export", "bitext", "-o", "h.parquet", "--header", *c],
    )
    assert (clean.returncode, clean.stdout) == (0, b"wrote 3 row(s) to train.tsv\n"), clean.stderr
    data = (tmp_path / "train.tsv").read_bytes()
    assert data.decode().splitlines()[0].split("\t")[1:3] == [PAIRS[0][0], PAIRS[0][1]]  # no header, no quotes
    assert [line.split("\t")[1:3] for line in data.decode().split("\n")[:-1]] == [list(p) for p in PAIRS[:3]]
    for i, name in ((2, "src"), (3, "tgt")):  # uid, src, tgt, source, line
        cut = subprocess.run(["cut", "-f", str(i), "train.tsv"], cwd=tmp_path, capture_output=True, check=True)
        assert cut.stdout.decode().split("\n")[:-1] == [p[i - 2] for p in PAIRS[:3]], name
    assert refused(with_tab) == (
        "error: row 4 (source news, line 4), column 'src': holds a tab; TSV is written raw, without quoting, so the row "
        "would split. Hint: --format csv or jsonl (they quote), or replace it in the query"
    )
    assert not (tmp_path / "all.tsv").exists() and [p.name for p in tmp_path.glob(".all.tsv*")] == []
    assert (sql_tsv.returncode, sql_tsv.stdout) == (
        0,
        b'line\tnothing\ttgt\n1\t\tHe said "hi", then left.\n2\t\t\x1b[2J moon\n',  # sql: a header; NULL empty
    )
    assert (tmp_path / "n.tsv").read_bytes() == b"x\t1.5\n"
    assert refused(header_parquet) == "error: --header is for csv and tsv, not parquet"


def test_csv_is_rfc_4180_and_reads_back_equal_through_csv_and_pandas(cache, tmp_path):
    (done,) = augdag(tmp_path, ["export", "bitext", "-o", "all.csv", "--cache", str(cache)])
    assert (done.returncode, done.stdout) == (0, b"wrote 5 row(s) to all.csv\n"), done.stderr
    with open(tmp_path / "all.csv", encoding="utf-8", newline="") as f:  # newline="": as the csv module asks
        text = f.read()
    rows = [[r["src"], r["tgt"], r["source"], str(r["line"])] for r in bitext(PAIRS, source="news").to_pylist()]
    read = list(csv.reader(io.StringIO(text)))
    assert read[0] == ["uid", "src", "tgt", "source", "line"] and [r[1:] for r in read[1:]] == rows
    frame = pd.read_csv(tmp_path / "all.csv", keep_default_na=False, dtype=str)
    assert frame[["src", "tgt", "source", "line"]].values.tolist() == rows
