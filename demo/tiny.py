"""The demo profile at tiny sizes, every pipeline at once: ``--set`` overrides of ``conf/demo.yaml``.

What the determinism test (tests/test_determinism.py) and ``bench/chaos.py`` run: every pipeline and stage of
the demo, as many side by side as the dependencies allow (``nightly.parallel``), on a corpus and with models
small enough that one nightly takes well under a minute on 2 cores. The numbers it produces mean nothing; what
is checked is that two runs give the same bytes.

    augdag nightly --config demo $(python -c "from demo.tiny import TINY_SETS; print(*TINY_SETS)" | sed 's/^/--set /')
"""

from __future__ import annotations

# the NMT sections that train a model when none is given; teacher and identification (and the paraphraser's
# forward model) share one training when their settings are equal, so every section gets the same ones
_NMT_SECTIONS = ("self_training.teacher", "rejuvenation.identification", "rejuvenation.rejuvenation",
                 "train_nmt.student", "paraphrase.generator.forward", "paraphrase.generator.backward")

TINY_SETS: list[str] = [
    "nightly.parallel=10",  # every pipeline whose upstreams are done runs at once
    "demo.bitext_rows=400", "demo.mono_rows=500", "demo.labeled_rows=120", "demo.slots_rows=300", "demo.test_rows=60",
    "shard_size=150",
    *(f"{section}.train.max_update=20" for section in _NMT_SECTIONS),
    "train_nmt.experiments.para_10_1_ct.continue_on.max_update=5",
    "mt_paraphrase.share=0.1",
    "paraphrase.candidates=8", "paraphrase.bottom_k_candidates=2",
    "paraphrase.beta=0.01",  # 20 updates make poor paraphrasers: keep (nearly) every candidate for the curriculum
    "epida.pretrain_epochs=1", "epida.epochs=2", "epida.every_epochs=1",
    "train_classifier.steps_per_level=5",
    "c2c.model.epochs=2",
    "train_slot_tagger.tagger.epochs=1",
]
