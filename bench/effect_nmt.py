"""Effect of rejuvenation and of uncertainty-sampled synthetic data on a student (not a test; a report).

    python bench/effect_nmt.py [--data ../shared/data] [--updates 800] [--budget 10000] [--cache DIR]

On Multi30k en→de (train 29k, test 1k) with Tatoeba English as monolingual data, the same small
transformer trained the same number of updates on:
  1. the bitext (baseline)                      2. rejuvenated bitext (R = 10 %, forward, beam 4)
  3. bitext + randomly sampled synthetic pairs  4. bitext + uncertainty-sampled synthetic pairs
BLEU / chrF on the test set (sacrebleu), all through the product's own flows and catalog; the table at
the end is a query over `evaluations`. The data sets are development data, not shipped: skipped with a
message when absent.
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
  m30k_test: {{kind: bitext, format: text, src: {d}/multi30k_en_de/test.en, tgt: {d}/multi30k_en_de/test.de}}
  tatoeba: {{kind: mono, format: text, path: {d}/mono_en_tatoeba/mono.en}}
self_training:
  bitext: m30k
  tokenizer: {{kind: moses, src_lang: en, tgt_lang: de}}
  sampling: {{budget: {budget}}}
  teacher: {{train: {train}, threads: {threads}, inference: ctranslate2}}
rejuvenation:
  bitext: m30k
  rejuvenator: identification
  identification: {{train: {train}, threads: {threads}, inference: ctranslate2}}
train_nmt:
  test: m30k_test
  student: {{train: {train}, threads: {threads}, inference: ctranslate2}}
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    p.add_argument("--updates", type=int, default=800)
    p.add_argument("--budget", type=int, default=10000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache", type=Path, default=Path("/tmp/augdag-bench-effect"))
    args = p.parse_args()
    if not (args.data / "multi30k_en_de" / "train.en").is_file():
        sys.exit(f"skipped: {args.data}/multi30k_en_de not found (development data, not shipped)")
    from flows.engine.runners import run_flow
    from flows.pipelines.rejuvenation import rejuvenation_flow
    from flows.pipelines.self_training import self_training_flow
    from flows.pipelines.train_nmt import train_nmt_flow

    args.cache.mkdir(parents=True, exist_ok=True)
    train = f"{{max_update: {args.updates:d}, vocab_size: 8000}}"  # the tiny defaults: 2+2 layers, 64 dims
    profile = args.cache / "effect.yaml"
    profile.write_text(PROFILE.format(d=args.data.resolve(), budget=args.budget, train=train, threads=args.threads))
    original = "SELECT src, tgt FROM bitext WHERE source = 'm30k'"
    runs = [
        ("rejuvenation", rejuvenation_flow, []),
        ("train_nmt", train_nmt_flow, [f'train_nmt.mix={{baseline: "{original}"}}']),
        ("train_nmt", train_nmt_flow, ['train_nmt.mix={rejuvenated: "SELECT src, tgt FROM rejuvenated"}']),
        ("self_training", self_training_flow, ["self_training.sampling.method=random"]),
        ("train_nmt", train_nmt_flow, [f'train_nmt.mix={{baseline: "{original}", random: "SELECT src, tgt FROM synthetic"}}']),
        ("self_training", self_training_flow, ["self_training.sampling.method=uncertainty"]),
        (
            "train_nmt",
            train_nmt_flow,
            [f'train_nmt.mix={{baseline: "{original}", uncertainty: "SELECT src, tgt FROM synthetic"}}'],
        ),
    ]
    for pipeline, flow, sets in runs:
        conf = load_profile(str(profile), [f"pipelines=[{pipeline}]", *sets], cache=args.cache)
        t0 = time.perf_counter()
        summary = run_flow(flow, conf, profile="effect", config=conf.model_dump(mode="json"))
        print(f"{pipeline} {' '.join(sets)}: {summary['status']} in {time.perf_counter() - t0:.0f} s", flush=True)
    table = Catalog(args.cache).query(
        "SELECT string_agg(DISTINCT k, ' + ' ORDER BY k) AS mix, any_value(metric) AS metric, "
        "round(any_value(score), 2) AS score "
        "FROM (SELECT e.run_id, e.metric, e.score, unnest(json_keys(e.meta->'mix')) AS k FROM evaluations e) "
        "GROUP BY run_id, metric ORDER BY metric, min(run_id)"
    )
    for row in table.to_pylist():
        print(f"  {row['metric']:<5} {row['score']:6.2f}  {row['mix']}")


if __name__ == "__main__":
    main()
