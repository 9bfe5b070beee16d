"""Near-duplicate rows: MinHash LSH (Broder 1997; Leskovec et al., *Mining of Massive Datasets*, ch. 3) with
datasketch's definitions, every candidate pair verified with its exact Jaccard similarity.

    J(A, B) = |A ∩ B| / |A ∪ B|   over the rows' shingle sets (1 for two empty sets)

Text is compared after ``normalise``: NFKC, lowercased, each punctuation character (``\\p{P}``) replaced by a space,
each run of whitespace (``str.isspace``'s characters) made one space, trimmed; so "A dog, running." and
"a dog running" are the same text. Shingles are the distinct n-character substrings of that text (``shingle="char"``;
the whole text when it is shorter than n, none when empty) or its n-word sequences (``"word"``).

Rows come in priority order (the caller sorts by (source, line)). Row i is dropped iff some earlier *kept* row j,
found by the LSH, has J(i, j) >= ``threshold``; ``duplicate_of[i]`` is the first such j. A dropped row is never the
kept row of another, so a chain of near copies drops each link that is close enough to a kept row, not transitively.
Every reported pair is exact (no false positives); a pair at J >= ``threshold`` can be missed with the LSH's
probability (1 − J^r)^b: with the defaults (128 permutations, threshold 0.8: b=16 bands of r=8 rows, as datasketch's
``MinHashLSH`` picks for ``LSH_WEIGHTS``), 5.3 % at J=0.8, 0.6 % at 0.85, 0.01 % at 0.9, none for identical text
(identical normalised texts are grouped before the LSH). The result is deterministic: no unseeded randomness, and it
does not depend on how the rows are chunked.

What datasketch provides here, and what is hand-written: the MinHash definition (the ``affine32`` permutations drawn
from ``MinHash(num_perm, seed)``, applied after the MurmurHash3 finaliser) and the choice of bands (``MinHashLSH``'s
``b``, ``r``). Its objects work one row at a time in Python (``update_batch`` per row; ``insert`` and ``query`` per
row and band, ~140 µs a row measured), so the signatures of all rows are computed here in one numpy pass (equal to
``MinHash(num_perm, seed, hashfunc=shingle_hash).update_batch(shingles)``, tested) and the bands are grouped with
``np.unique`` (the same candidate pairs as ``MinHashLSH.query``, tested).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import ConfError
from tasks.ingest.filters import Codepoints, Scored

SHINGLES = ("char", "word")
# datasketch's MinHashLSH weights (false positive, false negative) when it picks the bands: a false positive costs
# one exact Jaccard here, a false negative a duplicate kept, so misses weigh 19 times more
LSH_WEIGHTS = (0.05, 0.95)
MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # the shingle hash's polynomial base (odd)
MASK64 = (1 << 64) - 1
CHUNK_SHINGLES = 1 << 16  # shingles per numpy block of the signatures: (num_perm, CHUNK_SHINGLES) uint32


@dataclass(frozen=True)
class NearDuplicates(Scored):
    """``Scored`` plus ``duplicate_of``: for each row, the index of the earlier kept row it duplicates (-1 if kept).
    ``value`` is the exact Jaccard with that row (0 for a kept row)."""

    duplicate_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # after Scored's defaulted fields


def normalise(text: str) -> str:
    """``text`` as near-duplicate and contamination checks compare it (``normalise_column`` on one value)."""
    return normalise_column(pa.array([text], pa.string()))[0].as_py()


def normalise_column(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """NFKC, Arrow's ``utf8_lower``, each ``\\p{P}`` to a space, whitespace runs to one space, trimmed; null to ""."""
    text = pc.utf8_lower(pc.utf8_normalize(pc.fill_null(texts, ""), "NFKC"))
    text = pc.replace_substring_regex(text, r"\p{P}", " ")
    text = pc.utf8_trim(pc.replace_substring_regex(text, r"[\t\n\v\f\r\x1c-\x1f\x85\p{Z}]+", " "), " ")
    return text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text


def shingles(text: str, *, shingle: str = "char", n: int = 5) -> set[str]:
    """The shingle set of a normalised ``text``: its n-character substrings or n-word sequences (the whole text if
    it has fewer, none if it is empty)."""
    if not text:
        return set()
    units = list(text) if shingle == "char" else text.split(" ")
    join = "".join if shingle == "char" else " ".join
    return {join(units[k : k + n]) for k in range(max(len(units) - n, 0) + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 1.0 for two empty sets."""
    return len(a & b) / len(a | b) if a or b else 1.0


def _fmix64(h):
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    return h ^ (h >> 33)


def shingle_hash(s: str) -> int:
    """A shingle's 32-bit hash: the top half of MurmurHash3's fmix64 of Σₖ (code point + 1)·Mᵏ mod 2⁶⁴."""
    h, power = 0, 1
    for c in s:
        h, power = (h + (ord(c) + 1) * power) & MASK64, (power * int(MULTIPLIER)) & MASK64
    return _fmix64(h) >> 32


def _fmix64_np(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _powers(n: int) -> np.ndarray:
    factors = np.full(max(n, 1), MULTIPLIER, np.uint64)
    factors[0] = 1
    return np.cumprod(factors)  # M⁰, M¹, …: the products wrap modulo 2⁶⁴


def _char_hashes(text: pa.Array, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(every row's n-character shingle hashes, end to end, in row order; their count per row)."""
    cps = Codepoints.of(text)
    units = cps.cps.astype(np.uint64) + np.uint64(1)
    window = np.zeros(len(units), np.uint64)
    for j, power in enumerate(_powers(min(n, len(units))).tolist()):
        window[: len(units) - j] += units[j:] * np.uint64(power)
    first = np.cumsum(cps.lengths) - cps.lengths
    at = np.arange(len(units)) - first[cps.rows]  # position in its row
    full = at <= cps.lengths[cps.rows] - n  # a window that ends inside its row
    short = np.flatnonzero((cps.lengths > 0) & (cps.lengths < n))
    whole = np.zeros(len(short), np.uint64)  # a row shorter than n: one shingle, the whole row
    for j, power in enumerate(_powers(n).tolist()):
        inside = cps.lengths[short] > j
        whole[inside] += units[first[short][inside] + j] * np.uint64(power)
    hashes = np.concatenate([window[full], whole])
    owner = np.concatenate([cps.rows[full], short])
    order = np.argsort(owner, kind="stable")
    return (_fmix64_np(hashes[order]) >> np.uint64(32)), np.bincount(owner, minlength=len(cps.lengths))


def _word_hashes(text: pa.Array, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(every row's n-word shingle hashes, row after row; their count per row)."""
    grams = [list(shingles(t, shingle="word", n=n)) for t in text.to_pylist()]
    cps = Codepoints.of(pa.array([g for row in grams for g in row], pa.string()))  # no shingle is empty
    first = np.cumsum(cps.lengths) - cps.lengths
    powers = _powers(int(cps.lengths.max(initial=1)))[np.arange(len(cps.cps)) - first[cps.rows]]
    sums = np.add.reduceat((cps.cps.astype(np.uint64) + np.uint64(1)) * powers, first) if len(first) else first.astype(np.uint64)
    return _fmix64_np(sums) >> np.uint64(32), np.array([len(g) for g in grams], np.int64)


def signatures(normalised: pa.Array, *, shingle: str = "char", n: int = 5, num_perm: int = 128, seed: int = 1) -> np.ndarray:
    """Each row's MinHash (rows, num_perm) uint32: datasketch's ``MinHash(num_perm, seed, hashfunc=shingle_hash)``
    updated with the row's shingles (all max for a row without any, as an empty MinHash)."""
    from datasketch import MinHash

    a, b = MinHash(num_perm=num_perm, seed=seed).permutations  # affine32: uint32 a (odd), b
    hashes, counts = (_char_hashes if shingle == "char" else _word_hashes)(normalised, n)
    h = hashes.astype(np.uint32)  # MurmurHash3's fmix32, as datasketch pre-mixes each input hash
    h = (h ^ (h >> np.uint32(16))) * np.uint32(0x85EBCA6B)
    h = (h ^ (h >> np.uint32(13))) * np.uint32(0xC2B2AE35)
    h = h ^ (h >> np.uint32(16))
    out = np.full((len(counts), num_perm), np.iinfo(np.uint32).max, np.uint32)
    rows = np.flatnonzero(counts)
    ends = np.cumsum(counts[rows])
    start = 0
    while start < len(rows):
        stop = max(int(np.searchsorted(ends, (ends[start - 1] if start else 0) + CHUNK_SHINGLES, side="right")), start + 1)
        lo, hi = (ends[start - 1] if start else 0), ends[stop - 1]
        block = np.multiply.outer(a, h[lo:hi])  # (num_perm, shingles) uint32: the wraparound is the modulo 2³²
        block += b[:, None]
        out[rows[start:stop]] = np.minimum.reduceat(block, ends[start:stop] - counts[rows[start:stop]] - lo, axis=1).T
        start = stop
    return out


@functools.cache
def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands b, rows per band r): datasketch's ``MinHashLSH`` choice for ``threshold`` with ``LSH_WEIGHTS``."""
    from datasketch import MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, weights=LSH_WEIGHTS)
    return lsh.b, lsh.r


def candidate_pairs(sig: np.ndarray, *, bands: int, rows: int) -> np.ndarray:
    """Every pair (j, i), j < i, whose signatures agree on all ``rows`` values of some band (``MinHashLSH``'s
    buckets), sorted by i then j."""
    pairs = []
    for band in range(bands):
        block = np.ascontiguousarray(sig[:, band * rows : (band + 1) * rows])
        _, label = np.unique(block.view(np.dtype((np.void, block.dtype.itemsize * rows))).ravel(), return_inverse=True)
        members = np.argsort(label, kind="stable")  # by bucket, rows in order within one
        edges = np.flatnonzero(np.diff(label[members], prepend=-1, append=-1))
        size = np.diff(edges)
        shared = np.repeat(size, size) > 1
        at, later = members[shared], (np.repeat(edges[1:], size) - np.arange(len(members)) - 1)[shared]
        begin = np.flatnonzero(shared)  # each member pairs with the `later` members after it in its bucket
        offsets = np.arange(int(later.sum())) - np.repeat(np.cumsum(later) - later, later)
        pairs.append(np.stack([np.repeat(at, later), members[np.repeat(begin + 1, later) + offsets]], axis=1))
    both = np.concatenate([np.zeros((0, 2), np.int64), *pairs])
    code = np.unique(both[:, 1] * len(sig) + both[:, 0])
    return np.stack([code % max(len(sig), 1), code // max(len(sig), 1)], axis=1)


def near_duplicates(
    keys: pa.Array | pa.ChunkedArray | Sequence[str],
    texts: pa.Array | pa.ChunkedArray,
    *,
    shingle: str = "char",
    n: int = 5,
    num_perm: int = 128,
    threshold: float = 0.8,
    seed: int = 1,
) -> NearDuplicates:
    """Rows in priority order; row i is dropped iff an earlier kept row j that the LSH pairs it with has J(i, j) >=
    ``threshold`` (module docstring), as a duplicate of the first such j. The detail of a dropped row names that row
    by its key and gives J with 4 decimals: ``near_duplicate_of=multi30k:123 jaccard=0.8571``."""
    if shingle not in SHINGLES:
        raise ConfError(f"near_duplicates: parameter shingle: expected one of {', '.join(SHINGLES)}, found {shingle!r}")
    if not 0 < threshold <= 1 or n < 1 or num_perm < 2:
        raise ConfError(
            f"near_duplicates: expected 0 < threshold <= 1, n >= 1, num_perm >= 2; found threshold={threshold}, n={n}, "
            f"num_perm={num_perm}"
        )
    normalised = normalise_column(texts)
    total = len(normalised)
    if total == 0:
        return NearDuplicates(np.ones(0, bool), np.zeros(0), [], np.zeros(0, np.int64))
    codes = pc.dictionary_encode(normalised).indices.to_numpy(zero_copy_only=False)
    _, first = np.unique(codes, return_index=True)
    reps = np.sort(first)  # the first row of each normalised text; the others are its copies (J = 1)
    rep_text = pc.take(normalised, pa.array(reps, pa.int64()))
    sig = signatures(rep_text, shingle=shingle, n=n, num_perm=num_perm, seed=seed)
    bands, rows = lsh_params(threshold, num_perm)
    pairs = candidate_pairs(sig, bands=bands, rows=rows)
    strings = rep_text.to_pylist()
    sets: dict[int, set[str]] = {}

    def shingled(k: int) -> set[str]:
        if k not in sets:
            sets[k] = shingles(strings[k], shingle=shingle, n=n)
        return sets[k]

    of, score = np.full(len(reps), -1, np.int64), np.zeros(len(reps))
    starts = np.flatnonzero(np.diff(pairs[:, 1], prepend=-1)) if len(pairs) else np.zeros(0, np.int64)
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(pairs)]):
        i = int(pairs[lo, 1])
        for j in pairs[lo:hi, 0].tolist():
            if of[j] < 0 and (similarity := jaccard(shingled(i), shingled(j))) >= threshold:
                of[i], score[i] = j, similarity
                break
    duplicate_of, value = np.full(total, -1, np.int64), np.zeros(total)
    duplicate_of[reps], value[reps] = np.where(of >= 0, reps[np.maximum(of, 0)], -1), score
    copy = np.setdiff1d(np.arange(total), reps)  # a later row with the same normalised text as a first one
    origin = first[codes[copy]]
    kept_origin = duplicate_of[origin] < 0
    duplicate_of[copy] = np.where(kept_origin, origin, duplicate_of[origin])
    value[copy] = np.where(kept_origin, 1.0, value[origin])
    keep = duplicate_of < 0
    names = keys.to_pylist() if isinstance(keys, pa.Array | pa.ChunkedArray) else list(keys)
    detail: list[str | None] = [None] * total
    for i in np.flatnonzero(~keep).tolist():
        detail[i] = f"near_duplicate_of={names[duplicate_of[i]]} jaccard={round(float(value[i]), 4) + 0.0:g}"
    return NearDuplicates(keep, value, detail, duplicate_of)
