"""Raw REST calls to a Prefect server with CSRF protection on, as `augdag server` starts it (issue 48, defect 3): the
headers of a CSRF token, which Prefect's own client fetches by itself (``GET /api/csrf-token?client=…``)."""

from __future__ import annotations

import functools
import uuid

import httpx


@functools.cache
def csrf_headers(url: str) -> dict[str, str]:
    """``Prefect-Csrf-Token`` and ``Prefect-Csrf-Client`` for a state-changing request (POST, PUT, PATCH, DELETE) to
    the API at ``url``; one token per server and test process (it lasts an hour: PREFECT_SERVER_CSRF_TOKEN_EXPIRATION)."""
    client = uuid.uuid4().hex
    r = httpx.get(f"{url}/csrf-token", params={"client": client}, timeout=60)
    r.raise_for_status()
    return {"Prefect-Csrf-Token": r.json()["token"], "Prefect-Csrf-Client": client}
