"""Shared fixtures: one Prefect test harness per session, small builders of Arrow tables."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from filelock import FileLock

import flows  # noqa: F401 — offline defaults before Prefect is imported
from storage.schemas import BITEXT, with_uid

REPO = Path(__file__).resolve().parents[1]
# the demo profile's pipelines (conf/demo.yaml), in the order its nightly runs them
DEMO_PIPELINES = [
    "ingest",
    "rejuvenation",
    "paraphrase",
    "self_training",
    "mt_paraphrase",
    "robustness",
    "train_nmt",
    "epida",
    "train_classifier",
    "c2c",
    "train_slot_tagger",
]


# `make test` and `make test-e2e` run two xdist workers that take whole files (--dist loadfile --no-loadscope-reorder)
# in collection order, each as it finishes its last. The longest files go first (wall seconds per file on 2 cores,
# `--durations`) so that the session ends on short files on both workers; the other files that read one of the
# session's demos go last: the tiny one finishes about three minutes in, the full-size one about five, and a worker
# that reached their readers earlier sat idle until then (~2 min).
LONGEST_FIRST = (
    "tests/e2e/test_killed_night.py",  # starts its night beside the tiny demo at once, reads the demo at its end
    "tests/e2e/test_served.py",
    "tests/e2e/test_lifecycle.py",
    "tests/pipelines/train_nmt/test_train_nmt_experiments.py",
    "tests/pipelines/rejuvenation/test_flow_rejuvenation.py",
    "tests/pipelines/epida/test_flow_epida.py",
    "tests/engine/test_failures.py",
    "tests/models/test_nmt_fairseq.py",
    "tests/pipelines/self_training/test_flow_self_training.py",
    "tests/e2e/test_scale_out.py",
    "tests/e2e/test_server.py",
    "tests/e2e/test_rejuvenated_student.py",  # three 200-update models, then the student
)


E2E = "tests/e2e/"
# an e2e test's hang detector (pyproject's `timeout` is 600 s) unless it names its own: the tier's servers and
# nights ran past 600 s on stop 54's CI host, about half as fast as this one, beside the session's demos
E2E_TIMEOUT_S = 1800


def pytest_itemcollected(item: pytest.Item) -> None:
    """The folder is the tier: every test under tests/e2e/ (Prefect servers, workers, PostgreSQL, a browser, a Dask
    cluster, the full-size demo) is marked ``e2e``: `make test-e2e` runs them, `make test` the rest, CI both."""
    if item.nodeid.startswith(E2E):
        item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order above: the longest files first, then the rest as collected, then the tests of the demo run."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::")[0]
        if path in LONGEST_FIRST:
            return (0, LONGEST_FIRST.index(path))
        return (2, 0) if item.get_closest_marker("demo_run") or item.get_closest_marker("tiny_demo_run") else (1, 0)

    items.sort(key=rank)  # stable: the files keep their tests' order


# The server-side loops that only act on deployments, schedules, automations and old rows, and the two that store
# events and turn task-run events into task-run rows: the harness serves flows called in-process, which read none of
# them back (the e2e tests start servers of their own, with every service). Off, its start costs ~14 CPU-s instead
# of ~19 and it idles at ~1.1 CPU-s a minute instead of ~1.4 (measured on a bare harness, 2 cores); the last two
# took the server's CPU over the EPiDA flow tests from 22.7 to 20.6 s.
HARNESS_SERVICES_OFF = (
    "SCHEDULER",
    "LATE_RUNS",
    "FOREMAN",
    "PAUSE_EXPIRATIONS",
    "CANCELLATION_CLEANUP",
    "TRIGGERS",
    "REPOSSESSOR",
    "CLEANUP_RECONCILER",
    "EVENT_LOGGER",
    "EVENT_PERSISTER",
    "TASK_RUN_RECORDER",
)


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """A temporary Prefect server for the whole session (~15 s once), results persisted in a tmp dir; its database
    starts as a copy of the migrated one (tests/prefect_db.py)."""
    from unittest import mock

    import prefect.testing.utilities
    from prefect.testing.utilities import prefect_test_harness

    from tests import prefect_db

    db_dir = tmp_path_factory.mktemp("prefect-harness-db")
    shutil.copyfile(prefect_db.migrated(), db_dir / "prefect-test.db")  # the name the harness gives its database

    os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(tmp_path_factory.mktemp("prefect-results"))
    services = {f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false" for name in HARNESS_SERVICES_OFF}
    saved = {key: os.environ.get(key) for key in services}
    os.environ.update(services)  # read by the server's subprocess as it starts, then taken back: the servers
    try:  # that tests start themselves (`augdag server`) keep every service
        harness = prefect_test_harness(server_startup_timeout=600)
        with mock.patch.object(prefect.testing.utilities, "mkdtemp", lambda: str(db_dir)):
            harness.__enter__()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        yield
    finally:
        harness.__exit__(None, None, None)


def bitext(pairs: list[tuple[str, str]], *, source: str = "t", first_line: int = 1) -> pa.Table:
    """A bitext table with uids, ``line`` counting from ``first_line``."""
    n = len(pairs)
    table = pa.table(
        {
            "uid": pa.nulls(n, pa.string()),
            "src": [s for s, _ in pairs],
            "tgt": [t for _, t in pairs],
            "source": [source] * n,
            "line": pa.array(range(first_line, first_line + n), pa.int64()),
        },
        schema=BITEXT,
    )
    return with_uid(table, "bitext")


def catalog_rows(cache: Path, sql: str, params: dict | None = None) -> list[dict]:
    """The rows of a query over ``cache``'s catalog, as dicts."""
    from storage.catalog import Catalog

    return Catalog(cache).query(sql, params).to_pylist()


def subprocess_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of an `augdag` subprocess: its own Prefect home (started from a migrated database:
    tests/prefect_db.py), the repo on the path."""
    from tests import prefect_db

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PREFECT_API", "PREFECT_LOCAL_STORAGE")) and k != "PREFECT_LOGGING_TO_API_ENABLED"
    }
    env.update({"PREFECT_HOME": str(prefect_db.seed(tmp_path / "prefect-home")), "PYTHONPATH": str(REPO)}, **extra)
    return env


def harness_url() -> str:
    """The API URL of the session's Prefect server (``prefect_harness``, which the test must request): an `augdag`
    subprocess given it as ``PREFECT_API_URL`` reports there, as with `augdag server` running, instead of starting
    Prefect's temporary server of its own (~9 s and ~10 CPU-s a run: ``prefect.server.api.server``'s import alone is
    4.5 CPU-s). The demo, the tests of that temporary server's own behaviour (an interrupted run, the guard) and those of
    a default run's exact terminal output keep it."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise RuntimeError("harness_url() needs the prefect_harness fixture")
    return url


def augdag(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`augdag ARGS` as a user runs it, from ``cwd`` (``subprocess_env``, plus ``env``): its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        env=subprocess_env(cwd, COLUMNS="200", **env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def free_port() -> int:
    """A TCP port free on the loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def apt_install(package: str) -> None:
    """Install a Debian package for a test (as root with apt-get), or skip with the reason. One apt at a
    time across test processes (pytest-xdist workers): apt holds a lock of its own and fails the second."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"{package} is not installed, and apt-get as root is not available to install it")
    t0 = time.monotonic()
    with FileLock("/tmp/augdag-tests-apt.lock"):
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]):
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            )
            if proc.returncode != 0:
                pytest.skip(f"could not install {package} ({' '.join(cmd)}): {proc.stderr[-500:]}")
    print(f"installed {package} in {time.monotonic() - t0:.0f} s")


def _shared_demo_root(tmp_path_factory, worker_id, marker: str) -> Path:
    """The directory of the session's one demo of ``marker``'s size (tests/shared_demo.py): shared by the xdist workers."""
    from tests.shared_demo import DEMOS

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if worker_id != "master" else base) / DEMOS[marker][0]
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(scope="session", autouse=True)
def _start_the_shared_demos(request, tmp_path_factory, worker_id):
    """Start each of the session's demos at once when a selected test carries its marker (``demo_run``,
    ``tiny_demo_run``)."""
    from tests import shared_demo

    wanted = [m for m in shared_demo.DEMOS if any(item.get_closest_marker(m) for item in request.session.items)]
    roots = {m: _shared_demo_root(tmp_path_factory, worker_id, m) for m in wanted}
    # the tiny demo first (its readers come early); the full-size one, read last, queues behind it
    after = roots.get("tiny_demo_run")
    procs = [shared_demo.start(roots[m], shared_demo.DEMOS[m][1], after if m == "demo_run" else None) for m in wanted]
    if wanted:
        # a demo is the session's long pole (its pipelines wait on each other's models): it keeps the default
        # priority and this test process (and what it starts) yields to it, so that the tests fill the cores it leaves
        os.nice(shared_demo.TESTS_NICE)
    yield
    for proc in procs:
        if proc is not None:
            shared_demo.stop(proc)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory, worker_id):
    """The finished `augdag demo` of this session, at the README's sizes (started when the session started)."""
    from tests import shared_demo

    return shared_demo.wait(_shared_demo_root(tmp_path_factory, worker_id, "demo_run"))


@pytest.fixture(scope="session")
def tiny_demo_root(tmp_path_factory, worker_id) -> Path:
    """The directory of the session's tiny demo, which may still be running (``shared_demo.wait`` for its result)."""
    return _shared_demo_root(tmp_path_factory, worker_id, "tiny_demo_run")


@pytest.fixture(scope="session")
def tiny_demo_run(tmp_path_factory, worker_id):
    """The finished `augdag demo` of this session with demo/tiny.py's overrides (started when the session started)."""
    from tests import shared_demo

    return shared_demo.wait(_shared_demo_root(tmp_path_factory, worker_id, "tiny_demo_run"))


class S3Server:
    """A local S3 server (moto's server mode) on a free loopback port: ``env`` holds the standard variables that
    point a client at it, ``bucket(name)`` makes a bucket."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.endpoint = f"http://127.0.0.1:{port}"
        self.env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{self.port}",
            scheme="http",
            access_key="testing",
            secret_key="testing",
            region="us-east-1",
            allow_bucket_creation=True,
        )

    def bucket(self, name: str) -> str:
        self.filesystem().create_dir(name)
        return f"s3://{name}"

    def requests(self, during: Callable[[], object]) -> list[str]:
        """The requests the server answered while ``during()`` ran: "METHOD /bucket/key" (query strings dropped)."""
        mark = len(self.log.read_text(errors="replace").splitlines())
        during()
        time.sleep(0.3)  # the server logs a request after answering it
        lines = self.log.read_text(errors="replace").splitlines()[mark:]
        return [" ".join(m.group(1, 2)) for line in lines if (m := re.search(r'"([A-Z]+) ([^ ?"]+)', line))]

    def objects(self, prefix: str) -> dict[str, bytes]:
        """Every object under ``s3://prefix`` (bucket/key...), by key relative to it."""
        import pyarrow.fs as pafs

        fs, root = self.filesystem(), prefix.removeprefix("s3://").rstrip("/")
        out = {}
        for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
            if info.type == pafs.FileType.File:
                with fs.open_input_stream(info.path, compression=None) as f:
                    out[info.path[len(root) + 1 :]] = f.read()
        return out


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server on 127.0.0.1 for the session (the `dev` extra installs it); skipped, with the reason, if it
    cannot start."""
    binary = Path(sys.executable).with_name("moto_server")
    if not binary.exists():
        pytest.skip("moto_server is not installed (pip install 'moto[server]': the dev extra)")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.skip(f"moto_server did not start on 127.0.0.1:{port}: {log.read_text()[-500:]}")
            time.sleep(0.1)
    yield S3Server(proc, port, log)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """This process pointed at the session's S3 server (the standard variables; storage/objects/'s filesystems
    made again from them)."""
    from storage import objects

    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    objects.reset()
    yield s3_server
    objects.reset()
