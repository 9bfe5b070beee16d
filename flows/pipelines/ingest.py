"""The `ingest` pipeline: read -> validate -> reject -> shard -> (split sentences) -> duplicates -> clean -> catalog.

A held-out test or dev set (conf/roles.py) and a dataset with ``clean: false`` stop after the read: validated,
their broken rows rejected, never deduplicated or filtered (their `clean` stage keeps every row: tasks/ingest/clean.py).
A dataset's own ``clean: {...}`` replaces keys of ``ingest.clean`` for it (conf/sections/cleaning.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from conf.roles import evaluation_datasets
from conf.schema import DatasetConf, IngestConf
from conf.sections.cleaning import dataset_clean, own_filters
from conf.sections.filters import resolved
from flows.engine.driver import Run, run_source_stage, run_stage
from flows.engine.replay import run_logger
from flows.engine.runners import FlowConf, pipeline_flow
from storage.artifacts import ArtifactRef, hash_inputs
from tasks.ingest.clean import CLEAN, DUPLICATES, KEEP_VALID, CleanParams
from tasks.ingest.read import READ_VERSION, decode_warnings, read_params, reader
from tasks.ingest.sentences import SPLIT_SENTENCES


def ingest_dataset(
    run: Run, name: str, ds: DatasetConf, conf: IngestConf, shard_size: int, *, held_out: bool = False
) -> ArtifactRef:
    """One dataset through the pipeline; returns the cleaned artifact (view = the record kind). A mono dataset
    with ``split_sentences`` is split after the read: duplicates and clean then see one row per sentence.
    ``held_out`` (a test or dev set): every validated row is kept, as with the dataset's ``clean: false``."""
    read = run_source_stage(
        run,
        name="read",
        version=READ_VERSION,
        dataset=name,
        produce=reader(name, ds, max_line_chars=conf.max_line_chars, shard_size=shard_size),
        params=read_params(name, ds, max_line_chars=conf.max_line_chars, shard_size=shard_size),
        input_fingerprint=hash_inputs(ds.files(), memo=run.root / "input-hashes"),
    )
    for warning in decode_warnings(name, ds, read):  # > 5 % invalid_utf8: the encoding charset-normalizer proposes
        run_logger().info("%s", warning)  # the run's log; the terminal gets it under the summary (`warnings`)
        if warning not in run.warnings:
            run.warnings.append(warning)
    rows = read
    if ds.split_sentences:  # a row per sentence from here on
        rows = run_stage(run, SPLIT_SENTENCES, inputs=[read], params={"language": ds.language})
    settings = None if held_out else dataset_clean(conf.clean, ds.clean)
    if settings is None:
        return run_stage(run, dataclasses.replace(KEEP_VALID, view=ds.kind), inputs=[rows], params={"cleans": False})
    dups = run_stage(run, DUPLICATES, inputs=[rows], params={}, n_shards=1)
    return run_stage(
        run,
        dataclasses.replace(CLEAN, view=ds.kind),
        inputs=[rows],
        side={"duplicates": dups},
        params=CleanParams.of(settings, ds.kind, resolved(settings, ds, name, own_filters(ds.clean))),
    )


@pipeline_flow("ingest")
def ingest_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ingest every dataset of the profile; returns the run summary (also stored in the catalog)."""
    held_out = evaluation_datasets(conf)
    with Run.started(conf, pipeline="ingest", profile=profile, config=config) as run:
        for name, ds in conf.datasets.items():
            ingest_dataset(run, name, ds, conf.ingest, conf.shard_size, held_out=name in held_out)
    return run.finish()
