"""Effect of EPiDA's selection on a small TREC-6 classifier, Table 5's ablation (not a test; a report).

    .venv/bin/python bench/effect_epida.py [--seeds 5] [--settings 1pct,10shot] [--encoder DIR] [--quick]

Settings: `1pct`, per seed 55 questions (about 1 % of `trec6/train.tsv`) drawn stratified by label with
that seed; `10shot`, `trec6/train_10shot.tsv` (60 questions, the same for every seed). Test:
`trec6/test.tsv` (500). Per setting and seed, the pipeline's pieces as flows/pipelines/epida.py `augment` calls
them, in-process: PT (``train_on`` the originals alone, Eq. 12, `--pretrain-epochs`) is shared by every
arm, which then trains `--epochs` more from it on the originals plus its added rows (Eq. 14):
  none             nothing added (Eq. 12 all along)
  eda              m of each row's K·m EDA candidates drawn at random (seeded): as many rows as EPiDA adds
  rem_only, cem_only, both
                   EPiDA+EDA: the K·m candidates scored by the current classifier (``seas_score``: REM
                   Eq. 7, CEM Eq. 10, Eq. 11 with α = 0.5, min-max normalised), the m best kept
  …_online         a new round every `--every-epochs` epochs: fresh candidates (round r), scored by the
                   classifier of the previous round (Table 5's OA); one-time: round 0 once
K = 3, m = 3, EDA α = 0.1 (WordNet 3.0). Classifiers: the builtin hashed n-gram bag always;
`sentence_embedding` (a frozen sentence-transformers encoder + a linear head) only with `--encoder`, a
local model directory (nothing is downloaded here). Macro-F1 and accuracy on the test set, mean ± sd
over seeds, and the paper's direction checked with paired differences (the arms of a seed share its
rows, PT and candidates).

Goal (the paper's Table 5, TREC 1 %, CNN + EDA, macro-F1): EPiDA with REM + CEM beats plain EDA and the
unaugmented classifier, REM or CEM alone does less well, online augmentation adds a little. The data
set is development data, not shipped: without it the benchmark says so and exits.
"""

from __future__ import annotations

import argparse
import functools
import math
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa

from bench.common import workdir
from bench.epida_speed import labelled

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# arm: (what is added, SEAS mode, online)
ARMS = {
    "none": ("none", "", False),
    "eda": ("eda", "", False),
    "eda_online": ("eda", "", True),
    "rem_only": ("epida", "rem_only", False),
    "cem_only": ("epida", "cem_only", False),
    "both": ("epida", "both", False),
    "rem_only_online": ("epida", "rem_only", True),
    "cem_only_online": ("epida", "cem_only", True),
    "both_online": ("epida", "both", True),
}
QUICK_ARMS = ("none", "eda", "both", "both_online")
# Table 5, TREC 1 % (macro-F1, CNN, EDA, five runs): the row of each arm; REM/CEM alone and both with PT
PAPER = {
    "none": ("1", 0.722),
    "eda": ("2", 0.736),
    "eda_online": ("3: OA", 0.723),
    "rem_only": ("4: PT", 0.729),
    "cem_only": ("5: PT", 0.723),
    "both": ("8: PT", 0.740),
    "both_online": ("9: OA+PT", 0.745),
}
# (better, worse): the paper's orderings on TREC 1 %, each a pair of Table 5's rows
CHECKS = [
    ("eda", "none"),
    ("both", "eda"),
    ("both", "none"),
    ("both", "rem_only"),
    ("both", "cem_only"),
    ("rem_only", "cem_only"),
    ("rem_only", "none"),
    ("cem_only", "none"),
    ("both_online", "both"),
    ("eda", "eda_online"),
]


def stratified(rows: pa.Table, n: int, seed: int) -> pa.Table:
    """``n`` rows drawn without replacement, each label in proportion (at least one; largest remainders)."""
    labels = np.asarray(rows["label"].to_pylist())
    classes, counts = np.unique(labels, return_counts=True)
    share = counts / counts.sum() * n
    take = np.maximum(1, np.floor(share)).astype(int)
    for i in np.argsort(-(share - np.floor(share)), kind="stable")[: max(0, n - int(take.sum()))]:
        take[i] += 1
    rng = np.random.default_rng([seed, 55])
    picked = [rng.choice(np.flatnonzero(labels == c), t, replace=False) for c, t in zip(classes, take)]
    return rows.take(np.sort(np.concatenate(picked)))


def random_pick(cands: pa.Table, m: int, seed: int, r: int) -> pa.Table:
    """m of each row's candidates, uniformly at random (seeded by seed and round): the `eda` arm."""
    parents = np.asarray(cands["parent_uid"].to_pylist())
    order = np.lexsort((np.random.default_rng([seed, r, 5]).random(len(parents)), parents))
    first = np.r_[0, np.flatnonzero(parents[order][1:] != parents[order][:-1]) + 1]
    rank = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    return cands.take(np.sort(order[rank < m])).select(["uid", "text", "label"])


def mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


class Bench:
    """One classifier kind's arms on one setting's rows and seed (candidates shared across arms and kinds)."""

    def __init__(self, args: argparse.Namespace, root: Path, test: pa.Table, labels: list[str]):
        from models.wordnet import synonyms, wordnet

        self.args, self.root, self.labels = args, root, labels
        self.test_texts = test["text"].to_pylist()
        self.gold = [labels.index(x) for x in test["label"].to_pylist()]
        wn = wordnet()
        self.synonyms = functools.lru_cache(maxsize=None)(lambda w: synonyms(w, wn))
        self.cands: dict[tuple[str, int, int], pa.Table] = {}

    def candidates(self, setting: str, rows: pa.Table, seed: int, r: int) -> pa.Table:
        """Round ``r``'s K·m EDA candidates per row (as `eda_source`, one synonym cache for the whole run)."""
        from tasks.epida.eda import eda_candidates

        key = (setting, seed, r)
        if key not in self.cands:
            self.cands[key] = eda_candidates(
                rows, n_aug=self.args.amplification * self.args.m, alpha=0.1, seed=seed, round=r, synonyms=self.synonyms
            )
        return self.cands[key]

    def train(
        self, rows: pa.Table, added: pa.Table | None, *, clf: dict, seed: int, epochs: int, init: Path | None, r: int, out: Path
    ) -> Path:
        from tasks.epida.train import train_on

        model, _ = train_on(
            rows,
            added,
            labels=self.labels,
            classifier=clf,
            epochs=epochs,
            seed=seed,
            round=r,
            batch_size=self.args.batch_size,
            init=str(init) if init else None,
        )
        model.save(out)
        return out

    def scores(self, model_dir: Path, clf: dict) -> dict[str, float]:
        from models.classifier import classification_scores, load_classifier

        model = load_classifier(model_dir, device="cpu", threads=clf["threads"])
        return classification_scores(self.gold, model.predict(self.test_texts), len(self.labels))

    def arms(self, kind: str, clf: dict, setting: str, rows: pa.Table, seed: int, arms: list[str]) -> dict[str, dict[str, float]]:
        """Every arm's test scores for this seed: PT once, then each arm from PT (module docstring)."""
        from tasks.epida.feedback import seas_score

        a = self.args
        tag = self.root / f"{kind}-{setting}-s{seed}"
        pt = self.train(rows, None, clf=clf, seed=seed, epochs=a.pretrain_epochs, init=None, r=0, out=tag / "pt")
        out = {}
        for arm in arms:
            added_kind, mode, online = ARMS[arm]
            rounds = math.ceil(a.epochs / a.every_epochs) if online else 1
            model = pt
            for r in range(rounds):
                epochs = min(a.every_epochs, a.epochs - r * a.every_epochs) if online else a.epochs
                added = None
                if added_kind == "eda":
                    added = random_pick(self.candidates(setting, rows, seed, r), a.m, seed, r)
                elif added_kind == "epida":
                    scored = seas_score(
                        rows,
                        self.candidates(setting, rows, seed, r),
                        m=a.m,
                        alpha=0.5,
                        mode=mode,
                        round=r,
                        model_path=str(model),
                        device="cpu",
                        threads=clf["threads"],
                    )
                    added = scored.filter(scored["selected"]).select(["uid", "text", "label"])
                previous, model = (
                    model,
                    self.train(rows, added, clf=clf, seed=seed, epochs=epochs, init=model, r=r, out=tag / f"{arm}-r{r}"),
                )
                if previous != pt:
                    shutil.rmtree(previous)  # a builtin bag is 64 MB on disk: keep PT and the latest only
            out[arm] = self.scores(model, clf)
            shutil.rmtree(model)
        shutil.rmtree(tag)
        return out


def report(results: dict, kinds: list[str], settings: list[str], arms: list[str], seeds: list[int]) -> None:
    """The table (setting × arm) and the paper's orderings against ours, per classifier kind."""

    def cell(xs: list[float]) -> str:
        mu, sd = mean_sd(xs)
        return f"{100 * mu:6.2f} ± {100 * sd:5.2f}"

    print(f"\nTREC-6 test (500 questions), ×100, mean ± sd over seeds {seeds[0]}..{seeds[-1]}:")
    for kind in kinds:
        print(f"\n  classifier {kind}")
        print(
            f"  {'setting':<8} {'arm':<16} {'n':>2}  {'macro-F1':>15}  {'accuracy':>15}  {'ΔF1 vs none':>11}  "
            "paper Table 5 (row: F1)"
        )
        for setting in settings:
            none = [results[kind, setting, s]["none"]["macro_f1"] for s in seeds] if "none" in arms else None
            for arm in arms:
                f1 = [results[kind, setting, s][arm]["macro_f1"] for s in seeds]
                acc = [results[kind, setting, s][arm]["accuracy"] for s in seeds]
                delta = f"{100 * statistics.fmean(np.subtract(f1, none)):+11.2f}" if none else f"{'–':>11}"
                row, value = PAPER.get(arm, ("–", None))
                paper = f"{row}: {value:.3f}" if value else "–"
                print(f"  {setting:<8} {arm:<16} {len(seeds):>2}  {cell(f1):>15}  {cell(acc):>15}  {delta}  {paper}")

    print(
        "\nThe paper's Table 5 (TREC 1 %, macro-F1): both+OA+PT .745 > both+PT .740 > EDA .736 > REM+PT .729 > "
        "CEM+PT .723 ≈ EDA+OA .723 > none .722."
    )
    print(
        "Ours: paired macro-F1 differences (same seed: same rows, PT and candidates), mean ± sd over seeds, "
        "wins; 'clear' when |mean| > 2 standard errors (3+ seeds)."
    )
    for kind in kinds:
        for setting in settings:
            checks = [(b, w) for b, w in CHECKS if b in arms and w in arms]
            held = clear = against = 0
            print(f"  {kind} / {setting}:")
            for better, worse in checks:
                d = [results[kind, setting, s][better]["macro_f1"] - results[kind, setting, s][worse]["macro_f1"] for s in seeds]
                mu, sd = mean_sd(d)
                sure = len(d) > 2 and abs(mu) > 2 * sd / math.sqrt(len(d))
                held += mu > 0
                clear += sure and mu > 0
                against += sure and mu < 0
                wins = sum(x > 0 for x in d)
                verdict = ("follows" if mu > 0 else "does not follow") + (" (clear)" if sure else " (within noise)")
                print(f"    {better:>12} > {worse:<12} Δ {100 * mu:+6.2f} ± {100 * sd:5.2f}  wins {wins}/{len(d)}  {verdict}")
            print(
                f"    → follows the paper's direction in {held} of {len(checks)} comparisons "
                f"({clear} clearly; {against} clearly the other way)"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1")
    p.add_argument("--settings", default="1pct,10shot", help="1pct (55 stratified rows per seed), 10shot")
    p.add_argument("--arms", default=",".join(ARMS), help=f"among {', '.join(ARMS)}")
    p.add_argument("--quick", action="store_true", help=f"2 seeds, arms {', '.join(QUICK_ARMS)}: a smoke run")
    p.add_argument("--rows", type=int, default=55, help="rows of the 1pct setting")
    p.add_argument("--amplification", type=int, default=3, help="K")
    p.add_argument("--m", type=int, default=3)
    p.add_argument("--pretrain-epochs", type=int, default=10, help="PT: epochs on the originals alone")
    p.add_argument("--epochs", type=int, default=20, help="epochs after PT (every arm)")
    p.add_argument("--every-epochs", type=int, default=2, help="online: a new round every so many epochs")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.03, help="the builtin classifier's learning rate")
    p.add_argument("--encoder", type=Path, help="a local sentence-transformers directory (all-MiniLM-L6-v2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the classifier")
    args = p.parse_args()
    trec = args.data / "trec6"
    if not all((trec / f).is_file() for f in ("train.tsv", "test.tsv", "train_10shot.tsv")):
        print(f"skipped: {trec}/train.tsv, test.tsv or train_10shot.tsv not found (development data, not shipped)")
        return
    seeds = list(range(2 if args.quick else args.seeds))
    arms = list(QUICK_ARMS) if args.quick else [a for a in args.arms.split(",") if a]
    settings = [s for s in args.settings.split(",") if s]
    unknown = [a for a in arms if a not in ARMS] + [s for s in settings if s not in ("1pct", "10shot")]
    if unknown:
        p.error(f"unknown arm(s) or setting(s): {', '.join(unknown)}")

    kinds = {"builtin": {"kind": "builtin", "lr": args.lr, "device": "cpu", "threads": args.threads}}
    if args.encoder and (args.encoder / "modules.json").is_file():
        kinds["sentence_embedding"] = {
            "kind": "sentence_embedding",
            "model": str(args.encoder.resolve()),
            "device": "cpu",
            "threads": args.threads,
        }
    else:
        why = (
            f"{args.encoder} is not a sentence-transformers directory (no modules.json)"
            if args.encoder
            else "no --encoder given, and no model can be downloaded here"
        )
        print(f"classifier sentence_embedding (MiniLM): skipped: {why}")
    t_start = time.perf_counter()
    train = labelled(trec / "train.tsv", "trec6")
    test = labelled(trec / "test.tsv", "trec6_test")
    ten = labelled(trec / "train_10shot.tsv", "trec6_10shot")
    labels = sorted(set(train["label"].to_pylist()))
    print(
        f"TREC-6: train {train.num_rows:,} distinct questions, test {test.num_rows}, 10-shot {ten.num_rows}; "
        f"labels {', '.join(labels)}"
    )
    print(
        f"K = {args.amplification}, m = {args.m}, EDA α = 0.1, SEAS α = 0.5; PT {args.pretrain_epochs} epochs, "
        f"then {args.epochs} epochs (online: a round every {args.every_epochs}, "
        f"{math.ceil(args.epochs / args.every_epochs)} rounds); batch {args.batch_size}; builtin lr {args.lr:g}; "
        f"seeds {seeds[0]}..{seeds[-1]}; arms {', '.join(arms)}",
        flush=True,
    )

    results: dict = {}
    with workdir("epida-effect") as root:
        bench = Bench(args, root, test, labels)
        for kind, clf in kinds.items():
            for setting in settings:
                for seed in seeds:
                    rows = stratified(train, args.rows, seed) if setting == "1pct" else ten
                    t0 = time.perf_counter()
                    results[kind, setting, seed] = got = bench.arms(kind, clf, setting, rows, seed, arms)
                    print(
                        f"{kind} {setting} seed {seed} ({rows.num_rows} rows, {time.perf_counter() - t0:.0f} s): "
                        + ", ".join(f"{a} {100 * got[a]['macro_f1']:.1f}" for a in arms),
                        flush=True,
                    )
    report(results, list(kinds), settings, arms, seeds)
    print(f"\ntotal wall time: {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
