"""An arm of train_nmt as the catalog holds it: the `training_mix` artifacts of one run, read and proven.

    export-arm ARM [--run RUN]
      run  = RUN, else the latest run (by start) that built ARM's `training_mix` (dataset ``train_nmt.<ARM>``)
      mix  = that run's `training_mix` of ``train_nmt.<ARM>`` (phase train) [+ ``train_nmt.<ARM>.continue``]
      rows = each part, its bytes checked against its artifact's manifest (storage/integrity/)

Everything is pinned to one run: the continued phase is the one the same run built, never a newer or older one.
Each phase's rows are the artifact's as the student read them: every mix entry (``source``) ``copies`` times
(``copy`` 0..copies-1), in the artifact's order. A ``Phase`` knows its entries, their rows once and their copies
(``entries``), which the formats turn into files and weights (storage/handoff/formats.py). An unknown arm, an arm
never built, or a run that did not build it is one line, exit 2 (``CatalogError``); an artifact whose parts are gone
(``ArtifactError``) or differ from its manifest (``IntegrityError``) one line, exit 1.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ArtifactError, CatalogError
from storage import objects
from storage.artifacts import part_name
from storage.cache_root import resolve
from storage.catalog import Catalog
from storage.integrity import read_checked

STAGE = "training_mix"
PHASES = ("train", "continue")


def dataset_of(arm: str, phase: str) -> str:
    """The `training_mix` dataset of an arm's phase: ``train_nmt.<arm>`` or ``train_nmt.<arm>.continue``."""
    return f"train_nmt.{arm}" + (".continue" if phase == "continue" else "")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One mix entry of a phase: its name (the SQL mix key), its distinct rows (copy 0) and its copies."""

    name: str
    rows: pa.Table
    copies: int

    @property
    def mixed_rows(self) -> int:
        """Its rows in the phase's training data: rows × copies."""
        return self.rows.num_rows * self.copies


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase of an arm (train, or continue), as its `training_mix` artifact holds it."""

    name: str
    fingerprint: str
    table: pa.Table  # every row as the student read them (copies repeated)
    params: dict[str, Any]  # the artifact's params: arm, phase, mix (name -> SQL), copies

    def entries(self) -> list[Entry]:
        """Its mix entries with rows, in the artifact's order (by name); an entry with 0 copies has no rows and
        is not listed."""
        names = list(dict.fromkeys(self.table["source"].to_pylist()))
        out = []
        for name in names:
            mine = self.table.filter(pc.equal(self.table["source"], name))
            copies = len(set(mine["copy"].to_pylist()))
            out.append(Entry(name, mine.filter(pc.equal(mine["copy"], 0)), copies))
        return out


@dataclasses.dataclass(frozen=True)
class ArmData:
    """An arm as one run built it: the run, its phases (train, then continue if any) and the run's record."""

    arm: str
    run_id: str
    phases: list[Phase]
    run: dict[str, Any]  # the `runs` row: pipeline, profile, status, started_at, finished_at, config

    @property
    def config(self) -> dict[str, Any]:
        """The profile the run recorded (``runs.config``), as JSON."""
        raw = self.run.get("config")
        return json.loads(raw) if isinstance(raw, str) else dict(raw or {})


def built_arms(catalog: Catalog) -> list[str]:
    """Every arm the catalog has a `training_mix` of, sorted."""
    rows = catalog.query("SELECT DISTINCT dataset FROM artifacts WHERE stage = $s", {"s": STAGE}).to_pylist()
    names = {r["dataset"].removeprefix("train_nmt.").removesuffix(".continue") for r in rows if r["dataset"]}
    return sorted(names)


def arm_run(catalog: Catalog, arm: str, run: str | None, profile_arms: list[str] | None = None) -> str:
    """The run whose `training_mix` of ``arm`` is read: ``run``, else the latest that built it. ``profile_arms``:
    the arms a given profile names (an arm there but never built gets its own hint)."""
    known = built_arms(catalog)
    if arm not in known:
        if profile_arms is not None and arm in profile_arms:
            raise CatalogError(
                f"arm {arm!r} has never been built: the catalog has no training_mix of it. Hint: augdag run train_nmt "
                "with this profile builds it"
            )
        listed = ", ".join(sorted(set(known) | set(profile_arms or []))) or "none (augdag run train_nmt builds them)"
        raise CatalogError(f"unknown arm {arm!r}; the arms are: {listed}")
    builds = catalog.query(
        "SELECT s.run_id, min(s.started_at) AS first_at FROM stage_runs s WHERE s.stage = $s AND s.dataset = $d "
        "GROUP BY s.run_id ORDER BY first_at DESC, s.run_id DESC",
        {"s": STAGE, "d": dataset_of(arm, "train")},
    ).to_pylist()
    if run is None:
        if not builds:
            raise CatalogError(f"arm {arm!r}: no run recorded building its training_mix. Hint: augdag run train_nmt")
        return str(builds[0]["run_id"])
    if not catalog.query("SELECT 1 FROM runs WHERE run_id = $r", {"r": run}).num_rows:
        raise CatalogError(f"--run {run}: no such run in the catalog (augdag runs lists them)")
    if run not in {b["run_id"] for b in builds}:
        runs = ", ".join(b["run_id"] for b in builds[:5])
        raise CatalogError(f"--run {run}: that run did not build arm {arm!r}; the runs that did: {runs}")
    return run


def read_arm(catalog: Catalog, arm: str, run: str | None = None, profile_arms: list[str] | None = None) -> ArmData:
    """The arm ``arm`` as run ``run`` (default: the latest that built it) built it, every part proven."""
    run_id = arm_run(catalog, arm, run, profile_arms)
    rows = catalog.query(
        "SELECT DISTINCT a.fingerprint, a.dataset, a.path, a.n_shards, a.params FROM stage_runs s "
        "JOIN artifacts a ON a.fingerprint = s.fingerprint WHERE s.run_id = $r AND s.stage = $s AND a.dataset IN ($t, $c)",
        {"r": run_id, "s": STAGE, "t": dataset_of(arm, "train"), "c": dataset_of(arm, "continue")},
    ).to_pylist()
    by_phase = {("continue" if r["dataset"].endswith(".continue") else "train"): r for r in rows}
    phases = [read_phase(catalog, p, by_phase[p]) for p in PHASES if p in by_phase]
    record = catalog.query(
        "SELECT run_id, pipeline, profile, status, started_at, finished_at, config FROM runs WHERE run_id = $r", {"r": run_id}
    ).to_pylist()
    return ArmData(arm, run_id, phases, record[0] if record else {"run_id": run_id})


def read_phase(catalog: Catalog, phase: str, row: dict[str, Any]) -> Phase:
    """One phase's `training_mix` artifact (its catalog row ``row``), every part checked against the manifest."""
    directory = resolve(catalog.root, row["path"])
    tables = []
    for shard in range(row["n_shards"]):
        loc = objects.join(directory, part_name(shard))
        try:
            tables.append(read_checked(loc, root=catalog.root))
        except FileNotFoundError:
            raise ArtifactError(
                f"{loc}: part {shard} of training_mix {row['fingerprint']} ({row['dataset']}) is gone (collected or "
                "deleted). Hint: augdag run train_nmt rebuilds it, or --run a run whose artifacts are kept"
            ) from None
    params = json.loads(row["params"]) if isinstance(row["params"], str) else dict(row["params"] or {})
    return Phase(phase, row["fingerprint"], pa.concat_tables(tables), params)
