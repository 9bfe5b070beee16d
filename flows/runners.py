"""The task runner named by the configuration: threads (default), processes, or Dask."""

from __future__ import annotations

import os

from typing import Any

from prefect import Flow
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from conf.schema import AugdagConf, TaskRunnerConf


def run_flow(flow: Flow, conf: AugdagConf, **parameters: Any) -> Any:
    """Call a pipeline flow the way `augdag run` does: on the profile's task runner, with flow heartbeats
    only if the profile asks for them (stopping Prefect's heartbeat thread costs every run ~0.6 s)."""
    flow = flow.with_options(task_runner=make_task_runner(conf.task_runner))
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: conf.orchestration.heartbeat_s}):
        return flow(conf, **parameters)


def default_task_runner() -> TaskRunner:
    """What a flow runs on when called without `with_options`: threads, one per core (Prefect's own
    default pool is unbounded, and a hundred shards in flight at once hold a hundred shards in memory)."""
    return ThreadPoolTaskRunner(max_workers=os.cpu_count() or 2)


def make_task_runner(conf: TaskRunnerConf) -> TaskRunner:
    workers = conf.max_workers or os.cpu_count() or 2
    if conf.kind == "threads":
        return ThreadPoolTaskRunner(max_workers=workers)
    if conf.kind == "processes":
        return ProcessPoolTaskRunner(max_workers=workers)
    from prefect_dask import DaskTaskRunner  # imported only when asked for: dask is slow to import

    if conf.address:
        return DaskTaskRunner(address=conf.address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": conf.n_workers, "threads_per_worker": 1, "processes": True,
                                          "dashboard_address": None})
