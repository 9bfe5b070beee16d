"""GPU placement on a Dask cluster: a `gpu`-tagged stage's shard task asks the scheduler for one unit of the worker
resource ``task_runner.gpu_resource`` (workers offer it with ``dask worker --resources GPU=1``); every other task
goes to any worker.

prefect-dask's ``DaskTaskRunner`` submits every task alike: its client's ``submit`` takes Dask's ``resources``, but
the runner never passes any. The subclass below passes them per task. Not ``dask.annotate``: that is configuration
of the whole process, and the nightly submits several pipelines' tasks from several threads at the same moment, so a
CPU task submitted beside a GPU one could take its annotation. Written here because no maintained package does it
(prefect-dask 0.3.7).

A task that requires a resource no worker offers waits in Dask's queue for ever; so before the first such task is
submitted, the scheduler is asked whether any worker offers it, and a run on a cluster without one fails at once,
naming the scheduler, the resource and the setting.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from typing import Any

from prefect_dask import DaskTaskRunner
from prefect_dask.task_runners import PrefectDaskFuture

from conf.errors import ConfError


class PlacingDaskTaskRunner(DaskTaskRunner):
    """A ``DaskTaskRunner`` on the scheduler ``address`` that gives every task tagged ``gpu_tag`` the Dask resource
    ``{gpu_resource: 1}``."""

    def __init__(self, *, address: str, gpu_resource: str, gpu_tag: str, **kwargs: Any) -> None:
        super().__init__(address=address, **kwargs)
        self.gpu_resource, self.gpu_tag = gpu_resource, gpu_tag
        self._checked = False

    def __eq__(self, other: object) -> bool:
        same = (self.gpu_resource, self.gpu_tag) == (getattr(other, "gpu_resource", None), getattr(other, "gpu_tag", None))
        return super().__eq__(other) and same

    def duplicate(self) -> PlacingDaskTaskRunner:
        """A new runner with the same settings (Prefect makes one per flow run)."""
        return type(self)(
            address=self.address,
            gpu_resource=self.gpu_resource,
            gpu_tag=self.gpu_tag,
            client_kwargs=self.client_kwargs,
            performance_report_path=self.performance_report_path,
        )

    def resources(self, tags: Iterable[str]) -> dict[str, float] | None:
        """The Dask resources a task with ``tags`` requires: one unit of ``gpu_resource`` for a GPU task, else none."""
        return {self.gpu_resource: 1} if self.gpu_tag in set(tags) else None

    def offered(self) -> dict[str, dict[str, float]]:
        """Each worker's resources, as the scheduler has them now (worker address -> {resource: units})."""
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        return {address: dict(info.get("resources") or {}) for address, info in workers.items()}

    def _check_offered(self) -> None:
        if self._checked:
            return
        if not any(r.get(self.gpu_resource, 0) >= 1 for r in self.offered().values()):
            raise ConfError(
                f"task_runner.address {self.address}: no worker offers the resource {self.gpu_resource!r} that "
                f"`{self.gpu_tag}`-tagged stages require; start one with `dask worker {self.address} --resources "
                f"{self.gpu_resource}=1`, or set task_runner.gpu_resource: null to run them on any worker"
            )
        self._checked = True

    def submit(
        self,
        task: Any,
        parameters: dict[str, Any],
        wait_for: Iterable[PrefectDaskFuture[Any]] | None = None,
        dependencies: dict[str, Set[Any]] | None = None,
    ) -> PrefectDaskFuture[Any]:
        """Submit ``task`` as ``DaskTaskRunner.submit`` does, asking Dask for its ``resources``."""
        resources = self.resources(task.tags)
        if resources is None:
            return super().submit(task, parameters, wait_for, dependencies)
        if not self._started:
            raise RuntimeError("The task runner must be started before submitting work.")
        self._check_offered()
        # as DaskTaskRunner.submit, with the task's resources
        future = self.client.submit(
            task,
            parameters=self._optimize_futures(parameters),
            wait_for=self._optimize_futures(wait_for) if wait_for else None,
            dependencies=dependencies,
            return_type="state",
            resources=resources,
        )
        return PrefectDaskFuture[Any](wrapped_future=future, task_run_id=future.task_run_id)
