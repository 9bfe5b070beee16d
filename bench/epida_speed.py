"""EPiDA's generation speed: samples per second of EDA alone against EDA + EPiDA selection (Table 8).

    .venv/bin/python bench/epida_speed.py [--rows 1000] [--repeats 3] [--threads 1]

On ``--rows`` TREC-6 training questions (`trec6/train.tsv`; the demo's labelled rows from
``demo.write_demo`` when the data set is absent), both ways produce m = 3 augmented samples per row:
  - EDA alone:  ``tasks.epida.feedback.eda_source`` with n_aug = m (WordNet 3.0 synonyms, a fresh synonym cache
    per call as in the pipeline's stage);
  - EDA+EPiDA:  ``eda_source`` with n_aug = K·m = 9 candidates per row (K = 3), then ``seas_score``: the
    classifier's batched ``predict_proba`` of every candidate and original, REM (Eq. 7), CEM (Eq. 10),
    Eq. 11, the m best per row kept.
"Samples" are the augmented rows produced: EDA's candidates, EPiDA's selected candidates. The
classifier is the builtin hashed n-gram bag pre-trained for a few epochs on the rows (not timed: it is
training, not generation). The WordNet reader and the classifier are warmed first; each figure is
the median of ``--repeats`` runs. EPiDA's cost factor = time(EDA+EPiDA) / time(EDA alone) at equal
output = (EDA's samples/s) / (EPiDA's samples/s).

Goal: EPiDA costs ≤ 2× EDA alone at K = 3 on this CPU. For reference, the paper's Table 8 (RTX 3090,
a CNN classifier): EDA 188.4 samples/s, +EPiDA 43.8 samples/s, i.e. 4.3×.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc

from bench.common import median, timed, workdir

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PAPER = {"eda": 188.4, "epida": 43.8}  # Table 8, samples/s on an NVIDIA RTX 3090
GOAL = 2.0  # EPiDA's cost factor over EDA alone, at equal output


def labelled(path: Path, source: str) -> pa.Table:
    """A ``label<TAB>text`` file as labelled rows (uid, text, label, source, line), exact duplicates once."""
    from storage.schemas import with_uid

    lines = [ln.rstrip("\n").split("\t", 1) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    table = with_uid(
        pa.table(
            {
                "text": [t for _, t in lines],
                "label": [x for x, _ in lines],
                "source": [source] * len(lines),
                "line": list(range(1, len(lines) + 1)),
            }
        ),
        "labeled",
    )
    first = {u: i for i, u in reversed(list(enumerate(table["uid"].to_pylist())))}
    return table.take(sorted(first.values())).select(["uid", "text", "label", "source", "line"])


def bench_rows(n: int, data: Path, root: Path) -> tuple[pa.Table, str]:
    """The first ``n`` distinct TREC-6 training rows, or the demo's labelled rows when TREC-6 is absent."""
    trec = data / "trec6" / "train.tsv"
    if trec.is_file():
        return labelled(trec, "trec6").slice(0, n), f"TREC-6 ({trec})"
    from demo import write_demo

    paths, _ = write_demo(
        root / "demo", labeled_rows=max(n, 100), bitext_rows=100, mono_rows=100, slots_rows=100, test_rows=100, bad_rows=False
    )
    return labelled(paths.labeled, "demo").slice(0, n), f"the demo's labelled rows ({trec} not found)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each; the median is reported")
    p.add_argument("--amplification", type=int, default=3, help="K: EPiDA scores K·m candidates per row")
    p.add_argument("--m", type=int, default=3, help="augmented samples kept per row")
    p.add_argument("--pretrain-epochs", type=int, default=3, help="the scoring classifier's epochs on the rows")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the classifier")
    p.add_argument("--data", type=Path, default=DATA)
    args = p.parse_args()
    from models.wordnet import wordnet
    from tasks.epida.feedback import eda_source, seas_score
    from tasks.epida.train import train_on

    k, m = args.amplification, args.m
    with workdir("epida-speed") as root:
        rows, what = bench_rows(args.rows, args.data, root)
        labels = sorted(set(rows["label"].to_pylist()))
        print(
            f"rows: {rows.num_rows:,} of {what}; {len(labels)} labels; K = {k}, m = {m} "
            f"({k * m} candidates per row scored, {m} kept); CPU: {os.cpu_count()} cores, classifier threads "
            f"{args.threads}; median of {args.repeats} runs"
        )

        (model, _), train_s = timed(
            train_on,
            rows,
            None,
            labels=labels,
            epochs=args.pretrain_epochs,
            batch_size=16,
            seed=0,
            classifier={"kind": "builtin", "device": "cpu", "threads": args.threads},
        )
        model_dir = root / "classifier"
        model.save(model_dir)
        print(f"classifier: builtin, pre-trained {args.pretrain_epochs} epochs on the rows in {train_s:.1f} s (not timed below)")

        def epida() -> tuple[pa.Table, float, float]:
            cands, gen_s = timed(eda_source, rows, n_aug=k * m, seed=0)
            scored, score_s = timed(
                seas_score,
                rows,
                cands,
                m=m,
                alpha=0.5,
                mode="both",
                model_path=str(model_dir),
                device="cpu",
                threads=args.threads,
            )
            return scored, gen_s, score_s

        _, wn_s = timed(wordnet)
        warm = rows.slice(0, 50)
        timed(
            seas_score,
            warm,
            eda_source(warm, n_aug=k * m, seed=0),
            m=m,
            model_path=str(model_dir),
            device="cpu",
            threads=args.threads,
        )
        _, cold_s = timed(epida)  # the WordNet reader's own caches, over these rows' words
        print(
            f"warm-up: WordNet reader loaded in {wn_s:.1f} s; the classifier loaded; one untimed EPiDA run "
            f"(the first over these rows' words: {cold_s:.2f} s)"
        )

        eda_runs, eda_k_runs, epida_runs, gen_runs, score_runs = [], [], [], [], []
        for _ in range(args.repeats):
            eda_out, s = timed(eda_source, rows, n_aug=m, seed=0)
            eda_runs.append(s)
            eda_k_runs.append(timed(eda_source, rows, n_aug=k * m, seed=0)[1])
            (scored, gen_s, score_s), s = timed(epida)
            epida_runs.append(s)
            gen_runs.append(gen_s)
            score_runs.append(score_s)
        n_eda = eda_out.num_rows
        n_epida = int(pc.sum(scored["selected"]).as_py())
        eda_rate, epida_rate = n_eda / median(eda_runs), n_epida / median(epida_runs)
        factor = eda_rate / epida_rate
        gen_s, score_s = median(gen_runs), median(score_runs)

    n_cands = rows.num_rows * k * m

    def line(what: str, n: int, seconds: float, unit: str = "") -> None:
        print(f"  {what:<48} {n:7,}  {seconds:8.3f}  {n / seconds:10.1f}  {unit}".rstrip())

    print(f"\n  {'':<48} {'samples':>7}  {'seconds':>8}  {'samples/s':>10}")
    line(f"EDA alone ({m} per row)", n_eda, median(eda_runs))
    line(f"EDA + EPiDA ({k * m} candidates per row → {m} selected)", n_epida, median(epida_runs))
    line(f"  of which EDA, {k * m} per row", n_cands, gen_s, "(candidates generated)")
    line("  of which seas_score (p(t), p(x), Eq. 7/10/11)", n_cands, score_s, "(candidates scored)")
    line(f"EDA alone, {k * m} per row (reference)", n_cands, median(eda_k_runs))
    print(f"\nEPiDA cost factor at equal output: {factor:.2f}× (EDA {eda_rate:.1f} vs EDA+EPiDA {epida_rate:.1f} samples/s)")
    print(
        f"  generating K = {k} times the candidates: {gen_s / median(eda_runs):.2f}×; scoring and selecting "
        f"them: {score_s / median(eda_runs):.2f}× of EDA alone's time"
    )
    print(
        f"  the paper (Table 8, RTX 3090, CNN): EDA {PAPER['eda']} vs +EPiDA {PAPER['epida']} samples/s, "
        f"{PAPER['eda'] / PAPER['epida']:.1f}×"
    )
    verdict = "PASS" if factor <= GOAL else "FAIL"
    print(f"goal: EPiDA costs ≤ {GOAL:g}× EDA alone at K = {k} on this CPU: {factor:.2f}× → {verdict}")


if __name__ == "__main__":
    main()
