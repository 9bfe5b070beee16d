"""Artifacts on an object store (issue 29, part 1), from the outside: `augdag nightly` of the demo profile's ingest,
self_training and rejuvenation at demo/tiny.py's sizes with ``AUGDAG_ARTIFACTS=s3://…`` against moto's S3 server on
127.0.0.1, beside the same night on a local cache. Every Parquet part on the store equals the local night's, key
for key and byte for byte, and so does every score; the cache directory holds only the driver's bookkeeping;
`augdag sql`, `export`, `why` and the shell read the store and nothing else; a driver killed mid-run and retried
computes only what the store does not hold."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pyarrow.parquet as pq
import pytest

from demo.tiny import TINY_SETS
from storage.catalog import Catalog
from tests.conftest import REPO, free_port, subprocess_env
from tests.e2e.test_killed_night import kill_when, scores
from tests.e2e.test_scale_out import needs_ray, own_ports_and_dir, ray_port, wait_for_nodes
from tests.engine.test_determinism import parquet_hashes

pytestmark = [pytest.mark.slow]

NOBODY = pwd.getpwnam("nobody")
SETS = [*TINY_SETS, "pipelines=[ingest, self_training, rejuvenation]"]
NIGHT = [sys.executable, "-m", "flows.cli", "nightly", "--config", "demo", *(a for s in SETS for a in ("--set", s))]
# what the driver keeps in its cache directory with artifacts on a store: the catalog (and the empty parts that give
# each view its columns), logs, reports, its locks, input hashes and Prefect's task records
BOOKKEEPING = {
    "catalog.duckdb",
    "catalog.lock",
    "catalog.holders",
    "nightly.lock",
    "logs",
    "reports",
    "empty",
    "input-hashes",
    "prefect-results",
    "integrity",  # the parts' hashes by their stat keys, what a query checks them by (storage/integrity/)
}


def night(cache: Path) -> list[str]:
    return [*NIGHT, "--cache", str(cache)]


def store_hashes(server, store: str) -> dict[str, str]:
    """Every Parquet object under ``store``'s artifacts, by key below the store, with its sha256."""
    return {k: hashlib.sha256(v).hexdigest() for k, v in server.objects(store).items() if k.endswith(".parquet")}


@pytest.fixture(scope="module")
def nights(s3_server, prefect_harness, tmp_path_factory):
    """The local night and the night on the store, run at the same time on the same demo data."""
    from prefect.settings import PREFECT_API_URL

    root = tmp_path_factory.mktemp("object-store")
    store = s3_server.bucket("augdag-e2e") + "/night"
    base = {"AUGDAG_DEMO_DATA": str(root / "demo-data"), "PREFECT_API_URL": PREFECT_API_URL.value(), "COLUMNS": "200"}
    local_env = subprocess_env(root, **base, AUGDAG_SCRATCH=str(root / "scratch-local"))
    env = subprocess_env(root, **base, **s3_server.env, AUGDAG_ARTIFACTS=store, AUGDAG_SCRATCH=str(root / "scratch"))
    procs = {
        name: subprocess.Popen(night(root / name), env=e, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, e in (("local", local_env), ("remote", env))
    }
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=1800)
        assert proc.returncode == 0, f"{name} night:\n{out[-4000:]}"
    return SimpleNamespace(root=root, store=store, server=s3_server, env=env, local=root / "local", remote=root / "remote")


def test_a_night_on_s3_writes_the_local_nights_bytes_and_keeps_only_bookkeeping_in_the_cache(nights):
    local, remote = parquet_hashes(nights.local), store_hashes(nights.server, nights.store)
    assert len(remote) > 60 and remote.keys() == local.keys()
    assert [k for k in remote if remote[k] != local[k]] == []
    assert len(scores(nights.remote)) >= 2 and scores(nights.remote) == scores(nights.local)
    assert {p.name for p in nights.remote.iterdir()} <= BOOKKEEPING
    assert not list(nights.remote.rglob("*.parquet")) or all(
        p.parent.name == "empty" for p in nights.remote.rglob("*.parquet")
    )  # no part of an artifact in the cache directory
    # models: published under the store's models/ with a manifest naming each object's bytes, the local night's files
    # (not its bytes: a checkpoint and a model card record the directory they were trained or converted in; the
    # translations above, equal byte for byte, are what the models do)
    objects = nights.server.objects(nights.store)
    manifests = {k: json.loads(v) for k, v in objects.items() if k.startswith("models/") and k.endswith("/manifest.json")}
    assert {k.split("/")[1] for k in manifests} >= {"fairseq", "ctranslate2"}
    for key, manifest in manifests.items():
        model_dir = key.removesuffix("/manifest.json")
        local = {p.relative_to(nights.local / model_dir).as_posix() for p in (nights.local / model_dir).rglob("*") if p.is_file()}
        assert {f["file"] for f in manifest["files"]} == local - {".training.lock"}
        for f in manifest["files"]:
            assert hashlib.sha256(objects[f"{model_dir}/{f['file']}"]).hexdigest() == f["sha256"]
    # the catalog names the store: views, models
    paths = Catalog(nights.remote).query("SELECT DISTINCT split_part(path, '/artifacts/', 1) AS p FROM artifacts")
    assert paths["p"].to_pylist() == [nights.store]


def cli(nights, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args, "--cache", str(nights.remote)],
        env=nights.env,
        cwd=nights.root,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_sql_export_why_and_the_shell_read_the_store_and_nothing_beside_it(nights):
    before = nights.server.objects(nights.store)
    done = cli(nights, "sql", "SELECT count(*) AS n, count(DISTINCT source) AS s FROM rejuvenated", "-f", "csv")
    assert done.returncode == 0 and done.stdout == '"n","s"\n279,1\n', done.stderr
    query = ["sql", "SELECT * FROM bitext ORDER BY uid", "-f", "csv"]
    local = subprocess.run(
        [sys.executable, "-m", "flows.cli", *query, "--cache", str(nights.local)],
        env=nights.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    remote = cli(nights, *query)
    # the header and the 279 pairs of demo_bitext: its test set is in heldout_bitext (issue 47)
    assert remote.returncode == 0 and remote.stdout == local.stdout and remote.stdout.count("\n") == 280
    out = nights.root / "rejuvenated.parquet"
    done = cli(nights, "export", "rejuvenated", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out).num_rows == 279
    done = cli(nights, "why", "demo_bitext", "3")
    assert done.returncode == 0 and "read: kept" in done.stdout and "rejuvenated" in done.stdout, done.stdout + done.stderr
    bucket = nights.store.split("/")[2]
    refused = [
        f"SELECT * FROM read_parquet('s3://{bucket}/elsewhere/x.parquet')",
        f"SELECT * FROM read_parquet('{nights.store}x/artifacts/a.parquet')",  # a sibling prefix
        "SELECT * FROM read_parquet('s3://other-bucket/x.parquet')",
    ]
    for query in refused:
        done = cli(nights, "sql", query)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert f"reads only the catalog and files under the cache {nights.remote} and {nights.store}/" in " ".join(
            done.stderr.split()
        )
    shell = cli(
        nights,
        "sql",
        "--shell",
        stdin=f"SELECT count(*) AS n FROM inactive;\n{refused[0]};\nCOPY (SELECT 1) TO '{nights.store}/artifacts/x.parquet';\n"
        "SELECT 42 AS alive;\n.quit\n",
    )
    assert shell.returncode == 1 and "│ 27 " in shell.stdout and "│ 42 " in shell.stdout, shell.stdout + shell.stderr
    assert [":".join(line.split(":")[:3]) for line in shell.stderr.splitlines()] == [
        "error: line 2: refused",  # piped: the line of the statement (issue 48, defect 9)
        "error: line 3: refused",
        "error: 2 statement(s) failed",
    ]
    assert nights.server.objects(nights.store) == before  # not a byte written


def test_a_driver_killed_mid_run_then_retried_computes_only_what_the_store_lacks(nights):
    """SIGKILL of the driver's process group as the first `align` manifest reaches the store, then `augdag retry`:
    what had a manifest on the store is cached, and the store ends with the local night's bytes."""
    store = nights.server.bucket("augdag-e2e-crash") + "/night"
    cache = nights.root / "crashed"
    env = {**nights.env, "AUGDAG_ARTIFACTS": store, "AUGDAG_SCRATCH": str(nights.root / "scratch-crashed")}

    def manifests() -> set[str]:
        return {k.split("/")[2] for k in nights.server.objects(store) if k.endswith("/manifest.json")}

    def align() -> bool:
        return any(k.startswith("artifacts/align/") for k in nights.server.objects(store) if k.endswith("/manifest.json"))

    _, finished = kill_when(align, "no align manifest", night(cache), env, nights.root / "crashed.out", manifests)
    assert not (cache / "artifacts").exists()
    crashed = Catalog(cache).query("SELECT run_id FROM runs WHERE pipeline = 'nightly'")["run_id"].to_pylist()
    assert len(crashed) == 1
    retried = subprocess.run(
        [sys.executable, "-m", "flows.cli", "retry", crashed[0], "--cache", str(cache)],
        env=env, cwd=nights.root, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert retried.returncode == 0, retried.stdout[-3000:] + retried.stderr[-3000:]
    (last,) = (
        Catalog(cache).query("SELECT summary FROM runs WHERE pipeline = 'nightly' AND status = 'completed'").column(0).to_pylist()
    )
    stages = [s for p in json.loads(last)["pipelines"] for s in p["stages"] if s["kind"] == "artifact"]
    before = [s for s in stages if s["fingerprint"] in finished]
    assert len(before) >= 10 and {s["status"] for s in before} == {"cached"}
    assert any(s["status"] == "computed" for s in stages)
    assert store_hashes(nights.server, store) == parquet_hashes(nights.local)


# -- workers that share no disk with the driver (issue 29, part 2) ----------------------------------------------------


@contextlib.contextmanager
def as_nobody(server) -> Iterator[tuple[list[str], dict[str, str], Path]]:
    """How to start a process as the user ``nobody`` on a host of its own: the command prefix (setpriv and an
    interpreter ``nobody`` may run), its environment (a HOME and TMPDIR of its own, the package on its path as an
    install would put it, the object store and the session's Prefect API) and its HOME, removed afterwards. No path
    of the driver (its cache, the demo data, the pytest directories are mode 700, root's) is readable to it."""
    from prefect.settings import PREFECT_API_URL

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("starting workers as another user needs root and setpriv")
    prefix = ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups"]
    python = worker_python(prefix)
    home = Path(tempfile.mkdtemp(prefix="augdag-nobody-", dir="/tmp"))
    (home / "tmp").mkdir()
    for p in (home, home / "tmp"):
        os.chown(p, NOBODY.pw_uid, NOBODY.pw_gid)
        p.chmod(0o700)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]]),  # the package, as installed
        "PREFECT_HOME": str(home / ".prefect"),
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "NUMBA_NUM_THREADS": "1",
        **server.env,
    }
    try:
        yield [*prefix, python], env, home
    finally:
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def started(tmp: Path, name: str, cmds: list[list[str]], env: dict[str, str], cwd: Path) -> Iterator[list[subprocess.Popen]]:
    """``cmds`` started in turn, each in a process group of its own with its log ``tmp/{name}-{i}.log``; every
    group SIGKILLed at the end."""
    procs = []
    try:
        for i, cmd in enumerate(cmds):
            with open(tmp / f"{name}-{i}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                )
        yield procs
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def dask_as_nobody(tmp: Path, server, n_workers: int) -> Iterator[tuple[str, list[subprocess.Popen], Path]]:
    """`dask scheduler` and ``n_workers`` `dask worker`s started as the user ``nobody`` (``as_nobody``). Yields the
    scheduler's address, the workers, their HOME."""
    from distributed import Client

    address = f"tcp://127.0.0.1:{free_port()}"
    with as_nobody(server) as (python, env, home):
        dask = [*python, "-m", "dask"]
        cmds = [[*dask, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard"]]
        cmds += [[*dask, "worker", address, "--name", f"w{i}", "--nthreads", "1", "--no-dashboard"] for i in range(n_workers)]
        with started(tmp, "dask", cmds, env, home) as procs:
            with Client(address, timeout=60) as client:
                client.wait_for_workers(n_workers, timeout=120)
            yield address, procs[1:], home


def worker_python(prefix: list[str]) -> str:
    """An interpreter of this Python version that ``nobody`` may run (this venv's may live in root's home): the worker
    hosts' Python, with this venv's packages on its path as an install would put them."""
    for candidate in (f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}", sys.executable):
        probe = subprocess.run(
            [*prefix, candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        if probe.returncode == 0 and probe.stdout.strip() == str(tuple(sys.version_info[:2])):
            return candidate
    pytest.skip(f"no Python {sys.version_info[0]}.{sys.version_info[1]} that the user nobody may run")


def night_with_a_kill(
    nights, name: str, home: Path, sets: list[str], kill: Callable[[], object], env: dict[str, str] | None = None
) -> tuple[Path, str, object]:
    """The night on cluster ``sets`` against a store prefix of its own; once past ingest (40 objects on the store:
    most of the night is still to come), ``kill()`` is called every 50 ms until it says what it killed. Asserts
    that the night completed, the workers fetched models into their own scratch (``home``), and that the store
    ends with the local night's bytes and scores; returns (cache, store, what was killed)."""
    store = nights.server.bucket(f"augdag-e2e-{name}") + "/night"
    cache, log = nights.root / name, nights.root / f"{name}.out"
    env = {**nights.env, **(env or {}), "AUGDAG_ARTIFACTS": store, "AUGDAG_SCRATCH": str(nights.root / f"scratch-{name}")}
    with open(log, "w+") as out:
        argv = [*night(cache), *(a for s in sets for a in ("--set", s))]
        proc = subprocess.Popen(argv, env=env, cwd=nights.root, stdout=out, stderr=subprocess.STDOUT)
        killed, deadline = None, time.monotonic() + 600
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            if len(nights.server.objects(store)) > 40:
                killed = kill()
            time.sleep(0.05)
        assert proc.wait(timeout=1800) == 0, log.read_text()[-4000:]
    # the workers fetched the models their shards use from the store into their own scratch, once per host
    fetched = {p.parent.parent.name for p in (home / ".cache" / "augdag" / "models").glob("*/*/manifest.json")}
    fetched |= {p.parent.parent.name for p in (home / ".cache" / "augdag" / "models").glob("*/*/model")}
    assert fetched, "no model was fetched by a worker"
    assert killed is not None, "no worker was seen with a shard task before the night ended"
    assert store_hashes(nights.server, store) == parquet_hashes(nights.local)
    assert scores(cache) == scores(nights.local)
    assert {p.name for p in cache.iterdir()} <= BOOKKEEPING
    return cache, store, killed


@pytest.mark.filterwarnings("ignore::UserWarning:distributed")  # the hosts' Python is 3.11.x of another x
def test_dask_workers_as_another_user_on_the_store_alone_write_the_local_nights_bytes_a_killed_one_included(nights):
    """A scheduler and two workers as `nobody` (no read access to any path of the driver) run the night against the
    store; one worker is SIGKILLed while the scheduler has shard tasks on it; Dask gives them to the other, and the
    store ends with the local night's bytes."""
    from distributed import Client

    assert stat.S_IMODE(nights.root.parent.stat().st_mode) & 0o007 == 0  # the driver's directories: not for others
    with dask_as_nobody(nights.root, nights.server, 2) as (address, workers, home), Client(address, timeout=60) as client:

        def kill() -> tuple[str, list] | None:
            busy = {w: keys for w, keys in client.processing().items() if keys}
            if not busy:
                return None
            worker, keys = next(iter(busy.items()))
            victim = client.scheduler_info()["workers"][worker]["name"]
            os.killpg(workers[int(victim[1:])].pid, signal.SIGKILL)
            return victim, list(keys)

        sets = ["task_runner.kind=dask", f"task_runner.address={address}", "task_runner.gpu_resource=null"]
        night_with_a_kill(nights, "dask", home, sets, kill)


# -- the same on a Ray cluster --------------------------------------------------------------------------------------

# the hosts' Python (/usr/bin/python3.11) is 3.11.x of another x than this venv's: Ray refuses a patch mismatch
RAY_MINOR = {"RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL": "minor", "RAY_USAGE_STATS_ENABLED": "0"}


@contextlib.contextmanager
def ray_as_nobody(tmp: Path, server, *, num_cpus: int = 2) -> Iterator[tuple[str, dict[str, str], Path]]:
    """`ray start --head` as the user ``nobody`` (``as_nobody``), its session directory in nobody's HOME. Yields its
    address, what a driver needs to be let in (the cluster's token authentication, Ray 2.60's default for a cluster
    whose head has a token: the same token on the head and the driver) and nobody's HOME."""
    gcs, let_in = ray_port(), {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    with as_nobody(server) as (python, env, home):
        head = [*python, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--disable-usage-stats"]
        head += ["--node-ip-address", "127.0.0.1", "--port", str(gcs), "--num-cpus", str(num_cpus), "--num-gpus", "0"]
        head += ["--include-dashboard", "false", "--object-store-memory", str(200 * 2**20)]
        head += own_ports_and_dir(home / "ray", head=True)
        with started(tmp, "ray", [head], {**env, **RAY_MINOR, **let_in}, home):
            wait_for_nodes(f"127.0.0.1:{gcs}", 1, tmp, env={**os.environ, **RAY_MINOR, **let_in})
            yield f"127.0.0.1:{gcs}", let_in, home


def running_ray_tasks() -> list[psutil.Process]:
    """nobody's Ray worker processes that run a task now: Ray titles them `ray::<task name>`, an idle one `ray::IDLE`;
    the node's agents (`ray::DashboardAgent`, `ray::RuntimeEnvAgent`) share its fate and are no workers."""
    found = []
    for proc in psutil.process_iter(["uids", "cmdline"]):
        title = (proc.info["cmdline"] or [""])[0]
        ours = proc.info["uids"] and proc.info["uids"].real == NOBODY.pw_uid
        if ours and title.startswith("ray::") and title != "ray::IDLE" and not title.endswith("Agent"):
            found.append(proc)
    return found


@needs_ray
def test_a_ray_cluster_as_another_user_on_the_store_alone_writes_the_local_nights_bytes_a_killed_worker_included(nights):
    """A Ray head as `nobody` runs the night against the store (the driver's tasks run in nobody's worker processes);
    a worker process that runs a shard task is SIGKILLed; Ray runs the task again, and the store ends with the local
    night's bytes."""

    def kill() -> str | None:
        for proc in running_ray_tasks():
            with contextlib.suppress(psutil.NoSuchProcess):
                title = proc.cmdline()[0]
                proc.kill()
                return title
        return None

    with ray_as_nobody(nights.root, nights.server) as (address, let_in, home):
        sets = ["task_runner.kind=ray", f"task_runner.address={address}", "task_runner.gpu_resource=null"]
        _, _, killed = night_with_a_kill(nights, "ray", home, sets, kill, env={**RAY_MINOR, **let_in})
    assert str(killed).startswith("ray::")  # a worker process titled by the shard task it ran
