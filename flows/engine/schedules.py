"""The nightly deployment's schedule: serving it, listing schedules, pausing and resuming them.

Overlap is handled twice. The deployment allows one run at a time: a run due while the previous one
is still going is queued (``nightly.overlap: wait`` → Prefect's ENQUEUE) or cancelled (``skip`` →
CANCEL_NEW). And the flow itself holds ``<cache>/nightly.lock`` (flows/engine/nightly.py), which also covers
runs started outside the deployment (`augdag nightly`, a second server).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from conf.errors import ConfError
from conf.loader import SetItem, parse_sets
from conf.schema import AugdagConf


def concurrency(conf: AugdagConf) -> Any:
    """The nightly deployment's concurrency: one run at a time, a run due meanwhile queued (``nightly.overlap:
    wait``) or cancelled (``skip``)."""
    from prefect.client.schemas.objects import (
        ConcurrencyLimitConfig,
        ConcurrencyLimitStrategy,
    )

    strategy = ConcurrencyLimitStrategy.ENQUEUE if conf.nightly.overlap == "wait" else ConcurrencyLimitStrategy.CANCEL_NEW
    return ConcurrencyLimitConfig(limit=1, collision_strategy=strategy)


def deployment_parameters(conf: AugdagConf, *, profile: str, overrides: Sequence[str]) -> dict[str, Any]:
    """The nightly flow's parameters as a deployment records them: nothing left to the working directory
    of whoever runs it (a profile file and the cache as absolute paths)."""
    path = Path(profile)
    return {
        "profile": str(path.absolute()) if path.is_file() else profile,
        "overrides": [_absolute_path_set(item) for item in parse_sets(overrides)],
        "cache": str(Path(conf.cache).absolute()),
    }


def _absolute_path_set(item: SetItem) -> str:
    """``datasets.<name>.<path|src|tgt>=<relative path>`` made absolute here; any other override as given."""
    *_, field = item.key.split(".")
    is_path = item.key.startswith("datasets.") and item.key.count(".") == 2 and field in ("path", "src", "tgt")
    if is_path and isinstance(item.value, str) and not Path(item.value).is_absolute():
        return f"{item.key}={Path(item.value).absolute()}"
    return item.text


def describe(conf: AugdagConf, parameters: dict[str, Any]) -> str:
    """What a deployment's runs read and write, resolved: the cache and the directories of the datasets."""
    data = sorted(
        {str(p.parent) if isinstance(p, Path) else p.rsplit("/", 1)[0] for ds in conf.datasets.values() for p in ds.files()}
    )
    return (
        f"augdag nightly run of profile {parameters['profile']!r}; cache {parameters['cache']}; "
        f"data in {', '.join(data) or '(no datasets)'}"
    )


def serve_nightly(conf: AugdagConf, *, parameters: dict[str, Any], name: str, cron: str | None, paused: bool) -> None:
    """Serve the nightly flow from this process with its cron schedule (blocks until interrupted)."""
    from prefect.client.schemas.schedules import CronSchedule

    from flows.engine.nightly import nightly_flow

    nightly_flow.serve(
        name=name,
        schedules=[CronSchedule(cron=cron or conf.nightly.cron, timezone=conf.nightly.timezone)],
        paused=paused,
        global_limit=concurrency(conf),
        parameters=parameters,
        description=describe(conf, parameters),
        tags=["augdag", "nightly"],
        print_starting_message=False,
    )


def list_schedules() -> list[dict[str, Any]]:
    """One row per deployment schedule (a deployment without one is listed once, cron None), with the
    deployment's next Scheduled flow run (``next_run``, None when there is none)."""
    from prefect import get_client

    rows = []
    with get_client(sync_client=True) as client:
        for d in client.read_deployments():
            limit = d.global_concurrency_limit.limit if d.global_concurrency_limit else d.concurrency_limit
            strategy = d.concurrency_options.collision_strategy.value if d.concurrency_options else None
            base = {
                "deployment": f"{_flow_name(client, d.flow_id)}/{d.name}",
                "id": str(d.id),
                "concurrency": f"{limit or 'unlimited'}" + (f" ({strategy})" if strategy else ""),
                "next_run": _next_run(client, d.id),
            }
            for s in d.schedules or [None]:
                rows.append(
                    {
                        **base,
                        "schedule_id": str(s.id) if s else None,
                        "cron": getattr(s.schedule, "cron", None) if s else None,
                        "timezone": getattr(s.schedule, "timezone", None) if s else None,
                        "active": bool(s and s.active and not d.paused),
                    }
                )
    return rows


def _next_run(client: Any, deployment_id: Any) -> datetime | None:
    """The expected start of the deployment's earliest flow run in state Scheduled."""
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    runs = client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
        flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))),
        sort=FlowRunSort.EXPECTED_START_TIME_ASC,
        limit=1,
    )
    return runs[0].expected_start_time if runs else None


def _flow_name(client: Any, flow_id: Any) -> str:
    return client.read_flow(flow_id).name


def set_active(deployment: str, *, active: bool) -> None:
    """Pause or resume every schedule of a deployment, named ``flow/deployment`` or just ``deployment``."""
    from prefect import get_client

    matches = [r for r in list_schedules() if deployment in (r["deployment"], r["deployment"].split("/", 1)[1])]
    if not matches:
        known = sorted({r["deployment"] for r in list_schedules()})
        raise ConfError(f"no deployment {deployment!r}; deployments: {', '.join(known) or '(none)'}")
    with get_client(sync_client=True) as client:
        for r in matches:
            if r["schedule_id"]:
                client.update_deployment_schedule(r["id"], r["schedule_id"], active=active)
