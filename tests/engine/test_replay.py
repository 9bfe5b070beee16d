"""A fully cached run is replayed without Prefect (flows/engine/replay.py, issue 25): recorded like any run, and a run
with a stage to compute goes to Prefect leaving no trace of the replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from storage.catalog import Catalog
from tests.conftest import subprocess_env
from tests.engine.test_nightly import write_profile

runner = CliRunner()


def runs(cache: Path) -> list[dict]:
    return Catalog(cache).query("SELECT run_id, pipeline, status, flow_run_id, summary FROM runs ORDER BY started_at").to_pylist()


def shard_statuses(cache: Path, run_id: str) -> dict[str, int]:
    rows = (
        Catalog(cache)
        .query("SELECT status, count(*) AS n FROM stage_runs WHERE run_id = $r GROUP BY status", {"r": run_id})
        .to_pylist()
    )
    return {r["status"]: r["n"] for r in rows}


def test_a_cached_run_is_replayed_and_recorded_and_a_changed_one_goes_to_prefect(prefect_harness, tmp_path):
    profile, cache = write_profile(tmp_path), tmp_path / "cache"
    args = ["run", "ingest", "--config", str(profile), "--cache", str(cache)]
    for _ in range(2):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    first, second = runs(cache)
    assert first["flow_run_id"] is not None and second["flow_run_id"] is None  # the second never reached Prefect
    assert (first["status"], second["status"]) == ("completed", "completed")
    assert shard_statuses(cache, second["run_id"]) == {"cached": 2 * (3 + 1 + 3)}  # read, duplicates, clean x 2 sets
    stages = json.loads(second["summary"])["stages"]
    assert len(stages) == 6 and {s["status"] for s in stages} == {"cached"}
    assert (cache / "logs" / f"{second['run_id']}.log").is_file()

    with (tmp_path / "b.en").open("a") as f, (tmp_path / "b.de").open("a") as g:  # a changed input: not cached
        f.write("hello b world new\n")
        g.write("hallo b welt neu\n")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(recorded := runs(cache)) == 3  # the replay that found b changed left no run behind
    third = recorded[-1]
    assert third["flow_run_id"] is not None and third["status"] == "completed"
    assert shard_statuses(cache, third["run_id"])["computed"] > 0
    assert sorted(p.stem for p in (cache / "logs").glob("*.log")) == sorted(r["run_id"] for r in recorded)


def test_a_cached_nightly_replays_its_pipelines(prefect_harness, tmp_path):
    profile, cache = write_profile(tmp_path), tmp_path / "cache"
    args = ["nightly", "--config", str(profile), "--cache", str(cache)]
    assert runner.invoke(app, args).exit_code == 0
    before = len(runs(cache))
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    night, child = runs(cache)[before:]
    assert (night["pipeline"], child["pipeline"]) == ("nightly", "ingest")
    assert night["flow_run_id"] is None and child["flow_run_id"] is None
    assert json.loads(night["summary"])["totals"]["shards_computed"] == 0
    assert "shards: 0 computed, 14 cached of 14" in result.output

    # as a user runs it, a process of its own: the replayed night never imports Prefect (~1.5 s of its start)
    script = (
        "import runpy, sys\nsys.argv = ['augdag', *sys.argv[1:]]\ntry:\n"
        "    runpy.run_module('flows.cli', run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\n"
        "print('exit', code, 'prefect imported:', any(m.split('.')[0] == 'prefect' for m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], env=subprocess_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.splitlines()[-1] == "exit 0 prefect imported: False", proc.stdout + proc.stderr
    assert len(runs(cache)) == before + 4 and runs(cache)[-2]["flow_run_id"] is None


def test_a_figure_drawn_before_is_read_back_and_other_data_is_drawn(tmp_path, monkeypatch):
    from matplotlib import pyplot as plt

    from flows.reports import plots as report

    token = report.FIGURE_MEMO.set(tmp_path / "figures")
    try:
        png = report.bar_figure(["a", "b"], [1.0, 2.0], xlabel="x", ylabel="y", title="t")
        assert png.startswith(b"\x89PNG") and len(list((tmp_path / "figures").glob("*.png"))) == 1

        def no_drawing(*args, **kwargs):
            raise RuntimeError("drawn again")

        monkeypatch.setattr(plt, "subplots", no_drawing)
        assert report.bar_figure(["a", "b"], [1.0, 2.0], xlabel="x", ylabel="y", title="t") == png  # read back
        with pytest.raises(RuntimeError, match="drawn again"):  # other values: another figure
            report.bar_figure(["a", "b"], [1.0, 3.0], xlabel="x", ylabel="y", title="t")
    finally:
        report.FIGURE_MEMO.reset(token)
