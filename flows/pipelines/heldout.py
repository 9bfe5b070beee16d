"""The guard every training input passes before a model learns from it: no line of a held-out set (issue 47).

Held-out sets are out of the views training reads (``heldout_<kind>``: flows/pipelines/ingest.py), but an input
assembled later can still hold a test line: an arm's SQL over another view, a generated row, a copy under another
dataset's name. ``check_heldout_overlap`` compares the input with every held-out set of the profile
(conf/roles.py) by decontaminate's rule (tasks.ingest.heldout_overlap.py), records what it found as a
`heldout_overlap` artifact (view ``heldout_overlap``: every pair, by input and set) and fails the run with one line
naming the input, the set and the count, unless the profile allows that set by name (``heldout.allow_overlap``),
in which case the run's warnings say so.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError
from conf.roles import evaluation_datasets
from conf.schema import AugdagConf
from flows.engine.driver import Run, run_source_stage
from flows.engine.replay import run_logger
from flows.pipelines.ingest import ingest_dataset
from storage.artifacts import ArtifactRef
from storage.schemas import TEXT_FIELDS
from tasks.common.mix import content_hash
from tasks.ingest.heldout_overlap import heldout_overlaps

OVERLAP_VERSION = "1"
VIEW = "heldout_overlap"


def heldout_rows(run: Run, conf: AugdagConf) -> dict[str, tuple[pa.Table, tuple[str, ...]]]:
    """Every held-out set of the profile as validated (never cleaned), with its text fields (a slots set: its
    tokens, compared joined by spaces)."""
    sets = {}
    for name in evaluation_datasets(conf):
        kind = conf.datasets[name].kind
        fields = TEXT_FIELDS[kind] or ("tokens",)
        sets[name] = (ingest_dataset(run, conf, name, held_out=True).parts().table([*fields, "line"]), fields)
    return sets


def check_heldout_overlap(
    run: Run, conf: AugdagConf, key: str, rows: pa.Table, fields: Sequence[str], *, exact: bool = False, drop: bool = False
) -> pa.Table:
    """The overlaps of training input ``rows`` (its text ``fields``), named by its profile ``key``
    (``train_nmt.experiments.all.mix``), with the profile's held-out sets, recorded (none too: the view shows each
    input's last check); a ``ConfError`` (one line: the input, every set it reaches with its count, where the pairs
    are) when a set not in ``heldout.allow_overlap`` is hit.
    ``exact``: equal lines only (threshold 1), for slot utterances, short templated commands whose near neighbours
    differ in the slot values a tagger is tested on ("will i need a coat tomorrow" / "... next tuesday").
    ``drop``: the caller leaves the overlapping rows out (``without_overlaps``): a warning instead of the error."""
    heldout = heldout_rows(run, conf)
    if not heldout or rows.num_rows == 0:
        return heldout_overlaps(rows.slice(0, 0), fields, {})
    h = conf.heldout
    threshold = 1.0 if exact else h.threshold
    found = heldout_overlaps(
        rows, fields, heldout, threshold=threshold, shingle=h.shingle, n=h.n, num_perm=h.num_perm, seed=h.seed
    )
    record = found.append_column("input", pa.repeat(pa.scalar(key), found.num_rows))
    check = {**h.model_dump(exclude={"allow_overlap", "on_overlap"}), "threshold": threshold}
    params = {"input": key, "fields": list(fields), "check": check}
    run_source_stage(
        run,
        name=VIEW,
        version=OVERLAP_VERSION,
        produce=lambda: iter([(0, record)]),
        params=params,
        input_fingerprint=content_hash(record, ("row", "heldout", "heldout_line")),
        view="heldout_overlap",  # VIEW, literally: tests/cli/test_views_shell.py finds a stage's views by this text
        dataset=key,
    )
    if found.num_rows == 0:
        return found
    counts = {c["values"]: c["counts"] for c in pc.value_counts(found["heldout"]).to_pylist()}
    where = f"augdag sql \"SELECT * FROM {VIEW} WHERE input = '{key}'\""
    rule = "equal after normalising" + ("" if threshold >= 1 else f", or Jaccard >= {threshold:g}")

    def line(names: list[str]) -> str:
        sets = ", ".join(f"{name!r} ({counts[name]:,} distinct rows)" for name in names)
        return f"{key} overlaps the held-out set{'s' if len(names) > 1 else ''} {sets} ({rule})"

    if allowed := sorted(n for n in counts if n in h.allow_overlap):
        _warn(run, f"{line(allowed)}; allowed by heldout.allow_overlap. The pairs: {where}")
    refused = sorted(n for n in counts if n not in h.allow_overlap)
    if refused and drop:
        _warn(run, f"{line(refused)}: left out with their copies (heldout.on_overlap: drop; `dropped`). The pairs: {where}")
    elif refused:
        raise ConfError(
            f"{line(refused)}: a score on data a model learnt from is not a held-out score. The pairs: {where}. Hint: "
            "select without them (WHERE source = '<training dataset>'), switch on ingest.clean.decontaminate, leave them "
            "out of a train_nmt mix (heldout.on_overlap: drop), or allow it on purpose with heldout.allow_overlap: "
            f"[{', '.join(refused)}]"
        )
    return found


def _warn(run: Run, warning: str) -> None:
    run_logger().warning("%s", warning)
    if warning not in run.warnings:
        run.warnings.append(warning)


def without_overlaps(rows: pa.Table, found: pa.Table, allowed: Sequence[str]) -> dict[str, pa.Table]:
    """``rows`` (role part) without those ``found`` overlapping a held-out set not ``allowed`` and without their
    copies (``found`` lists a distinct (src, tgt) once), and those rows (role dropped, when any) with a ``reason``
    (test_overlap) and a ``detail`` (the first set, line, side and Jaccard found for each), both in input order."""
    hits = found.filter(pc.invert(pc.is_in(found["heldout"], value_set=pa.array(list(allowed), pa.string()))))
    keys = pc.binary_join_element_wise(rows["src"], rows["tgt"], "\x00")
    first: dict[str, str] = {}
    for h in hits.to_pylist():
        key = keys[h["row"]].as_py()
        first.setdefault(key, f"{h['heldout']} line {h['heldout_line']} ({h['side']}, Jaccard {h['jaccard']:.2f})")
    if not first:
        return {"part": rows}
    mask = pc.is_in(keys, value_set=pa.array(list(first), pa.string()))
    dropped = rows.filter(mask)
    details = pa.array([first[k] for k in keys.filter(mask).to_pylist()], pa.string())
    dropped = dropped.append_column("reason", pa.array(["test_overlap"] * len(details), pa.string()))
    return {"part": rows.filter(pc.invert(mask)), "dropped": dropped.append_column("detail", details)}


def check_heldout_dataset(run: Run, conf: AugdagConf, key: str, ref: ArtifactRef) -> pa.Table:
    """``check_heldout_overlap`` over an ingested bitext a model trains on as it is (self-training's teacher,
    rejuvenation's identification model): its src and tgt, read whole."""
    return check_heldout_overlap(run, conf, key, ref.parts().table(["src", "tgt"]), ("src", "tgt"))
