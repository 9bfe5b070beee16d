"""One view of a cache, fixed when it is asked for: its artifacts' main Parquet parts, proven before they are read.

A ``View`` holds the artifacts that served it when ``Cache.view`` was called (the current ones, or a pinned run's:
augdag/pins.py), so every read of it returns the same rows however many nights write meanwhile. Every read first
compares each part with the sha256 its manifest records (storage/integrity/ ``check_artifact``, memoised per file
stat as `augdag sql` does): a part that differs or is gone is one line naming the artifact and the repair command.

``where=`` is one SQL condition on the view's rows, checked as `augdag export --where` checks it
(storage/sql_guard.py ``check_condition``: one boolean expression, read-only) and run in DuckDB with `augdag sql`'s
sandbox: no file outside the cache and its object-store prefixes, no URL, the configuration locked.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads

from augdag.pins import Artifact
from conf.errors import CatalogError, ConfError
from storage import objects
from storage.cache_root import files_sql
from storage.engines import OFFLINE
from storage.integrity import IntegrityError, check_artifact
from storage.objects import Loc
from storage.schemas import VIEW_SCHEMAS
from storage.sql_guard import check_condition, query_error, sandbox_error

if TYPE_CHECKING:
    import pandas

LINEAGE = ("uid", "parent_uid", "source", "line", "method", "model")  # the columns that trace a row to its origin
_EMPTY = "augdag_empty_view"  # the kind's columns, registered on the connection (a view of a record kind has them all)


@dataclasses.dataclass(frozen=True)
class View:
    """The rows of one catalog view as a set of artifacts fixed when it was asked for (``Cache.view``).

    Example:
        >>> import augdag
        >>> bitext = augdag.open(".augdag").latest("nightly").view("bitext", columns=["src", "tgt"], where="length(src) < 200")
        >>> table = bitext.to_arrow()          # a pyarrow.Table, as `augdag sql` would return it
        >>> frame = bitext.to_pandas()
    """

    root: Path
    name: str
    artifacts: tuple[Artifact, ...]
    columns: tuple[str, ...] | None = None
    where: str | None = None
    run_id: str | None = None  # the pinned run, None for the current views
    pipeline: str | None = None

    # -- what it is --------------------------------------------------------------------------------------------------

    @property
    def num_rows(self) -> int:
        """Rows of its parts (before ``where``), as their manifests record them."""
        return sum(a.rows for a in self.artifacts)

    def info(self) -> dict[str, Any]:
        """Where its rows come from (what ``to_hf`` records in the dataset's info): ``run`` (the pinned run; unpinned,
        the run that last used one of its artifacts), ``pinned``, ``view``, ``artifacts`` (``stage/fingerprint`` ->
        dataset, rows and the run that used it) and ``lineage_columns`` (those of its columns that trace a row back)."""
        last = max(self.artifacts, key=lambda a: a.used, default=None)
        return {
            "run": self.run_id or (last.used_by if last else ""),
            "pinned": self.run_id is not None,
            "pipeline": self.pipeline,
            "view": self.name,
            "cache": str(self.root),
            "artifacts": {a.name: {"dataset": a.dataset, "rows": a.rows, "used_by": a.used_by} for a in self.artifacts},
            "lineage_columns": [c for c in LINEAGE if c in self.schema().names],
        }

    def schema(self) -> pa.Schema:
        """Its columns (``columns`` only, in that order): every part's by name in order of first appearance, then a
        record kind's columns no part has (null), as the catalog's view has them.

        Raises:
            CatalogError: a column in ``columns`` the view does not have (naming those it has).
            IntegrityError: a part differs from its manifest or is gone.
        """
        fields: dict[str, pa.Field] = {}
        for loc in self.parts():  # proven first: a footer is read only from bytes its manifest records
            for f in objects.parquet_file(loc).schema_arrow:
                fields.setdefault(f.name, f)
        for f in VIEW_SCHEMAS.get(self.name, pa.schema([])):
            fields.setdefault(f.name, f)
        if self.columns is None:
            return pa.schema(list(fields.values()))
        if unknown := [c for c in self.columns if c not in fields]:
            raise CatalogError(f"columns=: no column {unknown[0]!r} in view {self.name}; its columns: {', '.join(fields)}")
        return pa.schema([fields[c] for c in self.columns])

    def parts(self) -> list[Loc]:
        """Its main Parquet parts, in the view's order, each proven against its manifest first.

        Raises:
            IntegrityError: a part differs from its manifest or is gone (naming the pinned run, if any).
        """
        for a in self.artifacts:
            try:
                check_artifact(self.root, a.directory, a.parts)
            except IntegrityError as e:
                raise IntegrityError(f"run {self.run_id}: {e}" if self.run_id else str(e)) from None
        return self._locations()

    def _locations(self) -> list[Loc]:
        return [loc for a in self.artifacts for loc in a.locations()]

    # -- reads -------------------------------------------------------------------------------------------------------

    def to_arrow(self) -> pa.Table:
        """The rows (``columns``, ``where``) as one ``pyarrow.Table``, in the parts' order.

        Raises:
            CatalogError: ``where`` is not one read-only condition, names an unknown column, or reads outside the cache.
            IntegrityError: a part differs from its manifest or is gone.
        """
        parts, schema = self.parts(), self.schema()
        full = dataclasses.replace(self, columns=None).schema()
        sql = self._query(schema)
        with duckdb.connect(config={**OFFLINE}) as con:
            stores = sorted({str(p).rsplit("/artifacts/", 1)[0] + "/" for p in parts if objects.is_remote(p)})
            objects.register(con, objects.schemes_of(stores))  # before the view: DuckDB binds its files at CREATE
            con.register(_EMPTY, full.empty_table())
            reads = [f"SELECT * FROM read_parquet({files_sql([str(p) for p in parts])}, union_by_name = true)"] if parts else []
            con.execute(f'CREATE VIEW "{self.name}" AS ' + " UNION ALL BY NAME ".join([*reads, f"SELECT * FROM {_EMPTY}"]))
            con.execute("SET allowed_directories = $d", {"d": sorted({f"{self.root}/", f"{self.root.resolve()}/", *stores})})
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            try:
                result = con.sql(sql).to_arrow_table()
            except duckdb.Error as e:
                if isinstance(e, duckdb.PermissionException):
                    raise sandbox_error(e, self.root, stores) from None
                place = "where=" if self.where is not None else f"reading view {self.name}"
                raise query_error(e, view=self.name, columns=full.names, place=place) from None
        return result.cast(schema)

    def _query(self, schema: pa.Schema) -> str:
        """``SELECT <columns> FROM (<the view> WHERE <where>)``, the condition checked as ``export --where``'s."""
        rows = f'SELECT * FROM "{self.name}"'
        if self.where is not None:
            try:
                rows = check_condition(self.name, self.where)
            except CatalogError as e:
                raise CatalogError(str(e).replace("--where", "where=")) from None
        names = ", ".join('"' + n.replace('"', '""') + '"' for n in schema.names)
        return f"SELECT {names} FROM ({rows})"

    def to_pandas(self) -> pandas.DataFrame:
        """``to_arrow()`` as a pandas ``DataFrame``."""
        frame: pandas.DataFrame = self.to_arrow().to_pandas()
        return frame

    def to_polars(self) -> Any:
        """``to_arrow()`` as a polars ``DataFrame`` (polars is optional: ``pip install polars``).

        Raises:
            ConfError: polars is not installed.
        """
        try:
            import polars
        except ImportError:
            raise ConfError("to_polars() needs the package polars, which is not installed. Hint: pip install polars") from None
        return polars.from_arrow(self.to_arrow())

    def dataset(self) -> pads.Dataset:
        """A ``pyarrow.dataset.Dataset`` over its proven parts (``columns`` as its schema), read lazily.

        Raises:
            ConfError: the view has a ``where`` (SQL: a dataset filters with ``dataset().to_table(filter=...)``).
        """
        self._streamed("dataset()")
        paths, filesystem = objects.dataset_source(self.parts())
        return pads.dataset(paths, schema=self.schema(), format="parquet", filesystem=filesystem)

    def to_torch(self, *, batch_size: int = 1024, shuffle_seed: int | None = None, **options: Any) -> Any:
        """A PyTorch ``IterableDataset`` streaming its parts (augdag/torch.py ``torch_dataset``: rows split over
        DataLoader workers and ranks, each row once per epoch; ``options``: ``shuffle_buffer``, ``drop_last``,
        ``rank``, ``world_size``).

        Example:
            >>> loader = torch.utils.data.DataLoader(view.to_torch(batch_size=64, shuffle_seed=1), batch_size=None, num_workers=2)
        """
        self._streamed("to_torch()")
        from augdag.torch import torch_dataset

        paths = [str(p) for p in self.parts()]
        return torch_dataset(paths, columns=self.columns, batch_size=batch_size, shuffle_seed=shuffle_seed, **options)

    def to_hf(self, **options: Any) -> Any:
        """A Hugging Face ``datasets.Dataset`` memory-mapped from its parts (augdag/hf.py ``hf_dataset``), its info
        naming the run and the artifacts (``info()``)."""
        self._streamed("to_hf()")
        from augdag.hf import hf_dataset

        paths = [str(p) for p in self.parts()]
        return hf_dataset(paths, columns=self.columns, info=self.info(), **options)

    def _streamed(self, what: str) -> None:
        if self.where is not None:
            raise ConfError(
                f"view {self.name}: {what} reads its Parquet parts as they are, so where= {self.where!r} cannot apply. "
                "Hint: to_arrow() applies it; or filter the rows yourself"
            )
