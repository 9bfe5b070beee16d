"""The paraphrase-curriculum pipeline (PCC, Alg. 2), one line per step of the method:

ingest the labelled (or monolingual) dataset
  → candidates per sentence: top-k/top-p and bottom-k samples (a Hugging Face generator, or round-trip
    translation through two NMT models, trained on a bitext when not configured)
  → M(x, x̄) both ways with an NLI model (when configured) and G(x, x̄) (chrF, cross-encoder, embeddings)
  → Eq. 3 filter → Eq. 4 levels → `curriculum` (originals at level 0)
metrics: Distinct-1…6 and first-token copying per sampler (`paraphrase_diversity`), the similarity
distribution per level (`curriculum_levels`, plotted as in Table 8).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pyarrow.compute as pc

from conf.schema import AugdagConf, ParaphraseConf
from flows.engine.driver import Run, run_stage
from flows.engine.recording import artifact_rows
from flows.engine.registry import Headline
from flows.engine.replay import run_logger
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.ingest import ingest_dataset
from flows.pipelines.nmt import configured_model, nmt_model
from flows.reports.reporting import publish
from storage import objects
from storage.artifacts import ArtifactRef, fingerprint
from tasks.common.nmt import loading, runtime
from tasks.paraphrase.candidates import GENERATE_CANDIDATES, SCORE_CANDIDATES, sampling_plan
from tasks.paraphrase.curriculum import CURRICULUM_STAGE, DIVERSITY, LEVELS


@dataclasses.dataclass(frozen=True)
class Generator:
    params: dict[str, Any]  # what changes the candidates (fingerprinted)
    resources: dict[str, Any]  # model paths and how they run (not fingerprinted)
    models: dict[str, str]  # role -> fingerprint
    fingerprint: str
    described: str


def paraphraser(run: Run, conf: AugdagConf) -> Generator:
    """The candidate generator: a configured Hugging Face model, or round-trip through two NMT models."""
    g = conf.paraphrase.generator
    if g.kind == "hf":
        ref = configured_model(run, g.model, name="paraphraser", kind="transformers")
        return Generator(
            {"kind": "hf", "prompt": g.prompt},
            {"model_path": ref.location, "device": g.device, "threads": g.threads},
            {"paraphraser": ref.fingerprint},
            ref.fingerprint,
            f"transformers {g.model}",
        )
    bitext = None
    if (name := conf.paraphrase_bitext()) is not None:
        bitext = ingest_dataset(run, conf, name)
    # the backward model first: the forward one is often the teacher's training (the same data and settings, one
    # fingerprint), which a pipeline beside this one (rejuvenation, self_training) may be training now; this pipeline
    # then trains its own model meanwhile instead of waiting for that one first (the demo: one core idle for ~30 s)
    bwd = nmt_model(run, g.backward, name="paraphrase_backward", train_on=bitext, reverse=True)
    fwd = nmt_model(run, g.forward, name="paraphrase_forward", train_on=bitext)
    params = {"kind": "round_trip", "pivot_beam": g.pivot_beam, "forward": loading(g.forward), "backward": loading(g.backward)}
    resources = {
        "forward_path": fwd.location,
        "backward_path": bwd.location,
        "forward_runtime": runtime(g.forward),
        "backward_runtime": runtime(g.backward),
    }
    fp = fingerprint("round-trip", "1", params, [fwd.fingerprint, bwd.fingerprint])
    described = (
        f"round trip: {params['forward']['backend']} {fwd.fingerprint[:12]} (forward, beam {g.pivot_beam}) "
        f"→ {params['backward']['backend']} {bwd.fingerprint[:12]} (backward, sampled)"
    )
    return Generator(params, resources, {"forward": fwd.fingerprint, "backward": bwd.fingerprint}, fp, described)


@dataclasses.dataclass(frozen=True)
class Paraphrased:
    dataset: str
    candidates: ArtifactRef
    curriculum: ArtifactRef
    diversity: ArtifactRef
    levels: ArtifactRef
    models: dict[str, str]
    ran: dict[str, str]  # which generator, NLI model and similarity ran


def build_curriculum(run: Run, conf: AugdagConf) -> Paraphrased:
    """Ingest the dataset, generate candidates per sentence, score them (NLI when configured, similarity G),
    then filter and level them into the ``curriculum``; returns it with the diversity and per-level tables."""
    paraphrase = conf.paraphrase
    name = conf.paraphrase_dataset()
    rows = ingest_dataset(run, conf, name)
    gen = paraphraser(run, conf)
    plan = sampling_plan(
        candidates=paraphrase.candidates,
        bottom_k_candidates=paraphrase.bottom_k_candidates,
        oversample=paraphrase.oversample,
        top_k=paraphrase.top_k,
        top_p=paraphrase.top_p,
        bottom_k=paraphrase.bottom_k,
        bottom_k_steps=paraphrase.bottom_k_steps,
        temperature=paraphrase.temperature,
        seed=paraphrase.seed,
    )
    cands = run_stage(
        run,
        GENERATE_CANDIDATES,
        inputs=[rows],
        models=list(gen.models.values()),
        resources={**gen.resources, "max_tokens": paraphrase.generator.max_tokens},
        params={
            "generator": gen.params,
            "generator_fingerprint": gen.fingerprint,
            "plan": [{"sampler": dataclasses.asdict(s), "n": n} for s, n in plan],
        },
    )
    nli_params, resources, models = None, {}, dict(gen.models)
    if paraphrase.nli.model is not None:
        ref = configured_model(run, paraphrase.nli.model, name="nli", kind="nli")
        nli_params = {"entailment_label": paraphrase.nli.entailment_label}
        resources |= {"nli_path": ref.location, "nli_runtime": _runtime(paraphrase.nli)}
        models["nli"] = ref.fingerprint
    sim = paraphrase.similarity
    if sim.model is not None:
        ref = configured_model(run, sim.model, name="similarity", kind=sim.kind)
        resources["similarity_path"] = ref.location
        models["similarity"] = ref.fingerprint
    resources["similarity_runtime"] = _runtime(sim)
    scored = run_stage(
        run,
        SCORE_CANDIDATES,
        inputs=[cands],
        params={"nli": nli_params, "similarity": {"kind": sim.kind}},
        models=[m for k, m in models.items() if k in ("nli", "similarity")],
        resources=resources,
    )
    ran = {
        "generator": gen.described,
        "nli": paraphrase.nli.model or "none: Eq. 3 keeps the candidates with G ≥ β only",
        "similarity": sim.kind + (f" {sim.model}" if sim.model else ""),
    }
    curriculum = run_stage(
        run,
        CURRICULUM_STAGE,
        inputs=[rows, scored],
        params={
            "beta": paraphrase.beta,
            "candidates": paraphrase.candidates,
            "bottom_k_candidates": paraphrase.bottom_k_candidates,
            "levels": paraphrase.levels,
            "shortfall": paraphrase.shortfall,
            "nli": models.get("nli"),
            "similarity": models.get("similarity", sim.kind),
        },
    )
    diversity = run_stage(run, DIVERSITY, inputs=[scored], n_shards=1, params={})
    levels = run_stage(run, LEVELS, inputs=[curriculum], n_shards=1, params={})
    return Paraphrased(name, scored, curriculum, diversity, levels, models, ran)


def _runtime(section: Any) -> dict[str, Any]:
    return {"device": section.device, "threads": section.threads, "max_tokens": section.max_tokens}


def shortfall(curriculum: ArtifactRef, *, listed: int = 20) -> dict[str, Any]:
    """Sentences with fewer than `candidates` surviving paraphrases: how many, and the first ``listed``."""
    tables = [objects.read_table(p) for p in curriculum.paths("shortfall")]
    rows = [r for t in tables for r in t.to_pylist()]
    return {"count": len(rows), "rows": [f"{r['source']}:{r['line']} ({r['kept']}/{r['wanted']})" for r in rows[:listed]]}


def publish_report(run: Run, result: Paraphrased, conf: ParaphraseConf) -> dict[str, str]:
    """The run page (models, similarity per level, levels, diversity per sampler, the shortfall) and its
    artifacts; returns the paths written."""
    from flows.reports.plots import box_figure, markdown_table

    levels, diversity = result.levels.read(0), result.diversity.read(0)
    sims: dict[str, list[float]] = {}
    for t in result.curriculum.parts().tables(["level", "sim"]):
        t = t.filter(pc.greater(t["level"], 0))
        for lv, s in zip(t["level"].to_pylist(), t["sim"].to_pylist()):
            sims.setdefault(f"level {lv}", []).append(s)
    png = box_figure(
        dict(sorted(sims.items())),
        ylabel=f"similarity G ({conf.similarity.kind})",
        title=f"G(x, x̄) per difficulty level (Eq. 4, C = {conf.levels}; cf. Table 8)",
    )
    short = shortfall(result.curriculum)
    md = (
        f"### Paraphrase curriculum\n\nGenerator: {result.ran['generator']}. NLI: {result.ran['nli']}. "
        f"Similarity: {result.ran['similarity']}. β = {conf.beta}, C = {conf.levels}, {conf.candidates} kept per "
        f"sentence ({conf.bottom_k_candidates} bottom-k, k = {conf.bottom_k}, N = {conf.bottom_k_steps}). "
        f"Sentences short of {conf.candidates}: {short['count']} ({conf.shortfall}).\n\n"
        f"**Levels**\n\n{markdown_table(levels)}\n**Diversity per sampler**\n\n{markdown_table(diversity)}\n"
    )
    return publish(
        run,
        stem="paraphrase",
        title=f"paraphrase curriculum — {run.run_id}",
        markdown=md,
        table=levels,
        pngs={"similarity_per_level": png},
        sections=[
            ("Models", "; ".join(f"{k}: {v}" for k, v in result.ran.items())),
            ("Similarity per difficulty level", png),
            ("Levels", levels),
            ("Distinct-1…6 and first-token copying per sampler", diversity),
            (
                f"Sentences with fewer than {conf.candidates} kept paraphrases ({conf.shortfall})",
                f"{short['count']}: {', '.join(short['rows']) or '–'}",
            ),
        ],
    )


@pipeline_flow("paraphrase")
def paraphrase_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the paraphrase curriculum of a dataset; returns the run summary (also stored in the catalog)."""
    with Run.started(conf, pipeline="paraphrase", profile=profile, config=config) as run:
        result = build_curriculum(run, conf)
        reports = publish_report(run, result, conf.paraphrase)
    summary = {
        "dataset": result.dataset,
        "candidates": artifact_rows(result.candidates),
        "dropped": artifact_rows(result.curriculum, "dropped"),
        "curriculum": artifact_rows(result.curriculum),
        "shortfall": shortfall(result.curriculum),
        "models": result.models,
        "ran": result.ran,
    }
    run_logger().info("paraphrase models: " + "; ".join(f"{k}: {v}" for k, v in result.ran.items()))
    return run.finish(extra={"paraphrase": summary, "reports": reports})


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``paraphrase`` run: candidates, dropped by Eq. 3, curriculum rows, the sentences
    short of the bag size, then each model that ran."""
    paraphrase = s["paraphrase"]
    short = paraphrase["shortfall"]
    return [
        f"paraphrase: {paraphrase['candidates']:,} candidates, {paraphrase['dropped']:,} dropped by Eq. 3, "
        f"{paraphrase['curriculum']:,} curriculum rows; {short['count']:,} sentence(s) short of the bag size"
        + (f": {', '.join(short['rows'])}" if short["count"] else ""),
        *(f"  {role}: {what}" for role, what in paraphrase["ran"].items()),
    ]


def headline(s: Mapping[str, Any]) -> Headline:
    """A ``paraphrase`` run in one line: the curriculum's rows (originals at level 0 included), and the candidates
    Eq. 3 dropped."""
    p = s["paraphrase"]
    return Headline(
        f"{p['curriculum']:,} curriculum rows", f"{p['dropped']:,} of {p['candidates']:,} candidates dropped by Eq. 3"
    )
