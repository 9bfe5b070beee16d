"""A few generated rows beside their originals, per augmentation, for the night's page (flows/reports/night_report.py).

Each augmentation is declared once in ``AUGMENTATIONS``: the pipeline, the view of its generated rows, which of
them are generated (``rows``: the curriculum's level 0 and `rejuvenated`'s active pairs are originals), the view of
the originals and how a generated row finds its own (``join``: by ``parent_uid`` unless said), and the columns
shown. The rows are read from the Parquet parts of the artifacts the night's runs used (`storage.runs.view_parts`),
not from the views, which show whatever ran last; each part's bytes are checked against its manifest first
(storage/integrity/). The sample is seeded and random, not the first rows: ``k`` rows by ``md5(seed || uid)``,
so a page written again shows the same rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from storage.integrity import check_files
from storage.parts import parquet_list

K = 5  # rows shown per augmentation
SEED = 0  # the sample's seed: the same night gives the same rows


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """What one augmentation's examples show (see the module docstring). ``columns`` maps a header to a DuckDB
    expression over ``g`` (a generated row) and ``o`` (its original); ``{originals}`` in an expression or in
    ``join`` stands for the originals' parts (a scalar subquery: C2C's parent cluster is several rows)."""

    pipeline: str
    view: str
    title: str
    originals: str
    columns: Mapping[str, str]
    rows: str = "true"
    join: str | None = "o.uid = g.parent_uid"


AUGMENTATIONS: tuple[Augmentation, ...] = (
    Augmentation(
        "self_training",
        "synthetic",
        "synthetic pairs: a sampled monolingual sentence and the teacher's translation (thesis ch. 6)",
        "mono",
        {"monolingual sentence": "o.text", "synthetic source": "g.src", "synthetic target (teacher)": "g.tgt"},
    ),
    Augmentation(
        "rejuvenation",
        "rejuvenated",
        "rejuvenated pairs: an inactive pair's original target and its new one (thesis ch. 5)",
        "bitext",
        {
            "source": "g.src",
            "original target": "o.tgt",
            "rejuvenated target": "g.tgt",
            "p(original)": "g.prob",
            "p(rejuvenated)": "g.rejuvenated_prob",
        },
        rows="g.origin <> 'original'",
    ),
    Augmentation(
        "paraphrase",
        "curriculum",
        "curriculum paraphrases: level d = 1…C beside the original, level 0 (PCC Eq. 4)",
        "labeled",
        {"original": "o.text", "paraphrase": "g.text", "level": "g.level", "similarity G": "g.sim", "label": "g.label"},
        rows="g.level > 0",
    ),
    Augmentation(
        "mt_paraphrase",
        "paraphrased_bitext",
        "constrained paraphrases of one side, paired with the other side of the original pair (paper 002)",
        "bitext",
        {
            "side": "g.side",
            "original": "CASE g.side WHEN 'src' THEN o.src ELSE o.tgt END",
            "paraphrase": "CASE g.side WHEN 'src' THEN g.src ELSE g.tgt END",
            "other side (kept)": "CASE g.side WHEN 'src' THEN g.tgt ELSE g.src END",
            "token Jaccard": "g.jaccard",
        },
    ),
    Augmentation(
        "robustness",
        "robust_bitext",
        "robustness modifiers on pairs: the modified pair beside its original",
        "bitext",
        {
            "modifier": "g.modifier",
            "original source": "o.src",
            "modified source": "g.src",
            "original target": "o.tgt",
            "modified target": "g.tgt",
        },
    ),
    Augmentation(
        "robustness",
        "robust_mono",
        "robustness modifiers on monolingual sentences",
        "mono",
        {"modifier": "g.modifier", "original": "o.text", "modified": "g.text"},
    ),
    Augmentation(
        "epida",
        "augmented",
        "EPiDA's selected candidates (the m highest s_tot = α·s_div + (1 − α)·s_qua per row)",
        "labeled",
        {
            "original": "o.text",
            "selected": "g.text",
            "method": "g.method",
            "round": "g.round",
            "s_tot": "g.s_tot",
            "label": "g.label",
        },
        rows="g.selected",
    ),
    Augmentation(
        "c2c",
        "c2c_generated",
        "C2C-GenDA: a generated utterance beside its parent cluster's input utterances (delexicalised)",
        "cluster_pairs",
        {
            "frame": "g.frame",
            "parent cluster": (
                "(SELECT string_agg(o.text, ' | ' ORDER BY o.text) FROM {originals} o "
                "WHERE o.cluster = g.parent_cluster AND o.role = 'input')"
            ),
            "generated (delexicalised)": "g.delex",
            "generated (relexicalised)": "array_to_string(g.tokens, ' ')",
            "MED to the training set": "g.med_train",
        },
        join=None,
    ),
)


@dataclasses.dataclass(frozen=True)
class Examples:
    """One augmentation's sample: ``generated`` rows of it this night, ``head`` and ``rows`` of the sample (at most
    ``K``), ``missing`` the view whose parts the night did not use (nothing to show)."""

    augmentation: Augmentation
    generated: int
    head: list[str]
    rows: list[list[Any]]
    missing: str | None = None


def examples(
    con: duckdb.DuckDBPyConnection,
    parts: Mapping[str, Mapping[str, Sequence[str]]],
    augmentation: Augmentation,
    *,
    root: Path,
    k: int = K,
    seed: int = SEED,
) -> Examples:
    """``k`` generated rows of ``augmentation`` with their originals, drawn by ``md5(seed || uid)``.

    Args:
        con: A scratch DuckDB connection (`storage.engines.scratch_duckdb`) that reads the parts.
        parts: view -> fingerprint -> the main Parquet parts the night's runs used (`storage.runs.view_parts`).
        augmentation: What to show.
        root: The cache, for the parts' manifests (their bytes are checked before they are read).
        k: Rows shown.
        seed: The sample's seed.

    Returns:
        The sample, the count of generated rows, or which view the night did not fill.

    Raises:
        IntegrityError: A part's bytes differ from its manifest.
    """
    head = list(augmentation.columns)
    files = {v: [f for fs in parts.get(v, {}).values() for f in fs] for v in (augmentation.view, augmentation.originals)}
    for view, found in files.items():
        if not found:
            return Examples(augmentation, 0, head, [], missing=view)
    check_files([f for fs in files.values() for f in fs], root=root)
    gen = f"read_parquet({parquet_list(files[augmentation.view])}, union_by_name = true)"
    orig = f"read_parquet({parquet_list(files[augmentation.originals])}, union_by_name = true)"
    select = ", ".join(f"{expr.format(originals=orig)}" for expr in augmentation.columns.values())
    joined = f" LEFT JOIN {orig} o ON {augmentation.join}" if augmentation.join else ""
    sql = (
        f"SELECT {select} FROM {gen} g{joined} WHERE {augmentation.rows} "
        "ORDER BY md5(CAST($seed AS VARCHAR) || g.uid), g.uid LIMIT $k"
    )
    n = con.execute(f"SELECT count(*) FROM {gen} g WHERE {augmentation.rows}").fetchone()[0]
    rows = [list(r) for r in con.execute(sql, {"seed": seed, "k": k}).fetchall()]
    return Examples(augmentation, n, head, rows)
