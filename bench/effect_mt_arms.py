"""Paraphrase augmentation for MT (Table 6 of Hu et al. 2019's appendix) and the other augmentations as arms of
one train_nmt night, with seeds and paired significance (not a test; a report).

    .venv/bin/python bench/effect_mt_arms.py [--updates 800] [--seeds 3] [--budget 10000] [--share 1.0]
                                              [--threads 2] [--cache DIR] [--arms baseline para_10_1 ...]

On Multi30k en→de (train 29k; test2016 and test2017, 1k each) with Tatoeba English as monolingual data,
through the product's own flows and catalog:
  1. rejuvenation (R = 10 %, the identification model rejuvenates) → the view `rejuvenated`;
  2. self_training twice (random, then uncertainty sampling, `--budget` sentences each); each night's
     `synthetic` pairs are exported and read back as datasets `syn_random`, `syn_uncertainty`;
  3. mt_paraphrase: the English (source) side paraphrased by the round trip en→de→en (both models trained
     here), the top-IDF word banned and names/numbers kept (fairseq's constrained beam search), Jaccard < 0.65;
  4. train_nmt with the arms of Table 6 (paraphrase N:1 = N copies of the bitext + 1 of the paraphrases;
     0:1 the paraphrases alone; + CT = continued training on the bitext at a tenth of the learning rate)
     and the thesis' arms (rejuvenated, bitext + random / uncertainty-sampled synthetic), `--seeds` seeds.
Every student is the same transformer (the product's tiny default, 2+2 layers, 64 dims, 8k joint BPE,
`--updates` updates × 1,024 tokens). BLEU and chrF per test set with sacrebleu, paired bootstrap p against
the baseline over all seeds' outputs: the table is a query over `evaluations`. The paper (tr→en, a real
model): 10:1 + CT best, +1.1 BLEU over the baseline; 0:1 worst. The data sets are development data, not
shipped: skipped with a message when absent.
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
  test2017: {{kind: bitext, format: text, src: {d}/multi30k_en_de/test2017.en, tgt: {d}/multi30k_en_de/test2017.de}}
  tatoeba: {{kind: mono, format: text, path: {d}/mono_en_tatoeba/mono.en}}
{synthetic}self_training:
  bitext: m30k
  tokenizer: {{kind: moses, src_lang: en, tgt_lang: de}}
  sampling: {{budget: {budget}}}
  teacher: {{train: {train}, threads: {threads}, inference: ctranslate2}}
rejuvenation:
  bitext: m30k
  rejuvenator: identification
  identification: {{train: {train}, threads: {threads}, inference: ctranslate2}}
paraphrase:
  generator:
    kind: round_trip
    bitext: m30k
    forward: {{train: {train}, threads: {threads}, inference: ctranslate2}}
    backward: {{train: {train}, threads: {threads}}}
mt_paraphrase: {{bitext: m30k, side: src, n: 10, keep: 10, share: {share}}}
train_nmt:
  tests: [test2016, test2017]
  baseline: baseline
  seeds: {seeds}
  student: {{train: {train}, threads: {threads}, inference: ctranslate2}}
  experiments:
{arms}"""

BITEXT = "SELECT src, tgt FROM bitext WHERE source = 'm30k'"
PARA = "SELECT src, tgt FROM paraphrased_bitext"
ARMS = {  # name: (label, mix, copies, continued training)
    "baseline": ("baseline (1:0)", {"bitext": BITEXT}, {}, False),
    "para_0_1": ("paraphrase 0:1", {"para": PARA}, {}, False),
    "para_1_1": ("paraphrase 1:1", {"bitext": BITEXT, "para": PARA}, {}, False),
    "para_5_1": ("paraphrase 5:1", {"bitext": BITEXT, "para": PARA}, {"bitext": 5}, False),
    "para_10_1": ("paraphrase 10:1", {"bitext": BITEXT, "para": PARA}, {"bitext": 10}, False),
    "para_10_1_ct": ("paraphrase 10:1 + CT", {"bitext": BITEXT, "para": PARA}, {"bitext": 10}, True),
    "rejuvenated": ("rejuvenated", {"rejuvenated": "SELECT src, tgt FROM rejuvenated WHERE source = 'm30k'"}, {}, False),
    "syn_uncertainty": (
        "bitext + uncertainty-sampled synthetic",
        {"bitext": BITEXT, "synthetic": "SELECT src, tgt FROM bitext WHERE source = 'syn_uncertainty'"},
        {},
        False,
    ),
    "syn_random": (
        "bitext + randomly-sampled synthetic",
        {"bitext": BITEXT, "synthetic": "SELECT src, tgt FROM bitext WHERE source = 'syn_random'"},
        {},
        False,
    ),
}


def arms_yaml(names: list[str], *, ct_lr: float, ct_updates: int) -> str:
    lines = []
    for name in names:
        label, mix, copies, ct = ARMS[name]
        mix_text = ", ".join(f'{k}: "{v}"' for k, v in mix.items())
        lines.append(f"    {name}:\n      label: {label}\n      mix: {{{mix_text}}}")
        if copies:
            lines.append("      copies: {" + ", ".join(f"{k}: {v}" for k, v in copies.items()) + "}")
        if ct:  # on the bitext, from the arm's checkpoint
            lines.append(f'      continue_on: {{mix: {{bitext: "{BITEXT}"}}, lr: {ct_lr}, max_update: {ct_updates}}}')
    return "\n".join(lines) + "\n"


def export_synthetic(cache: Path, name: str) -> Path:
    """The current `synthetic` pairs as a TSV (src, tgt) under the cache: a dataset for the next night."""
    table = Catalog(cache).query("SELECT src, tgt FROM synthetic ORDER BY src, tgt")
    path = cache / f"{name}.tsv"
    with path.open("w", encoding="utf-8") as f:
        for src, tgt in zip(table["src"].to_pylist(), table["tgt"].to_pylist()):
            f.write(f"{src}\t{tgt}\n")
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    p.add_argument("--updates", type=int, default=800)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--budget", type=int, default=10000)
    p.add_argument("--share", type=float, default=1.0, help="of the pairs paraphrased (mt_paraphrase.share)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache", type=Path, default=Path("/tmp/augdag-bench-mt-arms"))
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    args = p.parse_args()
    if not (args.data / "multi30k_en_de" / "test2017.en").is_file():
        sys.exit(f"skipped: {args.data}/multi30k_en_de not found (development data, not shipped)")
    from flows.engine.runners import run_flow
    from flows.pipelines.mt_paraphrase import mt_paraphrase_flow
    from flows.pipelines.rejuvenation import rejuvenation_flow
    from flows.pipelines.self_training import self_training_flow
    from flows.pipelines.train_nmt import train_nmt_flow

    args.cache.mkdir(parents=True, exist_ok=True)
    train = f"{{max_update: {args.updates:d}, vocab_size: 8000}}"
    arms = ["baseline", *(a for a in args.arms if a != "baseline")]
    profile = args.cache / "effect.yaml"

    def write(synthetic: str = "") -> None:
        profile.write_text(
            PROFILE.format(
                d=args.data.resolve(),
                budget=args.budget,
                train=train,
                threads=args.threads,
                share=args.share,
                seeds=list(range(1, args.seeds + 1)),
                synthetic=synthetic,
                arms=arms_yaml(arms, ct_lr=3e-4, ct_updates=max(args.updates // 4, 1)),
            )
        )

    def run(pipeline: str, flow, *sets: str) -> None:
        conf = load_profile(str(profile), [f"pipelines=[{pipeline}]", *sets], cache=args.cache)
        t0 = time.perf_counter()
        summary = run_flow(flow, conf, profile="effect", config=conf.model_dump(mode="json"))
        print(f"{pipeline} {' '.join(sets)}: {summary['status']} in {time.perf_counter() - t0:.0f} s", flush=True)
        if summary["status"] != "completed":
            sys.exit(f"{pipeline} failed: {summary['error']}")

    write()
    if "rejuvenated" in arms:
        run("rejuvenation", rejuvenation_flow)
    synthetic = ""
    for method in ("random", "uncertainty") if {"syn_random", "syn_uncertainty"} & set(arms) else ():
        run("self_training", self_training_flow, f"self_training.sampling.method={method}")
        path = export_synthetic(args.cache, f"syn_{method}")
        synthetic += f"  syn_{method}: {{kind: bitext, format: tsv, path: {path}}}\n"
    if synthetic:  # the exported synthetic pairs join the profile's datasets, ingested into `bitext`
        write(synthetic)
        from flows.pipelines.ingest import ingest_flow

        run("ingest", ingest_flow)
    if any(a.startswith("para") for a in arms):
        run("mt_paraphrase", mt_paraphrase_flow)
    run("train_nmt", train_nmt_flow)
    rows = (
        Catalog(args.cache)
        .query(
            "SELECT testset, arm, metric, count(*) AS seeds, round(avg(score), 2) AS mean, round(stddev_samp(score), 2) AS sd, "
            "max(p_value) AS p FROM evaluations WHERE model_name = 'student' AND run_id = (SELECT max(run_id) FROM "
            "evaluations WHERE model_name = 'student') GROUP BY ALL ORDER BY testset, metric, arm"
        )
        .to_pylist()
    )
    base = {(r["testset"], r["metric"]): r["mean"] for r in rows if r["arm"] == "baseline"}
    print(f"\nstudents: {args.updates} updates, {args.seeds} seed(s); Δ against the baseline, paired bootstrap p")
    for r in rows:
        delta = r["mean"] - base[(r["testset"], r["metric"])]
        p_text = "" if r["p"] is None else f"  p = {r['p']:.3g}"
        print(
            f"  {r['testset']:<9} {r['metric']:<5} {ARMS[r['arm']][0]:<42} {r['mean']:6.2f} ± {r['sd'] or 0:.2f}  "
            f"Δ {delta:+.2f}{p_text}"
        )


if __name__ == "__main__":
    main()
