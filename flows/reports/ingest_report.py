"""The ingest run page (``ingest.html``), written when a corpus filter is on: per dataset and reason, the rows its
`clean` dropped (a bar chart and a table) and three of them each (drawn at random, seeded, shown by line), with the
detail each was cut on. language_id's drops at low confidence (every failed side's identifier below
``LOW_CONFIDENCE``: a guess, e.g. "Best regards" as Icelandic at 0.04) are counted and shown apart. The counts also
make the run summary's lines (flows/pipelines/ingest.py ``summary_lines``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.sections.filters import ROW_FILTERS
from flows.engine.driver import Run
from flows.engine.recording import artifact_rows
from flows.reports.reporting import publish
from storage import objects
from storage.artifacts import ArtifactRef
from tasks.ingest.clean import REASONS

ORDER = (*REASONS, *ROW_FILTERS, "language_id (low confidence)", "test_overlap", "near_duplicates")  # as shown
EXAMPLES = 3
SEED = 0  # the examples' draw
LOW_CONFIDENCE = 0.5  # a language_id drop whose failed sides were all identified below this is shown apart
LOW = "language_id (low confidence)"
_CONFIDENCE = re.compile(r"language_id=[^:\s]+:([0-9.]+)")


def low_confidence(detail: str | None) -> bool:
    """Whether a language_id drop's detail (``src:language_id=is:0.04``) gives every failed side's confidence below
    ``LOW_CONFIDENCE``."""
    found = [float(c) for c in _CONFIDENCE.findall(detail or "")]
    return bool(found) and max(found) < LOW_CONFIDENCE


def _dropped(ref: ArtifactRef) -> pa.Table:
    """The dropped part of a `clean` artifact, every shard (empty without columns when it has none)."""
    present = objects.listing(ref.dir, ".parquet")
    parts = [p for p in ref.paths("dropped") if objects.name(p) in present]
    return ref.parts("dropped").table() if len(parts) == ref.n_shards and parts else pa.table({})


def drop_counts(cleaned: Mapping[str, ArtifactRef]) -> dict[str, dict[str, Any]]:
    """Per dataset: its `clean`'s rows in, kept, and dropped per reason (in ``ORDER``, only those that dropped)."""
    counts = {}
    for name, ref in cleaned.items():
        dropped = _dropped(ref)
        found = dict.fromkeys(ORDER, 0)
        if dropped.num_rows:
            for reason, n in _pairs(dropped["reason"]):
                found[reason] = found.get(reason, 0) + n
        kept = artifact_rows(ref)
        reasons = {r: n for r, n in found.items() if n}
        counts[name] = {"rows": kept + sum(reasons.values()), "kept": kept, "reasons": reasons}
    return counts


def _pairs(column: pa.ChunkedArray) -> list[tuple[str, int]]:
    return [(v["values"], v["counts"]) for v in pc.value_counts(column).to_pylist()]


def _split_low(dropped: pa.Table) -> pa.Table:
    """``dropped`` with the reason of its low-confidence language_id drops replaced by ``LOW``."""
    if not dropped.num_rows:
        return dropped
    reasons = dropped["reason"].to_pylist()
    details = dropped["detail"].to_pylist()
    split = [LOW if r == "language_id" and low_confidence(d) else r for r, d in zip(reasons, details, strict=True)]
    return dropped.set_column(dropped.schema.get_field_index("reason"), "reason", pa.array(split, pa.string()))


def low_counts(cleaned: Mapping[str, ArtifactRef]) -> dict[str, int]:
    """Per dataset, its language_id drops at low confidence (``low_confidence``)."""
    return {name: _pairs_of(_split_low(_dropped(ref))).get(LOW, 0) for name, ref in cleaned.items()}


def _pairs_of(dropped: pa.Table) -> dict[str, int]:
    return dict(_pairs(dropped["reason"])) if dropped.num_rows else {}


def _examples(name: str, ref: ArtifactRef, reasons: Mapping[str, int]) -> list[dict[str, Any]]:
    """``EXAMPLES`` dropped rows of each reason of dataset ``name`` (low-confidence language_id apart), drawn at
    random (seeded by ``SEED`` and the dataset's name), shown by line."""
    dropped = _split_low(_dropped(ref))
    if not dropped.num_rows:
        return []
    fields = [f for f in ("src", "tgt", "text", "tokens") if f in dropped.column_names]
    rows = []
    for reason in [r for r in ORDER if r in reasons or r == LOW] + [r for r in reasons if r not in ORDER]:
        of = dropped.filter(pc.equal(dropped["reason"], reason)).sort_by("line")
        rng = np.random.default_rng([SEED, *name.encode()])
        pick = np.sort(rng.choice(of.num_rows, size=min(EXAMPLES, of.num_rows), replace=False))
        for r in of.take(pa.array(pick, pa.int64())).to_pylist():
            text = " ⇥ ".join(" ".join(r[f]) if isinstance(r[f], list) else str(r[f]) for f in fields)
            rows.append({"dataset": name, "reason": reason, "line": r["line"], "row": text, "detail": r["detail"]})
    return rows


def publish_report(run: Run, cleaned: Mapping[str, ArtifactRef], counts: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Write ``ingest.html`` (and its chart as ``ingest_filters.png``); returns the paths written."""
    from flows.reports.plots import hbar_figure, markdown_table

    low = low_counts(cleaned)
    table = pa.Table.from_pylist(
        [
            {"dataset": name, "reason": reason, "rows": n, "share": round(n / max(c["rows"], 1), 4)}
            for name, c in counts.items()
            for reason, n in _apart(c["reasons"], low.get(name, 0)).items()
            if n
        ],
        schema=pa.schema([("dataset", pa.string()), ("reason", pa.string()), ("rows", pa.int64()), ("share", pa.float64())]),
    )
    png = hbar_figure(
        [f"{r['dataset']} · {r['reason']}" for r in table.to_pylist()] or ["(none)"],
        table["rows"].to_pylist() or [0],
        xlabel="rows dropped",
        title="Rows each filter removed, per dataset (ingest's clean)",
    )
    totals = pa.Table.from_pylist(
        [{"dataset": n, "rows in": c["rows"], "kept": c["kept"], "dropped": c["rows"] - c["kept"]} for n, c in counts.items()]
    )
    examples = [e for name, ref in cleaned.items() for e in _examples(name, ref, counts[name]["reasons"])]
    shown = pa.Table.from_pylist(examples) if examples else pa.table({"dataset": pa.array([], pa.string())})
    md = f"### Ingest filters\n\n{markdown_table(totals)}\n\n{markdown_table(table)}\n"
    return publish(
        run,
        stem="ingest",
        title=f"Ingest filters — {run.run_id}",
        markdown=md,
        table=table,
        pngs={"ingest_filters": png},
        sections=[
            ("Rows in, kept and dropped per dataset", totals),
            ("Rows removed per dataset and filter", png),
            ("Rows removed per dataset and reason", table),
            ("Three examples of each (drawn at random, seeded; a bitext's src and tgt joined by ⇥)", shown),
        ],
    )


def _apart(reasons: Mapping[str, int], low: int) -> dict[str, int]:
    """``reasons`` with ``low`` of the language_id drops counted apart as ``LOW`` (after language_id)."""
    out: dict[str, int] = {}
    for reason, n in reasons.items():
        out[reason] = n - low if reason == "language_id" else n
        if reason == "language_id":
            out[LOW] = low
    return out
