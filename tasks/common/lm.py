"""n-gram LM stages (thesis ch. 6): score a text column with a KenLM model; drop the worst share of a corpus.

`lm_score` adds per-row log10 probability, tokens, cross-entropy (nats per token, </s> included) and
perplexity. The filter is a global cut over every shard, exact whatever the shard count: each shard's
k = ⌊f·N⌋ worst rows are the candidates (`lm_worst`), `lm_threshold` finds the k-th worst of them in the
order (cross-entropy, uid) descending, and `lm_filter` drops every row at or above it, reason `lm_score`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ArtifactError, ModelError
from models.lexicon import joined_tokens
from models.lm import SCORES as LM_SCORES
from models.lm import NgramLM, train_arpa
from storage.parts import Parts
from tasks.runtime.stage import Stage

LM_VERSION = "1"
SCORES = pa.schema([("uid", pa.string()), *zip(LM_SCORES.names, LM_SCORES.types)])


def arpa_builder(parts: Parts, *, column: str, order: int, memory: str, lowercase: bool) -> Callable[[Path], None]:
    """A `build(path)` for `run_model_stage`: lmplz over one column of an artifact's parts, streamed."""

    def lines() -> Iterator[str]:
        for part in parts.tables([column]):
            yield from joined_tokens(part[column], lowercase=lowercase).to_pylist()

    def build(path: Path) -> None:
        train_arpa(lines(), path, order=order, memory=memory)

    return build


@functools.lru_cache(maxsize=4)
def _load(path: str) -> NgramLM:
    return NgramLM.load(Path(path))  # one load per process and model: ARPA parsing is the slow part


def lm_score(rows: pa.Table, *, column: str, lm_path: Path, lowercase: bool = False) -> pa.Table:
    """Per-row LM scores of ``column`` (`uid` kept for the filter's tie-break and the join)."""
    scores = _load(str(lm_path)).score(joined_tokens(rows[column], lowercase=lowercase))
    return pa.table({"uid": rows["uid"], **{c: scores[c] for c in SCORES.names[1:]}}, schema=SCORES)


# ---- the LM filter: drop the worst drop_fraction by cross-entropy, exactly, over any sharding -------------


@dataclass(frozen=True)
class LmCut:
    """The global cut: drop a row iff (cross_entropy, uid) >= (``cross_entropy``, ``uid``), tuple order.

    ``uid`` None (``lm_threshold`` without uids): drop iff cross_entropy >= ``cross_entropy``.
    ``n_drop`` = 0: drop nothing. ``n_drop`` is k, the number of rows the cut was computed to drop.
    """

    cross_entropy: float
    uid: str | None
    n_drop: int


def lm_drop_count(n_rows: int, drop_fraction: float) -> int:
    """⌊drop_fraction · n_rows⌋, with ``drop_fraction`` taken as the decimal it prints as (0.29·100 = 29)."""
    if not 0.0 <= drop_fraction <= 1.0:
        raise ModelError(f"lm filter: drop_fraction = {drop_fraction}, must be in [0, 1]")
    return int((Decimal(repr(float(drop_fraction))) * n_rows).to_integral_value(ROUND_FLOOR))


def _ranked(cross_entropy: pa.Array | pa.ChunkedArray | np.ndarray) -> pa.Array:
    """Cross-entropy as float64 with null and NaN as +inf: a row that could not be scored ranks worst."""
    ce = pa.array(cross_entropy, pa.float64()) if isinstance(cross_entropy, np.ndarray) else cross_entropy
    if isinstance(ce, pa.ChunkedArray):
        ce = ce.combine_chunks()
    ce = pc.fill_null(ce.cast(pa.float64()), math.inf)
    return pc.if_else(pc.is_nan(ce), math.inf, ce)


def lm_worst(scored: pa.Table, *, n_drop: int, column: str = "cross_entropy", key: str = "uid") -> pa.Table:
    """Shard step: this shard's ``n_drop`` worst rows as (``column``, ``key``), worst first.

    The global n_drop worst rows are among the union of every shard's ``lm_worst``, so ``lm_threshold``
    over that union (with ``n_rows`` = the corpus size) gives the same cut as over the whole corpus,
    while the reduce step holds at most shards × n_drop rows.
    """
    _require(scored, column, key)
    n = min(n_drop, scored.num_rows)
    pairs = pa.table({column: _ranked(scored[column]), key: _uids(scored[key], scored.num_rows)})
    if n == 0:
        return pairs.slice(0, 0)
    order = [(column, "descending"), (key, "descending")]
    return pairs.take(pc.select_k_unstable(pairs, n, sort_keys=order)).sort_by(order)


def lm_threshold(
    scores: np.ndarray | pa.Array | pa.ChunkedArray,
    *,
    drop_fraction: float = 0.2,
    uids: Sequence[str] | pa.Array | pa.ChunkedArray | None = None,
    n_rows: int | None = None,
) -> LmCut:
    """The cut that drops the worst ⌊drop_fraction · N⌋ rows by cross-entropy (highest = worst).

    Rows are ranked by (cross_entropy, uid), both descending: ties in cross-entropy drop the larger uid
    (UTF-8 byte order) first, and null or NaN cross-entropy ranks above every number. The cut is the
    k-th worst pair, k = ``lm_drop_count(N, drop_fraction)``; ``lm_filter`` drops the rows at or above it:
    exactly k rows when the (cross_entropy, uid) pairs are distinct (after ``clean``'s dedup, as uids
    hash the text); identical rows always share one fate. Without ``uids``, every row tied with the k-th
    worst is dropped (k or more rows).

    Exact over shards, identical for any number of them:
        1. score each shard (``NgramLM.score``, columns added beside ``uid``);
        2. k = lm_drop_count(N, f); cut = lm_threshold(concat of every shard's ``lm_worst(shard, n_drop=k)``
           ``cross_entropy``, uids=its ``uid``, n_rows=N, drop_fraction=f) — or over every shard's whole
           score column, ``n_rows`` left out;
        3. ``lm_filter(shard, threshold=cut)`` for each shard.

    Args:
        scores: cross-entropy of every row, or of the candidates from ``lm_worst``.
        drop_fraction: f, the share of rows to drop, in [0, 1].
        uids: the tie-break key per score (the table's ``uid`` column).
        n_rows: N, the corpus size, when ``scores`` holds only the shards' candidates; default len(scores).
    """
    ce = _ranked(scores)
    k = lm_drop_count(len(ce) if n_rows is None else n_rows, drop_fraction)
    if k > len(ce):
        raise ModelError(
            f"lm_threshold: {len(ce)} scores for n_rows = {n_rows}, drop_fraction = "
            f"{drop_fraction}: expected at least {k}. Hint: lm_worst(shard, n_drop={k}) per shard"
        )
    if k == 0:
        return LmCut(math.inf, None, 0)
    if uids is None:
        return LmCut(float(np.partition(ce.to_numpy(), len(ce) - k)[len(ce) - k]), None, k)
    pairs = pa.table({"ce": ce, "uid": _uids(uids, len(ce))})
    order = [("ce", "descending"), ("uid", "descending")]
    kth = pairs.take(pc.select_k_unstable(pairs, k, sort_keys=order)).sort_by(order).slice(k - 1, 1)
    return LmCut(kth["ce"][0].as_py(), kth["uid"][0].as_py(), k)


def lm_filter(
    scored: pa.Table, *, threshold: LmCut | float, column: str = "cross_entropy", key: str = "uid"
) -> tuple[pa.Table, pa.Table]:
    """Keep a row iff (``column``, ``key``) < the cut, both compared as ``LmCut`` says; with a plain float
    ``threshold`` (a fixed bound, no quantile), keep iff ``column`` <= ``threshold``.

    Pure (no I/O), row-wise: filtering each shard with one global cut gives the same rows as filtering
    the concatenation. Null and NaN scores rank as +inf. Returns (kept, dropped + ``reason`` = "lm_score"),
    both in input order; kept + dropped = ``scored``.
    """
    if not isinstance(threshold, LmCut):
        _require(scored, column)
        drop = pc.greater(_ranked(scored[column]), float(threshold))
    elif threshold.n_drop == 0:
        _require(scored, column)
        drop = pa.array(np.zeros(scored.num_rows, bool))
    elif threshold.uid is None:
        _require(scored, column)
        drop = pc.greater_equal(_ranked(scored[column]), threshold.cross_entropy)
    else:
        _require(scored, column, key)
        ce, uid = _ranked(scored[column]), _uids(scored[key], scored.num_rows)
        at_cut = pc.and_(pc.equal(ce, threshold.cross_entropy), pc.greater_equal(uid, threshold.uid))
        drop = pc.or_(pc.greater(ce, threshold.cross_entropy), at_cut)
    dropped = scored.filter(drop)
    reason = pa.repeat(pa.scalar("lm_score"), dropped.num_rows)
    return scored.filter(pc.invert(drop)), dropped.append_column("reason", reason)


def _uids(values, n: int) -> pa.Array:
    """The tie-break key as one Arrow array: one per score, no nulls (a null would make the order partial)."""
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values, pa.string())
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if len(arr) != n:
        raise ModelError(f"lm filter: {len(arr)} uids for {n} scores: expected one uid per score")
    if arr.null_count:
        raise ModelError(
            f"lm filter: uid has {arr.null_count} null(s): expected a uid on every row. Hint: storage.schemas.with_uid"
        )
    return arr


def _require(table: pa.Table, *columns: str) -> None:
    if missing := [c for c in columns if c not in table.column_names]:
        raise ModelError(
            f"lm filter: column {', '.join(missing)} missing; found {', '.join(table.column_names)}. "
            "Hint: score the shard with NgramLM.score and keep its uid column"
        )


# ---- the stages over artifacts ---------------------------------------------------------------------------


def global_cut(shards: Sequence[pa.Table], *, drop_fraction: float) -> tuple[int, LmCut]:
    """(N, the cut) over every shard's (uid, cross_entropy): k = ⌊f·N⌋, candidates = each shard's k worst.
    Shared by the LM filter and rejuvenation's inactive split (lowest probability = highest cross-entropy)."""
    n_rows = sum(t.num_rows for t in shards)
    k = lm_drop_count(n_rows, drop_fraction)
    worst = [lm_worst(t, n_drop=k) for t in shards]
    cands = (
        pa.concat_tables(worst)
        if worst
        else pa.table({"cross_entropy": pa.array([], pa.float64()), "uid": pa.array([], pa.string())})
    )
    return n_rows, lm_threshold(cands["cross_entropy"], uids=cands["uid"], n_rows=n_rows, drop_fraction=drop_fraction)


def lm_cut(parts: Parts, *, drop_fraction: float) -> pa.Table:
    """The global cut over every shard's scores (``global_cut``) as a one-row table."""
    n_rows, cut = global_cut(list(parts.tables(["uid", "cross_entropy"])), drop_fraction=drop_fraction)
    return pa.table(
        {"rows": [n_rows], "n_drop": [cut.n_drop], "cross_entropy": [cut.cross_entropy], "uid": pa.array([cut.uid], pa.string())}
    )


def lm_filter_rows(rows: pa.Table, scores: pa.Table, *, cut: pa.Table) -> dict[str, pa.Table]:
    """One shard through the global cut: kept rows unchanged, dropped rows with their cross-entropy and reason."""
    if rows.num_rows and not rows["uid"].equals(scores["uid"]):
        raise ArtifactError(_misaligned("lm_filter", rows["uid"].to_pylist(), scores["uid"].to_pylist()))
    c = cut.to_pylist()[0]
    threshold = LmCut(c["cross_entropy"], c["uid"], c["n_drop"])
    kept, dropped = lm_filter(
        rows.append_column("lm_cross_entropy", scores["cross_entropy"]), threshold=threshold, column="lm_cross_entropy"
    )
    return {"part": kept.drop_columns(["lm_cross_entropy"]), "dropped": dropped}


def _misaligned(stage: str, rows: list[str], scores: list[str]) -> str:
    """Where a shard's rows and its scores part ways (column uid), for the error."""
    i = next((i for i, (r, s) in enumerate(zip(rows, scores)) if r != s), min(len(rows), len(scores)))
    row = f"uid {rows[i]!r}" if i < len(rows) else "no row"
    score = f"uid {scores[i]!r}" if i < len(scores) else "no score"
    return (
        f"{stage}: shard row {i + 1}, column uid: expected the scores row for row, found {row} in the rows and "
        f"{score} in the scores ({len(rows):,} rows, {len(scores):,} scores). Hint: the scores artifact is "
        "stale or of another input: re-run the lm_score stage on this artifact"
    )


LM_SCORE = Stage("lm_score", "1", lm_score)
LM_CUT = Stage("lm_cut", "1", lm_cut, reduce=True)
LM_FILTER = Stage("lm_filter", "1", lm_filter_rows)
