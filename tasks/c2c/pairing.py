"""C2C-GenDA's dispersed cluster pairing (Alg. 1) and the folds of cross expansion.

Per semantic frame (the delexicalised utterances with the same set of slot types):

    1. dedupe: one utterance per distinct delexicalised text (the first by source, line)
    2. D = token-level edit distance between every two utterances (rapidfuzz, ``tasks.c2c.edit_distance``)
    3. K-Medoids with k = n // c clusters; a frame with n < 2c utterances is skipped (no pairs)
    4. for each input cluster C, the output cluster C′ by furthest including: among the frame's
       utterances in the other clusters, repeatedly add the u′ with the largest
       DS(u′) = min over C ∪ C′ of D(u′, ·) (the first on ties), while DS ≥ ``min_distance`` — the first
       pick is always taken — and at most ``max_outputs`` = M′; the pick order is the diversity rank r

Constants, from the authors' code (Sanyuan-Chen/C2C-DA, commit 8cdcb46): c = 5 for
the full training set, 3 for the medium and 2 for the small proportion; the stop at DS < 4; M′ = 10;
5 folds; clusters and folds seeded with 42.

K-Medoids: ``kmedoids.fasterpam`` (FasterPAM, Schubert & Rousseeuw 2021) over the precomputed matrix,
BUILD initialisation, one thread, ``random_state`` = the seed (it also orders the swap search): a
maintained implementation that reaches a lower total deviation than the authors' hand-written Voronoi
iteration from random medoids, and the same result on every run. Each utterance then joins its
nearest medoid (ties: the medoid of lowest index); clusters are numbered by their medoid's index.
Hand-written: furthest including and the fold assignment (no package has them).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.parts import Parts
from tasks.c2c.edit_distance import TokenCodes, distance_matrix
from tasks.runtime.stage import Stage

PAIRS = pa.schema(
    [
        ("frame", pa.string()),
        ("cluster", pa.string()),
        ("role", pa.string()),
        ("rank", pa.int32()),
        ("uid", pa.string()),
        ("source", pa.string()),
        ("line", pa.int64()),
        ("text", pa.string()),
        ("medoid", pa.bool_()),
        ("distance", pa.int32()),
        ("fold", pa.int32()),
    ]
)


def medoids_of(dist: np.ndarray, k: int, *, seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    """(medoid indices ascending, the cluster of every utterance: the index into the medoids of its nearest)."""
    import kmedoids

    if k >= len(dist):
        medoids = np.arange(len(dist))
    else:
        medoids = np.sort(
            np.asarray(kmedoids.fasterpam(dist.astype(np.float64), k, init="build", random_state=seed, n_cpu=1).medoids)
        )
    return medoids, np.argmin(dist[:, medoids], axis=1)


def furthest_including(
    dist: np.ndarray, source: np.ndarray, candidates: np.ndarray, *, max_outputs: int = 10, min_distance: int = 4
) -> list[tuple[int, int]]:
    """The output cluster of input cluster ``source`` (indices into ``dist``) among ``candidates``:
    [(utterance, DS at its pick)] in pick (rank) order."""
    if not len(candidates):
        return []
    ds = dist[np.ix_(candidates, source)].min(axis=1).astype(np.int64)
    free = np.ones(len(candidates), dtype=bool)
    picks: list[tuple[int, int]] = []
    while len(picks) < max_outputs and free.any():
        best = int(np.argmax(np.where(free, ds, -1)))  # the first of the largest
        if picks and ds[best] < min_distance:
            break
        picks.append((int(candidates[best]), int(ds[best])))
        free[best] = False
        ds = np.minimum(ds, dist[candidates, candidates[best]])
    return picks


def frame_id(frame: str) -> str:
    """A short stable id of ``frame``: the first 10 hex digits of its MD5."""
    return hashlib.md5(frame.encode()).hexdigest()[:10]


def assign_folds(clusters: list[str], *, folds: int = 5, seed: int = 42) -> dict[str, int]:
    """Cross expansion's folds: the cluster ids sorted, shuffled with ``seed``, dealt round-robin."""
    order = np.random.default_rng(seed).permutation(len(clusters))
    ranked = sorted(clusters)
    return {ranked[j]: i % folds for i, j in enumerate(order)}


def pair_frame(
    frame: str, rows: dict[str, list], codes: TokenCodes, *, cluster_size: int, max_outputs: int, min_distance: int, seed: int
) -> list[dict]:
    """The pairs of one frame's deduplicated rows (``rows``: column -> values, sorted), as ``PAIRS`` rows
    without the fold."""
    n = len(rows["uid"])
    if n < 2 * cluster_size:
        return []
    dist = distance_matrix(codes.encode_all(rows["delex"]))
    medoids, members = medoids_of(dist, n // cluster_size, seed=seed)
    fid = frame_id(frame)
    out = []
    for j, medoid in enumerate(medoids.tolist()):
        source = np.flatnonzero(members == j)
        picks = furthest_including(dist, source, np.flatnonzero(members != j), max_outputs=max_outputs, min_distance=min_distance)
        if not picks:
            continue
        cluster = f"{fid}-{j:03d}"
        for role, rank, (i, d) in [
            *(("input", None, (i, None)) for i in source.tolist()),
            *(("output", r, p) for r, p in enumerate(picks)),
        ]:
            out.append(
                {
                    "frame": frame,
                    "cluster": cluster,
                    "role": role,
                    "rank": rank,
                    "uid": rows["uid"][i],
                    "source": rows["source"][i],
                    "line": rows["line"][i],
                    "text": rows["text"][i],
                    "medoid": role == "input" and i == medoid,
                    "distance": d,
                }
            )
    return out


def frames_of(table: pa.Table) -> dict[str, dict[str, list]]:
    """Per frame, its rows with a distinct delexicalised text (the first by source, line, uid), sorted."""
    table = table.take(
        pc.sort_indices(table, [("frame", "ascending"), ("source", "ascending"), ("line", "ascending"), ("uid", "ascending")])
    )
    columns = {c: table[c].to_pylist() for c in ("uid", "source", "line", "delex", "text")}
    frames: dict[str, dict[str, list]] = {}
    seen: set[tuple[str, str]] = set()
    for i, (frame, text) in enumerate(zip(table["frame"].to_pylist(), columns["text"])):
        if (frame, text) in seen:
            continue
        seen.add((frame, text))
        rows = frames.setdefault(frame, {c: [] for c in columns})
        for c, values in columns.items():
            rows[c].append(values[i])
    return frames


def cluster_pairs(
    delexicalised: Parts, *, cluster_size: int = 5, max_outputs: int = 10, min_distance: int = 4, folds: int = 5, seed: int = 42
) -> pa.Table:
    """Alg. 1 over every frame of the delexicalised rows (``DELEX``): one ``PAIRS`` row per member of an
    input cluster (role ``input``, ``medoid`` marked) and per pick of its output cluster (role ``output``,
    ``rank`` and the DS it was picked at), each pair dealt to a fold. Sorted by frame, cluster, role, rank."""
    codes, rows = TokenCodes(), []
    for frame, frame_rows in frames_of(delexicalised.table(["uid", "source", "line", "delex", "text", "frame"])).items():
        rows += pair_frame(
            frame, frame_rows, codes, cluster_size=cluster_size, max_outputs=max_outputs, min_distance=min_distance, seed=seed
        )
    fold = assign_folds(sorted({r["cluster"] for r in rows}), folds=folds, seed=seed)
    for r in rows:
        r["fold"] = fold[r["cluster"]]
    return pa.Table.from_pylist(rows, schema=PAIRS)


CLUSTER_PAIRS = Stage("cluster_pairs", "1", cluster_pairs, view="cluster_pairs", reduce=True)
