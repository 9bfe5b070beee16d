"""A fingerprint names its bytes and a crash costs only what was missing (issue 25), in `make test-e2e` (2.5 min
of one worker, too long for `make test`'s 10 minutes; moved there in issue 48): `augdag nightly` of the demo profile
at demo/tiny.py's sizes (every pipeline at once), started as the session starts beside the session's tiny `augdag
demo` (the same configuration and data, a cache of its own), is killed with SIGKILL of its process group while its
pipelines run and finished with `augdag retry`; every Parquet file and every score then equals the uninterrupted
demo's. Two nights side by side, one of them crashed and resumed: what runs beside a stage never changes its bytes.
(The same night served as a deployment: tests/e2e/test_served.py.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from demo.tiny import TINY_SETS
from storage.catalog import Catalog
from storage.processes import group_members
from tests import shared_demo
from tests.conftest import augdag, free_port, subprocess_env
from tests.engine.test_determinism import parquet_hashes

pytestmark = [pytest.mark.slow, pytest.mark.tiny_demo_run]

KILL_AFTER = "eda"  # killed as its first EPiDA round's candidates commit: most pipelines run then


def flow_run_states(url: str, ids: list[str]) -> dict[str, str]:
    """Each flow run's state name, as the Prefect server has it."""
    r = httpx.post(f"{url}/flow_runs/filter", json={"flow_runs": {"id": {"any_": ids}}}, timeout=60)
    r.raise_for_status()
    return {run["id"]: run["state"]["name"] for run in r.json()}


def scores(cache: Path) -> list[dict]:
    """Every distinct score: a model evaluated again by a retry records its row again (the same score; a different
    one would show as a second row)."""
    return (
        Catalog(cache)
        .query(
            "SELECT DISTINCT model_name, arm, testset, metric, seed, score, signature, sentences FROM evaluations ORDER BY ALL"
        )
        .to_pylist()
    )


def kill_at_the_first_manifest_of(stage: str, cmd: list[str], cache: Path, env: dict, log: Path) -> tuple[int, set[str]]:
    """Run ``cmd`` in a process group of its own, stop it (SIGSTOP: every thread at once) when ``stage``'s first
    manifest is written, then SIGKILL the group: (its pid, the fingerprints of every artifact and model committed)."""

    def committed() -> set[str]:
        finished = {p.parent.name for p in (cache / "artifacts").glob("*/*/manifest.json")}
        return finished | {p.parent.name for p in (cache / "models").glob("*/*/*") if not p.name.startswith(".")}

    return kill_when(
        lambda: any((cache / "artifacts" / stage).glob("*/manifest.json")), f"no {stage} manifest", cmd, env, log, committed
    )


def kill_when(
    ready: Callable[[], bool], missing: str, cmd: list[str], env: dict, log: Path, committed: Callable[[], set[str]]
) -> tuple[int, set[str]]:
    """Run ``cmd`` in a process group of its own until ``ready()``, stop it (SIGSTOP: every thread at once), note
    ``committed()``, SIGKILL the group and wait until no process of it is left: (its pid, what was committed). The
    command ending first fails the test with ``missing`` and its output."""
    with open(log, "w+") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=log.parent, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while not ready():
                if proc.poll() is not None or time.monotonic() > deadline:
                    out.seek(0)
                    pytest.fail(f"{missing} (exit code {proc.returncode}):\n{out.read()[-4000:]}")
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGSTOP)
            time.sleep(0.5)
            done = committed()
            os.killpg(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=60) == -signal.SIGKILL
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    deadline = time.monotonic() + 30
    while group_members(proc.pid):
        assert time.monotonic() < deadline, f"the killed group {proc.pid} is still there"
        time.sleep(0.2)
    return proc.pid, done


def test_a_night_killed_with_sigkill_and_retried_gives_the_uninterrupted_demos_bytes(prefect_harness, tiny_demo_root, tmp_path):
    """`augdag runs` shows the killed runs crashed (Prefect still thinks them running), `augdag retry` finishes the
    night computing only what no manifest had finished and tells Prefect of the crash, and every Parquet file and
    every score equals the tiny demo's."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()  # the session harness's server: no temporary one per subprocess
    demo_cache, cache = tiny_demo_root / "cache", tmp_path / "cache"
    data = {"AUGDAG_DEMO_DATA": str(demo_cache / "demo-data")}  # the demo's: a dataset's path is part of its fingerprint
    cmd = [sys.executable, "-m", "flows.cli", "nightly", "--config", "demo", *(a for s in TINY_SETS for a in ("--set", s))]
    env = subprocess_env(tmp_path, COLUMNS="200", PREFECT_API_URL=url, **data)
    pid, committed = kill_at_the_first_manifest_of(KILL_AFTER, [*cmd, "--cache", str(cache)], cache, env, tmp_path / "killed.out")

    # `augdag runs` (with an API that does not answer) shows the killed runs crashed; Prefect is not told yet
    listed = augdag(tmp_path, "runs", "--cache", str(cache), PREFECT_API_URL=f"http://127.0.0.1:{free_port()}/api")
    assert listed.returncode == 0, listed.stderr[-3000:]
    crashed = (
        Catalog(cache)
        .query(
            "SELECT run_id, pipeline, flow_run_id, json_extract_string(summary, '$.error') AS error, crash_reported "
            "FROM runs WHERE status = 'crashed' ORDER BY run_id"
        )
        .to_pylist()
    )
    assert Catalog(cache).query("SELECT count(*) FILTER (status = 'running') FROM runs").column(0).to_pylist() == [0]
    assert "nightly" in {r["pipeline"] for r in crashed} and len(crashed) >= 2
    assert {r["error"] for r in crashed} == {f"process {pid} on {socket.gethostname()} is gone"}
    assert all(r["run_id"] in listed.stdout for r in crashed) and "crashed" in listed.stdout
    states = flow_run_states(url, [r["flow_run_id"] for r in crashed])
    assert set(states.values()) == {"Running"} and not any(r["crash_reported"] for r in crashed)

    # `augdag retry` of the nightly run finishes it; Prefect is told of the crash
    nightly = next(r["run_id"] for r in crashed if r["pipeline"] == "nightly")
    retried = augdag(tmp_path, "retry", nightly, "--cache", str(cache), PREFECT_API_URL=url, **data)
    assert retried.returncode == 0, retried.stdout[-3000:] + retried.stderr[-3000:]
    assert set(flow_run_states(url, [r["flow_run_id"] for r in crashed]).values()) == {"Crashed"}
    assert Catalog(cache).query("SELECT bool_and(crash_reported) FROM runs WHERE status = 'crashed'").column(0)[0].as_py()

    # only what no manifest had finished was computed again
    (last,) = (
        Catalog(cache).query("SELECT summary FROM runs WHERE pipeline = 'nightly' AND status = 'completed'").column(0).to_pylist()
    )
    stages = [s for p in json.loads(last)["pipelines"] for s in p["stages"]]
    before = [s for s in stages if s["fingerprint"] in committed]
    assert {s["kind"] for s in before} == {"artifact", "model"} and {s["status"] for s in before} == {"cached"}
    assert any(s["status"] == "computed" for s in stages)

    # the same bytes and scores as the uninterrupted demo beside it
    demo = shared_demo.wait(tiny_demo_root)
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-4000:]
    demo_hashes, hashes = parquet_hashes(demo_cache), parquet_hashes(cache)
    assert len(hashes) > 100 and hashes.keys() == demo_hashes.keys()
    assert [path for path in hashes if hashes[path] != demo_hashes[path]] == []
    assert len(scores(cache)) >= 8 and scores(cache) == scores(demo_cache)
