"""A replay's registrations of cached artifacts, written as a few set-based statements.

A replayed run (flows/engine/replay.py) registers every artifact it finds cached, ~130 of them for the demo nightly,
deferred to one write (``Catalog.deferred``). One by one that is a lookup and an UPDATE per artifact; here it is one
lookup of the batch's artifacts, one of the current artifact of each of their (view, stage, dataset), and one
UPDATE. The views a registration moves are the same as one by one: in order, an artifact moves its
view unless it was already the current one (and it is the current one after). A batch with an artifact the
catalog does not know (a catalog rebuilt under a cache) goes one by one, as a run that computes does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import duckdb

from storage.artifacts import ArtifactRef
from storage.schemas import VIEW_KEY_SQL, view_key


@dataclasses.dataclass(frozen=True)
class Registration:
    """One deferred ``Catalog.register``."""

    ref: ArtifactRef
    manifest: Mapping[str, Any]
    run_id: str
    parents: Sequence[str] = ()
    stage_runs: Sequence[Mapping[str, Any]] = ()


def flush_deferred(
    con: duckdb.DuckDBPyConnection,
    deferred: list[Any],
    *,
    one: Callable[[Registration], Any],
    stale: Callable[[ArtifactRef, Mapping[str, Any], bool], None],
    stage_runs: list[Mapping[str, Any]],
) -> None:
    """Run ``deferred`` (emptying it) in order: each write ``w(con)`` as it is, each run of consecutive
    ``Registration`` s as one ``register_batch``."""
    while deferred:
        batch = []
        while deferred and isinstance(deferred[0], Registration):
            batch.append(deferred.pop(0))
        if batch:
            register_batch(con, batch, one=one, stale=stale, stage_runs=stage_runs)
        else:
            deferred.pop(0)(con)


Key = tuple[str | None, str, str | None]  # (view key, stage, dataset): one current artifact each


def key(ref: ArtifactRef) -> Key:
    return view_key(ref.view), ref.stage, ref.dataset


def register_batch(
    con: duckdb.DuckDBPyConnection,
    batch: Sequence[Registration],
    *,
    one: Callable[[Registration], Any],
    stale: Callable[[ArtifactRef, Mapping[str, Any], bool], None],
    stage_runs: list[Mapping[str, Any]],
) -> None:
    """Register ``batch`` in order inside the caller's transaction: ``one`` registers a single one (the catalog's
    own way), ``stale`` marks the views a registration moves, ``stage_runs`` collects the shard runs to insert."""
    fingerprints = [r.ref.fingerprint for r in batch]
    known = {
        f
        for (f,) in con.execute(
            "SELECT fingerprint FROM artifacts WHERE list_contains($f, fingerprint)", {"f": fingerprints}
        ).fetchall()
    }
    if len(known) < len(set(fingerprints)):
        for r in batch:
            one(r)
        return
    current: dict[Key, str] = {
        (v, s, d): f
        for v, s, d, f in con.execute(
            f"SELECT {VIEW_KEY_SQL}, stage, dataset, fingerprint FROM artifacts WHERE list_contains($s, stage) QUALIFY "
            f"row_number() OVER (PARTITION BY {VIEW_KEY_SQL}, stage, dataset ORDER BY last_used_at DESC, created_at DESC) = 1",
            {"s": sorted({r.ref.stage for r in batch})},
        ).fetchall()
    }
    for r in batch:
        stale(r.ref, r.manifest, current.get(key(r.ref)) != r.ref.fingerprint)
        current[key(r.ref)] = r.ref.fingerprint
        stage_runs.extend(r.stage_runs)
    last = {r.ref.fingerprint: (i, r.run_id) for i, r in enumerate(batch)}  # an artifact's last use in the batch
    # used in order: one transaction's now() is one instant, so the i-th use is i microseconds after it, and the
    # view (the last used of its stage and dataset) is the one registered last, as with a write each
    con.execute(
        "UPDATE artifacts SET last_run = u.run, last_used_at = now() + to_microseconds(u.i) FROM (SELECT "
        "unnest($f) AS f, unnest($r) AS run, unnest($i) AS i) AS u WHERE artifacts.fingerprint = u.f",
        {"f": list(last), "r": [run for _, run in last.values()], "i": [i for i, _ in last.values()]},
    )


def insert_lineage(con: duckdb.DuckDBPyConnection, child: str, parents: Sequence[str]) -> None:
    """``child``'s edges to each of ``parents``, in one statement (executemany is a statement per row)."""
    con.execute("INSERT OR IGNORE INTO lineage SELECT DISTINCT * FROM (SELECT $c, unnest($p))", {"c": child, "p": list(parents)})
