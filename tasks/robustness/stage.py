"""The `robust_bitext` stage: a profile's modifier list applied to each shard of a bitext, with lineage.

Every modifier of ``robustness.modifiers`` reads the shard's original pairs (not another modifier's output: a
materialised row names the one modifier that made it, where OpusTrainer chains them on the fly) and emits only the
rows it changes or makes (rows.py ``ROBUST_BITEXT``), in list order. When a modifier list has ``Tags`` the flow hands
the stage the aligner's artifact (its Pharaoh ``links`` over the pairs' whitespace tokens), read per shard for the
shard's uids only and joined on uid; every modifier then carries the links it keeps (a merge offsets its parts'). A
pair the aligner has no links for keeps a null alignment and is never tagged.

``noised_pairs`` (the ``noised_test`` stage) is the held-out counterpart: every pair of a test set kept, the
modifiers that change a pair in place applied in order, for train_nmt's noised test sets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from conf.base import ConfModel
from conf.errors import ConfError
from storage.parts import Parts
from tasks.robustness.rows import ROBUST_BITEXT, column
from tasks.robustness.spec import ModifierSpec, parse_modifiers
from tasks.runtime.stage import Stage

NEEDS_LINKS = ("Tags",)  # the modifiers that do nothing without an alignment
# a noised test set keeps its pairs one for one: the modifiers that change a pair in place, without an alignment
TEST_MODIFIERS = ("UpperCase", "TitleCase", "Typos", "RemoveEndPunct")


def needs_alignment(specs: Sequence[ModifierSpec]) -> bool:
    """Whether any modifier reads the word alignment (a ``Tags`` entry with p > 0)."""
    return any(s.name in NEEDS_LINKS and s.p > 0 for s in specs)


def with_links(rows: pa.Table, alignment: Parts) -> pa.Table:
    """``rows`` with the alignment's ``links`` of each uid (null where it has none), in the rows' order."""
    uids = column(rows, "uid")
    links = alignment.filtered(pc.field("uid").isin(uids), ["uid", "links"])
    where = pc.index_in(uids, value_set=column(links, "uid")) if links.num_rows else pa.nulls(len(uids), pa.int32())
    found = column(links, "links").take(where) if links.num_rows else pa.nulls(len(uids), pa.string())
    rows = rows.drop_columns([c for c in ("links",) if c in rows.column_names])
    return rows.append_column("links", found.cast(pa.string()))


class RobustParams(ConfModel):
    """The stage's parameters: the draws' seed and OpusTrainer's modifier list, as the profile wrote it (checked by
    ``spec.parse_modifiers`` when the profile loads, again per shard)."""

    seed: int = 0
    modifiers: list[dict[str, Any]]


def robust_rows(
    rows: pa.Table, *, alignment: Parts | None = None, seed: int = 0, modifiers: Sequence[Mapping[str, Any]] = ()
) -> pa.Table:
    """The rows each modifier of ``modifiers`` (OpusTrainer's list) makes from the shard ``rows``, in list order."""
    specs = parse_modifiers(list(modifiers), "robustness.modifiers")
    if alignment is not None:
        rows = with_links(rows, alignment)
    out = [spec.apply(rows, seed=seed) for spec in specs]
    return pa.concat_tables(out) if out else ROBUST_BITEXT.empty_table()


ROBUST = Stage("robust_bitext", "1", robust_rows, view="robust_bitext", params=RobustParams, lazy_side=("alignment",))


def held_out_modifiers(modifiers: Sequence[Mapping[str, Any]], where: str) -> list[ModifierSpec]:
    """The specs of a noised test set's modifiers; a ConfError for a modifier that adds, merges or tags pairs."""
    specs = parse_modifiers(list(modifiers), where)
    for i, spec in enumerate(specs):
        if spec.name not in TEST_MODIFIERS:
            raise ConfError(
                f"{where}[{i}]: {spec.name} does not keep a test set's pairs one for one; a noised test set takes "
                f"{', '.join(TEST_MODIFIERS)}"
            )
    return specs


def noised_pairs(rows: pa.Table, *, seed: int = 0, modifiers: Sequence[Mapping[str, Any]] = ()) -> pa.Table:
    """Every pair of a held-out bitext with the modifiers applied in order (each to the previous one's result, as
    OpusTrainer chains them): the rows as they are, src and tgt replaced where a modifier changed them; the uid, source
    and line stay the original pair's, so each hypothesis is scored against its own reference."""
    src, tgt = column(rows, "src").to_pylist(), column(rows, "tgt").to_pylist()
    where = {u: i for i, u in enumerate(column(rows, "uid").to_pylist())}
    for spec in held_out_modifiers(modifiers, "modifiers"):
        current = pa.table({"uid": column(rows, "uid"), "src": pa.array(src, pa.string()), "tgt": pa.array(tgt, pa.string())})
        changed = spec.apply(current, seed=seed).select(["parent_uid", "src", "tgt"]).to_pylist()
        for r in changed:
            src[where[r["parent_uid"]]], tgt[where[r["parent_uid"]]] = r["src"], r["tgt"]
    rows = rows.set_column(rows.schema.get_field_index("src"), rows.schema.field("src"), pa.array(src, pa.string()))
    return rows.set_column(rows.schema.get_field_index("tgt"), rows.schema.field("tgt"), pa.array(tgt, pa.string()))


class NoisedParams(ConfModel):
    """The noised test set's draws' seed and its modifiers (OpusTrainer's list)."""

    seed: int = 0
    modifiers: list[dict[str, Any]]


NOISED_TEST = Stage("noised_test", "1", noised_pairs, params=NoisedParams)
