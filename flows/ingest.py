"""The `ingest` pipeline: read -> validate -> reject -> shard -> (split sentences) -> duplicates -> clean -> catalog."""

from __future__ import annotations

import dataclasses
from typing import Any

from prefect import flow

from conf.schema import AugdagConf, DatasetConf, IngestConf
from flows.driver import Run, run_source_stage, run_stage
from flows.runners import default_task_runner
from storage.artifacts import ArtifactRef, hash_inputs
from tasks.clean import CLEAN, DUPLICATES, CleanParams
from tasks.ingest import READ_VERSION, read_params, reader
from tasks.sentences import SPLIT_SENTENCES


def ingest_dataset(run: Run, name: str, ds: DatasetConf, conf: IngestConf, shard_size: int) -> ArtifactRef:
    """One dataset through the pipeline; returns the cleaned artifact (view = the record kind). A mono dataset
    with ``split_sentences`` is split after the read: duplicates and clean then see one row per sentence."""
    read = run_source_stage(
        run, name="read", version=READ_VERSION, dataset=name,
        produce=reader(name, ds, max_line_chars=conf.max_line_chars, shard_size=shard_size),
        params=read_params(name, ds, max_line_chars=conf.max_line_chars, shard_size=shard_size),
        input_fingerprint=hash_inputs(ds.files(), memo=run.root / "input-hashes"),
    )
    rows = read
    if ds.split_sentences:  # a row per sentence from here on
        rows = run_stage(run, SPLIT_SENTENCES, inputs=[read], params={"language": ds.language})
    dups = run_stage(run, DUPLICATES, inputs=[rows], params={}, n_shards=1)
    return run_stage(run, dataclasses.replace(CLEAN, view=ds.kind), inputs=[rows], side={"duplicates": dups},
                     params=CleanParams.of(conf.clean, ds.kind))


@flow(name="ingest", log_prints=True, task_runner=default_task_runner())
def ingest_flow(conf: AugdagConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ingest every dataset of the profile; returns the run summary (also stored in the catalog)."""
    with Run.started(conf, pipeline="ingest", profile=profile, config=config) as run:
        for name, ds in conf.datasets.items():
            ingest_dataset(run, name, ds, conf.ingest, conf.shard_size)
    return run.finish()
