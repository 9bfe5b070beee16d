"""The downstream consumer of the augmented data: one classifier per augmentation (an arm) and seed.

augmentation curriculum: `curriculum` rows of the dataset → schedule (cyclic, gradual, …; PCC Alg. 1)
             none | eda | epida: the originals (+ m EDA candidates per row, or EPiDA's selection, from the
             `augmented` view) under Eq. 14
  → predictions on the held-out test set (`test_predictions`) → accuracy + macro-F1 → `evaluations`
    (arm = the augmentation, seed), mean ± sd per arm (`evaluation_summary`)
report: mean ± sd per augmentation, macro-F1 bars, the curriculum's loss per step with its levels shaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from conf.errors import ConfError
from conf.schema import AugdagConf
from flows.engine.driver import ModelRef, Run, run_model_stage
from flows.engine.registry import Effect, Headline
from flows.engine.replay import run_logger
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.heldout import check_heldout_overlap
from flows.pipelines.ingest import ingest_dataset
from flows.pipelines.model_scores import evaluate_classifier
from flows.reports.reporting import publish
from storage.catalog import Catalog
from tasks.common.evaluation import mean_sd
from tasks.common.mix import content_hash
from tasks.common.schedules import Curriculum, SelectedSamples
from tasks.epida.train import trainer
from tasks.train_classifier.classify import LOSSES, classifier_builder

CLASSIFIER_VERSION = "1"


def read_curriculum(run: Run, dataset: str) -> pa.Table:
    """The ``curriculum`` rows of ``dataset`` from the catalog, by original, level and rank; a ``ConfError``
    when there are none (the paraphrase pipeline has not run on it)."""
    table = run.catalog.query(
        "SELECT uid, parent_uid, text, label, level, rank, copy FROM curriculum WHERE source = $d "
        "ORDER BY parent_uid, level, rank, copy",
        {"d": dataset},
    )
    if table.num_rows == 0:
        raise ConfError(
            f"train_classifier.dataset: no `curriculum` rows for {dataset!r}. Hint: run the paraphrase "
            "pipeline on it first (list `paraphrase` before `train_classifier` in `pipelines`)"
        )
    return table


def check_levels(curriculum: pa.Table, schedule: str, levels: int, dataset: str) -> None:
    """A schedule other than `original` needs paraphrases: with none it would silently train on originals only."""
    present = set(curriculum["level"].to_pylist())
    missing = [lv for lv in range(1, levels + 1) if lv not in present]
    if schedule == "original" or not missing:
        return
    if len(missing) == levels:
        raise ConfError(
            f"train_classifier.schedule: {schedule!r} needs paraphrases, but the curriculum of {dataset!r} "
            f"has none (every candidate was filtered out or none was generated: see the paraphrase run's "
            "shortfall). Hint: lower paraphrase.beta, or use schedule: original"
        )
    run_logger().warning(f"the curriculum of {dataset!r} has no paraphrases at level(s) {missing}; those steps use originals")


def augmented_rows(catalog: Catalog, augmentation: str, dataset: str, *, m: int, seed: int) -> pa.Table | None:
    """The rows an arm adds to the originals (Eq. 14), from the `augmented` view of the epida pipeline:
    ``epida``, the candidates SEAS selected in round 0 (the one-time augmentation: m per row and algorithm);
    ``eda``, m of each row's EDA candidates of round 0 drawn at random (seeded), the same amount without the
    classifier's feedback; ``none``, nothing."""
    if augmentation == "none":
        return None
    if augmentation == "epida":  # the round's selection, as augdag.samplers hands it to a user's trainer
        rows = catalog.query(
            "SELECT uid, parent_uid, text, label, round, selected FROM augmented WHERE source = $d AND round = 0",
            {"d": dataset},
        )
        table = SelectedSamples(rows).round(0).select(["uid", "text", "label"])
    else:
        table = catalog.query(
            "SELECT uid, text, label FROM augmented WHERE source = $d AND round = 0 AND algorithm = 'eda' "
            "QUALIFY row_number() OVER (PARTITION BY parent_uid ORDER BY md5(uid || $seed), uid) <= $m "
            "ORDER BY parent_uid, uid",
            {"d": dataset, "seed": str(seed), "m": m},
        )
    if table.num_rows == 0:
        raise ConfError(
            f"train_classifier.augmentation: {augmentation!r} needs the `augmented` rows of {dataset!r}, "
            "and there are none. Hint: run the epida pipeline on it first (list `epida` before "
            "`train_classifier` in `pipelines`, with epida.dataset: " + dataset + ")"
        )
    return table


def train_arm(
    run: Run, conf: AugdagConf, augmentation: str, seed: int, labels: list[str], originals: pa.Table, dataset: str
) -> ModelRef:
    """The classifier of one arm and seed: the curriculum (PCC Alg. 1), or Eq. 14 on the originals and the
    arm's augmented rows."""
    train_classifier, c = conf.train_classifier, conf.train_classifier.classifier
    clf = {"kind": c.kind, "model": c.model, "lr": c.lr}
    runtime = {"device": c.device, "threads": c.threads}
    if augmentation == "curriculum":
        curriculum = read_curriculum(run, dataset)
        check_levels(curriculum, train_classifier.schedule, conf.paraphrase.levels, dataset)
        check_heldout_overlap(run, conf, "train_classifier.augmentation.curriculum", curriculum, ("text",))
        options = {
            "labels": labels,
            "schedule": train_classifier.schedule,
            "levels": conf.paraphrase.levels,
            "cycles": train_classifier.cycles,
            "steps_per_level": train_classifier.steps_per_level,
            "batch_size": train_classifier.batch_size,
            "original_share": train_classifier.original_share,
            "seed": seed,
            "classifier": clf,
        }
        sampler = Curriculum(curriculum, **{k: v for k, v in options.items() if k not in ("labels", "classifier")})
        build = classifier_builder(sampler, labels=labels, classifier={**clf, **runtime})
        data = {"curriculum": content_hash(curriculum, ("uid", "level", "copy"))}
    else:
        added = augmented_rows(run.catalog, augmentation, dataset, m=conf.epida.m, seed=seed)
        if added is not None:
            check_heldout_overlap(run, conf, f"train_classifier.augmentation.{augmentation}", added, ("text",))
        options = {
            "labels": labels,
            "epochs": train_classifier.epochs,
            "batch_size": train_classifier.batch_size,
            "seed": seed,
            "classifier": clf,
        }
        build = trainer(originals, added, **{**options, "classifier": {**clf, **runtime}})
        data = {
            "augmentation": augmentation,
            "originals": content_hash(originals, ("uid",)),
            "added": content_hash(added, ("uid",)) if added is not None else None,
        }
    return run_model_stage(
        run,
        name="classifier",
        version=CLASSIFIER_VERSION,
        kind=f"classifier:{c.kind}",
        filename="model",
        inputs=[],
        build=build,
        params={**options, **data},
    )


def train_and_evaluate(run: Run, conf: AugdagConf) -> dict[str, Any]:
    """Ingest the training and test sets, train a classifier per augmentation and seed and score it on the test
    set; returns the run's ``train_classifier`` summary (scores per seed, mean ± sd, the curriculum's loss per level)."""
    train_classifier = conf.train_classifier
    train_name, test_name = conf.classifier_datasets()
    rows = ingest_dataset(run, conf, train_name)
    originals = rows.parts().table(["uid", "text", "label"])
    check_heldout_overlap(run, conf, "train_classifier.dataset", originals, ("text",))
    test = ingest_dataset(run, conf, test_name, held_out=True)
    labels = sorted({str(x) for x in originals["label"].to_pylist()})
    evaluations, losses = [], None
    for augmentation in train_classifier.augmentation:
        for seed in train_classifier.seed_list():
            model = train_arm(run, conf, augmentation, seed, labels, originals, train_name)
            scores = evaluate_classifier(
                run,
                model,
                test,
                labels=labels,
                conf=train_classifier.classifier,
                arm=augmentation,
                seed=seed,
                meta={
                    "dataset": train_name,
                    "schedule": train_classifier.schedule,
                    "kind": train_classifier.classifier.kind,
                    "augmentation": augmentation,
                },
            )
            for s in scores:
                run_logger().info(
                    f"{s['metric']} = {s['score']:.4f} on {test_name} ({s['sentences']} sentences, {augmentation}, seed {seed})"
                )
            evaluations += [{"augmentation": augmentation, "seed": seed, **s} for s in scores]
            if losses is None and augmentation == "curriculum":
                losses = pq.read_table(Path(model.path) / LOSSES)
    return {
        "testset": test_name,
        "schedule": train_classifier.schedule,
        "labels": labels,
        "augmentation": list(train_classifier.augmentation),
        "seeds": train_classifier.seed_list(),
        "evaluation": evaluations,
        "summary": mean_sd(evaluations, by="augmentation"),
        "loss_per_level": loss_per_level(losses) if losses is not None else [],
        "_losses": losses,
    }


def loss_per_level(losses: pa.Table) -> list[dict[str, Any]]:
    """Mean loss of each run of consecutive steps at one level (a curriculum segment), in order."""
    out: list[dict[str, Any]] = []
    for step, level, loss in zip(*(losses[c].to_pylist() for c in ("step", "level", "loss"))):
        if not out or out[-1]["level"] != level:
            out.append({"level": level, "first_step": step, "steps": 0, "loss_sum": 0.0})
        out[-1]["steps"] += 1
        out[-1]["loss_sum"] += loss
    return [
        {"level": s["level"], "first_step": s["first_step"], "steps": s["steps"], "mean_loss": s["loss_sum"] / s["steps"]}
        for s in out
    ]


def publish_report(run: Run, result: dict[str, Any]) -> dict[str, str]:
    """The run page (mean ± sd and macro-F1 per augmentation, scores per seed, the curriculum's loss per
    step and level) and its artifacts; returns the paths written."""
    import numpy as np

    from flows.reports.plots import bar_figure, line_figure, markdown_table
    from tasks.common.schedules import MIXED

    evaluation = pa.Table.from_pylist(result["evaluation"])
    summary = pa.Table.from_pylist(result["summary"])
    f1 = [s for s in result["summary"] if s["metric"] == "macro_f1"]
    bars = bar_figure(
        [s["augmentation"] for s in f1],
        [s["mean"] for s in f1],
        xlabel="augmentation",
        ylabel=f"macro-F1, mean of {len(result['seeds'])} seed(s)",
        title=f"macro-F1 on {result['testset']} per augmentation",
    )
    sections: list[tuple[str, Any]] = [
        ("Mean ± sd per augmentation", summary),
        ("macro-F1 per augmentation", bars),
        ("Evaluation per seed", evaluation),
    ]
    pngs = {"per_augmentation": bars}
    losses = result["_losses"]
    if losses is not None:
        loss = losses["loss"].to_numpy()
        window = max(1, min(10, len(loss) // 20))
        smooth = np.convolve(loss, np.ones(window) / window, mode="same")
        spans = [
            (s["first_step"], s["first_step"] + s["steps"], "mixed" if s["level"] == MIXED else str(s["level"]))
            for s in result["loss_per_level"]
        ]
        pngs["loss_per_level"] = line_figure(
            {
                "loss": (losses["step"].to_pylist(), loss.tolist()),
                f"mean of {window}": (losses["step"].to_pylist(), smooth.tolist()),
            },
            xlabel="training step",
            ylabel="cross-entropy",
            spans=spans,
            title=f"training loss, schedule {result['schedule']} (levels shaded; cf. Fig. 2)",
        )
        sections += [
            ("Curriculum: training loss per step and level", pngs["loss_per_level"]),
            ("Curriculum: mean loss per level segment", pa.Table.from_pylist(result["loss_per_level"])),
        ]
    md = (
        f"### Classifier per augmentation\n\nAugmentations {', '.join(result['augmentation'])}; seeds "
        f"{result['seeds']}; curriculum schedule `{result['schedule']}`.\n\n{markdown_table(summary)}\n"
    )
    return publish(
        run,
        stem="train_classifier",
        title=f"classifier per augmentation — {run.run_id}",
        markdown=md,
        table=summary,
        pngs=pngs,
        sections=sections,
    )


@pipeline_flow("train_classifier")
def train_classifier_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train and evaluate a classifier per augmentation and seed; returns the run summary (also in the catalog)."""
    with Run.started(conf, pipeline="train_classifier", profile=profile, config=config) as run:
        result = train_and_evaluate(run, conf)
        reports = publish_report(run, result)
    result.pop("_losses")
    return run.finish(extra={"train_classifier": result, "reports": reports})


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``train_classifier`` run (wording: flows.reports.verdicts): per augmentation and metric the
    mean ± sd over the seeds (``n/a (1 seed)`` for one); with the augmentation ``none`` among them, each other one's
    Δ against it, tested across seeds from 3 seeds on (a paired t-test over the per-seed scores, seed against seed),
    untested below; an accuracy at chance (1/number of labels, plus two binomial sd on the test rows: the uniform
    guess, the summary holding no test label counts) says so, and a comparison with a baseline at chance says it is
    not informative."""
    t = s["train_classifier"]
    score = {(e["augmentation"], e["metric"], e["seed"]): e["score"] for e in t["evaluation"]}
    rows = {e["metric"]: e["sentences"] for e in t["evaluation"]}
    means = {(e["augmentation"], e["metric"]): e["mean"] for e in t["summary"]}
    return [classifier_line(t, e, score, rows, means) for e in t["summary"]]


def classifier_line(
    t: Mapping[str, Any],
    e: Mapping[str, Any],
    score: Mapping[tuple[str, str, int], float],
    rows: Mapping[str, int],
    means: Mapping[tuple[str, str], float],
) -> str:
    """One ``summary_lines`` line: ``e`` is a ``mean_sd`` row, ``score`` the per-seed scores, ``rows`` the test rows
    per metric, ``means`` every augmentation's mean per metric."""
    from flows.reports.verdicts import at_chance, seeds_phrase, spread, versus

    aug, metric, labels = e["augmentation"], e["metric"], len(t["labels"])
    scope = ", ".join(x for x in (aug, f"schedule {t['schedule']}" if aug == "curriculum" else "", seeds_phrase(e["seeds"])) if x)
    line = f"{metric} = {spread(e['mean'], e['sd'], e['seeds'], digits=4)} on {t['testset']} ({scope})"
    if metric == "accuracy" and (chance := at_chance(e["mean"], labels, rows[metric])):
        line += f"; {chance}"
    if aug != "none" and "none" in t["augmentation"]:
        mine, base = ([score[(a, metric, seed)] for seed in t["seeds"]] for a in (aug, "none"))
        line += f"; {versus(mine, base, against='none')}"
        if at_chance(means[("none", "accuracy")], labels, rows["accuracy"]):
            line += "; not informative: the baseline's accuracy is at chance"
    return line


def headline(s: Mapping[str, Any]) -> Headline:
    """A ``train_classifier`` run in one line: the classifiers trained, and the accuracy of the baseline ``none`` (or,
    without it, of the first augmentation)."""
    from flows.reports.effect_table import counted

    t = s["train_classifier"]
    arm = "none" if "none" in t["augmentation"] else t["augmentation"][0]
    accuracy = next(e["mean"] for e in t["summary"] if (e["augmentation"], e["metric"]) == (arm, "accuracy"))
    return Headline(counted(len(t["augmentation"]) * len(t["seeds"]), "classifier"), f"accuracy {accuracy:.4f} ({arm})")


# the view whose rows each augmentation adds to the originals (train_and_evaluate: read_curriculum, augmented_rows)
AUGMENTATION_VIEWS = {"curriculum": frozenset({"curriculum"}), "eda": frozenset({"augmented"}), "epida": frozenset({"augmented"})}


def effects(s: Mapping[str, Any]) -> list[Effect]:
    """Each augmentation against ``none`` (the originals alone): Δ accuracy over the seeds, tested across seeds from 3
    on; without ``none`` among the augmentations, each one's accuracy with no comparison, which the row says."""
    from flows.reports.effect_table import seeds_caveat
    from flows.reports.verdicts import MIN_SEEDS, at_chance, seeds_p_text, seeds_test

    t, out = s["train_classifier"], []
    score = {(e["augmentation"], e["seed"]): e["score"] for e in t["evaluation"] if e["metric"] == "accuracy"}
    sentences = next((e["sentences"] for e in t["evaluation"] if e["metric"] == "accuracy"), 0)
    n = len(t["seeds"])
    for aug in (a for a in t["augmentation"] if a != "none"):
        mine = [score[(aug, seed)] for seed in t["seeds"]]
        if "none" not in t["augmentation"]:
            effect = f"accuracy {sum(mine) / n:.4f}; no arm `none` to compare with"
            out.append(Effect(f"train_classifier {aug}", AUGMENTATION_VIEWS.get(aug, frozenset()), effect, seeds_caveat(n), n))
            continue
        base = [score[("none", seed)] for seed in t["seeds"]]
        effect = f"{(sum(mine) - sum(base)) / n:+.4f} accuracy"
        effect += f" (p = {seeds_p_text(seeds_test(mine, base))})" if n >= MIN_SEEDS else " (untested)"
        chance = at_chance(sum(base) / n, len(t["labels"]), sentences) if sentences else None
        caveat = "; ".join(x for x in (seeds_caveat(n), "not informative: the baseline is " + chance if chance else "") if x)
        out.append(Effect(f"train_classifier {aug} vs none", AUGMENTATION_VIEWS.get(aug, frozenset()), effect, caveat, n))
    return out
