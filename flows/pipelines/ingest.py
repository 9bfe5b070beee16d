"""The `ingest` pipeline: read -> validate -> reject -> shard -> (split sentences) -> duplicates -> clean -> catalog.

A held-out test or dev set (conf/roles.py) and a dataset with ``clean: false`` stop after the read: validated,
their broken rows rejected, never deduplicated or filtered (their `clean` stage keeps every row: tasks/ingest/clean.py).
A held-out set's rows are in the view ``heldout_<kind>`` (``heldout_bitext``), never in ``bitext``: an arm's
``SELECT src, tgt FROM bitext`` cannot reach a test pair.
A dataset's own ``clean: {...}`` replaces keys of ``ingest.clean`` for it (conf/sections/cleaning.py), the corpus
filters among them (conf/sections/filters.py: chained inside `clean`, tasks/ingest/chain.py).

A training dataset with near_duplicates or decontaminate, which compare it with other datasets, goes through
filter_chain -> across_datasets (one for the run) -> clean instead (tasks/ingest/across.py): its `clean` artifact,
the one its view shows, is still the one with every row it kept and every row it dropped. ``ingest_datasets``
ingests those it is asked for and, when one of them is compared across datasets, every dataset it is compared with.
When a filter is on, the summary counts each dataset's drops per reason and ``ingest.html`` shows them
(flows/reports/ingest_report.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from conf.at_rest import redact
from conf.errors import ConfError
from conf.loader import is_packaged, profile_path
from conf.roles import evaluation_datasets
from conf.schema import AugdagConf
from conf.sections.cleaning import CleanConf, dataset_clean, own_filters
from conf.sections.filters import ACROSS_FILTERS, FILTERS, resolved
from flows.engine.counts import view_rows
from flows.engine.driver import Run, run_source_stage, run_stage
from flows.engine.registry import Headline
from flows.engine.replay import run_logger
from flows.engine.runners import FlowConf, pipeline_flow
from storage.artifacts import ArtifactRef, hash_inputs
from storage.schemas import heldout_view
from tasks.ingest.across import ACROSS_DATASETS, CLEAN_ACROSS, AcrossParams, side_name
from tasks.ingest.clean import CLEAN, DUPLICATES, FILTER_CHAIN, KEEP_VALID, CleanParams
from tasks.ingest.read import READ_VERSION, decode_warnings, read_params, reader
from tasks.ingest.sentences import SPLIT_SENTENCES


@dataclasses.dataclass(frozen=True)
class Plan:
    """How each dataset of a profile is cleaned: its settings (None: not cleaned), the corpus filters that apply to
    it (``resolved``), and the parameters of the stage across datasets (None: no dataset runs one of its filters)."""

    settings: Mapping[str, CleanConf | None]
    filters: Mapping[str, Mapping[str, Any]]
    across: AcrossParams | None
    held: frozenset[str] = frozenset()  # the held-out sets: view heldout_<kind>

    @classmethod
    def of(cls, conf: AugdagConf, held_out: Collection[str] = ()) -> Plan:
        """The plan of ``conf``: its held-out sets (conf/roles.py, and ``held_out``) are not cleaned."""
        held = {*evaluation_datasets(conf), *held_out}
        settings, filters, sets = {}, {}, {f: [] for f in ACROSS_FILTERS}
        for name, ds in conf.datasets.items():
            settings[name] = None if name in held else dataset_clean(conf.ingest.clean, ds.clean)
            if settings[name] is not None:
                filters[name] = resolved(settings[name], ds, name, own_filters(ds.clean))
                for f in ACROSS_FILTERS:
                    if f in filters[name]:
                        sets[f].append(name)
        if not any(sets.values()):
            return cls(settings, filters, None, frozenset(held))
        first = {f: filters[names[0]][f] for f, names in sets.items() if names}  # one setting each (check_filters)
        tests = [n for n in conf.datasets if n in held and conf.datasets[n].kind != "slots"] if sets["decontaminate"] else []
        across = AcrossParams(
            kinds={n: conf.datasets[n].kind for n in [*sets["decontaminate"], *sets["near_duplicates"], *tests]},
            decontaminate=first.get("decontaminate"),
            decontaminate_sets=sets["decontaminate"],
            test_sets=tests,
            near_duplicates=first.get("near_duplicates"),
            near_duplicate_sets=sets["near_duplicates"],
        )
        return cls(settings, filters, across, frozenset(held))

    def compared(self) -> list[str]:
        """The datasets compared across datasets (cleaned through filter_chain and across_datasets)."""
        a = self.across
        return [] if a is None else list(dict.fromkeys([*a.decontaminate_sets, *a.near_duplicate_sets]))

    def filtered(self) -> list[str]:
        """The cleaned datasets with at least one corpus filter on."""
        return [n for n, fs in self.filters.items() if any(f in fs for f in FILTERS)]


def read_rows(run: Run, name: str, conf: AugdagConf) -> ArtifactRef:
    """Read (validate, reject, shard) dataset ``name``; a mono dataset with ``split_sentences`` is split after the
    read: duplicates and clean then see one row per sentence."""
    ds = conf.datasets[name]
    kw = {"max_line_chars": conf.ingest.max_line_chars, "shard_size": conf.shard_size}
    read = run_source_stage(
        run,
        name="read",
        version=READ_VERSION,
        dataset=name,
        produce=reader(name, ds, **kw),
        params=read_params(name, ds, **kw),
        input_fingerprint=hash_inputs(ds.files(), memo=run.root / "input-hashes"),
    )
    for warning in map(redact, decode_warnings(name, ds, read)):  # > 5 % invalid_utf8: the encoding proposed
        run_logger().info("%s", warning)  # the run's log; the terminal gets it under the summary (`warnings`)
        if warning not in run.warnings:
            run.warnings.append(warning)
    if ds.split_sentences:  # a row per sentence from here on
        return run_stage(run, SPLIT_SENTENCES, inputs=[read], params={"language": ds.language})
    return read


def ingest_datasets(
    run: Run, conf: AugdagConf, names: Sequence[str], *, held_out: Collection[str] = ()
) -> dict[str, ArtifactRef]:
    """Datasets ``names`` through the pipeline; returns each one's `clean` artifact (view = its record kind).
    ``held_out`` (test or dev sets besides the profile's): every validated row is kept, as with ``clean: false``."""
    plan = Plan.of(conf, held_out)
    rows: dict[str, ArtifactRef] = {}
    done: dict[str, ArtifactRef] = {}

    def read(name: str) -> ArtifactRef:
        if name not in rows:
            rows[name] = read_rows(run, name, conf)
        return rows[name]

    def params(name: str) -> CleanParams:
        return CleanParams.of(plan.settings[name], conf.datasets[name].kind, plan.filters[name])

    def keep_valid(name: str) -> ArtifactRef:
        kind = conf.datasets[name].kind
        if name in plan.held:  # a test or dev set: in heldout_<kind>, never in the view training reads
            stage = dataclasses.replace(KEEP_VALID, view=heldout_view(kind))
            return run_stage(run, stage, inputs=[read(name)], params={"cleans": False, "held_out": True})
        return run_stage(run, dataclasses.replace(KEEP_VALID, view=kind), inputs=[read(name)], params={"cleans": False})

    compared = plan.compared()
    for name in names:
        if plan.settings[name] is None:
            done[name] = keep_valid(name)
        elif name not in compared:
            dups = run_stage(run, DUPLICATES, inputs=[read(name)], params={}, n_shards=1)
            view = dataclasses.replace(CLEAN, view=conf.datasets[name].kind)
            done[name] = run_stage(run, view, inputs=[read(name)], side={"duplicates": dups}, params=params(name))
    if not any(name in compared for name in names):
        return done
    marked = {}
    for name in compared:
        dups = run_stage(run, DUPLICATES, inputs=[read(name)], params={}, n_shards=1)
        marked[name] = run_stage(run, FILTER_CHAIN, inputs=[read(name)], side={"duplicates": dups}, params=params(name))
    tests = {name: done.get(name) or keep_valid(name) for name in plan.across.test_sets}
    side = {side_name(name): ref for name, ref in {**marked, **tests}.items()}
    stage = dataclasses.replace(ACROSS_DATASETS, lazy_side=tuple(side))
    drops = run_stage(run, stage, inputs=[], side=side, params=plan.across, n_shards=1)
    for name in (n for n in names if n in compared):
        view = dataclasses.replace(CLEAN_ACROSS, view=conf.datasets[name].kind)
        done[name] = run_stage(run, view, inputs=[marked[name]], side={"drops": drops}, params={})
    return done


def ingest_dataset(run: Run, conf: AugdagConf, name: str, *, held_out: bool = False) -> ArtifactRef:
    """Dataset ``name`` through the pipeline (``ingest_datasets``); returns its `clean` artifact."""
    return ingest_datasets(run, conf, [name], held_out=[name] if held_out else [])[name]


@pipeline_flow("ingest")
def ingest_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ingest every dataset of the profile; returns the run summary (also stored in the catalog)."""
    extra: dict[str, Any] = {"ingest": {}}
    with Run.started(conf, pipeline="ingest", profile=profile, config=config) as run:
        cleaned = ingest_datasets(run, conf, list(conf.datasets))
        if filtered := {name: cleaned[name] for name in Plan.of(conf).filtered()}:
            from flows.reports.ingest_report import drop_counts, publish_report

            counts = drop_counts(filtered)
            extra = {"ingest": {"dropped": counts}, "reports": publish_report(run, filtered, counts)}
        if outside := outside_inputs(conf, profile):
            extra["ingest"]["outside"] = outside
    return run.finish(extra=extra)


def outside_inputs(conf: AugdagConf, profile: str) -> dict[str, Any]:
    """The input files (local paths) outside both the profile's directory and the cache, per dataset, as stored
    (conf/at_rest.py: a directory from the environment as ``${VAR}``), with the directory they are outside of
    (``where``): reading them is fine, and the run's summary names them."""
    try:
        path = profile_path(profile)
        base = None if is_packaged(path) else path.parent.resolve()  # a packaged profile's paths: under the cache
    except ConfError:  # a retried run's profile file may be gone
        base = None
    roots = [r for r in (base, Path(conf.cache).resolve()) if r is not None]
    found = {
        name: [redact(str(p)) for p in ds.files() if isinstance(p, Path) and not _under(p.resolve(), roots)]
        for name, ds in conf.datasets.items()
    }
    found = {name: files for name, files in found.items() if files}
    return {"where": [redact(str(r)) for r in roots], "datasets": found} if found else {}


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of an ``ingest`` run: with a corpus filter on, per filtered dataset, its rows in, kept, and
    dropped per reason (``clean``'s own reasons, then the filters', in the order they run); and one line naming the
    input files outside the profile's directory and the cache (``outside_inputs``), if any."""
    lines = [
        f"ingest {name}: {c['rows']:,} rows in, {c['kept']:,} kept; dropped "
        + (", ".join(f"{reason} {n:,}" for reason, n in c["reasons"].items()) or "none")
        for name, c in s.get("ingest", {}).get("dropped", {}).items()
    ]
    if outside := s.get("ingest", {}).get("outside"):
        files = "; ".join(f"{name} {', '.join(paths)}" for name, paths in outside["datasets"].items())
        lines.append(f"ingest read inputs outside {' and '.join(outside['where'])}: {files}")
    return lines


def headline(s: Mapping[str, Any]) -> Headline:
    """An ``ingest`` run in one line: the rows in the views it filled, and the input rows it refused (rejected as
    malformed, dropped by a filter or as a duplicate)."""
    stages = s["stages"]
    rejects = sum(st["rows_out"].get("rejects", 0) for st in stages if st["status"] != "failed")
    dropped = sum(st["rows_out"].get("dropped", 0) for st in stages if st["status"] != "failed")
    return Headline(
        f"{sum(view_rows(stages).values()):,} rows", f"{rejects:,} rejected, {dropped:,} dropped (`dropped`, `rejects`)"
    )
