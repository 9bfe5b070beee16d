"""The consumer of C2C-GenDA's data: a slot tagger per arm and seed, span F1 on a held-out set.

arm original: the training rows (valid BIO) · arm original+c2c: plus `c2c_generated` of that dataset
  → a tagger per arm and seed (Bi-LSTM from scratch, + CRF as an option, or a Hugging Face token
    classifier), the epoch with the best dev F1 kept when `dev` is set
  → tag_slots on the test set (`slot_predictions`, every arm and seed) → score_tags: F1, precision and
    recall (seqeval, conlleval) in `evaluations` (metric f1, arm, seed), mean ± sd in `evaluation_summary`
report: mean ± sd per arm, F1 bars, per seed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from conf.errors import ConfError
from conf.schema import AugdagConf
from flows.engine.at_once import at_once
from flows.engine.driver import ModelRef, Run, run_model_stage, run_stage
from flows.engine.registry import Effect, Headline
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.heldout import check_heldout_overlap
from flows.pipelines.ingest import ingest_dataset
from flows.reports.reporting import publish
from tasks.common.evaluation import mean_sd
from tasks.common.mix import content_hash
from tasks.train_slot_tagger.tagging import SCORE_TAGS, TAG_SLOTS, pairs_of, tagger_trainer, valid_bio

TAGGER_VERSION = "2"  # 2: dropout seeded per step under models.runtime.seeded (issue 25)


def c2c_rows(run: Run, dataset: str) -> pa.Table:
    """The ``c2c_generated`` rows of ``dataset`` (``uid``, ``tokens``, ``tags``); a ``ConfError`` when there are
    none (the c2c pipeline has not run on it)."""
    table = run.catalog.query("SELECT uid, tokens, tags FROM c2c_generated WHERE source = $d ORDER BY uid", {"d": dataset})
    if table.num_rows == 0:
        raise ConfError(
            f"train_slot_tagger.arms: 'original+c2c' needs the `c2c_generated` rows of {dataset!r}, and "
            "there are none. Hint: run the c2c pipeline on it first (list `c2c` before `train_slot_tagger` "
            "in `pipelines`)"
        )
    return table


def train_arm(run: Run, conf: AugdagConf, arm: str, seed: int, train: pa.Table, dev: pa.Table | None) -> ModelRef:
    """The slot tagger of one arm and seed, trained on ``train`` (with ``dev`` to pick the best epoch when set)."""
    t = conf.train_slot_tagger.tagger
    settings = {**t.model_dump(exclude={"device", "threads", "lr"}), **({"lr": t.lr} if t.lr else {}), "seed": seed}
    build = tagger_trainer(
        pairs_of(train),
        pairs_of(dev) if dev is not None else None,
        settings=settings,
        device=t.device,
        threads=t.threads,
        fork=conf.train_slot_tagger.parallel > 1,  # trained beside another tagger: in a process of its own
    )
    data = {"arm": arm, "train": content_hash(train, ("uid",)), "dev": content_hash(dev, ("uid",)) if dev is not None else None}
    return run_model_stage(
        run,
        name="slot_tagger",
        version=TAGGER_VERSION,
        kind=f"tagger:{t.kind}",
        filename="model",
        inputs=[],
        build=build,
        params={**settings, **data},
    )


@dataclasses.dataclass(frozen=True)
class Tagged:
    dataset: str
    testset: str
    evaluation: list[dict[str, Any]]
    malformed: list[str]
    rows: dict[str, int]


def train_and_evaluate(run: Run, conf: AugdagConf) -> Tagged:
    """Ingest the datasets, train a tagger per arm and seed, tag the test set and score every tagger (recorded
    in ``evaluations``); returns the scores, the malformed training rows and the rows per arm."""
    train_slot_tagger = conf.train_slot_tagger
    train_name, dev_name, test_name = conf.slot_tagger_datasets()

    def ingest(name: str, *, held_out: bool = False) -> Any:  # held out (dev, test): no row deduplicated or filtered
        return ingest_dataset(run, conf, name, held_out=held_out)

    original, malformed = valid_bio(ingest(train_name).parts().table(["uid", "tokens", "tags", "source", "line"]))
    dev = (
        valid_bio(ingest(dev_name, held_out=True).parts().table(["uid", "tokens", "tags", "source", "line"]))[0]
        if dev_name
        else None
    )
    test = ingest(test_name, held_out=True)
    arms = {"original": original.select(["uid", "tokens", "tags"])}
    if "original+c2c" in train_slot_tagger.arms:
        arms["original+c2c"] = pa.concat_tables([arms["original"], c2c_rows(run, train_name)])
    for arm in train_slot_tagger.arms:  # no tagger learns a held-out utterance (flows/pipelines/heldout.py)
        check_heldout_overlap(run, conf, f"train_slot_tagger.arms.{arm}", arms[arm], ("tokens",), exact=True)
    jobs = {
        (arm, seed): functools.partial(train_arm, run, conf, arm, seed, arms[arm], dev)
        for arm in train_slot_tagger.arms
        for seed in train_slot_tagger.seeds
    }
    taggers = [(arm, seed, model) for (arm, seed), model in at_once(jobs, train_slot_tagger.parallel).items()]
    t = train_slot_tagger.tagger
    predictions = run_stage(
        run,
        TAG_SLOTS,
        inputs=[test],
        models=[m.fingerprint for _, _, m in taggers],
        params={"taggers": [{"arm": a, "seed": s, "model": m.fingerprint} for a, s, m in taggers], "batch_size": t.batch_size},
        resources={"paths": {m.fingerprint: m.location for _, _, m in taggers}, "device": t.device, "threads": t.threads},
    )
    scores = run_stage(run, SCORE_TAGS, inputs=[predictions], params={}, n_shards=1).read(0).to_pylist()
    for arm, seed, model in taggers:
        mine = [s for s in scores if s["model"] == model.fingerprint and s["arm"] == arm and s["seed"] == seed]
        run.catalog.register_evaluation(
            run_id=run.run_id,
            model=model.fingerprint,
            model_name="slot_tagger",
            testset=test_name,
            scores=mine,
            arm=arm,
            seed=seed,
            meta={"dataset": train_name, "kind": t.kind, "crf": t.crf, "dev": dev_name},
        )
    return Tagged(train_name, test_name, scores, malformed, {a: rows.num_rows for a, rows in arms.items()})


def publish_report(run: Run, result: Tagged, summary: list[dict[str, Any]]) -> dict[str, str]:
    """The run page (mean ± sd and F1 per arm, scores per seed, training rows per arm) and its artifacts;
    returns the paths written."""
    from flows.reports.plots import bar_figure, markdown_table

    table = pa.Table.from_pylist(summary)
    f1 = [s for s in summary if s["metric"] == "f1"]
    bars = bar_figure(
        [s["arm"] for s in f1],
        [s["mean"] for s in f1],
        xlabel="arm",
        ylabel="span F1 (conlleval), mean over seeds",
        title=f"slot tagger F1 on {result.testset} per arm",
    )
    per_seed = pa.Table.from_pylist([{k: v for k, v in s.items() if k != "signature"} for s in result.evaluation])
    md = f"### Slot tagger per arm on {result.testset}\n\n{markdown_table(table)}\n"
    return publish(
        run,
        stem="train_slot_tagger",
        title=f"slot tagger per arm — {run.run_id}",
        markdown=md,
        table=table,
        pngs={"slot_f1": bars},
        sections=[
            ("Mean ± sd per arm", table),
            ("F1 per arm", bars),
            ("Per seed", per_seed),
            ("Training rows per arm", pa.Table.from_pylist([{"arm": a, "rows": n} for a, n in result.rows.items()])),
        ],
    )


@pipeline_flow("train_slot_tagger")
def train_slot_tagger_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train and evaluate a slot tagger per arm and seed; returns the run summary (also in the catalog)."""
    with Run.started(conf, pipeline="train_slot_tagger", profile=profile, config=config) as run:
        result = train_and_evaluate(run, conf)
        summary = mean_sd(result.evaluation, by="arm")
        reports = publish_report(run, result, summary)
    return run.finish(
        extra={
            "train_slot_tagger": {
                "dataset": result.dataset,
                "testset": result.testset,
                "arms": result.rows,
                "summary": summary,
                "evaluation": result.evaluation,
                "malformed": {"count": len(result.malformed), "rows": result.malformed[:5]},
            },
            "reports": reports,
        }
    )


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """Summary lines of a ``train_slot_tagger`` run (wording: flows.reports.verdicts): per arm its rows and F1's
    mean ± sd over the seeds (``n/a (1 seed)`` for one); with the arm ``original`` among them, each other arm's Δ F1
    against it, tested across seeds from 3 seeds on (a paired t-test over the per-seed F1, seed against seed),
    untested below."""
    from flows.reports.verdicts import seeds_phrase, spread, versus

    t, lines = s["train_slot_tagger"], []
    f1 = {(e["arm"], e["seed"]): e["score"] for e in t["evaluation"] if e["metric"] == "f1"}
    for e in (e for e in t["summary"] if e["metric"] == "f1"):
        scope = ", ".join(x for x in (e["arm"], f"{t['arms'][e['arm']]:,} rows", seeds_phrase(e["seeds"])) if x)
        line = f"f1 = {spread(e['mean'], e['sd'], e['seeds'], digits=4)} on {t['testset']} ({scope})"
        if e["arm"] != "original" and "original" in t["arms"]:
            seeds = [seed for arm, seed in f1 if arm == "original"]
            line += f"; {versus([f1[(e['arm'], x)] for x in seeds], [f1[('original', x)] for x in seeds], against='original')}"
        lines.append(line)
    return lines


def headline(s: Mapping[str, Any]) -> Headline:
    """A ``train_slot_tagger`` run in one line: the taggers trained, and the F1 of ``original`` (or the first arm)."""
    from flows.reports.effect_table import counted

    t = s["train_slot_tagger"]
    arm = "original" if "original" in t["arms"] else next(iter(t["arms"]))
    f1 = next(e["mean"] for e in t["summary"] if (e["arm"], e["metric"]) == (arm, "f1"))
    taggers = len({(e["arm"], e["seed"]) for e in t["evaluation"]})
    return Headline(counted(taggers, "tagger"), f"F1 {f1:.4f} ({arm})")


def effects(s: Mapping[str, Any]) -> list[Effect]:
    """Each arm against ``original``: Δ F1 over the seeds, tested across seeds from 3 on (untested below); the arm
    ``original+c2c`` adds the rows of `c2c_generated`."""
    from flows.reports.effect_table import seeds_caveat
    from flows.reports.verdicts import MIN_SEEDS, seeds_p_text, seeds_test

    t, out = s["train_slot_tagger"], []
    if "original" not in t["arms"]:
        return out
    f1 = {(e["arm"], e["seed"]): e["score"] for e in t["evaluation"] if e["metric"] == "f1"}
    seeds = sorted(seed for arm, seed in f1 if arm == "original")
    base = [f1[("original", x)] for x in seeds]
    for arm in (a for a in t["arms"] if a != "original"):
        mine, n = [f1[(arm, x)] for x in seeds], len(seeds)
        effect = f"{(sum(mine) - sum(base)) / n:+.4f} F1"
        effect += f" (p = {seeds_p_text(seeds_test(mine, base))})" if n >= MIN_SEEDS else " (untested)"
        reads = frozenset({"c2c_generated"}) if arm == "original+c2c" else frozenset()
        out.append(Effect(f"train_slot_tagger {arm} vs original", reads, effect, seeds_caveat(n), n))
    return out
