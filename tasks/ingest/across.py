"""The filters across datasets: decontaminate, then near_duplicates, over the rows every dataset's chain kept.

Stages. A dataset whose settings switch on near_duplicates or decontaminate (a training dataset of kind bitext,
mono or labeled) is cleaned in three steps instead of one, so that every drop still lands in one artifact:

    filter_chain[X]   mapped, internal: ``clean``'s verdicts on every row of X (``reason``/``detail``, null: kept)
    across_datasets   reduce, internal, once per run: over the kept rows of every such dataset and the rows of
                      every held-out set, the rows to drop (``DROPS``: source, line, sentence, reason, detail)
    clean[X]          mapped, view = X's kind: ``drop_across``, X's rows minus its chain's drops and its
                      across_datasets drops; its dropped part holds both, with their reasons

The last step is a `clean` stage, so a view (one current artifact per view, stage and dataset, storage/catalog.py)
shows X's final rows, and the `dropped` view its every drop, from one artifact: input rows = kept + rejected +
dropped, as for any dataset. A dataset without those filters has its one `clean` stage (tasks/ingest/clean.py),
as before; switching them off makes that one current again (it is registered last).

decontaminate (reason ``test_overlap``): a side of a training row (bitext: src, then tgt) whose ``normalise``d text
equals a line of a held-out set (any text side of it), or whose Jaccard similarity with one is >= ``threshold``
(the same MinHash LSH as near_duplicates: tasks/ingest/near_duplicates.py, candidates from shared bands, each
verified exactly), is dropped; the detail names the first such line: ``test_overlap=demo_test:17 side=src
jaccard=1``. near_duplicates then runs over the rows left, per record kind (a bitext pair as its two sides joined
by a tab), in (source, line) order: ``near_duplicate_of=demo_bitext:12 jaccard=0.8571``, the kept row named by
dataset and line (``:sentence`` after it for a split mono dataset). Decontamination goes first so that a
near-duplicate's kept row is never a row dropped for overlapping a test set.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.base import ConfModel
from conf.schema import Kind
from conf.sections.filters import DecontaminateConf, NearDuplicatesConf
from storage.artifacts import ArtifactRef, read_manifest
from storage.parts import Parts
from storage.schemas import TEXT_FIELDS
from tasks.ingest import near_duplicates as minhash
from tasks.ingest.clean import clean_counts
from tasks.ingest.near_duplicates import normalise_column
from tasks.runtime.stage import Stage

COUNTED_BEFORE = ("duplicate", "near_duplicates", "test_overlap")  # the duplicates and across_datasets rows count them

DROPS = pa.schema(
    [("source", pa.string()), ("line", pa.int64()), ("sentence", pa.int32()), ("reason", pa.string()), ("detail", pa.string())]
)
SENTENCE_BITS = 20  # a row's key: line · 2^20 + sentence (a line has fewer than a million sentences)


class AcrossParams(ConfModel):
    """The `across_datasets` stage's parameters: the record kind of each input dataset (side input ``rows:<name>``),
    which training datasets each filter compares, and the held-out sets decontaminate compares them with."""

    kinds: dict[str, Kind]
    decontaminate: DecontaminateConf | None = None
    decontaminate_sets: list[str] = []
    test_sets: list[str] = []
    near_duplicates: NearDuplicatesConf | None = None
    near_duplicate_sets: list[str] = []


def side_name(dataset: str) -> str:
    """The side input of ``across_datasets`` that holds ``dataset``'s rows."""
    return f"rows:{dataset}"


def _kept(parts: Parts) -> pa.Table | None:
    """The rows a dataset's chain kept (all rows of a held-out set), by line and sentence; None for no parts."""
    if not len(parts):
        return None
    rows = parts.table()
    if "reason" in rows.column_names:
        rows = rows.filter(pc.is_null(rows["reason"]))
    order = [("line", "ascending")] + ([("sentence", "ascending")] if "sentence" in rows.column_names else [])
    return rows.sort_by(order)


def _names(rows: pa.Table) -> list[str]:
    """``source:line`` of each row (``source:line:sentence`` for a split row)."""
    names = [f"{s}:{line}" for s, line in zip(rows["source"].to_pylist(), rows["line"].to_pylist(), strict=True)]
    if "sentence" in rows.column_names:
        names = [n if s is None else f"{n}:{s}" for n, s in zip(names, rows["sentence"].to_pylist(), strict=True)]
    return names


def _texts(rows: pa.Table, kind: str) -> list[pa.Array]:
    return [pc.fill_null(rows[f], "").combine_chunks() for f in TEXT_FIELDS[kind]]


def _drops(rows: pa.Table, at: np.ndarray, reason: str, details: list[str]) -> pa.Table:
    at_ = pa.array(at, pa.int64())
    sentence = pc.take(rows["sentence"], at_) if "sentence" in rows.column_names else pa.nulls(len(at), pa.int32())
    columns = [pc.take(rows["source"], at_), pc.take(rows["line"], at_), sentence, pa.array([reason] * len(at)), details]
    return pa.Table.from_arrays([pa.array(c) if isinstance(c, list) else c for c in columns], schema=DROPS)


def overlaps(
    pool: pa.Array,
    sides: list[pa.Array],
    *,
    shingle: str = "char",
    n: int = 5,
    num_perm: int = 128,
    threshold: float = 0.8,
    seed: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row (one text per side in ``sides``), the first line of ``pool`` (held-out lines) that a side equals
    after ``normalise`` or has a Jaccard similarity >= ``threshold`` with, sides in order: (pool index or -1, side,
    Jaccard). An empty normalised line matches nothing; ``threshold`` 1 matches the equal lines only. Candidates are
    the pool lines sharing an LSH band with the side (``lsh_params``), every one verified exactly; the first pool
    line (in order) at or above the threshold wins."""
    norm = normalise_column(pool)
    strings = norm.to_pylist()
    first: dict[str, int] = {}
    for i, s in enumerate(strings):
        if s:
            first.setdefault(s, i)
    unique = list(first)
    rows = len(sides[0]) if sides else 0
    hit, side, score = np.full(rows, -1, np.int64), np.zeros(rows, np.int64), np.zeros(rows)
    if not unique:
        return hit, side, score
    pool_at = np.array(list(first.values()), np.int64)
    if threshold < 1:
        pool_sig = minhash.signatures(pa.array(unique, pa.string()), shingle=shingle, n=n, num_perm=num_perm, seed=seed)
        bands, per_band = minhash.lsh_params(threshold, num_perm)
    pool_sets: dict[int, set[str]] = {}
    for k, column in enumerate(sides):
        texts = normalise_column(column)
        exact = pc.index_in(texts, value_set=pa.array(unique, pa.string())).to_numpy(zero_copy_only=False)
        open_ = hit < 0
        found = open_ & ~np.isnan(exact.astype(np.float64))
        hit[found], side[found], score[found] = pool_at[exact[found].astype(np.int64)], k, 1.0
        rest = np.flatnonzero((hit < 0) & (pc.utf8_length(texts).to_numpy(zero_copy_only=False) > 0))
        if not len(rest) or threshold >= 1:  # 1: the equal lines only
            continue
        mine = pc.take(texts, pa.array(rest, pa.int64()))
        sig = minhash.signatures(mine, shingle=shingle, n=n, num_perm=num_perm, seed=seed)
        pairs = minhash.candidate_pairs(np.concatenate([pool_sig, sig]), bands=bands, rows=per_band)
        pairs = pairs[(pairs[:, 0] < len(unique)) & (pairs[:, 1] >= len(unique))]  # (pool line, this side's row)
        words = mine.to_pylist()
        for j, i in pairs.tolist():  # sorted by row, then pool line: the first pool line that passes wins
            r = rest[i - len(unique)]
            if hit[r] >= 0:
                continue
            if j not in pool_sets:
                pool_sets[j] = minhash.shingles(unique[j], shingle=shingle, n=n)
            similarity = minhash.jaccard(minhash.shingles(words[i - len(unique)], shingle=shingle, n=n), pool_sets[j])
            if similarity >= threshold:
                hit[r], side[r], score[r] = pool_at[j], k, similarity
    return hit, side, score


def across_datasets(
    *,
    kinds: dict[str, str],
    decontaminate: DecontaminateConf | None = None,
    decontaminate_sets: Sequence[str] = (),
    test_sets: Sequence[str] = (),
    near_duplicates: NearDuplicatesConf | None = None,
    near_duplicate_sets: Sequence[str] = (),
    **rows: Parts,
) -> pa.Table:
    """The rows to drop across datasets (``DROPS``, by source, line, sentence): decontaminate's, then
    near_duplicates' over the rest (module docstring). ``rows``: each dataset's rows as ``rows:<name>``, a training
    dataset's marked by its chain (``reason`` null: kept), a held-out set's as validated."""
    kept = {name: _kept(rows[side_name(name)]) for name in sorted({*decontaminate_sets, *near_duplicate_sets})}
    kept = {name: t for name, t in kept.items() if t is not None and t.num_rows}
    out = [DROPS.empty_table()]
    if decontaminate is not None:
        tests = {name: _kept(rows[side_name(name)]) for name in sorted(test_sets)}
        tests = {name: t for name, t in tests.items() if t is not None}
        names, pool = [], [pa.array([], pa.string())]  # every held-out line, side after side, and its name
        for name, t in tests.items():
            for column in _texts(t, kinds[name]):
                names += _names(t)
                pool.append(column)
        pool_text = pa.concat_arrays(pool)
        conf = decontaminate.model_dump()
        for name in (n for n in sorted(decontaminate_sets) if n in kept):
            t = kept[name]
            hit, side, score = overlaps(pool_text, _texts(t, kinds[name]), **conf)
            at = np.flatnonzero(hit >= 0)
            fields = TEXT_FIELDS[kinds[name]]
            details = [
                f"test_overlap={names[hit[i]]} side={fields[side[i]]} jaccard={round(float(score[i]), 4) + 0.0:g}" for i in at
            ]
            out.append(_drops(t, at, "test_overlap", details))
            kept[name] = t.filter(pa.array(hit < 0))
    if near_duplicates is not None:
        for kind in sorted({kinds[n] for n in near_duplicate_sets if n in kept}):
            tables = [kept[n] for n in sorted(near_duplicate_sets) if n in kept and kinds[n] == kind]
            texts = [_texts(t, kind) for t in tables]
            joined = [sides[0] if len(sides) == 1 else pc.binary_join_element_wise(*sides, "\t") for sides in texts]
            keys = [name for t in tables for name in _names(t)]
            verdict = minhash.near_duplicates(keys, pa.concat_arrays(joined), **near_duplicates.model_dump())
            offset = 0
            for t in tables:
                mine = ~verdict.keep[offset : offset + t.num_rows]
                at = np.flatnonzero(mine)
                out.append(_drops(t, at, "near_duplicates", [verdict.detail[offset + i] for i in at]))
                offset += t.num_rows
    drops = pa.concat_tables(out)
    return drops.sort_by([("source", "ascending"), ("line", "ascending"), ("sentence", "ascending")])


def row_keys(rows: pa.Table) -> pa.Array:
    """Each row's key within its dataset: line · 2^20 + sentence (0 for a row that was not split)."""
    line = pc.multiply(pc.cast(rows["line"], pa.int64()), 1 << SENTENCE_BITS)
    if "sentence" not in rows.column_names:
        return line
    return pc.add(line, pc.cast(pc.fill_null(rows["sentence"], 0), pa.int64()))


def drop_across(rows: pa.Table, drops: pa.Table) -> dict[str, pa.Table]:
    """A dataset's `clean` after the filters across datasets: the rows its chain kept (``reason`` null) and
    ``drops`` does not list, in order; every other row in the dropped part with its reason and detail (its chain's,
    else its drop's). Needs ``source``, ``line`` (``sentence``), ``reason``, ``detail``; returns the rows' other
    columns, as ``clean`` does: ``{"part": kept, "dropped": dropped + reason + detail}``."""
    mine = drops.filter(pc.is_in(drops["source"], value_set=pc.unique(rows["source"]).cast(pa.string())))
    at = pc.index_in(row_keys(rows), value_set=row_keys(mine))
    reason = pc.coalesce(rows["reason"], pc.take(mine["reason"], at))
    detail = pc.coalesce(rows["detail"], pc.take(mine["detail"], at))
    dropped = pc.is_valid(reason)
    body = rows.drop_columns(["reason", "detail"])
    return {
        "part": body.filter(pc.invert(dropped)),
        "dropped": body.filter(dropped)
        .append_column("reason", pc.filter(reason, dropped))
        .append_column("detail", pc.filter(detail, dropped)),
    }


def _drop_counts(out: ArtifactRef, rows_in: int) -> tuple[int, int, int]:
    """The across_datasets stage's counts: its part lists rows other datasets' `clean` drop (none kept here)."""
    manifest = read_manifest(out)
    return rows_in, 0, (sum(f["rows"] for f in manifest["files"] if f["role"] == "part") if manifest else 0)


ACROSS_DATASETS = Stage("across_datasets", "1", across_datasets, reduce=True, params=AcrossParams, counts=_drop_counts)
CLEAN_ACROSS = Stage(
    "clean", "1", drop_across, counts=functools.partial(clean_counts, before=COUNTED_BEFORE)
)  # view: the record kind, set per dataset by the flow
