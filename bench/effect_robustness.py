"""Robustness augmentation for MT (issue 30): students on the bitext alone vs the bitext + `robust_bitext`, scored on
a test set clean and noised (not a test; a report).

    .venv/bin/python bench/effect_robustness.py [--updates 800] [--seeds 2] [--threads 2] [--cache DIR]

On Multi30k en→de (train 29k, test2016 1k), through the product's own flows and catalog:
  1. robustness: UpperCase 0.05, TitleCase 0.05, Typos 0.05 (its nine kinds at OpusTrainer's 0.1) over the
     training pairs → the view `robust_bitext`;
  2. train_nmt with two arms, `bitext` and `bitext + robust` (the modified pairs beside the originals), `--seeds` seeds,
     the students of bench/effect_mt_arms.py (the product's tiny transformer, 8k joint BPE, `--updates` updates);
  3. test2016 four times (train_nmt.tests): as it is, upper-cased, title-cased (both sides) and with typos (source
     only: Typos at p = 1, each kind at 0.1).
BLEU and chrF per arm and test set with sacrebleu, the paired bootstrap p of the augmented arm against the bitext over
all seeds' outputs: a query over `evaluations`. Expected: better on the noised sets at little or no cost on the clean
one. The data set is development data, not shipped: skipped with a message when absent.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench.common  # noqa: E402,F401 — offline defaults before Prefect
from conf.loader import load_profile  # noqa: E402
from storage.catalog import Catalog  # noqa: E402

PROFILE = """
shard_size: 10000
datasets:
  m30k: {{kind: bitext, format: text, src: {d}/multi30k_en_de/train.en, tgt: {d}/multi30k_en_de/train.de}}
  test2016: {{kind: bitext, format: text, src: {d}/multi30k_en_de/test.en, tgt: {d}/multi30k_en_de/test.de}}
robustness:
  bitext: m30k
  modifiers: [{{UpperCase: 0.05}}, {{TitleCase: 0.05}}, {{Typos: 0.05}}]
train_nmt:
  tests:
    - test2016
    - {{dataset: test2016, modifiers: {{UpperCase: 1.0}}}}
    - {{dataset: test2016, modifiers: {{TitleCase: 1.0}}}}
    - {{dataset: test2016, modifiers: {{Typos: 1.0}}}}
  baseline: bitext
  seeds: {seeds}
  student: {{train: {{max_update: {updates}, vocab_size: 8000}}, threads: {threads}, inference: ctranslate2}}
  experiments:
    bitext: {{mix: {{bitext: "{bitext}"}}}}
    robust: {{label: bitext + robust, mix: {{bitext: "{bitext}", robust: "SELECT src, tgt FROM robust_bitext"}}}}
"""
BITEXT = "SELECT src, tgt FROM bitext WHERE source = 'm30k'"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    p.add_argument("--updates", type=int, default=800)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache", type=Path, default=Path("/tmp/augdag-bench-robustness"))
    args = p.parse_args()
    if not (args.data / "multi30k_en_de" / "test.en").is_file():
        sys.exit(f"skipped: {args.data}/multi30k_en_de not found (development data, not shipped)")
    from flows.engine.runners import run_flow
    from flows.pipelines.robustness import robustness_flow
    from flows.pipelines.train_nmt import train_nmt_flow

    args.cache.mkdir(parents=True, exist_ok=True)
    profile = args.cache / "effect.yaml"
    seeds = list(range(1, args.seeds + 1))
    profile.write_text(
        PROFILE.format(d=args.data.resolve(), seeds=seeds, updates=args.updates, threads=args.threads, bitext=BITEXT)
    )
    for pipeline, flow in (("robustness", robustness_flow), ("train_nmt", train_nmt_flow)):
        conf = load_profile(str(profile), [f"pipelines=[{pipeline}]"], cache=args.cache)
        t0 = time.perf_counter()
        summary = run_flow(flow, conf, profile="effect", config=conf.model_dump(mode="json"))
        print(f"{pipeline}: {summary['status']} in {time.perf_counter() - t0:.0f} s", flush=True)
        if summary["status"] != "completed":
            sys.exit(f"{pipeline} failed: {summary['error']}")
        if pipeline == "robustness":
            print(f"  {summary['robustness']}")
    rows = (
        Catalog(args.cache)
        .query(
            "SELECT testset, arm, metric, count(*) AS seeds, round(avg(score), 2) AS mean, round(stddev_samp(score), 2) AS sd, "
            "max(p_value) AS p FROM evaluations WHERE model_name = 'student' AND run_id = (SELECT max(run_id) FROM "
            "evaluations WHERE model_name = 'student') GROUP BY ALL ORDER BY testset, metric, arm"
        )
        .to_pylist()
    )
    base = {(r["testset"], r["metric"]): r["mean"] for r in rows if r["arm"] == "bitext"}
    print(f"\nstudents: {args.updates} updates, {args.seeds} seed(s); Δ against the bitext arm, paired bootstrap p")
    for r in rows:
        delta = r["mean"] - base[(r["testset"], r["metric"])]
        p_text = "" if r["p"] is None else f"  p = {r['p']:.3g}"
        score = f"{r['mean']:6.2f} ± {r['sd'] or 0:.2f}"
        print(f"  {r['testset']:<20} {r['metric']:<5} {r['arm']:<7} {score}  Δ {delta:+.2f}{p_text}")


if __name__ == "__main__":
    main()
