"""How a pipeline flow runs: a Prefect flow made when Prefect first runs it, on the task runner the
configuration names (threads, processes, Dask or Ray), with the GPU slots.

A pipeline's flow is declared with ``pipeline_flow`` (not Prefect's ``@flow``): a ``PipelineFlow`` holds the
body (``fn``) and Prefect's options, and makes the Prefect ``Flow`` the first time it is called. Importing
Prefect is ~1.5 s, half of a fully cached `augdag run` (bench/noop.py), and a replayed run (flows/engine/replay.py)
calls only the bodies: with every Prefect import of the run's path inside a function, it never pays for it.

On a Dask cluster named by ``task_runner.address``, a `gpu`-tagged stage's tasks require one unit of the worker
resource ``task_runner.gpu_resource`` (flows/engine/runners/placement.py), and on a Ray cluster one GPU (`num_gpus`;
flows/engine/runners/on_ray.py, which also shares one Ray connection among the nightly's pipelines).
A local Dask cluster or Ray instance runs tasks in worker processes. Each needs a Prefect API, or each
starts its own temporary server (32 s for a tiny flow), so ``run_flow`` gives them this
process's API and result storage in their environment. A remote cluster's workers (``address``) use
their own environment.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from conf.errors import ConfError
from conf.schema import AugdagConf, TaskRunnerConf
from flows.engine.replay import REPLAY
from flows.engine.runners.parameters import parameters_at_rest

if TYPE_CHECKING:
    from prefect import Flow
    from prefect.task_runners import TaskRunner

    FlowConf = AugdagConf
else:
    # A pipeline flow's `conf` parameter: an AugdagConf for readers and type checkers, Any for Prefect. Prefect
    # builds every @flow's parameter JSON schema at decoration (Flow.__init__), ~0.2 s for AugdagConf's tree,
    # ten pipelines on every `augdag` start that loads them: 15 % of a cached nightly. A pipeline flow is a
    # subflow called with an AugdagConf already validated (conf/loader.py); nobody reads its schema, and
    # pydantic does not revalidate a model instance either way.
    FlowConf = Any


class PipelineFlow:
    """A pipeline's flow: ``fn`` its body (what a replay calls), ``name`` its Prefect name; the Prefect
    ``Flow`` (``log_prints``, on ``default_task_runner``) is made on first use (``flow``, or a call)."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.fn, self.name = fn, name
        self._lock = threading.Lock()
        self._flow: Flow | None = None
        functools.update_wrapper(self, fn)

    @property
    def flow(self) -> Flow:
        """The Prefect ``Flow`` of ``fn``, made on first use (on ``default_task_runner()``, with ``log_prints``)."""
        with self._lock:
            if self._flow is None:
                from prefect import flow

                made = flow(name=self.name, log_prints=True, task_runner=default_task_runner())(self.fn)
                self._flow = parameters_at_rest(made)  # the configuration as stored: no secret on the server
            return self._flow

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.flow(*args, **kwargs)


def pipeline_flow(name: str) -> Callable[[Callable[..., Any]], PipelineFlow]:
    """Declare a pipeline's flow body as Prefect flow ``name`` (see ``PipelineFlow``)."""
    return functools.partial(PipelineFlow, name=name)


GPU_TAG = "gpu"  # the tag of the model-using shard stages (Stage.tags)
# a local cluster's worker is one core: Dask sets OpenMP, MKL and OpenBLAS to one thread in its worker processes
# (Ray in its tasks); numba's parallel kernels (uncertainty scoring) too, or n workers run n x cores threads
ONE_CORE_ENV = {"NUMBA_NUM_THREADS": "1"}


def run_flow(flow: PipelineFlow | Flow, conf: AugdagConf, **parameters: Any) -> Any:
    """Call a pipeline flow the way `augdag run` does: on the profile's task runner, with the profile's
    GPU slots, and with flow heartbeats only if the profile asks for them (stopping Prefect's heartbeat
    thread costs every run ~0.6 s)."""
    if REPLAY.get() is not None:  # the nightly's pipelines in a replay: their bodies, without Prefect
        return flow.fn(conf, **parameters)
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    runner = conf.task_runner
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: conf.orchestration.heartbeat_s}):
        ensure_gpu_slots(conf.orchestration.gpu_slots)
        env = local_worker_env() if runner.kind in ("dask", "ray") and not runner.address else None
        made = flow.flow if isinstance(flow, PipelineFlow) else flow  # a plug-in's own @flow is run as it is
        configured = parameters_at_rest(made.with_options(task_runner=make_task_runner(runner, worker_env=env)))
        return configured(conf, **parameters)


def ensure_gpu_slots(slots: int | None) -> None:
    """Make the Prefect tag concurrency limit ``gpu`` hold ``slots`` slots: at most that many task runs
    tagged ``gpu`` run at once, across every flow run on the server. The API upserts (in Prefect 3.8 a
    tag limit is the global concurrency limit ``tag:gpu``, which the task engine occupies per tagged
    task run). ``None`` (``orchestration.gpu_slots`` unset) leaves the server's limits as they are."""
    if slots is None:
        return
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.create_concurrency_limit(tag=GPU_TAG, concurrency_limit=slots)


def local_worker_env() -> dict[str, str]:
    """The environment a local cluster's worker processes need: this process's Prefect API (the temporary
    server is started here when none is configured, the one the flow run then uses too) and its result
    storage, so that shard results persist where the flow reads them."""
    from prefect.settings import PREFECT_API_URL, PREFECT_LOCAL_STORAGE_PATH

    api = PREFECT_API_URL.value()
    if not api:
        from prefect.server.api.server import SubprocessASGIServer

        server = SubprocessASGIServer()  # a singleton: the one Prefect's client would start for this process
        server.start()
        api = server.api_url
    return {"PREFECT_API_URL": api, "PREFECT_LOCAL_STORAGE_PATH": str(PREFECT_LOCAL_STORAGE_PATH.value())}


def default_task_runner() -> TaskRunner:
    """What a flow runs on when called without `with_options`: threads, one per core (Prefect's own
    default pool is unbounded, and a hundred shards in flight at once hold a hundred shards in memory)."""
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=os.cpu_count() or 2)


def make_task_runner(conf: TaskRunnerConf, *, worker_env: Mapping[str, str] | None = None) -> TaskRunner:
    """The runner of ``task_runner.kind``; ``worker_env`` joins ``ONE_CORE_ENV`` in a local cluster's worker
    processes (threads and processes share this process's environment; a remote cluster has its own)."""
    from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

    workers = conf.max_workers or os.cpu_count() or 2
    if conf.kind == "threads":
        return ThreadPoolTaskRunner(max_workers=workers)
    if conf.kind == "processes":
        return ProcessPoolTaskRunner(max_workers=workers)
    if conf.kind == "ray":
        return _ray_task_runner(conf, worker_env)
    from prefect_dask import (
        DaskTaskRunner,  # imported only when asked for: dask is slow to import
    )

    if conf.address and conf.gpu_resource:
        from flows.engine.runners.placement import PlacingDaskTaskRunner

        return PlacingDaskTaskRunner(address=conf.address, gpu_resource=conf.gpu_resource, gpu_tag=GPU_TAG)
    if conf.address:
        return DaskTaskRunner(address=conf.address)
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": conf.n_workers,
            "threads_per_worker": 1,
            "processes": True,
            "dashboard_address": None,
            "env": {**ONE_CORE_ENV, **(worker_env or {})},
        }
    )


def _ray_task_runner(conf: TaskRunnerConf, worker_env: Mapping[str, str] | None) -> TaskRunner:
    try:
        from flows.engine.runners.on_ray import SharedRayTaskRunner
    except ImportError as e:
        raise ConfError(
            f"task_runner.kind ray needs the `ray` extra ({e.name or 'prefect_ray'} is not installed): pip install -e .[ray]"
        ) from None
    if conf.address:
        return SharedRayTaskRunner(conf.address, gpu_resource=conf.gpu_resource, gpu_tag=GPU_TAG)
    return SharedRayTaskRunner(
        init_kwargs={
            "num_cpus": conf.n_workers,
            "include_dashboard": False,
            "runtime_env": {"env_vars": {**ONE_CORE_ENV, **(worker_env or {})}},
        }
    )
