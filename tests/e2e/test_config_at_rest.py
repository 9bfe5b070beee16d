"""What a run stores of its profile and inputs (issue 48), each through `augdag` as a user runs it:

- defect 4: a secret from the environment, in a dataset's directory and in an endpoint, is in no byte under the
  cache (files, Parquet rows, catalog rows) nor in the Prefect server's database; what is stored is ``${VAR}``;
- defect 5: a cache and its data copied (`cp -a`) to new directories, the profile pointed there: `run ingest`
  computes no shard, and every view reads the same;
- defect 7: a YAML alias bomb is one line and exit 2, under a memory limit it would otherwise break;
- "Also": the inputs outside the profile's directory and the cache are named in one summary line.
"""

from __future__ import annotations

import json
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from conf.loader import MAX_VALUES
from demo.writer import write_demo
from tests.conftest import augdag, catalog_rows, subprocess_env

MARKER = "Mk48-secret-b7e2c91f"  # the secret: a directory's name and a password in an endpoint
PROFILE = """\
datasets:
  pairs:
    kind: bitext
    format: text
    src: {src}/train.en
    tgt: {tgt}/train.de
  sentences:
    kind: mono
    format: text
    path: {src}/mono.en
task_runner:
  kind: threads
  address: tcp://augdag:${{SCHEDULER_PASSWORD}}@scheduler:8786
"""
VIEWS = {"bitext": "src, tgt", "mono": "text", "rejects": "source, file, line, reason, detail, content"}


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One `run ingest` over a profile whose data directory and endpoint come from the environment."""
    root = tmp_path_factory.mktemp("at-rest")
    data = root / MARKER / "data"
    write_demo(data, bitext_rows=120, mono_rows=60, labeled_rows=10, slots_rows=10, test_rows=10)
    for name, bad in (("train.en", b"a pair with no target\n"), ("train.de", b" \n"), ("mono.en", b"bad \xff byte\n")):
        with open(data / name, "ab") as f:  # a reject from each file, after the demo's own (one in train.en)
            f.write(bad)
    (root / "profiles").mkdir()
    (root / "profiles" / "p.yaml").write_text(PROFILE.format(src="${DATA_DIR}", tgt="${DATA_DIR}"))
    done = augdag(
        root,
        *("run", "ingest", "--config", "profiles/p.yaml", "--cache", str(root / "cache")),
        DATA_DIR=str(data),
        SCHEDULER_PASSWORD=MARKER,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root, done


def _holders(directory: Path, marker: str) -> list[str]:
    """Files under ``directory`` whose bytes, Parquet rows or DuckDB rows hold ``marker``."""
    found = []
    for f in sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.endswith(".lock")):
        texts = [f.read_bytes().decode("latin-1")]
        if f.suffix == ".parquet":
            texts.append(json.dumps(pq.read_table(f).to_pylist(), default=str))
        if f.suffix == ".duckdb":
            with duckdb.connect(str(f), read_only=True) as con:
                tables = "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
                for (table,) in con.execute(tables).fetchall():
                    texts.append(json.dumps(con.execute(f'SELECT * FROM "{table}"').fetchall(), default=str))
        if any(marker in t for t in texts):
            found.append(str(f.relative_to(directory)))
    return found


def test_no_secret_is_at_rest_in_the_cache_nor_the_prefect_database(night):
    root, _ = night
    assert (root / "prefect-home" / "prefect.db").is_file()  # the run's Prefect server kept its flow run here
    assert _holders(root / "cache", MARKER) == []
    assert _holders(root / "prefect-home", MARKER) == []
    with sqlite3.connect(root / "prefect-home" / "prefect.db") as db:  # what the UI shows of the flow run
        (parameters,) = db.execute("SELECT parameters FROM flow_run WHERE name IS NOT NULL").fetchone()
    assert json.loads(parameters)["conf"]["task_runner"]["address"] == "tcp://augdag:${SCHEDULER_PASSWORD}@scheduler:8786"
    (config,) = catalog_rows(root / "cache", "SELECT config FROM runs")
    stored = json.loads(config["config"])
    assert (stored["datasets"]["pairs"]["src"], stored["task_runner"]["address"]) == (
        "${DATA_DIR}/train.en",
        "tcp://augdag:${SCHEDULER_PASSWORD}@scheduler:8786",
    )


def test_the_inputs_outside_the_profile_directory_and_the_cache_are_one_summary_line(night):
    root, done = night
    lines = [line for line in done.stdout.splitlines() if line.startswith("ingest read inputs outside")]
    assert lines == [
        f"ingest read inputs outside {root / 'profiles'} and {root / 'cache'}: "
        "pairs ${DATA_DIR}/train.en, ${DATA_DIR}/train.de; sentences ${DATA_DIR}/mono.en"
    ]


def test_a_copied_cache_and_data_directory_compute_nothing_and_read_the_same(night, tmp_path):
    root, _ = night
    shutil.copytree(root / MARKER / "data", tmp_path / "moved-data", symlinks=True, copy_function=shutil.copy2)
    subprocess.run(["cp", "-a", str(root / "cache"), str(tmp_path / "moved-cache")], check=True)
    (tmp_path / "p.yaml").write_text(PROFILE.format(src=tmp_path / "moved-data", tgt=tmp_path / "moved-data"))
    done = augdag(
        tmp_path, "run", "ingest", "--config", "p.yaml", "--cache", str(tmp_path / "moved-cache"), SCHEDULER_PASSWORD="x"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "shards: 0 computed, 6 cached of 6;" in done.stdout
    for view, columns in VIEWS.items():
        sql = f"SELECT {columns} FROM {view} ORDER BY ALL"
        assert catalog_rows(tmp_path / "moved-cache", sql) == catalog_rows(root / "cache", sql), view
    rejects = catalog_rows(root / "cache", "SELECT source, file, line, reason FROM rejects ORDER BY ALL")
    pairs, sentences = (len((root / MARKER / "data" / f).read_bytes().splitlines()) for f in ("train.de", "mono.en"))
    assert [tuple(r.values()) for r in rejects] == [  # a reject names its file, not its directory
        ("pairs", "train.de", pairs, "empty"),
        ("pairs", "train.en", 108, "empty"),
        ("sentences", "mono.en", sentences, "invalid_utf8"),
    ]


def test_an_alias_bomb_is_one_line_exit_2_within_a_memory_limit(tmp_path):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10**9 values
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(levels) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "ingest", "--config", str(path), "--cache", str(tmp_path / "c")],
        env=subprocess_env(tmp_path, COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=1200,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)),  # a loader that expands it dies
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: {path}:1: a4.7.8.8...: its aliases (*name) expand to more than {MAX_VALUES:,} values; refused (a "
        "profile holds a few hundred). Hint: write the repeated settings out, or use fewer aliases\n"
    )
