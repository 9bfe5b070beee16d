"""Stopping and crashing, end to end: `augdag server` and `augdag serve` stopped by Ctrl-C, SIGTERM or
SIGHUP leave no process behind and free their ports; crashed runs are found by the pid and start time of
their process; the reports are served over HTTP for the UI's links. (A night killed with SIGKILL and
retried: tests/e2e/test_killed_night.py, against the tiny `augdag demo`.)

The processes are launched as a user would, in this test's own process group (no new session), and
stopped by their pid alone. "No process left" is checked in /proc: every process below the command
when it was stopped (pid and start time, so a reused pid does not count) is gone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from filelock import FileLock

from conf.errors import ConfError
from flows.ops.lifecycle import spawn_group, stop_grace_s, stop_group
from storage.catalog import DDL, Catalog
from storage.processes import Owner, current_owner, descendants, group_members, owner_alive, started
from tests.conftest import REPO, free_port, subprocess_env
from tests.prefect_rest import csrf_headers

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
# -- helpers ----------------------------------------------------------------------------------------


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def augdag(tmp_path: Path, *args: str, **env: str) -> tuple[list[str], dict]:
    return [sys.executable, "-m", "flows.cli", *args], {"env": subprocess_env(tmp_path, COLUMNS="200", **env), "cwd": tmp_path}


def run_augdag(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    cmd, kw = augdag(tmp_path, *args, **env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def tree(pid: int) -> list[tuple[int, str]]:
    """Every process below ``pid`` now, as (pid, start time)."""
    return [(p, s) for p in descendants(pid) if (s := started(p)) is not None]


def living(snapshot: list[tuple[int, str]]) -> list[int]:
    """The processes of a ``tree`` snapshot that still run (not zombies)."""
    return [p for p, s in snapshot if owner_alive(Owner(socket.gethostname(), p, s))]


def wait_for(what: str, check, timeout_s: float = 600, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(every_s)
    return value


def api_post(url: str, path: str, body: dict, *, tries: int = 5) -> list | dict:
    """POST to the Prefect API; a 503 (the SQLite server busy on a loaded machine: CI saw one on
    create_flow_run) is tried again, 2 s later, up to ``tries`` times."""
    for attempt in range(1, tries + 1):
        req = urllib.request.Request(
            f"{url}{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", **csrf_headers(url)},  # the server's CSRF protection
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code != 503 or attempt == tries:
                raise
            time.sleep(2)
    raise AssertionError("unreachable")


def flow_run_states(url: str, ids: list[str]) -> dict[str, str]:
    return {r["id"]: r["state"]["name"] for r in api_post(url, "/flow_runs/filter", {"flow_runs": {"id": {"any_": ids}}})}


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


class Server:
    """`augdag server` launched as a user would: its process, API URL, reports URL and ports."""

    def __init__(self, tmp_path: Path, cache: Path) -> None:
        self.cache, self.port, self.reports_port = cache, free_port(), free_port()
        cmd, kw = augdag(
            tmp_path, "server", "--cache", str(cache), "--port", str(self.port), "--reports-port", str(self.reports_port)
        )
        self.log = open(tmp_path / f"server-{self.port}.out", "w+")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, **kw)
        state = wait_for("server.json with the reports URL", self._recorded)
        self.url, self.reports = state["url"], state["reports_url"]
        wait_for("the API", lambda: self.proc.poll() is not None or http_get(f"{self.url}/health")[0] == 200)
        assert self.proc.poll() is None, self.output()

    def _recorded(self) -> dict | None:
        assert self.proc.poll() is None, self.output()
        try:
            state = json.loads((self.cache / "server" / "server.json").read_text())
        except (OSError, ValueError):
            return None
        return state if "reports_url" in state else None

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:]

    def stop(self, sig: int) -> int:
        """``sig`` to the `augdag server` process alone; its exit code."""
        os.kill(self.proc.pid, sig)
        return self.proc.wait(timeout=120)


def assert_stops_cleanly(server: Server, sig: int) -> None:
    below = tree(server.proc.pid)
    assert any("prefect" in Path(f"/proc/{p}/cmdline").read_text() for p, _ in below)  # the Prefect server runs
    assert server.stop(sig) == 0, server.output()
    assert living(below) == []
    assert refused(server.port) and refused(server.reports_port)
    assert not (server.cache / "server" / "server.json").exists()


# -- fast: the pieces -------------------------------------------------------------------------------


def test_catalog_migration_adds_the_owner_columns_to_an_old_catalog(tmp_path):
    import duckdb

    old_ddl = DDL[: DDL.index("ALTER TABLE")]
    with duckdb.connect(str(tmp_path / "catalog.duckdb")) as con:
        con.execute(old_ddl)
        con.execute("INSERT INTO runs VALUES ('old', 'ingest', 'p', 'running', now(), NULL, NULL, '{}', NULL)")
    catalog = Catalog(tmp_path)
    assert catalog.reap_crashed() == []  # an owner-less row cannot be checked: it stays running
    cols = catalog.query("SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs'").column(0).to_pylist()
    assert cols[-4:] == ["host", "pid", "pid_started", "crash_reported"]
    catalog.start_run("new", pipeline="ingest", profile="p", config={}, flow_run_id=None)
    me = current_owner()
    assert catalog.query("SELECT run_id, status, host, pid, pid_started FROM runs ORDER BY run_id").to_pylist() == [
        {"run_id": "new", "status": "running", "host": me.host, "pid": me.pid, "pid_started": me.started},
        {"run_id": "old", "status": "running", "host": None, "pid": None, "pid_started": None},
    ]


def test_reap_crashed_marks_only_runs_whose_process_is_certainly_gone(tmp_path):
    catalog, host = Catalog(tmp_path), socket.gethostname()
    dead = subprocess.Popen(["sleep", "60"])
    dead_owner = Owner(host, dead.pid, started(dead.pid))
    dead.kill()
    dead.wait()
    me = current_owner()
    owners = {
        "dead": dead_owner,
        "reused": Owner(host, me.pid, me.started + "0"),
        "alive": me,
        "elsewhere": Owner("another-host", dead.pid, None),
    }
    for run_id, owner in owners.items():
        catalog.start_run(run_id, pipeline="ingest", profile="p", config={}, flow_run_id=f"fr-{run_id}", owner=owner)
    gone = catalog.reap_crashed()
    assert gone == [
        {"run_id": r, "pipeline": "ingest", "flow_run_id": f"fr-{r}", "error": f"process {owners[r].pid} on {host} is gone"}
        for r in ("dead", "reused")
    ]
    assert catalog.reap_crashed() == []
    rows = catalog.query(
        "SELECT run_id, status, finished_at IS NOT NULL AS finished, crash_reported,"
        " json_extract_string(summary, '$.error') AS error FROM runs ORDER BY run_id"
    ).to_pylist()
    assert [(r["run_id"], r["status"], r["finished"], r["crash_reported"]) for r in rows] == [
        ("alive", "running", False, None),
        ("dead", "crashed", True, False),
        ("elsewhere", "running", False, None),
        ("reused", "crashed", True, False),
    ]
    assert sorted(c["run_id"] for c in catalog.unreported_crashes()) == ["dead", "reused"]
    catalog.mark_crash_reported(["dead"])
    assert [c["run_id"] for c in catalog.unreported_crashes()] == ["reused"]


def test_stop_group_kills_what_ignores_sigterm_and_what_outlived_its_leader(tmp_path):
    # the leader ignores SIGTERM and has a child that ignores it too: both are killed after the grace
    proc = spawn_group(["sh", "-c", "trap '' TERM; sleep 60 & echo started; wait"], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"started\n"
    members = [(p, started(p)) for p in group_members(proc.pid)]
    assert len(members) == 2 and proc.pid in dict(members) and os.getpgrp() != proc.pid
    assert stop_group(proc.pid, signal.SIGTERM, grace_s=0.5) == 128 + signal.SIGKILL
    assert group_members(proc.pid) == [] and living(members) == []


def test_report_http_serves_files_under_reports_only(tmp_path):
    from flows.engine.run_artifacts import file_link_markdown
    from flows.ops.report_http import serve_reports
    from flows.ops.server import record, report_url, state_dir

    cache = tmp_path / "cache"
    page = cache / "reports" / "run-1" / "report page.html"
    page.parent.mkdir(parents=True)
    page.write_bytes(b"<h1>report</h1>")
    (cache / "catalog.duckdb").write_bytes(b"secret")
    (page.parent / "out").symlink_to(cache / "catalog.duckdb")
    assert report_url(cache, page) is None  # no server: the artifact says where the file is instead
    assert f"`{page}`" in file_link_markdown(cache, page, "report") and f"augdag server --cache {cache}" in file_link_markdown(
        cache, page, "report"
    )
    httpd = serve_reports(cache / "reports", 0)
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}"
        state_dir(cache).mkdir(parents=True)
        record(cache, "http://127.0.0.1:9/api", 1, reports_url=base)
        assert report_url(cache, page) == f"{base}/run-1/report%20page.html"
        assert http_get(report_url(cache, page)) == (200, b"<h1>report</h1>")
        for path in (
            "/",
            "/run-1/",
            "/run-1",
            "/../catalog.duckdb",
            "/run-1/%2e%2e/%2e%2e/catalog.duckdb",
            "/run-1/out",
            "/%2fetc/passwd",
        ):
            assert http_get(base + path)[0] == 404, path
        req = urllib.request.Request(f"{base}/run-1/report%20page.html", data=b"x", method="PUT")
        with pytest.raises(urllib.error.HTTPError, match="501"):
            urllib.request.urlopen(req, timeout=10)
        assert report_url(cache, cache / "catalog.duckdb") is None  # not a report
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- slow: real servers and runs --------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`augdag server` over a cache: the one the reports-link and serve tests report to; the last test
    of the module stops it with SIGTERM."""
    tmp = tmp_path_factory.mktemp("lifecycle")
    started_server = Server(tmp, tmp / "cache")
    yield started_server
    if started_server.proc.poll() is None:
        started_server.stop(signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT], ids=["SIGHUP", "SIGINT"])
def test_server_stopped_by_signal_leaves_no_process_and_frees_the_ports(tmp_path, sig):
    assert_stops_cleanly(Server(tmp_path, tmp_path / "cache"), sig)


REPORTING = """
from prefect import flow

from flows.engine.driver import Run
from flows.engine.registry import Pipeline, register
from flows.reports.reporting import publish


@flow(name="reporting")
def reporting_flow(conf, profile: str = "", config: dict | None = None) -> dict:
    with Run.started(conf, pipeline="reporting", profile=profile, config=config) as run:
        publish(run, stem="page", title="A page", sections=[("hello", "<p>hello</p>")], markdown="hello",
                pngs={"plot": b"not really a png"})
    return run.finish()


register(Pipeline("reporting", "reporting_pipeline:reporting_flow"))
"""


@pytest.mark.slow
def test_a_runs_report_links_go_over_http_to_the_servers_copy_of_reports(server, tmp_path):
    """A run on the cache of `augdag server` (found through its server.json, no PREFECT_API_URL) publishes its
    report page and plot as link artifacts that open over `augdag server`'s HTTP, never as file:// links: a plug-in
    pipeline publishing as every built-in one does (flows/reports/reporting.py)."""
    (tmp_path / "reporting_pipeline.py").write_text(REPORTING)
    (tmp_path / "a.txt").write_text("hello world\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(f"pipelines: [reporting]\ndatasets:\n  a: {{kind: mono, format: text, path: {tmp_path / 'a.txt'}}}\n")
    ran = run_augdag(
        tmp_path,
        "run",
        "reporting",
        "--config",
        str(profile),
        "--cache",
        str(server.cache),
        AUGDAG_PIPELINES="reporting_pipeline",
        PYTHONPATH=f"{REPO}:{tmp_path}",
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    ids = Catalog(server.cache).query("SELECT flow_run_id FROM runs WHERE pipeline = 'reporting'").column(0).to_pylist()
    data = [
        str(a["data"])
        for a in api_post(server.url, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": ids}}, "limit": 200})
    ]
    urls = sorted(u for d in data for u in re.findall(r"\]\((\w+://[^)\s]+)\)", d))  # a link artifact: [text](url)
    assert [u.rsplit("/", 1)[1] for u in urls] == ["page.html", "plot.png"]
    assert all(u.startswith(server.reports + "/") for u in urls), urls
    assert not any("file://" in d for d in data)
    for u in urls:
        status, body = http_get(u)
        rel = urllib.request.url2pathname(u.removeprefix(server.reports + "/"))
        assert (status, body) == (200, (server.cache / "reports" / rel).read_bytes())


def test_stop_grace_is_30_s_or_augdag_stop_grace_s_and_a_bad_value_is_named(monkeypatch, tmp_path):
    monkeypatch.delenv("AUGDAG_STOP_GRACE_S", raising=False)
    assert stop_grace_s() == 30.0
    monkeypatch.setenv("AUGDAG_STOP_GRACE_S", "90.5")
    assert stop_grace_s() == 90.5
    for bad in ("0", "-3", "soon", "nan", "inf"):
        monkeypatch.setenv("AUGDAG_STOP_GRACE_S", bad)
        with pytest.raises(ConfError, match=rf"^AUGDAG_STOP_GRACE_S='{bad}': expected a number of seconds > 0$"):
            stop_grace_s()
    done = run_augdag(tmp_path, "serve", "--config", "demo", AUGDAG_STOP_GRACE_S="soon")  # before anything starts
    assert (done.returncode, done.stderr) == (2, "error: AUGDAG_STOP_GRACE_S='soon': expected a number of seconds > 0\n")


@pytest.mark.slow
def test_serve_stopped_by_sigterm_leaves_no_flow_run_process(server, tmp_path):
    cache = tmp_path / "cache"
    (tmp_path / "a.txt").write_text("hello world\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(
        "pipelines: [ingest]\nnightly: {overlap: wait}\n"
        f"datasets:\n  a: {{kind: mono, format: text, path: {tmp_path / 'a.txt'}}}\n"
    )
    held = FileLock(cache / "nightly.lock")  # the served run waits for it: it is running when stopped
    cache.mkdir()
    held.acquire()
    # a stopped flow run reports Crashed to the server first, which a loaded machine's SQLite server slows down
    cmd, kw = augdag(
        tmp_path,
        "serve",
        "--config",
        str(profile),
        "--cache",
        str(cache),
        "--name",
        "lifecycle",
        PREFECT_API_URL=server.url,
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        AUGDAG_STOP_GRACE_S="20",
    )
    serve = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    try:
        deployment = wait_for(
            "the served deployment",
            lambda: api_post(server.url, "/deployments/filter", {"deployments": {"name": {"any_": ["lifecycle"]}}}),
        )[0]
        flow_run = api_post(server.url, f"/deployments/{deployment['id']}/create_flow_run", {})
        wait_for("the flow run to run", lambda: flow_run_states(server.url, [flow_run["id"]])[flow_run["id"]] == "Running")
        # stopped while it waits for the lock (its log says so), not while "Running" still means starting: twice, on
        # a loaded CI machine, a run stopped that early went on to wait for the lock after the stop
        wait_for(
            "the flow run to wait for the lock",
            lambda: any(
                "waiting up to" in r["message"] and "nightly.lock" in r["message"]
                for r in api_post(server.url, "/logs/filter", {"logs": {"flow_run_id": {"any_": [flow_run["id"]]}}})
            ),
        )
        below = tree(serve.pid)
        assert any("multiprocessing" in Path(f"/proc/{p}/cmdline").read_text() for p, _ in below)  # the flow run's
        os.kill(serve.pid, signal.SIGTERM)
        out, _ = serve.communicate(timeout=150)
        # 0: stopped gracefully (alone, in ~5 s). 137: the group outlived the grace and was killed, as in every
        # fresh-clone CI run of 2026-11-25 (the served run still waited for the lock 120 s after the stop; cause not
        # found): either way nothing may be left
        assert serve.returncode in (0, 128 + signal.SIGKILL), out[-3000:]
        assert living(below) == []
    finally:
        held.release()
        if serve.poll() is None:  # the test failed: leave nothing behind either
            for pid in [*descendants(serve.pid), serve.pid]:
                os.kill(pid, signal.SIGKILL)
            serve.wait()


@pytest.mark.slow
def test_server_stopped_by_sigterm_leaves_no_process_and_frees_the_ports(server):
    assert_stops_cleanly(server, signal.SIGTERM)
