"""The lines of `augdag runs`: one per run (``run_lines``), or each run with its stages (``stage_lines``).

Both are rich ``Text``: a value (a profile path, a stage or dataset name, an error) prints as written, never
read as markup, its control characters escaped (``shown``: an ESC in an error reaches the terminal as ``\\x1b``).
Columns are as wide as their widest value: a long name widens its column, it is not cut.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.text import Text

from flows.cli.app import shown

Row = Mapping[str, Any]
HEADER = ("run", "pipeline", "profile", "status", "started", "took", "stages")


def _summary(run: Row) -> dict[str, Any]:
    return json.loads(run["summary"]) if run["summary"] else {}


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%S")


def took(started: datetime | None, finished: datetime | None) -> str:
    """A run's duration: ``8.3 s``, ``4 min 05 s``, ``2 h 07 min``; ``-`` while it runs."""
    if started is None or finished is None:
        return "-"
    s = (finished - started).total_seconds()
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def stage_counts(run: Row, shards: Sequence[Row]) -> tuple[int, int]:
    """(done, failed) stages of a run, each fingerprint once: from its summary (a nightly: its pipelines'),
    else, for a run still going or crashed, from its shard records."""
    summary = _summary(run)
    stages = summary.get("stages") or [s for c in summary.get("pipelines") or [] for s in c.get("stages") or []]
    if stages:
        status = {}
        for s in stages:
            key = s.get("fingerprint") or (s.get("stage"), s.get("dataset"))
            status[key] = "failed" if s.get("status") == "failed" or status.get(key) == "failed" else "done"
    else:
        status = {s["fingerprint"]: "failed" if s["failed"] else "done" for s in shards if s["run_id"] == run["run_id"]}
    failed = sum(v == "failed" for v in status.values())
    return len(status) - failed, failed


def _status_style(status: str) -> str:
    return {"completed": "green", "running": "yellow"}.get(status, "red")


def _chain(run: Row, retried_by: Mapping[str, Sequence[str]]) -> str:
    retry_of = _summary(run).get("retry_of")
    return "  ".join(
        [*([f"retry of {retry_of}"] if retry_of else []), *(f"retried by {x}" for x in retried_by.get(run["run_id"], []))]
    )


def _error(run: Row) -> str | None:
    """The last non-blank line of a run's error, for a run that did not complete."""
    error = _summary(run).get("error")
    if run["status"] == "completed" or not error:
        return None
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else None


def run_lines(runs: Sequence[Row], shards: Sequence[Row], retried_by: Mapping[str, Sequence[str]]) -> list[Text]:
    """A header and one line per run: the HEADER columns, then the retry chain and a failed run's error."""
    table = []
    for r in runs:
        done, failed = stage_counts(r, shards)
        table.append(
            (
                shown(r["run_id"]),
                shown(r["pipeline"] or ""),
                shown(r["profile"] or ""),
                shown(r["status"] or ""),
                _when(r["started_at"]),
                took(r["started_at"], r["finished_at"]),
                f"{done} done" + (f", {failed} failed" if failed else ""),
            )
        )
    widths = [max(len(row[i]) for row in [HEADER, *table]) for i in range(len(HEADER))]
    lines = [Text("  ".join(h.ljust(w) for h, w in zip(HEADER, widths)).rstrip(), style="bold")]
    for r, row in zip(runs, table):
        line = Text()
        for i, (cell, w) in enumerate(zip(row, widths)):
            last = i == len(row) - 1
            line.append(
                cell if last else cell.ljust(w) + "  ", style=_status_style(cell) if i == 3 else ("bold" if i == 0 else "")
            )
        if chain := _chain(r, retried_by):
            line.append(f"  {shown(chain)}")
        if (error := _error(r)) is not None:
            line.append("  error: ", style="red")
            line.append(shown(error))
        lines.append(line)
    return lines


def stage_lines(runs: Sequence[Row], shards: Sequence[Row], retried_by: Mapping[str, Sequence[str]]) -> list[Text]:
    """Each run's line (``profile=``, start -> finish, the retry chain), its error's last line, and one line
    per stage, dataset and fingerprint: its shards written (computed, cached) of all, failed, rows out, seconds."""
    width_stage = max([len(shown(s["stage"])) for s in shards] + [12])
    width_dataset = max([len(shown(s["dataset"] or "")) for s in shards] + [16])
    lines = []
    for r in runs:
        summary, chain = _summary(r), _chain(r, retried_by)
        line = Text.assemble(
            (shown(r["run_id"]), "bold"),
            f"  {shown(r['pipeline'] or '')}  profile={shown(r['profile'] or '')}  ",
            (shown(r["status"]), _status_style(r["status"])),
            f"  {r['started_at']} -> {r['finished_at'] or '…'}",
            f"  {shown(chain)}" if chain else "",
        )
        lines.append(line)
        if (error := _error(r)) is not None:
            lines.append(Text.assemble("    ", ("error:", "red"), f" {shown(error)}"))
        reported = {s["fingerprint"]: s for s in summary.get("stages") or []}
        for s in (s for s in shards if s["run_id"] == r["run_id"]):
            rep = reported.get(s["fingerprint"], {})
            n = rep.get("shards", s["shards"])
            of = str(n) if rep.get("shards_known", True) else f"at least {n}"
            written, failed = s["computed"] + s["cached"], f", {s['failed']} failed" if s["failed"] else ""
            lines.append(
                Text(
                    f"    {shown(s['stage']):<{width_stage}} {shown(s['dataset'] or ''):<{width_dataset}} "
                    f"{shown(s['fingerprint'][:12])}  "
                    f"shards {written} of {of} written ({s['computed']} computed, {s['cached']} cached){failed}"
                    f"  rows out {s['rows_out'] or 0:,}  {s['seconds'] or 0:.2f} s"
                )
            )
    return lines
