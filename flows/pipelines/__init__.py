"""The built-in pipelines, one registry entry each (flows/engine/registry.py), in dependency order.

Adding a pipeline: its flow module under flows/, its conf section (conf/schema.py), its entry here
(name, flow, the pipelines it reads, its views' docs in storage/views/docs.py, its summary lines, its
profile check), its tests and its lines in the demo profile. docs/architecture.md walks through one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flows.engine.registry import Pipeline, register
from flows.pipelines.model_scores import model_line
from storage.views.classification_docs import EPIDA_VIEWS, PARAPHRASE_VIEWS, TRAIN_CLASSIFIER_VIEWS
from storage.views.docs import INGEST_VIEWS
from storage.views.mt_docs import MT_PARAPHRASE_VIEWS
from storage.views.slots_docs import C2C_VIEWS, TRAIN_SLOT_TAGGER_VIEWS
from storage.views.translation_docs import REJUVENATION_VIEWS, SELF_TRAINING_VIEWS, TRAIN_NMT_VIEWS


def model_lines(models: Mapping[str, Any]) -> list[str]:
    """A line per trained model's score on a sample of its data (flows/pipelines/model_scores.py)."""
    return [model_line(v) for v in models.values()]


def self_training_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``self_training`` run: U_max, each model's score and the synthetic pairs per dataset."""
    return [
        f"U_max = {s['u_max']:.6f}",
        *model_lines(s.get("model_scores", {})),
        "synthetic pairs: " + ", ".join(f"{k} {v:,}" for k, v in s["synthetic"].items()),
    ]


def rejuvenation_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``rejuvenation`` run: each validation model's score, then the active, inactive,
    rejuvenated and unscored pairs."""
    rj = s["rejuvenation"]
    unscored = rj["unscored"]
    return [
        *model_lines(rj.get("validation", {})),
        f"rejuvenation: {rj['active']:,} active, {rj['inactive']:,} inactive, {rj['rejuvenated']:,} rows in "
        f"`rejuvenated`; {unscored['count']:,} pair(s) could not be scored (kept active)"
        + (f": {', '.join(unscored['uids'])}" if unscored["count"] else ""),
    ]


def train_nmt_lines(s: Mapping[str, Any]) -> list[str]:
    """Per test set one line per arm: the baseline's mean ± sd (and signature), each other arm's Δ and paired p."""
    tn, lines = s["train_nmt"], []
    for test in tn["tests"]:
        rows = {(r["arm"], r["metric"]): r for r in tn["summary"] if r["testset"] == test}
        sig = next(e["signature"] for e in tn["evaluation"] if e["testset"] == test and e["metric"] == "BLEU")
        for arm, a in tn["arms"].items():
            b, c, n = rows[(arm, "BLEU")], rows[(arm, "chrF")], len(a["seeds"])
            score = (
                f"BLEU = {b['mean']:.2f} ± {b['sd']:.2f}, chrF = {c['mean']:.2f} ± {c['sd']:.2f} on {test} "
                f"({n} seed{'s' if n > 1 else ''})"
            )
            lines.append(
                f"{a['label']} (baseline): {score}  {sig}"
                if arm == tn["baseline"]
                else f"{a['label']}: {b['delta']:+.1f} BLEU (p = {b['p_value']:.2g}), {c['delta']:+.1f} chrF "
                f"(p = {c['p_value']:.2g}); {score}"
            )
    return lines


def paraphrase_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``paraphrase`` run: candidates, dropped by Eq. 3, curriculum rows, the sentences
    short of the bag size, then each model that ran."""
    pp = s["paraphrase"]
    short = pp["shortfall"]
    return [
        f"paraphrase: {pp['candidates']:,} candidates, {pp['dropped']:,} dropped by Eq. 3, {pp['curriculum']:,} "
        f"curriculum rows; {short['count']:,} sentence(s) short of the bag size"
        + (f": {', '.join(short['rows'])}" if short["count"] else ""),
        *(f"  {role}: {what}" for role, what in pp["ran"].items()),
    ]


def train_classifier_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``train_classifier`` run: per augmentation, each metric's mean ± sd over the seeds."""
    tc = s["train_classifier"]
    return [
        f"{e['metric']} = {e['mean']:.4f} ± {e['sd']:.4f} on {tc['testset']} ({e['augmentation']}"
        + (f", schedule {tc['schedule']}" if e["augmentation"] == "curriculum" else "")
        + f", {e['seeds']} seed{'s' if e['seeds'] > 1 else ''})"
        for e in tc["summary"]
    ]


def epida_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of an ``epida`` run: per round the candidates kept (overall and per method), then the
    feedback classifier's scores on the test set."""
    ep = s["epida"]
    rounds: dict[int, list[Mapping[str, Any]]] = {}
    for c in ep["counts"]:
        rounds.setdefault(c["round"], []).append(c)
    return [
        f"epida ({ep['mode']}, {'online' if ep['online'] else 'one-time'}, K = {ep['amplification']}, "
        f"m = {ep['m']}) round {r}: kept {sum(c['selected'] for c in cs):,} of {sum(c['candidates'] for c in cs):,} "
        "(" + ", ".join(f"{c['method']} {c['selected'] / max(c['candidates'], 1):.0%}" for c in cs) + ")"
        for r, cs in sorted(rounds.items())
    ] + [
        f"{e['metric']} = {e['score']:.4f} on {ep['testset']} (the feedback classifier)  {e['signature']}"
        for e in ep["evaluation"]
    ]


def mt_paraphrase_lines(s: Mapping[str, Any]) -> list[str]:
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


def c2c_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``c2c`` run: delexicalised rows, cluster pairs, generated and new rows, then the
    delexicalised diversity when anything was generated."""
    c = s["c2c"]
    delex = next((d for d in c["diversity"] if d["level"] == "delexicalised"), None)
    return [
        f"c2c: {c['delexicalised']:,} delexicalised rows ({c['malformed_bio']:,} malformed BIO rejected, "
        f"{c['no_slots']:,} without slots), {c['clusters']:,} cluster pairs in {c['frames_paired']:,} of "
        f"{c['frames']:,} frames; {c['generated']:,} generated, {c['kept']:,} new rows in `c2c_generated`"
    ] + (
        [
            f"c2c diversity (delexicalised): Inter ratio {delex['inter_ratio']:.1%}, Inter MED {delex['inter_med']:.2f}, "
            f"Intra ratio {delex['intra_ratio']:.1%}, Intra MED {delex['intra_med']:.2f}"
        ]
        if delex and delex["generated"]
        else []
    )


def train_slot_tagger_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``train_slot_tagger`` run: per arm, its rows and F1's mean ± sd over the seeds."""
    t = s["train_slot_tagger"]
    return [
        f"{e['metric']} = {e['mean']:.4f} ± {e['sd']:.4f} on {t['testset']} ({e['arm']}, {t['arms'][e['arm']]:,} "
        f"rows, {e['seeds']} seed{'s' if e['seeds'] > 1 else ''})"
        for e in t["summary"]
        if e["metric"] == "f1"
    ]


register(
    Pipeline(
        "ingest",
        "flows.pipelines.ingest:ingest_flow",
        views=INGEST_VIEWS,
        description="read, validate, reject, shard, deduplicate and clean every dataset",
    )
)
register(
    Pipeline(
        "self_training",
        "flows.pipelines.self_training:self_training_flow",
        reads=("ingest",),
        views=SELF_TRAINING_VIEWS,
        summary=self_training_lines,
        check=lambda c: (c.self_training_datasets(), c.self_training.tokenizer.languages()),
        description="uncertainty sampling of monolingual data, translated by a teacher (thesis ch. 6)",
    )
)
register(
    Pipeline(
        "rejuvenation",
        "flows.pipelines.rejuvenation:rejuvenation_flow",
        reads=("ingest",),
        views=REJUVENATION_VIEWS,
        summary=rejuvenation_lines,
        check=lambda c: c.rejuvenation_bitext(),
        description="inactive pairs found and rejuvenated by forward translation (thesis ch. 5)",
    )
)
register(
    Pipeline(
        "paraphrase",
        "flows.pipelines.paraphrase:paraphrase_flow",
        reads=("ingest",),
        views=PARAPHRASE_VIEWS,
        summary=paraphrase_lines,
        check=lambda c: c.paraphrase_generator(),
        description="bottom-k paraphrases, mutual-implication filter, difficulty levels (PCC)",
    )
)
register(
    Pipeline(
        "mt_paraphrase",
        "flows.pipelines.mt_paraphrase:mt_paraphrase_flow",
        reads=("ingest",),
        views=MT_PARAPHRASE_VIEWS,
        summary=mt_paraphrase_lines,
        check=lambda c: c.mt_paraphrase_bitext(),
        description="constrained paraphrases of one side of a bitext, Jaccard < 0.65, for train_nmt's mixes (Hu et al.)",
    )
)
register(
    Pipeline(
        "train_nmt",
        "flows.pipelines.train_nmt:train_nmt_flow",
        reads=("self_training", "rejuvenation", "mt_paraphrase"),
        views=TRAIN_NMT_VIEWS,
        summary=train_nmt_lines,
        check=lambda c: c.train_nmt_test(),
        description="a student NMT model per arm (a SQL mix: bitext, rejuvenated, synthetic, paraphrased) and seed; "
        "BLEU and chrF per test set, paired significance against the baseline",
    )
)
register(
    Pipeline(
        "epida",
        "flows.pipelines.epida:epida_flow",
        reads=("ingest",),
        views=EPIDA_VIEWS,
        summary=epida_lines,
        check=lambda c: c.epida_datasets(),
        description="EDA/CWE/back-translation candidates selected by a classifier's feedback, REM + CEM (EPiDA)",
    )
)
register(
    Pipeline(
        "train_classifier",
        "flows.pipelines.train_classifier:train_classifier_flow",
        reads=("paraphrase", "epida"),
        views=TRAIN_CLASSIFIER_VIEWS,
        summary=train_classifier_lines,
        check=lambda c: c.classifier_datasets(),
        description="a classifier per augmentation (curriculum, none, eda, epida) and seed; accuracy and macro-F1",
    )
)
register(
    Pipeline(
        "c2c",
        "flows.pipelines.c2c:c2c_flow",
        reads=("ingest",),
        views=C2C_VIEWS,
        summary=c2c_lines,
        check=lambda c: c.c2c_dataset(),
        description="cluster-to-cluster generation of slot-filling data, cross expansion, Table 5 diversity (C2C-GenDA)",
    )
)
register(
    Pipeline(
        "train_slot_tagger",
        "flows.pipelines.train_slot_tagger:train_slot_tagger_flow",
        reads=("c2c",),
        views=TRAIN_SLOT_TAGGER_VIEWS,
        summary=train_slot_tagger_lines,
        check=lambda c: c.slot_tagger_datasets(),
        description="a slot tagger per arm (original, original + c2c) and seed; span F1 (conlleval)",
    )
)
