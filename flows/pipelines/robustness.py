"""The robustness pipeline (issue 30): OpusTrainer's modifiers materialised with lineage, one line per step:

ingest the bitext
  → align (only when a modifier needs links: ``Tags``): fast_align both ways over the pairs' whitespace tokens,
    grow-diag-final-and, the aligner stage of self_training (the same artifact when its settings are the same)
  → robust_bitext: each modifier of ``robustness.modifiers`` over each shard, the rows it changed or made, each with
    ``parent_uid``/``parents``, ``modifier`` and ``params``
ingest each dataset of ``robustness.mono``
  → robust_mono: the one-sided modifiers of the list (casing, typos, end punctuation) over each shard's sentences
train_nmt then mixes them with SQL, e.g. ``SELECT src, tgt FROM robust_bitext`` beside the bitext.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from conf.schema import AugdagConf
from flows.engine.driver import Run, run_stage
from flows.engine.recording import artifact_rows
from flows.engine.registry import Headline
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.ingest import ingest_dataset
from storage.artifacts import ArtifactRef
from tasks.robustness.mono import ROBUST_TEXT, mono_specs
from tasks.robustness.spec import parse_modifiers
from tasks.robustness.stage import ROBUST, needs_alignment
from tasks.self_training.em import align_rounds

EXAMPLES = 3  # rows shown per modifier in the report, beside their originals


def robust_bitext(run: Run, conf: AugdagConf) -> tuple[ArtifactRef, ArtifactRef, dict[str, Any]]:
    """Ingest the bitext, align it if a modifier needs links, apply the modifiers; returns (the bitext, the
    `robust_bitext` artifact, the run's ``robustness`` summary: pairs in, rows per modifier)."""
    r = conf.robustness
    name = conf.dataset_of_kind(r.bitext, "bitext", "robustness.bitext")
    specs = parse_modifiers(r.modifiers, "robustness.modifiers")
    rows = ingest_dataset(run, conf, name)
    side = {}
    if needs_alignment(specs):
        aligner = {"lowercase": conf.self_training.lowercase, **conf.self_training.aligner.model_dump()}
        side["alignment"] = align_rounds(functools.partial(run_stage, run), rows, **aligner)
    robust = run_stage(run, ROBUST, inputs=[rows], side=side, params={"seed": r.seed, "modifiers": r.modifiers})
    made = per_modifier(robust, [s.name for s in specs])
    summary = {"bitext": name, "pairs": artifact_rows(rows), "rows": artifact_rows(robust), "modifiers": made}
    return rows, robust, summary


def per_modifier(made: ArtifactRef, names: list[str]) -> dict[str, int]:
    """The rows each modifier of ``names`` made in the artifact ``made`` (0 for one that made none)."""
    counts = pc.value_counts(made.parts().table(["modifier"])["modifier"].combine_chunks()).to_pylist()
    found = {c["values"]: c["counts"] for c in counts}
    return {name: found.get(name, 0) for name in names}


def robust_mono(run: Run, conf: AugdagConf) -> dict[str, Any]:
    """The one-sided modifiers over each dataset of ``robustness.mono``; per dataset: sentences in, rows per modifier."""
    r = conf.robustness
    names = [s.name for s in mono_specs(r.modifiers, "robustness.modifiers")]
    summary = {}
    for i, mono in enumerate(r.mono):
        rows = ingest_dataset(run, conf, conf.dataset_of_kind(mono, "mono", f"robustness.mono.{i}"))
        made = run_stage(run, ROBUST_TEXT, inputs=[rows], params={"seed": r.seed, "modifiers": r.modifiers})
        summary[mono] = {"sentences": artifact_rows(rows), "rows": artifact_rows(made), "modifiers": per_modifier(made, names)}
    return summary


def examples(bitext: ArtifactRef, robust: ArtifactRef, k: int = EXAMPLES) -> pa.Table:
    """The first ``k`` rows of each modifier (in shard order) beside their original pairs (a merge: its first)."""
    made = robust.parts().table(["parent_uid", "modifier", "src", "tgt"])
    firsts: dict[str, list[int]] = {}
    for i, m in enumerate(made["modifier"].to_pylist()):
        if len(firsts.setdefault(m, [])) < k:
            firsts[m].append(i)
    shown = made.take([i for rows in firsts.values() for i in rows])
    original = bitext.parts().filtered(pc.field("uid").isin(shown["parent_uid"]), ["uid", "src", "tgt"])
    where = {u: i for i, u in enumerate(original["uid"].to_pylist())}
    at = [where[u] for u in shown["parent_uid"].to_pylist()]
    return pa.table(
        {
            "modifier": shown["modifier"],
            "original src": original["src"].take(at),
            "src": shown["src"],
            "original tgt": original["tgt"].take(at),
            "tgt": shown["tgt"],
        }
    )


def publish_report(run: Run, bitext: ArtifactRef, robust: ArtifactRef, summary: Mapping[str, Any]) -> dict[str, str]:
    """The run page: rows produced per modifier, and three of each beside their originals."""
    from flows.reports.plots import markdown_table
    from flows.reports.reporting import publish

    counts = pa.Table.from_pylist([{"modifier": m, "rows": n} for m, n in summary["modifiers"].items()])
    shown = examples(bitext, robust)
    mono = [
        {"dataset": name, "sentences": m["sentences"], "modifier": k, "rows": n}
        for name, m in summary.get("mono", {}).items()
        for k, n in m["modifiers"].items()
    ]
    return publish(
        run,
        stem="robustness",
        title=f"Robustness modifiers — {run.run_id}",
        markdown=f"### Robustness modifiers on {summary['bitext']}\n\n{markdown_table(counts)}\n",
        table=counts,
        sections=[
            ("Rows per modifier", counts),
            (f"Examples ({EXAMPLES} per modifier) beside their originals", shown),
            *([("Rows per modifier in the monolingual datasets", pa.Table.from_pylist(mono))] if mono else []),
        ],
    )


@pipeline_flow("robustness")
def robustness_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """OpusTrainer's modifiers over the configured bitext, as the view `robust_bitext`; returns the run summary."""
    with Run.started(conf, pipeline="robustness", profile=profile, config=config) as run:
        bitext, robust, summary = robust_bitext(run, conf)
        summary["mono"] = robust_mono(run, conf)
        reports = publish_report(run, bitext, robust, summary)
    return run.finish(extra={"robustness": summary, "reports": reports})


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """The rows made per modifier, of how many pairs."""
    r = s["robustness"]
    made = ", ".join(f"{m} {n:,}" for m, n in r["modifiers"].items()) or "no modifiers configured"
    lines = [f"robustness: {r['rows']:,} rows from {r['pairs']:,} pairs of {r['bitext']} ({made})"]
    for name, m in r.get("mono", {}).items():
        made = ", ".join(f"{k} {n:,}" for k, n in m["modifiers"].items()) or "none of the list is one-sided"
        lines.append(f"robustness: {m['rows']:,} rows from {m['sentences']:,} sentences of {name} ({made})")
    return lines


def headline(s: Mapping[str, Any]) -> Headline:
    """A ``robustness`` run in one line: the noised pairs (and monolingual sentences), of how many pairs."""
    r = s["robustness"]
    mono = sum(m["rows"] for m in r.get("mono", {}).values())
    number = f"{r['rows']:,} pairs from {r['pairs']:,} of {r['bitext']}" + (f", {mono:,} monolingual sentences" if mono else "")
    return Headline(f"{r['rows'] + mono:,} noised rows", f"{number}; {len(r['modifiers'])} modifiers")
