"""Runs whose process is gone: crashed in the catalog, and Crashed in the Prefect UI.

A run killed outright (``kill -9``, the machine's OOM killer, a lost container) never reaches
``Run.finish``: its `runs` row and its Prefect flow run would say "running" for ever. The catalog
records each run's owner (host, pid and the process's start time, ``storage.processes``); a new run
(``Run.start``, so also `augdag retry` and every nightly) and `augdag runs` mark the rows whose owner is
certainly gone as ``crashed``, then set their Prefect flow runs Crashed through the API when one
answers. That second step is best effort: a crash not yet told to Prefect is told by the next
command that reaches an API, and nothing here ever fails the command that called it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storage.catalog import Catalog

log = logging.getLogger("augdag")


REAP_EVERY_S = 60.0  # in one process: a nightly starts a run per pipeline, one check covers them all
_reaped_at: dict[Path, float] = {}


def reap_before_run(catalog: Catalog) -> list[dict[str, Any]]:
    """In a flow run, before it records itself: reap, and report the crashes to this flow run's API
    (at most once a minute per catalog and process)."""
    now = time.monotonic()
    if now - _reaped_at.get(catalog.path, -REAP_EVERY_S) < REAP_EVERY_S:
        return []
    _reaped_at[catalog.path] = now
    return _reap(catalog, api_url=None)


def reap_for_listing(catalog: Catalog) -> list[dict[str, Any]]:
    """Outside a flow (`augdag runs`): reap, and report to ``PREFECT_API_URL`` or the cache's `augdag
    server` only if it answers (no temporary server is started to tell it)."""
    from flows.ops.server import find_server, healthy

    url = os.environ.get("PREFECT_API_URL") or find_server(Path(catalog.root))
    return _reap(catalog, api_url=url if url and healthy(url) else "")


def _reap(catalog: Catalog, *, api_url: str | None) -> list[dict[str, Any]]:
    """Returns the rows newly marked crashed. ``api_url`` None: the current Prefect client; "": none."""
    try:
        gone = catalog.reap_crashed()
        pending = catalog.unreported_crashes() if api_url != "" else []
    except Exception as e:  # noqa: BLE001 — a read-only or busy catalog: list what it says
        log.warning("could not check the running runs of %s for crashed processes: %s", catalog.path, e)
        return []
    for g in gone:
        log.warning("run %s is crashed: %s", g["run_id"], g["error"])
    if pending:
        try:
            catalog.mark_crash_reported(crash_flow_runs(pending, api_url=api_url))
        except Exception as e:  # noqa: BLE001 — see the module docstring
            log.warning("could not record which crashed runs Prefect was told of: %s", e)
    return gone


def crash_flow_runs(rows: Sequence[dict[str, Any]], *, api_url: str | None = None) -> list[str]:
    """Set the Prefect flow run of each row (run_id, flow_run_id, error) Crashed, forced; returns the
    run ids done. A flow run this API does not know (it ran against another server) is left for later."""
    import contextlib

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Crashed

    done = []
    settings = temporary_settings(updates={PREFECT_API_URL: api_url}) if api_url else contextlib.nullcontext()
    with settings, get_client(sync_client=True) as client:
        for row in rows:
            try:
                client.set_flow_run_state(row["flow_run_id"], Crashed(message=row["error"] or "the process is gone"), force=True)
                done.append(row["run_id"])
            except Exception as e:  # noqa: BLE001
                log.info("flow run %s of crashed run %s not set Crashed: %s", row["flow_run_id"], row["run_id"], e)
    return done
