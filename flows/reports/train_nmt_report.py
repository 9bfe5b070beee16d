"""train_nmt's comparison of arms: mean ± sd over the seeds, Δ vs the baseline, sacrebleu's paired p (test
sentences resampled) and, with ≥ 3 seeds per arm, a paired t-test over the seeds' corpus scores, per test set and
metric (``arm_summary``, the run summary's `summary`), and its page (``publish_report``): per test set a table and
a bar chart (mean ± sd per arm, annotated with Δ and the p that decided), and the run summary's lines on the
terminal (``summary_lines``, the registry's). The wording is flows.reports.verdicts'."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from flows.engine.driver import Run
from flows.reports.plots import memoised
from flows.reports.reporting import publish
from flows.reports.verdicts import (
    MIN_SEEDS,
    axis_label,
    below_floor,
    over_seeds,
    p_value_text,
    seeds_p_text,
    seeds_test,
    seeds_verdict,
    spread,
)
from tasks.common.evaluation import mean_sd
from tasks.train_nmt.significance import METRICS


def arm_summary(
    evaluation: Sequence[Mapping[str, Any]],
    significance: Sequence[Mapping[str, Any]],
    baseline: str,
    arms: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Per test set, metric and arm (in order): seeds, mean, sample sd (``tasks.common.evaluation.mean_sd``), Δ = mean −
    the baseline's mean, the paired tests of the seeds' concatenated outputs (p null for the baseline) and
    ``p_seeds``, ``flows.reports.verdicts.seeds_test`` over the per-seed corpus scores, seed i of the arm paired
    with seed i of the baseline in the order ``arms`` lists them (null for the baseline and under 3 seeds)."""
    paired = {(s["testset"], s["arm"], s["metric"]): s for s in significance}
    out = []
    for test in dict.fromkeys(e["testset"] for e in evaluation):
        mine = [e for e in evaluation if e["testset"] == test]
        stats = {(r["arm"], r["metric"]): r for r in mean_sd(mine, by="arm")}
        per_seed = {(e["arm"], e["metric"], e["seed"]): e["score"] for e in mine}
        for metric in METRICS:
            base = [per_seed[(baseline, metric, s)] for s in arms[baseline]["seeds"]]
            for arm in arms:
                r, p = stats[(arm, metric)], paired.get((test, arm, metric), {})
                scores = [per_seed[(arm, metric, s)] for s in arms[arm]["seeds"]]
                out.append(
                    {
                        "testset": test,
                        "arm": arm,
                        "label": arms[arm]["label"],
                        "metric": metric,
                        "seeds": r["seeds"],
                        "mean": r["mean"],
                        "sd": r["sd"],
                        "delta": r["mean"] - stats[(baseline, metric)]["mean"],
                        "p_value": p.get("p_value"),
                        "p_ar": p.get("p_ar"),
                        "ci_low": p.get("ci_low"),
                        "ci_high": p.get("ci_high"),
                        "p_seeds": None if arm == baseline or len(scores) != len(base) else seeds_test(scores, base),
                    }
                )
    return out


def p_text(p: float | None) -> str:
    """A p-value to two significant digits, ``–`` when there is none (the baseline)."""
    return "–" if p is None else f"{p:.2g}"


def decided_by(row: Mapping[str, Any]) -> str:
    """The test a row's verdict rests on: the t-test over seeds from 3 seeds on, else the sentence bootstrap."""
    if row["p_value"] is None:
        return "baseline"
    if row["seeds"] >= MIN_SEEDS:
        return f"paired t-test over {row['seeds']} seeds"
    return "paired bootstrap over test sentences (training variance not measured)"


def seeds_p_cell(row: Mapping[str, Any]) -> str:
    """A row's p over seeds: ``–`` for the baseline, ``n/a (< 3 seeds)`` under 3 seeds."""
    if row["p_value"] is None:
        return "–"
    return seeds_p_text(row.get("p_seeds")) if row["seeds"] >= MIN_SEEDS else f"n/a (< {MIN_SEEDS} seeds)"


def comparison_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """One row per arm of one test set: each metric's mean ± sd over seeds (``n/a (1 seed)`` for one), Δ, p of the
    t-test over seeds (from 3 seeds), p resampling test sentences (bootstrap, AR) and its 95 % CI, the test that
    decided, and, for a baseline under a floor (BLEU 5, chrF 20), that the comparisons are not informative."""
    out: dict[str, dict[str, Any]] = {}
    base = {r["metric"]: r["mean"] for r in rows if r["p_value"] is None}
    for r in rows:
        row = out.setdefault(r["arm"], {"arm": r["label"], "seeds": r["seeds"]})
        m = r["metric"]
        row[f"{m} mean ± sd over seeds"] = spread(r["mean"], r["sd"], r["seeds"])
        row[f"Δ {m}"] = "baseline" if r["p_value"] is None else f"{r['delta']:+.2f}"
        row[f"p {m} (t-test over seeds)"] = seeds_p_cell(r)
        row[f"p {m} (test sentences, bootstrap)"] = p_text(r["p_value"])
        row[f"p {m} (test sentences, AR)"] = p_text(r["p_ar"])
        row[f"{m} 95 % CI (test sentences)"] = "" if r["ci_low"] is None else f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
    for r in rows:  # last, once per arm: what decided and whether the comparison informs
        out[r["arm"]]["decided by"] = decided_by(r)
        out[r["arm"]]["note"] = "" if r["p_value"] is None else below_floor(base) or ""
    return pa.Table.from_pylist(list(out.values()))


def decisive_p(row: Mapping[str, Any]) -> str:
    """A bar's p and what it resampled: ``p = 0.04 (seeds)`` from 3 seeds on, else ``p = 0.03 (sentences)``."""
    if row["seeds"] >= MIN_SEEDS:
        return f"p = {seeds_p_text(row.get('p_seeds'))} (seeds)"
    return f"p = {p_text(row['p_value'])} (sentences)"


@memoised
def arm_bars(rows: Sequence[Mapping[str, Any]], *, title: str) -> bytes:
    """One panel per metric: a bar per arm at its mean with the sd over seeds (none for one seed), labelled Δ, the p
    that decided (over seeds from 3 seeds on, else over test sentences) and, against a baseline under the metric's
    floor, "not informative" (PNG bytes)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(4.8 * len(METRICS), 4.4), dpi=110, squeeze=False)
    for ax, metric in zip(axes[0], METRICS):
        mine = [r for r in rows if r["metric"] == metric]
        x = list(range(len(mine)))
        base = next((r["mean"] for r in mine if r["p_value"] is None), None)
        weak = "\nnot informative" if base is not None and below_floor({metric: base}) else ""
        ax.bar(
            x,
            [r["mean"] for r in mine],
            yerr=[r["sd"] if r["seeds"] > 1 else float("nan") for r in mine],  # nan: no bar at all for one seed
            capsize=4,
            linewidth=0.4,
            color=["#c9c9c9" if r["p_value"] is None else "#8fb3d9" for r in mine],
            edgecolor="#4a7bb0",
        )
        for i, r in enumerate(mine):
            note = "baseline" if r["p_value"] is None else f"{r['delta']:+.2f}\n{decisive_p(r)}" + weak
            ax.annotate(
                note, (i, r["mean"] + r["sd"]), ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points"
            )
        ax.set_xticks(x, [r["label"] for r in mine], rotation=15, ha="right", fontsize=8)
        ax.set_ylabel(axis_label(metric, [r["seeds"] for r in mine]))
        ax.margins(y=0.15)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def publish_report(run: Run, result: Mapping[str, Any]) -> dict[str, str]:
    """The run page (per test set the arms' comparison table and bars, the training data per arm, the scores
    per seed) and its artifacts; returns the paths written."""
    from flows.reports.plots import markdown_table

    sections: list[tuple[str, Any]] = []
    pngs, md = {}, [f"### Students per arm (baseline {result['baseline']})\n"]
    for test in result["tests"]:
        rows = [r for r in result["summary"] if r["testset"] == test]
        table = comparison_table(rows)
        pngs[f"arms_{test}"] = arm_bars(rows, title=f"students per arm on {test} (Δ and p vs the baseline {result['baseline']})")
        sections += [
            (f"{test}: mean ± sd over seeds per arm, Δ vs the baseline, paired p and what it resampled", table),
            (f"{test}: per arm", pngs[f"arms_{test}"]),
        ]
        md.append(f"\n{test}:\n\n{markdown_table(table)}\n")
    data = [
        {
            "arm": a,
            "label": v["label"],
            "seeds": ", ".join(map(str, v["seeds"])),
            "rows (with copies)": ", ".join(f"{k} {n:,}" for k, n in v["mix_rows"].items()),
            "continued on": ", ".join(f"{k} {n:,}" for k, n in v["continue_rows"].items()) or "–",
            "continued lr": v["continue_on"]["lr"] if v["continue_on"] else None,
        }
        for a, v in result["arms"].items()
    ]
    sections += [
        ("Training data per arm", pa.Table.from_pylist(data)),
        ("Per seed", pa.Table.from_pylist([{k: v for k, v in e.items() if k != "model"} for e in result["evaluation"]])),
    ]
    return publish(
        run,
        stem="train_nmt",
        title=f"students per arm — {run.run_id}",
        markdown="".join(md),
        table=pa.Table.from_pylist(result["summary"]),
        pngs=pngs,
        sections=sections,
    )


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Per test set one line per arm (wording: flows.reports.verdicts): the baseline's mean ± sd over seeds (``n/a
    (1 seed)`` for one) and signature; each other arm's Δ and p, the p of the test that decided (from 3 seeds a
    paired t-test over the seeds' corpus scores, the sentence bootstrap's p beside it; under 3 seeds the bootstrap's,
    with what it resamples), its scores, and, when the baseline is under BLEU 5 or chrF 20, "not informative"."""
    train_nmt, lines = s["train_nmt"], []
    for test in train_nmt["tests"]:
        rows = {(r["arm"], r["metric"]): r for r in train_nmt["summary"] if r["testset"] == test}
        sig = next(e["signature"] for e in train_nmt["evaluation"] if e["testset"] == test and e["metric"] == "BLEU")
        base = {m: rows[(train_nmt["baseline"], m)]["mean"] for m in ("BLEU", "chrF")}
        for arm, a in train_nmt["arms"].items():
            b, c, n = rows[(arm, "BLEU")], rows[(arm, "chrF")], len(a["seeds"])
            lines.append(
                f"{a['label']} (baseline): {arm_scores(b, c, n, test)}  {sig}"
                if arm == train_nmt["baseline"]
                else f"{a['label']}: {arm_verdict(b, c, n)}; {arm_scores(b, c, n, test)}; {decided(b, c, n, base)}"
            )
    return lines


def arm_scores(bleu: Mapping[str, Any], chrf: Mapping[str, Any], seeds: int, test: str) -> str:
    """``BLEU = 31.00 ± 1.41, chrF = 51.00 ± 1.41 on t (mean ± sd over 2 seeds)``; one seed: ``BLEU = 0.51 ± n/a
    (1 seed), …``."""
    return (
        f"BLEU = {spread(bleu['mean'], bleu['sd'], seeds)}, chrF = {spread(chrf['mean'], chrf['sd'], seeds)} on {test}"
        f"{over_seeds(seeds)}"
    )


def arm_verdict(bleu: Mapping[str, Any], chrf: Mapping[str, Any], seeds: int) -> str:
    """``+0.6 BLEU (p = 0.03), +0.0 chrF (p = 0.5)``: each Δ with the p of the test that decides (from 3 seeds the
    t-test over seeds, ``p_seeds``; else the paired bootstrap over test sentences, ``p_value``)."""

    def p(r: Mapping[str, Any]) -> str:
        return seeds_p_text(r.get("p_seeds")) if seeds >= MIN_SEEDS else p_value_text(r["p_value"])

    return f"{bleu['delta']:+.1f} BLEU (p = {p(bleu)}), {chrf['delta']:+.1f} chrF (p = {p(chrf)})"


def decided(bleu: Mapping[str, Any], chrf: Mapping[str, Any], seeds: int, baseline: Mapping[str, float]) -> str:
    """Which test decided and what it resampled (``flows.reports.verdicts.seeds_verdict``), and "not informative"
    when the ``baseline``'s mean BLEU or chrF is under its floor."""
    sentences = {"BLEU": bleu["p_value"], "chrF": chrf["p_value"]} if seeds >= MIN_SEEDS else {}
    floor = below_floor(baseline)
    return seeds_verdict(seeds, p_sentences=sentences) + (f"; {floor}" if floor else "")
