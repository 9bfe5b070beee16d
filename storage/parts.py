"""``Parts``: the lazy dataset a reduce stage receives instead of a table.

A mapped stage gets shard ``i`` of each input as a ``pa.Table``. A reduce stage (a global step: a
percentile, a duplicate list, an alignment over the whole bitext) gets each input as ``Parts``: the
committed Parquet parts of one artifact, in shard order, not yet read. It asks for what it needs —
``table(columns)`` (every part, concatenated), ``tables(columns)`` (part by part, for a streaming
pass), ``num_rows`` (from the footers) or ``sql()`` (a DuckDB ``read_parquet`` over them, for an
aggregate that must spill rather than fit in memory) — so no stage function opens a file itself,
and a test can hand one a ``Parts.of_tables`` built in memory. Every part is checked against its artifact's
manifest as it is read, or before DuckDB reads it (storage/integrity/).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from conf.errors import InputError
from storage import objects
from storage.integrity import check_files, read_checked
from storage.objects import Loc


def parquet_list(paths: Iterable[Loc]) -> str:
    """Paths as a DuckDB list literal for ``read_parquet([...])``."""
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


@dataclasses.dataclass(frozen=True)
class Parts:
    """The Parquet parts of one artifact (main role), in shard order: on this machine or on an object store."""

    paths: tuple[Loc, ...]
    root: str | None = None  # the cache root (what a mismatch's repair command names); None: from a local path

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def dir(self) -> Loc:
        """The artifact's directory (where its side roles live)."""
        if not self.paths:
            raise InputError("nothing to read: the input artifact has no parts")
        return objects.parent(self.paths[0])

    @property
    def num_rows(self) -> int:
        """Rows of every part, from the Parquet footers (no data read)."""
        return sum(objects.parquet_file(p).metadata.num_rows for p in self.paths)

    def tables(self, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """Each part as a table, in shard order."""
        for p in self.paths:
            yield read_checked(p, columns, root=self.root)

    def table(self, columns: Sequence[str] | None = None) -> pa.Table:
        """Every part as one table (``columns`` only, when given). No parts: an InputError."""
        if not self.paths:
            raise InputError("nothing to read: the input artifact has no parts")
        return pa.concat_tables(list(self.tables(columns)))

    def filtered(self, expression: pc.Expression, columns: Sequence[str] | None = None) -> pa.Table:
        """The rows of every part where ``expression`` holds (``columns`` only): row groups whose
        statistics rule it out are not read, so a part sorted by the filtered keys is read in slices."""
        if not self.paths:
            return pa.table({})
        import pyarrow.dataset as ds  # here: it imports pandas (0.5 s of every CLI start)

        check_files(self.paths, root=self.root)  # the dataset reads slices: every part is hashed whole first
        paths, filesystem = objects.dataset_source(self.paths)
        dataset = ds.dataset(paths, format="parquet", filesystem=filesystem)
        return dataset.to_table(columns=list(columns) if columns is not None else None, filter=expression)

    def side(self, role: str, shard: int = 0) -> pa.Table:
        """A side role of the same artifact (e.g. the aligner's ``aligner-00000.parquet``)."""
        return read_checked(objects.join(self.dir, f"{role}-{shard:05d}.parquet"), root=self.root)

    def sql(self, *, filename: bool = False) -> str:
        """A DuckDB table expression over the parts: ``read_parquet([...])`` (``filename = true``: with
        each row's file, whose order is the shard order). Parts on an object store are read through the
        filesystem storage/engines.py's connections register (storage/objects/). Each part is hashed and
        compared with its manifest first."""
        check_files(self.paths, root=self.root)
        return f"read_parquet({parquet_list(self.paths)}{', filename = true' if filename else ''})"

    @classmethod
    def of_tables(cls, tables: Sequence[pa.Table], directory: Path | None = None) -> Parts:
        """Parts written from in-memory tables (tests, benchmarks): ``part-0000i.parquet`` under
        ``directory`` (default: a new temporary directory)."""
        root = Path(directory or tempfile.mkdtemp(prefix="augdag-parts-"))
        root.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, t in enumerate(tables):
            pq.write_table(t, root / f"part-{i:05d}.parquet")
            paths.append(root / f"part-{i:05d}.parquet")
        return cls(tuple(paths))
