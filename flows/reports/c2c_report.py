"""The C2C-GenDA run page and summary: counts through the stages, Table 5's diversity of the generation
(delexicalised and relexicalised), the histogram of each generated utterance's MED to the training set
(the paper's Fig. 4) and the rows per frame."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.sections.slots import C2cConf
from flows.engine.driver import Run
from flows.engine.recording import artifact_rows
from flows.reports.reporting import publish

if TYPE_CHECKING:
    from flows.pipelines.c2c import Generated


def counts(result: Generated) -> dict[str, Any]:
    """Rows through the stages (from the manifests and the pairs table)."""
    pairs = result.pairs.parts().table(["frame", "cluster", "role"])
    frames = result.delexicalised.parts().table(["frame"])["frame"]
    reasons: dict[str, int] = {}
    for why in result.selected.parts("dropped").table(["reason"])["reason"].to_pylist():
        reasons[why] = reasons.get(why, 0) + 1
    return {
        "delexicalised": artifact_rows(result.delexicalised),
        "malformed_bio": artifact_rows(result.delexicalised, "rejects"),
        "no_slots": artifact_rows(result.delexicalised, "dropped"),
        "frames": len(set(frames.to_pylist())),
        "frames_paired": len(set(pairs["frame"].to_pylist())),
        "clusters": len(set(pairs["cluster"].to_pylist())),
        "targets": sum(r == "output" for r in pairs["role"].to_pylist()),
        "generated": sum(artifact_rows(g) for g in result.per_fold),
        "kept": artifact_rows(result.selected),
        "dropped": dict(sorted(reasons.items())),
    }


def per_frame(result: Generated) -> pa.Table:
    """One row per frame: its clusters, its target utterances and the generated rows kept, most kept first."""
    gen = result.selected.parts().table(["frame"])["frame"].to_pylist()
    pair_table = result.pairs.parts().table(["frame", "cluster", "role"]).to_pylist()
    rows: dict[str, dict[str, Any]] = {}
    for r in pair_table:
        f = rows.setdefault(r["frame"], {"frame": r["frame"], "clusters": set(), "targets": 0, "kept": 0})
        f["clusters"].add(r["cluster"])
        f["targets"] += r["role"] == "output"
    for frame in gen:
        rows.setdefault(frame, {"frame": frame, "clusters": set(), "targets": 0, "kept": 0})["kept"] += 1
    return pa.Table.from_pylist([{**r, "clusters": len(r["clusters"])} for r in sorted(rows.values(), key=lambda r: -r["kept"])])


def publish_report(run: Run, result: Generated, conf: C2cConf) -> tuple[dict[str, Any], dict[str, str]]:
    """The run page (setting, counts, Table 5's diversity, the Fig. 4 histogram, rows per frame) and
    its artifacts; returns the run's ``c2c`` summary and the paths written."""
    from flows.reports.plots import bar_figure, markdown_table
    from tasks.c2c.diversity import med_histogram

    diversity = result.diversity.read(0)
    raw = [g.parts().table(["med_train", "fill"]) for g in result.per_fold]
    meds = np.concatenate([t.filter(pc.equal(t["fill"], 0))["med_train"].to_numpy() for t in raw] or [np.zeros(0)])
    hist = med_histogram(meds)
    png = bar_figure(
        [label for label, _ in hist],
        [share for _, share in hist],
        xlabel="MED to the training set (delexicalised)",
        ylabel="share of generated utterances",
        title=f"C2C-GenDA: novelty of {len(meds):,} generated utterances (cf. Fig. 4)",
    )
    n = counts(result)
    frames = per_frame(result)
    setting = (
        f"c = {conf.cluster_size}, M′ = {conf.max_outputs}, stop at DS < {conf.min_distance}, "
        f"{conf.folds} folds, {conf.n_outputs} generated per cluster, λ = {conf.model.lam}, "
        f"γ = {conf.model.gamma}, {'from ' + conf.model.init if conf.model.init else 'from scratch'}"
    )
    table = pa.Table.from_pylist([{k: v for k, v in n.items() if k != "dropped"}])
    md = (
        f"### C2C-GenDA on {result.dataset}\n\n{setting}.\n\n{markdown_table(table)}\n\n"
        f"Diversity (Table 5):\n\n{markdown_table(diversity)}\n"
    )
    reports = publish(
        run,
        stem="c2c",
        title=f"C2C-GenDA — {run.run_id}",
        markdown=md,
        table=diversity,
        pngs={"c2c_med": png},
        sections=[
            ("Setting", setting),
            ("Rows through the stages", table),
            (
                "Dropped at selection",
                pa.Table.from_pylist([{"reason": k, "rows": v} for k, v in n["dropped"].items()]) if n["dropped"] else "none",
            ),
            ("Diversity of the generation (Table 5)", diversity),
            ("MED to the training set (Fig. 4)", png),
            ("Per frame", frames),
        ],
    )
    summary = {
        "dataset": result.dataset,
        **n,
        "diversity": diversity.to_pylist(),
        "models": [m.fingerprint for m in result.models],
    }
    return summary, reports
