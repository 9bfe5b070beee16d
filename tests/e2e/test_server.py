"""Against a real local Prefect server (`augdag server`'s code path, on a free port): runs started by
`augdag run` show up with their task runs per stage and shard; after a fault in one shard, `augdag
retry` finishes the run recomputing that shard only; the deployments of prefect.yaml register with
their schedule; and the UI page of a flow run renders in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.catalog import Catalog
from tests.conftest import REPO, apt_install, free_port, subprocess_env
from tests.prefect_rest import csrf_headers

pytestmark = pytest.mark.slow
ARTIFACTS = Path(os.environ.get("AUGDAG_TEST_ARTIFACTS", REPO / "test-artifacts"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`augdag server` for a cache dir: (cache, API URL); the server's SQLite file lives under the cache."""
    from flows.ops.server import forget, start_server, state_dir

    cache = tmp_path_factory.mktemp("served") / "cache"
    loop = "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS"  # the scheduler looks for due runs every 2 s, not 60
    os.environ[loop] = "2"
    try:
        proc, url = start_server(cache, port=free_port(), timeout_s=600, log=tmp_path_factory.getbasetemp() / "server.log")
    finally:
        del os.environ[loop]
    assert (state_dir(cache) / "prefect.db").exists()
    yield cache, url
    proc.terminate()
    proc.wait(timeout=60)
    forget(cache)


def write_profile(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in ("a", "b"):
        (root / f"{name}.en").write_text("".join(f"hello {name} world {i}\n" for i in range(50)))
        (root / f"{name}.de").write_text("".join(f"hallo {name} welt {i}\n" for i in range(50)))
    profile = root / "p.yaml"
    profile.write_text(
        "pipelines: [ingest]\nshard_size: 20\norchestration: {retries: 1, retry_delay_s: 0}\n"
        "datasets:\n  a: {kind: bitext, format: text, src: a.en, tgt: a.de}\n"
        "  b: {kind: bitext, format: text, src: b.en, tgt: b.de}\n"
    )
    return profile


def augdag(tmp_path: Path, *args: str, api: str | None = None) -> subprocess.CompletedProcess:
    env = subprocess_env(tmp_path, COLUMNS="200", **({"PREFECT_API_URL": api} if api else {}))
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def api_post(url: str, path: str, body: dict) -> list[dict]:
    import httpx

    r = httpx.post(f"{url}{path}", json=body, headers=csrf_headers(url), timeout=30)  # the server's CSRF protection
    r.raise_for_status()
    return r.json()


def task_runs(url: str, flow_run_id: str) -> list[tuple[str, str]]:
    """(task run name, state name) of one flow run's task runs, sorted, through the Prefect REST API."""
    rows = api_post(url, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200})
    return sorted((r["name"], r["state"]["name"]) for r in rows)


def recorded(cache: Path, run_id: str | None = None) -> dict:
    q = "SELECT run_id, flow_run_id, status, summary FROM runs " + (
        "WHERE run_id = $r" if run_id else "ORDER BY started_at DESC LIMIT 1"
    )
    return Catalog(cache).query(q, {"r": run_id} if run_id else None).to_pylist()[0]


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    """The two-dataset profile; its relative input paths resolve against its directory, so every run of it
    reads the same absolute paths and its stages have the same fingerprints."""
    return write_profile(tmp_path_factory.mktemp("work"))


@pytest.fixture(scope="module")
def served_run(server, profile):
    """`augdag run ingest` with no PREFECT_API_URL: it finds the cache's server by itself."""
    cache, url = server
    work = profile.parent
    proc = augdag(work, "run", "ingest", "--config", str(profile), "--cache", str(cache))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"reporting to the Prefect server at {url}" in proc.stderr
    return recorded(cache)


def test_a_run_shows_up_with_its_task_runs_per_stage_and_shard(server, served_run):
    _, url = server
    flow_run = api_post(url, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [served_run["flow_run_id"]]}}})[0]
    assert flow_run["state"]["name"] == "Completed"
    # per dataset (50 lines in shards of 20): the reader, 1 shard of `duplicates`, 3 shards of `clean`
    expected = sorted(["read", "duplicates-00000", "clean-00000", "clean-00001", "clean-00002"] * 2)
    assert task_runs(url, served_run["flow_run_id"]) == [(name, "Completed") for name in expected]
    artifacts = api_post(url, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [served_run["flow_run_id"]]}}})
    assert {"ingest-stages", "ingest-summary"} <= {a["key"] for a in artifacts}
    table = next(a for a in artifacts if a["key"] == "ingest-stages")
    assert len(json.loads(table["data"])) == 6  # read, duplicates, clean per dataset
    # one progress artifact per stage of more than one shard (read is a stream: no total), finished at 100 %
    assert sorted(a["data"] for a in artifacts if a["type"] == "progress") == [100.0, 100.0]


def test_retry_recomputes_only_the_failed_shard(server, served_run, profile, tmp_path):
    _, url = server
    cache = tmp_path / "cache"
    # the fault: the path of shard 1's `dropped` output of `clean[a]` is taken by a directory, so committing
    # that shard fails (and so does its retry); the fingerprint is the one the run above computed
    fp = (
        Catalog(server[0])
        .query("SELECT fingerprint FROM artifacts WHERE stage = 'clean' AND dataset = 'a'")
        .column(0)
        .to_pylist()[0]
    )
    blocked = cache / "artifacts" / "clean" / fp / "dropped-00001.parquet"
    (blocked / "in-the-way").parent.mkdir(parents=True)
    (blocked / "in-the-way").write_text("")
    first = augdag(tmp_path, "run", "ingest", "--config", str(profile), "--cache", str(cache), api=url)
    assert first.returncode == 1
    assert "stage 'clean' (dataset a) failed on shard 1 of 3" in " ".join((first.stderr + first.stdout).split())
    failed = recorded(cache)
    assert failed["status"] == "failed"
    assert ("clean-00001", "Failed") in task_runs(url, failed["flow_run_id"])

    shutil.rmtree(blocked)
    second = augdag(tmp_path, "retry", failed["run_id"], "--cache", str(cache), api=url)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    retried = recorded(cache)
    assert retried["run_id"] != failed["run_id"] and retried["status"] == "completed"
    shards = (
        Catalog(cache)
        .query(
            "SELECT stage, dataset, shard, status FROM stage_runs WHERE run_id = $r AND stage = 'clean' ORDER BY ALL",
            {"r": retried["run_id"]},
        )
        .to_pylist()
    )
    computed = [(r["dataset"], r["shard"]) for r in shards if r["status"] == "computed"]
    # dataset b never ran (the flow stopped at a's failure): all of its shards are new; of a, shard 1 only
    assert computed == [("a", 1), ("b", 0), ("b", 1), ("b", 2)]
    # a's finished shards 0 and 2 show as Cached; a's shard 1 and all of b's ran
    assert [s for n, s in task_runs(url, retried["flow_run_id"]) if n.startswith("clean-")] == [
        "Cached",
        "Completed",
        "Completed",
        "Completed",
        "Cached",
        "Completed",
    ]
    # the retried artifact equals a fault-free run's, byte for byte
    clean = Catalog(cache).query("SELECT path FROM artifacts WHERE stage = 'clean' AND dataset = 'a'").column(0)[0]
    reference = Catalog(server[0]).query("SELECT path FROM artifacts WHERE fingerprint = $f", {"f": fp}).column(0)[0]
    for part in sorted((server[0] / reference.as_py()).glob("*.parquet")):  # relative to its cache
        assert (cache / clean.as_py() / part.name).read_bytes() == part.read_bytes(), part.name


def test_prefect_yaml_deploys_the_nightly_with_its_schedule(server, tmp_path):
    cache, url = server
    env = subprocess_env(tmp_path, PREFECT_API_URL=url)
    prefect = str(Path(sys.executable).parent / "prefect")
    pool = subprocess.run(
        [prefect, "work-pool", "create", "augdag", "--type", "process"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert pool.returncode == 0, pool.stdout + pool.stderr
    deployed = augdag(tmp_path, "deploy", "--pool", "augdag", api=url)
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    listed = augdag(tmp_path, "schedules", "--cache", str(cache))
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith("nightly/nightly"))
    assert (
        line.split()[1:7] == ["0", "2", "*", "*", "*", "UTC"] and "active" in line and line.split()[-2:] == ["1", "(CANCEL_NEW)"]
    )
    d = api_post(url, "/deployments/filter", {"deployments": {"name": {"any_": ["nightly"]}}})[0]
    # the scheduler created the coming nights (it cannot with SQLAlchemy 2.1: pyproject pins < 2.1)
    deadline, scheduled = time.monotonic() + 60, []
    while not scheduled and time.monotonic() < deadline:
        time.sleep(1)
        scheduled = api_post(url, "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [d["id"]]}}})
    assert scheduled and {r["state"]["name"] for r in scheduled} == {"Scheduled"}
    assert all(r["expected_start_time"].endswith(("T02:00:00Z", "T02:00:00+00:00")) for r in scheduled)
    paused = augdag(tmp_path, "schedules", "--pause", "nightly", "--cache", str(cache))
    assert paused.returncode == 0, paused.stderr
    assert "paused" in next(line for line in paused.stdout.splitlines() if line.startswith("nightly/nightly"))
    assert d["parameters"] == {"profile": "nightly", "overrides": [], "cache": None}
    assert d["entrypoint"] == "flows/engine/nightly.py:nightly_flow" and d["work_pool_name"] == "augdag"


def chromium() -> str:
    """Debian's chromium, installed when missing (as root with apt); skips with the reason otherwise."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    apt_install("chromium")
    return shutil.which("chromium") or pytest.skip("chromium installed but not on PATH")


def headless(browser: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1400,900",
        "--virtual-time-budget=20000",
    ]
    return subprocess.run([browser, *flags, *args], capture_output=True, text=True, timeout=180, check=False)


def test_the_ui_shows_the_flow_run_in_headless_chromium(server, served_run, tmp_path):
    browser = chromium()
    _, url = server
    flow_run = api_post(url, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [served_run["flow_run_id"]]}}})[0]
    page = f"{url.removesuffix('/api')}/runs/flow-run/{flow_run['id']}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "ui-flow-run.png"
    shot.unlink(missing_ok=True)
    # one load of the page, then both its DOM and its screenshot (headless Chromium runs both commands)
    dom = headless(browser, tmp_path, "--dump-dom", f"--screenshot={shot}", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert flow_run["name"] in dom.stdout and "Completed" in dom.stdout
    assert shot.stat().st_size > 10_000, dom.stderr[-2000:]
    print(f"screenshot: {shot}")
