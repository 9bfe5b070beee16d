"""C2C-GenDA's dispersed cluster pairing (Alg. 1) over the full ATIS training set, against a pure-Python
edit-distance baseline in the same run.

    .venv/bin/python bench/c2c_pairing.py [--data ../shared/data/atis_slots/train.jsonl] [--cluster-size 5]

Both ways run the same pairing (``tasks.c2c.pairing.cluster_pairs``: dedupe per frame, K-Medoids with
FasterPAM, furthest including) on the delexicalised rows; they differ only in the distance matrix:
  - ours:     rapidfuzz's ``cdist`` (C++, every core) over tokens encoded as characters;
  - baseline: a textbook Wagner–Fischer dynamic programme over the token lists in pure Python, each
              unordered pair once (the matrix is symmetric).
The outputs must be identical (checked before the ratio is printed). Delexicalisation is timed apart.
Goal: ≥ 20× the baseline and under 30 s for ours. Without the ATIS file the demo's slot rows stand in.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa

from storage.parts import Parts
from storage.schemas import with_uid
from tasks.c2c import pairing as c2c_pairing
from tasks.c2c.delex import delexicalise
from tasks.c2c.edit_distance import distance_matrix

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "atis_slots" / "train.jsonl"
GOAL_RATIO, GOAL_SECONDS = 20.0, 30.0


def python_edit_distance(a: list[str], b: list[str]) -> int:
    """Unit-cost Levenshtein over tokens, the Wagner–Fischer recurrence, two rows at a time."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def python_matrix(utterances: list[str], _b=None, **_kw) -> np.ndarray:
    """The baseline's distance matrix of encoded utterances (each character one token)."""
    tokens = [list(u) for u in utterances]
    n = len(tokens)
    dist = np.zeros((n, n), dtype=np.int32)
    for i in range(n):
        for j in range(i + 1, n):
            dist[i, j] = dist[j, i] = python_edit_distance(tokens[i], tokens[j])
    return dist


def load_rows(path: Path | None) -> pa.Table:
    if path is not None and path.exists():
        rows = [json.loads(line) for line in path.open(encoding="utf-8")]
        source = path.stem
    else:
        from demo import iter_slots

        rows = [{"tokens": t, "tags": g} for t, g in iter_slots(4478)]
        source = "demo"
    table = pa.table(
        {
            "tokens": [r["tokens"] for r in rows],
            "tags": [r["tags"] for r in rows],
            "source": [source] * len(rows),
            "line": pa.array(range(1, len(rows) + 1), pa.int64()),
        }
    )
    return with_uid(table, "slots")


def timed_pairs(parts: Parts, matrix, cluster_size: int, repeats: int) -> tuple[pa.Table, float, float]:
    """(pairs, best wall time of ``repeats`` runs, of which in the distance matrices)."""
    spent = [0.0]

    def timed_matrix(*a, **kw):
        t0 = time.perf_counter()
        try:
            return matrix(*a, **kw)
        finally:
            spent[0] += time.perf_counter() - t0

    c2c_pairing.distance_matrix = timed_matrix  # the one difference between the two runs
    best = (float("inf"), 0.0)
    try:
        for _ in range(repeats):
            spent[0], t0 = 0.0, time.perf_counter()
            out = c2c_pairing.cluster_pairs(parts, cluster_size=cluster_size)
            best = min(best, (time.perf_counter() - t0, spent[0]))
    finally:
        c2c_pairing.distance_matrix = distance_matrix
    return out, *best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--cluster-size", type=int, default=5)
    args = ap.parse_args()
    rows = load_rows(args.data)
    t0 = time.perf_counter()
    delex = delexicalise(rows)["part"]
    t_delex = time.perf_counter() - t0
    parts = Parts.of_tables([delex])
    c2c_pairing.cluster_pairs(parts, cluster_size=args.cluster_size)  # warm: imports, rapidfuzz's thread pool
    ours, t_ours, d_ours = timed_pairs(parts, distance_matrix, args.cluster_size, repeats=3)
    base, t_base, d_base = timed_pairs(parts, python_matrix, args.cluster_size, repeats=1)
    assert ours.equals(base), "rapidfuzz and the pure-Python distances gave different pairs"
    frames = len(set(delex["frame"].to_pylist()))
    paired = len(set(ours["frame"].to_pylist()))
    clusters = len(set(ours["cluster"].to_pylist()))
    targets = sum(r == "output" for r in ours["role"].to_pylist())
    print(
        f"data: {args.data if args.data.exists() else 'demo slots'}: {rows.num_rows:,} rows, {delex.num_rows:,} "
        f"delexicalised ({t_delex:.2f} s), {frames:,} frames; c = {args.cluster_size}: {paired:,} frames paired, "
        f"{clusters:,} cluster pairs, {targets:,} output utterances (identical both ways)"
    )
    print(
        f"pairing: rapidfuzz {t_ours:.2f} s, pure-Python edit distance {t_base:.2f} s -> {t_base / t_ours:.1f}x "
        f"(goal >= {GOAL_RATIO:.0f}x: {'met' if t_base / t_ours >= GOAL_RATIO else 'MISSED'}; "
        f"under {GOAL_SECONDS:.0f} s: {'met' if t_ours + t_delex < GOAL_SECONDS else 'MISSED'})"
    )
    print(
        f"  of which the edit-distance matrices: rapidfuzz {d_ours:.3f} s, pure Python {d_base:.2f} s -> "
        f"{d_base / d_ours:.0f}x; the rest (grouping, FasterPAM, furthest including) {t_ours - d_ours:.3f} s"
    )


if __name__ == "__main__":
    main()
