"""What every flow run shows in the Prefect UI besides its task runs: a table artifact of stage counts
and timings, a markdown summary, and a progress artifact per stage while its shards run.

Publishing is best effort: an artifact that cannot be created (no API, a server that went away) is
logged and never fails a run whose data is already committed.

A report or plot file is linked over HTTP (``publish_file_link``) while `augdag server` serves the
cache's reports (flows/ops/server.py): browsers refuse the ``file://`` links of a page served over HTTP.
Without that server the artifact is a markdown note that says where the file is and how to serve it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

from tasks.runtime.progress import report

log = logging.getLogger("augdag")
UPDATE_EVERY_S = 2.0  # progress artifact updates, at most


def pipeline_summaries(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pipeline summaries inside a run summary: a nightly run's pipelines, else the run itself."""
    return summary.get("pipelines") or [summary]


def stage_rows(summary: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """One row per stage of a run summary; a nightly run's rows are its pipelines' stages."""
    for child in pipeline_summaries(summary):
        for s in child.get("stages") or []:
            rows = s["rows_out"]
            yield {
                "pipeline": child["pipeline"],
                "stage": s["stage"],
                "dataset": s["dataset"] or "",
                "status": s["status"],
                "shards": s["shards"],
                "computed": s["shards_computed"],
                "rows_in": s["rows_in"],
                "rows_out": rows.get("part", 0),
                "rejects": rows.get("rejects", 0),
                "dropped": rows.get("dropped", 0),
                "seconds": round(s["seconds"], 3),
                "fingerprint": s["fingerprint"][:12],
            }


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """The run in a few lines: status, stages and shards computed vs cached, failures with their error."""
    rows = list(stage_rows(summary))
    by_status = {k: sum(r["status"] == k for r in rows) for k in ("computed", "cached", "failed")}
    lines = [
        f"# {summary['pipeline']} run `{summary['run_id']}`: **{summary['status']}**",
        "",
        f"- stages: {by_status['computed']} computed, {by_status['cached']} cached, {by_status['failed']} failed",
        f"- shards computed: {sum(r['computed'] for r in rows):,} of {sum(r['shards'] for r in rows):,}",
        f"- rows out: {sum(r['rows_out'] for r in rows):,}; rejects: {sum(r['rejects'] for r in rows):,}",
        f"- cache: `{summary['cache']}`",
    ]
    for child in summary.get("pipelines") or []:
        lines.append(
            f"- pipeline **{child['pipeline']}** `{child['run_id'] or '-'}`: {child['status']}, "
            f"{child['seconds']:.1f} s" + (f": {child['error']}" if child.get("error") else "")
        )
    if summary.get("error"):
        lines += ["", "## Error", "", "```", str(summary["error"]), "```"]
    return "\n".join(lines) + "\n"


def artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return "".join(c if c.isalnum() else "-" for c in text.lower())


def publish_run_artifacts(summary: Mapping[str, Any]) -> None:
    """Publish the run's stage table and markdown summary as Prefect artifacts; a failure is logged, never
    raised."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    key = artifact_key(summary["pipeline"])
    try:
        create_table_artifact(
            list(stage_rows(summary)), key=f"{key}-stages", description=f"stage counts and timings of {summary['run_id']}"
        )
        create_markdown_artifact(summary_markdown(summary), key=f"{key}-summary", description=f"summary of {summary['run_id']}")
    except Exception as e:  # noqa: BLE001 — see the module docstring
        log.warning("could not publish the Prefect artifacts of run %s: %s", summary["run_id"], e)


def file_link_markdown(cache: Path, path: Path, text: str) -> str:
    """What the UI shows for a report file when no server serves the reports: its path, and the hint."""
    return (
        f"**{text}**: `{Path(path).absolute()}`\n\nA file on the machine that ran the flow; the UI can "
        f"link it over HTTP while `augdag server --cache {Path(cache).absolute()}` runs (it serves "
        f"`{Path(cache).absolute() / 'reports'}` read-only on 127.0.0.1).\n"
    )


def publish_file_link(cache: Path, path: Path, *, text: str, key: str, description: str | None = None) -> str | None:
    """A link artifact to ``path`` (a file under ``<cache>/reports``) over HTTP when `augdag server` serves
    the reports, else a markdown artifact with its absolute path; returns the URL linked, or None."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact

    from flows.ops.server import report_url

    url = report_url(cache, path)
    if url:
        create_link_artifact(url, link_text=text, key=key, description=description)
    else:
        create_markdown_artifact(file_link_markdown(cache, path, text), key=key, description=description)
    return url


class ShardProgress:
    """Shards done of a stage: to the CLI's progress bars, and as a Prefect progress artifact (percent)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.artifact, self.updated = label, total, None, time.monotonic()
        report(label, 0, total)
        if total > 1:
            try:
                from prefect.artifacts import create_progress_artifact

                self.artifact = create_progress_artifact(0.0, description=f"{label}: shards done")
            except Exception as e:  # noqa: BLE001
                log.warning("no progress artifact for %s: %s", label, e)

    def update(self, done: int) -> None:
        """``done`` shards finished: to the progress bars at once, and to the progress artifact at most once
        per ``UPDATE_EVERY_S`` (and when the last shard is done)."""
        report(self.label, done, self.total)
        now = time.monotonic()
        # an API call costs the driver ~90 ms: at most one per UPDATE_EVERY_S, and the last one
        if done < self.total and now - self.updated < UPDATE_EVERY_S:
            return
        self.updated = now
        if isinstance(self.artifact, UUID):
            try:
                from prefect.artifacts import update_progress_artifact

                update_progress_artifact(self.artifact, 100.0 * done / self.total)
            except Exception as e:  # noqa: BLE001
                log.warning("progress artifact of %s: %s", self.label, e)
                self.artifact = None
