"""Uncertainty-based sampling of monolingual data (thesis ch. 6, Eq. 6.3–6.7) and its baselines.

    U(x) = 1/T · Σ_t H(x_t)                         (Eq. 6.3; a word missing from the lexicon adds 0)
    WR(x) = −1/T · Σ_t ln p(x_t)                     (Eq. 6.5, word rarity; an unseen word counts once)
    U_max = the R-th percentile of U over the bitext source sentences (nearest rank, R = 90)
    u' = u if u ≤ U_max else max(2·U_max − u, 0)     (Eq. 6.7: α·u)
    p ∝ u'^β                                         (Eq. 6.6, β = 2)

Drawing without replacement with p ∝ w is Efraimidis & Spirakis's A-ES: every row gets the key
ln(v)/w with v uniform in (0, 1), and the sample is the `budget` largest keys. Here v is a seeded
hash of the row's uid, so a row's key does not depend on which shard it is in or on how many shards
there are: each shard keeps only its own top `budget` keys (the global top `budget` is among them), and
one reduce picks the global top `budget`, ties broken by uid. The same seed gives the same sample
whatever the shard count, and no step holds the corpus in memory. The baselines use the same two
steps with another key: `random` (w = 1), `word_rarity` (highest WR first), `srclm` (lowest source-LM
cross-entropy first).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError, InputError
from models.lexicon import WordScores
from storage.engines import scratch_duckdb
from storage.parts import Parts
from storage.schemas import SENTENCE
from tasks.runtime.stage import Stage

METHODS = ("uncertainty", "random", "word_rarity", "srclm")
SCORED = pa.schema(
    [
        ("uid", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("tokens", pa.int32()),
        ("uncertainty", pa.float64()),
        ("word_rarity", pa.float64()),
    ]
)
SELECTED = pa.schema(
    [
        ("uid", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("uncertainty", pa.float64()),
        ("p", pa.float64()),
        ("rank", pa.int64()),
    ]
)
SAMPLED = pa.schema(
    [
        ("uid", pa.string()),
        ("text", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("uncertainty", pa.float64()),
        ("p", pa.float64()),
        ("rank", pa.int64()),
        ("method", pa.string()),
    ]
)


def sentence_uncertainty(rows: pa.Table, word_uncertainty: pa.Table, *, column: str, lowercase: bool = False) -> pa.Table:
    """U (Eq. 6.3) and WR (Eq. 6.5) of every row's ``column``; needs ``uid, source, line``; one row out per row in.

    ``word_uncertainty`` has ``src, H, freq`` (models.lexicon.word_uncertainty). Tokens are split as
    ``models.lexicon.tokenize`` splits them, in one pass over the text bytes (``WordScores``).
    """
    texts = pc.utf8_lower(rows[column]) if lowercase else rows[column]
    tokens, u, rarity = WordScores(word_uncertainty).score(texts)
    return pa.table(
        {
            "uid": rows["uid"],
            "source": rows["source"],
            "line": rows["line"],
            "tokens": tokens,
            "uncertainty": u,
            "word_rarity": rarity,
        },
        schema=SCORED,
    )


def u_max(parts: Parts, *, percentile_r: float = 90.0) -> pa.Table:
    """U_max: sort the bitext source uncertainties ascending and take the one at R % (nearest rank)."""
    u = parts.table(["uncertainty"])["uncertainty"].to_numpy() if parts else np.zeros(0)
    if u.size == 0:
        raise InputError("U_max: the bitext has no scored sentence (every pair was rejected or dropped)")
    value = float(np.percentile(u, percentile_r, method="inverted_cdf"))
    return pa.table({"u_max": [value], "percentile_r": [float(percentile_r)], "rows": [u.size]})


def sampling_weight(u: np.ndarray, *, u_max: float, beta: float = 2.0) -> np.ndarray:
    """(α·u)^β of Eq. 6.6–6.7: u' = u up to U_max, then mirrored down to 0 at 2·U_max."""
    u = np.asarray(u, dtype=np.float64)
    clipped = np.where(u <= u_max, u, np.maximum(2.0 * u_max - u, 0.0))
    return clipped**beta


def sampling_probability(u: np.ndarray, *, u_max: float, beta: float = 2.0) -> np.ndarray:
    """p of Eq. 6.6 over the rows ``u`` (the whole monolingual set)."""
    w = sampling_weight(u, u_max=u_max, beta=beta)
    return w / w.sum()


_HEX = np.zeros(256, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)


def uid_uniform(uid: pa.Array | pa.ChunkedArray, seed: int) -> np.ndarray:
    """A uniform draw in (0, 1) per row, a function of (seed, uid) only: splitmix64 of the uid's first 64 bits."""
    arr = uid.combine_chunks() if isinstance(uid, pa.ChunkedArray) else uid
    n = len(arr)
    if n == 0:
        return np.zeros(0)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + n + 1]
    if np.any(bad := np.diff(offsets) != 32):
        row = int(np.argmax(bad))
        raise InputError(
            f"uid_uniform: row {row}: uid {arr[row].as_py()!r} is not 32 hex characters (storage.schemas.with_uid makes them)"
        )
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
    nibbles = _HEX[data[offsets[0] : offsets[-1]].reshape(n, 32)[:, :16]]  # every uid is 32 bytes: no gather
    x = np.ascontiguousarray((nibbles[:, 0::2] << 4) | nibbles[:, 1::2]).view(">u8").ravel().astype(np.uint64)
    with np.errstate(over="ignore"):
        z = x ^ np.uint64((seed * 0x9E3779B97F4A7C15) % 2**64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53


def sample_keys(
    scored: pa.Table,
    lm_scores: pa.Table | None = None,
    *,
    u_max: pa.Table,
    method: str = "uncertainty",
    beta: float = 2.0,
    seed: int = 0,
    budget: int,
) -> pa.Table:
    """One shard's candidates: its rows with p > 0 and their key, only the shard's top ``budget`` kept.

    ``shard_eligible`` (rows with p > 0) and ``shard_weight_0..2`` (Σ w as ``sum_partials``) describe the
    whole shard, so the reduce knows the totals although it sees at most ``budget`` rows per shard.
    """
    u = scored["uncertainty"].to_numpy()
    if method == "uncertainty":
        weight = sampling_weight(u, u_max=u_max["u_max"][0].as_py(), beta=beta)
        with np.errstate(divide="ignore"):
            key = np.log(uid_uniform(scored["uid"], seed)) / weight
    elif method == "random":
        weight = np.ones(len(u))
        key = np.log(uid_uniform(scored["uid"], seed))
    elif method == "word_rarity":
        weight, key = np.ones(len(u)), scored["word_rarity"].to_numpy()
    elif method == "srclm":
        if lm_scores is None or not pc.all(pc.equal(lm_scores["uid"], scored["uid"])).as_py():
            raise InputError(
                "sample_keys(method='srclm'): the source-LM scores are not this shard's rows, row "
                "for row (a stale lm_score artifact?)"
            )
        weight, key = np.ones(len(u)), -lm_scores["cross_entropy"].to_numpy()
    else:
        raise ConfError(f"self_training.sampling.method: {method!r}, expected one of {', '.join(METHODS)}")
    eligible = weight > 0
    table = pa.table(
        {"uid": scored["uid"], "source": scored["source"], "line": scored["line"], "uncertainty": u, "weight": weight, "key": key}
    ).filter(pa.array(eligible))
    if table.num_rows > budget:
        order = pc.sort_indices(table, [("key", "descending"), ("uid", "ascending")])
        table = table.take(order[:budget])
    n = table.num_rows
    table = table.append_column("shard_eligible", pa.array(np.full(n, int(eligible.sum())), pa.int64()))
    for i, part in enumerate(sum_partials(weight)):
        table = table.append_column(f"shard_weight_{i}", pa.array(np.full(n, part)))
    return table


def sum_partials(values: np.ndarray, terms: int = 3) -> list[float]:
    """Σ values as a few floats whose exact sum is Σ values to ~2^-150 relative: merged with ``math.fsum``,
    the shards' totals give the same correctly rounded total whatever the shard boundaries."""
    rest, out = list(np.asarray(values, dtype=np.float64)), []
    for _ in range(terms):
        s = math.fsum(rest)
        out.append(s)
        rest.append(-s)
    return out


def select_sample(*key_parts: Parts, budget: int, method: str = "uncertainty", memory_limit: str = "512MB") -> pa.Table:
    """The global top ``budget`` keys over every shard of every monolingual dataset (ties: smaller uid first).

    Columns uid, source, line, uncertainty, p (the row's probability under Eq. 6.6 over all rows, for
    `uncertainty`; 1/N for the others), rank (1 = largest key); sorted by source and line, so that each
    shard of `take_sample` reads its own slice. Refuses when fewer rows have p > 0.
    """
    parts = Parts(tuple(p for ps in key_parts for p in ps.paths))
    with scratch_duckdb(memory_limit=memory_limit, name="sample") as con:
        src = parts.sql(filename=True)
        shards = (
            con.execute(
                f"SELECT any_value(shard_eligible), any_value(shard_weight_0), any_value(shard_weight_1), "
                f"any_value(shard_weight_2) FROM {src} GROUP BY filename"
            ).fetchall()
            if parts
            else []
        )
        eligible, weight = sum(s[0] for s in shards), math.fsum(w for s in shards for w in s[1:])
        if eligible < budget:
            why = "U > 0 and U < 2·U_max" if method == "uncertainty" else "a score"
            raise InputError(
                f"sampling ({method}): only {eligible:,} monolingual rows have p > 0 ({why}), fewer than the budget "
                f"{budget:,}. Hint: lower self_training.sampling.budget (or budget_ratio), or add monolingual data"
            )
        p = "weight / $total" if method == "uncertainty" else "1.0 / $total"
        total = weight if method == "uncertainty" else float(eligible)
        table = con.sql(
            f"SELECT uid, source, line, uncertainty, {p} AS p, row_number() OVER (ORDER BY key DESC, uid) AS rank "
            f"FROM (SELECT * FROM {src} ORDER BY key DESC, uid LIMIT $budget) ORDER BY source, line, uid",
            params={"total": total, "budget": budget},
        ).to_arrow_table()
    return table.cast(SELECTED)


def take_sample(rows: pa.Table, selected: pa.Table | Parts, *, method: str = "uncertainty", split: bool = False) -> pa.Table:
    """The shard's rows that were drawn, in input order, with their U, p and rank (the `sampled_mono` view).

    ``selected`` (`select_sample`'s rows, sorted by source and line) comes as ``Parts`` in the flow: each
    shard reads only the row groups of its own lines, never the whole sample (8M rows at the thesis' size).
    ``split``: the rows are sentences of split lines (tasks/ingest/sentences.py); their ``sentence`` follows ``line``
    (the flow sets it only then, so the fingerprints of unsplit datasets stay what they were)."""
    if rows.num_rows:  # only the drawn rows of this shard's lines: a small hash set, not the whole sample's
        lo, hi = pc.min_max(rows["line"]).values()
        mine = pc.field("source").isin(pc.unique(rows["source"])) & (pc.field("line") >= lo) & (pc.field("line") <= hi)
        selected = selected.filtered(mine) if isinstance(selected, Parts) else selected.filter(mine)
    elif isinstance(selected, Parts):
        selected = pa.table({c: pa.array([], t) for c, t in zip(SELECTED.names, SELECTED.types)})
    idx = pc.index_in(rows["uid"], value_set=selected["uid"])
    keep = pc.is_valid(idx)
    picked, at = rows.filter(keep), pc.drop_null(idx)
    sample = pa.table(
        {
            "uid": picked["uid"],
            "text": picked["text"],
            "source": picked["source"],
            "line": picked["line"],
            "uncertainty": pc.take(selected["uncertainty"], at),
            "p": pc.take(selected["p"], at),
            "rank": pc.take(selected["rank"], at),
            "method": pa.array([method] * picked.num_rows, pa.string()),
        },
        schema=SAMPLED,
    )
    if split:
        if "sentence" not in rows.column_names:
            raise InputError("sampled_mono: split is set but the rows have no `sentence` column")
        sample = sample.add_column(SAMPLED.get_field_index("line") + 1, SENTENCE, picked["sentence"])
    return sample


def uncertainty_bins(
    *inputs: Parts, bins: int = 5, aligned: bool = False, alignments: int = 1, memory_limit: str = "512MB"
) -> pa.Table:
    """Linguistic properties per uncertainty bin (Fig. 6.3): rows ranked by U (ties: uid) into ``bins``
    equal-size bins; mean length, word rarity and, with ``aligned``, coverage (the share of source words
    with a link). ``inputs``: the scored parts of one or more datasets, then, with ``aligned``, the
    parts of ``alignments`` alignment artifacts (joined on uid)."""
    n_scored = len(inputs) - alignments if aligned else len(inputs)
    scored_parts = Parts(tuple(p for parts in inputs[:n_scored] for p in parts.paths))
    alignment_parts = Parts(
        tuple(p for parts in inputs[n_scored:] for p in parts.paths), root=inputs[-1].root if aligned else None
    )
    if not scored_parts:
        raise InputError("uncertainty_bins: nothing was scored")
    with scratch_duckdb(memory_limit=memory_limit, threads=1, name="bins") as con:
        cov = "NULL::DOUBLE"
        join = ""
        if alignment_parts:
            join = f"LEFT JOIN {alignment_parts.sql()} a USING (uid)"
            cov = "a.coverage"
        table = con.sql(
            f"SELECT (SELECT string_agg(DISTINCT source, ',' ORDER BY source) FROM {scored_parts.sql()}) "
            f"AS source, bin, count(*) AS rows, min(uncertainty) AS u_min, max(uncertainty) AS u_max, "
            f"avg(uncertainty) AS u_mean, avg(tokens) AS length, avg(word_rarity) AS word_rarity, "
            f"avg(coverage) AS coverage FROM (SELECT s.uncertainty, s.tokens, s.word_rarity, {cov} AS coverage, "
            f"ntile($bins) OVER (ORDER BY s.uncertainty, s.uid) AS bin FROM {scored_parts.sql()} s {join}) "
            f"GROUP BY bin ORDER BY bin",
            params={"bins": bins},
        ).to_arrow_table()
    return table.cast(
        pa.schema(
            [
                ("source", pa.string()),
                ("bin", pa.int64()),
                ("rows", pa.int64()),
                ("u_min", pa.float64()),
                ("u_max", pa.float64()),
                ("u_mean", pa.float64()),
                ("length", pa.float64()),
                ("word_rarity", pa.float64()),
                ("coverage", pa.float64()),
            ]
        )
    )


SENTENCE_UNCERTAINTY = Stage("uncertainty", "1", sentence_uncertainty, view="uncertainty")
U_MAX = Stage("u_max", "1", u_max, reduce=True)
SAMPLE_KEYS = Stage("sample_keys", "1", sample_keys)
SELECT_SAMPLE = Stage("sample", "2", select_sample, reduce=True)
SAMPLED_MONO = Stage("sampled_mono", "2", take_sample, view="sampled_mono", lazy_side=("selected",))
BINS = Stage("uncertainty_bins", "2", uncertainty_bins, view="uncertainty_bins", reduce=True)
