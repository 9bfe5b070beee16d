"""The downstream consumer: train a student on a SQL-defined mix of the catalog's corpora and evaluate it.

    mix (e.g. original + rejuvenated, or bitext + 2 × synthetic) → `training_mix`
      → fairseq student → translate the test set → sacrebleu BLEU + chrF (signatures kept)
      → the student in `models`, its scores in `evaluations`: runs compare with SQL
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow.compute as pc
from prefect import flow

from conf.errors import CatalogError, ConfError
from conf.schema import AugdagConf
from flows.driver import Run, run_source_stage, run_stage
from flows.ingest import ingest_dataset
from flows.nmt import nmt_model
from flows.runners import default_task_runner
from tasks.evaluation import EVALUATE, TRANSLATE_TEST
from tasks.mix import content_hash, training_mix
from tasks.nmt import decode_options, loading, runtime

MIX_VERSION = "1"


def default_mix(test: str) -> dict[str, str]:
    """Without a configured mix: every bitext row except the test set's."""
    return {"bitext": f"SELECT src, tgt FROM bitext WHERE source <> '{test.replace(chr(39), chr(39) * 2)}'"}


def select_mix(run: Run, mix: dict[str, str]) -> dict[str, Any]:
    """Run each named query over the catalog's views (read-only); an error names the query's key."""
    selected = {}
    for name, sql in mix.items():
        try:
            selected[name] = run.catalog.query(sql)
        except (duckdb.Error, CatalogError) as e:
            raise ConfError(f"train_nmt.mix.{name}: {e}. Hint: a view exists once the pipeline that makes it has "
                            "run (list `pipelines` in that order); `augdag sql` tries a query") from e
    return selected


def train_and_evaluate(run: Run, conf: AugdagConf) -> dict[str, Any]:
    tn = conf.train_nmt
    test_name = conf.dataset_of_kind(tn.test, "bitext", "train_nmt.test")
    test = ingest_dataset(run, test_name, conf.datasets[test_name], conf.ingest, conf.shard_size)
    mix_sql = tn.mix or default_mix(test_name)
    table = training_mix(select_mix(run, mix_sql), tn.copies)
    if table.num_rows == 0:
        raise ConfError(f"train_nmt.mix: the queries selected no rows ({', '.join(mix_sql)})")
    mix = run_source_stage(run, name="training_mix", version=MIX_VERSION, produce=lambda: iter([(0, table)]),
                           params={"mix": mix_sql, "copies": tn.copies}, input_fingerprint=content_hash(table),
                           dataset="train_nmt", view="training_mix")
    student = nmt_model(run, tn.student, name="student", train_on=mix)
    hyps = run_stage(run, TRANSLATE_TEST, inputs=[test], models=[student.fingerprint],
                     resources={"model_path": student.path, "runtime": runtime(tn.student)},
                     params={"model": loading(tn.student), "decode": decode_options(beam=tn.beam, lenpen=tn.lenpen)})
    scores = run_stage(run, EVALUATE, inputs=[hyps], n_shards=1, params={}).read(0).to_pylist()
    counts = {c["values"]: c["counts"] for c in pc.value_counts(table["source"]).to_pylist()}
    mix_rows = {name: counts.get(name, 0) for name in mix_sql}
    run.catalog.register_evaluation(run_id=run.run_id, model=student.fingerprint, model_name="student", testset=test_name,
                                    scores=scores, meta={"mix": mix_sql, "copies": tn.copies, "mix_rows": mix_rows})
    for s in scores:
        print(f"{s['metric']} = {s['score']:.2f} on {test_name} ({s['sentences']} sentences)  {s['signature']}")
    return {"student": student.fingerprint, "testset": test_name, "mix_rows": mix_rows, "evaluation": scores}


@flow(name="train_nmt", log_prints=True, task_runner=default_task_runner())
def train_nmt_flow(conf: AugdagConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train and evaluate a student on the configured mix; returns the run summary (also in the catalog)."""
    with Run.started(conf, pipeline="train_nmt", profile=profile, config=config) as run:
        result = train_and_evaluate(run, conf)
    return run.finish(extra={"train_nmt": result})
