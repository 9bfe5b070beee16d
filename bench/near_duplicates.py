"""Near-duplicate removal (tasks/ingest/near_duplicates.py) against datasketch's own way of using its LSH: the same
clusters, rows/s of each and the ratio.

    .venv/bin/python bench/near_duplicates.py [--data ../shared/data/multi30k_en_de] [--rows 60000] [--repeat 3]

The rows: Multi30k's English training side (29,000 real lines, with their own near copies) and, up to ``--rows``,
planted near copies of them, seeded: punctuation added or removed (J = 1 after normalising), one word replaced by
another Multi30k word, one word dropped, a word doubled. Without the data, generated sentences stand in.

The baseline is datasketch's README example made a filter: one ``MinHash`` per row in a Python loop (``update_batch``
with the row's shingles), ``MinHashLSH.query`` for candidates, each verified with the exact Jaccard (the same
``shingles``/``jaccard``), ``insert`` when the row is kept. With ``hashfunc=shingle_hash`` and the same bands its
signatures and candidates are ours, so the clusters must be identical (checked before timing); with datasketch's
default hash (sha1) the LSH misses other pairs, and the agreement is printed.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.common import best_of
from tasks.ingest import near_duplicates as N

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k_en_de"


def planted(lines: list[str], n: int, seed: int = 0) -> tuple[list[str], dict[int, tuple[int, str]]]:
    """The lines, then near copies of them up to ``n``: (rows, {copy: (the line it copies, the edit)})."""
    rng = random.Random(seed)
    vocabulary = sorted({w for line in lines[:2000] for w in line.split()})
    rows, origin = list(lines), {}
    while len(rows) < n:
        i = rng.randrange(len(lines))
        words = lines[i].split()
        k = rng.randrange(len(words))
        edit = rng.choice(["punctuation", "replace", "drop", "double"])
        if edit == "punctuation":
            copy = lines[i].rstrip(".").replace(" ", ", ", 1) + "!"
        else:
            words[k : k + 1] = {"replace": [rng.choice(vocabulary)], "drop": [], "double": [words[k]] * 2}[edit]
            copy = " ".join(words)
        origin[len(rows)] = (i, edit)
        rows.append(copy)
    return rows, origin


def generated(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(5000)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(8, 20))) for _ in range(n)]


def naive(normalised: list[str], *, threshold: float, num_perm: int, seed: int, hashfunc: Callable | None) -> np.ndarray:
    """datasketch's example as a filter: per row a MinHash, a query, exact verification, an insert if kept. The
    texts come normalised (``normalise_column``, not timed: the loop gets that for free)."""
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=num_perm, params=N.lsh_params(threshold, num_perm))
    duplicate_of = np.full(len(normalised), -1, np.int64)
    sets = []
    for i, text in enumerate(normalised):
        shingled = N.shingles(text)
        sets.append(shingled)
        if hashfunc is None:
            m = MinHash(num_perm=num_perm, seed=seed)
            m.update_batch([s.encode("utf-8") for s in shingled])
        else:
            m = MinHash(num_perm=num_perm, seed=seed, hashfunc=hashfunc)
            m.update_batch(list(shingled))
        for j in sorted(lsh.query(m)):
            if N.jaccard(shingled, sets[j]) >= threshold:
                duplicate_of[i] = j
                break
        else:
            lsh.insert(i, m)
    return duplicate_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--rows", type=int, default=60_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threshold", type=float, default=0.8)
    args = ap.parse_args()
    source = args.data / "train.en"
    lines = source.read_text(encoding="utf-8").splitlines() if source.is_file() else generated(29_000)
    texts, origin = planted(lines, args.rows)
    keys = [f"multi30k:{i + 1}" if i < len(lines) else f"planted:{i}" for i in range(len(texts))]
    column = pa.array(texts)
    params = {"threshold": args.threshold, "num_perm": 128, "seed": 1}
    N.lsh_params(args.threshold, 128)  # datasketch's band choice, once per process: not timed
    normalised = N.normalise_column(column).to_pylist()
    ours = N.near_duplicates(keys, column, **params)
    same = naive(normalised, hashfunc=N.shingle_hash, **params)
    assert np.array_equal(ours.duplicate_of, same), "the clusters differ from datasketch's"
    t_naive, _ = best_of(args.repeat, lambda: naive(normalised, hashfunc=N.shingle_hash, **params))
    t_ours, ours = best_of(args.repeat, lambda: N.near_duplicates(keys, column, **params))
    sha1 = naive(normalised, hashfunc=None, **params)
    similar = {c: N.jaccard(N.shingles(normalised[c]), N.shingles(normalised[i])) for c, (i, _) in origin.items()}
    close = [c for c in origin if similar[c] >= args.threshold]
    kinds = sorted({edit for _, edit in origin.values()})
    per_kind = ", ".join(
        f"{k} {sum(ours.duplicate_of[c] >= 0 for c in origin if origin[c][1] == k)}/{sum(e == k for _, e in origin.values())}"
        for k in kinds
    )
    print(
        f"{len(texts):,} rows ({'Multi30k en' if source.is_file() else 'generated'}: {len(lines):,}, planted near copies: "
        f"{len(origin):,}); char 5-grams, 128 permutations, threshold {args.threshold}, bands {N.lsh_params(args.threshold, 128)}"
    )
    print(f"dropped: {(~ours.keep).sum():,}, the same clusters as the loop; planted copies dropped: {per_kind}")
    print(
        f"planted copies with J >= {args.threshold} to their line: {len(close):,}, dropped: "
        f"{sum(ours.duplicate_of[c] >= 0 for c in close):,} (the rest: LSH misses, or their line itself dropped)"
    )
    print(
        f"rows/s: datasketch loop {len(texts) / t_naive:,.0f}, ours {len(texts) / t_ours:,.0f}: {t_naive / t_ours:.1f}x "
        f"(best of {args.repeat})"
    )
    print(f"agreement with the loop on datasketch's default hash (sha1): {100 * (sha1 == ours.duplicate_of).mean():.3f}% of rows")


if __name__ == "__main__":
    main()
