"""The self-training pipeline (thesis ch. 6): sample monolingual sentences by uncertainty, translate them.

ingest bitext + mono → align both ways → grow-diag-final-and → lexicon → H(word)
  → U(bitext src) → U_max → U(mono) → keys → global sample → `sampled_mono`
  + properties per uncertainty bin (Fig. 6.3) and the report (Fig. 6.4)
teacher (trained on the bitext, or configured) → its BLEU and chrF on 200 bitext pairs (flows/pipelines/model_scores.py)
  → beam-5 translations of `sampled_mono`
  (a teacher under self_training.teacher.min_bleu fails the run, or warns: on_weak)
  → length / ratio filter → repetition, repeated n-gram runs, language ID of the target side
  → target-LM filter (optional) → `synthetic` (with parent uid and teacher)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

from conf.errors import ConfError
from conf.schema import AugdagConf, SelfTrainingConf
from conf.sections.tokenizer import TokenizerConf
from flows.engine.driver import ModelRef, Run, run_model_stage, run_stage
from flows.engine.drop_warnings import dropped_reasons
from flows.engine.recording import artifact_rows
from flows.engine.registry import Headline
from flows.engine.replay import run_logger
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.heldout import check_heldout_dataset
from flows.pipelines.ingest import ingest_dataset
from flows.pipelines.model_scores import gate, model_line, validate_nmt
from flows.pipelines.nmt import nmt_model
from flows.reports.reporting import publish
from storage.artifacts import ArtifactRef
from storage.parts import Parts
from tasks.common import lm as lm_tasks
from tasks.common.nmt import TRANSLATE_MONO, decode_options, loading, runtime
from tasks.ingest.clean import DUPLICATES, REASONS
from tasks.self_training.em import align_rounds
from tasks.self_training.lexicon import FORCE_ALIGN, LEXICON, LINK_COUNTS, WORD_UNCERTAINTY
from tasks.self_training.synthetic import CHECKS, SYNTHETIC_CLEAN, check_params, synthetic_language, target_language
from tasks.self_training.tokenize import TOKENIZE
from tasks.self_training.uncertainty import BINS, SAMPLE_KEYS, SAMPLED_MONO, SELECT_SAMPLE, SENTENCE_UNCERTAINTY, U_MAX


@dataclasses.dataclass(frozen=True)
class Sampled:
    """What the first half hands on: the sample per monolingual dataset and what the teacher needs."""

    bitext: ArtifactRef
    tokenized_bitext: ArtifactRef  # the bitext as the aligner and the LMs see it (the bitext itself: whitespace)
    alignment: ArtifactRef
    word_uncertainty: ArtifactRef
    u_max: float
    sampled: dict[str, ArtifactRef]
    bins: dict[str, ArtifactRef]
    scored_mono: list[ArtifactRef]


def tokenized(run: Run, ref: ArtifactRef, conf: TokenizerConf, sides: dict[str, str]) -> ArtifactRef:
    """``ref`` with its columns ``sides`` (column -> "src" or "tgt": whose language) word-tokenised as
    ``conf`` says: the `tokenize` stage, mapped over its shards; ``ref`` itself for ``whitespace``."""
    if conf.kind == "whitespace":
        return ref
    try:
        by_side = conf.languages()
    except ValueError as e:  # the profile check refused it already (flows/pipelines/__init__.py); a recorded conf may not have
        raise ConfError(str(e)) from None
    langs = {column: by_side[side] for column, side in sides.items()}
    params: dict[str, Any] = {"kind": conf.kind, "langs": langs}
    if conf.kind == "moses":
        params["aggressive_dash_splits"] = conf.aggressive_dash_splits
    else:
        params["pattern"] = conf.pattern
    return run_stage(run, TOKENIZE, inputs=[ref], params=params)


def train_lm(run: Run, corpus: ArtifactRef, *, column: str, conf: SelfTrainingConf, name: str) -> ModelRef:
    """A KenLM ARPA model over one text column of an artifact (lmplz, modified Kneser–Ney)."""
    return run_model_stage(
        run,
        name=name,
        version=lm_tasks.LM_VERSION,
        kind="kenlm",
        filename="lm.arpa",
        inputs=[corpus],
        params={"column": column, "order": conf.lm.order, "lowercase": conf.lowercase},
        build=lm_tasks.arpa_builder(
            corpus.parts(), column=column, order=conf.lm.order, memory=conf.lm.memory, lowercase=conf.lowercase
        ),
    )


def bitext_uncertainty(run: Run, bitext: ArtifactRef, conf: SelfTrainingConf) -> tuple[ArtifactRef, ...]:
    """Tokenise the bitext, align it (fast_align both ways, grow-diag-final-and), build the lexicon and
    H(word), and score every source sentence with U (Eq. 6.3). Returns (alignment, word uncertainty,
    scored bitext, tokenised bitext)."""
    lc = {"lowercase": conf.lowercase}
    bitext = tokenized(run, bitext, conf.tokenizer, {"src": "src", "tgt": "tgt"})
    align = align_rounds(functools.partial(run_stage, run), bitext, **lc, **conf.aligner.model_dump())  # EM over shards
    run.catalog.register_model(  # the aligner is its artifact: both tables (fwd_table, rev_table) and tensions
        align.fingerprint,
        name="fast_align",
        kind="fast_align",
        path=str(align.dir),
        run_id=run.run_id,
        meta={"tables": ["fwd_table-00000.parquet", "rev_table-00000.parquet"], "params": "aligner-00000.parquet"},
    )
    counts = run_stage(run, LINK_COUNTS, inputs=[bitext, align], params=lc)  # part i of each: the same pairs
    lexicon = run_stage(run, LEXICON, inputs=[counts], n_shards=1, params={})
    words = run_stage(run, WORD_UNCERTAINTY, inputs=[lexicon, bitext], n_shards=1, params=lc)
    scored = run_stage(
        run, SENTENCE_UNCERTAINTY, inputs=[bitext], side={"word_uncertainty": words}, params={"column": "src", **lc}
    )
    return align, words, scored, bitext


def sample_monolingual(run: Run, conf: AugdagConf) -> Sampled:
    """Everything up to `sampled_mono`, one line per step of the method."""
    st, s = conf.self_training, conf.self_training.sampling
    bitext_name, mono_names = conf.self_training_datasets()
    ingest = {name: ingest_dataset(run, conf, name) for name in [bitext_name, *mono_names]}
    bitext, monos = ingest[bitext_name], [ingest[m] for m in mono_names]
    check_heldout_dataset(run, conf, "self_training.bitext", bitext)  # the teacher learns from it
    lc = {"lowercase": st.lowercase}
    align, words, scored_bitext, tokenized_bitext = bitext_uncertainty(run, bitext, st)
    tokenized_monos = [tokenized(run, m, st.tokenizer, {"text": "src"}) for m in monos]
    u_max = run_stage(run, U_MAX, inputs=[scored_bitext], n_shards=1, params={"percentile_r": s.percentile_r})
    scored = [
        run_stage(run, SENTENCE_UNCERTAINTY, inputs=[m], side={"word_uncertainty": words}, params={"column": "text", **lc})
        for m in tokenized_monos
    ]
    budget = s.budget or max(1, math.floor(s.budget_ratio * sum(artifact_rows(m) for m in monos)))
    extra: list[list[ArtifactRef]] = [[] for _ in monos]
    if s.method == "srclm":  # baseline: lowest cross-entropy under a source-side LM of the bitext first
        src_lm = train_lm(run, tokenized_bitext, column="src", conf=st, name="source_lm")
        extra = [
            [
                run_stage(
                    run,
                    lm_tasks.LM_SCORE,
                    inputs=[m],
                    params={"column": "text", **lc},
                    models=[src_lm.fingerprint],
                    resources={"lm_path": src_lm.location},
                )
            ]
            for m in tokenized_monos
        ]
    keys = [
        run_stage(
            run,
            SAMPLE_KEYS,
            inputs=[sc, *ex],
            side={"u_max": u_max},
            params={"method": s.method, "beta": s.beta, "seed": s.seed, "budget": budget},
        )
        for sc, ex in zip(scored, extra)
    ]
    selected = run_stage(run, SELECT_SAMPLE, inputs=keys, n_shards=1, params={"budget": budget, "method": s.method})
    split = {name for name in mono_names if conf.datasets[name].split_sentences}  # their `sentence` is kept
    sampled = {
        m.dataset: run_stage(
            run,
            SAMPLED_MONO,
            inputs=[m],
            side={"selected": selected},
            params={"method": s.method, **({"split": True} if m.dataset in split else {})},
        )
        for m in monos
    }
    bins = {"bitext": run_stage(run, BINS, inputs=[scored_bitext, align], n_shards=1, params={"bins": s.bins, "aligned": True})}
    return Sampled(bitext, tokenized_bitext, align, words, u_max.read(0)["u_max"][0].as_py(), sampled, bins, scored)


def filter_synthetic(
    run: Run,
    pairs: ArtifactRef,
    conf: SelfTrainingConf,
    target_lm: ModelRef | None,
    *,
    view: str | None = None,
    language: tuple[str | None, list[str] | None] = (None, None),
) -> ArtifactRef:
    """``filter_steps``' last output: the synthetic pairs kept."""
    return filter_steps(run, pairs, conf, target_lm, view=view, language=language)[-1]


def filter_steps(
    run: Run,
    pairs: ArtifactRef,
    conf: SelfTrainingConf,
    target_lm: ModelRef | None,
    *,
    view: str | None = None,
    language: tuple[str | None, list[str] | None] = (None, None),
) -> list[ArtifactRef]:
    """The synthetic pairs' filters (ch. 6): drop a side of < min or > max tokens and a token ratio above
    max_ratio (the `clean` stage's rules), then the teacher's degenerate output: repetition, repeated n-gram runs
    and, with a target language (``language``: ``target_language``'s), the wrong language
    (tasks/self_training/synthetic.py); then, with ``target_lm`` and ``filter.lm_drop`` > 0, the share of pairs
    whose target side has the highest LM cross-entropy (a global cut over every shard). The last step's
    output shows in ``view``."""
    f = conf.filter
    use_lm = target_lm is not None and f.lm_drop > 0
    dups = run_stage(run, DUPLICATES, inputs=[pairs], params={}, n_shards=1)
    tgt_lang, candidates = language
    kept = run_stage(
        run,
        dataclasses.replace(SYNTHETIC_CLEAN, view=None if use_lm else view),
        inputs=[pairs],
        side={"duplicates": dups},
        params={
            **{k: getattr(f, k) for k in ("dedup", "min_tokens", "max_tokens", "max_ratio")},
            **check_params(f, tgt_lang=tgt_lang, candidates=candidates),
        },
    )
    if not use_lm:
        return [kept]
    lm = {"models": [target_lm.fingerprint], "resources": {"lm_path": target_lm.location}}
    scores = run_stage(
        run,
        lm_tasks.LM_SCORE,
        inputs=[tokenized(run, kept, conf.tokenizer, {"tgt": "tgt"})],
        params={"column": "tgt", "lowercase": conf.lowercase},
        **lm,
    )
    cut = run_stage(run, lm_tasks.LM_CUT, inputs=[scores], n_shards=1, params={"drop_fraction": f.lm_drop})
    lm_kept = run_stage(
        run, dataclasses.replace(lm_tasks.LM_FILTER, view=view), inputs=[kept, scores], side={"cut": cut}, params={}
    )
    return [kept, lm_kept]


def synthetic_counts(run: Run, translated: ArtifactRef, steps: list[ArtifactRef]) -> dict[str, Any]:
    """The summary's count of one dataset's synthetic pairs: translated, dropped per reason by each filter step
    (in the filters' order), kept."""
    dropped: dict[str, int] = {}
    for ref in steps:
        report = {"stage": ref.stage, "fingerprint": ref.fingerprint, "shards": ref.n_shards}
        for reason, n in dropped_reasons(run.root, report, run.store).items():
            dropped[reason] = dropped.get(reason, 0) + n
    order = [*REASONS, *CHECKS, "lm_score"]
    dropped = dict(sorted(dropped.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    return {"translated": artifact_rows(translated), "dropped": dropped, "kept": artifact_rows(steps[-1])}


def teach(
    run: Run, conf: SelfTrainingConf, sampled: Sampled, language: tuple[str | None, list[str] | None] = (None, None)
) -> tuple[dict[str, ArtifactRef], ArtifactRef, dict[str, Any], dict[str, Any]]:
    """The teacher's half: the teacher's score on a sample of the bitext (flows/pipelines/model_scores.py), held to
    ``teacher.min_bleu`` (``gate``); translate each sampled monolingual dataset (beam 5), filter (``language``: the
    target language and the language identifier's candidates), `synthetic`; then the monolingual uncertainty
    bins, with coverage from the synthetic pairs' alignment. Returns (synthetic per dataset, the monolingual bins,
    the teacher's score, the synthetic pairs' counts per dataset: translated, dropped per reason, kept)."""
    teacher = nmt_model(run, conf.teacher, name="teacher", train_on=sampled.bitext)
    score = validate_nmt(run, teacher, conf.teacher, sampled.bitext, role="teacher", beam=conf.beam, lenpen=conf.lenpen)
    run_logger().info(model_line(score))
    gate(run, score, conf.teacher, key="self_training.teacher")
    target_lm = (
        train_lm(run, sampled.tokenized_bitext, column="tgt", conf=conf, name="target_lm") if conf.filter.lm_drop else None
    )
    params = {
        "model": loading(conf.teacher),
        "decode": decode_options(beam=conf.beam, lenpen=conf.lenpen, bound=conf.teacher),
        "model_fingerprint": teacher.fingerprint,
    }
    translated = {
        name: run_stage(
            run,
            TRANSLATE_MONO,
            inputs=[ref],
            params=params,
            models=[teacher.fingerprint],
            resources={"model_path": teacher.location, "runtime": runtime(conf.teacher)},
        )
        for name, ref in sampled.sampled.items()
    }
    steps = {
        name: filter_steps(run, ref, conf, target_lm, view="synthetic", language=language) for name, ref in translated.items()
    }
    synthetic = {name: s[-1] for name, s in steps.items()}
    counts = {name: synthetic_counts(run, translated[name], s) for name, s in steps.items()}
    # Fig. 6.3 for the monolingual side: coverage from force-aligning each sentence with its translation
    sides = {"src": "src", "tgt": "tgt"}
    pairs = [tokenized(run, ref, conf.tokenizer, sides) for ref in synthetic.values()]
    aligned = [
        run_stage(
            run,
            FORCE_ALIGN,
            inputs=[p],
            side={"alignment": sampled.alignment},
            params={"lowercase": conf.lowercase, "key": "parent_uid"},
        )
        for p in pairs
    ]
    several = {"alignments": len(aligned)} if len(aligned) > 1 else {}  # the last inputs of BINS: the alignments
    mono_bins = run_stage(
        run,
        BINS,
        inputs=[*sampled.scored_mono, *aligned],
        n_shards=1,
        params={"bins": conf.sampling.bins, "aligned": True, **several},
    )
    return synthetic, mono_bins, score, counts


def publish_report(run: Run, result: Sampled, conf: SelfTrainingConf, teacher: dict[str, Any]) -> dict[str, str]:
    """The uncertainty plot (Fig. 6.4) and the per-bin properties (Fig. 6.3): files under the cache's
    `reports/<run>/`, and the same as Prefect artifacts (markdown, table, link) on the flow run."""
    from flows.reports.plots import histogram, markdown_table, uncertainty_figure

    s = conf.sampling
    hist = histogram(Parts(tuple(p for ref in result.scored_mono for p in ref.paths())), "uncertainty")
    png = uncertainty_figure(
        hist,
        u_max=result.u_max,
        beta=s.beta,
        title=f"monolingual uncertainty, U_max = {result.u_max:.4f} (R = {s.percentile_r:g})",
    )
    bins = {name: ref.read(0) for name, ref in result.bins.items()}
    md = (
        f"### Uncertainty sampling\n\nU_max = **{result.u_max:.4f}** (R = {s.percentile_r:g}), β = {s.beta:g}, "
        f"method `{s.method}`.\n\nTeacher: {model_line(teacher)}.\n\n"
        f"**Monolingual bins** (coverage: each sentence force-aligned with its translation)\n\n"
        f"{markdown_table(bins['mono'])}\n**Bitext bins**\n\n{markdown_table(bins['bitext'])}\n"
    )
    return publish(
        run,
        stem="uncertainty",
        title=f"uncertainty sampling — {run.run_id}",
        markdown=md,
        table=bins["mono"],
        pngs={"uncertainty": png},
        sections=[
            ("Uncertainty and sampling probability (Fig. 6.4)", png),
            ("Monolingual sentences per uncertainty bin (Fig. 6.3)", bins["mono"]),
            ("Bitext source sentences per uncertainty bin (coverage from the symmetrised alignment)", bins["bitext"]),
            ("Sampling", f"method {s.method}, β = {s.beta:g}, R = {s.percentile_r:g}, U_max = {result.u_max:.6f}, seed {s.seed}"),
            (
                "Teacher (BLEU and chrF with sacrebleu; a weak teacher's translations are mostly filtered away)",
                f"{model_line(teacher)}  {teacher['signature']}",
            ),
        ],
    )


@pipeline_flow("self_training")
def self_training_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sample the monolingual data by uncertainty and translate the sample with the teacher; returns the
    run summary (also stored in the catalog)."""
    with Run.started(conf, pipeline="self_training", profile=profile, config=config) as run:
        result = sample_monolingual(run, conf)
        language = target_language(conf)
        synthetic, mono_bins, teacher, counts = teach(run, conf.self_training, result, language)
        result = dataclasses.replace(result, bins={**result.bins, "mono": mono_bins})
        reports = publish_report(run, result, conf.self_training, teacher)
    return run.finish(
        extra={
            "u_max": result.u_max,
            "reports": reports,
            "model_scores": {"teacher": teacher},
            "synthetic": {name: artifact_rows(ref) for name, ref in synthetic.items()},
            "synthetic_filters": {"counts": counts, "language_id": synthetic_language(conf.self_training, language[0])},
        }
    )


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``self_training`` run: U_max, each model's score, the synthetic pairs per dataset, and per
    dataset what each filter dropped of the teacher's translations."""
    filters = s.get("synthetic_filters", {})
    return [
        f"U_max = {s['u_max']:.6f}",
        *_model_lines(s.get("model_scores", {})),
        "synthetic pairs: " + ", ".join(f"{k} {v:,}" for k, v in s["synthetic"].items()),
        *(
            f"synthetic filters [{name}]: {c['translated']:,} translated, "
            + "".join(f"{n:,} {reason}, " for reason, n in c["dropped"].items())
            + f"{c['kept']:,} kept; language_id {filters['language_id']}"
            for name, c in filters.get("counts", {}).items()
        ),
    ]


def _model_lines(models: Mapping[str, Any]) -> list[str]:
    """A line per trained model's score on a sample of its data (model_scores.py)."""
    return [model_line(v) for v in models.values()]


def headline(s: Mapping[str, Any]) -> Headline:
    """A ``self_training`` run in one line: the synthetic pairs, and the teacher's BLEU on a sample of its training
    pairs (what the pairs are worth: the thesis' gain needs a teacher that translates)."""
    teacher = next(iter(s.get("model_scores", {}).values()), None)
    number = f"U_max {s['u_max']:.4f}"
    if teacher is not None:
        number = f"{teacher['model']} BLEU {teacher['BLEU']:.2f} on {teacher['sentences']:,} of its training pairs"
    return Headline(f"{sum(s['synthetic'].values()):,} synthetic pairs", number)
