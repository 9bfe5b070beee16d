"""The EPiDA pipeline (Alg. 1 with Table 5's PT and OA), one line per step of the method:

ingest the labelled dataset
  → PT: a classifier trained on the originals (Eq. 12; `pretrain_epochs`, 0 = none)
  → per round r (one-time: r = 0 only; online: one per `every_epochs` epochs):
      K·m candidates per row from each DA algorithm T (eda, cwe, back_translation), seeded by round
      → seas: the current classifier's p(t), p(x) → REM (Eq. 7), CEM (Eq. 10) → Eq. 11 → m kept
      → the classifier goes on training on originals + the round's selection (Eq. 14)
  → `augmented`: every candidate of every round, `selected` marked; lineage to the originals
  → the final classifier on the held-out set (`epida.test`), accuracy and macro-F1 in `evaluations`
report: s_div/s_qua per method with the selected marked, Distinct-n of selected vs all, the scores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError
from conf.schema import AugdagConf
from flows.engine.driver import ModelRef, Run, run_model_stage, run_stage
from flows.engine.registry import Headline
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.heldout import check_heldout_overlap
from flows.pipelines.ingest import ingest_dataset
from flows.pipelines.model_scores import evaluate_classifier
from storage.artifacts import ArtifactRef
from storage.objects import models as model_store
from tasks.common.mix import content_hash
from tasks.epida.feedback import AUGMENTED_VIEW, BACK_TRANSLATION, EDA, SEAS, augmented_counts
from tasks.epida.train import trainer

CLASSIFIER_VERSION = "1"


def round_seed(seed: int, r: int) -> int:
    """The sampler seed of round ``r`` (a generator's draws differ between rounds, not between runs)."""
    return int(np.random.SeedSequence([seed, r]).generate_state(1)[0] % 2**31)


def candidate_sources(run: Run, conf: AugdagConf, rows: ArtifactRef, r: int) -> list[ArtifactRef]:
    """Round ``r``'s K·m candidates per row from each configured DA algorithm, one artifact per algorithm."""
    epida, n_aug = conf.epida, conf.epida.amplification * conf.epida.m
    out = []
    for source in epida.sources:
        if source == "eda":
            from models.wordnet import database_fingerprint, wordnet_root

            root = wordnet_root()
            database = database_fingerprint(root)
            # with an object store, the database goes there: the workers share no disk with this machine
            where = model_store.shipped(root, run.store, "wordnet", database) if run.store else str(root)
            out.append(
                run_stage(
                    run,
                    EDA,
                    inputs=[rows],
                    resources={"wordnet_root": where},
                    params={"n_aug": n_aug, "alpha": epida.eda.alpha, "seed": epida.seed, "round": r, "wordnet": database},
                )
            )
        elif source == "cwe":
            from flows.pipelines.nmt import configured_model
            from tasks.epida.feedback import cwe_stage

            ref = configured_model(run, epida.cwe.model, name="cwe", kind="masked_lm")
            c = epida.cwe
            out.append(
                run_stage(
                    run,
                    cwe_stage(),
                    inputs=[rows],
                    models=[ref.fingerprint],
                    params={
                        "n_aug": n_aug,
                        "alpha": c.alpha,
                        "seed": epida.seed,
                        "round": r,
                        "temperature": c.temperature,
                        "top_k": c.top_k,
                    },
                    resources={"model_path": ref.location, "device": c.device, "threads": c.threads, "batch_size": c.batch_size},
                )
            )
        else:
            out.append(back_translation(run, conf, rows, r, n_aug))
    return out


def back_translation(run: Run, conf: AugdagConf, rows: ArtifactRef, r: int, n_aug: int) -> ArtifactRef:
    """The product's paraphraser (paraphrase.generator: round trip, or a Hugging Face model) drawing n_aug
    top-k/top-p samples per row with round ``r``'s seed."""
    from flows.pipelines.paraphrase import paraphraser
    from tasks.paraphrase.candidates import GENERATE_CANDIDATES, sampling_plan

    paraphrase = conf.paraphrase
    gen = paraphraser(run, conf)
    plan = sampling_plan(
        candidates=n_aug,
        bottom_k_candidates=0,
        oversample=1.0,
        top_k=paraphrase.top_k,
        top_p=paraphrase.top_p,
        bottom_k=paraphrase.bottom_k,
        bottom_k_steps=paraphrase.bottom_k_steps,
        temperature=paraphrase.temperature,
        seed=round_seed(conf.epida.seed, r),
    )
    drawn = run_stage(
        run,
        GENERATE_CANDIDATES,
        inputs=[rows],
        models=list(gen.models.values()),
        resources={**gen.resources, "max_tokens": paraphrase.generator.max_tokens},
        params={
            "generator": gen.params,
            "generator_fingerprint": gen.fingerprint,
            "plan": [{"sampler": dataclasses.asdict(s), "n": n} for s, n in plan if n],
        },
    )
    return run_stage(run, BACK_TRANSLATION, inputs=[drawn], params={"n_aug": n_aug})


def classifier_options(conf: AugdagConf, labels: list[str]) -> dict[str, Any]:
    """The feedback classifier's training options over ``labels`` (batch size, seed, kind, model, learning rate)."""
    epida, c = conf.epida, conf.epida.classifier
    return {
        "labels": labels,
        "batch_size": epida.batch_size,
        "seed": epida.seed,
        "classifier": {"kind": c.kind, "model": c.model, "lr": c.lr},
    }


def train_round(
    run: Run,
    conf: AugdagConf,
    originals: pa.Table,
    selected: pa.Table | None,
    *,
    r: int,
    epochs: int,
    init: ModelRef | None,
    inputs: list[ArtifactRef],
) -> ModelRef:
    """The classifier after round ``r`` (r = -1: the pre-training on the originals alone), trained on
    ``inputs`` (the cleaned rows, and the round's scored candidates: its lineage)."""
    c = conf.epida.classifier
    options = {**classifier_options(conf, sorted(set(originals["label"].to_pylist()))), "epochs": epochs}
    runtime = {"device": c.device, "threads": c.threads}
    params = {
        **options,
        "round": r,
        "init": init.fingerprint if init else None,
        "originals": content_hash(originals, ("uid",)),
        "selected": content_hash(selected, ("uid",)) if selected is not None else None,
    }
    build = trainer(
        originals,
        selected,
        **{**options, "classifier": {**options["classifier"], **runtime}},
        init=str(init.path) if init else None,
        round=max(r, 0),
    )
    return run_model_stage(
        run,
        name="epida_pretrain" if r < 0 else f"epida_round_{r}",
        key="epida_classifier",
        version=CLASSIFIER_VERSION,
        kind=f"classifier:{c.kind}",
        filename="model",
        inputs=inputs,
        build=build,
        params=params,
    )


def selected_of(scored: ArtifactRef) -> pa.Table:
    """The candidates that SEAS selected in ``scored``: their ``uid``, ``text`` and ``label``."""
    table = scored.parts().table(["uid", "text", "label", "selected"])
    return table.filter(pc.equal(table["selected"], True)).select(["uid", "text", "label"])


@dataclasses.dataclass(frozen=True)
class Augmented:
    dataset: str
    rows: ArtifactRef
    augmented: ArtifactRef
    models: list[ModelRef]
    evaluation: list[dict[str, Any]]
    testset: str | None


def augment(run: Run, conf: AugdagConf) -> Augmented:
    """Ingest the dataset, pre-train the classifier, then per round generate candidates, select them with SEAS and
    train on; returns the ``augmented`` view, the classifiers and, with ``epida.test``, the held-out scores."""
    epida = conf.epida
    name, test_name = conf.epida_datasets()
    rows = ingest_dataset(run, conf, name)
    originals = rows.parts().table(["uid", "text", "label"])
    check_heldout_overlap(run, conf, "epida.dataset", originals, ("text",))  # the feedback classifier learns from them
    if originals.num_rows == 0:
        raise InputError(f"epida.dataset: {name!r} has no rows after cleaning; nothing to augment")
    model = train_round(run, conf, originals, None, r=-1, epochs=epida.pretrain_epochs, init=None, inputs=[rows])
    models, rounds = [model], []
    c = epida.classifier
    for r in range(epida.rounds()):
        cands = candidate_sources(run, conf, rows, r)
        scored = run_stage(
            run,
            SEAS,
            inputs=[rows, *cands],
            models=[model.fingerprint],
            params={
                "m": epida.m,
                "alpha": epida.alpha,
                "mode": epida.mode,
                "normalise": epida.normalise,
                "round": r,
                "classifier": model.fingerprint,
            },
            resources={"model_path": model.location, "device": c.device, "threads": c.threads},
        )
        rounds.append(scored)
        model = train_round(
            run, conf, originals, selected_of(scored), r=r, epochs=epida.round_epochs(r), init=model, inputs=[rows, scored]
        )
        models.append(model)
    augmented = run_stage(run, AUGMENTED_VIEW, inputs=rounds, params={})
    evaluation: list[dict[str, Any]] = []
    if test_name is not None:
        test = ingest_dataset(run, conf, test_name, held_out=True)
        evaluation = evaluate_classifier(
            run,
            model,
            test,
            labels=sorted(set(originals["label"].to_pylist())),
            conf=c,
            meta={"dataset": name, "mode": epida.mode, "online": epida.online, "sources": list(epida.sources)},
            arm=f"epida_{epida.mode}{'_online' if epida.online else ''}",
            seed=epida.seed,
            model_name="feedback_classifier",
        )
    return Augmented(name, rows, augmented, models, evaluation, test_name)


@pipeline_flow("epida")
def epida_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """EPiDA on the configured labelled dataset; returns the run summary (also in the catalog)."""
    from flows.reports.epida_report import publish_report

    with Run.started(conf, pipeline="epida", profile=profile, config=config) as run:
        result = augment(run, conf)
        per_method = augmented_counts(result.augmented.parts()).to_pylist()
        reports = publish_report(run, result, conf.epida, per_method)
    epida = conf.epida
    summary = {
        "dataset": result.dataset,
        "mode": epida.mode,
        "online": epida.online,
        "rounds": epida.rounds(),
        "sources": list(epida.sources),
        "amplification": epida.amplification,
        "m": epida.m,
        "counts": per_method,
        "classifier": result.models[-1].fingerprint,
        "testset": result.testset,
        "evaluation": result.evaluation,
    }
    return run.finish(extra={"epida": summary, "reports": reports})


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of an ``epida`` run: per round the candidates kept (overall and per method), then the
    feedback classifier's scores on the test set."""
    epida = s["epida"]
    rounds: dict[int, list[Mapping[str, Any]]] = {}
    for c in epida["counts"]:
        rounds.setdefault(c["round"], []).append(c)
    return [
        f"epida ({epida['mode']}, {'online' if epida['online'] else 'one-time'}, K = {epida['amplification']}, "
        f"m = {epida['m']}) round {r}: kept {sum(c['selected'] for c in cs):,} of {sum(c['candidates'] for c in cs):,} "
        "(" + ", ".join(f"{c['method']} {c['selected'] / max(c['candidates'], 1):.0%}" for c in cs) + ")"
        for r, cs in sorted(rounds.items())
    ] + [
        f"{e['metric']} = {e['score']:.4f} on {epida['testset']} (the feedback classifier)  {e['signature']}"
        for e in epida["evaluation"]
    ]


def headline(s: Mapping[str, Any]) -> Headline:
    """An ``epida`` run in one line: the candidates selected in its last round, and its feedback classifier's accuracy
    on the test set."""
    e = s["epida"]
    last = max((c["round"] for c in e["counts"]), default=0)
    kept = sum(c["selected"] for c in e["counts"] if c["round"] == last)
    accuracy = next((v["score"] for v in e["evaluation"] if v["metric"] == "accuracy"), None)
    number = f"feedback classifier accuracy {accuracy:.4f}" if accuracy is not None else f"{len(e['counts'])} candidate sets"
    return Headline(f"{kept:,} rows selected", number)
