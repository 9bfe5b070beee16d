"""The student's training data: named SQL selections from the catalog, each repeated its copy count.

    mix = ⋃_name  copies(name) × SELECT src, tgt ... (over the views: bitext, rejuvenated, synthetic, ...)

Rows are ordered by (name, copy, uid) so the same selection always writes the same bytes, whatever
order DuckDB returned them in; ``uid`` hashes (mix name, src, tgt).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError
from storage.schemas import with_uid

MIX = pa.schema(
    [
        ("uid", pa.string()),
        ("src", pa.string()),
        ("tgt", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("copy", pa.int32()),
    ]
)


def training_mix(selected: Mapping[str, pa.Table], copies: Mapping[str, int]) -> pa.Table:
    """One table of (src, tgt) from each named selection, ``copies[name]`` times (default 1)."""
    parts = []
    for name in sorted(selected):
        table, n = selected[name], copies.get(name, 1)
        if missing := [c for c in ("src", "tgt") if c not in table.column_names]:
            raise ConfError(
                f"train_nmt.mix.{name}: the query returns {table.column_names}; missing {missing}. "
                "Hint: SELECT src, tgt FROM <view> ..."
            )
        if n < 0:
            raise ConfError(f"train_nmt.copies.{name}: {n}; expected a count >= 0")
        table = table.select(["src", "tgt"])
        if nulls := pc.sum(pc.invert(pc.and_(pc.is_valid(table["src"]), pc.is_valid(table["tgt"])))).as_py():
            first = pc.index(pc.and_(pc.is_valid(table["src"]), pc.is_valid(table["tgt"])), False).as_py()
            row = table.slice(first, 1).to_pylist()[0]
            raise ConfError(
                f"train_nmt.mix.{name}: the query returns {nulls:,} of {table.num_rows:,} rows with a "
                f"null src or tgt (the first is row {first + 1}: {row}); a training pair needs both. "
                "Hint: add WHERE src IS NOT NULL AND tgt IS NOT NULL if dropping them is meant"
            )
        rows = with_uid(
            pa.table({"src": table["src"], "tgt": table["tgt"], "source": pa.repeat(pa.scalar(name), table.num_rows)}), "bitext"
        ).sort_by("uid")
        for c in range(n):
            parts.append(rows.append_column("copy", pa.repeat(pa.scalar(c, pa.int32()), rows.num_rows)))
    if not parts:
        return MIX.empty_table()
    mix = pa.concat_tables(parts)
    mix = mix.append_column("line", pa.array(range(1, mix.num_rows + 1), pa.int64()))
    return mix.select(MIX.names).cast(MIX)


def content_hash(table: pa.Table, columns: tuple[str, ...] = ("uid", "copy")) -> str:
    """A fingerprint of the selected data (the uids in order): the mix is recomputed when the data moves."""
    h = hashlib.sha256()
    for name in columns:
        for chunk in table[name].chunks:
            h.update(str(chunk.to_pylist()).encode())
    return h.hexdigest()[:32]
