"""Which artifacts a read serves: the current ones, or those a run used (a pin).

A catalog view serves, per (view key, stage, dataset), the artifact that was *used last* (storage/schemas.py
``CURRENT_SQL``: ``artifacts.last_used_at``). A pin is the same rule cut at a run: every use of an artifact is a row
of ``stage_runs`` (computed or cached; failed shards are no use), appended in the order the flow driver registered
them, so the artifacts current when run R registered its last output are, per (view key, stage, dataset), the one
whose last use comes no later than R's last use. For a nightly run, R's uses are those of the pipeline runs it ran
(its summary's ``pipelines``). A night that writes afterwards appends later uses and moves nothing a pin reads.

A pinned artifact that is gone (its directory or manifest removed: collected, or deleted by hand) refuses the pin in
one line naming the run and the artifact; `augdag gc` itself never collects a complete artifact (flows/ops/gc.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from conf.errors import CatalogError
from storage import objects
from storage.cache_root import resolve
from storage.catalog import Catalog
from storage.integrity import MANIFEST
from storage.objects import Loc
from storage.runs import load_run
from storage.schemas import CURRENT_SQL, VIEW_KEY_SQL

_COLUMNS = "view, stage, dataset, fingerprint, path, manifest"
# the artifacts current at the cut ($cut: a stage_runs rowid), per view key, stage and dataset
PINNED_SQL = f"""
SELECT {_COLUMNS}, used, used_by FROM artifacts JOIN (
  SELECT fingerprint, max(rowid) AS used, arg_max(run_id, rowid) AS used_by FROM stage_runs
  WHERE status <> 'failed' AND rowid <= $cut GROUP BY fingerprint
) USING (fingerprint)
WHERE view IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY {VIEW_KEY_SQL}, stage, dataset ORDER BY used DESC) = 1
ORDER BY view, stage, dataset
"""
CURRENT = (
    f"SELECT {_COLUMNS}, epoch_us(last_used_at) AS used, last_run AS used_by FROM artifacts WHERE view IS NOT NULL "
    f"{CURRENT_SQL} ORDER BY view, stage, dataset"
)
CUT_SQL = "SELECT max(rowid) FROM stage_runs WHERE list_contains($ids, run_id) AND status <> 'failed'"


@dataclasses.dataclass(frozen=True)
class Artifact:
    """One artifact a view serves: its main parts (file name -> sha256 its manifest records) and their rows."""

    view: str
    stage: str
    dataset: str | None
    fingerprint: str
    directory: Loc
    parts: Mapping[str, str]
    rows: int
    uniform: bool
    used_by: str  # the run whose use of it this selection took (its last before the cut)
    used: int  # when, in an order only comparable within one selection

    @property
    def name(self) -> str:
        """``stage/fingerprint``, as `augdag verify` names an artifact."""
        return f"{self.stage}/{self.fingerprint}"

    def locations(self) -> list[Loc]:
        """The main parts, in shard order."""
        return [objects.join(self.directory, f) for f in sorted(self.parts)]


@dataclasses.dataclass(frozen=True)
class Pin:
    """A run every read is cut at: its id, its pipeline and the run ids whose uses it covers."""

    run_id: str
    pipeline: str
    run_ids: tuple[str, ...]


def pin_of(catalog: Catalog, run_id: str) -> Pin:
    """The pin of ``run_id`` (a nightly covers its pipeline runs).

    Raises:
        CatalogError: no such run (naming the recent ones), or a run that registered nothing to pin.
    """
    run = load_run(catalog, run_id)
    children = run["summary"].get("pipelines", []) if run["pipeline"] == "nightly" else []
    ids = tuple(dict.fromkeys([run_id, *(str(p["run_id"]) for p in children if p.get("run_id"))]))
    return Pin(run_id, str(run["pipeline"]), ids)


def latest_run(catalog: Catalog, name: str) -> str:
    """The id of the most recent completed run of pipeline ``name`` (``nightly`` too).

    Raises:
        CatalogError: no completed run of that pipeline (naming the pipelines that have one).
    """
    rows = catalog.query(
        "SELECT run_id FROM runs WHERE pipeline = $p AND status = 'completed' ORDER BY started_at DESC, run_id DESC LIMIT 1",
        {"p": name},
    )
    if rows.num_rows:
        return str(rows["run_id"][0].as_py())
    known = catalog.query("SELECT DISTINCT pipeline FROM runs WHERE status = 'completed' ORDER BY pipeline")
    listed = ", ".join(str(p) for p in known["pipeline"].to_pylist()) or "none"
    raise CatalogError(
        f"{catalog.path}: no completed run of {name!r}; pipelines with a completed run: {listed}. Hint: `augdag runs` lists runs"
    )


def served(catalog: Catalog, pin: Pin | None) -> list[Artifact]:
    """The artifacts the views serve: the current ones (``pin`` None) or those current when the pinned run ended.

    Raises:
        CatalogError: a pinned run that registered nothing, or a pinned artifact whose manifest is gone.
    """
    if pin is None:
        rows = catalog.query(CURRENT).to_pylist()
    else:
        cut = catalog.query(CUT_SQL, {"ids": list(pin.run_ids)}).column(0)[0].as_py()
        if cut is None:
            raise CatalogError(f"run {pin.run_id}: registered no artifact (no stage of it completed), so it pins nothing")
        rows = catalog.query(PINNED_SQL, {"cut": cut}).to_pylist()
    artifacts = [_artifact(catalog, r) for r in rows]
    if pin is not None:
        for a in artifacts:
            if not objects.exists(objects.join(a.directory, MANIFEST)):
                raise CatalogError(
                    f"run {pin.run_id}: artifact {a.name} (view {a.view}, {a.rows:,} row(s)) was collected: "
                    f"{objects.join(a.directory, MANIFEST)} is gone. Hint: pin a later run (`augdag runs`), or read the "
                    "current views (a cache without .run/.latest)"
                )
    return artifacts


def _artifact(catalog: Catalog, row: Mapping[str, Any]) -> Artifact:
    manifest = json.loads(row["manifest"])
    parts = {f["file"]: f["sha256"] for f in manifest["files"] if f["role"] == "part"}
    rows = sum(int(f["rows"]) for f in manifest["files"] if f["role"] == "part")
    uniform = bool(manifest.get("uniform", {}).get("part", False))
    return Artifact(
        str(row["view"]),
        str(row["stage"]),
        row["dataset"],
        str(row["fingerprint"]),
        resolve(catalog.root, str(row["path"])),
        parts,
        rows,
        uniform,
        str(row["used_by"]),
        int(row["used"]),
    )


def of_view(artifacts: Sequence[Artifact], view: str) -> list[Artifact]:
    """The artifacts that serve ``view``, in the catalog's order (stage, dataset)."""
    return [a for a in artifacts if a.view == view]
