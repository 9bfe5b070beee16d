"""A trained model's score on pairs whose translation is known: a fixed sample of a bitext, translated and
scored (sacrebleu BLEU and chrF, tasks/common/evaluation.py), so that a weak teacher shows before its translations
are filtered away (issue 26, defect 9).

    validation_sample: the ``size`` pairs with the smallest md5(uid) (a spread over every shard, the same
      on every run and shard size) → translate_validation (the model, beam search) → evaluate

The pipelines' own models train on the whole bitext (no pair is held out, so their artifacts stay those of a
run without this check): their score on it is an upper bound of what they do on new text, and a model that
scores low even there is too weak to teach.
"""

from __future__ import annotations

import pyarrow as pa

from storage.engines import scratch_duckdb
from storage.parts import Parts
from tasks.common.evaluation import translate_test
from tasks.runtime.stage import Stage

COLUMNS = ("uid", "src", "tgt")


def validation_sample(parts: Parts, *, size: int = 200) -> pa.Table:
    """The ``size`` pairs (uid, src, tgt) of a bitext with the smallest md5(uid), in that order."""
    if not parts:
        return pa.table({c: pa.array([], pa.string()) for c in COLUMNS})
    with scratch_duckdb(name="validation") as con:
        return con.sql(
            f"SELECT uid, src, tgt FROM {parts.sql()} ORDER BY md5(uid), uid LIMIT $n", params={"n": size}
        ).to_arrow_table()


VALIDATION_SAMPLE = Stage("validation_sample", "1", validation_sample, reduce=True)
TRANSLATE_VALIDATION = Stage("translate_validation", "2", translate_test, tags=("gpu",))  # 2: bounded per chunk
