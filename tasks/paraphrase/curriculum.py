"""PCC's filter and difficulty (Alg. 2, lines 7–8) and the `curriculum` they make, plus its metrics.

    keep(x̄)  = M(x, x̄) + (1 − M(x, x̄)) · 1[G(x, x̄) ≥ β]                           (Eq. 3, β = 0.5)
    d(x̄)     = ⌈ C · rank_G↓(x̄) / |X| ⌉,  rank 1 = the most similar kept candidate     (Eq. 4, C = 5)
    d(x)     = 0 for the original sentence

Per sentence ``candidates`` survivors are kept (appendix A: 20, so 4 per level), first up to
``bottom_k_candidates`` bottom-k ones, then top-k/top-p ones, each in draw order. Without an NLI
model M is unknown (null) and counts as 0: the filter is G ≥ β alone, and the run summary says so.
When fewer survive, the sentence is listed in the ``shortfall`` part and its bag is either ranked as
it is (``skip``: |X| = the survivors, levels uneven) or ``repeat``ed, most similar first, to the full
size (copies rank next to their original; ``copy`` counts them). Ties in G rank by uid, then copy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError
from models.candidates import BOTTOM_K, copies_first_token, distinct_n
from storage.engines import scratch_duckdb
from storage.parts import Parts
from tasks.runtime.stage import Stage

ORIGINAL = "original"
CURRICULUM = pa.schema(
    [
        ("uid", pa.string()),
        ("parent_uid", pa.string()),
        ("text", pa.string()),
        ("label", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("level", pa.int32()),
        ("rank", pa.int32()),
        ("copy", pa.int32()),
        ("sampler", pa.string()),
        ("mi", pa.bool_()),
        ("sim", pa.float64()),
        ("generator", pa.string()),
        ("nli", pa.string()),
        ("similarity", pa.string()),
    ]
)
SHORTFALL = pa.schema(
    [("parent_uid", pa.string()), ("source", pa.string()), ("line", pa.int64()), ("kept", pa.int32()), ("wanted", pa.int32())]
)


def implication_filter(scored: pa.Table, *, beta: float) -> tuple[pa.Table, pa.Table]:
    """Eq. 3: keep iff MI, or G ≥ β. Returns (kept, dropped with ``reason`` = "not_mi_below_beta")."""
    keep = pc.fill_null(pc.or_kleene(pc.fill_null(scored["mi"], False), pc.greater_equal(scored["sim"], beta)), False)
    dropped = scored.filter(pc.invert(keep))
    return scored.filter(keep), dropped.append_column("reason", pa.repeat(pa.scalar("not_mi_below_beta"), dropped.num_rows))


def difficulty_levels(
    sim: Sequence[float], uids: Sequence[str], copies: Sequence[int] | None = None, *, levels: int
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 4 over one sentence's bag: (rank, level) per candidate, rank by G descending, ties by (uid, copy)."""
    n = len(sim)
    copies = [0] * n if copies is None else copies
    order = sorted(range(n), key=lambda i: (-sim[i], uids[i], copies[i]))
    rank = np.empty(n, np.int32)
    rank[order] = np.arange(1, n + 1, dtype=np.int32)
    level = np.array([math.ceil(levels * r / n) for r in rank], dtype=np.int32)
    return rank, level


def select_bag(bag: list[dict], *, candidates: int, bottom_k_candidates: int) -> list[dict]:
    """Appendix A's bag: up to ``bottom_k_candidates`` bottom-k survivors, filled with top-k/top-p ones (then with
    further bottom-k ones) up to ``candidates``, each group in draw order."""
    hard = sorted((c for c in bag if c["sampler"] == BOTTOM_K), key=lambda c: c["sample"])
    easy = sorted((c for c in bag if c["sampler"] != BOTTOM_K), key=lambda c: c["sample"])
    chosen = hard[:bottom_k_candidates]
    chosen += easy[: candidates - len(chosen)]
    chosen += hard[bottom_k_candidates : bottom_k_candidates + candidates - len(chosen)]
    return chosen


def repeat_bag(bag: list[dict], size: int) -> list[dict]:
    """The bag cycled, most similar first, to ``size`` rows; each repeat gets the next ``copy`` number."""
    ordered = sorted(bag, key=lambda c: (-c["sim"], c["uid"]))
    return [{**ordered[i % len(ordered)], "copy": i // len(ordered)} for i in range(size)]


def build_curriculum(
    rows: pa.Table,
    scored: pa.Table,
    *,
    beta: float,
    candidates: int,
    bottom_k_candidates: int,
    levels: int,
    shortfall: str,
    nli: str | None,
    similarity: str,
) -> dict[str, pa.Table]:
    """One shard: the originals at level 0 and their kept paraphrases at levels 1..C (``part``), the
    filtered-out candidates (``dropped``) and the sentences short of ``candidates`` (``shortfall``)."""
    if shortfall not in ("skip", "repeat"):
        raise InputError(f"paraphrase.shortfall: expected skip or repeat, got {shortfall!r}")
    kept, dropped = implication_filter(scored, beta=beta)
    bags: dict[str, list[dict]] = {}
    for c in kept.select(["uid", "parent_uid", "text", "sampler", "sample", "mi", "sim", "model"]).to_pylist():
        bags.setdefault(c["parent_uid"], []).append(c)
    out: list[dict] = []
    short: list[dict] = []
    label = rows["label"].to_pylist() if "label" in rows.column_names else [None] * rows.num_rows
    for i, orig in enumerate(rows.select(["uid", "text", "source", "line"]).to_pylist()):
        where = {"label": label[i], "source": orig["source"], "line": orig["line"]}
        out.append(
            {
                "uid": orig["uid"],
                "parent_uid": orig["uid"],
                "text": orig["text"],
                **where,
                "level": 0,
                "rank": 0,
                "copy": 0,
                "sampler": ORIGINAL,
                "mi": None,
                "sim": None,
                "generator": None,
                "nli": None,
                "similarity": None,
            }
        )
        bag = select_bag(bags.get(orig["uid"], []), candidates=candidates, bottom_k_candidates=bottom_k_candidates)
        if len(bag) < candidates:
            short.append(
                {
                    "parent_uid": orig["uid"],
                    "source": orig["source"],
                    "line": orig["line"],
                    "kept": len(bag),
                    "wanted": candidates,
                }
            )
            if shortfall == "repeat" and bag:
                bag = repeat_bag(bag, candidates)
        if not bag:
            continue
        copies = [c.get("copy", 0) for c in bag]
        rank, level = difficulty_levels([c["sim"] for c in bag], [c["uid"] for c in bag], copies, levels=levels)
        for c, r, d, k in zip(bag, rank, level, copies):
            out.append(
                {
                    "uid": c["uid"],
                    "parent_uid": orig["uid"],
                    "text": c["text"],
                    **where,
                    "level": int(d),
                    "rank": int(r),
                    "copy": k,
                    "sampler": c["sampler"],
                    "mi": c["mi"],
                    "sim": c["sim"],
                    "generator": c["model"],
                    "nli": nli,
                    "similarity": similarity,
                }
            )
    return {
        "part": pa.Table.from_pylist(out, schema=CURRICULUM),
        "dropped": dropped,
        "shortfall": pa.Table.from_pylist(short, schema=SHORTFALL),
    }


def paraphrase_diversity(parts: Parts) -> pa.Table:
    """Per sampler over every generated candidate: count, Distinct-1…6 (Table 5) and the share starting with the
    input's first token (appendix F's copying)."""
    table = parts.table(["sampler", "text", "original"])
    rows = []
    for sampler in sorted(set(table["sampler"].to_pylist())):
        sub = table.filter(pc.equal(table["sampler"], sampler))
        texts = sub["text"].to_pylist()
        row = {"sampler": sampler, "candidates": len(texts)}
        row |= {f"distinct_{n}": distinct_n(texts, n) for n in range(1, 7)}
        row["copies_first_token"] = float(np.mean(copies_first_token(sub["original"].to_pylist(), texts)))
        rows.append(row)
    return pa.Table.from_pylist(rows)


def curriculum_levels(parts: Parts) -> pa.Table:
    """Per level: rows, the similarity distribution (min, quartiles, max, mean), the MI and bottom-k shares."""
    with scratch_duckdb(threads=1) as con:
        return con.sql(f"""
            SELECT level, count(*) AS rows, count(DISTINCT parent_uid) AS sentences,
                   min(sim) AS sim_min, quantile_cont(sim, 0.25) AS sim_q25, median(sim) AS sim_median,
                   quantile_cont(sim, 0.75) AS sim_q75, max(sim) AS sim_max, avg(sim) AS sim_mean,
                   avg(CASE WHEN mi THEN 1.0 WHEN mi IS NULL THEN NULL ELSE 0.0 END) AS mi_share,
                   avg(CASE WHEN sampler = '{BOTTOM_K}' THEN 1.0 ELSE 0.0 END) AS bottom_k_share
            FROM {parts.sql()} GROUP BY level ORDER BY level""").to_arrow_table()


CURRICULUM_STAGE = Stage("curriculum", "1", build_curriculum, view="curriculum")
DIVERSITY = Stage("paraphrase_diversity", "1", paraphrase_diversity, view="paraphrase_diversity", reduce=True)
LEVELS = Stage("curriculum_levels", "1", curriculum_levels, view="curriculum_levels", reduce=True)
