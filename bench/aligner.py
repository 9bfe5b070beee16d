"""fast_align both ways (5 iterations, `-d -o -v` and `-d -o -v -r`) on N pairs: pairs/s against a baseline.

The pairs: N seeded demo pairs (~7 tokens a side), or the first N lines of a line-aligned, tokenised bitext
(``--src``/``--tgt``, e.g. bench/thesis_scale.py's ~25-token pairs under its ``--data``).

With FAST_ALIGN_BIN (a built clab/fast_align): the reference binary on the same corpus written as "src ||| tgt",
forward and reverse timed one after the other (its own OpenMP threads, OMP_NUM_THREADS left as set), against
`align_both` (encoding included, compilation not: one warm-up call first). Agreement is checked first, per
direction: the share of our links among the tool's and of the tool's among ours (goal >= 95 %; its OpenMP count
updates race, so a run differs from run to run in the last bits). Goal: >= 2x the tool's pairs/s (issue 18).

Without it: the same model in plain numpy, one sentence at a time (dense θ, the prior summed directly), on the
first min(N, --naive-pairs) pairs, its time scaled by N / that count (EM is linear in the pairs); agreement
against ours on that subset first. No goal beyond showing the kernels' gain.

    FAST_ALIGN_BIN=/tmp/fast_align/build/fast_align .venv/bin/python bench/aligner.py --pairs 100000
    D=/tmp/augdag-thesis-scale-data/bitext-4500000   # written by bench/thesis_scale.py
    FAST_ALIGN_BIN=... .venv/bin/python bench/aligner.py --pairs 100000 --src $D/train.en --tgt $D/train.de
    .venv/bin/python bench/aligner.py --pairs 100000 --threads 2
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from demo import iter_bitext
from models.aligner import Alignment, align_both
from models.aligner.kernels import optimize_tension

SPEED_GOAL, AGREEMENT_GOAL = 2.0, 0.95


def first_lines(path: Path, n: int) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(n), f)]


def best_of(repeat: int, fn, *args, **kwargs) -> tuple[object, float]:
    best, out = math.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return out, best


def agreement(ours: Alignment, theirs: Alignment) -> tuple[float, float, int]:
    """(share of our links in theirs, share of theirs in ours, links in one but not the other)."""

    def keys(al: Alignment) -> np.ndarray:
        sentence = np.repeat(np.arange(len(al)), np.diff(al.offsets))
        return sentence * 1_000_000 + al.src.astype(np.int64) * 1000 + al.tgt

    a, b = keys(ours), keys(theirs)
    hits = len(np.intersect1d(a, b))
    return hits / max(len(a), 1), hits / max(len(b), 1), len(a) + len(b) - 2 * hits


# ---- the reference binary
def reference(binary: str, corpus: Path) -> tuple[Alignment, Alignment]:
    """fast_align -d -o -v, then with -r; links as (src, tgt) (the tool prints them so in both directions)."""
    out = []
    for flag in ([], ["-r"]):
        run = subprocess.run([binary, "-i", str(corpus), "-d", "-o", "-v", *flag], capture_output=True, text=True, check=True)
        out.append(Alignment.from_pharaoh(run.stdout.splitlines()))
    return out[0], out[1]


# ---- the naive baseline: the same model in numpy, one sentence at a time
def naive_prior(m: int, n: int, tension: float, p0: float) -> np.ndarray:
    """(m, n+1): p(a_j = i) with the NULL column first; Z summed directly (the tool uses the closed form)."""
    j = np.arange(1, m + 1)[:, None] / m
    h = np.exp(-tension * np.abs(np.arange(1, n + 1)[None, :] / n - j))
    return np.hstack([np.full((m, 1), p0), (1 - p0) * h / h.sum(1, keepdims=True)])


def naive_digamma(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    result = np.zeros_like(x)
    while (small := x < 7).any():
        result[small] -= 1 / x[small]
        x[small] += 1
    x -= 0.5
    xx2 = 1 / x**2
    xx4 = xx2 * xx2
    return result + np.log(x) + xx2 / 24 - 7 / 960 * xx4 + 31 / 8064 * xx4 * xx2 - 127 / 30720 * xx4 * xx4


def naive_direction(
    e_sents: list[np.ndarray],
    f_sents: list[np.ndarray],
    n_e: int,
    n_f: int,
    iterations: int = 5,
    p0: float = 0.08,
    alpha: float = 0.01,
    tension: float = 4.0,
) -> list:
    """Viterbi source position per generated word (−1 NULL), per sentence; e ids 1-based (0 = NULL)."""
    seen = np.zeros((n_e, n_f), bool)
    for e, f in zip(e_sents, f_sents):
        seen[np.ix_(np.concatenate([[0], e]), f)] = True
    theta = np.full((n_e, n_f), 1e-9)
    pairs: dict[tuple[int, int], int] = {}
    for e, f in zip(e_sents, f_sents):
        pairs[(len(f), len(e))] = pairs.get((len(f), len(e)), 0) + 1
    tokens = sum(len(f) for f in f_sents)
    for it in range(iterations):
        final = it == iterations - 1
        counts = np.zeros((n_e, n_f))
        emp, best = 0.0, []
        for e, f in zip(e_sents, f_sents):
            m, n = len(f), len(e)
            ee = np.concatenate([[0], e])
            p = theta[np.ix_(ee, f)].T * naive_prior(m, n, tension, p0)  # (m, n+1)
            if final:
                best.append(p.argmax(1) - 1)
                continue
            post = p / p.sum(1, keepdims=True)
            np.add.at(counts, (np.broadcast_to(ee, post.shape), np.broadcast_to(f[:, None], post.shape)), post)
            emp += (-np.abs(np.arange(1, n + 1)[None, :] / n - np.arange(m)[:, None] / m) * post[:, 1:]).sum()
        if final:
            return best
        if it > 0:
            pm, pn = np.array([k[0] for k in pairs]), np.array([k[1] for k in pairs])
            tension = optimize_tension(pm, pn, np.array(list(pairs.values()), float), float(tokens), emp / tokens, tension)
        c = np.where(seen, counts + alpha, 0.0)
        theta = np.where(seen, np.exp(naive_digamma(np.where(seen, c, 1.0)) - naive_digamma(c.sum(1))[:, None]), 1e-9)
    return []


def naive_both(src: list[str], tgt: list[str]) -> tuple[Alignment, Alignment]:
    vocab_s, vocab_t = {}, {}
    s_ids = [np.array([vocab_s.setdefault(w, len(vocab_s)) for w in s.split()]) for s in src]
    t_ids = [np.array([vocab_t.setdefault(w, len(vocab_t)) for w in t.split()]) for t in tgt]
    out = []
    for rev in (False, True):
        e, f = (t_ids, s_ids) if rev else (s_ids, t_ids)
        n_e, n_f = (len(vocab_t), len(vocab_s)) if rev else (len(vocab_s), len(vocab_t))
        best = naive_direction([x + 1 for x in e], f, n_e + 1, n_f)
        lines = [" ".join(f"{j}-{a}" if rev else f"{a}-{j}" for j, a in enumerate(b) if a >= 0) for b in best]
        out.append(Alignment.from_pharaoh(lines))
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=None, help="our worker threads (default: the usable CPUs)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--naive-pairs", type=int, default=5_000)
    ap.add_argument("--src", type=Path, help="a tokenised source file (with --tgt): its first --pairs lines")
    ap.add_argument("--tgt", type=Path)
    a = ap.parse_args(argv)
    if (a.src is None) != (a.tgt is None):
        ap.error("--src and --tgt go together")
    if a.src:
        src, tgt = first_lines(a.src, a.pairs), first_lines(a.tgt, a.pairs)
        if len(src) != len(tgt):
            ap.error(f"{a.src} and {a.tgt}: {len(src):,} and {len(tgt):,} lines")
        a.pairs, what = len(src), f"pairs of {a.src.parent.name}"
    else:
        rows = list(iter_bitext(a.pairs, seed=0))
        src, tgt, what = [r[0] for r in rows], [r[1] for r in rows], "demo pairs"
    tokens = sum(len(s.split()) + len(t.split()) for s, t in zip(src, tgt)) / max(2 * len(src), 1)
    print(f"{a.pairs:,} {what}, {tokens:.1f} tokens a side on average")
    t0 = time.perf_counter()
    align_both(src[:200], tgt[:200], threads=a.threads)  # compiles, or loads numba's cache
    print(f"warm-up (numba compile or cache load): {time.perf_counter() - t0:.1f} s")
    binary = os.environ.get("FAST_ALIGN_BIN")
    ok = True
    if binary:
        with tempfile.TemporaryDirectory(prefix="augdag-bench-aligner-") as tmp:
            corpus = Path(tmp) / "corpus.txt"
            corpus.write_text("".join(f"{s} ||| {t}\n" for s, t in zip(src, tgt)))
            theirs = reference(binary, corpus)
            _, _, fwd, rev = align_both(src, tgt, threads=a.threads)
            for name, ours, ref in (("forward", fwd, theirs[0]), ("reverse", rev, theirs[1])):
                in_theirs, in_ours, differ = agreement(ours, ref)
                ok &= min(in_theirs, in_ours) >= AGREEMENT_GOAL
                print(
                    f"fast_align {name} links, {a.pairs:,} {what}: {in_theirs:.3%} of ours in the tool's, "
                    f"{in_ours:.3%} of the tool's in ours, {differ:,} links differ (goal >= {AGREEMENT_GOAL:.0%})"
                )
            _, t_ref = best_of(a.repeat, reference, binary, corpus)
            _, t_ours = best_of(a.repeat, align_both, src, tgt, threads=a.threads)
            ratio = t_ref / t_ours
            ok &= ratio >= SPEED_GOAL
            print(
                f"fast_align fwd+rev 5 iterations, {a.pairs:,} {what}: {a.pairs / t_ours:,.0f} pairs/s "
                f"({t_ours:.2f} s) vs the C++ tool {a.pairs / t_ref:,.0f} pairs/s ({t_ref:.2f} s): "
                f"{ratio:.1f}x (goal >= {SPEED_GOAL:.1f}x)"
            )
    else:
        k = min(a.pairs, a.naive_pairs)
        naive = naive_both(src[:k], tgt[:k])
        _, _, fwd, rev = align_both(src[:k], tgt[:k], threads=a.threads)
        for name, ours, base in (("forward", fwd, naive[0]), ("reverse", rev, naive[1])):
            in_base, in_ours, differ = agreement(ours, base)
            print(
                f"fast_align {name} links, {k:,} {what}: {in_base:.3%} of ours in the numpy loop's, "
                f"{in_ours:.3%} of its in ours, {differ:,} links differ"
            )
        _, t_naive = best_of(1, naive_both, src[:k], tgt[:k])
        _, t_ours = best_of(a.repeat, align_both, src, tgt, threads=a.threads)
        t_naive_scaled = t_naive * a.pairs / k
        print(
            f"fast_align fwd+rev 5 iterations, {a.pairs:,} {what}: {a.pairs / t_ours:,.0f} pairs/s "
            f"({t_ours:.2f} s) vs a per-sentence numpy loop {a.pairs / t_naive_scaled:,.0f} pairs/s "
            f"({t_naive:.2f} s on {k:,} pairs, scaled): {t_naive_scaled / t_ours:.0f}x "
            f"(set FAST_ALIGN_BIN for the C++ tool)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
