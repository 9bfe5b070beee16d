"""The EPiDA run page: per method, s_div against s_qua with the selected candidates marked (the idea of the
paper's Table 2 as a picture); Distinct-n of the selected vs all candidates; the counts per round and
method; the feedback classifier's scores on the held-out set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from conf.sections.classifier import EpidaConf
from flows.engine.driver import Run
from flows.reports.reporting import publish

if TYPE_CHECKING:
    from flows.pipelines.epida import Augmented


def distinct_n_table(table: pa.Table, *, ns: Sequence[int] = (1, 2, 3)) -> pa.Table:
    """Distinct-n (Li et al. 2016) per method of all candidates and of the selected ones."""
    from models.candidates import distinct_n

    rows = []
    methods = table["method"].to_pylist()
    texts, selected = table["text"].to_pylist(), table["selected"].to_pylist()
    for method in sorted(set(methods)):
        every = [t for t, m in zip(texts, methods) if m == method]
        kept = [t for t, m, s in zip(texts, methods, selected) if m == method and s]
        for which, group in (("all", every), ("selected", kept)):
            rows.append(
                {
                    "method": method,
                    "candidates": which,
                    "rows": len(group),
                    **{f"distinct_{n}": round(distinct_n(group, n), 4) for n in ns},
                }
            )
    return pa.Table.from_pylist(rows)


def publish_report(run: Run, result: Augmented, conf: EpidaConf, per_method: list[dict[str, Any]]) -> dict[str, str]:
    """The run page (s_div against s_qua per method in the last round, Distinct-n, counts per round and
    method, the held-out scores) and its artifacts; returns the paths written."""
    from flows.reports.plots import markdown_table, scatter_figure

    table = result.augmented.parts().table(["method", "round", "text", "s_div", "s_qua", "selected"])
    last = max(table["round"].to_pylist(), default=0)
    panels = {}
    for method in sorted(set(table["method"].to_pylist())):
        rows = [r for r in table.to_pylist() if r["method"] == method and r["round"] == last]
        panels[method] = ([r["s_div"] for r in rows], [r["s_qua"] for r in rows], [r["selected"] for r in rows])
    png = scatter_figure(
        panels,
        xlabel="s_div (REM, Eq. 7)",
        ylabel="s_qua (CEM, Eq. 10)",
        title=f"EPiDA round {last}: candidates per method, selected in red (mode {conf.mode})",
    )
    diversity = distinct_n_table(table)
    counts = pa.Table.from_pylist(per_method) if per_method else pa.table({"round": pa.array([], pa.int32())})
    evaluation = pa.Table.from_pylist(result.evaluation) if result.evaluation else None
    setting = (
        f"K = {conf.amplification}, m = {conf.m}, α = {conf.alpha}, mode `{conf.mode}`, "
        f"{'online every ' + str(conf.every_epochs) + ' epochs' if conf.online else 'one-time'}, "
        f"pre-training {conf.pretrain_epochs} epoch(s), sources {', '.join(conf.sources)}"
    )
    md = f"### EPiDA on {result.dataset}\n\n{setting}.\n\n{markdown_table(counts)}\n\n{markdown_table(diversity)}\n" + (
        f"\n{markdown_table(evaluation)}\n" if evaluation is not None else ""
    )
    sections: list[tuple[str, Any]] = [
        ("Setting", setting),
        ("s_div and s_qua per method", png),
        ("Candidates per round and method", counts),
        ("Distinct-n: all candidates vs the selected", diversity),
    ]
    if evaluation is not None:
        sections.append((f"The feedback classifier on {result.testset}", evaluation))
    return publish(
        run,
        stem="epida",
        title=f"EPiDA — {run.run_id}",
        markdown=md,
        table=diversity,
        pngs={"epida_scores": png},
        sections=sections,
    )
