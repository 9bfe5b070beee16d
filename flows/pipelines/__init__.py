"""The built-in pipelines, one registry entry each (flows/engine/registry.py), in dependency order.

An entry names its pipeline's flow, summary lines, headline and (a training pipeline) effects as "module:function"
(all beside each other in flows/pipelines/<name>.py, imported only when the pipeline runs or its summary is printed),
the pipelines it reads, its views' docs (storage/views/) and its profile check. docs/architecture.md lists what adding
a pipeline touches.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from conf.errors import ConfError
from flows.engine.registry import Pipeline, register
from storage.views.classification_docs import EPIDA_VIEWS, PARAPHRASE_VIEWS, TRAIN_CLASSIFIER_VIEWS
from storage.views.docs import INGEST_VIEWS
from storage.views.mt_docs import MT_PARAPHRASE_VIEWS, ROBUSTNESS_VIEWS
from storage.views.slots_docs import C2C_VIEWS, TRAIN_SLOT_TAGGER_VIEWS
from storage.views.translation_docs import REJUVENATION_VIEWS, SELF_TRAINING_VIEWS, TRAIN_NMT_VIEWS

register(
    Pipeline(
        "ingest",
        "flows.pipelines.ingest:ingest_flow",
        views=INGEST_VIEWS,
        summary="flows.pipelines.ingest:summary_lines",
        headline="flows.pipelines.ingest:headline",
        description="read, validate, reject, shard, deduplicate and clean every dataset",
    )
)
register(
    Pipeline(
        "self_training",
        "flows.pipelines.self_training:self_training_flow",
        forks=True,
        reads=("ingest",),
        views=SELF_TRAINING_VIEWS,
        summary="flows.pipelines.self_training:summary_lines",
        headline="flows.pipelines.self_training:headline",
        check=lambda c: (c.self_training_datasets(), c.self_training.tokenizer.languages()),
        description="uncertainty sampling of monolingual data, translated by a teacher (thesis ch. 6)",
    )
)
register(
    Pipeline(
        "rejuvenation",
        "flows.pipelines.rejuvenation:rejuvenation_flow",
        forks=True,
        reads=("ingest",),
        views=REJUVENATION_VIEWS,
        summary="flows.pipelines.rejuvenation:summary_lines",
        headline="flows.pipelines.rejuvenation:headline",
        check=lambda c: c.rejuvenation_bitext(),
        description="inactive pairs found and rejuvenated by forward translation (thesis ch. 5)",
    )
)
register(
    Pipeline(
        "paraphrase",
        "flows.pipelines.paraphrase:paraphrase_flow",
        forks=True,
        reads=("ingest",),
        views=PARAPHRASE_VIEWS,
        summary="flows.pipelines.paraphrase:summary_lines",
        headline="flows.pipelines.paraphrase:headline",
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
        summary="flows.pipelines.mt_paraphrase:summary_lines",
        headline="flows.pipelines.mt_paraphrase:headline",
        check=lambda c: c.mt_paraphrase_bitext(),
        description="constrained paraphrases of one side of a bitext, Jaccard < 0.65, for train_nmt's mixes (Hu et al.)",
    )
)
register(
    Pipeline(
        "robustness",
        "flows.pipelines.robustness:robustness_flow",
        reads=("ingest",),
        views=ROBUSTNESS_VIEWS,
        summary="flows.pipelines.robustness:summary_lines",
        headline="flows.pipelines.robustness:headline",
        check=lambda c: check_robustness(c),
        description="OpusTrainer's modifiers (casing, typos, tags, noise, merges, prefixes) as rows with lineage",
    )
)
register(
    Pipeline(
        "train_nmt",
        "flows.pipelines.train_nmt:train_nmt_flow",
        forks=True,
        reads=("self_training", "rejuvenation", "mt_paraphrase", "robustness"),
        views=TRAIN_NMT_VIEWS,
        summary="flows.reports.train_nmt_report:summary_lines",
        headline="flows.pipelines.train_nmt:headline",
        effects="flows.pipelines.train_nmt:effects",
        check=lambda c: check_train_nmt(c),
        queries=lambda c: train_nmt_queries(c),
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
        summary="flows.pipelines.epida:summary_lines",
        headline="flows.pipelines.epida:headline",
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
        summary="flows.pipelines.train_classifier:summary_lines",
        headline="flows.pipelines.train_classifier:headline",
        effects="flows.pipelines.train_classifier:effects",
        check=lambda c: c.classifier_datasets(),
        description="a classifier per augmentation (curriculum, none, eda, epida) and seed; accuracy and macro-F1",
    )
)
register(
    Pipeline(
        "c2c",
        "flows.pipelines.c2c:c2c_flow",
        forks=True,
        reads=("ingest",),
        views=C2C_VIEWS,
        summary="flows.pipelines.c2c:summary_lines",
        headline="flows.pipelines.c2c:headline",
        check=lambda c: c.c2c_dataset(),
        description="cluster-to-cluster generation of slot-filling data, cross expansion, Table 5 diversity (C2C-GenDA)",
    )
)
register(
    Pipeline(
        "train_slot_tagger",
        "flows.pipelines.train_slot_tagger:train_slot_tagger_flow",
        forks=True,
        reads=("c2c",),
        views=TRAIN_SLOT_TAGGER_VIEWS,
        summary="flows.pipelines.train_slot_tagger:summary_lines",
        headline="flows.pipelines.train_slot_tagger:headline",
        effects="flows.pipelines.train_slot_tagger:effects",
        check=lambda c: c.slot_tagger_datasets(),
        description="a slot tagger per arm (original, original + c2c) and seed; span F1 (conlleval)",
    )
)


def train_nmt_queries(conf: Any) -> list[str]:
    """Every SQL statement of train_nmt's arms, their continued-training mixes included (an arm without a mix reads
    `bitext`): the nightly runs train_nmt after the pipelines that fill the views they read."""
    arms = conf.train_nmt.arms({"bitext": "SELECT src, tgt FROM bitext"}).values()
    return [sql for arm in arms for mix in (arm.mix, arm.continue_on.mix if arm.continue_on else {}) for sql in mix.values()]


def check_robustness(conf: Any) -> None:
    """The robustness section: a bitext, and OpusTrainer's modifier names and keys (tasks/robustness/spec.py)."""
    from tasks.robustness.mono import MONO_MODIFIERS
    from tasks.robustness.spec import parse_modifier

    r = conf.robustness
    conf.dataset_of_kind(r.bitext, "bitext", "robustness.bitext")
    names = []
    for i, entry in enumerate(r.modifiers):
        keyed_modifier_error(lambda key, e=entry: parse_modifier(e, key), f"robustness.modifiers.{i}")
        names.append(next(iter(entry), None))
    for i, mono in enumerate(r.mono):
        conf.dataset_of_kind(mono, "mono", f"robustness.mono.{i}")
    if r.mono and not any(parse_modifier(e, "").name in MONO_MODIFIERS for e in r.modifiers):
        raise ValueError(
            f"robustness.mono: none of robustness.modifiers ({', '.join(map(str, names)) or 'empty'}) changes one "
            f"sentence on its own; the monolingual datasets take {', '.join(MONO_MODIFIERS)}"
        )


def check_train_nmt(conf: Any) -> None:
    """train_nmt's test sets: held-out bitexts, and a noised one's modifiers those that keep its pairs one for one."""
    from tasks.robustness.stage import held_out_modifiers

    conf.train_nmt_test()
    for i, test in enumerate(conf.train_nmt.tests):
        for j, entry in enumerate([] if isinstance(test, str) else test.entries()):
            keyed_modifier_error(lambda key, e=entry: held_out_modifiers([e], key), f"train_nmt.tests.{i}.modifiers.{j}")


def keyed_modifier_error(parse: Callable[[str], object], key: str) -> None:
    """``parse(key)``; its ConfError as a ValueError that starts with the dotted key (``robustness.modifiers.1: Typos:
    char_swp is not a key ...``), which the loader places at the key's file line."""
    try:
        parse(key)
    except ConfError as e:
        message = re.sub(rf"^{re.escape(key)}(\[0\])? \((\w+)\): ", rf"{key}: \2: ", str(e))
        raise ValueError(re.sub(rf"^{re.escape(key)}\[0\]: ", f"{key}: ", message)) from None
