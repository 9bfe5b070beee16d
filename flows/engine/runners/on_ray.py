"""Ray for the nightly: one connection shared by the pipelines of a process, and GPU placement by Ray's resources.

prefect-ray's ``RayTaskRunner`` (0.6.0) calls ``ray.init`` when it is entered unless Ray is already initialized,
and ``ray.shutdown`` when the runner that initialized it exits. The nightly runs its pipelines' flows at once,
each with its own runner, from threads of one process: two could both find Ray uninitialized (the second
``ray.init`` raises), and the first pipeline to finish would shut Ray down under the others' running tasks. Here
the process's runners share one ``ray.init``, counted; the last one out shuts it down.

On a cluster named by ``task_runner.address``, a `gpu`-tagged stage's task asks Ray for one GPU (``num_gpus=1``;
a node offers them with ``ray start --num-gpus N``), or one unit of a custom resource when ``gpu_resource`` names
another (``ray start --resources '{"A100": 1}'``); every other task goes to any node. The options are passed
per submit through prefect-ray's ``remote_options``, a context variable: a CPU task submitted from another thread
at the same moment does not take them. A cluster that offers none fails the run at the first GPU stage (Ray would
hold the task for ever), naming the address, the resource and the setting. Written here because no maintained
package does it (prefect-ray 0.6.0).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

import ray
from prefect.task_runners import TaskRunner
from prefect_ray import RayTaskRunner
from prefect_ray.context import remote_options

from conf.errors import ConfError

_LOCK = threading.Lock()
_SHARED: dict[str, Any] = {"users": 0, "owned": False, "address": None}


class SharedRayTaskRunner(RayTaskRunner):
    """A ``RayTaskRunner`` whose instances in one process share one Ray connection, and which gives every task
    tagged ``gpu_tag`` one unit of ``gpu_resource`` on a cluster named by ``address`` (``None``: no placement)."""

    def __init__(
        self,
        address: str | None = None,
        init_kwargs: dict[str, Any] | None = None,
        *,
        gpu_resource: str | None = None,
        gpu_tag: str = "gpu",
    ) -> None:
        super().__init__(address=address, init_kwargs=init_kwargs)
        self.gpu_resource, self.gpu_tag = gpu_resource, gpu_tag
        self._checked = False

    def __eq__(self, other: object) -> bool:
        same = (self.gpu_resource, self.gpu_tag) == (getattr(other, "gpu_resource", None), getattr(other, "gpu_tag", None))
        return super().__eq__(other) and same

    def duplicate(self) -> SharedRayTaskRunner:
        """A new runner with the same settings (Prefect makes one per flow run)."""
        return type(self)(self.address, self.init_kwargs, gpu_resource=self.gpu_resource, gpu_tag=self.gpu_tag)

    def options(self, tags: Iterable[str]) -> dict[str, Any] | None:
        """Ray's remote options for a task with ``tags``: one GPU (or one unit of the custom resource) for a GPU
        task on a cluster with placement, else none."""
        if self.gpu_resource is None or self.gpu_tag not in set(tags):
            return None
        return {"num_gpus": 1} if self.gpu_resource == "GPU" else {"resources": {self.gpu_resource: 1}}

    def _check_offered(self) -> None:
        if self._checked:
            return
        if ray.cluster_resources().get(self.gpu_resource, 0) < 1:
            offer = "--num-gpus 1" if self.gpu_resource == "GPU" else f"--resources '{json.dumps({self.gpu_resource: 1})}'"
            raise ConfError(
                f"task_runner.address {self.address}: no node offers the resource {self.gpu_resource!r} that "
                f"`{self.gpu_tag}`-tagged stages require; start one with `ray start --address <head> {offer}`, or set "
                "task_runner.gpu_resource: null to run them on any node"
            )
        self._checked = True

    def submit(self, task: Any, parameters: dict[str, Any], wait_for: Any = None, dependencies: Any = None) -> Any:
        """Submit ``task`` as ``RayTaskRunner.submit`` does, with its placement options."""
        options = self.options(task.tags)
        if options is None:
            return super().submit(task, parameters, wait_for, dependencies)
        if not self._started:
            raise RuntimeError("The task runner must be started before submitting work.")
        self._check_offered()
        with remote_options(**options):
            return super().submit(task, parameters, wait_for, dependencies)

    def __enter__(self) -> SharedRayTaskRunner:
        TaskRunner.__enter__(self)  # RayTaskRunner's own would init and own Ray per runner
        with _LOCK:
            if _SHARED["users"] and _SHARED["address"] != self.address:
                raise RuntimeError(f"Ray is connected to {_SHARED['address'] or 'a local instance'}, not {self.address}")
            if not _SHARED["users"] and not ray.is_initialized():
                self.logger.info(f"Connecting to the Ray cluster at {self.address}" if self.address else "Starting Ray")
                # "local": a new instance of our own, never a cluster `ray start` left on this host (ray.init()
                # without an address connects to the last one started here, and refuses num_cpus then)
                ray.init(self.address or "local", **self.init_kwargs)
                _SHARED["owned"] = True
            _SHARED["users"] += 1
            _SHARED["address"] = self.address
        return self

    def __exit__(self, *exc_info: Any) -> None:
        with _LOCK:
            _SHARED["users"] -= 1
            if not _SHARED["users"] and _SHARED["owned"]:
                ray.shutdown()
                _SHARED["owned"] = False
        TaskRunner.__exit__(self, *exc_info)
