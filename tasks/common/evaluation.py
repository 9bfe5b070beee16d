"""Evaluate a translation model on a test set: corpus BLEU and chrF with sacrebleu, signatures kept.

The translations are a per-shard stage (the slow part, on the GPU when there is one); the corpus
scores are a reduce step over every shard, since BLEU and chrF are corpus statistics, not row means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from conf.errors import InputError
from storage.parts import Parts
from tasks.common.nmt import Decode, Loading, Runtime, translate_column
from tasks.runtime.stage import Stage

SCORES = pa.schema([("metric", pa.string()), ("score", pa.float64()), ("signature", pa.string()), ("sentences", pa.int64())])


def translate_test(rows: pa.Table, *, model: Loading, model_path: Path, runtime: Runtime, decode: Decode) -> pa.Table:
    """The test set's sources translated: uid, src, the reference `ref` and the hypothesis `hyp`."""
    hyp = translate_column(rows["src"], model=model, model_path=model_path, runtime=runtime, decode=decode)
    return pa.table({"uid": rows["uid"], "src": rows["src"], "ref": rows["tgt"], "hyp": hyp})


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> pa.Table:
    """sacrebleu's corpus BLEU (13a tokenisation) and chrF (n = 6, β = 2) with their signatures."""
    from sacrebleu.metrics import BLEU, CHRF

    if not hyps:
        raise InputError("evaluation: the test set is empty")
    rows = []
    for name, metric in (("BLEU", BLEU()), ("chrF", CHRF())):
        score = metric.corpus_score(list(hyps), [list(refs)])
        rows.append(
            {"metric": name, "score": float(score.score), "signature": str(metric.get_signature()), "sentences": len(hyps)}
        )
    return pa.Table.from_pylist(rows, schema=SCORES)


def mean_sd(scores: Sequence[Mapping[str, Any]], *, by: str) -> list[dict[str, Any]]:
    """Mean ± sample sd (0 for one seed) of each metric over the seeds of each ``by`` group (an arm), in the
    order the groups first appear."""
    import statistics

    groups: dict[tuple[Any, str], list[float]] = {}
    for s in scores:
        groups.setdefault((s[by], s["metric"]), []).append(s["score"])
    return [
        {by: g, "metric": m, "seeds": len(v), "mean": statistics.fmean(v), "sd": statistics.stdev(v) if len(v) > 1 else 0.0}
        for (g, m), v in groups.items()
    ]


def evaluate(parts: Parts) -> pa.Table:
    """Corpus BLEU and chrF (sacrebleu) of every test translation."""
    table = parts.table(["hyp", "ref"])
    return corpus_scores(table["hyp"].to_pylist(), table["ref"].to_pylist())


TRANSLATE_TEST = Stage("translate_test", "2", translate_test, view="test_translations", tags=("gpu",))  # 2: bounded
EVALUATE = Stage("evaluate", "1", evaluate, reduce=True)
