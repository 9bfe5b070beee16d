"""The demo profile at tiny sizes, every pipeline at once: ``--set`` overrides of ``conf/demo.yaml``.

What `make test`'s tiny demo (`augdag demo` with these overrides, tests/shared_demo.py) and the night killed and
retried beside it (tests/e2e/test_killed_night.py, compared byte for byte), the served night
(tests/e2e/test_served.py) and ``bench/chaos.py`` run: every pipeline and stage of the demo, as many side by side as their
dependencies allow (``nightly.parallel``), on 300 pairs with every fairseq model trained 10 updates (the teacher,
the identification model and the forward pivot keep one training: same data, same settings), 2 paraphrases per
sentence, all kept (β = 0), two students (the baseline and one arm tested against it): 106 s a nightly alone on
2 cores (2026-12-02's host; about 45 s when first measured on a faster one). Its numbers mean nothing; what the
tests check is that every pipeline completes with its outputs in the catalog, and that two nights give the same
bytes.

    augdag nightly --config demo $(python -c "from demo.tiny import TINY_SETS; print(*TINY_SETS)" | sed 's/^/--set /')
"""

from __future__ import annotations

_BITEXT = "SELECT src, tgt FROM bitext WHERE source = 'demo_bitext'"
_REJUVENATED = "SELECT src, tgt FROM rejuvenated WHERE source = 'demo_bitext'"

TINY_SETS: list[str] = [
    "nightly.parallel=10",  # every pipeline whose upstreams are done runs at once
    "demo.bitext_rows=300",
    "demo.mono_rows=200",
    "demo.labeled_rows=100",
    "demo.slots_rows=100",
    "demo.test_rows=50",
    *(
        f"{m}.train.max_update=10"
        for m in (
            "self_training.teacher",
            "rejuvenation.identification",
            "paraphrase.generator.forward",
            "paraphrase.generator.backward",
            "train_nmt.student",
        )
    ),
    f'train_nmt.experiments={{bitext: {{mix: {{bitext: "{_BITEXT}"}}}}, '
    f'rejuvenated: {{mix: {{rejuvenated: "{_REJUVENATED}"}}}}}}',
    "train_nmt.tests=[demo_test]",  # the profile's noised copies of demo_test measure the robust arm, not run here
    # 10-update models score BLEU ~0: the weak-model gate (min_bleu, conf/sections/nmt.py) is off for them
    *(f"{m}.min_bleu=0" for m in ("self_training.teacher", "rejuvenation.identification", "rejuvenation.rejuvenation")),
    "self_training.aligner.iterations=2",
    "paraphrase.candidates=2",
    "paraphrase.bottom_k_candidates=1",
    "paraphrase.beta=0",
    "train_classifier.steps_per_level=2",
    "train_classifier.cycles=1",
    "c2c.cluster_size=2",
    "c2c.model.epochs=1",
    "train_slot_tagger.tagger.epochs=1",
    "train_slot_tagger.seeds=[0]",  # one tagger per arm (the profile's three seeds are for its verdict's t-test)
    "mt_paraphrase.n=2",
]
TINY_DEMO = {"seed": 0, "bitext_rows": 300, "mono_rows": 200, "labeled_rows": 100, "slots_rows": 100, "test_rows": 50}
