"""Training data checked against the held-out sets: which rows of a training input a held-out line reaches.

A model's score on a test set means something only when no test pair was trained on. Held-out sets never reach the
training views (their rows are in the `heldout_*` views, storage/catalog.py), and decontaminate drops overlaps from a
cleaned dataset; but a training input assembled later (a train_nmt arm's SQL mix, the classifier's originals and
augmented rows, the slot tagger's training set) can still hold a test line, copied or generated. ``heldout_overlaps``
finds them with decontaminate's own rule (tasks/ingest/across.py ``overlaps``): a side equal to a held-out line after
``normalise`` (case, punctuation, whitespace), or with a Jaccard similarity >= ``threshold`` to one (MinHash LSH
candidates, each verified exactly). Each distinct text is compared once, however often the input repeats it (an arm's
``copies``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.ingest.across import overlaps

OVERLAPS = pa.schema(
    [
        ("row", pa.int64()),  # the training row's index in the input (its first occurrence)
        ("side", pa.string()),  # the training row's field that matched
        ("text", pa.string()),  # that field's text
        ("heldout", pa.string()),  # the held-out set
        ("heldout_line", pa.int64()),  # the matched line of the held-out set (1-based, as in its file)
        ("heldout_text", pa.string()),
        ("jaccard", pa.float64()),  # 1 for a line equal after normalising
    ]
)


def texts_of(rows: pa.Table, fields: Sequence[str]) -> list[pa.Array]:
    """The text of each field of ``rows``: a string column as it is, a list of tokens (slots) joined by spaces."""
    out = []
    for f in fields:
        column = rows[f].combine_chunks() if rows.num_rows else pa.array([], rows.schema.field(f).type)
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            column = pc.binary_join(column, " ")
        out.append(pc.fill_null(column.cast(pa.string()), ""))
    return out


def heldout_overlaps(
    rows: pa.Table,
    fields: Sequence[str],
    heldout: Mapping[str, tuple[pa.Table, Sequence[str]]],
    *,
    threshold: float = 0.8,
    shingle: str = "char",
    n: int = 5,
    num_perm: int = 128,
    seed: int = 1,
) -> pa.Table:
    """Each distinct training row of ``rows`` (its ``fields``) that reaches a line of a held-out set (``heldout``:
    name -> (its rows with ``line``, its text fields)), once per held-out set, by row then set (``OVERLAPS``).

    A row's sides are tried in order, and a held-out set's lines side after side (a bitext's src lines, then its tgt
    lines): the first line within ``threshold`` is named, as decontaminate names it."""
    sides = texts_of(rows, fields)
    if not sides or rows.num_rows == 0:
        return OVERLAPS.empty_table()
    keys = sides[0] if len(sides) == 1 else pc.binary_join_element_wise(*sides, "\x1f")
    unique = pc.unique(keys)
    first = pc.index_in(unique, value_set=keys).to_numpy(zero_copy_only=False).astype(np.int64)  # first occurrence
    distinct = [pc.take(s, pa.array(first)) for s in sides]
    out = [OVERLAPS.empty_table()]
    for name, (table, held_fields) in sorted(heldout.items()):
        lines = texts_of(table, held_fields)
        if not lines or table.num_rows == 0:
            continue
        pool = pa.concat_arrays(lines)
        pool_lines = np.tile(table["line"].to_numpy(), len(lines))
        hit, side, score = overlaps(pool, distinct, threshold=threshold, shingle=shingle, n=n, num_perm=num_perm, seed=seed)
        at = np.flatnonzero(hit >= 0)
        if not len(at):
            continue
        text = [distinct[int(k)][int(i)].as_py() for i, k in zip(at, side[at], strict=True)]
        out.append(
            pa.table(
                {
                    "row": pa.array(first[at], pa.int64()),
                    "side": pa.array([fields[int(k)] for k in side[at]], pa.string()),
                    "text": pa.array(text, pa.string()),
                    "heldout": pa.array([name] * len(at), pa.string()),
                    "heldout_line": pa.array(pool_lines[hit[at]], pa.int64()),
                    "heldout_text": pc.take(pool, pa.array(hit[at], pa.int64())),
                    "jaccard": pa.array(np.round(score[at], 4), pa.float64()),
                },
                schema=OVERLAPS,
            )
        )
    return pa.concat_tables(out).sort_by([("row", "ascending"), ("heldout", "ascending")])
