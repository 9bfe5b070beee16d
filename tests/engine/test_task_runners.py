"""The task runners' settings (issue 6): `orchestration.gpu_slots` and the `gpu` tag's concurrency limit, the Ray
runner's optional extra, the local Dask cluster's workers. (A Dask cluster and Ray's local instance writing the
artifacts threads write: tests/e2e/test_scale_out.py.)"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
import time
from pathlib import Path

import pytest

from conf.errors import ConfError
from conf.schema import AugdagConf, OrchestrationConf, TaskRunnerConf

needs_ray = pytest.mark.skipif(importlib.util.find_spec("prefect_ray") is None, reason="no `ray` extra: pip install -e .[ray]")


def _gpu_limit() -> int | None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            return client.read_concurrency_limit_by_tag("gpu").concurrency_limit
        except ObjectNotFound:
            return None


@pytest.fixture
def no_gpu_limit(prefect_harness):
    """No `gpu` tag limit before the test, none left after it (the session's server is shared)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    def drop():
        with get_client(sync_client=True) as client, contextlib.suppress(ObjectNotFound):
            client.delete_concurrency_limit_by_tag("gpu")

    drop()
    yield
    drop()


def _two_gpu_tasks():
    """A flow of two `gpu`-tagged tasks on two threads; returns each task's (start, end)."""
    from prefect import flow, task

    lock, spans = threading.Lock(), []

    @task(tags=["gpu"])
    def hold(i: int) -> None:
        t0 = time.monotonic()
        time.sleep(1.0)
        with lock:
            spans.append((t0, time.monotonic()))

    @flow(name="two_gpu_tasks")
    def two(conf: AugdagConf) -> None:
        for f in hold.map([0, 1]):
            f.result()

    return two, spans


def _on_two_threads(cache: Path, *, gpu_slots: int | None) -> AugdagConf:
    return AugdagConf(
        cache=cache, task_runner=TaskRunnerConf(max_workers=2), orchestration=OrchestrationConf(gpu_slots=gpu_slots)
    )


@pytest.mark.slow
def test_gpu_slots_one_creates_the_tag_limit_and_serialises_gpu_tasks(no_gpu_limit, tmp_path):
    from flows.engine.runners import run_flow

    two, spans = _two_gpu_tasks()
    run_flow(two, _on_two_threads(tmp_path, gpu_slots=2))
    assert _gpu_limit() == 2
    spans.clear()
    run_flow(two, _on_two_threads(tmp_path, gpu_slots=1))
    assert _gpu_limit() == 1  # the same limit, updated
    (a0, a1), (b0, b1) = sorted(spans)
    assert a1 <= b0  # one slot: the second task started after the first ended


@pytest.mark.slow
def test_gpu_slots_none_creates_no_limit(no_gpu_limit, tmp_path):
    from flows.engine.runners import run_flow

    two, spans = _two_gpu_tasks()
    run_flow(two, _on_two_threads(tmp_path, gpu_slots=None))
    (a0, a1), (b0, b1) = sorted(spans)
    assert _gpu_limit() is None and b0 < a1  # no limit: the two tasks ran at once


def test_ray_runner_without_the_extra_names_the_key_and_the_extra(monkeypatch):
    import builtins

    from flows.engine.runners import make_task_runner

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name.split(".")[0] in ("ray", "prefect_ray"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    monkeypatch.delitem(sys.modules, "flows.engine.runners.on_ray", raising=False)  # imported by an earlier test
    with pytest.raises(ConfError) as e:
        make_task_runner(TaskRunnerConf(kind="ray"))
    assert str(e.value) == ("task_runner.kind ray needs the `ray` extra (ray is not installed): pip install -e .[ray]")


def test_local_dask_cluster_workers_get_one_core_and_the_given_environment():
    from flows.engine.runners import make_task_runner

    runner = make_task_runner(TaskRunnerConf(kind="dask", n_workers=3), worker_env={"PREFECT_API_URL": "http://x/api"})
    assert runner.cluster_kwargs == {
        "n_workers": 3,
        "threads_per_worker": 1,
        "processes": True,
        "dashboard_address": None,
        "env": {"NUMBA_NUM_THREADS": "1", "PREFECT_API_URL": "http://x/api"},
    }
    assert make_task_runner(TaskRunnerConf(kind="dask", address="tcp://h:8786")).address == "tcp://h:8786"


@needs_ray
def test_ray_runner_takes_the_address_or_starts_a_local_instance_of_n_workers_cpus():
    from flows.engine.runners import make_task_runner
    from flows.engine.runners.on_ray import SharedRayTaskRunner

    remote = make_task_runner(TaskRunnerConf(kind="ray", address="ray://head:10001"))
    local = make_task_runner(TaskRunnerConf(kind="ray", n_workers=3), worker_env={"PREFECT_API_URL": "http://x/api"})
    assert (type(remote), remote.address, local.address) == (SharedRayTaskRunner, "ray://head:10001", None)
    assert local.init_kwargs["num_cpus"] == 3
    env = {"NUMBA_NUM_THREADS": "1", "PREFECT_API_URL": "http://x/api"}
    assert local.init_kwargs["runtime_env"] == {"env_vars": env}


@needs_ray
def test_a_ray_address_places_gpu_tasks_by_num_gpus_or_a_custom_resource_unless_it_is_null():
    """What the runner asks Ray for, per task (a cluster started by hand runs it: tests/e2e/test_scale_out.py)."""
    from flows.engine.runners import make_task_runner

    gpus = make_task_runner(TaskRunnerConf(kind="ray", address="ray://head:10001"))
    a100 = make_task_runner(TaskRunnerConf(kind="ray", address="ray://head:10001", gpu_resource="A100"))
    anywhere = make_task_runner(TaskRunnerConf(kind="ray", address="ray://head:10001", gpu_resource=None))
    local = make_task_runner(TaskRunnerConf(kind="ray", n_workers=2))  # this host's processes: gpu_slots bounds them
    assert (gpus.options(["gpu", "x"]), gpus.options(["x"]), gpus.options([])) == ({"num_gpus": 1}, None, None)
    assert a100.options(["gpu"]) == {"resources": {"A100": 1}}
    assert (anywhere.options(["gpu"]), local.options(["gpu"])) == (None, None)
    copy = a100.duplicate()
    assert (type(copy), copy.address, copy.gpu_resource, copy == a100, copy == gpus) == (
        type(a100),
        a100.address,
        "A100",
        True,
        False,
    )


def test_a_dask_scheduler_address_places_gpu_tasks_by_the_gpu_resource_unless_it_is_null():
    """What the runner asks Dask for, per task (a cluster started by hand runs it: tests/e2e/test_scale_out.py)."""
    from prefect_dask import DaskTaskRunner

    from flows.engine.runners import make_task_runner
    from flows.engine.runners.placement import PlacingDaskTaskRunner

    placing = make_task_runner(TaskRunnerConf(kind="dask", address="tcp://10.0.0.1:8786", gpu_resource="A100"))
    assert isinstance(placing, PlacingDaskTaskRunner) and placing.address == "tcp://10.0.0.1:8786"
    assert (placing.resources(["gpu"]), placing.resources(["gpu", "x"]), placing.resources([]), placing.resources(["x"])) == (
        {"A100": 1},
        {"A100": 1},
        None,
        None,
    )
    copy = placing.duplicate()
    assert (type(copy), copy.address, copy.gpu_resource) == (PlacingDaskTaskRunner, placing.address, "A100")
    assert copy == placing
    anywhere = make_task_runner(TaskRunnerConf(kind="dask", address="tcp://10.0.0.1:8786", gpu_resource=None))
    assert type(anywhere) is DaskTaskRunner and anywhere != placing
    local = make_task_runner(TaskRunnerConf(kind="dask", n_workers=2))  # this host's processes: gpu_slots bounds them
    assert type(local) is DaskTaskRunner
