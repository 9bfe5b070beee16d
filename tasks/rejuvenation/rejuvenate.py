"""Data rejuvenation (thesis ch. 5): find the inactive pairs, and give their sources new targets.

    score(pair) = exp( (1/|y|) Σ_t log p(y_t | y_<t, x) ),   y including EOS       (the identification model)
    inactive    = the ⌊R·N⌋ scored pairs with the lowest score (R = 10 %), a global cut over every shard
    rejuvenated = active ∪ { (x, ŷ) : (x, y) inactive, ŷ = the rejuvenation model's beam-4 translation of x }

Pairs the model could not score (empty after subwords, longer than its positions) are neither inactive
nor dropped: they stay active with a null score, and the flow lists them in the run summary (the authors'
code dropped them silently). The cut reuses the LM filter's exact, shard-count-independent machinery:
the lowest probability is the highest cross-entropy, ties broken by uid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError, InputError
from storage.artifacts import MAIN
from storage.engines import scratch_duckdb
from storage.parts import Parts
from storage.schemas import with_uid
from tasks.common.lm import LmCut, global_cut, lm_filter
from tasks.common.nmt import Decode, Loading, Runtime, score_pairs, translate_column
from tasks.runtime.stage import Stage

STATES = ("active", "inactive")
REJUVENATED = pa.schema(
    [
        ("uid", pa.string()),
        ("src", pa.string()),
        ("tgt", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("origin", pa.string()),
        ("parent_uid", pa.string()),
        ("direction", pa.string()),
        ("prob", pa.float64()),
        ("rejuvenated_prob", pa.float64()),
        ("model", pa.string()),
    ]
)


def inactive_cut(parts: Parts, *, inactive_ratio: float) -> pa.Table:
    """The global cut over every shard's scores: k = ⌊R·N⌋ over the N scored pairs; candidates = each
    shard's k lowest. Unscored pairs (null probability) take no part."""
    tables = list(parts.tables(["uid", "cross_entropy"]))
    n_rows, cut = global_cut([t.filter(pc.is_valid(t["cross_entropy"])) for t in tables], drop_fraction=inactive_ratio)
    return pa.table(
        {
            "scored": [n_rows],
            "n_inactive": [cut.n_drop],
            "cross_entropy": [cut.cross_entropy],
            "uid": pa.array([cut.uid], pa.string()),
            "unscored": [sum(t.num_rows for t in tables) - n_rows],
        }
    )


def pair_states(rows: pa.Table, scores: pa.Table, cut: pa.Table) -> pa.Table:
    """The shard's rows with their score columns and ``state``: inactive iff scored and at or past the cut."""
    if rows.num_rows and not rows["uid"].equals(scores["uid"]):
        raise InputError("inactive_split: the scores are not the rows' scores, row for row")
    c = cut.to_pylist()[0]
    joined = rows
    for name in ("tokens", "cross_entropy", "prob"):
        joined = joined.append_column(name, scores[name])
    unscored = joined.filter(pc.is_null(joined["prob"]))
    scored = joined.filter(pc.is_valid(joined["prob"]))
    active, inactive = lm_filter(scored, threshold=LmCut(c["cross_entropy"], c["uid"], c["n_inactive"]))
    states = pa.concat_tables(
        [
            active.append_column("state", pa.repeat(pa.scalar("active"), active.num_rows)),
            inactive.drop_columns(["reason"]).append_column("state", pa.repeat(pa.scalar("inactive"), inactive.num_rows)),
            unscored.append_column("state", pa.repeat(pa.scalar("active"), unscored.num_rows)),
        ]
    )
    return states.sort_by("line")


def inactive_split(rows: pa.Table, scores: pa.Table, *, cut: pa.Table, state: str) -> pa.Table | dict[str, pa.Table]:
    """The rows of one ``state`` (active or inactive) with their scores; a shard of the split. The active
    side is the training data the rejuvenated corpus keeps, so its artifact also holds the inactive pairs as
    its ``dropped`` part (reason ``inactive``, detail their probability): they are in the `dropped` view and
    `augdag why`, and the active artifact's input rows = active + dropped."""
    if state not in STATES:
        raise ConfError(f"inactive_split: parameter state: expected one of {', '.join(STATES)}, found {state!r}")
    states = pair_states(rows, scores, cut)
    chosen = states.filter(pc.equal(states["state"], state))
    if state == "inactive":
        return chosen
    inactive = states.filter(pc.equal(states["state"], "inactive"))
    detail = pa.array([f"prob={p:.6g}" for p in inactive["prob"].to_pylist()], pa.string())
    reason = pa.repeat(pa.scalar("inactive"), inactive.num_rows)
    return {MAIN: chosen, "dropped": inactive.append_column("reason", reason).append_column("detail", detail)}


def rejuvenate(
    inactive: pa.Table,
    *,
    direction: Literal["forward", "backward", "both"],
    model: Loading,
    decode: Decode,
    identification: Loading,
    identification_path: Path,
    runtime: Runtime,
    identification_runtime: Runtime,
    forward_path: Path | None = None,
    backward_path: Path | None = None,
    forward_fingerprint: str | None = None,
    backward_fingerprint: str | None = None,
    backward: Loading | None = None,
    backward_runtime: Runtime | None = None,
) -> pa.Table:
    """New pairs for the inactive ones: forward (x, f(x)), backward (b(y), y), or both; each new pair
    carries its parent's uid and score, the model that made it, and its own score under the
    identification model (``rejuvenated_prob``). ``model`` and ``identification`` are the loading options
    (``tasks.common.nmt.loading``) of the rejuvenation models and of the identification model; ``runtime`` and
    ``identification_runtime`` how they run (``tasks.common.nmt.runtime``); ``backward`` and ``backward_runtime``
    those of the backward model when they differ from the forward one's."""
    made = []
    if direction in ("forward", "both"):
        made.append(_new_pairs(inactive, "forward", forward_path, forward_fingerprint, model, runtime, decode))
    if direction in ("backward", "both"):
        made.append(
            _new_pairs(
                inactive, "backward", backward_path, backward_fingerprint, backward or model, backward_runtime or runtime, decode
            )
        )
    if not made:
        raise ConfError(f"rejuvenation.direction: expected forward, backward or both, found {direction!r}")
    new = pa.concat_tables(made)
    rescored = score_pairs(new, model=identification, model_path=identification_path, runtime=identification_runtime)
    return new.set_column(new.schema.get_field_index("rejuvenated_prob"), "rejuvenated_prob", rescored["prob"])


def _new_pairs(
    inactive: pa.Table, direction: str, path: Path | None, fp: str | None, model: Loading, runtime: Runtime, decode: Decode
) -> pa.Table:
    if path is None or fp is None:
        raise ConfError(
            f"rejuvenate: parameters {direction}_path and {direction}_fingerprint: expected the "
            f"{direction} model's path and fingerprint, found {path} and {fp}. Hint: "
            f"rejuvenation.direction includes {direction}: pass that model as the flow does"
        )
    forward = direction == "forward"
    made = translate_column(inactive["src" if forward else "tgt"], model=model, model_path=path, runtime=runtime, decode=decode)
    src, tgt = (inactive["src"], made) if forward else (made, inactive["tgt"])
    n = inactive.num_rows
    pairs = with_uid(
        pa.table({"uid": inactive["uid"], "src": src, "tgt": tgt, "source": inactive["source"], "line": inactive["line"]}),
        "bitext",
    )
    return pa.table(
        {
            **{c: pairs[c] for c in ("uid", "src", "tgt", "source", "line")},
            "origin": pa.repeat(pa.scalar("rejuvenated"), n),
            "parent_uid": inactive["uid"],
            "direction": pa.repeat(pa.scalar(direction), n),
            "prob": inactive["prob"],
            "rejuvenated_prob": pa.nulls(n, pa.float64()),
            "model": pa.repeat(pa.scalar(fp), n),
        },
        schema=REJUVENATED,
    )


def rejuvenated_bitext(active: pa.Table, fresh: pa.Table) -> pa.Table:
    """active ∪ rejuvenated pairs, one shard: the active rows as `original`, then the new ones."""
    n = active.num_rows
    original = pa.table(
        {
            **{c: active[c] for c in ("uid", "src", "tgt", "source", "line")},
            "origin": pa.repeat(pa.scalar("original"), n),
            "parent_uid": pa.nulls(n, pa.string()),
            "direction": pa.nulls(n, pa.string()),
            "prob": active["prob"],
            "rejuvenated_prob": pa.nulls(n, pa.float64()),
            "model": pa.nulls(n, pa.string()),
        },
        schema=REJUVENATED,
    )
    return pa.concat_tables([original, fresh.cast(REJUVENATED)])


def probability_bins(parts: Parts, *, bins: int = 10, memory_limit: str = "512MB") -> pa.Table:
    """Fig. 5.2: the scored pairs ranked by probability (ties: uid) into ``bins`` equal-size bins; rows,
    min, max and mean probability per bin (bin 1 holds the lowest, the inactive end)."""
    with scratch_duckdb(memory_limit=memory_limit, threads=1, name="probability_bins") as con:
        table = con.sql(
            "SELECT bin, count(*) AS rows, min(prob) AS p_min, max(prob) AS p_max, avg(prob) AS p_mean FROM "
            f"(SELECT prob, ntile($bins) OVER (ORDER BY prob, uid) AS bin FROM {parts.sql()} "
            "WHERE prob IS NOT NULL) GROUP BY bin ORDER BY bin",
            params={"bins": bins},
        ).to_arrow_table()
    return table.cast(
        pa.schema(
            [
                ("bin", pa.int64()),
                ("rows", pa.int64()),
                ("p_min", pa.float64()),
                ("p_max", pa.float64()),
                ("p_mean", pa.float64()),
            ]
        )
    )


def state_properties(
    active_parts: Parts, inactive_parts: Parts, alignment_parts: Parts, uncertainty_parts: Parts, *, memory_limit: str = "512MB"
) -> pa.Table:
    """Inactive vs active (ch. 5): pairs, mean probability, source length, alignment coverage (share of
    source words linked) and the source's lexicon uncertainty (Eq. 6.3), per state."""
    states = " UNION ALL ".join(f"SELECT uid, prob, state FROM {p.sql()}" for p in (active_parts, inactive_parts) if p)
    with scratch_duckdb(memory_limit=memory_limit, threads=1, name="state_properties") as con:
        table = con.sql(
            f"SELECT s.state, count(*) AS rows, avg(s.prob) AS prob, avg(u.tokens) AS length, avg(a.coverage) AS coverage, "
            f"avg(u.uncertainty) AS uncertainty FROM ({states}) s "
            f"LEFT JOIN {alignment_parts.sql()} a USING (uid) "
            f"LEFT JOIN {uncertainty_parts.sql()} u USING (uid) "
            "GROUP BY s.state ORDER BY s.state"
        ).to_arrow_table()
    return table.cast(
        pa.schema(
            [
                ("state", pa.string()),
                ("rows", pa.int64()),
                ("prob", pa.float64()),
                ("length", pa.float64()),
                ("coverage", pa.float64()),
                ("uncertainty", pa.float64()),
            ]
        )
    )


PAIR_SCORE = Stage("pair_score", "1", score_pairs, view="pair_scores", tags=("gpu",))
INACTIVE_CUT = Stage("inactive_cut", "1", inactive_cut, reduce=True)
INACTIVE = Stage("inactive", "1", inactive_split, view="inactive")
ACTIVE = Stage("active", "2", inactive_split)  # 2: the inactive pairs as its dropped part
REJUVENATE = Stage("rejuvenate", "2", rejuvenate, tags=("gpu",))  # 2: the output bounded per length chunk
REJUVENATED_BITEXT = Stage("rejuvenated", "1", rejuvenated_bitext, view="rejuvenated")
PROBABILITY_BINS = Stage("probability_bins", "1", probability_bins, view="probability_bins", reduce=True)
STATE_PROPERTIES = Stage("state_properties", "1", state_properties, view="rejuvenation_states", reduce=True)


def unscored_pairs(parts: Parts, *, limit: int = 20) -> dict[str, Any]:
    """The pairs the identification model could not score, for the run summary: count and first uids."""
    with scratch_duckdb(memory_limit="256MB", name="unscored") as con:
        (n,) = con.execute(f"SELECT count(*) FROM {parts.sql()} WHERE prob IS NULL").fetchall()[0]
        uids = [
            r[0]
            for r in con.execute(f"SELECT uid FROM {parts.sql()} WHERE prob IS NULL ORDER BY uid LIMIT {int(limit)}").fetchall()
        ]
    return {"count": int(n), "uids": uids}
