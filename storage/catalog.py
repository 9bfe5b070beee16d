"""The DuckDB catalog: runs, stage runs, artifacts, lineage, models, evaluations, rejects, and one view per output.

DuckDB allows one writing process per database file, and a process that has it open for writing keeps every
other process out, readers included. So every connection here is short-lived and taken under an ``flock`` on
``catalog.lock`` beside the database (storage/catalog_io/lock.py: a waiter says who holds it): writers (only the
flow driver) hold it exclusively for one registration, readers share it for one query, and a user's query (which
may run for hours) only while its snapshot of the file is copied (storage/catalog_io/snapshot.py). Two flows on
one cache both succeed, taking turns for a few milliseconds a write.
A write ATTACHes the file to this process's one in-memory DuckDB instance and DETACHes it after (which checkpoints
and lets the file go): a new instance per write (``duckdb.connect``) cost ~25 ms of CPU, mostly DuckDB registering
its built-in functions, against ~4 ms for the attach; a nightly makes hundreds of writes.

The views a write moves are rebuilt inside it: view ``V`` reads the main Parquet parts of the *current* artifacts
whose ``view`` is ``V`` (per stage, dataset: the one a run used last), ``dropped`` their dropped parts. Only complete
artifacts are registered. Paths are relative to the cache root (storage/cache_root.py; a moved cache answers the same),
or URIs on an object store. A user's SQL is checked by storage/sql_guard.py and runs sandboxed (``read``).
"""

from __future__ import annotations

import fcntl
import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from conf.at_rest import redact  # no secret at rest: a value from the environment as its ${VAR}
from storage.artifacts import ArtifactRef, part_name, write_part
from storage.cache_root import (
    ABSOLUTE_PATHS,
    RELATIVE_PATHS,
    object_stores,
    present,
    relative,
    resolve,
    set_root,
    view_select,
)
from storage.catalog_io import rejects
from storage.catalog_io.lock import catalog_lock
from storage.catalog_io.snapshot import snapshot
from storage.catalog_io.stoppable import env_timeout, stoppable
from storage.dropped import ROLE as DROPPED_ROLE
from storage.dropped import VIEW as DROPPED_VIEW
from storage.dropped import dropped_view_sql
from storage.engines import OFFLINE, attach, detach
from storage.integrity import check_served, missing_part
from storage.registration import Registration, flush_deferred, insert_lineage
from storage.run_records import RunRecords
from storage.schemas import CURRENT_SQL, VIEW_KEY_SQL, VIEW_SCHEMAS, has_schema, insert_stage_runs, paired_view, view_key
from storage.sql_guard import check_read_only, outside_cache, sandbox_error

__all__ = ["BASE_VIEWS", "DB", "DDL", "Catalog", "check_read_only", "outside_cache"]  # check_read_only: its old home

DB = "catalog.duckdb"
# offline: never fetch an extension (parquet and json are built in)
DUCKDB_CONFIG = OFFLINE
BASE_VIEWS = tuple(VIEW_SCHEMAS)  # bitext, mono, labeled, slots exist (maybe empty) from the start

DDL = """
CREATE TABLE IF NOT EXISTS runs (
  run_id VARCHAR PRIMARY KEY, pipeline VARCHAR, profile VARCHAR, status VARCHAR,
  started_at TIMESTAMP, finished_at TIMESTAMP, flow_run_id VARCHAR, config JSON, summary JSON);
CREATE TABLE IF NOT EXISTS stage_runs (
  run_id VARCHAR, stage VARCHAR, dataset VARCHAR, fingerprint VARCHAR, shard INTEGER, status VARCHAR,
  started_at TIMESTAMP, seconds DOUBLE, rows_in BIGINT, rows_out BIGINT, error VARCHAR);
CREATE TABLE IF NOT EXISTS artifacts (
  fingerprint VARCHAR PRIMARY KEY, stage VARCHAR, version VARCHAR, view VARCHAR, dataset VARCHAR,
  path VARCHAR, n_shards INTEGER, rows BIGINT, bytes BIGINT, params JSON, manifest JSON,
  created_run VARCHAR, created_at TIMESTAMP, last_run VARCHAR, last_used_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS lineage (child VARCHAR, parent VARCHAR, PRIMARY KEY (child, parent));
CREATE TABLE IF NOT EXISTS models (
  fingerprint VARCHAR PRIMARY KEY, name VARCHAR, kind VARCHAR, path VARCHAR, created_run VARCHAR,
  created_at TIMESTAMP, meta JSON);
CREATE TABLE IF NOT EXISTS evaluations (
  run_id VARCHAR, model VARCHAR, model_name VARCHAR, testset VARCHAR, metric VARCHAR, score DOUBLE,
  signature VARCHAR, sentences BIGINT, created_at TIMESTAMP, meta JSON);
CREATE TABLE IF NOT EXISTS reject_counts (
  run_id VARCHAR, fingerprint VARCHAR, stage VARCHAR, dataset VARCHAR, reason VARCHAR, rows BIGINT);
ALTER TABLE runs ADD COLUMN IF NOT EXISTS host VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS pid INTEGER;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS pid_started VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS crash_reported BOOLEAN;
ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS arm VARCHAR;
ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS seed INTEGER;
ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS p_value DOUBLE;
ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS ci_low DOUBLE;
ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS ci_high DOUBLE;
CREATE OR REPLACE VIEW evaluation_summary AS
  SELECT run_id, model_name, testset, arm, metric, count(*) AS seeds, avg(score) AS mean,
         coalesce(stddev_samp(score), 0) AS sd, min(score) AS min, max(score) AS max,
         max(p_value) AS p_value, max(ci_low) AS ci_low, max(ci_high) AS ci_high
  FROM evaluations GROUP BY run_id, model_name, testset, arm, metric;
"""  # the ALTERs: the owner of a run (storage.processes), an evaluation's arm, seed and paired test against
# the baseline, added to catalogs made before they were recorded; `rejects` is a view (storage/catalog_io/rejects.py)


class Catalog(RunRecords):
    """The catalog of one cache root. Cheap to construct; connections are opened per use."""

    stores: Sequence[str] = ()  # the object-store prefixes its artifacts lie under (set by ``read``)

    def __init__(self, root: Path, *, lock_timeout_s: float = 600.0) -> None:
        self.root = Path(root).absolute()
        self.path = self.root / DB
        self.lock_path = self.root / "catalog.lock"
        self.lock_timeout_s = lock_timeout_s
        self.query_timeout_s: float | None = None  # a user's query's time limit (None: $AUGDAG_QUERY_TIMEOUT, else none)
        self._schema_checked = False
        self._paths_checked = False  # read(): an older catalog's absolute paths made relative once (RELATIVE_PATHS)
        self._views_stale: bool | set[str] = False  # True: every view; a set: those views (a registration's)
        # a list (a replayed run, flows/engine/replay.py): registrations wait for the next query or finish_run, one write
        self.deferred: list[Callable[[duckdb.DuckDBPyConnection], Any] | Registration] | None = None
        self._stage_runs: list[Mapping[str, Any]] | None = None  # during _flush: the shard runs to insert at its end

    def _locked(self, mode: int) -> AbstractContextManager[None]:
        return catalog_lock(self.root, mode, timeout_s=self.lock_timeout_s)  # noted in catalog.holders/ (catalog_io/lock.py)

    @contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """An exclusive read-write connection in one transaction; the views are rebuilt before commit."""
        with self._locked(fcntl.LOCK_EX):
            created = not self.path.exists()
            con, alias = attach(self.path, DUCKDB_CONFIG)
            try:
                set_root(con, self.root)
                stale = created
                if checking := created or not self._schema_checked:
                    con.execute(DDL)  # idempotent; once per process and catalog
                    self._schema_checked = True
                    stale = not con.execute(
                        "SELECT count(*) FROM information_schema.tables WHERE table_catalog = current_database() "
                        "AND table_name = $v",
                        {"v": DROPPED_VIEW},
                    ).fetchone()[0]  # a catalog older than the view
                    stale |= con.execute(RELATIVE_PATHS).fetchone()[0] > 0  # a catalog of absolute paths
                con.execute("BEGIN TRANSACTION")
                if checking:  # a catalog whose `rejects` was a table: migrated with the views' rebuild, at once
                    stale |= rejects.migrate(con, self.root)
                self._views_stale = stale or set()
                yield con
                if self._views_stale:
                    self._refresh_views(con, None if self._views_stale is True else self._views_stale)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            finally:
                detach(con, alias)

    @contextmanager
    def read(self, *, sandbox: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A shared read-only connection (the catalog is created first if it does not exist).

        ``sandbox`` (a user's SQL: `augdag sql`, the shell, `export`): the connection reads a snapshot of the
        catalog, so no lock is held while it runs; it opens no file outside the cache root and no URL (DuckDB's
        ``allowed_directories`` with external access off), its configuration is locked so that no statement can
        give that back, and Ctrl-C (``KeyboardInterrupt``) or ``query_timeout_s`` (``QueryTimeout``) stops it."""
        if not self.path.exists() or self._outdated():
            self._schema_checked = False  # the write's first block creates the tables or makes the paths relative
            with self.write():
                pass
        with ExitStack() as stack:
            if sandbox:  # a user's query reads a snapshot: the lock only while it is copied (catalog_io/snapshot.py)
                with self._locked(fcntl.LOCK_SH):
                    path = stack.enter_context(snapshot(self.path))
            else:
                stack.enter_context(self._locked(fcntl.LOCK_SH))
                path = self.path
            con = stack.enter_context(duckdb.connect(str(path), read_only=True, config=DUCKDB_CONFIG))
            con.execute("SET enable_progress_bar = false")  # DuckDB draws it on stdout: into `-o -` and `-f tsv` data
            set_root(con, self.root)  # the views' files (storage/cache_root.py)
            self.stores = stores = object_stores(con)  # and the artifact prefix of an object store, if any
            if sandbox:
                check_served(con, self.root)  # what the views serve is as its manifests record (storage/integrity/)
                rejects.check_served(con, self.root)  # and `rejects` (the parts of artifacts without a view)
                # in this order: DuckDB refuses allowed_directories once external access is off
                roots = sorted({f"{self.root}/", f"{self.root.resolve()}/", *stores})  # as views name it, real
                con.execute("SET allowed_directories = $d", {"d": roots})
                con.execute("SET enable_external_access = false")
                con.execute("SET lock_configuration = true")
                timeout = self.query_timeout_s if self.query_timeout_s is not None else env_timeout()
                stack.enter_context(stoppable(con, timeout_s=timeout))  # Ctrl-C and the time limit stop it
            yield con

    def _outdated(self) -> bool:
        """Whether the catalog (an older version's, maybe moved since) stores absolute paths or holds `rejects` as a
        table: a write brings it up to date first; asked once."""
        if self._paths_checked:
            return False
        self._paths_checked = True
        with self._locked(fcntl.LOCK_SH), duckdb.connect(str(self.path), read_only=True, config=DUCKDB_CONFIG) as con:
            return con.execute(ABSOLUTE_PATHS).fetchone()[0] > 0 or rejects.needs_migration(con)

    def query(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None, *, sandbox: bool = False) -> pa.Table:
        """The result of ``sql`` as an Arrow table; ``sandbox`` for a user's SQL (see ``read``), where a
        file access outside the cache is a ``CatalogError`` (exit 2) naming the cache."""
        if self.deferred:  # this run's registrations first: what it reads must include them
            with self.write() as con:
                self._flush(con)
        with self.read(sandbox=sandbox) as con:
            try:
                return con.sql(sql, params=params).to_arrow_table()
            except duckdb.InterruptException:
                raise  # Ctrl-C or the time limit: ``read`` says which
            except duckdb.Error as e:
                if not sandbox:
                    raise
                raise missing_part(e) or sandbox_error(e, self.root, self.stores) from None  # one line, exit 2

    # -- writes (the flow driver only) ---------------------------------------------------------------

    def flush(self) -> None:
        """Write what ``deferred`` mode held back (a replay's runs and registrations), in one transaction."""
        if self.deferred:
            with self.write() as con:
                self._flush(con)

    def register(
        self,
        ref: ArtifactRef,
        manifest: Mapping[str, Any],
        *,
        run_id: str,
        parents: Sequence[str] = (),
        stage_runs: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """Record a completed artifact, its lineage, its rejects and the stage's shard runs. Returns True when the
        artifact is new to the catalog (a cached re-run only marks it used; False when deferred)."""
        return self._write_or_defer(Registration(ref, manifest, run_id, parents, stage_runs), False)

    def _write_or_defer(self, write: Callable[[duckdb.DuckDBPyConnection], Any] | Registration, deferred: Any = None) -> Any:
        """``write(con)`` (a registration: ``_register``) in a write transaction now, or (``deferred`` mode: a replay)
        with the next query or ``flush``, where consecutive registrations take a few statements (storage/registration.py)."""
        if self.deferred is not None:
            self.deferred.append(write)
            return deferred
        with self.write() as con:
            return self._register(con, write) if isinstance(write, Registration) else write(con)

    def _flush(self, con: duckdb.DuckDBPyConnection) -> None:
        """The deferred writes in order (storage/registration.py); their shard runs as one INSERT at the end."""
        self._stage_runs: list[Mapping[str, Any]] | None = []
        try:
            flush_deferred(
                con,
                self.deferred or [],
                one=functools.partial(self._register, con),
                stale=self._stale,
                stage_runs=self._stage_runs,
            )
            insert_stage_runs(con, self._stage_runs)
        finally:
            self._stage_runs = None

    def _register(self, con: duckdb.DuckDBPyConnection, registration: Registration) -> bool:
        """``register``'s body, inside the caller's transaction."""
        r = registration
        ref, manifest, run_id, parents, stage_runs = r.ref, r.manifest, r.run_id, r.parents, r.stage_runs
        known, current = con.execute(  # whether it is known, and the current artifact of its view, stage and dataset
            "SELECT (SELECT count(*) FROM artifacts WHERE fingerprint = $f), (SELECT fingerprint FROM artifacts WHERE "
            f"{VIEW_KEY_SQL} IS NOT DISTINCT FROM $v AND stage = $s AND dataset IS NOT DISTINCT FROM $d "
            "ORDER BY last_used_at DESC, created_at DESC LIMIT 1)",
            {"f": ref.fingerprint, "v": view_key(ref.view), "s": ref.stage, "d": ref.dataset},
        ).fetchone()
        if new := known == 0:
            self._stale(ref, manifest, True)
            con.execute(
                "INSERT INTO artifacts VALUES ($f, $st, $v, $view, $ds, $path, $n, $rows, $bytes, $params, $m,"
                " $run, now(), $run, now())",
                {
                    "f": ref.fingerprint,
                    "st": ref.stage,
                    "v": manifest["version"],
                    "view": ref.view,
                    "ds": ref.dataset,
                    "path": relative(self.root, ref.dir),
                    "n": ref.n_shards,
                    "rows": manifest["rows"],
                    "bytes": manifest["bytes"],
                    "params": json.dumps(manifest["params"]),
                    "m": json.dumps(manifest),
                    "run": run_id,
                },
            )
            if parents:
                insert_lineage(con, ref.fingerprint, parents)
            rejects.insert_counts(con, ref, manifest, run_id)  # counted per reason; the lines stay in the parts
        else:
            con.execute(
                "UPDATE artifacts SET last_run = $run, last_used_at = now() WHERE fingerprint = $f",
                {"run": run_id, "f": ref.fingerprint},
            )
            self._stale(ref, manifest, current != ref.fingerprint)  # a view moves only if it was not the current one
        if self._stage_runs is not None:  # a flush: one INSERT of every registration's shard runs at its end
            self._stage_runs.extend(stage_runs)
        else:
            insert_stage_runs(con, stage_runs)
        return new

    def register_failures(self, stage_runs: Sequence[Mapping[str, Any]]) -> None:
        """Record failed shards (the artifact itself stays unregistered: it has no manifest)."""
        with self.write() as con:
            insert_stage_runs(con, stage_runs)

    def register_model(self, fingerprint: str, *, name: str, kind: str, path: str, run_id: str, meta: Mapping[str, Any]) -> None:
        def write(con: duckdb.DuckDBPyConnection) -> None:
            con.execute(
                "INSERT OR IGNORE INTO models VALUES ($f, $n, $k, $p, $r, now(), $m)",
                {"f": fingerprint, "n": name, "k": kind, "p": redact(path), "r": run_id, "m": json.dumps(redact(meta))},
            )
            if meta.get("inputs"):  # a model descends from its training data, as an artifact from its inputs
                insert_lineage(con, fingerprint, meta["inputs"])

        self._write_or_defer(write)

    def register_evaluation(
        self,
        *,
        run_id: str,
        model: str,
        model_name: str,
        testset: str,
        scores: Sequence[Mapping[str, Any]],
        meta: Mapping[str, Any],
        arm: str | None = None,
        seed: int | None = None,
    ) -> None:
        """One row per metric (BLEU, chrF, ...) of a model on a test set, with its sacrebleu signature; ``arm``
        (what the model was trained on, e.g. an augmentation) and ``seed`` when a run compares several; a
        score's ``p_value``, ``ci_low`` and ``ci_high`` when its arm was tested against a baseline."""

        def write(con: duckdb.DuckDBPyConnection) -> None:
            for s in scores:
                con.execute(
                    "INSERT INTO evaluations (run_id, model, model_name, testset, metric, score, signature, sentences, "
                    "created_at, meta, arm, seed, p_value, ci_low, ci_high) VALUES ($r, $m, $n, $t, $metric, $score, "
                    "$sig, $sent, now(), $meta, $arm, $seed, $p, $lo, $hi)",
                    {
                        "r": run_id,
                        "m": model,
                        "n": model_name,
                        "t": testset,
                        "metric": s["metric"],
                        "score": s["score"],
                        "sig": s["signature"],
                        "sent": s["sentences"],
                        "meta": json.dumps(meta),
                        "arm": arm,
                        "seed": seed,
                        "p": s.get("p_value"),
                        "lo": s.get("ci_low"),
                        "hi": s.get("ci_high"),
                    },
                )

        self._write_or_defer(write)

    def _empty_part(self, view: str) -> Path:
        path = self.root / "empty" / f"{view}.parquet"
        if view in VIEW_SCHEMAS and not has_schema(path, VIEW_SCHEMAS[view]):  # new, or made before a column joined
            write_part(VIEW_SCHEMAS[view].empty_table(), path)
        return path

    def _stale(self, ref: ArtifactRef, manifest: Mapping[str, Any], moved: bool) -> None:
        """The views a registration moves (its own; `dropped`, `rejects` if it has such parts, even empty ones: it may
        replace an artifact whose were not): rebuilt at commit, the others kept."""
        if moved and self._views_stale is not True:
            roles = {f["role"] for f in manifest["files"]}
            side = {v for v, role in ((DROPPED_VIEW, DROPPED_ROLE), (rejects.VIEW, rejects.ROLE)) if role in roles}
            self._views_stale |= {ref.view, paired_view(ref.view), *side} - {None}

    def _refresh_views(self, con: duckdb.DuckDBPyConnection, only: set[str] | None = None) -> None:
        """Each view (``only`` those) over its current artifacts' parts, named relative to the cache root
        (storage/cache_root.py ``view_select``); a registration rebuilds only the views it moves."""
        object_stores(con)  # views over parts on an object store read them through its filesystem
        current = con.execute(
            "SELECT view, path, n_shards, coalesce(json_extract_string(manifest, '$.uniform.part') = 'true', false) "
            f"FROM artifacts WHERE view IS NOT NULL {CURRENT_SQL} ORDER BY view, stage, dataset"
        ).fetchall()
        artifacts: dict[str, list[tuple[list[str], bool]]] = {v: [] for v in BASE_VIEWS}
        for view, path, n_shards, uniform in (c for c in current if only is None or c[0] in only):  # a stat per part
            parts = [p for p in (f"{path}/{part_name(i)}" for i in range(n_shards)) if present(resolve(self.root, p))]
            artifacts.setdefault(view, []).append((parts, uniform))
        for view in (v for v in sorted(artifacts) if only is None or v in only):
            empty = [relative(self.root, self._empty_part(view))] if view in VIEW_SCHEMAS else []
            if (select := view_select(artifacts[view], empty)) is not None:
                con.execute(f'CREATE OR REPLACE VIEW "{view}" AS {select}')
        if only is None or DROPPED_VIEW in only:
            con.execute(dropped_view_sql(con, self.root))
        if only is None or rejects.VIEW in only:
            con.execute(rejects.rejects_view_sql(con, self.root))
