"""The `clean` stage: exact-duplicate removal, token-length and length-ratio filters.

The same filter the self-training pipeline applies to its synthetic pairs (thesis ch. 6: drop a
pair with a side of fewer than 1 or more than 250 tokens, or a token-length ratio above 1.5).
Duplicates are global: ``find_duplicates`` (a reduce step in DuckDB over every shard) lists each
uid seen more than once with the line of its first occurrence (and its sentence, for rows split into
sentences: tasks/ingest/sentences.py); ``clean`` then keeps exactly that first occurrence, whichever shard it
is in. Every dropped row is returned with its ``reason`` and the ``detail`` it was cut on (``the same row as
line 3, which is kept``, ``tokens=0``, ``ratio=5 (src_tokens=5, tgt_tokens=1)``).

A dataset that is not cleaned (a held-out test or dev set: conf/roles.py; or ``datasets.X.clean: false``) goes
through ``keep_valid`` instead: the same stage name, so its view shows one current `clean` artifact per dataset
whichever ran last, and a fingerprint that says ``cleans: false``, so a cleaned artifact is never reused for it. A
held-out set's says ``held_out: true`` too, and its view is ``heldout_<kind>`` (storage/schemas.py): its rows are
never in the view training reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.schema import Kind
from conf.sections.cleaning import CleanConf, TokenFilter
from conf.sections.filters import ROW_FILTERS
from storage.artifacts import ArtifactRef, read_manifest
from storage.engines import scratch_duckdb
from storage.parts import Parts
from storage.schemas import TEXT_FIELDS
from tasks.ingest.chain import filter_chain
from tasks.runtime.stage import Stage

DUPLICATES_SCHEMA = pa.schema([("uid", pa.string()), ("first_line", pa.int64()), ("copies", pa.int64())])
FIRST_SENTENCE = pa.field("first_sentence", pa.int32())  # added when the rows have a `sentence` column
# drop reasons, checked in this order; a row gets the first that applies
REASONS = ("duplicate", "too_few_tokens", "too_many_tokens", "length_ratio")


def find_duplicates(parts: Parts, *, memory_limit: str = "384MB") -> pa.Table:
    """Every uid that occurs more than once, with the line of its first occurrence and its count.

    DuckDB's aggregate spills to a temporary directory past ``memory_limit`` (without one the limit is
    not enforced), so memory stays flat whatever the number of distinct rows.
    """
    if not parts:
        return DUPLICATES_SCHEMA.empty_table()
    with scratch_duckdb(memory_limit=memory_limit, name="duplicates") as con:
        split = "sentence" in con.sql(f"SELECT * FROM {parts.sql()} LIMIT 0").columns
        first = ", arg_min(sentence, (line, sentence)) AS first_sentence" if split else ""
        dups = con.sql(
            f"SELECT uid, min(line) AS first_line, count(*) AS copies{first} FROM {parts.sql()} "
            "GROUP BY uid HAVING count(*) > 1 ORDER BY first_line" + (", first_sentence" if split else "")
        ).to_arrow_table()
    return dups.cast(pa.schema([*DUPLICATES_SCHEMA, FIRST_SENTENCE]) if split else DUPLICATES_SCHEMA)


def duplicate_counts(out: ArtifactRef, rows_in: int) -> tuple[int, int, int]:
    """The duplicates stage's counts in rows, not groups: (rows_in, rows_in − d, d), d the copies after the
    first of each uid (Σ (copies − 1)), which ``clean`` drops as ``duplicate``."""
    groups = [out.read(i) for i in range(out.n_shards)]
    later = sum((pc.sum(t["copies"]).as_py() or 0) - t.num_rows for t in groups)
    return rows_in, rows_in - later, later


def clean_counts(out: ArtifactRef, rows_in: int, *, before: tuple[str, ...] = ("duplicate",)) -> tuple[int, int, int]:
    """The clean stage's counts with each row counted once: the rows it drops for a reason an earlier stage's row
    already counts (``before``: the duplicates stage's copies; across datasets also its near duplicates and test
    overlaps) are that stage's, so clean's rows in are the rows after them and its dropped its own filters'
    (6,023 read, 126 copies: duplicates 6,023 → 5,897, clean 5,897 → kept + dropped)."""
    manifest = read_manifest(out) or {"files": []}
    shards = [f["shard"] for f in manifest["files"] if f["role"] == "dropped" and f["rows"]]
    value_set = pa.array(before, pa.string())
    earlier = sum(pc.sum(pc.is_in(out.read(i, "dropped")["reason"], value_set=value_set)).as_py() or 0 for i in shards)
    kept = sum(f["rows"] for f in manifest["files"] if f["role"] == "part")
    dropped = sum(f["rows"] for f in manifest["files"] if f["role"] == "dropped")
    return rows_in - earlier, kept, dropped - earlier


def _details(
    reasons: list[str], lengths: dict[str, list[int]], ratios: list[float] | None, firsts: list[str | None] | None
) -> list[str]:
    """The value each dropped row was cut on: its first copy's line (duplicate), its token counts (too_few_tokens,
    too_many_tokens), its length ratio and the counts behind it (length_ratio)."""

    def tokens(i: int) -> str:
        return ", ".join(f"{f + '_' if len(lengths) > 1 else ''}tokens={n[i]}" for f, n in lengths.items())

    return [
        firsts[i]
        if why == "duplicate" and firsts
        else f"ratio={round(ratios[i], 3):g} ({tokens(i)})"
        if why == "length_ratio" and ratios
        else tokens(i)
        for i, why in enumerate(reasons)
    ]


def token_counts(table: pa.Table, field: str) -> pa.Array:
    """Whitespace tokens per row (a list field, as in `slots`, counts its elements)."""
    column = table[field]
    if pa.types.is_list(column.type):
        return pc.list_value_length(column)
    trimmed = pc.utf8_trim_whitespace(column)
    counts = pc.list_value_length(pc.utf8_split_whitespace(trimmed))  # runs of whitespace separate once
    return pc.if_else(pc.equal(pc.utf8_length(trimmed), 0), 0, counts)  # "" splits into [""]: 0 tokens, not 1


def marks(
    rows: pa.Table,
    duplicates: pa.Table,
    *,
    kind: str,
    dedup: bool = True,
    min_tokens: int = 1,
    max_tokens: int = 250,
    max_ratio: float = 1.5,
    filters: Mapping[str, Any] | None = None,
) -> tuple[pa.Array | pa.ChunkedArray, list[str]]:
    """Each row's ``reason`` (null: kept) and the ``detail`` of each dropped row, in order: the first of
    ``REASONS``, then of the corpus ``filters`` that are on (tasks/ingest/chain.py), that applies."""
    n = rows.num_rows
    reason = pa.nulls(n, pa.string())
    firsts = ratio = None

    def mark(condition: pa.Array, why: str) -> None:
        nonlocal reason
        condition = pc.fill_null(condition, False)
        reason = pc.if_else(pc.and_(pc.is_null(reason), condition), pa.scalar(why), reason)

    if dedup and duplicates.num_rows:
        first = pc.index_in(rows["uid"], value_set=duplicates["uid"])
        later = pc.not_equal(rows["line"], pc.take(duplicates["first_line"], pc.fill_null(first, 0)))
        if FIRST_SENTENCE.name in duplicates.column_names and "sentence" in rows.column_names:  # one line, 2 copies
            first_sentence = pc.take(duplicates[FIRST_SENTENCE.name], pc.fill_null(first, 0))
            later = pc.or_(later, pc.not_equal(rows["sentence"], first_sentence))
        first_line = pc.cast(pc.take(duplicates["first_line"], first), pa.string())
        if FIRST_SENTENCE.name in duplicates.column_names and "sentence" in rows.column_names:
            firsts = pc.binary_join_element_wise(
                "the same sentence as line ",
                first_line,
                " sentence ",
                pc.cast(first_sentence, pa.string()),
                ", which is kept",
                "",
            )
        else:
            firsts = pc.binary_join_element_wise("the same row as line ", first_line, ", which is kept", "")
        mark(pc.and_(pc.is_valid(first), later), "duplicate")
    fields = TEXT_FIELDS[kind] or ("tokens",)
    lengths = {f: token_counts(rows, f) for f in fields}
    for length in lengths.values():
        mark(pc.less(length, min_tokens), "too_few_tokens")
    for length in lengths.values():
        mark(pc.greater(length, max_tokens), "too_many_tokens")
    if kind == "bitext":
        s, t = (pc.cast(lengths[f], pa.float64()) for f in ("src", "tgt"))
        ratio = pc.divide(pc.max_element_wise(s, t), pc.max_element_wise(pc.min_element_wise(s, t), 1.0))
        mark(pc.greater(ratio, max_ratio), "length_ratio")
    filtered = {}
    if filters and any(v is not None for v in filters.values()):
        kept = np.flatnonzero(pc.is_null(reason).to_numpy(zero_copy_only=False))
        filtered = filter_chain(rows, kept, kind=kind, filters=filters)
        if filtered:
            whys = reason.to_pylist()
            for i, (why, _) in filtered.items():
                whys[i] = why
            reason = pa.array(whys, pa.string())
    at = pc.indices_nonzero(pc.is_valid(reason))
    details = _details(
        pc.take(reason, at).to_pylist(),
        {f: pc.take(v, at).to_pylist() for f, v in lengths.items()},
        pc.take(ratio, at).to_pylist() if ratio is not None else None,
        pc.take(firsts, at).to_pylist() if firsts is not None else None,
    )
    if filtered:
        details = [filtered[i][1] if i in filtered else d for i, d in zip(at.to_pylist(), details, strict=True)]
    return reason, details


def clean(
    rows: pa.Table,
    duplicates: pa.Table,
    *,
    kind: str,
    dedup: bool = True,
    min_tokens: int = 1,
    max_tokens: int = 250,
    max_ratio: float = 1.5,
    **filters: Any,
) -> dict[str, pa.Table]:
    """Keep a row iff it is the first occurrence of its uid, every text side has ``min_tokens`` to
    ``max_tokens`` tokens and, for bitext, max(|src|/|tgt|, |tgt|/|src|) <= ``max_ratio``, and every corpus
    filter that is on keeps it (``filters``: the name of each, conf/sections/filters.py, and its section or None).

    Needs ``uid``, ``line`` (and ``sentence``, if the rows were split) and the kind's text fields; other columns
    are kept. Returns ``{"part": kept, "dropped": dropped + reason + detail}``; kept + dropped = rows, in input
    order; ``detail`` is the value the row was cut on (``_details``; a corpus filter's own detail).
    """
    reason, details = marks(
        rows,
        duplicates,
        kind=kind,
        dedup=dedup,
        min_tokens=min_tokens,
        max_tokens=max_tokens,
        max_ratio=max_ratio,
        filters=filters,
    )
    dropped = pc.is_valid(reason)
    return {
        "part": rows.filter(pc.invert(dropped)),
        "dropped": rows.filter(dropped)
        .append_column("reason", pc.drop_null(reason))
        .append_column("detail", pa.array(details, pa.string())),
    }


def mark_rows(
    rows: pa.Table,
    duplicates: pa.Table,
    *,
    kind: str,
    dedup: bool = True,
    min_tokens: int = 1,
    max_tokens: int = 250,
    max_ratio: float = 1.5,
    **filters: Any,
) -> pa.Table:
    """``clean``'s verdicts without the split: every row, in order, with ``reason`` and ``detail`` (both null for a
    kept row). The `filter_chain` stage of a dataset that near_duplicates or decontaminate then compare with
    other datasets (tasks/ingest/across.py): its rows stay together until the stage that applies every drop."""
    reason, details = marks(
        rows,
        duplicates,
        kind=kind,
        dedup=dedup,
        min_tokens=min_tokens,
        max_tokens=max_tokens,
        max_ratio=max_ratio,
        filters=filters,
    )
    detail: list[str | None] = [None] * rows.num_rows
    for i, d in zip(pc.indices_nonzero(pc.is_valid(reason)).to_pylist(), details, strict=True):
        detail[i] = d
    return rows.append_column("reason", reason).append_column("detail", pa.array(detail, pa.string()))


def keep_valid(rows: pa.Table, *, cleans: Literal[False], held_out: bool = False) -> dict[str, pa.Table]:
    """The `clean` stage of a dataset that is not cleaned: every row the read validated, in input order, nothing
    dropped (broken rows went to `rejects` at the read). ``cleans`` is always False: it puts that in the
    fingerprint; so does ``held_out`` (a test or dev set: its artifact's view is ``heldout_<kind>``, not the
    kind's, which training reads), so that one artifact never serves both roles. Returns ``{"part": rows,
    "dropped": no rows}``, with ``clean``'s columns."""
    none = pa.array([], pa.string())
    return {"part": rows, "dropped": rows.slice(0, 0).append_column("reason", none).append_column("detail", none)}


class CleanParams(CleanConf):
    """The `clean` stage's parameters: a cleaning section (``ingest.clean``, ``self_training.filter``), the corpus
    filters that are on (their sides' languages and scripts filled in) and the record kind whose text fields it
    measures. Its dump leaves out the filters that are off: with none on, the fingerprint is the one from before."""

    kind: Kind

    @classmethod
    def of(cls, section: TokenFilter, kind: str, filters: Mapping[str, Any] | None = None) -> CleanParams:
        """The parameters of cleaning ``section`` for records of ``kind``, with ``filters`` (conf/sections/filters.py
        ``resolved``: the chain's filters are kept, near_duplicates and decontaminate left to tasks/ingest/across.py)."""
        chain = {f: v for f, v in (filters or {}).items() if f in ROW_FILTERS and v is not None}
        return cls(**{k: getattr(section, k) for k in TokenFilter.model_fields}, **chain, kind=kind)


DUPLICATES = Stage("duplicates", "1", find_duplicates, reduce=True, counts=duplicate_counts)
CLEAN = Stage("clean", "2", clean, params=CleanParams, counts=clean_counts)  # view: the record kind, set per dataset by the flow;
# version 2: its drops carry their detail
FILTER_CHAIN = Stage("filter_chain", "1", mark_rows, params=CleanParams)  # internal: every row with its verdict
KEEP_VALID = Stage("clean", CLEAN.version, keep_valid)  # CLEAN's name and view: a held-out set, `clean: false`
