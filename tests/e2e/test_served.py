"""The nightly as a deployment (issue defects 1, 2 and 12): `augdag serve` of the demo profile and a process
worker running prefect.yaml's deployment complete against a Prefect server on SQLite, a served run
completes against one on PostgreSQL, a served run that fails to load its profile is in the catalog,
`augdag schedules` shows the next run, and the demo profile's data follows the cache, not the working directory.
The demo runs with demo/tiny.py's settings (``TINY``: every pipeline at once): about 45 s per nightly on 2 cores.
(The same night killed with SIGKILL and retried, against the tiny `augdag demo`: tests/e2e/test_killed_night.py.)
`make test-e2e`, as every module of this folder: each starts servers, workers or a full-size demo."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from demo.tiny import TINY_DEMO
from demo.tiny import TINY_SETS as TINY
from storage.catalog import Catalog
from tests.conftest import DEMO_PIPELINES, REPO, apt_install, augdag, free_port, subprocess_env
from tests.prefect_rest import csrf_headers

pytestmark = pytest.mark.slow

PIPELINES = DEMO_PIPELINES
PREFECT = str(Path(sys.executable).parent / "prefect")
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
FAST_POLL = {"PREFECT_RUNNER_POLL_FREQUENCY": "1", "PREFECT_WORKER_QUERY_SECONDS": "1"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`augdag server`'s code path on a free port with SQLite: (cache, API URL)."""
    with prefect_server(tmp_path_factory.mktemp("served") / "cache", tmp_path_factory.getbasetemp()) as running:
        yield running


class prefect_server:
    """A Prefect server for ``cache`` (its state under ``<cache>/server``), on a free loopback port, with
    the scheduler looking for due runs every 2 s; ``database`` a SQLAlchemy URL (default: SQLite)."""

    def __init__(self, cache: Path, logs: Path, database: str | None = None) -> None:
        self.cache, self.logs, self.database = cache, logs, database

    def __enter__(self) -> tuple[Path, str]:
        from flows.ops.server import start_server, state_dir

        extra = {"PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2"}
        if self.database:
            extra["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = self.database
        saved = {k: os.environ.get(k) for k in extra}
        os.environ.update(extra)
        try:
            self.proc, url = start_server(
                self.cache, port=free_port(), timeout_s=600, log=self.logs / f"server-{self.cache.parent.name}.log"
            )
        finally:
            for k, v in saved.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v
        assert (state_dir(self.cache) / "prefect.db").exists() == (self.database is None)  # else all in PostgreSQL
        return self.cache, url

    def __exit__(self, *exc) -> None:
        from flows.ops.lifecycle import stop_group
        from flows.ops.server import forget

        # as start_server stops a server that failed to answer: its group, SIGKILL after 10 s (how a server stops on a
        # signal is tests/e2e/test_lifecycle.py's subject; here `terminate` and a wait took 32 s at the module's end)
        stop_group(self.proc.pid, grace_s=10)
        self.proc.wait(timeout=60)
        forget(self.cache)


def api(url: str, method: str, path: str, body: dict | None = None):
    """One REST call; a 503 (the server's "retry me", e.g. SQLite busy) or a read that times out (the SQLite server
    held by a flow run's writes on a loaded CI machine: CI saw one GET wait > 30 s) is retried, as Prefect's own
    client retries them, for up to three minutes; a timed-out write (create a flow run) is not repeated."""
    reads = method == "GET" or path.endswith("/filter")
    deadline = time.monotonic() + 180
    while True:
        try:
            headers = csrf_headers(url) if method != "GET" else None  # the server's CSRF protection
            r = httpx.request(method, f"{url}{path}", json=body, headers=headers, timeout=30)
        except httpx.TimeoutException:
            if not reads or time.monotonic() > deadline:
                raise
            continue
        if r.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    r.raise_for_status()
    return r.json() if r.content else None


class background:
    """A long-running command (`augdag serve`, `prefect worker start`), output to ``log``; stopped on exit."""

    def __init__(self, cmd: list[str], *, env: dict[str, str], cwd: Path, log: Path, grace_s: float = 60) -> None:
        self.cmd, self.env, self.cwd, self.log, self.grace_s = cmd, env, cwd, log, grace_s

    def __enter__(self) -> background:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.cmd,
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its flow-run subprocesses too
            try:
                self.proc.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def wait_for(what: str, get, *, timeout_s: float, proc: background | None = None):
    """``get()`` once it returns something truthy; fails naming ``what`` (and the process' log) otherwise."""
    deadline = time.monotonic() + timeout_s
    while not (found := get()):
        if proc is not None and proc.proc.poll() is not None:
            pytest.fail(f"{what}: the process exited with {proc.proc.returncode}:\n{proc.output()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s" + (f"\n{proc.output()[-4000:]}" if proc else ""))
        time.sleep(0.5)
    return found


def deployment(url: str, name: str) -> dict | None:
    found = api(url, "POST", "/deployments/filter", {"deployments": {"name": {"any_": [name]}}})
    return found[0] if found else None


def finished(url: str, flow_run_id: str, proc: background, timeout_s: float = 900) -> dict:
    def get():
        run = api(url, "GET", f"/flow_runs/{flow_run_id}")
        return run if run["state"]["type"] in FINAL else None

    return wait_for(f"flow run {flow_run_id}", get, timeout_s=timeout_s, proc=proc)


def serve(cache: Path, cwd: Path, name: str, extra: Sequence[str] = ()) -> background:
    """`augdag serve` of the tiny demo (and the overrides ``extra``) with no PREFECT_API_URL: it finds the
    cache's server itself."""
    sets = [a for s in [*TINY, *extra] for a in ("--set", s)]
    cmd = [sys.executable, "-m", "flows.cli", "serve", "--config", "demo", "--cache", str(cache), "--name", name, *sets]
    # how `augdag serve` stops on SIGTERM is tests/e2e/test_lifecycle.py's subject; here its group gets 5 s before the
    # SIGKILL (the module's teardown waited 32 s for it)
    env = subprocess_env(cwd, COLUMNS="200", **FAST_POLL)
    return background(cmd, env=env, cwd=cwd, log=cwd / f"{name}.log", grace_s=5)


def nightly_record(cache: Path, flow_run_id: str) -> dict:
    rows = (
        Catalog(cache)
        .query(
            "SELECT run_id, status, profile, summary FROM runs WHERE pipeline = 'nightly' AND flow_run_id = $f",
            {"f": flow_run_id},
        )
        .to_pylist()
    )
    assert len(rows) == 1, rows
    return {**rows[0], "summary": json.loads(rows[0]["summary"])}


def assert_every_pipeline_completed(cache: Path, flow_run_id: str) -> dict:
    """The nightly run of ``flow_run_id`` completed, each pipeline with its outputs in the catalog's views."""
    run = nightly_record(cache, flow_run_id)
    children = run["summary"]["pipelines"]
    assert (run["status"], run["profile"]) == ("completed", "demo")
    assert [(c["pipeline"], c["status"]) for c in children] == [(p, "completed") for p in PIPELINES]
    ids = [c["run_id"] for c in children]
    status = (
        Catalog(cache)
        .query("SELECT pipeline, status FROM runs WHERE run_id IN (SELECT unnest($ids)) ORDER BY started_at", {"ids": ids})
        .to_pylist()
    )
    assert sorted((r["pipeline"], r["status"]) for r in status) == sorted((p, "completed") for p in PIPELINES)
    found = (
        Catalog(cache)
        .query(
            "SELECT (SELECT count(*) FROM bitext WHERE source = 'demo_bitext') AS bitext, (SELECT rows FROM artifacts "
            "WHERE stage = 'clean' AND dataset = 'demo_bitext' LIMIT 1) AS clean_rows, "
            "(SELECT count(*) FROM mono WHERE source = 'demo_mono') AS mono, (SELECT count(*) FROM sampled_mono) AS sampled, "
            "(SELECT count(*) FROM synthetic) AS synthetic, (SELECT count(*) FROM inactive) AS inactive, "
            "(SELECT count(*) FROM pair_scores WHERE prob IS NOT NULL) AS scored, "
            "(SELECT count(*) FROM rejuvenated WHERE origin = 'rejuvenated') AS rejuvenated, "
            "(SELECT count(*) FROM labeled WHERE source = 'demo_labeled') AS labeled, "
            "(SELECT count(*) FROM curriculum WHERE level = 0) AS originals, "
            "(SELECT count(*) FROM curriculum WHERE level > 0) AS paraphrases, "
            "(SELECT count(*) FROM robust_bitext) AS robust, (SELECT count(*) FROM robust_bitext WHERE parent_uid NOT IN "
            "(SELECT uid FROM bitext WHERE source = 'demo_bitext')) AS orphans, "
            "(SELECT list(DISTINCT metric ORDER BY metric) FROM evaluations) AS metrics"
        )
        .to_pylist()[0]
    )
    assert found["bitext"] == found["clean_rows"] > 0  # ingest
    assert found["sampled"] == int(0.2 * found["mono"]) and 0 < found["synthetic"] <= found["sampled"]  # self_training
    assert found["inactive"] == found["rejuvenated"] == int(0.1 * found["scored"]) > 0  # rejuvenation
    assert found["originals"] == found["labeled"] and found["paraphrases"] == 2 * found["labeled"]  # paraphrase, β = 0
    assert found["robust"] > 0 and found["orphans"] == 0  # robustness: every row traces to a pair of the bitext
    # train_nmt, train_classifier, train_slot_tagger
    assert found["metrics"] == ["BLEU", "accuracy", "chrF", "f1", "macro_f1", "precision", "recall"]
    return run


@contextlib.contextmanager
def served_nightly(
    cache: Path, url: str, cwd: Path, name: str, extra: Sequence[str] = ()
) -> Iterator[tuple[str, float, background]]:
    """Serve the tiny demo as deployment ``nightly/<name>`` and run it with the command `augdag serve` prints
    (no PREFECT_API_URL in the environment): (flow run id, seconds to Completed, the serve process)."""
    with serve(cache, cwd, name, extra) as served:
        wait_for(f"deployment {name}", lambda: deployment(url, name), timeout_s=300, proc=served)
        hint = served.output().split("Run it now:\n", 1)[1].splitlines()[0].strip()
        assert hint == f"PREFECT_API_URL={url} {PREFECT} deployment run nightly/{name}"
        env = {k: v for k, v in subprocess_env(cwd).items() if k != "PREFECT_API_URL"}
        t0 = time.monotonic()
        started = subprocess.run(hint, shell=True, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stdout + started.stderr
        flow_run_id = next(line.split("UUID:")[1].strip() for line in started.stdout.splitlines() if "UUID:" in line)
        run = finished(url, flow_run_id, served)
        assert run["state"]["type"] == "COMPLETED", served.output()[-4000:]
        yield flow_run_id, time.monotonic() - t0, served


def assert_subflows_completed(url: str, run: dict) -> None:
    """Every pipeline's flow run, as the catalog recorded it, is a Completed subflow run on the server."""
    for child in run["summary"]["pipelines"]:
        flow_run_id = (
            Catalog(Path(run["summary"]["cache"]))
            .query("SELECT flow_run_id FROM runs WHERE run_id = $r", {"r": child["run_id"]})
            .column(0)[0]
            .as_py()
        )
        flow_run = api(url, "GET", f"/flow_runs/{flow_run_id}")
        assert (flow_run["state"]["type"], flow_run["parent_task_run_id"] is not None) == ("COMPLETED", True)


@pytest.fixture(scope="module")
def served(server, tmp_path_factory):
    """The tiny demo served as `nightly/served` from a fresh cache (the server's), and its first run."""
    cache, url = server
    cwd = tmp_path_factory.mktemp("serve-cwd")
    with served_nightly(cache, url, cwd, "served") as (flow_run_id, seconds, proc):
        print(f"\nserved nightly: {seconds:.0f} s from `prefect deployment run` to Completed")
        yield SimpleNamespace(cache=cache, url=url, flow_run_id=flow_run_id, proc=proc)


def test_the_served_nightly_of_the_demo_completes_with_no_prior_demo(served):
    assert_subflows_completed(served.url, assert_every_pipeline_completed(served.cache, served.flow_run_id))
    # no `augdag demo` before: the run wrote the demo data under the cache, with the sizes of its overrides
    assert json.loads((served.cache / "demo-data" / "demo.json").read_text()) == TINY_DEMO
    # the deployment records the resolved cache and data directory
    d = deployment(served.url, "served")
    assert d["parameters"] == {"profile": "demo", "overrides": TINY, "cache": str(served.cache)}
    assert d["description"] == f"augdag nightly run of profile 'demo'; cache {served.cache}; data in {served.cache}/demo-data"


@pytest.mark.parametrize(
    "override, error",
    [
        ("shard_size=0", "--set shard_size=0: shard_size: Input should be greater than or equal to 1, found 0"),
        ("datasets.demo_mono.path=/nonexistent/mono.en", "datasets.demo_mono: /nonexistent/mono.en: no such file"),
    ],
    ids=["invalid-profile", "missing-input"],
)
def test_a_served_run_that_cannot_start_is_a_failed_run_in_the_catalog(served, tmp_path, override, error):
    d = deployment(served.url, "served")
    bad = api(served.url, "POST", f"/deployments/{d['id']}/create_flow_run", {"parameters": {"overrides": [*TINY, override]}})
    assert finished(served.url, bad["id"], served.proc, timeout_s=300)["state"]["type"] == "FAILED"
    failed = nightly_record(served.cache, bad["id"])
    assert (failed["status"], failed["summary"]["error"], failed["summary"]["pipelines"]) == ("failed", error, [])
    runs = augdag(tmp_path, "runs", "--limit", "20", "--cache", str(served.cache))
    assert next(line for line in runs.stdout.splitlines() if line.startswith(failed["run_id"])).split()[1:4] == [
        "nightly",
        "demo",
        "failed",
    ]
    # retrying it loads its profile and overrides anew, and says the same thing (not "unknown key profile")
    again = augdag(tmp_path, "retry", failed["run_id"], "--cache", str(served.cache))
    assert again.returncode == 2 and error in " ".join(again.stderr.split())


def test_schedules_lists_a_header_and_the_next_scheduled_run(served, tmp_path):
    now = datetime.now(UTC)
    night = now.replace(hour=2, minute=0, second=0, microsecond=0)
    night += timedelta(days=1) if night <= now else timedelta()

    def listed():  # once the scheduler has created the coming nights of the cron schedule
        out = augdag(tmp_path, "schedules", "--cache", str(served.cache)).stdout.splitlines()
        return out if any(line.startswith("nightly/served") and line.split()[8] != "-" for line in out) else None

    lines = wait_for("the next scheduled run", listed, timeout_s=60)
    assert lines[0].split() == ["deployment", "cron", "timezone", "state", "next", "run", "concurrency"]
    row = next(line for line in lines if line.startswith("nightly/served"))
    assert row.split() == [
        "nightly/served",
        "0",
        "2",
        "*",
        "*",
        "*",
        "UTC",
        "active",
        night.strftime("%Y-%m-%d"),
        "02:00",
        "UTC",
        "1",
        "(CANCEL_NEW)",
    ]


def test_a_process_worker_runs_the_prefect_yaml_deployment(served, tmp_path):
    """prefect.yaml's deployment of the nightly, run by `prefect worker start` in a flow-run subprocess of its own.
    What this proves is the worker path (the deployment's entrypoint, pool and parameters, the flow run and its
    subflow on the server): one pipeline of the tiny demo is enough (ingest, cached from the served night); every
    pipeline runs in the served night above."""
    url, cache = served.url, served.cache  # the served run's cache: every stage is there already
    env = subprocess_env(tmp_path, PREFECT_API_URL=url, **FAST_POLL)
    pool = subprocess.run(
        [PREFECT, "work-pool", "create", "served-pool", "--type", "process"], env=env, capture_output=True, text=True, timeout=120
    )
    assert pool.returncode == 0, pool.stdout + pool.stderr
    overrides = [*TINY, "pipelines=[ingest]"]
    deployed = augdag(
        tmp_path,
        "deploy",
        "--pool",
        "served-pool",
        "--config",
        "demo",
        "--cache",
        str(cache),
        *(a for s in overrides for a in ("--set", s)),
        PREFECT_API_URL=url,
    )
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    d = deployment(url, "nightly")
    assert d["parameters"] == {"profile": "demo", "overrides": overrides, "cache": str(cache)}
    assert d["description"] == f"augdag nightly run of profile 'demo'; cache {cache}; data in {cache}/demo-data"
    assert (d["entrypoint"], d["work_pool_name"]) == ("flows/engine/nightly.py:nightly_flow", "served-pool")
    worker_cmd = [PREFECT, "worker", "start", "--pool", "served-pool", "--type", "process"]
    # Prefect's worker forwards SIGTERM to itself as SIGINT and then does not exit (Prefect 3.8.8: still running 10 min later):
    # its shutdown is not what this test is about, so it gets 5 s before the SIGKILL, not a minute
    with background(worker_cmd, env=env, cwd=REPO, log=tmp_path / "worker.log", grace_s=5) as worker:
        t0 = time.monotonic()
        flow_run = api(url, "POST", f"/deployments/{d['id']}/create_flow_run", {})
        run = finished(url, flow_run["id"], worker)
        assert run["state"]["type"] == "COMPLETED", worker.output()[-4000:]
        print(f"\nworker nightly (ingest, cached): {time.monotonic() - t0:.0f} s from the API call to Completed")
    night = nightly_record(cache, flow_run["id"])
    assert (night["status"], [(c["pipeline"], c["status"]) for c in night["summary"]["pipelines"]]) == (
        "completed",
        [("ingest", "completed")],
    )
    assert_subflows_completed(url, night)
    first = next(c for c in nightly_record(cache, served.flow_run_id)["summary"]["pipelines"] if c["pipeline"] == "ingest")
    ingest = night["summary"]["pipelines"][0]
    assert [(s["fingerprint"], s["status"]) for s in ingest["stages"]] == [(s["fingerprint"], "cached") for s in first["stages"]]
    totals = night["summary"]["totals"]
    assert (totals["shards_computed"], totals["shards_cached"]) == (0, sum(s["shards"] for s in first["stages"]))


def postgres_bin() -> Path:
    """Debian's PostgreSQL server binaries, installed when missing (as root with apt); skips otherwise."""

    def found() -> Path | None:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
        return versions[-1].parent if versions else None

    if found():
        return found()
    apt_install("postgresql")
    return found() or pytest.skip("postgresql installed but no initdb under /usr/lib/postgresql")


@pytest.fixture(scope="module")
def postgres():
    """A throw-away PostgreSQL server on a free port, its socket in its data directory: the database URL."""
    pytest.importorskip("asyncpg", reason="Prefect talks to PostgreSQL through asyncpg")
    bin_dir, port = postgres_bin(), free_port()
    data = Path(tempfile.mkdtemp(prefix="augdag-pg-"))  # under /tmp: the postgres user must reach it
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(data, "postgres", "postgres")
    try:
        for cmd in (
            [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
            [str(bin_dir / "pg_ctl"), "-D", str(data), "-o", f"-p {port} -k {data}", "-l", str(data / "log"), "-w", "start"],
            [str(bin_dir / "createdb"), "-h", str(data), "-p", str(port), "-U", "postgres", "prefect"],
        ):
            proc = subprocess.run([*as_postgres, *cmd], capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, f"{' '.join(cmd)}: {proc.stdout}{proc.stderr}"
        yield f"postgresql+asyncpg://postgres@127.0.0.1:{port}/prefect"
    finally:
        subprocess.run(
            [*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True, timeout=120
        )
        shutil.rmtree(data, ignore_errors=True)


def test_served_nightly_completes_against_postgres(postgres, tmp_path_factory, tmp_path):
    """The server's database is what this test is about: one pipeline (ingest, a subflow with its task runs) is
    enough; every pipeline runs against SQLite above."""
    cache = tmp_path_factory.mktemp("served-pg") / "cache"
    pipelines = ["ingest"]
    with (
        prefect_server(cache, tmp_path_factory.getbasetemp(), database=postgres) as (_, url),
        served_nightly(cache, url, tmp_path, "served-pg", [f"pipelines=[{','.join(pipelines)}]"]) as (flow_run_id, seconds, _),
    ):
        print(f"served nightly against PostgreSQL: {seconds:.0f} s from `prefect deployment run` to Completed")
        run = nightly_record(cache, flow_run_id)
        assert (run["status"], [(c["pipeline"], c["status"]) for c in run["summary"]["pipelines"]]) == (
            "completed",
            [(p, "completed") for p in pipelines],
        )
        assert_subflows_completed(url, run)
        found = (
            Catalog(cache)
            .query(
                "SELECT (SELECT count(*) FROM bitext WHERE source = 'demo_bitext') AS bitext, "
                "(SELECT rows FROM artifacts WHERE stage = 'clean' AND dataset = "
                "'demo_bitext') AS clean_rows"
            )
            .to_pylist()[0]
        )
        assert found["bitext"] == found["clean_rows"] > 0


def test_demo_data_follows_the_cache_not_the_working_directory(server, tmp_path):
    cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    missing = augdag(elsewhere, "run", "ingest", "--config", "demo", AUGDAG_CACHE=str(cache))
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        f"error: datasets.demo_bitext: {cache}/demo-data/train.en: no such file (and 9 more missing)"
    ]
    from demo import write_demo

    write_demo(cache / "demo-data", bitext_rows=100, mono_rows=100, labeled_rows=100, slots_rows=100, test_rows=50)
    # on the module's server (a temporary one would cost ~15 s)
    found = augdag(elsewhere, "run", "ingest", "--config", "demo", AUGDAG_CACHE=str(cache), PREFECT_API_URL=server[1])
    assert found.returncode == 0, found.stderr[-3000:]
    # the 100 pairs written under the cache: 1 planted bad pair rejected, 99 read, 5 of them dropped by `clean` (length
    # ratio 2; a planted numeral mismatch, German on the English side and copy of a test pair: demo/noise.py)
    assert Catalog(cache).query(
        "SELECT (SELECT count(*) FROM rejects WHERE source = 'demo_bitext') AS rejected, (SELECT rows FROM artifacts "
        "WHERE stage = 'read' AND dataset = 'demo_bitext') AS read, (SELECT count(*) FROM bitext WHERE source = "
        "'demo_bitext') AS kept"
    ).to_pylist() == [{"rejected": 1, "read": 99, "kept": 94}]
    assert not (elsewhere / ".augdag").exists()
