"""Orchestration: the task runner a pipeline's shards run on, retries and slots, the nightly's schedule."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from conf.base import ConfModel


class TaskRunnerConf(ConfModel):
    """Where shard tasks run (flows/engine/runners/)."""

    kind: Literal["threads", "processes", "dask", "ray"] = "threads"  # ray needs the `ray` extra
    max_workers: int | None = Field(None, ge=1)  # threads / processes; None: the number of cores
    address: str | None = None  # dask: a scheduler (tcp://...); ray: ray://head:10001 or head:6379; None starts a local one
    n_workers: int = Field(2, ge=1)  # a local Dask cluster's worker processes, a local Ray instance's CPUs
    # on a cluster named by `address`: the resource every `gpu`-tagged stage's task requires, one unit each (Dask:
    # `dask worker --resources GPU=1` offers one; Ray: GPU is `num_gpus`, `ray start --num-gpus 1`, another name a
    # custom resource); None: they run on any worker. A local cluster (no address) is this host's processes:
    # orchestration.gpu_slots bounds its GPU tasks instead
    gpu_resource: str | None = "GPU"


class OrchestrationConf(ConfModel):
    retries: int = Field(2, ge=0)  # per shard task, with exponential backoff
    retry_delay_s: float = Field(1.0, ge=0)
    lock_timeout_s: float = Field(600, gt=0)  # waiting for the catalog's write lock
    heartbeat_s: int | None = Field(None, ge=30)  # Prefect flow heartbeats to a long-lived server; None: off
    gpu_slots: int | None = Field(None, ge=1)  # `gpu`-tagged tasks at once (a Prefect tag limit); None: no limit
    torch_threads: int = Field(0, ge=0)  # in-process torch's CPU threads, one count per process (models/runtime.py)


class NightlyConf(ConfModel):
    """The nightly run (flows/engine/nightly.py) and its deployment (prefect.yaml, `augdag serve`)."""

    cron: str = "0 2 * * *"  # when the deployment starts a run
    timezone: str = "UTC"  # of the cron schedule (an IANA name)
    # a run that starts while the previous one still holds the cache: skip it, or wait for the lock
    overlap: Literal["skip", "wait"] = "skip"
    wait_timeout_s: float = Field(6 * 3600, gt=0)  # overlap: wait gives up (the run fails) after this long
    parallel: int = Field(2, ge=1)  # independent pipelines run at once (e.g. rejuvenation beside paraphrase)
