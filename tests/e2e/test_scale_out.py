"""Scale-out (issue 6): a local Dask cluster of two worker processes (and Ray's local instance, with the `ray`
extra) writes the artifacts threads write, byte for byte. (The `gpu` tag limit and the runners' settings:
tests/engine/test_task_runners.py.)"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.errors import ConfError
from conf.loader import load_profile
from conf.schema import AugdagConf, TaskRunnerConf
from demo import write_demo
from storage.catalog import Catalog
from tests.conftest import REPO, free_port, subprocess_env

slow = pytest.mark.slow


def _conf(cache: Path, data: Path, *sets: str) -> AugdagConf:
    return load_profile(
        REPO / "conf" / "demo.yaml", ["shard_size=500", *sets], cache=cache, environ={"AUGDAG_DEMO_DATA": str(data)}
    )


def _sampling_flow():
    """The self-training pipeline up to `sampled_mono`: ingest, alignment, U of every shard, the sample."""
    from prefect import flow

    from flows.engine.driver import Run
    from flows.pipelines.self_training import sample_monolingual

    @flow(name="scale_out_sampling")
    def sampling(conf: AugdagConf) -> dict:
        with Run.started(conf, pipeline="scale_out_sampling", profile="test", config=None) as run:
            sample_monolingual(run, conf)
        return run.finish()

    return sampling


def _parts(cache: Path) -> dict[str, dict[str, str]]:
    """fingerprint -> {file name: sha256} of every artifact the catalog lists."""
    rows = Catalog(cache).query("SELECT stage, fingerprint FROM artifacts").to_pylist()
    return {
        r["fingerprint"]: {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((cache / "artifacts" / r["stage"] / r["fingerprint"]).glob("*.parquet"))
        }
        for r in rows
    }


@pytest.fixture(scope="module")
def by_threads(prefect_harness, tmp_path_factory):
    """The demo data, and the cache of one run on threads (the reference)."""
    from flows.engine.runners import run_flow

    data, cache = tmp_path_factory.mktemp("scale-data"), tmp_path_factory.mktemp("scale-threads")
    write_demo(data, seed=7, bitext_rows=2000, mono_rows=2000, labeled_rows=100, slots_rows=100)
    summary = run_flow(_sampling_flow(), _conf(cache, data))
    assert summary["status"] == "completed"
    assert len(_parts(cache)) == len({s["fingerprint"] for s in summary["stages"]})  # a stage reused: reported again
    return data, cache


@slow
def test_dask_two_workers_write_the_same_artifacts_as_threads(by_threads, tmp_path):
    from flows.engine.runners import run_flow

    data, threads = by_threads
    summary = run_flow(_sampling_flow(), _conf(tmp_path, data, "task_runner.kind=dask", "task_runner.n_workers=2"))
    assert summary["status"] == "completed"
    scored = next(s for s in summary["stages"] if (s["stage"], s["dataset"]) == ("uncertainty", "demo_mono"))
    assert scored["shards"] == scored["shards_computed"] == 4  # 2000 rows, shards of 500
    # the same fingerprints; every part, rejects and dropped file byte-identical
    assert _parts(tmp_path) == _parts(threads)


needs_ray = pytest.mark.skipif(importlib.util.find_spec("prefect_ray") is None, reason="no `ray` extra: pip install -e .[ray]")
# Ray 2.60 turns token authentication on for a new local instance (writing a token to ~/.ray/auth_token) and for any
# head or client that finds that file, unless RAY_AUTH_MODE says otherwise: the tests' clusters say so explicitly,
# so that what one test wrote to ~/.ray cannot lock another's driver out of its cluster
NO_RAY_AUTH = ("RAY_AUTH_MODE", "disabled")


@slow
@needs_ray
def test_ray_local_instance_writes_the_same_artifacts_as_threads(by_threads, tmp_path, monkeypatch):
    from flows.engine.runners import run_flow

    monkeypatch.setenv(*NO_RAY_AUTH)  # else Ray 2.60 writes a token to ~/.ray, which other tests' clusters then read
    data, threads = by_threads
    summary = run_flow(_sampling_flow(), _conf(tmp_path, data, "task_runner.kind=ray", "task_runner.n_workers=2"))
    assert summary["status"] == "completed"
    assert _parts(tmp_path) == _parts(threads)


# -- GPU placement on a cluster the user started (issue 29): `gpu`-tagged stages on the workers that offer GPU --------


@contextlib.contextmanager
def dask_cluster(tmp: Path, workers: dict[str, str]) -> Iterator[str]:
    """`dask scheduler` and one `dask worker` per name (``workers``: name -> its --resources, "" for none), started as a
    user starts them, on this session's Prefect API and result storage: the scheduler's address."""
    from prefect.settings import PREFECT_API_URL, PREFECT_LOCAL_STORAGE_PATH

    address = f"tcp://127.0.0.1:{free_port()}"
    env = subprocess_env(
        tmp,
        PREFECT_API_URL=PREFECT_API_URL.value(),
        PREFECT_LOCAL_STORAGE_PATH=str(PREFECT_LOCAL_STORAGE_PATH.value()),
        NUMBA_NUM_THREADS="1",
    )
    dask = str(Path(sys.executable).parent / "dask")
    cmds = [[dask, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard"]]
    cmds += [
        [dask, "worker", address, "--name", name, "--nthreads", "1", "--no-dashboard", *(["--resources", r] if r else [])]
        for name, r in workers.items()
    ]
    procs = []
    try:
        for i, cmd in enumerate(cmds):
            with open(tmp / f"dask-{i}.log", "wb") as log:
                procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(len(workers), timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _placement_flow():
    """Eight shards through a `gpu`-tagged stage and an untagged one, each row noting its worker."""
    from prefect import flow

    from flows.engine.driver import Run, run_source_stage, run_stage
    from tasks.runtime.stage import Stage

    def where(table: pa.Table) -> pa.Table:  # defined here: pickled by value for workers that cannot import tests
        """Each row with the name of the worker that computed it: its Dask name, or a Ray node's $PLACEMENT_NODE."""
        import os

        if "PLACEMENT_NODE" in os.environ:
            name = os.environ["PLACEMENT_NODE"]
        else:
            from distributed import get_worker

            name = get_worker().name
        return table.append_column("worker", pa.array([name] * len(table), pa.string()))

    def produce():
        for i in range(8):
            yield i, {"part": pa.table({"x": [i]})}

    @flow(name="placement")
    def placement(conf: AugdagConf) -> dict:
        with Run.started(conf, pipeline="placement", profile="test", config=None) as run:
            x = run_source_stage(run, name="src", version="1", produce=produce, params={}, input_fingerprint="x", dataset="x")
            run_stage(run, Stage("on_gpu", "1", where, tags=("gpu",)), inputs=[x], params={})
            run_stage(run, Stage("on_cpu", "1", where), inputs=[x], params={})
        return run.finish()

    return placement


def _workers(cache: Path, stage: str) -> list[str]:
    parts = sorted((cache / "artifacts" / stage).glob("*/part-*.parquet"))
    return [w for p in parts for w in pq.read_table(p)["worker"].to_pylist()]


@slow
def test_gpu_stages_run_only_on_the_workers_that_offer_the_gpu_resource(prefect_harness, tmp_path):
    """A scheduler and two workers started as a user starts them, one with `--resources GPU=1`: every shard of the
    `gpu`-tagged stage runs on that worker; the untagged stage's shards go to either."""
    from flows.engine.runners import run_flow

    with dask_cluster(tmp_path, {"gpu-worker": "GPU=1", "cpu-worker": ""}) as address:
        conf = AugdagConf(cache=tmp_path / "cache", task_runner=TaskRunnerConf(kind="dask", address=address))
        summary = run_flow(_placement_flow(), conf)
    assert summary["status"] == "completed", summary.get("error")
    assert _workers(tmp_path / "cache", "on_gpu") == ["gpu-worker"] * 8
    assert len(_workers(tmp_path / "cache", "on_cpu")) == 8 and set(_workers(tmp_path / "cache", "on_cpu")) <= {
        "gpu-worker",
        "cpu-worker",
    }


@slow
def test_a_cluster_with_no_gpu_worker_fails_at_once_naming_the_resource_and_the_setting(prefect_harness, tmp_path):
    """No worker offers GPU: the run fails before the first GPU shard is queued (Dask would hold it for ever), and
    says how to start one or to lift the requirement; with `gpu_resource: null` the stage runs on the CPU worker."""
    from flows.engine.runners import run_flow

    with dask_cluster(tmp_path, {"cpu-worker": ""}) as address:
        conf = AugdagConf(cache=tmp_path / "a", task_runner=TaskRunnerConf(kind="dask", address=address))
        with pytest.raises(ConfError) as refused:
            run_flow(_placement_flow(), conf)
        anywhere = AugdagConf(cache=tmp_path / "b", task_runner=TaskRunnerConf(kind="dask", address=address, gpu_resource=None))
        assert run_flow(_placement_flow(), anywhere)["status"] == "completed"
    said = (
        f"task_runner.address {address}: no worker offers the resource 'GPU' that `gpu`-tagged stages require; start "
        f"one with `dask worker {address} --resources GPU=1`, or set task_runner.gpu_resource: null to run them on any worker"
    )
    assert str(refused.value) == said
    # the run is in the catalog, failed with that line, and no shard of the GPU stage was written
    failed = Catalog(tmp_path / "a").query("SELECT status, json_extract_string(summary, '$.error') AS error FROM runs")
    assert failed.to_pylist() == [{"status": "failed", "error": said}]
    assert _workers(tmp_path / "a", "on_gpu") == []
    assert _workers(tmp_path / "b", "on_gpu") == ["cpu-worker"] * 8


# -- the same on a Ray cluster: `num_gpus` ---------------------------------------------------------------------------


@contextlib.contextmanager
def ray_cluster(tmp: Path, nodes: dict[str, int]) -> Iterator[str]:
    """`ray start --head` and one `ray start --address` per further node (``nodes``: name -> the GPUs it offers;
    the first is the head), each node's workers knowing its name as $PLACEMENT_NODE, on this session's Prefect API
    and result storage: the head's address."""
    from prefect.settings import PREFECT_API_URL, PREFECT_LOCAL_STORAGE_PATH

    port = ray_port()
    base = subprocess_env(
        tmp,
        PREFECT_API_URL=PREFECT_API_URL.value(),
        PREFECT_LOCAL_STORAGE_PATH=str(PREFECT_LOCAL_STORAGE_PATH.value()),
        NUMBA_NUM_THREADS="1",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE=NO_RAY_AUTH[1],
    )
    ray = str(Path(sys.executable).parent / "ray")
    # short: a node's sockets live under its session directory, and a Unix socket's path has at most 107 bytes
    sessions, procs = tempfile.TemporaryDirectory(prefix="ray", dir="/tmp"), []
    driver = pytest.MonkeyPatch()
    driver.setenv(*NO_RAY_AUTH)  # this process connects as the test's driver
    try:
        for i, (name, gpus) in enumerate(nodes.items()):
            head = ["--head", "--port", str(port), "--include-dashboard", "false"]
            where = head if i == 0 else ["--address", f"127.0.0.1:{port}"]
            cmd = [ray, "start", "--block", *where, "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--num-gpus", str(gpus)]
            cmd += ["--object-store-memory", str(100 * 2**20), "--disable-usage-stats"]
            cmd += own_ports_and_dir(Path(sessions.name) / str(i), head=i == 0)
            with open(tmp / f"ray-{i}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        cmd, env={**base, "PLACEMENT_NODE": name}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
            wait_for_nodes(f"127.0.0.1:{port}", i + 1, tmp, env=base)
        yield f"127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        sessions.cleanup()
        driver.undo()


_NEXT_PORT = itertools.count()


def ray_port() -> int:
    """A free port for a test Ray node, from a block of its own per xdist worker in 20000-31999: above Ray's worker
    ports (10002-19999) and below the kernel's ephemeral ones (32768-), which Ray's own processes bind at any moment,
    so a port chosen here is not taken by another test's cluster between choosing it and `ray start` binding it."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0) % 6
    while True:
        port = 20000 + worker * 2000 + next(_NEXT_PORT) % 2000
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port


def own_ports_and_dir(temp_dir: Path, *, head: bool) -> list[str]:
    """`ray start` options that give a node every port of its own (``ray_port``) and its own session directory.
    Ray's defaults are fixed (the head's client server on 10001, every node's dashboard agent on 52365) and its
    session files go to /tmp/ray, so two test clusters started on one host at once (two xdist workers) took each
    other's ports and the second head never came up."""
    ports = {
        "--node-manager-port": ray_port(),
        "--object-manager-port": ray_port(),
        "--dashboard-agent-listen-port": ray_port(),
        "--dashboard-agent-grpc-port": ray_port(),
        "--runtime-env-agent-port": ray_port(),
        "--metrics-export-port": ray_port(),
    }
    if head:
        ports["--ray-client-server-port"] = ray_port()
    return [*(f"{flag}={port}" for flag, port in ports.items()), "--temp-dir", str(temp_dir)]


def wait_for_nodes(address: str, n: int, tmp: Path, env: dict[str, str] | None = None) -> None:
    """Until the cluster at ``address`` has ``n`` live nodes (asked by `ray status`, a process of its own with
    ``env``: this one must not hold a Ray connection before the runner makes it)."""
    deadline, status = time.monotonic() + 120, None
    while time.monotonic() < deadline:
        status = subprocess.run(
            [str(Path(sys.executable).parent / "ray"), "status", "--address", address], capture_output=True, text=True, env=env
        )
        if status.returncode == 0 and status.stdout.count(" node_") >= n:
            return
        time.sleep(1)
    said = f"`ray status` said: {status.stdout[-1000:]}{status.stderr[-1000:]}\n" if status else ""
    logs = "".join(p.read_text()[-2000:] for p in tmp.glob("ray-*.log"))
    raise AssertionError(f"no {n} Ray nodes at {address}: {said}{logs}")


@slow
@needs_ray
def test_on_ray_gpu_stages_run_only_on_the_nodes_that_offer_gpus(prefect_harness, tmp_path):
    """A head without GPUs and a node started with `--num-gpus 1`: every shard of the `gpu`-tagged stage asks Ray for
    one GPU and runs on that node; the untagged stage's shards go to either."""
    from flows.engine.runners import run_flow

    with ray_cluster(tmp_path, {"cpu-node": 0, "gpu-node": 1}) as address:
        conf = AugdagConf(cache=tmp_path / "cache", task_runner=TaskRunnerConf(kind="ray", address=address))
        summary = run_flow(_placement_flow(), conf)
    assert summary["status"] == "completed", summary.get("error")
    assert _workers(tmp_path / "cache", "on_gpu") == ["gpu-node"] * 8
    on_cpu = _workers(tmp_path / "cache", "on_cpu")
    assert len(on_cpu) == 8 and set(on_cpu) <= {"gpu-node", "cpu-node"}


@slow
@needs_ray
def test_a_ray_cluster_with_no_gpu_fails_at_once_naming_the_resource_and_the_setting(prefect_harness, tmp_path):
    from flows.engine.runners import run_flow

    with ray_cluster(tmp_path, {"cpu-node": 0}) as address:
        conf = AugdagConf(cache=tmp_path / "a", task_runner=TaskRunnerConf(kind="ray", address=address))
        with pytest.raises(ConfError) as refused:
            run_flow(_placement_flow(), conf)
        anywhere = AugdagConf(cache=tmp_path / "b", task_runner=TaskRunnerConf(kind="ray", address=address, gpu_resource=None))
        assert run_flow(_placement_flow(), anywhere)["status"] == "completed"
    assert str(refused.value) == (
        f"task_runner.address {address}: no node offers the resource 'GPU' that `gpu`-tagged stages require; start one "
        "with `ray start --address <head> --num-gpus 1`, or set task_runner.gpu_resource: null to run them on any node"
    )
    assert _workers(tmp_path / "a", "on_gpu") == []
    assert _workers(tmp_path / "b", "on_gpu") == ["cpu-node"] * 8
