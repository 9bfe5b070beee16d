"""n-gram LM stages (thesis ch. 6): score a text column with a KenLM model; drop the worst share of a bitext.

`lm_score` adds per-row log10 probability, tokens, cross-entropy (nats per token, </s> included) and
perplexity. The filter is a global cut over every shard, exact whatever the shard count: `lm_cut`
finds the ⌊f·N⌋-th worst row in the order (cross-entropy descending, uid ascending), and `lm_filter`
drops every row at or before it in that order, with reason `lm_score`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.lexicon import tokenize
from models.lm import NgramLM, train_arpa
from tasks.stage import Stage

LM_VERSION = "1"
SCORES = pa.schema([("uid", pa.string()), ("log10_prob", pa.float64()), ("tokens", pa.int64()),
                    ("cross_entropy", pa.float64()), ("perplexity", pa.float64())])


def _texts(column: pa.Array | pa.ChunkedArray, lowercase: bool) -> pa.Array:
    """The column as the LM sees it: whitespace tokens joined by one space (as the aligner sees it)."""
    return pc.binary_join(tokenize(column, lowercase=lowercase), " ")


def arpa_builder(parts: Sequence[Path], *, column: str, order: int, memory: str, lowercase: bool) -> Callable[[Path], None]:
    """A `build(path)` for `run_model_stage`: lmplz over one column of an artifact's parts, streamed."""
    def lines() -> Iterator[str]:
        for part in parts:
            yield from _texts(pq.read_table(part, columns=[column])[column], lowercase).to_pylist()

    def build(path: Path) -> None:
        train_arpa(lines(), path, order=order, memory=memory)

    return build


@functools.lru_cache(maxsize=4)
def _load(path: str) -> NgramLM:
    return NgramLM.load(Path(path))  # one load per process and model: ARPA parsing is the slow part


def lm_score(rows: pa.Table, *, column: str, lm_path: Path, lowercase: bool = False) -> pa.Table:
    """Per-row LM scores of ``column`` (`uid` kept for the filter's tie-break and the join)."""
    scores = _load(str(lm_path)).score(_texts(rows[column], lowercase))
    return pa.table({"uid": rows["uid"], **{c: scores[c] for c in SCORES.names[1:]}}, schema=SCORES)


def lm_cut(parts: Sequence[Path], *, drop_fraction: float) -> pa.Table:
    """The last row dropped: the ⌊drop_fraction·N⌋-th in (cross_entropy desc, uid asc) over all parts."""
    table = pa.concat_tables([pq.read_table(p, columns=["uid", "cross_entropy"]) for p in parts]) if parts else \
        SCORES.empty_table().select(["uid", "cross_entropy"])
    n, drop = table.num_rows, math.floor(drop_fraction * table.num_rows)
    if drop == 0:
        return pa.table({"rows": [n], "drop": [0], "cross_entropy": pa.array([None], pa.float64()),
                         "uid": pa.array([None], pa.string())})
    order = pc.sort_indices(table, [("cross_entropy", "descending"), ("uid", "ascending")])
    last = table.take(order[drop - 1:drop])
    return pa.table({"rows": [n], "drop": [drop], "cross_entropy": last["cross_entropy"], "uid": last["uid"]})


def lm_filter(rows: pa.Table, scores: pa.Table, *, cut: pa.Table) -> dict[str, pa.Table]:
    """Drop the rows at or before the cut in (cross_entropy desc, uid asc); kept + dropped = rows."""
    if not pc.all(pc.equal(rows["uid"], scores["uid"])).as_py() and rows.num_rows:
        raise ValueError("lm_filter: the scores are not the rows' scores, row for row")
    x, uid = cut["cross_entropy"][0], cut["uid"][0]
    if not x.is_valid:
        drop = pa.array([False] * rows.num_rows)
    else:
        xe = scores["cross_entropy"]
        drop = pc.or_(pc.greater(xe, x), pc.and_(pc.equal(xe, x), pc.less_equal(scores["uid"], uid)))
    dropped = rows.append_column("lm_cross_entropy", scores["cross_entropy"]).filter(drop)
    reason = pa.array(["lm_score"] * dropped.num_rows, pa.string())
    return {"part": rows.filter(pc.invert(drop)), "dropped": dropped.append_column("reason", reason)}


LM_SCORE = Stage("lm_score", "1", lm_score)
LM_CUT = Stage("lm_cut", "1", lm_cut, reduce=True)
LM_FILTER = Stage("lm_filter", "1", lm_filter)
