"""`augdag retry`: run a recorded run again with the configuration it recorded.

Because every shard and model is keyed by its fingerprint, running the same configuration again
recomputes only what is missing: the failed shards, and the stages after them. Finished shards show
as Cached in the Prefect UI.

``--stage S`` recomputes the artifacts (or the model) of S that the run recorded, although they exist;
``--from S`` recomputes them and everything that descends from them in the catalog's lineage, artifacts
and models, and nothing else: a stage of the same name over another dataset (a sibling) is recomputed
only if it descends from S. ``S[dataset]`` picks one dataset's. Both name artifacts by fingerprint, as
the run recorded them. With ``--set``, a stage whose configuration the overrides change gets a new
fingerprint, and so does everything below it: those are computed because they are new (or reused, where
that exact configuration was computed before), whatever ``--stage``/``--from`` say; the forced ones are
those whose fingerprint the overrides leave as recorded.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

from conf.errors import ConfError
from flows.engine.run_artifacts import pipeline_summaries
from storage.catalog import Catalog


@dataclasses.dataclass(frozen=True)
class Forcing:
    """What the runs of a retry recompute although it exists: artifacts and models by fingerprint. Each
    is recomputed once per retry (the nightly's pipelines that read it again find it done, as cached)."""

    fingerprints: frozenset[str] = frozenset()
    done: set[str] = dataclasses.field(default_factory=set, compare=False)

    def wants(self, fp: str) -> bool:
        """Whether ``fp`` is to be recomputed: it is forced and not yet recomputed in this retry."""
        return fp in self.fingerprints and fp not in self.done


forced: contextvars.ContextVar[Forcing] = contextvars.ContextVar("augdag_forced", default=Forcing())  # noqa: B039 — frozen


def forced_now() -> Forcing:
    """What a run started now recomputes: the fingerprints of the enclosing ``forcing`` block, if any."""
    return forced.get()


@contextlib.contextmanager
def forcing(fingerprints: Sequence[str]) -> Iterator[None]:
    """Inside the block, every run recomputes the artifacts and models ``fingerprints`` (every shard
    rewritten, with the same bytes: the fingerprint is the same). No Prefect import: the CLI enters it
    before Prefect is configured."""
    token = forced.set(Forcing(frozenset(fingerprints)))
    try:
        yield
    finally:
        forced.reset(token)


def run_stages(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Every stage and model of a run summary (a nightly run's: of all its pipelines)."""
    return [s for child in pipeline_summaries(summary) for s in child.get("stages") or []]


def label(stage: dict[str, Any]) -> str:
    """``stage[dataset]`` of a stage report (a model: its name)."""
    return f"{stage['stage']}[{stage['dataset']}]" if stage.get("dataset") else stage["stage"]


def forced_artifacts(catalog: Catalog, run: dict[str, Any], *, stage: str | None, start: str | None) -> dict[str, str]:
    """What `augdag retry` recomputes although it exists, fingerprint -> ``stage[dataset]``, in lineage order:
    the run's artifacts (or model) of ``stage``, plus those of ``start`` and all the run's artifacts and
    models that descend from them. A name is ``S`` (every dataset's) or ``S[dataset]``."""
    stages = run_stages(run["summary"])
    recorded = {s["fingerprint"]: s for s in stages}
    forced: dict[str, str] = {}
    for name, closure in ((stage, False), (start, True)):
        if name is None:
            continue
        seeds = [fp for fp, s in recorded.items() if name in (s["stage"], label(s))]
        if not seeds:
            names = sorted({s["stage"] for s in stages})
            raise ConfError(
                f"run {run['run_id']} has no stage {name!r}; its stages and models: {', '.join(names)}"
                f". Hint: S or S[dataset], e.g. {label(stages[0]) if stages else 'clean[a]'}"
            )
        for fp in downstream(catalog, seeds) if closure else seeds:
            if fp in recorded:
                forced[fp] = label(recorded[fp])
    order = list(recorded)
    return dict(sorted(forced.items(), key=lambda kv: order.index(kv[0])))


def downstream(catalog: Catalog, fingerprints: Sequence[str]) -> list[str]:
    """``fingerprints`` and every artifact and model that descends from them (the lineage's closure)."""
    if not fingerprints:
        return []
    return (
        catalog.query(
            "WITH RECURSIVE down(fp) AS (SELECT unnest($seeds) UNION "
            "SELECT l.child FROM lineage l JOIN down d ON l.parent = d.fp) "
            "SELECT fp FROM down",
            {"seeds": list(fingerprints)},
        )
        .column("fp")
        .to_pylist()
    )
