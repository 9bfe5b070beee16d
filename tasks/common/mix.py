"""The student's training data: named SQL selections from the catalog, each repeated its copy count, as a ``Mix``.

    mix = ⋃_name  copies(name) × SELECT src, tgt ... (over the views: bitext, rejuvenated, synthetic, ...)

Rows are ordered by (name, copy, uid) so the same selection always writes the same bytes, whatever order DuckDB
returned them in; ``uid`` hashes (mix name, src, tgt). ``train_nmt`` materialises an arm's ``Mix`` as its
`training_mix` artifact (``Mix.table``); a user's trainer streams the same rows (``Mix.batches``), or interleaved in
the arm's proportions (``Mix.interleaved``): one implementation.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError, InputError
from storage.schemas import with_uid
from tasks.common.schedules import as_table

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
PHASES = ("train", "continue")
ARM_MIX = pa.schema([*MIX, pa.field("arm", pa.string()), pa.field("phase", pa.string())])  # the `training_mix` view


def selection_rows(name: str, table: pa.Table, *, key: str) -> pa.Table:
    """One selection's (uid, src, tgt, source = ``name``) by uid; a ``ConfError`` under ``key`` for a query without
    src and tgt, or with a null in either."""
    if missing := [c for c in ("src", "tgt") if c not in table.column_names]:
        raise ConfError(
            f"{key}.mix.{name}: the query returns {table.column_names}; missing {missing}. Hint: SELECT src, tgt FROM <view> ..."
        )
    table = table.select(["src", "tgt"])
    if nulls := pc.sum(pc.invert(pc.and_(pc.is_valid(table["src"]), pc.is_valid(table["tgt"])))).as_py():
        first = pc.index(pc.and_(pc.is_valid(table["src"]), pc.is_valid(table["tgt"])), False).as_py()
        row = table.slice(first, 1).to_pylist()[0]
        raise ConfError(
            f"{key}.mix.{name}: the query returns {nulls:,} of {table.num_rows:,} rows with a "
            f"null src or tgt (the first is row {first + 1}: {row}); a training pair needs both. "
            "Hint: add WHERE src IS NOT NULL AND tgt IS NOT NULL if dropping them is meant"
        )
    source = pa.repeat(pa.scalar(name), table.num_rows)
    return with_uid(pa.table({"src": table["src"], "tgt": table["tgt"], "source": source}), "bitext").sort_by("uid")


@dataclasses.dataclass(frozen=True)
class Mix:
    """One arm's training (or continued-training) data: each named selection ``copies[name]`` times (default 1).

    Args:
        selections: the rows of each named query of the arm's mix, Tables or pinned views (columns src, tgt; more
            are ignored).
        copies: each name's copy count (``train_nmt.copies``; a missing name is 1, 0 drops it).
        arm: the arm's name (the rows' ``arm``).
        phase: ``train``, or ``continue`` for the continued-training phase (``continue_on``).
        key: the profile key the errors name (``train_nmt``, ``train_nmt.experiments.<arm>``, ...).
    """

    selections: Mapping[str, pa.Table]
    copies: Mapping[str, int]
    arm: str = ""
    phase: str = "train"
    key: str = "train_nmt"

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise InputError(f"{self.key}: phase {self.phase!r}; expected one of {', '.join(PHASES)}")
        for name, n in self.copies.items():
            if n < 0:
                raise ConfError(f"{self.key}.copies.{name}: {n}; expected a count >= 0")
        rows = {
            name: selection_rows(name, as_table(self.selections[name], view=f"{self.key}.mix.{name}"), key=self.key)
            for name in sorted(self.selections)
        }
        object.__setattr__(self, "selections", rows)

    @classmethod
    def from_training_mix(cls, rows: Any, *, arm: str, phase: str = "train") -> Mix:
        """The ``Mix`` of one arm and phase back from its `training_mix` rows (a Table or a pinned view): each
        ``source``'s copy-0 pairs and its number of copies. Its ``table()`` is those rows again, in their order."""
        table = as_table(rows, view="training_mix")
        if missing := [c for c in ("src", "tgt", "source", "copy", "arm", "phase") if c not in table.column_names]:
            raise InputError(f"training_mix: the rows have columns {table.column_names}; missing {missing}")
        mine = table.filter(pc.and_(pc.equal(table["arm"], arm), pc.equal(table["phase"], phase)))
        if mine.num_rows == 0:
            found = sorted({(r["arm"], r["phase"]) for r in table.select(["arm", "phase"]).to_pylist()})
            raise InputError(f"training_mix: no rows of arm {arm!r}, phase {phase!r}; the rows hold (arm, phase) {found}")
        if (lines := pc.count_distinct(mine["line"]).as_py()) != mine.num_rows:
            raise InputError(
                f"training_mix: arm {arm!r}, phase {phase!r} has {mine.num_rows:,} rows but {lines:,} lines: the rows "
                "of more than one night's mix. Hint: read the view pinned to one run, "
                'augdag.open(CACHE).latest("train_nmt").view("training_mix")'
            )
        selections, copies = {}, {}
        for name in sorted(set(mine["source"].to_pylist())):
            of_name = mine.filter(pc.equal(mine["source"], name))
            selections[name] = of_name.filter(pc.equal(of_name["copy"], 0)).select(["src", "tgt"])
            copies[name] = int(pc.max(of_name["copy"]).as_py()) + 1
        return cls(selections, copies, arm=arm, phase=phase)

    def entries(self) -> list[tuple[str, int, int]]:
        """(name, rows of one copy, copies) of every selection, by name: the order of the materialised mix."""
        return [(name, rows.num_rows, self.copies.get(name, 1)) for name, rows in self.selections.items()]

    @property
    def num_rows(self) -> int:
        """Rows of the materialised mix: Σ rows × copies."""
        return sum(n * c for _, n, c in self.entries())

    def proportions(self) -> dict[str, float]:
        """Each selection's share of the mix's rows (rows × copies / all rows); 0 for every one of an empty mix."""
        total = self.num_rows
        return {name: (n * c / total if total else 0.0) for name, n, c in self.entries()}

    def batches(self, batch_size: int = 65_536) -> Iterator[pa.RecordBatch]:
        """The mix's rows (``ARM_MIX``) in the order of its `training_mix` artifact, without materialising the copies:
        by name, copy, uid; ``line`` numbers them from 1."""
        for (name, n, copies), first in zip(self.entries(), self.first_lines()):
            for c in range(copies):
                for start in range(0, n, batch_size):
                    size = min(batch_size, n - start)
                    offsets = c * n + np.arange(start, start + size)
                    yield from self.block(name, offsets, first).to_batches()

    def block(self, name: str, offsets: np.ndarray, first_line: int) -> pa.Table:
        """The mix's rows of selection ``name`` at ``offsets`` into its n × copies block (offset = copy · n + row),
        whose first row has line ``first_line``."""
        rows = self.selections[name]
        n = max(rows.num_rows, 1)
        table = rows.take(pa.array(offsets % n, pa.int64()))
        table = table.append_column("line", pa.array(first_line + offsets, pa.int64()))
        table = table.append_column("copy", pa.array(offsets // n, pa.int32()))
        table = table.append_column("arm", pa.repeat(pa.scalar(self.arm), len(offsets)))
        table = table.append_column("phase", pa.repeat(pa.scalar(self.phase), len(offsets)))
        return table.select(ARM_MIX.names).cast(ARM_MIX)

    def table(self) -> pa.Table:
        """The materialised mix: what ``train_nmt`` writes as the arm's `training_mix` artifact (one chunk per
        selection and copy: the chunks Parquet's writer has always been given, so the part's bytes stay the same)."""
        largest = max((n for _, n, _ in self.entries()), default=0)
        return pa.Table.from_batches(list(self.batches(max(largest, 1))), schema=ARM_MIX)

    def first_lines(self) -> list[int]:
        """The line of each selection's first row in ``table()``, in ``entries()`` order."""
        lines, line = [], 1
        for _, n, c in self.entries():
            lines.append(line)
            line += n * c
        return lines

    def interleaved(self, *, seed: int | None = None, batch_size: int = 1024) -> Iterator[pa.RecordBatch]:
        """Every row of the mix once, the selections interleaved in the arm's proportions: after any k rows each
        selection has given its share of k to within one row (the i-th row of a selection holding m of the mix's
        rows comes at the point (i + ½)/m, ties by name). Within a selection its copies follow one another; with a
        ``seed``, each copy's rows in a seeded permutation (a fresh one per copy). ``line`` stays the row's line in
        ``table()``, so the stream sorted by line is the materialised mix."""
        entries = [(name, n, c, first) for (name, n, c), first in zip(self.entries(), self.first_lines()) if n * c]
        if not entries:
            return
        keys = np.concatenate([(np.arange(n * c) + 0.5) / (n * c) for _, n, c, _ in entries])
        owner = np.concatenate([np.full(n * c, i) for i, (_, n, c, _) in enumerate(entries)])
        order = owner[np.argsort(keys, kind="stable")]
        rng = np.random.default_rng(seed) if seed is not None else None
        streams = [
            np.concatenate([c * n + (rng.permutation(n) if rng is not None else np.arange(n)) for c in range(copies)])
            for _, n, copies, _ in entries
        ]
        used = [0] * len(entries)
        for start in range(0, len(order), batch_size):
            picks = order[start : start + batch_size]
            pieces, positions = [], []
            for i in np.unique(picks):
                where = np.flatnonzero(picks == i)
                name, _, _, first = entries[i]
                pieces.append(self.block(name, streams[i][used[i] : used[i] + len(where)], first))
                positions.append(where)
                used[i] += len(where)
            batch = pa.concat_tables(pieces).take(pa.array(np.argsort(np.concatenate(positions), kind="stable")))
            yield from batch.combine_chunks().to_batches()


def training_mix(selected: Mapping[str, pa.Table], copies: Mapping[str, int]) -> pa.Table:
    """One table of (src, tgt) from each named selection, ``copies[name]`` times (default 1): ``Mix.table`` without
    the arm and phase."""
    return Mix(selected, copies).table().select(MIX.names)


def content_hash(table: pa.Table, columns: tuple[str, ...] = ("uid", "copy")) -> str:
    """A fingerprint of the selected data (the uids in order): the mix is recomputed when the data moves."""
    h = hashlib.sha256()
    for name in columns:
        for chunk in table[name].chunks:
            h.update(str(chunk.to_pylist()).encode())
    return h.hexdigest()[:32]
