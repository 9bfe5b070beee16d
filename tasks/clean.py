"""The `clean` stage: exact-duplicate removal, token-length and length-ratio filters.

The same filter the self-training pipeline applies to its synthetic pairs (thesis ch. 6: drop a
pair with a side of fewer than 1 or more than 250 tokens, or a token-length ratio above 1.5).
Duplicates are global: ``find_duplicates`` (a reduce step in DuckDB over every shard) lists each
uid seen more than once with the line of its first occurrence (and its sentence, for rows split into
sentences: tasks/sentences.py); ``clean`` then keeps exactly that first occurrence, whichever shard it
is in. Every dropped row is returned with its ``reason``.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from conf.schema import CleanConf, Kind
from storage.parts import Parts
from storage.schemas import TEXT_FIELDS
from storage.scratch import scratch_duckdb
from tasks.stage import Stage

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


def token_counts(table: pa.Table, field: str) -> pa.Array:
    """Whitespace tokens per row (a list field, as in `slots`, counts its elements)."""
    column = table[field]
    if pa.types.is_list(column.type):
        return pc.list_value_length(column)
    trimmed = pc.utf8_trim_whitespace(column)
    counts = pc.list_value_length(pc.utf8_split_whitespace(trimmed))  # runs of whitespace separate once
    return pc.if_else(pc.equal(pc.utf8_length(trimmed), 0), 0, counts)  # "" splits into [""]: 0 tokens, not 1


def clean(
    rows: pa.Table,
    duplicates: pa.Table,
    *,
    kind: str,
    dedup: bool = True,
    min_tokens: int = 1,
    max_tokens: int = 250,
    max_ratio: float = 1.5,
) -> dict[str, pa.Table]:
    """Keep a row iff it is the first occurrence of its uid, every text side has ``min_tokens`` to
    ``max_tokens`` tokens and, for bitext, max(|src|/|tgt|, |tgt|/|src|) <= ``max_ratio``.

    Needs ``uid``, ``line`` (and ``sentence``, if the rows were split) and the kind's text fields; other columns
    are kept. Returns ``{"part": kept, "dropped": dropped + reason}``; kept + dropped = rows, in input order.
    """
    n = rows.num_rows
    reason = pa.nulls(n, pa.string())

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
    dropped = pc.is_valid(reason)
    return {
        "part": rows.filter(pc.invert(dropped)),
        "dropped": rows.filter(dropped).append_column("reason", pc.drop_null(reason)),
    }


class CleanParams(CleanConf):
    """The `clean` stage's parameters: a cleaning section (``ingest.clean``, ``self_training.filter``) and
    the record kind whose text fields it measures."""

    kind: Kind

    @classmethod
    def of(cls, section: CleanConf, kind: str) -> "CleanParams":
        return cls(**{k: getattr(section, k) for k in CleanConf.model_fields}, kind=kind)


DUPLICATES = Stage("duplicates", "1", find_duplicates, reduce=True)
CLEAN = Stage("clean", "1", clean, params=CleanParams)  # view: the record kind, set per dataset by the flow
