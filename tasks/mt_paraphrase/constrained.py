"""Paraphrase augmentation for MT under lexical constraints (Hu et al. 2019, appendix C; Table 6).

    idf(w)     = ln(N / df(w))                over the paraphrased side of the bitext (lower-cased tokens)
    negative   = the sentence's `negative_top` tokens of highest idf (letters only, not a positive one):
                 forbidden, so the paraphrase must change wording
    positive   = tokens with a digit, and capitalised tokens after the first (a simple named-entity and
                 number detector, documented as such): kept
    J(x, x̄)    = |T(x) ∩ T(x̄)| / |T(x) ∪ T(x̄)|   over lower-cased whitespace tokens; kept iff J < 0.65
    pair       = (x̄, the other side of x's pair)  — the paraphrase replaces its side, the other side stays

Generation enforces the constraints where the decoder can (``models.banned`` bans in transformers;
``models.nmt.fairseq_constrained``: bans and fairseq's lexically constrained beam search in a round trip's
fairseq return model); every candidate is checked afterwards all the same, and one that holds a banned
word or lacks a kept one is dropped with its reason, so no constraint is ever violated in the output.
Hand-written: IDF, the detector, the checks and Jaccard (a few lines each; no package does this pairing).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from storage.engines import scratch_duckdb
from storage.parts import Parts
from tasks.paraphrase.candidates import load_generator
from tasks.runtime.progress import sentences
from tasks.runtime.stage import Stage

_WORD = re.compile(r"^[^\W\d_]+$")  # letters only
IDF = pa.schema([("token", pa.string()), ("df", pa.int64()), ("idf", pa.float64())])
CANDIDATES = pa.schema(
    [
        ("parent_uid", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("side", pa.string()),
        ("original", pa.string()),
        ("other", pa.string()),
        ("paraphrase", pa.string()),
        ("sample", pa.int32()),
        ("negative", pa.list_(pa.string())),
        ("positive", pa.list_(pa.string())),
        ("model", pa.string()),
    ]
)
PARAPHRASED = pa.schema(
    [
        ("uid", pa.string()),
        ("parent_uid", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("side", pa.string()),
        ("src", pa.string()),
        ("tgt", pa.string()),
        ("jaccard", pa.float64()),
        ("constraints", pa.string()),
        ("sample", pa.int32()),
        ("model", pa.string()),
    ]
)
DROPPED = pa.schema([*CANDIDATES, ("jaccard", pa.float64()), ("reason", pa.string())])


def tokens(text: str) -> list[str]:
    """The whitespace tokens of ``text``."""
    return text.split()


def bare(token: str) -> str:
    """A token lower-cased without the punctuation around it ("Dog," → "dog")."""
    return token.strip(".,;:!?\"'()[]{}«»„“”‘’").lower()


def jaccard(a: str, b: str) -> float:
    """Token Jaccard of two sentences (lower-cased whitespace tokens); two empty sentences: 1."""
    x, y = {t.lower() for t in tokens(a)}, {t.lower() for t in tokens(b)}
    return len(x & y) / len(x | y) if x | y else 1.0


def idf_table(bitext: Parts, *, side: str = "src") -> pa.Table:
    """df and idf = ln(N / df) of every lower-cased, punctuation-stripped token of ``side`` (DuckDB, spilling)."""
    with scratch_duckdb() as con:
        n = con.execute(f"SELECT count(*) FROM {bitext.sql()}").fetchall()[0][0]
        table = con.sql(f"""
            SELECT token, count(DISTINCT rid) AS df FROM (
              SELECT rid, lower(trim(unnest(string_split({side}, ' ')), '.,;:!?"''()[]{{}}«»„“”‘’')) AS token
              FROM (SELECT row_number() OVER () AS rid, {side} FROM {bitext.sql()}))
            WHERE token <> '' GROUP BY token ORDER BY token""").to_arrow_table()
    idf = pa.array([math.log(n / df) for df in table["df"].to_pylist()], pa.float64())
    return pa.table({"token": table["token"], "df": table["df"], "idf": idf}, schema=IDF)


def positive_tokens(text: str) -> list[str]:
    """Tokens to keep: any with a digit; a capitalised one after the first token (names, not sentence starts)."""
    toks = tokens(text)
    return [t for i, t in enumerate(toks) if any(c.isdigit() for c in t) or (i > 0 and t[:1].isupper())]


def negative_tokens(text: str, idf: Mapping[str, float], *, top: int = 1) -> list[str]:
    """The ``top`` words of highest idf (letters only, not kept ones; ties: the earlier), as written."""
    keep = set(positive_tokens(text))
    words = [(t, bare(t)) for t in tokens(text) if t not in keep and _WORD.match(bare(t) or "0")]
    ranked = sorted(range(len(words)), key=lambda i: (-idf.get(words[i][1], 0.0), i))
    out: list[str] = []
    for i in ranked:
        if words[i][1] not in {bare(o) for o in out}:
            out.append(words[i][0].strip(".,;:!?\"'()[]{}«»„“”‘’"))
        if len(out) == top:
            break
    return out


def violation(paraphrase: str, negative: Sequence[str], positive: Sequence[str]) -> str | None:
    """Why a paraphrase breaks its constraints (``negative_violated``, ``positive_missing``), or None."""
    have = {bare(t) for t in tokens(paraphrase)}
    if any(bare(w) in have for w in negative):
        return "negative_violated"
    if any(bare(w) not in have for w in positive):
        return "positive_missing"
    return None


def in_share(uids: Sequence[str], share: float) -> list[bool]:
    """Whether each uid (an md5 in hex) falls in the first ``share`` of the uid space."""
    return [int(u[:8], 16) < share * 2**32 for u in uids]


def constrained_candidates(
    rows: pa.Table,
    *,
    idf: pa.Table,
    side: str = "src",
    n: int = 10,
    negative_top: int = 1,
    positive: bool = True,
    decode: str = "constrained",
    sampler: Mapping[str, Any] | None = None,
    share: float = 1.0,
    generator: Mapping[str, Any],
    generator_fingerprint: str,
    max_tokens: int = 4096,
    **resources: Any,
) -> pa.Table:
    """Up to ``n`` paraphrases of each pair's ``side`` with its constraints (``CANDIDATES``, by row then draw):
    ``decode: constrained`` — a round trip's return model's n best under fairseq's constrained beam search
    and bans; ``sample`` — ``n`` samples of ``sampler`` (top-k/top-p) with the bans (transformers) or none.
    Only the rows ``in_share``."""
    from models.candidates import Sampler

    if share < 1:
        rows = rows.filter(pa.array(in_share(rows["uid"].to_pylist(), share)))
    if rows.num_rows == 0:
        return CANDIDATES.empty_table()

    weights = dict(zip(idf["token"].to_pylist(), idf["idf"].to_pylist()))
    texts, others = rows[side].to_pylist(), rows["tgt" if side == "src" else "src"].to_pylist()
    negative = [negative_tokens(t, weights, top=negative_top) for t in texts]
    keep = [positive_tokens(t) if positive else [] for t in texts]
    model = load_generator(generator, resources)
    if decode == "constrained":
        drawn = model.generate_constrained(texts, n=n, banned=negative, required=keep, max_tokens=max_tokens)
    else:
        plan = [(Sampler(**(sampler or {})), n)]
        ban = {"banned": negative} if generator["kind"] == "hf" else {}
        progress = sentences(len(texts) * (model.pivot_passes + 1))
        drawn = next(iter(model.generate(texts, plan, max_tokens=max_tokens, progress=progress, **ban).values()))
    out: dict[str, list] = {k: [] for k in CANDIDATES.names}
    for i, row in enumerate(rows.select(["uid", "source", "line"]).to_pylist()):
        for j, para in enumerate(drawn[i]):
            for k, v in (
                ("parent_uid", row["uid"]),
                ("source", row["source"]),
                ("line", row["line"]),
                ("side", side),
                ("original", texts[i]),
                ("other", others[i]),
                ("paraphrase", para.strip()),
                ("sample", j),
                ("negative", negative[i]),
                ("positive", keep[i]),
                ("model", generator_fingerprint),
            ):
                out[k].append(v)
    return pa.table(out, schema=CANDIDATES)


def select_paraphrases(cands: pa.Table, *, max_jaccard: float = 0.65, keep: int = 10) -> dict[str, pa.Table]:
    """The paraphrases that keep their constraints, differ from the original (J < ``max_jaccard``) and from
    each other, at most ``keep`` per pair, as bitext rows; ``dropped`` with the reason: ``empty``,
    ``negative_violated``, ``positive_missing``, ``jaccard`` (≥ the threshold; the original itself has 1),
    ``duplicate`` (an earlier draw of the same pair), ``over_keep``."""
    kept: dict[str, list] = {k: [] for k in PARAPHRASED.names}
    dropped: list[tuple[int, float, str]] = []
    seen: dict[str, set[str]] = {}
    rows = cands.to_pylist()
    for i, c in enumerate(rows):
        j = jaccard(c["original"], c["paraphrase"])
        mine = seen.setdefault(c["parent_uid"], set())
        reason = (
            "empty"
            if not c["paraphrase"]
            else violation(c["paraphrase"], c["negative"], c["positive"])
            or (
                "jaccard"
                if j >= max_jaccard
                else "duplicate"
                if c["paraphrase"] in mine
                else "over_keep"
                if len(mine) >= keep
                else None
            )
        )
        if reason:
            dropped.append((i, j, reason))
            continue
        mine.add(c["paraphrase"])
        src, tgt = (c["paraphrase"], c["other"]) if c["side"] == "src" else (c["other"], c["paraphrase"])
        uid = hashlib.md5(f"{c['parent_uid']}\x1f{c['paraphrase']}".encode()).hexdigest()
        constraints = json.dumps({"negative": c["negative"], "positive": c["positive"]}, ensure_ascii=False)
        for k, v in (
            ("uid", uid),
            ("parent_uid", c["parent_uid"]),
            ("source", c["source"]),
            ("line", c["line"]),
            ("side", c["side"]),
            ("src", src),
            ("tgt", tgt),
            ("jaccard", j),
            ("constraints", constraints),
            ("sample", c["sample"]),
            ("model", c["model"]),
        ):
            kept[k].append(v)
    drops = cands.take(pa.array([i for i, _, _ in dropped], pa.int64()))
    drops = drops.append_column("jaccard", pa.array([j for _, j, _ in dropped], pa.float64()))
    drops = drops.append_column("reason", pa.array([r for _, _, r in dropped], pa.string()))
    return {"part": pa.table(kept, schema=PARAPHRASED), "dropped": drops.cast(DROPPED)}


IDF_STAGE = Stage("side_idf", "1", idf_table, reduce=True)
CONSTRAINED = Stage("constrained_paraphrases", "1", constrained_candidates, tags=("gpu",))
SELECT_PARAPHRASES = Stage("paraphrased_bitext", "1", select_paraphrases, view="paraphrased_bitext")
