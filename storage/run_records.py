"""A run's rows in the catalog's `runs` table: started (owned by a process), finished, crashed when its process is
gone, and the crashes the Prefect API was told of. Its configuration and summary are stored at rest: a value read
from the environment as its ``${VAR}`` (conf/at_rest.py). A part of ``storage.catalog.Catalog`` (its writes and ``deferred``
mode), kept apart for size.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import duckdb

from conf.at_rest import redact
from storage.processes import Owner, current_owner, owner_alive


class RunRecords:
    """The `runs` rows of a ``Catalog`` (which provides ``root``, ``write`` and ``_write_or_defer``)."""

    root: Path
    write: Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]
    _write_or_defer: Callable[..., Any]

    def start_run(
        self,
        run_id: str,
        *,
        pipeline: str,
        profile: str,
        config: Mapping[str, Any],
        flow_run_id: str | None,
        owner: Owner | None = None,
    ) -> None:
        """Record a run as running, owned by ``owner`` (default: this process) until ``finish_run``."""
        owner = owner or current_owner()
        self._write_or_defer(
            lambda con: con.execute(
                "INSERT INTO runs (run_id, pipeline, profile, status, started_at, flow_run_id, config, host, pid,"
                " pid_started) VALUES ($id, $p, $prof, 'running', now(), $fr, $cfg, $host, $pid, $started)",
                {
                    "id": run_id,
                    "p": pipeline,
                    "prof": profile,
                    "fr": flow_run_id,
                    "cfg": json.dumps(redact(config)),  # at rest (conf/at_rest.py): no value of the environment
                    "host": owner.host,
                    "pid": owner.pid,
                    "started": owner.started,
                },
            )
        )

    def finish_run(self, run_id: str, *, status: str, summary: Mapping[str, Any]) -> None:
        """Close the run (in ``deferred`` mode: with the replay's one write, ``flush``)."""
        stored = redact(json.loads(json.dumps(summary, default=str)))  # an error or warning may name a path: ${VAR}
        update = {"s": status, "sum": json.dumps(stored), "id": run_id}
        self._write_or_defer(
            lambda con: con.execute("UPDATE runs SET status = $s, finished_at = now(), summary = $sum WHERE run_id = $id", update)
        )

    def discard_runs(self, run_ids: Sequence[str]) -> None:
        """Forget runs that were only a replay's attempt (flows/engine/replay.py): their rows in runs, stage_runs, evaluations."""
        with self.write() as con:
            for table in ("stage_runs", "evaluations", "runs"):
                con.execute(f"DELETE FROM {table} WHERE list_contains($ids, run_id)", {"ids": list(run_ids)})

    def reap_crashed(self) -> list[dict[str, Any]]:
        """Mark ``crashed`` every running run whose process is certainly gone (``storage.processes.owner_alive``:
        same host, and the pid free, a zombie or reused); returns those rows (run_id, pipeline, flow_run_id,
        error). A run of another host, or one recorded without an owner, stays running: it cannot be checked."""
        with self.write() as con:  # a write: it also adds the owner columns to an older catalog
            running = con.execute(
                "SELECT run_id, pipeline, flow_run_id, host, pid, pid_started FROM runs"
                " WHERE status = 'running' AND pid IS NOT NULL"
            ).fetchall()
            gone = [
                {"run_id": r, "pipeline": p, "flow_run_id": fr, "error": f"process {pid} on {host} is gone"}
                for r, p, fr, host, pid, started in running
                if not owner_alive(Owner(host, pid, started))
            ]
            for g in gone:
                summary = {
                    "run_id": g["run_id"],
                    "pipeline": g["pipeline"],
                    "cache": str(self.root),
                    "status": "crashed",
                    "error": g["error"],
                    "stages": [],
                }
                con.execute(
                    "UPDATE runs SET status = 'crashed', finished_at = now(), crash_reported = false,"
                    " summary = coalesce(summary, $sum) WHERE run_id = $id AND status = 'running'",
                    {"id": g["run_id"], "sum": json.dumps(summary)},
                )
        return gone

    def unreported_crashes(self, limit: int = 20) -> list[dict[str, Any]]:
        """The ``limit`` latest crashed runs whose Prefect flow run was not yet set Crashed (run_id,
        flow_run_id, error): a flow run no API reached stays here, but costs one request per call at most."""
        with self.write() as con:  # a write, as reap_crashed: an older catalog gains the columns first
            rows = con.execute(
                "SELECT run_id, flow_run_id, json_extract_string(summary, '$.error') FROM runs WHERE status = 'crashed'"
                " AND crash_reported = false AND flow_run_id IS NOT NULL ORDER BY started_at DESC LIMIT $n",
                {"n": limit},
            ).fetchall()
        return [{"run_id": r, "flow_run_id": fr, "error": e} for r, fr, e in rows]

    def mark_crash_reported(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            with self.write() as con:
                con.execute("UPDATE runs SET crash_reported = true WHERE list_contains($ids, run_id)", {"ids": list(run_ids)})
