"""The task runner named by the configuration: threads (default), processes, or Dask."""

from __future__ import annotations

import os

from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from conf.schema import TaskRunnerConf


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
