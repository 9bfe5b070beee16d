"""Trained models' scores: each translation model on a sample of its data (for the pipeline's summary and
report), and a classifier on a held-out labelled set.

``validate_nmt`` runs tasks/common/validation.py's stages for one model (cached like any stage: a model that did not
change is not scored again), records the scores in `evaluations` (model_name = the model's role,
testset = ``<dataset> (validation sample)``) and returns the summary's entry; ``model_line`` is its line.
``gate`` holds a model whose translations become training data (the teacher, rejuvenation's models) to its section's
``min_bleu``: under it the run fails, or warns with ``on_weak: warn``. ``evaluate_classifier`` writes a classifier's
predictions (`test_predictions`) and its accuracy and macro-F1
(`evaluations`, with the arm and seed when a run compares several).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from conf.errors import ConfError

if TYPE_CHECKING:  # the CLI imports model_line (flows/pipelines/__init__.py) before Prefect may be imported
    from conf.schema import NMTConf
    from conf.sections.classifier import ClassifierConf
    from conf.sections.nmt import GatedNMTConf
    from flows.engine.driver import ModelRef, Run
    from storage.artifacts import ArtifactRef

SAMPLE_SIZE = 200  # pairs: enough for a corpus BLEU that tells 2 from 20, seconds to translate on a CPU


def validate_nmt(
    run: Run,
    model: ModelRef,
    conf: NMTConf,
    data: ArtifactRef,
    *,
    role: str,
    beam: int,
    lenpen: float,
    label: str | None = None,
    size: int = SAMPLE_SIZE,
) -> dict[str, Any]:
    """``model``'s BLEU and chrF on ``size`` pairs of ``data`` (src → tgt, shown as ``label``, default its
    dataset), translated as the pipeline translates (``beam``, ``lenpen``); ``role`` names it (teacher, ...)."""
    from flows.engine.driver import run_stage
    from tasks.common.evaluation import EVALUATE
    from tasks.common.nmt import decode_options, loading, runtime
    from tasks.common.validation import TRANSLATE_VALIDATION, VALIDATION_SAMPLE

    sample = run_stage(run, VALIDATION_SAMPLE, inputs=[data], n_shards=1, params={"size": size})
    hyps = run_stage(
        run,
        TRANSLATE_VALIDATION,
        inputs=[sample],
        models=[model.fingerprint],
        resources={"model_path": model.location, "runtime": runtime(conf)},
        params={"model": loading(conf), "decode": decode_options(beam=beam, lenpen=lenpen, bound=conf)},
    )
    evaluated = run_stage(run, EVALUATE, inputs=[hyps], n_shards=1, params={})
    scores = {s["metric"]: s for s in evaluated.read(0).to_pylist()}
    trained = conf.model is None  # trained here, on these pairs among others
    dataset = label or data.dataset or data.stage
    run.catalog.register_evaluation(
        run_id=run.run_id,
        model=model.fingerprint,
        model_name=role,
        testset=f"{dataset} (validation sample)",
        scores=list(scores.values()),
        meta={"sample": size, "trained_on_it": trained},
    )
    return {
        "model": role,
        "fingerprint": model.fingerprint,
        "dataset": dataset,
        "sentences": scores["BLEU"]["sentences"],
        "trained_on_it": trained,
        "BLEU": scores["BLEU"]["score"],
        "chrF": scores["chrF"]["score"],
        "signature": scores["BLEU"]["signature"],
    }


def model_line(v: dict[str, Any]) -> str:
    """``teacher: BLEU = 3.12, chrF = 21.40 on 200 pairs of `train` (its training data: an upper bound)``."""
    return f"{v['model']}: BLEU = {v['BLEU']:.2f}, chrF = {v['chrF']:.2f} on {v['sentences']:,} pairs of `{v['dataset']}`" + (
        " (its training data: an upper bound)" if v["trained_on_it"] else ""
    )


def gate(run: Run, score: dict[str, Any], conf: GatedNMTConf, *, key: str) -> str | None:
    """Fail the run (ConfError, exit 2) when ``score`` (``validate_nmt``'s) has a BLEU under ``conf.min_bleu``, in one
    line naming the setting ``key``.min_bleu, the score and what it was measured on; with ``on_weak: warn`` the line
    is a warning of the run (terminal and summary) instead, and is returned. None for a model that passes."""
    if score["BLEU"] >= conf.min_bleu:
        return None
    role = score["model"]
    line = (
        f"{key}.min_bleu: the {role} scores BLEU {score['BLEU']:.2f} on {score['sentences']:,} pairs of "
        f"`{score['dataset']}`"
        + (" (its training data: an upper bound of what it does on new text)" if score["trained_on_it"] else "")
        + f", under the minimum {conf.min_bleu:g}"
    )
    if conf.on_weak == "fail":
        raise ConfError(
            f"{line}: its translations would be degenerate training data. Hint: train it longer or larger "
            f"({key}.train.max_update) or configure a stronger model ({key}.model), or set {key}.on_weak: warn to go on"
        )
    from flows.engine.replay import run_logger

    warning = f"{line}; on_weak: warn, so its translations are used"
    run_logger().warning("%s", warning)
    if warning not in run.warnings:
        run.warnings.append(warning)
    return warning


def evaluate_classifier(
    run: Run,
    model: ModelRef,
    test: ArtifactRef,
    *,
    labels: Sequence[str],
    conf: ClassifierConf,
    meta: Mapping[str, Any],
    arm: str | None = None,
    seed: int | None = None,
    model_name: str = "classifier",
) -> list[dict[str, Any]]:
    """Score ``model`` on ``test`` and register the scores; returns them (metric, score, signature, sentences)."""
    from flows.engine.driver import run_stage
    from tasks.train_classifier.classify import PREDICT, SCORE_PREDICTIONS

    preds = run_stage(
        run,
        PREDICT,
        inputs=[test],
        models=[model.fingerprint],
        params={},
        resources={"model_path": model.location, "device": conf.device, "threads": conf.threads},
    )
    scores = run_stage(run, SCORE_PREDICTIONS, inputs=[preds], n_shards=1, params={"labels": list(labels)}).read(0).to_pylist()
    run.catalog.register_evaluation(
        run_id=run.run_id,
        model=model.fingerprint,
        model_name=model_name,
        testset=test.dataset or "",
        scores=scores,
        meta=dict(meta),
        arm=arm,
        seed=seed,
    )
    return scores
