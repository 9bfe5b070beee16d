"""C2C-GenDA's cross expansion: a generator per fold trained on the other folds' cluster pairs, generation
from the held-out fold's input clusters, relexicalisation, and the selection of new rows.

    cluster_pairs ─ fold f held out ─ train (models.c2c) on the pairs of the other folds
                  └ fold f's input clusters → c2c_generate: n_outputs utterances per cluster (ranks 0..n−1),
                    each relexicalised `fills` times from the training value pool, MED to the training set
    every fold ─ c2c_select: drop empty ones, those equal to a training utterance (delexicalised) and
                 repeats (the first by fold, cluster, rank kept) → `c2c_generated`, slots rows with lineage
                 to the input cluster (``parent_cluster``) and the fold's model

The authors generate 10 per cluster and do not dedupe against the training data; we do (a copy of a
training utterance adds nothing to train on), and Table 5's figures are measured before it
(``tasks.c2c.diversity``, stage c2c_diversity). Hand-written: the orchestration of folds and the
selection; the generator is models.c2c's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from models.runtime import loaded
from storage.parts import Parts
from storage.schemas import DROPPED_EXTRA, with_uid
from tasks.c2c.delex import draw_values, relexicalise_row, value_pool
from tasks.c2c.diversity import DIVERSITY, diversity_table
from tasks.c2c.edit_distance import TokenCodes, min_distances
from tasks.runtime.stage import Stage

GENERATED = pa.schema(
    [
        ("uid", pa.string()),
        ("parent_cluster", pa.string()),
        ("frame", pa.string()),
        ("rank", pa.int32()),
        ("fold", pa.int32()),
        ("fill", pa.int32()),
        ("delex", pa.string()),
        ("tokens", pa.list_(pa.string())),
        ("tags", pa.list_(pa.string())),
        ("med_train", pa.int64()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("model", pa.string()),
    ]
)
SELECT_DROPPED = pa.schema([*GENERATED, *DROPPED_EXTRA])


def clusters_of(pairs: pa.Table) -> dict[str, dict[str, Any]]:
    """{cluster: {frame, fold, inputs: [delex tokens], outputs: [delex tokens in rank order]}}, by cluster id."""
    out: dict[str, dict[str, Any]] = {}
    for r in pairs.select(["cluster", "frame", "fold", "role", "rank", "text"]).to_pylist():
        c = out.setdefault(r["cluster"], {"frame": r["frame"], "fold": r["fold"], "inputs": [], "outputs": []})
        if r["role"] == "input":
            c["inputs"].append(r["text"].split())
        else:
            c["outputs"].append((r["rank"], r["text"].split()))
    for c in out.values():
        c["outputs"] = [tokens for _, tokens in sorted(c["outputs"], key=lambda o: o[0])]
    return dict(sorted(out.items()))


def training_pairs(pairs: pa.Table, held_out: int) -> list[tuple[list[list[str]], list[list[str]]]]:
    """The (input cluster, output cluster) pairs of every fold but ``held_out``, by cluster id."""
    return [(c["inputs"], c["outputs"]) for c in clusters_of(pairs).values() if c["fold"] != held_out]


def c2c_trainer(
    pairs: pa.Table,
    *,
    fold: int,
    settings: Mapping[str, Any],
    device: str = "auto",
    threads: int = 0,
    fork: bool = False,
) -> Callable[[Path], None]:
    """``build(path)`` for the flow driver's model stage: the fold's generator (models.c2c.train_c2c; torch is
    imported when it trains, not for a cached model); with ``fork``, in a process of its own (the same generator,
    trained beside others: ``models.nmt.fairseq_zygote.in_fork``)."""
    train = training_pairs(pairs, fold)

    def build(path: Path) -> None:
        from models.c2c import C2CSettings, train_c2c
        from models.nmt.fairseq_zygote import in_fork

        kwargs = {"settings": C2CSettings(**settings), "device": device, "threads": threads}
        if fork:
            in_fork(train_c2c, train, path, **kwargs)
        else:
            train_c2c(train, path, **kwargs)

    return build


def _load_generator(model_path: str, device: str, threads: int):
    from models.c2c import C2CGenerator

    return C2CGenerator.load(model_path, device=device, threads=threads)


_generator = loaded(_load_generator, maxsize=2)


def _seed(*parts: object) -> list[int]:
    return [int.from_bytes(hashlib.md5("\x1f".join(map(str, parts)).encode()).digest()[:4], "little")]


def c2c_generate(
    pairs: Parts,
    *,
    delexicalised: pa.Table,
    fold: int,
    n_outputs: int = 10,
    max_tokens: int = 40,
    temperature: float = 1.0,
    fills: int = 1,
    seed: int = 42,
    model: str = "",
    source: str = "",
    model_path: str | None = None,
    device: str = "auto",
    threads: int = 0,
) -> pa.Table:
    """Generate from fold ``fold``'s input clusters with the fold's model (``model_path``, a resource;
    ``model`` its fingerprint), relexicalise each utterance ``fills`` times with values drawn (seeded by
    seed, cluster, rank, fill) from the training value pool of ``delexicalised`` (a side input), and add
    each one's MED to the delexicalised training set. ``GENERATED`` rows by cluster, rank, fill."""
    clusters = {k: c for k, c in clusters_of(pairs.table()).items() if c["fold"] == fold}
    if not clusters:
        return GENERATED.empty_table()
    outputs = _generator(model_path, device, threads).generate(
        [c["inputs"] for c in clusters.values()], n_outputs=n_outputs, max_tokens=max_tokens, temperature=temperature, seed=seed
    )
    pool = value_pool(delexicalised)
    codes = TokenCodes()
    training = codes.encode_all(delexicalised["delex"].to_pylist())
    rows: list[dict[str, Any]] = []
    for (cluster, c), generated in zip(clusters.items(), outputs):
        for rank, delex in enumerate(generated):
            for fill in range(fills):
                tokens, tags = relexicalise_row(
                    delex, draw_values(delex, pool, np.random.default_rng(_seed(seed, cluster, rank, fill))), pool
                )
                rows.append(
                    {
                        "parent_cluster": cluster,
                        "frame": c["frame"],
                        "rank": rank,
                        "fold": fold,
                        "fill": fill,
                        "delex": " ".join(delex),
                        "tokens": tokens,
                        "tags": tags,
                        "source": source,
                        "line": None,
                        "model": model,
                    }
                )
    meds = min_distances(codes.encode_all([r["delex"].split() for r in rows]), training)
    for r, med in zip(rows, meds.tolist()):
        r["med_train"] = med
    table = pa.Table.from_pylist([{"uid": None, **r} for r in rows], schema=GENERATED)
    return with_uid(table, "slots").cast(GENERATED)


def c2c_select(delexicalised: Parts, *generated: Parts) -> dict[str, pa.Table]:
    """The new rows of every fold's generation: ``part`` (kept, ``GENERATED``) and ``dropped`` with the
    reason: ``empty`` (no token), ``in_training`` (its delexicalised text is a training utterance's),
    ``duplicate`` (the same delexicalised text, or the same relexicalised row, came earlier by fold,
    cluster, rank, fill)."""
    training = set(delexicalised.table(["text"])["text"].to_pylist())
    table = pa.concat_tables([g.table() for g in generated]).cast(GENERATED) if generated else GENERATED.empty_table()
    table = table.sort_by([("fold", "ascending"), ("parent_cluster", "ascending"), ("rank", "ascending"), ("fill", "ascending")])
    seen_delex: dict[str, tuple[int, int]] = {}  # delex text -> the (cluster, rank) that kept it
    seen_uid: set[str] = set()
    keep, reasons = [], []
    for i, r in enumerate(table.select(["uid", "parent_cluster", "rank", "delex"]).to_pylist()):
        origin = (r["parent_cluster"], r["rank"])
        reason = (
            "empty"
            if not r["delex"]
            else "in_training"
            if r["delex"] in training
            else "duplicate"
            if seen_delex.get(r["delex"], origin) != origin or r["uid"] in seen_uid
            else None
        )
        if reason is None:
            seen_delex[r["delex"]] = origin
            seen_uid.add(r["uid"])
            keep.append(i)
        else:
            reasons.append((i, reason))
    dropped = table.take(pa.array([i for i, _ in reasons], pa.int64()))
    dropped = dropped.append_column("reason", pa.array([why for _, why in reasons], pa.string()))
    return {"part": table.take(pa.array(keep, pa.int64())), "dropped": dropped.cast(SELECT_DROPPED)}


def c2c_diversity(delexicalised: Parts, *generated: Parts, source: str = "") -> pa.Table:
    """Table 5 of every fold's generation before selection (fill 0), delexicalised against the delexicalised
    training utterances and relexicalised against the original ones; one row per level."""
    train = delexicalised.table(["delex", "tokens"])
    gen = pa.concat_tables([g.table(["delex", "tokens", "fill"]) for g in generated]) if generated else None
    gen = gen.filter(pc.equal(gen["fill"], 0)) if gen is not None else GENERATED.empty_table()
    table = diversity_table(
        [d.split() for d in gen["delex"].to_pylist()],
        train["delex"].to_pylist(),
        gen["tokens"].to_pylist(),
        train["tokens"].to_pylist(),
    )
    return table.append_column("source", pa.array([source] * table.num_rows, pa.string())).cast(
        pa.schema([*DIVERSITY, ("source", pa.string())])
    )


C2C_GENERATE = Stage("c2c_generate", "1", c2c_generate, reduce=True, tags=("gpu",))
C2C_SELECT = Stage("c2c_select", "1", c2c_select, view="c2c_generated", reduce=True)
C2C_DIVERSITY = Stage("c2c_diversity", "1", c2c_diversity, view="c2c_diversity", reduce=True)
