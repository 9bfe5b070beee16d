"""A cache opened for reading: its views, current or pinned to a run.

``open(path)`` finds the cache as the CLI's ``--cache`` does (a path; ``None``: ``$AUGDAG_CACHE``, else ``.augdag``)
and refuses one without a catalog. Nothing here writes the catalog: its reads are the shared, short-lived ones of
storage/catalog.py. A cache whose artifacts lie on an object store (``storage.artifacts: s3://…``) reads them
there, with the standard ``AWS_*`` variables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from augdag.pins import Artifact, Pin, latest_run, of_view, pin_of, served
from augdag.view import View
from conf.cache_path import resolve_cache
from conf.errors import CatalogError
from storage.catalog import Catalog
from storage.output import existing_catalog
from storage.schemas import VIEW_SCHEMAS


@dataclasses.dataclass(frozen=True)
class Cache:
    """The views of one cache: the current ones, or (``run``, ``latest``) those a run used.

    Example:
        >>> import augdag
        >>> cache = augdag.open(".augdag")
        >>> cache.views().to_pylist()[0]
        {'name': 'bitext', 'rows': 3, 'description': 'the rows of every bitext dataset that trains ...'}
        >>> night = cache.latest("nightly")       # every read below: the artifacts that night used
        >>> night.run_id
        'nightly-20261202T030000-1a2b3c'
        >>> night.view("bitext", where="source = 'wmt22'").to_arrow().num_rows
        1204
    """

    catalog: Catalog
    pin: Pin | None = None
    pinned: tuple[Artifact, ...] = ()  # a pin's artifacts, chosen once (a pin's choice never changes)

    @property
    def root(self) -> Path:
        """The cache directory."""
        return self.catalog.root

    @property
    def run_id(self) -> str | None:
        """The pinned run, or None (the current views)."""
        return None if self.pin is None else self.pin.run_id

    def run(self, run_id: str) -> Cache:
        """This cache pinned to ``run_id``: every view reads the artifacts current when that run registered its last
        output (a nightly: its pipelines' last), whatever ran since (augdag/pins.py).

        Raises:
            CatalogError: no such run (naming recent ones), a run that registered nothing, or one of its artifacts
                was collected (naming the run and the artifact).
        """
        pin = pin_of(self.catalog, run_id)
        return Cache(self.catalog, pin, tuple(served(self.catalog, pin)))  # a collected artifact refuses the pin here

    def latest(self, pipeline: str) -> Cache:
        """This cache pinned to the most recent completed run of ``pipeline`` (``nightly``, ``ingest``, ...).

        Raises:
            CatalogError: no completed run of ``pipeline``, or one of its artifacts was collected.
        """
        return self.run(latest_run(self.catalog, pipeline))

    def artifacts(self) -> list[Artifact]:
        """The artifacts every view serves: the pin's, or the current ones (read from the catalog at each call; a
        ``View`` keeps its own)."""
        return list(self.pinned) if self.pin is not None else served(self.catalog, None)

    def views(self) -> pa.Table:
        """Its views with their rows and what they hold (``augdag views``' view lines): name, rows, description."""
        from flows.engine.registry import view_docs

        docs = view_docs()
        rows: dict[str, int] = dict.fromkeys(sorted(VIEW_SCHEMAS), 0)
        for a in self.artifacts():
            rows[a.view] = rows.get(a.view, 0) + a.rows
        names = sorted(rows)
        return pa.table(
            {
                "name": pa.array(names, pa.string()),
                "rows": pa.array([rows[n] for n in names], pa.int64()),
                "description": pa.array([docs[n].what if n in docs else "(undocumented)" for n in names], pa.string()),
            }
        )

    def view(self, name: str, *, where: str | None = None, columns: Sequence[str] | None = None) -> View:
        """The view ``name`` as it is now (or as the pinned run left it), fixed from here on.

        Args:
            name: a view (``bitext``, ``curriculum``, ...; ``views()`` lists them).
            where: one SQL condition on its rows (``"source = 'wmt22' AND length(src) < 200"``), read-only.
            columns: the columns to read, in this order (None: all).

        Raises:
            CatalogError: no such view (naming those there are), or an unknown column.
        """
        artifacts = self.artifacts()
        known = sorted({*VIEW_SCHEMAS, *(a.view for a in artifacts)})
        if name not in known:
            from flows.engine.registry import view_docs

            if (doc := view_docs().get(name)) is not None:  # a pipeline's view its stage has not filled (by then)
                when = "yet" if self.pin is None else f"when run {self.pin.run_id} ended"
                raise CatalogError(f"{self.catalog.path}: no view {name!r} {when}: its stage has not run ({doc.what})")
            raise CatalogError(f"{self.catalog.path}: no view {name!r}; its views: {', '.join(known)}")
        view = View(
            self.root,
            name,
            tuple(of_view(artifacts, name)),
            columns=None if columns is None else tuple(columns),
            where=where,
            run_id=self.run_id,
            pipeline=None if self.pin is None else self.pin.pipeline,
        )
        view.schema()  # an unknown column is an error here, where it was named
        return view


def open_cache(path: str | Path | None = None) -> Cache:
    """The cache at ``path`` (None: ``$AUGDAG_CACHE``, else ``.augdag``), read-only.

    Raises:
        CatalogError: no catalog there (no run wrote one: a typo in the path is no empty result).
    """
    if str(path or "").startswith(("s3://", "gs://", "gcs://", "abfs://", "abfss://")):
        raise CatalogError(
            f"{path}: a cache is a directory on this machine (its catalog.duckdb); its artifacts may lie on an object "
            "store (storage.artifacts: s3://…). Hint: augdag.open('.augdag')"
        )
    return Cache(existing_catalog(resolve_cache(None, None if path is None else Path(path))))
