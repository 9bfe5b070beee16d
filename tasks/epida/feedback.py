"""EPiDA's stages (Alg. 1) over Arrow tables: candidates from each DA algorithm T, the classifier's
feedback on them, SEAS selection, and the `augmented` view over every round.

    rows ─┬─ eda (tasks.epida.eda) ───────────────┐
          ├─ cwe (tasks.epida.cwe) ───────────────┼─ seas_score: p(t), p(x) from the classifier → REM, CEM
          └─ paraphrase_candidates → back_translation ┘   → Eq. 11 → the m best per row and algorithm
    rounds (one-time: 1; online: one per `every_epochs`) → augmented (all candidates, `selected` marked)

A candidate table has the columns of ``CANDIDATE`` (``tasks.epida.eda.eda_candidates``'s): uid, text, label,
source, line, parent_uid, method, candidate. Each source's candidates of a row are made from the row
alone (seeded by seed, uid, round and index), so an input shard maps to a candidate shard.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import InputError
from models.runtime import loaded
from storage.engines import scratch_duckdb
from storage.parts import Parts
from tasks.epida.eda import eda_candidates
from tasks.epida.seas import Mode, cem, rem, seas_select
from tasks.runtime.stage import Stage

CANDIDATE = pa.schema(
    [
        ("uid", pa.string()),
        ("text", pa.string()),
        ("label", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("parent_uid", pa.string()),
        ("method", pa.string()),
        ("candidate", pa.int32()),
    ]
)
AUGMENTED = pa.schema(
    [
        ("uid", pa.string()),
        ("parent_uid", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("label", pa.string()),
        ("text", pa.string()),
        ("method", pa.string()),
        ("algorithm", pa.string()),
        ("candidate", pa.int32()),
        ("round", pa.int32()),
        ("p_label", pa.float64()),
        ("s_div", pa.float64()),
        ("s_qua", pa.float64()),
        ("s_tot", pa.float64()),
        ("selected", pa.bool_()),
        ("classifier", pa.string()),
    ]
)


def algorithm_of(method: str) -> str:
    """The DA algorithm T of a candidate's method: eda_sr → eda; cwe, back_translation as they are."""
    return method.split("_")[0] if method.startswith("eda_") else method


def eda_source(
    rows: pa.Table,
    *,
    n_aug: int = 9,
    alpha: float = 0.1,
    seed: int = 0,
    round: int = 0,
    wordnet: str = "",
    wordnet_root: str | None = None,
) -> pa.Table:
    """EDA candidates (``tasks.epida.eda``) with WordNet 3.0 synonyms. ``wordnet`` is the database's fingerprint
    (``models.wordnet.database_fingerprint``: a new database recomputes); ``wordnet_root`` a resource."""
    from models.wordnet import synonyms
    from models.wordnet import wordnet as reader

    wn = reader(Path(wordnet_root) if wordnet_root else None)
    return eda_candidates(
        rows,
        n_aug=n_aug,
        alpha=alpha,
        seed=seed,
        round=round,
        synonyms=functools.lru_cache(maxsize=None)(lambda w: synonyms(w, wn)),
    )


def back_translation_source(cands: pa.Table, *, n_aug: int = 9) -> pa.Table:
    """The round-trip paraphraser's candidates (``tasks.paraphrase.candidates.generate_candidates``) as EPiDA candidates:
    the first ``n_aug`` distinct paraphrases of each row by draw, method ``back_translation``."""
    if cands.num_rows:
        cands = cands.take(pc.sort_indices(cands, [("parent_uid", "ascending"), ("sample", "ascending")]))
    parents = cands["parent_uid"].to_numpy(zero_copy_only=False)
    first = np.r_[0, np.flatnonzero(parents[1:] != parents[:-1]) + 1] if len(parents) else np.zeros(0, int)
    rank = np.arange(len(parents)) - np.repeat(first, np.diff(np.r_[first, len(parents)]))
    keep = cands.filter(pa.array(rank < n_aug))
    return pa.table(
        {
            "uid": keep["uid"],
            "text": keep["text"],
            "label": keep["label"],
            "source": keep["source"],
            "line": keep["line"],
            "parent_uid": keep["parent_uid"],
            "method": pa.array(["back_translation"] * keep.num_rows, pa.string()),
            "candidate": pc.cast(keep["sample"], pa.int32()),
        },
        schema=CANDIDATE,
    )


def _load_classifier(model_path: str, device: str, threads: int):
    from models.classifier import load_classifier

    return load_classifier(Path(model_path), device=device, threads=threads)


# the feedback classifier, loaded once per process (shard threads wait for the first load: models.runtime.loaded)
_classifier = loaded(_load_classifier, maxsize=2)


def feedback(rows: pa.Table, cands: pa.Table, model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The classifier's p(t) of every candidate, p(x) of its original (by ``parent_uid``), and its label
    index: two batched ``predict_proba`` calls (Alg. 1 lines 5-7)."""
    index = {label: i for i, label in enumerate(model.labels)}
    unknown = sorted({x for x in cands["label"].to_pylist() if x not in index}, key=str)
    if unknown:
        raise InputError(f"epida: candidate labels {unknown[:10]} are not among the classifier's {model.labels}")
    position = {uid: i for i, uid in enumerate(rows["uid"].to_pylist())}
    parents = cands["parent_uid"].to_pylist()
    orphans = sorted({p for p in parents if p not in position})
    if orphans:
        raise InputError(f"epida: {len(orphans)} candidate(s) whose parent_uid is not among the shard's rows, e.g. {orphans[0]}")
    p_t = model.predict_proba(cands["text"].to_pylist())
    p_x = model.predict_proba(rows["text"].to_pylist())[[position[p] for p in parents]]
    return p_t, p_x, np.array([index[x] for x in cands["label"].to_pylist()], dtype=np.int64)


def seas_score(
    rows: pa.Table,
    *candidates: pa.Table,
    m: int = 3,
    alpha: float = 0.5,
    mode: Mode = "both",
    normalise: bool = True,
    round: int = 0,
    classifier: str = "",
    model_path: str,
    device: str = "auto",
    threads: int = 0,
) -> pa.Table:
    """Every candidate of the shard's rows scored by the classifier at ``model_path`` (fingerprint
    ``classifier``): REM (Eq. 7), CEM (Eq. 10), Eq. 11 and the m best per row and algorithm selected."""
    cands = (
        pa.concat_tables([c.select(CANDIDATE.names).cast(CANDIDATE) for c in candidates])
        if candidates
        else CANDIDATE.empty_table()
    )
    algorithm = pa.array([algorithm_of(x) for x in cands["method"].to_pylist()], pa.string())
    if cands.num_rows:
        p_t, p_x, y = feedback(rows, cands, _classifier(model_path, device, threads))
    else:
        p_t = p_x = np.zeros((0, 2))
        y = np.zeros(0, np.int64)
    scored = (
        cands.append_column("algorithm", algorithm)
        .append_column("p_label", pa.array(p_t[np.arange(len(y)), y] if len(y) else [], pa.float64()))
        .append_column("s_div", pa.array(rem(p_t, y), pa.float64()))
        .append_column("s_qua", pa.array(cem(p_t, p_x), pa.float64()))
    )
    scored = seas_select(scored, m=m, alpha=alpha, mode=mode, normalise=normalise, by=("parent_uid", "algorithm"))
    n = scored.num_rows
    scored = scored.append_column("round", pa.array([round] * n, pa.int32())).append_column(
        "classifier", pa.array([classifier] * n, pa.string())
    )
    return scored.select(AUGMENTED.names).cast(AUGMENTED)


def augmented_rounds(*rounds: pa.Table) -> pa.Table:
    """The `augmented` view: every round's scored candidates of the shard, round by round."""
    return pa.concat_tables([r.select(AUGMENTED.names) for r in rounds]) if rounds else AUGMENTED.empty_table()


def augmented_counts(parts: Parts) -> pa.Table:
    """Per round and method of the `augmented` parts: candidates scored, selected, originals they came from."""
    with scratch_duckdb(threads=1) as con:
        return con.sql(
            "SELECT round, method, count(*) AS candidates, count(*) FILTER (WHERE selected) AS selected, "
            f"count(DISTINCT parent_uid) AS originals FROM {parts.sql()} GROUP BY ALL ORDER BY round, method"
        ).to_arrow_table()


def cwe_stage() -> Stage:
    """CWE's stage (``tasks.epida.cwe``, which imports transformers: built when a profile uses it)."""
    from tasks.epida.cwe import cwe_candidates

    return Stage("cwe", "1", cwe_candidates, tags=("gpu",))


EDA = Stage("eda", "1", eda_source)
BACK_TRANSLATION = Stage("back_translation", "1", back_translation_source)
SEAS = Stage("seas", "1", seas_score, tags=("gpu",))
AUGMENTED_VIEW = Stage("augmented", "1", augmented_rounds, view="augmented")
