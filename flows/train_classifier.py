"""The downstream consumer of the paraphrase curriculum (PCC Alg. 1): train a classifier level by level.

    `curriculum` rows of the dataset (SQL over the catalog) → schedule (cyclic, gradual, …) → classifier
      → predictions on the held-out test set (`test_predictions`) → accuracy + macro-F1 → `evaluations`
    report: the training loss per step, each level's steps shaded (Fig. 2 of the paper).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import flow

from conf.errors import ConfError
from conf.schema import AugdagConf
from flows.driver import Run, run_model_stage, run_stage
from flows.ingest import ingest_dataset
from flows.reporting import publish
from flows.runners import default_task_runner
from tasks.classify import LOSSES, PREDICT, SCORE_PREDICTIONS, classifier_builder
from tasks.mix import content_hash

CLASSIFIER_VERSION = "1"


def read_curriculum(run: Run, dataset: str) -> pa.Table:
    table = run.catalog.query("SELECT uid, parent_uid, text, label, level, copy FROM curriculum WHERE source = $d "
                              "ORDER BY parent_uid, level, rank, copy", {"d": dataset})
    if table.num_rows == 0:
        raise ConfError(f"train_classifier.dataset: no `curriculum` rows for {dataset!r}. Hint: run the paraphrase "
                        "pipeline on it first (list `paraphrase` before `train_classifier` in `pipelines`)")
    return table


def check_levels(curriculum: pa.Table, schedule: str, levels: int, dataset: str) -> None:
    """A schedule other than `original` needs paraphrases: with none it would silently train on originals only."""
    present = set(curriculum["level"].to_pylist())
    missing = [lv for lv in range(1, levels + 1) if lv not in present]
    if schedule == "original" or not missing:
        return
    if len(missing) == levels:
        raise ConfError(f"train_classifier.schedule: {schedule!r} needs paraphrases, but the curriculum of {dataset!r} "
                        f"has none (every candidate was filtered out or none was generated: see the paraphrase run's "
                        "shortfall). Hint: lower paraphrase.beta, or use schedule: original")
    print(f"warning: the curriculum of {dataset!r} has no paraphrases at level(s) {missing}; those steps train on "
          "originals only")


def train_and_evaluate(run: Run, conf: AugdagConf) -> dict[str, Any]:
    tc = conf.train_classifier
    train_name, test_name = conf.classifier_datasets()
    curriculum = read_curriculum(run, train_name)
    check_levels(curriculum, tc.schedule, conf.paraphrase.levels, train_name)
    test = ingest_dataset(run, test_name, conf.datasets[test_name], conf.ingest, conf.shard_size)
    labels = sorted({str(x) for x in curriculum["label"].to_pylist()})
    c = tc.classifier
    options = {"labels": labels, "schedule": tc.schedule, "levels": conf.paraphrase.levels, "cycles": tc.cycles,
               "steps_per_level": tc.steps_per_level, "batch_size": tc.batch_size,
               "original_share": tc.original_share, "seed": tc.seed,
               "classifier": {"kind": c.kind, "model": c.model, "lr": c.lr}}
    model = run_model_stage(run, name="classifier", version=CLASSIFIER_VERSION, kind=f"classifier:{c.kind}",
                            filename="model", inputs=[], build=classifier_builder(curriculum, **{
                                **options, "classifier": {**options["classifier"], "device": c.device,
                                                          "threads": c.threads}}),
                            params={**options, "curriculum": content_hash(curriculum, ("uid", "level", "copy"))})
    preds = run_stage(run, PREDICT, inputs=[test], models=[model.fingerprint], params={},
                      resources={"model_path": str(model.path), "device": c.device, "threads": c.threads})
    scores = run_stage(run, SCORE_PREDICTIONS, inputs=[preds], n_shards=1, params={"labels": labels}).read(0).to_pylist()
    run.catalog.register_evaluation(run_id=run.run_id, model=model.fingerprint, model_name="classifier",
                                    testset=test_name, scores=scores,
                                    meta={"dataset": train_name, "schedule": tc.schedule, "kind": c.kind})
    for s in scores:
        print(f"{s['metric']} = {s['score']:.4f} on {test_name} ({s['sentences']} sentences, schedule {tc.schedule})")
    losses = pq.read_table(Path(model.path) / LOSSES)
    return {"classifier": model.fingerprint, "testset": test_name, "schedule": tc.schedule, "labels": labels,
            "curriculum_rows": curriculum.num_rows, "evaluation": scores,
            "loss_per_level": loss_per_level(losses), "_losses": losses}


def loss_per_level(losses: pa.Table) -> list[dict[str, Any]]:
    """Mean loss of each run of consecutive steps at one level (a curriculum segment), in order."""
    out: list[dict[str, Any]] = []
    for step, level, loss in zip(*(losses[c].to_pylist() for c in ("step", "level", "loss"))):
        if not out or out[-1]["level"] != level:
            out.append({"level": level, "first_step": step, "steps": 0, "loss_sum": 0.0})
        out[-1]["steps"] += 1
        out[-1]["loss_sum"] += loss
    return [{"level": s["level"], "first_step": s["first_step"], "steps": s["steps"],
             "mean_loss": s["loss_sum"] / s["steps"]} for s in out]


def publish_report(run: Run, result: dict[str, Any]) -> dict[str, str]:
    import numpy as np

    from tasks.report import line_figure, markdown_table
    from tasks.schedule import MIXED

    losses = result["_losses"]
    loss = losses["loss"].to_numpy()
    window = max(1, min(10, len(loss) // 20))
    smooth = np.convolve(loss, np.ones(window) / window, mode="same")
    name = lambda lv: "mixed" if lv == MIXED else str(lv)
    spans = [(s["first_step"], s["first_step"] + s["steps"], name(s["level"])) for s in result["loss_per_level"]]
    png = line_figure({"loss": (losses["step"].to_pylist(), loss.tolist()),
                       f"mean of {window}": (losses["step"].to_pylist(), smooth.tolist())},
                      xlabel="training step", ylabel="cross-entropy", spans=spans,
                      title=f"training loss, schedule {result['schedule']} (levels shaded; cf. Fig. 2)")
    evaluation = pa.Table.from_pylist(result["evaluation"])
    segments = pa.Table.from_pylist(result["loss_per_level"])
    md = (f"### Classifier on the paraphrase curriculum\n\nSchedule `{result['schedule']}`, "
          f"{result['curriculum_rows']} curriculum rows.\n\n{markdown_table(evaluation)}\n")
    return publish(run, stem="train_classifier", title=f"curriculum classifier — {run.run_id}", markdown=md,
                   table=evaluation, pngs={"loss_per_level": png}, sections=[
        ("Training loss per step and level", png), ("Evaluation", evaluation), ("Mean loss per level segment", segments)])


@flow(name="train_classifier", log_prints=True, task_runner=default_task_runner())
def train_classifier_flow(conf: AugdagConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train and evaluate a classifier on the curriculum; returns the run summary (also in the catalog)."""
    with Run.started(conf, pipeline="train_classifier", profile=profile, config=config) as run:
        result = train_and_evaluate(run, conf)
        reports = publish_report(run, result)
    result.pop("_losses")
    return run.finish(extra={"train_classifier": result, "reports": reports})
