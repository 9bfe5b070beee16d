"""The MT paraphrase-augmentation pipeline (Hu et al. 2019, appendix C), one line per step:

ingest the bitext
  → side_idf: idf of every token of the paraphrased side (the negative constraints' weights)
  → constrained_paraphrases: per pair, the top-IDF word(s) forbidden and the names and numbers kept,
    n paraphrases of that side from the product's paraphraser (paraphrase.generator)
  → paraphrased_bitext: constraints checked, unique, token Jaccard < 0.65, each paired with the other
    side of its original pair (lineage: parent_uid, the paraphraser's fingerprint)
train_nmt then mixes them, e.g. {bitext: 10, paraphrased: 1} and continued training (Table 6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conf.schema import AugdagConf
from flows.engine.driver import Run, run_stage
from flows.engine.recording import artifact_rows
from flows.engine.registry import Headline
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.ingest import ingest_dataset
from flows.pipelines.paraphrase import paraphraser
from tasks.mt_paraphrase.constrained import CONSTRAINED, IDF_STAGE, SELECT_PARAPHRASES


def paraphrase_bitext(run: Run, conf: AugdagConf) -> dict[str, Any]:
    """Ingest the bitext and paraphrase its ``mt_paraphrase.side`` under the constraints, then select; returns
    the run's ``mt_paraphrase`` summary (generator, decoding, pairs, candidates, paraphrased, dropped by reason)."""
    m = conf.mt_paraphrase
    name = conf.mt_paraphrase_bitext()
    rows = ingest_dataset(run, conf, name)
    idf = run_stage(run, IDF_STAGE, inputs=[rows], params={"side": m.side}, n_shards=1)
    gen = paraphraser(run, conf)
    sampler = {"top_k": m.top_k, "top_p": m.top_p, "temperature": m.temperature, "seed": m.seed}
    cands = run_stage(
        run,
        CONSTRAINED,
        inputs=[rows],
        side={"idf": idf},
        models=list(gen.models.values()),
        resources={**gen.resources},
        params={
            "side": m.side,
            "n": m.n,
            "negative_top": m.negative_top,
            "positive": m.positive,
            "decode": m.decode,
            "sampler": sampler if m.decode == "sample" else None,
            "share": m.share,
            "generator": gen.params,
            "generator_fingerprint": gen.fingerprint,
            "max_tokens": conf.paraphrase.generator.max_tokens,
        },
    )
    kept = run_stage(run, SELECT_PARAPHRASES, inputs=[cands], params={"max_jaccard": m.max_jaccard, "keep": m.keep})
    reasons: dict[str, int] = {}
    for why in kept.parts("dropped").table(["reason"])["reason"].to_pylist():
        reasons[why] = reasons.get(why, 0) + 1
    decode = (
        f"the return model's {m.n} best under fairseq's lexically constrained beam search"
        if m.decode == "constrained"
        else f"{m.n} top-k/top-p samples (k {m.top_k}, p {m.top_p})"
    )
    return {
        "bitext": name,
        "side": m.side,
        "generator": gen.described,
        "decode": decode,
        "pairs": artifact_rows(rows),
        "candidates": artifact_rows(cands),
        "paraphrased": artifact_rows(kept),
        "dropped": dict(sorted(reasons.items())),
    }


@pipeline_flow("mt_paraphrase")
def mt_paraphrase_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Constrained paraphrases of one side of the configured bitext; returns the run summary."""
    with Run.started(conf, pipeline="mt_paraphrase", profile=profile, config=config) as run:
        result = paraphrase_bitext(run, conf)
    return run.finish(extra={"mt_paraphrase": result})


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of an ``mt_paraphrase`` run: paraphrased pairs of the bitext, drawn and dropped, then
    the generator and how it decoded."""
    m = s["mt_paraphrase"]
    return [
        f"mt_paraphrase: {m['paraphrased']:,} paraphrased pairs of {m['pairs']:,} ({m['side']} side of "
        f"{m['bitext']}; {m['candidates']:,} drawn, dropped: "
        + (", ".join(f"{k} {v:,}" for k, v in m["dropped"].items()) or "none")
        + ")",
        f"  generator: {m['generator']}; decoded: {m['decode']}",
    ]


def headline(s: Mapping[str, Any]) -> Headline:
    """An ``mt_paraphrase`` run in one line: the paraphrased pairs, of how many pairs and which side."""
    m = s["mt_paraphrase"]
    return Headline(f"{m['paraphrased']:,} paraphrased pairs", f"of {m['pairs']:,} pairs of {m['bitext']} ({m['side']} side)")
