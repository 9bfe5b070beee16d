"""The rejuvenation pipeline (thesis ch. 5), one line per step of the method:

ingest bitext → identification model (trained on it, or configured; its BLEU on 200 pairs: flows/pipelines/model_scores.py;
  under rejuvenation.identification.min_bleu the run fails, or warns: on_weak; the same for the rejuvenation model)
  → force-decode every pair
  → global cut: the R % lowest probabilities are `inactive`, the rest active (unscored pairs stay active)
  → rejuvenation model (trained on the active pairs, or the identification model)
  → forward-translate the inactive sources (beam 4, length penalty 0.6; backward / both as options)
  → `rejuvenated` = active ∪ (inactive source, new target), lineage on every new row
report: mean probability per probability bin (Fig. 5.2); coverage and lexicon uncertainty of the
inactive vs the active pairs (the aligner and lexicon of the self-training pipeline).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from conf.schema import AugdagConf, RejuvenationConf
from flows.engine.driver import ModelRef, Run, run_stage
from flows.engine.recording import artifact_rows
from flows.engine.registry import Headline
from flows.engine.replay import run_logger
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.heldout import check_heldout_dataset
from flows.pipelines.ingest import ingest_dataset
from flows.pipelines.model_scores import gate, model_line, validate_nmt
from flows.pipelines.nmt import nmt_model
from flows.pipelines.self_training import bitext_uncertainty
from flows.reports.reporting import publish
from storage.artifacts import ArtifactRef
from tasks.common.nmt import decode_options, loading, runtime
from tasks.rejuvenation.rejuvenate import (
    ACTIVE,
    INACTIVE,
    INACTIVE_CUT,
    PAIR_SCORE,
    PROBABILITY_BINS,
    REJUVENATE,
    REJUVENATED_BITEXT,
    STATE_PROPERTIES,
    unscored_pairs,
)


@dataclasses.dataclass(frozen=True)
class Rejuvenated:
    scores: ArtifactRef
    active: ArtifactRef
    inactive: ArtifactRef
    rejuvenated: ArtifactRef
    bins: ArtifactRef
    states: ArtifactRef
    models: dict[str, str]  # role -> fingerprint
    unscored: dict[str, Any]
    validation: dict[str, dict[str, Any]]  # model name -> its score on a sample of its data (flows/pipelines/model_scores.py)


def rejuvenate_bitext(run: Run, conf: AugdagConf) -> Rejuvenated:
    """Ingest the bitext, score every pair with the identification model, cut it into inactive and active,
    rejuvenate the inactive pairs; returns ``rejuvenated`` with the bins, the state properties and the models' scores."""
    rejuvenation = conf.rejuvenation
    name = conf.rejuvenation_bitext()
    bitext = ingest_dataset(run, conf, name)
    check_heldout_dataset(run, conf, "rejuvenation.bitext", bitext)  # the identification model learns from it
    ident = nmt_model(run, rejuvenation.identification, name="identification", train_on=bitext)
    validation = {
        "identification": validate_nmt(
            run,
            ident,
            rejuvenation.identification,
            bitext,
            role="identification",
            beam=rejuvenation.beam,
            lenpen=rejuvenation.lenpen,
        )
    }
    run_logger().info(model_line(validation["identification"]))
    gate(run, validation["identification"], rejuvenation.identification, key="rejuvenation.identification")
    ident_loading = loading(rejuvenation.identification)
    scores = run_stage(
        run,
        PAIR_SCORE,
        inputs=[bitext],
        params={"model": ident_loading},
        models=[ident.fingerprint],
        resources={"model_path": ident.location, "runtime": runtime(rejuvenation.identification)},
    )
    cut = run_stage(run, INACTIVE_CUT, inputs=[scores], n_shards=1, params={"inactive_ratio": rejuvenation.inactive_ratio})
    inactive = run_stage(run, INACTIVE, inputs=[bitext, scores], side={"cut": cut}, params={"state": "inactive"})
    active = run_stage(run, ACTIVE, inputs=[bitext, scores], side={"cut": cut}, params={"state": "active"})
    fresh = rejuvenate_inactive(run, rejuvenation, inactive, active, ident, ident_loading, label=f"{name}'s active pairs")
    rejuvenated = run_stage(run, REJUVENATED_BITEXT, inputs=[active, fresh.ref], params={})
    align, _, scored_src, _ = bitext_uncertainty(run, bitext, conf.self_training)
    bins = run_stage(run, PROBABILITY_BINS, inputs=[scores], n_shards=1, params={"bins": rejuvenation.bins})
    states = run_stage(run, STATE_PROPERTIES, inputs=[active, inactive, align, scored_src], n_shards=1, params={})
    if fresh.validation is not None:
        validation["rejuvenation"] = fresh.validation
    return Rejuvenated(
        scores,
        active,
        inactive,
        rejuvenated,
        bins,
        states,
        {"identification": ident.fingerprint, **fresh.models},
        unscored_pairs(scores.parts()),
        validation,
    )


@dataclasses.dataclass(frozen=True)
class _Fresh:
    ref: ArtifactRef
    models: dict[str, str]
    forward: ModelRef | None = None  # the model that translated forward, when one did
    validation: dict[str, Any] | None = None  # its score, when it is a model of its own (not the identification one)


def rejuvenate_inactive(
    run: Run,
    section: RejuvenationConf,
    inactive: ArtifactRef,
    active: ArtifactRef,
    ident: ModelRef,
    ident_loading: dict[str, Any],
    *,
    label: str,
) -> _Fresh:
    """The new pairs: forward translations of the inactive sources (and/or back-translations of their targets). A
    forward model of its own is scored on ``active`` (shown as ``label``) and held to rejuvenation.min_bleu first."""
    reuse = section.rejuvenator == "identification"
    conf = section.identification if reuse else section.rejuvenation
    models, params, fwd, score = {}, {}, None, None
    resources = {
        "identification_path": ident.location,
        "identification_runtime": runtime(section.identification),
        "runtime": runtime(conf),
    }
    if section.direction in ("forward", "both"):
        fwd = ident if reuse else nmt_model(run, section.rejuvenation, name="rejuvenation", train_on=active)
        models["forward"], resources["forward_path"] = fwd.fingerprint, fwd.location
        params["forward_fingerprint"] = fwd.fingerprint
        if not reuse:
            score = validate_nmt(
                run, fwd, section.rejuvenation, active, role="rejuvenation", beam=section.beam, lenpen=section.lenpen, label=label
            )
            run_logger().info(model_line(score))
            gate(run, score, section.rejuvenation, key="rejuvenation.rejuvenation")
    if section.direction in ("backward", "both"):  # a target → source model: trained on the active pairs, reversed
        bwd = nmt_model(run, section.rejuvenation, name="rejuvenation_backward", train_on=active, reverse=True)
        models["backward"], resources["backward_path"] = bwd.fingerprint, bwd.location
        params["backward_fingerprint"], params["backward"] = bwd.fingerprint, loading(section.rejuvenation)
        resources["backward_runtime"] = runtime(section.rejuvenation)
    ref = run_stage(
        run,
        REJUVENATE,
        inputs=[inactive],
        resources=resources,
        models=[ident.fingerprint, *models.values()],
        params={
            **params,
            "direction": section.direction,
            "model": loading(conf),
            "identification": ident_loading,
            "decode": decode_options(beam=section.beam, lenpen=section.lenpen, bound=conf),
        },
    )
    return _Fresh(ref, models, fwd, score)


def publish_report(run: Run, result: Rejuvenated, conf: RejuvenationConf) -> dict[str, str]:
    """The run page (mean probability per bin, inactive vs active pairs, unscored pairs, the models' scores)
    and its artifacts; returns the paths written."""
    from flows.reports.plots import bar_figure, markdown_table

    bins, states = result.bins.read(0), result.states.read(0)
    png = bar_figure(
        bins["bin"].to_pylist(),
        bins["p_mean"].to_pylist(),
        xlabel="probability bin (1 = lowest)",
        ylabel="mean sentence probability",
        title=f"identification model: {conf.bins} probability bins (Fig. 5.2); the lowest {conf.inactive_ratio:.0%} are inactive",
    )
    md = (
        f"### Data rejuvenation\n\nInactive ratio R = {conf.inactive_ratio:.0%}, direction `{conf.direction}`, "
        f"beam {conf.beam}, length penalty {conf.lenpen}. Unscored pairs (kept active): "
        f"{result.unscored['count']}.\n\n"
        + "".join(f"{model_line(v)}.\n\n" for v in result.validation.values())
        + f"**Probability bins**\n\n{markdown_table(bins)}\n"
        f"**Inactive vs active**\n\n{markdown_table(states)}\n"
    )
    return publish(
        run,
        stem="rejuvenation",
        title=f"data rejuvenation — {run.run_id}",
        markdown=md,
        table=states,
        pngs={"probability_bins": png},
        sections=[
            ("Mean probability per probability bin (Fig. 5.2)", png),
            ("Probability bins", bins),
            ("Inactive vs active pairs: probability, length, alignment coverage, lexicon uncertainty", states),
            ("Unscored pairs (kept active)", f"{result.unscored['count']}: {', '.join(result.unscored['uids']) or '–'}"),
            *(
                (f"The {name} model (BLEU and chrF with sacrebleu)", f"{model_line(v)}  {v['signature']}")
                for name, v in result.validation.items()
            ),
        ],
    )


@pipeline_flow("rejuvenation")
def rejuvenation_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rejuvenate the inactive pairs of a bitext; returns the run summary (also stored in the catalog)."""
    with Run.started(conf, pipeline="rejuvenation", profile=profile, config=config) as run:
        result = rejuvenate_bitext(run, conf)
        reports = publish_report(run, result, conf.rejuvenation)
    counts = {
        "active": artifact_rows(result.active),
        "inactive": artifact_rows(result.inactive),
        "rejuvenated": artifact_rows(result.rejuvenated),
    }
    return run.finish(
        extra={
            "rejuvenation": {**counts, "unscored": result.unscored, "models": result.models, "validation": result.validation},
            "reports": reports,
        }
    )


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``rejuvenation`` run: each validation model's score, then the active, inactive,
    rejuvenated and unscored pairs."""
    rejuvenation = s["rejuvenation"]
    unscored = rejuvenation["unscored"]
    return [
        *_model_lines(rejuvenation.get("validation", {})),
        f"rejuvenation: {rejuvenation['active']:,} active, {rejuvenation['inactive']:,} inactive, "
        f"{rejuvenation['rejuvenated']:,} rows in `rejuvenated`; {unscored['count']:,} pair(s) could not be scored (kept active)"
        + (f": {', '.join(unscored['uids'])}" if unscored["count"] else ""),
    ]


def _model_lines(models: Mapping[str, Any]) -> list[str]:
    """A line per trained model's score on a sample of its data (model_scores.py)."""
    return [model_line(v) for v in models.values()]


def headline(s: Mapping[str, Any]) -> Headline:
    """A ``rejuvenation`` run in one line: the inactive pairs given new targets, of how many, and the identification
    model's BLEU on a sample of its training pairs (its probabilities mean little when it cannot translate)."""
    r = s["rejuvenation"]
    model = r.get("validation", {}).get("identification")
    number = f"{r['inactive']:,} of {r['active'] + r['inactive']:,} pairs inactive"
    if model is not None:
        number += f"; identification BLEU {model['BLEU']:.2f} on {model['sentences']:,} of its training pairs"
    return Headline(f"{r['inactive']:,} pairs rejuvenated", number)
