"""The C2C-GenDA pipeline (cluster-to-cluster generation of slot-filling data), one line per step:

ingest the slots dataset
  → delexicalise: spans → <slot> tokens, frames, value pools (malformed BIO rejected, no slots dropped)
  → cluster_pairs: per frame K-Medoids over token edit distance, furthest including (Alg. 1), folds
  → per fold f: a generator trained on the other folds' pairs (models.c2c) → c2c_generate from fold f's
    input clusters, relexicalised from the training value pool (cross expansion)
  → c2c_select: new rows only (`c2c_generated`, slots rows with lineage to the cluster and the model)
  → c2c_diversity: Table 5 (Inter/Intra ratio and MED, delexicalised and relexicalised)
report: the diversity table, the histogram of MED to the training set (Fig. 4), counts per frame.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from conf.errors import InputError
from conf.schema import AugdagConf
from flows.engine.at_once import at_once
from flows.engine.driver import ModelRef, Run, run_model_stage, run_stage
from flows.engine.recording import artifact_rows
from flows.engine.registry import Headline
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.ingest import ingest_dataset
from storage import objects
from storage.artifacts import ArtifactRef
from tasks.c2c.delex import DELEXICALISE
from tasks.c2c.generate import C2C_DIVERSITY, C2C_GENERATE, C2C_SELECT, c2c_trainer
from tasks.c2c.pairing import CLUSTER_PAIRS

GENERATOR_VERSION = "2"  # 2: dropout seeded per step under models.runtime.seeded (issue 25)


def model_settings(conf: AugdagConf) -> dict[str, Any]:
    """The generator's settings (models.c2c.C2CSettings) from the c2c section."""
    section, m = conf.c2c, conf.c2c.model
    return {
        "layers": m.layers,
        "d_model": m.d_model,
        "heads": m.heads,
        "lam": m.lam,
        "gamma": m.gamma,
        "epochs": m.epochs,
        "max_outputs": section.max_outputs,
        "seed": section.seed,
        "init": m.init,
        **({"lr": m.lr} if m.lr is not None else {}),
    }


def train_fold(run: Run, conf: AugdagConf, pairs: ArtifactRef, fold: int) -> ModelRef:
    """The generator of fold ``fold``: trained on the pairs of every other fold."""
    m = conf.c2c.model
    settings = model_settings(conf)
    fork = conf.c2c.parallel > 1  # trained beside another fold: in a process of its own
    build = c2c_trainer(pairs.parts().table(), fold=fold, settings=settings, device=m.device, threads=m.threads, fork=fork)
    return run_model_stage(
        run,
        name=f"c2c_fold_{fold}",
        key="c2c_generator",
        version=GENERATOR_VERSION,
        kind="c2c",
        filename="model",
        inputs=[pairs],
        build=build,
        params={"fold": fold, "folds": conf.c2c.folds, **settings},
    )


@dataclasses.dataclass(frozen=True)
class Generated:
    """What ``generate`` made: the dataset's delexicalised rows and cluster pairs, each fold's generator and its
    generated rows (``per_fold``), the rows kept of them all (``selected``) and Table 5's diversity."""

    dataset: str
    delexicalised: ArtifactRef
    pairs: ArtifactRef
    models: list[ModelRef]
    per_fold: list[ArtifactRef]
    selected: ArtifactRef
    diversity: ArtifactRef


def generate(run: Run, conf: AugdagConf) -> Generated:
    """Ingest the c2c dataset, delexicalise it, pair its clusters, then per fold train a generator and generate
    from that fold's input clusters; returns the selected rows and Table 5's diversity with every artifact and model."""
    section = conf.c2c
    name = conf.c2c_dataset()
    rows = ingest_dataset(run, conf, name)
    file = objects.name(conf.datasets[name].files()[0])  # a reject's `file`: the name, as the read's (no path at rest)
    delex = run_stage(run, DELEXICALISE, inputs=[rows], params={}, resources={"file": file})
    pairs = run_stage(
        run,
        CLUSTER_PAIRS,
        inputs=[delex],
        params={
            "cluster_size": section.cluster_size,
            "max_outputs": section.max_outputs,
            "min_distance": section.min_distance,
            "folds": section.folds,
            "seed": section.seed,
        },
        n_shards=1,
    )
    if artifact_rows(pairs) == 0:
        raise InputError(
            f"c2c.dataset: {name!r} has no frame with at least 2·c = {2 * section.cluster_size} distinct "
            "delexicalised utterances, so no cluster pairs. Hint: lower c2c.cluster_size (the authors use "
            "2 for 129 utterances) or add data"
        )
    folds = sorted(set(pairs.parts().table(["fold"])["fold"].to_pylist()))
    models = list(at_once({f: functools.partial(train_fold, run, conf, pairs, f) for f in folds}, section.parallel).values())
    generated = []
    for fold, model in zip(folds, models):
        generated.append(
            run_stage(
                run,
                C2C_GENERATE,
                inputs=[pairs],
                side={"delexicalised": delex},
                models=[model.fingerprint],
                n_shards=1,
                params={
                    "fold": fold,
                    "n_outputs": section.n_outputs,
                    "max_tokens": section.max_tokens,
                    "temperature": section.temperature,
                    "fills": section.fills,
                    "seed": section.seed,
                    "model": model.fingerprint,
                    "source": name,
                },
                resources={"model_path": model.location, "device": section.model.device, "threads": section.model.threads},
            )
        )
    selected = run_stage(run, C2C_SELECT, inputs=[delex, *generated], params={}, n_shards=1)
    diversity = run_stage(run, C2C_DIVERSITY, inputs=[delex, *generated], params={"source": name}, n_shards=1)
    return Generated(
        dataset=name,
        delexicalised=delex,
        pairs=pairs,
        models=models,
        per_fold=generated,
        selected=selected,
        diversity=diversity,
    )


@pipeline_flow("c2c")
def c2c_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """C2C-GenDA on the configured slots dataset; returns the run summary (also in the catalog)."""
    from flows.reports.c2c_report import publish_report

    with Run.started(conf, pipeline="c2c", profile=profile, config=config) as run:
        result = generate(run, conf)
        summary, reports = publish_report(run, result, conf.c2c)
    return run.finish(extra={"c2c": summary, "reports": reports})


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``c2c`` run: delexicalised rows, cluster pairs, generated and new rows, then the
    delexicalised diversity when anything was generated."""
    counts = s["c2c"]
    delex = next((d for d in counts["diversity"] if d["level"] == "delexicalised"), None)
    return [
        f"c2c: {counts['delexicalised']:,} delexicalised rows ({counts['malformed_bio']:,} malformed BIO rejected, "
        f"{counts['no_slots']:,} without slots), {counts['clusters']:,} cluster pairs in {counts['frames_paired']:,} of "
        f"{counts['frames']:,} frames; {counts['generated']:,} generated, {counts['kept']:,} new rows in `c2c_generated`"
    ] + (
        [
            f"c2c diversity (delexicalised): Inter ratio {delex['inter_ratio']:.1%}, Inter MED {delex['inter_med']:.2f}, "
            f"Intra ratio {delex['intra_ratio']:.1%}, Intra MED {delex['intra_med']:.2f}"
        ]
        if delex and delex["generated"]
        else []
    )


def headline(s: Mapping[str, Any]) -> Headline:
    """A ``c2c`` run in one line: the new slot rows, and Table 5's Inter ratio of the delexicalised output (or, with
    nothing generated, the frames that got cluster pairs)."""
    c = s["c2c"]
    delex = next((d for d in c["diversity"] if d["level"] == "delexicalised" and d["generated"]), None)
    number = f"{c['clusters']:,} cluster pairs in {c['frames_paired']:,} of {c['frames']:,} frames"
    if delex is not None:
        number = f"Inter ratio {delex['inter_ratio']:.1%} (delexicalised); {number}"
    return Headline(f"{c['kept']:,} new slot rows", number)
