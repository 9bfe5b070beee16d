"""Force-decode scoring throughput per backend (pairs/s), against one-pair-at-a-time scoring.

    python bench/score.py [--pairs 20000] [--threads 2] [--work DIR]

The models of bench/nmt_models.py (reused from --work). Baseline, measured in the same run: the same
fairseq model scoring one pair per call (no batching, no length sorting) on a sample, as a naive loop
would. Every backend scores the same demo pairs; the table also shows the largest per-token difference
between fairseq and its CTranslate2 conversion, and between transformers and its conversion.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import timed  # noqa: E402
from bench.nmt_models import demo_pairs, prepare  # noqa: E402


def max_diff(a: list, b: list) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b) if x is not None and y is not None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=20_000)
    p.add_argument("--naive", type=int, default=500, help="pairs scored one at a time for the baseline")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", type=Path, default=Path("/tmp/augdag-bench-nmt"))
    args = p.parse_args()
    fs, fs_ct2, hf, hf_ct2 = prepare(args.work, args.threads)
    from models.nmt import load_model

    pairs = demo_pairs(args.pairs, split="test")
    src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
    print(f"{len(src):,} pairs")

    models = {
        name: load_model(path, backend=backend, device="cpu", threads=args.threads)
        for name, path, backend in [
            ("fairseq", fs, "fairseq"),
            ("ctranslate2 (fairseq)", fs_ct2, "ctranslate2"),
            ("transformers", hf, "transformers"),
            ("ctranslate2 (transformers)", hf_ct2, "ctranslate2"),
        ]
    }
    naive = models["fairseq"]
    n = min(args.naive, len(src))
    naive.score(src[:8], tgt[:8])
    _, naive_s = timed(lambda: [naive.score([s], [t]) for s, t in zip(src[:n], tgt[:n])])
    naive_rate = n / naive_s
    print(f"  {'fairseq, one pair per call':<30} {naive_rate:9.0f} pairs/s  (baseline, {n} pairs)")
    scores = {}
    for name, model in models.items():
        model.score(src[:64], tgt[:64])  # warm-up
        scores[name], seconds = timed(model.score, src, tgt)
        rate = len(src) / seconds
        print(f"  {name:<30} {rate:9.0f} pairs/s  ({seconds:5.1f} s)  {rate / naive_rate:6.1f}x the baseline")
    print(
        "  max |Δ log p| per token: "
        f"fairseq vs its CTranslate2 {max_diff(scores['fairseq'], scores['ctranslate2 (fairseq)']):.2e}; "
        f"transformers vs its CTranslate2 {max_diff(scores['transformers'], scores['ctranslate2 (transformers)']):.2e}"
    )


if __name__ == "__main__":
    main()
