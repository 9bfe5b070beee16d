"""A warning for every filter that dropped more than half of its input (issue 26, defect 9).

A filter that drops most of what it gets is rarely what the user meant: a teacher too weak to translate
(``length_ratio dropped 91 % of the teacher's translations``), a wrong column, a threshold on the wrong
scale. ``drop_warnings`` reads a run's stage reports (rows kept, rejected and dropped per stage) and, for a
stage over the share, the reasons of its dropped rows (the ``dropped`` parts of its artifact, as the
`dropped` view shows them). Reasons that drop a configured share by design (``QUOTA_REASONS``) do not count.
The run's summary keeps the lines (``warnings``); the CLI prints them under the summary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

SHARE = 0.5  # more than this share of a stage's input dropped: a warning
# a configured share, not a verdict on the rows: rejuvenation.inactive_ratio, self_training.filter.lm_drop,
# mt_paraphrase's `keep` paraphrases per pair
QUOTA_REASONS = frozenset({"inactive", "lm_score", "over_keep"})
# what a stage's input is where it is a model's output, and what a large drop says about that model
MODEL_OUTPUTS = {
    "synthetic_clean": (
        "the teacher's translations",
        "the teacher may be too weak (its BLEU is above; self_training.teacher.train)",
    ),
    "curriculum": ("the generator's paraphrases", "the paraphrase generator may be too weak (paraphrase.generator)"),
    "paraphrased_bitext": ("the generator's paraphrases", "the generator may be too weak (mt_paraphrase.generator)"),
    "c2c_select": ("the generator's rows", "the generator may be too weak, or repeat its training data (c2c)"),
}


def dropped_reasons(root: Path | str, stage: Mapping[str, Any], store: str | None = None) -> Counter[str]:
    """Rows per reason in the ``dropped`` parts of one stage report's artifact (``store``: on that object store)."""
    from storage import objects
    from storage.artifacts import ArtifactRef

    ref = ArtifactRef(str(root), stage["stage"], stage["fingerprint"], n_shards=stage["shards"], store=store)
    counts: Counter[str] = Counter()
    present = objects.listing(ref.dir, ".parquet")
    for path in ref.paths("dropped"):
        if objects.name(path) in present:
            counts.update(objects.read_table(path, columns=["reason"])["reason"].to_pylist())
    return counts


def input_and_dropped(stage: Mapping[str, Any]) -> tuple[int, int]:
    """A stage report's input rows and dropped rows: its ``kept`` and ``dropped`` where it has them (flows/
    recording.py), else its part's and dropped part's rows; input at least kept + rejected + dropped (a cached
    stage may report 0 rows in)."""
    out = stage["rows_out"]
    kept, dropped = stage.get("kept"), stage.get("dropped")
    if kept is None or dropped is None:
        kept, dropped = out.get("part", 0), out.get("dropped", 0)
    return max(stage["rows_in"], kept + dropped + out.get("rejects", 0)), dropped


def stage_warning(stage: Mapping[str, Any], reasons: Mapping[str, int]) -> str | None:
    """The warning for one stage report and its dropped rows per reason, or None when the reasons that count
    dropped at most ``SHARE`` of its input."""
    rows, _ = input_and_dropped(stage)
    counted = sorted(((n, r) for r, n in reasons.items() if r not in QUOTA_REASONS and n), key=lambda t: (-t[0], t[1]))
    dropped = sum(n for n, _ in counted)
    if not rows or dropped <= SHARE * rows:
        return None
    what, hint = MODEL_OUTPUTS.get(
        stage["stage"],
        (
            f"`{stage['dataset']}`" if stage["dataset"] else "its input",
            (
                f"check the data and the filter's settings (augdag sql \"SELECT reason, detail, count(*) FROM dropped "
                f"WHERE stage = '{stage['stage']}' GROUP BY ALL\")"
            ),
        ),
    )
    by = counted[0][1] if len(counted) == 1 else " and ".join(f"{r} ({n:,})" for n, r in counted)
    where = stage["stage"] + (f"[{stage['dataset']}]" if stage["dataset"] else "")
    return f"{by} dropped {100 * dropped // rows} % of {what} ({dropped:,} of {rows:,} rows in {where}): {hint}"


def drop_warnings(stages: Iterable[Mapping[str, Any]], reasons_of: Callable[[Mapping[str, Any]], Mapping[str, int]]) -> list[str]:
    """The warnings of a run's stage reports, in stage order; ``reasons_of`` (e.g. ``dropped_reasons``) is
    asked only for a completed artifact stage that dropped more than ``SHARE`` of its input."""
    lines = []
    for s in stages:
        if s.get("kind", "artifact") != "artifact" or s["status"] == "failed":
            continue
        rows, dropped = input_and_dropped(s)
        if dropped <= SHARE * rows:
            continue
        if (line := stage_warning(s, reasons_of(s))) is not None:
            lines.append(line)
    return lines


def run_warnings(root: Path | str, stages: Iterable[Mapping[str, Any]], store: str | None = None) -> list[str]:
    """``drop_warnings`` of a run's stage reports, the reasons read from the cache at ``root``; a stage whose
    parts cannot be read gives no warning rather than failing the run."""

    def reasons(stage: Mapping[str, Any]) -> Mapping[str, int]:
        try:
            return dropped_reasons(root, stage, store)
        except (OSError, ValueError, KeyError):
            return {}

    return drop_warnings(stages, reasons)
