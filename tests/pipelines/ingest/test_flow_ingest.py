"""The ingest pipeline end to end under Prefect: row accounting, caching, crash and resume, concurrency."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conf.loader import load_profile
from demo import write_demo
from storage.catalog import Catalog
from tests.conftest import REPO, harness_url, subprocess_env

pytestmark = pytest.mark.slow
AUGDAG = [sys.executable, "-m", "flows.cli"]


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo-data")
    paths, bad = write_demo(root, seed=3, bitext_rows=3000, mono_rows=1000, labeled_rows=600, slots_rows=600)
    return paths, bad


def _conf(cache: Path, data: Path, *sets: str):
    profile = REPO / "conf" / "demo.yaml"
    return load_profile(profile, [*sets, "shard_size=500"], cache=cache, environ={"AUGDAG_DEMO_DATA": str(data)})


def _parts(cache: Path) -> dict[str, str]:
    """sha256 of every committed Parquet part under the cache, by path relative to it."""
    return {
        str(p.relative_to(cache)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((cache / "artifacts").rglob("*.parquet"))
    }


def _ingest(conf):
    from flows.pipelines.ingest import ingest_flow

    return ingest_flow(conf, profile="test")


@pytest.fixture(scope="module")
def first(prefect_harness, demo_data, tmp_path_factory):
    """One fault-free ingest of the demo data, shared: its cache, its summary and the sha256 of its parts as that
    run wrote them (the reference of the crash test, taken before any test touches the cache)."""
    cache = tmp_path_factory.mktemp("first")
    summary = _ingest(_conf(cache, demo_data[0].root))
    return cache, summary, _parts(cache)


def test_ingest_flow_accounts_for_every_input_row(first, demo_data):
    paths, bad = demo_data
    tmp_path, summary, _ = first
    stages = {(s["stage"], s["dataset"]): s for s in summary["stages"]}
    lines = {
        "demo_bitext": 3000,
        "demo_test": 300,
        "demo_mono": 1000,
        "demo_labeled": 600,
        "demo_labeled_test": 300,
        "demo_slots": 600,
        "demo_slots_small": 150,  # demo/slots_small.py: SMALL_SLOTS_ROWS
        "demo_slots_small_test": 300,
    }
    planted = {
        "demo_bitext": "train.en",
        "demo_test": "test.en",
        "demo_mono": "mono.en",
        "demo_labeled": "labeled.tsv",
        "demo_labeled_test": "labeled_test.tsv",
        "demo_slots": "slots.jsonl",
        "demo_slots_small": "slots_small.jsonl",
        "demo_slots_small_test": "slots_small_test.jsonl",
    }
    cat = Catalog(tmp_path)
    for ds, n in lines.items():
        read, clean = stages[("read", ds)]["rows_out"], stages[("clean", ds)]["rows_out"]
        assert read["part"] + read.get("rejects", 0) == n  # input rows = kept + rejected, always
        assert clean["part"] + clean.get("dropped", 0) == read["part"]
        rejected = cat.query("SELECT line FROM rejects WHERE source = $s ORDER BY line", {"s": ds})["line"].to_pylist()
        assert rejected == sorted(bad.get(planted[ds], []))  # the held-out test set is clean
    assert stages[("read", "demo_bitext")]["shards"] == 6
    views = cat.query(
        "SELECT (SELECT count(*) FROM bitext) b, (SELECT count(*) FROM mono) m, (SELECT count(*) FROM labeled) l, "
        "(SELECT count(*) FROM slots) s, (SELECT count(*) FROM heldout_bitext) hb, "
        "(SELECT count(*) FROM heldout_labeled) hl, (SELECT count(*) FROM heldout_slots) hs"
    ).to_pylist()[0]
    kept = {ds: stages[("clean", ds)]["rows_out"]["part"] for ds in lines}
    assert views == {  # the held-out sets in their own views, never in the ones training reads (issue 47)
        "b": kept["demo_bitext"],
        "m": kept["demo_mono"],
        "l": kept["demo_labeled"],
        "s": kept["demo_slots"] + kept["demo_slots_small"],
        "hb": kept["demo_test"],
        "hl": kept["demo_labeled_test"],
        "hs": kept["demo_slots_small_test"],
    }
    # no duplicate survives in a cleaned dataset, a held-out one keeps every valid row (issue 26), and every kept
    # row traces back to its input line
    assert cat.query("SELECT count(*) - count(DISTINCT uid) AS d FROM bitext WHERE source = 'demo_bitext'").to_pylist() == [
        {"d": 0}
    ]
    for ds in ("demo_test", "demo_labeled_test", "demo_slots_small_test"):
        assert stages[("clean", ds)]["rows_out"]["part"] == stages[("read", ds)]["rows_out"]["part"]
        assert ("duplicates", ds) not in stages
    src = paths.train_src.read_bytes().split(b"\n")
    for row in cat.query(
        "SELECT src, line FROM bitext WHERE source = 'demo_bitext' USING SAMPLE 20 ROWS (reservoir, 1)"
    ).to_pylist():
        assert src[row["line"] - 1].decode() == row["src"]


def test_cached_rerun_registers_no_new_artifacts_and_param_change_recomputes_downstream_only(
    prefect_harness, demo_data, tmp_path
):
    paths, _ = demo_data
    first = _ingest(_conf(tmp_path, paths.root))
    cat = Catalog(tmp_path)
    n_artifacts = cat.query("SELECT count(*) AS n FROM artifacts").to_pylist()[0]["n"]
    before = _parts(tmp_path)
    again = _ingest(_conf(tmp_path, paths.root))
    assert {s["status"] for s in again["stages"]} == {"cached"}
    assert [s["fingerprint"] for s in again["stages"]] == [s["fingerprint"] for s in first["stages"]]
    # 8 datasets × read, clean + 5 cleaned × duplicates + the demo bitext's filter_chain and across_datasets (its
    # near_duplicates and decontaminate: tasks/ingest/across.py)
    assert cat.query("SELECT count(*) AS n FROM artifacts").to_pylist()[0]["n"] == n_artifacts == 23
    assert _parts(tmp_path) == before
    shards = cat.query(
        "SELECT status, count(*) AS n FROM stage_runs WHERE run_id = $r GROUP BY status", {"r": again["run_id"]}
    ).to_pylist()
    assert shards == [{"status": "cached", "n": sum(s["shards"] for s in first["stages"])}]
    # the demo bitext sets its own max_ratio (conf/demo.yaml): changed there too
    changed = _ingest(_conf(tmp_path, paths.root, "ingest.clean.max_ratio=3", "datasets.demo_bitext.clean.max_ratio=3"))
    status = {(s["stage"], s["dataset"]): s["status"] for s in changed["stages"]}
    assert status[("read", "demo_bitext")] == status[("duplicates", "demo_bitext")] == "cached"
    assert status[("clean", "demo_bitext")] == "computed"
    assert cat.query("SELECT count(*) AS n FROM artifacts").to_pylist()[0]["n"] == 30  # + a new clean artifact per
    # cleaned dataset (a held-out one is not cleaned: max_ratio is not in its fingerprint), and the demo bitext's new
    # filter_chain and across_datasets
    assert cat.query("SELECT count(*) AS n FROM bitext WHERE source = 'demo_bitext'").to_pylist()[0]["n"] == next(
        s["rows_out"]["part"] for s in changed["stages"] if s["stage"] == "clean" and s["dataset"] == "demo_bitext"
    )


def test_deleted_part_is_recomputed_alone_and_identically(first, demo_data):
    """On the shared first ingest's cache: the part is written again byte for byte, so the cache ends as it began."""
    paths, _ = demo_data
    cache, summary, _ = first
    conf = _conf(cache, paths.root)
    clean = next(s for s in summary["stages"] if s["stage"] == "clean" and s["dataset"] == "demo_bitext")
    part = cache / "artifacts" / "clean" / clean["fingerprint"] / "part-00002.parquet"
    before = part.read_bytes()
    part.unlink()
    again = _ingest(conf)
    redo = next(s for s in again["stages"] if s["stage"] == "clean" and s["dataset"] == "demo_bitext")
    assert (redo["status"], redo["shards_computed"], redo["shards"]) == ("computed", 1, 6)
    assert part.read_bytes() == before


CRASH = """
import dataclasses, functools, os, sys
import flows.pipelines.ingest as ingest
from tasks.ingest.clean import FILTER_CHAIN, mark_rows
calls = 0
@functools.wraps(mark_rows)  # the stage's parameters are mark_rows's
def mark_then_die(*args, **kwargs):
    global calls
    calls += 1
    if calls > 2:
        os._exit(137)  # the process is killed in the middle of the demo bitext's third filter_chain shard
    return mark_rows(*args, **kwargs)
ingest.FILTER_CHAIN = dataclasses.replace(FILTER_CHAIN, fn=mark_then_die)
from flows.cli import app
app(sys.argv[1:])
"""


def test_crash_mid_stage_resumes_missing_shards_byte_identical(first, demo_data, tmp_path):
    paths, _ = demo_data
    crashed = tmp_path / "crashed"
    args = [
        "run",
        "ingest",
        "--config",
        str(REPO / "conf" / "demo.yaml"),
        "--set",
        "shard_size=500",
        "--set",
        "task_runner.max_workers=1",
        "--cache",
        str(crashed),
    ]
    env = subprocess_env(tmp_path, AUGDAG_DEMO_DATA=str(paths.root), PREFECT_API_URL=harness_url())
    log = tmp_path / "crash.log"
    with open(log, "w") as out:  # not a pipe: what a killed run leaves running would hold it open
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASH, *args],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = proc.wait(timeout=600)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # anything the killed run left behind
    assert returncode == 137, log.read_text()[-3000:]
    # the demo bitext (its filters compare it across datasets) is cleaned last: filter_chain, across_datasets, clean
    chain_dirs = list((crashed / "artifacts" / "filter_chain").iterdir())
    assert len(chain_dirs) == 1
    assert sorted(p.name for p in chain_dirs[0].glob("part-*.parquet")) == ["part-00000.parquet", "part-00001.parquet"]
    assert not (chain_dirs[0] / "manifest.json").exists()
    cat = Catalog(crashed)
    assert cat.query("SELECT count(*) AS n FROM artifacts WHERE stage = 'filter_chain'").to_pylist() == [{"n": 0}]
    visible = cat.query("SELECT count(*) AS n FROM bitext WHERE source = 'demo_bitext'")
    assert visible.to_pylist() == [{"n": 0}]  # nothing unfinished is visible
    resumed = _ingest(_conf(crashed, paths.root, "task_runner.max_workers=1"))
    redo = next(s for s in resumed["stages"] if s["stage"] == "filter_chain" and s["dataset"] == "demo_bitext")
    assert (redo["shards_computed"], redo["shards"]) == (4, 6)
    assert next(s for s in resumed["stages"] if s["stage"] == "read" and s["dataset"] == "demo_bitext")["status"] == "cached"
    assert _parts(crashed) == first[2]  # a fault-free run's parts (the default task runner's), as written


def test_two_concurrent_ingest_runs_on_one_cache_both_succeed(prefect_harness, demo_data, tmp_path):
    paths, _ = demo_data
    cache = tmp_path / "cache"
    env = subprocess_env(tmp_path, AUGDAG_DEMO_DATA=str(paths.root), PREFECT_API_URL=harness_url())
    cmd = [*AUGDAG, "run", "ingest", "--config", "demo", "--cache", str(cache)]
    procs = [
        subprocess.Popen(
            [*cmd, "--set", f"shard_size={size}"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for size in (400, 700)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    cat = Catalog(cache)
    assert cat.query("SELECT count(*) AS n, count(*) FILTER (status = 'completed') AS ok FROM runs").to_pylist() == [
        {"n": 2, "ok": 2}
    ]
    # 2 runs × 23 (8 × read, clean + 5 × duplicates + the demo bitext's filter_chain and across_datasets)
    assert cat.query("SELECT count(*) AS n FROM artifacts").to_pylist() == [{"n": 46}]
    # each run's clean artifacts hold the same rows whatever the shard size
    rows = cat.query("SELECT dataset, count(DISTINCT rows) AS variants FROM artifacts WHERE stage = 'clean' GROUP BY dataset")
    assert set(rows["variants"].to_pylist()) == {1}
    for fp in cat.query("SELECT fingerprint FROM artifacts")["fingerprint"].to_pylist():
        manifest = json.loads((cache / "artifacts").glob(f"*/{fp}/manifest.json").__next__().read_text())
        assert manifest["fingerprint"] == fp
