"""C2C-GenDA's effect on slot filling (Table 1) and the diversity of what it generates (Table 5), on ATIS.

    .venv/bin/python bench/effect_c2c.py [--proportions small medium] [--seeds 5] [--tagger-epochs 100]
                                          [--c2c-epochs 10] [--threads 2] [--keep]

For each proportion (small: ATIS-129 with c = 2; medium: ATIS-515 with c = 3, the authors' settings), the
pipeline's own stage functions run without Prefect: delexicalise → cluster_pairs (Alg. 1) → per fold
(5) a C2C generator trained from scratch (``models.c2c``, λ = 0.01, γ = 1) on the other folds' pairs →
c2c_generate (10 per input cluster, relexicalised) → c2c_select (new rows only) → c2c_diversity. Then
the paper's tagger, a Bi-LSTM (2 layers, 128 per direction, 300-d random embeddings — GloVe is not
available offline — dropout 0.5, Adam 0.01, batch 128, clip 5, ``--tagger-epochs`` epochs, the epoch
with the best F1 on ATIS dev kept), is trained per seed on `original` and `original + c2c`, and its
span F1 (conlleval, seqeval) on ATIS test reported as mean ± sd over the seeds, with the paired
difference per seed. The paper (Table 1, GPT-2 initialised, full ATIS dev/test): +7.99 F1 on small,
+5.10 on medium. Prints the training time per fold.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa

from bench.common import workdir
from storage.parts import Parts
from storage.schemas import with_uid

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "atis_slots"
PROPORTIONS = {"small": ("train_small129.jsonl", 2, 7.99), "medium": ("train_medium515.jsonl", 3, 5.10)}


def read_slots(path: Path) -> pa.Table:
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    table = pa.table(
        {
            "tokens": [r["tokens"] for r in rows],
            "tags": [r["tags"] for r in rows],
            "source": [path.stem] * len(rows),
            "line": pa.array(range(1, len(rows) + 1), pa.int64()),
        }
    )
    return with_uid(table, "slots")


def c2c_rows(train: pa.Table, *, cluster_size: int, epochs: int, threads: int, root: Path) -> tuple[pa.Table, dict]:
    """The c2c pipeline's stage functions on ``train``: (the new rows, facts for the report)."""
    from tasks.c2c.delex import delexicalise
    from tasks.c2c.generate import c2c_diversity, c2c_generate, c2c_select, c2c_trainer
    from tasks.c2c.pairing import cluster_pairs

    delex = delexicalise(train)["part"]
    pairs = cluster_pairs(Parts.of_tables([delex]), cluster_size=cluster_size)
    folds = sorted(set(pairs["fold"].to_pylist()))
    facts: dict = {
        "delexicalised": delex.num_rows,
        "frames": len(set(delex["frame"].to_pylist())),
        "frames_paired": len(set(pairs["frame"].to_pylist())),
        "pairs": len(set(pairs["cluster"].to_pylist())),
        "fold_seconds": [],
    }
    generated = []
    for fold in folds:
        out = root / f"c2c-{cluster_size}-{fold}"
        t0 = time.perf_counter()
        c2c_trainer(pairs, fold=fold, settings={"epochs": epochs, "seed": 42}, device="cpu", threads=threads)(out)
        facts["fold_seconds"].append(time.perf_counter() - t0)
        generated.append(
            c2c_generate(
                Parts.of_tables([pairs]),
                delexicalised=delex,
                fold=fold,
                n_outputs=10,
                source=train["source"][0].as_py(),
                model=f"fold{fold}",
                model_path=str(out),
                device="cpu",
                threads=threads,
            )
        )
    gen_parts = [Parts.of_tables([g]) for g in generated]
    selected = c2c_select(Parts.of_tables([delex]), *gen_parts)
    facts["generated"] = sum(g.num_rows for g in generated)
    facts["kept"] = selected["part"].num_rows
    facts["diversity"] = c2c_diversity(Parts.of_tables([delex]), *gen_parts).to_pylist()
    return selected["part"].select(["uid", "tokens", "tags"]), facts


def tagger_f1(
    train: pa.Table, dev: pa.Table, test: pa.Table, *, seed: int, epochs: int, threads: int, out: Path
) -> tuple[float, float]:
    """(test span F1 at the best dev epoch, seconds) of a Bi-LSTM with the paper's settings."""
    from models.tagger import SlotTagger, TaggerSettings, span_f1, train_tagger

    pairs = lambda t: list(zip(t["tokens"].to_pylist(), t["tags"].to_pylist()))  # noqa: E731
    t0 = time.perf_counter()
    train_tagger(pairs(train), out, TaggerSettings(epochs=epochs, seed=seed), dev=pairs(dev), device="cpu", threads=threads)
    seconds = time.perf_counter() - t0
    tagger = SlotTagger.load(out, device="cpu", threads=threads)
    return span_f1(test["tags"].to_pylist(), tagger.predict(test["tokens"].to_pylist())), seconds


def mean_sd(xs: list[float]) -> str:
    return f"{100 * statistics.fmean(xs):.2f} ± {100 * (statistics.stdev(xs) if len(xs) > 1 else 0):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--proportions", nargs="+", default=list(PROPORTIONS), choices=list(PROPORTIONS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--tagger-epochs", type=int, default=100)
    ap.add_argument("--c2c-epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if not DATA.exists():
        sys.exit(f"no ATIS data at {DATA}: this benchmark needs ../shared/data/atis_slots")
    import torch

    torch.set_num_threads(args.threads)
    dev, test = read_slots(DATA / "dev.jsonl"), read_slots(DATA / "test.jsonl")
    with workdir("effect-c2c", keep=args.keep) as root:
        for name in args.proportions:
            file, c, paper = PROPORTIONS[name]
            train = read_slots(DATA / file)
            t0 = time.perf_counter()
            new, facts = c2c_rows(train, cluster_size=c, epochs=args.c2c_epochs, threads=args.threads, root=root)
            print(
                f"\n== ATIS {name} ({train.num_rows} rows, c = {c}): {facts['frames_paired']} of {facts['frames']} "
                f"frames paired, {facts['pairs']} cluster pairs; {facts['generated']} generated, {facts['kept']} "
                f"new rows kept ({time.perf_counter() - t0:.0f} s; training per fold "
                + ", ".join(f"{s:.1f}" for s in facts["fold_seconds"])
                + " s)"
            )
            for d in facts["diversity"]:
                print(
                    f"   Table 5, {d['level']}: Inter ratio {d['inter_ratio']:.1%}, Inter MED {d['inter_med']:.2f}, "
                    f"Intra ratio {d['intra_ratio']:.1%}, Intra MED {d['intra_med']:.2f} ({d['generated']} utterances)"
                )
            arms = {
                "original": train.select(["uid", "tokens", "tags"]),
                "original+c2c": pa.concat_tables([train.select(["uid", "tokens", "tags"]), new]),
            }
            f1: dict[str, list[float]] = {a: [] for a in arms}
            for seed in range(args.seeds):
                for arm, rows in arms.items():
                    score, seconds = tagger_f1(
                        rows,
                        dev,
                        test,
                        seed=seed,
                        epochs=args.tagger_epochs,
                        threads=args.threads,
                        out=root / f"tagger-{name}-{arm}-{seed}",
                    )
                    f1[arm].append(score)
                    print(f"   seed {seed} {arm:>13}: F1 {100 * score:.2f} ({rows.num_rows} rows, {seconds:.0f} s)", flush=True)
            deltas = [b - a for a, b in zip(f1["original"], f1["original+c2c"])]
            print(
                f"   F1 original {mean_sd(f1['original'])}, original + c2c {mean_sd(f1['original+c2c'])}; "
                f"paired Δ {mean_sd(deltas)} ({sum(d > 0 for d in deltas)} of {len(deltas)} seeds up); "
                f"the paper: +{paper:.2f}"
            )


if __name__ == "__main__":
    main()
