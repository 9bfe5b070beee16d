"""The nightly deployment's schedule: serving it, listing schedules, pausing and resuming them.

Overlap is handled twice. The deployment allows one run at a time: a run due while the previous one
is still going is queued (``nightly.overlap: wait`` → Prefect's ENQUEUE) or cancelled (``skip`` →
CANCEL_NEW). And the flow itself holds ``<cache>/nightly.lock`` (flows/nightly.py), which also covers
runs started outside the deployment (`augdag nightly`, a second server).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conf.errors import ConfError
from conf.schema import AugdagConf


def concurrency(conf: AugdagConf) -> Any:
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

    strategy = ConcurrencyLimitStrategy.ENQUEUE if conf.nightly.overlap == "wait" else ConcurrencyLimitStrategy.CANCEL_NEW
    return ConcurrencyLimitConfig(limit=1, collision_strategy=strategy)


def serve_nightly(conf: AugdagConf, *, profile: str, overrides: Sequence[str], name: str, cron: str | None,
                  paused: bool) -> None:
    """Serve the nightly flow from this process with its cron schedule (blocks until interrupted)."""
    from prefect.client.schemas.schedules import CronSchedule

    from flows.nightly import nightly_flow

    nightly_flow.serve(
        name=name, schedules=[CronSchedule(cron=cron or conf.nightly.cron, timezone=conf.nightly.timezone)],
        paused=paused, global_limit=concurrency(conf),
        parameters={"profile": profile, "overrides": list(overrides), "cache": str(conf.cache)},
        description=f"augdag nightly run of profile {profile!r} over {conf.cache}", tags=["augdag", "nightly"],
    )


def list_schedules() -> list[dict[str, Any]]:
    """One row per deployment schedule (a deployment without one is listed once, cron None)."""
    from prefect import get_client

    rows = []
    with get_client(sync_client=True) as client:
        for d in client.read_deployments():
            limit = d.global_concurrency_limit.limit if d.global_concurrency_limit else d.concurrency_limit
            strategy = d.concurrency_options.collision_strategy.value if d.concurrency_options else None
            base = {"deployment": f"{_flow_name(client, d.flow_id)}/{d.name}", "id": str(d.id),
                    "concurrency": f"{limit or 'unlimited'}" + (f" ({strategy})" if strategy else "")}
            for s in d.schedules or [None]:
                rows.append({**base, "schedule_id": str(s.id) if s else None,
                             "cron": getattr(s.schedule, "cron", None) if s else None,
                             "timezone": getattr(s.schedule, "timezone", None) if s else None,
                             "active": bool(s and s.active and not d.paused)})
    return rows


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
